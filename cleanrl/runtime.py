# docs: docs/contributing.md (what this module holds and why)
"""The run machinery every script in cleanrl/ imports: what no variant of an algorithm changes. In order: 1. run
flags, 2. start-up, 3. checkpoints (docs/saving-resuming.md), 4. `Run`, the handle a training loop talks to,
5. --eval-only, 6. speed, 7. replay memories, 8. environments (classic control, MuJoCo, Atari, Procgen)."""

import contextlib
import cProfile
import errno
import fcntl
import glob
import hashlib
import io
import itertools
import json
import math
import os
import pickle  # only for its exception class: nothing here unpickles
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable, NamedTuple, NoReturn, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.utils.tensorboard import SummaryWriter


# 1. Run flags
@dataclass
class RunArgs:
    exp_name: str = os.path.splitext(os.path.basename(sys.argv[0]))[0]
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
    eval_max_seconds: float = 1800.0
    """stop an evaluation that takes longer than this many seconds (it then gives no result)"""
    checkpoint_frequency: int = 0
    """with --save-model, also checkpoint every this many updates (0: only at the end and on SIGINT/SIGTERM)"""
    resume: Optional[str] = None
    """continue a run from a checkpoint or run directory; `auto`: the newest run of this env/exp/seed, if any"""
    eval_only: Optional[str] = None
    """only evaluate a saved model (checkpoint, run directory or .cleanrl_model), print mean and std return"""
    progress: bool = True
    """report progress on stderr: a self-rewriting line on a terminal, else a plain line every --progress-interval"""
    progress_interval: float = 30.0
    """seconds between the plain progress lines printed when stderr is not a terminal (a log file, a batch job)"""
    compile: bool = False
    """if toggled, torch.compile the policy step and the update (same math, float rounding aside)"""
    cudagraphs: bool = False
    """if toggled, replay the policy step and the update as CUDA graphs (needs CUDA)"""
    torch_threads: int = 1
    """torch threads on the CPU; 0: the cores left free by other work, looked at again as the run goes (for
    bit-identical reruns give a number: the count changes float rounding)"""

    def run_env_id(self) -> str:
        """The env id a run is filed under (a script whose --env-id is a short name may name the full id)."""
        return self.env_id

# Flags that leave a run's course unchanged, so a resumed run may give them anew. --compile and --amp change
# speed (and float rounding) only; --cudagraphs is not among them: a resumed optimizer keeps its capturable setting.
ALLOWED_ON_RESUME = ("resume", "checkpoint_frequency", "progress", "progress_interval", "eval_episodes",
                     "eval_max_seconds", "cuda", "track", "wandb_project_name", "wandb_entity", "compile", "amp",
                     "torch_threads")


# The ranges of the flags the scripts share by name, checked for every script before anything is written: "[" and
# "]" include an end, "(" and ")" exclude it. Every float flag must also be finite (tyro reads "nan" and "inf").
FLAG_RANGES = {
    **dict.fromkeys(("learning_rate", "q_lr", "policy_lr", "clip_coef", "max_grad_norm", "progress_interval",
                     "eval_max_seconds"), "(0, inf)"),
    "target_kl": "[0, inf)",  # 0: stop an update's epochs at the first minibatch whose KL is above 0
    **dict.fromkeys(("gamma", "gae_lambda", "start_e", "end_e", "exploration_fraction"), "[0, 1]"),
    "tau": "(0, 1]",
    **dict.fromkeys(("ent_coef", "vf_coef", "alpha", "exploration_noise", "policy_noise", "noise_clip", "beta_clone",
                     "v_value", "learning_starts", "checkpoint_frequency", "eval_episodes"), "[0, inf)"),
    **dict.fromkeys(("num_envs", "num_steps", "num_minibatches", "update_epochs", "batch_size", "buffer_size",
                     "total_timesteps", "train_frequency", "target_network_frequency", "policy_frequency",
                     "n_iteration", "e_policy", "e_auxiliary", "num_aux_rollouts", "n_aux_grad_accum",
                     "eval_max_frames"), "[1, inf)"),
    "torch_threads": "[0, inf)",
    "n_atoms": "[2, inf)",
    "seed": "[0, 2147483647]",  # numpy's global seed must be below 2**32; env seeds count up from it
}


# 2. Start-up. Everything that can be wrong with the input is checked before the run directory exists.
def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")

def warn(message: str) -> None:
    """One line for what is legal but unusual and runs anyway (say what will happen); of torchrun's ranks, rank 0's."""
    if os.environ.get("RANK", "0") == "0":
        sys.stderr.write(f"warning: {message}\n")
        sys.stderr.flush()

def say(message: str) -> None:
    """Print one line in one write, flushed, so the lines of torchrun ranks sharing a log never interleave."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()

class PipeSafe:
    """stdout or stderr, made safe to write after its reader went away (`... | head`, a closed log pipe): the first
    BrokenPipeError points the file descriptor at /dev/null, so the run goes on (and a SIGTERM still checkpoints)
    instead of ending in a traceback, and Python's flush at exit finds nothing to complain about."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self.silence()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.silence()

    def silence(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

def protect_output() -> None:
    """sys.stdout and sys.stderr as PipeSafe streams (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, PipeSafe):
            setattr(sys, name, PipeSafe(stream))

def script_name(args_cls) -> str:
    """The file name of the script that defines args_cls (the name its checkpoints carry)."""
    return os.path.basename(sys.modules[args_cls.__module__].__file__)

def parse_args(args_cls, rank: int = 0, resume_later: bool = False) -> tuple:
    """(args, checkpoint or None); with --resume the checkpoint's flags, the given ones on top. All torchrun ranks
    parse alike; only rank 0 says why (exit 1; exit 0, no restart, if `auto` finds a run done). `resume_later`: the
    command line only; broadcast_resume() resolves --resume once the process group has formed."""
    protect_output()
    if rank != 0:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return parse_args(args_cls, resume_later=resume_later)
        except SystemExit as e:
            raise SystemExit(0 if e.code in (0, None) else 1) from None
    check_flags_given_once(sys.argv[1:])
    args = tyro.cli(args_cls)
    check_flag_ranges(args)
    check_run_flags(args)
    if args.eval_only is not None or resume_later:
        return args, None
    return resolve_resume(args_cls, args)

def resolve_resume(args_cls, args) -> tuple:
    """parse_args' second half: the checkpoint --resume names (if any), its flags under the given ones, and the
    checks that need the final flags."""
    checkpoint = find_resume_checkpoint(args, script_name(args_cls))
    if checkpoint is not None:
        args = resumed_args(args_cls, checkpoint)
        check_flag_ranges(args)
    if args.checkpoint_frequency > 0 and not args.save_model:
        fail("--checkpoint-frequency writes checkpoints, which needs --save-model")
    if getattr(args, "learning_starts", 0) >= args.total_timesteps:  # the off-policy scripts
        warn(f"--learning-starts {args.learning_starts} is not below --total-timesteps {args.total_timesteps}: no "
             "update will happen (a smoke run of the loop)")
    check_speed_args(args)
    return args, checkpoint

def broadcast_resume(args_cls, args, rank: int) -> tuple:
    """(args, checkpoint or None) on every rank of a process group, as rank 0 resolves them from its own runs/: the
    nodes of a multi-node job share no filesystem, and only node 0's runs/ holds the run. One broadcast_object_list
    sends the outcome (pickled; a checkpoint is tens of MB), or rank 0's exit, so every rank ends alike."""
    import torch.distributed as dist

    outcome = [None]
    if rank == 0:
        try:
            outcome = [resolve_resume(args_cls, args)]
        except SystemExit as e:
            outcome = [("exit", e)]
    dist.broadcast_object_list(outcome, src=0)
    if outcome[0][0] == "exit":  # rank 0 said why and exits with its status; the others quietly, 0 or 1
        code = outcome[0][1].code
        raise SystemExit(code if rank == 0 else 0 if code in (0, None) else 1)
    return outcome[0]

def check_flags_given_once(argv: list[str]) -> None:
    """A flag given twice (`--seed 1 --seed 2`, or `--track --no-track`) fails: the parser would silently take the
    last one, and a command line that says two things is a mistake (often an edited, rerun command)."""
    seen: dict[str, str] = {}
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--") or len(token) == 2:
            continue
        spelled = token.split("=", 1)[0]
        name = spelled[2:].replace("_", "-")
        name = name[3:] if name.startswith("no-") else name
        if name in seen:
            fail(f"{spelled} is given twice; give each flag once" if seen[name] == spelled else
                 f"{seen[name]} and {spelled} are both given; give one of them")
        seen[name] = spelled

def check_run_flags(args) -> None:
    """The run flags that must agree with each other and with the machine, checked before anything is written."""
    name = args.exp_name
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        fail(f"--exp-name {name!r} must be a plain name (no '/'): it names a directory under runs/")
    if args.eval_only is not None and args.resume is not None:
        fail("--eval-only evaluates a saved model and --resume continues a run's training; give one of them")
    if args.capture_video:
        try:
            import moviepy  # noqa: F401 (gymnasium's video writer imports it only once the first video is saved)
        except ImportError:
            fail("--capture-video writes mp4 files with moviepy, which is not installed: pip install moviepy")

def check_flag_ranges(args) -> None:
    """Every flag named in FLAG_RANGES within its range, every float flag finite; else fail naming the flag."""
    for name, value in asdict(args).items():
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"{flag} must be a finite number, got {value}")
        if name in FLAG_RANGES:
            interval = FLAG_RANGES[name]
            low, high = (float(end) for end in interval[1:-1].split(","))
            if not ((low <= value if interval[0] == "[" else low < value)
                    and (value <= high if interval[-1] == "]" else value < high)):
                if high < math.inf:
                    fail(f"{flag} must be in {interval}, got {value}")
                fail(f"{flag} must be {'at least' if interval[0] == '[' else 'above'} {low:g}, got {value}")

def whole_iterations(total_timesteps: int, steps_per_iteration: int, unit: str) -> int:
    """--total-timesteps in whole iterations of `steps_per_iteration` steps (`unit` names them: "one batch"). The
    remainder is dropped, with a warning line when that leaves less than 99% of the budget (the defaults drop a
    few hundred steps of millions); a budget below one iteration fails."""
    iterations = total_timesteps // steps_per_iteration
    if iterations == 0:
        fail(f"--total-timesteps {total_timesteps} is less than {unit} ({steps_per_iteration} steps)")
    if iterations * steps_per_iteration < 0.99 * total_timesteps:
        warn(f"--total-timesteps {total_timesteps} is not a multiple of {unit} ({steps_per_iteration} steps): the "
             f"run takes {iterations * steps_per_iteration} steps")
    return iterations

def run_prefix(args) -> str:
    """Runs are named {env_id}__{exp_name}__{seed}__{unix time}, "/" and ":" made "-": one directory under runs/."""
    return f"{re.sub(r'[/:]', '-', args.run_env_id())}__{args.exp_name}__{args.seed}__"

