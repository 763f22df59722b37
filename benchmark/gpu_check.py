# docs: docs/benchmark.md
"""The GPU check: one command that, on a machine with a CUDA GPU, runs in at most --minutes (7.5 by default, so that
one call of the device tool, the install of the carried packages included, stays under 8 minutes)
1. the CUDA parity tests (tests/test_cuda.py): --compile --cudagraphs against the plain CUDA path, --amp on CUDA,
   and a 1-process NCCL run of ppo_atari_multigpu.py;
2. the GPU throughput table (benchmark/throughput.py --cuda: plain, compile+cudagraphs and with amp for the CNN
   scripts; by default c51_atari, the script of the amp comparison that takes the least time, as the speed anchor
   times the others a GPU matters most for; --scripts names others), which writes its rows as they finish;
3. the speed anchor (benchmark/speed_anchor.py: ours plain and --compile --cudagraphs next to LeanRL's compiled
   SAC, TD3 and PPO scripts over the same windows, and our CUDA graph launches, syncs and host copies per step from
   torch.profiler), a tool of its own because it runs another project's scripts in their own environment, profiles
   ours and fits its runs into its share of the time itself, here with the shorter windows of ANCHOR_FLAGS; it needs
   LeanRL's snapshot and packages (benchmark/device_env.py) and says in its table why a LeanRL row could not run
   (its Atari script: envpool is too large to carry);
and writes everything to one folder (STEP_FILES):

    <out>/machine.json          GPU, driver, torch and CUDA versions, and where our key packages come from
    <out>/<step>.log            each step's output
    <out>/cuda-tests.xml        the tests' JUnit report
    <out>/speed-gpu/            results.json and results.md of the throughput table, its runs in work/
    <out>/speed-anchor/         results.json and results.md of the speed anchor, its runs in work/, and Inductor's
                                cache and LeanRL's unpacked numpy (inductor-cache/, leanrl-unpacked/: not packed)
    <out>/summary.md / .json    every step: command, exit code, seconds, share and time limit, the last lines of its
                                log; and every file the check wrote

With --pack DIR (the device tool's $OUT, which brings back at most 8 files) it also writes, after every step,
DIR/summary.md and DIR/gpu-check.tar.gz (the folder without the caches), so a check cut short keeps what it did.

Each step has its share of the time (STEP_WEIGHTS, among the steps chosen, of 95% of --minutes; the rest is kept for
stopping a step and writing the summary) and also gets the time the steps before it left unused; it is stopped when
it overruns (the tables keep their finished rows). Without CUDA it refuses in one line before writing anything.

Run:
    python benchmark/gpu_check.py --out benchmark/results/gpu-check
    python benchmark/gpu_check.py --dry-run
    python benchmark/gpu_check.py --steps throughput --scripts ppo dqn c51 ddpg_continuous_action --out gpu-table-2
    python benchmark/gpu_check.py --steps speed-anchor --out benchmark/results/gpu-anchor     # the anchor alone
On the device tool, the call benchmark/device_env.py prints (docs/speed.md, "On a GPU").
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.speed_anchor import DEFAULT_SCRIPTS as ANCHOR_SCRIPTS  # noqa: E402  (tools, not algorithm scripts)
from benchmark.throughput import SPECS  # noqa: E402

# the table's rows by default: c51_atari, whose plain, compiled, amp and raw env runs took 48 s on one H200
# (docs/benchmark/throughput-gpu.json, 2026-12-04); the speed anchor times sac, td3, ppo_continuous_action and
# ppo_atari, the other scripts a GPU matters most for
TABLE_SCRIPTS = ["c51_atari"]
StepName = Literal["cuda-tests", "throughput", "speed-anchor"]
STEPS: list[StepName] = ["cuda-tests", "throughput", "speed-anchor"]
# Each step's weight: the steps chosen share 95% of --minutes in these proportions (of 7.5 minutes: 115, 51 and
# 261 s), from what each took or is expected to take on one H100 or H200; none of the three has yet run there as it
# is now, so these are estimates:
# - cuda-tests: 18 of its 20 tests run (ppg_procgen's 2 skip without envpool); 9 of them took 92 s in 4 processes on
#   an H200 (2026-12-04), so 18 in --test-workers 8 about 90-110 s;
# - throughput: c51_atari's four runs took 48 s there (TABLE_SCRIPTS);
# - speed-anchor: by its own estimates (benchmark/speed_anchor.py ESTIMATE_*, with ANCHOR_FLAGS) its parallel
#   profiled and cache-filling runs take about 2 min, then each pair of compiled runs (ours, LeanRL's) about 1 min:
#   SAC's and TD3's pairs fit its share, PPO's also when the steps before leave 70 s unused; the runs that do not fit
#   say so in its table.
STEP_WEIGHTS = {"cuda-tests": 0.27, "throughput": 0.12, "speed-anchor": 0.61}
# the speed anchor's windows inside the check (its own defaults are longer: about 10.5 min): 1,000 measured
# off-policy steps and 3 PPO iterations after the same warm-up, one PPO iteration between the profiled runs, and
# half its time for the parallel runs (their expected 2 min)
ANCHOR_FLAGS = ["--offpolicy-measured", "1000", "--ppo-measured", "3", "--profile-iterations", "1",
                "--profile-share", "0.5"]  # fmt: skip
# seconds of a speed-anchor step kept back from the tool's own --minutes, for writing its table after its last run
ANCHOR_MARGIN_S = 20
# what each step writes into the check's folder (besides <step>.log), and what the check writes itself
STEP_FILES = {
    "cuda-tests": ["cuda-tests.xml"],
    "throughput": ["speed-gpu/results.json", "speed-gpu/results.md",
                   "speed-gpu/work/<script>/<run>/ (logs, event files)"],
    "speed-anchor": ["speed-anchor/results.json", "speed-anchor/results.md",
                     "speed-anchor/work/<script>/<run>/ (logs, event files, marks.json, profile counts)",
                     "speed-anchor/inductor-cache/, speed-anchor/leanrl-unpacked/ (not packed)"],
}  # fmt: skip
CHECK_FILES = ["machine.json", "summary.md", "summary.json"]  # the summary also names every other file
PACKED = ["summary.md", "gpu-check.tar.gz"]  # with --pack DIR: what goes into DIR
NOT_PACKED = ("inductor-cache", "leanrl-unpacked")  # caches any run rebuilds: large, and of no use elsewhere
PACK_MAX_MIB = 8  # a larger file stays out of the archive (the device tool brings back 16 MiB a file)
PACK_TOTAL_MIB = 12  # the archive's files in all, the smallest first


@dataclass
class Args:
    out: str = "benchmark/results/gpu-check"
    """the folder for every result of the check (must not exist yet)"""
    minutes: float = 7.5
    """the time limit of the whole check: each step gets its share (STEP_WEIGHTS) and what the steps before it left"""
    steps: list[StepName] = field(default_factory=lambda: list(STEPS))
    """the steps to run, in this order"""
    scripts: list[str] = field(default_factory=lambda: list(TABLE_SCRIPTS))
    """the scripts of the throughput table (names of benchmark/throughput.py --scripts)"""
    anchor_scripts: list[str] = field(default_factory=lambda: list(ANCHOR_SCRIPTS))
    """the rows of the speed anchor (benchmark/speed_anchor.py --scripts)"""
    leanrl: str = "benchmark/results/leanrl"
    """the speed anchor's LeanRL snapshot (benchmark/speed_anchor.py --leanrl)"""
    leanrl_env: str = "benchmark/results/leanrl-env"
    """the speed anchor's LeanRL packages (benchmark/speed_anchor.py --leanrl-env)"""
    test_workers: int = 8
    """test processes for the CUDA tests (pytest-xdist's -n; 0 runs them in one process): each test compares two
    runs of its own, and the GPU has room for several at once"""
    pack: Optional[str] = None
    """if set, a folder for summary.md and gpu-check.tar.gz (the check's folder without its caches), written after
    every step: the device tool's $OUT"""
    dry_run: bool = False
    """if toggled, print the steps with their shares, time limits, commands and files, and run nothing"""


