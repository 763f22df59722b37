"""Write requirements/*.txt from pyproject.toml, so `pip install -r requirements/requirements.txt` (the install
path of the CleanRL articles) and `pip install -e ".[extra]"` install the same packages.

    python requirements/generate.py          # rewrite the files
    python requirements/generate.py --check  # exit 1 naming the files that differ from pyproject.toml

requirements.txt holds the core dependencies; requirements-<extra>.txt holds one extra on top of the core
(`-r requirements.txt`). The `all` extra is the union of the others and gets no file of its own.
"""

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = "# Generated from pyproject.toml by `python requirements/generate.py`; edit pyproject.toml, not this file.\n"


def expected_files() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    files = {"requirements.txt": HEADER + "".join(f"{dep}\n" for dep in project["dependencies"])}
    for extra, deps in project["optional-dependencies"].items():
        if extra == "all":
            continue
        files[f"requirements-{extra}.txt"] = HEADER + "-r requirements.txt\n" + "".join(f"{dep}\n" for dep in deps)
    return files


def main(argv: list[str]) -> int:
    folder = ROOT / "requirements"
    files = expected_files()
    if argv == ["--check"]:
        stale = sorted(name for name, text in files.items()
                       if not (folder / name).is_file() or (folder / name).read_text() != text)
        extra = sorted(p.name for p in folder.glob("*.txt") if p.name not in files)
        if stale or extra:
            print(f"requirements/ is out of date with pyproject.toml: {', '.join(stale + extra)}; "
                  "run python requirements/generate.py", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python requirements/generate.py [--check]", file=sys.stderr)
        return 2
    for stale in folder.glob("*.txt"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        (folder / name).write_text(text)
    print(f"wrote {len(files)} files in requirements/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
