# docs: docs/benchmark.md
"""Run one training command over environment ids x seeds, with a bounded pool of worker processes.

Every run gets its own working directory, so the TensorBoard files a script writes to `runs/` land there:

    <out>/<name>/<env_id>/seed<k>/          the run's working directory (env ids with "/" become nested folders)
    <out>/<name>/<env_id>/seed<k>/log.txt   stdout and stderr of the run, streamed while it runs
    <out>/<name>/<env_id>/seed<k>/runs/...  what the script writes (TensorBoard events, models)
    <out>/<name>/<env_id>/seed<k>/DONE.json completion marker, written only after the command exited 0

One runner at a time per result folder: it holds a lock on <out>/<name>/.runner.lock while it runs. A run never
outlives its runner: on Linux the kernel sends it SIGTERM when the runner ends, however it ends (kill -9 included),
and a runner refuses a result folder in which a run is still going (its script holds runs/<run>/.lock).

Kept results (--keep DIR, which benchmark/suite.py passes as benchmark/kept): when a run finishes, the episodes it
logged are written to a small JSON file DIR/<name>/<env_id>/seed<k>.json (see benchmark/kept.py). Committed, those
files survive a change of machine: benchmark/report.py and benchmark/make_docs.py read them, and the runner skips a
run whose kept file exists, on any machine. A kept file made by a different command (another budget, other flags) stops the
runner before any run starts: give the new benchmark its own --name, or delete the file.

Resume: a run whose kept file or DONE.json exists is skipped (`--no-skip-finished` reruns everything); a finished
run without a kept file gets one from its event files. A DONE.json that is not a marker this runner wrote (cut
short, edited, a link) says nothing: a `warning:` line, and the run counts as not finished. A run directory without
the marker belongs to an attempt that failed or was stopped; it is moved, with its log, to
`<out>/<name>/.incomplete/<env_id>/seed<k>-<unix time>/` (hidden from the report) and the run starts again, which
the runner prints. With --resume-stopped, a stopped attempt that left a checkpoint (`runs/*/checkpoint.pt`) is
started again in its own directory instead, its log appended to, so a command that carries
`--save-model --checkpoint-frequency N --resume auto` continues from its last checkpoint (benchmark/suite.py does
this for its long runs); the attempt's run directories without a checkpoint go to .incomplete, so the kept file
reads the events of one run. With --resume-stopped a run's checkpoint is deleted once the run has finished (its
events, model file and kept file stay). Nothing is retried within one invocation: a failed run stays failed, it is listed in the
summary table with its exit code and log tail, and the runner exits 1.

Stopping: Ctrl-C, SIGTERM or SIGHUP to the runner sends SIGTERM to its runs (the scripts save a checkpoint when they
have --save-model and exit), waits for them, prints the summary and exits with 128 + the signal's number.

GPUs: taken from CUDA_VISIBLE_DEVICES when it is set, else from `nvidia-smi -L`. Each run gets
`--gpus-per-run` of them in CUDA_VISIBLE_DEVICES, the least busy first (round-robin when all are equally busy).

The command comes last, after `--` (or as one string in --command, which also takes {env_id} and {seed}).

Run:
    python benchmark/run.py --env-ids CartPole-v1 Acrobot-v1 --seeds 1 2 3 --workers 2 -- python cleanrl/ppo.py --total-timesteps 100000
    bash benchmark/ppo.sh            # the benchmark of one script, with its env ids, seeds and budget
    python benchmark/run.py --help
"""

import ctypes
import errno
import fcntl
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NoReturn, Optional

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmark.kept import kept_path, portable_command, read_kept, write_kept  # noqa: E402  (a tool, not a script)


