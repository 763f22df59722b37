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

import os
import random
import time
from dataclasses import dataclass
from typing import NamedTuple, NoReturn, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    # [shared:common-args] source: cleanrl/ppo.py
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment; the run is logged to runs/{env_id}__{exp_name}__{seed}__{unix time}"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, use CUDA when it is available"""
    track: bool = False
    """if toggled, also log to Weights and Biases (set WANDB_MODE=offline to stay offline)"""
    wandb_project_name: str = "cleanRL"
    """the W&B project name"""
    wandb_entity: Optional[str] = None
    """the W&B entity (team); None uses your default entity"""
    capture_video: bool = False
    """if toggled, record videos of the first environment's episodes to videos/{run_name}"""
    save_model: bool = False
    """if toggled, save the model to runs/{run_name}/{exp_name}.cleanrl_model and evaluate it"""
    eval_episodes: int = 10
    """number of episodes of the evaluation that follows --save-model"""
    # [/shared:common-args]

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v5"
    """the id of the environment (its action space must be a bounded Box)"""
    total_timesteps: int = 1000000
    """total environment steps of the experiment"""
    policy_lr: float = 3e-4
    """the learning rate of the actor optimizer (CleanRL's --learning-rate sets both rates)"""
    q_lr: float = 3e-4
    """the learning rate of the critic optimizer"""
    num_envs: int = 1
    """the number of parallel environments (one gradient step is taken per vector step)"""
    buffer_size: int = 1000000
    """the replay memory capacity in transitions"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """the target network update rate: target <- tau * online + (1 - tau) * target"""
    batch_size: int = 256
    """the number of transitions sampled from the replay memory per gradient step"""
    exploration_noise: float = 0.1
    """the std of the Gaussian exploration noise, as a fraction of the half-range of each action"""
    learning_starts: int = 25000
    """environment steps of uniform random actions before learning starts"""
    policy_frequency: int = 2
    """the actor and the target networks are updated every this many critic updates"""


# [shared:run-setup] source: cleanrl/ppo.py
def fail(message: str) -> NoReturn:
    """Stop with a one-line error and exit status 1 (used before any run directory exists)."""
    raise SystemExit(f"error: {message}")


def make_probe_env(env_id: str) -> gym.Env:
    """Build one environment to check the id before any work starts; unknown ids fail in one line."""
    try:
        return gym.make(env_id)
    except gym.error.Error as e:
        fail(f"cannot make environment {env_id!r}: {e}")


def seed_everything(seed: int, torch_deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def start_logging(args, run_name: str) -> SummaryWriter:
    """TensorBoard always, W&B only with --track (imported here so it is never needed otherwise)."""
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            save_code=True,
        )
    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )
    return writer
# [/shared:run-setup]


# [shared:continuous-offpolicy-checks] source: cleanrl/ddpg_continuous_action.py
def check_args(args) -> int:
    """Check the flags shared by the off-policy continuous scripts; returns the number of vector steps."""
    for name in ("num_envs", "total_timesteps", "buffer_size", "batch_size", "policy_frequency"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.learning_starts < 0:
        fail(f"--learning-starts must be at least 0, got {args.learning_starts}")
    if args.learning_starts >= args.total_timesteps:
        fail(
            f"--learning-starts {args.learning_starts} is not below --total-timesteps {args.total_timesteps}: "
            "no update would ever happen"
        )
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.gamma <= 1.0:
        fail(f"--gamma must be in [0, 1], got {args.gamma}")
    if args.buffer_size < args.num_envs:
        fail(f"--buffer-size {args.buffer_size} is smaller than one step of --num-envs {args.num_envs}")
    num_iterations = args.total_timesteps // args.num_envs
    if num_iterations < 1:
        fail(f"--total-timesteps {args.total_timesteps} is less than one vector step ({args.num_envs} envs)")
    return num_iterations


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space, script: str) -> None:
    """These scripts need flat Box observations and a Box action space with finite bounds on every dimension:
    the actor's output is scaled into [low, high], which is undefined for an unbounded dimension."""
    if not isinstance(action_space, gym.spaces.Box):
        fail(f"{env_id} has action space {action_space}; {script} supports Box (continuous) actions only")
    if len(action_space.shape) != 1:
        fail(f"{env_id} has action shape {action_space.shape}; {script} supports 1-D Box actions only")
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        fail(f"{env_id} has unbounded action space {action_space}; {script} needs finite low and high bounds")
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        fail(f"{env_id} has observation space {observation_space}; {script} supports flat Box observations only")
# [/shared:continuous-offpolicy-checks]


# [shared:continuous-envs] source: cleanrl/ddpg_continuous_action.py
def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        return env

    return thunk


