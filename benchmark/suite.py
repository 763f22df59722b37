# docs: docs/benchmark.md
"""The learning benchmark published in the docs: which script runs on which env ids, at which budget, 3 seeds.

Budgets fit a 2-core CPU machine: the published budget where it fits (classic control 500k, PPO on MuJoCo 1M),
else the largest that does (off-policy MuJoCo 100k, Atari and Procgen a short run that shows learning has begun).
Each entry is one benchmark/run.py command; finished runs are kept in benchmark/kept/ (committed), so the suite
resumes across days and machines: running it again starts only the runs that have no kept file.

Run:
    python benchmark/suite.py --dry-run               # the commands, and which runs are kept already
    python benchmark/suite.py --only ppo dqn          # run what is missing of these scripts
    python benchmark/suite.py                         # run everything that is missing, cheapest entries first
    python benchmark/make_docs.py                     # then the tables and figures of the docs, from benchmark/kept/
"""

import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.kept import KEPT, kept_path  # noqa: E402  (a tool, not an algorithm script)
from benchmark.run import STOP_SIGNALS  # noqa: E402  (the signals the runner stops on)

CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"]


@dataclass(frozen=True)
class Entry:
    script: str  # cleanrl/<script>.py, and the folder of its kept runs
    env_ids: list[str]
    total_timesteps: int
    flags: tuple[str, ...] = ()  # beyond --total-timesteps, --env-id and --seed
    seeds: tuple[int, ...] = (1, 2, 3)
    hours: float = 0.0  # CPU hours of the whole entry on one core of the development machine (for ordering)
    launcher: tuple[str, ...] = ("python",)
    # > 0: a run checkpoints every this many iterations and a stopped one continues from its last checkpoint (on the
    # same machine) instead of starting over: for runs longer than a working session
    checkpoint_frequency: int = 0
    max_workers: int = 0  # > 0: at most this many of the entry's runs at once, whatever --workers says (memory)

    def command(self) -> list[str]:
        resume = ("--save-model", "--checkpoint-frequency", str(self.checkpoint_frequency), "--resume", "auto")
        return [*self.launcher, f"cleanrl/{self.script}.py", "--total-timesteps", str(self.total_timesteps), *self.flags,
                *(resume if self.checkpoint_frequency else ())]

    def runner_command(self) -> list[str]:
        seeds = [str(s) for s in self.seeds]
        resume = ("--resume-stopped",) if self.checkpoint_frequency else ()
        return ["python", "benchmark/run.py", "--keep", "benchmark/kept", *resume, "--env-ids", *self.env_ids, "--seeds", *seeds, "--", *self.command()]


# Pendulum's off-policy runs start learning after 1000 random steps, not the scripts' MuJoCo defaults
# (25000 for DDPG and TD3, 5000 for SAC), which would leave little of a 20k budget to learn in.
PENDULUM = ("--learning-starts", "1000")

