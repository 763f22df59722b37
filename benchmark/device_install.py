# docs: docs/speed.md
"""Installs, on a GPU machine without a package index, the packages that benchmark/device_env.py carried there as
wheels (benchmark/results/device-wheels, its manifest.json): ours whatever the machine has, each group of the
others only where the machine lacks the package that names it, all into one folder for PYTHONPATH (pip install
--no-index --no-deps --target). It prints one line per package and warns of a module left out as too large that
the machine lacks too (OpenCV, envpool). It runs first there, with the machine's python3 and the standard
library alone: tyro is among what it installs, so it takes its two arguments by position.

Run there (the start of the device tool's command that benchmark/device_env.py prints):
    python3 benchmark/device_install.py benchmark/results/device-wheels /tmp/site && export PYTHONPATH=/tmp/site
"""

import importlib.util
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

USAGE = "usage: python3 benchmark/device_install.py WHEELS_FOLDER TARGET_FOLDER"


def fail(message: str):
    raise SystemExit(f"error: {message}")


def choose(manifest: dict, installed) -> tuple[list[str], list[str]]:
    """(the wheels to install, one line per package saying why); installed(name) is the machine's version or None."""
    wheels, lines = [], []
    for wheel in manifest["ours"]:
        wheels.append(wheel)
        lines.append(f"{Path(wheel).name}: ours, first on the path")
    for group, members in manifest["if_missing"].items():
        version = installed(group)
        if version is None:
            wheels += members
            lines += [f"{Path(w).name}: carried, as this machine has no {group}" for w in members]
        else:
            carried = ", ".join(Path(w).name for w in members)
            lines.append(f"{group} {version}: this machine's (its {carried} not installed)")
    return wheels, lines


def machine_version(name: str):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0].startswith("-"):
        fail(f"two arguments, the wheels' folder and the folder to install into\n{USAGE}")
    folder, target = Path(argv[0]), Path(argv[1])
    if not (folder / "manifest.json").is_file():
        fail(f"{folder} has no manifest.json: make it here with python benchmark/device_env.py and carry it")
    manifest = json.loads((folder / "manifest.json").read_text())
    if not {"python", "ours", "if_missing", "not_carried"} <= manifest.keys():
        fail(f"{folder}/manifest.json is not a manifest of device wheels (python benchmark/device_env.py makes them)")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != here:
        fail(f"{folder} holds wheels for Python {manifest['python']} and this is Python {here}: make them with "
             f"python benchmark/device_env.py --python-version {here}")  # fmt: skip
    wheels, lines = choose(manifest, machine_version)
    absent = [w for w in wheels if not (folder / w).is_file()]
    if absent:
        fail(f"{', '.join(absent)} missing beside {folder}/manifest.json: carry every folder device_env.py names")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps",
           "--no-compile", "--upgrade", "--target", str(target), *(str(folder / w) for w in wheels)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        errors = [l for l in proc.stderr.splitlines() if l.startswith("ERROR")] or proc.stderr.splitlines()[-3:]
        fail(f"pip could not install the carried wheels into {target}: {' / '.join(errors)}")
    print("\n".join(lines))
    sys.path.insert(0, str(target.absolute()))
    for module, why in manifest["not_carried"].items():
        if importlib.util.find_spec(module) is None:
            print(f"warning: this machine has no {module}, and it was not carried: {why}")
    print(f"installed {len(wheels)} wheels into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
