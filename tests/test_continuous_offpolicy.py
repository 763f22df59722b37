"""ddpg_continuous_action.py, td3_continuous_action.py, sac_continuous_action.py end to end: runs through the
actor and critic updates on Pendulum-v1 and HalfCheetah-v5 checked from the event file, determinism, SAC with
and without --autotune, bad input, and (slow) learning on Pendulum-v1."""

import numpy as np
import pytest
import torch

from tests.helpers import read_scalars, run_dirs, run_script, single_run_dir, values

SCRIPTS = ["ddpg_continuous_action.py", "td3_continuous_action.py", "sac_continuous_action.py"]
CRITIC_KEYS = {
    "ddpg_continuous_action.py": ["losses/qf1_values", "losses/qf1_loss"],
    "td3_continuous_action.py": [
        "losses/qf1_values", "losses/qf2_values", "losses/qf1_loss", "losses/qf2_loss", "losses/qf_loss",
    ],
    "sac_continuous_action.py": [
        "losses/qf1_values", "losses/qf2_values", "losses/qf1_loss", "losses/qf2_loss", "losses/qf_loss",
    ],
}
# Small but real: 200 random steps fill the memory, then 200 gradient steps (100 delayed actor updates);
# losses are logged every 100 steps, at steps 300 and 400.
SHORT = ["--learning-starts", "200", "--total-timesteps", "400", "--batch-size", "32"]


def loss_keys(script: str) -> list[str]:
    keys = CRITIC_KEYS[script] + ["losses/actor_loss"]
    return keys + (["losses/alpha", "losses/alpha_loss"] if script.startswith("sac") else [])


@pytest.mark.parametrize("script", SCRIPTS)
def test_pendulum_updates_actor_and_critics_deterministically_and_saves_an_evaluated_model(workdir, script):
    logged = []
    for i, extra in enumerate([["--save-model", "--eval-episodes", "1"], []]):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_script(script, "--env-id", "Pendulum-v1", *SHORT, *extra, cwd=cwd)
        run_dir = single_run_dir(cwd)
        scalars = read_scalars(run_dir)
        for key in loss_keys(script) + ["charts/SPS"]:
            assert [step for step, _ in scalars.get(key, [])] == [300, 400], key
        # two Pendulum episodes of 200 steps each
        assert values(scalars, "charts/episodic_length") == [200.0, 200.0]
        assert len(values(scalars, "charts/episodic_return")) == 2
        logged.append({k: values(scalars, k) for k in loss_keys(script)})
        if i == 0:
            assert len(values(scalars, "eval/episodic_return")) == 1
            model = torch.load(run_dir / f"{script[:-3]}.cleanrl_model")
            # the action bounds travel with the actor's state dict
            torch.testing.assert_close(model["actor"]["action_scale"], torch.tensor([2.0]))
    # same seed, identical losses (saving and evaluating come after training and cannot change them)
    assert logged[0] == logged[1]


@pytest.mark.parametrize("script", SCRIPTS)
def test_halfcheetah_reaches_the_updates(workdir, script):
    run_script(script, "--env-id", "HalfCheetah-v5", "--learning-starts", "100", "--total-timesteps", "200",
               "--batch-size", "32", cwd=workdir)
    scalars = read_scalars(single_run_dir(workdir))
    for key in loss_keys(script) + ["charts/SPS"]:
        assert [step for step, _ in scalars.get(key, [])] == [200], key


def test_sac_autotune_moves_alpha_and_no_autotune_keeps_it(workdir):
    # the autotuned run is the Pendulum test above; here alpha must start at exp(0) = 1 and fall, since the
    # initial policy's entropy is far above -|A| = -1 ...
    auto, fixed = workdir / "auto", workdir / "fixed"
    auto.mkdir()
    fixed.mkdir()
    run_script("sac_continuous_action.py", "--env-id", "Pendulum-v1", *SHORT, cwd=auto)
    alphas = values(read_scalars(single_run_dir(auto)), "losses/alpha")
    assert 0.0 < alphas[1] < alphas[0] < 1.0
    # ... while --no-autotune keeps --alpha and logs no alpha loss
    run_script("sac_continuous_action.py", "--env-id", "Pendulum-v1", *SHORT, "--no-autotune", "--alpha", "0.3",
               cwd=fixed)
    scalars = read_scalars(single_run_dir(fixed))
    assert values(scalars, "losses/alpha") == pytest.approx([0.3, 0.3])
    assert "losses/alpha_loss" not in scalars
    assert len(values(scalars, "losses/actor_loss")) == 2


def test_track_and_capture_video(workdir):
    run_script("ddpg_continuous_action.py", "--env-id", "Pendulum-v1", "--learning-starts", "100",
               "--total-timesteps", "200", "--batch-size", "32", "--track", "--capture-video", cwd=workdir)
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "CartPole-v1"], "Box (continuous) actions only"),
        (["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
        (["--env-id", "Pendulum-v1", "--total-timesteps", "1000", "--learning-starts", "1000"], "learning-starts"),
        (["--env-id", "Pendulum-v1", "--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_run_directory(workdir, script, args, message):
    proc = run_script(script, *args, cwd=workdir, check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, last
    assert run_dirs(workdir) == [] and not (workdir / "videos").exists()


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_learns_pendulum(workdir, script):
    # 20k steps, seed 1, 1000 random steps first (the defaults, 25k/5k, are tuned for MuJoCo's 1M-step runs)
    run_script(script, "--env-id", "Pendulum-v1", "--seed", "1", "--total-timesteps", "20000",
               "--learning-starts", "1000", cwd=workdir, timeout=3600)
    returns = values(read_scalars(single_run_dir(workdir)), "charts/episodic_return")
    assert len(returns) == 100
    assert np.mean(returns[-10:]) > -300, returns[-10:]
