# docs: docs/rl-algorithms/sac.md
"""SAC for continuous (Box) actions, default HalfCheetah-v5; Pendulum-v1 works too.

Soft Actor-Critic, Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290, with twin soft Q-functions and
automatic entropy tuning from Haarnoja et al. 2018b, "Soft Actor-Critic Algorithms and Applications",
https://arxiv.org/abs/1812.05905. The policy is a tanh-squashed Gaussian scaled into the action bounds.

Run:
    python cleanrl/sac_continuous_action.py --env-id HalfCheetah-v5
    python cleanrl/sac_continuous_action.py --env-id Pendulum-v1 --learning-starts 1000 --total-timesteps 20000
    python cleanrl/sac_continuous_action.py --env-id Pendulum-v1 --no-autotune --alpha 0.2
    python cleanrl/sac_continuous_action.py --help
"""

import math
from dataclasses import dataclass
from typing import Annotated

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import environments
import evaluation
import replay_memory
import runtime
import speed
from flags import (
    NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Range, UnitFloat, whole_iterations, with_run_flags,
)


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    env_id: str = "HalfCheetah-v5"
    """the id of the environment (its action space must be a bounded Box)"""
    total_timesteps: PositiveInt = 1000000
    """total environment steps of the experiment"""
    policy_lr: PositiveFloat = 3e-4
    """the learning rate of the actor optimizer"""
    q_lr: PositiveFloat = 1e-3
    """the learning rate of the critic optimizer (and of the entropy temperature with --autotune)"""
    num_envs: PositiveInt = 1
    """the number of parallel environments (one gradient step is taken per vector step)"""
    buffer_size: PositiveInt = 1000000
    """the replay memory capacity in transitions"""
    gamma: UnitFloat = 0.99
    """the discount factor gamma"""
    tau: Annotated[float, Range("(0, 1]")] = 0.005
    """the target network update rate: target <- tau * online + (1 - tau) * target"""
    batch_size: PositiveInt = 256
    """the number of transitions sampled from the replay memory per gradient step"""
    learning_starts: NonNegativeInt = 5000
    """environment steps of uniform random actions before learning starts"""
    policy_frequency: PositiveInt = 2
    """every this many critic updates, the actor (and alpha) take this many steps (delayed, compensated)"""
    target_network_frequency: PositiveInt = 1
    """the target critics are updated every this many critic updates"""
    alpha: NonNegativeFloat = 0.2
    """the entropy temperature alpha when --no-autotune; ignored with --autotune"""
    autotune: bool = True
    """if toggled, tune alpha automatically towards the target entropy -|A| (Haarnoja et al. 2018b)"""
    save_buffer: bool = False
    """with --save-model, also save the replay buffer in checkpoints so resume is exact"""
    torch_threads: NonNegativeInt = 0
    """torch threads on the CPU; 0: as many as other work leaves cores free, looked at again as the run goes
    (the 256-wide networks gain from a second core); a number for bit-identical reruns"""


HIDDEN = 256  # the width of every hidden layer, the actor's and the critics'


class QNetwork(nn.Module):
    """Q(s, a) with the action in the env's own units, as stored in the replay memory."""

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + action_dim, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x, a], 1)
        # ReLU in place: a linear layer's backward needs its input, not its output, so no copy is kept
        x = F.relu(self.fc1(x), inplace=True)
        x = F.relu(self.fc2(x), inplace=True)
        return self.fc3(x).squeeze(-1)  # (batch,)


