# docs: docs/speed.md
"""Where a training run's time goes: the span its SPS measures, under cProfile, split by what runs it.

    environment   gymnasium (vector env, wrappers, the envs), mujoco, ale_py, envpool, and the numpy and standard
                  library calls they make
    torch         torch's Python code and its native ops (matrix products, autograd, optimizers), and the numpy
                  and standard library calls it makes
    numpy         numpy's Python code and its native functions, called by the script, its companion module or
                  the loop
    cleanrl       the script's functions and its companion module (their own Python lines)
    loop          the loop body's own lines (the frames already running when profiling began, which cProfile
                  never sees called): the span's time less everything attributed to a function
    imports       module loading (importlib, unmarshalling, extension modules)
    other         everything else (TensorBoard's writer, the standard library), called from there too

The run is profiled by benchmark/profile_hook.py, which launches the script with cProfile started where its SPS
clock starts (after the warm-up: the first iteration or update, the random learning-starts steps) and the stats
written when the loop ends, so start-up, warm-up and the final evaluation are left out. Each function's own time
(cProfile's tottime) goes to the category of the file it is defined in; a native function (a builtin) to the
category its name says (`{method 'run_backward' of 'torch._C._EngineBase' objects}` is torch). Tensor operators
(`a * b`, `x[i] = y`) are C slots that cProfile never sees called, so their time would go to the function whose
line uses them: under the profiler the run wraps each in a Python function named after it (`Tensor.__mul__`),
counted as torch (it adds a call to every operator, so torch reads a little high). cProfile adds a
cost to every Python-level call, so categories made of many small Python calls read higher than they are without
it; the table gives the measured span's steps per second under the profiler, and the whole process's time with and
without it.

Run (the command after `--`; it runs in a scratch directory, so its runs/ folder is thrown away):
    python benchmark/profile_split.py -- python cleanrl/dqn.py --total-timesteps 25000 --learning-starts 1000 --torch-threads 1
    python benchmark/profile_split.py --top 5 --out split.json -- python cleanrl/ppo.py --total-timesteps 51200

A tool, not an algorithm script: it never imports the scripts.
"""

import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Optional  # noqa: UP035 (the project's style)

import tyro

ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = ("environment", "torch", "numpy", "cleanrl", "loop", "imports", "other")
# path parts and builtin-name words of each category, looked up in this order
ENV_PACKAGES = ("gymnasium", "mujoco", "ale_py", "envpool", "shimmy")