@dataclass
class Args:
    """Runs COMMAND over env ids x seeds: benchmark/run.py [OPTIONS] -- COMMAND (see docs/benchmark.md)."""

    env_ids: list[str]
    """the environment ids to run"""
    command: Optional[str] = None
    """the training command as one string, or None to give it after `--` as separate words; `--env-id ENV --seed K` are appended unless it contains the placeholders {env_id} and {seed}; paths ending in .py that exist relative to the current directory are made absolute, since each run starts in its own working directory"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """the seeds to run for every environment id"""
    workers: int = 1
    """the number of runs at the same time"""
    out: str = "benchmark/results"
    """the root folder of all results"""
    keep: Optional[str] = None
    """if set, keep each finished run's episodes in this folder (benchmark/suite.py uses benchmark/kept, committed)"""
    name: Optional[str] = None
    """the result folder under --out; None uses the stem of the first .py file in the command (e.g. ppo)"""
    skip_finished: bool = True
    """if toggled, skip runs whose DONE.json marker exists, so a stopped benchmark resumes"""
    resume_stopped: bool = False
    """if toggled, a stopped run that left a checkpoint starts again in its own directory (for commands with --resume auto)"""
    gpus_per_run: int = 1
    """the number of GPUs each run sees in CUDA_VISIBLE_DEVICES (0: leave CUDA_VISIBLE_DEVICES alone)"""
    gpus: Optional[list[str]] = None
    """the GPU ids to hand out; None detects them (CUDA_VISIBLE_DEVICES, else nvidia-smi -L)"""
    timeout: Optional[float] = None
    """if set, a run still going after this many seconds is killed and counts as failed"""
    tail_lines: int = 5
    """the number of log lines shown for each failed run in the summary"""
    dry_run: bool = False
    """if toggled, print the runs that would start and exit"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


@dataclass
class Run:
    env_id: str
    seed: int
    argv: list[str]
    workdir: Path
    status: str = "pending"  # pending, running, ok, failed, skipped
    exit_code: Optional[int] = None
    gpus: list[str] = field(default_factory=list)
    started: float = 0.0
    seconds: float = 0.0
    note: str = ""
    proc: Optional[subprocess.Popen] = None
    log_file: Optional[object] = None
    continued: bool = False  # started again in the directory of a stopped attempt (--resume-stopped)
    drop_checkpoint: bool = False  # --resume-stopped: once the run has finished, its checkpoint is deleted
    kept: Optional[Path] = None  # where the run's kept result goes (None: keep nothing)
    name: str = ""

    @property
    def log(self) -> Path:
        return self.workdir / "log.txt"

    @property
    def marker(self) -> Path:
        return self.workdir / "DONE.json"


def detect_gpus() -> list[str]:
    """GPU ids: CUDA_VISIBLE_DEVICES wins when set (an empty value means no GPU), else one per `nvidia-smi -L` line."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"nvidia-smi -L exited {proc.returncode}; running without GPUs: {proc.stderr.strip()}", flush=True)
        return []
    return [str(i) for i, line in enumerate(l for l in proc.stdout.splitlines() if l.startswith("GPU "))]


def result_name(tokens: list[str]) -> str:
    for token in tokens:
        if token.endswith(".py"):
            return Path(token).stem
    fail("--name is needed: the command names no .py file to take the result folder's name from")


def build_argv(command: list[str], env_id: str, seed: int) -> list[str]:
    text = " ".join(command)
    if ("{env_id}" in text) != ("{seed}" in text):
        fail("the command must contain both placeholders {env_id} and {seed}, or neither")
    if "{env_id}" in text:
        tokens = [t.replace("{env_id}", env_id).replace("{seed}", str(seed)) for t in command]
    else:
        tokens = command + ["--env-id", env_id, "--seed", str(seed)]
    # each run starts in its own working directory: a script path given relative to here must still resolve
    return [str(Path(t).resolve()) if t.endswith(".py") and Path(t).is_file() else t for t in tokens]


