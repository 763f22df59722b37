"""What the tests share: running a script as a user would, and reading back what it logged; a run as a process
that is stopped by a signal, killed and resumed, and what its checkpoint holds."""

import fcntl
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

import torch

from tests import prestart
from tests.graph_breaks import assert_only_unavoidable_breaks

ROOT = Path(__file__).resolve().parent.parent
TORCH_LOG_LINE = re.compile(r"[IWEV]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ torch/")  # glog-style lines of TORCH_LOGS


def script_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update(WANDB_MODE="offline", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


def run_script(script: str, *args: str, cwd: Path, timeout: float = 600, check: bool = True, env=None, launcher=None):
    """Run `python cleanrl/<script>` (or `launcher + [path]`) in `cwd`; the run writes runs/ and videos/ there."""
    path = str(ROOT / "cleanrl" / script)
    cmd = (launcher or [sys.executable]) + [path, *args]
    proc = prestart.run(cmd, cwd=cwd, env=env or script_env(), timeout=timeout)
    if check and proc.returncode != 0:
        # without torch's own log lines (TORCH_LOGS), which a compiled run prints after its error, at exit
        stderr = "\n".join(line for line in proc.stderr.splitlines() if not TORCH_LOG_LINE.match(line))
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}"
        )
    return proc


def run_dirs(cwd: Path) -> list[Path]:
    runs = Path(cwd) / "runs"
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def single_run_dir(cwd: Path) -> Path:
    dirs = run_dirs(cwd)
    assert len(dirs) == 1, f"expected one run directory, found {dirs}"
    return dirs[0]


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's TensorBoard event files: {tag: [(step, value), ...]} in logged order.

    TensorBoard's own reader, as TensorBoard shows the run (the tests read runs without benchmark/): the
    directory's event files in the order they were written, where a resumed run's writer (purge_step) drops what
    the killed process logged after its checkpoint; no sampling, every event is kept."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def values(scalars: dict, tag: str) -> list[float]:
    return [v for _, v in scalars.get(tag, [])]


class ReachedTheRun(Exception):
    """run_in_process: the script got past its checks, to runtime.start or runtime.evaluate_only."""


def run_in_process(script: str, *args: str, cwd: Path, env: Optional[dict] = None,
                   evaluate: bool = False) -> subprocess.CompletedProcess:
    """`python cleanrl/<script> args` up to the end of its checks, inside this test process: what a process would
    print and its exit status (an `error:` SystemExit is a last stderr line and status 1, an exception a traceback and
    status 1), in a fraction of a process's time (no interpreter start, no `import torch`). A script that gets past
    its checks stops where the run would start (runtime.start, or, unless `evaluate`, --eval-only's evaluation) with
    ReachedTheRun: only bad input, and with `evaluate` an --eval-only, run this way. What a run changes in the
    process is put back afterwards: the signal handlers an evaluation installs, torch's thread count, the global
    random generators, the run directories a --resume locked. `env`: variables set for the call (a torchrun rank's)."""
    import contextlib
    import io
    import random
    import runpy
    from unittest import mock

    import numpy as np

    import checkpoints
    import runtime

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)}
    threads, generators = torch.get_num_threads(), (random.getstate(), np.random.get_state(), torch.get_rng_state())

    def reached(*_, **__):
        raise ReachedTheRun(f"{script} {' '.join(args)} got past its checks")

    path = str(ROOT / "cleanrl" / script)
    out, err = io.StringIO(), io.StringIO()
    held = dict(checkpoints.HELD_DIRECTORIES)
    with contextlib.ExitStack() as stack:
        # the run directories a --resume took the lock of are given back, as a process's end gives them back
        stack.callback(lambda: [os.close(checkpoints.HELD_DIRECTORIES.pop(key)) for key in
                                set(checkpoints.HELD_DIRECTORIES) - set(held)])
        stack.callback(lambda: [signal.signal(sig, handler) for sig, handler in handlers.items()])
        stack.callback(torch.set_num_threads, threads)
        stack.callback(lambda: (random.setstate(generators[0]), np.random.set_state(generators[1]),
                                torch.set_rng_state(generators[2])))
        stack.enter_context(mock.patch.object(runtime, "start", reached))
        if not evaluate:
            stack.enter_context(mock.patch.object(runtime, "evaluate_only", reached))
        stack.enter_context(mock.patch.object(sys, "argv", [path, *args]))
        stack.enter_context(mock.patch.dict(os.environ, env or {}))
        stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            runpy.run_path(path, run_name="__main__")
            status = 0
        except SystemExit as e:  # as the interpreter reports it: a message on stderr and status 1, or the code
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            status = 1 if isinstance(e.code, str) else e.code or 0
        except ReachedTheRun:
            raise
        except Exception:  # noqa: BLE001 - a traceback, as `python script.py` prints it
            traceback.print_exc()
            status = 1
    return subprocess.CompletedProcess([sys.executable, path, *args], status, out.getvalue(), err.getvalue())


