# docs: docs/rl-algorithms/c51.md
"""C51 (categorical DQN) for discrete actions on classic control (default CartPole-v1).

Bellemare, Dabney and Munos 2017, "A Distributional Perspective on Reinforcement Learning",
https://arxiv.org/abs/1707.06887: the return distribution of each action is a categorical distribution on
n_atoms fixed atoms in [v_min, v_max], learned by projecting the Bellman target onto the atoms.

Run:
    python cleanrl/c51.py --env-id CartPole-v1
    python cleanrl/c51.py --env-id Acrobot-v1 --seed 2 --track
    python cleanrl/c51.py --help
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
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    total_timesteps: int = 500000
    """total environment steps of the experiment (summed over all environments)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer (Adam with eps = 0.01 / batch_size, as in the paper)"""
    num_envs: int = 1
    """the number of parallel environments"""
    n_atoms: int = 101
    """the number of atoms of the return distribution's support"""
    v_min: float = -100
    """the return of the lowest atom"""
    v_max: float = 100
    """the return of the highest atom"""
    buffer_size: int = 10000
    """the replay memory holds the most recent buffer_size transitions"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate: 1.0 copies the Q-network, below 1 is a Polyak average"""
    target_network_frequency: int = 500
    """the number of environment steps between target network updates"""
    batch_size: int = 128
    """the number of transitions sampled from the replay memory per gradient step"""
    start_e: float = 1.0
    """the starting epsilon of the epsilon-greedy exploration"""
    end_e: float = 0.05
    """the final epsilon, reached after exploration_fraction * total_timesteps steps"""
    exploration_fraction: float = 0.5
    """the fraction of total_timesteps over which epsilon decays linearly from start_e to end_e"""
    learning_starts: int = 10000
    """the number of environment steps collected before learning starts"""
    train_frequency: int = 10
    """the number of environment steps between gradient steps"""


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


# [shared:off-policy-checks] source: cleanrl/dqn.py
def check_off_policy_args(args) -> None:
    """The step counts of an off-policy run, checked before the run directory exists.

    Steps are counted over all environments; one loop iteration takes num_envs steps, so the periodic
    events (gradient step, target update) must fall on iteration boundaries to happen when the flags say.
    """
    for name in ("num_envs", "total_timesteps", "buffer_size", "batch_size", "train_frequency", "target_network_frequency"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 <= args.learning_starts < args.total_timesteps:
        fail(f"--learning-starts {args.learning_starts} must be in [0, --total-timesteps {args.total_timesteps})")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    for name in ("train_frequency", "target_network_frequency"):
        if getattr(args, name) % args.num_envs != 0:
            fail(f"--{name.replace('_', '-')} {getattr(args, name)} is not a multiple of --num-envs {args.num_envs}")
    if args.buffer_size < args.num_envs:
        fail(f"--buffer-size {args.buffer_size} is smaller than one step of --num-envs {args.num_envs}")
# [/shared:off-policy-checks]


def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        return env

    return thunk


def make_envs(args: Args, run_name: str, capture_video: bool) -> gym.vector.VectorEnv:
    # Same-step autoreset: when an episode ends at step t, step t returns the first observation of the
    # next episode and puts the true last observation in info["final_obs"]. Every step is then a real
    # transition (no reset step to skip), and the replay memory stores final_obs as its next observation.
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


class QNetwork(nn.Module):
    """An MLP that outputs, for every action, a probability mass function over the fixed atoms."""

    def __init__(self, obs_dim: int, n_actions: int, atoms: torch.Tensor):
        super().__init__()
        self.register_buffer("atoms", atoms)
        self.n_actions, self.n_atoms = n_actions, len(atoms)
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, n_actions * self.n_atoms),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (pmfs (batch, n_actions, n_atoms), q_values (batch, n_actions) = sum_i z_i p_i)."""
        logits = self.network(x).view(len(x), self.n_actions, self.n_atoms)
        pmfs = torch.softmax(logits, dim=2)
        return pmfs, (pmfs * self.atoms).sum(dim=2)


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


# [shared:value-based-helpers] source: cleanrl/dqn.py
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


def epsilon_greedy(q_values: torch.Tensor, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Per env: a uniformly random action with probability epsilon, else argmax_a Q(s, a)."""
    greedy = q_values.argmax(dim=1).cpu().numpy()
    n_envs, n_actions = q_values.shape
    explore = rng.random(n_envs) < epsilon
    return np.where(explore, rng.integers(0, n_actions, size=n_envs), greedy)
# [/shared:value-based-helpers]


