"""cleanrl/ddpg_continuous_action.py: the soft target update, the action scaling buffers, exploration noise and
the action-space checks shared by the continuous off-policy family (end-to-end runs are in
test_continuous_offpolicy.py)."""

from types import SimpleNamespace
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
import torch

import runtime
from cleanrl.ddpg_continuous_action import Actor, QNetwork, exploration_actions, soft_update
from tests.helpers import assert_compile_parity, values


def check_spaces(env_id, observation_space, action_space, script):
    """The space checks, now in runtime.probe_env, on an environment with these spaces."""
    env = SimpleNamespace(observation_space=observation_space, action_space=action_space)
    with mock.patch.object(gym, "make", lambda _: env):
        runtime.probe_env(env_id, gym.spaces.Box, script, finite_actions=True)


def test_soft_update_moves_the_target_by_exactly_tau():
    online, target = QNetwork(3, 1), QNetwork(3, 1)
    with torch.no_grad():
        for p in online.parameters():
            p.fill_(-2.0)
        for p in target.parameters():
            p.fill_(2.0)
    # by hand: 0.25 * -2 + 0.75 * 2 = 1; again: 0.25 * -2 + 0.75 * 1 = 0.25 (all exact in binary floats)
    soft_update(target, online, 0.25)
    assert all(torch.equal(p, torch.full_like(p, 1.0)) for p in target.parameters())
    soft_update(target, online, 0.25)
    assert all(torch.equal(p, torch.full_like(p, 0.25)) for p in target.parameters())
    # the online network is untouched
    assert all(torch.equal(p, torch.full_like(p, -2.0)) for p in online.parameters())


def test_soft_update_with_the_default_tau_on_random_weights():
    online, target = QNetwork(3, 2), QNetwork(3, 2)
    before = [p.clone() for p in target.parameters()]
    soft_update(target, online, 0.005)
    for t, t0, o in zip(target.parameters(), before, online.parameters()):
        torch.testing.assert_close(t, 0.995 * t0 + 0.005 * o)
        assert not t.requires_grad or t.grad is None


def test_action_scale_and_bias_are_buffers_that_move_with_the_module():
    actor = Actor(3, np.array([0.0, -2.0]), np.array([1.0, 2.0]))
    buffers = dict(actor.named_buffers())
    torch.testing.assert_close(buffers["action_scale"], torch.tensor([0.5, 2.0]))
    torch.testing.assert_close(buffers["action_bias"], torch.tensor([0.5, 0.0]))
    assert "action_scale" in actor.state_dict() and "action_bias" in actor.state_dict()
    actor = actor.to(torch.float64)  # a .to() moves buffers like parameters (the same path as .to(device))
    assert actor.action_scale.dtype == torch.float64
    # tanh output scaled into [low, high] even for extreme inputs
    a = actor(torch.tensor([[1e6, -1e6, 1e6], [-1e6, 1e6, -1e6]], dtype=torch.float64))
    assert torch.all(a >= torch.tensor([0.0, -2.0], dtype=torch.float64))
    assert torch.all(a <= torch.tensor([1.0, 2.0], dtype=torch.float64))


def test_exploration_noise_is_scaled_by_the_half_range_and_clipped_to_the_bounds():
    actor = Actor(3, np.array([0.0, -2.0]), np.array([1.0, 2.0]))  # scale (0.5, 2), bias (0.5, 0)
    mu = torch.tensor([[0.5, 0.0], [0.9, 1.9]])
    noise = torch.tensor([[1.0, -1.0], [10.0, 10.0]])
    # by hand, sigma = 0.1: row 0: 0.5 + 0.1*0.5*1 = 0.55, 0 + 0.1*2*-1 = -0.2
    # row 1: 0.9 + 0.1*0.5*10 = 1.4 -> 1 (clip), 1.9 + 0.1*2*10 = 3.9 -> 2 (clip)
    out = exploration_actions(mu, noise, 0.1, actor)
    torch.testing.assert_close(out, torch.tensor([[0.55, -0.2], [1.0, 2.0]]))


@pytest.mark.parametrize(
    "action_space, message",
    [
        (gym.spaces.Discrete(3), "Box (continuous) actions only"),
        (gym.spaces.Box(-np.inf, np.inf, (2,)), "unbounded"),
        (gym.spaces.Box(np.array([-1.0, -1.0]), np.array([1.0, np.inf])), "unbounded"),
        (gym.spaces.Box(-1.0, 1.0, (2, 2)), "1-D"),
    ],
)
def test_unsupported_action_spaces_fail_in_one_line(action_space, message):
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(SystemExit) as e:
        check_spaces("Fake-v0", obs_space, action_space, "ddpg_continuous_action.py")
    assert str(e.value).startswith("error: Fake-v0") and message in str(e.value)


def test_bounded_box_passes_the_check():
    check_spaces("Fake-v0", gym.spaces.Box(-np.inf, np.inf, (17,)), gym.spaces.Box(-1.0, 1.0, (6,)), "x.py")


PARITY_BUDGET = ["--env-id", "Pendulum-v1", "--learning-starts", "100", "--total-timesteps", "400", "--batch-size", "32",
                 "--no-progress"]


def test_compile_logs_the_same_losses_as_the_plain_path(workdir):
    # Pendulum-v1, 100 random steps then 300 critic steps (150 delayed actor updates), losses logged at steps
    # 200, 300 and 400. Measured: compiled and plain losses differ by at most 8e-7 relative (fused kernels' rounding);
    # the exploration noise comes from torch's generator in both paths.
    # The tolerance leaves room for rounding to grow with the updates; a wrong target or a skipped step moves the
    # losses by far more. Episode returns agree within 1e-5 relative, not exactly: from step 101 the episodes act
    # with the learning policy, whose rounding-level differences move the returns in the 7th digit (measured).
    plain = assert_compile_parity(
        "ddpg_continuous_action.py", PARITY_BUDGET, workdir, ["policy_step", "update_critic", "update_actor"], rtol=1e-4, atol=1e-6, episodes_rtol=1e-5
    )
    assert len(values(plain, "charts/episodic_return")) == 2
