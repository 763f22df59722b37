"""cleanrl/sac_continuous_action.py: the squashed-Gaussian log-probability against hand-computed values and a
numerical reference, the policy's actions inside the bounds, and the temperature: autotuned or fixed."""

import math

import numpy as np
import pytest
import torch

from cleanrl.sac_continuous_action import Actor, squashed_gaussian_log_prob
from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import SCRIPTS


def test_log_prob_by_hand_at_the_centre():
    # u = mean = 0, std = 1: log N(0; 0, 1) = -0.5 log(2 pi); tanh'(0) = 1, so the correction is log(scale)
    u = torch.zeros(1, 1, dtype=torch.float64)
    log_std = torch.zeros(1, 1, dtype=torch.float64)
    one = squashed_gaussian_log_prob(u, u, log_std, torch.tensor([1.0], dtype=torch.float64))
    two = squashed_gaussian_log_prob(u, u, log_std, torch.tensor([2.0], dtype=torch.float64))
    assert abs(one.item() - (-0.9189385332046727)) < 1e-12
    assert abs(two.item() - (-0.9189385332046727 - math.log(2.0))) < 1e-12


def test_log_prob_by_hand_off_centre():
    # u = 1, mean = 0.5, std = e^-1: z = 0.5 / e^-1 = 0.5 e; log N = -z^2/2 + 1 - 0.5 log(2 pi)
    # 1 - tanh(1)^2 = 0.41997434161402614; scale 0.5
    u, mean, log_std = (torch.tensor([[v]], dtype=torch.float64) for v in (1.0, 0.5, -1.0))
    expected = -0.5 * (0.5 * math.e) ** 2 + 1.0 - 0.5 * math.log(2 * math.pi) - math.log(0.5 * 0.41997434161402614)
    got = squashed_gaussian_log_prob(u, mean, log_std, torch.tensor([0.5], dtype=torch.float64))
    assert abs(got.item() - expected) < 1e-12


def numerical_log_density(a, mean, std, scale, bias, h=1e-7):
    """log p(a) of a = scale * tanh(u) + bias, u ~ N(mean, std), per dimension, from the CDF alone:
    p(a) ~ [P(A <= a + h) - P(A <= a - h)] / 2h, with P(A <= x) = Phi((atanh((x - bias) / scale) - mean) / std)."""

    def cdf(x):
        return 0.5 * (1 + math.erf((math.atanh((x - bias) / scale) - mean) / (std * math.sqrt(2))))

    return math.log((cdf(a + h) - cdf(a - h)) / (2 * h))


def test_log_prob_against_a_numerical_reference_from_the_cdf():
    # three dimensions, one near saturation (u = -2.5: tanh = -0.987), different bounds on each
    mean = torch.tensor([[0.3, -1.0, 2.0]], dtype=torch.float64)
    log_std = torch.tensor([[-0.5, 0.2, -1.0]], dtype=torch.float64)
    u = torch.tensor([[0.1, -2.5, 2.2]], dtype=torch.float64)
    scale = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    bias = torch.tensor([0.0, 1.0, -0.5], dtype=torch.float64)
    a = torch.tanh(u) * scale + bias
    reference = sum(
        numerical_log_density(a[0, i].item(), mean[0, i].item(), log_std[0, i].exp().item(), scale[i].item(), b.item())
        for i, b in enumerate(bias)
    )
    got = squashed_gaussian_log_prob(u, mean, log_std, scale)
    assert got.shape == (1,)
    assert abs(got.item() - reference) < 1e-5, (got.item(), reference)


def test_log_prob_stays_finite_when_tanh_saturates():
    # at u = 20, 1 - tanh(u)^2 underflows to 0 in float32; the exact form gives log(4) - 2u - log(1 + e^-2u)
    u = torch.tensor([[20.0, -20.0]])
    mean = torch.tensor([[20.0, -20.0]])
    log_std = torch.zeros(1, 2)
    got = squashed_gaussian_log_prob(u, mean, log_std, torch.ones(2))
    expected = 2 * (-0.5 * math.log(2 * math.pi) - (math.log(4.0) - 40.0))
    assert torch.isfinite(got).all()
    assert abs(got.item() - expected) < 1e-3


def test_sampled_actions_and_log_probs_match_the_helper_and_the_bounds():
    torch.manual_seed(0)
    actor = Actor(3, np.array([0.0, -2.0]), np.array([1.0, 2.0]))
    obs = 10 * torch.randn(512, 3)
    torch.manual_seed(1)
    actions, log_probs = actor.get_action(obs)
    assert actions.shape == (512, 2) and log_probs.shape == (512,)
    assert torch.all(actions >= torch.tensor([0.0, -2.0])) and torch.all(actions <= torch.tensor([1.0, 2.0]))
    # recompute u from the same noise and check the log-prob is the helper's
    torch.manual_seed(1)
    mean, log_std = actor(obs)
    assert torch.all(log_std >= -5.0) and torch.all(log_std <= 2.0)
    u = mean + log_std.exp() * torch.randn_like(mean)
    torch.testing.assert_close(actions, torch.tanh(u) * actor.action_scale + actor.action_bias)
    torch.testing.assert_close(log_probs, squashed_gaussian_log_prob(u, mean, log_std, actor.action_scale))
    # the deterministic action is the squashed mean
    squashed_mean = torch.tanh(mean) * actor.action_scale + actor.action_bias
    torch.testing.assert_close(actor.deterministic_action(obs), squashed_mean)


def test_autotune_moves_alpha_and_no_autotune_keeps_it(workdir):
    # the tiny Pendulum run of tests/scripts.py: alpha must start at exp(0) = 1 and fall, since the initial
    # policy's entropy is far above -|A| = -1 ...
    row = SCRIPTS["sac_continuous_action.py"]
    auto, fixed = workdir / "auto", workdir / "fixed"
    auto.mkdir()
    fixed.mkdir()
    run_script(row.name, *row.args, cwd=auto)
    alphas = values(read_scalars(single_run_dir(auto)), "losses/alpha")
    assert 0.0 < alphas[1] < alphas[0] < 1.0
    # ... while --no-autotune keeps --alpha and logs no alpha loss
    run_script(row.name, *row.args, "--no-autotune", "--alpha", "0.3", cwd=fixed)
    scalars = read_scalars(single_run_dir(fixed))
    assert values(scalars, "losses/alpha") == pytest.approx([0.3, 0.3])
    assert "losses/alpha_loss" not in scalars
    assert len(values(scalars, "losses/actor_loss")) == 2