def torchrun_env() -> tuple[int, int, int, int]:
    """(rank, local_rank, node_rank, world_size) from torchrun's variables; plain `python` is rank 0 of 1.
    RANK is global and unique; LOCAL_RANK numbers one machine's processes, so it picks the GPU, never the role."""
    try:
        world_size, rank, local_rank, node_rank = (int(os.environ.get(k, d)) for k, d in (
            ("WORLD_SIZE", "1"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("GROUP_RANK", "0")))
    except ValueError as e:
        fail(f"bad torchrun environment variable: {e}")
    if world_size < 1 or not 0 <= rank < world_size:
        fail(f"RANK={rank} and WORLD_SIZE={world_size} are inconsistent")
    return rank, local_rank, node_rank, world_size

def seed_everything(seed: int, torch_deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic

def cpu_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of all cores together since boot, from the "cpu" line of /proc/stat; busy is all but
    idle and iowait."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)

def free_cores() -> int:
    """The cores no other work keeps busy as the run starts, measured over 0.1 s in /proc/stat; at least 1 (and 1
    where /proc/stat cannot be read). Seeds started together see each other start up (imports keep a core busy)."""
    try:
        busy0, total0 = cpu_ticks()
        time.sleep(0.1)
        busy1, total1 = cpu_ticks()
    except (OSError, ValueError, IndexError):
        return 1
    busy_cores = (busy1 - busy0) / max(total1 - total0, 1) * os.cpu_count()
    return max(1, min(len(os.sched_getaffinity(0)), round(os.cpu_count() - busy_cores)))

class ThreadGuard:
    """--torch-threads 0 on the CPU: as many torch threads as there are cores the rest of the machine leaves free,
    looked at again every `every` seconds of the run (from Run.log_sps). Other processes' share is the machine's busy
    time less this process's own (os.times: all its threads, spinning ones included). So a run that started alone
    with two threads drops to one at its next look after a second seed starts beside it (until then its threads
    stall on the busy core), and takes two again when that seed ends. Each change is printed; it changes float
    rounding from there on."""

    def __init__(self, every: float = 10.0):
        self.every, self.most = every, len(os.sched_getaffinity(0))
        self.mark = self.sample()

    @staticmethod
    def sample() -> Optional[tuple[float, int, int, float]]:
        try:
            busy, total = cpu_ticks()
        except (OSError, ValueError, IndexError):
            return None
        own = os.times()
        return time.monotonic(), busy, total, own.user + own.system

    def others_busy(self, start, end) -> float:
        """Cores that other processes kept busy between two samples."""
        busy = (end[1] - start[1]) - (end[3] - start[3]) * os.sysconf("SC_CLK_TCK")
        return max(0.0, busy / max(end[2] - start[2], 1) * os.cpu_count())

    def check(self) -> None:
        if self.mark is None or time.monotonic() - self.mark[0] < self.every:
            return
        now = self.sample()
        if now is None:
            return
        others = self.others_busy(self.mark, now)
        want, have = max(1, min(self.most, round(os.cpu_count() - others))), torch.get_num_threads()
        if want != have:
            say(f"torch threads: {have} -> {want} (other processes keep {others:.1f} of {os.cpu_count()} cores busy)")
            torch.set_num_threads(want)
        self.mark = now

def pick_device(args, local_rank: int = 0) -> torch.device:
    """CUDA when available and wanted, else the CPU with --torch-threads threads; 0: the cores free at start, and
    then as many as stay free (ThreadGuard). Each script's default says which its networks gain from: 1 for the
    small MLPs, 0 for wide and convolutional ones. More threads than free cores stall on every op when another
    process takes a core (SAC: 0.33x), and the count changes float rounding: docs/speed.md has the measurements."""
    if args.cuda and torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    torch.set_num_threads(args.torch_threads or free_cores())
    return torch.device("cpu")

def probe_env(env_id: str, action_space: type, script: str, finite_actions: bool = False) -> gym.Env:
    """One environment, built to check the id and its spaces before any work starts; fails in one line."""
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:
        fail(f"cannot make environment {env_id!r}: {e}")
    space, obs_space = env.action_space, env.observation_space
    kind = "Discrete" if action_space is gym.spaces.Discrete else "Box (continuous)"
    if not isinstance(space, action_space):
        fail(f"{env_id} has action space {space}; {script} supports {kind} actions only")
    if action_space is gym.spaces.Box:
        if len(space.shape) != 1:
            fail(f"{env_id} has action shape {space.shape}; {script} supports 1-D Box actions only")
        if finite_actions and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            fail(f"{env_id} has unbounded action space {space}; {script} needs finite low and high bounds")
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            fail(f"{env_id} has observation space {obs_space}; {script} supports flat Box observations only")
    return env

def claim_run_directory(prefix: str) -> tuple[str, str]:
    """(name, note): runs/{prefix}{unix time}, created exclusively, so two runs never share one; a run that would get
    the name of one started in the same second gets -2, -3, ... appended, and the note says so."""
    stamp = str(int(time.time()))
    for n in itertools.count(1):
        name = prefix + stamp + ("" if n == 1 else f"-{n}")
        try:
            if not os.path.isdir("runs"):
                os.makedirs("runs", exist_ok=True)
            os.mkdir(os.path.join("runs", name))
            return name, "" if n == 1 else f" (runs/{prefix}{stamp} is another run started in the same second)"
        except FileExistsError:
            if os.path.isdir(os.path.join("runs", name)):
                continue
            fail(f"cannot create the run directory runs/{name}: runs is not a directory")
        except OSError as e:
            fail(f"cannot create the run directory runs/{name}: {e.strerror or e}")

def lock_run_directory(run_dir: str) -> int:
    """Hold the run directory for this process: an exclusive flock on run_dir/.lock, which the kernel drops when the
    process ends, however it ends (kill -9 included), so a stale lock never blocks a resume. A second process (two
    resumes of one run) fails in one line naming the holder's pid. Returns the open descriptor, kept for the run."""
    path = os.path.join(run_dir, ".lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        fail(f"cannot write in the run directory {run_dir}: {describe_os_error(e)}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip()
        os.close(fd)
        fail(f"{run_dir} is in use by another process (pid {holder or 'unknown'}): a run directory takes one process "
             "at a time")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        with tempfile.TemporaryFile(dir=run_dir):  # the lock file may be older than a permission change
            pass
    except OSError as e:
        os.close(fd)
        fail(f"cannot write in the run directory {run_dir}: {describe_os_error(e)}")
    return fd

HELD_DIRECTORIES: dict[str, int] = {}  # the run directories this process holds: real path -> lock descriptor

def hold_run_directory(run_dir: str) -> int:
    """lock_run_directory, once per directory and process: --resume takes the lock before it reads the checkpoint
    (so it never continues from one that another process is about to replace), and start() keeps it."""
    key = os.path.realpath(run_dir)
    if key not in HELD_DIRECTORIES:
        HELD_DIRECTORIES[key] = lock_run_directory(run_dir)
    return HELD_DIRECTORIES[key]

class LogWriter(SummaryWriter):
    """TensorBoard's SummaryWriter, but a failed write (a full disk, a directory that went away) ends the run in one
    `error:` line that says why, instead of a traceback from its writer thread and then from the training loop. The
    events already written stay; the last checkpoint is kept, so the run can be resumed once there is room."""

    def __init__(self, log_dir: str, **kwargs):
        self.where = log_dir
        with self.failing():
            super().__init__(log_dir, **kwargs)

    @contextlib.contextmanager
    def failing(self):
        try:
            yield
        except OSError as e:
            fail(f"cannot write the TensorBoard log in {self.where}: {describe_os_error(e)}")

    def add_scalar(self, *args, **kwargs):
        with self.failing():
            super().add_scalar(*args, **kwargs)

    def add_text(self, *args, **kwargs):
        with self.failing():
            super().add_text(*args, **kwargs)

    def flush(self):
        with self.failing():
            super().flush()

    def close(self):
        with self.failing():
            super().close()

def quiet_log_threads(hook_args) -> None:
    """threading.excepthook: a TensorBoard writer thread's OSError is reported by LogWriter, in one line."""
    if not (type(hook_args.thread).__name__ == "_AsyncWriterThread" and isinstance(hook_args.exc_value, OSError)):
        threading.__excepthook__(hook_args)

def start(args, checkpoint: Optional[dict], num_iterations: int, steps_per_iteration: int, rank: int = 0,
          local_rank: int = 0) -> "Run":
    """Open the run: directory (held by this process alone) and TensorBoard log (a resumed run continues its own,
    where its checkpoint is), W&B, seeds, device. Only rank 0 creates a directory (the name of another torchrun rank's
    run is never written); a fresh directory that cannot be set up is removed again."""
    writer = None
    if checkpoint is not None:
        name, run_dir = checkpoint["run_name"], os.path.dirname(checkpoint["loaded_from"]) or "."
        note = f"; resuming {name} after iteration {checkpoint['iteration']} (global step {checkpoint['global_step']})"
    else:
        name, note = claim_run_directory(run_prefix(args)) if rank == 0 else (f"{run_prefix(args)}rank{rank}", "")
        run_dir = os.path.join("runs", name)
    if rank == 0:
        try:
            hold_run_directory(run_dir)
            threading.excepthook = quiet_log_threads
            say(f"run directory: {run_dir}{note}")
            if args.track:
                import wandb
                wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                           config=vars(args), name=name, save_code=True, id=wandb_run_id(),
                           resume="allow" if wandb_run_id() else None)
            # resumed: purge_step drops what was logged after the last checkpoint; with --track, a new W&B run (same
            # name) unless the run has a W&B id of its own (an AWS Batch job: every attempt continues one W&B run)
            writer = LogWriter(run_dir, purge_step=None if checkpoint is None else checkpoint["global_step"] + 1)
            if checkpoint is None:
                writer.add_text("hyperparameters", "|param|value|\n|-|-|\n%s" % "\n".join(
                    f"|{key}|{value}|" for key, value in vars(args).items()))
        except BaseException:
            if checkpoint is None:  # nothing half-made is left: the fresh directory goes again
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
    seed_everything(args.seed, args.torch_deterministic)
    return Run(args, script_name(type(args)), name, run_dir, writer, pick_device(args, local_rank), checkpoint,
               num_iterations, steps_per_iteration, rank)


def wandb_run_id() -> Optional[str]:
    """The W&B run id of an AWS Batch job: its job id, which every attempt (a retry after a Spot reclaim) keeps, so
    the attempts continue one W&B run. A node of a multi-node job (`<id>#<node>`) is its job; an array child
    (`<id>:<index>`) is a run of its own. None outside Batch: W&B makes a new id."""
    job_id = os.environ.get("AWS_BATCH_JOB_ID", "").split("#")[0]
    return re.sub(r"[^A-Za-z0-9_-]", "-", job_id) or None


# 3. Checkpoints. One dict written by torch.save that loads with torch.load(weights_only=True): the run's entries
# (script, args, run_name, iteration, global_step, finished, rng, envs, next_obs) and the script's own state. Nothing
# in a checkpoint or a model file is a pickled Python object: torch's weights-only reader rebuilds tensors, numbers,
# strings, bytes, lists, tuples and dicts, and refuses anything else (a class, a function), so loading one runs no code.
def checkpoint_path_of(path: str) -> str:
    """A checkpoint file, or a run directory's checkpoint.pt; a missing one fails in one line, and so does a path that
    cannot be looked into (a directory without the permission to read it), saying why."""
    candidate = os.path.join(path, "checkpoint.pt") if os.path.isdir(path) else path
    try:
        os.stat(candidate)
    except (FileNotFoundError, NotADirectoryError):
        fail(f"no checkpoint at {candidate}")
    except OSError as e:
        fail(f"cannot read {candidate}: {describe_os_error(e)}")
    if not os.path.isfile(candidate):
        fail(f"no checkpoint at {candidate}")
    return candidate

def first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__

def describe_os_error(e: OSError) -> str:
    """An OSError in words a user acts on: a full disk, a quota or a file-size limit says so."""
    words = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
             errno.EFBIG: "the file-size limit (ulimit -f) is reached", errno.EROFS: "the file system is read-only"}
    reason = e.strerror or first_line(e)
    return f"{words[e.errno]} ({reason})" if e.errno in words else reason

# the entries every checkpoint holds, besides the script's own
RUN_ENTRIES = ("script", "args", "run_name", "iteration", "global_step", "finished", "rng", "envs", "next_obs")

# Integrity. torch.save writes a zip archive; save_checkpoint then adds one more record to it, the SHA-256 of every
# other record (its name, size and bytes), which torch.load ignores. A reader recomputes the digest before it reads
# anything else, so a changed byte anywhere (a tensor, the pickled structure) fails, naming the file.
CHECKSUM_RECORD = "cleanrl.sha256"

def records_digest(archive: zipfile.ZipFile) -> str:
    digest = hashlib.sha256()
    for info in archive.infolist():
        if info.filename.rsplit("/", 1)[-1] == CHECKSUM_RECORD:
            continue
        digest.update(f"{info.filename}\0{info.file_size}\0".encode())
        with archive.open(info) as record:
            while chunk := record.read(1 << 22):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()

def add_checksum(path: str) -> None:
    with zipfile.ZipFile(path, "a") as archive:
        folder = archive.namelist()[0].split("/")[0]
        archive.writestr(f"{folder}/{CHECKSUM_RECORD}", records_digest(archive))

def verify_checksum(path: str, what: str, hint: str = "") -> None:
    """Fail in one line, leaving the file as it is, when the torch file at path does not match its checksum; a file
    from before checksums (no record) is read with a warning."""
    try:
        with zipfile.ZipFile(path) as archive:
            records = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == CHECKSUM_RECORD]
            if not records:
                warn(f"{path} has no checksum (an older version wrote it): its contents are not verified")
                return
            expected, actual = archive.read(records[-1]).decode("ascii", "replace"), records_digest(archive)
    except zipfile.BadZipFile as e:  # a record whose CRC-32 fails, a torn archive
        fail(f"{what} {path} is damaged ({first_line(e)}); the file is left as it is{hint}")
    except (OSError, EOFError, zlib.error) as e:
        fail(f"cannot read {what} {path}: {describe_os_error(e) if isinstance(e, OSError) else first_line(e)}")
    if expected != actual:
        fail(f"{what} {path} is damaged: its contents do not match the checksum written with them; the file is left "
             f"as it is{hint}")

