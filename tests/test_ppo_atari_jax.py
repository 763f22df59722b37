"""cleanrl/ppo_atari_envpool_xla_jax_scan.py: its math against ppo_atari.py's on the same numbers (GAE, the PPO loss,
the Nature CNN), its two loop forms against each other, and its loop's host-device transfers.

The behaviour tables (tiny run, W&B and video, determinism, resume, SIGTERM, --eval-only, bad input) cover it through
its row in tests/scripts.py.
"""

import dataclasses
import os
import re

import numpy as np
import pytest
import torch

from tests.helpers import read_scalars, run_script, single_run_dir
from tests.scripts import PPO_LOSSES, have

pytestmark = pytest.mark.skipif(not have("jax"), reason="optional dependency jax is not installed")
if have("jax"):
    import jax
    import jax.numpy as jnp

    from cleanrl import ppo_atari_envpool_xla_jax_scan as jax_ppo
if have("atari"):
    from cleanrl import ppo_atari as torch_ppo

SCRIPT = "ppo_atari_envpool_xla_jax_scan.py"
TINY = ("--num-envs", "2", "--num-minibatches", "2")


def test_gae_by_hand():
    # gamma 0.9, lambda 0.8; step 1 terminates (no bootstrap, the recursion is cut), step 2 bootstraps from 0.9
    rewards, values = jnp.array([[1.0], [0.0], [2.0]]), jnp.array([[0.5], [0.4], [0.3]])
    next_values = jnp.array([[0.4], [0.3], [0.9]])
    terminations = dones = jnp.array([[0.0], [1.0], [0.0]])
    advantages, returns = jax_ppo.compute_gae(rewards, values, next_values, terminations, dones, 0.9, 0.8)
    # deltas 1 + 0.9 * 0.4 - 0.5 = 0.86, 0 - 0.4 = -0.4, 2 + 0.9 * 0.9 - 0.3 = 2.51; A_0 = 0.86 + 0.72 * -0.4
    np.testing.assert_allclose(np.asarray(advantages)[:, 0], [0.572, -0.4, 2.51], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(returns)[:, 0], [1.072, 0.0, 2.81], rtol=1e-6)


def random_rollout(rng, steps=24, envs=3):
    ends = rng.random((steps, envs)) < 0.15
    terminations = (ends & (rng.random((steps, envs)) < 0.6)).astype(np.float32)  # the other ends are truncations
    return (rng.normal(size=(steps, envs)).astype(np.float32), rng.normal(size=(steps, envs)).astype(np.float32),
            rng.normal(size=(steps, envs)).astype(np.float32), terminations, ends.astype(np.float32))


@pytest.mark.skipif(not have("atari"), reason="optional dependency ale-py is not installed")
def test_gae_is_the_torch_scripts_on_the_same_numbers():
    rollout = random_rollout(np.random.default_rng(0))
    ours = jax_ppo.compute_gae(*(jnp.asarray(x) for x in rollout), 0.99, 0.95)
    theirs = torch_ppo.compute_gae(*(torch.from_numpy(x) for x in rollout), 0.99, 0.95)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-6)


def loss_inputs(rng, n=64):
    logprobs = np.log(rng.uniform(0.1, 0.9, n)).astype(np.float32)
    newlogprob = (logprobs + rng.normal(0, 0.2, n)).astype(np.float32)  # ratios on both sides of the clip range
    return (newlogprob, rng.uniform(0.5, 1.4, n).astype(np.float32), rng.normal(size=n).astype(np.float32), logprobs,
            *(rng.normal(size=n).astype(np.float32) for _ in range(3)))


