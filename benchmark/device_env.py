# docs: docs/benchmark.md
"""Prepares here, where pip reaches the package index, what the GPU check needs on a GPU machine that has torch with
CUDA but no package index (python 3.12 there), as folders to carry there (all under benchmark/results/, which git
ignores):

    benchmark/results/leanrl           a snapshot of github:pytorch-labs/LeanRL (leanrl/, its LICENSE, README and
                                       requirements) from a git repository (--leanrl-git: a path, bare or not, or a
                                       URL), and SNAPSHOT.json with its commit; never copied into the project
    benchmark/results/leanrl-env       the packages LeanRL's torchcompile scripts need beyond torch and mujoco,
                                       installed (pip install --target) for --python-version, with manifest.json;
                                       numpy stays a wheel in wheels/ (installed it is 60 MB), which
                                       benchmark/speed_anchor.py unpacks before LeanRL's runs
    benchmark/results/device-wheels    our scripts' packages that the GPU machine lacks, as wheels at the versions
                                       installed here (the GPU command installs them with pip --no-index)

LeanRL's versions (LEANRL_PACKAGES): its scripts were written in 2024 for tensordict and torchrl nightlies, gymnasium
0.29 and numpy<2. tensordict 0.8.3 is the last release whose TensorDictModule still takes a function that returns
more tensors than out_keys (LeanRL's SAC policy does; 0.9 made it an error); torchrl 0.8.1 is the release that pairs
with it. Against another torch version than they were built for: tensordict's compiled extension (tensordict/_C.so)
links no torch library from 0.8 on (only the C++ runtime), so it loads with any torch of the same Python version
(tensordict 0.15 has no compiled part at all); up to 0.7 it linked libtorch and was tied to one torch version.
torchrl's extension (torchrl/_torchrl.so, prioritized replay's segment trees) links libtorch: against another torch it
does not load, and torchrl says so in a warning and goes on; LeanRL uses only its pure-Python replay buffer. Seen
here with torch 2.13 (CPU), Python 3.11: LeanRL's SAC, TD3 and PPO continuous scripts run with this set (--cuda off;
--cudagraphs needs CUDA: its capturable Adam refuses CPU tensors). gymnasium 0.29.1 steps HalfCheetah-v4 on mujoco
4.0.1. With numpy 2.4 SAC fails at the first episode end (float() of a 1-element array); with tensordict 0.14
SAC fails at its first policy step. LeanRL's Atari script needs envpool with the old gym API (gym<0.26): envpool's
wheels are 50-90 MB and the version it was written for (0.8) has none for Python 3.12, so it is left out and its row
says so. wandb is not needed: benchmark/anchor_launch.py stands in for it.

Run (about a minute; 25-40 MB to download):
    python benchmark/device_env.py --leanrl-git /path/to/LeanRL      # a clone, a bare mirror, or its URL
    python benchmark/device_env.py --parts leanrl-env --python-version 3.11 --leanrl-env benchmark/results/leanrl-env-py311
        (a LeanRL environment for this machine's Python, to try LeanRL's scripts on the CPU)
It prints each folder's size, the size of what a GPU call would carry (limit 64 MiB) and the command to run there:
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site benchmark/results/device-wheels/*.whl \
        && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 \
        && python3 benchmark/gpu_check.py --steps speed-anchor --out benchmark/results/gpu-anchor
(benchmark/speed_anchor.py puts LeanRL's environment before that PYTHONPATH for LeanRL's runs only; ours see /tmp/site.)
"""

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal, NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Args:
    parts: list[Literal["leanrl", "leanrl-env", "device-wheels"]] = field(
        default_factory=lambda: ["leanrl", "leanrl-env", "device-wheels"])
    """what to make (each replaces its folder)"""
    leanrl_git: Optional[str] = None
    """LeanRL's git repository (a path, bare or with a work tree, or a URL) for the snapshot"""
    leanrl_commit: str = "HEAD"
    """the commit of LeanRL to snapshot"""
    leanrl: str = "benchmark/results/leanrl"
    """the snapshot's folder"""
    leanrl_env: str = "benchmark/results/leanrl-env"
    """LeanRL's environment folder"""
    device_wheels: str = "benchmark/results/device-wheels"
    """the folder of our scripts' wheels"""
    python_version: str = "3.12"
    """the Python version of the machine that will use them (the GPU machines': 3.12)"""
    max_env_mib: float = 40.0
    """the largest LeanRL environment accepted, in MiB"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


# LeanRL's packages beyond torch (the GPU machine's) and mujoco (from device-wheels there, this venv here); the module
# docstring says why these versions. orjson: tensordict's JSON; tyro's three helpers: typing-extensions is pinned to
# a release new enough for typeguard whatever the machine has.
LEANRL_PACKAGES = ["tensordict==0.8.3", "torchrl==0.8.1", "gymnasium==0.29.1", "farama-notifications==0.0.6",
                   "orjson==3.13.0", "tyro==1.0.17", "docstring-parser==0.18.0", "typeguard==4.6.1",
                   "typing-extensions==4.16.0", "tqdm==4.70.1"]  # fmt: skip
LEANRL_WHEELS = ["numpy==1.26.4"]  # LeanRL's requirements: numpy<2.0; kept zipped, unpacked where it runs
# top-level folders torchrl's wheel installs beside its package (its repository's build helpers)
STRAY = ["build_tools", "benchmarks", "sota-implementations", "examples", "test", "tutorials", "bin"]
# our scripts' packages the GPU machines lack (they have torch, numpy, tensorboard, opencv, tqdm, pytest): pinned to
# the versions installed here. mujoco's own wheel is only its Python front; its bindings are mujoco-core; its
# viewer (mujoco-studio) and the viewer's OpenGL helpers are left out, as the scripts never render on the GPU machine.
DEVICE_PACKAGES = ["gymnasium", "farama-notifications", "mujoco", "mujoco-core", "glfw", "ale-py", "tyro", "docstring-parser",
                   "typeguard", "typing-extensions"]  # fmt: skip
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64",
             "manylinux1_x86_64"]  # fmt: skip
CARRY_LIMIT_MIB = 64


def binary_flags(python_version: str) -> list[str]:
    """pip's flags for wheels of another machine: its Python version, CPython ABIs and Linux x86-64 platforms."""
    abi = "cp" + python_version.replace(".", "")
    flags = ["--only-binary=:all:", "--no-deps", "--python-version", python_version, "--implementation", "cp",
             "--abi", abi, "--abi", "abi3", "--abi", "none"]  # fmt: skip
    for p in PLATFORMS:
        flags += ["--platform", p]
    return flags


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if l.startswith("ERROR")] or proc.stderr.splitlines()[-3:]
        fail(f"pip failed ({' '.join(args[:2])} ...): {' / '.join(lines)}")


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files) / 2**20


