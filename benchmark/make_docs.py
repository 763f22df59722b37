# docs: docs/benchmark.md
"""Regenerate docs/benchmark.md and its figures on this machine, with one command.

Steps (each printed before it runs):
1. small learning benchmarks with benchmark/run.py (resumable: finished runs are kept) of ppo.py and dqn.py on
   CartPole-v1 and Acrobot-v1, 3 seeds, --total-timesteps each, into benchmark/results/docs/;
2. benchmark/report.py comparing the two result folders on the same axes; the figures (PNG and SVG) and CSV tables
   are copied to docs/benchmark/;
3. benchmark/throughput.py (every script plain and with its speed flags, vs Stable-Baselines3 vs raw env: the whole
   default CPU table, about 35 minutes on an idle 2-core machine) unless --no-throughput, which reuses
   benchmark/results/speed/results.json (or, if there is none, the page says the table is not measured yet);
4. docs/benchmark.md written from the tables, with the commands and the machine description.

Run:
    python benchmark/make_docs.py
    python benchmark/make_docs.py --no-throughput
"""

import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.throughput import FAMILY_ROUNDS, SPECS, budget, machine_description  # noqa: E402  (a tool, not an algorithm script)

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
    """if toggled, run the whole default table of benchmark/throughput.py; else reuse benchmark/results/speed/results.json"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def sh(cmd: list[str], ok: tuple[int, ...] = (0,)) -> None:
    print("$ " + shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode not in ok:
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

    # 3. throughput: the whole default table, one command
    tp_json = ROOT / "benchmark/results/speed/results.json"
    if args.throughput:
        # exit 1: some runs failed; the table shows them as failed and the page names them
        sh([sys.executable, "benchmark/throughput.py"], ok=(0, 1))
    throughput = json.loads(tp_json.read_text()) if tp_json.exists() else None
    if throughput is not None:
        shutil.copy(tp_json, figures / "throughput.json")

    # 4. the page
    page = render(args, commands, throughput, report_dir)
    (ROOT / "docs/benchmark.md").write_text(page)
    print(f"wrote docs/benchmark.md and {len(list(figures.iterdir()))} files in {figures}")


GPU_COMMAND = (
    "python benchmark/throughput.py --cuda --scripts ppo_atari ppo_continuous_action sac_continuous_action "
    "td3_continuous_action dqn_atari --variants compile+cudagraphs compile+cudagraphs+amp --no-sb3 --rounds 1 "
    "--raw-seconds 2 --timeout 200 --out benchmark/results/speed-gpu"
)


def budgets_table() -> str:
    """What the default table runs per script, from SPECS (so the page cannot drift from the tool)."""
    lines = ["| script | env | envs | steps per run | rounds | SB3 | raw env |", "|---|---|---|---|---|---|---|"]
    raw = {"sync": "SyncVectorEnv", "atari": "ale-py AtariVectorEnv", "procgen": "envpool Procgen"}
    for name, spec in SPECS.items():
        steps, described = budget(spec, 1.0)
        launch = f" (torchrun, {spec['nproc']} processes)" if spec.get("nproc") else ""
        sb3 = f"{spec['sb3']['algo'].upper()}" + (" (Atari)" if spec["sb3"].get("atari") else "") if "sb3" in spec else "none"
        lines.append(
            f"| {name}{launch} | {spec['env_id']} | {spec['num_envs']} | {steps}: {described} | "
            f"{FAMILY_ROUNDS[spec['family']]} | {sb3} | {raw[spec['raw']]} |"
        )
    return "\n".join(lines)


def throughput_results(throughput: dict) -> str:
    if throughput is None:
        return (
            "No table has been measured on this machine with this version of the tool yet: run the command above, "
            "then `python benchmark/make_docs.py --no-throughput` puts it here."
        )
    from benchmark.throughput import markdown

    results = throughput["results"]
    m = throughput["machine"]
    sb3 = next((r["versions"]["stable_baselines3"] for row in results for r in row["runs"] if "versions" in r), None)
    loads = [x for row in results for r in row["runs"] for x in (r["load_before"], r["load_after"])]
    failed = [f"{row['script']} {r['label']} round {r['round']}" for row in results for r in row["runs"] if "error" in r]
    return (
        f"Command: `{throughput['command']}` (started {throughput['started']}, finished {throughput['finished']}; "
        f"{m['cpu']}, {m['gpu']}, torch {m['torch']}" + (f", SB3 {sb3}" if sb3 else "") + "). "
        + (f"The 1-minute load average around the runs ranged {min(loads):.1f} to {max(loads):.1f}. " if loads else "")
        + (f"Failed runs: {', '.join(failed)} (their errors are in the raw data). " if failed else "")
        + f"\n\n{markdown(results, throughput['variants'])}\n\nRaw data, with every run: [throughput.json](benchmark/throughput.json)."
    )


def render(args: Args, commands: list[str], throughput: Optional[dict], report_dir: Path) -> str:
    summary = (ROOT / report_dir / "summary.md").read_text().strip()
    aggregate = (ROOT / report_dir / "aggregate.md").read_text().strip()
    m = machine_description()
    machine = f"{m['cpu']}, {m['gpu']}, Python {m['python']}, torch {m['torch']}"
    # only committed scripts: the docs tests parse every included command against its script's CLI
    tracked = subprocess.run(["git", "ls-files", "cleanrl"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    landed = [s for s in SCRIPTS if f"cleanrl/{s}.py" in tracked]
    pending = [s for s in SCRIPTS if s not in landed]
    includes = "\n\n".join(f"`benchmark/{s}.sh`\n\n```bash\n--8<-- \"benchmark/{s}.sh\"\n```" for s in landed)
    gen = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cmds = "\n".join(commands)
    pending_note = f"\n\nScripts not yet committed when this page was generated (their `.sh` exists): {', '.join(pending)}." if pending else ""
    return f"""# Benchmark

