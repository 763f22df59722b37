"""Checkpoints nobody can turn into code, runs nobody can lose (docs/saving-resuming.md): every probe of a careful
user and of an attacker, as a real run of a script. A planted pickle never runs (its payload would write a marker
file); a changed byte is refused, the file left as it is; a failed final write leaves a run that --resume finishes;
one process holds a run directory; signals and time bound the final evaluation; every failure is one `error:` line
with a non-zero exit and leaves nothing half-made."""

import ctypes
import hashlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import checkpoints
from tests.helpers import (
    ROOT, ReachedTheRun, load, once, read_scalars, run_dirs, run_in_process, run_script, script_env, single_run_dir,
    start, stop, wait_for_checkpoint, wait_until,
)

# ppo.py on CartPole: 4 envs x 32 steps = 128 steps an iteration, 8 iterations (with EVAL, one evaluation episode)
PPO_RUN = ("--num-steps", "32", "--total-timesteps", "1024", "--no-progress")
PPO = PPO_RUN + ("--eval-episodes", "1")
SAVE = ("--save-model",)
# the same with a budget far beyond any test: it runs until it is stopped
LONG = ("--num-steps", "32", "--total-timesteps", "10000000", "--no-progress")


class Payload:
    """What an attacker plants: unpickling it calls open(marker, "w"), which creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def assert_one_error(proc: subprocess.CompletedProcess, *parts: str) -> str:
    """A non-zero exit, no traceback, and a last stderr line `error: ...` holding every part."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = last_line(proc)
    assert line.startswith("error: ") and all(part in line for part in parts), proc.stderr[-2000:]
    return line


def finished_run(cwd: Path, *extra: str) -> Path:
    """A finished ppo.py run with --save-model in cwd; its directory."""
    run_script("ppo.py", *PPO, *SAVE, *extra, cwd=cwd)
    return single_run_dir(cwd)


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Path:
    """A folder every test process of this pytest run sees (pytest-xdist's workers have sibling base folders)."""
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture
def finished(shared, workdir) -> Path:
    """A copy, in this test's working directory, of one finished ppo.py run made once per pytest run."""
    made = once(shared, "integrity-finished-run", lambda folder: {"run_dir": str(finished_run(folder))})
    return Path(shutil.copytree(made["run_dir"], workdir / "runs" / Path(made["run_dir"]).name))


