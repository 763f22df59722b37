# docs: docs/rl-algorithms/ppo-multigpu.md
"""Weak scaling of cleanrl/ppo_atari_multigpu.py: throughput at 1, 2, ... ranks with the envs per rank fixed.

For each rank count N, in rounds that alternate over the counts (so load noise on a shared machine hits
all counts alike), this runs
    python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=N cleanrl/ppo_atari_multigpu.py
        --num-envs N*E --total-timesteps ITERATIONS*N*E*NUM_STEPS ...
in a scratch working directory and reads the run's TensorBoard event file (the script is never imported):
- SPS: global environment steps per second between the end of the second iteration and the end of the last
  one, from the wall times of the charts/SPS events (the script logs no SPS for its first, warm-up iteration,
  which holds process-group start, compilation, CUDA and allocator warm-up). The script's own last charts/SPS
  is kept as well.
Reported: the median over rounds for each N, the ratio SPS(N) / SPS(1) (ideal: N) and the efficiency ratio / N.
On a machine with at least max(--ranks) GPUs every rank takes its own GPU (the script picks it from
LOCAL_RANK); without GPUs (or with --no-cuda) the ranks share the CPU cores and talk over gloo.
Flags after `--` go to the script unchanged.

Run:
    python benchmark/ppo_atari_multigpu_scaling.py --ranks 1 2
    python benchmark/ppo_atari_multigpu_scaling.py --ranks 1 2 --no-cuda -- --env-backend gymnasium
    python benchmark/ppo_atari_multigpu_scaling.py --ranks 1 2 4 8 --envs-per-rank 8 --iterations 10
    python benchmark/ppo_atari_multigpu_scaling.py --help
"""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmark.kept import scalar_events  # noqa: E402  (tools, not algorithm scripts)
from benchmark.throughput import steady_sps  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "cleanrl" / "ppo_atari_multigpu.py"


