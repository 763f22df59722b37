# docs: docs/speed.md
"""Prepares here, where pip reaches the package index, what the GPU check (benchmark/gpu_check.py) needs on a GPU
machine that has Python 3.12 and torch with CUDA but no package index, as folders small enough to travel with the
working tree in one call of the device tool (all of it under 64 MiB), and prints that call: its command and the
folders to carry. The folders (all under benchmark/results/, which git ignores):

    benchmark/results/device-wheels    what our scripts, tests/test_cuda.py and the check's tools import beyond torch,
                                       as wheels for --python-version, with manifest.json; benchmark/device_install.py
                                       installs them there (below)
    benchmark/results/leanrl           a snapshot of github:pytorch-labs/LeanRL (leanrl/, its LICENSE, README and
                                       requirements) from a git repository (--leanrl-git: a path, bare or not, or a
                                       URL), and SNAPSHOT.json with its commit; never copied into the project
    benchmark/results/leanrl-env       the packages LeanRL's torchcompile scripts need beyond torch and mujoco,
                                       installed (pip install --target) for --python-version, with manifest.json;
                                       numpy stays a wheel in wheels/ (installed it is 60 MB), which
                                       benchmark/speed_anchor.py unpacks before LeanRL's runs

device-wheels holds two kinds of package (DEVICE_OURS, DEVICE_IF_MISSING), at the versions installed here:
- ours: what decides what our scripts compute (gymnasium, its MuJoCo and Atari engines, tyro), installed whatever
  the machine has and first on its PYTHONPATH;
- if missing: numpy, tensorboard, pytest, pytest-xdist and a few small ones (DEVICE_IF_MISSING), which a bare torch
  install lacks and a GPU machine's image usually has: installed only where the machine lacks them, so that its own
  compiled packages keep the numpy they were built against and its pytest plugins their pytest. Where the machine
  lacks numpy, ours get LeanRL's numpy 1.26.4 (the project takes numpy>=1.24), carried once for both.
Tried here on a stand-in for a bare machine (a Python 3.11 virtual environment holding torch 2.13 and its own needs
alone, the wheels made with --python-version 3.11): the install (4 s), pytest-xdist running tests/test_cuda.py (all
skip without CUDA), our SAC, PPO continuous and Atari scripts on numpy 1.26.4, and the speed anchor on the CPU with
LeanRL's SAC.
Left out (NOT_CARRIED), as too large to travel: OpenCV (opencv-python-headless 5.1.0.95 for Python 3.12 is a 55 MiB
wheel), which gymnasium's Atari preprocessing resizes frames with, so a machine without it runs the Atari scripts
with their default --env-backend ale-vector alone, as everything the GPU check runs does; envpool (0.9.0, the last
release before 1.0, is a 77 MiB wheel), so ppg_procgen's CUDA tests skip and LeanRL's Atari script (envpool<1 with
the old gym API) does not run, which its row of the speed anchor says. Also left out: tensorboard's server
(tensorboard-data-server, grpcio, werkzeug, markdown, pillow; 21 MiB), as the scripts only write event files and the
tools only read them; mujoco's viewer (mujoco-studio, pyopengl; 11 MiB).

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
SAC fails at its first policy step. wandb is not needed: benchmark/anchor_launch.py stands in for it.

Run (about 15 seconds here; about 45 MB to download):
    python benchmark/device_env.py --leanrl-git /path/to/LeanRL      # a clone, a bare mirror, or its URL
    python benchmark/device_env.py --parts                            # make nothing: sizes, carry and command again
    python benchmark/device_env.py --parts leanrl-env --python-version 3.11 --leanrl-env benchmark/results/leanrl-env-py311
        (a LeanRL environment for this machine's Python, to try LeanRL's scripts on the CPU)
It prints each folder's size and the total a GPU call would carry with the working tree, refuses in one line when
that is over 64 MiB, and else ends with the device tool's call: the folders to carry and the command (device_command),
    python3 benchmark/device_install.py benchmark/results/device-wheels /tmp/site \
        && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 \
        && python3 benchmark/gpu_check.py --out /tmp/gpu-check-$$ --pack $OUT
which installs the carried packages into /tmp/site and runs the whole GPU check, its summary and an archive of its
results packed into the folder the device tool brings back ($OUT); $$, the shell's process id, makes the check's
folder new in each call. benchmark/speed_anchor.py puts LeanRL's environment before that PYTHONPATH for LeanRL's
runs only; ours see /tmp/site.
"""