@pytest.mark.skipif(not have("atari"), reason="optional dependency ale-py is not installed")
@pytest.mark.parametrize("norm_adv, clip_vloss", [(True, True), (False, False), (True, False)])
def test_ppo_loss_is_the_torch_scripts_over_the_real_transitions(norm_adv, clip_vloss):
    inputs = loss_inputs(np.random.default_rng(1))
    # every fourth transition is a reset step, masked out: the loss is the torch script's over the other three
    mask = (np.arange(64) % 4 != 0).astype(np.float32)
    jax_args = dataclasses.replace(jax_ppo.Args(), norm_adv=norm_adv, clip_vloss=clip_vloss)
    torch_args = dataclasses.replace(torch_ppo.Args(), norm_adv=norm_adv, clip_vloss=clip_vloss)
    for weights, kept in ((np.ones(64, np.float32), slice(None)), (mask, mask > 0)):
        loss, diagnostics = jax_ppo.ppo_loss(*(jnp.asarray(x) for x in inputs), jnp.asarray(weights), jax_args)
        theirs = torch_ppo.ppo_loss(*(torch.from_numpy(x[kept]) for x in inputs), torch_args)
        for a, b in zip((loss, *diagnostics), theirs):
            np.testing.assert_allclose(float(a), b.item(), rtol=1e-5, atol=1e-7)
    # the masked transitions count for nothing: changing them changes no output
    changed = [x.copy() for x in inputs]
    for x in changed:
        x[mask == 0] = 7.0
    a = jax_ppo.ppo_loss(*(jnp.asarray(x) for x in inputs), jnp.asarray(mask), jax_args)
    b = jax_ppo.ppo_loss(*(jnp.asarray(x) for x in changed), jnp.asarray(mask), jax_args)
    np.testing.assert_array_equal(np.asarray(jax.tree.leaves(a)), np.asarray(jax.tree.leaves(b)))


@pytest.mark.skipif(not have("atari"), reason="optional dependency ale-py is not installed")
def test_the_network_computes_what_the_torch_agent_computes_with_the_same_weights():
    theirs = torch_ppo.Agent(n_actions=4)
    convs = [m for m in theirs.network if isinstance(m, torch.nn.Conv2d)]
    dense = [m for m in theirs.network if isinstance(m, torch.nn.Linear)]

    def conv(m):  # torch (out, in, h, w) -> flax (h, w, in, out)
        return {"kernel": jnp.asarray(m.weight.detach().permute(2, 3, 1, 0).numpy()),
                "bias": jnp.asarray(m.bias.detach().numpy())}

    def linear(m):  # torch (out, in) -> flax (in, out)
        return {"kernel": jnp.asarray(m.weight.detach().T.numpy()), "bias": jnp.asarray(m.bias.detach().numpy())}

    params = {"params": {"Conv_0": conv(convs[0]), "Conv_1": conv(convs[1]), "Conv_2": conv(convs[2]),
                         "Dense_0": linear(dense[0]), "actor": linear(theirs.actor), "critic": linear(theirs.critic)}}
    ours = jax_ppo.Agent(n_actions=4)
    template = ours.init(jax.random.PRNGKey(0), jnp.zeros((1, 4, 84, 84), jnp.uint8))
    assert jax.tree.map(np.shape, template) == jax.tree.map(np.shape, params)  # the same layers, the same sizes
    frames = np.random.default_rng(2).integers(0, 256, (5, 4, 84, 84), dtype=np.uint8)
    logits, value = ours.apply(params, jnp.asarray(frames))
    with torch.no_grad():
        hidden = theirs.features(torch.from_numpy(frames))
        np.testing.assert_allclose(np.asarray(logits), theirs.actor(hidden).numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(value), theirs.critic(hidden)[:, 0].numpy(), rtol=1e-4, atol=1e-5)
    # and its initialisation: a near-uniform policy (actor gain 0.01), orthogonal layers
    init_logits, _ = ours.apply(template, jnp.asarray(frames))
    assert float(jnp.abs(init_logits).max()) < 0.1
    kernel = np.asarray(template["params"]["Dense_0"]["kernel"])  # (3136, 512): orthonormal columns, gain sqrt 2
    np.testing.assert_allclose(kernel.T @ kernel, 2 * np.eye(512), atol=1e-4)


def losses_of(cwd, *args):
    run_script(SCRIPT, *TINY, *args, "--no-progress", cwd=cwd, timeout=600)
    return {k: v for k, v in read_scalars(single_run_dir(cwd)).items() if k.startswith("losses/")}


