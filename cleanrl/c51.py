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

import glob
import json
import math
import os
import pickle
import random
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, NamedTuple, NoReturn, Optional

import cloudpickle
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
    # [shared:lifecycle-args] source: cleanrl/ppo.py
    checkpoint_frequency: int = 0
    """with --save-model, also checkpoint every this many updates (0: only at the end and on SIGINT/SIGTERM)"""
    resume: Optional[str] = None
    """continue a run from a checkpoint or run directory; `auto`: the newest run of this env/exp/seed, if any"""
    eval_only: Optional[str] = None
    """only evaluate a saved model (checkpoint, run directory or .cleanrl_model), print mean and std return"""
    progress: bool = True
    """draw a progress line (steps, SPS, recent return) on stderr when it is a terminal"""
    # [/shared:lifecycle-args]
    # [shared:speed-args] source: cleanrl/ppo.py
    compile: bool = False
    """if toggled, torch.compile the policy step and the update (same math, float rounding aside)"""
    cudagraphs: bool = False
    """if toggled, replay the policy step and the update as CUDA graphs (needs CUDA)"""
    # [/shared:speed-args]

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
    save_buffer: bool = False
    """with --save-model, also save the replay buffer in checkpoints so resume is exact"""


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


# [shared:lifecycle] source: cleanrl/ppo.py
# Saving, resuming, stopping and watching a run; docs/saving-resuming.md says what each piece guarantees.
# A checkpoint is one dict written by torch.save that loads with torch.load(weights_only=True): the entries
# made by checkpoint_common (script, args, run_name, iteration, global_step, finished, rng, envs) plus the
# script's own (networks, optimizers, normalization statistics, optionally a replay buffer, next_obs).
# --compile and --amp change speed (and float rounding) only. --cudagraphs is not among them: a resumed
# optimizer keeps the capturable setting it was saved with.
ALLOWED_ON_RESUME = ("resume", "checkpoint_frequency", "progress", "eval_episodes", "cuda", "track",
                     "wandb_project_name", "wandb_entity", "compile", "amp")


def checkpoint_path_of(path: str) -> str:
    """A checkpoint file, or a run directory's checkpoint.pt; a missing one fails in one line."""
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.isfile(path):
        fail(f"no checkpoint at {path}")
    return path