<!-- generated by `python benchmark/make_docs.py` on {gen}; edit benchmark/make_docs.py, not this file -->

Tools in `benchmark/` run the scripts from the command line and read what they write (TensorBoard event files), so
no W&B account is needed. Everything on this page was produced on this machine by one command:

```bash
python benchmark/make_docs.py
```

Machine: {machine}. The machine is shared with other work, so throughput numbers are noisy; the
throughput benchmark alternates the implementations to spread that noise over all of them.

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

## Throughput: plain path, speed flags, Stable-Baselines3 and the environment

`benchmark/throughput.py` measures the training throughput (environment steps per second, SPS) of every script on
the plain path and with its speed flags, next to Stable-Baselines3 (SB3) where SB3 has the algorithm and next to the
raw environment. One command makes the whole CPU table, about 35 minutes on an idle 2-core machine (let nothing
else run meanwhile; it writes `benchmark/results/speed/results.md` and `results.json`):

```bash
python benchmark/throughput.py
```

On a machine with a CUDA GPU, one command makes the GPU table of the five scripts where a GPU matters most (plain,
`--compile --cudagraphs`, and with `--amp` for the CNN scripts; 17 runs, estimated at 8 to 10 minutes, not yet
run; results are written after each script, so a run cut short keeps the finished rows):

```bash
{GPU_COMMAND}
```

How it measures:

- Rounds: for each script, `rounds` rounds of [plain, each variant, SB3, raw env], alternating, so load noise hits
  every column alike; 2 rounds for classic control and MuJoCo, 1 for Atari and Procgen (`--rounds` overrides).
  Values are medians over the rounds. Hyperparameters that shape the work are passed explicitly (`SPECS` in the tool,
  with the mapping to SB3's arguments); budgets per run (`--budget-scale` multiplies their measured part):

{budgets_table()}

- Ours: the last `charts/SPS` of the run's event file. The scripts start that clock after a warm-up that holds the
  compilation: PPO and PPG at the end of the first iteration, DQN and C51 just after their first gradient update,
  DDPG, TD3 and SAC just after their first actor update (the random learning-starts steps are not measured either). So SPS leaves out compile time; the
  per-run list in `results.md` has each process's wall seconds, which include it.
- Variants: `--variants compile` (the default) runs each script again with `--compile`; a variant is flag names
  joined by `+`, so `--variants compile compile+amp` also runs `--compile --amp`. `amp` applies to the CNN scripts
  (Atari, Procgen) only and `cudagraphs` to `--cuda` runs only; elsewhere the cell says n/a. `--amp` is not in the
  default CPU table, to keep it near 35 minutes: each extra compiled run of a CNN script costs one to two minutes on
  2 cores. Add it with `--variants compile compile+amp`.
- SB3 (PPO, PPO continuous, PPO Atari, DQN, DQN Atari, DDPG, TD3, SAC; none for C51, PPG and multi-process PPO): the
  same warm-up rule, its clock starting at the first rollout after its first gradient update; the per-run list also
  has SPS over its whole `model.learn()`. SB3 lives in its own virtual environment (it is not a dependency of this
  project), made once with the CPU torch wheel pinned, plus ale-py and OpenCV for SB3's Atari wrappers (neither
  pulls torch): `python benchmark/throughput.py --setup-sb3-venv benchmark/results/.venv-sb3`. SB3's Atari
  preprocessing runs in Python wrappers over `DummyVecEnv`, ours in ale-py's native vector env. The GPU command
  leaves SB3 out (`--no-sb3`): that venv has the CPU torch.
- Raw env: the script's vector env alone, random actions, no learning, for `--raw-seconds`: gymnasium
  `SyncVectorEnv` with the script's number of envs (same-step autoreset, episode statistics) for classic control
  and MuJoCo, ale-py's native `AtariVectorEnv` with the Atari scripts' preprocessing, envpool's Procgen for
  `ppg_procgen.py`. It is the ceiling for any trainer with that env on this machine.
- `ppo_atari_multigpu.py` runs as `python -m torch.distributed.run --standalone --nproc_per_node=2`, gloo on CPU;
  its SPS is global steps (both ranks) per second of rank 0's clock, and its raw env is one native vector env with
  all 8 envs.
- Every trainer uses one torch thread on CPU. `--cuda` gives our runs `--cuda` (else `--no-cuda`, and no GPU is
  visible to any run).

How to read the table: `X / plain` is the speed-up of flag set X on this machine (above 1: faster; the aim for the
classic-control and MuJoCo scripts on CPU is 1.5 or more with `--compile`); `X / SB3` compares our run with SB3 doing
the same work (above 1: ours is faster); `X / raw` is the fraction of the environment's own ceiling the training
reaches (near 1: the env is the bottleneck; small: the networks and updates are). `budget per run` is what one run
trained, `load before → after` the range of the 1-minute load average before and after the row's runs: above the
number of cores, other work shared the CPU and the row's ratios are uncertain by tens of percent. A run that fails
(a script without the flag, a crash, `--timeout`) shows `failed`, its error and log are in `results.md`, the rest
of the table is still measured, and the tool exits 1.

{throughput_results(throughput)}
"""


if __name__ == "__main__":
    main(tyro.cli(Args))
