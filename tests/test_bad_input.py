"""Bad input, every script: a bad flag, env id or combination fails with one `error:` line and a non-zero exit
before anything is written (no runs/ or videos/ entry). The checks that need a flow of their own follow the table:
envpool's Procgen without the Qt 5 runtime, the action and observation spaces a script cannot drive, the sizes
derived from the flags."""

import os
import sys
import time
from types import SimpleNamespace
from typing import Optional
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest

import runtime
from tests.helpers import assert_bad_input_rejected, read_scalars, run_script, script_env, single_run_dir
from tests.scripts import SCRIPTS, needs, script_params

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
    case("dqn.py", ["--num-envs", "3"], "num-envs"),
    case("dqn.py", ["--tau", "0"], "tau"),
    case("dqn.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("c51.py", ["--env-id", "Pendulum-v1"], "Discrete"),
    case("c51.py", ["--v-min", "10", "--v-max", "-10"], "v-min"),
    case("c51.py", ["--n-atoms", "1"], "n-atoms"),
    case("c51.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("dqn_atari.py", ["--env-id", "CartPole-v1"], "not an Atari game"),
    case("dqn_atari.py", ["--env-backend", "envpool"], "env-backend"),
    case("dqn_atari.py", ["--batch-size", "0"], "batch-size"),
    case("dqn_atari.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    case("c51_atari.py", ["--env-id", "CartPole-v1"], "not an Atari game"),
    case("c51_atari.py", ["--env-backend", "envpool"], "env-backend"),
    case("c51_atari.py", ["--batch-size", "0"], "batch-size"),
    case("c51_atari.py", ["--v-min", "1", "--v-max", "1"], "v-min"),
    case("c51_atari.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    *[
        case(script, args, message)
        for script in OFF_POLICY
        for args, message in [
            (["--env-id", "CartPole-v1"], "Box (continuous) actions only"),
            (["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
            (["--env-id", "Pendulum-v1", "--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
        ]
    ],
    case("ppg_procgen.py", ["--env-id", "nosuchgame"], "nosuchgame"),
    case("ppg_procgen.py", ["--env-id", "coinrun", "--distribution-mode", "extreme"], "extreme"),
    case("ppg_procgen.py", ["--total-timesteps", "100000"], "one phase"),
    case("ppg_procgen.py", ["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    # every script refuses a learning rate out of its range (runtime.FLAG_RANGES) before anything is written
    *[case(script, [flag, "-1"], f"{flag} must be above 0, got -1.0", world="1" if "multigpu" in script else None)
      for script, flag in [("ppo.py", "--learning-rate"), ("ppo_continuous_action.py", "--learning-rate"),
                           ("ppo_atari.py", "--learning-rate"), ("ppo_atari_multigpu.py", "--learning-rate"),
                           ("dqn.py", "--learning-rate"), ("c51.py", "--learning-rate"),
                           ("dqn_atari.py", "--learning-rate"), ("c51_atari.py", "--learning-rate"),
                           ("ddpg_continuous_action.py", "--q-lr"), ("td3_continuous_action.py", "--policy-lr"),
                           ("sac_continuous_action.py", "--q-lr"), ("ppg_procgen.py", "--learning-rate")]],
    case("sac_continuous_action.py", ["--policy-lr", "nan"], "--policy-lr must be a finite number, got nan"),
    case("ppo_continuous_action.py", ["--gamma", "1.5"], "--gamma must be in [0, 1], got 1.5"),
    case("dqn.py", ["--start-e", "5", "--end-e", "-2"], "--start-e must be in [0, 1], got 5.0"),
    case("td3_continuous_action.py", ["--tau", "2"], "--tau must be in (0, 1], got 2.0"),
    case("ppo.py", ["--seed", "-1"], "--seed must be in [0, 2147483647], got -1"),
    case("ppo_atari.py", ["--eval-max-frames", "0"], "--eval-max-frames must be at least 1, got 0"),
    # a replay memory beyond this machine's memory, named in bytes
    case("dqn.py", ["--buffer-size", "100000000000"], "--buffer-size 100000000000 asks for a replay memory of"),
    case("dqn_atari.py", ["--buffer-size", "100000000000"], "--buffer-size 100000000000 asks for a replay memory of"),
    case("sac_continuous_action.py", ["--env-id", "Pendulum-v1", "--buffer-size", "100000000000"],
         "--buffer-size 100000000000 asks for a replay memory of"),
    # a rollout storage (and PPG's auxiliary buffer) beyond the memory available, named in bytes
    case("ppo.py", ["--num-steps", "10000000000", "--total-timesteps", "40000000000"],
         "--num-steps 10000000000 x --num-envs 4 asks for a rollout storage of"),
    case("ppo_continuous_action.py",
         ["--num-steps", "10000000000", "--total-timesteps", "10000000000"],
         "--num-steps 10000000000 x --num-envs 1 asks for a rollout storage of"),
    case("ppo_atari.py", ["--num-steps", "100000000", "--total-timesteps", "800000000"],
         "--num-steps 100000000 x --num-envs 8 asks for a rollout storage of"),
    case("ppo_atari_multigpu.py", ["--num-steps", "100000000", "--total-timesteps", "800000000"],
         "--num-steps 100000000 x 8 envs a rank asks for a rollout storage of", world="1"),
    case("ppg_procgen.py", ["--n-iteration", "100000", "--total-timesteps", "1638400000"],
         "--n-iteration 100000 x --num-envs 64 x --num-steps 256 asks for an auxiliary buffer of"),
    # run flags that cannot mean what they say
    case("ppo.py", ["--exp-name", "a/b"], "--exp-name 'a/b' must be a plain name (no '/')"),
    case("dqn.py", ["--seed", "1", "--seed", "2"], "--seed is given twice; give each flag once"),
    case("ppo.py", ["--track", "--no-track"], "--track and --no-track are both given; give one of them"),
    case("sac_continuous_action.py", ["--eval-only", "x", "--resume", "auto"],
         "--eval-only evaluates a saved model and --resume continues a run's training; give one of them"),
]


@pytest.mark.parametrize("script, args, message, world", CASES)
def test_bad_input_fails_in_one_line_before_any_run_directory(script, args, message, world, workdir):
    env = script_env(WORLD_SIZE=world, RANK="0", LOCAL_RANK="0") if world else None
    assert_bad_input_rejected(script, args, message, cwd=workdir, env=env, timeout=120)


def test_a_runs_file_in_the_way_fails_in_one_line(workdir):
    (workdir / "runs").write_text("not a directory")
    assert_bad_input_rejected("ppo.py", [], "cannot create the run directory runs/CartPole-v1__ppo__1__",
                              cwd=workdir, one_line=True)


# ---- legal but unusual: it runs, with one `warning:` line that says what will happen ----

# budgets that end before --learning-starts: a smoke run of the loop without an update (as CleanRL and SB3 allow)
NO_UPDATE = {
    "dqn.py": ("--total-timesteps", "200", "--learning-starts", "500"),
    "c51.py": ("--total-timesteps", "200", "--learning-starts", "500"),
    "dqn_atari.py": ("--total-timesteps", "64", "--learning-starts", "100", "--buffer-size", "1000"),
    "c51_atari.py": ("--total-timesteps", "64", "--learning-starts", "100", "--buffer-size", "1000"),
    "ddpg_continuous_action.py": ("--env-id", "Pendulum-v1", "--total-timesteps", "135"),
    "td3_continuous_action.py": ("--env-id", "Pendulum-v1", "--total-timesteps", "135"),
    "sac_continuous_action.py": ("--env-id", "Pendulum-v1", "--total-timesteps", "135"),
}


@pytest.mark.parametrize("row", script_params(list(NO_UPDATE)))
def test_a_budget_below_learning_starts_runs_the_loop_without_an_update_and_says_so(row, workdir):
    proc = run_script(row.name, *NO_UPDATE[row.name], "--no-progress", cwd=workdir, timeout=300)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: --learning-starts ") and "no " in warnings[0]
    total = int(NO_UPDATE[row.name][NO_UPDATE[row.name].index("--total-timesteps") + 1])
    assert f"done: {total} steps" in proc.stdout
    assert not [key for key in read_scalars(single_run_dir(workdir)) if key.startswith("losses/")]


def test_a_budget_that_drops_more_than_a_percent_says_what_it_trains(workdir):
    proc = run_script("ppo.py", "--total-timesteps", "1000", "--no-progress", cwd=workdir)
    assert proc.stderr.splitlines() == ["warning: --total-timesteps 1000 is not a multiple of one batch (512 steps): "
                                        "the run takes 512 steps"]
    assert "done: 512 steps" in proc.stdout
    assert [step for step, _ in read_scalars(single_run_dir(workdir))["losses/value_loss"]] == [512]


@needs("procgen")
def test_ppg_with_fewer_rollouts_than_an_auxiliary_minibatch_distills_on_the_ones_it_has(workdir):
    # CleanRL's setting `--num-envs 1 --n-iteration 1`: one rollout, --num-aux-rollouts 4
    args = ("--num-envs", "1", "--n-iteration", "1", "--num-steps", "16", "--total-timesteps", "32",
            "--e-auxiliary", "2", "--no-progress")
    proc = run_script("ppg_procgen.py", *args, cwd=workdir)
    assert [line for line in proc.stderr.splitlines() if line.startswith("warning:")] == [
        "warning: the auxiliary buffer's 1 rollouts (--n-iteration 1 x --num-envs 1) are no multiple of "
        "--num-aux-rollouts 4: the last auxiliary minibatch of each epoch holds 1"]
    scalars = read_scalars(single_run_dir(workdir))
    assert [step for step, _ in scalars["losses/aux_kl_loss"]] == [16, 32]  # an auxiliary phase after each iteration
    assert all(value == value for _, value in scalars["losses/aux_value_loss"])


def test_eval_episodes_0_saves_the_model_and_skips_the_evaluation(workdir):
    proc = run_script("ppo.py", "--total-timesteps", "512", "--save-model", "--eval-episodes", "0", "--no-progress",
                      cwd=workdir)
    assert "eval: skipped (--eval-episodes 0)" in proc.stdout and proc.stderr == ""
    run_dir = single_run_dir(workdir)
    assert (run_dir / "ppo.cleanrl_model").is_file() and "eval/episodic_return" not in read_scalars(run_dir)


def test_a_run_started_in_the_same_second_as_another_gets_its_own_directory(workdir):
    # the directories of runs with the same env id, exp name and seed that started in each of the next 2 minutes
    now = int(time.time())
    taken = [workdir / "runs" / f"CartPole-v1__ppo__1__{t}" for t in range(now - 1, now + 120)]
    for path in taken:
        path.mkdir(parents=True)
    proc = run_script("ppo.py", "--total-timesteps", "512", "--save-model", "--eval-episodes", "1", "--no-progress",
                      cwd=workdir)
    line = proc.stdout.splitlines()[0]
    name = line.split()[2]
    assert name.startswith("runs/CartPole-v1__ppo__1__") and name.endswith("-2"), line
    assert line.endswith(f" ({name[:-2]} is another run started in the same second)")
    assert sorted(os.listdir(workdir / name)) == [".lock", "checkpoint.pt", *[
        f for f in os.listdir(workdir / name) if f.startswith("events")], "ppo.cleanrl_model"]
    assert all(not os.listdir(path) for path in taken)


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
    ]:
        with pytest.raises(SystemExit) as exc:
            derive_sizes(Args(**bad))
        assert str(exc.value.code).startswith("error:") and message in str(exc.value.code)