def load_checkpoint(path: str, script: str) -> dict:
    """Read a checkpoint on the CPU and check that this script wrote it."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        fail(f"cannot read checkpoint {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    found = checkpoint.get("script") if isinstance(checkpoint, dict) else None
    if found != script:
        fail(f"{path} is not a checkpoint of {script}" + (f" (it was written by {found})" if found else ""))
    return checkpoint


def find_resume_checkpoint(args) -> Optional[dict]:
    """The checkpoint --resume names, or None for a fresh run (no --resume, or `auto` without a run).

    `auto` looks only at the newest run directory of this env id, exp name and seed: an automatic restart
    (torchrun --max-restarts, a retried batch job) reruns the same command line and continues that run;
    if that run has finished, there is nothing to do and the process exits 0.
    """
    script = os.path.basename(__file__)
    if args.resume is None:
        return None
    if args.resume == "auto":
        # run names write "/" in env ids (ALE/Pong-v5) as "-"
        run_prefix = f"{args.env_id.replace('/', '-')}__{args.exp_name}__{args.seed}__"
        found = glob.glob(os.path.join("runs", f"{run_prefix}*", "checkpoint.pt"))
        if not found:
            return None
        newest = max(found, key=lambda p: int(os.path.basename(os.path.dirname(p)).rsplit("__", 1)[1]))
        checkpoint = load_checkpoint(newest, script)
        if checkpoint["finished"]:
            # a restart after the run ended (say, during the final evaluation) must not train it again
            print(f"{os.path.dirname(newest)} has already finished; nothing to resume")
            raise SystemExit(0)
        return checkpoint
    path = checkpoint_path_of(args.resume)
    checkpoint = load_checkpoint(path, script)
    if checkpoint["finished"]:
        fail(f"{path} is the end of a finished run (global step {checkpoint['global_step']}); nothing to resume")
    return checkpoint


def resumed_args(args_cls, checkpoint: dict):
    """The run's own flags from the checkpoint, with the flags given again on the command line on top.

    Only flags that leave the run's course unchanged (ALLOWED_ON_RESUME) may differ: another env id, seed,
    budget or learning rate would not continue the same run, so they fail in one line.
    """
    try:
        saved = args_cls(**checkpoint["args"])
    except TypeError as e:
        fail(f"the checkpoint's flags do not fit this script's: {e}")
    args = tyro.cli(args_cls, default=saved)
    changed = [k for k, v in asdict(args).items() if k not in ALLOWED_ON_RESUME and v != getattr(saved, k)]
    if changed:
        fail("cannot change " + ", ".join(f"--{k.replace('_', '-')} (the checkpoint has {getattr(saved, k)!r})"
                                          for k in changed) + " when resuming")
    return args


def reopen_logging(args, run_name: str, purge_step: int) -> SummaryWriter:
    """A resumed run logs on in its own TensorBoard directory. purge_step makes TensorBoard drop the events
    the interrupted process logged at steps >= purge_step (after its last checkpoint), so curves do not overlap.
    With --track the resumed process is a new W&B run of the same name."""
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
    return SummaryWriter(f"runs/{run_name}", purge_step=purge_step)


def rng_state() -> dict:
    """The global generators of python, numpy and torch (CPU and every visible GPU), as weights_only-safe types."""
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy_key": torch.as_tensor(np_state["state"]["key"].astype(np.int64)),
        "numpy_pos": int(np_state["state"]["pos"]),
        "numpy_gauss": (int(np_state["has_gauss"]), float(np_state["gauss"])),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state({
        "bit_generator": "MT19937",
        "state": {"key": state["numpy_key"].numpy().astype(np.uint32), "pos": state["numpy_pos"]},
        "has_gauss": state["numpy_gauss"][0],
        "gauss": state["numpy_gauss"][1],
    })
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def vector_layers(envs: gym.vector.VectorEnv) -> list:
    """The vector wrappers from the outside in, then the vector env itself."""
    layers = [envs]
    while isinstance(layers[-1], gym.vector.VectorWrapper):
        layers.append(layers[-1].env)
    return layers


def env_state(envs: gym.vector.VectorEnv) -> tuple[Optional[bytes], str]:
    """The vector env's whole state as one pickle, or (None, why not) when it cannot be captured faithfully.

    For a SyncVectorEnv of pure-Python environments (classic control), every layer's attributes are pickled
    except the env factories: the sub-envs with their wrappers (physical state, np_random generator,
    TimeLimit's elapsed steps), the vector env's action-space RNG, RecordEpisodeStatistics' running counters
    and any normalization statistics. Environments that pickle by re-construction (gymnasium's EzPickle:
    MuJoCo, Box2D, Atari) would come back freshly reset, so they are refused instead of restored wrongly.
    """
    layers = vector_layers(envs)
    if not isinstance(layers[-1], gym.vector.SyncVectorEnv):
        return None, f"{type(layers[-1]).__name__} is not a SyncVectorEnv"
    for sub_env in layers[-1].envs:
        if isinstance(sub_env.unwrapped, gym.utils.EzPickle):
            return None, f"{type(sub_env.unwrapped).__name__} pickles by re-construction, which loses its state"
    # cloudpickle (a dependency of gymnasium) also pickles the closures some wrappers hold, such as ClipReward's;
    # the result loads with plain pickle.
    try:
        state = [{k: v for k, v in vars(layer).items() if k not in ("env", "env_fns")} for layer in layers]
        return cloudpickle.dumps(state), ""
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        return None, f"pickling failed: {e}"


def load_env_state(envs: gym.vector.VectorEnv, state: bytes) -> None:
    """Put a saved env_state into envs built by the same code (same wrappers, same number of envs)."""
    layers = vector_layers(envs)
    if isinstance(layers[-1], gym.vector.SyncVectorEnv):
        for sub_env in layers[-1].envs:
            sub_env.close()
    for layer, saved in zip(layers, pickle.loads(state), strict=True):
        vars(layer).update(saved)


def checkpoint_common(args, run_name: str, iteration: int, global_step: int, finished: bool, envs) -> dict:
    """The entries every script's checkpoint has; the script adds its networks, optimizers and statistics."""
    return {
        "script": os.path.basename(__file__),
        "args": asdict(args),
        "run_name": run_name,
        "iteration": iteration,
        "global_step": global_step,
        "finished": finished,
        "rng": rng_state(),
        "envs": env_state(envs)[0],
    }


def save_checkpoint(checkpoint: dict, path: str) -> None:
    """Atomic write: the dict goes to path.tmp, is flushed to disk, then renamed over path (os.replace is atomic),
    so a kill at any moment leaves the previous checkpoint or the new one, never a torn file."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(checkpoint, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def find_non_finite(losses: dict, modules: dict) -> Optional[str]:
    """The first non-finite quantity, or None: a loss (a float already on the host for logging) or a parameter.

    Called once per update, never per step: all parameters are checked by one isfinite over their
    concatenation with one host sync; only when that fails are they searched one by one for the name.
    """
    for name, value in losses.items():
        if not math.isfinite(value):
            return f"{name} ({value})"
    params = [p.detach().reshape(-1) for module in modules.values() for p in module.parameters()]
    if bool(torch.isfinite(torch.cat(params)).all()):
        return None
    for module_name, module in modules.items():
        for name, p in module.named_parameters():
            if not bool(torch.isfinite(p).all()):
                return f"parameter {module_name}.{name}"
    return "a parameter"


class StopSignal:
    """SIGINT (Ctrl-C) and SIGTERM (docker stop, AWS Batch, a Spot reclaim) only set `received` here; the
    training loop reads it at its next safe point (the end of an update), saves a checkpoint and exits 0.
    A second signal stops at once with the default action."""

    def __init__(self):
        self.received: Optional[str] = None
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        self.received = signal.Signals(signum).name


class Progress:
    """One self-rewriting line on stderr: steps, SPS and the mean of the last 20 episodic returns. Drawn only
    on an interactive terminal and without --no-progress, at most 4 times a second, so it can be called every step."""

    def __init__(self, total_steps: int, disabled: bool):
        self.total_steps = total_steps
        self.enabled = not disabled and sys.stderr.isatty()
        self.returns = deque(maxlen=20)
        self.last_draw = 0.0

    def episode(self, episodic_return: float) -> None:
        self.returns.append(float(episodic_return))

    def update(self, global_step: int, sps: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last_draw < 0.25 and global_step < self.total_steps):
            return
        self.last_draw = now
        recent = f"{np.mean(self.returns):.1f}" if self.returns else "-"
        percent = 100 * global_step // self.total_steps
        sys.stderr.write(f"\r{global_step}/{self.total_steps} steps ({percent}%) | {sps} SPS | return {recent}  ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.last_draw:
            sys.stderr.write("\n")
            sys.stderr.flush()

def check_lifecycle_args(args) -> None:
    if args.checkpoint_frequency < 0:
        fail(f"--checkpoint-frequency must be at least 0, got {args.checkpoint_frequency}")
    if args.checkpoint_frequency > 0 and not args.save_model:
        fail("--checkpoint-frequency writes checkpoints, which needs --save-model")


def saved_model_path(path: str) -> str:
    """What --eval-only names: a file, or a run directory's checkpoint.pt, else its .cleanrl_model."""
    if os.path.isdir(path):
        candidates = [os.path.join(path, "checkpoint.pt")] + sorted(glob.glob(os.path.join(path, "*.cleanrl_model")))
        path = next((c for c in candidates if os.path.isfile(c)), candidates[0])
    if not os.path.isfile(path):
        fail(f"no saved model at {path}")
    return path
# [/shared:lifecycle]


# [shared:speed] source: cleanrl/ppo.py
def check_speed_args(args) -> None:
    on_cuda = args.cuda and torch.cuda.is_available()
    if args.cudagraphs and not on_cuda:
        fail("--cudagraphs needs a CUDA device, and this run has none (CUDA unavailable or --no-cuda)")
    if args.compile and not on_cuda:
        compiler = os.environ.get("CXX", "g++")
        if shutil.which(compiler) is None:
            fail(f"--compile on CPU needs a C++ compiler and {compiler} was not found; install one or drop --compile")


def speed_up(fn: Callable, args) -> Callable:
    """fn as it is, or wrapped for --compile (torch.compile) and --cudagraphs (CUDA graphs): the same math.

    fn returns a tensor or a tuple of tensors. The first calls of a wrapped fn compile or record it, so SPS
    starts its clock only after a warm-up.
    """
    if not (args.compile or args.cudagraphs):
        return fn
    if args.compile:
        # Random ops inside compiled code (action sampling) draw from torch's generator exactly as eager code
        # does, so with one seed a compiled run samples what the plain run samples (the parity tests rely on it).
        torch._inductor.config.fallback_random = True
        wrapped = torch.compile(fn, mode="reduce-overhead" if args.cudagraphs else None)
    else:
        wrapped = torch.compile(fn, backend="cudagraphs")
    if not args.cudagraphs:
        return wrapped

    def replay(*inputs):
        # A CUDA graph writes its outputs to the same memory at every replay: mark the new step, and hand out
        # copies, so outputs kept across calls (a minibatch's losses) are not overwritten by the next call.
        torch.compiler.cudagraph_mark_step_begin()
        out = wrapped(*inputs)
        return tuple(x.clone() for x in out) if isinstance(out, tuple) else out.clone()

    return replay
# [/shared:speed]


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


# [shared:classic-make-env] source: cleanrl/ppo.py
def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        return env

    return thunk
# [/shared:classic-make-env]


# [shared:value-based-make-envs] source: cleanrl/dqn.py
def make_envs(args: Args, run_name: str, capture_video: bool) -> gym.vector.VectorEnv:
    # Same-step autoreset: when an episode ends at step t, step t returns the first observation of the
    # next episode and puts the true last observation in info["final_obs"]. Every step is then a real
    # transition (no reset step to skip), and the replay memory stores final_obs as its next observation.
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)
# [/shared:value-based-make-envs]


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