def read_torch_file(path: str, what: str, hint: str = ""):
    """torch.load(path) on the CPU, weights only, after verify_checksum; any failure to read (not a torch file, torn,
    damaged, unreadable, a pickle of anything but plain data) fails in one line: the weights-only unpickler raises
    many exception types on foreign bytes (KeyError on a text file). A torch file (a zip archive) is memory-mapped
    (private, copy-on-write): a checkpoint's replay memory (7 GB for DQN on Atari) is copied from the page cache into
    the script's arrays instead of first into memory of its own, so a resume needs it once, not twice. Other bytes
    are read plainly, so the error names what they are. `hint` ends the line of a damaged file."""
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as e:
        fail(f"cannot read {what} {path}: {describe_os_error(e)}")
    if is_zip:
        verify_checksum(path, what, hint)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except pickle.UnpicklingError as e:  # the weights-only reader met a class or a function, and refused it
        named = re.search(r"GLOBAL [\w.]+", str(e))
        fail(f"cannot read {what} {path}: it holds Python objects, not only data ("
             f"{named[0] if named else first_line(e)}); such a file is never loaded")
    except Exception as e:  # noqa: BLE001 - whatever the bytes were, they are not a readable torch file
        fail(f"cannot read {what} {path}: {type(e).__name__}" + (f": {first_line(e)}" if str(e) else ""))

def load_checkpoint(path: str, script: str, hint: str = "") -> dict:
    """Read a checkpoint on the CPU and check that this script wrote it, whole. `loaded_from` (not saved) is its
    path: a resumed run goes on writing in the checkpoint's directory, wherever it is started."""
    checkpoint = read_torch_file(path, "checkpoint", hint)
    found = checkpoint.get("script") if isinstance(checkpoint, dict) else None
    if found != script:
        fail(f"{path} is not a checkpoint of {script}" + (f" (it was written by {found})" if found else ""))
    missing = [key for key in RUN_ENTRIES if key not in checkpoint]
    if missing or not isinstance(checkpoint["args"], dict):
        fail(f"{path} is not a whole checkpoint of {script}: it lacks {', '.join(missing or ['args'])}")
    return checkpoint | {"loaded_from": path}

# how a damaged checkpoint is got past: a run keeps one checkpoint, the latest
DAMAGED_HINT = ("; a run keeps no earlier checkpoint: restore this one from a copy, or start the run again without "
                "--resume")

def find_resume_checkpoint(args, script: str) -> Optional[dict]:
    """The checkpoint --resume names, or None for a fresh run. `auto` (for automatic restarts of the same command)
    continues the newest run of this env id, exp name and seed, if any; if it has finished, the process exits 0. A
    run directory that cannot be looked into fails, naming it: `auto` never silently starts over beside a run."""
    if args.resume is None:
        return None
    if args.resume != "auto":
        path = checkpoint_path_of(args.resume)
        hold_run_directory(os.path.dirname(path) or ".")
        checkpoint = load_checkpoint(path, script, DAMAGED_HINT)
        if checkpoint["finished"]:
            fail(f"{path} is the end of a finished run (global step {checkpoint['global_step']}); nothing to resume")
        return checkpoint
    prefix = run_prefix(args)
    try:
        names = os.listdir("runs")
    except FileNotFoundError:
        return None
    except OSError as e:
        fail(f"--resume auto cannot look for the runs of {prefix}* in runs/: {describe_os_error(e)}")
    # only the names start() gives: {prefix}{unix time}, or {prefix}{unix time}-{n} after a clash in one second
    started = {}
    for name in names:
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", name[len(prefix):]) if name.startswith(prefix) else None
        if match is None:
            continue
        path = os.path.join("runs", name, "checkpoint.pt")
        try:
            os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # a run that saved no checkpoint
        except OSError as e:
            fail(f"--resume auto cannot look into runs/{name}: {describe_os_error(e)}; make it readable, or move it "
                 "away to start a new run")
        started[path] = (int(match[1]), int(match[2] or 1))
    if not started:
        return None
    newest = max(started, key=started.get)
    hold_run_directory(os.path.dirname(newest))
    checkpoint = load_checkpoint(newest, script, DAMAGED_HINT)
    if checkpoint["finished"]:  # a restart after the run ended must not train again
        say(f"{os.path.dirname(newest)} has already finished; nothing to resume")
        raise SystemExit(0)
    return checkpoint

def resumed_args(args_cls, checkpoint: dict):
    """The checkpoint's flags, the given ones on top; only ALLOWED_ON_RESUME may differ (else not the same run)."""
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

def rng_state() -> dict:
    """The global generators of python, numpy and torch (CPU and every visible GPU), as weights_only-safe types."""
    np_state = np.random.get_state(legacy=False)
    return {"python": random.getstate(), "numpy_key": torch.as_tensor(np_state["state"]["key"].astype(np.int64)),
            "numpy_pos": int(np_state["state"]["pos"]),
            "numpy_gauss": (int(np_state["has_gauss"]), float(np_state["gauss"])), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state({"bit_generator": "MT19937", "has_gauss": state["numpy_gauss"][0],
                         "state": {"key": state["numpy_key"].numpy().astype(np.uint32), "pos": state["numpy_pos"]},
                         "gauss": state["numpy_gauss"][1]})
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])

# The environments' state as data. A checkpoint holds no pickled Python object, so loading one runs no code: the state
# of a vector env is read off its objects' attributes as plain values (numbers, strings, arrays as bytes, generator
# states as JSON) and written back, attribute by attribute, into envs built by the same code. Only the objects gymnasium
# builds (envs, wrappers, vector envs, spaces) are entered; what a constructor makes (functions, closures, specs, enums,
# renderers) is never saved and stays as built. Every value is tagged: ("array", dtype, shape, bytes), ("list", items),
# ("object", class name, {attribute: value}), ...; a plain str, int, float, bool or None stands for itself.
STATE_OBJECTS = (gym.Env, gym.vector.VectorEnv, gym.Space)
ARRAY_KINDS = "biufc"  # bool, int, unsigned, float, complex: arrays of numbers only (never object arrays)
BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
SKIP, MISSING = object(), object()

class EnvStateError(ValueError):
    """A saved environment state that does not describe these environments (or is malformed)."""

