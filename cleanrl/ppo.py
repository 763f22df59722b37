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

import glob
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
from typing import Callable, NoReturn, Optional

import cloudpickle
import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
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
    """total environment steps of the experiment"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """if toggled, the learning rate decays linearly to 0 over the run"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: int = 4
    """the number of minibatches per update epoch"""
    update_epochs: int = 4
    """the number of epochs over the rollout per update"""
    norm_adv: bool = True
    """if toggled, normalize advantages per minibatch"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the PPO paper's reference code"""
    ent_coef: float = 0.01
    """the coefficient of the entropy bonus"""
    vf_coef: float = 0.5
    """the coefficient of the value loss"""
    max_grad_norm: float = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: Optional[float] = None
    """if set, stop the update epochs early once the approximate KL exceeds it"""


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


# [shared:ppo-derive-sizes] source: cleanrl/ppo.py
def derive_sizes(args: Args) -> tuple[int, int, int]:
    """Batch sizes and iteration count follow from the flags; they are checked here, never set by hand."""
    for name in ("num_envs", "num_steps", "num_minibatches", "update_epochs", "total_timesteps"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        fail(
            f"the batch (--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}) "
            f"does not divide into --num-minibatches {args.num_minibatches}"
        )
    num_iterations = args.total_timesteps // batch_size
    if num_iterations < 1:
        fail(f"--total-timesteps {args.total_timesteps} is less than one batch ({batch_size} steps)")
    return batch_size, batch_size // args.num_minibatches, num_iterations
# [/shared:ppo-derive-sizes]


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


def make_envs(args: Args, run_name: str, capture_video: bool) -> gym.vector.VectorEnv:
    # Same-step autoreset: when an episode ends at step t, step t returns the first observation of the
    # next episode and puts the true last observation in info["final_obs"]. Every stored step is then a
    # real transition (no reset step to mask out), and truncated episodes can bootstrap from final_obs.
    # SyncVectorEnv: on small machines the inter-process traffic of AsyncVectorEnv costs more than
    # CartPole itself (measured 10x slower on 2 cores).
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, i, capture_video, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


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
        logits = self.actor(x)
        # No argument validation: it would stop a diverged run with a traceback inside the update, before
        # the once-per-update non-finite check can name the step and the quantity (and it costs time).
        probs = Categorical(logits=logits, validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)

    def act_greedy(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor(x).argmax(dim=-1)


# [shared:gae] source: cleanrl/ppo.py
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
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminations[t]) - values[t]
        lastgaelam = delta + gamma * gae_lambda * (1.0 - dones[t]) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values
# [/shared:gae]


def evaluate(agent: Agent, args: Args, run_name: str, device: torch.device) -> list[float]:
    """Run the greedy policy for args.eval_episodes full episodes on fresh environments."""
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, 0, args.capture_video, f"{run_name}-eval")],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    obs, _ = envs.reset(seed=args.seed + 10_000)
    returns = []
    while len(returns) < args.eval_episodes:
        with torch.no_grad():
            actions = agent.act_greedy(torch.as_tensor(obs, dtype=torch.float32, device=device))
        obs, _, _, _, infos = envs.step(actions.cpu().numpy())
        if "episode" in infos:
            returns += [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    return returns[: args.eval_episodes]


def evaluate_saved(args: Args) -> list[float]:
    """--eval-only: evaluate a saved model without creating a run directory.

    A checkpoint (or a run directory holding one) brings its own env id; a bare .cleanrl_model, which holds
    only the network's state dict, is evaluated on --env-id. Videos, with --capture-video, go to videos/{name}-eval.
    """
    path = saved_model_path(args.eval_only)
    if path.endswith(".cleanrl_model"):
        try:
            state_dict = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
            fail(f"cannot read model {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        checkpoint = load_checkpoint(path, "ppo.py")
        state_dict, name = checkpoint["agent"], checkpoint["run_name"]
        args.env_id = checkpoint["args"]["env_id"]
    if args.eval_episodes < 1:
        fail(f"--eval-episodes must be at least 1, got {args.eval_episodes}")
    probe = make_probe_env(args.env_id)
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        fail(f"{args.env_id} has action space {probe.action_space}; ppo.py supports Discrete actions only")
    agent = Agent(int(np.prod(probe.observation_space.shape)), int(probe.action_space.n))
    probe.close()
    try:
        agent.load_state_dict(state_dict)
    except (RuntimeError, TypeError, AttributeError) as e:
        fail(f"{path} does not hold a ppo.py model for {args.env_id}: {str(e).splitlines()[0]}")
    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    return evaluate(agent.to(device), args, name, device)


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
    batch_size, minibatch_size, num_iterations = derive_sizes(args)
    probe = make_probe_env(args.env_id)
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        fail(f"{args.env_id} has action space {probe.action_space}; ppo.py supports Discrete actions only")
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
        # A 64-unit MLP gains nothing from intra-op threads, and 2 threads stall when the other core is busy.
        torch.set_num_threads(1)

    # env setup
    envs = make_envs(args, run_name, args.capture_video)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n)).to(device)
    # The learning rate is a tensor updated in place, so a compiled update reads the annealed value instead of
    # recompiling for every new float. capturable (on CUDA) keeps Adam's step count on the device, which CUDA
    # graphs need, and keeps Adam's multi-tensor path, which torch turns off for a tensor learning rate otherwise.
    optimizer = optim.Adam(
        agent.parameters(), lr=torch.tensor(args.learning_rate, device=device), eps=1e-5,
        capturable=device.type == "cuda",
    )
    if args.save_model and env_state(envs)[0] is None:
        print(f"note: the environments' state cannot be saved ({env_state(envs)[1]}); "
              "a resumed run restarts its episodes")

    # storage: (num_steps, num_envs, ...)
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)
    final_values = torch.zeros((args.num_steps, args.num_envs), device=device)
    truncated = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    # What the envs return per step (numpy) is written to these host arrays and copied to the device buffers
    # above once per rollout, instead of four small tensor conversions at every step.
    rewards_np = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    terminations_np = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_np = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    truncated_np = np.zeros((args.num_steps, args.num_envs), dtype=bool)

    if checkpoint is None:
        start_iteration, global_step = 1, 0
        next_obs, _ = envs.reset(seed=args.seed)
        envs.action_space.seed(args.seed)
    else:
        # Checkpoints are taken between iterations, so nothing of a half-collected rollout needs saving.
        agent.load_state_dict(checkpoint["agent"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        # load_state_dict puts the saved learning rate in the group (a CPU tensor, or a float in checkpoints
        # written before --compile existed); it must be a tensor on the device, filled in place below.
        optimizer.param_groups[0]["lr"] = torch.as_tensor(optimizer.param_groups[0]["lr"], device=device)
        start_iteration, global_step = checkpoint["iteration"] + 1, checkpoint["global_step"]
        if checkpoint["envs"] is not None:
            load_env_state(envs, checkpoint["envs"])
            next_obs = checkpoint["next_obs"].numpy()
        else:
            # The environments' state was not saved: episodes restart here, from reset seeds not used before.
            next_obs, _ = envs.reset(seed=args.seed + global_step)
            envs.action_space.seed(args.seed + global_step)
        # Last, so the generators continue exactly where the interrupted run left them.
        set_rng_state(checkpoint["rng"])
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)

    model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
    checkpoint_path = f"runs/{run_name}/checkpoint.pt"

    def make_checkpoint(iteration: int, finished: bool) -> dict:
        # The learning-rate schedule is a function of the iteration, so the iteration is its whole state.
        return checkpoint_common(args, run_name, iteration, global_step, finished, envs) | {
            "agent": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "next_obs": next_obs.cpu(),
        }

    def policy_step(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(obs)
        return action, logprob, value

    def update(mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values) -> tuple[torch.Tensor, ...]:
        """One gradient step on one minibatch; returns the losses and diagnostics, detached."""
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb_obs, mb_actions.long())
        # [shared:ppo-loss] source: cleanrl/ppo.py
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

        newvalue = newvalue.view(-1)
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb_returns) ** 2
            v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb_returns) ** 2
            v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
        else:
            v_loss = 0.5 * ((newvalue - mb_returns) ** 2).mean()

        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef  # Eq. (9)

        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        return pg_loss.detach(), v_loss.detach(), entropy_loss.detach(), old_approx_kl, approx_kl, clipfrac
        # [/shared:ppo-loss]

    # --compile / --cudagraphs wrap exactly these two functions; without the flags they run as written.
    policy_step, update = speed_up(policy_step, args), speed_up(update, args)

    stop = StopSignal()
    progress = Progress(num_iterations * batch_size, not args.progress)
    start_time, start_step = time.time(), global_step
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

            next_obs_np, reward, term, trunc, infos = envs.step(action.cpu().numpy())
            rewards_np[step] = reward  # float64 -> float32, rounded as torch.as_tensor(..., dtype=float32) would
            terminations_np[step] = term
            dones_np[step] = np.logical_or(term, trunc)
            next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)
            # A truncated (time-limit) episode did not end in a terminal state: its last transition
            # bootstraps from the value of the true final observation, which same-step autoreset keeps
            # in info["final_obs"]. Only truncated envs need this extra forward pass, and it is rare.
            only_trunc = np.logical_and(trunc, np.logical_not(term))
            truncated_np[step] = only_trunc
            if only_trunc.any():
                final_obs = np.stack(infos["final_obs"][only_trunc])
                with torch.no_grad():
                    final_values[step, torch.as_tensor(only_trunc, device=device)] = agent.get_value(
                        torch.as_tensor(final_obs, dtype=torch.float32, device=device)
                    ).flatten()

            if "episode" in infos:
                for i in np.nonzero(infos["_episode"])[0]:
                    writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], global_step)
                    writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], global_step)
                    progress.episode(infos["episode"]["r"][i])

        for buffer, staged in ((rewards, rewards_np), (terminations, terminations_np), (dones, dones_np),
                               (truncated, truncated_np)):
            buffer.copy_(torch.from_numpy(staged))

        # advantages: the successor of step t is stored at t+1, except after the last step and at truncations
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            next_values = torch.cat([values[1:], next_value], dim=0)
            next_values = torch.where(truncated, final_values, next_values)
            advantages, returns = compute_gae(
                rewards, values, next_values, terminations, dones, args.gamma, args.gae_lambda
            )

        # flatten the batch: (num_steps * num_envs, ...)
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # optimize the policy and value network
        b_inds = np.arange(batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]

                pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = update(
                    b_obs[mb_inds], b_actions[mb_inds], b_logprobs[mb_inds], b_advantages[mb_inds],
                    b_returns[mb_inds], b_values[mb_inds],
                )
                clipfracs.append(clipfrac)

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
        if iteration == start_iteration:
            # SPS leaves out the first iteration: a warm-up that holds --compile's compilation (or CUDA graph
            # recording), which would otherwise dominate short runs; it logs no SPS.
            start_time, start_step = time.time(), global_step
        sps = int((global_step - start_step) / max(time.time() - start_time, 1e-9))
        if global_step > start_step:
            writer.add_scalar("charts/SPS", sps, global_step)
        progress.update(global_step, sps)

        # Checked before any save, so a checkpoint never holds NaN or inf. (The explained variance is left
        # out: it is legitimately NaN when the returns have zero variance.)
        problem = find_non_finite(losses, {"agent": agent})
        if problem is not None:
            progress.close()
            writer.close()
            fail(f"non-finite {problem} at global step {global_step} (iteration {iteration}); "
                 "stopped without saving, so the last good checkpoint is kept")
        if iteration < num_iterations and args.save_model and (
            stop.received or (args.checkpoint_frequency > 0 and iteration % args.checkpoint_frequency == 0)
        ):
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
        save_checkpoint(make_checkpoint(num_iterations, finished=True), checkpoint_path)
        torch.save(agent.state_dict(), model_path)
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(agent, args, run_name, device)
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f}")

    envs.close()
    writer.close()