def make_envs(env_id: str, num_envs: int, capture_video: bool, run_name: str) -> gym.vector.VectorEnv:
    # Same-step autoreset: when an episode ends at step t, step t returns the first observation of the
    # next episode and puts the true last observation in info["final_obs"], which is what the replay
    # memory stores as next_obs of that transition. SyncVectorEnv: with one env, or a few cheap ones,
    # the inter-process traffic of AsyncVectorEnv costs more than it saves on 2 cores.
    envs = gym.vector.SyncVectorEnv(
        [make_env(env_id, i, capture_video, run_name) for i in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def evaluate(actor: nn.Module, args, run_name: str, device: torch.device) -> list[float]:
    """Run the deterministic policy (no exploration noise) for args.eval_episodes full episodes."""
    envs = make_envs(args.env_id, 1, args.capture_video, f"{run_name}-eval")
    obs, _ = envs.reset(seed=args.seed + 10_000)
    returns = []
    while len(returns) < args.eval_episodes:
        with torch.no_grad():
            actions = actor.deterministic_action(torch.as_tensor(obs, dtype=torch.float32, device=device))
        obs, _, _, _, infos = envs.step(actions.cpu().numpy())
        if "episode" in infos:
            returns += [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    return returns[: args.eval_episodes]
# [/shared:continuous-envs]


# [shared:replay-buffer] source: cleanrl/dqn.py
class ReplayBufferSamples(NamedTuple):
    observations: torch.Tensor  # (batch, *obs_shape)
    actions: torch.Tensor  # (batch, *action_shape), the action space's dtype (int64 for Discrete)
    next_observations: torch.Tensor  # (batch, *obs_shape), the true successor (final_obs at an episode end)
    rewards: torch.Tensor  # (batch,) float32
    terminations: torch.Tensor  # (batch,) float32: 1 only when the successor is terminal (no bootstrap)


class ReplayBuffer:
    """A ring of the most recent `buffer_size` transitions, stored as numpy arrays, sampled uniformly.

    A transition is (s, a, r, s', terminated). `s'` is the true successor of `s`: at an episode end it is
    the final observation (info["final_obs"] under same-step autoreset, see `true_next_obs`), never the
    first observation of the next episode. `terminated` = 1 means s' is terminal, so the target must not
    bootstrap from it; a time-limit truncation stores 0 and bootstraps from the final observation.
    Each `add` writes one transition per environment; when the ring is full the oldest are overwritten.
    Memory: 2 * buffer_size observations (s and s' both stored) + actions + 8 bytes per transition.
    """

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device, seed: int):
        self.buffer_size = buffer_size
        self.device = device
        self.rng = np.random.default_rng(seed)
        self.observations = np.zeros((buffer_size, *observation_space.shape), dtype=observation_space.dtype)
        self.next_observations = np.zeros((buffer_size, *observation_space.shape), dtype=observation_space.dtype)
        self.actions = np.zeros((buffer_size, *action_space.shape), dtype=action_space.dtype)
        self.rewards = np.zeros(buffer_size, dtype=np.float32)
        self.terminations = np.zeros(buffer_size, dtype=np.float32)
        self.pos = 0  # the next slot to write
        self.full = False  # whether the ring has wrapped, so every slot holds a transition

    def __len__(self) -> int:
        return self.buffer_size if self.full else self.pos

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminations: np.ndarray) -> None:
        """Store one step of every environment: arrays with a leading (num_envs,) axis."""
        n = len(obs)
        idx = (self.pos + np.arange(n)) % self.buffer_size
        self.observations[idx] = obs
        self.next_observations[idx] = next_obs
        self.actions[idx] = np.asarray(actions).reshape((n, *self.actions.shape[1:]))
        self.rewards[idx] = rewards
        self.terminations[idx] = terminations
        self.full = self.full or self.pos + n >= self.buffer_size
        self.pos = (self.pos + n) % self.buffer_size

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement, as tensors on the buffer's device."""
        idx = self.rng.integers(0, len(self), size=batch_size)

        def to_tensor(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(a[idx], device=self.device)

        return ReplayBufferSamples(
            to_tensor(self.observations),
            to_tensor(self.actions),
            to_tensor(self.next_observations),
            to_tensor(self.rewards),
            to_tensor(self.terminations),
        )


def true_next_obs(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The successor of every env's last observation under same-step autoreset.

    For an env whose episode ended (terminated or truncated) this step, `next_obs` is already the first
    observation of its next episode; its true successor is info["final_obs"], masked by "_final_obs".
    """
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs
# [/shared:replay-buffer]


class QNetwork(nn.Module):
    """Q(s, a) with the action in the env's own units, as stored in the replay memory."""

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + action_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x).squeeze(-1)  # (batch,)


class Actor(nn.Module):
    """Deterministic policy mu(s) = tanh(.) scaled into [low, high] of the action space."""

    def __init__(self, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray):
        super().__init__()
        action_dim = len(action_low)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mu = nn.Linear(256, action_dim)
        # Buffers, not attributes: they move with .to(device) and are saved in the state dict.
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return torch.tanh(self.fc_mu(x)) * self.action_scale + self.action_bias

    def deterministic_action(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)


# [shared:soft-update] source: cleanrl/ddpg_continuous_action.py
@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak averaging of the target network, theta' <- tau * theta + (1 - tau) * theta' (Lillicrap et al. 2016)."""
    for target_param, param in zip(target.parameters(), online.parameters()):
        target_param.lerp_(param, tau)  # lerp_: theta' + tau * (theta - theta')
# [/shared:soft-update]


# [shared:gaussian-exploration] source: cleanrl/ddpg_continuous_action.py
def exploration_actions(
    actions: torch.Tensor, noise: torch.Tensor, exploration_noise: float, actor: Actor
) -> torch.Tensor:
    """a = clip(mu(s) + exploration_noise * scale * noise, low, high), noise ~ N(0, I) (Fujimoto et al. 2018)."""
    low, high = actor.action_bias - actor.action_scale, actor.action_bias + actor.action_scale
    return torch.clamp(actions + exploration_noise * actor.action_scale * noise, low, high)
# [/shared:gaussian-exploration]


if __name__ == "__main__":
    args = tyro.cli(Args)
    # Everything that can be wrong with the input is checked before the run directory exists.
    num_iterations = check_args(args)
    probe = make_probe_env(args.env_id)
    check_spaces(args.env_id, probe.observation_space, probe.action_space, "ddpg_continuous_action.py")
    probe.close()
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    writer = start_logging(args, run_name)

    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cpu":
        # 256-unit MLPs on batches of 256 gain little from intra-op threads, and 2 threads stall when
        # the other core is busy.
        torch.set_num_threads(1)

    # env setup
    envs = make_envs(args.env_id, args.num_envs, args.capture_video, run_name)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(envs.single_action_space.shape))
    low, high = envs.single_action_space.low, envs.single_action_space.high

    actor = Actor(obs_dim, low, high).to(device)
    qf1 = QNetwork(obs_dim, action_dim).to(device)
    target_actor = Actor(obs_dim, low, high).to(device)
    qf1_target = QNetwork(obs_dim, action_dim).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    q_optimizer = optim.Adam(qf1.parameters(), lr=args.q_lr)
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr)

    # the memory stores float32 observations, the networks' dtype (MuJoCo envs emit float64)
    obs_space_f32 = gym.spaces.Box(-np.inf, np.inf, envs.single_observation_space.shape, np.float32)
    rb = ReplayBuffer(args.buffer_size, obs_space_f32, envs.single_action_space, device, args.seed)

    actor_loss = None  # set by the first delayed actor update
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)
    envs.action_space.seed(args.seed)
    for iteration in range(1, num_iterations + 1):
        global_step = iteration * args.num_envs
        # act: uniform random actions while the memory fills, then mu(s) plus Gaussian noise
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            with torch.no_grad():
                mu = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
                actions = exploration_actions(mu, torch.randn_like(mu), args.exploration_noise, actor).cpu().numpy()

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "episode" in infos:
            for i in np.nonzero(infos["_episode"])[0]:
                writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], global_step)
                writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], global_step)

        # store (obs, a, r, s', terminated): s' is the true successor (info["final_obs"] when the episode just
        # ended), and the done flag is `terminations` only, so time-limit truncations still bootstrap
        rb.add(obs, true_next_obs(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # learn: one gradient step per vector step once the warm-up is over
        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                next_q = qf1_target(data.next_observations, target_actor(data.next_observations))
                # y = r + gamma * Q'(s', mu'(s')), no bootstrap from a terminal state
                next_q_value = data.rewards + args.gamma * (1.0 - data.terminations) * next_q
            qf1_a_values = qf1(data.observations, data.actions)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)

            q_optimizer.zero_grad()
            qf1_loss.backward()
            q_optimizer.step()

            if iteration % args.policy_frequency == 0:
                # the critic only passes gradients through to the actor here: freezing its weights skips
                # their gradient matmuls (same result, the critic's grads are reset before its next step)
                qf1.requires_grad_(False)
                actor_loss = -qf1(data.observations, actor(data.observations)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                qf1.requires_grad_(True)

                soft_update(target_actor, actor, args.tau)
                soft_update(qf1_target, qf1, args.tau)

            # log every 100 vector steps: .item() forces a sync, and per-step scalars bloat the event file
            if iteration % 100 == 0:
                writer.add_scalar("losses/qf1_values", qf1_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                if actor_loss is not None:
                    writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
        torch.save({"actor": actor.state_dict(), "qf1": qf1.state_dict()}, model_path)
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(actor, args, run_name, device)
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f}")

    envs.close()
    writer.close()