def assert_bad_input_rejected(script: str, args, message: str, cwd: Path, one_line: bool = False,
                              in_process: bool = False, **kwargs):
    """Bad input: a non-zero exit, a last stderr line `error: ...` naming `message`, and no runs/ or videos/ entry.
    With one_line, that line is all of stderr and the exit status is 1. Returns the finished process. `in_process`:
    run_in_process (kwargs: its env), else a real process (kwargs: run_script's)."""
    if in_process:
        proc = run_in_process(script, *args, cwd=cwd, env=kwargs.get("env"))
    else:
        proc = run_script(script, *args, cwd=cwd, check=False, **kwargs)
    assert proc.returncode != 0, f"{script} {' '.join(args)} exited 0"
    lines = proc.stderr.strip().splitlines()
    last = lines[-1]
    assert last.startswith("error:") and message in last, proc.stderr[-2000:]
    if one_line:
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
    assert run_dirs(cwd) == [] and not (Path(cwd) / "videos").exists()
    return proc


def spread(series: list) -> float:
    """How far a logged quantity moves over a run: the range of its finite values (0 for fewer than 2)."""
    finite = [v for _, v in series if math.isfinite(v)]
    return max(finite) - min(finite) if len(finite) > 1 else 0.0


def assert_losses_close(reference: dict, other: dict, keys, rtol: float, atol: float, first_only: bool = False,
                        later_spread: Optional[float] = None) -> None:
    """Each key is logged at the same steps in both runs' scalars, the values within atol + rtol * |reference|
    (with first_only, the first logged value within that and the others finite where the reference's are; with
    later_spread, the values after the first also within later_spread * spread(the reference's values of the key):
    a fraction of how far the quantity moves over the reference run, the yardstick for a rounding difference that
    training amplified; tests/scripts.py's Parity says why)."""
    for key in keys:
        assert [s for s, _ in other[key]] == [s for s, _ in reference[key]], key
        moved = spread(reference[key])
        for i, ((step, a), (_, b)) in enumerate(zip(reference[key], other[key])):
            if first_only and i > 0:
                assert not (math.isfinite(a) and not math.isfinite(b)), f"{key} at step {step}: {a} vs {b}"
                continue
            tol = atol + rtol * abs(a)
            if later_spread is not None and i > 0:
                tol += later_spread * moved
            # NaN counts as equal to NaN (explained variance of constant returns)
            assert (a != a and b != b) or abs(a - b) <= tol, (
                f"{key} at step {step}: {a} vs {b} (a gap of {abs(a - b):.3g}; tolerance {tol:.3g}"
                + (f", of which {later_spread} x the spread {moved:.3g}" if later_spread is not None and i > 0 else "")
                + ")")


