# docs: docs/rl-algorithms/ppg.md
"""PPG (Phasic Policy Gradient) on Procgen through envpool (default starpilot, easy distribution).

Phasic Policy Gradient, Cobbe et al. 2021, https://arxiv.org/abs/2009.04416: separate policy and value
networks; a policy phase of N_pi PPO iterations, then an auxiliary phase of E_aux epochs that distills
the value function into the policy network (auxiliary value head) under a behavior-cloning KL penalty,
over every observation the policy phase collected. Procgen (Cobbe et al. 2020) comes from envpool,
which needs Debian's Qt 5 runtime (`apt-get install libqt5gui5`).

Run:
    python cleanrl/ppg_procgen.py --env-id starpilot
    python cleanrl/ppg_procgen.py --env-id bigfish --distribution-mode hard --seed 2 --track
    python cleanrl/ppg_procgen.py --env-id BossfightEasy-v0
    python cleanrl/ppg_procgen.py --env-id starpilot --compile --amp
    python cleanrl/ppg_procgen.py --help
"""

import dataclasses
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
from typing import Callable, Literal, NoReturn, Optional

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
    amp: bool = False
    """if toggled, run the networks' forward passes under bf16 autocast (pays on CUDA GPUs; slow on most CPUs)"""

    # Algorithm specific arguments
    env_id: str = "starpilot"
    """the Procgen game (`starpilot`, `bigfish`, ...; combined with --distribution-mode) or an envpool id
    such as `StarpilotEasy-v0` (which names its own distribution; --distribution-mode is then ignored)"""
    distribution_mode: Literal["easy", "hard", "extreme", "memory", "exploration"] = "easy"
    """the Procgen level distribution used with a plain game name"""
    total_timesteps: int = 25_000_000
    """total environment steps of the experiment (only whole phases of N_pi iterations are run)"""
    learning_rate: float = 5e-4
    """the learning rate of the Adam optimizer (both phases, both networks)"""
    num_envs: int = 64
    """the number of parallel environments"""
    num_steps: int = 256
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """if toggled, the learning rate decays linearly to 0 over the run"""
    gamma: float = 0.999
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: int = 8
    """the number of minibatches per policy-phase epoch"""
    adv_norm_fullbatch: bool = True
    """if toggled, normalize advantages over the whole batch (as the PPG code does); otherwise per minibatch"""
    norm_reward: bool = True
    """if toggled, divide rewards by the running std of the discounted return and clip them to [-10, 10]
    (the PPG code's reward normalization); episode statistics always report the raw game reward"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """if toggled, clip the policy-phase value loss as in the PPO paper's reference code"""
    ent_coef: float = 0.01
    """the coefficient of the entropy bonus (beta_S in the paper)"""
    vf_coef: float = 0.5
    """the coefficient of the policy-phase value loss"""
    max_grad_norm: float = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: Optional[float] = None
    """if set, stop the policy-phase epochs of an iteration early once the approximate KL exceeds it"""

    # PPG specific arguments
    n_iteration: int = 32
    """N_pi: the number of PPO iterations (rollout + update) in each policy phase"""
    e_policy: int = 1
    """E_pi: the number of epochs of policy (clipped surrogate + entropy) updates per iteration"""
    v_value: int = 1
    """E_V: the number of epochs of value-network updates per iteration"""
    e_auxiliary: int = 6
    """E_aux: the number of epochs over the auxiliary buffer in each auxiliary phase"""
    beta_clone: float = 1.0
    """beta_clone: the weight of the behavior-cloning KL term in the auxiliary phase's joint loss"""
    num_aux_rollouts: int = 4
    """the number of whole rollouts (num_steps observations of one env) in each auxiliary minibatch"""
    n_aux_grad_accum: int = 1
    """the number of chunks each auxiliary minibatch is split into, accumulating their gradients before one
    optimizer step (less memory, same update)"""


PROCGEN_GAMES = (
    "bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
    "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot",
)  # fmt: skip


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


def procgen_import_problem(exc: ImportError) -> str:
    """The one-line reason why envpool's Procgen cannot be used, naming what to install."""
    chain, e = [], exc
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    text = " ".join(chain)
    if "Qt" in text or "libQt5" in text:
        return (
            "envpool's Procgen needs the Qt 5 runtime, which is missing: install Debian's libqt5gui5 "
            f"(apt-get install libqt5gui5) ({chain[-1]})"
        )
    return f"ppg_procgen.py needs envpool (pip install 'envpool>=0.8') and Debian's libqt5gui5: {chain[0]}"


def load_envpool():
    """Import envpool and its Procgen extension, or stop in one line saying what is missing."""
    try:
        import envpool
        import envpool.procgen

        envpool.procgen.ProcgenEnvSpec  # noqa: B018 (envpool defers the Qt ImportError to this attribute)
    except ImportError as e:
        fail(procgen_import_problem(e))
    return envpool