def flip_a_byte(path: Path, record: str) -> None:
    """Change one byte in the middle of the zip record whose name ends with `record` (torch writes it stored)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(record))
    data = bytearray(path.read_bytes())
    # the record's bytes follow its local header (30 bytes, the name and the local extra field)
    name_length = int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
    begin = info.header_offset + 30 + name_length + extra_length
    data[begin + info.file_size // 2] ^= 0x01
    path.write_bytes(bytes(data))


def without_root_permissions():
    """A preexec_fn under which a root process obeys file permissions as any user does (root's CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH dropped from the bounding set, so the exec'd script lacks them); None when not root."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    try:  # can this process do it (a container may forbid it)?
        subprocess.run(["true"], preexec_fn=drop, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot drop root's permission override to test an unreadable directory: {e}")
    return drop


def run_as_user(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cleanrl" / "ppo.py"), *args], cwd=cwd, env=script_env(),
                          capture_output=True, text=True, timeout=300, preexec_fn=without_root_permissions())


# ---------------------------------------------------------------------------------------------------------------
# no pickle of untrusted bytes: a planted payload never runs, wherever a file is read
def plant_checkpoint(path: Path, marker: Path, where: str) -> None:
    """A checkpoint of ppo.py whose `where` entry is the payload, sealed with a valid checksum (an attacker can
    compute one). "envs": the bytes an older version stored there (a pickle), which a resume never loads."""
    real = load(path)
    real[where] = pickle.dumps(Payload(marker)) if where == "envs" else Payload(marker)
    path.unlink()
    checkpoints.save_checkpoint(real, str(path))


def test_a_planted_pickle_in_a_checkpoint_or_model_never_runs(workdir, finished):
    run_dir = finished
    marker = workdir / "marker"
    # the model file and a checkpoint entry: the weights-only reader refuses the object, in one line
    planted = workdir / "planted.cleanrl_model"
    checkpoints.save_checkpoint({"agent": Payload(marker)}, str(planted))
    proc = run_script("ppo.py", "--eval-only", str(planted), cwd=workdir, check=False)
    assert_one_error(proc, f"cannot read model {planted}: it holds Python objects, not only data (", "GLOBAL")
    checkpoint = run_dir / "checkpoint.pt"
    shutil.copy(checkpoint, workdir / "good.pt")
    plant_checkpoint(checkpoint, marker, "agent")
    for args in (["--resume", str(run_dir)], ["--eval-only", str(run_dir)]):
        proc = run_script("ppo.py", *args, cwd=workdir, check=False)
        assert_one_error(proc, f"cannot read checkpoint {checkpoint}: it holds Python objects, not only data")
    # the environments' state an older version pickled: the run resumes, says so, and never unpickles it
    shutil.copy(workdir / "good.pt", checkpoint)
    resumable = load(checkpoint) | {"finished": False, "iteration": 4, "global_step": 512}
    checkpoint.unlink()
    checkpoints.save_checkpoint(resumable, str(checkpoint))
    plant_checkpoint(checkpoint, marker, "envs")
    proc = run_script("ppo.py", "--resume", str(run_dir), cwd=workdir)
    assert f"note: {checkpoint} holds its environments' state as a pickle (an older version wrote it), which is " \
           "never loaded: the episodes in progress restart" in proc.stdout
    assert load(checkpoint)["finished"]
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------------
# integrity: a checksum in every checkpoint and model, verified before anything is read
@pytest.mark.parametrize("record", ["data.pkl", "data/0"])
def test_a_changed_byte_in_a_checkpoint_or_model_is_refused_and_the_file_left_as_it_is(workdir, finished, record):
    run_dir = finished
    checkpoint, model = run_dir / "checkpoint.pt", run_dir / "ppo.cleanrl_model"
    resumable = load(checkpoint) | {"finished": False}
    checkpoint.unlink()
    checkpoints.save_checkpoint(resumable, str(checkpoint))
    for path in (checkpoint, model):
        flip_a_byte(path, record)
    damaged = {path: sha256(path) for path in (checkpoint, model)}
    proc = run_script("ppo.py", "--resume", "auto", *PPO, *SAVE, cwd=workdir, check=False)
    line = assert_one_error(proc, f"checkpoint runs/{run_dir.name}/checkpoint.pt is damaged")
    assert line.endswith("the file is left as it is; a run keeps no earlier checkpoint: restore this one from a "
                         "copy, or start the run again without --resume"), line
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    for args, what in (([str(run_dir)], "checkpoint"), ([str(model)], "model")):
        proc = run_script("ppo.py", "--eval-only", *args, cwd=workdir, check=False)
        assert_one_error(proc, f"{what} {run_dir / ('checkpoint.pt' if what == 'checkpoint' else 'ppo.cleanrl_model')}"
                               " is damaged")
    assert {path: sha256(path) for path in damaged} == damaged  # nothing rewrote them
    assert run_dirs(workdir) == [run_dir]


def test_checkpoints_and_models_carry_a_checksum_that_torch_load_ignores(finished):
    run_dir = finished
    import zipfile

    for name in ("checkpoint.pt", "ppo.cleanrl_model"):
        with zipfile.ZipFile(run_dir / name) as archive:
            digest = archive.read(next(n for n in archive.namelist() if n.endswith("/cleanrl.sha256"))).decode()
            assert digest == checkpoints.records_digest(archive) and digest.startswith("sha256:")
    # the model stays a plain state dict for torch.load (weights only), as users load it
    state = torch.load(run_dir / "ppo.cleanrl_model", weights_only=True)
    assert set(state) == {k for k in load(run_dir / "checkpoint.pt")["agent"]}


# ---------------------------------------------------------------------------------------------------------------
# the end of a run is a transaction
def test_a_failed_final_model_write_leaves_a_run_that_resume_auto_finishes(workdir):
    # 40 iterations, stopped after its first checkpoint; then the model's path is taken by a directory, so the
    # resumed run's final write fails after its last update, as on a full disk
    command = ["--num-steps", "32", "--total-timesteps", "5120", "--eval-episodes", "1", "--no-progress", *SAVE,
               "--checkpoint-frequency", "1", "--resume", "auto"]
    proc = start("ppo.py", *command, cwd=workdir)
    wait_for_checkpoint(proc, workdir)
    stop(proc, signal.SIGTERM)
    run_dir = single_run_dir(workdir)
    (run_dir / "ppo.cleanrl_model").mkdir()
    proc = run_script("ppo.py", *command, cwd=workdir, check=False)
    assert_one_error(proc, f"cannot save runs/{run_dir.name}/ppo.cleanrl_model: ")
    assert proc.returncode == 1
    checkpoint = load(run_dir / "checkpoint.pt")
    assert not checkpoint["finished"] and checkpoint["iteration"] == 40 and "eval: mean return" not in proc.stdout
    # a retry of the same command finishes the missing steps: the model, its evaluation, the finished mark
    (run_dir / "ppo.cleanrl_model").rmdir()
    proc = run_script("ppo.py", *command, cwd=workdir)
    assert f"resuming {run_dir.name} after iteration 40 (global step 5120)" in proc.stdout
    assert "model saved to" in proc.stdout and "eval: mean return" in proc.stdout
    assert load(run_dir / "checkpoint.pt")["finished"] and (run_dir / "ppo.cleanrl_model").is_file()
    scalars = read_scalars(run_dir)
    assert len(scalars["eval/episodic_return"]) == 1
    assert [s for s, _ in scalars["losses/value_loss"]] == [128 * i for i in range(1, 41)]
    again = run_script("ppo.py", *command, cwd=workdir)
    assert "has already finished; nothing to resume" in again.stdout


def tmpfs(path: Path, size: int) -> None:
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root and mount permission): {e}")