def class_name(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"

def encode_state(value, seen: set):
    """`value` as tagged plain data, or SKIP where it holds something that is not data (a function, say)."""
    kind = type(value)
    if value is None or kind in (bool, float, str):
        return value
    if kind is int:
        return value if -2**63 <= value < 2**63 else ("int", str(value))
    if isinstance(value, np.generic) and value.dtype.kind in ARRAY_KINDS:
        return ("scalar", value.dtype.str, value.tobytes())
    if kind is np.ndarray and value.dtype.kind in ARRAY_KINDS:
        return ("array", value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes())
    if kind is np.random.Generator:
        return ("generator", json.dumps(value.bit_generator.state))
    if kind in (list, tuple, deque, dict):
        pairs = value.items() if kind is dict else enumerate(value)
        items = [(encode_state(k, seen), encode_state(v, seen)) for k, v in pairs]
        if any(k is SKIP or v is SKIP for k, v in items):
            return SKIP
        if kind is dict:
            return ("dict", [list(item) for item in items])
        values = [v for _, v in items]
        return ("deque", value.maxlen, values) if kind is deque else (kind.__name__, values)
    if isinstance(value, STATE_OBJECTS) and hasattr(value, "__dict__"):
        if id(value) in seen:  # an object met before (a space shared by two layers) is restored where first met
            return ("seen",)
        seen.add(id(value))
        attributes = {name: encode_state(attr, seen) for name, attr in vars(value).items()}
        return ("object", class_name(value), {k: v for k, v in attributes.items() if v is not SKIP})
    return SKIP

def array_dtype(dtype: str) -> np.dtype:
    if type(dtype) is not str or np.dtype(dtype).kind not in ARRAY_KINDS:
        raise EnvStateError(f"an array of dtype {dtype!r}")
    return np.dtype(dtype)

def restore_state(current, saved, where: str = "envs", depth: int = 0):
    """The value `saved` (encode_state's) describes; an object is written into `current`, its counterpart in the
    freshly built envs, which must be of the same class. Raises EnvStateError when they do not match."""
    if depth > 64:
        raise EnvStateError(f"{where} is nested too deeply")
    if saved is None or type(saved) in (bool, int, float, str):
        return saved
    if type(saved) is not tuple or not saved or type(saved[0]) is not str:
        raise EnvStateError(f"{where} holds a {type(saved).__name__}, not a saved value")
    tag, body = saved[0], saved[1:]
    try:
        if tag == "int":
            return int(body[0][:100])
        if tag == "scalar":
            dtype = array_dtype(body[0])
            if len(body[1]) != dtype.itemsize:
                raise EnvStateError(f"{where}: {len(body[1])} bytes for one {dtype}")
            return np.frombuffer(body[1], dtype)[0]
        if tag == "array":
            dtype, shape = array_dtype(body[0]), tuple(int(n) for n in body[1])
            if len(body[2]) != dtype.itemsize * math.prod(shape):
                raise EnvStateError(f"{where}: {len(body[2])} bytes for a {dtype} array of shape {shape}")
            return np.frombuffer(body[2], dtype).reshape(shape).copy()
        if tag == "generator":
            state = json.loads(body[0])
            if state.get("bit_generator") not in BIT_GENERATORS:
                raise EnvStateError(f"{where}: unknown bit generator {state.get('bit_generator')!r}")
            generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
            generator.bit_generator.state = state
            return generator
        if tag in ("list", "tuple", "deque"):
            items = body[-1]
            if type(items) is not list:
                raise EnvStateError(f"{where}: a {tag} without a list of items")
            same = type(current).__name__ == tag and len(current) == len(items)
            values = [restore_state(current[i] if same else MISSING, item, f"{where}[{i}]", depth + 1)
                      for i, item in enumerate(items)]
            if tag == "deque":
                return deque(values, maxlen=None if body[0] is None else int(body[0]))
            return values if tag == "list" else tuple(values)
        if tag == "dict":
            restored = {}
            for key, value in body[0]:
                key = restore_state(MISSING, key, f"{where} key", depth + 1)
                inner = current.get(key, MISSING) if type(current) is dict else MISSING
                restored[key] = restore_state(inner, value, f"{where}[{key!r}]", depth + 1)
            return restored
        if tag == "seen":
            if current is MISSING:
                raise EnvStateError(f"{where} has no counterpart in these environments")
            return current
        if tag == "object":
            name, attributes = body
            if current is MISSING or class_name(current) != name:
                found = "nothing" if current is MISSING else class_name(current)
                raise EnvStateError(f"{where} was a {name}; these environments have {found} there")
            for attr, value in attributes.items():
                vars(current)[attr] = restore_state(vars(current).get(attr, MISSING), value, f"{where}.{attr}",
                                                    depth + 1)
            return current
    except EnvStateError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        raise EnvStateError(f"{where}: a malformed {tag!r} entry ({type(e).__name__}: {first_line(e)})") from None
    raise EnvStateError(f"{where}: unknown entry {tag!r}")

def env_state(envs: gym.vector.VectorEnv) -> tuple[Optional[tuple], str]:
    """The vector env's state as data (encode_state), or (None, why not): for a SyncVectorEnv of pure-Python envs,
    every layer's attributes (sub-envs, wrappers, generators, elapsed steps, statistics). Envs whose state lives
    outside Python (MuJoCo, Box2D and Atari: gymnasium's EzPickle envs) would come back freshly reset, so they are
    refused."""
    layers = [envs]
    while isinstance(layers[-1], gym.vector.VectorWrapper):
        layers.append(layers[-1].env)
    if not isinstance(layers[-1], gym.vector.SyncVectorEnv):
        return None, f"{type(layers[-1]).__name__} is not a SyncVectorEnv"
    for sub_env in layers[-1].envs:
        if isinstance(sub_env.unwrapped, gym.utils.EzPickle):
            return None, f"{type(sub_env.unwrapped).__name__} keeps its state outside Python, where it cannot be saved"
        wrapper = sub_env
        while isinstance(wrapper, gym.Wrapper):
            if isinstance(wrapper, gym.wrappers.RecordVideo):
                return None, "the video recorder (--capture-video) holds the frames of the episode under way"
            wrapper = wrapper.env
    return encode_state(envs, set()), ""

def load_env_state(envs: gym.vector.VectorEnv, state, path: str) -> bool:
    """Put a saved env_state into envs built by the same code (same wrappers, same number of envs); False, with a
    note, for a state an older version saved as a pickle, which is never loaded (loading a pickle can run code)."""
    if isinstance(state, (bytes, bytearray)):
        say(f"note: {path} holds its environments' state as a pickle (an older version wrote it), which is never "
            "loaded: the episodes in progress restart")
        return False
    try:
        restore_state(envs, state)
    except EnvStateError as e:
        fail(f"cannot restore the environments' state from {path}: {e}")
    return True

def state_of(obj):
    """A checkpoint entry for a stateful object: a state_dict, a tensor (a learned scalar such as SAC's log alpha),
    a numpy Generator's state as JSON text (its 128-bit integers fit no tensor; text loads with weights_only), or a
    torch Generator's state (a byte tensor)."""
    if isinstance(obj, np.random.Generator):
        return json.dumps(obj.bit_generator.state)
    if isinstance(obj, torch.Generator):
        return obj.get_state()
    return obj.detach().cpu().clone() if isinstance(obj, torch.Tensor) else obj.state_dict()

def load_state_of(obj, state) -> None:
    """Put a state_of entry back. A generator saved by the other kind (a replay memory sampled on the host by a run
    now resumed on a GPU, or the reverse) is seeded from the saved state instead: the run goes on, not exactly."""
    host, saved_on_host = isinstance(obj, np.random.Generator), isinstance(state, str)
    if isinstance(obj, (np.random.Generator, torch.Generator)) and host != saved_on_host:
        raw = state.encode() if saved_on_host else state.numpy().tobytes()
        seed = int.from_bytes(hashlib.sha256(raw).digest()[:8], "little")
        if host:
            obj.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        else:
            obj.manual_seed(seed)
    elif isinstance(obj, np.random.Generator):
        obj.bit_generator.state = json.loads(state)
    elif isinstance(obj, torch.Generator):
        obj.set_state(state)
    elif isinstance(obj, torch.Tensor):
        with torch.no_grad():
            obj.copy_(state)
    else:
        obj.load_state_dict(state)

class FailedWrites:
    """A binary file that remembers why its first failed write failed: torch.save reports one as a RuntimeError
    ("unexpected pos ..."), which says nothing of a full disk."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self.file.flush()

def save_checkpoint(checkpoint, path: str) -> None:
    """Atomic and sealed: write path.tmp.{pid} (no two processes share one), add its checksum record, fsync, os.replace
    over path; a kill leaves the old or the new file, never a torn one. A failed write (a full disk, a quota, an I/O
    error) fails in one line that says why, the old file intact and no .tmp left behind."""
    tmp, sink = f"{path}.tmp.{os.getpid()}", None
    try:
        with open(tmp, "wb") as f:
            sink = FailedWrites(f)
            torch.save(checkpoint, sink)
        add_checksum(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # the rename itself reaches the disk with the directory
            directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            os.fsync(directory)
            os.close(directory)
    except BaseException as e:  # also a kill signal's exception or a bug: never leave the .tmp behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
        # torch.save reports a failed write as a RuntimeError, zipfile a torn archive as BadZipFile
        if not isinstance(e, (OSError, RuntimeError, zipfile.BadZipFile)):
            raise
        cause = sink.error if sink is not None and sink.error is not None else e
        kept = "the previous one is intact" if os.path.exists(path) else "nothing was written"
        fail(f"cannot save {path}: {describe_os_error(cause) if isinstance(cause, OSError) else first_line(cause)}; "
             f"{kept}")

def find_non_finite(losses: dict, modules: dict) -> Optional[str]:
    """The first non-finite loss (a host float), parameter of an nn.Module or learned tensor in `modules`, or None.
    One isfinite over all parameters concatenated (one host sync); only if it fails, a search for the name."""
    for name, value in losses.items():
        if not math.isfinite(value):
            return f"{name} ({value})"
    named = [(f"{key}.{name}", p) for key, m in modules.items() if isinstance(m, nn.Module)
             for name, p in m.named_parameters()]
    named += [(key, t) for key, t in modules.items() if isinstance(t, torch.Tensor)]
    if not named or bool(torch.isfinite(torch.cat([p.detach().reshape(-1) for _, p in named])).all()):
        return None
    return next(f"parameter {name}" for name, p in named if not bool(torch.isfinite(p).all()))

class StopSignal:
    """SIGINT and SIGTERM (docker stop, AWS Batch, a Spot reclaim) only set `received`; the training loop reads it
    at its next safe point, saves a checkpoint and exits 128 + the signal's number (130, 143), as the default action
    would: schedulers (AWS Batch's retry rules, torchrun) then see a run that did not finish. A second signal stops
    at once (the default action)."""

    def __init__(self):
        self.received: Optional[str] = None
        self.exit_status = 128 + signal.SIGTERM  # also of a rank stopped because another rank got the signal
        self.interrupting = False  # inside an evaluation: a signal stops it at once (bounded_evaluation)
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received, self.exit_status = signal.Signals(signum).name, 128 + signum
            if self.interrupting:
                raise EvaluationStopped(self.received)
        else:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

class EvaluationStopped(Exception):
    """An evaluation stopped by a signal (its name) or by --eval-max-seconds (None)."""

    def __init__(self, signal_name: Optional[str]):
        super().__init__(signal_name)
        self.signal_name = signal_name

def bounded_evaluation(evaluate: Callable[[], list], seconds: float, stop: StopSignal) -> list:
    """evaluate(), stopped by SIGINT or SIGTERM as soon as the signal arrives (between two Python instructions, so
    after the environment step under way) and after `seconds` (SIGALRM): either raises EvaluationStopped."""
    def out_of_time(signum, frame):
        raise EvaluationStopped(None)

    previous = signal.signal(signal.SIGALRM, out_of_time)
    stop.interrupting = True
    try:
        if stop.received:
            raise EvaluationStopped(stop.received)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        return evaluate()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        stop.interrupting = False

class Progress:
    """Steps, SPS and the mean of the last 20 returns on stderr: on a terminal one self-rewriting line (at most 4
    draws a second, so it can be called every step), elsewhere (a log file) a plain line every `interval` s."""

    def __init__(self, total_steps: int, enabled: bool, interval: float):
        self.total_steps, self.enabled, self.interval = total_steps, enabled, interval
        self.terminal, self.returns = sys.stderr.isatty(), deque(maxlen=20)
        self.last_draw, self.drawn = time.monotonic(), False

    def episode(self, episodic_return: float) -> None:
        self.returns.append(float(episodic_return))

    def recent_return(self) -> str:
        return f"{np.mean(self.returns):.1f}" if self.returns else "-"

    def update(self, global_step: int, sps: int, during: str = "") -> None:
        """`during`: a long part of an iteration under way (PPG's auxiliary phase), shown in place of the speed."""
        now, last = time.monotonic(), global_step >= self.total_steps and not during
        too_soon = not last and now - self.last_draw < (0.25 if self.terminal else self.interval)
        if not self.enabled or too_soon or last and not self.terminal:  # off a terminal the summary line says the rest
            return
        self.last_draw, self.drawn = now, True
        percent, speed = 100 * global_step // self.total_steps, during or f"{sps} SPS"
        if self.terminal:  # (\x1b[K clears what a longer line left to the right)
            sys.stderr.write(f"\r{global_step}/{self.total_steps} steps ({percent}%) | {speed} | "
                             f"return {self.recent_return()}  \x1b[K")
        else:
            sys.stderr.write(f"progress: step {global_step}/{self.total_steps} ({percent}%), {speed}, "
                             f"mean return of the last 20 episodes {self.recent_return()}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.terminal and self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.drawn = False


# 4. The handle a training loop talks to
# benchmark/profile_split.py sets it to a file name: the run profiles (cProfile) the span its SPS measures and
# writes the stats there (Run.dump_profile); unset, nothing is profiled
PROFILE_ENV = "CLEANRL_PROFILE"
# Tensor operators (a * b, x[i] = y) run in C slots that cProfile never sees called: their time would count as the
# own time of the line's function. Under the profiler each one is wrapped in a Python function named after it
# (`Tensor.__mul__`), which profile_split counts as torch.
TENSOR_OPERATORS = tuple(f"__{op}__" for op in (
    "add radd iadd sub rsub isub mul rmul imul truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod rmod pow "
    "rpow ipow matmul rmatmul neg pos abs invert and rand iand or ror ior xor rxor ixor lshift rshift lt le gt ge "
    "eq ne getitem setitem bool float int index").split())


def attribute_tensor_operators() -> None:
    """Wrap torch.Tensor's operators that are C slots (not Python functions) in named Python functions; only for
    profiling: each call gains a Python frame."""
    def wrap(name: str, slot: Callable) -> Callable:
        def operator(*args):
            return slot(*args)
        # the profile names the wrapper Tensor.__mul__ and the C call inside it after the wrapper's qualname
        operator.__code__ = operator.__code__.replace(co_name=f"Tensor.{name}")
        operator.__qualname__ = f"torch.Tensor.{name}"
        return operator

    for name in TENSOR_OPERATORS:
        slot = getattr(torch.Tensor, name, None)
        if slot is not None and not hasattr(slot, "__code__"):
            setattr(torch.Tensor, name, wrap(name, slot))


class Run:
    """One training run and the calls its loop makes. `state` maps checkpoint keys to the script's stateful objects;
    an entry may be None (saved as None, left as built on resume), e.g. a replay memory only --save-buffer keeps."""

    def __init__(self, args, script, name, run_dir, writer, device, checkpoint, num_iterations, steps_per_iteration,
                 rank):
        self.args, self.script, self.name, self.dir, self.writer = args, script, name, run_dir, writer
        self.device, self.checkpoint, self.num_iterations, self.rank = device, checkpoint, num_iterations, rank
        self.checkpoint_path, self.model_path = f"{self.dir}/checkpoint.pt", f"{self.dir}/{args.exp_name}.cleanrl_model"
        self.state, self.envs, self.stop = {}, None, StopSignal()
        self.progress = Progress(num_iterations * steps_per_iteration, args.progress and rank == 0,
                                 args.progress_interval)
        # a resumed run's progress line goes on with the returns it showed when stopped (older checkpoints: none)
        self.progress.returns.extend(self.resumed("recent_returns", []))
        self.wall_start, self.saved_any = time.time(), checkpoint is not None
        self.clock: Optional[tuple[float, int]] = None  # (time, global step) the SPS clock started at
        self.profiler: Optional[cProfile.Profile] = None  # with CLEANRL_PROFILE set: the measured span's profile
        self.threads = ThreadGuard() if device.type == "cpu" and args.torch_threads == 0 else None

    @property
    def global_step(self) -> int:
        """The step the run starts from: 0, or the checkpoint's."""
        return 0 if self.checkpoint is None else self.checkpoint["global_step"]

    def resumed(self, key: str, default=None):
        """A plain entry of the checkpoint (a counter the script saved), or default on a fresh run or where the
        checkpoint has no such entry (an entry only some checkpoints hold, or one a later version added)."""
        return default if self.checkpoint is None else self.checkpoint.get(key, default)

    def restore(self, envs, state: dict, seed: Optional[int]) -> tuple[np.ndarray, int, int]:
        """(first obs, first iteration, global step). A fresh run resets envs with `seed` (None: seeded when built).
        A resumed run (checkpoints fall between iterations) loads every object in `state`, the envs' state if saved
        (else episodes restart with unused seeds: seed + global step) and, last, the global RNGs."""
        self.envs, self.state = envs, state
        state_now, why = env_state(envs)
        if self.args.save_model and self.rank == 0 and state_now is None:
            say(f"note: the environments' state cannot be saved ({why}); a resumed run restarts its episodes")
        checkpoint, step = self.checkpoint, self.global_step
        for key, obj in state.items():
            if checkpoint is not None and key not in checkpoint:
                fail(f"{checkpoint['loaded_from']} has no {key!r} entry; it was not written by this version of "
                     f"{self.script}")
            if checkpoint is not None and obj is not None and checkpoint[key] is not None:
                try:
                    load_state_of(obj, checkpoint[key])
                except (RuntimeError, ValueError, KeyError, TypeError) as e:
                    fail(f"cannot restore {key!r} from {checkpoint['loaded_from']}: {first_line(e)}")
        if (checkpoint is not None and checkpoint["envs"] is not None
                and load_env_state(envs, checkpoint["envs"], checkpoint["loaded_from"])):
            obs = checkpoint["next_obs"].numpy()
        else:
            obs, _ = envs.reset(seed=seed + step) if seed is not None else envs.reset()
            if seed is not None:
                envs.action_space.seed(seed + step)
        if checkpoint is None:
            return obs, 1, 0
        set_rng_state(checkpoint["rng"])
        return obs, checkpoint["iteration"] + 1, step

    def log_episode(self, episodic_return: float, episodic_length: int, global_step: int) -> None:
        self.writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        self.writer.add_scalar("charts/episodic_length", episodic_length, global_step)
        self.progress.episode(episodic_return)

    def log_episodes(self, infos: dict, global_step: int) -> np.ndarray:
        """Log the episodes that ended this step (RecordEpisodeStatistics' info["episode"]); returns their envs."""
        ended = np.flatnonzero(infos["_episode"]) if "episode" in infos else np.empty(0, dtype=np.int64)
        for i in ended:
            self.log_episode(infos["episode"]["r"][i], infos["episode"]["l"][i], global_step)
        return ended

    def start_clock(self, global_step: int) -> None:
        """SPS counts from here: after the warm-up (compilation, CUDA graph recording, steps before learning)."""
        self.clock = (time.time(), global_step)
        if os.environ.get(PROFILE_ENV) and self.rank == 0 and self.profiler is None:
            attribute_tensor_operators()
            self.profiler, self.profile_from = cProfile.Profile(), self.clock
            self.profiler.enable()

    def dump_profile(self, global_step: int) -> None:
        """Write the profile of the measured span (from the first start_clock to the end of the loop) to the file
        CLEANRL_PROFILE names, and its steps and seconds beside it (the same name + .json)."""
        self.profiler.disable()
        path = os.environ[PROFILE_ENV]
        self.profiler.dump_stats(path)
        with open(path + ".json", "w") as f:
            json.dump({"first_step": self.profile_from[1], "last_step": global_step,
                       "seconds": time.time() - self.profile_from[0]}, f)

    def sps(self, global_step: int) -> Optional[int]:
        if self.clock is not None and global_step > self.clock[1]:
            return int((global_step - self.clock[1]) / max(time.time() - self.clock[0], 1e-9))

    def log_sps(self, global_step: int) -> None:
        if self.threads is not None:
            self.threads.check()
        sps = self.sps(global_step)
        if sps is not None and self.writer is not None:
            self.writer.add_scalar("charts/SPS", sps, global_step)

    def check_finite(self, losses: dict, global_step: int, where: str = "") -> None:
        """Stop in one line, saving nothing, when a loss or a parameter of the modules in `state` is NaN or inf."""
        problem = find_non_finite(losses, {k: v for k, v in self.state.items()
                                           if isinstance(v, (nn.Module, torch.Tensor))})
        if problem is None:
            return
        self.progress.close()
        self.close()
        if self.rank != 0:
            raise SystemExit(1)  # rank 0 found the same (the replicas are identical) and says it
        kept = "so the last good checkpoint is kept" if self.saved_any else "and no checkpoint was saved before"
        fail(f"non-finite {problem} at global step {global_step}{f' ({where})' if where else ''}; "
             f"stopped without saving, {kept}")

    def save(self, iteration: int, global_step: int, next_obs, finished: bool, **extra) -> Optional[dict]:
        """Write the checkpoint (rank 0): the run's entries, every object in `state`, and `extra` plain values.
        Returns what was written (None on the other ranks)."""
        if self.rank != 0:
            return None
        self.check_finite({}, global_step, f"iteration {iteration}")
        checkpoint = {
            "script": self.script, "args": asdict(self.args), "run_name": self.name, "iteration": iteration,
            "global_step": global_step, "finished": finished, "rng": rng_state(), "envs": env_state(self.envs)[0],
            "next_obs": torch.as_tensor(next_obs).cpu(), "recent_returns": list(self.progress.returns),
        } | {key: None if obj is None else state_of(obj) for key, obj in self.state.items()} | extra
        save_checkpoint(checkpoint, self.checkpoint_path)
        self.saved_any = True
        return checkpoint

    def end_of_iteration(self, iteration: int, global_step: int, next_obs, update: Optional[int] = -1,
                         stop: Optional[str] = "", **extra) -> None:
        """The safe point after each iteration: progress, a checkpoint every --checkpoint-frequency updates (`update`:
        this iteration's update count, None if none, -1 for `iteration`); on a signal, or a `stop` the script decided
        (all torchrun ranks alike; None: go on), a checkpoint (--save-model) and exit 128 + signal; the last:
        finish()."""
        # before the SPS clock starts (compilation, the random steps before learning) the line shows the rate since
        # this process started, not 0
        sps = self.sps(global_step)
        if sps is None:
            sps = int((global_step - self.global_step) / max(time.time() - self.wall_start, 1e-9))
        self.progress.update(global_step, sps)
        if iteration >= self.num_iterations:
            return
        stop = self.stop.received if stop == "" else stop
        update, every = iteration if update == -1 else update, self.args.checkpoint_frequency
        if self.args.save_model and (stop or update is not None and every > 0 and update % every == 0):
            self.save(iteration, global_step, next_obs, finished=False, **extra)
        if stop:
            self.stop_run(stop, global_step)

    def safe_point(self, iteration: int, global_step: int, next_obs, extra: Callable[[], dict], during: str) -> None:
        """A safe point inside an iteration that outlasts a stop's grace period (PPG's auxiliary phase, hours on a
        CPU), for single-process scripts: the progress line shows `during` (how far that part has come); on a signal,
        a checkpoint (--save-model) that says `iteration` and holds the entries `extra()` returns (where inside the
        next part of the work to go on; called only then), and exit 128 + signal."""
        self.progress.update(global_step, 0, during)
        if self.stop.received:
            if self.args.save_model:
                self.save(iteration, global_step, next_obs, finished=False, **extra())
            self.stop_run(self.stop.received, global_step)

    def stop_run(self, stop: str, global_step: int) -> NoReturn:
        """Say why the run stopped and where its checkpoint is, close everything, exit 128 + signal."""
        self.progress.close()
        if self.rank == 0:
            say(f"{stop}: stopped after global step {global_step}; " + (
                f"checkpoint saved to {self.checkpoint_path}" if self.args.save_model
                else "no --save-model, no checkpoint"))
        self.envs.close()
        self.close()
        raise SystemExit(self.stop.exit_status)

    def finish(self, global_step: int, next_obs, model, evaluate: Callable[[], list], **extra) -> None:
        """After the loop: with --save-model the final checkpoint, the model (state dict or dict of them), its
        evaluation. The end of a run is a transaction: the checkpoint holds the trained state marked unfinished until
        the model is written and evaluated, and is marked finished last. A failure or a signal before that leaves a run
        that --resume (or --resume auto) finishes: its loop has nothing left to do, so it writes the model and
        evaluates it again."""
        if self.profiler is not None:
            self.dump_profile(global_step)
        self.progress.close()
        self.envs.close()
        if self.args.save_model and self.rank == 0:
            final = self.save(self.num_iterations, global_step, next_obs, finished=False, **extra)
            save_checkpoint(model.state_dict() if isinstance(model, nn.Module) else
                            {k: m.state_dict() for k, m in model.items()}, self.model_path)
            say(f"model saved to {self.model_path}")
            self.evaluate_at_end(evaluate)
            self.writer.flush()
            save_checkpoint(final | {"finished": True}, self.checkpoint_path)
        if self.rank == 0:
            saved = f"; model {self.model_path}, checkpoint {self.checkpoint_path}" if self.args.save_model else ""
            elapsed = f"{time.time() - self.wall_start:.0f} s"
            resumed = f"; {elapsed} since resuming at step {self.global_step}"
            took = f" in {elapsed}" if self.checkpoint is None else resumed
            say(f"done: {global_step} steps{took}, mean return of the last "
                f"{len(self.progress.returns)} episodes {self.progress.recent_return()}; logs in {self.dir}{saved}")
        self.close()

    def evaluate_at_end(self, evaluate: Callable[[], list]) -> None:
        """The final evaluation, logged as eval/episodic_return: bounded by --eval-max-seconds (past it the run ends
        without an evaluation, with a warning: a retry would run out of time again), stopped at once by SIGINT or
        SIGTERM (exit 128 + signal; the run stays unfinished, so --resume evaluates it again)."""
        if self.args.eval_episodes == 0:
            say("eval: skipped (--eval-episodes 0)")
            return
        try:
            returns = bounded_evaluation(evaluate, self.args.eval_max_seconds, self.stop)
        except EvaluationStopped as e:
            if e.signal_name is None:
                warn(f"the evaluation did not end within --eval-max-seconds {self.args.eval_max_seconds:g}: stopped "
                     f"without a result (evaluate the model with --eval-only {self.model_path} and fewer "
                     "--eval-episodes or more --eval-max-seconds)")
                return
            say(f"{e.signal_name}: stopped the final evaluation; the model is saved to {self.model_path} and the run "
                "is not finished: --resume evaluates it again")
            self.close()
            raise SystemExit(self.stop.exit_status) from None
        for idx, episodic_return in enumerate(returns):
            self.writer.add_scalar("eval/episodic_return", episodic_return, idx)
        say(f"eval: mean return {np.mean(returns):.2f} +- {np.std(returns):.2f}")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


# 5. --eval-only: evaluate a saved model without creating a run directory
def saved_model_path(path: str) -> str:
    """What --eval-only names: a file, or a run directory's checkpoint.pt, else its .cleanrl_model."""
    if os.path.isdir(path):
        candidates = [os.path.join(path, "checkpoint.pt")] + sorted(glob.glob(os.path.join(path, "*.cleanrl_model")))
        path = next((c for c in candidates if os.path.isfile(c)), candidates[0])
    if not os.path.isfile(path):
        fail(f"no saved model at {path}")
    return path

def eval_only(args, model_key: str, make_model: Callable[[dict], nn.Module], evaluate: Callable) -> NoReturn:
    """Evaluate the model --eval-only names with evaluate(model, args, name, device), print mean and std, exit 0.
    A checkpoint brings its env id and holds the model under `model_key`; a .cleanrl_model (a state dict, or a dict
    of them, `model_key` among them) runs on --env-id. make_model(saved) builds the network for args.env_id."""
    script, path = script_name(type(args)), saved_model_path(args.eval_only)
    if path.endswith(".cleanrl_model"):
        saved = read_torch_file(path, "model")
        if not (isinstance(saved, dict) and isinstance(saved.get(model_key), dict)):
            saved = {model_key: saved}
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        saved = load_checkpoint(path, script)
        name, args.env_id = saved["run_name"], saved["args"]["env_id"]
    if args.eval_episodes < 1:
        fail(f"--eval-episodes must be at least 1, got {args.eval_episodes}")
    try:
        model = make_model(saved)
        model.load_state_dict(saved[model_key])
    except (RuntimeError, TypeError, AttributeError, KeyError) as e:
        fail(f"{path} does not hold a {script} model for {args.env_id}: {first_line(e)}")
    seed_everything(args.seed, args.torch_deterministic)
    device = pick_device(args)
    returns = evaluate_only(lambda: evaluate(model.to(device), args, name, device), args)
    say(f"eval: mean return {np.mean(returns):.2f} +- {np.std(returns):.2f} over {len(returns)} episodes of "
        f"{args.env_id}")
    raise SystemExit(0)

def evaluate_only(evaluate: Callable[[], list], args) -> list:
    """evaluate() for --eval-only, bounded as a run's final evaluation is: SIGINT or SIGTERM stops it at once (exit
    128 + signal, one line), and past --eval-max-seconds it fails in one line."""
    stop = StopSignal()
    say(f"evaluating: {args.eval_episodes} episodes of {args.env_id}, for at most {args.eval_max_seconds:g} s "
        "(--eval-max-seconds)")
    try:
        return bounded_evaluation(evaluate, args.eval_max_seconds, stop)
    except EvaluationStopped as e:
        if e.signal_name is None:
            fail(f"the evaluation did not end within --eval-max-seconds {args.eval_max_seconds:g}; ask for fewer "
                 "--eval-episodes or more --eval-max-seconds")
        say(f"{e.signal_name}: evaluation stopped")
        raise SystemExit(stop.exit_status) from None


# 6. Speed: --compile and --cudagraphs wrap a script's hot functions; the math stays the same
def check_speed_args(args) -> None:
    on_cuda, compiler = args.cuda and torch.cuda.is_available(), os.environ.get("CXX", "g++")
    if args.cudagraphs and not on_cuda:
        fail("--cudagraphs needs a CUDA device, and this run has none (CUDA unavailable or --no-cuda)")
    if args.compile and not on_cuda and shutil.which(compiler) is None:
        fail(f"--compile on CPU needs a C++ compiler and {compiler} was not found; install one or drop --compile")

def speed_up(fn: Callable, args, compile: bool = True) -> Callable:
    """fn (returning a tensor or a tuple of tensors) as written, or wrapped: --compile compiles it (torch.compile's
    default mode: the whole function in as few graphs as torch allows), --cudagraphs records it, compiled or not,
    into one CUDA graph (CudaGraph) and replays that. The math is the same. On the CPU, compiled random ops draw
    from torch's generator as eager code does (inductor's fallback_random: the compile parity tests rely on it); on
    CUDA they are fused into the kernels (other draws, the same distribution). compile=False: only recorded (a
    loop over thousands of steps, which dynamo would unroll into a graph that takes minutes to compile)."""
    if args.compile and compile:
        torch._inductor.config.fallback_random = not (args.cuda and torch.cuda.is_available())
        fn = torch.compile(fn)
    return CudaGraph(fn) if args.cudagraphs else fn

class CudaGraph:
    """fn recorded once into a CUDA graph and then replayed: one launch for all it does (forward, backward, gradient
    clipping, a capturable optimizer's step, a target network's update), with no host work between its kernels.
    The first `warmup` calls run as they are, on a side stream (they allocate the optimizer's state, let cuDNN and
    cuBLAS pick kernels, and compile); the next call is recorded, then replayed to do its work. Later calls copy
    their tensor arguments into the recorded ones (same shapes), replay, and return copies of the recorded outputs,
    which the next replay overwrites. Arguments that are not tensors (a bool, say) are part of the graph: each value
    gets one of its own. Each graph has its own memory pool, so the parameter gradients one graph records stay its
    own when another graph records gradients of the same parameters.
    What fn does outside CUDA kernels happens once, at recording: it must not read tensor values on the host (a
    synchronisation fails the recording), and its Python control flow may depend on its non-tensor arguments only."""

    def __init__(self, fn: Callable, warmup: int = 3):
        self.fn, self.warmup, self.graphs, self.calls = fn, warmup, {}, {}
        self.side = torch.cuda.Stream()

    def __call__(self, *args):
        key = tuple((i, arg) for i, arg in enumerate(args) if not isinstance(arg, torch.Tensor))
        self.calls[key] = self.calls.get(key, 0) + 1
        if key not in self.graphs and self.calls[key] <= self.warmup:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                out = self.fn(*args)
            torch.cuda.current_stream().wait_stream(self.side)
            return out
        if key not in self.graphs:
            inputs = [arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in args]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = self.fn(*inputs)
            self.graphs[key] = graph, inputs, outputs
        else:
            graph, inputs, outputs = self.graphs[key]
            for recorded, arg in zip(inputs, args):
                if isinstance(arg, torch.Tensor):
                    recorded.copy_(arg)
        graph.replay()
        return tuple(x.clone() for x in outputs) if isinstance(outputs, tuple) else outputs.clone()


# 7. Storage: replay memories
def available_memory(cuda: bool = False) -> tuple[int, str]:
    """(bytes, whose) that a new allocation can take now: with cuda (and a GPU) the free memory of this process's GPU
    (LOCAL_RANK's); else this machine's available RAM (MemAvailable: free memory and the caches the kernel can give
    back), or all of its RAM where /proc/meminfo cannot be read."""
    if cuda and torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        return torch.cuda.mem_get_info(index)[0], f"GPU {index} ({torch.cuda.get_device_name(index)}) has"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this machine has"
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"

def check_memory(flags: str, nbytes: int, what: str = "a replay memory", cuda: bool = False) -> None:
    """Fail in one line, before any work starts, when an allocation the flags size (`what`, `nbytes`) exceeds the
    memory available to it (available_memory: the GPU's with cuda, where the run uses one)."""
    have, whose = available_memory(cuda)
    if nbytes > have:
        fail(f"{flags} asks for {what} of {nbytes:,} bytes ({nbytes / 2**30:,.1f} GiB); {whose} {have:,} bytes "
             f"({have / 2**30:,.1f} GiB) available")

class ReplayBufferSamples(NamedTuple):
    observations: torch.Tensor  # (batch, *obs_shape)
    actions: torch.Tensor  # (batch, *action_shape), the action space's dtype (int64 for Discrete)
    next_observations: torch.Tensor  # (batch, *obs_shape), the true successor (final_obs at an episode end)
    rewards: torch.Tensor  # (batch,) float32
    terminations: torch.Tensor  # (batch,) float32: 1 only if the successor is terminal; a truncation stores 0

class MemoryState:
    """state_dict()/load_state_dict() of a replay memory (--save-buffer): its arrays (numpy, or tensors on a device)
    as CPU tensors, so a memory saved in host memory loads into one on a GPU and the reverse; the script saves the
    sampling Generator."""

    def state_dict(self) -> dict:
        state = {}
        for name, value in vars(self).items():
            if isinstance(value, (np.ndarray, torch.Tensor)):
                state[name] = torch.from_numpy(value) if isinstance(value, np.ndarray) else value.cpu()
            elif isinstance(value, (bool, np.bool_, int, np.integer)):
                state[name] = bool(value) if isinstance(value, (bool, np.bool_)) else int(value)
        return state

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            current = getattr(self, name)
            if not isinstance(current, (np.ndarray, torch.Tensor)):
                setattr(self, name, value)
            elif tuple(value.shape) != tuple(current.shape):
                fail(f"the checkpoint's replay memory {name} has shape {tuple(value.shape)}, not "
                     f"{tuple(current.shape)}")
            elif isinstance(current, np.ndarray):
                current[...] = value.numpy()
            else:
                current.copy_(value)

class ReplayBuffer(MemoryState):
    """A ring of the last `buffer_size` transitions (s, a, r, s', terminated), sampled uniformly; s' is the true
    successor (`true_next_obs`). Memory: 2 * buffer_size observations + actions + 8 bytes per transition."""

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                 seed: int):
        self.check_fits(buffer_size, observation_space, action_space)
        self.buffer_size, self.device, self.rng = buffer_size, device, np.random.default_rng(seed)
        self.staging = PinnedStaging(device)  # a sample goes to a GPU without a synchronisation
        self.observations = np.zeros((buffer_size, *observation_space.shape), dtype=observation_space.dtype)
        self.next_observations = np.zeros((buffer_size, *observation_space.shape), dtype=observation_space.dtype)
        self.actions = np.zeros((buffer_size, *action_space.shape), dtype=action_space.dtype)
        self.rewards = np.zeros(buffer_size, dtype=np.float32)
        self.terminations = np.zeros(buffer_size, dtype=np.float32)
        self.pos, self.full = 0, False  # the next slot to write; whether the ring has wrapped (every slot holds one)

    @staticmethod
    def nbytes_of(buffer_size: int, observation_space: gym.Space, action_space: gym.Space) -> int:
        def size(space):
            return int(np.prod(space.shape)) * np.dtype(space.dtype).itemsize
        return buffer_size * (2 * size(observation_space) + size(action_space) + 8)

    @staticmethod
    def check_fits(buffer_size: int, observation_space: gym.Space, action_space: gym.Space) -> None:
        check_memory(f"--buffer-size {buffer_size}", ReplayBuffer.nbytes_of(buffer_size, observation_space,
                                                                            action_space))

    def __len__(self) -> int:
        return self.buffer_size if self.full else self.pos

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminations: np.ndarray) -> None:
        """Store one step of every env (arrays with a leading num_envs axis), overwriting the oldest when full."""
        n = len(obs)
        # the slots pos .. pos + n - 1: a slice where they do not wrap (nearly always; the same writes, faster)
        end = self.pos + n
        idx = slice(self.pos, end) if end <= self.buffer_size else np.arange(self.pos, end) % self.buffer_size
        self.observations[idx], self.next_observations[idx] = obs, next_obs
        self.actions[idx] = np.asarray(actions).reshape((n, *self.actions.shape[1:]))
        self.rewards[idx], self.terminations[idx] = rewards, terminations
        self.full = self.full or self.pos + n >= self.buffer_size
        self.pos = (self.pos + n) % self.buffer_size

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement, as tensors on the buffer's device."""
        idx = self.rng.integers(0, len(self), size=batch_size)
        names = ("observations", "actions", "next_observations", "rewards", "terminations")
        return ReplayBufferSamples(*(self.staging.to_device(name, getattr(self, name)[idx]) for name in names))

class PinnedStaging:
    """Host arrays to the device without a synchronisation: each is copied into pinned (page-locked) host memory and
    sent from there with an asynchronous copy, which the host does not wait for (a copy from ordinary memory waits
    for the device to finish all it was given). Each named stream of arrays has two pinned buffers used in turn,
    and one is written again only once its last copy is done (an event): the host waits only when it is two steps
    ahead of the device."""

    def __init__(self, device: torch.device):
        self.device, self.buffers, self.turns = device, {}, {}

    def to_device(self, name: str, array: np.ndarray) -> torch.Tensor:
        if self.device.type != "cuda":  # nothing to send: the array as a tensor (no copy), as torch.as_tensor does
            return torch.as_tensor(array).to(self.device, non_blocking=True)
        array = np.ascontiguousarray(array)
        turn = self.turns[name] = self.turns.get(name, -1) + 1
        key = (name, turn % 2)
        if key not in self.buffers or self.buffers[key][0].shape != array.shape:
            pinned = torch.empty(array.shape, dtype=torch.from_numpy(array[:0]).dtype, pin_memory=True)
            self.buffers[key] = pinned, torch.cuda.Event()
        pinned, copied = self.buffers[key]
        copied.synchronize()
        pinned.numpy()[...] = array
        out = pinned.to(self.device, non_blocking=True)
        copied.record()
        return out

def host_array(shape: tuple, dtype, device: torch.device) -> np.ndarray:
    """A zeroed numpy array for values the environments return, to be sent to `device` in one copy: in pinned host
    memory when that is a GPU (so the copy, with non_blocking=True, does not make the host wait), else ordinary."""
    return torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype,
                       pin_memory=device.type == "cuda").numpy()

class DeviceReplayBuffer(MemoryState):
    """ReplayBuffer's ring, in a GPU's memory and sampled there: a sample is a few gathers on the device, with no
    copy from the host. What the environments return (numpy) comes over through PinnedStaging; the indices come from
    a torch Generator on the device (`rng`, seeded with `seed`). The same transitions, fields and checkpoint entries
    as ReplayBuffer."""

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                 seed: int):
        def ring(shape: tuple, dtype) -> torch.Tensor:
            return torch.zeros((buffer_size, *shape), dtype=torch.from_numpy(np.zeros(0, dtype)).dtype, device=device)

        self.buffer_size, self.device = buffer_size, device
        self.observations = ring(observation_space.shape, observation_space.dtype)
        self.next_observations = ring(observation_space.shape, observation_space.dtype)
        self.actions = ring(action_space.shape, action_space.dtype)
        self.rewards, self.terminations = ring((), np.float32), ring((), np.float32)
        self.pos, self.full = 0, False
        self.rng = torch.Generator(device).manual_seed(seed)
        self.staging = PinnedStaging(device)

    def __len__(self) -> int:
        return self.buffer_size if self.full else self.pos

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminations: np.ndarray) -> None:
        """Store one step of every env (arrays with a leading num_envs axis), overwriting the oldest when full."""
        n = len(obs)
        end = self.pos + n
        # the slots pos .. pos + n - 1: a slice where they do not wrap (nearly always), else indices
        slots = slice(self.pos, end) if end <= self.buffer_size else (
            torch.arange(self.pos, end, device=self.device) % self.buffer_size)
        actions = np.asarray(actions).reshape((n, *self.actions.shape[1:]))
        for name, values in (("observations", obs), ("next_observations", next_obs), ("actions", actions),
                             ("rewards", rewards), ("terminations", terminations)):
            ring = getattr(self, name)
            ring[slots] = self.staging.to_device(name, np.asarray(values)).to(ring.dtype)
        self.full = self.full or end >= self.buffer_size
        self.pos = end % self.buffer_size

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement, gathered on the device."""
        idx = torch.randint(0, len(self), (batch_size,), device=self.device, generator=self.rng)
        return ReplayBufferSamples(self.observations[idx], self.actions[idx], self.next_observations[idx],
                                   self.rewards[idx], self.terminations[idx])

def replay_buffer(buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                  seed: int):
    """The replay memory for a run on `device`: on a GPU, in its memory when it takes at most half of what is free
    there (DeviceReplayBuffer; the rest is left to the networks and the compiled graphs), else in host memory
    (ReplayBuffer, whose fit was checked before the run started), with a note."""
    if device.type == "cuda":
        nbytes = ReplayBuffer.nbytes_of(buffer_size, observation_space, action_space)
        free = available_memory(cuda=True)[0]
        if nbytes <= free // 2:
            return DeviceReplayBuffer(buffer_size, observation_space, action_space, device, seed)
        say(f"note: the replay memory ({nbytes / 2**30:.1f} GiB) takes more than half of the GPU's free memory "
            f"({free / 2**30:.1f} GiB): it is kept in host memory and each sample is copied over")
    return ReplayBuffer(buffer_size, observation_space, action_space, device, seed)

def true_next_obs(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The successor of every env's last observation under same-step autoreset: where an episode ended
    (terminated or truncated), next_obs is the next episode's first; the true one is info["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs

class FrameReplayBuffer(MemoryState):
    """Replay memory for frame-stacked observations (4 x 84 x 84 uint8) that stores every frame once: each env keeps
    a ring of single frames; stacks are rebuilt at sample time. The transition in slot s has the observation
    frames[s - stack + 1 .. s] and the next observation frames[s - stack + 2 .. s + 1]. Per step and env, `add` writes
    the observation's `stack` frames as they are (padding included) unless it continues the ring (every ordinary
    step, and after a lost life), so a sampled stack is what the agent saw and never mixes two games; then the next
    observation's newest frame to slot s + 1 (at a game end, that of info["final_obs"]: truncated games bootstrap from
    their real last state). `valid` slots (frames s - stack + 1 .. s + 1 all still in the ring) are sampled; writing
    slot w clears valid at w and at w + stack - 1 (whose stack would now reach across the write head).
    Capacity: ceil(buffer_size / num_envs) * (1 + 1/64) + stack slots per env; a game costs `stack` frames beyond
    its transitions, so buffer_size transitions fit while games average 256 steps or more (random Breakout games,
    about 180 steps: about 99.3%). Per slot: frame (84 * 84 = 7056 bytes) + action (8) + reward (4) + termination (4)
    + valid (1) = 7073 bytes; 1,000,000 transitions, one env: 1,015,629 slots = 7.18e9 bytes = 6.69 GiB (stacked obs
    and next obs: 52.6 GiB). touch=True writes every page now (np.zeros maps them lazily), so a lack of memory shows
    at start, not hours into a run."""

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, num_envs: int,
                 device: torch.device, seed: int, touch: bool = True):
        self.check_fits(buffer_size, num_envs, observation_space.shape, np.dtype(action_space.dtype).itemsize)
        self.stack = observation_space.shape[0]
        self.capacity = self.slots(buffer_size, num_envs, self.stack)
        self.num_envs, self.device, self.rng = num_envs, device, np.random.default_rng(seed)
        self.staging = PinnedStaging(device)  # a sample goes to a GPU without a synchronisation
        self.frames = np.zeros((num_envs, self.capacity, *observation_space.shape[1:]), dtype=observation_space.dtype)
        self.actions = np.zeros((num_envs, self.capacity, *action_space.shape), dtype=action_space.dtype)
        self.rewards, self.terminations = (np.zeros((num_envs, self.capacity), dtype=np.float32) for _ in range(2))
        self.valid = np.zeros((num_envs, self.capacity), dtype=bool)
        self.newest = np.full(num_envs, -1, dtype=np.int64)  # slot of each env's newest frame
        self.written = np.zeros(num_envs, dtype=np.int64)  # frames written so far per env
        if touch:
            for array in (self.frames, self.actions, self.rewards, self.terminations, self.valid):
                array.fill(0)

    @staticmethod
    def slots(buffer_size: int, num_envs: int, stack: int) -> int:
        """Frame slots per env: buffer_size / num_envs transitions, 1/64 spare, and one stack."""
        per_env = -(-buffer_size // num_envs)
        return per_env + per_env // 64 + stack

    @classmethod
    def check_fits(cls, buffer_size: int, num_envs: int, obs_shape: tuple = (4, 84, 84), action_bytes: int = 8) -> None:
        frame = int(np.prod(obs_shape[1:]))  # uint8 frames
        check_memory(f"--buffer-size {buffer_size}",
                     num_envs * cls.slots(buffer_size, num_envs, obs_shape[0]) * (frame + action_bytes + 9))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.frames, self.actions, self.rewards, self.terminations, self.valid))

    def __len__(self) -> int:
        """The number of transitions that can be sampled."""
        return int(self.valid.sum())

    def _write_frame(self, env: int, frame: np.ndarray) -> int:
        slot = (self.newest[env] + 1) % self.capacity
        self.frames[env, slot] = frame
        self.valid[env, [slot, (slot + self.stack - 1) % self.capacity]] = False
        self.newest[env] = slot
        self.written[env] += 1
        return slot

    def _stack_slots(self, slots: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return (slots[:, None] + offsets[None, :]) % self.capacity

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminations: np.ndarray) -> None:
        """Store one step of every env: obs and next_obs (num_envs, stack, H, W), the others (num_envs,)."""
        stack_offsets = np.arange(-self.stack + 1, 1)
        for env in range(self.num_envs):
            ring_stack = self.frames[env, self._stack_slots(np.array([self.newest[env]]), stack_offsets)[0]]
            if not (self.written[env] >= self.stack and np.array_equal(ring_stack, obs[env])):
                for frame in obs[env]:
                    self._write_frame(env, frame)
            if not np.array_equal(next_obs[env][:-1], obs[env][1:]):
                raise ValueError("the next observation does not continue the observation's frame stack")
            slot = self.newest[env]
            self._write_frame(env, next_obs[env][-1])
            self.actions[env, slot], self.rewards[env, slot] = actions[env], rewards[env]
            self.terminations[env, slot], self.valid[env, slot] = terminations[env], True

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement among the valid slots, as tensors."""
        if not self.valid.any():
            raise ValueError("the replay memory holds no complete transition yet")
        envs, slots = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        filled = np.minimum(self.written, self.capacity)
        while len(slots) < batch_size:  # rejection sampling: almost every written slot is valid
            e = self.rng.integers(0, self.num_envs, size=2 * batch_size)
            s = (self.rng.random(2 * batch_size) * filled[e]).astype(np.int64)
            keep = self.valid[e, s]
            envs, slots = np.concatenate([envs, e[keep]]), np.concatenate([slots, s[keep]])
        return self.transitions(envs[:batch_size], slots[:batch_size])

    def transitions(self, envs: np.ndarray, slots: np.ndarray) -> ReplayBufferSamples:
        """The transitions stored in the given (env, slot) pairs, stacks rebuilt from the frame rings."""
        # window: (batch, stack + 1, H, W); the observation is its first `stack` frames, the next its last
        window = self.frames[envs[:, None], self._stack_slots(slots, np.arange(-self.stack + 1, 2))]
        arrays = (window[:, :-1], self.actions[envs, slots], window[:, 1:], self.rewards[envs, slots],
                  self.terminations[envs, slots])
        names = ("observations", "actions", "next_observations", "rewards", "terminations")
        return ReplayBufferSamples(*(self.staging.to_device(name, a) for name, a in zip(names, arrays)))