def resolve_env_id(env_id: str, distribution_mode: str, known_ids: list[str]) -> str:
    """Map a CleanRL-style game name plus distribution to envpool's id (`starpilot`, easy -> StarpilotEasy-v0);
    an envpool Procgen id passes through unchanged."""
    if env_id.lower() in PROCGEN_GAMES:
        resolved = f"{env_id.lower().capitalize()}{distribution_mode.capitalize()}-v0"
        if resolved not in known_ids:
            game = env_id.lower()
            modes = sorted(i[len(game) : -len("-v0")].lower() for i in known_ids if i.lower().startswith(game))
            fail(f"{env_id} has no {distribution_mode!r} distribution (it has: {', '.join(modes)})")
        return resolved
    modes = ("Easy", "Hard", "Extreme", "Memory", "Exploration")
    procgen_ids = {f"{g.capitalize()}{m}-v0" for g in PROCGEN_GAMES for m in modes} & set(known_ids)
    if env_id in procgen_ids:
        return env_id
    games = ", ".join(PROCGEN_GAMES)
    fail(f"unknown Procgen game {env_id!r}; use one of {games} or an envpool id like StarpilotEasy-v0")


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


def derive_sizes(args: Args) -> tuple[int, int, int, int]:
    """Batch sizes and phase count follow from the flags; they are checked here, never set by hand.
    Returns (batch_size, minibatch_size, num_phases, aux_minibatches_per_epoch)."""
    for name in (
        "num_envs", "num_steps", "num_minibatches", "total_timesteps", "n_iteration", "e_policy", "v_value",
        "e_auxiliary", "num_aux_rollouts", "n_aux_grad_accum", "eval_episodes",
    ):  # fmt: skip
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        fail(
            f"the batch (--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}) "
            f"does not divide into --num-minibatches {args.num_minibatches}"
        )
    aux_rollouts = args.n_iteration * args.num_envs
    if aux_rollouts % args.num_aux_rollouts != 0:
        fail(
            f"the auxiliary buffer's {aux_rollouts} rollouts (--n-iteration {args.n_iteration} x --num-envs "
            f"{args.num_envs}) do not divide into minibatches of --num-aux-rollouts {args.num_aux_rollouts}"
        )
    if args.num_aux_rollouts % args.n_aux_grad_accum != 0:
        fail(
            f"--num-aux-rollouts {args.num_aux_rollouts} does not divide into "
            f"--n-aux-grad-accum {args.n_aux_grad_accum}"
        )
    num_phases = args.total_timesteps // (batch_size * args.n_iteration)
    if num_phases < 1:
        fail(
            f"--total-timesteps {args.total_timesteps} is less than one phase "
            f"(--n-iteration {args.n_iteration} x {batch_size} steps = {args.n_iteration * batch_size})"
        )
    return batch_size, batch_size // args.num_minibatches, num_phases, aux_rollouts // args.num_aux_rollouts


def aux_buffer_bytes(n_iteration: int, num_envs: int, num_steps: int, obs_shape: tuple, n_actions: int) -> int:
    """Bytes held by the auxiliary buffer: uint8 observations, float32 returns and old logits, bool mask."""
    n = n_iteration * num_envs * num_steps
    return n * (int(np.prod(obs_shape)) + 4 + 4 * n_actions + 1)


def make_envs(envpool, env_id: str, num_envs: int, seed: int) -> gym.vector.VectorEnv:
    # envpool's Procgen is a gymnasium VectorEnv with NEXT_STEP autoreset and no same-step mode. Procgen
    # itself starts the next level inside the step that ends an episode, so that step's observation is
    # already a new level's frame and the true final observation is lost; envpool then spends the
    # following step on a reset (action ignored, reward 0, elapsed_step 0, obs = first frame of the
    # episode actually played). Those reset steps are masked out of learning (see `valid` below).
    # Procgen's own time limit (e.g. 1000 steps in starpilot) is reported as truncation, but with no
    # final observation to bootstrap from it is treated as termination, as in the Procgen and PPG papers.
    # RecordEpisodeStatistics understands NEXT_STEP: it counts no reward and no length on the reset steps.
    envs = envpool.make_gymnasium(env_id, num_envs=num_envs, seed=seed, num_levels=0, start_level=0)
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


class VideoRecorder:
    """Writes the first env's episodes to videos/{run_name} (on the capped cubic schedule of gymnasium's
    RecordVideo), from the 64x64 RGB observations themselves: envpool's vector env has no video wrapper."""

    def __init__(self, folder: str, name_prefix: str = "rl-video"):
        from gymnasium.utils.save_video import capped_cubic_video_schedule, save_video

        self.folder, self.save, self.trigger = folder, save_video, capped_cubic_video_schedule
        self.name_prefix, self.frames, self.episode = name_prefix, [], 0

    def add(self, obs: np.ndarray, done: bool) -> None:
        """obs: (3, 64, 64) uint8 returned by a step; at an episode end it is already another level's frame."""
        if not done:
            self.frames.append(np.transpose(obs, (1, 2, 0)))
        else:
            if self.trigger(self.episode) and self.frames:
                self.save(self.frames, self.folder, fps=15, name_prefix=self.name_prefix, episode_index=self.episode,
                          episode_trigger=lambda _: True)
            self.frames, self.episode = [], self.episode + 1


