"""The twin critics of td3_continuous_action.py and sac_continuous_action.py: two QNetworks called as one
(twin_critics, a speed.Ensemble; on the GPU path one vmap over their stacked weights, on a CPU one after the
other). Either way each critic computes the MLP on [s, a] that its own weights make, forwards and backwards; the
critics start apart, each drawn as nn.Linear draws its weights; qf[0] is critic 1 alone (TD3's actor loss).
Checkpoints from before (entries qf1, qf2; then one network of stacked weights w1 ... b3) are refused in one line
(tests/scripts.py, two_critics and stacked_critics)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from cleanrl import sac_continuous_action, td3_continuous_action

SCRIPTS = pytest.mark.parametrize("script", [sac_continuous_action, td3_continuous_action], ids=["sac", "td3"])
FORMS = pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])


def layers_of(critic: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, bias) of each linear layer of one critic, input to output."""
    return [(layer.weight, layer.bias) for layer in (critic.fc1, critic.fc2, critic.fc3)]


def q_of(layers: list, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
    """The critic's MLP written out: relu, relu, linear on the joined input [s, a]; (batch,)."""
    (w1, b1), (w2, b2), (w3, b3) = layers
    x = torch.cat([obs, act], 1)
    return F.linear(F.relu(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)), w3, b3).squeeze(-1)


def copies(layers: list) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()) for w, b in layers]


@SCRIPTS
@FORMS
def test_each_critic_computes_its_own_network_forwards_and_backwards(script, batched):
    torch.manual_seed(0)
    qf = script.twin_critics(5, 2, batched=batched)
    obs, target = torch.randn(64, 5), torch.randn(64)
    act = torch.randn(64, 2, requires_grad=True)
    q = qf(obs, act)
    assert q.shape == (2, 64)
    references = [copies(layers_of(critic)) for critic in qf]
    for i, layers in enumerate(references):
        torch.testing.assert_close(q[i], q_of(layers, obs, act))

    # the critics' loss: each critic's mean squared error, summed; its gradient reaches each critic's own weights
    ((q - target) ** 2).mean(1).sum().backward()
    for critic, layers in zip(qf, references):
        F.mse_loss(q_of(layers, obs, act), target).backward()
        for (w, b), (w_ref, b_ref) in zip(layers_of(critic), layers):
            torch.testing.assert_close(w.grad, w_ref.grad)
            torch.testing.assert_close(b.grad, b_ref.grad)

    # the actor's path: the gradient of min(Q1, Q2) with respect to the action
    act_grad = torch.autograd.grad(qf(obs, act).min(0).values.sum(), act)[0]
    reference = torch.min(q_of(references[0], obs, act), q_of(references[1], obs, act))
    torch.testing.assert_close(act_grad, torch.autograd.grad(reference.sum(), act)[0])


@SCRIPTS
def test_critics_start_apart_each_drawn_as_nn_linear_draws(script):
    torch.manual_seed(0)
    qf = script.twin_critics(17, 6)
    assert len(qf) == 2
    for (w1, b1), (w2, b2), fan_in in zip(layers_of(qf[0]), layers_of(qf[1]), (23, script.HIDDEN, script.HIDDEN)):
        bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's: kaiming_uniform(a=sqrt(5)) weights, U(+-bound) biases
        assert w1.shape == w2.shape == (w1.shape[0], fan_in) and b1.shape == b2.shape == (w1.shape[0],)
        for p, q in ((w1, w2), (b1, b2)):
            assert max(p.abs().max(), q.abs().max()) <= bound
            assert not torch.equal(p, q)
        # uniform on [-bound, bound]: standard deviation bound / sqrt(3) (23 x HIDDEN draws at the least)
        for w in (w1, w2):
            assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)


@SCRIPTS
@FORMS
def test_the_first_critic_alone_is_the_first_row_and_takes_all_the_gradient(script, batched):
    """TD3's actor loss is -Q_1(s, mu(s)) through qf[0]: the first row of both critics' values, and critic 2 takes no
    part in its gradient."""
    torch.manual_seed(0)
    qf = script.twin_critics(5, 2, batched=batched)
    obs, act = torch.randn(16, 5), torch.randn(16, 2)
    q1 = qf[0](obs, act)
    assert q1.shape == (16,)
    torch.testing.assert_close(q1, qf(obs, act)[0])
    q1.sum().backward()
    assert all(p.grad is None for p in qf[1].parameters())
    assert all(p.grad.abs().sum() > 0 for p in qf[0].parameters())
