"""Blocks shared on purpose between the self-contained scripts in cleanrl/.

A shared block is written once in its source script and copied into others, each copy marked:

    # [shared:NAME] source: cleanrl/SOURCE.py
    ...lines...
    # [/shared:NAME]

`tests/test_shared_blocks.py` fails when a copy differs from its source's block.
`python tests/shared_blocks.py --write` rewrites every copy from its source, so a fix is one edit.
"""

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPEN = re.compile(r"^\s*# \[shared:(?P<name>[\w-]+)\] source: (?P<source>\S+)\s*$")
CLOSE = re.compile(r"^\s*# \[/shared:(?P<name>[\w-]+)\]\s*$")


@dataclass
class Block:
    name: str
    source: str
    path: Path
    start: int  # index of the first line after the opening marker
    end: int  # index of the closing marker
    body: list[str]


def parse(path: Path) -> list[Block]:
    lines = path.read_text().splitlines(keepends=True)
    blocks, current = [], None
    for i, line in enumerate(lines):
        opened, closed = OPEN.match(line), CLOSE.match(line)
        if opened:
            if current is not None:
                raise ValueError(f"{path}:{i + 1}: block {opened['name']!r} opens inside {current[0]!r}")
            current = (opened["name"], opened["source"], i + 1)
        elif closed:
            if current is None or closed["name"] != current[0]:
                raise ValueError(f"{path}:{i + 1}: closing marker {closed['name']!r} without its opening marker")
            name, source, start = current
            blocks.append(Block(name, source, path, start, i, lines[start:i]))
            current = None
    if current is not None:
        raise ValueError(f"{path}: block {current[0]!r} is never closed")
    return blocks


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [b for path in sorted((root / "cleanrl").glob("*.py")) for b in parse(path)]


def check(root: Path = ROOT) -> list[str]:
    """Every problem found, as readable lines; empty when all copies equal their sources."""
    problems = []
    blocks = all_blocks(root)
    sources = {}
    for b in blocks:
        if (root / b.source).resolve() == b.path.resolve():
            if b.name in sources:
                problems.append(f"{b.path.relative_to(root)}: block {b.name!r} defined twice in its source")
            sources[b.name] = b
    for b in blocks:
        src = sources.get(b.name)
        rel = b.path.relative_to(root)
        if src is None:
            problems.append(f"{rel}:{b.start}: block {b.name!r} names source {b.source}, which has no such block")
        elif src.source != b.source:
            problems.append(f"{rel}:{b.start}: block {b.name!r} names source {b.source}, not {src.source}")
        elif b.body != src.body:
            problems.append(f"{rel}:{b.start}: block {b.name!r} differs from {b.source} (run tests/shared_blocks.py --write)")
    return problems


def write(root: Path = ROOT) -> list[Path]:
    """Rewrite every copy from its source; returns the files changed."""
    sources = {b.name: b for b in all_blocks(root) if (root / b.source).resolve() == b.path.resolve()}
    changed = []
    for path in sorted((root / "cleanrl").glob("*.py")):
        lines = path.read_text().splitlines(keepends=True)
        # replace from the bottom so earlier indices stay valid
        for b in reversed(parse(path)):
            src = sources.get(b.name)
            if src is not None and src.path != path and b.body != src.body:
                lines[b.start : b.end] = src.body
        new = "".join(lines)
        if new != path.read_text():
            path.write_text(new)
            changed.append(path)
    return changed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite every copy from its source")
    opts = parser.parse_args()
    if opts.write:
        for p in write():
            print(f"rewrote {p.relative_to(ROOT)}")
    problems = check()
    print("\n".join(problems) or "all shared blocks match their sources")
    sys.exit(1 if problems else 0)
