"""cleanrl/ppo.py: the GAE math (truncation bootstraps, termination does not; lambda 1 is the discounted sum) and
the PPO objective by hand, the greedy evaluation, and the loop's truncation bootstrap on a toy env (for ppo.py and
ppo_continuous_action.py). Its runs, learning-rate annealing (tests/scripts.py), bad input, --compile and learning
are in the behaviour files."""

import math

import numpy as np
import pytest
import torch

from cleanrl.ppo import Args, compute_gae, ppo_loss


def test_gae_with_a_truncated_and_a_terminated_episode_in_one_rollout():
    # env 0: steps 0-1 are one episode cut by a time limit at step 1 (final observation worth 10),
    # steps 2-3 are the next episode, which terminates at step 3. env 1: one unfinished episode.
    gamma, lam = 0.5, 0.5
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    values_ = torch.tensor([[2.0, 0.0], [2.0, 0.0], [2.0, 0.0], [2.0, 0.0]])
    # successor values: stored values of t+1, V(final_obs)=10 at the truncation, and V(s_T)=5 / 4 after the last step
    next_values = torch.tensor([[2.0, 0.0], [10.0, 0.0], [2.0, 0.0], [5.0, 4.0]])
    terminations = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    dones = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    adv, ret = compute_gae(rewards, values_, next_values, terminations, dones, gamma, lam)
    # by hand, env 0: delta = r + gamma * V' * (1 - term) - V
    #   t3: 1 + 0 - 2 = -1                 A3 = -1
    #   t2: 1 + 0.5*2 - 2 = 0              A2 = 0 + 0.25 * -1 = -0.25
    #   t1: 1 + 0.5*10 - 2 = 4 (bootstrapped through the truncation; the chain to t2 is cut) A1 = 4
    #   t0: 1 + 0.5*2 - 2 = 0              A0 = 0 + 0.25 * 4 = 1
    # env 1: deltas 0, 0, 0, 1 + 0.5*4 = 3; A = 3 * 0.25^k backwards
    expected = torch.tensor([[1.0, 0.046875], [4.0, 0.1875], [-0.25, 0.75], [-1.0, 3.0]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values_)


def test_gae_without_episode_ends_is_discounted_td_sum():
    # with lambda = 1 and no episode end, A_t = sum_k gamma^k r_{t+k} + gamma^(T-t) V(s_T) - V(s_t)
    gamma = 0.9
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[0.5], [0.25], [0.125]])
    nv = torch.tensor([[0.25], [0.125], [7.0]])
    zeros = torch.zeros(3, 1)
    adv, _ = compute_gae(rewards, v, nv, zeros, zeros, gamma, 1.0)
    expected0 = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 7.0 - 0.5
    assert adv[0, 0].item() == pytest.approx(expected0)


def test_ppo_loss_by_hand():
    # two samples, raw advantages (norm_adv off), clip 0.2: sample 0 has ratio 1.5 and advantage +1 (clipped to
    # 1.2: no gain from moving further), sample 1 ratio 0.9 and advantage -2 (inside the clip range)
    args = Args(clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, norm_adv=False, clip_vloss=True)
    mb_logprobs = torch.tensor([-1.0, -2.0])
    newlogprob = (mb_logprobs + torch.log(torch.tensor([1.5, 0.9]))).requires_grad_()
    entropy, advantages = torch.tensor([1.0, 0.5]), torch.tensor([1.0, -2.0])
    newvalue, mb_values, mb_returns = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.5]), torch.tensor([3.0, 0.0])
    loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = ppo_loss(
        newlogprob, entropy, newvalue, mb_logprobs, advantages, mb_returns, mb_values, args
    )
    # pg: max(-A r, -A clip(r)) = max(-1.5, -1.2) = -1.2 and max(1.8, 1.8) = 1.8; mean 0.3
    assert pg_loss.item() == pytest.approx(0.3)
    # value: max((V - R)^2, (V_old + clip(V - V_old) - R)^2): max(1, (1.2 - 3)^2) = 3.24, max(0, 0.3^2) = 0.09
    assert v_loss.item() == pytest.approx(0.5 * (3.24 + 0.09) / 2)
    assert entropy_loss.item() == pytest.approx(0.75)
    assert loss.item() == pytest.approx(0.3 - 0.01 * 0.75 + 0.5 * 0.8325)
    # KL estimators k1 = mean(-log r) and k3 = mean((r - 1) - log r); one of the two ratios is outside the clip range
    assert old_approx_kl.item() == pytest.approx(-math.log(1.35) / 2)
    assert approx_kl.item() == pytest.approx(0.2 - math.log(1.35) / 2)
    assert clipfrac.item() == 0.5
    # the clipped sample passes no gradient to its log-probability; the other one -A r / 2 = 0.9
    pg_loss.backward()
    torch.testing.assert_close(newlogprob.grad, torch.tensor([0.0, 0.9]))


