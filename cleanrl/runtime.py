# docs: docs/contributing.md (the layout of cleanrl/)
"""The run's lifecycle, which every script in cleanrl/ drives: 1. start-up (the flags parsed and checked, the run
opened), 2. `Run`, the handle a training loop talks to (restore, check, checkpoint, stop, finish; what it logs is its
other half, run_log.RunLog), 3. --eval-only. Beside it: flags.py (the run flags and flag ranges), checkpoints.py (runs on disk), speed.py (device, threads,
--compile, --cudagraphs), replay_memory.py, the environments (environments.py, atari_envs.py, procgen_envs.py,
evaluation.py) and messages.py."""

import atexit
import contextlib
import dataclasses
import glob
import io
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict
from typing import Callable, NoReturn, Optional

import numpy as np
import torch
import torch.nn as nn
import tyro

from checkpoints import (
    PytreeState, claim_run_directory, env_state, find_resume_checkpoint, hold_run_directory, load_checkpoint,
    load_env_state, load_state_of, read_torch_file, rng_state, rng_state_problem, run_prefix, save_checkpoint,
    set_rng_state, state_mismatch, state_of,
)
from flags import (
    ALLOWED_ON_RESUME, check_flag_ranges, check_flags_given_once, check_run_flags, resumed_args, saved_args,
    script_name,
)
from messages import fail, first_line, protect_output, say, warn
from run_log import LogWriter, Progress, RunLog, quiet_log_threads
from speed import ThreadGuard, check_speed_args, pick_device


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
        budget = checkpoint["args"].get("total_timesteps")
        if args.total_timesteps != budget:
            say(f"note: --total-timesteps {args.total_timesteps} extends the run's {budget}: the schedules that follow "
                "the budget (the learning rate's anneal, epsilon) go on as if it had been planned from the start")
    if args.checkpoint_frequency > 0 and not args.save_model:
        fail("--checkpoint-frequency writes checkpoints, which needs --save-model")
    if getattr(args, "save_buffer", False) and not args.save_model:  # the off-policy scripts
        fail("--save-buffer puts the replay memory into checkpoints, which needs --save-model")
    if getattr(args, "learning_starts", 0) >= args.total_timesteps:  # the off-policy scripts
        warn(f"--learning-starts {args.learning_starts} is not below --total-timesteps {args.total_timesteps}: no "
             "update will happen (a smoke run of the loop)")
    check_speed_args(args)
    if checkpoint is None and args.init_from is not None:
        read_initial_model(args.init_from)  # a missing or unreadable file fails here, before any work
    return args, checkpoint


def read_initial_model(path: str) -> tuple[str, dict]:
    """(file, entries) of the model --init-from names: a .cleanrl_model, or the one in a run directory. A model
    file holds one state dict (a script whose model is one network) or a dict of them by name, as its script's
    checkpoints name them; entries is the latter, the former under the key None."""
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.cleanrl_model")))
        if len(found) != 1:
            fail(f"--init-from {path}: a run directory with one .cleanrl_model, found {len(found)}")
        path = found[0]
    elif not os.path.isfile(path):
        fail(f"--init-from {path}: no such file")
    saved = read_torch_file(path, "model")
    if not isinstance(saved, dict) or not saved:
        fail(f"--init-from {path} is not a model file (a state dict, or a dict of them)")
    named = all(isinstance(v, dict) for v in saved.values())
    return path, saved if named else {None: saved}


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


