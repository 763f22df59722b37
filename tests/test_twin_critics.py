"""The twin critics of td3_continuous_action.py and sac_continuous_action.py, each script's own QNetworks (both
critics' weights stacked; on a GPU one batched matmul a layer, on a CPU one critic after the other): either way each
critic computes what its own nn.Linear layers compute, forwards and backwards; the critics start apart, each drawn
as nn.Linear draws its weights; TD3's `only=0` is critic 1 alone. Checkpoints from before the stacking are refused
(tests/scripts.py, two_critics)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl import sac_continuous_action, td3_continuous_action

SCRIPTS = pytest.mark.parametrize("script", [sac_continuous_action, td3_continuous_action], ids=["sac", "td3"])


def layers_of(qf, i: int) -> list[nn.Linear]:
    """Critic i of the stacked network as three nn.Linear layers holding copies of its weights."""
    layers = []
    for w, b in ((qf.w1, qf.b1), (qf.w2, qf.b2), (qf.w3, qf.b3)):
        layer = nn.Linear(w.shape[1], w.shape[2])
        with torch.no_grad():
            layer.weight.copy_(w[i].T)  # nn.Linear computes x @ weight.T + bias
            layer.bias.copy_(b[i, 0])
        layers.append(layer)
    return layers


def q_of(layers: list[nn.Linear], obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
    x = torch.cat([obs, act], 1)
    return layers[2](F.relu(layers[1](F.relu(layers[0](x))))).squeeze(-1)


@SCRIPTS
@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_each_stacked_critic_computes_its_own_network_forwards_and_backwards(script, batched):
    torch.manual_seed(0)
    qf = script.QNetworks(5, 2, batched=batched)
    obs, target = torch.randn(64, 5), torch.randn(64)
    act = torch.randn(64, 2, requires_grad=True)
    q = qf(obs, act)
    assert q.shape == (2, 64)
    critics = [layers_of(qf, i) for i in range(2)]
    for i, layers in enumerate(critics):
        torch.testing.assert_close(q[i], q_of(layers, obs, act))

    # the critics' loss: each critic's mean squared error, summed; its gradient reaches each critic's own weights
    ((q - target) ** 2).mean(1).sum().backward()
    for i, layers in enumerate(critics):
        F.mse_loss(q_of(layers, obs, act), target).backward()
        for (w, b), layer in zip(((qf.w1, qf.b1), (qf.w2, qf.b2), (qf.w3, qf.b3)), layers):
            torch.testing.assert_close(w.grad[i], layer.weight.grad.T)
            torch.testing.assert_close(b.grad[i, 0], layer.bias.grad)

    # the actor's path: the gradient of min(Q1, Q2) with respect to the action
    act_grad = torch.autograd.grad(qf(obs, act).min(0).values.sum(), act)[0]
    reference = torch.min(q_of(critics[0], obs, act), q_of(critics[1], obs, act))
    torch.testing.assert_close(act_grad, torch.autograd.grad(reference.sum(), act)[0])


@SCRIPTS
def test_critics_start_apart_each_drawn_as_nn_linear_draws(script):
    torch.manual_seed(0)
    qf = script.QNetworks(17, 6)
    for w, b, fan_in in ((qf.w1, qf.b1, 23), (qf.w2, qf.b2, script.HIDDEN), (qf.w3, qf.b3, script.HIDDEN)):
        bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's: kaiming_uniform(a=sqrt(5)) weights, U(+-bound) biases
        assert w.shape == (2, fan_in, w.shape[2]) and b.shape == (2, 1, w.shape[2])
        for p in (w, b):
            assert p.abs().max() <= bound
            assert not torch.equal(p[0], p[1])
        # uniform on [-bound, bound]: standard deviation bound / sqrt(3) (2 x 23 x HIDDEN draws at the least)
        assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.03)
        reference = nn.Linear(fan_in, w.shape[2]).weight
        assert reference.abs().max() <= bound and w.std().item() == pytest.approx(reference.std().item(), rel=0.05)


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_td3_only_0_is_critic_one_alone(batched):
    torch.manual_seed(0)
    qf = td3_continuous_action.QNetworks(5, 2, batched=batched)
    obs, act = torch.randn(16, 5), torch.randn(16, 2)
    q1 = qf(obs, act, only=0)
    assert q1.shape == (16,)
    torch.testing.assert_close(q1, qf(obs, act)[0])
    q1.sum().backward()
    for w in (qf.w1, qf.w2, qf.w3):  # critic 2 takes no part in the actor's loss
        assert w.grad[1].abs().sum() == 0 and w.grad[0].abs().sum() > 0
