"""cleanrl/ppg_procgen.py: the auxiliary buffer's reshaping and footprint, the auxiliary losses, reward scaling,
Procgen env ids, and a run through both phases whose episodes ppg's own recorder writes to video. The phases'
steps at the tiny budget are checked from tests/scripts.py; the missing-Qt error in tests/test_bad_input.py."""

import math

import numpy as np
import pytest
import torch

from cleanrl.ppg_procgen import AuxBuffer, aux_losses
from procgen_envs import RewardNormalizer
from procgen_envs import resolve_env_id
from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import AUX_LOSSES, PPO_LOSSES, needs


def test_aux_buffer_keeps_each_observation_beside_its_own_returns_logits_and_mask():
    n_iteration, num_envs, num_steps = 2, 3, 4
    buf = AuxBuffer(n_iteration, num_envs, num_steps, (1, 2, 2), n_actions=2)
    for it in range(n_iteration):
        # step-major like the rollout storage; every entry encodes (iteration, env, step) as it*50 + env*10 + step
        code = torch.tensor([[it * 50 + env * 10 + step for env in range(num_envs)] for step in range(num_steps)])
        obs = code.to(torch.uint8)[:, :, None, None, None].expand(num_steps, num_envs, 1, 2, 2)
        buf.store(it, obs, returns=code.float() / 2, valid=(code % 3 != 0))
    # pi_old as the script computes it: minibatches of whole rollouts through a "policy" whose logits read the obs
    inds = np.arange(buf.num_rollouts)
    for start in range(0, buf.num_rollouts, 2):
        rollouts = inds[start : start + 2]
        m_obs = buf.batch(rollouts, torch.device("cpu"))[0]
        pixel = m_obs[:, 0, 0, 0].float()
        buf.set_old_logits(rollouts, torch.stack([pixel, -pixel], dim=1))

    # rollout r = iteration * num_envs + env: row 4 is iteration 1 / env 1, row 2 is iteration 0 / env 2
    obs, returns, old_logits, valid = buf.batch(np.array([4, 2]), torch.device("cpu"))
    expected = torch.tensor([60, 61, 62, 63, 20, 21, 22, 23])
    assert obs.shape == (8, 1, 2, 2) and obs.dtype == torch.uint8
    assert torch.equal(obs[:, 0, 1, 1].long(), expected)
    assert torch.equal(returns, expected.float() / 2)
    assert torch.equal(old_logits, torch.stack([expected.float(), -expected.float()], dim=1))
    assert valid.tolist() == [False, True, True, False, True, False, True, True]  # code % 3 != 0


def test_aux_buffer_footprint_on_the_meta_device_matches_the_real_one_and_the_documented_default():
    buf = AuxBuffer(3, 2, 5, (3, 8, 8), n_actions=15)
    assert buf.nbytes() == AuxBuffer(3, 2, 5, (3, 8, 8), 15, "meta").nbytes() == 30 * (192 + 4 + 60 + 1)
    # defaults: 32 iterations x 64 envs x 256 steps = 524288 observations of 3x64x64 uint8, 15 actions
    default = AuxBuffer(32, 64, 256, (3, 64, 64), 15, "meta").nbytes()
    assert default == 524288 * (12288 + 4 + 60 + 1) == 6_476_529_664
    assert default / 2**30 == pytest.approx(6.03, abs=0.005)


def test_aux_losses_by_hand():
    # observation 0: pi_old uniform over 2 actions, pi_new = (3/4, 1/4); observation 1 is a reset step (masked)
    old_logits = torch.tensor([[0.0, 0.0], [5.0, -5.0]])
    logits = torch.tensor([[math.log(3.0), 0.0], [-5.0, 5.0]])
    aux_values, values_, returns = torch.tensor([1.0, 50.0]), torch.tensor([2.0, -50.0]), torch.tensor([3.0, 100.0])
    mask = torch.tensor([True, False])
    kl, aux_v, v = aux_losses(logits, aux_values, values_, old_logits, returns, mask)
    # KL(old || new) = 1/2 ln((1/2)/(3/4)) + 1/2 ln((1/2)/(1/4)) = 1/2 ln(4/3)
    assert kl.item() == pytest.approx(0.5 * math.log(4 / 3))
    assert aux_v.item() == pytest.approx(0.5 * (1.0 - 3.0) ** 2)
    assert v.item() == pytest.approx(0.5 * (2.0 - 3.0) ** 2)
    # gradient accumulation: chunks divided by the whole minibatch's count add up to the minibatch mean
    mask2 = torch.tensor([True, True])
    whole = aux_losses(logits, aux_values, values_, old_logits, returns, mask2)
    n = mask2.sum()
    parts = [aux_losses(logits[i : i + 1], aux_values[i : i + 1], values_[i : i + 1], old_logits[i : i + 1],
                        returns[i : i + 1], mask2[i : i + 1], n) for i in range(2)]  # fmt: skip
    for k in range(3):
        assert (parts[0][k] + parts[1][k]).item() == pytest.approx(whole[k].item())