def rank_share(checkpoint: Optional[dict], rank: int, world_size: int, args, envs_per_rank: int) -> Optional[dict]:
    """This rank's view of a multi-rank checkpoint, which holds every rank's generators and env states: on as many
    ranks as wrote it, its own. On another number of ranks (torchrun's elastic restart, a resume on more or fewer
    GPUs) the global batch stays: the --num-envs envs are split anew, and the model, optimizer, schedule and step
    count are every rank's alike; each rank's random streams start anew (seed + rank + global step), the games in
    progress restart, and rank 0 says so."""
    if checkpoint is None:
        return None
    saved_ranks = len(checkpoint["rng"])
    if saved_ranks == world_size:
        return checkpoint | {"rng": checkpoint["rng"][rank], "envs": checkpoint["envs"][rank]}
    if rank == 0:
        say(f"note: the checkpoint's world size was {saved_ranks}, this resume's is {world_size}: {envs_per_rank} "
            f"of the {args.num_envs} envs a rank, new random streams, new games")
    seed_everything(args.seed + rank + checkpoint["global_step"], args.torch_deterministic)
    return checkpoint | {"rng": rng_state(), "envs": None}


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


def init_process_group(backend: Optional[str], rank: int, world_size: int, device: torch.device) -> str:
    """Join torchrun's process group when there is one (world_size > 1), with `backend` (None: NCCL on a GPU, gloo on
    a CPU), which is returned; this rank leaves the group at any exit. Rendezvous at MASTER_ADDR:MASTER_PORT (set by
    torchrun), blocking until all ranks joined."""
    import torch._dynamo  # noqa: F401 (see atexit below)
    import torch.distributed as dist

    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if backend == "nccl" and device.type != "cuda":
        fail("--backend nccl needs CUDA; use --backend gloo (the default on CPU)")
    if world_size == 1:
        return backend
    # torchrun keeps one key-value store for all restarts of a job, where the ranks publish their addresses; without
    # a prefix per restart, a restarted rank can read a dead rank's address from the failed attempt and fail to
    # connect (seen with gloo after --max-restarts restarted a killed rank).
    store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world_size))
    store = dist.PrefixStore(f"restart_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                            device_id=device if device.type == "cuda" else None)
    # At any exit, also on an error, this rank leaves the group cleanly; torchrun then stops the other ranks. Leaving
    # joins the group's worker threads while the interpreter is still alive. (torch._dynamo, which building Adam
    # imports, is imported above: imported after the group forms it keeps the group alive past
    # destroy_process_group, and a gloo thread releasing the last collective's tensors during interpreter shutdown
    # then aborts the rank: "terminate called without an active exception", seen on torch 2.13.)
    atexit.register(dist.destroy_process_group)
    return backend


def seed_everything(seed: int, torch_deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def start(args, checkpoint: Optional[dict], num_iterations: int, steps_per_iteration: int, rank: int = 0,
          local_rank: int = 0) -> "Run":
    """Open the run: directory (held by this process alone) and TensorBoard log (a resumed run continues its own,
    where its checkpoint is), W&B, seeds, device. Only rank 0 creates a directory (the name of another torchrun rank's
    run is never written); a fresh directory that cannot be set up is removed again."""
    writer = None
    if checkpoint is not None:  # the entries only the script knows how to check (a multi-GPU rank's own generators)
        problem = rng_state_problem(checkpoint["rng"])
        if checkpoint["iteration"] > num_iterations:
            problem = f"it says iteration {checkpoint['iteration']}, past this run's last ({num_iterations})"
        if problem:
            fail(f"{checkpoint['loaded_from']} is not a checkpoint this script can continue: {problem}")
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
                # W&B takes its run id and resume mode from WANDB_RUN_ID and WANDB_RESUME where they are set
                # (cloud/durable.py sets them in an AWS Batch job, so that its attempts continue one W&B run)
                wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                           config=vars(args), name=name, save_code=True)
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


def find_non_finite(losses: dict, modules: dict) -> Optional[str]:
    """The first non-finite loss (a host float), parameter of an nn.Module, learned tensor or JAX pytree
    (PytreeState) in `modules`, or None. One isfinite over all parameters concatenated (one host sync); only if it
    fails, a search for the name."""
    for name, value in losses.items():
        if not math.isfinite(value):
            return f"{name} ({value})"
    for key, tree in modules.items():
        if isinstance(tree, PytreeState) and (leaf := tree.non_finite()) is not None:
            return f"parameter {key}{leaf}"
    named = [(f"{key}.{name}", p) for key, m in modules.items() if isinstance(m, nn.Module)
             for name, p in m.named_parameters()]
    named += [(key, t) for key, t in modules.items() if isinstance(t, torch.Tensor)]
    if not named or bool(torch.isfinite(torch.cat([p.detach().reshape(-1) for _, p in named])).all()):
        return None
    return next(f"parameter {name}" for name, p in named if not bool(torch.isfinite(p).all()))


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignal:
    """SIGINT, SIGTERM (docker stop, AWS Batch, a Spot reclaim) and SIGHUP (a closed terminal, a dropped ssh session)
    only set `received`; the training loop reads it at its next safe point, saves a checkpoint and exits 128 + the
    signal's number (130, 143, 129), as the default action would: schedulers (AWS Batch's retry rules, torchrun) then
    see a run that did not finish. A second signal stops at once (the default action)."""

    def __init__(self):
        self.received: Optional[str] = None
        self.exit_status = 128 + signal.SIGTERM  # also of a rank stopped because another rank got the signal
        self.interrupting = False  # inside an evaluation: a signal stops it at once (bounded_evaluation)
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)

    def time_up(self) -> None:
        """--max-runtime has passed (a timer thread): the loop stops at its next safe point, as on SIGTERM."""
        if self.received is None:
            self.received, self.exit_status = "--max-runtime", 128 + signal.SIGTERM

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