def twin_critics(obs_dim: int, action_dim: int, batched: bool = False) -> speed.Ensemble:
    """The twin critics Q_1 and Q_2, two QNetworks each drawn as its own, called as one: qf(s, a) is Q_1(s, a) and
    Q_2(s, a) stacked, (2, batch), and qf[0] is Q_1 alone. With `batched` (the GPU path) both run as one batched
    matmul per layer (speed.Ensemble)."""
    return speed.Ensemble([QNetwork(obs_dim, action_dim) for _ in range(2)], batched)


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """Gaussian policy over pre-squash actions u, a = tanh(u) scaled into [low, high] of the action space."""

    def __init__(self, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray):
        super().__init__()
        action_dim = len(action_low)
        self.fc1 = nn.Linear(obs_dim, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc_mean = nn.Linear(HIDDEN, action_dim)
        self.fc_logstd = nn.Linear(HIDDEN, action_dim)
        # Buffers, not attributes: they move with .to(device) and are saved in the state dict.
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc1(x), inplace=True)  # in place, as in QNetwork
        x = F.relu(self.fc2(x), inplace=True)
        mean = self.fc_mean(x)
        # soft clamp of log_std into [LOG_STD_MIN, LOG_STD_MAX], as in CleanRL and SpinningUp variants
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def get_action(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized sample a = scale * tanh(mean + std * eps) + bias and its log-probability (batch,)."""
        mean, log_std = self(x)
        u = mean + log_std.exp() * torch.randn_like(mean)  # rsample: gradients flow through mean and std
        action = torch.tanh(u) * self.action_scale + self.action_bias
        return action, squashed_gaussian_log_prob(u, mean, log_std, self.action_scale)

    def deterministic_action(self, x: torch.Tensor) -> torch.Tensor:
        mean, _ = self(x)
        return torch.tanh(mean) * self.action_scale + self.action_bias


def squashed_gaussian_log_prob(
    u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, action_scale: torch.Tensor
) -> torch.Tensor:
    """log pi(a|s) of a = scale * tanh(u) + bias with u ~ N(mean, exp(log_std)^2) per dimension, summed over dims.

    Change of variables (Haarnoja et al. 2018, Appendix C): log pi(a) = log N(u) - sum_i log(scale_i (1 - tanh(u_i)^2)).
    log(1 - tanh(u)^2) is computed as 2 (log 2 - u - softplus(-2u)), exact and finite for any u, instead of
    CleanRL's log(scale * (1 - tanh(u)^2) + 1e-6), which biases the result once tanh saturates.
    """
    gaussian = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det_jacobian = torch.log(action_scale) + 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return (gaussian - log_det_jacobian).sum(-1)


@torch.compiler.disable(reason="an optimizer step, kept out of dynamo (gradient_step's docstring)")
def gradient_step(optimizer: optim.Optimizer, loss: torch.Tensor) -> None:
    """One optimizer step on `loss`: zero_grad, backward, step.

    --compile leaves it as it is: torch's optimizer breaks the graph around its step on purpose (pytorch#104053),
    the fused kernel cannot be traced, and dynamo would compile Adam.step again for each optimizer object. The
    backward pass of a compiled loss is the compiled backward graph all the same, and --cudagraphs records this
    step with the rest of the update.
    """
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak averaging of the target network, theta' <- tau * theta + (1 - tau) * theta' (Lillicrap et al. 2016)."""
    # lerp: theta' + tau * (theta - theta'), all parameters in one call (the same lerp as a loop of lerp_)
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


def evaluate(actor: nn.Module, args, run_name: str, device: torch.device) -> list[float]:
    """Run the deterministic policy (no exploration noise) for args.eval_episodes full episodes."""
    envs = environments.make_envs(args.env_id, 1, args.capture_video, f"{run_name}-eval")
    return evaluation.evaluate_episodes(envs, actor.deterministic_action,
                                          args.eval_episodes, args.seed + 10_000, device)


def make_actor(env_id: str) -> Actor:
    """An untrained actor for env_id (--eval-only loads the saved weights into it)."""
    env = environments.probe_env(env_id, gym.spaces.Box, finite_actions=True)
    env.close()
    return Actor(int(np.prod(env.observation_space.shape)), env.action_space.low, env.action_space.high)


if __name__ == "__main__":
    args, checkpoint = runtime.parse_args(Args)
    if args.eval_only is not None:  # the deterministic actor (the squashed mean), as after training
        runtime.eval_only(args, "actor", lambda _: make_actor(args.env_id), evaluate)
    num_iterations = whole_iterations(args.total_timesteps, args.num_envs, "one step of every env")
    env = environments.probe_env(args.env_id, gym.spaces.Box, finite_actions=True)
    replay_memory.check_fits_env(env, args.buffer_size, args.num_envs, obs_dtype=np.float32)
    run = runtime.start(args, checkpoint, num_iterations, args.num_envs)
    device, writer = run.device, run.writer

    # env setup
    envs = environments.make_envs(args.env_id, args.num_envs, args.capture_video, run.name)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(envs.single_action_space.shape))
    low, high = envs.single_action_space.low, envs.single_action_space.high

    actor = Actor(obs_dim, low, high).to(device)
    qf = twin_critics(obs_dim, action_dim, batched=speed.gpu_path(device)).to(device)
    qf_target = twin_critics(obs_dim, action_dim, batched=speed.gpu_path(device)).to(device)
    qf_target.load_state_dict(qf.state_dict())
    q_optimizer = optim.Adam(qf.parameters(), lr=args.q_lr, **speed.adam_options(args))
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, **speed.adam_options(args))

    # the entropy temperature learned with --autotune: log alpha, 0 (alpha = 1) at the start
    log_alpha = a_optimizer = None
    if args.autotune:
        target_entropy = -float(action_dim)  # -|A|, Haarnoja et al. 2018b, Sec. 5
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, **speed.adam_options(args))

    rb = replay_memory.replay_buffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                                     args.seed, obs_dtype=np.float32)  # the networks' dtype (MuJoCo emits float64)
    staging = speed.PinnedStaging(device)  # observations reach the device without a synchronisation

    # what a checkpoint (between two iterations) holds: the memory only with --save-buffer, its Generator always
    obs, start_iteration, global_step = run.restore(envs, {
        "actor": actor, "qf": qf, "qf_target": qf_target, "q_optimizer": q_optimizer,
        "actor_optimizer": actor_optimizer, "log_alpha": log_alpha, "a_optimizer": a_optimizer, "buffer_rng": rb.rng,
        "replay_buffer": rb if args.save_buffer else None}, args.seed)
    # alpha, a tensor: reading it forces no .item(); the temperature step overwrites it in place for compiled code
    alpha = log_alpha.exp().detach() if args.autotune else torch.tensor([args.alpha], device=device)
    num_updates = run.resumed("updates", 0)  # critic updates so far: what --checkpoint-frequency counts
    learning_starts = run.learning_starts(args.learning_starts)  # later on a resume without the memory

    def policy_step(obs: torch.Tensor) -> torch.Tensor:
        """A sample of the stochastic policy."""
        with torch.no_grad():
            actions, _ = actor.get_action(obs)
        return actions

    def update_critic(update_targets: bool) -> tuple[torch.Tensor, ...]:
        """One step of both critics on a sampled batch, then (update_targets) the target critics' Polyak step; returns
        each critic's loss (2,), their sum, each critic's mean Q(s, a) (2,), detached, and the batch's observations."""
        data = rb.sample(args.batch_size)
        with torch.no_grad():
            next_actions, next_log_pi = actor.get_action(data.next_observations)
            # soft Bellman target with V(s') = min_i Q'_i(s', a') - alpha log pi(a'|s'), a' ~ pi(.|s') fresh (Haarnoja
            # et al. 2018, Sec. 4.2; clipped double Q from Fujimoto et al. 2018); no bootstrap from a terminal state
            next_q = qf_target(data.next_observations, next_actions).min(0).values - alpha * next_log_pi
            next_q_value = data.rewards + args.gamma * (1.0 - data.terminations) * next_q
        q_values = qf(data.observations, data.actions)  # (2, batch): Q_1 and Q_2
        qf_losses = ((q_values - next_q_value) ** 2).mean(1)  # each critic's mean squared error
        qf_loss = qf_losses.sum()
        gradient_step(q_optimizer, qf_loss)
        if update_targets:
            soft_update(qf_target, qf, args.tau)
        return qf_losses.detach(), qf_loss.detach(), q_values.detach().mean(1), data.observations

    def update_actor(observations: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One actor step and, with --autotune, one temperature step on the log-probs of the actions it sampled;
        returns the actor's loss (and the temperature's), detached. The caller freezes the critics' weights."""
        pi, log_pi = actor.get_action(observations)
        min_qf_pi = qf(observations, pi).min(0).values
        # reparameterized J_pi, Sec. 4.2, Haarnoja et al. 2018
        actor_loss = (alpha * log_pi - min_qf_pi).mean()
        gradient_step(actor_optimizer, actor_loss)
        if not args.autotune:
            return (actor_loss.detach(),)
        # J(alpha) = E[-alpha (log pi + target_entropy)], Sec. 5, Haarnoja et al. 2018b, on the
        # log-probs of the actions just sampled (as the authors' code does; CleanRL samples again)
        alpha_loss = (-log_alpha.exp() * (log_pi.detach() + target_entropy)).mean()
        gradient_step(a_optimizer, alpha_loss)
        alpha.copy_(log_alpha.detach().exp())
        return actor_loss.detach(), alpha_loss.detach()

    # --compile / --cudagraphs wrap exactly these three functions; without the flags they run as written.
    policy_step, update_critic, update_actor = (speed.speed_up(f, args)
                                                for f in (policy_step, update_critic, update_actor))

    actor_loss, alpha_loss = None, []  # set by the first (delayed) actor update
    for iteration in range(start_iteration, num_iterations + 1):
        global_step = iteration * args.num_envs
        # act: uniform random actions while the memory fills, then samples of the stochastic policy
        if global_step <= learning_starts:
            actions = envs.action_space.sample()
        else:
            actions = policy_step(staging.to_device("obs", obs, torch.float32)).cpu().numpy()

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        run.log_episodes(infos, global_step)  # charts/episodic_return and charts/episodic_length

        # store (obs, a, r, s', terminated): s' is the true successor (info["final_obs"] when the episode just
        # ended), and the done flag is `terminations` only, so time-limit truncations still bootstrap
        rb.add(obs, replay_memory.true_next_obs(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # learn: one gradient step per vector step once the warm-up is over
        if global_step > learning_starts:
            update_targets = iteration % args.target_network_frequency == 0
            qf_losses, qf_loss, q_values, observations = update_critic(update_targets)
            num_updates += 1

            # delayed policy updates as in TD3, compensated: policy_frequency actor steps every policy_frequency
            # critic steps, so actor and critic take the same number of gradient steps (as CleanRL does)
            if iteration % args.policy_frequency == 0:
                # the critics only pass gradients through to the actor here: freezing their weights skips
                # their gradient matmuls (same result, the critics' grads are reset before their next step)
                qf.requires_grad_(False)
                for _ in range(args.policy_frequency):
                    actor_loss, *alpha_loss = update_actor(observations)
                qf.requires_grad_(True)
                # SPS leaves out everything up to here: the random warm-up and this process's first critic and
                # actor updates, which hold --compile's compilation; it is logged once the clock has run.
                run.start_clock(global_step)

            # log every 100 vector steps: .item() forces a sync, and per-step scalars bloat the event file; the
            # losses come to the host here only, for logging and for the non-finite check (which also covers the
            # networks' parameters and log alpha)
            if iteration % 100 == 0:
                (qf1_values, qf2_values), (qf1_loss, qf2_loss) = q_values.tolist(), qf_losses.tolist()
                losses = {
                    "losses/qf1_values": qf1_values,
                    "losses/qf2_values": qf2_values,
                    "losses/qf1_loss": qf1_loss,
                    "losses/qf2_loss": qf2_loss,
                    # CleanRL logs the mean of the two critic losses under this key
                    "losses/qf_loss": qf_loss.item() / 2.0,
                }
                if actor_loss is not None:
                    losses["losses/actor_loss"] = actor_loss.item()
                losses["losses/alpha"] = alpha.item()
                if alpha_loss:
                    losses["losses/alpha_loss"] = alpha_loss[0].item()
                for key, value in losses.items():
                    writer.add_scalar(key, value, global_step)
                run.log_sps(global_step)
                run.check_finite(losses, global_step, f"gradient update {num_updates}")
        # progress; a checkpoint every --checkpoint-frequency gradient updates or on SIGTERM
        run.end_of_iteration(iteration, global_step, obs, updates=num_updates)

    run.finish(global_step, obs, model={"actor": actor, "qf": qf},
               evaluate=lambda: evaluate(actor, args, run.name, device), updates=num_updates)
