"""A run is not a job: the run identity that cloud/submit.py gives every run (CLEANRL_RUN_ID) and cloud/durable.py keys
the run's S3 folder by, so that a retried attempt, a resubmission after the job FAILED, and a multi-node job submitted
again on fewer nodes all continue one run; and the job's time limit, before which the run checkpoints and exits 143
(retried) rather than being ended for good by AWS Batch's timeout.

AWS is moto's server on 127.0.0.1 (tests/cloud_fixtures.py). moto runs no container: the jobs of `cleanrl-queue` stay
RUNNING while this file runs each attempt's command itself, as its container would (the job definition's command with
the job's parameters and environment: cloud/jobs/single.sh, cloud/durable.py and the real script, writing to moto's
S3), and tells moto how the container exited.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cloud_fixtures import (
    BUCKET, CLOUD, QUEUE, ROOT, aws_env, boto_client, runs_bucket_and_queue, serve_moto, use_local_endpoint,
)

boto3 = pytest.importorskip("boto3", reason="boto3 (optional dependency, extra 'cloud') is not installed")
from cloud import batch_api, batch_jobs, submit  # noqa: E402

VENV_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
DURABLE = [sys.executable, str(CLOUD / "durable.py"), "--"]


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    yield from serve_moto(tmp_path_factory)


def boto(moto, service):
    return boto_client(moto, service)


@pytest.fixture(scope="module")
def batch(moto):
    return runs_bucket_and_queue(moto, "runs")


@pytest.fixture
def aws(moto, batch, monkeypatch, tmp_path):
    use_local_endpoint(monkeypatch, moto, batch_api, tmp_path)
    return moto


def cli(*argv: str):
    return submit.cli(list(argv))


def s3_keys(moto, prefix: str) -> list[str]:
    pages = boto(moto, "s3").get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def describe(moto, job_id: str) -> dict:
    (job,) = boto(moto, "batch").describe_jobs(jobs=[job_id])["jobs"]
    return job


def environment(job: dict) -> dict:
    return {e["name"]: e["value"] for e in job["container"]["environment"]}


def durable(moto, command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    env = aws_env(moto.endpoint, **{"AWS_BATCH_JOB_ID": "job-1", "CLEANRL_RUNS_S3": f"s3://{BUCKET}/runs",
                                    "CLEANRL_SYNC_SECONDS": "3600", "CLEANRL_S3_TIMEOUT_SECONDS": "10", **env})
    return subprocess.run([*DURABLE, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------------
# cloud/durable.py: the run's folder, a finished run, the time limit


@pytest.mark.heavy  # a moto server and several processes: about 10-20 s
def test_durable_keys_the_folder_by_the_run_and_skips_a_finished_run(aws, batch, tmp_path):
    """Two jobs of one run (another job id each) share the run's folder; an attempt stopped before its first
    checkpoint leaves no second run directory beside the next; the run finished, the same command exits 0 at once."""
    run = {"CLEANRL_RUN_ID": "sweep-a/ppo-CartPole-v1-s1"}
    lost = [sys.executable, "-c", "import os; os.makedirs('runs/a'); open('runs/a/events', 'w').write('1'); exit(3)"]
    proc = durable(aws, lost, tmp_path / "1", AWS_BATCH_JOB_ID="job-1", **run)
    assert proc.returncode == 3, proc.stderr
    assert s3_keys(aws, "runs/") == ["runs/sweep-a/ppo-CartPole-v1-s1/runs/a/events"]

    write = [sys.executable, "-c", "import os; os.makedirs('runs/b'); open('runs/b/checkpoint.pt', 'w').write('2')"]
    proc = durable(aws, write, tmp_path / "2", AWS_BATCH_JOB_ID="job-2", **run)
    assert proc.returncode == 0, proc.stderr
    assert "deleted 1 files of 1 run directories without a checkpoint" in proc.stderr and ": a\n" in proc.stderr
    folder = "runs/sweep-a/ppo-CartPole-v1-s1/"
    assert s3_keys(aws, "runs/") == [folder + "cleanrl-complete.json", folder + "runs/b/checkpoint.pt"]
    assert not (tmp_path / "2" / "runs" / "a").exists()

    # resubmitted once finished: nothing downloaded, nothing run
    proc = durable(aws, write, tmp_path / "3", AWS_BATCH_JOB_ID="job-3", **run)
    assert proc.returncode == 0 and "is a finished run" in proc.stderr and "not running it again" in proc.stderr
    assert not (tmp_path / "3" / "runs").exists()
    # another command on it (a longer run, say) runs, restoring the run; its marker is gone until it finishes
    proc = durable(aws, ["sh", "-c", "test -f runs/b/checkpoint.pt && exit 5"], tmp_path / "4", **run)
    assert proc.returncode == 5 and "finished as another command" in proc.stderr, proc.stderr
    assert s3_keys(aws, folder) == [folder + "runs/b/checkpoint.pt"]


def test_durable_stops_the_command_before_the_time_limit(tmp_path):
    """CLEANRL_TIME_LIMIT_SECONDS less the margin after its start, the command gets SIGTERM: it exits 143 (retried)."""
    command = [sys.executable, "-c", "import signal, sys, time; "
               "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); print('up', flush=True); time.sleep(60)"]
    env = aws_env("http://127.0.0.1:9", CLEANRL_TIME_LIMIT_SECONDS="60", CLEANRL_STOP_MARGIN_SECONDS="58.5")
    started = time.monotonic()
    proc = subprocess.run([*DURABLE, *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 143 and proc.stdout == "up\n", proc.stderr
    assert "time limit (CLEANRL_TIME_LIMIT_SECONDS) is near: SIGTERM to the command after 1.5 s" in proc.stderr
    assert 1.5 <= took < 15, took


@pytest.mark.parametrize("env, message", [
    ({"CLEANRL_TIME_LIMIT_SECONDS": "60", "CLEANRL_STOP_MARGIN_SECONDS": "60"},
     "CLEANRL_STOP_MARGIN_SECONDS (60) must be less than CLEANRL_TIME_LIMIT_SECONDS (60)"),
    ({"CLEANRL_TIME_LIMIT_SECONDS": "soon"}, "CLEANRL_TIME_LIMIT_SECONDS must be a positive number of seconds"),
    ({"CLEANRL_RUN_ID": "sw/ppo-CartPole-v1-s{seed}"}, "CLEANRL_RUN_ID must be 1-512 letters"),
    ({"CLEANRL_RUN_ID": "sw/../other"}, "CLEANRL_RUN_ID must be 1-512 letters"),
], ids=["margin", "limit", "unfilled-seed", "dot-dot"])
def test_durable_bad_run_settings_fail_in_one_line(tmp_path, env, message):
    proc = subprocess.run([*DURABLE, "touch", "ran"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=aws_env("http://127.0.0.1:9", CLEANRL_RUNS_S3="s3://b/runs", **env))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), proc.stderr
    assert not (tmp_path / "ran").exists()
    if "{seed}" in env.get("CLEANRL_RUN_ID", ""):
        assert "terraform apply" in lines[0]


# ---------------------------------------------------------------------------------------------------
# cloud/submit.py: run ids in the jobs and the manifest


@pytest.mark.heavy  # a moto server and several processes: about 10-20 s
def test_submit_gives_every_run_an_id_and_resubmit_keeps_it(aws, monkeypatch, capsys):
    (parent,) = cli("submit", "--no-build", "--array", "--job-queue", QUEUE, "--env-ids", "ALE/Pong-v5", "--seeds",
                    "4", "5", "--sweep", "ids", "--timeout-seconds", "3600")
    manifest = json.loads(Path("sweeps/ids.json").read_text())
    assert [r["run_id"] for r in manifest["runs"]] == ["ids/ppo-ALE-Pong-v5-s4", "ids/ppo-ALE-Pong-v5-s5"]
    # the array's children fill in their own seed (cloud/jobs/single.sh); the time limit goes along
    env = environment(describe(aws, parent))
    assert env["CLEANRL_RUN_ID"] == "ids/ppo-ALE-Pong-v5-s{seed}" and env["CLEANRL_TIME_LIMIT_SECONDS"] == "3600"
    cli("cancel", "--terminate", f"{parent}:1", "--reason", "lost its instance")
    capsys.readouterr()
    (again,) = cli("resubmit", "ids", "--failed")
    assert "continuing run ids/ppo-ALE-Pong-v5-s5 from its last checkpoint" in capsys.readouterr().err
    env = environment(describe(aws, again))
    assert env["CLEANRL_RUN_ID"] == "ids/ppo-ALE-Pong-v5-s5" and env["CLEANRL_TIME_LIMIT_SECONDS"] == "3600"

    # a manifest of the layout before run ids: the run continues in its latest job's folder, its run id from now on
    for run in manifest["runs"]:
        del run["run_id"]
    Path("sweeps/old.json").write_text(json.dumps({**manifest, "sweep": "old", "manifest_s3": None}))
    (legacy,) = cli("resubmit", "old", "--failed")
    assert environment(describe(aws, legacy))["CLEANRL_RUN_ID"] == f"{parent}:1"
    assert json.loads(Path("sweeps/old.json").read_text())["runs"][1]["run_id"] == f"{parent}:1"
    # the job definition's own time limit is left to it (cloud/examples/job_definition.json passes it on)
    (plain,) = cli("submit", "--no-build", "--job-queue", QUEUE, "--sweep", "plain")
    env = environment(describe(aws, plain))
    assert env["CLEANRL_TIME_LIMIT_SECONDS"] == "172800" and env["CLEANRL_RUN_ID"] == "plain/ppo-CartPole-v1-s1"
    capsys.readouterr()


def test_multinode_run_id_is_new_unless_given():
    """A multi-node job submitted again with --run-id (on fewer nodes, say) continues that run; without, a new run."""
    args = submit.SubmitMultinode(build=False, num_nodes=2)
    (env,) = [o["containerOverrides"]["environment"] for o in
              batch_jobs.plan_multinode(args)["nodeOverrides"]["nodePropertyOverrides"]]
    (made,) = [e["value"] for e in env if e["name"] == "CLEANRL_RUN_ID"]
    assert made.startswith("cleanrl-multinode-") and len(made) == len("cleanrl-multinode-20261208-010203-1a2b3c4d")
    request = batch_jobs.plan_multinode(submit.SubmitMultinode(build=False, num_nodes=1, run_id=made))
    assert request["nodeOverrides"]["numNodes"] == 1 and batch_jobs.run_id_of(request) == made
    with pytest.raises(submit.SubmitError, match="run id 'a//b' is invalid"):
        batch_jobs.plan_multinode(submit.SubmitMultinode(build=False, run_id="a//b"))


# ---------------------------------------------------------------------------------------------------
# Acceptance: a run that outlives its job


def start_attempt(moto, job: dict, cwd: Path, **extra: str) -> tuple[subprocess.Popen, Path]:
    """One attempt of a job, as its container would run it (AWS_BATCH_JOB_ID the same in every attempt); its output
    goes to cwd/../NAME.log."""
    command = [job["parameters"][w[5:]] if w.startswith("Ref::") else w for w in job["container"]["command"]]
    cwd.mkdir(parents=True)
    (cwd / "cleanrl").symlink_to(ROOT / "cleanrl")
    variables = {**environment(job), "AWS_BATCH_JOB_ID": job["jobId"], "CLEANRL_CODE": str(ROOT),
                 "CLEANRL_SYNC_SECONDS": "3600", "WANDB_MODE": "offline", "PATH": VENV_PATH, **extra}
    env = aws_env(moto.endpoint, **variables)
    log = cwd.with_suffix(".log")
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    return proc, log


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def checkpoint_step(moto, folder: str, tmp_path: Path) -> int:
    import torch

    (key,) = [k for k in s3_keys(moto, folder) if k.endswith("/checkpoint.pt")]  # one run in the run's folder
    local = tmp_path / "checkpoint.pt"
    boto(moto, "s3").download_file(BUCKET, key, str(local))
    return int(torch.load(local, weights_only=False)["global_step"])


@pytest.mark.heavy
def test_a_run_outlives_its_job_time_limit_three_reclaims_and_a_resubmit(aws, tmp_path, capsys):
    """Attempt 1 reaches the job's time limit: it checkpoints and exits 143 before it. Attempts 2 and 3 are Spot
    reclaims (SIGTERM). The job, out of attempts, FAILED; `resubmit --failed` makes a new job that restores the run's
    folder and continues from the last checkpoint to the end: the steps go on, never from zero."""
    total = 24576
    (job_id,) = cli("submit", "--no-build", "--job-queue", QUEUE, "--scripts", "ppo.py --num-steps 32",
                    "--env-ids", "CartPole-v1", "--total-timesteps", str(total), "--timeout-seconds", "60",
                    "--extra-args=--eval-episodes 0 --no-progress --torch-threads 1",
                    "--sweep", "long")
    folder = "runs/long/ppo-CartPole-v1-s1/"
    job = describe(aws, job_id)
    work, steps = tmp_path / "containers", []

    # attempt 1: the job's time limit (60 s) less a margin that leaves 8 s to run
    proc, log = start_attempt(aws, job, work / "attempt1", CLEANRL_STOP_MARGIN_SECONDS="52")
    assert proc.wait(timeout=60) == 143, log.read_text()[-3000:]
    said = log.read_text()
    assert "the attempt's time limit (CLEANRL_TIME_LIMIT_SECONDS) is near: SIGTERM to the command after 8 s" in said
    steps.append(checkpoint_step(aws, folder, tmp_path))
    assert 0 < steps[-1] < total, said[-3000:]

    # attempts 2 and 3: Spot reclaims, each once the run has resumed and gone on a little
    for attempt in (2, 3):
        proc, log = start_attempt(aws, job, work / f"attempt{attempt}")
        wait_for(lambda: "(global step" in log.read_text() or proc.poll() is not None, "resumed run")
        said = log.read_text()
        assert proc.poll() is None and f"(global step {steps[-1]})" in said, said[-3000:]
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)  # what the entrypoint's watcher sends on a Spot interruption notice
        assert proc.wait(timeout=60) == 143, log.read_text()[-3000:]
        steps.append(checkpoint_step(aws, folder, tmp_path))
    assert steps == sorted(set(steps)) and steps[-1] < total, steps
    assert aws.job_exited(job_id, 143) == "FAILED"  # the third attempt's 143 used up job_attempts=3

    (again,) = cli("resubmit", "long", "--failed")
    assert again != job_id and "continuing run long/ppo-CartPole-v1-s1" in capsys.readouterr().err
    proc, log = start_attempt(aws, describe(aws, again), work / "resubmitted")
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    said = log.read_text()
    assert f"(global step {steps[-1]})" in said and "restored" in said
    assert checkpoint_step(aws, folder, tmp_path) == total
    assert aws.job_exited(again, 0) == "SUCCEEDED"
    # one run, finished: collect keeps it with all its steps, and a resubmission would run nothing
    result = cli("collect", "long")
    (record,) = result["collected"]
    kept = json.loads(record.read_text())
    assert kept["last_step"] == total and kept["job_id"] == again
    assert folder + "cleanrl-complete.json" in s3_keys(aws, folder)
    capsys.readouterr()
