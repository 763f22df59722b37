"""(slow) Each algorithm learns its classic task: the mean episodic return over the last episodes of one seeded run
clears a threshold set from a measured run (python -m pytest -m slow tests/test_learning.py)."""

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import SCRIPTS, needs


@dataclass(frozen=True)
class Learning:
    script: str
    args: tuple
    timeout: float  # seconds
    last: int  # the episodes averaged at the end
    at_least: float  # their mean return must reach this
    first_below: Optional[float] = None  # the first 20 episodes average below this (it really started from scratch)
    episodes: Optional[int] = None  # the run ends exactly this many episodes
    evaluated: Optional[float] = None  # with --save-model: the deterministic policy's evaluation averages this


def learning(*args, needs_extra=None, **kwargs):
    case = Learning(*args, **kwargs)
    return pytest.param(case, id=case.script, marks=[needs(needs_extra or SCRIPTS[case.script].needs)])


# 20k steps, seed 1, 1000 random steps first (the defaults, 25k/5k, are tuned for MuJoCo's 1M-step runs)
PENDULUM_OFF = ("--env-id", "Pendulum-v1", "--seed", "1", "--total-timesteps", "20000", "--learning-starts", "1000")

CASES = [
    # 250k steps with the learning rate doubled from the 500k-step default (2.5e-4), so the annealed
    # schedule fits the shorter budget; measured here: 500.0 over the last 20 episodes (seed 1).
    learning("ppo.py", ("--total-timesteps", "250000", "--learning-rate", "5e-4"), 1200, last=20, at_least=475),
    # Measured with seed 1 (42 s of CPU, 3 min wall on the loaded 2-core machine): the first 20 episodes
    # average 6, the return first reaches the 1000 maximum near step 23k, the last 10 episodes average 1000.
    learning("ppo_continuous_action.py", ("--env-id", "InvertedPendulum-v5", "--total-timesteps", "40960"), 1200,
             last=10, at_least=500, first_below=50, needs_extra="mujoco"),
    # CleanRL's ppo_atari reaches a Breakout score of ~400 after 10M steps. On 2 CPU cores (~200 SPS idle) this
    # only checks clear progress over a random policy (~1-2 points per game) after 1M steps (about 1.5 h).
    # Not yet run to completion on this machine: the threshold is an estimate from published learning curves.
    learning("ppo_atari.py", ("--total-timesteps", "1000000"), 4 * 3600, last=20, at_least=10),
    # The defaults (500k steps, about 3 minutes). Seed 1, mean of the last 20 episodes: 479.4 with torch's
    # per-tensor Adam, 489.7 with the fused one; seeds 2 and 3 (per-tensor) 500.0 each. A shorter budget was too
    # fragile for one seed: at 120k steps (epsilon over 30k, a gradient step every 4) seeds 1-4 ended at 429, 393,
    # 499, 500 with the per-tensor Adam and 236, 409, 467, 500 with the fused one, where only the rounding differs.
    learning("dqn.py", ("--total-timesteps", "500000"), 1800, last=20, at_least=450),
    # 150k steps, epsilon 1 -> 0.05 over the first 30k, learning from step 5001 with a gradient step every 4 steps,
    # a 50k-transition memory and learning rate 1e-3 (the other flags are the defaults). Seed 1 on this machine:
    # mean 500.0 over the last 20 episodes (learning rate 2.5e-4 gave 444.8; 120k steps with a 10k memory, 341.9).
    learning("c51.py", ("--total-timesteps", "150000", "--exploration-fraction", "0.2", "--learning-starts", "5000",
                        "--train-frequency", "4", "--buffer-size", "50000", "--learning-rate", "1e-3"), 1800,
             last=20, at_least=400),
    # 100 Pendulum episodes of 200 steps, then the evaluation of --save-model: 10 episodes of the deterministic
    # policy (no exploration noise), whose mean must be above -250 (a random policy: about -1200). The last 10
    # training episodes, exploration included, must average above -400. Seed 1, evaluation / last 10 training
    # episodes: DDPG -174.7 / -213.4, TD3 -177.1 / -347.8 (its training episodes dip at the very end: -622, -505,
    # -776 among the last six), SAC -172.2 / -188.5. The training episodes alone were too fragile a measure: the
    # same seed with torch's per-tensor Adam, whose update is the same up to rounding, gave TD3 -175.2 / -218.0.
    *[learning(script, (*PENDULUM_OFF, "--save-model"), 3600, last=10, at_least=-400, episodes=100, evaluated=-250)
      for script in ("ddpg_continuous_action.py", "td3_continuous_action.py", "sac_continuous_action.py")],
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_learns(case, workdir):
    run_script(case.script, *case.args, cwd=workdir, timeout=case.timeout)
    scalars = read_scalars(single_run_dir(workdir))
    returns = values(scalars, "charts/episodic_return")
    if case.episodes is not None:
        assert len(returns) == case.episodes
    if case.first_below is not None:
        assert np.mean(returns[:20]) < case.first_below, returns[:20]
    assert np.mean(returns[-case.last :]) >= case.at_least, returns[-case.last :]
    if case.evaluated is not None:
        evaluation = values(scalars, "eval/episodic_return")
        assert len(evaluation) == 10 and np.mean(evaluation) >= case.evaluated, evaluation