# [shared:categorical-projection] source: cleanrl/c51.py
def categorical_projection(
    next_pmfs: torch.Tensor, rewards: torch.Tensor, terminations: torch.Tensor, gamma: float, atoms: torch.Tensor
) -> torch.Tensor:
    """Project the distribution of r + gamma * Z(s', a*) onto the fixed atoms (Bellemare et al. 2017, Algorithm 1).

    next_pmfs (batch, n_atoms) is the target network's distribution for the greedy next action a*.
    Each atom z_j moves to Tz_j = r + gamma * z_j (just r when s' is terminal), clipped to [v_min, v_max];
    its mass p_j is split between the two neighbouring atoms l = floor(b_j), u = ceil(b_j) of
    b_j = (Tz_j - v_min) / delta_z in proportion to closeness: m_l += p_j (u - b_j), m_u += p_j (b_j - l).
    When b_j falls exactly on an atom (l = u), all of p_j goes to it. Returns m (batch, n_atoms), summing to 1.
    """
    v_min, v_max = atoms[0].item(), atoms[-1].item()
    delta_z = (v_max - v_min) / (len(atoms) - 1)
    tz = (rewards.unsqueeze(1) + gamma * atoms.unsqueeze(0) * (1.0 - terminations.unsqueeze(1))).clamp(v_min, v_max)
    b = (tz - v_min) / delta_z  # (batch, n_atoms), in [0, n_atoms - 1]
    lower, upper = b.floor(), b.ceil()
    m_lower = (upper - b + (lower == upper).float()) * next_pmfs
    m_upper = (b - lower) * next_pmfs
    target = torch.zeros_like(next_pmfs)
    target.scatter_add_(1, lower.long(), m_lower)
    target.scatter_add_(1, upper.long(), m_upper)
    return target
# [/shared:categorical-projection]


def evaluate(q_network: QNetwork, args: Args, run_name: str, device: torch.device, epsilon: float = 0.05) -> list[float]:
    """Run the epsilon-greedy policy (epsilon 0.05, as CleanRL evaluates C51) for args.eval_episodes episodes."""
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, 0, args.capture_video, f"{run_name}-eval")],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    rng = np.random.default_rng(args.seed + 10_000)
    obs, _ = envs.reset(seed=args.seed + 10_000)
    returns = []
    while len(returns) < args.eval_episodes:
        with torch.no_grad():
            _, q_values = q_network(torch.as_tensor(obs, dtype=torch.float32, device=device))
        obs, _, _, _, infos = envs.step(epsilon_greedy(q_values, epsilon, rng))
        if "episode" in infos:
            returns += [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    return returns[: args.eval_episodes]


if __name__ == "__main__":
    args = tyro.cli(Args)
    # Everything that can be wrong with the input is checked before the run directory exists.
    check_off_policy_args(args)
    if args.n_atoms < 2 or not args.v_min < args.v_max:
        fail(f"the support needs --n-atoms >= 2 and --v-min < --v-max, got {args.n_atoms}, {args.v_min}, {args.v_max}")
    probe = make_probe_env(args.env_id)
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        fail(f"{args.env_id} has action space {probe.action_space}; c51.py supports Discrete actions only")
    probe.close()
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    writer = start_logging(args, run_name)

    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cpu":
        # A small MLP gains nothing from intra-op threads, and 2 threads stall when the other core is busy.
        torch.set_num_threads(1)

    # env setup
    envs = make_envs(args, run_name, args.capture_video)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    n_actions = int(envs.single_action_space.n)
    atoms = torch.linspace(args.v_min, args.v_max, steps=args.n_atoms)
    q_network = QNetwork(obs_dim, n_actions, atoms).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size)
    target_network = QNetwork(obs_dim, n_actions, atoms).to(device)
    target_network.load_state_dict(q_network.state_dict())

    # storage
    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device, args.seed)
    action_rng = np.random.default_rng(args.seed)

    num_iterations = args.total_timesteps // args.num_envs
    exploration_steps = int(args.exploration_fraction * args.total_timesteps)
    target_updates = 0
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)
    for iteration in range(1, num_iterations + 1):
        # act: global_step counts the environment steps taken so far, this one included
        global_step = iteration * args.num_envs
        epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step - args.num_envs)
        with torch.no_grad():
            _, q_values = q_network(torch.as_tensor(obs, dtype=torch.float32, device=device))
        actions = epsilon_greedy(q_values, epsilon, action_rng)

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], global_step)
                writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], global_step)
                writer.add_scalar("charts/epsilon", epsilon, global_step)

        # store: the successor of an ended episode is its final observation; only termination stops the
        # bootstrap, so a time-limit truncation (CartPole's 500 steps) is stored with terminated = 0.
        rb.add(obs, true_next_obs(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # learn
        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    # the target distribution: the target network's pmf of its greedy next action, projected
                    next_pmfs, next_q = target_network(data.next_observations.float())
                    next_pmfs = next_pmfs[torch.arange(args.batch_size, device=device), next_q.argmax(dim=1)]
                    target_pmfs = categorical_projection(
                        next_pmfs, data.rewards, data.terminations, args.gamma, target_network.atoms
                    )
                pmfs, q_values = q_network(data.observations.float())
                batch_idx = torch.arange(args.batch_size, device=device)
                old_pmfs = pmfs[batch_idx, data.actions.long()]
                old_val = q_values[batch_idx, data.actions.long()]
                # cross-entropy between the projected target and the predicted distribution (Algorithm 1)
                loss = -(target_pmfs * torch.log(old_pmfs.clamp(min=1e-5, max=1 - 1e-5))).sum(dim=1).mean()

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

                if global_step % 100 == 0:
                    writer.add_scalar("losses/loss", loss.item(), global_step)
                    writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                    sps = int(global_step / (time.time() - start_time))
                    writer.add_scalar("charts/SPS", sps, global_step)

            if global_step % args.target_network_frequency == 0:
                update_target(target_network, q_network, args.tau)
                target_updates += 1
                writer.add_scalar("charts/target_updates", target_updates, global_step)

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
        torch.save(q_network.state_dict(), model_path)
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(q_network, args, run_name, device)
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f}")

    envs.close()
    writer.close()
