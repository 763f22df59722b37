"""Sweeps on AWS Batch whose results come home: the manifest `cloud/submit.py submit` writes, `status`, `resubmit
--failed`, `collect`, and benchmark/report.py on what `collect` (or a plain copy of the runs bucket) brings.

AWS is moto's server on 127.0.0.1 (tests/cloud_fixtures.py). moto runs no container: the jobs of `cleanrl-queue` stay
RUNNING while this file runs each job's command itself, as its container would (the job definition's command with the
job's parameters, the job's environment, AWS_BATCH_JOB_ID and AWS_BATCH_JOB_ARRAY_INDEX; cloud/jobs/single.sh, then
cloud/durable.py and the real script, writing to moto's S3), and then tells moto how the container exited.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cloud_fixtures import (
    BUCKET, QUEUE, REGION, ROOT, aws_env, boto_client, runs_bucket_and_queue, serve_moto, use_local_endpoint,
)
from tests.cloud_fixtures import recording as record_calls

boto3 = pytest.importorskip("boto3", reason="boto3 (optional dependency, extra 'cloud') is not installed")
from cloud import batch_api, submit, sweeps  # noqa: E402

SECRET = "wandb-secret-7d1e5b90a2c4"  # a W&B key that must reach the job's environment and no file
VENV_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
# Budgets that reach the learning updates (tests/scripts.py): PPO 4 envs x 32 steps = 128 steps an iteration, 16
# iterations; DQN learning from step 501, a gradient step every 10 steps. Every run logs losses and episodes.
SCRIPTS = ("ppo.py --num-steps 32", "dqn.py --learning-starts 500 --target-network-frequency 500 --batch-size 32")
SHARED = "--eval-episodes 1 --no-progress --torch-threads 1"
ENVS = ("CartPole-v1", "Acrobot-v1")
LOSS = {"ppo": "losses/value_loss", "dqn": "losses/td_loss"}


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    yield from serve_moto(tmp_path_factory)


def boto(moto, service):
    return boto_client(moto, service)


@pytest.fixture(scope="module")
def batch(moto):
    """The plain-CLI set-up: the runs bucket, the queue cleanrl-queue, the job definition cleanrl-single and its image."""
    return runs_bucket_and_queue(moto, "sweeps")


@pytest.fixture
def aws(moto, batch, monkeypatch, tmp_path):
    """This process talks to the local endpoint only, with fake credentials, in an empty working directory."""
    use_local_endpoint(monkeypatch, moto, batch_api, tmp_path)
    return moto


def cli(*argv: str):
    return submit.cli(list(argv))


def recording(monkeypatch, event: str) -> list:
    return record_calls(monkeypatch, batch_api, event)


def s3_object(moto, url: str) -> bytes:
    bucket, _, key = url[5:].partition("/")
    return boto(moto, "s3").get_object(Bucket=bucket, Key=key)["Body"].read()


def s3_keys(moto, prefix: str) -> list[str]:
    pages = boto(moto, "s3").get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


# ---------------------------------------------------------------------------------------------------
# A job's container, here


def start_container(moto, job: dict, cwd: Path, sync_seconds: str = "3600") -> subprocess.Popen:
    """Start a job as its container would: the job definition's command with Ref::NAME replaced by the job's
    parameters, in a working directory laid out like the image's /workspace (cleanrl/ beside the runs/ the scripts
    write), with the job's environment and the variables Batch sets."""
    command = [job["parameters"][w[5:]] if w.startswith("Ref::") else w for w in job["container"]["command"]]
    cwd.mkdir(parents=True)
    (cwd / "cleanrl").symlink_to(ROOT / "cleanrl")
    batch_env = {e["name"]: e["value"] for e in job["container"]["environment"]}
    batch_env["AWS_BATCH_JOB_ID"] = job["jobId"]
    if ":" in job["jobId"]:  # an array child
        batch_env["AWS_BATCH_JOB_ARRAY_INDEX"] = job["jobId"].rpartition(":")[2]
    env = aws_env(moto.endpoint, **batch_env, CLEANRL_CODE=str(ROOT), CLEANRL_SYNC_SECONDS=sync_seconds,
                  WANDB_MODE="offline", PATH=VENV_PATH)
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def describe(moto, job_id: str) -> dict:
    (job,) = boto(moto, "batch").describe_jobs(jobs=[job_id])["jobs"]
    return job


