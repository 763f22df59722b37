"""Bad input, every script: a bad flag, env id or combination fails with one `error:` line and a non-zero exit
before anything is written (no runs/ or videos/ entry). The table is the rows' (tests/scripts.py: each row's
bad_input, and its learning_rate_flag, which must refuse -1). The checks that need a flow of their own follow it:
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

import environments
import procgen_envs
from tests.helpers import assert_bad_input_rejected, read_scalars, run_script, script_env, single_run_dir
from tests.scripts import SCRIPTS, names, needs, script_params


def case(script: str, args, message: str, world: Optional[str] = None, process: bool = False):
    """One row: `script args` must fail naming `message` (tests/scripts.py, BadInput: `world` is the WORLD_SIZE of
    a torchrun rank). `process`: run as a real process, else inside the test process (helpers.run_in_process)."""
    return pytest.param(script, list(args), message, world, process,
                        id=f"{script[:-3]} {' '.join(args)}{' (process)' if process else ''}",
                        marks=[needs(SCRIPTS[script].needs)])


CASES = [
    # each row's own cases
    *[case(row.name, c.args, c.message, c.world) for row in SCRIPTS.values() for c in row.bad_input],
    # every script refuses a learning rate out of its range (flags.Range) before anything is written, and does so
    # as a real process too: the exit status and the one line of stderr are the interpreter's, not the helper's
    *[case(row.name, [row.learning_rate_flag, "-1"], f"{row.learning_rate_flag} must be above 0, got -1.0",
           world="1" if row.launcher else None, process=process)
      for row in SCRIPTS.values() for process in (False, True)],
]


@pytest.mark.parametrize("script, args, message, world, process", CASES)
def test_bad_input_fails_in_one_line_before_any_run_directory(script, args, message, world, process, workdir):
    variables = dict(WORLD_SIZE=world, RANK="0", LOCAL_RANK="0") if world else {}
    if process:
        proc = assert_bad_input_rejected(script, args, message, cwd=workdir, one_line=True,
                                         env=script_env(**variables), timeout=120)
        assert "Traceback" not in proc.stderr
    else:
        assert_bad_input_rejected(script, args, message, cwd=workdir, in_process=True, env=variables)


def test_a_runs_file_in_the_way_fails_in_one_line(workdir):
    (workdir / "runs").write_text("not a directory")
    assert_bad_input_rejected("ppo.py", [], "cannot create the run directory runs/CartPole-v1__ppo__1__",
                              cwd=workdir, one_line=True)


# ---- legal but unusual: it runs, with one `warning:` line that says what will happen ----

# budgets that end before --learning-starts: a smoke run of the loop without an update (as CleanRL and SB3 allow),
# the rows' no_update_args
@pytest.mark.parametrize("row", script_params(names(lambda row: row.no_update_args)))
def test_a_budget_below_learning_starts_runs_the_loop_without_an_update_and_says_so(row, workdir):
    args = row.no_update_args
    proc = run_script(row.name, *args, "--no-progress", cwd=workdir, timeout=300)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: --learning-starts ") and "no " in warnings[0]
    total = int(args[args.index("--total-timesteps") + 1])
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
        message = procgen_envs.procgen_import_problem(e)
    assert "libqt5gui5" in message and "libQt5Core.so.5" in message


# ---- spaces a script cannot drive ----


def probe_continuous_spaces(env_id, observation_space, action_space, script):
    """The continuous scripts' space check (environments.probe_env, as the four of them call it) on an env with these
    spaces; the scripts' own bad --env-id cases (tests/scripts.py) reach it from the command line."""
    env = SimpleNamespace(observation_space=observation_space, action_space=action_space, close=lambda: None)
    # (the script names itself from its file, sys.argv[0])
    with mock.patch.object(gym, "make", lambda _: env), mock.patch.object(sys, "argv", [f"cleanrl/{script}"]):
        environments.probe_env(env_id, gym.spaces.Box, finite_actions=True)


@pytest.mark.parametrize(
    "observation_space, action_space, message",
    [
        (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(3), "supports Box (continuous) actions only"),
        (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-np.inf, np.inf, (2,)), "unbounded"),
        (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(np.array([-1.0, -1.0]), np.array([1.0, np.inf])),
         "unbounded"),
        (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-1.0, 1.0, (2, 2)), "1-D"),
        (gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (3,))}), gym.spaces.Box(-1.0, 1.0, (1,)),
         "flat Box observations"),
    ],
)
def test_continuous_scripts_reject_unsupported_spaces_in_one_line(observation_space, action_space, message):
    with pytest.raises(SystemExit) as e:
        probe_continuous_spaces("Fake-v0", observation_space, action_space, "td3_continuous_action.py")
    assert str(e.value).startswith("error: Fake-v0") and message in str(e.value)
    assert "td3_continuous_action.py" in str(e.value)  # the script names itself


def test_continuous_scripts_accept_a_bounded_box():
    probe_continuous_spaces("Fake-v0", gym.spaces.Box(-np.inf, np.inf, (17,)), gym.spaces.Box(-1.0, 1.0, (6,)), "x.py")


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
