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
    env_id: str = "HalfCheetah-v5"
    """the id of the environment (its action space must be a bounded Box)"""
    total_timesteps: int = 1000000
    """total environment steps of the experiment"""
    policy_lr: float = 3e-4
    """the learning rate of the actor optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the critic optimizer (and of the entropy temperature with --autotune)"""
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
    learning_starts: int = 5000
    """environment steps of uniform random actions before learning starts"""
    policy_frequency: int = 2
    """every this many critic updates, the actor (and alpha) take this many steps (delayed, compensated)"""
    target_network_frequency: int = 1
    """the target critics are updated every this many critic updates"""
    alpha: float = 0.2
    """the entropy temperature alpha when --no-autotune; ignored with --autotune"""
    autotune: bool = True
    """if toggled, tune alpha automatically towards the target entropy -|A| (Haarnoja et al. 2018b)"""
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


# [shared:continuous-qnetwork] source: cleanrl/ddpg_continuous_action.py
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
# [/shared:continuous-qnetwork]


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """Gaussian policy over pre-squash actions u, a = tanh(u) scaled into [low, high] of the action space."""

    def __init__(self, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray):
        super().__init__()
        action_dim = len(action_low)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, action_dim)
        self.fc_logstd = nn.Linear(256, action_dim)
        # Buffers, not attributes: they move with .to(device) and are saved in the state dict.
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
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


# [shared:gradient-step] source: cleanrl/ddpg_continuous_action.py
@torch.compiler.disable
def gradient_step(optimizer: optim.Optimizer, loss: torch.Tensor) -> None:
    """One optimizer step on `loss`: zero_grad, backward, step.

    Kept out of --compile's graphs: torch.compile keys Adam.step's compiled code on the function and guards it on
    the optimizer object, so the second and third optimizers (critic, actor, temperature) would each recompile it.
    The backward pass of a compiled loss is still the compiled backward graph.
    """
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
# [/shared:gradient-step]