SUITE = [
    Entry("ppo", CLASSIC, 500_000, hours=0.3),
    Entry("ddpg_continuous_action", ["Pendulum-v1"], 20_000, PENDULUM, hours=0.1),
    Entry("td3_continuous_action", ["Pendulum-v1"], 20_000, PENDULUM, hours=0.15),
    Entry("sac_continuous_action", ["Pendulum-v1"], 20_000, PENDULUM, hours=0.2),
    Entry("dqn", CLASSIC, 500_000, hours=0.6),
    Entry("ppo_continuous_action", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"], 1_000_000, hours=1.8),
    Entry("c51", CLASSIC, 500_000, hours=1.2),
    Entry("ddpg_continuous_action", ["Hopper-v5", "HalfCheetah-v5"], 100_000, hours=0.8),
    Entry("td3_continuous_action", ["Hopper-v5", "HalfCheetah-v5"], 100_000, hours=1.0),
    # SAC's runs are the longest of the MuJoCo ones: they checkpoint with their replay memory (about 20 MB at 100k
    # steps) every 10,000 gradient updates and continue where they stopped
    Entry("sac_continuous_action", ["Hopper-v5", "HalfCheetah-v5"], 100_000, ("--save-buffer",), hours=1.6, checkpoint_frequency=10_000),
    # Atari and Procgen at a few hundred steps per second on a CPU: budgets where learning has clearly begun
    # (Breakout's random play scores about 1.5 per game, starpilot's about 2 to 3). Every one of these runs checkpoints
    # and continues where it stopped. PPO's checkpoints are a few MB (every 50 iterations: a few minutes). DQN's and
    # C51's hold their replay memory (--save-buffer: 7.2 GB, the whole 1M-transition ring; each run holds as much in
    # memory), every 25,000 gradient updates (100,000 steps: about 18 minutes at the 94 steps per second a run made
    # alone with two threads, about 50 each beside a second run).
    Entry("ppo_atari", ["BreakoutNoFrameskip-v4"], 500_000, hours=1.7, checkpoint_frequency=50),
    # the JAX script at ppo_atari's budget, for the side-by-side reading on its page (80-90 steps per second alone on
    # the 2-core machine with its default Python loops, so about 1.6 hours a seed; XLA takes both cores)
    Entry("ppo_atari_envpool_xla_jax_scan", ["BreakoutNoFrameskip-v4"], 500_000, hours=4.8, checkpoint_frequency=50),
    Entry("ppo_atari_multigpu", ["BreakoutNoFrameskip-v4"], 500_000, launcher=("torchrun", "--standalone", "--nproc_per_node=2"), hours=2.1, checkpoint_frequency=50),
    # one PPG phase: 32 policy iterations of 64 envs x 256 steps, then the auxiliary phase. A checkpoint inside the
    # phase holds the rollouts stored so far (200 MB per iteration), so every 8 iterations (about 20 minutes); one
    # run at a time: the phase's buffer is 6.5 GB per run, and a checkpoint copies up to 5 GB of it. Per run: the
    # policy phase took 80 minutes on both cores (111-114 SPS); the auxiliary phase is 6 x 512 minibatches of 1024
    # observations through both networks, forward and backward, about 11 s each with one thread beside a busy core,
    # so about 9.4 core-hours. A stop inside it saves its position and the buffer (6 GB) and goes on from there.
    Entry("ppg_procgen", ["starpilot"], 524_288, hours=36, checkpoint_frequency=8, max_workers=1),
    Entry("dqn_atari", ["BreakoutNoFrameskip-v4"], 500_000, ("--save-buffer",), hours=8.5, checkpoint_frequency=25_000),
    Entry("c51_atari", ["BreakoutNoFrameskip-v4"], 500_000, ("--save-buffer",), hours=8.5, checkpoint_frequency=25_000),
]

# Published results of the reference CleanRL scripts (3 seeds, gymnasium 0.29; their docs): script -> our env id ->
# (budget, final return, the env id they ran, std over seeds or None where not published). Tables show them beside
# ours only where our budget is the same; results at other budgets are quoted for context.
PUBLISHED = {
    "ppo": {"CartPole-v1": (500_000, 490.04, "CartPole-v1", 6.12), "Acrobot-v1": (500_000, -86.36, "Acrobot-v1", 1.32), "MountainCar-v0": (500_000, -200.0, "MountainCar-v0", 0.0)},
    "dqn": {"CartPole-v1": (500_000, 488.69, "CartPole-v1", 16.11), "Acrobot-v1": (500_000, -91.54, "Acrobot-v1", 7.20), "MountainCar-v0": (500_000, -194.95, "MountainCar-v0", 8.48)},
    "c51": {"CartPole-v1": (500_000, 481.20, "CartPole-v1", 20.53), "Acrobot-v1": (500_000, -87.70, "Acrobot-v1", 5.52), "MountainCar-v0": (500_000, -166.38, "MountainCar-v0", 27.94)},
    "ppo_continuous_action": {"HalfCheetah-v5": (1_000_000, 1442.6, "HalfCheetah-v4", None), "Hopper-v5": (1_000_000, 2382.9, "Hopper-v4", None), "Walker2d-v5": (1_000_000, 2288.0, "Walker2d-v4", None)},
    "ddpg_continuous_action": {"Hopper-v5": (1_000_000, 1577.0, "Hopper-v4", None), "HalfCheetah-v5": (1_000_000, 10374.0, "HalfCheetah-v4", None)},
    "td3_continuous_action": {"Hopper-v5": (1_000_000, 3135.0, "Hopper-v4", None), "HalfCheetah-v5": (1_000_000, 9583.0, "HalfCheetah-v4", None)},
    "sac_continuous_action": {"Hopper-v5": (1_000_000, 2310.0, "Hopper-v4", None), "HalfCheetah-v5": (1_000_000, 9635.0, "HalfCheetah-v4", None)},
    "ppo_atari": {"BreakoutNoFrameskip-v4": (10_000_000, 414.7, "BreakoutNoFrameskip-v4", None)},
    "dqn_atari": {"BreakoutNoFrameskip-v4": (10_000_000, 366.9, "BreakoutNoFrameskip-v4", None)},
    "c51_atari": {"BreakoutNoFrameskip-v4": (10_000_000, 461.9, "BreakoutNoFrameskip-v4", None)},
    "ppg_procgen": {"starpilot": (25_000_000, 34.8, "starpilot (easy)", None)},
}  # fmt: skip


@dataclass
class Args:
    only: list[str] = field(default_factory=list)
    """run only the entries of these scripts (e.g. ppo dqn); empty: every entry"""
    workers: int = 1
    """runs at the same time (benchmark/run.py --workers); ppg_procgen runs one at a time whatever this says"""
    dry_run: bool = False
    """if toggled, print each entry's command and how many of its runs are kept, and run nothing"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def kept_runs(entry: Entry) -> int:
    return sum(kept_path(KEPT, entry.script, e, s).exists() for e in entry.env_ids for s in entry.seeds)


def main(args: Args) -> int:
    known = {e.script for e in SUITE}
    unknown = sorted(set(args.only) - known)
    if unknown:
        fail(f"--only {' '.join(unknown)}: not in the suite; its scripts are {' '.join(sorted(known))}")
    entries = [e for e in SUITE if not args.only or e.script in args.only]
    failed = 0
    for entry in entries:
        total = len(entry.env_ids) * len(entry.seeds)
        done = kept_runs(entry)
        print(f"# {entry.script}: {done}/{total} runs kept, about {entry.hours:g} CPU hours in all", flush=True)
        cmd = entry.runner_command()
        workers = min(args.workers, entry.max_workers) if entry.max_workers else args.workers
        if workers != 1:
            cmd[2:2] = ["--workers", str(workers)]
        print(shlex.join(cmd), flush=True)
        if args.dry_run or done == total:
            continue
        # The runs' own `python` and `torchrun` are this interpreter's (its virtual environment first on PATH), even
        # when the suite was started as .venv/bin/python without activating the environment.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        code = run_forwarding_stops([sys.executable, *cmd[1:]], env=dict(os.environ, PATH=path))
        if code > 128 and code - 128 in STOP_SIGNALS:
            return code  # the runner was stopped: the later entries do not start
        failed += code != 0
    return 1 if failed else 0


def run_forwarding_stops(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> int:
    """Run benchmark/run.py and wait for it. A stop signal to the suite is passed on to the runner, which stops its
    runs (they checkpoint) and prints its summary; killed by default, the suite would leave the runner going."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env)
    stopped: list[int] = []

    def forward(signum: int, frame: object) -> None:
        stopped.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)  # Ctrl-C reaches the runner from the terminal too; a second one is harmless

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stopped:
        return 128 + stopped[0]
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
