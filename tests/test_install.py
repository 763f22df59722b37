"""requirements/install.py, the README's set-up: the torch build it picks for the machine, and that CI runs the
README's test command as written."""

import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from requirements import install

ROOT = Path(__file__).resolve().parent.parent
REQ = "torch>=2.4"


def test_releases_compare_by_number_and_requirements_by_clause():
    assert install.release("2.13.0+cpu") == (2, 13, 0) and install.release("2.10.0rc1") == (2, 10, 0)
    assert install.satisfies("2.13.0+cpu", "torch>=2.4")
    assert not install.satisfies("2.3.1+cpu", "torch>=2.4")
    assert install.satisfies("2.10.0", "torch>=2.4")  # 10 > 4 as numbers, not as strings
    assert not install.satisfies("2.6.0", "torch>=2.4,<2.6") and install.satisfies("2.5.1", "torch>=2.4,<2.6")
    assert install.satisfies("2.4", "torch>=2.4.0") and not install.satisfies("2.4.0", "torch!=2.4")


def test_the_project_reads_the_same_without_tomllib(monkeypatch):
    """Python 3.10 has no tomllib: the installer then reads pyproject.toml by pattern, to the same answer."""
    with_tomllib = install.project_metadata()
    assert with_tomllib[0] == REQ and "atari" in with_tomllib[1]
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` now raises ImportError
    assert install.project_metadata() == with_tomllib


def plan(**kw):
    defaults = dict(torch_installed=None, platform="linux", gpu=False, cpu_index=False, cpu_builds=[])
    return install.torch_step(REQ, **defaults | kw)


def test_the_torch_build_follows_the_machine():
    # a torch already there is never replaced, CPU or CUDA build
    step, why = plan(torch_installed="2.13.0+cpu", cpu_index=True)
    assert step is None and "keeping it" in why
    # with an NVIDIA GPU, and off Linux, pip's default build is the right one
    assert plan(gpu=True, cpu_index=True)[0] is None
    assert plan(platform="darwin", cpu_index=True)[0] is None
    # Linux without a GPU: PyTorch's CPU index when it answers
    step, why = plan(cpu_index=True)
    assert step == ["install", "torch>=2.4", "--index-url", "https://download.pytorch.org/whl/cpu"], step
    # else the newest +cpu release pip's sources hold that meets the requirement
    step, why = plan(cpu_builds=["2.13.0+cpu", "2.3.1+cpu"])
    assert step == ["install", "torch==2.13.0+cpu"] and "did not answer" in why
    step, _ = plan(cpu_builds=["2.3.1+cpu"])  # too old for torch>=2.4: nothing to pin, so a warning
    assert step is None
    step, why = plan()
    assert step is None and why.startswith("warning:") and "3 GB" in why


def run_installer(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(ROOT / "requirements" / "install.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_an_unknown_extra_is_one_error_line_and_installs_nothing():
    out = run_installer(sys.executable, "--dry-run", "atari,bogus")
    assert out.returncode == 2 and out.stdout == ""
    extras = install.project_metadata()[1]
    assert "atari" in extras and "all" in extras and "bogus" not in extras
    assert out.stderr == f"error: unknown extra bogus; pyproject.toml has {', '.join(extras)}\n"


def test_with_torch_installed_it_only_installs_the_project():
    out = run_installer(sys.executable, "--dry-run", "atari", "dev")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert re.fullmatch(r"torch \S+ is installed here; keeping it", lines[0]), lines
    assert lines[1:] == [f"+ {sys.executable} -m pip install -e {ROOT}[atari,dev]"]


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU build is chosen on Linux only")
def test_a_fresh_environment_without_a_gpu_gets_a_cpu_build_when_one_is_reachable(tmp_path):
    """In a new virtual environment (no torch), on this GPU-less machine, the plan matches what pip can reach."""
    if install.has_nvidia_gpu():
        pytest.skip("this machine has an NVIDIA GPU: pip's default build is the plan")
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    out = run_installer(python, "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    if install.index_answers(install.CPU_INDEX):
        assert lines[1] == f"+ {python} -m pip install torch>=2.4 --index-url {install.CPU_INDEX}", lines
    else:
        reachable = [v for v in install.cpu_builds_pip_sees([]) if install.satisfies(v, REQ)]
        if reachable:  # e.g. a wheel folder or mirror in pip's configuration
            assert lines[1] == f"+ {python} -m pip install torch=={reachable[0]}", lines
        else:
            assert lines[0].startswith("warning: no NVIDIA GPU"), lines
    assert lines[-1] == f"+ {python} -m pip install -e {ROOT}"


def readme_commands() -> list[str]:
    quickstart = re.search(r"\[start:quickstart\] -->\n(.*?)<!-- --8<-- \[end:quickstart\]",
                           (ROOT / "README.md").read_text(), re.DOTALL)[1]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", quickstart, re.DOTALL)]


def test_the_readme_gives_two_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    assert len(commands) == 2, commands
    run, tests = commands
    assert "\n" not in run and "\n" not in tests, "each command is one line, copied whole"
    assert run.endswith("python cleanrl/ppo.py --env-id CartPole-v1") and "requirements/install.py" in run
    assert tests.endswith("python -m pytest") and "requirements/install.py all dev" in tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci, ".ci/run must run README.md's test command as written"