@dataclass
class Step:
    name: str
    command: list[str]
    seconds: float  # its time limit
    minutes_flag: Optional[str] = None  # a flag of the command that bounds it in minutes, set to fit `seconds`
    share: float = 0.0  # its part of the steps' time

    def fit(self, seconds: float) -> None:
        """Set the time limit, and the command's own bound to it less ANCHOR_MARGIN_S."""
        self.seconds = seconds
        if self.minutes_flag:
            i = self.command.index(self.minutes_flag) + 1
            self.command[i] = f"{max(seconds - ANCHOR_MARGIN_S, 30) / 60:.2f}"


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def plan(out: Path, minutes: float, test_workers: int = 8, scripts: tuple[str, ...] = tuple(TABLE_SCRIPTS),
         steps: tuple[str, ...] = tuple(STEPS), anchor_scripts: tuple[str, ...] = tuple(ANCHOR_SCRIPTS),
         leanrl: str = "benchmark/results/leanrl", leanrl_env: str = "benchmark/results/leanrl-env") -> list[Step]:
    total, weights = 0.95 * minutes * 60, sum(STEP_WEIGHTS[name] for name in steps)
    seconds = {name: total * STEP_WEIGHTS[name] / weights for name in steps}
    # one table run is killed by the tool itself before the step's limit could cut it short
    run_timeout = max(30, min(120, round(0.8 * seconds.get("throughput", 0))))
    commands = {
        "cuda-tests": [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-p", "no:cacheprovider", "-n",
                       str(test_workers), "-q", "-rA", "--junitxml", str(out / "cuda-tests.xml")],
        "throughput": [sys.executable, "benchmark/throughput.py", "--cuda", "--scripts", *scripts, "--variants",
                       "compile+cudagraphs", "compile+cudagraphs+amp", "--no-sb3", "--rounds", "1", "--raw-seconds", "2",
                       "--budget-scale", "0.5", "--timeout", str(run_timeout), "--out", str(out / "speed-gpu")],
        "speed-anchor": [sys.executable, "benchmark/speed_anchor.py", "--scripts", *anchor_scripts, "--leanrl", leanrl,
                         "--leanrl-env", leanrl_env, *ANCHOR_FLAGS, "--minutes", "0",
                         "--out", str(out / "speed-anchor")],
    }  # fmt: skip
    plan = []
    for name in steps:
        step = Step(name, commands[name], 0, "--minutes" if name == "speed-anchor" else None, seconds[name] / total)
        step.fit(seconds[name])
        plan.append(step)
    return plan