def run_jobs(moto, jobs: list[dict], work: Path, parallel: int = 2) -> None:
    """Run the jobs' containers, `parallel` at a time; each must exit 0, and moto then marks the job SUCCEEDED."""
    waiting, running = list(jobs), []
    while waiting or running:
        while waiting and len(running) < parallel:
            job = waiting.pop(0)
            running.append((job, start_container(moto, job, work / folder_name(job["jobId"]))))
        for job, proc in list(running):
            if proc.poll() is None:
                continue
            running.remove((job, proc))
            output = proc.stdout.read()
            assert proc.returncode == 0, f"job {job['jobId']} exited {proc.returncode}:\n{output[-4000:]}"
            assert moto.job_exited(job["jobId"], 0) == "SUCCEEDED"
        time.sleep(0.1)


def folder_name(job_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (name)": state, ppid, ...
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def kill_midway(moto, job: dict, cwd: Path, run_id: str) -> None:
    """A container that dies mid-run (kill -9, as the OOM killer does) after the periodic sync has uploaded the
    run's first event file: S3 holds a started run without the completion marker, and the job FAILED (exit 137)."""
    proc = start_container(moto, job, cwd, sync_seconds="0.2")
    try:
        wait_for(lambda: list(cwd.glob("runs/*/events.out.tfevents.*")) or proc.poll() is not None, "event file")
        assert proc.poll() is None, proc.stdout.read()
        # freeze the script (not durable.py, which goes on syncing) long before it could finish
        for pid in children_of(proc.pid):
            os.kill(pid, signal.SIGSTOP)
        prefix = f"runs/{run_id}/runs/"
        wait_for(lambda: any("events.out.tfevents" in k for k in s3_keys(moto, prefix)), "event file in S3")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the container's processes, the stopped script included
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert moto.job_exited(job["jobId"], 128 + signal.SIGKILL) == "FAILED"


def report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmark" / "report.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def summary_rows(folder: Path) -> list[tuple]:
    import csv

    with open(folder / "summary.csv") as f:
        return [(r["env_id"], r["label"], r["runs"], r["seeds"], float(r["final_return_mean"])) for r in csv.DictReader(f)]


# ---------------------------------------------------------------------------------------------------


@pytest.mark.heavy
def test_sweep_status_resubmit_collect_and_report(aws, tmp_path, capsys):
    """2 scripts x 2 envs x 3 seeds as 4 array jobs; one child dies, `resubmit --failed` runs only it again, `collect`
    brings 12 finished runs home and the report draws 2 algorithms x 2 envs x 3 seeds, nothing merged."""
    parents = cli(
        "submit", "--no-build", "--array", "--job-queue", QUEUE, "--scripts", *SCRIPTS, "--env-ids", *ENVS,
        "--seeds", "1", "2", "3", "--total-timesteps", "2048", f"--extra-args={SHARED}", "--sweep", "tiny",
    )  # fmt: skip
    assert len(parents) == 4
    err = capsys.readouterr().err
    # the manifest, here and beside the runs, says which job runs which script, env id and seed
    local = tmp_path / "sweeps" / "tiny.json"
    assert f"sweep tiny: 12 runs, manifest sweeps/tiny.json and s3://{BUCKET}/sweeps/tiny.json" in err
    manifest = json.loads(local.read_text())
    assert s3_object(aws, f"s3://{BUCKET}/sweeps/tiny.json") == local.read_bytes()
    assert manifest["sweep"] == "tiny" and manifest["runs_s3"] == f"s3://{BUCKET}/runs" and manifest["region"] == REGION
    runs = manifest["runs"]
    assert [(r["script"], r["env_id"], r["seed"]) for r in runs] == [
        (f"cleanrl/{s}", e, seed) for s in ("ppo.py", "dqn.py") for e in ENVS for seed in (1, 2, 3)
    ]
    # the revision submit registered: cleanrl:latest by the digest it had then (ECR's), so the same image for all
    definition = max(boto(aws, "batch").describe_job_definitions(jobDefinitionName="cleanrl-single")["jobDefinitions"],
                     key=lambda d: d["revision"])
    assert "@sha256:" in definition["containerProperties"]["image"]
    for i, run in enumerate(runs):
        (job,) = run["jobs"]
        parent = parents[i // 3]
        assert job["job_id"] == f"{parent}:{i % 3}"  # child i of the array runs seed 1 + i (cloud/jobs/single.sh)
        assert job["job_definition"] == definition["jobDefinitionArn"] and job["job_queue"] == QUEUE
        assert job["image"] == definition["containerProperties"]["image"]
        assert run["request"]["parameters"]["seed"] == str(run["seed"]) and "arrayProperties" not in run["request"]
        own = SCRIPTS[i // 6].split(" ", 1)[1]
        assert run["command"] == (
            f"python {run['script']} {own} {SHARED} --env-id {run['env_id']} --total-timesteps 2048 "
            f"--seed {run['seed']} --save-model --checkpoint-frequency 50 --resume auto"
        )

    assert cli("status", "tiny") == {(f"cleanrl/{s}", e): {"RUNNING": 3} for s in ("ppo.py", "dqn.py") for e in ENVS}
    capsys.readouterr()

    # the containers: seed 2 of PPO on CartPole dies midway, the other 11 finish
    work = tmp_path / "containers"
    children = [describe(aws, run["jobs"][0]["job_id"]) for run in runs]
    doomed = children[1]
    assert runs[1]["seed"] == 2 and doomed["parameters"]["script"].startswith("python cleanrl/ppo.py")
    kill_midway(aws, doomed, work / folder_name(doomed["jobId"]), runs[1]["run_id"])
    run_jobs(aws, [job for job in children if job is not doomed], work)

    statuses = cli("status", "tiny")
    out, err = capsys.readouterr()
    assert statuses[("cleanrl/ppo.py", "CartPole-v1")] == {"SUCCEEDED": 2, "FAILED": 1}
    assert sum(s.get("SUCCEEDED", 0) for s in statuses.values()) == 11
    assert "ppo.py\tCartPole-v1\t3 runs\tSUCCEEDED 2, FAILED 1" in out.splitlines()
    assert (f"FAILED: ppo.py CartPole-v1 seed 2, job {doomed['jobId']}: Essential container in task exited, exit "
            "code 137") in err

    # collect leaves the failed run out, although S3 holds its first event file (in the run's folder, by its run id)
    assert runs[1]["run_id"] == "tiny/ppo-CartPole-v1-s2"
    assert any("events.out.tfevents" in k for k in s3_keys(aws, "runs/tiny/ppo-CartPole-v1-s2/"))
    first = cli("collect", "tiny")
    assert len(first["collected"]) == 11 and first["skipped"] == {"FAILED": 1}
    assert "collected 11 of 12 runs into sweeps/tiny" in capsys.readouterr().err

    # resubmit --failed: only that run, the same command, as a job of its own; the manifest keeps both jobs
    (again,) = cli("resubmit", "tiny", "--failed")
    out, err = capsys.readouterr()
    assert out == f"{again}\tcleanrl-ppo-CartPole-v1-s2\n"
    assert f"resubmitted ppo.py CartPole-v1 seed 2: job {doomed['jobId']} FAILED" in err
    manifest = json.loads(local.read_text())
    assert s3_object(aws, f"s3://{BUCKET}/sweeps/tiny.json") == local.read_bytes()
    assert [j["job_id"] for j in manifest["runs"][1]["jobs"]] == [doomed["jobId"], again]
    assert all(len(r["jobs"]) == 1 for i, r in enumerate(manifest["runs"]) if i != 1)
    job = describe(aws, again)
    assert job["parameters"] == {**doomed["parameters"], "seed": "2"} and "arrayProperties" not in job
    assert job["jobDefinition"] == doomed["jobDefinition"] and job["jobQueue"] == doomed["jobQueue"]
    run_jobs(aws, [job], work)
    assert cli("resubmit", "tiny", "--failed") == []
    assert "nothing resubmitted" in capsys.readouterr().err
    assert all(counts == {"SUCCEEDED": 3} for counts in cli("status", "tiny").values())
    capsys.readouterr()

    # collect: 12 runs, each a kept record of benchmark/kept.py beside its files
    result = cli("collect", "tiny")
    assert result["skipped"] == {} and "collected 12 of 12 runs" in capsys.readouterr().err
    from benchmark.kept import find_kept, read_event_scalars, read_kept

    out = tmp_path / "sweeps" / "tiny"
    records = [read_kept(p) for p in find_kept(out)]
    assert sorted((r["name"], r["env_id"], r["seed"]) for r in records) == sorted(
        (s, e, seed) for s in ("ppo", "dqn") for e in ENVS for seed in (1, 2, 3)
    )
    for run in manifest["runs"]:
        job_id = run["jobs"][-1]["job_id"]
        record = read_kept(out / Path(run["script"]).stem / run["env_id"] / f"seed{run['seed']}.json")
        assert record["job_id"] == job_id and record["sweep"] == "tiny"
        # the command the job ran (durable.py's marker) is the one the manifest recorded
        marker = json.loads(s3_object(aws, f"s3://{BUCKET}/runs/{run['run_id']}/cleanrl-complete.json"))
        assert record["command"] == marker["command"] == shlex.split(run["command"])
        assert record["finished"] == marker["finished"] and record["total_timesteps"] == 2048
        assert record["episodes"]["step"] and 1900 < record["last_step"] <= 2048
        (run_dir,) = (out / "jobs" / folder_name(job_id) / "runs").iterdir()
        assert not (run_dir / "checkpoint.pt").exists()  # only with --checkpoints
        assert (run_dir / f"{record['name']}.cleanrl_model").is_file()
        assert LOSS[record["name"]] in read_event_scalars(run_dir)  # the budget reached the learning update
    assert not (out / "jobs" / folder_name(doomed["jobId"])).exists()
    # a folder holding another job's record of the same script, env id and seed is left as it is
    other = tmp_path / "other" / "ppo" / "CartPole-v1" / "seed1.json"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({**read_kept(out / "ppo" / "CartPole-v1" / "seed1.json"), "job_id": "another-job"}))
    with pytest.raises(SystemExit, match=rf"^error: {other} holds a run of another job \(another-job\); collect into"):
        cli("collect", "tiny", "--out", str(tmp_path / "other"))
    assert [p for p in (tmp_path / "other").rglob("*") if p.is_file()] == [other]

    # the report of the kept records: 2 algorithms x 2 envs x 3 seeds, one label per algorithm
    proc = report("--results", str(out), "--out", "from_kept", "--bootstrap-reps", "100", cwd=tmp_path)
    kept_rows = summary_rows(tmp_path / "from_kept")
    assert [row[:4] for row in kept_rows] == [
        (e, f"tiny/{s}", "3", "1 2 3") for e in sorted(ENVS) for s in ("dqn", "ppo")
    ]
    assert "Skipped" not in proc.stdout and (tmp_path / "from_kept" / "CartPole-v1.png").is_file()

    # a plain copy of the runs bucket (as `aws s3 sync s3://BUCKET/runs raw` makes): a started run without its
    # marker is left out as unfinished (the failed job's was deleted when its resubmission started the run again, so
    # one is made here). A copy of a finished run that ended earlier is a duplicate: the later one counts.
    raw = tmp_path / "raw"
    s3 = boto(aws, "s3")
    for key in s3_keys(aws, "runs/"):
        (raw / key[len("runs/"):]).parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(BUCKET, key, str(raw / key[len("runs/"):]))
    rerun = raw / "tiny" / "ppo-CartPole-v1-s2"
    copy = raw / "an-earlier-attempt"
    shutil.copytree(rerun, copy)
    unfinished = raw / "an-unfinished-attempt"
    shutil.copytree(rerun, unfinished)
    (unfinished / "cleanrl-complete.json").unlink()
    (copy / "cleanrl-complete.json").write_text(json.dumps({"exit_status": 0, "finished": "2000-01-01T00:00:00Z"}))
    proc = report("--results", str(raw), "--out", "from_raw", "--bootstrap-reps", "100", cwd=tmp_path)
    raw_rows = summary_rows(tmp_path / "from_raw")
    assert [row[:4] for row in raw_rows] == [(e, f"raw/{s}", "3", "1 2 3") for e in sorted(ENVS) for s in ("dqn", "ppo")]
    for kept_row, raw_row in zip(kept_rows, raw_rows):
        assert raw_row[4] == pytest.approx(kept_row[4], abs=1e-3)  # the records keep returns to 4 decimals
    (failed_run,) = (unfinished / "runs").iterdir()
    assert f"Skipped 1 unfinished run (no completion marker beside its runs/ folder): {failed_run}." in proc.stdout
    (copied_run,) = (copy / "runs").iterdir()
    (latest_run,) = (rerun / "runs").iterdir()
    assert f"Skipped 1 duplicate run (the same label, env id and seed as a run that finished later, which is read " \
           f"instead): {copied_run} (read {latest_run})." in proc.stdout


def test_status_pages_describe_jobs_and_resubmit_keeps_no_secret(aws, tmp_path, monkeypatch, capsys):
    """150 children: DescribeJobs 100 ids a call. The W&B key goes to the jobs (again at `resubmit`) and into no file."""
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    (parent,) = cli("submit", "--no-build", "--array", "--job-queue", QUEUE, "--env-ids", "CartPole-v1", "--seeds",
                    *map(str, range(1, 151)), "--extra-args=--track", "--sweep", "wide")
    calls = recording(monkeypatch, "provide-client-params.batch.DescribeJobs")
    assert cli("status", "wide") == {("cleanrl/ppo.py", "CartPole-v1"): {"RUNNING": 150}}
    assert [len(params["jobs"]) for _, params in calls] == [100, 50]
    cli("cancel", "--terminate", f"{parent}:7", "--reason", "lost its instance")  # FAILED (tests/cloud_fixtures.py)
    capsys.readouterr()

    # without the key in the environment, and none in the job definition (no Secrets Manager secret), a --track run
    # is not resubmitted: one line, before any SubmitJob
    monkeypatch.delenv("WANDB_API_KEY")
    submitted = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    with pytest.raises(SystemExit, match="^error: --track needs the W&B key: set WANDB_API_KEY in your environment, "
                                         "or give the job definition cleanrl-single:2 a WANDB_API_KEY secret"):
        cli("resubmit", "wide", "--failed")
    assert submitted == []
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    calls.clear()
    (again,) = cli("resubmit", "wide", "--failed")
    assert f"job {parent}:7 FAILED (lost its instance)" in capsys.readouterr().err
    assert [len(params["jobs"]) for _, params in calls] == [100, 50]
    job = describe(aws, again)
    assert {e["name"]: e["value"] for e in job["container"]["environment"]}["WANDB_API_KEY"] == SECRET
    assert job["parameters"]["seed"] == "8" and job["jobName"] == "cleanrl-ppo-CartPole-v1-s8"
    manifest = json.loads((tmp_path / "sweeps" / "wide.json").read_text())
    assert [j["job_id"] for j in manifest["runs"][7]["jobs"]] == [f"{parent}:7", again]
    assert cli("status", "wide") == {("cleanrl/ppo.py", "CartPole-v1"): {"RUNNING": 150}}
    # the manifest, here or in S3, never holds the key
    for data in [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()] + [
        s3_object(aws, f"s3://{BUCKET}/sweeps/wide.json")
    ]:
        assert SECRET.encode() not in data
    # from another machine: the manifest in S3
    monkeypatch.chdir(tmp_path / "sweeps")
    assert cli("status", f"s3://{BUCKET}/sweeps/wide.json") == {("cleanrl/ppo.py", "CartPole-v1"): {"RUNNING": 150}}
    capsys.readouterr()


def test_a_sweep_name_is_taken_once(aws, capsys, monkeypatch):
    cli("submit", "--no-build", "--job-queue", QUEUE, "--seeds", "1", "--sweep", "once")
    with pytest.raises(SystemExit, match=r"^error: sweep 'once' exists already \(sweeps/once.json\)"):
        cli("submit", "--no-build", "--job-queue", QUEUE, "--seeds", "1", "--sweep", "once")
    # on another machine (no manifest here) S3 still has it: refused before any job is submitted
    shutil.rmtree("sweeps")
    sent = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    with pytest.raises(SystemExit, match=rf"^error: sweep 'once' exists already \(s3://{BUCKET}/sweeps/once.json\)"):
        cli("submit", "--no-build", "--job-queue", QUEUE, "--seeds", "1", "--sweep", "once")
    assert sent == [] and not Path("sweeps").exists()
    capsys.readouterr()


def test_a_damaged_completion_marker_is_skipped_in_one_line(aws, tmp_path, capsys):
    """The marker comes from the bucket: one that is not JSON is counted as skipped, not trusted, and no traceback."""
    (job_id,) = cli("submit", "--no-build", "--job-queue", QUEUE, "--sweep", "damaged")
    assert aws.job_exited(job_id, 0) == "SUCCEEDED"
    # the run's folder is keyed by its run id, SWEEP/SCRIPT-ENV_ID-sSEED
    boto(aws, "s3").put_object(Bucket=BUCKET, Key=f"runs/damaged/ppo-CartPole-v1-s1/{sweeps.MARKER}",
                               Body=b'{"finished": tr')
    capsys.readouterr()
    cli("collect", "damaged", "--out", str(tmp_path / "home"))
    err = capsys.readouterr().err
    assert "collected 0 of 1 runs" in err and f"skipped 1: 1 SUCCEEDED with a damaged {sweeps.MARKER}" in err, err


def test_a_manifest_s3_refuses_stays_here(aws, batch, capsys):
    """Credentials that may not touch sweeps/ of the bucket (here its policy denies them), or a job definition without
    a runs folder: the jobs are submitted, the manifest stays in sweeps/ and says so."""
    definition = batch.describe_job_definitions(jobDefinitionName="cleanrl-single")["jobDefinitions"][0]
    container = definition["containerProperties"]
    s3 = boto(aws, "s3")
    s3.create_bucket(Bucket="locked-runs")
    s3.put_bucket_policy(Bucket="locked-runs", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::locked-runs/sweeps/*"}]}))
    said = {}
    for name, runs_s3 in (("cleanrl-locked", "s3://locked-runs/runs"), ("cleanrl-nowhere", None)):
        env = [e for e in container["environment"] if e["name"] != "CLEANRL_RUNS_S3"]
        env += [{"name": "CLEANRL_RUNS_S3", "value": runs_s3}] if runs_s3 else []
        batch.register_job_definition(jobDefinitionName=name, type="container", parameters=definition["parameters"],
                                      containerProperties={**container, "environment": env})
        (job_id,) = cli("submit", "--no-build", "--job-queue", QUEUE, "--job-definition", name, "--sweep", name)
        said[name] = capsys.readouterr().err
        manifest = json.loads(Path(f"sweeps/{name}.json").read_text())
        assert manifest["runs"][0]["jobs"][0]["job_id"] == job_id and manifest["manifest_s3"] is None
        assert manifest["runs_s3"] == runs_s3 and f"manifest sweeps/{name}.json\n" in said[name]
        assert cli("status", name) == {("cleanrl/ppo.py", "CartPole-v1"): {"RUNNING": 1}}
    assert ("warning: cannot read s3://locked-runs/sweeps/cleanrl-locked.json (AWS HeadObject: 403): the manifest is "
            "written to sweeps/cleanrl-locked.json only") in said["cleanrl-locked"]
    assert "sets no CLEANRL_RUNS_S3: its runs stay in the containers" in said["cleanrl-nowhere"]
    with pytest.raises(SystemExit, match="^error: sweep cleanrl-nowhere has no runs folder in S3"):
        cli("collect", "cleanrl-nowhere")
    capsys.readouterr()


BAD_INPUTS = [
    (["submit", "--no-build", "--sweep", "no spaces"], "sweep name 'no spaces' is invalid"),
    (["submit", "--no-build", "--scripts", "ppo.py", "ppo.py --num-steps 64"], "--scripts names cleanrl/ppo.py twice"),
    (["submit", "--no-build", "--scripts", "ppo.py --exp-name 'x"], "--scripts entry \"ppo.py --exp-name 'x\" is not"),
    (["submit", "--no-build", "--env-ids", "CartPole-v1", "CartPole-v1"], "--env-ids has repeated values"),
    (["status"], "give the sweep: its name, its manifest file or s3://BUCKET/sweeps/NAME.json"),
    (["status", "nope"], "no sweep manifest sweeps/nope.json (a sweep submitted elsewhere"),
    (["status", "s3://"], "the sweep must look like s3://BUCKET/..."),
    (["resubmit", "x"], "say which runs to resubmit: --failed"),
    (["collect", "bad/"], "no sweep manifest bad"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=lambda x: " ".join(x)[:60] if isinstance(x, list) else None)
def test_bad_input_rejected_before_any_aws_call(argv, message, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr(batch_api, "client", lambda *a: calls.append(a) or pytest.fail(f"AWS client created for {a}"))
    with pytest.raises(SystemExit) as exc:
        cli(*argv)
    assert calls == []
    text = str(exc.value.code)
    assert text.startswith("error: ") and "\n" not in text and message in text, text
    assert list(tmp_path.iterdir()) == []


def test_bad_manifests_and_out_folders_fail_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(batch_api, "client", lambda *a: pytest.fail(f"AWS client created for {a}"))
    Path("sweeps").mkdir()
    Path("sweeps/torn.json").write_text('{"format": 1, "sweep": "torn", "runs": [')
    Path("sweeps/other.json").write_text(json.dumps({"format": 1, "sweep": "other", "runs": [{"script": "x"}]}))
    for argv, message in [
        (["status", "torn"], "error: cannot read the sweep manifest sweeps/torn.json: "),
        (["status", "sweeps/other.json"], "error: sweeps/other.json is not a sweep manifest of cloud/submit.py (KeyError"),
    ]:
        with pytest.raises(SystemExit) as exc:
            cli(*argv)
        assert str(exc.value.code).startswith(message) and "\n" not in str(exc.value.code), exc.value.code
