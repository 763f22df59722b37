# docs: docs/rl-algorithms/dqn.md
"""DQN with the Nature CNN on Atari (default BreakoutNoFrameskip-v4).

Deep Q-Network, Mnih et al. 2015, "Human-level control through deep reinforcement learning",
https://www.nature.com/articles/nature14236: experience replay, a target network, epsilon-greedy
exploration, and the Atari preprocessing of that paper (the same environments as ppo_atari.py).

The replay memory stores every 84x84 frame once and rebuilds the 4-frame stacks when it samples
(`FrameReplayBuffer`): the default 1,000,000 transitions take about 6.7 GiB, all allocated and touched at
start, instead of about 52.6 GiB for observation and next observation stored as stacks.

Run:
    python cleanrl/dqn_atari.py --env-id BreakoutNoFrameskip-v4
    python cleanrl/dqn_atari.py --env-id ALE/Pong-v5 --env-backend gymnasium --capture-video
    python cleanrl/dqn_atari.py --help
"""

from dataclasses import dataclass
from typing import Annotated, Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import atari_envs
import evaluation
import replay_memory
import runtime
import speed
from flags import NonNegativeInt, PositiveFloat, PositiveInt, Range, UnitFloat, whole_iterations, with_run_flags
from messages import fail


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    amp: bool = False
    """if toggled, run the networks' forward passes under bf16 autocast (pays on CUDA GPUs; slow on most CPUs)"""
    eval_max_frames: Optional[PositiveInt] = None
    """if set, cut each evaluation game after this many emulator frames (None: the id's own limit, 108000)"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment: `<Game>NoFrameskip-v4` (no sticky actions) or `ALE/<Game>-v5` (sticky actions)"""
    env_backend: str = "ale-vector"
    """`ale-vector`: ale-py's native C++ vector env; `gymnasium`: gymnasium wrappers in a SyncVectorEnv"""
    env_threads: NonNegativeInt = 0
    """the emulator worker threads (ale-vector); 0: the cores free at start"""
    total_timesteps: PositiveInt = 10000000
    """total environment steps of the experiment (agent steps, summed over all environments; each is 4 frames)"""
    learning_rate: PositiveFloat = 1e-4
    """the learning rate of the optimizer"""
    num_envs: PositiveInt = 1
    """the number of parallel environments"""
    buffer_size: PositiveInt = 1000000
    """the replay memory holds at least the most recent buffer_size transitions (see FrameReplayBuffer)"""
    gamma: UnitFloat = 0.99
    """the discount factor gamma"""
    tau: Annotated[float, Range("(0, 1]")] = 1.0
    """the target network update rate: 1.0 copies the Q-network, below 1 is a Polyak average"""
    target_network_frequency: PositiveInt = 1000
    """the number of environment steps between target network updates"""
    batch_size: PositiveInt = 32
    """the number of transitions sampled from the replay memory per gradient step"""
    start_e: UnitFloat = 1.0
    """the starting epsilon of the epsilon-greedy exploration"""
    end_e: UnitFloat = 0.01
    """the final epsilon, reached after exploration_fraction * total_timesteps steps"""
    exploration_fraction: UnitFloat = 0.10
    """the fraction of total_timesteps over which epsilon decays linearly from start_e to end_e"""
    learning_starts: NonNegativeInt = 80000
    """the number of environment steps collected before learning starts"""
    train_frequency: PositiveInt = 4
    """the number of environment steps between gradient steps"""
    save_buffer: bool = False
    """with --save-model, also save the replay memory (its frame rings and bookkeeping) in checkpoints"""
    torch_threads: NonNegativeInt = 0
    """torch threads on the CPU; 0: as many as other work leaves cores free, looked at again as the run goes
    (the Nature CNN gains from a second core); a number for bit-identical reruns"""


def check_off_policy_args(args: Args) -> None:
    """The step counts of an off-policy run, checked before the run directory exists.

    Steps are counted over all environments; one loop iteration takes num_envs steps, so the periodic
    events (gradient step, target update) must fall on iteration boundaries to happen when the flags say. Each
    flag's own range is declared beside it, in its type.
    """
    for name in ("train_frequency", "target_network_frequency"):
        if getattr(args, name) % args.num_envs != 0:
            fail(f"--{name.replace('_', '-')} {getattr(args, name)} is not a multiple of --num-envs {args.num_envs}")


class QNetwork(nn.Module):
    """The Nature CNN of Mnih et al. 2015 with one Q-value per action."""

    def __init__(self, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),  # (batch, 64 * 7 * 7)
            nn.Linear(64 * 7 * 7, 512),
            nn.ReLU(),
            nn.Linear(512, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x / 255.0)  # uint8 frames in [0, 255] -> floats in [0, 1]


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
    """Real game scores of args.eval_episodes whole games, epsilon-greedy with epsilon 0.05 (Mnih et al. 2015).

    A little randomness keeps a greedy policy from getting stuck (e.g. never pressing FIRE after a lost life
    in Breakout), which would make a game last until the frame limit. With --eval-only, --env-backend,
    --eval-max-frames, --seed and --capture-video come from the command line; videos go to videos/{name}-eval.
    """
    envs = atari_envs.make_atari_envs(
        args.env_id, 1, args.env_backend, args.capture_video, f"{run_name}-eval", max_frames=args.eval_max_frames
    )
    rng = np.random.default_rng(args.seed + 10_000)

    def act(x: torch.Tensor) -> np.ndarray:  # Q-values only where the coin says greedy
        greedy = lambda: q_network(x).argmax(dim=1).cpu().numpy()  # noqa: E731
        return epsilon_greedy(greedy, 1, envs.single_action_space.n, epsilon, rng)

    return evaluation.evaluate_episodes(envs, act, args.eval_episodes, args.seed + 10_000, device, dtype=None)


