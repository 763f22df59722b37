# docs: docs/benchmark.md
"""Regenerate docs/benchmark.md and its figures on this machine, with one command.

Steps (each printed before it runs):
1. small learning benchmarks with benchmark/run.py (resumable: finished runs are kept) of ppo.py and dqn.py on
   CartPole-v1 and Acrobot-v1, 3 seeds, --total-timesteps each, into benchmark/results/docs/;
2. benchmark/report.py comparing the two result folders on the same axes; the figures (PNG and SVG) and CSV tables
   are copied to docs/benchmark/;
3. benchmark/throughput.py (ours vs Stable-Baselines3 vs raw env) for the algorithms whose scripts exist, unless
   --no-throughput, which reuses benchmark/results/throughput/results.json;
4. docs/benchmark.md written from the tables, with the commands and the machine description.

Run:
    python benchmark/make_docs.py
    python benchmark/make_docs.py --no-throughput
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.throughput import SPECS, machine_description  # noqa: E402  (a tool, not an algorithm script)

SCRIPTS = [
    "ppo", "ppo_continuous_action", "ppo_atari", "ppo_atari_multigpu", "dqn", "c51", "dqn_atari", "c51_atari",
    "ddpg_continuous_action", "td3_continuous_action", "sac_continuous_action", "ppg_procgen",
]  # fmt: skip


@dataclass
class Args:
    total_timesteps: int = 100_000
    """the budget of each learning-curve run"""
    env_ids: list[str] = field(default_factory=lambda: ["CartPole-v1", "Acrobot-v1"])
    """the environments of the learning curves"""
    algos: list[str] = field(default_factory=lambda: ["ppo", "dqn"])
    """the scripts compared in the learning curves (cleanrl/<algo>.py)"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """the seeds of the learning curves"""
    workers: int = 2
    """parallel runs of the learning benchmark"""
    throughput: bool = True
    """if toggled, run benchmark/throughput.py; else reuse benchmark/results/throughput/results.json"""
    throughput_algos: list[str] = field(default_factory=lambda: ["ppo", "dqn", "ppo_continuous_action", "td3", "sac"])
    """the algorithms of the throughput table (those whose script is missing are left out and named)"""
    repetitions: int = 2
    """alternating rounds of the throughput benchmark"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def sh(cmd: list[str]) -> None:
    print("$ " + shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0:
        fail(f"{shlex.join(cmd)} exited {proc.returncode}")


def main(args: Args) -> None:
    results = Path("benchmark/results/docs")
    report_dir = results / "report"
    figures = ROOT / "docs/benchmark"
    commands = []

    # 1. learning curves
    for algo in args.algos:
        cmd = ["python", "benchmark/run.py", "--env-ids", *args.env_ids, "--seeds", *map(str, args.seeds),
               "--workers", str(args.workers), "--out", str(results),
               "--", "python", f"cleanrl/{algo}.py", "--total-timesteps", str(args.total_timesteps)]  # fmt: skip
        sh([sys.executable, *cmd[1:]])
        commands.append(shlex.join(cmd))
    # 2. report: both scripts on the same axes; the classic-control score ranges as normalization bounds
    bounds = {"CartPole-v1": "0:500", "Acrobot-v1": "-500:0", "MountainCar-v0": "-200:0"}
    cmd = ["python", "benchmark/report.py", "--results", *[str(results / a) for a in args.algos], "--out", str(report_dir),
           "--bounds", *[f"{e}={bounds[e]}" for e in args.env_ids if e in bounds]]  # fmt: skip
    sh([sys.executable, *cmd[1:]])
    commands.append(shlex.join(cmd))
    if figures.exists():
        shutil.rmtree(figures)
    figures.mkdir(parents=True)
    for f in sorted((ROOT / report_dir).iterdir()):
        if f.suffix in (".png", ".svg", ".csv"):
            shutil.copy(f, figures / f.name)
    big = [f.name for f in figures.glob("*.png") if f.stat().st_size > 200_000]
    if big:
        fail(f"figures over 200 KB: {big}")

    # 3. throughput
    present = [a for a in args.throughput_algos if (ROOT / "cleanrl" / SPECS[a]["script"]).is_file()]
    missing = [a for a in args.throughput_algos if a not in present]
    tp_json = ROOT / "benchmark/results/throughput/results.json"
    if args.throughput:
        cmd = ["python", "benchmark/throughput.py", "--algos", *present, "--repetitions", str(args.repetitions)]
        sh([sys.executable, *cmd[1:]])
    if not tp_json.exists():
        fail(f"{tp_json} does not exist; run without --no-throughput")
    throughput = json.loads(tp_json.read_text())
    shutil.copy(tp_json, figures / "throughput.json")

    # 4. the page
    page = render(args, commands, throughput, missing, report_dir)
    (ROOT / "docs/benchmark.md").write_text(page)
    print(f"wrote docs/benchmark.md and {len(list(figures.iterdir()))} files in {figures}")


def render(args: Args, commands: list[str], throughput: dict, missing: list[str], report_dir: Path) -> str:
    summary = (ROOT / report_dir / "summary.md").read_text().strip()
    aggregate = (ROOT / report_dir / "aggregate.md").read_text().strip()
    from benchmark.throughput import markdown

    tp_table = markdown(throughput["results"])
    loads = [x for r in throughput["results"] for x in r.get("load_average", [])]
    load_note = f" The 1-minute load average after the rounds ranged {min(loads)} to {max(loads)} on {os.cpu_count()} cores." if loads else ""
    # only committed scripts: the docs tests parse every included command against its script's CLI
    tracked = subprocess.run(["git", "ls-files", "cleanrl"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    landed = [s for s in SCRIPTS if f"cleanrl/{s}.py" in tracked]
    pending = [s for s in SCRIPTS if s not in landed]
    includes = "\n\n".join(f"`benchmark/{s}.sh`\n\n```bash\n--8<-- \"benchmark/{s}.sh\"\n```" for s in landed)
    env_figs = "\n".join(f"![{e}](benchmark/{e}.png)" for e in args.env_ids)
    gen = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cmds = "\n".join(commands)
    pending_note = f"\n\nScripts not yet committed when this page was generated (their `.sh` exists): {', '.join(pending)}." if pending else ""
    missing_note = f" Not measured (script missing when the page was generated): {', '.join(missing)}." if missing else ""
    return f"""# Benchmark

<!-- generated by `python benchmark/make_docs.py` on {gen}; edit benchmark/make_docs.py, not this file -->

Tools in `benchmark/` run the scripts from the command line and read what they write (TensorBoard event files), so
no W&B account is needed. Everything on this page was produced on this machine by one command:

```bash
python benchmark/make_docs.py
```

Machine: {throughput['machine']}. The machine is shared with other work, so throughput numbers are noisy; the
throughput benchmark alternates the implementations to spread that noise over both.

## Benchmark commands of every script

Each script has one `benchmark/<script>.sh` holding its env ids, seeds, budget and command (included here, not
copied). Arguments after the script name go to the runner, e.g. `bash benchmark/ppo.sh --workers 4`; then
`python benchmark/report.py --results benchmark/results/ppo --out benchmark/report/ppo` draws the curves.

{includes}{pending_note}

## The runner: `benchmark/run.py`

`python benchmark/run.py --env-ids CartPole-v1 Acrobot-v1 --seeds 1 2 3 --workers 2 -- python cleanrl/ppo.py --total-timesteps 100000`
runs the command after `--` with `--env-id ENV --seed K` appended, for every env id and seed, at most `--workers`
at a time (or give `--command "... {{env_id}} ... {{seed}}"` with placeholders).

- Each run has its own working directory `benchmark/results/<script>/<env_id>/seed<k>/` (the script writes its
  `runs/` there), its output streamed to `log.txt` in it.
- A run is finished when its `DONE.json` marker exists; the runner writes it only after exit code 0. Running the same
  command again skips finished runs, so a stopped benchmark resumes; an unfinished attempt is moved to
  `<script>/.incomplete/` (the report ignores it) and run again, which the runner prints. `--no-skip-finished`
  reruns everything.
- Nothing is retried silently: the runner ends with a table of every run (ok, failed, skipped, exit code, seconds),
  names each failed run with its exit code, log path and log tail, and exits 1 if any run failed.
- GPUs come from `CUDA_VISIBLE_DEVICES` or `nvidia-smi -L`; each run gets `--gpus-per-run` of them (least busy first,
  so round-robin) in its `CUDA_VISIBLE_DEVICES`. `--timeout` kills a run that takes too long (it then fails).

## The report: `benchmark/report.py`

`python benchmark/report.py --results benchmark/results/ppo benchmark/results/dqn --labels ppo dqn --out benchmark/report/compare`
reads every run below the result folders and
writes per-env learning curves (PNG and SVG), `curves.png`, `summary.md/csv`, `runs.csv` and `aggregate.md/csv/png`.
Two or more folders (e.g. two versions of a script) are drawn on the same axes.

- Final return of a run: mean `charts/episodic_return` of the episodes that ended in the last 10% of its steps.
  SPS of a run: its last `charts/SPS` (steps / seconds since training started).
- Curves: moving average over 10 episodes, interpolated onto 100 points; line = mean over seeds, band = 95%
  Student-t confidence interval of the mean.
- Aggregate (Agarwal et al. 2021, [Deep RL at the Edge of the Statistical Precipice](https://arxiv.org/abs/2108.13264)):
  normalized score = (final return - low) / (high - low) per env, with `--bounds ENV=LOW:HIGH` (here the envs'
  score ranges: CartPole-v1 0 to 500, Acrobot-v1 -500 to 0), else the min and max over all compared runs. IQM =
  mean of the middle 50% of all (runs x envs) normalized scores; mean and median too; 95% percentile intervals of
  2000 stratified bootstrap replicates (runs resampled with replacement within each env).

## Learning curves on this machine

`ppo.py` and `dqn.py`, {len(args.seeds)} seeds, {args.total_timesteps} steps per run (short budgets that fit this 2-core machine;
the full budgets are in the `.sh` files above). Commands:

```bash
{cmds}
```

![learning curves](benchmark/curves.png)

{summary}

{aggregate}

![aggregate](benchmark/aggregate.png)

Per-env figures: {", ".join(f"[{e}](benchmark/{e}.png) ([svg](benchmark/{e}.svg))" for e in args.env_ids)};
tables: [summary.csv](benchmark/summary.csv), [runs.csv](benchmark/runs.csv), [aggregate.csv](benchmark/aggregate.csv).

## Throughput: ours vs Stable-Baselines3 vs the environment

`benchmark/throughput.py` trains our script and Stable-Baselines3's equivalent on the same env with the same budget and
hyperparameters (same number of envs, rollout and minibatch sizes, epochs, network sizes, learning starts and
update frequencies; the mapping is written next to `SPECS` in the tool), alternating ours, SB3, raw env in each
round. SPS: ours = last `charts/SPS`; SB3 = steps / wall time of `model.learn()`; both exclude imports and model
construction and use one torch thread on CPU. Raw env = gymnasium `SyncVectorEnv` with the same number of envs and
random actions, no learning: the ceiling for training SPS. Values are medians over the rounds.{missing_note}{load_note}
With few rounds on a shared machine the ratios are uncertain by tens of percent (the per-round columns show the
spread; an invocation under heavier load moved some ratios by more than that). The DQN, TD3 and SAC budgets include
their learning-starts steps (10000 and 1000) of random actions without updates.

Stable-Baselines3 lives in its own virtual environment (it is not a dependency of this project):

```bash
python benchmark/throughput.py --setup-sb3-venv benchmark/results/.venv-sb3
```

Command: `{throughput['command']}` (finished {throughput['finished']}; SB3 {throughput['results'][0]['sb3_versions'].get('stable_baselines3', '?')}).

{tp_table}

Raw data: [throughput.json](benchmark/throughput.json).
"""


if __name__ == "__main__":
    main(tyro.cli(Args))
