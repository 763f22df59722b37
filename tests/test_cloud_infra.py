"""cloud/ on a new AWS account and on its instances: the CleanRL articles' commands after prerequisites.sh, setup.sh
after them and again beside a new revision, the launch template's user data for Spot reclaims, and the image entrypoint's watcher of
the Spot interruption notice.

AWS is moto's server on 127.0.0.1 (tests/cloud_fixtures.py), one of this module's own, so the account starts empty;
the AWS CLI runs for real, every call sent there with --endpoint-url. The instance metadata service is a small
HTTP server on 127.0.0.1 that answers as IMDSv2 does.
"""

import base64
import email
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.cloud_fixtures import ACCOUNT, CLOUD, REGION, ROOT, aws_env, boto_client, serve_moto

boto3 = pytest.importorskip("boto3", reason="boto3 (optional dependency, extra 'cloud') is not installed")

EXAMPLES = CLOUD / "examples"
VENV_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    yield from serve_moto(tmp_path_factory, "moto-infra")


def client(moto, service):
    return boto_client(moto, service)


def examples_for(moto, work: Path) -> Path:
    """cloud/examples/ in WORK with the placeholders replaced as docs/cloud.md tells users to: the account, a subnet and
    a security group of an existing VPC."""
    ec2 = client(moto, "ec2")
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="batch", Description="test", VpcId=vpc)["GroupId"]
    shutil.copytree(EXAMPLES, work / "cloud" / "examples")
    for f in (work / "cloud" / "examples").glob("*.json"):
        text = f.read_text().replace("111122223333", ACCOUNT)
        f.write_text(text.replace("subnet-0123456789abcdef0", subnet).replace("sg-0123456789abcdef0", sg))
    return work


