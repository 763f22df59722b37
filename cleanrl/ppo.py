# docs: docs/rl-algorithms/ppo.md
"""PPO for discrete actions on classic control (default CartPole-v1).

Proximal Policy Optimization, Schulman et al. 2017, https://arxiv.org/abs/1707.06347,
with the implementation details of Huang et al. 2022,
https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/.

Run:
    python cleanrl/ppo.py --env-id CartPole-v1
    python cleanrl/ppo.py --env-id Acrobot-v1 --seed 2 --track
    python cleanrl/ppo.py --env-id CartPole-v1 --compile
    python cleanrl/ppo.py --help
"""

from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

import environments
import evaluation
import runtime
import speed
from flags import NonNegativeFloat, PositiveFloat, PositiveInt, UnitFloat, whole_iterations, with_run_flags
from messages import fail


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    total_timesteps: PositiveInt = 500000
    """total environment steps of the experiment"""
    learning_rate: PositiveFloat = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: PositiveInt = 4
    """the number of parallel environments"""
    num_steps: PositiveInt = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """if toggled, the learning rate decays linearly to 0 over the run"""
    gamma: UnitFloat = 0.99
    """the discount factor gamma"""
    gae_lambda: UnitFloat = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: PositiveInt = 4
    """the number of minibatches per update epoch"""
    update_epochs: PositiveInt = 4
    """the number of epochs over the rollout per update"""
    norm_adv: bool = True
    """if toggled, normalize advantages per minibatch"""
    clip_coef: PositiveFloat = 0.2
    """the surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the PPO paper's reference code"""
    ent_coef: NonNegativeFloat = 0.01
    """the coefficient of the entropy bonus"""
    vf_coef: NonNegativeFloat = 0.5
    """the coefficient of the value loss"""
    max_grad_norm: PositiveFloat = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: Optional[NonNegativeFloat] = None
    """if set, stop the update epochs early once the approximate KL exceeds it"""