import json
import os
import re
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
    """what to make (each replaces its folder; made in the order above, as device-wheels takes LeanRL's numpy wheel);
    none: only measure the folders and print the call"""
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
# device-wheels, ours: what decides what our scripts compute, installed on the GPU machine whatever it has. mujoco's
# own wheel is only its Python front; its bindings are mujoco-core; its viewer (mujoco-studio) and the viewer's OpenGL
# helpers are left out, as the scripts never render there. typing-extensions: new enough for typeguard.
DEVICE_OURS = ["gymnasium", "farama-notifications", "mujoco", "mujoco-core", "glfw", "ale-py", "tyro",
               "docstring-parser", "typeguard", "typing-extensions"]  # fmt: skip
# device-wheels, if missing: the rest of what our scripts (numpy, cloudpickle for gymnasium, imageio for its MuJoCo
# envs, which import their renderer, tensorboard's event files), tests/test_cuda.py (pytest, pytest-xdist for
# gpu_check's test processes) and the check's tools (packaging) import that a bare torch install lacks; a group is
# installed where the machine lacks the package that names it. tensorboard: its event-file writer and reader need
# protobuf and absl-py (tensorboard's TensorFlow stub imports absl), not its server. numpy: LeanRL's wheel
# (LEANRL_WHEELS), carried once for both.
DEVICE_IF_MISSING = {"numpy": ["numpy"], "cloudpickle": ["cloudpickle"], "imageio": ["imageio"],
                     "packaging": ["packaging"], "tensorboard": ["tensorboard", "protobuf", "absl-py"],
                     "pytest": ["pytest", "pluggy", "iniconfig", "pygments"],
                     "pytest-xdist": ["pytest-xdist", "execnet"]}  # fmt: skip
# modules not carried, by size, and what a machine without them cannot run (benchmark/device_install.py warns)
NOT_CARRIED = {
    "cv2": "OpenCV (opencv-python-headless 5.1.0.95 for Python 3.12 is a 55 MiB wheel), which gymnasium's Atari "
           "preprocessing resizes frames with: without it the Atari scripts run with their default --env-backend "
           "ale-vector alone (ale-py's own preprocessing), as everything the GPU check runs does, not with gymnasium",
    "envpool": "envpool (its last release before 1.0, 0.9.0, is a 77 MiB wheel): without it ppg_procgen's CUDA tests "
               "skip and LeanRL's Atari script (envpool<1 with the old gym API) does not run",
}  # fmt: skip
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
            "left_out": {"envpool": NOT_CARRIED["envpool"].split(":")[0] + ", too large to carry to a GPU machine"},
            "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "by": "python benchmark/device_env.py",
        }, indent=2) + "\n")  # fmt: skip
        size = size_mib(folder)
        if size > args.max_env_mib:
            fail(f"LeanRL's environment came to {size:.1f} MiB, over --max-env-mib {args.max_env_mib:g}")

    replace(Path(args.leanrl_env), build)


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): lower case, runs of -, _ and . as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> str:
    return canonical(path.name.split("-")[0])


def leanrl_numpy(args: Args) -> Optional[Path]:
    """LeanRL's numpy wheel (LEANRL_WHEELS) in its environment folder when that was made for --python-version."""
    env = Path(args.leanrl_env)
    path = env / "manifest.json"
    made_for = json.loads(path.read_text()).get("python") if path.is_file() else None
    version = LEANRL_WHEELS[0].split("==")[1]
    found = sorted((env / "wheels").glob(f"numpy-{version}-*.whl"))
    return found[0] if found and made_for == args.python_version else None