class RewardNormalizer:
    """Scales rewards by the running std of the discounted return (PPG code, Baselines' VecNormalize), then clips.

    Only real transitions update the statistics; the return accumulator restarts after every episode end.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.ret = np.zeros(num_envs)
        self.mean, self.var, self.count = 0.0, 1.0, epsilon

    def update(self, x: np.ndarray) -> None:
        """Parallel mean/variance update (Chan et al.) with the batch x."""
        if x.size == 0:
            return
        b_mean, b_var, b_count = x.mean(), x.var(), x.size
        delta, total = b_mean - self.mean, self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.mean, self.var, self.count = self.mean + delta * b_count / total, m2 / total, total

    def state(self) -> dict:
        """The statistics for a checkpoint. The running returns are left out: a resumed run starts new episodes."""
        return {"mean": float(self.mean), "var": float(self.var), "count": float(self.count)}

    def load_state(self, state: dict) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]

    def __call__(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray) -> np.ndarray:
        self.ret = np.where(valid, self.ret * self.gamma + reward, self.ret)
        self.update(self.ret[valid])
        scaled = np.clip(reward / np.sqrt(self.var + self.epsilon), -self.clip, self.clip)
        self.ret[done] = 0.0
        return scaled


def layer_init_normed(layer: nn.Module, scale: float = 1.0) -> nn.Module:
    """PPG code's init: each output unit's weight vector rescaled to norm `scale`, bias zero."""
    with torch.no_grad():
        dims = tuple(range(1, layer.weight.dim()))
        layer.weight.mul_(scale / torch.linalg.vector_norm(layer.weight, dim=dims, keepdim=True))
        layer.bias.zero_()
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels: int, scale: float):
        super().__init__()
        self.conv0 = layer_init_normed(nn.Conv2d(channels, channels, 3, padding=1), np.sqrt(scale))
        self.conv1 = layer_init_normed(nn.Conv2d(channels, channels, 3, padding=1), np.sqrt(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """conv 3x3, max-pool 3x3 stride 2, two residual blocks (Espeholt et al. 2018, IMPALA)."""

    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = layer_init_normed(nn.Conv2d(in_channels, out_channels, 3, padding=1))
        self.res0 = ResidualBlock(out_channels, scale / np.sqrt(2))
        self.res1 = ResidualBlock(out_channels, scale / np.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res1(self.res0(x))


class ImpalaEncoder(nn.Module):
    """IMPALA CNN with channels (16, 32, 32) and a 256-unit dense layer, as in the Procgen and PPG papers."""

    def __init__(self, obs_shape: tuple, channels: tuple = (16, 32, 32), hidden: int = 256):
        super().__init__()
        c, h, w = obs_shape  # envpool's Procgen observations are channel-first: (3, 64, 64) uint8
        seqs = []
        for out in channels:
            seqs.append(ConvSequence(c, out, scale=1 / np.sqrt(len(channels))))
            c, h, w = out, (h + 1) // 2, (w + 1) // 2
        self.convs = nn.Sequential(*seqs)
        self.dense = layer_init_normed(nn.Linear(c * h * w, hidden), scale=1.4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.convs(x.float() / 255.0)
        return torch.relu(self.dense(torch.relu(x.flatten(1))))


class PolicyNetwork(nn.Module):
    """pi_theta with the auxiliary value head V_theta_pi that the auxiliary phase trains (Cobbe et al. 2021)."""

    def __init__(self, obs_shape: tuple, n_actions: int):
        super().__init__()
        self.encoder = ImpalaEncoder(obs_shape)
        self.actor = layer_init_normed(nn.Linear(256, n_actions), scale=0.1)
        self.aux_critic = layer_init_normed(nn.Linear(256, 1), scale=0.1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, auxiliary value)"""
        hidden = self.encoder(x)
        return self.actor(hidden), self.aux_critic(hidden).flatten()


class ValueNetwork(nn.Module):
    """V_theta_V: a separate IMPALA CNN, so value training never disturbs the policy's features."""

    def __init__(self, obs_shape: tuple):
        super().__init__()
        self.encoder = ImpalaEncoder(obs_shape)
        self.critic = layer_init_normed(nn.Linear(256, 1), scale=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.encoder(x)).flatten()


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