@pytest.mark.heavy
def test_scan_and_python_loops_are_the_same_run(workdir):
    # The same actions (the key is carried from step to step in both forms), so the same frames; the updates differ
    # only by XLA's float rounding (one program, or one per minibatch). Measured: equal to 1e-6 relative.
    runs = []
    for loops in ("scan", "python"):
        (workdir / loops).mkdir()
        runs.append(losses_of(workdir / loops, "--num-steps", "32", "--update-epochs", "2", "--total-timesteps",
                              "128", "--loops", loops))
    assert set(runs[0]) == set(PPO_LOSSES)
    for key in PPO_LOSSES:
        steps = [step for step, _ in runs[0][key]]
        assert steps == [step for step, _ in runs[1][key]] == [64, 128], key
        np.testing.assert_allclose([v for _, v in runs[0][key]], [v for _, v in runs[1][key]], rtol=1e-4, atol=1e-5,
                                   err_msg=key)


@pytest.mark.heavy
def test_target_kl_skips_the_epochs_left_in_both_loop_forms(workdir):
    # --target-kl 0: every epoch's KL is above it, so only the first epoch of each update runs: the run equals one
    # with --update-epochs 1
    runs = {}
    for name, args in (("one", ("--update-epochs", "1")), ("scan", ("--update-epochs", "3", "--target-kl", "0",
                                                                    "--loops", "scan")),
                       ("python", ("--update-epochs", "3", "--target-kl", "0", "--loops", "python"))):
        (workdir / name).mkdir()
        runs[name] = losses_of(workdir / name, "--num-steps", "32", "--total-timesteps", "128", *args)
    for name in ("scan", "python"):
        for key in PPO_LOSSES:
            np.testing.assert_allclose([v for _, v in runs[name][key]], [v for _, v in runs["one"][key]], rtol=1e-4,
                                       atol=1e-5, err_msg=f"{name} {key}")


def host_to_device_transfers(cwd, *args) -> int:
    """The host-to-device transfers JAX logs (JAX_TRANSFER_GUARD=log) during a whole run."""
    proc = run_script(SCRIPT, *TINY, "--update-epochs", "1", *args, "--no-progress", cwd=cwd, timeout=600,
                      env={**os.environ, "JAX_TRANSFER_GUARD": "log"})
    return len(re.findall(r"host-to-device transfer", proc.stderr))


@pytest.mark.heavy
def test_nothing_crosses_between_host_and_device_at_a_step(workdir):
    # A transfer at every env step (an action or observation copied, a Python index into a device array) would add
    # at least one per step: doubling the steps of 2 iterations adds 64. Counted, the same run with twice the steps
    # makes exactly as many transfers, and one more iteration one more (its learning rate). Python loops, where a
    # step is a call from Python (with --loops scan a whole rollout is one call: measured, the same counts). On a
    # CPU, JAX's arrays are host memory, so device-to-host reads are not logged; in the script they are one
    # jax.device_get per iteration, at the logging point.
    counts = {}
    for steps, total in ((32, 128), (64, 256), (32, 192)):
        cwd = workdir / f"{steps}-{total}"
        cwd.mkdir()
        counts[steps, total] = host_to_device_transfers(cwd, "--num-steps", str(steps), "--total-timesteps",
                                                        str(total), "--loops", "python")
    assert counts[64, 256] == counts[32, 128], counts
    assert 0 <= counts[32, 192] - counts[32, 128] <= 2, counts


def test_games_end_with_real_scores_and_the_learning_rate_anneals(workdir):
    # 2 envs x 128 steps x 2 iterations: about one random Breakout game per env
    run_script(SCRIPT, *TINY, "--update-epochs", "1", "--num-steps", "128", "--total-timesteps", "512",
               "--no-progress", cwd=workdir, timeout=600)
    scalars = read_scalars(single_run_dir(workdir))
    returns, lengths = scalars.get("charts/episodic_return", []), scalars.get("charts/episodic_length", [])
    assert returns and len(returns) == len(lengths)
    # whole games (5 lives) of real scores: Breakout's bricks are worth 1, 4 or 7, and a game lasts more than a life
    assert all(r >= 0 and r == int(r) for _, r in returns)
    assert all(l > 20 for _, l in lengths)
    assert [v for _, v in scalars["charts/learning_rate"]] == pytest.approx([2.5e-4, 1.25e-4])