def plan_runs(args: Args, command: list[str]) -> tuple[Path, list[Run]]:
    if args.workers < 1:
        fail(f"--workers must be at least 1, got {args.workers}")
    if not args.env_ids or not args.seeds:
        fail("--env-ids and --seeds each need at least one value")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.env_ids)) != len(args.env_ids):
        fail("--env-ids and --seeds must not repeat a value")
    tokens = command
    if not tokens:
        fail("no command: give it after `--` or in --command")
    for token in tokens:
        if token.endswith(".py") and not Path(token).is_file() and not Path(token).is_absolute():
            fail(f"the command names {token}, which does not exist relative to {Path.cwd()}")
    name = args.name or result_name(tokens)
    root = Path(args.out).resolve() / name
    runs = []
    for env_id in args.env_ids:
        for seed in args.seeds:
            run = Run(env_id, seed, build_argv(tokens, env_id, seed), root / env_id / f"seed{seed}", name=name)
            if args.keep:
                run.kept = kept_path(Path(args.keep), name, env_id, seed)
                if run.kept.exists() and args.skip_finished:
                    old = read_kept(run.kept)["command"]
                    if old != portable_command(run.argv):
                        fail(
                            f"{run.kept} holds a run of another command ({shlex.join(old)}); give this benchmark "
                            f"its own --name, or delete the file to replace it"
                        )
            runs.append(run)
    return root, runs


def read_marker(run: Run) -> Optional[dict]:
    """The run's completion marker as finish() writes it, or None. A DONE.json that is not one (cut short by a full
    disk, edited, a link to a file elsewhere) says nothing about the run: one warning, and the run is not finished."""
    if not run.marker.exists() and not run.marker.is_symlink():
        return None
    try:
        if run.marker.is_symlink() or not run.marker.is_file():
            raise ValueError("a symbolic link" if run.marker.is_symlink() else "not a regular file")
        marker = json.loads(run.marker.read_text())
        if not isinstance(marker, dict) or marker.get("exit_code") != 0:
            raise ValueError("no exit_code 0")
        argv, seconds = marker.get("argv"), marker.get("seconds")
        if not isinstance(argv, list) or not argv or not all(isinstance(t, str) for t in argv):
            raise ValueError("argv is not a command")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
            raise ValueError("seconds is not a number")
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError and UnicodeDecodeError too
        warn(f"{run.marker} is not a completion marker ({e}); the run counts as not finished and runs again")
        return None
    return marker


