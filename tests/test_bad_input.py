"""Bad input, every script: a bad flag, env id or combination fails with one `error:` line and a non-zero exit
before anything is written (no runs/ or videos/ entry). The checks that need a flow of their own follow the table:
envpool's Procgen without the Qt 5 runtime, the action and observation spaces a script cannot drive, the sizes
derived from the flags."""

import sys
from types import SimpleNamespace
from typing import Optional
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest

import runtime
from tests.helpers import assert_bad_input_rejected, script_env
from tests.scripts import SCRIPTS, needs

OFF_POLICY = ["ddpg_continuous_action.py", "td3_continuous_action.py", "sac_continuous_action.py"]


def case(script: str, args: list, message: str, world: Optional[str] = None):
    """One row: `script args` must fail naming `message`. `world`: WORLD_SIZE of a torchrun rank (multi-GPU
    script), whose checks run before the process group forms, so the torchrun variables alone reproduce a rank of
    a larger job without starting its peers."""
    return pytest.param(script, args, message, world, id=f"{script[:-3]} {' '.join(args)}",
                        marks=[needs(SCRIPTS[script].needs)])


CASES = [
    case("ppo.py", ["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    case("ppo.py", ["--env-id", "Pendulum-v1"], "Discrete"),
    case("ppo.py", ["--num-minibatches", "3"], "num-minibatches"),
    case("ppo.py", ["--total-timesteps", "100"], "total-timesteps"),
    case("ppo.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("ppo_continuous_action.py", ["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    case("ppo_continuous_action.py", ["--env-id", "CartPole-v1"], "Box"),
    case("ppo_continuous_action.py", ["--num-minibatches", "3"], "num-minibatches"),
    case("ppo_continuous_action.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    # with --capture-video, so that "no videos/ entry" means something
    case("ppo_atari.py", ["--env-id", "NoSuchGame-v0", "--capture-video"], "NoSuchGame-v0"),
    case("ppo_atari.py", ["--env-id", "CartPole-v1", "--capture-video"], "not an Atari game"),
    case("ppo_atari.py", ["--env-backend", "envpool", "--capture-video"], "env-backend"),
    case("ppo_atari.py", ["--cudagraphs", "--no-cuda", "--capture-video"], "--cudagraphs needs a CUDA device"),
    case("ppo_atari_multigpu.py", ["--num-envs", "3"], "divide evenly over 2 ranks", world="2"),
    case("ppo_atari_multigpu.py", ["--num-envs", "4", "--num-steps", "3", "--num-minibatches", "4"], "num-minibatches",
         world="2"),
    case("ppo_atari_multigpu.py", ["--num-envs", "4", "--total-timesteps", "100"], "total-timesteps", world="1"),
    case("ppo_atari_multigpu.py", ["--backend", "nccl", "--no-cuda"], "nccl needs CUDA", world="1"),
    case("ppo_atari_multigpu.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device", world="1"),
    case("dqn.py", ["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    case("dqn.py", ["--env-id", "Pendulum-v1"], "Discrete"),
    case("dqn.py", ["--learning-starts", "600", "--total-timesteps", "600"], "learning-starts"),
    case("dqn.py", ["--num-envs", "3"], "num-envs"),
    case("dqn.py", ["--tau", "0"], "tau"),
    case("dqn.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("c51.py", ["--env-id", "Pendulum-v1"], "Discrete"),
    case("c51.py", ["--learning-starts", "600", "--total-timesteps", "600"], "learning-starts"),
    case("c51.py", ["--v-min", "10", "--v-max", "-10"], "v-min"),
    case("c51.py", ["--n-atoms", "1"], "n-atoms"),
    case("c51.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("dqn_atari.py", ["--env-id", "CartPole-v1"], "not an Atari game"),
    case("dqn_atari.py", ["--env-backend", "envpool"], "env-backend"),
    case("dqn_atari.py", ["--learning-starts", "500", "--total-timesteps", "500"], "learning-starts"),
    case("dqn_atari.py", ["--batch-size", "0"], "batch-size"),
    case("dqn_atari.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("c51_atari.py", ["--env-id", "CartPole-v1"], "not an Atari game"),
    case("c51_atari.py", ["--env-backend", "envpool"], "env-backend"),
    case("c51_atari.py", ["--learning-starts", "500", "--total-timesteps", "500"], "learning-starts"),
    case("c51_atari.py", ["--batch-size", "0"], "batch-size"),
    case("c51_atari.py", ["--v-min", "1", "--v-max", "1"], "v-min"),
    case("c51_atari.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    *[
        case(script, args, message)
        for script in OFF_POLICY
        for args, message in [
            (["--env-id", "CartPole-v1"], "Box (continuous) actions only"),
            (["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
            (["--env-id", "Pendulum-v1", "--total-timesteps", "1000", "--learning-starts", "1000"], "learning-starts"),
            (["--env-id", "Pendulum-v1", "--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
        ]
    ],
    case("ppg_procgen.py", ["--env-id", "nosuchgame"], "nosuchgame"),
    case("ppg_procgen.py", ["--env-id", "coinrun", "--distribution-mode", "extreme"], "extreme"),
    case("ppg_procgen.py", ["--num-aux-rollouts", "3"], "num-aux-rollouts"),
    case("ppg_procgen.py", ["--total-timesteps", "100000"], "one phase"),
    case("ppg_procgen.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
]


@pytest.mark.parametrize("script, args, message, world", CASES)
def test_bad_input_fails_in_one_line_before_any_run_directory(script, args, message, world, workdir):
    env = script_env(WORLD_SIZE=world, RANK="0", LOCAL_RANK="0") if world else None
    assert_bad_input_rejected(script, args, message, cwd=workdir, env=env, timeout=120)


# ---- Procgen without the Qt 5 runtime ----

# Runs the script with envpool's compiled Procgen module failing to load as it does without Debian's Qt 5.
HIDE_QT = """
import os, runpy, sys
class NoQt:
    def find_spec(self, name, path=None, target=None):
        if name == "envpool.procgen.procgen_envpool":
            raise ImportError("libQt5Core.so.5: cannot open shared object file: No such file or directory")
sys.meta_path.insert(0, NoQt())
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # as `python script.py` does, for the runtime module beside it
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@needs("procgen")
def test_missing_qt_fails_in_one_line_naming_libqt5gui5(workdir):
    row = SCRIPTS["ppg_procgen.py"]
    assert_bad_input_rejected(row.name, row.args, "libqt5gui5", cwd=workdir, launcher=[sys.executable, "-c", HIDE_QT])


def test_missing_qt_message_names_the_debian_package():
    try:
        try:
            raise ImportError("libQt5Core.so.5: cannot open shared object file: No such file or directory")
        except ImportError as inner:
            raise ImportError("EnvPool Procgen requires the system Qt 5 runtime on Linux.") from inner
    except ImportError as e:
        message = runtime.procgen_import_problem(e)
    assert "libqt5gui5" in message and "libQt5Core.so.5" in message


# ---- spaces a script cannot drive ----


def probe_off_policy_spaces(env_id, observation_space, action_space, script):
    """The continuous off-policy scripts' space checks (runtime.probe_env) on an environment with these spaces."""
    env = SimpleNamespace(observation_space=observation_space, action_space=action_space)
    with mock.patch.object(gym, "make", lambda _: env):
        runtime.probe_env(env_id, gym.spaces.Box, script, finite_actions=True)


@pytest.mark.parametrize(
    "action_space, message",
    [
        (gym.spaces.Discrete(3), "Box (continuous) actions only"),
        (gym.spaces.Box(-np.inf, np.inf, (2,)), "unbounded"),
        (gym.spaces.Box(np.array([-1.0, -1.0]), np.array([1.0, np.inf])), "unbounded"),
        (gym.spaces.Box(-1.0, 1.0, (2, 2)), "1-D"),
    ],
)
def test_off_policy_scripts_reject_unsupported_action_spaces_in_one_line(action_space, message):
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(SystemExit) as e:
        probe_off_policy_spaces("Fake-v0", obs_space, action_space, "ddpg_continuous_action.py")
    assert str(e.value).startswith("error: Fake-v0") and message in str(e.value)


def test_off_policy_scripts_accept_a_bounded_box():
    probe_off_policy_spaces("Fake-v0", gym.spaces.Box(-np.inf, np.inf, (17,)), gym.spaces.Box(-1.0, 1.0, (6,)), "x.py")


def test_ppo_continuous_rejects_what_the_gaussian_policy_cannot_drive():
    from cleanrl.ppo_continuous_action import check_spaces

    obs = gym.spaces.Box(-1.0, 1.0, (3,))
    check_spaces("ok", obs, gym.spaces.Box(-2.0, 2.0, (1,)))
    cases = [
        (obs, gym.spaces.Box(-np.inf, np.inf, (2,)), "unbounded"),
        (obs, gym.spaces.Box(np.array([-1.0, -np.inf]), np.array([1.0, 1.0])), "unbounded"),
        (obs, gym.spaces.Discrete(3), "Box actions"),
        (obs, gym.spaces.Box(-1.0, 1.0, (2, 2)), "Box actions"),
        (gym.spaces.Dict({"a": obs}), gym.spaces.Box(-1.0, 1.0, (1,)), "Box observations"),
    ]
    for obs_space, action_space, message in cases:
        with pytest.raises(SystemExit) as e:
            check_spaces("Some-v0", obs_space, action_space)
        assert str(e.value).startswith("error: Some-v0") and message in str(e.value)


# ---- sizes derived from the flags ----


@needs("atari")
def test_ppo_atari_derived_sizes_are_checked():
    from cleanrl.ppo_atari import Args, derive_sizes

    assert derive_sizes(Args(num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=200)) == (64, 32, 3)
    for bad, message in [
        (dict(num_minibatches=3), "num-minibatches"),
        (dict(total_timesteps=100), "total-timesteps"),
        (dict(eval_max_frames=0), "eval-max-frames"),
    ]:
        with pytest.raises(SystemExit) as exc:
            derive_sizes(Args(**bad))
        assert str(exc.value.code).startswith("error:") and message in str(exc.value.code)