def epsilon_greedy(greedy: np.ndarray, n_actions: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Per env: a uniformly random action with probability epsilon, else its greedy action argmax_a Q(s, a).

    The greedy actions come in computed (the policy step); the coin flips and random actions are drawn here
    from the numpy Generator, so compiled and plain runs explore alike.
    """
    n_envs = len(greedy)
    explore = rng.random(n_envs) < epsilon
    return np.where(explore, rng.integers(0, n_actions, size=n_envs), greedy)
# [/shared:value-based-helpers]


# [shared:value-based-lifecycle] source: cleanrl/dqn.py
def generator_state(rng: np.random.Generator) -> str:
    """A numpy Generator's state as JSON text: its 128-bit integers fit no tensor, and text loads with weights_only."""
    return json.dumps(rng.bit_generator.state)


def set_generator_state(rng: np.random.Generator, state: str) -> None:
    rng.bit_generator.state = json.loads(state)


def buffer_state(rb) -> dict:
    """The replay memory for --save-buffer: each of its numpy arrays as a tensor (the whole allocation, so the
    checkpoint is as large as the memory) and its integer bookkeeping (write position, whether it wrapped,
    per-env newest slot and frame counts). Its sampling Generator is saved on its own, with or without this."""
    state = {}
    for name, value in vars(rb).items():
        if isinstance(value, np.ndarray):
            state[name] = torch.from_numpy(value)
        elif isinstance(value, (bool, int, np.integer, np.bool_)):
            state[name] = bool(value) if isinstance(value, (bool, np.bool_)) else int(value)
    return state


def load_buffer_state(rb, state: dict) -> None:
    """Fill a replay memory built with the same flags from buffer_state's dict."""
    for name, value in state.items():
        current = getattr(rb, name)
        if isinstance(current, np.ndarray):
            if tuple(value.shape) != current.shape:
                fail(f"the checkpoint's replay memory {name} has shape {tuple(value.shape)}, not {current.shape}")
            current[...] = value.numpy()
        else:
            setattr(rb, name, value)
# [/shared:value-based-lifecycle]


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
    # v_min, v_max stay tensors (no .item()), so a compiled update traces this without a host sync
    v_min, v_max = atoms[0], atoms[-1]
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
        obs, _, _, _, infos = envs.step(epsilon_greedy(q_values.argmax(dim=1).cpu().numpy(), q_values.shape[1], epsilon, rng))
        if "episode" in infos:
            returns += [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    return returns[: args.eval_episodes]


def evaluate_saved(args: Args) -> list[float]:
    """--eval-only: evaluate a saved Q-network (epsilon 0.05, as after training) without creating a run directory.

    A checkpoint (or a run directory holding one) brings its own env id; a bare .cleanrl_model, which holds
    only the Q-network's state dict, is evaluated on --env-id.
    """
    path = saved_model_path(args.eval_only)
    if path.endswith(".cleanrl_model"):
        try:
            state_dict = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
            fail(f"cannot read model {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        checkpoint = load_checkpoint(path, os.path.basename(__file__))
        state_dict, name = checkpoint["q_network"], checkpoint["run_name"]
        args.env_id = checkpoint["args"]["env_id"]
    if args.eval_episodes < 1:
        fail(f"--eval-episodes must be at least 1, got {args.eval_episodes}")
    probe = make_probe_env(args.env_id)
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        fail(f"{args.env_id} has action space {probe.action_space}; c51.py supports Discrete actions only")
    if not isinstance(state_dict, dict) or "atoms" not in state_dict:
        fail(f"{path} does not hold a c51.py model")
    # the support comes with the model (the atoms are a buffer of the network)
    q_network = QNetwork(int(np.prod(probe.observation_space.shape)), int(probe.action_space.n), state_dict["atoms"])
    probe.close()
    try:
        q_network.load_state_dict(state_dict)
    except (RuntimeError, TypeError, AttributeError) as e:
        fail(f"{path} does not hold a c51.py model for {args.env_id}: {str(e).splitlines()[0]}")
    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    return evaluate(q_network.to(device), args, name, device)


if __name__ == "__main__":
    args = tyro.cli(Args)
    if args.eval_only is not None:
        episodic_returns = evaluate_saved(args)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f} "
              f"over {len(episodic_returns)} episodes of {args.env_id}")
        raise SystemExit(0)
    # Everything that can be wrong with the input is checked before the run directory exists.
    checkpoint = find_resume_checkpoint(args)
    if checkpoint is not None:
        args = resumed_args(Args, checkpoint)
    check_lifecycle_args(args)
    check_speed_args(args)
    check_off_policy_args(args)
    if args.n_atoms < 2 or not args.v_min < args.v_max:
        fail(f"the support needs --n-atoms >= 2 and --v-min < --v-max, got {args.n_atoms}, {args.v_min}, {args.v_max}")
    if args.save_buffer and not args.save_model:
        fail("--save-buffer puts the replay memory into checkpoints, which needs --save-model")
    probe = make_probe_env(args.env_id)
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        fail(f"{args.env_id} has action space {probe.action_space}; c51.py supports Discrete actions only")
    probe.close()
    if checkpoint is None:
        run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        writer = start_logging(args, run_name)
    else:
        # the same run: same directory, TensorBoard log continued after the checkpoint's step
        run_name = checkpoint["run_name"]
        writer = reopen_logging(args, run_name, purge_step=checkpoint["global_step"] + 1)
        print(f"resuming {run_name} after iteration {checkpoint['iteration']} "
              f"(global step {checkpoint['global_step']})")

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
    # capturable keeps Adam's step count on the device for CUDA graphs
    optimizer = optim.Adam(
        q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size, capturable=args.cudagraphs
    )
    target_network = QNetwork(obs_dim, n_actions, atoms).to(device)
    target_network.load_state_dict(q_network.state_dict())
    if args.save_model and env_state(envs)[0] is None:
        print(f"note: the environments' state cannot be saved ({env_state(envs)[1]}); "
              "a resumed run restarts its episodes")

    # storage
    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device, args.seed)
    action_rng = np.random.default_rng(args.seed)

    num_iterations = args.total_timesteps // args.num_envs
    exploration_steps = int(args.exploration_fraction * args.total_timesteps)
    if checkpoint is None:
        # updates: gradient steps so far (what --checkpoint-frequency counts)
        start_iteration, updates, target_updates, learning_starts = 1, 0, 0, args.learning_starts
        obs, _ = envs.reset(seed=args.seed)
        envs.action_space.seed(args.seed)
    else:
        # Checkpoints are taken between loop iterations (one env step of every env, and its learning).
        q_network.load_state_dict(checkpoint["q_network"])
        target_network.load_state_dict(checkpoint["target_network"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_iteration = checkpoint["iteration"] + 1
        updates, target_updates = checkpoint["updates"], checkpoint["target_updates"]
        set_generator_state(action_rng, checkpoint["action_rng"])
        set_generator_state(rb.rng, checkpoint["buffer_rng"])
        if checkpoint["replay_buffer"] is not None:
            load_buffer_state(rb, checkpoint["replay_buffer"])
            learning_starts = args.learning_starts
        else:
            # Without --save-buffer the memory starts empty: it refills for learning_starts steps before the
            # next gradient step (epsilon still follows the schedule of the whole run), so resume is not exact.
            learning_starts = checkpoint["global_step"] + args.learning_starts
            print(f"note: the checkpoint has no replay memory (no --save-buffer); learning resumes after "
                  f"global step {learning_starts}")
        if checkpoint["envs"] is not None:
            load_env_state(envs, checkpoint["envs"])
            obs = checkpoint["next_obs"].numpy()
        else:
            # The environments' state was not saved: episodes restart here, from reset seeds not used before.
            obs, _ = envs.reset(seed=args.seed + checkpoint["global_step"])
            envs.action_space.seed(args.seed + checkpoint["global_step"])
        # Last, so the generators continue exactly where the interrupted run left them.
        set_rng_state(checkpoint["rng"])
    global_step = (start_iteration - 1) * args.num_envs

    model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
    checkpoint_path = f"runs/{run_name}/checkpoint.pt"

    def make_checkpoint(iteration: int, finished: bool) -> dict:
        # Epsilon is a function of global_step, so the step is the schedule's whole state.
        return checkpoint_common(args, run_name, iteration, global_step, finished, envs) | {
            "q_network": q_network.state_dict(),
            "target_network": target_network.state_dict(),
            "optimizer": optimizer.state_dict(),
            "updates": updates,
            "target_updates": target_updates,
            "action_rng": generator_state(action_rng),
            "buffer_rng": generator_state(rb.rng),
            "replay_buffer": buffer_state(rb) if args.save_buffer else None,
            "next_obs": torch.as_tensor(obs),
        }

    def stop_if_non_finite(losses: dict) -> None:
        problem = find_non_finite(losses, {"q_network": q_network, "target_network": target_network})
        if problem is not None:
            progress.close()
            writer.close()
            fail(f"non-finite {problem} at global step {global_step} (gradient update {updates}); "
                 "stopped without saving, so the last good checkpoint is kept")

    def policy_step(obs: torch.Tensor) -> torch.Tensor:
        """The greedy action argmax_a Q(s, a) of every env (epsilon-greedy's coin flips are drawn outside, in numpy)."""
        with torch.no_grad():
            _, q_values = q_network(obs)
            return q_values.argmax(dim=1)

    def update(observations, actions, next_observations, rewards, terminations) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step on a sampled batch; returns the loss and the batch's mean Q(s, a), detached."""
        with torch.no_grad():
            # the target distribution: the target network's pmf of its greedy next action, projected
            next_pmfs, next_q = target_network(next_observations.float())
            next_pmfs = next_pmfs[torch.arange(args.batch_size, device=device), next_q.argmax(dim=1)]
            target_pmfs = categorical_projection(next_pmfs, rewards, terminations, args.gamma, target_network.atoms)
        pmfs, q_values = q_network(observations.float())
        batch_idx = torch.arange(args.batch_size, device=device)
        old_pmfs = pmfs[batch_idx, actions.long()]
        old_val = q_values[batch_idx, actions.long()]
        # cross-entropy between the projected target and the predicted distribution (Algorithm 1)
        loss = -(target_pmfs * torch.log(old_pmfs.clamp(min=1e-5, max=1 - 1e-5))).sum(dim=1).mean()

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), old_val.mean().detach()

    # --compile / --cudagraphs wrap exactly these two functions; without the flags they run as written.
    # (The target network's copy every target_network_frequency steps stays eager: it is rare and cheap.)
    policy_step, update = speed_up(policy_step, args), speed_up(update, args)

    stop = StopSignal()
    progress = Progress(num_iterations * args.num_envs, not args.progress)
    start_time, start_step, clock_restarted = time.time(), global_step, False
    loss = None
    for iteration in range(start_iteration, num_iterations + 1):
        # act: global_step counts the environment steps taken so far, this one included
        global_step = iteration * args.num_envs
        epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step - args.num_envs)
        greedy = policy_step(torch.as_tensor(obs, dtype=torch.float32, device=device))
        actions = epsilon_greedy(greedy.cpu().numpy(), n_actions, epsilon, action_rng)

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], global_step)
                writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], global_step)
                writer.add_scalar("charts/epsilon", epsilon, global_step)
                progress.episode(infos["episode"]["r"][i])

        # store: the successor of an ended episode is its final observation; only termination stops the
        # bootstrap, so a time-limit truncation (CartPole's 500 steps) is stored with terminated = 0.
        rb.add(obs, true_next_obs(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # learn
        updated = False
        if global_step > learning_starts:
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                loss, q_mean = update(
                    data.observations, data.actions, data.next_observations, data.rewards, data.terminations
                )
                updates, updated = updates + 1, True
                if not clock_restarted:
                    # SPS leaves out everything up to and including this process's first gradient update: a
                    # warm-up that holds --compile's compilation (or CUDA graph recording) and, on a fresh run,
                    # the learning_starts steps without updates. Only steps after it count, so no SPS is logged here.
                    start_time, start_step, clock_restarted = time.time(), global_step, True

                if global_step % 100 == 0:
                    # the losses come to the host here only, for logging and for the non-finite check
                    losses = {"losses/loss": loss.item(), "losses/q_values": q_mean.item()}
                    for key, value in losses.items():
                        writer.add_scalar(key, value, global_step)
                    if global_step > start_step:
                        sps = int((global_step - start_step) / max(time.time() - start_time, 1e-9))
                        writer.add_scalar("charts/SPS", sps, global_step)
                    stop_if_non_finite(losses)

            if global_step % args.target_network_frequency == 0:
                update_target(target_network, q_network, args.tau)
                target_updates += 1
                writer.add_scalar("charts/target_updates", target_updates, global_step)
        progress.update(global_step, int((global_step - start_step) / max(time.time() - start_time, 1e-9)))

        if iteration < num_iterations and args.save_model and (
            stop.received or (updated and args.checkpoint_frequency > 0 and updates % args.checkpoint_frequency == 0)
        ):
            # checked before every save, so a checkpoint never holds NaN or inf
            stop_if_non_finite({} if loss is None else {"losses/loss": loss.item()})
            save_checkpoint(make_checkpoint(iteration, finished=False), checkpoint_path)
        if iteration < num_iterations and stop.received:
            progress.close()
            saved = f"checkpoint saved to {checkpoint_path}" if args.save_model else "no --save-model, no checkpoint"
            print(f"{stop.received}: stopped after global step {global_step}; {saved}")
            envs.close()
            writer.close()
            raise SystemExit(0)
    progress.close()

    if args.save_model:
        stop_if_non_finite({} if loss is None else {"losses/loss": loss.item()})
        save_checkpoint(make_checkpoint(num_iterations, finished=True), checkpoint_path)
        torch.save(q_network.state_dict(), model_path)
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(q_network, args, run_name, device)
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f}")

    envs.close()
    writer.close()
