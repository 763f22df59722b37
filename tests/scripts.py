"""The one table of scripts the behaviour tests are parametrized over (as Stable-Baselines3's suite is).

Each row gives a tiny budget that reaches the learning update more than once, the losses it must log and the
steps they are logged at, the values its schedules log, the optional dependency it needs and how it is launched.
`script_params(...)` turns rows into pytest parameters that skip (or, under CLEANRL_REQUIRE_ALL=1, fail) when the
extra is missing.
"""

import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Optional

import pytest

TIMEOUT = 240  # seconds for one torchrun launch; a hang in a collective runs into it instead of blocking the suite


def torchrun(*launch_args: str) -> list[str]:
    """A real torchrun launcher, killed by `timeout` (TERM, then KILL 10 s later) if it overruns."""
    return ["timeout", "-k", "10", str(TIMEOUT), sys.executable, "-m", "torch.distributed.run", *launch_args]


def standalone(nproc: int) -> list[str]:
    return torchrun("--standalone", "--nnodes=1", f"--nproc_per_node={nproc}")


@dataclass(frozen=True)
class Script:
    name: str
    args: tuple  # a tiny budget through several updates
    losses: tuple  # every losses/* key the tiny run logs
    loss_steps: tuple  # the global steps the tiny run logs its losses at
    episodes: bool = True  # the tiny run ends at least one episode
    needs: Optional[str] = None  # optional dependency: "atari", "mujoco" or "procgen"
    eval_args: tuple = ()  # flags that keep the final evaluation short
    launcher: Optional[tuple] = None  # torchrun for the distributed script
    other: dict = field(default_factory=dict)  # other keys the tiny run logs, with their steps (SPS after the warm-up)
    logged: dict = field(default_factory=dict)  # values of the tiny run's schedules: {key: values in logged order}


# The scripts whose --torch-threads defaults to 0 (as many threads as cores are free) run at one thread in the tests:
# the count changes float rounding, and tests compare runs bit for bit (runtime.ThreadGuard has tests of its own).
ONE_THREAD = ("--torch-threads", "1")
PPO_LOSSES = ("losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
              "losses/approx_kl", "losses/clipfrac", "losses/explained_variance")
AUX_LOSSES = ("losses/aux_kl_loss", "losses/aux_value_loss", "losses/aux_pi_value_loss")
ATARI_EVAL = ("--eval-max-frames", "400")
# ppo_atari_multigpu.py, tiny: 4 envs x 16 steps = a global batch of 64 (split over the ranks) in 2 minibatches;
# each test adds its own --update-epochs and --total-timesteps (64 per iteration)
MULTIGPU_TINY = ("--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2")
# value-based: 2000 CartPole steps, learning after 500 with a gradient step every 10 steps; losses every 100 steps
CLASSIC_VALUE = ("--total-timesteps", "2000", "--learning-starts", "500", "--target-network-frequency", "500",
                 "--batch-size", "32")
# value-based Atari: 400 steps, learning after 100, a gradient step every 4, a 300-transition memory that wraps
ATARI_VALUE = ONE_THREAD + (
    "--total-timesteps", "400", "--learning-starts", "100", "--buffer-size", "300", "--batch-size", "8",
    "--target-network-frequency", "100")
# continuous off-policy on Pendulum: 400 steps, learning after 200; losses every 100 steps; 2 episodes of 200
PENDULUM_OFF = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--learning-starts", "200", "--total-timesteps", "400", "--batch-size", "32")
# the same three on HalfCheetah-v5 (optional dependency mujoco): 200 steps, learning after 100; losses and SPS at 200
HALFCHEETAH_OFF = ONE_THREAD + ("--env-id", "HalfCheetah-v5", "--learning-starts", "100", "--total-timesteps",
                                "200", "--batch-size", "32")

