"""cleanrl/dqn.py: the schedule, target and TD math, end-to-end runs, determinism, bad input, learning."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from cleanrl.dqn import epsilon_greedy, linear_schedule, td_target, update_target
from tests.helpers import (
    assert_bad_input_rejected,
    assert_compile_parity,
    read_scalars,
    run_script,
    single_run_dir,
    values,
)

# 2000 steps, learning from step 501, a gradient step every 10, a target update every 500 steps, losses logged
# every 100 steps: gradient steps at 510..2000 (150), target updates at 1000, 1500, 2000.
E2E = ["--total-timesteps", "2000", "--learning-starts", "500", "--target-network-frequency", "500", "--batch-size", "32"]
# The learning test's budget: 120k steps, epsilon 1 -> 0.05 over the first 30k, learning from step 5001 with a
# gradient step every 4 steps (the other flags are the defaults). Seed 1 on this machine: mean 429.25 over the
# last 20 episodes (the defaults, 500k steps, gave 479.4).
LEARN = ["--total-timesteps", "120000", "--exploration-fraction", "0.25", "--learning-starts", "5000", "--train-frequency", "4"]


def test_linear_schedule_by_hand():
    assert linear_schedule(1.0, 0.05, 100, 0) == pytest.approx(1.0)
    assert linear_schedule(1.0, 0.05, 100, 50) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 100, 100) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.05, 100, 10_000) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.01, 0, 0) == 0.01
    assert linear_schedule(0.0, 0.5, 10, 4) == pytest.approx(0.2)  # increasing schedules stop at end_e too
    assert linear_schedule(0.0, 0.5, 10, 40) == pytest.approx(0.5)


def test_td_target_bootstraps_unless_terminated():
    rewards = torch.tensor([1.0, 1.0, -1.0])
    next_q = torch.tensor([[2.0, 5.0], [2.0, 5.0], [-3.0, -4.0]])
    terminations = torch.tensor([0.0, 1.0, 0.0])
    # 1 + 0.5 * 5, 1 (terminal), -1 + 0.5 * -3
    torch.testing.assert_close(td_target(rewards, next_q, terminations, 0.5), torch.tensor([3.5, 1.0, -2.5]))


def test_update_target_hard_and_soft():
    online, target = nn.Linear(1, 1), nn.Linear(1, 1)
    with torch.no_grad():
        online.weight.fill_(2.0), online.bias.fill_(4.0), target.weight.fill_(0.0), target.bias.fill_(1.0)
    update_target(target, online, 0.25)
    assert target.weight.item() == pytest.approx(0.5) and target.bias.item() == pytest.approx(1.75)
    update_target(target, online, 1.0)
    assert target.weight.item() == 2.0 and target.bias.item() == 4.0


def test_epsilon_greedy_extremes_and_rate():
    greedy = np.ones(2000, dtype=np.int64)  # argmax of Q = [0, 3, 1] in every env
    rng = np.random.default_rng(0)
    assert (epsilon_greedy(greedy, 3, 0.0, rng) == 1).all()
    random_actions = epsilon_greedy(greedy, 3, 1.0, rng)
    assert set(random_actions.tolist()) == {0, 1, 2}
    # with epsilon 0.3 an action other than the greedy one comes from 2/3 of the random draws
    assert np.mean(epsilon_greedy(greedy, 3, 0.3, rng) != 1) == pytest.approx(0.2, abs=0.03)


def test_epsilon_greedy_draws_coins_then_random_actions():
    # the numpy stream is used as before the policy step was split out: one coin per env, then one random
    # action per env, whatever the coins say (resumed runs and old checkpoints depend on this order)
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    actions = epsilon_greedy(np.array([2, 2, 2, 2]), 4, 0.5, rng)
    coins, randoms = ref.random(4) < 0.5, ref.integers(0, 4, size=4)
    assert actions.tolist() == np.where(coins, randoms, 2).tolist()
    assert rng.random() == ref.random()


def test_end_to_end_updates_the_network_and_the_target(workdir):
    run_script("dqn.py", *E2E, "--save-model", "--eval-episodes", "2", "--track", "--capture-video", cwd=workdir)
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    # losses are logged at the gradient steps on multiples of 100 after learning_starts: 600, 700, ..., 2000
    assert [s for s, _ in scalars["losses/td_loss"]] == list(range(600, 2001, 100))
    assert len(values(scalars, "losses/q_values")) == 15 and len(values(scalars, "charts/SPS")) == 15
    assert scalars["charts/target_updates"] == [(1000, 1.0), (1500, 2.0), (2000, 3.0)]
    assert values(scalars, "charts/episodic_return") and values(scalars, "charts/episodic_length")
    eps = values(scalars, "charts/epsilon")
    assert eps == sorted(eps, reverse=True) and 0.05 <= eps[-1] < 1.0
    assert len(values(scalars, "eval/episodic_return")) == 2
    assert (run_dir / "dqn.cleanrl_model").stat().st_size > 0
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"


def test_same_seed_gives_identical_losses(workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_script("dqn.py", "--total-timesteps", "1000", "--learning-starts", "500", "--num-envs", "2", "--train-frequency", "2", cwd=cwd)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: values(scalars, k) for k in ("losses/td_loss", "losses/q_values", "charts/episodic_return")})
    assert logged[0] == logged[1]
    assert len(logged[0]["losses/td_loss"]) == 5


def test_compile_logs_the_same_losses_as_the_plain_path(workdir):
    # 500 steps, learning from step 201: 30 gradient steps of batch 128, losses logged at 300, 400, 500, a target
    # copy at 500; CartPole episodes end every ~20 steps, so both runs must also act alike. Measured: compiled and
    # plain losses agree to about 1e-6 relative (float rounding of fused kernels); the tolerance leaves room.
    assert_compile_parity(
        "dqn.py", ["--total-timesteps", "500", "--learning-starts", "200"], workdir, ["policy_step", "update"],
        rtol=1e-4, atol=1e-5, min_updates=3,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
        (["--env-id", "Pendulum-v1"], "Discrete"),
        (["--learning-starts", "600", "--total-timesteps", "600"], "learning-starts"),
        (["--num-envs", "3"], "num-envs"),
        (["--tau", "0"], "tau"),
        (["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    assert_bad_input_rejected("dqn.py", args, message, cwd=workdir)


@pytest.mark.slow
def test_learns_cartpole(workdir):
    run_script("dqn.py", *LEARN, cwd=workdir, timeout=1800)
    returns = values(read_scalars(single_run_dir(workdir)), "charts/episodic_return")
    assert np.mean(returns[-20:]) >= 400, returns[-20:]
