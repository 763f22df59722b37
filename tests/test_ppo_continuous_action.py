"""cleanrl/ppo_continuous_action.py: observation and reward normalization and the truncation bootstrap, the
Gaussian policy, and what the saved model holds (the agent and both normalization statistics), on Pendulum and on
HalfCheetah's 17-dimensional observations."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl.ppo_continuous_action import Agent, Args, make_envs
from environments import NormalizeObservation, RunningMeanStdOfOne, normalize_obs
from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import PPO_LOSSES, SCRIPTS, needs

TINY = ["--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2"]


class TwoStepEnv(gym.Env):
    """Observation [10 t, -10 t] after t steps, reward 100 per step; registered with a 2-step time limit."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([10.0 * self.t, -10.0 * self.t], np.float32), 100.0, False, False, {}


if "TwoStep-v0" not in gym.registry:
    gym.register(id="TwoStep-v0", entry_point=TwoStepEnv, max_episode_steps=2)


def test_normalize_obs_by_hand():
    mean, var = np.array([1.0, 2.0, 0.0]), np.array([4.0, 0.25, 1.0])
    out = normalize_obs(np.array([[5.0, -10.0, 0.5]]), mean, var, epsilon=0.0, clip=10.0)
    # (5-1)/2 = 2; (-10-2)/0.5 = -24, clipped to -10; (0.5-0)/1 = 0.5
    np.testing.assert_allclose(out, [[2.0, -10.0, 0.5]])
    assert out.dtype == np.float32


def test_truncation_bootstrap_sees_final_obs_normalized_like_the_policy_inputs():
    # The whole training stack of make_envs, on an env truncated after 2 steps, with frozen hand-set statistics.
    envs, obs_norm, reward_norm = make_envs(Args(env_id="TwoStep-v0", num_envs=2), "unused", False)
    obs_norm.obs_rms.mean, obs_norm.obs_rms.var = np.array([5.0, 5.0]), np.array([4.0, 100.0])
    obs_norm.update_running_mean = False
    obs, _ = envs.reset(seed=0)
    # raw [0, 0] -> [(0-5)/2, (0-5)/10]
    np.testing.assert_allclose(obs, [[-2.5, -0.5]] * 2)
    obs, rewards, term, trunc, infos = envs.step(np.zeros((2, 1), np.float32))
    np.testing.assert_allclose(obs, [[2.5, -1.5]] * 2)  # raw [10, -10]
    # rewards are divided by the std of the discounted returns seen so far, then clipped to [-10, 10]:
    # step 1, returns {100, 100}: no spread, but RunningMeanStd's prior (mean 0, var 1, weight 1e-4) leaves
    # var ~0.5, so 100 / 0.71 -> clipped to 10
    np.testing.assert_allclose(rewards, [10.0, 10.0])
    obs, rewards, term, trunc, infos = envs.step(np.zeros((2, 1), np.float32))
    assert trunc.all() and not term.any()
    # same-step autoreset: obs is the next episode's first observation, normalized ...
    np.testing.assert_allclose(obs, [[-2.5, -0.5]] * 2)
    # ... and the final observation, raw [20, -20], arrives normalized with the same statistics: [7.5, -2.5]
    assert infos["_final_obs"].all()
    np.testing.assert_allclose(np.stack(infos["final_obs"]), [[7.5, -2.5]] * 2)
    # episode statistics see the raw rewards (2 x 100) ...
    np.testing.assert_allclose(infos["episode"]["r"], [200.0, 200.0])
    # ... the learner sees them scaled: step 2, returns {100, 100, 199, 199} (199 = 100 + 0.99 * 100), std 49.5
    # (the 1e-4 prior weight of RunningMeanStd moves the 4th digit)
    np.testing.assert_allclose(rewards, [100 / 49.5] * 2, rtol=1e-3)
    assert reward_norm.return_rms.count == pytest.approx(4 + 1e-4)
    envs.close()


def test_final_obs_do_not_update_the_statistics():
    envs, obs_norm, _ = make_envs(Args(env_id="TwoStep-v0", num_envs=2), "unused", False)
    envs.reset(seed=0)
    for _ in range(2):
        envs.step(np.zeros((2, 1), np.float32))
    # seen: reset [0,0] x2, step 1 [10,-10] x2, step 2 the next episode's reset [0,0] x2; not the final [20,-20]
    assert obs_norm.obs_rms.count == pytest.approx(6 + 1e-4)
    np.testing.assert_allclose(obs_norm.obs_rms.mean, [10 / 3, -10 / 3], rtol=1e-4)
    envs.close()


