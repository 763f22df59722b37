import os

import pytest


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
