"""cleanrl/ppo_atari.py: end-to-end runs on both env backends, determinism, bad input, learning on Breakout.

The env block (preprocessing, real scores, backend equivalence) is tested in tests/test_atari_env.py.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py", reason="optional dependency ale-py (pip install '.[atari]') is not installed")
pytest.importorskip("cv2", reason="optional dependency opencv-python (pip install '.[atari]') is not installed")

from cleanrl.ppo_atari import Agent, Args, derive_sizes  # noqa: E402
from tests.helpers import (  # noqa: E402
    assert_compile_parity,
    read_scalars,
    run_dirs,
    run_script,
    single_run_dir,
    values,
)

LOSS_KEYS = [
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]
# 2 envs x 128 steps = 256 per iteration, 2 iterations: 256 steps per env, about one random Breakout game
TINY = ["--num-envs", "2", "--num-steps", "128", "--num-minibatches", "2", "--update-epochs", "1"]
# 2 envs x 16 steps = 32 per iteration, 3 iterations of 2 minibatches: the smallest budget with 3 logged updates.
# 48 steps per env end no Breakout game (a random game lasts a few hundred steps), so no episodes are compared.
PARITY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
          "--total-timesteps", "96"]


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
def test_end_to_end_logs_losses_scores_video_and_evaluated_model(workdir, backend):
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
    for key in LOSS_KEYS + ["charts/learning_rate"]:
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


def test_same_seed_gives_identical_losses(workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_script(
            "ppo_atari.py",
            *["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1"],
            "--total-timesteps", "128",
            cwd=cwd,
            timeout=300,
        )
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: values(scalars, k) for k in LOSS_KEYS})
    assert logged[0] == logged[1]
    assert len(logged[0]["losses/policy_loss"]) == 2


def test_compile_logs_the_same_losses_as_the_plain_path(workdir):
    # Measured (torch 2.13, CPU): the compiled losses differ from the plain ones by at most 2e-6 absolute, and
    # the explained variance (about -84 after the first update) by 3e-5 relative (float rounding of inductor's
    # kernels); the tolerance leaves a margin of ~5-30x. A cold inductor cache makes the compiled run take
    # ~100 s on the 2-core machine, a warm one ~30 s.
    assert_compile_parity(
        "ppo_atari.py", PARITY, workdir, ["policy_step", "update"], rtol=1e-3, atol=1e-5, min_updates=3,
        episodes_rtol=None,
    )


def test_amp_logs_losses_close_to_the_plain_path(workdir):
    # --amp runs the convolutions and linear layers in bf16 (~3 significant digits) while the distribution,
    # log-probabilities and losses stay float32. Measured on this CPU with the same seed: policy loss within
    # 5.2e-5, value loss within 4.2e-4 (0.159 vs 0.159), old_approx_kl within 3.2e-5, entropy within 5e-6;
    # hence rtol 5%, atol 2e-4. Log-probabilities computed in bf16 would be off by ~1e-3 per sample and fail
    # the KL bounds. The explained variance (a ratio of tiny variances early on: -0.149 vs -0.113) is only
    # required to be finite. Both runs act alike only while bf16 rounding moves no sampled action, so the
    # budget stays tiny.
    logged = {}
    for name, extra in (("plain", []), ("amp", ["--amp"])):
        (workdir / name).mkdir()
        run_script("ppo_atari.py", *PARITY, "--no-cuda", *extra, cwd=workdir / name, timeout=300)
        logged[name] = read_scalars(single_run_dir(workdir / name))
    plain, amp = logged["plain"], logged["amp"]
    for key in LOSS_KEYS:
        assert [s for s, _ in amp[key]] == [s for s, _ in plain[key]] == [32, 64, 96], key
        assert all(np.isfinite(values(amp, key))), key
        if key != "losses/explained_variance":
            assert values(amp, key) == pytest.approx(values(plain, key), rel=0.05, abs=2e-4), key
    # bf16 really ran: the value loss is not the plain path's to the last bit
    assert values(amp, "losses/value_loss") != values(plain, "losses/value_loss")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "NoSuchGame-v0"], "NoSuchGame-v0"),
        (["--env-id", "CartPole-v1"], "not an Atari game"),
        (["--env-backend", "envpool"], "env-backend"),
        (["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    proc = run_script("ppo_atari.py", *args, "--capture-video", cwd=workdir, check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last
    assert run_dirs(workdir) == [] and not (workdir / "videos").exists()


def test_derived_sizes_are_checked():
    assert derive_sizes(Args(num_envs=2, num_steps=32, num_minibatches=2, total_timesteps=200)) == (64, 32, 3)
    for bad, message in [
        (dict(num_minibatches=3), "num-minibatches"),
        (dict(total_timesteps=100), "total-timesteps"),
        (dict(eval_max_frames=0), "eval-max-frames"),
    ]:
        with pytest.raises(SystemExit) as exc:
            derive_sizes(Args(**bad))
        assert str(exc.value.code).startswith("error:") and message in str(exc.value.code)


@pytest.mark.slow
def test_learns_breakout(workdir):
    # CleanRL's ppo_atari reaches a Breakout score of ~400 after 10M steps. On 2 CPU cores (~200 SPS idle) this
    # only checks clear progress over a random policy (~1-2 points per game) after 1M steps (about 1.5 h).
    # Not yet run to completion on this machine: the threshold is an estimate from published learning curves.
    run_script("ppo_atari.py", "--total-timesteps", "1000000", cwd=workdir, timeout=4 * 3600)
    returns = values(read_scalars(single_run_dir(workdir)), "charts/episodic_return")
    assert np.mean(returns[-20:]) >= 10, returns[-20:]