def saved_observations(checkpoint: dict, space) -> np.ndarray:
    """The checkpoint's next_obs, which must be what these envs observe: their shape, in a dtype numpy holds."""
    saved = checkpoint["next_obs"]
    if tuple(saved.shape) != tuple(space.shape) or saved.dtype in (torch.bfloat16, torch.complex32):
        fail(f"{checkpoint['loaded_from']} holds next_obs of shape {tuple(saved.shape)} ({saved.dtype}); these "
             f"environments observe {tuple(space.shape)} ({space.dtype})")
    return saved.numpy()


class Run(RunLog):
    """One training run and the calls its loop makes: its lifecycle here (restore, check, checkpoint, stop, finish),
    what it logs in run_log.RunLog (episodes, SPS, the progress line). `state` maps checkpoint keys to the script's
    stateful objects; an entry may be None (saved as None, left as built on resume), e.g. a replay memory only
    --save-buffer keeps."""

    def __init__(self, args, script, name, run_dir, writer, device, checkpoint, num_iterations, steps_per_iteration,
                 rank):
        self.args, self.script, self.name, self.dir = args, script, name, run_dir
        self.device, self.checkpoint, self.num_iterations, self.rank = device, checkpoint, num_iterations, rank
        self.checkpoint_path, self.model_path = f"{self.dir}/checkpoint.pt", f"{self.dir}/{args.exp_name}.cleanrl_model"
        self.state, self.envs, self.stop = {}, None, StopSignal()
        if args.max_runtime > 0:  # this process's time limit: a stop at the first safe point after it
            timer = threading.Timer(args.max_runtime, self.stop.time_up)
            timer.daemon = True
            timer.start()
        super().__init__(writer, Progress(num_iterations * steps_per_iteration, args.progress and rank == 0,
                                          args.progress_interval),
                         ThreadGuard() if device.type == "cpu" and args.torch_threads == 0 else None)
        # a resumed run's progress line goes on with the returns it showed when stopped (older checkpoints: none)
        self.progress.returns.extend(self.resumed("recent_returns", []))
        self.wall_start, self.saved_any = time.time(), checkpoint is not None
        self.updates = self.resumed("updates", 0)  # the update count end_of_iteration saw last

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
                    why = state_mismatch(obj, checkpoint[key]) or first_line(e)
                    fail(f"cannot restore {key!r} from {checkpoint['loaded_from']}: {why}")
        if (checkpoint is not None and checkpoint["envs"] is not None
                and load_env_state(envs, checkpoint["envs"], checkpoint["loaded_from"])):
            obs = saved_observations(checkpoint, envs.observation_space)
        else:
            obs, _ = envs.reset(seed=seed + step) if seed is not None else envs.reset()
            if seed is not None:
                envs.action_space.seed(seed + step)
        if checkpoint is None:
            if self.args.init_from is not None:
                self.init_weights(self.args.init_from)
            return obs, 1, 0
        set_rng_state(checkpoint["rng"])
        return obs, checkpoint["iteration"] + 1, step

    def init_weights(self, path: str) -> None:
        """--init-from: the saved model's weights into this fresh run's networks, everything else as built. A file of
        one state dict goes into the first network of `state` (the model its script saves); a file of named ones
        into the entries of those names (normalization statistics too). A target network (its name says `target`)
        becomes a copy of the loaded network it was built as. What does not fit fails in one line naming the
        entries and shapes that differ, and the fresh run directory goes again."""
        path, entries = read_initial_model(path)
        modules = {key: obj for key, obj in self.state.items() if isinstance(obj, (nn.Module, PytreeState))}
        if None in entries:
            entries = {next(iter(modules), None): entries[None]}
        loaded = []
        for key, entry in entries.items():
            obj = self.state.get(key)
            try:
                if obj is None or isinstance(obj, (torch.optim.Optimizer, np.random.Generator, torch.Generator)):
                    raise KeyError(f"this script's model has no entry {key!r} (it has {', '.join(modules)})")
                load_state_of(obj, entry)
            except (RuntimeError, ValueError, KeyError, TypeError) as e:
                self.abandon()
                fail(f"--init-from {path} does not fit this {self.script} model: "
                     f"{state_mismatch(obj, entry) or first_line(e)}")
            loaded.append(key)
        for key, target in modules.items():
            built_as = key.replace("target", "").strip("_")  # target_actor: actor; qf1_target: qf1
            twin = [k for k in loaded if "target" in key and k != key and k in modules and k.endswith(built_as)
                    and isinstance(target, nn.Module) and state_mismatch(target, modules[k].state_dict()) is None]
            if twin:  # (target_network: q_network)
                target.load_state_dict(modules[twin[0]].state_dict())
        say(f"initialized {', '.join(loaded)} from {path}; the optimizer, schedules and step count start afresh")

    def abandon(self) -> None:
        """A fresh run that failed before its first step: its directory goes, so nothing half-made is left."""
        self.close()
        if self.checkpoint is None and self.rank == 0:
            shutil.rmtree(self.dir, ignore_errors=True)

    def learning_starts(self, learning_starts: int) -> int:
        """The global step after which an off-policy script learns: --learning-starts, or, on a resume from a
        checkpoint without the replay memory (no --save-buffer), that many steps after the checkpoint's: the memory
        starts empty and refills first (so that resume is not exact)."""
        if self.checkpoint is None or self.checkpoint.get("replay_buffer") is not None:
            return learning_starts
        learning_starts += self.global_step
        say(f"note: the checkpoint has no replay memory (no --save-buffer); learning resumes after global step "
            f"{learning_starts}")
        return learning_starts

    def check_finite(self, losses: dict, global_step: int, where: str = "") -> None:
        """Stop in one line, saving nothing, when a loss or a parameter of the modules in `state` is NaN or inf."""
        problem = find_non_finite(losses, {k: v for k, v in self.state.items()
                                           if isinstance(v, (nn.Module, torch.Tensor, PytreeState))})
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

    def end_of_iteration(self, iteration: int, global_step: int, next_obs, updates: Optional[int] = None,
                         stop: Optional[str] = "", **extra) -> None:
        """The safe point after each iteration: progress, a checkpoint every --checkpoint-frequency iterations (or,
        for a loop that counts its gradient `updates`, saved as the checkpoint's "updates", every that many updates);
        on a signal, or a `stop` the script decided (all torchrun ranks alike; None: go on), a checkpoint
        (--save-model) and exit 128 + signal; after the last iteration: finish()."""
        # before the SPS clock starts (compilation, the random steps before learning) the line shows the rate since
        # this process started, not 0
        sps = self.sps(global_step)
        if sps is None:
            sps = int((global_step - self.global_step) / max(time.time() - self.wall_start, 1e-9))
        self.progress.update(global_step, sps)
        if iteration >= self.num_iterations:
            return
        stop = self.stop.received if stop == "" else stop
        count, counted = iteration, True
        if updates is not None:  # counted when this iteration updated
            count, counted, self.updates, extra["updates"] = updates, updates != self.updates, updates, updates
        every = self.args.checkpoint_frequency
        if self.args.save_model and (stop or counted and every > 0 and count % every == 0):
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
            returns = self.progress.returns_said(run_over=True)
            say(f"done: {global_step} steps{took}, {returns}; logs in {self.dir}{saved}")
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