def test_ppo_loss_normalizes_advantages_and_can_leave_the_value_loss_unclipped():
    args = Args(clip_coef=0.2, norm_adv=True, clip_vloss=False)
    mb_logprobs = torch.tensor([-1.0, -2.0])
    newlogprob = mb_logprobs + torch.log(torch.tensor([1.5, 0.9]))
    newvalue, mb_values, mb_returns = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.5]), torch.tensor([3.0, 0.0])
    _, pg_loss, v_loss, *_ = ppo_loss(newlogprob, torch.ones(2), newvalue, mb_logprobs, torch.tensor([1.0, -2.0]),
                                      mb_returns, mb_values, args)
    # advantages (1, -2): mean -0.5, sample std 1.5 sqrt(2), so (1/sqrt(2), -1/sqrt(2)); pg = (-1.2 + 0.9) / sqrt(2) / 2
    assert pg_loss.item() == pytest.approx(-0.3 / (2 * math.sqrt(2)), rel=1e-6)
    assert v_loss.item() == pytest.approx(0.5 * (1.0 + 0.0) / 2)


def test_the_policies_sample_and_score_as_torchs_distributions_do_bit_for_bit():
    """ppo.py and ppo_continuous_action.py write their policy's math out instead of building a Categorical or a
    Normal at every step (and sample without Normal.sample's host sync): the same seed must draw the same actions,
    and the log-probabilities and entropies must be the distributions', bit for bit."""
    from torch.distributions import Categorical, Normal

    from cleanrl import ppo, ppo_continuous_action

    obs = torch.randn(64, 3)
    discrete, continuous = ppo.Agent(3, 4), ppo_continuous_action.Agent(3, 2)
    with torch.no_grad():
        continuous.actor_logstd.fill_(-0.5)
        discrete.actor[-1].weight.mul_(300)  # logits of a few units, not the initial near-uniform ones
        for agent, distribution in ((discrete, lambda: Categorical(logits=discrete.actor(obs))),
                                    (continuous, lambda: Normal(continuous.actor_mean(obs),
                                                                continuous.actor_logstd.exp().expand(64, 2)))):
            torch.manual_seed(5)
            action, logprob, entropy, value = agent.get_action_and_value(obs)
            torch.manual_seed(5)
            probs = distribution()
            drawn = probs.sample()
            assert torch.equal(action, drawn)
            total = (lambda t: t.sum(1)) if agent is continuous else (lambda t: t)
            assert torch.equal(logprob, total(probs.log_prob(drawn))) and torch.equal(entropy, total(probs.entropy()))
            assert torch.equal(value, agent.critic(obs))
            _, given_logprob, _, _ = agent.get_action_and_value(obs, drawn.flip(0))
            assert torch.equal(given_logprob, total(probs.log_prob(drawn.flip(0))))


def test_the_evaluation_acts_greedily_and_draws_no_random_number(monkeypatch):
    """ppo.py evaluates the greedy policy (the largest logit), not a sample: the policy evaluate() hands to the
    episode loop picks argmax of the actor's logits and leaves torch's generator where it was (a sample would draw
    from it, and a seeded evaluation would still look repeatable)."""
    import environments
    import evaluation
    from cleanrl import ppo

    handed = {}
    monkeypatch.setattr(environments, "make_envs", lambda *args, **kwargs: None)
    monkeypatch.setattr(evaluation, "evaluate_episodes",
                        lambda envs, policy, *args, **kwargs: handed.setdefault("policy", policy) and [0.0])
    torch.manual_seed(0)
    agent = ppo.Agent(4, 3)
    ppo.evaluate(agent, Args(eval_episodes=1), "run", torch.device("cpu"))
    x = torch.randn(256, 4) * 3
    before = torch.get_rng_state()
    actions = handed["policy"](x)
    assert torch.equal(torch.get_rng_state(), before), "the evaluation's policy drew random numbers"
    assert torch.equal(actions, agent.actor(x).argmax(dim=-1))