@dataclass
class Args:
    ranks: list[int] = field(default_factory=lambda: [1, 2])
    """the rank counts to measure; the first one is the baseline of the ratios"""
    envs_per_rank: int = 4
    """environments per rank, the same at every rank count (weak scaling)"""
    num_steps: int = 128
    """--num-steps of every run"""
    num_minibatches: int = 4
    """--num-minibatches of every run"""
    update_epochs: int = 4
    """--update-epochs of every run"""
    iterations: int = 4
    """PPO iterations per run (at least 3: the script logs no SPS for its warm-up iteration, and the rate is
    measured between the ends of the second and the last iteration)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the Atari game of every run"""
    seed: int = 1
    """the seed of every run"""
    repetitions: int = 1
    """the number of rounds over all rank counts"""
    cuda: bool = True
    """if toggled, every rank uses its own GPU when the machine has enough of them (else CPU with gloo)"""
    out: str = "benchmark/results/ppo_atari_multigpu_scaling"
    """the folder for results.json, results.md and the scratch runs"""
    timeout: float = 1800
    """seconds after which one run is killed (the benchmark then fails)"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def check(args: Args) -> None:
    for name in ("envs_per_rank", "num_steps", "num_minibatches", "update_epochs", "repetitions"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1")
    if args.iterations < 3:
        fail("--iterations must be at least 3 (the first iteration is the script's warm-up and logs no SPS; the "
             "rate is measured from the end of the second)")
    if not args.ranks or min(args.ranks) < 1:
        fail("--ranks must be positive rank counts")
    if (args.envs_per_rank * args.num_steps) % args.num_minibatches != 0:
        fail("--envs-per-rank x --num-steps must divide into --num-minibatches")
    import torch

    gpus = torch.cuda.device_count()
    if args.cuda and 0 < gpus < max(args.ranks):
        fail(f"{max(args.ranks)} ranks need {max(args.ranks)} GPUs, this machine has {gpus}; add --no-cuda")


def read_sps(run_dir: Path) -> tuple[float, float, int]:
    """(steady SPS between the first and the last charts/SPS event, the script's last charts/SPS, number of events).

    The script logs no SPS for its warm-up iteration, so the first event is the end of the second iteration."""
    events = scalar_events(run_dir, "charts/SPS")
    if not events:
        fail(f"{run_dir} has no charts/SPS scalar")
    if len(events) < 2:
        fail(f"{run_dir} logged {len(events)} iteration(s); at least 2 are needed")
    steady = steady_sps(events)
    if steady is None:
        fail(f"{run_dir}: its charts/SPS events carry no time between them")
    return steady, float(events[-1][2]), len(events)


def run_once(args: Args, script_args: list[str], nproc: int, work: Path) -> dict:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    num_envs = nproc * args.envs_per_rank
    total = args.iterations * num_envs * args.num_steps
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc_per_node={nproc}",
        str(SCRIPT), "--env-id", args.env_id, "--seed", str(args.seed), "--num-envs", str(num_envs),
        "--num-steps", str(args.num_steps), "--num-minibatches", str(args.num_minibatches),
        "--update-epochs", str(args.update_epochs), "--total-timesteps", str(total),
        *([] if args.cuda else ["--no-cuda"]), *script_args,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", WANDB_MODE="offline")
    log = work / "log.txt"
    start = time.time()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=work, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout)
    seconds = time.time() - start
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        fail(f"{' '.join(cmd)} exited {proc.returncode} (log {log}):\n{tail}")
    run_dirs = [p for p in (work / "runs").iterdir() if p.is_dir()]
    if len(run_dirs) != 1:
        fail(f"expected one run directory in {work / 'runs'} (rank 0 alone writes), found {run_dirs}")
    steady, last, logged = read_sps(run_dirs[0])
    if logged != args.iterations - 1:
        fail(f"{run_dirs[0]} logged SPS for {logged} iterations, expected {args.iterations - 1} (all but the warm-up)")
    return {"sps": steady, "script_sps": last, "process_seconds": seconds, "command": " ".join(cmd[1:])}


def machine_description() -> str:
    import torch

    cpu = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [l.split(":", 1)[1].strip() for l in cpuinfo.read_text().splitlines() if l.startswith("model name")]
        cpu = names[0] if names else cpu
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{os.cpu_count()} x {cpu}; " + (f"{len(gpus)} x {gpus[0]}" if gpus else "no GPU") + f"; torch {torch.__version__}"


def main(args: Args, script_args: list[str]) -> dict:
    check(args)
    out = ROOT / args.out if not Path(args.out).is_absolute() else Path(args.out)
    runs: dict[int, list[dict]] = {n: [] for n in args.ranks}
    for rep in range(args.repetitions):
        for n in args.ranks:
            result = run_once(args, script_args, n, out / "work" / f"ranks{n}_rep{rep}")
            runs[n].append(result)
            print(f"round {rep + 1}/{args.repetitions}, {n} rank(s): {result['sps']:.1f} SPS", flush=True)
    base = args.ranks[0]
    median = {n: statistics.median(r["sps"] for r in runs[n]) for n in args.ranks}
    summary = {
        str(n): {
            "sps_median": median[n],
            "ratio": median[n] / median[base],
            "efficiency": median[n] / median[base] / (n / base),
            "runs": runs[n],
        }
        for n in args.ranks
    }
    report = {
        "machine": machine_description(),
        "args": vars(args),
        "script_args": script_args,
        "baseline_ranks": base,
        "results": summary,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"Weak scaling of ppo_atari_multigpu.py on {report['machine']}",
        f"({args.envs_per_rank} envs per rank, {args.num_steps} steps, {args.num_minibatches} minibatches, "
        f"{args.update_epochs} epochs, {args.iterations} iterations, {args.env_id}, {args.repetitions} round(s))",
        "",
        f"| ranks | SPS (median) | SPS / SPS({base} rank{'s' if base > 1 else ''}) | efficiency |",
        "|---|---|---|---|",
    ]
    for n in args.ranks:
        s = summary[str(n)]
        lines.append(f"| {n} | {s['sps_median']:.1f} | {s['ratio']:.2f} | {s['efficiency']:.2f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return report


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    main(tyro.cli(Args, args=argv[:cut]), argv[cut + 1 :])