def test_reward_normalizer_by_hand():
    norm = RewardNormalizer(num_envs=2, gamma=0.5)
    # step 1: discounted returns (2, 4), batch variance 1 -> rewards divided by 1
    out = norm(np.array([2.0, 4.0]), done=np.array([False, False]), valid=np.array([True, True]))
    np.testing.assert_allclose(out, [2.0, 4.0], rtol=1e-6)
    # step 2: env 0 ends its episode (return 0.5 * 2 + 2 = 3); env 1 is a reset step that must not count.
    # Statistics over (2, 4, 3): mean 3, variance 2/3
    out = norm(np.array([2.0, 0.0]), done=np.array([True, False]), valid=np.array([True, False]))
    np.testing.assert_allclose(out, [2.0 / math.sqrt(2 / 3), 0.0], rtol=1e-6)
    assert norm.var == pytest.approx(2 / 3) and norm.mean == pytest.approx(3.0)
    np.testing.assert_allclose(norm.ret, [0.0, 4.0])  # env 0's return restarts after its episode end
    # identical returns have variance 0: the scaled rewards are clipped to +-10
    clipped = RewardNormalizer(num_envs=2, gamma=0.5)(np.array([-5.0, -5.0]), np.zeros(2, bool), np.ones(2, bool))
    np.testing.assert_allclose(clipped, [-10.0, -10.0])


def test_env_id_resolution():
    known = ["StarpilotEasy-v0", "StarpilotHard-v0", "StarpilotExtreme-v0", "BigfishEasy-v0", "BigfishHard-v0",
             "CartPole-v1", "Pong-v5"]  # fmt: skip
    assert resolve_env_id("starpilot", "easy", known) == "StarpilotEasy-v0"
    assert resolve_env_id("bigfish", "hard", known) == "BigfishHard-v0"
    assert resolve_env_id("StarpilotExtreme-v0", "easy", known) == "StarpilotExtreme-v0"
    with pytest.raises(SystemExit, match="bigfish has no 'extreme' distribution.*easy, hard"):
        resolve_env_id("bigfish", "extreme", known)
    for bad in ("CartPole-v1", "nosuchgame"):
        with pytest.raises(SystemExit, match=f"unknown Procgen game '{bad}'"):
            resolve_env_id(bad, "easy", known)


@needs("procgen")
def test_both_phases_run_and_track_and_capture_video_record_envpool_frames(workdir):
    # one env, 128 steps, one policy iteration then one auxiliary phase (at step 128); with seed 1 the first
    # episode of env 0 ends within the 128 steps, so ppg's own recorder (envpool has no video wrapper) writes it
    args = ["--num-envs", "1", "--num-steps", "128", "--n-iteration", "1", "--num-aux-rollouts", "1",
            "--e-auxiliary", "1", "--num-minibatches", "1", "--total-timesteps", "128"]  # fmt: skip
    run_script("ppg_procgen.py", *args, "--track", "--capture-video", cwd=workdir, timeout=300)
    run_dir = single_run_dir(workdir)
    # --env-id starpilot runs (and is named) under envpool's id of its distribution
    assert run_dir.name.startswith("StarpilotEasy-v0__ppg_procgen__1__")
    scalars = read_scalars(run_dir)
    for key in PPO_LOSSES + AUX_LOSSES:  # the policy phase's update, then the auxiliary phase after it
        assert [step for step, _ in scalars.get(key, [])] == [128], key
    for key in AUX_LOSSES:
        assert all(math.isfinite(v) and v >= 0 for v in values(scalars, key)), key
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"