def derive_sizes(args: Args) -> tuple[int, int, int]:
    """Batch sizes and iteration count follow from the flags; they are checked here, never set by hand (each flag's
    own range is declared beside it, in its type)."""
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        fail(f"the batch (--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}) "
             f"does not divide into --num-minibatches {args.num_minibatches}")
    if args.norm_adv and batch_size // args.num_minibatches < 2:
        fail(f"minibatches of one transition (--num-minibatches {args.num_minibatches}): --norm-adv divides by their "
             "standard deviation, which needs 2; use fewer --num-minibatches or --no-norm-adv")
    num_iterations = whole_iterations(args.total_timesteps, batch_size, "one batch")
    return batch_size, batch_size // args.num_minibatches, num_iterations


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, n_actions), std=0.01),
        )

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """A sample of pi(.|x) (or the given action), its log-probability, the entropy of pi(.|x) and V(x).

        The math of torch's Categorical(logits=...), op for op (bit-identical for finite logits), without building
        a distribution object at every rollout step: about 1.1x faster runs on CartPole, and no argument validation,
        which would stop a diverged run with a traceback before the once-per-update non-finite check names it."""
        log_pi = self.actor(x)
        log_pi = log_pi - log_pi.logsumexp(dim=-1, keepdim=True)  # normalized logits: log pi(.|x)
        pi = log_pi.softmax(dim=-1)
        if action is None:
            action = torch.multinomial(pi, 1, True).squeeze(-1)
        entropy = -(log_pi * pi).sum(-1)
        return action, log_pi.gather(-1, action.long().unsqueeze(-1)).squeeze(-1), entropy, self.critic(x)

    def act_greedy(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor(x).argmax(dim=-1)


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminations: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, Eq. 16) over a rollout with episode ends.

    All inputs are (num_steps, num_envs). `next_values[t]` is V(s_{t+1}) of the true successor of s_t:
    for a step that ended an episode by truncation it is the value of the final observation, so a
    time-limit cut still bootstraps. `terminations[t]` = 1 drops that bootstrap (s_{t+1} is terminal).
    `dones[t]` = 1 (terminated or truncated) cuts the recursion, since step t+1 belongs to a new episode.
    Returns (advantages, returns), returns = advantages + values (the TD(lambda) value targets).
    """
    # delta_t and the decay gamma * lambda * (1 - done_t) of every step at once, then the backward recursion
    # A_t = delta_t + decay_t * A_{t+1}: the float32 ops of the one-step-at-a-time form, in its order (bit-identical)
    deltas = rewards + gamma * next_values * (1.0 - terminations) - values
    decays = gamma * gae_lambda * (1.0 - dones)
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        lastgaelam = deltas[t] + decays[t] * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def ppo_loss(newlogprob: torch.Tensor, entropy: torch.Tensor, newvalue: torch.Tensor, mb_logprobs: torch.Tensor,
             mb_advantages: torch.Tensor, mb_returns: torch.Tensor, mb_values: torch.Tensor, args: Args):
    """The PPO objective on one minibatch (all inputs (minibatch,)): returns (loss, pg_loss, v_loss, entropy_loss,
    old_approx_kl, approx_kl, clipfrac); the loss is what the optimizer minimizes."""
    logratio = newlogprob - mb_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # KL estimators k1 and k3, http://joschu.net/blog/kl-approx.html
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

    if args.norm_adv:
        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

    # clipped surrogate objective, Eq. (7), Schulman et al. 2017
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - mb_returns) ** 2
        v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - mb_returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - mb_returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef  # Eq. (9)
    return loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac


def evaluate(agent: Agent, args: Args, run_name: str, device: torch.device) -> list[float]:
    """Run the greedy policy for args.eval_episodes full episodes on fresh environments."""
    envs = environments.make_envs(args.env_id, 1, args.capture_video, f"{run_name}-eval")
    return evaluation.evaluate_episodes(envs, agent.act_greedy, args.eval_episodes, args.seed + 10_000, device)


def make_agent(env_id: str) -> Agent:
    """An untrained agent for env_id (--eval-only loads the saved weights into it)."""
    env = environments.probe_env(env_id, gym.spaces.Discrete)
    env.close()
    return Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))


def rollout_storage(num_steps: int, num_envs: int, obs_shape: tuple, device) -> tuple[torch.Tensor, ...]:
    """obs, actions, logprobs, rewards, terminations, truncations (time limits), values and final_values (the value
    of a truncated episode's final observation), each (num_steps, num_envs, ...)."""
    obs = torch.zeros((num_steps, num_envs) + obs_shape, device=device)
    actions = torch.zeros((num_steps, num_envs), device=device)
    logprobs, rewards, terminations, truncations, values, final_values = (
        torch.zeros((num_steps, num_envs), device=device) for _ in range(6))
    return obs, actions, logprobs, rewards, terminations, truncations, values, final_values


if __name__ == "__main__":
    args, checkpoint = runtime.parse_args(Args)
    if args.eval_only is not None:
        runtime.eval_only(args, "agent", lambda _: make_agent(args.env_id), evaluate)
    batch_size, minibatch_size, num_iterations = derive_sizes(args)
    probe = environments.probe_env(args.env_id, gym.spaces.Discrete)
    probe.close()
    # the rollout storage's memory, from its shapes and dtypes (tensors on the meta device take none)
    speed.check_memory(f"--num-steps {args.num_steps} x --num-envs {args.num_envs}", speed.nbytes(rollout_storage(
        args.num_steps, args.num_envs, probe.observation_space.shape, "meta")), "a rollout storage", cuda=args.cuda)
    run = runtime.start(args, checkpoint, num_iterations, batch_size)
    device, writer = run.device, run.writer

    # env setup
    # the envs take the actions as a tensor and return tensors on the device (environments.OnDevice)
    envs = environments.OnDevice(environments.make_envs(args.env_id, args.num_envs, args.capture_video, run.name),
                                 device, torch.float32)
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)).to(device)
    # Adam (eps 1e-5) as the speed flags need it: a tensor learning rate annealed in place, capturable, fused
    optimizer = speed.adam(agent.parameters(), args.learning_rate, device, eps=1e-5)

    obs, actions, logprobs, rewards, terminations, truncations, values, final_values = rollout_storage(
        args.num_steps, args.num_envs, envs.single_observation_space.shape, device)

    # A fresh run resets the envs; a resumed one loads what its checkpoint holds. The learning-rate schedule is a
    # function of the iteration, so the iteration is its whole state.
    next_obs, start_iteration, global_step = run.restore(envs, {"agent": agent, "optimizer": optimizer}, args.seed)
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)

    def policy_step(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(obs)
            return action, logprob, value

    def update(mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values) -> tuple[torch.Tensor, ...]:
        """One gradient step on one minibatch; returns the losses and diagnostics, detached."""
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb_obs, mb_actions.long())
        loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = ppo_loss(
            newlogprob, entropy, newvalue.view(-1), mb_logprobs, mb_advantages, mb_returns, mb_values, args)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        return pg_loss.detach(), v_loss.detach(), entropy_loss.detach(), old_approx_kl, approx_kl, clipfrac

    # --compile / --cudagraphs wrap exactly these functions; without the flags they run as written. GAE is only
    # recorded as a CUDA graph (one launch for its loop's 2 x num_steps ops), not compiled: dynamo would unroll it.
    policy_step, update = speed.speed_up(policy_step, args), speed.speed_up(update, args)
    gae = speed.speed_up(compute_gae, args, compile=False)

    for iteration in range(start_iteration, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"].fill_(frac * args.learning_rate)

        # rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            action, logprob, value = policy_step(next_obs)
            values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, term, trunc, infos = envs.step(action)
            rewards[step] = reward
            terminations[step] = term
            truncations[step] = trunc
            # A truncated (time-limit) episode did not end in a terminal state: its last transition bootstraps from
            # the value of the true final observation. Only truncated envs need this extra forward pass; it is rare.
            final = envs.truncated_final_obs()  # (envs, final observations), or None
            if final is not None:
                with torch.no_grad():
                    final_values[step, final[0]] = agent.get_value(final[1]).flatten()

            run.log_episodes(infos, global_step)  # charts/episodic_return and charts/episodic_length

        # an episode ended at step t when it terminated or was truncated (a time limit); a truncated one that did not
        # terminate bootstraps from the value of its final observation
        dones = torch.maximum(terminations, truncations)
        truncated = truncations > terminations

        # advantages: the successor of step t is stored at t+1, except after the last step and at truncations
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            next_values = torch.cat([values[1:], next_value], dim=0)
            next_values = torch.where(truncated, final_values, next_values)
            advantages, returns = gae(rewards, values, next_values, terminations, dones, args.gamma, args.gae_lambda)

        # flatten the batch: (num_steps * num_envs, ...)
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # optimize the policy and value network; the minibatches' indices are drawn on the device
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]

                pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = update(
                    b_obs[mb_inds], b_actions[mb_inds], b_logprobs[mb_inds], b_advantages[mb_inds],
                    b_returns[mb_inds], b_values[mb_inds],
                )
                clipfracs.append(clipfrac.clone())  # kept: a replayed update (--cudagraphs) overwrites its outputs

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # the losses come to the host once per update, for logging and for the non-finite check
        losses = {
            "losses/value_loss": v_loss.item(),
            "losses/policy_loss": pg_loss.item(),
            "losses/entropy": entropy_loss.item(),
            "losses/old_approx_kl": old_approx_kl.item(),
            "losses/approx_kl": approx_kl.item(),
        }
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"].item(), global_step)
        for key, value in losses.items():
            writer.add_scalar(key, value, global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        # SPS leaves out the first iteration: a warm-up that holds --compile's compilation (or CUDA graph recording)
        run.start_clock(global_step)
        run.log_sps(global_step)
        # Checked before any save, so a checkpoint never holds NaN or inf. (The explained variance is left
        # out: it is legitimately NaN when the returns have zero variance.)
        run.check_finite(losses, global_step, f"iteration {iteration}")
        # progress; a checkpoint every --checkpoint-frequency iterations; on a signal a checkpoint, exit 128 + signal
        run.end_of_iteration(iteration, global_step, next_obs)

    run.finish(global_step, next_obs, model=agent, evaluate=lambda: evaluate(agent, args, run.name, device))
