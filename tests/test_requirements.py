"""requirements/*.txt (the pip install -r path) match pyproject.toml (the pip install -e ".[extra]" path)."""

import shutil
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement

from tests.helpers import ROOT


def check(root) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "requirements/generate.py"), "--check"], capture_output=True,
                          text=True)


def test_requirements_files_match_pyproject():
    proc = check(ROOT)
    assert proc.returncode == 0, proc.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = sorted(e for e in project["optional-dependencies"] if e != "all")
    assert extras == ["atari", "cloud", "dev", "docs", "jax", "mujoco", "procgen", "tune"]
    for name in ["requirements.txt"] + [f"requirements-{e}.txt" for e in extras]:
        lines = [ln for ln in (ROOT / "requirements" / name).read_text().splitlines() if not ln.startswith("#")]
        if name != "requirements.txt":
            assert lines[0] == "-r requirements.txt"  # an extra installs on top of the core
            lines = lines[1:]
        for line in lines:
            Requirement(line)  # raises on anything pip would not parse as a requirement


def test_check_names_a_file_that_drifted(tmp_path):
    (tmp_path / "requirements").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "requirements/generate.py", tmp_path / "requirements")
    assert check(tmp_path).returncode == 1  # no files yet
    subprocess.run([sys.executable, str(tmp_path / "requirements/generate.py")], check=True, capture_output=True)
    assert check(tmp_path).returncode == 0
    pyproject = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(pyproject.replace('"boto3>=1.34"', '"boto3>=1.35"'))
    proc = check(tmp_path)
    assert proc.returncode == 1 and "requirements-cloud.txt" in proc.stderr and "requirements.txt," not in proc.stderr