def atari_true_next_obs(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """true_next_obs for AtariGameStatistics envs: after a lost life next_obs goes on; where a game ended
    (info["_episode"]) the true one is info["final_obs"] (dense on ale-vector, an object array on gymnasium)."""
    real_next_obs = next_obs.copy()
    if "_episode" in infos:
        game_over = np.asarray(infos["_episode"], dtype=bool)
        real_next_obs[game_over] = np.stack(list(infos["final_obs"][game_over]))
    return real_next_obs


# 8. Environments
def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            return gym.wrappers.RecordVideo(gym.make(env_id, render_mode="rgb_array"), f"videos/{run_name}")
        return gym.make(env_id)
    return thunk

def make_envs(env_id: str, num_envs: int, capture_video: bool, run_name: str) -> gym.vector.VectorEnv:
    """num_envs copies of env_id with episode statistics in a SyncVectorEnv (Async costs 10x on 2 cores), same-step
    autoreset: an episode's last step returns the next one's first observation and the true last in info["final_obs"],
    so every step is a real transition and a truncated episode can bootstrap from its final observation."""
    envs = gym.vector.SyncVectorEnv([make_env(env_id, i, capture_video, run_name) for i in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


# Atari environments with the preprocessing of Mnih et al. 2015 (OpenAI Baselines' atari_wrappers): noop reset (up
# to 30), FIRE at game start, 4-frame skip with a max over the last two frames, 84x84 grayscale (cv2 INTER_AREA), a
# stack of the last 4 frames (zeros before the first), episodic life and sign-clipped rewards for learning.
ATARI_BACKENDS = ("ale-vector", "gymnasium")

def import_ale():
    """ale-py (the `atari` extra), imported on first use so that the other scripts never need it."""
    try:
        import ale_py
    except ImportError as e:
        fail(f"the Atari scripts need ale-py: pip install -e '.[atari]' ({e})")
    gym.register_envs(ale_py)
    return ale_py

def atari_emulator_settings(env_id: str) -> dict:
    """The emulator settings of an Atari id: `<Game>NoFrameskip-v4` no sticky actions (the DQN and PPO papers, CleanRL's
    benchmarks), `ALE/<Game>-v5` sticky with p=0.25 (Machado et al. 2018); minimal action set, 108000 frames a game.
    Ids that skip frames themselves (`Breakout-v4`), v0, `-ram` and non-ale-py ids are refused (`error:`, exit 1)."""
    import_ale()
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as e:
        fail(f"cannot make environment {env_id!r}: {e}")
    if spec.entry_point != "ale_py.env:AtariEnv":
        fail(f"{env_id} is not an Atari game; use an id like BreakoutNoFrameskip-v4 or ALE/Breakout-v5")
    kwargs = spec.kwargs
    supported = env_id.endswith("NoFrameskip-v4") or (spec.namespace == "ALE" and spec.version == 5)
    if not supported or kwargs.get("obs_type", "rgb") != "rgb":
        fail(f"{env_id} is not supported; use a <Game>NoFrameskip-v4 or ALE/<Game>-v5 id (image observations)")
    return dict(game=kwargs["game"], repeat_action_probability=float(kwargs.get("repeat_action_probability", 0.25)),
                full_action_space=bool(kwargs.get("full_action_space", False)),
                max_num_frames_per_episode=int(kwargs.get("max_num_frames_per_episode", 108000)))

class FireOnReset(gym.Wrapper):
    """Press FIRE for one emulator frame after each game reset, before the noops, like the native use_fire_reset
    (Breakout waits for FIRE). Under the frame skip, so it costs one frame; after a lost life the agent fires."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self.fire_action = meanings.index("FIRE") if "FIRE" in meanings else None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if self.fire_action is not None:
            obs, _, terminated, truncated, info = self.env.step(self.fire_action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info

def make_atari_env(env_id: str, idx: int, capture_video: bool, run_name: str, noop_max: int, max_frames: int):
    """Thunk for the gymnasium backend: one whole game per episode (life loss is handled by AtariGameStatistics)."""

    def thunk():
        settings = atari_emulator_settings(env_id)
        # frameskip=1: AtariPreprocessing skips frames itself (v5 ids skip 4 by default).
        kwargs = dict(frameskip=1, repeat_action_probability=settings["repeat_action_probability"],
                      full_action_space=settings["full_action_space"], max_num_frames_per_episode=max_frames)
        if capture_video and idx == 0:  # every emulator frame in colour, whole games (all lives)
            env = gym.wrappers.RecordVideo(gym.make(env_id, render_mode="rgb_array", **kwargs), f"videos/{run_name}")
        else:
            env = gym.make(env_id, **kwargs)
        env = gym.wrappers.AtariPreprocessing(FireOnReset(env), noop_max=noop_max, frame_skip=4, screen_size=84,
                                              grayscale_obs=True)
        # padding_type="zero": the first observation of a game is [0, 0, 0, frame], as in the native env.
        return gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
    return thunk

class RecordFirstGameFrames(gym.vector.VectorWrapper):
    """Video for ale-vector, which renders nothing: env 0's newest 84x84 frame, one mp4 per game on the capped cubic
    schedule (games 0, 1, 8, 27, ..., 1000, 2000, ...), 15 fps. Wrap the full-game env, under AtariGameStatistics."""

    def __init__(self, env: gym.vector.VectorEnv, video_folder: str):
        super().__init__(env)
        self.video_folder, self.game_index, self.frames = video_folder, 0, []
        # imported here: it imports moviepy, which a run without --capture-video should not wait for
        from gymnasium.utils.save_video import capped_cubic_video_schedule, save_video
        self.schedule, self.save = capped_cubic_video_schedule, save_video

    def _add(self, stacked_obs: np.ndarray) -> None:
        if self.schedule(self.game_index):
            self.frames.append(np.repeat(stacked_obs[-1][..., None], 3, axis=-1))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.frames = []
        self._add(obs[0])
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if terminated[0] or truncated[0]:
            self._add(info["final_obs"][0])  # same-step autoreset: obs[0] already shows the next game
            if self.frames:
                self.save(self.frames, self.video_folder, episode_index=self.game_index, fps=15)
            self.game_index, self.frames = self.game_index + 1, []
        self._add(obs[0])
        return obs, reward, terminated, truncated, info

class AtariGameStatistics(gym.vector.VectorWrapper):
    """The learning signal and the real score over a vector env of whole games. step() returns reward sign(r) if
    clip_rewards, else the raw score change; terminated: game over, or (terminal_on_life_loss) a life lost
    (info["life_lost"]; the game goes on, nothing bootstraps across it); truncated: the frame limit; at a game end
    (same-step autoreset: info["final_obs"]) RecordEpisodeStatistics' info["episode"] = {"r": raw score over all
    lives, "l": agent steps, "t": seconds since the wrapper was made} and its mask info["_episode"]."""

    def __init__(self, env: gym.vector.VectorEnv, terminal_on_life_loss: bool = True, clip_rewards: bool = True):
        super().__init__(env)
        self.terminal_on_life_loss, self.clip_rewards = terminal_on_life_loss, clip_rewards
        self.start_time = time.perf_counter()
        self.game_returns = np.zeros(self.num_envs, dtype=np.float64)
        self.game_lengths, self.lives = (np.zeros(self.num_envs, dtype=np.int64) for _ in range(2))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.game_returns[:], self.game_lengths[:] = 0, 0
        self.lives = np.asarray(info["lives"], dtype=np.int64).copy()
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        raw_reward = np.asarray(reward, dtype=np.float64)
        self.game_returns += raw_reward
        self.game_lengths += 1
        game_over = np.logical_or(terminated, truncated)
        # at a game end, info["lives"] already belongs to the next game, so only compare within a game
        lives = np.asarray(info["lives"], dtype=np.int64)
        info["life_lost"] = life_lost = np.logical_and(lives < self.lives, np.logical_not(game_over))
        self.lives = lives.copy()
        if game_over.any():
            info["episode"] = {"r": np.where(game_over, self.game_returns, 0.0),
                               "l": np.where(game_over, self.game_lengths, 0),
                               "t": np.where(game_over, round(time.perf_counter() - self.start_time, 6), 0.0)}
            info["_episode"] = game_over
            self.game_returns[game_over], self.game_lengths[game_over] = 0, 0
        terminated = np.logical_or(terminated, life_lost) if self.terminal_on_life_loss else terminated
        reward = np.sign(raw_reward) if self.clip_rewards else reward
        return obs, reward.astype(np.float32), terminated, truncated, info

def make_atari_envs(env_id: str, num_envs: int, backend: str = "ale-vector", capture_video: bool = False,
                    run_name: str = "", noop_max: int = 30, terminal_on_life_loss: bool = True,
                    clip_rewards: bool = True, max_frames: Optional[int] = None) -> gym.vector.VectorEnv:
    """`num_envs` preprocessed Atari games, same-step autoreset; reset(seed=s) seeds env i with s + i; observations
    uint8 (num_envs, 4, 84, 84), scaled in the network. "ale-vector": ale-py's threaded C++ AtariVectorEnv, its reward
    clipping and episodic life off (its episodic_life resets the game at each lost life); "gymnasium": the wrappers
    above. They agree frame for frame but for the reset noops: native 0..noop_max-1 from its own RNG (one fewer after
    FIRE), gymnasium 1..noop_max from np_random. capture_video: env 0 (gymnasium: in colour; ale-vector: as seen).
    max_frames overrides the id's frame limit per game."""
    if backend not in ATARI_BACKENDS:
        fail(f"unknown env backend {backend!r}; choose one of {', '.join(ATARI_BACKENDS)}")
    settings = atari_emulator_settings(env_id)
    max_frames = settings["max_num_frames_per_episode"] if max_frames is None else max_frames
    if backend == "gymnasium":
        envs = gym.vector.SyncVectorEnv(
            [make_atari_env(env_id, i, capture_video, run_name, noop_max, max_frames) for i in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        return AtariGameStatistics(envs, terminal_on_life_loss, clip_rewards)
    from ale_py.vector_env import AtariVectorEnv
    envs = AtariVectorEnv(
        settings["game"], num_envs, repeat_action_probability=settings["repeat_action_probability"],
        full_action_space=settings["full_action_space"], max_num_frames_per_episode=max_frames,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, img_height=84, img_width=84, grayscale=True, stack_num=4,
        frameskip=4, maxpool=True, noop_max=noop_max, use_fire_reset=True, episodic_life=False, life_loss_info=False,
        reward_clipping=False)
    envs = RecordFirstGameFrames(envs, f"videos/{run_name}") if capture_video else envs
    return AtariGameStatistics(envs, terminal_on_life_loss, clip_rewards)


# Procgen, from envpool (the procgen package does not install on current Python)
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot", "heist",
                 "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")

def procgen_import_problem(exc: ImportError) -> str:
    """The one-line reason why envpool's Procgen cannot be used, naming what to install."""
    chain, e = [], exc
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    if "Qt" in " ".join(chain):
        return ("envpool's Procgen needs the Qt 5 runtime, which is missing: install Debian's libqt5gui5 "
                f"(apt-get install libqt5gui5) ({chain[-1]})")
    return f"the Procgen scripts need envpool (pip install 'envpool>=0.8') and Debian's libqt5gui5: {chain[0]}"

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
    """`starpilot`, easy -> StarpilotEasy-v0 (envpool's id); an envpool Procgen id passes through unchanged."""
    game = env_id.lower()
    if game in PROCGEN_GAMES:
        resolved = f"{game.capitalize()}{distribution_mode.capitalize()}-v0"
        if resolved not in known_ids:
            modes = sorted(i[len(game) : -len("-v0")].lower() for i in known_ids if i.lower().startswith(game))
            fail(f"{env_id} has no {distribution_mode!r} distribution (it has: {', '.join(modes)})")
        return resolved
    modes = ("Easy", "Hard", "Extreme", "Memory", "Exploration")
    if env_id in {f"{g.capitalize()}{m}-v0" for g in PROCGEN_GAMES for m in modes} & set(known_ids):
        return env_id
    fail(f"unknown Procgen game {env_id!r}; use one of {', '.join(PROCGEN_GAMES)} or an envpool id like "
         "StarpilotEasy-v0")

class VideoRecorder:
    """Env 0's episodes from its 64x64 RGB observations (envpool has no video wrapper), on the capped cubic schedule."""

    def __init__(self, folder: str, name_prefix: str = "rl-video"):
        from gymnasium.utils.save_video import capped_cubic_video_schedule, save_video  # moviepy: only when asked

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
