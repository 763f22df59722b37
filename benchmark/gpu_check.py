# docs: docs/benchmark.md
"""The GPU check: one command that, on a machine with a CUDA GPU, runs in at most --minutes (8 by default)
1. the CUDA parity tests (tests/test_cuda.py): --compile --cudagraphs against the plain CUDA path, --amp on CUDA,
   and a 1-process NCCL run of ppo_atari_multigpu.py;
2. the GPU throughput table (benchmark/throughput.py --cuda: plain, compile+cudagraphs and with amp for the CNN
   scripts; by default for the five scripts where a GPU matters most, --scripts names others), which writes its
   rows as they finish;
3. with --steps speed-anchor: the speed anchor (benchmark/speed_anchor.py: ours plain and --compile --cudagraphs next to
   LeanRL's compiled scripts, and our CUDA graph launches, syncs and host copies per step from torch.profiler), a
   tool of its own because it runs another project's scripts in their own environment, profiles ours and fits its
   runs into its share of the time itself; it needs LeanRL's snapshot and packages (benchmark/device_env.py) and
   says in its table why a LeanRL row could not run;
and writes everything to one folder:

    <out>/machine.json          GPU, driver, torch and CUDA versions
    <out>/<step>.log            each step's output
    <out>/cuda-tests.xml        the tests' JUnit report
    <out>/speed-gpu/            results.json and results.md of the throughput table
    <out>/speed-anchor/         results.json and results.md of the speed anchor (with --steps speed-anchor)
    <out>/summary.md / .json    every step: command, exit code, seconds, time limit, and the last lines of its log

Each step has its share of the time limit (STEP_WEIGHTS, among the steps chosen) and is stopped when it overruns (the
tables keep their finished rows); the last step also gets the time the others left unused. Without CUDA it refuses in
one line before writing anything. Then `python benchmark/make_docs.py --throughput <out>/speed-gpu/results.json` puts
the table on the benchmark page.

Run:
    python benchmark/gpu_check.py --out benchmark/results/gpu-check
    python benchmark/gpu_check.py --dry-run
    python benchmark/gpu_check.py --out gpu-check-2 --scripts ppo dqn c51 c51_atari ddpg_continuous_action
    python benchmark/gpu_check.py --steps speed-anchor --out benchmark/results/gpu-anchor     # the anchor alone
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.speed_anchor import DEFAULT_SCRIPTS as ANCHOR_SCRIPTS  # noqa: E402  (tools, not algorithm scripts)
from benchmark.throughput import SPECS  # noqa: E402

# the table's rows by default: the scripts a GPU matters most for
TABLE_SCRIPTS = ["ppo_atari", "ppo_continuous_action", "sac_continuous_action", "td3_continuous_action", "dqn_atari"]
# each step's weight: the steps chosen share 95% of --minutes in these proportions (the default two: 45% and 50%)
STEP_WEIGHTS = {"cuda-tests": 0.45, "throughput": 0.5, "speed-anchor": 0.95}
StepName = Literal["cuda-tests", "throughput", "speed-anchor"]
# seconds of a speed-anchor step kept back from the tool's own --minutes, for writing its table after its last run
ANCHOR_MARGIN_S = 20


@dataclass
class Args:
    out: str = "benchmark/results/gpu-check"
    """the folder for every result of the check (must not exist yet)"""
    minutes: float = 8.0
    """the time limit of the whole check: the default steps get 45% (tests) and 50% (throughput table, also whatever
    the tests left unused); see STEP_WEIGHTS for other --steps"""
    steps: list[StepName] = field(default_factory=lambda: ["cuda-tests", "throughput"])
    """the steps to run, in this order"""
    scripts: list[str] = field(default_factory=lambda: list(TABLE_SCRIPTS))
    """the scripts of the throughput table (names of benchmark/throughput.py --scripts)"""
    anchor_scripts: list[str] = field(default_factory=lambda: list(ANCHOR_SCRIPTS))
    """the rows of the speed anchor (benchmark/speed_anchor.py --scripts)"""
    leanrl: str = "benchmark/results/leanrl"
    """the speed anchor's LeanRL snapshot (benchmark/speed_anchor.py --leanrl)"""
    leanrl_env: str = "benchmark/results/leanrl-env"
    """the speed anchor's LeanRL packages (benchmark/speed_anchor.py --leanrl-env)"""
    test_workers: int = 4
    """test processes for the CUDA tests (pytest-xdist's -n; 0 runs them in one process): each test compares two
    runs of its own, and the GPU has room for several at once"""
    dry_run: bool = False
    """if toggled, print the steps with their commands and time limits, and run nothing"""