def limit(steps: list[Step], i: int, elapsed: float, budget: float) -> float:
    """Step i's time limit: its share, and what the steps before it left of the budget (the later ones keep theirs)."""
    return max(steps[i].seconds, budget - elapsed - sum(s.seconds for s in steps[i + 1 :]))


def run_step(step: Step, out: Path) -> dict:
    """Run one step with its output in <out>/<name>.log; past its time limit its process group is stopped."""
    log = out / f"{step.name}.log"
    start = time.time()
    with open(log, "w") as f:
        f.write("$ " + shlex.join(step.command) + "\n")
        f.flush()
        proc = subprocess.Popen(step.command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code, note = proc.wait(timeout=step.seconds), ""
        except subprocess.TimeoutExpired:
            # SIGINT: pytest and the throughput tool stop their runs on KeyboardInterrupt (the tool's runs live in
            # sessions of their own, which a signal to this group would not reach); the table's finished rows are
            # already written
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code, note = proc.returncode, f"stopped at its time limit of {step.seconds:.0f} s"
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    tail = log.read_text(errors="replace").splitlines()[-8:]
    return {"step": step.name, "command": shlex.join(step.command), "exit_code": code, "seconds": round(time.time() - start, 1),
            "share": round(step.share, 3), "limit_seconds": round(step.seconds), "note": note, "log": log.name,
            "tail": tail}  # fmt: skip


SUMMARY = ["summary.md", "summary.json"]


def written(out: Path) -> list[dict]:
    """Every file in the check's folder but SUMMARY (path, bytes, packed or why not); each cache folder as one entry."""
    files = []
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if str(rel) in SUMMARY:
            continue
        cache = next((p for p in rel.parents if p.name in NOT_PACKED), None)
        if path.is_dir() and path.name in NOT_PACKED:
            inside = [p for p in path.rglob("*") if p.is_file()]
            files.append({"path": f"{rel}/", "bytes": sum(p.stat().st_size for p in inside), "files": len(inside),
                          "packed": False, "why": "a cache"})  # fmt: skip
        elif path.is_file() and not path.is_symlink() and cache is None:
            size = path.stat().st_size
            big = size > PACK_MAX_MIB * 2**20
            why = f"over {PACK_MAX_MIB} MiB" if big else ""
            files.append({"path": str(rel), "bytes": size, "packed": not big, "why": why})
    total = 0
    for f in sorted((f for f in files if f["packed"]), key=lambda f: f["bytes"]):
        total += f["bytes"]
        if total > PACK_TOTAL_MIB * 2**20:
            f.update(packed=False, why=f"the archive's {PACK_TOTAL_MIB} MiB were full")
    return files


def steps_table(results: list[dict]) -> list[str]:
    lines = ["| step | exit | seconds | share | limit | note | log |", "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['step']} | {r['exit_code']} | {r['seconds']} | {r.get('share', 0):.0%} | {r['limit_seconds']} | "
                     f"{r['note']} | {r['log']} |")  # fmt: skip
    return lines


def write_summary(out: Path, machine: dict, results: list[dict]) -> None:
    files = written(out)
    (out / "summary.json").write_text(json.dumps({"machine": machine, "steps": results, "files": files}, indent=2) + "\n")
    lines = [f"GPU check on {machine.get('gpu', '?')}, torch {machine.get('torch', '?')}, CUDA {machine.get('cuda', '?')}"]
    lines += ["", "Packages: " + ", ".join(f"{k} {v}" for k, v in machine.get("packages", {}).items()), ""]
    lines += steps_table(results)
    for r in results:
        lines += ["", f"{r['step']}: `{r['command']}`", "", "```", *r["tail"], "```"]
    lines += ["", "Files besides summary.md and summary.json (with --pack in gpu-check.tar.gz, but those marked):", ""]
    for f in files:
        what = f"{f['files']} files, " if "files" in f else ""
        left_out = "" if f["packed"] else f": not packed, {f['why']}"
        lines.append(f"- {f['path']} ({what}{f['bytes'] / 2**20:.2f} MiB){left_out}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def pack(out: Path, into: Path) -> None:
    """summary.md, and gpu-check.tar.gz of every packed file (written()), into `into`; the archive replaces the last
    one only once it is whole."""
    into.mkdir(parents=True, exist_ok=True)
    part = out.parent / f"{out.name}.tar.gz.part"
    with tarfile.open(part, "w:gz") as tar:
        for path in [*SUMMARY, *(f["path"] for f in written(out) if f["packed"])]:
            tar.add(out / path, arcname=f"{out.name}/{path}")
    part.replace(into / "gpu-check.tar.gz")
    shutil.copyfile(out / "summary.md", into / "summary.md")


PACKAGES = ["numpy", "gymnasium", "mujoco", "ale_py", "cv2", "tensorboard", "pytest", "xdist", "tyro", "envpool"]


def package_versions() -> dict:
    """Each of our key modules: its version and folder, as this Python finds them (the carried ones in PYTHONPATH)."""
    import importlib

    found = {}
    for name in PACKAGES:
        try:
            module = importlib.import_module(name)
        except Exception as e:  # a module that is missing or fails to import: its row says which
            found[name] = f"missing ({type(e).__name__})"
            continue
        where = Path(getattr(module, "__file__", None) or "?").parent.parent
        found[name] = f"{getattr(module, '__version__', '?')} ({where})"
    return found


def machine() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    driver = subprocess.run(smi, capture_output=True, text=True, check=False).stdout.strip() if shutil.which(smi[0]) else ""
    return {"gpu": f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.0f} GiB)", "torch": torch.__version__,
            "cuda": torch.version.cuda, "driver": driver or "unknown", "packages": package_versions()}  # fmt: skip