def replace(target: Path, build) -> None:
    """build(folder) into a scratch folder beside target, then put it in target's place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        build(scratch)
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)


def make_snapshot(args: Args) -> None:
    if not args.leanrl_git:
        fail("the leanrl part needs --leanrl-git: LeanRL's git repository (a path or a URL)")

    def build(folder: Path) -> None:
        source = args.leanrl_git
        with tempfile.TemporaryDirectory() as tmp:
            if not Path(source).exists():  # a URL: a shallow clone first
                subprocess.run(["git", "clone", "--quiet", "--bare", "--depth", "1", source, f"{tmp}/repo"], check=True)
                source = f"{tmp}/repo"
            rev = subprocess.run(["git", "-C", source, "rev-parse", args.leanrl_commit], capture_output=True, text=True,
                                 check=False)  # fmt: skip
            if rev.returncode != 0:
                fail(f"{args.leanrl_git} has no commit {args.leanrl_commit}: {rev.stderr.strip()}")
            commit = rev.stdout.strip()
            archive = subprocess.run(["git", "-C", source, "archive", commit, "leanrl", "LICENSE", "README.md",
                                      "requirements"], capture_output=True, check=False)  # fmt: skip
            if archive.returncode != 0:
                fail(f"git archive of {args.leanrl_git} failed: {archive.stderr.decode(errors='replace').strip()}")
            subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        if not (folder / "leanrl" / "sac_continuous_action_torchcompile.py").is_file():
            fail(f"{args.leanrl_git} at {commit} has no leanrl/sac_continuous_action_torchcompile.py: not LeanRL?")
        (folder / "SNAPSHOT.json").write_text(json.dumps(
            {"source": args.leanrl_git, "commit": commit, "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
            indent=2) + "\n")  # fmt: skip

    replace(Path(args.leanrl), build)


def make_leanrl_env(args: Args) -> None:
    def build(folder: Path) -> None:
        pip("install", "--quiet", "--no-compile", "--target", str(folder), *binary_flags(args.python_version),
            *LEANRL_PACKAGES)  # fmt: skip
        for name in STRAY:
            if (folder / name).is_dir():
                shutil.rmtree(folder / name)
        pip("download", "--quiet", "--dest", str(folder / "wheels"), *binary_flags(args.python_version), *LEANRL_WHEELS)
        installed = dict(p.name.removesuffix(".dist-info").rsplit("-", 1) for p in folder.glob("*.dist-info"))
        wheels = sorted(p.relative_to(folder).as_posix() for p in (folder / "wheels").glob("*.whl"))
        (folder / "manifest.json").write_text(json.dumps({
            "python": args.python_version, "packages": installed, "unpack": wheels,
            "from_elsewhere": "torch (the machine's), mujoco (device-wheels on a GPU machine)",
            "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "by": "python benchmark/device_env.py",
        }, indent=2) + "\n")  # fmt: skip
        size = size_mib(folder)
        if size > args.max_env_mib:
            fail(f"LeanRL's environment came to {size:.1f} MiB, over --max-env-mib {args.max_env_mib:g}")

    replace(Path(args.leanrl_env), build)


def make_device_wheels(args: Args) -> None:
    pins = []
    for name in DEVICE_PACKAGES:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            fail(f"{name} is not installed here; install the project with its mujoco and atari extras first")
    replace(Path(args.device_wheels), lambda folder: pip("download", "--quiet", "--dest", str(folder),
                                                         *binary_flags(args.python_version), *pins))


def device_command(wheels: str) -> str:
    """The command for a GPU machine: our packages from the carried wheels into /tmp/site, then the check."""
    return (f"python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site {wheels}/*.whl && "
            "export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 && "
            "python3 benchmark/gpu_check.py --steps speed-anchor --out benchmark/results/gpu-anchor")  # fmt: skip


def tree_mib() -> float:
    """The size of what a GPU call sends besides carried folders: the tracked and untracked-not-ignored files."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True,
                           check=True).stdout.decode().split("\0")  # fmt: skip
    return sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file()) / 2**20


