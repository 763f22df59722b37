"""cleanrl/ddpg_continuous_action.py: the soft target update, the action scaling buffers and exploration noise, and
(for the continuous off-policy family: ddpg, td3, sac) the action bounds saved with the actor. The family's space
checks are in tests/test_bad_input.py."""

import numpy as np
import pytest
import torch

from cleanrl.ddpg_continuous_action import Actor, QNetwork, exploration_actions, soft_update
from tests.helpers import run_script, single_run_dir
from tests.scripts import names, script_params


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


@pytest.mark.parametrize("row", script_params(names(family="off_policy")))
def test_the_saved_actor_carries_the_action_bounds(row, workdir):
    # the tiny Pendulum run of tests/scripts.py (actions in [-2, 2]), saved and evaluated
    run_script(row.name, *row.args, "--save-model", "--eval-episodes", "1", cwd=workdir)
    model = torch.load(single_run_dir(workdir) / f"{row.name[:-3]}.cleanrl_model")
    torch.testing.assert_close(model["actor"]["action_scale"], torch.tensor([2.0]))