def test_gaussian_log_prob_and_entropy_sum_over_action_dimensions():
    agent = Agent(obs_dim=3, action_dim=2)
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[0.0, math.log(2.0)]]))
    x = torch.zeros(1, 3)
    mean = agent.actor_mean(x)
    _, logprob, entropy, value = agent.get_action_and_value(x, mean)
    # log N(mu | mu, sigma) = -log sigma - log(2 pi)/2 per dimension; sigmas 1 and 2
    assert logprob.item() == pytest.approx(-math.log(2.0) - math.log(2 * math.pi), rel=1e-5)
    # entropy of N(., sigma) = 1/2 + log(2 pi)/2 + log sigma per dimension
    assert entropy.item() == pytest.approx(1.0 + math.log(2 * math.pi) + math.log(2.0), rel=1e-5)
    assert value.shape == (1, 1)


def test_normalize_observation_wrapper_freezes():
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("TwoStep-v0")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    envs = NormalizeObservation(envs, clip=10.0)
    envs.update_running_mean = False
    envs.reset(seed=0)
    envs.step(np.zeros((1, 1), np.float32))
    assert envs.obs_rms.count == pytest.approx(1e-4)
    envs.close()


def test_the_saved_model_holds_the_agent_and_both_normalization_statistics(workdir):
    # the tiny Pendulum run of tests/scripts.py: 4 iterations of 64 steps; one episode ends (truncated at 200)
    row = SCRIPTS["ppo_continuous_action.py"]
    run_script(row.name, *row.args, "--save-model", "--eval-episodes", "1", cwd=workdir)
    run_dir = single_run_dir(workdir)
    # a raw Pendulum return (not the normalized rewards the learner sees): 200 rewards in [-16.3, 0]
    assert -3300 < values(read_scalars(run_dir), "charts/episodic_return")[0] < 0
    checkpoint = torch.load(run_dir / "ppo_continuous_action.cleanrl_model", weights_only=True)
    assert set(checkpoint) == {"agent", "obs_rms", "return_rms"}
    assert "actor_logstd" in checkpoint["agent"]
    # observation statistics: 1 reset + 256 step observations; return statistics: one update per step
    assert checkpoint["obs_rms"]["count"] == pytest.approx(257 + 1e-4)
    assert checkpoint["obs_rms"]["mean"].shape == (3,)
    assert checkpoint["return_rms"]["count"] == pytest.approx(256 + 1e-4)


@needs("mujoco")
def test_halfcheetah_runs_through_its_updates_and_saves_17_dimensional_statistics(workdir):
    run_script("ppo_continuous_action.py", "--env-id", "HalfCheetah-v5", *TINY, "--total-timesteps", "128",
               "--save-model", "--eval-episodes", "1", cwd=workdir)
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    for key in PPO_LOSSES + ("charts/learning_rate",):
        assert len(scalars.get(key, [])) == 2, key
    assert [step for step, _ in scalars["charts/SPS"]] == [128]  # the first iteration is the warm-up
    assert len(values(scalars, "eval/episodic_return")) == 1
    checkpoint = torch.load(run_dir / "ppo_continuous_action.cleanrl_model", weights_only=True)
    assert checkpoint["obs_rms"]["mean"].shape == (17,)


@pytest.mark.parametrize("shape,dtype", [((17,), np.float64), ((3,), np.float32), ((), np.float32)])
def test_the_batch_of_one_shortcut_keeps_gymnasiums_statistics_bit_for_bit(shape, dtype):
    # observations (float64 from MuJoCo, float32 elsewhere) and the float32 discounted returns of NormalizeReward;
    # batches of one and, on the general path, of three
    from gymnasium.wrappers.utils import RunningMeanStd

    rng = np.random.default_rng(0)
    ours, theirs = RunningMeanStdOfOne(shape=shape), RunningMeanStd(shape=shape)
    for i in range(200):
        batch = (rng.normal(size=(3 if i % 50 == 49 else 1, *shape)) * 100 + 7).astype(dtype)
        ours.update(batch)
        theirs.update(batch)
        assert ours.count == theirs.count
        assert np.array_equal(ours.mean, theirs.mean) and np.array_equal(ours.var, theirs.var)
        assert ours.mean.dtype == theirs.mean.dtype and ours.var.dtype == theirs.var.dtype
    assert ours.count == pytest.approx(200 + 4 * 2 + 1e-4)