def run_directory_holder(workdir: Path) -> Optional[tuple[Path, str]]:
    """A run directory below workdir that a process still holds, and its pid as the lock file says; or None. A script
    holds runs/<run>/.lock with flock while it runs (cleanrl/checkpoints.py), and the kernel drops the lock when the
    process ends, so a lock still held is a run that outlived its runner (started by one without this check, or one
    on another OS): a second copy must not start beside it, nor its directory be moved away under it."""
    runs = workdir / "runs"
    if runs.is_symlink() or not runs.is_dir():
        return None
    for run_dir in sorted(runs.iterdir()):
        if run_dir.is_symlink() or not run_dir.is_dir():
            continue  # not a run directory a script made: nothing of it is opened
        try:
            # read only, never through a link, never waiting on a FIFO: the file only tells whether it is locked
            fd = os.open(run_dir / ".lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # no lock file (a run of another program), or not a plain one
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released at once by the close below
        except BlockingIOError:
            pid = os.read(fd, 32).decode("ascii", "replace").strip()
            return run_dir, pid if pid.isdigit() else "unknown"
        finally:
            os.close(fd)
    return None


def prepare(run: Run, root: Path, skip_finished: bool, resume_stopped: bool = False) -> None:
    """Skip a finished run, or clear the directory of an earlier attempt so the report never reads it, or (with
    resume_stopped) keep a stopped attempt that has a checkpoint to continue from."""
    if run.kept is not None and run.kept.exists() and skip_finished:
        run.status, run.note = "skipped", "kept result exists"
        return
    marker = read_marker(run) if skip_finished else None
    if marker is not None:
        run.status, run.note = "skipped", "DONE.json exists"
        if run.kept is not None:
            keep(run, marker.get("seconds"), argv=marker["argv"])  # the command that made the run, not this one
        return
    stamp = int(time.time())
    run.drop_checkpoint = resume_stopped
    if resume_stopped and not run.marker.exists() and list(run.workdir.glob("runs/*/checkpoint.pt")):
        # an attempt killed before its first checkpoint left a run directory that `--resume auto` will not
        # continue: set aside, else the kept file would find the events of two runs
        for run_dir in sorted(run.workdir.glob("runs/*/")):
            if not (run_dir / "checkpoint.pt").exists():
                moved = root / ".incomplete" / run.env_id / f"seed{run.seed}-{stamp}" / "runs" / run_dir.name
                moved.parent.mkdir(parents=True, exist_ok=True)
                run_dir.rename(moved)
        run.continued = True
        run.note = "continued a stopped attempt from its checkpoint"
        print(f"{run.env_id} seed {run.seed}: stopped attempt has a checkpoint; continuing it in {run.workdir}", flush=True)
        return
    if run.workdir.exists():
        moved = root / ".incomplete" / run.env_id / f"seed{run.seed}-{stamp}"
        moved.parent.mkdir(parents=True, exist_ok=True)
        run.workdir.rename(moved)
        if not (moved / "DONE.json").exists():
            why = "no DONE.json"
        else:  # with skip_finished, the marker was not one (read_marker warned)
            why = "a DONE.json that is not a marker" if skip_finished else "finished, rerun requested"
        run.note = f"earlier attempt ({why}) moved to {moved}"
        print(f"{run.env_id} seed {run.seed}: {run.note}", flush=True)


PR_SET_PDEATHSIG = 1  # from linux/prctl.h


def tie_to_runner() -> Optional[Callable[[], None]]:
    """Linux: the preexec_fn of a run, which asks the kernel to send the run SIGTERM when the runner ends, however it
    ends (kill -9 included): a run never goes on as an orphan that the next runner would start a second copy of in
    the same folder, and SIGTERM lets the script save its checkpoint. The signal follows the thread that started the
    run: the runner starts all of them from its main thread. None elsewhere, where run_directory_holder() alone keeps
    a second copy from starting."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    runner = os.getpid()

    def tie() -> None:
        # until the exec the child has the runner's SIGTERM handler, which would only note the signal: the default
        # action ends it instead
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # the result is not checked: an exception here would fail the start, and the next runner's lock check
        # still covers a run that outlives its runner
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != runner:  # the runner died before the call: no signal would come
            os.kill(os.getpid(), signal.SIGTERM)

    return tie


def open_own(path: Path, append: bool = False, exclusive: bool = False):
    """A text file of the runner's in a run's folder, opened for writing never through a symbolic link (a link
    planted in a result folder, copied or restored, would send the runner's writes to its target): fails in one
    line if it is one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        return open(os.open(path, flags | (os.O_EXCL if exclusive else 0), 0o644), "a" if append else "w")
    except OSError as e:
        if e.errno == errno.ELOOP:
            fail(f"{path} is a symbolic link; the runner writes its own files only (remove the link)")
        raise


def start(run: Run, gpus: list[str]) -> None:
    run.workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    run.gpus = gpus
    run.log_file = open_own(run.log, append=run.continued)
    run.log_file.write(f"$ cd {run.workdir} && {shlex.join(run.argv)}\n")
    run.log_file.flush()
    run.started = time.time()
    try:
        run.proc = subprocess.Popen(run.argv, cwd=run.workdir, env=env, stdout=run.log_file, stderr=subprocess.STDOUT,
                                    preexec_fn=tie_to_runner())
    except OSError as e:  # e.g. the program does not exist: a failed run like any other, not a crash of the runner
        run.log_file.write(f"could not start: {e}\n")
        finish(run, exit_code=127)
        return
    run.status = "running"


def finish(run: Run, exit_code: int) -> None:
    run.seconds = time.time() - run.started
    run.exit_code = exit_code
    run.log_file.close()
    if exit_code == 0:
        run.status = "ok"
        marker = {
            "env_id": run.env_id,
            "seed": run.seed,
            "argv": run.argv,
            "exit_code": 0,
            "seconds": round(run.seconds, 2),
            "gpus": run.gpus,
            "host": platform.node(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        # written to a temporary name and renamed, so a marker is never half written
        tmp = run.marker.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)  # whatever is there (a link included) goes: the marker is written anew
        with open_own(tmp, exclusive=True) as f:
            f.write(json.dumps(marker, indent=2) + "\n")
        tmp.rename(run.marker)
        if run.kept is not None:
            keep(run, None if run.continued else run.seconds)  # a continued run's earlier attempts were not timed
        if run.drop_checkpoint:  # it was only there to continue from (DQN's on Atari hold a 7 GB replay memory)
            for checkpoint in run.workdir.glob("runs/*/checkpoint.pt"):
                checkpoint.unlink()
    else:
        run.status = "failed"


def keep(run: Run, seconds: Optional[float], argv: Optional[list[str]] = None) -> None:
    """Write the run's kept result from its event files; a run that logged no events keeps nothing (said in the note)."""
    try:
        record = write_kept(run.kept, run.name, run.env_id, run.seed, argv or run.argv, run.workdir, seconds)
    except ValueError as e:
        run.note = (run.note + "; " if run.note else "") + f"nothing kept: {e}"
        return
    kept_note = f"kept {len(record['episodes']['step'])} episodes in {run.kept}"
    run.note = (run.note + "; " if run.note else "") + kept_note


def log_tail(run: Run, n: int) -> list[str]:
    if n <= 0 or not run.log.exists():
        return []
    return run.log.read_text(errors="replace").splitlines()[-n:]


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """The runner was asked to stop by a signal; it exits with 128 + the signal's number, as the shell reports it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def execute(runs: list[Run], workers: int, gpu_ids: list[str], gpus_per_run: int, timeout: Optional[float]) -> None:
    pending = [r for r in runs if r.status == "pending"]
    running: list[Run] = []
    busy = {g: 0 for g in gpu_ids}
    total, done = len(pending), 0
    # Ctrl-C only sets a flag that the loop reads between polls: a KeyboardInterrupt raised inside Popen.poll() can
    # leave the Popen's internal wait lock held, and the wait for the stopped child below would then hang forever.
    # SIGTERM (kill, a scheduler) and SIGHUP (the terminal closed) do the same: by default they would end the runner
    # alone and leave its runs going, orphaned, in folders whose lock is then free for a second runner.
    interrupted: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: interrupted.append(signum)) for s in STOP_SIGNALS}
    try:
        while (pending or running) and not interrupted:
            while pending and len(running) < workers and not interrupted:
                run = pending.pop(0)
                take = sorted(gpu_ids, key=lambda g: busy[g])[: max(gpus_per_run, 0)] if gpu_ids else []
                for g in take:
                    busy[g] += 1
                start(run, take)
                gpu_note = f" on GPU {','.join(take)}" if take else ""
                print(f"[start] {run.env_id} seed {run.seed}{gpu_note}: log {run.log}", flush=True)
                if run.status == "running":
                    running.append(run)
                else:
                    done += 1
                    print(f"[{done}/{total} failed] {run.env_id} seed {run.seed}: could not start", flush=True)
            time.sleep(0.2)
            for run in list(running):
                code = run.proc.poll()
                if code is None and timeout is not None and time.time() - run.started > timeout:
                    run.proc.kill()
                    code = run.proc.wait()
                    run.note = f"killed after --timeout {timeout:g} s"
                if code is None:
                    continue
                running.remove(run)
                for g in run.gpus:
                    busy[g] -= 1
                finish(run, code)
                done += 1
                print(f"[{done}/{total} {run.status}] {run.env_id} seed {run.seed}: exit {code}, {run.seconds:.1f} s", flush=True)
        if interrupted:
            raise Stopped(interrupted[0])
    except (KeyboardInterrupt, Stopped):
        # stop the children we started (SIGTERM: the scripts save a checkpoint first); their runs have no marker, so
        # the next invocation runs them again, or continues them with --resume-stopped
        for run in running:
            run.proc.terminate()
        for run in running:
            finish(run, run.proc.wait())
            run.note = "interrupted"
        for run in pending:
            run.note = "not started (interrupted)"
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for run in running:
            if run.proc.poll() is None:
                run.proc.kill()


def summary(runs: list[Run], tail_lines: int) -> str:
    lines = ["| env_id | seed | status | exit | seconds | note |", "|---|---|---|---|---|---|"]
    for r in runs:
        exit_code = "" if r.exit_code is None else str(r.exit_code)
        seconds = f"{r.seconds:.1f}" if r.status in ("ok", "failed") else ""
        lines.append(f"| {r.env_id} | {r.seed} | {r.status} | {exit_code} | {seconds} | {r.note} |")
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        lines.append("")
        lines.append(f"{len(failed)} of {len(runs)} runs FAILED:")
        for r in failed:
            lines.append(f"- {r.env_id} seed {r.seed}: exit {r.exit_code}, log {r.log}")
            lines += [f"    {line}" for line in log_tail(r, tail_lines)]
    return "\n".join(lines)


def parse(argv: list[str]) -> tuple[Args, list[str]]:
    """The runner's own flags come before `--`, the training command after it."""
    own, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = tyro.cli(Args, args=own)
    if args.command is not None and command:
        fail("give the command either in --command or after `--`, not both")
    return args, (shlex.split(args.command) if args.command is not None else command)


def main(args: Args, command: list[str]) -> int:
    root, runs = plan_runs(args, command)
    gpu_ids = (args.gpus if args.gpus is not None else detect_gpus()) if args.gpus_per_run > 0 else []
    if gpu_ids and args.gpus_per_run > len(gpu_ids):
        fail(f"--gpus-per-run {args.gpus_per_run} but only {len(gpu_ids)} GPUs: {gpu_ids}")
    if args.dry_run:
        for r in runs:
            state = "finished, would skip" if args.skip_finished and read_marker(r) is not None else "would run"
            print(f"{state}: cd {r.workdir} && {shlex.join(r.argv)}")
        return 0
    # one runner per result folder: a second one would move the first one's unfinished runs aside
    root.mkdir(parents=True, exist_ok=True)
    lock = open(root / ".runner.lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        fail(f"another benchmark/run.py (pid {lock.read().strip() or '?'}) is running in {root}; wait for it or stop it")
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    for r in runs:  # before anything is moved: a run still going keeps its directory
        held = run_directory_holder(r.workdir)
        if held is not None:
            fail(f"{held[0]} is still in use by pid {held[1]}, a run that outlived its runner; wait for it to end or "
                 f"stop it (SIGTERM: it saves a checkpoint and exits), then start the benchmark again")
    for r in runs:
        prepare(r, root, args.skip_finished, args.resume_stopped)
    print(
        f"{len(runs)} runs ({sum(r.status == 'skipped' for r in runs)} already finished) in {root}, "
        f"{args.workers} workers, GPUs: {', '.join(gpu_ids) or 'none'}",
        flush=True,
    )
    try:
        execute(runs, args.workers, gpu_ids, args.gpus_per_run, args.timeout)
    finally:
        table = summary(runs, args.tail_lines)
        root.mkdir(parents=True, exist_ok=True)
        (root / "summary.md").write_text(table + "\n")
        print("\n" + table, flush=True)
    return 1 if any(r.status != "ok" and r.status != "skipped" for r in runs) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(*parse(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)
    except Stopped as stop:
        sys.exit(128 + stop.signum)