@dataclass
class Step:
    name: str
    command: list[str]
    seconds: float  # its time limit
    minutes_flag: Optional[str] = None  # a flag of the command that bounds it in minutes, set to fit `seconds`

    def fit(self, seconds: float) -> None:
        """Set the time limit, and the command's own bound to it less ANCHOR_MARGIN_S."""
        self.seconds = seconds
        if self.minutes_flag:
            i = self.command.index(self.minutes_flag) + 1
            self.command[i] = f"{max(seconds - ANCHOR_MARGIN_S, 30) / 60:.2f}"


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def plan(out: Path, minutes: float, test_workers: int = 4, scripts: tuple[str, ...] = tuple(TABLE_SCRIPTS),
         steps: tuple[str, ...] = ("cuda-tests", "throughput"), anchor_scripts: tuple[str, ...] = tuple(ANCHOR_SCRIPTS),
         leanrl: str = "benchmark/results/leanrl", leanrl_env: str = "benchmark/results/leanrl-env") -> list[Step]:
    total, weights = minutes * 60, sum(STEP_WEIGHTS[name] for name in steps)
    commands = {
        "cuda-tests": [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-p", "no:cacheprovider", "-n",
                       str(test_workers), "-q", "-rA", "--junitxml", str(out / "cuda-tests.xml")],
        "throughput": [sys.executable, "benchmark/throughput.py", "--cuda", "--scripts", *scripts, "--variants",
                       "compile+cudagraphs", "compile+cudagraphs+amp", "--no-sb3", "--rounds", "1", "--raw-seconds", "2",
                       "--budget-scale", "0.5", "--timeout", "120", "--out", str(out / "speed-gpu")],
        "speed-anchor": [sys.executable, "benchmark/speed_anchor.py", "--scripts", *anchor_scripts, "--leanrl", leanrl,
                         "--leanrl-env", leanrl_env, "--minutes", "0", "--out", str(out / "speed-anchor")],
    }  # fmt: skip
    plan = []
    for name in steps:
        step = Step(name, commands[name], 0, "--minutes" if name == "speed-anchor" else None)
        step.fit(0.95 * total * STEP_WEIGHTS[name] / weights)
        plan.append(step)
    return plan


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
            "limit_seconds": round(step.seconds), "note": note, "log": log.name, "tail": tail}  # fmt: skip


def write_summary(out: Path, machine: dict, results: list[dict]) -> None:
    (out / "summary.json").write_text(json.dumps({"machine": machine, "steps": results}, indent=2) + "\n")
    lines = [f"GPU check on {machine.get('gpu', '?')}, torch {machine.get('torch', '?')}, CUDA {machine.get('cuda', '?')}", ""]
    lines += ["| step | exit | seconds | limit | note | log |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['step']} | {r['exit_code']} | {r['seconds']} | {r['limit_seconds']} | {r['note']} | {r['log']} |")
    for r in results:
        lines += ["", f"{r['step']}: `{r['command']}`", "", "```", *r["tail"], "```"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def machine() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=False)
    return {"gpu": f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.0f} GiB)", "torch": torch.__version__,
            "cuda": torch.version.cuda, "driver": smi.stdout.strip() or "unknown"}  # fmt: skip


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
        for s in steps:
            print(f"{s.name} (at most {s.seconds:.0f} s): {shlex.join(s.command)}")
            if s.name == "speed-anchor":  # its runs, their commands and expected seconds
                proc = subprocess.run([*s.command, "--dry-run"], cwd=ROOT, capture_output=True, text=True, check=False)
                print("\n".join("    " + line for line in (proc.stdout + proc.stderr).splitlines()))
                if proc.returncode != 0:
                    fail(f"the speed anchor refused its arguments (exit {proc.returncode}, above)")
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
    start = time.time()
    for i, step in enumerate(steps):
        if i == len(steps) - 1:  # the last step also gets the time the steps before it left unused
            step.fit(max(step.seconds, args.minutes * 60 - (time.time() - start) - 5))
        print(f"[{step.name}] at most {step.seconds:.0f} s: {shlex.join(step.command)}", flush=True)
        results.append(run_step(step, out))
        write_summary(out, info, results)  # after every step, so a check cut short keeps what it did
        r = results[-1]
        print(f"[{step.name}] exit {r['exit_code']} after {r['seconds']} s {r['note']}".rstrip(), flush=True)
    print(f"wrote {out}/summary.md")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
