"""cleanrl/dqn_atari.py end to end: the Nature CNN learns from the frame replay memory and the target updates."""

import pytest


from tests.helpers import (
    assert_bad_input_rejected,
    assert_compile_parity,
    assert_losses_close,
    read_scalars,
    run_script,
    single_run_dir,
    values,
)

# 400 agent steps, learning from step 101 with a gradient step every 4 (75 steps of batch 8), a target update
# every 100 steps (at 200, 300, 400), losses logged every 100 steps (at 200, 300, 400). A buffer of 300
# transitions wraps before the end.
TINY = [
    "--total-timesteps", "400",
    "--learning-starts", "100",
    "--buffer-size", "300",
    "--batch-size", "8",
    "--target-network-frequency", "100",
]


def test_end_to_end_learns_updates_the_target_and_evaluates(workdir):
    run_script(
        "dqn_atari.py", *TINY, "--save-model", "--eval-episodes", "1", "--eval-max-frames", "400",
        "--capture-video", "--track", cwd=workdir,
    )
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    assert [s for s, _ in scalars["losses/td_loss"]] == [200, 300, 400]
    assert len(values(scalars, "losses/q_values")) == 3 and len(values(scalars, "charts/SPS")) == 3
    assert scalars["charts/target_updates"] == [(200, 1.0), (300, 2.0), (400, 3.0)]
    assert len(values(scalars, "eval/episodic_return")) == 1
    assert (run_dir / "dqn_atari.cleanrl_model").stat().st_size > 0
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"


def test_games_are_logged_with_real_scores_and_epsilon(workdir):
    # epsilon decays linearly over all 600 steps: the step-s action uses 1 - 0.99 * (s - 1) / 600
    run_script(
        "dqn_atari.py", "--total-timesteps", "600", "--learning-starts", "599", "--buffer-size", "64",
        "--exploration-fraction", "1.0", cwd=workdir,
    )
    scalars = read_scalars(single_run_dir(workdir))
    returns, lengths = values(scalars, "charts/episodic_return"), values(scalars, "charts/episodic_length")
    assert len(returns) >= 2 and len(returns) == len(lengths)
    assert all(r >= 0 and r == int(r) for r in returns)  # Breakout scores of whole games
    assert sum(lengths) <= 600 and all(length > 5 * 10 for length in lengths)  # 5 lives per game
    for step, eps in scalars["charts/epsilon"]:
        assert eps == pytest.approx(1 - 0.99 * (step - 1) / 600)


def test_compile_and_amp_log_the_same_losses_as_the_plain_path(workdir):
    # The TINY budget on the default backend: 75 gradient steps, losses logged at 200, 300, 400. No game ends in
    # 400 steps of Breakout, so only the losses are compared. Measured: compiled and plain agree to about 1e-5 relative
    # (td_loss, values ~1e-5..1e-3) and 1e-6 (q_values). --amp (bf16 forward passes) moved q_values by up to 8%
    # (0.006 absolute) and td_loss by up to 1e-4 absolute; its check is a loose one (atol 0.02, rtol 0.1), for these tiny
    # TD losses little more than: it runs end to end and logs finite losses at the same steps.
    plain = assert_compile_parity(
        "dqn_atari.py", TINY, workdir, ["policy_step", "update"], rtol=1e-3, atol=1e-6, min_updates=3, episodes_rtol=None
    )
    (workdir / "amp").mkdir()
    run_script("dqn_atari.py", *TINY, "--amp", "--no-cuda", cwd=workdir / "amp")
    amp = read_scalars(single_run_dir(workdir / "amp"))
    keys = ("losses/td_loss", "losses/q_values")
    assert all([s for s, _ in amp[key]] == [200, 300, 400] for key in keys)
    assert_losses_close(plain, amp, keys, rtol=0.1, atol=0.02)  # also fails on a NaN or inf
    # bf16 really ran: an --amp that changed nothing would log the float32 values exactly
    assert values(amp, "losses/q_values") != values(plain, "losses/q_values")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "CartPole-v1"], "not an Atari game"),
        (["--env-backend", "envpool"], "env-backend"),
        (["--learning-starts", "500", "--total-timesteps", "500"], "learning-starts"),
        (["--batch-size", "0"], "batch-size"),
        (["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    assert_bad_input_rejected("dqn_atari.py", args, message, cwd=workdir)