def run_example(moto, name: str, cwd: Path) -> subprocess.CompletedProcess:
    """bash cloud/examples/NAME from CWD as the docs show it, every `aws` call sent to the local endpoint."""
    aws = shutil.which("aws", path=VENV_PATH)
    if aws is None:
        pytest.skip("the AWS CLI (optional dependency: pip install awscli) is not installed")
    wrapper = f'aws() {{ command {aws} --endpoint-url {moto.endpoint} "$@"; }}\n'
    return subprocess.run(
        ["bash", "-c", wrapper + (cwd / "cloud" / "examples" / name).read_text()],
        cwd=cwd,
        env=aws_env(moto.endpoint),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def printed_json(stdout: str) -> list:
    """The JSON documents the AWS CLI printed one after another."""
    decoder, found, rest = json.JSONDecoder(), [], stdout.strip()
    while rest:
        obj, end = decoder.raw_decode(rest)
        found.append(obj)
        rest = rest[end:].strip()
    return found


def revisions(batch, name: str) -> list[int]:
    found = batch.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")["jobDefinitions"]
    return sorted(d["revision"] for d in found)


# ---------------------------------------------------------------------------------------------------
# The CleanRL articles' commands on a new account, then setup.sh


@pytest.mark.heavy
def test_articles_commands_on_a_new_account_then_setup(moto, tmp_path):
    work = examples_for(moto, tmp_path)
    # the documented one-time prerequisites: roles, bucket, repository, log group, launch template
    proc = run_example(moto, "prerequisites.sh", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # the articles' commands as typed, with the registration of cleanrl-ppo
    proc = run_example(moto, "articles.sh", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    created_env, created_queue, registered, submitted, described = printed_json(proc.stdout)
    assert created_env["computeEnvironmentName"] == "cleanrl-cpu-spot"
    assert created_queue["jobQueueName"] == "cleanrl-queue"
    assert (registered["jobDefinitionName"], registered["revision"]) == ("cleanrl-ppo", 1)
    (job,) = described["jobs"]  # the running jobs of cleanrl-queue: the one submitted
    assert job["jobId"] == submitted["jobId"] and job["jobName"] == "cleanrl-ppo-experiment"
    assert job["status"] == "RUNNING" and job["jobQueue"].endswith(":job-queue/cleanrl-queue")
    assert job["jobDefinition"].endswith(":job-definition/cleanrl-ppo:1")
    assert job["parameters"]["envId"] == "PongNoFrameskip-v4" and job["parameters"]["totalTimesteps"] == "50000000"

    batch = client(moto, "batch")
    (queue,) = batch.describe_job_queues(jobQueues=["cleanrl-queue"])["jobQueues"]
    # (AWS describes the compute environment by ARN, moto by the name it was given)
    assert queue["computeEnvironmentOrder"][0]["computeEnvironment"].rsplit("/", 1)[-1] == "cleanrl-cpu-spot"
    (env,) = batch.describe_compute_environments(computeEnvironments=["cleanrl-cpu-spot"])["computeEnvironments"]
    resources = env["computeResources"]
    assert resources["type"] == "SPOT" and resources["ec2Configuration"] == [{"imageType": "ECS_AL2023"}]
    assert resources["launchTemplate"] == {"launchTemplateName": "cleanrl-batch", "version": "$Latest"}

    # setup.sh afterwards: it adds what is missing and leaves the rest as it is (every check of an existing resource
    # runs here: the prerequisites', the compute environment's, cleanrl-queue's and cleanrl-ppo's; revision.sh below
    # runs it again on the whole set-up)
    proc = run_example(moto, "setup.sh", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    envs = batch.describe_compute_environments()["computeEnvironments"]
    assert [e["computeEnvironmentName"] for e in envs] == ["cleanrl-cpu-spot"]
    queues = batch.describe_job_queues()["jobQueues"]
    assert sorted(q["jobQueueName"] for q in queues) == ["cleanrl-cpu-spot", "cleanrl-queue"]
    for queue in queues:
        assert [e["computeEnvironment"].rsplit("/", 1)[-1] for e in queue["computeEnvironmentOrder"]] == [
            "cleanrl-cpu-spot"
        ]
    for name in ("cleanrl-ppo", "cleanrl-single", "cleanrl-multinode"):
        assert revisions(batch, name) == [1], name
    assert batch.describe_jobs(jobs=[job["jobId"]])["jobs"][0]["status"] == "RUNNING"  # the article's job goes on

    iam = client(moto, "iam")
    assert {"cleanrl-batch-service", "cleanrl-batch-instance", "cleanrl-job", "cleanrl-execution"} <= {
        r["RoleName"] for r in iam.list_roles()["Roles"]
    }
    (trust,) = iam.get_role(RoleName="cleanrl-batch-service")["Role"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
    profile = iam.get_instance_profile(InstanceProfileName="cleanrl-batch-instance")["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["cleanrl-batch-instance"]
    templates = client(moto, "ec2").describe_launch_templates()["LaunchTemplates"]
    assert [t["LaunchTemplateName"] for t in templates] == ["cleanrl-batch"]
    groups = client(moto, "logs").describe_log_groups(logGroupNamePrefix="/aws/batch/cleanrl")["logGroups"]
    assert [g["logGroupName"] for g in groups] == ["/aws/batch/cleanrl"]
    assert [r["repositoryName"] for r in client(moto, "ecr").describe_repositories()["repositories"]] == ["cleanrl"]
    assert f"cleanrl-runs-{ACCOUNT}-{REGION}" in {b["Name"] for b in client(moto, "s3").list_buckets()["Buckets"]}

    # a later revision, as docs/cloud.md says: registering again adds revision 2 and keeps 1, which setup.sh leaves
    # alone, and `--job-definition cleanrl-ppo` without a revision runs the latest one
    listing = (
        "aws batch describe-job-definitions --job-definition-name cleanrl-ppo --status ACTIVE "
        "--query 'jobDefinitions[].revision'"
    )
    assert f"`{listing}`" in " ".join((ROOT / "docs" / "cloud.md").read_text().split())
    (work / "cloud" / "examples" / "revision.sh").write_text(
        "set -euo pipefail\n"
        "aws batch register-job-definition --cli-input-json file://cloud/examples/job_definition_ppo.json\n"
        ". cloud/examples/setup.sh >/dev/null\n"
        f"{listing}\n"
        "aws batch submit-job --job-name latest --job-queue cleanrl-queue --job-definition cleanrl-ppo "
        "--parameters envId=CartPole-v1,totalTimesteps=1000\n"
    )
    proc = run_example(moto, "revision.sh", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    registered, listed, submitted = printed_json(proc.stdout)
    assert registered["revision"] == 2 and sorted(listed) == [1, 2] and revisions(batch, "cleanrl-ppo") == [1, 2]
    # setup.sh again, on the whole set-up: nothing made twice
    assert [revisions(batch, name) for name in ("cleanrl-single", "cleanrl-multinode")] == [[1], [1]]
    assert len(batch.describe_job_queues()["jobQueues"]) == 2 and len(batch.describe_compute_environments()[
        "computeEnvironments"]) == 1
    latest = batch.describe_jobs(jobs=[submitted["jobId"]])["jobs"][0]
    assert latest["jobDefinition"].endswith(":job-definition/cleanrl-ppo:2")


# ---------------------------------------------------------------------------------------------------
# The instances' user data


def ecs_config_lines() -> tuple[email.message.Message, str]:
    message = email.message_from_bytes((EXAMPLES / "user_data.mime").read_bytes())
    return message, message.get_payload()[0].get_payload()


def test_user_data_is_mime_multipart_and_appends_the_ecs_agent_settings(tmp_path):
    message, script = ecs_config_lines()
    # AWS Batch merges it with its own user data: a MIME multi-part archive with a shell script part
    assert message.get_content_type() == "multipart/mixed" and message["MIME-Version"] == "1.0"
    (part,) = message.get_payload()
    assert part.get_content_type() == "text/x-shellscript" and part.get_content_charset() == "us-ascii"
    assert script.startswith("#!/bin/bash\n")
    # run it against a copy of the agent's config file that already holds a line of Batch's own
    config = tmp_path / "ecs.config"
    config.write_text("ECS_CLUSTER=AWSBatch-cleanrl-cpu-spot\n")
    writes = [line for line in script.splitlines() if "/etc/ecs/ecs.config" in line and not line.startswith("#")]
    assert writes == ["cat >> /etc/ecs/ecs.config <<'EOF'"]  # appends: the lines Batch writes stay
    command = ["bash", "-c", script.replace("/etc/ecs/ecs.config", str(config))]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc.stderr
    assert config.read_text().splitlines() == [
        "ECS_CLUSTER=AWSBatch-cleanrl-cpu-spot",
        "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true",
        "ECS_CONTAINER_STOP_TIMEOUT=120s",
    ]


def test_stop_timeout_covers_the_last_uploads_retries_within_the_spot_notice(monkeypatch):
    """ECS_CONTAINER_STOP_TIMEOUT holds cloud/durable.py's waits between the tries of its last upload, and leaves time
    for the tries themselves; no more than the two minutes a Spot instance has after its notice."""
    from cloud import durable

    monkeypatch.delenv("CLEANRL_S3_RETRY_SECONDS", raising=False)
    retry_s = durable.positive_seconds("CLEANRL_S3_RETRY_SECONDS", "10")
    waits = sum(retry_s * 3**k for k in range(durable.FINAL_TRIES - 1))  # 10 s, then 30 s
    (stop_timeout,) = re.findall(r"^ECS_CONTAINER_STOP_TIMEOUT=(\d+)s$", ecs_config_lines()[1], re.MULTILINE)
    assert waits + 60 <= int(stop_timeout) <= 120


def test_cli_launch_template_carries_the_same_user_data_and_metadata_options():
    data = json.loads((EXAMPLES / "launch_template.json").read_text())["LaunchTemplateData"]
    assert base64.b64decode(data["UserData"]) == (EXAMPLES / "user_data.mime").read_bytes()
    metadata = {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 2}
    assert data["MetadataOptions"] == metadata
    (root,) = data["BlockDeviceMappings"]
    assert root["DeviceName"] == "/dev/xvda" and root["Ebs"]["VolumeSize"] == 200 and root["Ebs"]["Encrypted"]
    # terraform reads the same user data file
    assert 'filebase64("${path.module}/examples/user_data.mime")' in (CLOUD / "batch.tf").read_text()


# ---------------------------------------------------------------------------------------------------
# The entrypoint's Spot interruption notice watcher


class InstanceMetadata:
    """IMDSv2 on 127.0.0.1: PUT /latest/api/token gives a token, GET /latest/meta-data/spot/instance-action answers 404
    until `notice` is set, 401 without the token."""

    TOKEN = "imds-token-7d1e"

    def __init__(self):
        self.notice: str | None = None
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, token header
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, code: int, body: str = ""):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_PUT(self):
                outer.requests.append(("PUT", self.path, None))
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    self.answer(200, outer.TOKEN)
                else:
                    self.answer(400)

            def do_GET(self):
                token = self.headers.get("X-aws-ec2-metadata-token")
                outer.requests.append(("GET", self.path, token))
                if token != outer.TOKEN:
                    self.answer(401)
                elif self.path != "/latest/meta-data/spot/instance-action" or outer.notice is None:
                    self.answer(404)
                else:
                    self.answer(200, outer.notice)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def gets(self) -> int:
        return sum(1 for r in self.requests if r[0] == "GET")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def imds():
    server = InstanceMetadata()
    yield server
    server.close()


# a job that runs until SIGTERM, then says so and exits 143 as the scripts do
JOB = [
    sys.executable,
    "-c",
    (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('stopped by SIGTERM', flush=True), sys.exit(143)))\n"
        "print('running', flush=True)\n"
        "time.sleep(60)\n"
    ),
]


def entrypoint(command: list[str], **env: str) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    full.update(PATH=VENV_PATH, CLEANRL_XVFB="0", CLEANRL_SPOT_POLL_SECONDS="0.1", **env)
    return subprocess.Popen(
        ["sh", str(CLOUD / "entrypoint.sh"), *command],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_entrypoint_sends_sigterm_to_a_batch_job_at_the_spot_interruption_notice(imds):
    proc = entrypoint(JOB, AWS_BATCH_JOB_ID="job-1", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint)
    try:
        wait_for(lambda: imds.gets() >= 5)  # polling, no notice yet: the job runs on
        assert proc.poll() is None
        imds.notice = '{"action": "terminate", "time": "2026-01-01T00:02:00Z"}'
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert out.splitlines() == ["running", "stopped by SIGTERM"]
    assert 'Spot interruption notice {"action": "terminate"' in err
    # IMDSv2: every read carried a session token
    gets = [token for method, _, token in imds.requests if method == "GET"]
    assert gets and set(gets) == {InstanceMetadata.TOKEN}


def test_entrypoint_watches_only_in_a_batch_job_on_an_instance(imds, tmp_path):
    done = ["sh", "-c", "sleep 0.5; echo done"]
    # outside AWS Batch, and with the instance metadata turned off: no request at all
    for env in ({}, {"AWS_BATCH_JOB_ID": "job-2", "AWS_EC2_METADATA_DISABLED": "true"}):
        proc = entrypoint(done, AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint, **env)
        out, err = proc.communicate(timeout=20)
        assert (proc.returncode, out) == (0, "done\n"), err
    assert imds.requests == []
    # no instance metadata to reach (not on EC2): the job runs as usual
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    nowhere = f"http://127.0.0.1:{closed.server_address[1]}"
    closed.server_close()
    proc = entrypoint(done, AWS_BATCH_JOB_ID="job-3", AWS_EC2_METADATA_SERVICE_ENDPOINT=nowhere)
    out, err = proc.communicate(timeout=20)
    assert (proc.returncode, out, err) == (0, "done\n", "")
    # the watcher ends with the job: no request after it exited
    proc = entrypoint(done, AWS_BATCH_JOB_ID="job-4", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint)
    out, err = proc.communicate(timeout=20)
    assert (proc.returncode, out) == (0, "done\n"), err
    seen = len(imds.requests)
    assert seen > 0
    time.sleep(0.5)
    assert len(imds.requests) == seen
