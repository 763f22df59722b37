"""cleanrl/dqn.py: the epsilon schedule, the TD target, the target-network update and epsilon-greedy by hand; for
the value-based scripts (dqn, c51 and their Atari versions) the schedule as they log it, two envs on CartPole
(same seed, same losses), and whole Breakout games with real scores. Target-network updates at their steps and
their count are checked from tests/scripts.py (charts/target_updates)."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from cleanrl.dqn import epsilon_greedy, linear_schedule, td_target, update_target
from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import names, script_params


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
    greedy = lambda: np.ones(2000, dtype=np.int64)  # noqa: E731  (argmax of Q = [0, 3, 1] in every env)
    rng = np.random.default_rng(0)
    assert (epsilon_greedy(greedy, 2000, 3, 0.0, rng) == 1).all()
    random_actions = epsilon_greedy(greedy, 2000, 3, 1.0, rng)
    assert set(random_actions.tolist()) == {0, 1, 2}
    # with epsilon 0.3 an action other than the greedy one comes from 2/3 of the random draws
    assert np.mean(epsilon_greedy(greedy, 2000, 3, 0.3, rng) != 1) == pytest.approx(0.2, abs=0.03)


def test_epsilon_greedy_draws_coins_then_random_actions():
    # the numpy stream is used as before the policy step was split out: one coin per env, then one random
    # action per env, whatever the coins say (resumed runs and old checkpoints depend on this order)
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    actions = epsilon_greedy(lambda: np.array([2, 2, 2, 2]), 4, 4, 0.5, rng)
    coins, randoms = ref.random(4) < 0.5, ref.integers(0, 4, size=4)
    assert 0 < coins.sum() < 4  # this seed mixes exploring and exploiting envs
    assert actions.tolist() == np.where(coins, randoms, 2).tolist()
    assert rng.random() == ref.random()


def test_epsilon_greedy_runs_the_network_only_if_some_env_exploits():
    calls = []

    def greedy() -> np.ndarray:
        calls.append(1)
        return np.array([7, 7])

    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    # epsilon 1: every coin says explore, the greedy actions are never computed, the draws are the same
    actions = epsilon_greedy(greedy, 2, 4, 1.0, rng)
    assert calls == [] and actions.tolist() == (ref.random(2), ref.integers(0, 4, size=2))[1].tolist()
    assert rng.random() == ref.random()
    # epsilon 0: every env exploits, one call
    assert epsilon_greedy(greedy, 2, 4, 0.0, rng).tolist() == [7, 7] and calls == [1]


# 1000 steps over 2 envs (500 iterations), learning from step 501 with a gradient step every 2nd step, losses at
# every 100th step: 5 logged updates; epsilon 1 -> 0.05 over the first 500 steps (the default fraction 0.5)
TWO_ENVS = ["--total-timesteps", "1000", "--learning-starts", "500", "--num-envs", "2", "--train-frequency", "2"]


@pytest.mark.parametrize("row", script_params(names(family="value", needs=None)))  # on CartPole
def test_two_envs_follow_the_epsilon_schedule_and_the_same_seed_gives_identical_losses(row, workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_script(row.name, *TWO_ENVS, cwd=cwd)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: values(scalars, k) for k in (*row.losses, "charts/episodic_return")})
        # the actions of global step s (both envs' steps up to s) used epsilon at t = s - 2
        assert scalars["charts/epsilon"], "no episode ended"
        for step, eps in scalars["charts/epsilon"]:
            assert eps == pytest.approx(linear_schedule(1.0, 0.05, 500, step - 2)), step
    assert logged[0] == logged[1]
    assert len(logged[0][row.losses[0]]) == 5


# 600 steps without a gradient step (learning from step 600), epsilon 1 -> 0.01 over all of them: the action of
# step s uses epsilon 1 - 0.99 (s - 1) / 600; charts/epsilon is logged at every game's end
ATARI_EPSILON = ["--total-timesteps", "600", "--learning-starts", "599", "--buffer-size", "64",
                 "--exploration-fraction", "1.0"]


@pytest.mark.parametrize("row", script_params(names(family="value", needs="atari")))
def test_atari_games_are_logged_with_real_scores_and_epsilon(row, workdir):
    run_script(row.name, *ATARI_EPSILON, cwd=workdir)
    scalars = read_scalars(single_run_dir(workdir))
    returns, lengths = values(scalars, "charts/episodic_return"), values(scalars, "charts/episodic_length")
    assert len(returns) >= 2 and len(returns) == len(lengths)
    assert all(r >= 0 and r == int(r) for r in returns)  # Breakout scores of whole games
    assert sum(lengths) <= 600 and all(length > 5 * 10 for length in lengths)  # 5 lives per game
    for step, eps in scalars["charts/epsilon"]:
        assert eps == pytest.approx(1 - 0.99 * (step - 1) / 600)
