# docs: docs/rl-algorithms/dqn.md
"""DQN for discrete actions on classic control (default CartPole-v1).

Deep Q-Network, Mnih et al. 2015, "Human-level control through deep reinforcement learning",
https://www.nature.com/articles/nature14236 (experience replay, a target network, epsilon-greedy).

Run:
    python cleanrl/dqn.py --env-id CartPole-v1
    python cleanrl/dqn.py --env-id Acrobot-v1 --seed 2 --track
    python cleanrl/dqn.py --help
"""

from dataclasses import dataclass
from typing import Annotated, Callable

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
from flags import NonNegativeInt, PositiveFloat, PositiveInt, Range, UnitFloat, whole_iterations, with_run_flags
from messages import fail
from replay_memory import ReplayBuffer, true_next_obs


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    total_timesteps: PositiveInt = 500000
    """total environment steps of the experiment (summed over all environments)"""
    learning_rate: PositiveFloat = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: PositiveInt = 1
    """the number of parallel environments"""
    buffer_size: PositiveInt = 10000
    """the replay memory holds the most recent buffer_size transitions"""
    gamma: UnitFloat = 0.99
    """the discount factor gamma"""
    tau: Annotated[float, Range("(0, 1]")] = 1.0
    """the target network update rate: 1.0 copies the Q-network, below 1 is a Polyak average"""
    target_network_frequency: PositiveInt = 500
    """the number of environment steps between target network updates"""
    batch_size: PositiveInt = 128
    """the number of transitions sampled from the replay memory per gradient step"""
    start_e: UnitFloat = 1.0
    """the starting epsilon of the epsilon-greedy exploration"""
    end_e: UnitFloat = 0.05
    """the final epsilon, reached after exploration_fraction * total_timesteps steps"""
    exploration_fraction: UnitFloat = 0.5
    """the fraction of total_timesteps over which epsilon decays linearly from start_e to end_e"""
    learning_starts: NonNegativeInt = 10000
    """the number of environment steps collected before learning starts"""
    train_frequency: PositiveInt = 10
    """the number of environment steps between gradient steps"""
    save_buffer: bool = False
    """with --save-model, also save the replay buffer in checkpoints so resume is exact"""


def check_off_policy_args(args) -> None:
    """The step counts of an off-policy run, checked before the run directory exists.

    Steps are counted over all environments; one loop iteration takes num_envs steps, so the periodic
    events (gradient step, target update) must fall on iteration boundaries to happen when the flags say. Each
    flag's own range is declared beside it, in its type.
    """
    for name in ("train_frequency", "target_network_frequency"):
        if getattr(args, name) % args.num_envs != 0:
            fail(f"--{name.replace('_', '-')} {getattr(args, name)} is not a multiple of --num-envs {args.num_envs}")


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """Epsilon at step t: linear from start_e at t=0 to end_e at t=duration, then constant."""
    if duration <= 0:
        return end_e
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e) if end_e <= start_e else min(slope * t + start_e, end_e)


def update_target(target: nn.Module, online: nn.Module, tau: float) -> None:
    """theta_target <- tau * theta + (1 - tau) * theta_target; tau = 1 is the hard copy of Mnih et al. 2015."""
    with torch.no_grad():
        for target_param, param in zip(target.parameters(), online.parameters()):
            target_param.copy_(tau * param + (1.0 - tau) * target_param)


def epsilon_greedy(greedy: Callable[[], np.ndarray], n_envs: int, n_actions: int, epsilon: float,
                   rng: np.random.Generator) -> np.ndarray:
    """Per env: a uniformly random action with probability epsilon, else its greedy action argmax_a Q(s, a).

    The coin flips and random actions are drawn from the numpy Generator, so compiled and plain runs explore
    alike; `greedy()` runs the network (the policy step) only if some env exploits. A step on which every env
    explores (most steps early on, while epsilon is near 1) skips it: the draws, and so the run, are the same.
    """
    explore = rng.random(n_envs) < epsilon
    random_actions = rng.integers(0, n_actions, size=n_envs)
    return random_actions if explore.all() else np.where(explore, random_actions, greedy())


def td_target(rewards: torch.Tensor, next_q_target: torch.Tensor, terminations: torch.Tensor,
              gamma: float) -> torch.Tensor:
    """y = r + gamma * max_a' Q_target(s', a') * (1 - terminated), Mnih et al. 2015 (Algorithm 1)."""
    return rewards + gamma * next_q_target.max(dim=1).values * (1.0 - terminations)


def evaluate(q_network: QNetwork, args: Args, run_name: str, device: torch.device,
             epsilon: float = 0.05) -> list[float]:
    """Run the epsilon-greedy policy (epsilon 0.05, as CleanRL evaluates DQN) for args.eval_episodes episodes."""
    envs = environments.make_envs(args.env_id, 1, args.capture_video, f"{run_name}-eval")
    rng = np.random.default_rng(args.seed + 10_000)

    def act(x: torch.Tensor) -> np.ndarray:  # Q-values only where the coin says greedy
        greedy = lambda: q_network(x).argmax(dim=1).cpu().numpy()  # noqa: E731
        return epsilon_greedy(greedy, 1, envs.single_action_space.n, epsilon, rng)

    return evaluation.evaluate_episodes(envs, act, args.eval_episodes, args.seed + 10_000, device)


def make_q_network(env_id: str) -> QNetwork:
    """An untrained Q-network for env_id (--eval-only loads the saved weights into it and evaluates it with
    epsilon 0.05, as after training)."""
    env = environments.probe_env(env_id, gym.spaces.Discrete)
    env.close()
    return QNetwork(int(np.prod(env.observation_space.shape)), int(env.action_space.n))


