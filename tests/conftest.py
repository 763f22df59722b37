import os
import tempfile

import pytest

# JAX's persistent compilation cache, shared by every process of a test run (the pytest workers and the scripts they
# start, which inherit the environment): the JAX script's tests start many processes that compile the same XLA
# programs (its tiny registry run: about 21 s with a cold cache, 12 s with a warm one, on 2 cores). Every program is
# cached, however quick to compile; a size limit turns on JAX's file lock, so two processes never read an entry
# that one of them is still writing. Each run compiles whatever the cache does not hold yet.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), f"cleanrl-tests-jax-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(1 << 30))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Two or more test processes when pytest-xdist is installed and no -n was given: most tests wait on one
    single-threaded script subprocess, so on 2 cores two processes take the default run from 27 to 12 minutes.
    Without xdist (not installed, or -p no:xdist) the tests run in one process; -n 0 asks for that too."""
    if config.pluginmanager.hasplugin("xdist") and config.option.numprocesses is None and not os.environ.get(
        "PYTEST_XDIST_WORKER"
    ):
        config.option.numprocesses = min(8, max(2, os.cpu_count() or 2))
        # work stealing: a worker that runs out takes tests queued on the other, so one long test (a compile
        # parity, a torchrun job) at the end of a queue does not leave the other process idle
        if config.option.dist == "no":
            config.option.dist = "worksteal"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A clean working directory for one run: scripts write runs/ and videos/ relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_collection_modifyitems(config, items):
    # CI sets CLEANRL_REQUIRE_ALL=1: a test skipped for a missing optional dependency then fails instead,
    # so a broken install step cannot hide behind a skip.
    if os.environ.get("CLEANRL_REQUIRE_ALL") == "1":
        config.option.require_all = True


def pytest_addoption(parser):
    parser.addoption("--require-all", action="store_true", default=False, help="fail instead of skipping for missing optional dependencies")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.config.getoption("require_all") and "optional dependency" in str(report.longrepr):
        report.outcome = "failed"