def test_a_full_disk_at_the_final_write_says_so_and_the_run_finishes_once_there_is_room(workdir):
    # sizes of this run's files, from the same run on a roomy disk
    (workdir / "measure").mkdir()
    measured = finished_run(workdir / "measure", "--checkpoint-frequency", "0")
    sizes = {p.name: p.stat().st_size for p in measured.iterdir()}
    model = sizes["ppo.cleanrl_model"]
    # room for the final checkpoint and the event file, not for the model too (tmpfs counts whole pages)
    disk = workdir / "disk"
    tmpfs(disk, sizes["checkpoint.pt"] + sum(v for k, v in sizes.items() if k.startswith("events")) + model // 2)
    try:
        proc = run_script("ppo.py", *PPO, *SAVE, "--checkpoint-frequency", "0", cwd=disk, check=False)
        run_dir = single_run_dir(disk)
        if proc.returncode == 0:
            pytest.skip(f"the tmpfs held the model too (page rounding); sizes {sizes}")
        assert_one_error(proc, f"cannot save {run_dir.relative_to(disk)}/ppo.cleanrl_model: the disk is full "
                               "(No space left on device)")
        assert not load(run_dir / "checkpoint.pt")["finished"] and not list(run_dir.glob("*.tmp*"))
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        proc = run_script("ppo.py", "--resume", f"runs/{run_dir.name}", cwd=disk)
        assert "eval: mean return" in proc.stdout and load(run_dir / "checkpoint.pt")["finished"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ---------------------------------------------------------------------------------------------------------------
# which run --resume continues, and who holds it
def test_an_unreadable_run_directory_is_an_error_naming_it_for_resume_auto_and_resume_dir(workdir):
    os.chmod(workdir, 0o777)
    proc = start("ppo.py", *LONG, *SAVE, "--checkpoint-frequency", "1", cwd=workdir)
    wait_for_checkpoint(proc, workdir)
    stop(proc, signal.SIGTERM)
    run_dir = single_run_dir(workdir)
    os.chmod(workdir / "runs", 0o777)
    os.chmod(run_dir, 0o000)
    try:
        auto = run_as_user(*LONG, *SAVE, "--resume", "auto", cwd=workdir)
        assert_one_error(auto, f"--resume auto cannot look into runs/{run_dir.name}: Permission denied")
        by_dir = run_as_user("--resume", f"runs/{run_dir.name}", cwd=workdir)
        assert_one_error(by_dir, f"cannot read runs/{run_dir.name}/checkpoint.pt: Permission denied")
        assert run_dirs(workdir) == [run_dir]  # neither started a run beside it
        # a run directory that can be read but not written: the resume stops before it starts
        os.chmod(run_dir, 0o555)
        readonly = run_as_user("--resume", f"runs/{run_dir.name}", cwd=workdir)
        assert_one_error(readonly, f"cannot write in the run directory runs/{run_dir.name}: Permission denied")
    finally:
        os.chmod(run_dir, 0o755)


def test_two_processes_resuming_one_run_one_gets_the_lock_the_other_an_error(workdir):
    first = start("ppo.py", *LONG, *SAVE, "--checkpoint-frequency", "1", "--resume", "auto", cwd=workdir)
    wait_for_checkpoint(first, workdir)
    run_dir = single_run_dir(workdir)
    # refused at once; a second process that took the run would train into the timeout (60 s, not 600)
    second = run_script("ppo.py", *LONG, *SAVE, "--checkpoint-frequency", "1", "--resume", "auto", cwd=workdir,
                        check=False, timeout=60)
    assert_one_error(second, f"runs/{run_dir.name} is in use by another process (pid {first.pid}): a run directory "
                             "takes one process at a time")
    assert second.returncode == 1 and second.stdout == ""
    stop(first, signal.SIGTERM)
    # the lock died with its holder: the same command now resumes, and the log holds every step once
    proc = start("ppo.py", *LONG, *SAVE, "--checkpoint-frequency", "1", "--resume", "auto", cwd=workdir)
    before = load(run_dir / "checkpoint.pt")["global_step"]
    wait_until(lambda: load(run_dir / "checkpoint.pt")["global_step"] > before, proc, "a checkpoint after the resume")
    stop(proc, signal.SIGTERM)
    steps = [s for s, _ in read_scalars(run_dir)["losses/value_loss"]]
    assert steps == sorted(set(steps))


# ---------------------------------------------------------------------------------------------------------------
# signals and time during the final evaluation
def test_sigterm_during_the_final_evaluation_stops_it_at_once_and_resume_evaluates_again(workdir):
    proc = start("ppo.py", *PPO_RUN, *SAVE, "--eval-episodes", "1000000", cwd=workdir)
    run_dir = wait_for_model(proc, workdir)
    sent = time.monotonic()
    out = stop(proc, signal.SIGTERM, timeout=30)
    assert time.monotonic() - sent < 10
    assert (f"SIGTERM: stopped the final evaluation; the model is saved to {run_dir.relative_to(workdir)}/"
            "ppo.cleanrl_model and the run is not finished: --resume evaluates it again") in out
    assert not load(run_dir / "checkpoint.pt")["finished"] and (run_dir / "ppo.cleanrl_model").is_file()
    # a rerun with a short evaluation (--eval-episodes may change on resume) finishes it
    proc = run_script("ppo.py", "--resume", f"runs/{run_dir.name}", "--eval-episodes", "2", cwd=workdir)
    assert "eval: mean return" in proc.stdout and load(run_dir / "checkpoint.pt")["finished"]
    assert len(read_scalars(run_dir)["eval/episodic_return"]) == 2


def wait_for_model(proc: subprocess.Popen, cwd: Path) -> Path:
    wait_until(lambda: bool(list(Path(cwd).glob("runs/*/ppo.cleanrl_model"))), proc, "the final model", timeout=120)
    return single_run_dir(cwd)


def test_an_evaluation_past_eval_max_seconds_ends_the_run_with_a_warning(workdir):
    proc = run_script("ppo.py", *PPO_RUN, *SAVE, "--eval-episodes", "1000000", "--eval-max-seconds", "2",
                      cwd=workdir)
    run_dir = single_run_dir(workdir)
    assert ("warning: the evaluation did not end within --eval-max-seconds 2: stopped without a result "
            f"(evaluate the model with --eval-only {run_dir.relative_to(workdir)}/ppo.cleanrl_model") in proc.stderr
    assert "eval: mean return" not in proc.stdout and load(run_dir / "checkpoint.pt")["finished"]
    only = run_script("ppo.py", "--eval-only", str(run_dir), "--eval-episodes", "1000000", "--eval-max-seconds", "1",
                      cwd=workdir, check=False)
    assert_one_error(only, "the evaluation did not end within --eval-max-seconds 1")


def test_sigint_during_eval_only_stops_it_in_one_line(workdir, finished):
    run_dir = finished
    proc = start("ppo.py", "--eval-only", str(run_dir), "--eval-episodes", "1000000", cwd=workdir)
    first = proc.stdout.readline()
    assert first == "evaluating: 1000000 episodes of CartPole-v1, for at most 1800 s (--eval-max-seconds)\n", first
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and out.strip() == "SIGINT: evaluation stopped" and err == "", (out, err)


# ---------------------------------------------------------------------------------------------------------------
# failures that were tracebacks
def test_sigterm_while_stdout_is_a_closed_pipe_still_checkpoints_without_a_traceback(workdir):
    proc = start("ppo.py", *LONG, *SAVE, "--checkpoint-frequency", "1", cwd=workdir)
    wait_for_checkpoint(proc, workdir)
    proc.stdout.close()  # the reader goes away (`... | head -1` after its line)
    proc.send_signal(signal.SIGTERM)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 143, err[-3000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    assert not load(single_run_dir(workdir) / "checkpoint.pt")["finished"]


def test_a_full_disk_under_the_tensorboard_log_is_one_error_line(workdir):
    # a file-size limit the event file outgrows (bash ignores SIGXFSZ, so write() fails with EFBIG)
    launcher = ["bash", "-c", 'trap "" XFSZ; ulimit -f 8; exec "$@"', "bash", sys.executable]
    proc = run_script("ppo.py", *LONG, cwd=workdir, launcher=launcher, check=False, timeout=300)
    run_dir = single_run_dir(workdir)
    assert_one_error(proc, f"cannot write the TensorBoard log in {run_dir.relative_to(workdir)}: the file-size "
                           "limit (ulimit -f) is reached (File too large)")
    assert proc.returncode == 1


def test_capture_video_without_moviepy_fails_before_any_work(workdir):
    # moviepy made unimportable, as in an environment installed without it
    code = ("import runpy, sys; sys.modules['moviepy'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "cleanrl" / "ppo.py"), "--capture-video"],
                          cwd=workdir, env=script_env(PYTHONPATH=str(ROOT / "cleanrl")), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "error: --capture-video writes mp4 files with moviepy, which is not installed: pip install moviepy")
    assert run_dirs(workdir) == [] and not (workdir / "videos").exists()


# ---------------------------------------------------------------------------------------------------------------
# A file a run reads is data for that run only: it never chooses code, a path outside the run, or a file to write
# (docs/saving-resuming.md, "What a run trusts"). Each probe below passed on the code before that rule.
EVIL_MODULE = "import pathlib\npathlib.Path('imported').write_text('the module ran')\n"


def rewrite(checkpoint: Path, **changes) -> None:
    """The checkpoint with `changes` (args.NAME for a flag), sealed again: an attacker computes a valid checksum."""
    saved = load(checkpoint)
    for key, value in changes.items():
        if key.startswith("args_"):
            saved["args"][key[5:]] = value
        else:
            saved[key] = value
    checkpoint.unlink()
    checkpoints.save_checkpoint(saved, str(checkpoint))


def test_a_checkpoint_cannot_choose_code_through_its_env_id(workdir, finished):
    (workdir / "evilmod.py").write_text(EVIL_MODULE)
    rewrite(finished / "checkpoint.pt", args_env_id="evilmod:CartPole-v1", finished=False, iteration=4,
            global_step=512)
    before = sha256(finished / "checkpoint.pt")
    env = script_env(PYTHONPATH=str(workdir))  # a writable directory on sys.path, as the attack needs
    for args in (["--resume", str(finished)], ["--eval-only", str(finished)]):
        proc = run_script("ppo.py", *args, cwd=workdir, check=False, env=env)
        assert_one_error(proc, "names the env id 'evilmod:CartPole-v1', which would import the module 'evilmod'",
                         "add --env-id evilmod:CartPole-v1")
        assert not (workdir / "imported").exists()
    assert sha256(finished / "checkpoint.pt") == before
    # the user names the id: trusted, as if typed for a fresh run
    run_script("ppo.py", "--eval-only", str(finished), "--env-id", "evilmod:CartPole-v1", "--eval-episodes", "1",
               cwd=workdir, env=env)
    assert (workdir / "imported").exists()


@pytest.mark.parametrize("change, message", [
    ({"run_name": "../../escaped"}, "its run name '../../escaped' cannot name a run directory (it is a path"),
    ({"run_name": "a\nb"}, "cannot name a run directory (it holds a control character)"),
    ({"args_exp_name": "../escaped"}, "--exp-name '../escaped' must be a plain name"),
    ({"iteration": -1}, "its iteration is -1, not a whole number at least 0"),
    ({"iteration": 10**6}, "it says iteration 1000000, past this run's last (8)"),
    ({"global_step": 512.5}, "its global_step is 512.5, not a whole number at least 0"),
    ({"args_num_envs": "4"}, "holds --num-envs '4', which is not a int"),
    ({"args_anneal_lr": 1}, "holds --anneal-lr 1, which is not a bool"),
    ({"args_num_envs": 0}, "--num-envs must be at least 1, got 0"),
    ({"args_learning_rate": float("nan")}, "--learning-rate must be a finite number, got nan"),
    ({"rng": {"python": 1}}, "its rng entry is not a random generators' state"),
    ({"next_obs": torch.zeros(3)}, "holds next_obs of shape (3,) (torch.float32); these environments observe (4, 4)"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else None)
def test_a_checkpoint_entry_is_checked_as_a_typed_flag_would_be(workdir, finished, change, message):
    checkpoint = finished / "checkpoint.pt"
    rewrite(checkpoint, **({"finished": False, "iteration": 4, "global_step": 512} | change))
    before = sha256(checkpoint)
    try:  # in this test process where the check comes before the run would start, else as a process
        proc = run_in_process("ppo.py", "--resume", str(finished), cwd=workdir)
    except ReachedTheRun:  # (the checks of start() and Run.restore)
        proc = run_script("ppo.py", "--resume", str(finished), cwd=workdir, check=False)
    assert_one_error(proc, message)
    assert sha256(checkpoint) == before and not (workdir / "escaped").exists()
    assert sorted(p.name for p in workdir.iterdir()) == ["runs"] and not (workdir.parent / "escaped").exists()


def test_a_symlinked_lock_or_run_directory_is_refused_and_its_target_kept(workdir):
    victim = workdir / "victim.txt"
    victim.write_text("precious\n")
    run_dir = workdir / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / ".lock").symlink_to(victim)
    with pytest.raises(SystemExit, match=r"^error: runs/r/\.lock is a symbolic link; a run's lock file is never "):
        checkpoints.lock_run_directory("runs/r")
    (workdir / "runs" / "linked").symlink_to(run_dir)
    with pytest.raises(SystemExit, match=r"^error: runs/linked is a symbolic link; a run directory must be a real "):
        checkpoints.lock_run_directory("runs/linked")
    assert victim.read_text() == "precious\n"


def test_a_checkpoint_write_never_follows_a_planted_link(workdir):
    victim = workdir / "victim.txt"
    victim.write_text("precious\n")
    # the name every earlier version wrote first (path.tmp.<pid>), and a few pids around it
    for pid in range(os.getpid() - 2, os.getpid() + 3):
        (workdir / f"checkpoint.pt.tmp.{pid}").symlink_to(victim)
    checkpoints.save_checkpoint({"x": torch.ones(3)}, str(workdir / "checkpoint.pt"))
    assert victim.read_text() == "precious\n"
    assert torch.equal(load(workdir / "checkpoint.pt")["x"], torch.ones(3))
    assert os.stat(workdir / "checkpoint.pt").st_mode & 0o777 == checkpoints.NEW_FILE_MODE
    assert len(list(workdir.glob("checkpoint.pt.tmp.*"))) == 5  # the planted links, and no temporary of its own


def test_the_temporaries_of_killed_writes_go_when_the_run_is_locked(workdir):
    run_dir = workdir / "runs" / "r"
    run_dir.mkdir(parents=True)
    stale = ["checkpoint.pt.tmp.4242", "checkpoint.pt.tmp.x7k2_q9", "ppo.cleanrl_model.tmp.abc"]
    kept = ["checkpoint.pt", "notes.tmp.txt", "events.out.tfevents.1.host.2.0"]
    for name in stale + kept:
        (run_dir / name).write_bytes(b"0" * 100)
    fd = checkpoints.lock_run_directory(str(run_dir))
    os.close(fd)
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(kept + [".lock"])


def test_sighup_checkpoints_and_exits_129(workdir):
    proc = start("ppo.py", *LONG, *SAVE, "--checkpoint-frequency", "1000", cwd=workdir)
    wait_until(lambda: (run_dirs(workdir) and any(run_dirs(workdir)[0].glob("events.*"))), proc, "its log")
    time.sleep(1)
    out = stop(proc, signal.SIGHUP)
    assert "SIGHUP: stopped after global step" in out
    assert not load(single_run_dir(workdir) / "checkpoint.pt")["finished"]


TOY_ENVS = '''
import gymnasium as gym
import numpy as np


class Toy(gym.Env):
    """Observes 0, 1, 2, ...; at step 5 the observation is `bad` (NaN, say)."""

    def __init__(self, bad=float("nan"), space="box"):
        self.action_space = gym.spaces.Discrete(2)
        box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.observation_space = box if space == "box" else gym.spaces.Dict({"x": box})
        self.bad, self.t = bad, 0

    def obs(self):
        return np.full(3, self.bad if self.t == 5 else self.t, np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs(), {}

    def step(self, action):
        self.t += 1
        return self.obs(), 1.0, False, self.t >= 50, {}


gym.register("NaNObs-v0", entry_point=Toy)
gym.register("InfObs-v0", entry_point=Toy, kwargs={"bad": float("-inf")})
gym.register("DictObs-v0", entry_point=Toy, kwargs={"space": "dict"})
'''


@pytest.mark.parametrize("script, env_id, message", [
    ("ppo.py", "NaNObs-v0",
     "toyenvs:NaNObs-v0 observed nan (in a step, environment step 5); a policy cannot act on it"),
    ("dqn.py", "InfObs-v0", "toyenvs:InfObs-v0 observed -inf (in a step, environment step 5)"),
    ("ppo.py", "DictObs-v0", "toyenvs:DictObs-v0 has observation space Dict('x': Box(-inf, inf, (3,), float32)); "
                             "ppo.py supports flat Box observations only"),
    ("dqn.py", "DictObs-v0", "dqn.py supports flat Box observations only"),
])
def test_an_environment_that_observes_non_finite_values_or_an_unsupported_space_is_one_line(workdir, script, env_id,
                                                                                         message):
    (workdir / "toyenvs.py").write_text(TOY_ENVS)
    proc = run_script(script, "--env-id", f"toyenvs:{env_id}", "--total-timesteps", "2000", "--no-progress",
                      cwd=workdir, check=False, env=script_env(PYTHONPATH=str(workdir)))
    assert_one_error(proc, message)


def test_the_observation_check_is_transparent_to_a_checkpoints_environment_state():
    import gymnasium as gym

    import environments

    envs = environments.make_envs("CartPole-v1", 2, False, "x")
    envs.reset(seed=1)
    state = checkpoints.encode_state(envs, set())
    # saved as before the check existed: the statistics wrapper directly over the SyncVectorEnv
    inner = dict(state[2])["env"]
    assert inner[0] == "object" and inner[1] == "gymnasium.vector.sync_vector_env.SyncVectorEnv"
    other = environments.make_envs("CartPole-v1", 2, False, "x")
    other.reset(seed=7)
    checkpoints.restore_state(other, state)
    assert isinstance(other.env, environments.FiniteObservations)
    assert isinstance(other.env.env, gym.vector.SyncVectorEnv)
    a, b = envs.step(np.array([0, 1])), other.step(np.array([0, 1]))
    np.testing.assert_array_equal(a[0], b[0])