def saved_model_path(path: str) -> str:
    """What --eval-only names: a file, or a run directory's checkpoint.pt, else its .cleanrl_model."""
    if os.path.isdir(path):
        candidates = [os.path.join(path, "checkpoint.pt")] + sorted(glob.glob(os.path.join(path, "*.cleanrl_model")))
        path = next((c for c in candidates if os.path.isfile(c)), candidates[0])
    if not os.path.isfile(path):
        fail(f"no saved model at {path}")
    return path


# the flags an --eval-only run takes from its own command line (or their defaults), never from the checkpoint
EVALUATION_OWN = {*ALLOWED_ON_RESUME, "eval_only", "capture_video", "eval_max_frames"}


def eval_only(args, model_key: str, make_model: Callable[[dict], object], evaluate: Callable) -> NoReturn:
    """Evaluate the model --eval-only names with evaluate(model, args, name, device), print mean and std, exit 0.
    A checkpoint brings its env id and its flags, which replace the ones the command line does not give (in `args`
    itself, so a network that a flag shapes is rebuilt as it was trained); a .cleanrl_model (a state dict, or a dict
    of them, `model_key` among them) runs on --env-id and the command line's flags. make_model(saved) builds the
    network for args; one that does not fit the file fails in one line naming the entries and shapes that differ."""
    script, path = script_name(type(args)), saved_model_path(args.eval_only)
    if path.endswith(".cleanrl_model"):
        saved = read_torch_file(path, "model")
        if not (isinstance(saved, dict) and isinstance(saved.get(model_key), dict)):
            saved = {model_key: saved}
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        saved = load_checkpoint(path, script)
        if not isinstance(saved["args"].get("env_id"), str):
            fail(f"{path} names no env id to evaluate on")
        trained = saved_args(type(args), saved["args"], path)  # checked as typed: its env id imports no module, say
        merged = tyro.cli(type(args), default=trained)  # the command line's flags on top of the saved ones
        for field in dataclasses.fields(args):
            if field.name not in EVALUATION_OWN:
                setattr(args, field.name, getattr(merged, field.name))
        check_run_flags(args)  # as resumed_args checks its merged flags
        name, args.env_id = saved["run_name"], saved["args"]["env_id"]
    if args.eval_episodes < 1:
        fail(f"--eval-episodes must be at least 1, got {args.eval_episodes}")
    model = None
    try:
        model = make_model(saved)
        model.load_state_dict(saved[model_key])
    except (RuntimeError, TypeError, AttributeError, KeyError) as e:
        fail(f"{path} does not hold a {script} model for {args.env_id}: "
             f"{state_mismatch(model, saved.get(model_key)) or first_line(e)}")
    seed_everything(args.seed, args.torch_deterministic)
    device = pick_device(args)
    model = model.to(device) if isinstance(model, nn.Module) else model  # a JAX script's PytreeState stays as it is
    returns = evaluate_only(lambda: evaluate(model, args, name, device), args)
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