def assert_compile_parity(script: str, args, cwd: Path, compiled: list[str], rtol: float, atol: float,
                          min_updates: int = 3, episodes_rtol: Optional[float] = 0.0, launcher=None,
                          device: str = "--no-cuda", flags: tuple = ("--compile",),
                          first_update_only: bool = False, later_spread: Optional[float] = None,
                          extra_env: Optional[dict] = None) -> dict:
    """The --compile path and the plain path, same seed on CPU, log the same losses within (rtol, atol).

    The compiled run must really compile: torch's dynamo log must show every function named in `compiled`
    being traced, and no recompilation (a recompiling hot function is a silent slowdown); and it may break into
    graphs only where torch forces it (tests/graph_breaks.py's UNAVOIDABLE).
    Every `losses/*` key must be logged at the same steps by both runs, at least `min_updates` times.
    Episode returns: with `episodes_rtol` 0 both runs must log identical ones (compiled code samples from
    torch's own generator, so one seed gives the same discrete actions until rounding moves a sample across a
    boundary); above 0, equal within that relative tolerance (continuous actions move by rounding); with None
    they are not compared (the budget ends no episode). `device` and `flags` choose the device (--cuda on a GPU) and
    the compiled run's flags (e.g. --compile --cudagraphs). With `first_update_only`, only each loss's first logged
    value is compared (later ones must stay finite); with `later_spread`, the values after the first may also differ
    by that fraction of the plain run's spread of the loss (assert_losses_close). `extra_env`: environment variables
    of both runs. The plain run's scalars are returned.
    """
    runs = {}
    logs = script_env(TORCH_LOGS="dynamo,recompiles,graph_breaks", **(extra_env or {}))
    for name, extra, env in (("plain", [], script_env(**(extra_env or {}))), ("compiled", list(flags), logs)):
        (Path(cwd) / name).mkdir()
        proc = run_script(script, *args, *extra, device, cwd=Path(cwd) / name, launcher=launcher, env=env)
        runs[name] = read_scalars(single_run_dir(Path(cwd) / name))
    traced = {line.split("start tracing ")[1].split()[0] for line in proc.stderr.splitlines() if "start tracing " in line}
    assert set(compiled) <= traced, f"not compiled: {sorted(set(compiled) - traced)}; traced: {sorted(traced)}"
    assert "Recompiling function" not in proc.stderr, [l for l in proc.stderr.splitlines() if "Recompiling" in l]
    assert_only_unavoidable_breaks(script, proc.stderr)
    plain, compiled = runs["plain"], runs["compiled"]
    keys = sorted(k for k in plain if k.startswith("losses/"))
    assert keys, f"{script} logged no losses/* scalar"
    assert keys == sorted(k for k in compiled if k.startswith("losses/"))
    for key in keys:
        assert len(plain[key]) >= min_updates, f"{key}: {len(plain[key])} updates logged, want {min_updates}"
    assert_losses_close(plain, compiled, keys, rtol, atol, first_only=first_update_only,
                        later_spread=later_spread)
    if episodes_rtol is not None:
        returns = values(plain, "charts/episodic_return")
        assert returns, "no episode ended; the budget is too small to compare"
        assert [s for s, _ in compiled["charts/episodic_return"]] == [s for s, _ in plain["charts/episodic_return"]]
        if episodes_rtol == 0:
            assert values(compiled, "charts/episodic_return") == returns
        else:
            for a, b in zip(returns, values(compiled, "charts/episodic_return")):
                assert abs(a - b) <= episodes_rtol * abs(a), f"episodic return {a} vs {b}"
    return plain


# ---------------------------------------------------------------------------------------------------------------
# A run as a process: started, stopped by a signal or killed after its first checkpoint, resumed.
def start(script: str, *args: str, cwd: Path, launcher=None, merge_stderr: bool = False) -> subprocess.Popen:
    """Start `python cleanrl/<script>` (or `launcher + [path]`) in `cwd` with stdout (and stderr) piped."""
    cmd = (launcher or [sys.executable]) + [str(ROOT / "cleanrl" / script), *args]
    return prestart.popen(cmd, cwd=cwd, env=script_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    """Poll `condition` while the process runs; fail (killing it) if it ends first or the time runs out."""
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            errors = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}:\n{output[-2000:]}\n"
                                 f"{errors[-3000:]}")
        if time.time() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.02)


def checkpoints(cwd: Path) -> list[Path]:
    return sorted(Path(cwd).glob("runs/*/checkpoint.pt"))


def wait_for_checkpoint(proc: subprocess.Popen, cwd: Path, timeout: float = 120) -> Path:
    """Poll until the run's first checkpoint exists (the training loop is then running); its path."""
    wait_until(lambda: bool(checkpoints(cwd)), proc, "its first checkpoint", timeout)
    return checkpoints(cwd)[0]


def load(path: Path) -> dict:
    """A checkpoint as a resumed run reads it: weights_only, so it must hold plain tensors and values only."""
    return torch.load(path, map_location="cpu", weights_only=True)


def kill_after_first_checkpoint(script: str, args, cwd: Path, launcher=None) -> Path:
    """Start the run and SIGKILL it once its first checkpoint exists; the path of the checkpoint it left, which
    must be that of an unfinished run (else the kill came too late to test a resume)."""
    proc = start(script, *args, cwd=cwd, launcher=launcher)
    path = wait_for_checkpoint(proc, cwd)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    assert not load(path)["finished"], "the run finished before it was killed; the test did not test a resume"
    return path


def stop(proc: subprocess.Popen, sig: signal.Signals, timeout: float = 120) -> str:
    """Send `sig`, wait for the process to end, which must be with exit status 128 + sig (130 for SIGINT, 143 for
    SIGTERM: the run saved its checkpoint and did not finish); its stdout."""
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 128 + sig, f"exit {proc.returncode} after {sig.name}\n{stdout[-2000:]}\n{stderr[-3000:]}"
    return stdout