@dataclass
class Args:
    """Profiles one training command: benchmark/profile_split.py [OPTIONS] -- python cleanrl/SCRIPT.py [FLAGS]."""

    top: int = 8
    """the number of functions listed per category, by their own time"""
    out: Optional[str] = None
    """if set, also write the split as JSON to this file"""
    unprofiled: bool = True
    """if toggled, also time the command once without the profiler, for the profiler's own cost"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def category(filename: str, name: str) -> str:
    """The category of one cProfile entry: (file, function name); builtins have the file '~'."""
    if filename == "~":
        if "marshal" in name or "_imp." in name or name.startswith("<built-in method builtins.__import__"):
            return "imports"
        for pkg in ENV_PACKAGES:
            if pkg in name:
                return "environment"
        if "torch" in name:
            return "torch"
        if "numpy" in name:
            return "numpy"
        return "other"
    if name.startswith("Tensor.__"):
        return "torch"  # a tensor operator, wrapped under the profiler by benchmark/profile_hook.py
    if "importlib._bootstrap" in filename or filename.startswith("<frozen importlib"):
        return "imports"
    parts = Path(filename).parts
    if any(p in ENV_PACKAGES for p in parts):
        return "environment"
    if "torch" in parts:
        return "torch"
    if "numpy" in parts:
        return "numpy"
    if "cleanrl" in parts and "site-packages" not in parts:
        return "cleanrl"
    return "other"


HELPERS = ("numpy", "other")  # counted where they are called from, when that is the environment or torch


def attribute(stats: dict) -> list[tuple[str, str, float, int]]:
    """[(function, category, own seconds, calls), ...] from cProfile's stats ({function: (cc, calls, own, cumulative,
    callers)}, callers giving each caller's share). A numpy or other function's own time goes to the environment or
    torch for the calls that came from there (np.stack inside gymnasium's vector env is environment time), directly
    or through other such helpers (the caller with the most cumulative time decides a helper's home); called from the
    script, the companion module or the loop, it stays numpy or other: the Python around them."""
    cats = {key: category(key[0], key[2]) for key in stats}
    homes: dict = {}

    def home(key, seen: frozenset) -> str:
        if cats[key] not in HELPERS:
            return cats[key]
        if key not in homes:
            callers = {c: v for c, v in stats[key][4].items() if c in stats and c not in seen}
            top = max(callers, key=lambda c: callers[c][3], default=None)
            homes[key] = cats[key] if top is None else home(top, seen | {key})
        return homes[key]

    rows = []
    for key, (_, calls, own, _, callers) in stats.items():
        filename, line, name = key
        label = name if filename == "~" else f"{Path(filename).name}:{line}({name})"
        if cats[key] not in HELPERS:
            rows.append((label, cats[key], own, calls))
            continue
        moved: dict[str, list] = {}
        for caller, (_, n, t, _) in callers.items():
            dest = home(caller, frozenset({key})) if caller in stats else cats[key]
            if dest in ("environment", "torch"):
                moved.setdefault(dest, [0.0, 0])
                moved[dest][0] += t
                moved[dest][1] += n
        for dest, (t, n) in moved.items():
            rows.append((label, dest, t, n))
        rest = own - sum(t for t, _ in moved.values())
        rows.append((label, cats[key], max(rest, 0.0), calls - sum(n for _, n in moved.values())))
    return rows


def split(rows: list[tuple[str, str, float, int]], top: int, span_seconds: float) -> dict:
    """{category: {"seconds", "share", "top": [[function, seconds, calls], ...]}} from the functions' own times (rows
    of `attribute`) over a span of span_seconds; "loop" gets what no function's own time covers."""
    by_category = {c: [] for c in CATEGORIES}
    for label, cat, seconds, calls in rows:
        by_category[cat].append((label, seconds, calls))
    attributed = sum(t for _, _, t, _ in rows)
    total = max(span_seconds, attributed) or 1.0
    out = {}
    for c in CATEGORIES:
        seconds = total - attributed if c == "loop" else sum(t for _, t, _ in by_category[c])
        best = sorted((r for r in by_category[c] if r[1] > 0), key=lambda r: -r[1])[:top]
        out[c] = {"seconds": round(seconds, 3), "share": round(seconds / total, 4),
                  "top": [[label, round(t, 3), n] for label, t, n in best]}
    return out


def script_and_args(command: list[str]) -> tuple[str, list[str]]:
    if len(command) < 2 or not Path(command[0]).name.startswith("python") or not command[1].endswith(".py"):
        fail("the command must be `python SCRIPT.py [FLAGS]` (launchers such as torchrun are not profiled)")
    script = Path(command[1]).resolve()
    if not script.is_file():
        fail(f"{command[1]} does not exist")
    return str(script), command[2:]


def run(argv: list[str], cwd: str, env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        fail(f"the command exited {proc.returncode}:\n{tail}")
    return seconds


def table(result: dict) -> str:
    span = result["span"]
    steps = span["last_step"] - span["first_step"]
    lines = [
        f"`{result['command']}`",
        "",
        f"- profiled span: steps {span['first_step']} to {span['last_step']}, {span['seconds']:.1f} s, "
        f"{steps / span['seconds']:,.0f} steps per second under the profiler",
        f"- whole process: {result['profiled_seconds']:.1f} s profiled"
        + (f", {result['unprofiled_seconds']:.1f} s without the profiler" if result["unprofiled_seconds"] else ""),
        "",
        "| category | seconds | share | per env step (us) | largest functions (own seconds) |",
        "|---|---|---|---|---|",
    ]
    for c in CATEGORIES:
        row = result["split"][c]
        top = "; ".join(f"`{label}` {t:.2f}" for label, t, _ in row["top"][:3])
        lines.append(f"| {c} | {row['seconds']:.2f} | {100 * row['share']:.1f}% | {1e6 * row['seconds'] / steps:,.1f} | {top} |")
    return "\n".join(lines)


def main(args: Args, command: list[str]) -> int:
    script, flags = script_and_args(command)
    if args.top < 1:
        fail(f"--top must be at least 1, got {args.top}")
    if args.out is not None and not Path(args.out).resolve().parent.is_dir():
        fail(f"--out {args.out}: its folder does not exist")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="profile-split-") as scratch:
        prof = os.path.join(scratch, "span.prof")
        hook = str(ROOT / "benchmark" / "profile_hook.py")
        profiled = run([sys.executable, hook, prof, script, *flags], scratch, env)
        if not os.path.exists(prof):
            fail(f"{command[1]} wrote no profile: it is no script of this project, or its run never started its SPS clock")
        rows = attribute(pstats.Stats(prof).stats)
        span = json.loads(Path(prof + ".json").read_text())
        unprofiled = run([sys.executable, script, *flags], scratch, env) if args.unprofiled else None
    result = {
        "command": " ".join(["python", os.path.relpath(script, ROOT) if Path(script).is_relative_to(ROOT) else script, *flags]),
        "span": {"first_step": span["first_step"], "last_step": span["last_step"], "seconds": round(span["seconds"], 3)},
        "profiled_seconds": round(profiled, 2),
        "unprofiled_seconds": None if unprofiled is None else round(unprofiled, 2),
        "split": split(rows, args.top, span["seconds"]),
    }
    print(table(result), flush=True)
    if args.out is not None:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def parse(argv: list[str]) -> tuple[Args, list[str]]:
    own, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    return tyro.cli(Args, args=own), command


if __name__ == "__main__":
    sys.exit(main(*parse(sys.argv[1:])))