# [shared:soft-update] source: cleanrl/ddpg_continuous_action.py
@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak averaging of the target network, theta' <- tau * theta + (1 - tau) * theta' (Lillicrap et al. 2016)."""
    # lerp: theta' + tau * (theta - theta'), all parameters in one call (the same lerp as a loop of lerp_)
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
# [/shared:soft-update]


def evaluate_saved(args: Args) -> list[float]:
    """--eval-only: evaluate a saved actor (deterministic, as after training) without creating a run directory.

    A checkpoint (or a run directory holding one) brings its own env id; a bare .cleanrl_model (the actor's and
    critics' state dicts) is evaluated on --env-id.
    """
    path = saved_model_path(args.eval_only)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True) if path.endswith(".cleanrl_model") else None
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        fail(f"cannot read model {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if saved is not None:
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        saved = load_checkpoint(path, os.path.basename(__file__))
        name = saved["run_name"]
        args.env_id = saved["args"]["env_id"]
    if args.eval_episodes < 1:
        fail(f"--eval-episodes must be at least 1, got {args.eval_episodes}")
    probe = make_probe_env(args.env_id)
    check_spaces(args.env_id, probe.observation_space, probe.action_space, os.path.basename(__file__))
    space = probe.action_space
    actor = Actor(int(np.prod(probe.observation_space.shape)), space.low, space.high)
    probe.close()
    try:
        actor.load_state_dict(saved["actor"])
    except (RuntimeError, TypeError, AttributeError, KeyError) as e:
        fail(f"{path} does not hold a {os.path.basename(__file__)} actor for {args.env_id}: {str(e).splitlines()[0]}")
    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    return evaluate(actor.to(device), args, name, device)


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
    num_iterations = check_args(args)
    if args.save_buffer and not args.save_model:
        fail("--save-buffer puts the replay memory into checkpoints, which needs --save-model")
    if args.target_network_frequency < 1:
        fail(f"--target-network-frequency must be at least 1, got {args.target_network_frequency}")
    if not args.autotune and args.alpha < 0:
        fail(f"--alpha must be at least 0, got {args.alpha}")
    probe = make_probe_env(args.env_id)
    check_spaces(args.env_id, probe.observation_space, probe.action_space, "sac_continuous_action.py")
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
        # 256-unit MLPs on batches of 256 gain little from intra-op threads, and 2 threads stall when
        # the other core is busy.
        torch.set_num_threads(1)

    # env setup
    envs = make_envs(args.env_id, args.num_envs, args.capture_video, run_name)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(envs.single_action_space.shape))
    low, high = envs.single_action_space.low, envs.single_action_space.high
    if args.save_model and env_state(envs)[0] is None:
        print(f"note: the environments' state cannot be saved ({env_state(envs)[1]}); "
              "a resumed run restarts its episodes")

    actor = Actor(obs_dim, low, high).to(device)
    qf1 = QNetwork(obs_dim, action_dim).to(device)
    qf2 = QNetwork(obs_dim, action_dim).to(device)
    qf1_target = QNetwork(obs_dim, action_dim).to(device)
    qf2_target = QNetwork(obs_dim, action_dim).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    # capturable keeps Adam's step count on the device, which CUDA graphs (--cudagraphs) need
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr, capturable=args.cudagraphs)
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, capturable=args.cudagraphs)

    # entropy temperature: a tensor throughout, so reading it never forces a .item() in the loop; with --autotune it
    # is overwritten in place after every temperature step, so compiled code reads the current value
    if args.autotune:
        target_entropy = -float(action_dim)  # -|A|, Haarnoja et al. 2018b, Sec. 5
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().detach()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, capturable=args.cudagraphs)
    else:
        alpha = torch.tensor([args.alpha], device=device)

    # the memory stores float32 observations, the networks' dtype (MuJoCo envs emit float64)
    obs_space_f32 = gym.spaces.Box(-np.inf, np.inf, envs.single_observation_space.shape, np.float32)
    rb = ReplayBuffer(args.buffer_size, obs_space_f32, envs.single_action_space, device, args.seed)

    num_updates = 0  # gradient steps (critic updates) so far: what --checkpoint-frequency counts
    learning_starts = args.learning_starts
    if checkpoint is None:
        start_iteration = 1
        obs, _ = envs.reset(seed=args.seed)
        envs.action_space.seed(args.seed)
    else:
        # Checkpoints are taken between loop iterations (one env step of every env, and its gradient step).
        for module, key in ((actor, "actor"), (qf1, "qf1"), (qf2, "qf2"), (qf1_target, "qf1_target"),
                            (qf2_target, "qf2_target"), (q_optimizer, "q_optimizer"),
                            (actor_optimizer, "actor_optimizer")):
            module.load_state_dict(checkpoint[key])
        if args.autotune:
            with torch.no_grad():
                log_alpha.copy_(checkpoint["log_alpha"].to(device))
            a_optimizer.load_state_dict(checkpoint["a_optimizer"])
            alpha = log_alpha.exp().detach()
        start_iteration = checkpoint["iteration"] + 1
        num_updates = checkpoint["updates"]
        set_generator_state(rb.rng, checkpoint["buffer_rng"])
        if checkpoint["replay_buffer"] is not None:
            load_buffer_state(rb, checkpoint["replay_buffer"])
        else:
            # Without --save-buffer the memory starts empty: it refills for learning_starts steps (with actions of
            # the current policy) before the next gradient step, so resume is not exact.
            learning_starts = checkpoint["global_step"] + args.learning_starts
            print(f"note: the checkpoint has no replay memory (no --save-buffer); learning resumes after "
                  f"global step {learning_starts}")
        if checkpoint["envs"] is not None:
            load_env_state(envs, checkpoint["envs"])
            obs = checkpoint["next_obs"].numpy()
        else:
            # The environments' state was not saved (MuJoCo): episodes restart here, from reset seeds not used before.
            obs, _ = envs.reset(seed=args.seed + checkpoint["global_step"])
            envs.action_space.seed(args.seed + checkpoint["global_step"])
        # Last, so the generators continue exactly where the interrupted run left them.
        set_rng_state(checkpoint["rng"])
    global_step = (start_iteration - 1) * args.num_envs

    model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
    checkpoint_path = f"runs/{run_name}/checkpoint.pt"

    def make_checkpoint(iteration: int, finished: bool) -> dict:
        return checkpoint_common(args, run_name, iteration, global_step, finished, envs) | {
            "actor": actor.state_dict(),
            "qf1": qf1.state_dict(),
            "qf2": qf2.state_dict(),
            "qf1_target": qf1_target.state_dict(),
            "qf2_target": qf2_target.state_dict(),
            "q_optimizer": q_optimizer.state_dict(),
            "actor_optimizer": actor_optimizer.state_dict(),
            "log_alpha": log_alpha.detach().cpu() if args.autotune else None,
            "a_optimizer": a_optimizer.state_dict() if args.autotune else None,
            "updates": num_updates,
            "buffer_rng": generator_state(rb.rng),
            "replay_buffer": buffer_state(rb) if args.save_buffer else None,
            "next_obs": torch.as_tensor(obs),
        }

    def stop_if_non_finite(losses: dict) -> None:
        modules = {"actor": actor, "qf1": qf1, "qf2": qf2, "qf1_target": qf1_target, "qf2_target": qf2_target}
        if args.autotune:
            losses = losses | {"log_alpha": log_alpha.item()}
        problem = find_non_finite(losses, modules)
        if problem is not None:
            progress.close()
            writer.close()
            fail(f"non-finite {problem} at global step {global_step} (gradient update {num_updates}); "
                 "stopped without saving, so the last good checkpoint is kept")

    def last_losses() -> dict:
        return {} if qf_loss is None else {"losses/qf_loss": qf_loss.item()}

    def policy_step(obs: torch.Tensor) -> torch.Tensor:
        """A sample of the stochastic policy."""
        with torch.no_grad():
            actions, _ = actor.get_action(obs)
        return actions

    def update_critic(
        observations: torch.Tensor,
        actions: torch.Tensor,
        next_observations: torch.Tensor,
        rewards: torch.Tensor,
        terminations: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """One step of both critics on a sampled batch; returns their losses, the summed loss and the mean Q(s, a)
        of each critic, detached."""
        with torch.no_grad():
            next_actions, next_log_pi = actor.get_action(next_observations)
            # soft Bellman target with V(s') = min_i Q'_i(s', a') - alpha log pi(a'|s'), a' ~ pi(.|s') fresh
            # (Haarnoja et al. 2018, Sec. 4.2; clipped double Q from Fujimoto et al. 2018); no bootstrap
            # from a terminal state
            qf1_next = qf1_target(next_observations, next_actions)
            qf2_next = qf2_target(next_observations, next_actions)
            next_q = torch.min(qf1_next, qf2_next) - alpha * next_log_pi
            next_q_value = rewards + args.gamma * (1.0 - terminations) * next_q
        qf1_a_values = qf1(observations, actions)
        qf2_a_values = qf2(observations, actions)
        qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
        qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
        qf_loss = qf1_loss + qf2_loss
        gradient_step(q_optimizer, qf_loss)
        return (qf1_loss.detach(), qf2_loss.detach(), qf_loss.detach(), qf1_a_values.detach().mean(),
                qf2_a_values.detach().mean())

    def update_actor(observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One actor step; returns its loss and the log-probs of the actions it sampled, detached. The caller
        freezes the critics' weights around it."""
        pi, log_pi = actor.get_action(observations)
        min_qf_pi = torch.min(qf1(observations, pi), qf2(observations, pi))
        # reparameterized J_pi, Sec. 4.2, Haarnoja et al. 2018
        actor_loss = (alpha * log_pi - min_qf_pi).mean()
        gradient_step(actor_optimizer, actor_loss)
        return actor_loss.detach(), log_pi.detach()

    def update_alpha(log_pi: torch.Tensor) -> torch.Tensor:
        """One temperature step (--autotune); returns its loss, detached, and sets alpha to the new exp(log_alpha)."""
        # J(alpha) = E[-alpha (log pi + target_entropy)], Sec. 5, Haarnoja et al. 2018b, on the
        # log-probs of the actions just sampled (as the authors' code does; CleanRL samples again)
        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
        gradient_step(a_optimizer, alpha_loss)
        alpha.copy_(log_alpha.detach().exp())
        return alpha_loss.detach()

    # --compile / --cudagraphs wrap exactly these four functions; without the flags they run as written.
    policy_step, update_critic, update_actor, update_alpha = (
        speed_up(f, args) for f in (policy_step, update_critic, update_actor, update_alpha)
    )

    actor_loss = alpha_loss = qf_loss = None  # set by the first (delayed actor) update
    stop = StopSignal()
    progress = Progress(num_iterations * args.num_envs, not args.progress)
    start_time, start_step = time.time(), global_step
    warmed_up = False  # whether this process has done its first critic and actor updates (see charts/SPS below)
    for iteration in range(start_iteration, num_iterations + 1):
        global_step = iteration * args.num_envs
        # act: uniform random actions while the memory fills, then samples of the stochastic policy
        if global_step <= learning_starts:
            actions = envs.action_space.sample()
        else:
            actions = policy_step(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()

        # step
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "episode" in infos:
            for i in np.nonzero(infos["_episode"])[0]:
                writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], global_step)
                writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], global_step)
                progress.episode(infos["episode"]["r"][i])

        # store (obs, a, r, s', terminated): s' is the true successor (info["final_obs"] when the episode just
        # ended), and the done flag is `terminations` only, so time-limit truncations still bootstrap
        rb.add(obs, true_next_obs(next_obs, infos), actions, rewards, terminations)
        obs = next_obs

        # learn: one gradient step per vector step once the warm-up is over
        updated = False
        if global_step > learning_starts:
            data = rb.sample(args.batch_size)
            qf1_loss, qf2_loss, qf_loss, qf1_values, qf2_values = update_critic(
                data.observations, data.actions, data.next_observations, data.rewards, data.terminations
            )
            num_updates, updated = num_updates + 1, True

            # delayed policy updates as in TD3, compensated: policy_frequency actor steps every policy_frequency
            # critic steps, so actor and critic take the same number of gradient steps (as CleanRL does)
            if iteration % args.policy_frequency == 0:
                # the critics only pass gradients through to the actor here: freezing their weights skips
                # their gradient matmuls (same result, the critics' grads are reset before their next step)
                qf1.requires_grad_(False)
                qf2.requires_grad_(False)
                for _ in range(args.policy_frequency):
                    actor_loss, log_pi = update_actor(data.observations)
                    if args.autotune:
                        alpha_loss = update_alpha(log_pi)
                qf1.requires_grad_(True)
                qf2.requires_grad_(True)
                if not warmed_up:
                    # SPS leaves out everything up to here: the random warm-up and this process's first critic and
                    # actor updates, which hold --compile's compilation; it is logged once the clock has run.
                    start_time, start_step, warmed_up = time.time(), global_step, True

            if iteration % args.target_network_frequency == 0:
                soft_update(qf1_target, qf1, args.tau)
                soft_update(qf2_target, qf2, args.tau)

            # log every 100 vector steps: .item() forces a sync, and per-step scalars bloat the event file; the
            # losses come to the host here only, for logging and for the non-finite check
            if iteration % 100 == 0:
                losses = {
                    "losses/qf1_values": qf1_values.item(),
                    "losses/qf2_values": qf2_values.item(),
                    "losses/qf1_loss": qf1_loss.item(),
                    "losses/qf2_loss": qf2_loss.item(),
                    # CleanRL logs the mean of the two critic losses under this key
                    "losses/qf_loss": qf_loss.item() / 2.0,
                }
                if actor_loss is not None:
                    losses["losses/actor_loss"] = actor_loss.item()
                losses["losses/alpha"] = alpha.item()
                if alpha_loss is not None:
                    losses["losses/alpha_loss"] = alpha_loss.item()
                for key, value in losses.items():
                    writer.add_scalar(key, value, global_step)
                if warmed_up and global_step > start_step:
                    sps = int((global_step - start_step) / max(time.time() - start_time, 1e-9))
                    writer.add_scalar("charts/SPS", sps, global_step)
                stop_if_non_finite(losses)
        progress.update(global_step, int((global_step - start_step) / max(time.time() - start_time, 1e-9)))

        if iteration < num_iterations and args.save_model and (
            stop.received
            or (updated and args.checkpoint_frequency > 0 and num_updates % args.checkpoint_frequency == 0)
        ):
            # checked before every save, so a checkpoint never holds NaN or inf
            stop_if_non_finite(last_losses())
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
        stop_if_non_finite(last_losses())
        save_checkpoint(make_checkpoint(num_iterations, finished=True), checkpoint_path)
        torch.save({"actor": actor.state_dict(), "qf1": qf1.state_dict(), "qf2": qf2.state_dict()}, model_path)
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(actor, args, run_name, device)
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f}")

    envs.close()
    writer.close()