# A truncated episode bootstraps, in the training loop, from the value of its true final observation (same-step
# autoreset keeps it in info["final_obs"]), not from the next episode's first observation, which the rollout stores
# after it. The GAE tests above take next_values as given; this runs the loop that builds them.
LEDGE = '''
import gymnasium as gym
import numpy as np


class Ledge(gym.Env):
    """From the start (observed as 0s) a step of reward -10 onto a plateau (observed as 1s) that pays +1 a step for
    ever; the time limit cuts every episode on the plateau, after 3 steps."""

    def __init__(self, continuous=False):
        self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0, 1, (3,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.ones(3, np.float32), -10.0 if self.t == 1 else 1.0, False, False, {}


gym.register("Ledge-v0", entry_point=Ledge, max_episode_steps=3)
gym.register("LedgeBox-v0", entry_point=Ledge, kwargs={"continuous": True}, max_episode_steps=3)
'''


def test_the_envs_on_the_device_hand_over_a_truncated_episodes_final_observation():
    # environments.OnDevice, as the PPO loops step it: tensors of the loop's dtypes, and at a time limit (3 steps,
    # too few for CartPole to fall) the envs that were truncated and their final observations, which same-step
    # autoreset keeps in info["final_obs"] while the step returns the next episode's first
    import gymnasium as gym

    import environments

    def make():
        return gym.make("CartPole-v1", max_episode_steps=3)

    same_step = gym.vector.AutoresetMode.SAME_STEP
    envs = environments.OnDevice(gym.vector.SyncVectorEnv([make, make], autoreset_mode=same_step), torch.device("cpu"),
                                 torch.float32)
    envs.reset(seed=0)
    for t in range(1, 4):
        next_obs, reward, term, trunc, info = envs.step(torch.zeros(2, dtype=torch.long))
        assert next_obs.dtype == reward.dtype == torch.float32 and term.dtype == trunc.dtype == torch.bool
        assert reward.tolist() == [1.0, 1.0] and not term.any() and trunc.tolist() == [t == 3] * 2
        final = envs.truncated_final_obs()
        if t < 3:
            assert final is None
            continue
        truncated_envs, final_obs = final
        assert truncated_envs.tolist() == [0, 1]
        assert torch.equal(final_obs, torch.as_tensor(np.stack(info["final_obs"]), dtype=torch.float32))
        assert not torch.equal(final_obs, next_obs), "the final observations are not the next episodes' first"
    # rollout() over a vector env without groups: one synchronous step of all the envs, act then store, at each step
    envs.reset(seed=0)
    calls = []
    envs.rollout(3, lambda step, part: calls.append(("act", step, part)) or torch.zeros(2, dtype=torch.long),
                 lambda step, part, *stepped: calls.append(("store", step, part, stepped[3].tolist())))
    assert calls == [call for t in range(3) for call in (("act", t, slice(0, 2)),
                                                         ("store", t, slice(0, 2), [t == 2] * 2))]
    envs.close()


@pytest.mark.parametrize("script, env_id, extra", [
    pytest.param("ppo.py", "Ledge-v0", (), id="ppo.py"),
    pytest.param("ppo_continuous_action.py", "LedgeBox-v0",
                 ("--num-envs", "2", "--num-minibatches", "2", "--update-epochs", "4"), id="ppo_continuous_action.py"),
])
def test_a_truncated_episode_bootstraps_from_its_final_observation_in_the_loop(workdir, script, env_id, extra):
    """Bootstrapped from the plateau, V(plateau) = 1 / (1 - gamma) = 100 (the plateau pays for ever); bootstrapped
    from the next episode's start, the -10 leaks into the plateau's targets and V(plateau) < 0 (measured after this
    budget: +7.1 and +13.2 correct, -8.2 and -18.2 with the loop's bootstrap line removed)."""
    import importlib

    import environments
    from tests.helpers import run_script, script_env, single_run_dir

    (workdir / "ledge.py").write_text(LEDGE)
    run_script(script, "--env-id", f"ledge:{env_id}", "--total-timesteps", "2048", "--num-steps", "64",
               "--learning-rate", "0.01", *extra, "--save-model", "--eval-episodes", "1", "--no-progress",
               cwd=workdir, env=script_env(PYTHONPATH=str(workdir)))
    saved = torch.load(single_run_dir(workdir) / f"{script[:-3]}.cleanrl_model", weights_only=True)
    plateau = np.ones((1, 3), np.float32)
    if "obs_rms" in saved:  # ppo_continuous_action.py's policy sees normalized observations
        rms = saved["obs_rms"]
        plateau = environments.normalize_obs(plateau, rms["mean"].numpy(), rms["var"].numpy(), 1e-8, 10.0)
        saved = saved["agent"]
    agent = importlib.import_module(f"cleanrl.{script[:-3]}").Agent(3, 2 if script == "ppo.py" else 1)
    agent.load_state_dict(saved)
    value = agent.get_value(torch.as_tensor(plateau)).item()
    assert value > 0, f"V(plateau) = {value}: the truncated steps bootstrapped from the next episode's start"