def stop_after_first_checkpoint(script: str, args, cwd: Path, sig: signal.Signals) -> tuple[Path, str]:
    """Start the run and send `sig` once its first checkpoint exists: (the checkpoint's path, the run's stdout)."""
    proc = start(script, *args, cwd=cwd)
    path = wait_for_checkpoint(proc, cwd)
    return path, stop(proc, sig)


def assert_same_entries(a, b, where: str = "") -> None:
    """Two checkpoint entries are equal, tensors bit for bit, through nested dicts, lists and tuples."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {sorted(a)} vs {sorted(b)}"
        for key in a:
            assert_same_entries(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_entries(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} vs {b!r}"


# the checkpoint entries that name or describe the process rather than the run's course: the run name (another
# directory), the flags (--resume, --checkpoint-frequency) and the environments' pickle (wall-clock counters)
NOT_THE_COURSE = ("run_name", "args", "envs")


def assert_same_run(uninterrupted: Path, resumed: Path, apart_from: tuple = ()) -> None:
    """A resumed run equals the uninterrupted one: every entry of the final checkpoints (networks, optimizers,
    generators, counters; not NOT_THE_COURSE, nor `apart_from`) bit for bit, and every logged scalar but the speed,
    step for step (so the killed process's events after its checkpoint were purged)."""
    a, b = load(uninterrupted / "checkpoint.pt"), load(resumed / "checkpoint.pt")
    assert a["finished"] and b["finished"] and a.keys() == b.keys()
    for key in a.keys() - set(NOT_THE_COURSE) - set(apart_from):
        assert_same_entries(a[key], b[key], key)
    scalars_a, scalars_b = read_scalars(uninterrupted), read_scalars(resumed)
    assert scalars_a.keys() == scalars_b.keys()
    for key in scalars_a.keys() - {"charts/SPS"}:
        assert scalars_a[key] == scalars_b[key], key


def eval_line(stdout: str) -> str:
    """The `eval: mean return M +- S over N episodes of ENV` line of an --eval-only run."""
    lines = [line for line in stdout.splitlines() if line.startswith("eval: mean return ")]
    assert len(lines) == 1, stdout[-2000:]
    return lines[0]


def eval_mean_std(line: str) -> tuple[float, float]:
    mean, std = line.split("eval: mean return ")[1].split(" over")[0].split(" +- ")
    return float(mean), float(std)


# ---------------------------------------------------------------------------------------------------------------
# torchrun jobs: their worker processes, and the parameter checksum every rank prints at the end
CHECKSUM = re.compile(r"rank (\d+)/(\d+): (\d+) games finished, parameter checksum ([0-9a-f]{64})")


def checksums(output: str) -> dict[int, str]:
    """{rank: checksum of its parameters} from the last line every rank prints."""
    return {int(rank): digest for rank, _, _, digest in CHECKSUM.findall(output)}


def games_finished(output: str) -> dict[int, int]:
    return {int(rank): int(games) for rank, _, games, _ in CHECKSUM.findall(output)}


def worker_pids(cwd: Path, script: str, rank: int) -> list[int]:
    """The pids of the worker processes of global rank `rank` of the torchrun job running `script` in `cwd`
    (read from /proc: the torchrun agent has no RANK variable, its workers have RANK=<global rank>)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            proc_dir = Path("/proc") / pid
            environ = (proc_dir / "environ").read_bytes().split(b"\0")
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
            same_job = (any(arg.endswith(script.encode()) for arg in cmdline)
                        and os.readlink(proc_dir / "cwd") == str(cwd))
        except OSError:  # gone, or not ours to read
            continue
        if same_job and f"RANK={rank}".encode() in environ:
            found.append(int(pid))
    return found


# ---------------------------------------------------------------------------------------------------------------
def once(root: Path, name: str, compute: Callable[[Path], dict]) -> dict:
    """compute(folder) once per pytest run, for every test that asks, in any test process: pytest-xdist's
    workers share `root` (the parent of their base temp folders) and take turns on a lock file. The result must
    be JSON (paths as strings); the folder with the runs stays for the tests to read (a test that changes a run
    copies it first). A failed computation is not repeated: the later tests fail with its error."""
    folder, lock_path = Path(root) / name, Path(root) / f"{name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done, failed = folder / "result.json", folder / "failed.txt"
        if done.exists():
            return json.loads(done.read_text())
        if failed.exists():
            raise AssertionError(f"{name} failed in another test:\n{failed.read_text()}")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            result = compute(folder)
        except BaseException:
            failed.write_text(traceback.format_exc()[-6000:])
            raise
        done.write_text(json.dumps(result))
        return result
