"""Every script, run as a user runs it: through its learning updates (read back from the event file), a saved
and evaluated model, what it prints, and the same losses for the same seed."""

import re

import pytest

from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import HALFCHEETAH_OFF, needs, script_params


def run_tiny(row, cwd, *extra: str):
    return run_script(row.name, *row.args, *extra, cwd=cwd, launcher=list(row.launcher) if row.launcher else None,
                      timeout=600)


@pytest.mark.parametrize("row", script_params())
def test_runs_through_updates_then_saves_and_evaluates_the_model(row, workdir):
    proc = run_tiny(row, workdir, "--save-model", "--eval-episodes", "1", *row.eval_args)
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    # the learning update ran at the expected steps, and every loss it computes was logged
    assert [step for step, _ in scalars[row.losses[0]]] == list(row.loss_steps)
    for key in row.losses:
        assert values(scalars, key), f"{key} was never logged"
    assert sorted(k for k in scalars if k.startswith("losses/")) == sorted(row.losses)
    for key, steps in row.other.items():
        assert [step for step, _ in scalars[key]] == list(steps), key
    assert values(scalars, "charts/SPS"), "no SPS after the warm-up"
    if row.episodes:
        assert values(scalars, "charts/episodic_return") and values(scalars, "charts/episodic_length")
    # the saved model, its evaluation, and the lines that say where everything went
    model = run_dir / f"{row.name[:-3]}.cleanrl_model"
    assert model.stat().st_size > 0 and (run_dir / "checkpoint.pt").is_file()
    assert len(values(scalars, "eval/episodic_return")) == 1
    # (under torchrun the ranks' lines interleave; rank 0 prints these, the other ranks only their start-up line)
    out = [line for line in proc.stdout.splitlines() if not line.startswith("rank ")]
    assert out[0] == f"run directory: runs/{run_dir.name}"
    assert f"model saved to runs/{run_dir.name}/{model.name}" in out
    assert any(line.startswith("eval: mean return ") for line in out)
    summary = re.compile(rf"done: {row.loss_steps[-1]} steps in \d+ s, mean return of the last \d+ episodes \S+; "
                         rf"logs in runs/{re.escape(run_dir.name)}; model runs/\S+, checkpoint runs/\S+")
    assert summary.fullmatch(out[-1]), out[-1]


@pytest.mark.parametrize("row", script_params())
def test_same_seed_gives_identical_losses(row, workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_tiny(row, cwd)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: v for k, v in scalars.items() if k.startswith(("losses/", "charts/episodic"))})
    assert logged[0] == logged[1]
    assert len(logged[0][row.losses[0]]) == len(row.loss_steps)


# The scripts whose old tests ran with --track and --capture-video, and the other continuous off-policy ones.
# ppo_atari.py (video of both env backends), ppo_atari_multigpu.py (two ranks) and ppg_procgen.py (its own recorder
# of envpool's frames, and a budget in which env 0 ends an episode) check theirs in their own test files.
TRACKED = ["ppo.py", "ppo_continuous_action.py", "dqn.py", "c51.py", "dqn_atari.py", "c51_atari.py",
           "ddpg_continuous_action.py", "td3_continuous_action.py", "sac_continuous_action.py"]


@pytest.mark.parametrize("row", script_params(TRACKED))
def test_track_and_capture_video_then_every_loss_and_schedule_is_logged(row, workdir):
    run_tiny(row, workdir, "--track", "--capture-video", "--save-model", "--eval-episodes", "2", *row.eval_args)
    scalars = read_scalars(single_run_dir(workdir))
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    # a training episode of env 0, or (Atari, where the tiny budget ends no game) the evaluation's first game
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"
    for key in row.losses:
        assert [step for step, _ in scalars[key]] == list(row.loss_steps), key
    # the algorithm's schedules: learning-rate annealing, target-network updates, Pendulum's 200-step episodes
    for key, expected in row.logged.items():
        assert values(scalars, key) == pytest.approx(list(expected)), key
    assert len(values(scalars, "eval/episodic_return")) == 2


@needs("mujoco")
@pytest.mark.parametrize("row", script_params(["ddpg_continuous_action.py", "td3_continuous_action.py",
                                               "sac_continuous_action.py"]))
def test_off_policy_scripts_run_through_their_updates_on_halfcheetah(row, workdir):
    run_script(row.name, *HALFCHEETAH_OFF, cwd=workdir)
    scalars = read_scalars(single_run_dir(workdir))
    for key in row.losses + ("charts/SPS",):
        assert [step for step, _ in scalars.get(key, [])] == [200], key