class AuxBuffer:
    """Every observation of one policy phase, with its value target and, before distillation, pi_old's logits.

    Stored rollout-major: row r = iteration * num_envs + env holds that env's num_steps consecutive
    observations from that iteration, so an auxiliary minibatch of whole rollouts is one index on dim 0.
    Observations stay uint8 (3x64x64 bytes each); the size follows from the flags (see aux_buffer_bytes).
    """

    def __init__(self, n_iteration: int, num_envs: int, num_steps: int, obs_shape: tuple, n_actions: int):
        self.num_envs = num_envs
        rows = n_iteration * num_envs
        self.obs = torch.empty((rows, num_steps) + tuple(obs_shape), dtype=torch.uint8)
        self.returns = torch.empty((rows, num_steps))
        self.valid = torch.empty((rows, num_steps), dtype=torch.bool)
        self.old_logits = torch.empty((rows, num_steps, n_actions))

    @property
    def num_rollouts(self) -> int:
        return self.obs.shape[0]

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (self.obs, self.returns, self.valid, self.old_logits))

    def store(self, iteration: int, obs: torch.Tensor, returns: torch.Tensor, valid: torch.Tensor) -> None:
        """Store one policy iteration's rollout; inputs are step-major (num_steps, num_envs, ...)."""
        rows = slice(iteration * self.num_envs, (iteration + 1) * self.num_envs)
        self.obs[rows] = obs.transpose(0, 1).cpu()  # (num_envs, num_steps, *obs_shape)
        self.returns[rows] = returns.transpose(0, 1).cpu()
        self.valid[rows] = valid.transpose(0, 1).cpu()

    def set_old_logits(self, rollouts: np.ndarray, logits: torch.Tensor) -> None:
        """Write logits computed on `self.batch(rollouts)`'s flat observations back beside them."""
        self.old_logits[rollouts] = logits.reshape((len(rollouts), -1, logits.shape[-1])).cpu()

    def state(self, stored_iterations: int) -> dict:
        """The rollouts of the first `stored_iterations` iterations of the phase, for a checkpoint taken inside a
        policy phase (copies: torch.save would write a slice's whole underlying storage). pi_old's logits are
        not saved: the auxiliary phase computes them when it starts."""
        rows = stored_iterations * self.num_envs
        return {"obs": self.obs[:rows].clone(), "returns": self.returns[:rows].clone(),
                "valid": self.valid[:rows].clone()}

    def load_state(self, state: dict) -> None:
        rows = state["obs"].shape[0]
        self.obs[:rows], self.returns[:rows], self.valid[:rows] = state["obs"], state["returns"], state["valid"]

    def batch(self, rollouts: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Whole rollouts, flattened to (len(rollouts) * num_steps, ...): obs, returns, old logits, valid."""
        tensors = (self.obs, self.returns, self.old_logits, self.valid)
        return tuple(t[rollouts].flatten(0, 1).to(device) for t in tensors)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, denominator: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean of x over mask (the reset steps of NEXT_STEP autoreset are not transitions); `denominator`
    overrides the count, so chunks of one minibatch sum to the minibatch's mean."""
    count = mask.sum() if denominator is None else denominator
    return (x * mask).sum() / count.clamp(min=1)


def aux_losses(
    logits: torch.Tensor,
    aux_values: torch.Tensor,
    values: torch.Tensor,
    old_logits: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    denominator: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Auxiliary-phase losses over flat observations: (kl_loss, aux_value_loss, value_loss).

    L^joint = aux_value_loss + beta_clone * kl_loss, Eq. (2), Cobbe et al. 2021, trains the policy network:
    KL[pi_old(.|s) || pi_theta(.|s)] keeps the policy while its auxiliary head fits the value targets.
    L^value = value_loss, Eq. (3), trains the value network again on the same targets.
    """
    old_logp = torch.log_softmax(old_logits, dim=-1)
    new_logp = torch.log_softmax(logits, dim=-1)
    kl = (old_logp.exp() * (old_logp - new_logp)).sum(-1)
    kl_loss = masked_mean(kl, mask, denominator)
    aux_value_loss = 0.5 * masked_mean((aux_values - returns) ** 2, mask, denominator)
    value_loss = 0.5 * masked_mean((values - returns) ** 2, mask, denominator)
    return kl_loss, aux_value_loss, value_loss


def evaluate(policy: PolicyNetwork, envpool, env_id: str, args: Args, device: torch.device) -> list[float]:
    """Run the stochastic policy for args.eval_episodes full episodes on a fresh environment (new levels).
    Sampling, not argmax: Procgen policies trained with an entropy bonus can stall under a greedy policy."""
    envs = make_envs(envpool, env_id, 1, args.seed + 10_000)
    obs, _ = envs.reset()
    returns = []
    while len(returns) < args.eval_episodes:
        with torch.no_grad():
            logits, _ = policy(torch.as_tensor(obs, device=device))
        obs, _, _, _, infos = envs.step(Categorical(logits=logits).sample().cpu().numpy())
        if "episode" in infos:
            returns += [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    return returns[: args.eval_episodes]


def evaluate_saved(args: Args) -> tuple[list[float], str]:
    """--eval-only: evaluate a saved policy without creating a run directory; returns (returns, envpool id).

    A checkpoint (or a run directory holding one) brings its own env id and distribution; a bare .cleanrl_model,
    which holds the `policy` and `value` state dicts, is evaluated on --env-id / --distribution-mode."""
    path = saved_model_path(args.eval_only)
    if path.endswith(".cleanrl_model"):
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
            fail(f"cannot read model {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        state_dict = saved.get("policy") if isinstance(saved, dict) else None
    else:
        checkpoint = load_checkpoint(path, "ppg_procgen.py")
        state_dict = checkpoint["policy"]
        args.env_id, args.distribution_mode = checkpoint["args"]["env_id"], checkpoint["args"]["distribution_mode"]
    if args.eval_episodes < 1:
        fail(f"--eval-episodes must be at least 1, got {args.eval_episodes}")
    envpool = load_envpool()
    env_id = resolve_env_id(args.env_id, args.distribution_mode, envpool.list_all_envs())
    probe = make_envs(envpool, env_id, 1, args.seed)
    policy = PolicyNetwork(probe.single_observation_space.shape, int(probe.single_action_space.n))
    probe.close()
    try:
        policy.load_state_dict(state_dict)
    except (RuntimeError, TypeError, AttributeError) as e:
        fail(f"{path} does not hold a ppg_procgen.py policy: {str(e).splitlines()[0]}")
    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    return evaluate(policy.to(device), envpool, env_id, args, device), env_id


if __name__ == "__main__":
    args = tyro.cli(Args)
    if args.eval_only is not None:
        episodic_returns, eval_env_id = evaluate_saved(args)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f} "
              f"over {len(episodic_returns)} episodes of {eval_env_id}")
        raise SystemExit(0)
    # Everything that can be wrong with the input is checked before the run directory exists.
    envpool = load_envpool()
    # Run directories are named after the envpool id (StarpilotEasy-v0), so `--resume auto` looks for that name.
    env_id = resolve_env_id(args.env_id, args.distribution_mode, envpool.list_all_envs())
    checkpoint = find_resume_checkpoint(dataclasses.replace(args, env_id=env_id))
    if checkpoint is not None:
        args = resumed_args(Args, checkpoint)
    check_lifecycle_args(args)
    check_speed_args(args)
    batch_size, minibatch_size, num_phases, aux_minibatches = derive_sizes(args)
    num_iterations = num_phases * args.n_iteration
    if checkpoint is None:
        run_name = f"{env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
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
        # Measured here on a busy 2-core machine: the IMPALA CNN's acting forward pass took 38 ms with one
        # torch thread and 930 ms with two (the second thread waits for a core that envpool or others hold).
        torch.set_num_threads(1)

    # env setup. envpool's state cannot be saved: a resumed run builds its environments with the seed
    # seed + global_step (seeds not used before), so the episodes in progress at the checkpoint are dropped.
    global_step = 0 if checkpoint is None else checkpoint["global_step"]
    envs = make_envs(envpool, env_id, args.num_envs, args.seed + global_step)
    obs_shape = envs.single_observation_space.shape
    n_actions = int(envs.single_action_space.n)
    if args.save_model and env_state(envs)[0] is None:
        print(f"note: the environments' state cannot be saved ({env_state(envs)[1]}); "
              "a resumed run restarts its episodes")
    # a resumed run counts its episodes from 0 again: its own file names keep it from overwriting earlier videos
    video_prefix = "rl-video" if checkpoint is None else f"rl-video-resumed-at-{global_step}"
    video = VideoRecorder(f"videos/{run_name}", video_prefix) if args.capture_video else None
    reward_normalizer = RewardNormalizer(args.num_envs, args.gamma) if args.norm_reward else None

    policy = PolicyNetwork(obs_shape, n_actions).to(device)
    value_net = ValueNetwork(obs_shape).to(device)
    params = list(policy.parameters()) + list(value_net.parameters())
    # One Adam over both networks (PPG code); torch's default eps=1e-8 as in the reference. The learning rate is a
    # tensor updated in place, so a compiled update reads the annealed value instead of recompiling for every new
    # float. capturable (on CUDA) keeps Adam's step count on the device, which CUDA graphs need, and keeps Adam's
    # multi-tensor path, which torch turns off for a tensor learning rate otherwise.
    optimizer = optim.Adam(
        params, lr=torch.tensor(args.learning_rate, device=device), capturable=device.type == "cuda"
    )

    # storage: (num_steps, num_envs, ...); observations stay uint8 until they enter a network
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape, dtype=torch.uint8, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)
    # valid[t] = 0 marks envpool's reset steps (the step after an episode end): not a transition
    valid = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    aux = AuxBuffer(args.n_iteration, args.num_envs, args.num_steps, obs_shape, n_actions)

    if checkpoint is None:
        start_iteration = 1
    else:
        # Checkpoints are taken between iterations. One taken inside a policy phase also holds the rollouts the
        # phase has stored so far, so the auxiliary phase distills the same buffer as an uninterrupted run.
        policy.load_state_dict(checkpoint["policy"])
        value_net.load_state_dict(checkpoint["value"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        # load_state_dict puts the saved learning rate in the group (a CPU tensor, or a float in checkpoints
        # written before --compile existed); it must be a tensor on the device, filled in place.
        optimizer.param_groups[0]["lr"] = torch.as_tensor(optimizer.param_groups[0]["lr"], device=device)
        start_iteration = checkpoint["iteration"] + 1
        if checkpoint["aux"] is not None:
            aux.load_state(checkpoint["aux"])
        if reward_normalizer is not None:
            # the statistics continue; the running discounted returns restart with the new episodes
            reward_normalizer.load_state(checkpoint["reward_normalizer"])
        # Last, so the generators continue where the interrupted run left them.
        set_rng_state(checkpoint["rng"])
    next_obs_np, _ = envs.reset()
    next_obs = torch.as_tensor(next_obs_np, device=device)
    prev_done = np.zeros(args.num_envs, dtype=bool)  # the previous step ended an episode

    model_path = f"runs/{run_name}/{args.exp_name}.cleanrl_model"
    checkpoint_path = f"runs/{run_name}/checkpoint.pt"

    def make_checkpoint(iteration: int, finished: bool) -> dict:
        # The learning-rate schedule is a function of the iteration, so the iteration is its whole state.
        stored = (iteration - 1) % args.n_iteration + 1  # iterations of the current phase in the aux buffer
        return checkpoint_common(args, run_name, iteration, global_step, finished, envs) | {
            "policy": policy.state_dict(),
            "value": value_net.state_dict(),
            "optimizer": optimizer.state_dict(),
            "reward_normalizer": None if reward_normalizer is None else reward_normalizer.state(),
            # after an auxiliary phase (iteration a multiple of n_iteration) the buffer is spent: nothing to save
            "aux": None if stored == args.n_iteration else aux.state(stored),
            "next_obs": next_obs.cpu(),
        }

    def stop_if_non_finite(losses: dict, iteration: int) -> None:
        """Checked before any save, so a checkpoint never holds NaN or inf."""
        problem = find_non_finite(losses, {"policy": policy, "value": value_net})
        if problem is not None:
            progress.close()
            writer.close()
            fail(f"non-finite {problem} at global step {global_step} (iteration {iteration}); "
                 "stopped without saving, so the last good checkpoint is kept")

    # --amp: the networks' forward passes run under bf16 autocast (a no-op without the flag); distributions and losses
    # are computed in float32 from the outputs' .float().
    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp)

    def policy_step(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Act on one step's observations: (sampled action, its log-probability, V_theta_V(s))."""
        with torch.no_grad():
            with autocast():
                logits, _ = policy(obs)
                value = value_net(obs)
            # No argument validation (here and in the update): it would stop a diverged run with a traceback
            # before the once-per-iteration non-finite check can name the step and the quantity.
            probs = Categorical(logits=logits.float(), validate_args=False)
            action = probs.sample()
        return action, probs.log_prob(action), value.float()

    @torch.compiler.disable
    def clipped_step() -> None:
        """Clip the global gradient norm of both networks and take one Adam step. Never compiled, even inside a
        compiled update: a compiled Adam step is specialized to which parameters have gradients, and the policy
        network's auxiliary value head has one only in the auxiliary phase, so it recompiled between the phases
        (about a minute per compilation on this busy 2-core CPU). Eager, the clipping and step took 50 ms of a
        730 ms update on 16 observations here, a smaller share for larger minibatches."""
        nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        optimizer.step()

    def update(
        mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values, mb_mask, train_policy: bool,
        train_value: bool,
    ) -> tuple[torch.Tensor, ...]:
        """One policy-phase gradient step on one minibatch: the policy objective while train_policy, the value
        objective while train_value. The minibatch is padded to minibatch_size so that every call has one shape
        (a compiled function would recompile for each new size); mb_mask marks its real transitions, and every
        mean below is over those only. Returns (pg_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac,
        v_loss), detached; the entries of an objective that was not trained are 0."""
        optimizer.zero_grad()
        zero = torch.zeros((), device=mb_obs.device)
        loss = pg_loss = entropy_loss = old_approx_kl = approx_kl = clipfrac = v_loss = zero
        if train_policy:
            with autocast():
                logits, _ = policy(mb_obs)
            probs = Categorical(logits=logits.float(), validate_args=False)
            newlogprob, entropy = probs.log_prob(mb_actions), probs.entropy()
            logratio = newlogprob - mb_logprobs
            ratio = logratio.exp()
            with torch.no_grad():
                # KL estimators k1 and k3, http://joschu.net/blog/kl-approx.html
                old_approx_kl = masked_mean(-logratio, mb_mask)
                approx_kl = masked_mean((ratio - 1) - logratio, mb_mask)
                clipfrac = masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), mb_mask)
            if not args.adv_norm_fullbatch:
                # mean and (unbiased, as torch.std) standard deviation over the real transitions
                adv_mean = masked_mean(mb_advantages, mb_mask)
                adv_var = ((mb_advantages - adv_mean) ** 2 * mb_mask).sum() / (mb_mask.sum() - 1).clamp(min=1)
                mb_advantages = (mb_advantages - adv_mean) / (adv_var.sqrt() + 1e-8)
            # clipped surrogate objective, Eq. (7), Schulman et al. 2017 (L^clip in PPG's Eq. 1)
            pg_loss1 = -mb_advantages * ratio
            pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
            pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mb_mask)
            entropy_loss = masked_mean(entropy, mb_mask)
            loss = loss + pg_loss - args.ent_coef * entropy_loss
        if train_value:
            with autocast():
                newvalue = value_net(mb_obs)
            newvalue = newvalue.float()
            if args.clip_vloss:
                v_loss_unclipped = (newvalue - mb_returns) ** 2
                v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - mb_returns) ** 2), mb_mask)
            else:
                v_loss = 0.5 * masked_mean((newvalue - mb_returns) ** 2, mb_mask)  # L^value, Eq. (3), Cobbe et al. 2021
            loss = loss + args.vf_coef * v_loss

        loss.backward()
        clipped_step()
        return pg_loss.detach(), entropy_loss.detach(), old_approx_kl, approx_kl, clipfrac, v_loss.detach()

    def aux_update(m_obs, m_returns, m_old_logits, m_valid, mb_count, step: bool) -> tuple[torch.Tensor, ...]:
        """One chunk of an auxiliary minibatch: forward, the distillation losses and their gradients (added to the
        gradients of the minibatch's earlier chunks); with `step` (the last chunk) the clipped optimizer step.
        Returns (kl_loss, aux_value_loss, value_loss), detached."""
        with autocast():
            logits, aux_values = policy(m_obs)
            new_values = value_net(m_obs)
        # each chunk's losses are sums over its observations divided by the whole minibatch's count, so the
        # accumulated gradient equals the minibatch mean's
        kl_loss, aux_value_loss, value_loss = aux_losses(
            logits.float(), aux_values.float(), new_values.float(), m_old_logits, m_returns, m_valid, mb_count
        )
        joint_loss = aux_value_loss + args.beta_clone * kl_loss  # L^joint, Eq. (2), Cobbe et al. 2021
        (joint_loss + value_loss).backward()
        if step:
            clipped_step()
        return kl_loss.detach(), aux_value_loss.detach(), value_loss.detach()

    # --compile / --cudagraphs wrap exactly these three functions; without the flags they run as written. (With
    # --e-policy != --v-value, or --n-aux-grad-accum > 1, the update or aux_update is compiled once more for the
    # other value of its bool arguments.)
    policy_step, update, aux_update = speed_up(policy_step, args), speed_up(update, args), speed_up(aux_update, args)

    stop = StopSignal()
    progress = Progress(num_iterations * batch_size, not args.progress)
    start_time, start_step = time.time(), global_step
    aux_warmed_up = False
    for iteration in range(start_iteration, num_iterations + 1):
        # POLICY PHASE: N_pi iterations of PPO with separate policy and value networks (Algorithm 1)
        phase, phase_iteration = (iteration - 1) // args.n_iteration + 1, (iteration - 1) % args.n_iteration
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"].fill_(frac * args.learning_rate)

        # rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            valid[step] = torch.as_tensor(~prev_done, device=device)
            action, logprob, value = policy_step(next_obs)
            values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            next_obs_np, reward, term, trunc, infos = envs.step(action.cpu().numpy())
            done = np.logical_or(term, trunc)
            if reward_normalizer is not None:
                reward = reward_normalizer(reward, done, ~prev_done)
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            dones[step] = torch.as_tensor(done, dtype=torch.float32, device=device)
            if video is not None:
                video.add(next_obs_np[0], bool(done[0]))
            prev_done = done
            next_obs = torch.as_tensor(next_obs_np, device=device)

            if "episode" in infos:
                for i in np.nonzero(infos["_episode"])[0]:
                    writer.add_scalar("charts/episodic_return", infos["episode"]["r"][i], global_step)
                    writer.add_scalar("charts/episodic_length", infos["episode"]["l"][i], global_step)
                    progress.episode(infos["episode"]["r"][i])

        # advantages: every episode end counts as terminal (Procgen's time limit leaves no final obs to
        # bootstrap from, see make_envs), so terminations = dones. The reset step that follows an end
        # gets a (meaningless) advantage of its own, but dones[t] cuts the recursion before it can leak
        # into the finished episode, and `valid` keeps it out of every loss.
        with torch.no_grad():
            with autocast():
                next_value = value_net(next_obs)
            next_value = next_value.float().reshape(1, -1)
            next_values = torch.cat([values[1:], next_value], dim=0)
            advantages, returns = compute_gae(
                rewards, values, next_values, dones, dones, args.gamma, args.gae_lambda
            )

        # flatten the batch: (num_steps * num_envs, ...)
        b_obs = obs.reshape((-1,) + obs_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)
        b_valid = valid.reshape(-1)
        if args.adv_norm_fullbatch:  # the PPG code normalizes once over the whole batch
            real = b_advantages[b_valid]
            b_advantages = (b_advantages - real.mean()) / (real.std() + 1e-8)

        # optimize: E_pi epochs of the policy objective, E_V epochs of the value objective; one shared
        # minibatch loop, each network's loss only while its epoch count lasts. Reset steps are dropped,
        # so the minibatches split the real transitions into num_minibatches near-equal parts; each is padded
        # to minibatch_size with a masked-out index, so the update always sees one shape.
        b_inds = np.nonzero(b_valid.cpu().numpy())[0]
        positions = torch.arange(minibatch_size, device=device)
        clipfracs = []
        pg_loss = v_loss = entropy_loss = old_approx_kl = approx_kl = torch.tensor(float("nan"))
        for epoch in range(max(args.e_policy, args.v_value)):
            train_policy, train_value = epoch < args.e_policy, epoch < args.v_value
            np.random.shuffle(b_inds)
            for mb_inds in np.array_split(b_inds, args.num_minibatches):
                mb_mask = positions < len(mb_inds)
                mb_inds = np.concatenate([mb_inds, np.zeros(minibatch_size - len(mb_inds), dtype=mb_inds.dtype)])
                mb_inds = torch.as_tensor(mb_inds, device=device)
                out = update(
                    b_obs[mb_inds], b_actions[mb_inds], b_logprobs[mb_inds], b_advantages[mb_inds],
                    b_returns[mb_inds], b_values[mb_inds], mb_mask, train_policy, train_value,
                )  # fmt: skip
                if train_policy:
                    pg_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = out[:5]
                    clipfracs.append(clipfrac)
                if train_value:
                    v_loss = out[5]

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = b_values[b_valid].cpu().numpy(), b_returns[b_valid].cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # the losses come to the host once per iteration, for logging and for the non-finite check
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
            # SPS leaves out the first iteration: a warm-up that holds --compile's compilation of the policy step
            # and the update (or CUDA graph recording), which would otherwise dominate short runs; it logs no SPS.
            start_time, start_step = time.time(), global_step
        sps = int((global_step - start_step) / max(time.time() - start_time, 1e-9))
        if global_step > start_step:
            writer.add_scalar("charts/SPS", sps, global_step)
        progress.update(global_step, sps)
        if not progress.enabled:  # the progress line replaces these lines on a terminal
            print(f"phase {phase} iteration {iteration}/{num_iterations} global_step={global_step} SPS={sps}")
        # (the explained variance is left out: it is legitimately NaN when the returns have zero variance)
        stop_if_non_finite(losses, iteration)

        # keep the rollout for the auxiliary phase, with the value targets of this iteration
        aux.store(phase_iteration, obs, returns, valid)

        if phase_iteration == args.n_iteration - 1:
            # AUXILIARY PHASE (Algorithm 1), part of the phase's last iteration: first record pi_old on every
            # stored observation, then E_aux epochs of distillation over minibatches of whole rollouts.
            aux_start = time.time()
            aux_inds = np.arange(aux.num_rollouts)
            with torch.no_grad():
                for start in range(0, aux.num_rollouts, args.num_aux_rollouts):
                    rollouts = aux_inds[start : start + args.num_aux_rollouts]
                    m_obs = aux.batch(rollouts, device)[0]
                    with autocast():
                        old_logits = policy(m_obs)[0]
                    aux.set_old_logits(rollouts, old_logits.float())

            chunk = args.num_aux_rollouts // args.n_aux_grad_accum
            last_epoch_losses = []  # (kl_loss, aux_value_loss, value_loss) of every chunk of the last epoch
            for aux_epoch in range(args.e_auxiliary):
                np.random.shuffle(aux_inds)
                for start in range(0, aux.num_rollouts, args.num_aux_rollouts):
                    mb_rollouts = aux_inds[start : start + args.num_aux_rollouts]
                    mb_count = aux.valid[mb_rollouts].sum().to(device)
                    optimizer.zero_grad()
                    for c in range(0, args.num_aux_rollouts, chunk):
                        m_obs, m_returns, m_old_logits, m_valid = aux.batch(mb_rollouts[c : c + chunk], device)
                        chunk_losses = aux_update(
                            m_obs, m_returns, m_old_logits, m_valid, mb_count, c + chunk == args.num_aux_rollouts
                        )
                        if aux_epoch == args.e_auxiliary - 1:
                            last_epoch_losses.append(torch.stack(chunk_losses))

            # means over the minibatches of the last auxiliary epoch (a minibatch's loss is the sum of its chunks');
            # they come to the host once per phase
            kl_mean, aux_value_mean, value_mean = (torch.stack(last_epoch_losses).sum(0) / aux_minibatches).tolist()
            aux_logged = {
                "losses/aux_kl_loss": kl_mean,
                "losses/aux_pi_value_loss": aux_value_mean,
                "losses/aux_value_loss": value_mean,
            }
            for key, value in aux_logged.items():
                writer.add_scalar(key, value, global_step)
            sps = int((global_step - start_step) / max(time.time() - start_time, 1e-9))
            if not progress.enabled:
                print(f"phase {phase}: auxiliary phase took {time.time() - aux_start:.0f} s; SPS including it: {sps}")
            stop_if_non_finite(aux_logged, iteration)
            if not aux_warmed_up:
                # The first auxiliary phase of this process is a warm-up too (it compiles aux_update): the SPS clock
                # restarts after it, so later SPS values include the auxiliary phases after the first one only.
                start_time, start_step, aux_warmed_up = time.time(), global_step, True

        # Checkpoints and signals are handled between iterations, the phase's last one after its auxiliary phase.
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
        torch.save({"policy": policy.state_dict(), "value": value_net.state_dict()}, model_path)
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(policy, envpool, env_id, args, device)
        for idx, episodic_return in enumerate(episodic_returns):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)
        print(f"eval: mean return {np.mean(episodic_returns):.2f} +- {np.std(episodic_returns):.2f}")

    envs.close()
    writer.close()
