"""cleanrl/ppo_atari.py: the Nature CNN, and runs on both env backends that log whole games with real scores and
record training and evaluation videos.

The env block (preprocessing, real scores, backend equivalence) is tested in tests/test_atari_env.py.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py", reason="optional dependency ale-py (pip install '.[atari]') is not installed")
pytest.importorskip("cv2", reason="optional dependency opencv-python (pip install '.[atari]') is not installed")

from cleanrl.ppo_atari import Agent  # noqa: E402
from tests.helpers import read_scalars, run_script, single_run_dir, values  # noqa: E402
from tests.scripts import PPO_LOSSES  # noqa: E402

# 2 envs x 128 steps = 256 per iteration, 2 iterations: 256 steps per env, about one random Breakout game
TINY = ["--num-envs", "2", "--num-steps", "128", "--num-minibatches", "2", "--update-epochs", "1"]


def test_nature_cnn_scales_uint8_frames_and_has_the_paper_shapes():
    agent = Agent(n_actions=4)
    frames = torch.full((3, 4, 84, 84), 255, dtype=torch.uint8)
    hidden = agent.features(frames)
    assert hidden.shape == (3, 512)
    # the network sees frames / 255: feeding 1.0 floats through the layers gives the same features
    torch.testing.assert_close(hidden, agent.network(torch.ones(3, 4, 84, 84)))
    action, logprob, entropy, value = agent.get_action_and_value(frames)
    assert action.shape == logprob.shape == entropy.shape == (3,) and value.shape == (3, 1)
    # Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, 512 hidden units
    convs = [m for m in agent.network if isinstance(m, torch.nn.Conv2d)]
    shapes = [(c.out_channels, c.kernel_size, c.stride) for c in convs]
    assert shapes == [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    # a near-uniform initial policy (actor head std 0.01)
    assert entropy.min().item() > 0.99 * np.log(4)


@pytest.mark.parametrize("backend", ["ale-vector", "gymnasium"])
def test_both_env_backends_log_whole_games_and_record_training_and_evaluation_videos(workdir, backend):
    run_script(
        "ppo_atari.py",
        *TINY,
        "--total-timesteps", "512",
        "--env-backend", backend,
        "--capture-video",
        "--save-model",
        "--eval-episodes", "1",
        "--eval-max-frames", "2000",
        cwd=workdir,
        timeout=300,
    )
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    for key in PPO_LOSSES + ("charts/learning_rate",):
        assert len(scalars.get(key, [])) == 2, key
    assert values(scalars, "charts/learning_rate") == pytest.approx([2.5e-4, 1.25e-4])
    # SPS is measured from the end of the first iteration (the warm-up), so only the second one logs it
    assert [step for step, _ in scalars["charts/SPS"]] == [512]
    assert all(v > 0 for v in values(scalars, "charts/SPS"))
    returns, lengths = values(scalars, "charts/episodic_return"), values(scalars, "charts/episodic_length")
    assert returns and len(returns) == len(lengths), "no whole game ended in 256 steps per env"
    # whole games of Breakout: scores are whole points, and a game of 5 lives lasts more than 5 short rallies
    assert all(r >= 0 and r == int(r) for r in returns) and all(n > 50 for n in lengths)
    assert len(values(scalars, "eval/episodic_return")) == 1
    assert (run_dir / "ppo_atari.cleanrl_model").stat().st_size > 0
    videos = list((workdir / "videos").rglob("*.mp4"))
    assert any("-eval" not in v.parent.name for v in videos), f"no training video: {videos}"
    assert any("-eval" in v.parent.name for v in videos), f"no evaluation video: {videos}"


def test_a_pipelined_rollout_is_the_same_run_as_a_synchronous_one(workdir):
    # The envs step in two halves (here of 3 and 2 envs), each while the policy acts on the other
    # (--pipeline-envs on), or all together (off, auto's choice on the CPU). Each env acts on its own newest frames with the same policy either way, and the policy's
    # draws for the two halves come from the generator in the order of one draw for all the envs, so on the CPU with
    # one torch thread the two runs play the same games, logged at the same steps. The losses agree to float
    # rounding: the network's convolutions on 3 and 2 frames round differently from one on 5.
    runs = {}
    for mode in ("on", "off"):
        run_script("ppo_atari.py", "--num-envs", "5", "--num-steps", "64", "--num-minibatches", "2",
                   "--update-epochs", "1", "--total-timesteps", "1280", "--torch-threads", "1", "--eval-episodes", "0",
                   "--pipeline-envs", mode, "--exp-name", f"pipeline-{mode}", cwd=workdir, timeout=300)
        run_dir = next(d for d in (workdir / "runs").iterdir() if d.name.split("__")[1] == f"pipeline-{mode}")
        runs[mode] = read_scalars(run_dir)
    pipelined, synchronous = runs.values()
    assert len(pipelined["charts/episodic_return"]) >= 3, "no game ended: the comparison misses the games"
    for tag in ("charts/episodic_return", "charts/episodic_length"):
        assert pipelined[tag] == synchronous[tag], tag
    for tag in PPO_LOSSES + ("losses/explained_variance", "charts/learning_rate"):
        assert [step for step, _ in pipelined[tag]] == [320, 640, 960, 1280], tag
        assert [step for step, _ in synchronous[tag]] == [320, 640, 960, 1280], tag
        assert values(pipelined, tag) == pytest.approx(values(synchronous, tag), rel=1e-4, abs=1e-6), tag
