"""Install the project with the PyTorch build that fits this machine, then the extras asked for.

    python requirements/install.py                 # the core: classic control
    python requirements/install.py atari dev       # extras of pyproject.toml, as in pip install -e ".[atari,dev]"
    python requirements/install.py --dry-run all   # say what would be installed, install nothing

pip's default torch on Linux is a CUDA build, about 3 GB more than the CPU build, useless without an NVIDIA GPU.
So, before `pip install -e ".[extras]"`:

- a torch already installed in this environment is kept, whichever build it is;
- on Linux without an NVIDIA GPU, the CPU build is installed first: from PyTorch's CPU index when it answers,
  else the newest `+cpu` release that pip's own sources hold (a mirror, a wheel folder) if any; if neither has
  one, a warning says that pip will take the CUDA build;
- with an NVIDIA GPU, on macOS and on Windows, pip's default build is the right one.

Uses the standard library only, so it runs before anything is installed; pip runs as `python -m pip` of the
interpreter that runs this file (activate the virtual environment first).
"""

import argparse
import glob
import importlib.util
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def project_metadata() -> tuple[str, list[str]]:
    """(the torch requirement, the extras) from pyproject.toml; without tomllib (Python 3.10) by pattern."""
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10
        torch = re.search(r'"(torch[^"]*)"', text)[1]
        section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        return torch, re.findall(r"^(\w[\w-]*)\s*=", section, re.MULTILINE)
    project = tomllib.loads(text)["project"]
    torch = next(dep for dep in project["dependencies"] if re.match(r"torch\b", dep))
    return torch, list(project["optional-dependencies"])


def release(version: str) -> tuple[int, ...]:
    """2.13.0+cpu -> (2, 13, 0); pre-releases and dev releases count as their base release."""
    return tuple(int(part) for part in re.match(r"(\d+(?:\.\d+)*)", version)[1].split("."))


def satisfies(version: str, requirement: str) -> bool:
    """Whether a torch version meets the project's requirement; it only uses >=, <, <=, == and != clauses."""
    for op, bound in re.findall(r"(>=|<=|==|!=|<|>)\s*([\w.*+]+)", requirement):
        v, b = release(version), release(bound)
        width = max(len(v), len(b))
        v, b = v + (0,) * (width - len(v)), b + (0,) * (width - len(b))
        if not {">=": v >= b, "<=": v <= b, "==": v == b, "!=": v != b, "<": v < b, ">": v > b}[op]:
            return False
    return True


def has_nvidia_gpu() -> bool:
    """An NVIDIA GPU this machine's driver sees (nvidia-smi lists one, or the driver's /proc entry has one)."""
    if glob.glob("/proc/driver/nvidia/gpus/*"):
        return True
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return out.returncode == 0 and "GPU" in out.stdout
    return False


def index_answers(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def cpu_builds_pip_sees(extra_args: list[str]) -> list[str]:
    """The `+cpu` torch versions in the sources pip is configured with (plus extra_args), newest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch", *extra_args],
                         capture_output=True, text=True)
    listed = re.search(r"^Available versions: (.*)$", out.stdout, re.MULTILINE)
    versions = [v.strip() for v in listed[1].split(",")] if listed else []
    return sorted((v for v in versions if v.endswith("+cpu")), key=release, reverse=True)


def torch_step(requirement: str, *, torch_installed: str | None, platform: str, gpu: bool,
               cpu_index: bool, cpu_builds: list[str]) -> tuple[list[str] | None, str]:
    """(the pip arguments that install torch first, or None; the line that says why)."""
    if torch_installed:
        return None, f"torch {torch_installed} is installed here; keeping it"
    if platform != "linux" or gpu:
        why = "an NVIDIA GPU is present" if platform == "linux" else f"pip's torch for {platform} is the right build"
        return None, f"{why}: pip installs its default torch build"
    if cpu_index:
        return (["install", requirement, "--index-url", CPU_INDEX],
                f"no NVIDIA GPU: installing torch's CPU build from {CPU_INDEX}")
    fitting = [v for v in cpu_builds if satisfies(v, requirement)]
    if fitting:
        return (["install", f"torch=={fitting[0]}"],
                f"no NVIDIA GPU: installing torch {fitting[0]}, the newest CPU build pip's sources hold "
                f"({CPU_INDEX} did not answer)")
    return None, (f"warning: no NVIDIA GPU, but no CPU build of torch could be found ({CPU_INDEX} did not answer); "
                  "pip installs its default build, which on Linux brings CUDA libraries of about 3 GB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extras", nargs="*", help="extras of pyproject.toml, e.g. atari mujoco dev (or all)")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands instead of running them")
    args = parser.parse_args(argv)
    requirement, known = project_metadata()
    extras = [e for word in args.extras for e in word.split(",") if e]
    unknown = [e for e in extras if e not in known]
    if unknown:
        print(f"error: unknown extra {', '.join(unknown)}; pyproject.toml has {', '.join(known)}", file=sys.stderr)
        return 2

    installed = None
    if importlib.util.find_spec("torch") is not None:
        from importlib.metadata import version

        installed = version("torch")
    gpu = has_nvidia_gpu()
    cpu_index = cpu_builds = None
    if not installed and sys.platform == "linux" and not gpu:
        cpu_index = index_answers(CPU_INDEX)
        cpu_builds = [] if cpu_index else cpu_builds_pip_sees([])
    first, why = torch_step(requirement, torch_installed=installed, platform=sys.platform, gpu=gpu,
                            cpu_index=bool(cpu_index), cpu_builds=cpu_builds or [])
    print(why, flush=True)
    target = f"{ROOT}[{','.join(extras)}]" if extras else str(ROOT)
    steps = ([first] if first else []) + [["install", "-e", target]]
    for step in steps:
        command = [sys.executable, "-m", "pip", *step]
        print("+ " + " ".join(command), flush=True)
        if not args.dry_run and subprocess.run(command).returncode != 0:
            print(f"error: pip failed: {' '.join(step)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
