"""cleanrl/td3_continuous_action.py: target policy smoothing by hand and inside the action bounds."""

import torch

from cleanrl.td3_continuous_action import smoothed_target_actions


def test_smoothing_by_hand_on_symmetric_bounds():
    # Pendulum-like bounds [-2, 2]: scale 2, bias 0; policy_noise 0.2, noise_clip 0.5
    target = torch.tensor([[1.9], [-1.9], [0.0], [0.5]])
    noise = torch.tensor([[10.0], [-10.0], [1.0], [-2.0]])
    # eps = clip(0.2 * noise, -0.5, 0.5) * 2 = 1, -1, 0.4, -0.8; a' = clip(target + eps, -2, 2)
    out = smoothed_target_actions(target, noise, 0.2, 0.5, torch.tensor([2.0]), torch.tensor([0.0]))
    torch.testing.assert_close(out, torch.tensor([[2.0], [-2.0], [0.4], [-0.3]]))


def test_smoothing_by_hand_on_asymmetric_bounds():
    # dimension 0 in [0, 1] (scale 0.5, bias 0.5), dimension 1 in [-3, 1] (scale 2, bias -1)
    scale, bias = torch.tensor([0.5, 2.0]), torch.tensor([0.5, -1.0])
    target = torch.tensor([[0.1, -2.9], [0.5, 0.9]])
    noise = torch.tensor([[-1.0, -5.0], [2.0, 0.5]])
    # eps row 0: -0.2 * 0.5 = -0.1, clip(-1.0) = -0.5 then * 2 = -1; row 1: clip(0.4) * 0.5 = 0.2, 0.1 * 2 = 0.2
    # a' row 0: 0.1 - 0.1 = 0.0, -2.9 - 1 = -3.9 -> low -3; row 1: 0.5 + 0.2 = 0.7, 0.9 + 0.2 = 1.1 -> high 1
    out = smoothed_target_actions(target, noise, 0.2, 0.5, scale, bias)
    torch.testing.assert_close(out, torch.tensor([[0.0, -3.0], [0.7, 1.0]]))


def test_smoothed_actions_stay_inside_the_bounds_for_any_noise():
    torch.manual_seed(0)
    scale, bias = torch.tensor([0.5, 2.0, 1.0]), torch.tensor([0.5, -1.0, 0.0])
    low, high = bias - scale, bias + scale
    # target actions anywhere in the bounds (the target actor's tanh output), noise heavy-tailed
    target = low + (high - low) * torch.rand(10_000, 3)
    noise = 100.0 * torch.randn(10_000, 3)
    out = smoothed_target_actions(target, noise, 0.2, 0.5, scale, bias)
    assert torch.all(out >= low) and torch.all(out <= high)
    # and the perturbation never exceeds noise_clip * scale
    assert torch.all((out - target).abs() <= 0.5 * scale + 1e-6)
    # the clip is active on some entries, so the test exercises it
    assert torch.any(out == low) and torch.any(out == high)
