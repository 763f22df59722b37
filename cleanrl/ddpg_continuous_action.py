# docs: docs/rl-algorithms/ddpg.md
"""DDPG for continuous (Box) actions, default HalfCheetah-v5; Pendulum-v1 works too.

Deep Deterministic Policy Gradient, Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971, with the
common simplifications of Fujimoto et al. 2018 (https://arxiv.org/abs/1802.09477, "OurDDPG"): Gaussian
instead of Ornstein-Uhlenbeck exploration noise, 256-unit networks, a random-action warm-up phase.

Run:
    python cleanrl/ddpg_continuous_action.py --env-id HalfCheetah-v5
    python cleanrl/ddpg_continuous_action.py --env-id Pendulum-v1 --learning-starts 1000 --total-timesteps 20000
    python cleanrl/ddpg_continuous_action.py --help
"""

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
    """the learning rate of the actor optimizer (CleanRL's --learning-rate sets both rates)"""
    q_lr: PositiveFloat = 3e-4
    """the learning rate of the critic optimizer"""
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
    exploration_noise: NonNegativeFloat = 0.1
    """the std of the Gaussian exploration noise, as a fraction of the half-range of each action"""
    learning_starts: NonNegativeInt = 25000
    """environment steps of uniform random actions before learning starts"""
    policy_frequency: PositiveInt = 2
    """the actor and the target networks are updated every this many critic updates"""
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


class Actor(nn.Module):
    """Deterministic policy mu(s) = tanh(.) scaled into [low, high] of the action space."""

    def __init__(self, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray):
        super().__init__()
        action_dim = len(action_low)
        self.fc1 = nn.Linear(obs_dim, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc_mu = nn.Linear(HIDDEN, action_dim)
        # Buffers, not attributes: they move with .to(device) and are saved in the state dict.
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x), inplace=True)  # in place, as in QNetwork
        x = F.relu(self.fc2(x), inplace=True)
        return torch.tanh(self.fc_mu(x)) * self.action_scale + self.action_bias

    def deterministic_action(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)


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


def exploration_actions(
    actions: torch.Tensor, noise: torch.Tensor, exploration_noise: float, actor: Actor
) -> torch.Tensor:
    """a = clip(mu(s) + exploration_noise * scale * noise, low, high), noise ~ N(0, I) (Fujimoto et al. 2018)."""
    low, high = actor.action_bias - actor.action_scale, actor.action_bias + actor.action_scale
    return torch.clamp(actions + exploration_noise * actor.action_scale * noise, low, high)


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
    if args.eval_only is not None:  # the deterministic actor, no exploration noise, as after training
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
    qf1 = QNetwork(obs_dim, action_dim).to(device)
    target_actor = Actor(obs_dim, low, high).to(device)
    qf1_target = QNetwork(obs_dim, action_dim).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    q_optimizer = optim.Adam(qf1.parameters(), lr=args.q_lr, **speed.adam_options(args))
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, **speed.adam_options(args))

    rb = replay_memory.replay_buffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                                     args.seed, obs_dtype=np.float32)  # the networks' dtype (MuJoCo emits float64)
    staging = speed.PinnedStaging(device)  # observations reach the device without a synchronisation

    # what a checkpoint (between two iterations) holds: the memory only with --save-buffer, its Generator always
    obs, start_iteration, global_step = run.restore(envs, {
        "actor": actor, "qf1": qf1, "target_actor": target_actor, "qf1_target": qf1_target,
        "q_optimizer": q_optimizer, "actor_optimizer": actor_optimizer,
        "buffer_rng": rb.rng, "replay_buffer": rb if args.save_buffer else None,
    }, args.seed)
    num_updates = run.resumed("updates", 0)  # critic updates so far: what --checkpoint-frequency counts
    learning_starts = run.learning_starts(args.learning_starts)  # later on a resume without the memory

    def policy_step(obs: torch.Tensor) -> torch.Tensor:
        """mu(s) plus Gaussian exploration noise, clipped to the bounds."""
        with torch.no_grad():
            mu = actor(obs)
            return exploration_actions(mu, torch.randn_like(mu), args.exploration_noise, actor)

    def update_critic() -> tuple[torch.Tensor, ...]:
        """One critic step on a batch sampled from the memory; returns the loss and the mean Q(s, a), detached, and
        the batch's observations (for the actor's step)."""
        data = rb.sample(args.batch_size)
        with torch.no_grad():
            next_q = qf1_target(data.next_observations, target_actor(data.next_observations))
            # y = r + gamma * Q'(s', mu'(s')), no bootstrap from a terminal state
            next_q_value = data.rewards + args.gamma * (1.0 - data.terminations) * next_q
        qf1_a_values = qf1(data.observations, data.actions)
        qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
        gradient_step(q_optimizer, qf1_loss)
        return qf1_loss.detach(), qf1_a_values.detach().mean(), data.observations

    def update_actor(observations: torch.Tensor) -> torch.Tensor:
        """One actor step (deterministic policy gradient through Q), then the Polyak step of both target networks;
        returns the actor's loss, detached. The caller freezes the critic's weights around it."""
        actor_loss = -qf1(observations, actor(observations)).mean()
        gradient_step(actor_optimizer, actor_loss)
        soft_update(target_actor, actor, args.tau)
        soft_update(qf1_target, qf1, args.tau)
        return actor_loss.detach()

    # --compile / --cudagraphs wrap exactly these three functions; without the flags they run as written.
    policy_step, update_critic, update_actor = (speed.speed_up(f, args)
                                                for f in (policy_step, update_critic, update_actor))

    actor_loss = None  # set by the first (delayed actor) update
    for iteration in range(start_iteration, num_iterations + 1):
        global_step = iteration * args.num_envs
        # act: uniform random actions while the memory fills, then mu(s) plus Gaussian noise
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
            qf1_loss, qf1_values, observations = update_critic()
            num_updates += 1

            if iteration % args.policy_frequency == 0:
                # the critic only passes gradients through to the actor here: freezing its weights skips
                # their gradient matmuls (same result, the critic's grads are reset before its next step)
                qf1.requires_grad_(False)
                actor_loss = update_actor(observations)
                qf1.requires_grad_(True)
                # SPS leaves out everything up to here: the random warm-up and this process's first critic and
                # actor updates, which hold --compile's compilation; it is logged once the clock has run.
                run.start_clock(global_step)

            # log every 100 vector steps: .item() forces a sync, and per-step scalars bloat the event file; the
            # losses come to the host here only, for logging and for the non-finite check
            if iteration % 100 == 0:
                losses = {
                    "losses/qf1_values": qf1_values.item(),
                    "losses/qf1_loss": qf1_loss.item(),
                }
                if actor_loss is not None:
                    losses["losses/actor_loss"] = actor_loss.item()
                for key, value in losses.items():
                    writer.add_scalar(key, value, global_step)
                run.log_sps(global_step)
                run.check_finite(losses, global_step, f"gradient update {num_updates}")
        # progress; a checkpoint every --checkpoint-frequency gradient updates or on SIGTERM
        run.end_of_iteration(iteration, global_step, obs, updates=num_updates)

    run.finish(global_step, obs, model={"actor": actor, "qf1": qf1},
               evaluate=lambda: evaluate(actor, args, run.name, device), updates=num_updates)