def main(args: Args) -> None:
    if not args.parts:
        fail("--parts is empty")
    makers = {"leanrl": make_snapshot, "leanrl-env": make_leanrl_env, "device-wheels": make_device_wheels}
    for part in args.parts:
        print(f"making {part} ...", flush=True)
        makers[part](args)
    folders = {"leanrl": Path(args.leanrl), "leanrl-env": Path(args.leanrl_env), "device-wheels": Path(args.device_wheels)}
    carried, total = [], tree_mib()
    print(f"the working tree that a GPU call sends: {total:.1f} MiB")
    for part, folder in folders.items():
        if folder.exists():
            mib = size_mib(folder)
            total += mib
            carried.append(str(folder))
            print(f"{folder}: {mib:.1f} MiB")
    print(f"in all {total:.1f} MiB of the {CARRY_LIMIT_MIB} MiB a call may carry" + (" (OVER)" if total > CARRY_LIMIT_MIB else ""))
    print("carry: " + " ".join(carried))
    print("the command there (the GPU check's speed anchor alone; its results in benchmark/results/gpu-anchor):\n"
          f"  {device_command(args.device_wheels)}")
    if total > CARRY_LIMIT_MIB:
        fail(f"{total:.1f} MiB would not travel in one GPU call (limit {CARRY_LIMIT_MIB} MiB)")


if __name__ == "__main__":
    main(tyro.cli(Args))