def make_device_wheels(args: Args) -> None:
    names = DEVICE_OURS + [n for members in DEVICE_IF_MISSING.values() for n in members if n != "numpy"]
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            fail(f"{name} is not installed here; install the project with its mujoco and atari extras and dev tools")
    shared = leanrl_numpy(args)
    target = Path(args.device_wheels)

    def build(folder: Path) -> None:
        pip("download", "--quiet", "--dest", str(folder), *binary_flags(args.python_version), *pins)
        if shared is None:  # no LeanRL environment for this Python beside it: numpy of its own
            pip("download", "--quiet", "--dest", str(folder), *binary_flags(args.python_version), *LEANRL_WHEELS)
        wheels = {wheel_name(p): p.name for p in folder.glob("*.whl")}
        if shared is not None:  # relative to this folder, as the carried folders lie side by side there too
            wheels["numpy"] = os.path.relpath(shared.absolute(), target.absolute())
        missing = [n for n in [*names, "numpy"] if canonical(n) not in wheels]
        if missing:
            fail(f"pip downloaded no wheel of {' '.join(missing)} for Python {args.python_version}")
        (folder / "manifest.json").write_text(json.dumps({
            "python": args.python_version,
            "ours": [wheels[canonical(n)] for n in DEVICE_OURS],
            "if_missing": {group: [wheels[canonical(n)] for n in members]
                           for group, members in DEVICE_IF_MISSING.items()},
            "not_carried": NOT_CARRIED,
            "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "by": "python benchmark/device_env.py",
        }, indent=2) + "\n")  # fmt: skip

    replace(target, build)


# where the check's folder goes on the GPU machine ($$: the shell's process id, a new folder in each call) and where
# its summary and archive go: the folder whose files the device tool brings back
DEVICE_OUT = "/tmp/gpu-check-$$"
DEVICE_PACK = "$OUT"


def in_checkout(path: str) -> str:
    """A path as the device tool takes it: relative to the checkout's root where it is inside it."""
    p = Path(path).absolute()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


def device_command(args: Args) -> str:
    """The device tool's command: our packages from the carried wheels into /tmp/site, then the whole GPU check."""
    leanrl, env = in_checkout(args.leanrl), in_checkout(args.leanrl_env)
    flags = [f"--leanrl {leanrl}"] if leanrl != Args.leanrl else []
    flags += [f"--leanrl-env {env}"] if env != Args.leanrl_env else []
    return " ".join([f"python3 benchmark/device_install.py {in_checkout(args.device_wheels)} /tmp/site &&",
                     "export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&",
                     f"python3 benchmark/gpu_check.py --out {DEVICE_OUT} --pack {DEVICE_PACK}", *flags])  # fmt: skip


def tree_mib() -> float:
    """The size of what a GPU call sends besides carried folders: the tracked and untracked-not-ignored files."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True,
                           check=True).stdout.decode().split("\0")  # fmt: skip
    return sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file()) / 2**20


def main(args: Args) -> None:
    makers = {"leanrl": make_snapshot, "leanrl-env": make_leanrl_env, "device-wheels": make_device_wheels}
    for part in [p for p in makers if p in args.parts]:
        print(f"making {part} ...", flush=True)
        makers[part](args)
    folders = [Path(args.device_wheels), Path(args.leanrl), Path(args.leanrl_env)]
    missing = [str(f) for f in folders if not f.is_dir()]
    total = tree_mib()
    print(f"the working tree that a GPU call sends: {total:.1f} MiB")
    for folder in folders:
        if folder.is_dir():
            mib = size_mib(folder)
            total += mib
            print(f"{folder}: {mib:.1f} MiB")
    print(f"in all {total:.1f} MiB of the {CARRY_LIMIT_MIB} MiB a call may carry")
    if total > CARRY_LIMIT_MIB:
        fail(f"{total:.1f} MiB would not travel in one GPU call (limit {CARRY_LIMIT_MIB} MiB): carry less")
    if missing:
        fail(f"{' and '.join(missing)} missing: make them (--parts) before the GPU call")
    for folder in folders:
        if not folder.absolute().is_relative_to(ROOT):
            print(f"warning: {folder} is outside the checkout ({ROOT}); the device tool carries paths inside it only")
    print("The device tool's call (run), the check under 8 minutes; its summary.md and gpu-check.tar.gz come back:")
    print("carry: " + json.dumps([in_checkout(str(f)) for f in folders]))
    print("timeout_s: 600")
    print("command: " + device_command(args))


if __name__ == "__main__":
    main(tyro.cli(Args))