def make_q_network(args: Args) -> QNetwork:
    """An untrained Q-network for args.env_id (--eval-only loads the saved weights into it)."""
    atari_envs.check_atari(args.env_id, args.env_backend)
    probe = atari_envs.make_atari_envs(args.env_id, 1, args.env_backend)
    n_actions = int(probe.single_action_space.n)
    probe.close()
    return QNetwork(n_actions)


if __name__ == "__main__":
    args, checkpoint = runtime.parse_args(Args)
    if args.eval_only is not None:
        runtime.eval_only(args, "q_network", lambda _: make_q_network(args), evaluate)
    check_off_policy_args(args)
    atari_envs.check_atari(args.env_id, args.env_backend)
    replay_memory.FrameReplayBuffer.check_fits(args.buffer_size, args.num_envs)
    num_iterations = whole_iterations(args.total_timesteps, args.num_envs, "one step of every env")
    run = runtime.start(args, checkpoint, num_iterations, args.num_envs)
    device, writer = run.device, run.writer

    # env setup: sign-clipped rewards, a lost life terminates (nothing bootstraps across it), whole-game scores
    # the envs step together: the replay memory takes every env's transition of a step at once
    envs = atari_envs.make_atari_envs(args.env_id, args.num_envs, args.env_backend, args.capture_video, run.name,
                                        **atari_envs.atari_engine(args.num_envs, args.env_backend, args.env_threads,
                                                                    "off", device))
    n_actions = int(envs.single_action_space.n)
    q_network = QNetwork(n_actions).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, **speed.adam_options(args))
    target_network = QNetwork(n_actions).to(device)
    target_network.load_state_dict(q_network.state_dict())

    # storage: every frame once, allocated and touched now (see FrameReplayBuffer for the footprint); on a GPU the
    # frames live in its memory when they fit
    rb = replay_memory.frame_replay_buffer(
        args.buffer_size, envs.single_observation_space, envs.single_action_space, args.num_envs, device, args.seed
    )
    staging = speed.PinnedStaging(device)  # frames reach the device without a synchronisation
    action_rng = np.random.default_rng(args.seed)
    exploration_steps = int(args.exploration_fraction * args.total_timesteps)

    # Checkpoints are taken between loop iterations (one env step of every env, and its learning). Epsilon is a
    # function of global_step, so the step is the schedule's whole state. The games' state cannot be saved
    # (ale-py keeps it in C++): a resumed run restarts them, and the replay memory writes the new games' first
    # observations whole, as after any reset.
    state = {"q_network": q_network, "target_network": target_network, "optimizer": optimizer,
             "action_rng": action_rng, "buffer_rng": rb.rng, "replay_buffer": rb if args.save_buffer else None}
    obs, start_iteration, global_step = run.restore(envs, state, args.seed)
    # updates: gradient steps so far (what --checkpoint-frequency counts)
    updates, target_updates = run.resumed("updates", 0), run.resumed("target_updates", 0)
    learning_starts = run.learning_starts(args.learning_starts)  # later on a resume without the memory

    def policy_step(obs: torch.Tensor) -> torch.Tensor:
        """The greedy action argmax_a Q(s, a) of every env (epsilon-greedy's coin flips are drawn outside, in numpy)."""
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp):
            q_values = q_network(obs)
            return q_values.float().argmax(dim=1)

    def update(observations, actions, next_observations, rewards, terminations) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step on a sampled batch; returns the TD loss and the batch's mean Q(s, a), detached."""
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp):
            with torch.no_grad():
                next_q_target = target_network(next_observations)
            q_values = q_network(observations)
        # with --amp the networks ran in bf16; the TD target and the loss are computed in float32
        with torch.no_grad():
            td_y = td_target(rewards, next_q_target.float(), terminations, args.gamma)
        old_val = q_values.float().gather(1, actions.long().view(-1, 1)).squeeze(1)
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
            lambda: policy_step(staging.to_device("obs", obs)).cpu().numpy(),
            args.num_envs, n_actions, epsilon, action_rng,
        )

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        # whole games, real (unclipped) score over all lives
        for _ in run.log_episodes(infos, global_step):
            writer.add_scalar("charts/epsilon", epsilon, global_step)

        # store: the successor of a finished game is its final observation; only termination (game over or a
        # lost life) stops the bootstrap, so a game cut at the frame limit is stored with terminated = 0.
        rb.add(obs, replay_memory.atari_true_next_obs(next_obs, infos), actions, rewards, terminations)
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
        # progress; a checkpoint every --checkpoint-frequency gradient updates or on SIGTERM
        run.end_of_iteration(iteration, global_step, obs, updates=updates, target_updates=target_updates)

    run.finish(global_step, obs, model=q_network, evaluate=lambda: evaluate(q_network, args, run.name, device),
               updates=updates, target_updates=target_updates)
