"""benchmark/run.py, benchmark/report.py and benchmark/throughput.py on small real runs of cleanrl/ppo.py, and the
aggregate statistics."""

import csv
import json
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

from benchmark.kept import read_kept
from benchmark.report import (
    bootstrap_band, final_return, iqm, iqm_rows, mean_rows, parse_run_name, stratified_bootstrap_ci, t_halfwidth,
)  # fmt: skip
from benchmark.throughput import SPECS, budget, cleanrl_argv, script_argv
from tests.helpers import ROOT, read_scalars, script_env, single_run_dir, values, wait_until

PPO = ROOT / "cleanrl" / "ppo.py"
QUICK = f"{sys.executable} -c"  # a python that does not import torch: cheap fake runs


def bench(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmark" / "run.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=timeout)


def report(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmark" / "report.py"), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def ppo_bench(tmp_path_factory):
    """One benchmark invocation: 2 real 1024-step PPO runs on CartPole and 2 runs on an unknown env id that fail."""
    cwd = tmp_path_factory.mktemp("bench")
    proc = bench(
        "--env-ids", "CartPole-v1", "NoSuchEnv-v0",
        "--seeds", "1", "2",
        "--workers", "2",
        "--keep", "benchmark/kept",
        "--out", "results",
        "--", sys.executable, str(PPO), "--total-timesteps", "1024",
        cwd=cwd,
    )  # fmt: skip
    return cwd, proc


def test_failing_runs_make_the_benchmark_fail_and_are_named(ppo_bench):
    cwd, proc = ppo_bench
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "2 of 4 runs FAILED" in out
    for seed in (1, 2):
        assert f"| NoSuchEnv-v0 | {seed} | failed | 1 |" in out
        assert f"| CartPole-v1 | {seed} | ok | 0 |" in out
        assert f"- NoSuchEnv-v0 seed {seed}: exit 1, log {cwd / 'results/ppo/NoSuchEnv-v0' / f'seed{seed}' / 'log.txt'}" in out
    # the log tail in the summary says why: ppo.py's one-line error
    assert "error: cannot make environment 'NoSuchEnv-v0'" in out
    assert (cwd / "results/ppo/summary.md").read_text().strip() in out
    root = cwd / "results" / "ppo"
    for seed in (1, 2):
        assert not (root / "NoSuchEnv-v0" / f"seed{seed}" / "DONE.json").exists()
        marker = json.loads((root / "CartPole-v1" / f"seed{seed}" / "DONE.json").read_text())
        assert marker["exit_code"] == 0 and marker["seed"] == seed and marker["argv"][-4:] == ["--env-id", "CartPole-v1", "--seed", str(seed)]
        assert len(list((root / "CartPole-v1" / f"seed{seed}" / "runs").iterdir())) == 1


def test_resume_skips_finished_runs_and_reruns_failed_ones(ppo_bench, tmp_path):
    cwd, _ = ppo_bench
    work = tmp_path / "copy"
    shutil.copytree(cwd / "results", work / "results")
    events_before = sorted(p.stat().st_mtime_ns for p in (work / "results/ppo/CartPole-v1").rglob("events.out.tfevents.*"))
    # the failed runs now run again: with a command that fails fast (exit 4), so they fail again
    proc = bench(
        "--command", f"{QUICK} 'import sys; sys.exit(4)' {{env_id}} {{seed}}", "--name", "ppo", "--keep", "benchmark/kept",
        "--env-ids", "CartPole-v1", "NoSuchEnv-v0", "--seeds", "1", "2", "--out", "results", cwd=work,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "4 runs (2 already finished)" in proc.stdout
    for seed in (1, 2):
        # the copy has no kept files (they stayed beside the first results): made from the finished runs' events
        assert f"| CartPole-v1 | {seed} | skipped |  |  | DONE.json exists; kept " in proc.stdout
        assert (work / f"benchmark/kept/ppo/CartPole-v1/seed{seed}.json").exists()
        assert f"| NoSuchEnv-v0 | {seed} | failed | 4 |" in proc.stdout
    # the earlier failed attempts were moved aside (not deleted, not read by the report)
    moved = list((work / "results/ppo/.incomplete/NoSuchEnv-v0").iterdir())
    assert len(moved) == 2 and all((m / "log.txt").exists() for m in moved)
    assert "error: cannot make environment" in (moved[0] / "log.txt").read_text()
    events_after = sorted(p.stat().st_mtime_ns for p in (work / "results/ppo/CartPole-v1").rglob("events.out.tfevents.*"))
    assert events_after == events_before
    # the kept files name the command that made the runs, not the one that found them finished
    assert read_kept(work / "benchmark/kept/ppo/CartPole-v1/seed1.json")["command"][1:4] == ["cleanrl/ppo.py", "--total-timesteps", "1024"]
    # only the finished env: nothing to do, success
    ppo = ["--", sys.executable, str(PPO), "--total-timesteps", "1024"]
    proc = bench("--env-ids", "CartPole-v1", "--seeds", "1", "2", "--out", "results", "--keep", "benchmark/kept", *ppo, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 runs (2 already finished)" in proc.stdout


@pytest.mark.heavy
def test_resume_stopped_continues_a_run_from_its_checkpoint(tmp_path):
    """--resume-stopped: a run stopped (SIGTERM: it checkpoints and exits) after its first checkpoint starts again in
    its own directory, continues with `--resume auto` and ends as one run whose kept file holds the whole budget; a
    run directory left without a checkpoint (an attempt killed before its first one) goes to .incomplete."""
    total = 32768  # 64 iterations of 512 steps: the stop comes well before the end
    command = [sys.executable, str(PPO), "--total-timesteps", str(total), "--save-model", "--checkpoint-frequency", "1", "--resume", "auto"]
    workdir = tmp_path / "results/ppo/CartPole-v1/seed1"
    workdir.mkdir(parents=True)
    (workdir / "log.txt").write_text("first attempt\n")
    stale = workdir / "runs" / "CartPole-v1__ppo__1__1000"  # older than the real attempt, and no checkpoint
    stale.mkdir(parents=True)
    (stale / "events.out.tfevents.stale").write_bytes(b"")
    proc = subprocess.Popen([*command, "--env-id", "CartPole-v1", "--seed", "1"], cwd=workdir, env=script_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while not list(workdir.glob("runs/*/checkpoint.pt")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM  # stopped cleanly, after a checkpoint
    finally:
        if proc.poll() is None:
            proc.kill()
    (first,) = workdir.glob("runs/*/checkpoint.pt")
    stopped_at = torch.load(first, map_location="cpu", weights_only=True)["global_step"]
    assert 0 < stopped_at < total
    proc = bench("--env-ids", "CartPole-v1", "--seeds", "1", "--out", "results", "--keep", "benchmark/kept",
                 "--resume-stopped", "--", *command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"CartPole-v1 seed 1: stopped attempt has a checkpoint; continuing it in {workdir}" in proc.stdout
    assert "| CartPole-v1 | 1 | ok | 0 |" in proc.stdout and "continued a stopped attempt from its checkpoint" in proc.stdout
    assert [p.name for p in (workdir / "runs").iterdir()] == [first.parent.name]
    # the finished run's checkpoint is deleted (it was only there to continue from); its model file stays
    assert not first.exists() and (first.parent / "ppo.cleanrl_model").exists()
    assert len(list((tmp_path / "results/ppo/.incomplete/CartPole-v1").glob("seed1-*/runs/CartPole-v1__ppo__1__1000"))) == 1
    assert (workdir / "log.txt").read_text().startswith("first attempt\n")  # appended to, not replaced
    kept = read_kept(tmp_path / "benchmark/kept/ppo/CartPole-v1/seed1.json")
    assert kept["last_step"] == total and kept["seconds"] is None
    # episodes logged before and after the stop, in one run's events
    steps = kept["episodes"]["step"]
    assert steps == sorted(steps) and steps[0] < stopped_at < steps[-1]


def test_gpus_are_handed_out_round_robin_and_timeouts_fail(tmp_path):
    show = f"{QUICK} 'import os, sys; print(\"GPU=\" + os.environ[\"CUDA_VISIBLE_DEVICES\"])' {{env_id}} {{seed}}"
    proc = bench("--command", show, "--name", "gpu", "--env-ids", "A", "B", "--seeds", "1", "--gpus", "0", "1", "--workers", "2", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = sorted((tmp_path / f"r/gpu/{e}/seed1/log.txt").read_text().splitlines()[-1] for e in ("A", "B"))
    assert seen == ["GPU=0", "GPU=1"]
    slow = f"{QUICK} 'import time; time.sleep(60)' {{env_id}} {{seed}}"
    proc = bench("--command", slow, "--name", "slow", "--env-ids", "A", "--seeds", "1", "--timeout", "1", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 1
    assert "| A | 1 | failed |" in proc.stdout and "killed after --timeout 1 s" in proc.stdout


def test_a_second_runner_on_the_same_folder_is_refused(tmp_path):
    # the first runner's run outlasts anything the test waits for (Ctrl-C ends it): with 30 s, a loaded machine once
    # let it finish before the signal
    slow = f"{QUICK} 'import time; time.sleep(600)' {{env_id}} {{seed}}"
    args = [sys.executable, str(ROOT / "benchmark/run.py"), "--command", slow, "--name", "x", "--env-ids", "A", "--seeds", "1", "--out", "r"]
    first = subprocess.Popen(args, cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().startswith("1 runs (0 already finished)")  # printed once it holds the lock
        proc = bench(*args[2:], cwd=tmp_path)
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines()[-1] == f"error: another benchmark/run.py (pid {first.pid}) is running in {tmp_path / 'r/x'}; wait for it or stop it"
        assert (tmp_path / "r/x/A/seed1/log.txt").exists(), "the second runner touched the first one's run"
    finally:
        # Ctrl-C: the runner stops its child, prints the summary and exits 130; the run has no DONE.json
        first.send_signal(signal.SIGINT)
        out, _ = first.communicate(timeout=60)
    assert first.returncode == 130
    assert "| A | 1 | failed |" in out and "interrupted" in out
    assert not (tmp_path / "r/x/A/seed1/DONE.json").exists()


def sigterm_trap(path: Path, holds_its_run: bool = False) -> Path:
    """A run that says when it has started and, on SIGTERM, writes `got-sigterm` in its working directory (as a
    script saves its checkpoint) and exits 143. `holds_its_run`: it also holds a run directory as a script does
    (cleanrl/checkpoints.py's lock on runs/<run>/.lock, which names its pid)."""
    holds = (f"sys.path.insert(0, {str(ROOT / 'cleanrl')!r})\n"
             "from checkpoints import lock_run_directory\n"
             "os.makedirs('runs/standin', exist_ok=True)\n"
             "lock = lock_run_directory('runs/standin')\n") if holds_its_run else ""
    path.write_text(
        "import os, pathlib, signal, sys, time\n"
        + holds +
        "def stop(signum, frame):\n"
        "    pathlib.Path('got-sigterm').write_text('saved')\n"
        "    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    return path


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_runner_stops_its_runs_first(tmp_path, stop):
    """kill (SIGTERM) or a closed terminal (SIGHUP) ends the runner only after its runs: they get SIGTERM (a script
    saves its checkpoint), the summary lists them as interrupted, and the runner exits 128 + the signal."""
    trap = sigterm_trap(tmp_path / "trap.py")
    args = [sys.executable, str(ROOT / "benchmark/run.py"), "--command", f"{sys.executable} {trap} {{env_id}} {{seed}}",
            "--name", "x", "--env-ids", "A", "B", "--seeds", "1", "--workers", "2", "--out", "r"]
    runner = subprocess.Popen(args, cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE, text=True)
    try:
        for env_id in ("A", "B"):
            log = tmp_path / f"r/x/{env_id}/seed1/log.txt"
            wait_until(lambda: log.exists() and "ready" in log.read_text(), runner, f"run {env_id}'s start")
        runner.send_signal(stop)
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 128 + stop, out
    for env_id in ("A", "B"):
        run = tmp_path / f"r/x/{env_id}/seed1"
        assert (run / "got-sigterm").read_text() == "saved", f"run {env_id} was not stopped by the runner"
        assert not (run / "DONE.json").exists()
        assert f"| {env_id} | 1 | failed | 143 |" in out
    assert "interrupted" in out


def gone(pid: int) -> bool:
    """The process has ended (a zombie that its new parent has not reaped yet has ended too)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_runner_killed_with_sigkill_takes_its_runs_with_it(tmp_path):
    """kill -9 leaves the runner no time to stop its runs: the kernel sends them SIGTERM (they save a checkpoint and
    exit), so none goes on as an orphan beside the next runner's second copy."""
    command = f"{sys.executable} {sigterm_trap(tmp_path / 'holder.py', holds_its_run=True)} {{env_id}} {{seed}}"
    args = [sys.executable, str(ROOT / "benchmark/run.py"), "--command", command, "--name", "x", "--env-ids", "A",
            "--seeds", "1", "--out", "r"]
    runner = subprocess.Popen(args, cwd=tmp_path, env=script_env(), stdout=subprocess.DEVNULL)
    log, pid = tmp_path / "r/x/A/seed1/log.txt", None
    run = log.parent
    try:
        wait_until(lambda: log.exists() and "ready" in log.read_text(), runner, "the run's start")
        pid = int((run / "runs/standin/.lock").read_text())
        runner.kill()
        runner.wait(timeout=10)
        deadline = time.time() + 20
        while not gone(pid) and time.time() < deadline:
            time.sleep(0.05)
        assert gone(pid), "the run outlived its runner"
        assert (run / "got-sigterm").read_text() == "saved"
    finally:
        if runner.poll() is None:
            runner.kill()
        if pid is not None and not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_runner_refuses_a_folder_whose_run_is_still_going(tmp_path):
    """A run left going by a runner that could not stop it (killed on another OS, or an older runner) still holds its
    run directory: a new runner neither moves it aside nor starts a second copy; it stops in one line with the pid."""
    holder = sigterm_trap(tmp_path / "holder.py", holds_its_run=True)
    run = tmp_path / "r/x/A/seed1"
    run.mkdir(parents=True)
    (run / "log.txt").write_text("the orphan's log\n")
    orphan = subprocess.Popen([sys.executable, str(holder), "A", "1"], cwd=run, env=script_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert orphan.stdout.readline().strip() == "ready"
        proc = bench("--command", f"{QUICK} 'pass' {{env_id}} {{seed}}", "--name", "x", "--env-ids", "A",
                     "--seeds", "1", "--out", "r", cwd=tmp_path)
        assert orphan.poll() is None, "the orphan ended: the test did not test a run still going"
    finally:
        orphan.terminate()
        orphan.wait(timeout=30)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: {run / 'runs/standin'} is still in use by pid {orphan.pid}, a run that outlived its runner"
    ), proc.stderr
    assert (run / "log.txt").read_text() == "the orphan's log\n" and not (tmp_path / "r/x/.incomplete").exists()


def test_a_corrupt_done_marker_means_not_finished_and_the_run_runs_again(tmp_path):
    """DONE.json is a file in the run's folder, data to the runner: one that is cut short, not a marker the runner
    wrote, or a link to a marker elsewhere is one warning line each, and its run is moved aside and run again (with
    --keep, which reads the marker's command, too); a real marker still means finished."""
    elsewhere = tmp_path / "elsewhere.json"
    real = {"env_id": "G", "seed": 1, "argv": ["python", "x.py"], "exit_code": 0, "seconds": 1.5, "gpus": [],
            "host": "h", "finished": "2026-01-01T00:00:00Z"}
    elsewhere.write_text(json.dumps(real))
    markers = {"A": b'{"env_id": "A", "se', "B": b"[]", "C": b'{"argv": "python x.py", "exit_code": 0}',
               "D": b"\xff\xfe\x00", "E": dict(real, seconds="long"), "F": None, "G": real}
    for env_id, marker in markers.items():
        run = tmp_path / f"r/x/{env_id}/seed1"
        run.mkdir(parents=True)
        if marker is None:
            (run / "DONE.json").symlink_to(elsewhere)
        else:
            (run / "DONE.json").write_bytes(marker if isinstance(marker, bytes) else json.dumps(marker).encode())
    proc = bench("--command", f"{QUICK} 'pass' {{env_id}} {{seed}}", "--name", "x", "--env-ids", *markers, "--seeds",
                 "1", "--keep", "kept", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 6, proc.stderr
    for env_id in "ABCDEF":
        assert any(line.startswith(f"warning: {tmp_path}/r/x/{env_id}/seed1/DONE.json is not a completion marker (")
                   for line in warnings), proc.stderr
        assert f"| {env_id} | 1 | ok | 0 |" in proc.stdout
        assert len(list((tmp_path / f"r/x/.incomplete/{env_id}").glob("seed1-*/DONE.json"))) == 1
    assert "| G | 1 | skipped |" in proc.stdout and "7 runs (1 already finished)" in proc.stdout


def test_the_runner_never_writes_through_a_link_planted_in_a_run_folder(tmp_path):
    """log.txt and the marker's temporary are the runner's own files: a link planted in a stopped run's folder (kept
    for --resume-stopped) is refused, not followed; a planted DONE.tmp is replaced, its target left as it is."""
    from benchmark.run import open_own

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "log.txt").symlink_to(victim)
    for append in (False, True):
        with pytest.raises(SystemExit, match=r"log\.txt is a symbolic link; the runner writes its own files only"):
            open_own(tmp_path / "log.txt", append=append)
    # the run itself plants the link where the runner writes the marker's temporary
    plant = f"import os; os.symlink(\"{victim}\", \"DONE.tmp\")"
    proc = bench("--command", f"{QUICK} '{plant}' {{env_id}} {{seed}}", "--name", "x", "--env-ids", "A", "--seeds",
                 "1", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 0 and "| A | 1 | ok | 0 |" in proc.stdout, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "r/x/A/seed1/DONE.json").read_text())["exit_code"] == 0
    assert victim.read_text() == "precious\n"


def test_the_suite_passes_a_stop_on_to_its_runner(tmp_path):
    """benchmark/suite.py waits for benchmark/run.py; SIGTERM to the suite reaches the runner (here a stand-in that
    saves and exits) and the suite exits 143 after it, not before."""
    trap = sigterm_trap(tmp_path / "trap.py")
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from benchmark.suite import run_forwarding_stops; "
        "sys.exit(run_forwarding_stops([sys.executable, sys.argv[2]], env=dict(os.environ), cwd=sys.argv[3]))"
    )
    suite = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(trap), str(tmp_path)], env=script_env(),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert suite.stdout.readline().strip() == "ready"
        suite.send_signal(signal.SIGTERM)
        assert suite.wait(timeout=60) == 143
    finally:
        if suite.poll() is None:
            suite.kill()
    assert (tmp_path / "got-sigterm").read_text() == "saved"


def test_runner_bad_input_fails_before_any_result_folder(tmp_path):
    proc = bench("--env-ids", "CartPole-v1", "--out", "r", "--", "python", "cleanrl/no_such_script.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: the command names cleanrl/no_such_script.py")
    proc = bench("--env-ids", "CartPole-v1", "--out", "r", "--command", "python x.py", "--", "python", "y.py", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == "error: give the command either in --command or after `--`, not both"
    proc = bench("--env-ids", "CartPole-v1", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == "error: no command: give it after `--` or in --command"
    assert not (tmp_path / "r").exists()


def test_report_figures_and_tables_match_the_event_files(ppo_bench, tmp_path):
    cwd, _ = ppo_bench
    out = tmp_path / "rep"
    proc = report("--results", str(cwd / "results/ppo"), "--out", str(out), "--bounds", "CartPole-v1=0:500", cwd=tmp_path)
    for name in ("CartPole-v1", "curves", "aggregate"):
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        import matplotlib.image

        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    # the failed env has no event files, so it is in no table
    runs = read_csv(out / "runs.csv")
    assert [(r["env_id"], r["seed"]) for r in runs] == [("CartPole-v1", "1"), ("CartPole-v1", "2")]
    finals, spss = [], []
    for row in runs:
        run_dir = Path(row["run_dir"])
        assert run_dir.parent == cwd / "results/ppo/CartPole-v1" / f"seed{row['seed']}" / "runs"
        scalars = read_scalars(run_dir)
        episodes = scalars["charts/episodic_return"]
        last_step = max(s for tag in scalars.values() for s, _ in tag)
        assert last_step == 1024 == int(row["steps"])
        # final return: the episodes that ended in the last 10% of the steps (>= 921.6), from the event file
        expected = np.mean([v for s, v in episodes if s >= 0.9 * 1024])
        assert float(row["final_return"]) == pytest.approx(expected, rel=1e-12)
        assert float(row["sps"]) == values(scalars, "charts/SPS")[-1]
        assert int(row["episodes"]) == len(episodes)
        finals.append(expected)
        spss.append(values(scalars, "charts/SPS")[-1])
    (summary,) = read_csv(out / "summary.csv")
    assert summary["runs"] == "2" and summary["seeds"] == "1 2"
    assert float(summary["final_return_mean"]) == pytest.approx(np.mean(finals))
    assert float(summary["final_return_std"]) == pytest.approx(np.std(finals, ddof=1))
    assert [float(x) for x in summary["finals"].split()] == pytest.approx(finals)  # per seed, seeds in order
    assert float(summary["sps_mean"]) == pytest.approx(np.mean(spss))
    # aggregate of one env with bounds 0..500: IQM of 2 scores cuts nothing, so it is their mean
    (agg,) = read_csv(out / "aggregate.csv")
    assert float(agg["iqm"]) == pytest.approx(np.mean(finals) / 500)
    assert float(agg["iqm_ci_low"]) == pytest.approx(min(finals) / 500) and float(agg["iqm_ci_high"]) == pytest.approx(max(finals) / 500)
    assert f"| CartPole-v1 | ppo | 2 (1 2) | {np.mean(finals):.2f} ±" in proc.stdout


def test_report_compares_two_result_folders(ppo_bench, tmp_path):
    cwd, _ = ppo_bench
    shutil.copytree(cwd / "results/ppo", tmp_path / "v2")
    out = tmp_path / "cmp"
    report("--results", str(cwd / "results/ppo"), str(tmp_path / "v2"), "--labels", "v1", "v2", "--out", str(out), cwd=tmp_path)
    rows = read_csv(out / "summary.csv")
    assert [r["label"] for r in rows] == ["v1", "v2"]
    assert rows[0]["final_return_mean"] == rows[1]["final_return_mean"]
    assert [r["label"] for r in read_csv(out / "aggregate.csv")] == ["v1", "v2"]
    assert (out / "CartPole-v1.png").stat().st_size > 0


def test_report_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmark/report.py"), "--results", "empty", "--out", "rep"],
        cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "error: no kept results (seed*.json) and no TensorBoard event files below empty"


def test_kept_results_survive_a_change_of_machine(ppo_bench, tmp_path):
    """Only the kept files travel (as in a fresh checkout): the runner skips those runs, the report reads them."""
    cwd, _ = ppo_bench
    shutil.copytree(cwd / "benchmark/kept", tmp_path / "benchmark/kept")
    kept = sorted((tmp_path / "benchmark/kept/ppo").rglob("*.json"))
    assert [p.relative_to(tmp_path / "benchmark/kept/ppo").as_posix() for p in kept] == ["CartPole-v1/seed1.json", "CartPole-v1/seed2.json"]
    for seed, path in zip((1, 2), kept):
        record = read_kept(path)
        # the command names the script relative to the repository root, so it reruns on any checkout
        assert record["command"] == ["python", "cleanrl/ppo.py", "--total-timesteps", "1024", "--env-id", "CartPole-v1", "--seed", str(seed)]
        assert record["total_timesteps"] == 1024 == record["last_step"]
        (events,) = {p.parent for p in (cwd / f"results/ppo/CartPole-v1/seed{seed}").rglob("events.out.tfevents.*")}
        scalars = read_scalars(events)
        assert record["episodes"]["step"] == [s for s, _ in scalars["charts/episodic_return"]]
        assert record["episodes"]["return"] == pytest.approx([v for _, v in scalars["charts/episodic_return"]], abs=5e-5)
        assert record["sps"] == pytest.approx(values(scalars, "charts/SPS")[-1], abs=0.05)
    command = ["--", sys.executable, str(PPO), "--total-timesteps", "1024"]
    proc = bench("--env-ids", "CartPole-v1", "--seeds", "1", "2", "--out", "results", "--keep", "benchmark/kept", *command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 runs (2 already finished)" in proc.stdout and proc.stdout.count("kept result exists") == 2
    assert not (tmp_path / "results/ppo/CartPole-v1").exists(), "a kept run ran again"
    # another budget under the same name would mix two benchmarks: refused before anything runs
    command[-1] = "2048"
    proc = bench("--env-ids", "CartPole-v1", "--seeds", "1", "--out", "results", "--keep", "benchmark/kept", *command, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        "error: benchmark/kept/ppo/CartPole-v1/seed1.json holds a run of another command (python cleanrl/ppo.py "
        "--total-timesteps 1024 --env-id CartPole-v1 --seed 1); give this benchmark its own --name, or delete the file to replace it"
    )
    # the report from the kept files gives the tables the event files give
    report("--results", "benchmark/kept/ppo", "--out", "from_kept", cwd=tmp_path)
    report("--results", str(cwd / "results/ppo"), "--out", "from_events", cwd=tmp_path)
    kept_rows, event_rows = read_csv(tmp_path / "from_kept/summary.csv"), read_csv(tmp_path / "from_events/summary.csv")
    for row in kept_rows + event_rows:
        row.pop("label")
    for a, b in zip(kept_rows, event_rows, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            try:
                assert float(a[key]) == pytest.approx(float(b[key]), abs=0.05), key
            except ValueError:
                assert a[key] == b[key], key


def test_curve_band_by_hand_and_inside_the_runs():
    rng = np.random.default_rng(0)
    # two runs 0 and 10: a resampled mean is 0, 5 or 10 with probabilities 1/4, 1/2, 1/4, so the 95% band is [0, 10];
    # all equal: the band is that value; one run (or none) at a step: no band there
    ys = np.array([[0.0, 3.0, np.nan, np.nan], [10.0, 3.0, 7.0, np.nan]])
    lo, hi = bootstrap_band(ys, 4000, rng)
    np.testing.assert_array_equal(lo[:2], [0.0, 3.0])
    np.testing.assert_array_equal(hi[:2], [10.0, 3.0])
    assert np.isnan(lo[2:]).all() and np.isnan(hi[2:]).all()
    # CartPole-like returns near the 500 cap: the band never leaves [min, max] of the runs (a t-interval would)
    ys = np.array([[500.0, 20.0], [500.0, 9.0], [150.0, 10.0]])
    lo, hi = bootstrap_band(ys, 2000, rng)
    assert (lo >= ys.min(axis=0)).all() and (hi <= ys.max(axis=0)).all() and (lo < hi).all()
    half = t_halfwidth(ys, axis=0)
    assert ys.mean(axis=0)[0] + half[0] > 500 and ys.mean(axis=0)[1] - half[1] < 0


def test_iqm_by_hand():
    # 8 scores: int(8/4) = 2 cut from each end of 1 2 3 4 5 6 7 100 -> mean(3, 4, 5, 6) = 4.5
    assert iqm(np.array([7.0, 100.0, 1.0, 3.0, 2.0, 6.0, 5.0, 4.0])) == pytest.approx(4.5)
    # 5 scores: int(1.25) = 1 cut from each end of 0 1 2 10 100 -> (1 + 2 + 10) / 3
    assert iqm(np.array([100.0, 0.0, 10.0, 1.0, 2.0])) == pytest.approx(13 / 3)
    # 3 scores: nothing cut, the plain mean
    assert iqm(np.array([0.0, 1.0, 5.0])) == pytest.approx(2.0)
    # rowwise, as the bootstrap uses it
    np.testing.assert_allclose(iqm_rows(np.array([[1.0, 2, 3, 4], [4, 0, 0, 8]])), [2.5, 2.0])


def test_stratified_bootstrap_by_hand():
    # env A has runs scoring 0 and 1, env B one run scoring 0.5. A replicate draws 2 runs of A and 1 of B, so
    # the pooled mean is (a1 + a2 + 0.5) / 3 with a1 + a2 in {0, 1, 2} with probabilities 1/4, 1/2, 1/4:
    # the 2.5% and 97.5% quantiles are 1/6 and 5/6, the point estimate 1/2.
    rng = np.random.default_rng(0)
    point, lo, hi = stratified_bootstrap_ci([np.array([0.0, 1.0]), np.array([0.5])], mean_rows, 4000, rng)
    assert (point, lo, hi) == pytest.approx((0.5, 1 / 6, 5 / 6))
    # one run per env: every replicate is the data itself
    point, lo, hi = stratified_bootstrap_ci([np.array([0.2]), np.array([0.9])], iqm_rows, 100, rng)
    assert point == lo == hi == pytest.approx(0.55)


def test_final_return_and_t_interval_by_hand():
    steps = np.array([100, 850, 905, 1000])
    returns = np.array([1.0, 2.0, 4.0, 8.0])
    assert final_return(steps, returns, 1000, 0.1) == pytest.approx(6.0)  # episodes at 905 and 1000
    assert final_return(steps, returns, 1000, 0.2) == pytest.approx(14 / 3)
    assert final_return(np.array([10]), np.array([3.0]), 1000, 0.1) == 3.0  # none in the window: the last one
    # n = 3, sd = 1: t_{0.975, 2} * 1 / sqrt(3)
    assert t_halfwidth(np.array([1.0, 2.0, 3.0])) == pytest.approx(4.303 / np.sqrt(3))
    assert np.isnan(t_halfwidth(np.array([1.0])))


# ---- benchmark/throughput.py: every script plain and with its speed flags, next to SB3 and the raw env ----

SB3_PYTHON = ROOT / "benchmark/results/.venv-sb3/bin/python"
# upstream CleanRL: a snapshot of github:vwxyzjn/cleanrl (outside this project; /work/upstream on the machines this
# project is developed on) and its venv (python benchmark/throughput.py --setup-cleanrl-venv ...)
CLEANRL_SNAPSHOT = Path(os.environ.get("CLEANRL_SNAPSHOT", "/work/upstream"))
CLEANRL_PYTHON = ROOT / "benchmark/results/.venv-cleanrl/bin/python"
needs_upstream = pytest.mark.skipif(
    not ((CLEANRL_SNAPSHOT / "cleanrl_utils").is_dir() and CLEANRL_PYTHON.is_file()),
    reason=f"no upstream CleanRL here: needs a snapshot of its repository at $CLEANRL_SNAPSHOT ({CLEANRL_SNAPSHOT}) "
    f"and its venv at {CLEANRL_PYTHON.parent.parent.relative_to(ROOT)}",
)


def throughput(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmark/throughput.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", list(SPECS))
def test_throughput_passes_flags_our_scripts_accept(name):
    # throughput.py runs our scripts with explicit hyperparameters and its budget; each flag must exist in the
    # script's Args, and the budget must fit the spec's sizes (one iteration = num_envs * num_steps; learning starts)
    import importlib

    import tyro

    spec = SPECS[name]
    module = importlib.import_module(f"cleanrl.{spec['script'][:-3]}")
    steps, _ = budget(spec, 1.0)
    args = tyro.cli(module.Args, args=script_argv(spec, steps, seed=1, cuda=False))
    assert args.env_id == spec["env_id"] and args.num_envs == spec["num_envs"] and args.total_timesteps == steps
    assert args.torch_threads == 1  # one thread, as the SB3 helper, whatever the script's default
    defaults = tyro.cli(module.Args, args=script_argv(spec, steps, seed=1, cuda=False, threads="defaults"))
    assert defaults.torch_threads == module.Args.torch_threads  # --threads defaults: the script's own default
    if "iteration" in spec:
        assert args.num_envs * args.num_steps == spec["iteration"]
    else:
        assert args.learning_starts == spec["learning_starts"] < steps


def test_throughput_budgets_by_hand():
    ppo = dict(iteration=512, iterations=100)
    assert budget(ppo, 1.0) == (51200, "100 iterations of 512, the first one warm-up")
    assert budget(ppo, 0.5)[0] == 50 * 512
    assert budget(ppo, 0.001)[0] == 2 * 512  # never fewer than 2: the first iteration logs no SPS
    dqn = dict(learning_starts=1000, measured=24000)
    assert budget(dqn, 1.0) == (25000, "1000 learning starts, then 24000 measured")
    assert budget(dqn, 0.1)[0] == 1000 + 2400
    assert budget(dqn, 0.0001)[0] == 1000 + 200  # SPS is logged every 100 steps after the first update


def test_throughput_variants_apply_and_medians_by_hand():
    from benchmark.throughput import SPECS, applies, columns, markdown, summarize, variant_flags

    assert variant_flags("compile+cudagraphs+amp") == ["--compile", "--cudagraphs", "--amp"]
    assert variant_flags("cudagraphs+pipeline-envs=off") == ["--cudagraphs", "--pipeline-envs", "off"]
    cnn, mlp = dict(cnn=True), dict()
    assert applies("compile", mlp, cuda=False) is None
    assert applies("compile+amp", mlp, cuda=True) == "amp: CNN scripts only"
    assert applies("compile+amp", cnn, cuda=False) is None
    assert applies("compile+cudagraphs", cnn, cuda=False) == "cudagraphs: CUDA only"
    assert applies("pipeline-envs=off", SPECS["ppo_atari"], cuda=True) is None
    assert applies("pipeline-envs=off", SPECS["dqn_atari"], cuda=True) == "pipeline-envs: ppo_atari scripts only"
    # the JAX script takes --loops and no torch speed flag; the torch scripts take no --loops
    jax_spec = SPECS["ppo_atari_envpool_xla_jax_scan"]
    assert variant_flags("loops=python") == ["--loops", "python"]
    assert applies("loops=python", jax_spec, cuda=True) is None
    assert applies("compile+cudagraphs", jax_spec, cuda=True) == "torch flags; XLA compiles the JAX script"
    assert applies("loops=python+compile", jax_spec, cuda=True) == "torch flags; XLA compiles the JAX script"
    assert applies("loops=python", SPECS["ppo_atari"], cuda=True) == "loops: the JAX script only"
    runs = [dict(label=label, sps=sps, load_before=1.0, load_after=2.5) for label, sps in
            [("plain", 100), ("compile", 300), ("raw", 1000), ("plain", 300), ("compile", 500), ("raw", 3000), ("plain", 200)]]  # fmt: skip
    runs.append(dict(label="compile", error="exit 1", load_before=0.5, load_after=1.0))
    for r, process in zip([r for r in runs if r["label"] == "plain"], [50, 70, 60]):
        r["process_sps"] = process
    runs += [dict(label="cleanrl", sps=sps, process_sps=process, load_before=1.0, load_after=1.0) for sps, process in [(80, 40), (120, 20)]]
    row = dict(script="x", env_id="E", num_envs=2, total_timesteps=10, budget="b", rounds=3, variants=["compile", "compile+amp"],
               columns=columns(["compile", "compile+amp"]), not_run={"compile+amp": "n/a (amp: CNN scripts only)", "sb3": "n/a (no SB3 algorithm)"}, runs=runs)  # fmt: skip
    summarize(row)
    # medians: plain 100, 300, 200 -> 200; compile 300, 500 (the failed round has no SPS) -> 400; raw 1000, 3000 -> 2000;
    # cleanrl 80, 120 -> 100; process SPS: plain 50, 70, 60 -> 60, cleanrl 40, 20 -> 30
    assert row["sps"] == {"plain": 200, "compile": 400, "cleanrl": 100, "raw": 2000}
    assert row["process_sps"] == {"plain": 60, "cleanrl": 30}
    assert row["ratios"] == {"compile/plain": 2.0, "plain/cleanrl": 2.0, "plain/cleanrl (process)": 2.0, "plain/raw": 0.1,
                             "compile/cleanrl": 4.0, "compile/raw": 0.2}  # fmt: skip
    table = markdown([row], ["compile", "compile+amp"]).splitlines()
    assert table[0].startswith("| script | env (envs) | budget per run | rounds | plain SPS | compile SPS | compile / plain | compile+amp SPS |")
    assert "| CleanRL SPS | plain / CleanRL | plain / CleanRL (process) | raw env SPS |" in table[0]
    assert table[2] == ("| x | E (2) | 10: b | 3 | 200 | 400 | 2.00 | n/a (amp: CNN scripts only) | - | n/a (no SB3 algorithm) | - | - | - "
                        "| 100 | 2.00 | 2.00 | 2000 | 0.10 | 0.20 | - | 0.5 to 2.5 |")


def test_throughput_error_line_says_why_a_run_failed(tmp_path):
    from benchmark.throughput import error_line

    log = tmp_path / "log.txt"
    log.write_text("$ python x.py\nwarming up\nerror: --compile on CPU needs a C++ compiler\n")
    assert error_line(log) == "error: --compile on CPU needs a C++ compiler"
    log.write_text("╭─ Unrecognized options ─╮\n│ Unrecognized options: --compile │\n│ For full helptext, run x.py --help │\n╰──╯\n")
    assert error_line(log) == "Unrecognized options: --compile"
    log.write_text("Traceback (most recent call last):\n  File x.py\nRuntimeError: boom\n")
    assert error_line(log) == "RuntimeError: boom"
    log.write_text("killed\n\n")
    assert error_line(log) == "killed"


@pytest.fixture(scope="module")
def speed_table(tmp_path_factory):
    """One real invocation: ppo.py for 2 iterations plain, with --compile and with a flag it does not have, SB3 (when
    its venv exists here; CI has none, so there --no-sb3) and the raw env, one round."""
    cwd = tmp_path_factory.mktemp("speed")
    sb3 = ["--sb3-python", str(SB3_PYTHON)] if SB3_PYTHON.is_file() else ["--no-sb3"]
    proc = throughput(
        "--scripts", "ppo", "--variants", "compile", "no-such-flag", "--rounds", "1", "--budget-scale", "0.01",
        "--raw-seconds", "0.5", "--out", "speed", *sb3, cwd=cwd,
    )  # fmt: skip
    return cwd, proc, json.loads((cwd / "speed/results.json").read_text())


@pytest.mark.heavy
def test_throughput_a_failing_variant_is_named_and_the_table_goes_on(speed_table):
    cwd, proc, results = speed_table
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = cwd / "speed/work/ppo/no-such-flag/round1/log.txt"
    line = f"- ppo no-such-flag round 1: exit 2: Unrecognized options: --no-such-flag (log {log})"
    assert line in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == f"error: 1 run(s) failed (listed above and in {cwd / 'speed/results.md'})"
    (row,) = results["results"]
    assert [r["label"] for r in row["runs"]] == ["plain", "compile", "no-such-flag", *(["sb3"] if SB3_PYTHON.is_file() else []), "raw"]
    failed = [r for r in row["runs"] if "error" in r]
    assert [r["label"] for r in failed] == ["no-such-flag"] and "no-such-flag/plain" not in row["ratios"]
    assert "| ppo | 1 | no-such-flag | failed |" in (cwd / "speed/results.md").read_text()


@pytest.mark.heavy
def test_throughput_reads_sps_from_the_event_files(speed_table):
    cwd, _, results = speed_table
    (row,) = results["results"]
    assert row["total_timesteps"] == 1024 and row["budget"] == "2 iterations of 512, the first one warm-up"
    for label in ("plain", "compile"):
        work = cwd / "speed/work/ppo" / label / "round1"
        command = (work / "log.txt").read_text().splitlines()[0]
        assert ("--compile" in command.split()) == (label == "compile")
        scalars = read_scalars(single_run_dir(work))
        # the warm-up iteration logs no SPS: the one value is the second iteration's, at step 1024
        assert [s for s, _ in scalars["charts/SPS"]] == [1024]
        assert row["sps"][label] == values(scalars, "charts/SPS")[-1] > 0
    assert row["ratios"]["compile/plain"] == pytest.approx(row["sps"]["compile"] / row["sps"]["plain"])
    assert row["sps"]["raw"] > row["sps"]["plain"]  # random actions in CartPole, no network: far faster
    assert row["ratios"]["plain/raw"] == pytest.approx(row["sps"]["plain"] / row["sps"]["raw"])
    if SB3_PYTHON.is_file():
        assert row["sps"]["sb3"] > 0 and row["ratios"]["compile/sb3"] == pytest.approx(row["sps"]["compile"] / row["sps"]["sb3"])
    else:
        assert row["not_run"]["sb3"] == "not run (--no-sb3)" and "sb3" not in row["sps"]
    assert row["not_run"]["cleanrl"] == "not run (no --cleanrl path)" and "cleanrl" not in row["sps"]
    for r in row["runs"]:
        assert r["load_before"] >= 0 and r["load_after"] >= 0 and r["process_seconds"] > 0
    md = (cwd / "speed/results.md").read_text()
    assert f"torch {results['machine']['torch']}" in md and "load before" in md
    assert f"| ppo | CartPole-v1 (4) | 1024: 2 iterations of 512, the first one warm-up | 1 | {row['sps']['plain']:.0f} | {row['sps']['compile']:.0f} |" in md


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "sync", "env_id": "CartPole-v1", "num_envs": 3},
        {"kind": "atari", "env_id": "BreakoutNoFrameskip-v4", "num_envs": 2},
        {"kind": "procgen", "env_id": "StarpilotEasy-v0", "num_envs": 2},
    ],
)
def test_throughput_raw_env_steps_the_scripts_vector_env(spec, tmp_path):
    if spec["kind"] == "procgen":
        pytest.importorskip("envpool", reason="optional dependency envpool (ppg_procgen.py's Procgen) is missing")
    payload = json.dumps(dict(spec, seconds=0.3, seed=1, warmup_steps=2))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmark/throughput_raw_env.py"), payload], cwd=tmp_path,
                          env=script_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [l for l in proc.stdout.splitlines() if l.startswith("RAW_ENV ")]
    out = json.loads(line[len("RAW_ENV ") :])
    # whole vector steps, each num_envs env steps, for at least the asked seconds
    assert out["steps"] > 0 and out["steps"] % spec["num_envs"] == 0 and out["seconds"] >= 0.3
    assert out["sps"] == pytest.approx(out["steps"] / out["seconds"])


def test_throughput_a_run_past_the_timeout_is_killed_and_reported(tmp_path):
    proc = throughput("--scripts", "ppo", "--variants", "--no-sb3", "--rounds", "1", "--timeout", "3", "--raw-seconds", "0.2",
                      "--out", "t", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1
    assert f"- ppo plain round 1: killed after --timeout 3 s (log {tmp_path / 't/work/ppo/plain/round1/log.txt'})" in proc.stdout
    (row,) = json.loads((tmp_path / "t/results.json").read_text())["results"]
    plain = row["runs"][0]
    # stopped at the timeout (the full 51200-step run takes far longer), and it has no SPS
    assert plain["label"] == "plain" and 3 <= plain["process_seconds"] < 20 and "plain" not in row["sps"]


def test_throughput_bad_input(tmp_path):
    def bad(*args):
        proc = throughput(*args, "--out", str(tmp_path / "tp"), cwd=tmp_path, timeout=120)
        assert proc.returncode == 1
        return proc.stderr.strip().splitlines()[-1]

    assert bad("--scripts", "nope").startswith("error: unknown --scripts ['nope']; choose from ppo, ppo_continuous_action,")
    assert bad("--scripts", "ppo", "--variants", "Compile!") == (
        "error: --variants ['Compile!']: each is flag names without '--' joined by '+', like compile or compile+amp "
        "(or flag=value)"
    )
    assert bad("--scripts", "ppo", "--variants", "plain") == "error: --variants must be distinct and must not include plain (the plain path always runs)"
    assert bad("--scripts", "ppo", "--rounds", "0") == "error: --rounds must be at least 1, got 0"
    assert bad("--scripts", "ppo", "--sb3-python", str(tmp_path / "no-venv/bin/python")).startswith(
        f"error: no Stable-Baselines3 python at {tmp_path / 'no-venv/bin/python'}; create it with"
    )
    assert not (tmp_path / "tp").exists()


def test_throughput_steady_sps_from_event_wall_times_by_hand(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from benchmark.kept import scalar_events
    from benchmark.throughput import steady_sps

    # upstream CleanRL logs charts/SPS = steps / seconds since its start; the steady rate is taken between its first
    # and last event instead: (1536 - 512) steps / (101.5 - 100.0) s
    writer = SummaryWriter(str(tmp_path / "run"))
    for step, wall, value in [(512, 100.0, 80), (1024, 100.5, 90), (1536, 101.5, 95)]:
        writer.add_scalar("charts/SPS", value, step, walltime=wall)
    writer.add_scalar("losses/x", 1.0, 2048, walltime=103.0)  # another tag does not count
    writer.close()
    events = scalar_events(tmp_path / "run", "charts/SPS")
    assert events == [(512, 100.0, 80.0), (1024, 100.5, 90.0), (1536, 101.5, 95.0)]
    assert steady_sps(events) == pytest.approx(1024 / 1.5)
    assert steady_sps(events[:2]) == pytest.approx(512 / 0.5)
    assert steady_sps(events[:1]) is None and steady_sps([]) is None  # one event: no interval
    assert steady_sps([(512, 100.0, 80), (1024, 100.0, 90)]) is None  # no time between them
    assert scalar_events(tmp_path / "run", "charts/nothing") == []


@needs_upstream
def test_throughput_passes_flags_the_upstream_scripts_accept():
    # every upstream flag exists in the upstream script's Args and sets the same sizes as ours: one subprocess in the
    # upstream venv parses them all with the script's own Args (its training code does not run)
    names = [n for n in SPECS if "upstream" in SPECS[n]]
    # the scripts without an upstream run say why (procgen, and the 2022 JAX stack, do not install here)
    assert {n for n in SPECS if n not in names} == {"ppg_procgen", "ppo_atari_envpool_xla_jax_scan"}
    assert all(SPECS[n].get("upstream_na") for n in SPECS if n not in names)
    jobs = [(n, str(CLEANRL_SNAPSHOT / "cleanrl" / SPECS[n]["script"]), cleanrl_argv(SPECS[n], budget(SPECS[n], 1.0)[0], 1, False)[1]) for n in names]  # fmt: skip
    code = (
        "import json, runpy, sys, tyro\n"
        "for name, path, flags in json.loads(sys.argv[1]):\n"
        "    a = tyro.cli(runpy.run_path(path, run_name='upstream_args')['Args'], args=flags)\n"
        "    print('ARGS', json.dumps(dict(name=name, env_id=a.env_id, total=a.total_timesteps, cuda=a.cuda, num_envs=getattr(a, 'local_num_envs', None) or getattr(a, 'num_envs', 1),\n"
        "          num_steps=getattr(a, 'num_steps', None), learning_starts=getattr(a, 'learning_starts', None))))\n"
    )
    proc = subprocess.run([str(CLEANRL_PYTHON), "-c", code, json.dumps(jobs)], env=dict(script_env(), PYTHONPATH=str(CLEANRL_SNAPSHOT)),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    parsed = {a["name"]: a for a in (json.loads(l[5:]) for l in proc.stdout.splitlines() if l.startswith("ARGS "))}
    assert list(parsed) == names
    for name, a in parsed.items():
        spec = SPECS[name]
        steps = budget(spec, 1.0)[0]
        # the multi-process script counts envs per rank
        assert a["env_id"] == spec.get("upstream_env_id", spec["env_id"]) and a["num_envs"] * spec.get("nproc", 1) == spec["num_envs"] and not a["cuda"]
        if "iteration" in spec:
            assert a["total"] == steps and a["num_envs"] * spec.get("nproc", 1) * a["num_steps"] == spec["iteration"]
        else:  # one step more: its loop stops at total - 1
            assert a["total"] == steps + 1 and a["learning_starts"] == spec["learning_starts"]


@needs_upstream
def test_throughput_runs_upstream_cleanrl_beside_ours(tmp_path):
    """One real invocation: ppo.py and upstream CleanRL's ppo.py for 2 iterations each, one round, no variant."""
    from benchmark.kept import scalar_events

    proc = throughput("--scripts", "ppo", "--variants", "--no-sb3", "--rounds", "1", "--budget-scale", "0.01", "--raw-seconds", "0.2",
                      "--cleanrl", str(CLEANRL_SNAPSHOT / "cleanrl"), "--cleanrl-python", str(CLEANRL_PYTHON), "--out", "tp", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "tp/results.json").read_text())
    assert results["cleanrl"]["path"] == str(CLEANRL_SNAPSHOT) and results["cleanrl"]["versions"]["gymnasium"] == "0.29.1"
    (row,) = results["results"]
    assert [r["label"] for r in row["runs"]] == ["plain", "cleanrl", "raw"]
    plain, cleanrl, _ = row["runs"]
    work = tmp_path / "tp/work/ppo/cleanrl/round1"
    # run as users run it: its own python and script, --no-cuda, its default torch threads, only the snapshot on PYTHONPATH
    command = (work / "log.txt").read_text().splitlines()[0].split()
    assert command[:3] == ["$", f"PYTHONPATH={CLEANRL_SNAPSHOT}", str(CLEANRL_PYTHON)]
    assert command[3] == str(CLEANRL_SNAPSHOT / "cleanrl/ppo.py") and "--no-cuda" in command and "--torch-threads" not in command
    # steady SPS by hand from the wall times of its charts/SPS events: one per iteration, at steps 512 and 1024
    events = scalar_events(single_run_dir(work), "charts/SPS")
    assert [step for step, _, _ in events] == [512, 1024]
    assert row["sps"]["cleanrl"] == pytest.approx(512 / (events[1][1] - events[0][1]))
    assert cleanrl["logged_sps"] == events[1][2]  # its own figure, since its start, kept for reference
    for r in (plain, cleanrl):
        assert r["process_sps"] == pytest.approx(1024 / r["process_seconds"])
    assert row["ratios"]["plain/cleanrl"] == pytest.approx(row["sps"]["plain"] / row["sps"]["cleanrl"])
    assert row["ratios"]["plain/cleanrl (process)"] == pytest.approx(plain["process_sps"] / cleanrl["process_sps"])
    md = (tmp_path / "tp/results.md").read_text()
    assert f"Upstream CleanRL: the snapshot at {CLEANRL_SNAPSHOT}" in md
    assert f"| {row['sps']['cleanrl']:.0f} | {row['ratios']['plain/cleanrl']:.2f} | {row['ratios']['plain/cleanrl (process)']:.2f} |" in md


def test_throughput_bad_cleanrl_input(tmp_path):
    def bad(*args):
        proc = throughput("--scripts", "ppo", "--no-sb3", *args, "--out", str(tmp_path / "tp"), cwd=tmp_path, timeout=120)
        assert proc.returncode == 1
        return proc.stderr.strip().splitlines()[-1]

    assert bad("--cleanrl", str(tmp_path / "nowhere")) == f"error: --cleanrl {tmp_path / 'nowhere'} does not exist"
    (tmp_path / "snap/cleanrl").mkdir(parents=True)
    assert bad("--cleanrl", str(tmp_path / "snap")) == (
        f"error: --cleanrl {tmp_path / 'snap'} is not an upstream CleanRL snapshot: neither it nor its parent holds cleanrl/ and cleanrl_utils/"
    )
    (tmp_path / "snap/cleanrl_utils").mkdir()
    assert bad("--cleanrl", str(tmp_path / "snap")) == f"error: --cleanrl {tmp_path / 'snap'} has no cleanrl/ppo.py (--scripts ppo)"
    (tmp_path / "snap/cleanrl/ppo.py").write_text("")
    for given in ("snap", "snap/cleanrl"):  # the repository root or its cleanrl/ folder
        assert bad("--cleanrl", str(tmp_path / given), "--cleanrl-python", str(tmp_path / "no-venv/bin/python")) == (
            f"error: no upstream CleanRL python at {tmp_path / 'no-venv/bin/python'}; create it with: python benchmark/throughput.py "
            f"--setup-cleanrl-venv {tmp_path / 'no-venv'} (or leave out --cleanrl)"
        )
    assert not (tmp_path / "tp").exists()


def test_run_names_with_a_slash_in_the_env_id():
    assert parse_run_name(Path("r/ALE/seed1/runs/ALE/Pong-v5__ppo_atari__3__1700000000")) == ("ALE/Pong-v5", 3)
    assert parse_run_name(Path("r/runs/CartPole-v1__ppo__1__1700000000")) == ("CartPole-v1", 1)


def test_profile_split_categories_and_shares_by_hand():
    from benchmark.profile_split import attribute, category, split

    assert category("~", "<method 'run_backward' of 'torch._C._EngineBase' objects>") == "torch"
    assert category("~", "<built-in method mujoco._functions.mj_step>") == "environment"
    assert category("~", "<built-in method marshal.loads>") == "imports"
    assert category("~", "<method 'reduce' of 'numpy.ufunc' objects>") == "numpy"
    assert category("~", "<method 'release' of '_thread.lock' objects>") == "other"
    site = "/v/lib/python3.11/site-packages"
    assert category(f"{site}/gymnasium/vector/sync_vector_env.py", "step") == "environment"
    assert category(f"{site}/torch/nn/modules/module.py", "_call_impl") == "torch"
    assert category(f"{site}/numpy/_core/shape_base.py", "stack") == "numpy"
    assert category("/work/main/cleanrl/runtime.py", "add") == "cleanrl"
    assert category("<frozen importlib._bootstrap>", "_find_and_load") == "imports"
    assert category("/usr/lib/python3.11/copy.py", "deepcopy") == "other"
    # tensor operators, wrapped under the profiler (benchmark/profile_hook.py), and the C call inside the wrapper
    assert category("/work/main/cleanrl/runtime.py", "Tensor.__mul__") == "torch"
    assert category("~", "<function torch.Tensor.__mul__ at 0x7f0>") == "torch"
    # cProfile's stats: {function: (primitive calls, calls, own s, cumulative s, {caller: (.., calls, own s, cum s)})}
    linear = ("~", 0, "<built-in method torch._C._nn.linear>")
    call_impl = (f"{site}/torch/nn/modules/module.py", 1, "_call_impl")
    step, eps = (f"{site}/gymnasium/core.py", 10, "step"), ("/work/main/cleanrl/dqn.py", 5, "epsilon_greedy")
    concat = (f"{site}/gymnasium/vector/utils/space_utils.py", 7, "concatenate")
    dispatch = ("/usr/lib/python3.11/functools.py", 904, "wrapper")  # singledispatch, between gymnasium and numpy
    stack = (f"{site}/numpy/_core/shape_base.py", 378, "stack")
    stats = {
        linear: (300, 300, 2.0, 2.0, {call_impl: (300, 300, 2.0, 2.0)}),
        call_impl: (900, 900, 1.0, 3.0, {}),
        step: (100, 100, 0.6, 1.5, {}),
        concat: (100, 100, 0.1, 0.5, {dispatch: (100, 100, 0.1, 0.5)}),
        dispatch: (100, 100, 0.1, 0.6, {step: (100, 100, 0.1, 0.6)}),
        # np.stack: 0.3 s from gymnasium (through the dispatcher and concatenate), 0.1 s from the script
        stack: (140, 140, 0.4, 0.4, {concat: (100, 100, 0.3, 0.3), eps: (40, 40, 0.1, 0.1)}),
        eps: (100, 100, 0.5, 0.6, {}),
    }
    rows = attribute(stats)
    assert sorted(r for r in rows if r[0] == "shape_base.py:378(stack)") == [
        ("shape_base.py:378(stack)", "environment", 0.3, 100),
        ("shape_base.py:378(stack)", "numpy", pytest.approx(0.1), 40),
    ]
    assert ("functools.py:904(wrapper)", "environment", 0.1, 100) in rows
    # a 5 s span: 4.7 s in functions, the other 0.3 s in the loop's own lines
    out = split(rows, top=1, span_seconds=5.0)
    assert out["torch"] == {"seconds": 3.0, "share": 0.6, "top": [["<built-in method torch._C._nn.linear>", 2.0, 300]]}
    assert out["environment"]["top"] == [["core.py:10(step)", 0.6, 100]]
    assert out["environment"]["seconds"] == pytest.approx(1.1) and out["other"]["seconds"] == 0.0
    assert out["numpy"] == {"seconds": 0.1, "share": 0.02, "top": [["shape_base.py:378(stack)", 0.1, 40]]}
    assert out["cleanrl"]["seconds"] == 0.5 and out["loop"] == {"seconds": 0.3, "share": 0.06, "top": []}


def test_profile_split_profiles_the_measured_span_of_a_real_run(tmp_path):
    """ppo.py under benchmark/profile_hook.py: the profile starts with the SPS clock (after the first iteration), so the policy
    step is seen once per rollout step of the other iterations, and the rollout's tensor stores (`obs[step] = ...`,
    C slots) are counted as torch, not as the loop's own time; commands that are not a script of this project fail
    in one line."""
    out = tmp_path / "split.json"
    cmd = [sys.executable, str(ROOT / "benchmark/profile_split.py"), "--out", str(out), "--no-unprofiled", "--top", "100",
           "--",
           "python", str(PPO), "--total-timesteps", "2048", "--num-envs", "2", "--num-steps", "64", "--torch-threads", "1"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    # 16 iterations of 2 x 64 steps; the clock starts after the first
    assert result["span"]["first_step"] == 128 and result["span"]["last_step"] == 2048
    assert "- profiled span: steps 128 to 2048" in proc.stdout
    split = result["split"]
    assert ["ppo.py", 15 * 64] in [[label.split(":")[0], calls] for label, _, calls in split["cleanrl"]["top"]
                                   if "(policy_step)" in label]
    stores = {label.split(":")[0]: calls for label, _, calls in split["torch"]["top"]
              if "(Tensor.__setitem__)" in label}
    assert stores.get("profile_hook.py", 0) >= 4 * 15 * 64  # obs, actions, logprobs, values at every rollout step
    assert split["imports"]["seconds"] < 0.05 * result["span"]["seconds"]  # start-up is outside the span
    assert split["torch"]["share"] > 0.2 and split["environment"]["share"] > 0.02
    assert sum(row["share"] for row in split.values()) == pytest.approx(1.0, abs=1e-3)
    script = tmp_path / "other.py"
    script.write_text("print('no run here')\n")
    for command, error in (
        (["torchrun", str(script)], "error: the command must be `python SCRIPT.py [FLAGS]` (launchers such as torchrun are not profiled)"),
        (["python", str(script)], "error: other.py wrote no profile: it is no script of this project, or its run never started its SPS clock"),
    ):
        bad = subprocess.run([*cmd[:2], "--no-unprofiled", "--", *command], cwd=tmp_path, env=script_env(), capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [error.replace("other.py", str(script))]


# ---- a kept result is read as data: a planted pickle never runs ----


class WritesMarker:
    """What an attacker plants: unpickling it calls open(marker, "w"), which creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_pickle_in_a_kept_benchmark_result_never_runs(tmp_path):
    marker, kept = tmp_path / "marker", tmp_path / "seed1.json"
    kept.write_bytes(pickle.dumps(WritesMarker(marker)))
    with pytest.raises(SystemExit) as e:
        read_kept(kept)
    assert str(e.value).startswith(f"error: {kept} is not a kept benchmark run") and "\n" not in str(e.value)
    assert not marker.exists()


# ---- the multi-GPU scaling benchmark's reading of an event file ----


def test_scaling_benchmark_measures_steps_per_second_after_the_first_iteration(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from benchmark.ppo_atari_multigpu_scaling import read_sps

    writer = SummaryWriter(str(tmp_path))
    # the script logs no SPS for iteration 1 (warm-up); iterations 2-4 end at 1050, 1052, 1054 s, 128 steps each
    for step, wall, sps in [(64, 1050.0, 1), (192, 1052.0, 3), (320, 1054.0, 5)]:
        writer.add_scalar("charts/SPS", sps, step, walltime=wall)
    writer.close()
    steady, last, iterations = read_sps(tmp_path)
    assert steady == pytest.approx((320 - 64) / 4.0)
    assert (last, iterations) == (5.0, 3)


def test_scaling_benchmark_refuses_a_budget_without_a_measured_iteration(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmark" / "ppo_atari_multigpu_scaling.py"), "--iterations", "2"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --iterations must be at least 3")