SCRIPTS = {s.name: s for s in [
    # 4 envs x 32 steps = 128 steps an iteration, 2 iterations
    # (SPS counts from the end of the first iteration, the warm-up; the learning rate anneals linearly: 1, 1/2)
    Script("ppo.py", ("--num-steps", "32", "--total-timesteps", "256"), PPO_LOSSES, (128, 256),
           other={"charts/SPS": (256,)}, logged={"charts/learning_rate": (2.5e-4, 1.25e-4)}),
    # 1 env x 64 steps, 4 iterations; one 200-step episode ends; the learning rate anneals 1, 3/4, 1/2, 1/4
    Script("ppo_continuous_action.py", ONE_THREAD + ("--env-id", "Pendulum-v1", "--num-steps", "64",
                                                     "--num-minibatches", "4", "--update-epochs", "2",
                                                     "--total-timesteps", "256"),
           PPO_LOSSES, (64, 128, 192, 256), other={"charts/SPS": (128, 192, 256)},
           logged={"charts/learning_rate": (3e-4, 2.25e-4, 1.5e-4, 0.75e-4), "charts/episodic_length": (200,)}),
    # 2 envs x 32 steps = 64 steps an iteration, 2 iterations (no Breakout game ends that soon)
    Script("ppo_atari.py", ONE_THREAD + ("--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2",
                                         "--update-epochs", "1", "--total-timesteps", "128"),
           PPO_LOSSES, (64, 128), episodes=False, needs="atari", eval_args=ATARI_EVAL, other={"charts/SPS": (128,)}),
    # 2 ranks with 1 env each x 32 steps = 64 global steps an iteration, 2 iterations
    Script("ppo_atari_multigpu.py", ("--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2",
                                     "--update-epochs", "1", "--total-timesteps", "128", "--no-cuda"),
           PPO_LOSSES, (64, 128), episodes=False, needs="atari", eval_args=ATARI_EVAL,
           launcher=tuple(standalone(2)), other={"charts/SPS": (128,)}),
    Script("dqn.py", CLASSIC_VALUE, ("losses/td_loss", "losses/q_values"), tuple(range(600, 2001, 100)),
           other={"charts/target_updates": (1000, 1500, 2000), "charts/SPS": tuple(range(600, 2001, 100))},
           logged={"charts/target_updates": (1, 2, 3)}),
    Script("c51.py", CLASSIC_VALUE, ("losses/loss", "losses/q_values"), tuple(range(600, 2001, 100)),
           other={"charts/target_updates": (1000, 1500, 2000), "charts/SPS": tuple(range(600, 2001, 100))},
           logged={"charts/target_updates": (1, 2, 3)}),
    Script("dqn_atari.py", ATARI_VALUE, ("losses/td_loss", "losses/q_values"), (200, 300, 400), episodes=False,
           needs="atari", eval_args=ATARI_EVAL,
           other={"charts/target_updates": (200, 300, 400), "charts/SPS": (200, 300, 400)},
           logged={"charts/target_updates": (1, 2, 3)}),
    Script("c51_atari.py", ATARI_VALUE, ("losses/loss", "losses/q_values"), (200, 300, 400), episodes=False,
           needs="atari", eval_args=ATARI_EVAL,
           other={"charts/target_updates": (200, 300, 400), "charts/SPS": (200, 300, 400)},
           logged={"charts/target_updates": (1, 2, 3)}),
    Script("ddpg_continuous_action.py", PENDULUM_OFF, ("losses/qf1_loss", "losses/qf1_values", "losses/actor_loss"),
           (300, 400), other={"charts/SPS": (300, 400)}, logged={"charts/episodic_length": (200, 200)}),
    Script("td3_continuous_action.py", PENDULUM_OFF,
           ("losses/qf1_loss", "losses/qf2_loss", "losses/qf1_values", "losses/qf2_values", "losses/qf_loss",
            "losses/actor_loss"), (300, 400), other={"charts/SPS": (300, 400)},
           logged={"charts/episodic_length": (200, 200)}),
    Script("sac_continuous_action.py", PENDULUM_OFF,
           ("losses/qf1_loss", "losses/qf2_loss", "losses/qf1_values", "losses/qf2_values", "losses/qf_loss",
            "losses/actor_loss", "losses/alpha", "losses/alpha_loss"), (300, 400), other={"charts/SPS": (300, 400)},
           logged={"charts/episodic_length": (200, 200)}),
    # 2 envs x 16 steps = 32 steps an iteration, 2 iterations a phase: one policy phase and one auxiliary phase
    # (over the 4 stored rollouts in 2 minibatches of 2), which logs once, after the policy phase
    Script("ppg_procgen.py", ONE_THREAD + ("--num-envs", "2", "--num-steps", "16", "--n-iteration", "2",
                                           "--num-aux-rollouts", "2", "--e-auxiliary", "1", "--num-minibatches", "2",
                                           "--total-timesteps", "64"),
           PPO_LOSSES + AUX_LOSSES, (32, 64), episodes=False, needs="procgen",
           other={"charts/SPS": (64,), "charts/learning_rate": (32, 64), **{key: (32, 64) for key in PPO_LOSSES},
                  **{key: (64,) for key in AUX_LOSSES}}),
]}


def have(extra: Optional[str]) -> bool:
    """Whether an optional dependency is importable (for Procgen: envpool with its Qt 5 runtime)."""
    if extra is None:
        return True
    if extra == "procgen":
        try:
            import envpool.procgen

            envpool.procgen.ProcgenEnvSpec  # noqa: B018 (raises ImportError when the Qt 5 runtime is missing)
            return True
        except ImportError:
            return False
    return importlib.util.find_spec({"atari": "ale_py", "mujoco": "mujoco"}[extra]) is not None


def needs(extra: Optional[str]):
    """A skip mark for a missing optional dependency (tests/conftest.py fails it instead under CLEANRL_REQUIRE_ALL=1)."""
    return pytest.mark.skipif(not have(extra), reason=f"optional dependency {extra} is not installed")


def script_params(names=None) -> list:
    """pytest parameters for the rows named (all by default), each with its dependency's skip mark."""
    rows = [SCRIPTS[n] for n in names] if names is not None else list(SCRIPTS.values())
    return [pytest.param(row, id=row.name, marks=[needs(row.needs)]) for row in rows]