def print_plan(steps: list[Step], args: Args) -> None:
    print(f"the GPU check in at most {args.minutes:g} min; the steps share {0.95 * args.minutes * 60:.0f} s, each also "
          "getting the time the steps before it leave unused:")  # fmt: skip
    for s in steps:
        print(f"{s.name} ({s.share:.0%} of the steps' time, at most {s.seconds:.0f} s): {shlex.join(s.command)}")
        print(f"    writes {s.name}.log, " + ", ".join(STEP_FILES[s.name]))
        if s.name == "speed-anchor":  # its runs, their commands and expected seconds
            proc = subprocess.run([*s.command, "--dry-run"], cwd=ROOT, capture_output=True, text=True, check=False)
            print("\n".join("    " + line for line in (proc.stdout + proc.stderr).splitlines()))
            if proc.returncode != 0:
                fail(f"the speed anchor refused its arguments (exit {proc.returncode}, above)")
    print(f"the check writes {', '.join(CHECK_FILES)} into {args.out}"
          + (f", and after every step {' and '.join(PACKED)} into {args.pack}" if args.pack else ""))


def main(args: Args) -> int:
    out = Path(args.out).resolve()
    if not args.minutes > 0:
        fail(f"--minutes must be above 0, got {args.minutes}")
    if args.test_workers < 0:
        fail(f"--test-workers must be 0 or more, got {args.test_workers}")
    unknown = [s for s in args.scripts if s not in SPECS]
    if unknown or not args.scripts:
        fail(f"--scripts {' '.join(unknown) or '(none)'}: the table knows {' '.join(SPECS)}")
    if not args.steps or len(set(args.steps)) != len(args.steps):
        fail(f"--steps must name each step at most once, and at least one: got {' '.join(args.steps) or '(none)'}")
    steps = plan(out, args.minutes, args.test_workers, tuple(args.scripts), tuple(args.steps), tuple(args.anchor_scripts),
                 str(Path(args.leanrl).absolute()), str(Path(args.leanrl_env).absolute()))  # fmt: skip
    if args.dry_run:
        print_plan(steps, args)
        return 0
    import torch

    if not torch.cuda.is_available():
        fail("no CUDA device (torch.cuda.is_available() is False): run the GPU check on a machine with an NVIDIA GPU")
    if out.exists():
        fail(f"{out} exists; give the check a new --out folder")
    out.mkdir(parents=True)
    info = machine()
    (out / "machine.json").write_text(json.dumps(info, indent=2) + "\n")
    results = []
    start, budget = time.time(), 0.95 * args.minutes * 60
    for i, step in enumerate(steps):
        step.fit(limit(steps, i, time.time() - start, budget))
        print(f"[{step.name}] at most {step.seconds:.0f} s: {shlex.join(step.command)}", flush=True)
        results.append(run_step(step, out))
        write_summary(out, info, results)  # after every step, so a check cut short keeps what it did
        if args.pack:
            pack(out, Path(args.pack))
        r = results[-1]
        print(f"[{step.name}] exit {r['exit_code']} after {r['seconds']} s {r['note']}".rstrip(), flush=True)
    print(f"wrote {out}/summary.md" + (f"; packed it and gpu-check.tar.gz into {args.pack}" if args.pack else ""))
    print("\n".join(steps_table(results)))  # for the device tool's output
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