if __name__ == "__main__":
    args, checkpoint = runtime.parse_args(Args)
    if args.eval_only is not None:
        runtime.eval_only(args, "q_network", lambda _: make_q_network(args.env_id), evaluate)
    check_off_policy_args(args)
    env = environments.probe_env(args.env_id, gym.spaces.Discrete)
    ReplayBuffer.check_fits(args.buffer_size, env.observation_space, env.action_space, args.num_envs)
    env.close()
    # one loop iteration is one step of every env, and its learning
    num_iterations = whole_iterations(args.total_timesteps, args.num_envs, "one step of every env")
    run = runtime.start(args, checkpoint, num_iterations, args.num_envs)
    device, writer = run.device, run.writer

    # env setup: same-step autoreset, so every step is a real transition and the memory stores final_obs as the
    # next observation of an ended episode
    envs = environments.make_envs(args.env_id, args.num_envs, args.capture_video, run.name)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    n_actions = int(envs.single_action_space.n)
    q_network = QNetwork(obs_dim, n_actions).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, **speed.adam_options(args))
    target_network = QNetwork(obs_dim, n_actions).to(device)
    target_network.load_state_dict(q_network.state_dict())

    # storage
    # on a GPU the memory lives in its memory when it fits, and is sampled there
    rb = replay_memory.replay_buffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                               args.seed)
    staging = speed.PinnedStaging(device)  # observations reach the device without a synchronisation
    action_rng = np.random.default_rng(args.seed)

    # Epsilon is a function of global_step, so the step is the schedule's whole state. The replay memory goes into
    # checkpoints only with --save-buffer (None: left empty on resume); its sampling Generator always does.
    obs, start_iteration, global_step = run.restore(envs, {
        "q_network": q_network, "target_network": target_network, "optimizer": optimizer, "action_rng": action_rng,
        "buffer_rng": rb.rng, "replay_buffer": rb if args.save_buffer else None,
    }, args.seed)
    # updates: gradient steps so far (what --checkpoint-frequency counts)
    updates, target_updates = run.resumed("updates", 0), run.resumed("target_updates", 0)
    learning_starts = run.learning_starts(args.learning_starts)  # later on a resume without the memory
    exploration_steps = int(args.exploration_fraction * args.total_timesteps)

    def policy_step(obs: torch.Tensor) -> torch.Tensor:
        """The greedy action argmax_a Q(s, a) of every env (epsilon-greedy's coin flips are drawn outside, in numpy)."""
        with torch.no_grad():
            return q_network(obs).argmax(dim=1)

    def update(observations, actions, next_observations, rewards, terminations) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step on a sampled batch; returns the TD loss and the batch's mean Q(s, a), detached."""
        with torch.no_grad():
            next_q_target = target_network(next_observations.float())
            td_y = td_target(rewards, next_q_target, terminations, args.gamma)
        old_val = q_network(observations.float()).gather(1, actions.long().view(-1, 1)).squeeze(1)
        loss = F.mse_loss(td_y, old_val)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), old_val.mean().detach()

    # --compile / --cudagraphs wrap exactly these two functions; without the flags they run as written.
    # (The target network's copy every target_network_frequency steps stays eager: it is rare and cheap.)
    policy_step, update = speed.speed_up(policy_step, args), speed.speed_up(update, args)

    for iteration in range(start_iteration, num_iterations + 1):
        # act: global_step counts the environment steps taken so far, this one included
        global_step = iteration * args.num_envs
        epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step - args.num_envs)
        # the greedy actions argmax_a Q(s, a), computed only if some env exploits
        actions = epsilon_greedy(
            lambda: policy_step(staging.to_device("obs", obs).float()).cpu().numpy(),
            args.num_envs, n_actions, epsilon, action_rng,
        )

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        for _ in run.log_episodes(infos, global_step):  # charts/episodic_return and charts/episodic_length
            writer.add_scalar("charts/epsilon", epsilon, global_step)

        # store: the successor of an ended episode is its final observation; only termination stops the
        # bootstrap, so a time-limit truncation (CartPole's 500 steps) is stored with terminated = 0.
        rb.add(obs, true_next_obs(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # learn
        if global_step > learning_starts:
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                loss, q_mean = update(
                    data.observations, data.actions, data.next_observations, data.rewards, data.terminations
                )
                updates += 1
                # SPS leaves out everything up to and including this process's first gradient update: a
                # warm-up that holds --compile's compilation (or CUDA graph recording) and, on a fresh run,
                # the learning_starts steps without updates. Only steps after it count, so no SPS is logged here.
                run.start_clock(global_step)

                if global_step % 100 == 0:
                    # the losses come to the host here only, for logging and for the non-finite check
                    losses = {"losses/td_loss": loss.item(), "losses/q_values": q_mean.item()}
                    for key, value in losses.items():
                        writer.add_scalar(key, value, global_step)
                    run.log_sps(global_step)
                    run.check_finite(losses, global_step, f"gradient update {updates}")

            if global_step % args.target_network_frequency == 0:
                update_target(target_network, q_network, args.tau)
                target_updates += 1
                writer.add_scalar("charts/target_updates", target_updates, global_step)

        # progress; a checkpoint every --checkpoint-frequency gradient updates (checked for NaN and inf first) or
        # on SIGINT/SIGTERM
        run.end_of_iteration(iteration, global_step, obs, updates=updates, target_updates=target_updates)

    run.finish(global_step, obs, model=q_network, evaluate=lambda: evaluate(q_network, args, run.name, device),
               updates=updates, target_updates=target_updates)
