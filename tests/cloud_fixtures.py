"""A local AWS endpoint (moto_server on 127.0.0.1) for the cloud/ tests, and what they share.

Run as a script it is the server itself: `python tests/cloud_fixtures.py PORT` starts moto's server with
fixes for moto 5.2 gaps (below), so the tests talk to a real HTTP endpoint like the AWS CLI, boto3 and
terraform's provider do.
"""

import datetime
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLOUD = ROOT / "cloud"
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
BUCKET = f"cleanrl-runs-{ACCOUNT}-{REGION}"  # the runs bucket of the tests that submit jobs
QUEUE = "cleanrl-queue"  # its jobs stay RUNNING until a test says how they ended (the patches below)
# Fake credentials: moto accepts any; they must never be real ones.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def aws_env(endpoint: str, **extra: str) -> dict:
    """The environment of a process that must talk to the local endpoint only, with fake credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(FAKE_CREDENTIALS)
    env.update(AWS_DEFAULT_REGION=REGION, AWS_REGION=REGION, AWS_ENDPOINT_URL=endpoint)
    # No shared config or credentials file of the caller may leak in.
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_EC2_METADATA_DISABLED="true")
    env.update(extra)
    return env


class MotoServer:
    def __init__(self, log_path: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, MOTO_IAM_LOAD_MANAGED_POLICIES="true", CLEANRL_MOTO_RUNNING_QUEUES="cleanrl-queue")
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.port)], env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                self._log.close()
                tail = log_path.read_text().strip().splitlines()[-3:]
                raise RuntimeError(f"moto server exited with {self.proc.returncode}: {' | '.join(tail)}")
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).read()
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not answer on {self.endpoint} within 60 s")
                time.sleep(0.2)
                continue
            break
        # Batch jobs then go SUBMITTED -> ... -> SUCCEEDED without a Docker engine.
        self.post("/moto-api/config", {"batch": {"use_docker": False}})

    def post(self, path: str, body: dict) -> bytes:
        req = urllib.request.Request(
            self.endpoint + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def job_exited(self, job_id: str, exit_code: int) -> str:
        """A RUNNING job of a queue in CLEANRL_MOTO_RUNNING_QUEUES ends as its container did; its new status."""
        return json.loads(self.post("/moto-api/cleanrl/batch-job-exit", {"jobId": job_id, "exitCode": exit_code}))[
            "status"
        ]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def terraform_mirror() -> Path | None:
    """The filesystem mirror that holds hashicorp/aws 5.100.0 (the directory above registry.terraform.io)."""
    candidates = [
        os.environ.get("CLEANRL_TF_PLUGIN_MIRROR", ""),
        "/opt/tf-plugins",
        "/usr/share/terraform/plugins",
        str(Path.home() / ".terraform.d" / "plugins"),
        "/usr/local/share/terraform/plugins",
    ]
    for c in candidates:
        if c and (Path(c) / "registry.terraform.io" / "hashicorp" / "aws" / "5.100.0").is_dir():
            return Path(c)
    found = subprocess.run(
        ["find", "/", "-maxdepth", "5", "-path", "*registry.terraform.io/hashicorp/aws", "-not", "-path", "/proc/*"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    for f in found:
        if (Path(f) / "5.100.0").is_dir():
            return Path(f).parent.parent.parent
    return None


def terraform_binary() -> str | None:
    return shutil.which("terraform")


def _patch_moto():
    # moto 5.2 drops nodeProperties when it describes a multi-node job definition (JobDefinition.describe
    # returns containerProperties and eksProperties only). terraform's provider then reads an empty
    # node_properties back, and every later plan wants to update it (seen with stock moto_server: "Plan: 0 to
    # add, 1 to change"), and submit.py could not copy the definition. Add the field back; a moto that already
    # returns it is left as it is.
    from moto.batch.models import Job, JobDefinition

    original = JobDefinition.describe

    def describe(self):
        result = original(self)
        if self.node_properties is not None and "nodeProperties" not in result:
            result["nodeProperties"] = self.node_properties
        return result

    JobDefinition.describe = describe

    # moto 5.2 requires a compute environment's serviceRole; AWS Batch, without one, uses its service-linked role
    # AWSServiceRoleForBatch, and creates that role in the account the first time (cloud/batch.tf relies on it).
    from moto.batch.models import BatchBackend
    from moto.iam.exceptions import NotFoundException as IAMNotFoundException

    create_environment = BatchBackend.create_compute_environment

    def create_compute_environment(self, compute_environment_name, _type, state, compute_resources, service_role,
                                   tags=None):
        if not service_role:
            try:
                role = self.iam_backend.get_role("AWSServiceRoleForBatch")
            except IAMNotFoundException:
                trust = {"Version": "2012-10-17", "Statement": [{
                    "Action": ["sts:AssumeRole"], "Effect": "Allow", "Principal": {"Service": ["batch.amazonaws.com"]}}]}
                role = self.iam_backend.create_role(
                    "AWSServiceRoleForBatch", json.dumps(trust), "/aws-service-role/batch.amazonaws.com/",
                    permissions_boundary=None, description="", tags=[], max_session_duration="3600",
                    linked_service="batch.amazonaws.com")
            service_role = role.arn
        return create_environment(self, compute_environment_name, _type, state, compute_resources, service_role, tags)

    BatchBackend.create_compute_environment = create_compute_environment

    # moto 5.2 has no placement groups (CreatePlacementGroup answers "not implemented", and the provider retries it
    # for good); cloud/network.tf makes the multi-node environment's cluster placement group. Keep them per backend:
    # create, describe (by name or id; an unknown one is InvalidPlacementGroup.Unknown, as on AWS) and delete.
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    def groups_of(response) -> dict:
        if not hasattr(response.ec2_backend, "cleanrl_placement_groups"):
            response.ec2_backend.cleanrl_placement_groups = {}
        return response.ec2_backend.cleanrl_placement_groups

    def create_placement_group(self):
        name = self._get_param("GroupName")
        if name in groups_of(self):
            raise EC2ClientError("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
        tags = self._parse_tag_specification("placement-group").get("placement-group", {})
        group_id = "pg-" + hashlib.sha256(name.encode()).hexdigest()[:17]
        groups_of(self)[name] = {
            "GroupName": name, "GroupId": group_id, "State": "available", "Strategy": self._get_param("Strategy"),
            "GroupArn": f"arn:aws:ec2:{self.region}:{self.current_account}:placement-group/{name}",
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        }
        return ActionResult({"PlacementGroup": groups_of(self)[name]})

    def describe_placement_groups(self):
        names, ids = self._get_param("GroupNames", []), self._get_param("GroupIds", [])
        found = [g for g in groups_of(self).values() if (not names and not ids) or g["GroupName"] in names
                 or g["GroupId"] in ids]
        if len(found) < len(names) + len(ids):
            unknown = sorted(set(names) | set(ids) - {g["GroupName"] for g in found} - {g["GroupId"] for g in found})
            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{unknown[0]}' is unknown.")
        return ActionResult({"PlacementGroups": found})

    def delete_placement_group(self):
        name = self._get_param("GroupName")
        if groups_of(self).pop(name, None) is None:
            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        return ActionResult({})

    EC2Response.create_placement_group = create_placement_group
    EC2Response.describe_placement_groups = describe_placement_groups
    EC2Response.delete_placement_group = delete_placement_group

    # moto 5.2 forgets a job queue's jobStateTimeLimitActions (CreateJobQueue ignores them, DescribeJobQueues has no
    # such field), so every later plan of cloud/batch.tf would want to add them again. Keep and describe them.
    from moto.batch.models import JobQueue
    from moto.batch.responses import BatchResponse

    # moto 5.2.6 renamed the handler createjobqueue to create_job_queue; patch whichever this moto has.
    handler = "create_job_queue" if hasattr(BatchResponse, "create_job_queue") else "createjobqueue"
    create_queue, describe_queue = getattr(BatchResponse, handler), JobQueue.describe

    def create_job_queue(self):
        result = create_queue(self)
        actions = self._get_param("jobStateTimeLimitActions")
        if actions:
            self.batch_backend.get_job_queue(self._get_param("jobQueueName")).time_limit_actions = actions
        return result

    def describe_with_actions(self):
        return describe_queue(self) | {"jobStateTimeLimitActions": getattr(self, "time_limit_actions", [])}

    setattr(BatchResponse, handler, create_job_queue)
    JobQueue.describe = describe_with_actions

    # moto 5.2 copies the tags of a new launch template itself (TagSpecifications of ResourceType launch-template)
    # into its launch data, where they mean tags for launched resources, which that type cannot be; terraform then
    # sees a tag_specifications block nobody wrote and every later plan wants to remove it. Leave them out.
    from moto.ec2.models.launch_templates import LaunchTemplateBackend

    create_template = LaunchTemplateBackend.create_launch_template

    def create_launch_template(self, name, description, template_data, tag_spec):
        specs = [t for t in template_data.get("TagSpecifications", []) if t["ResourceType"] != "launch-template"]
        return create_template(self, name, description, {**template_data, "TagSpecifications": specs}, tag_spec)

    LaunchTemplateBackend.create_launch_template = create_launch_template

    # Without Docker moto finishes every job (SUCCEEDED) inside SubmitJob, so a command that lists RUNNING jobs, as the
    # CleanRL articles' `aws batch describe-jobs --jobs $(aws batch list-jobs --job-status RUNNING ...)` does, never
    # finds one. Jobs of the queues named in CLEANRL_MOTO_RUNNING_QUEUES stay RUNNING (as a real training job would
    # for hours) until terminate-job ends them (FAILED, as on AWS).
    from moto.batch.utils import JobStatus
    from moto.batch_simple.models import BatchSimpleBackend

    running_queues = set(filter(None, os.environ.get("CLEANRL_MOTO_RUNNING_QUEUES", "").split(",")))
    finish = BatchSimpleBackend._mark_job_as_finished

    def mark_job(self, include_start_attempt, job):
        if job.job_queue.name not in running_queues:
            return finish(self, include_start_attempt, job)
        self.backend._jobs[job.job_id] = job
        job.job_started_at = datetime.datetime.now()
        job.log_stream_name = job._stream_name
        if include_start_attempt:
            job._start_attempt()
        job.status = JobStatus.RUNNING

    BatchSimpleBackend._mark_job_as_finished = mark_job
    terminate = Job.terminate

    def stop(job, reason):
        terminate(job, reason)
        if job.status == JobStatus.RUNNING and job.job_queue.name in running_queues:
            job._mark_stopped(success=False)

    Job.terminate = stop

    # Nor does any container run the command of a RUNNING job of those queues: a test runs it itself, as the container
    # would, and reports how it exited with POST /moto-api/cleanrl/batch-job-exit {"jobId": ID, "exitCode": N}
    # (MotoServer.job_exited). The job then stops as Batch stops it: SUCCEEDED on 0, else FAILED, with the exit code;
    # an array job stops once all its children have, SUCCEEDED only if every child did.
    from moto.batch.models import batch_backends
    from moto.moto_api._internal import urls as moto_api_urls

    def job_exit(request, full_url, headers):
        body = json.loads(request.environ["wsgi.input"].read(int(headers["Content-Length"])))
        job_id, code = body["jobId"], int(body["exitCode"])
        found = [b._jobs[job_id] for accounts in batch_backends.values() for b in accounts.values() if job_id in b._jobs]
        if not found or found[0].status != JobStatus.RUNNING:
            return 400, {}, f"no RUNNING job {job_id}"
        job = found[0]
        job.exit_code = code
        job.job_stopped_reason = "Essential container in task exited"
        if job.latest_attempt:
            job.latest_attempt["container"]["exitCode"] = code
        job._mark_stopped(success=code == 0)
        parent_id, _, index = job_id.partition(":")
        parent = job.backend._jobs.get(parent_id) if index else None
        if parent is not None and parent._child_jobs and all(c.job_stopped for c in parent._child_jobs):
            parent._mark_stopped(success=all(c.status == JobStatus.SUCCEEDED for c in parent._child_jobs))
        return 200, {}, json.dumps({"jobId": job_id, "status": job.status})

    moto_api_urls.url_paths["{0}/moto-api/cleanrl/batch-job-exit"] = job_exit


if __name__ == "__main__":
    _patch_moto()
    from moto.server import main

    main(["--host", "127.0.0.1", "--port", sys.argv[1]])


def boto_client(moto: "MotoServer", service: str):
    """A boto3 client of the local endpoint, with the fake credentials."""
    import boto3

    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=moto.endpoint,
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
    )


def use_local_endpoint(monkeypatch, moto: "MotoServer", batch_api, workdir: Path) -> None:
    """This process talks to the local endpoint only, with fake credentials and no W&B variables of the caller, in
    an empty working directory (where `submit` writes its sweep manifests, sweeps/NAME.json)."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in aws_env(moto.endpoint).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    for key in batch_api.WANDB_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(workdir)


def recording(monkeypatch, batch_api, event: str) -> list:
    """Record (operation, parameters) of every AWS call of cloud/submit.py matching the botocore `event`, as sent
    (every call goes through cloud/batch_api.py's client)."""
    called, real_client = [], batch_api.client

    def recording_client(args, service):
        c = real_client(args, service)
        c.meta.events.register(event, lambda params, model, **kw: called.append((model.name, params)))
        return c

    monkeypatch.setattr(batch_api, "client", recording_client)
    return called


def serve_moto(tmp_path_factory, name: str = "moto"):
    """A module's local endpoint, for its fixture: `yield from serve_moto(tmp_path_factory)`."""
    import pytest

    pytest.importorskip("moto.server", reason="moto[server] (optional dependency, extra 'dev') is not installed")
    server = MotoServer(tmp_path_factory.mktemp(name) / "moto.log")
    yield server
    server.stop()


def runs_bucket_and_queue(moto: "MotoServer", prefix: str):
    """What a plain-CLI set-up leaves on the endpoint: the runs bucket BUCKET, a compute environment, the queue QUEUE,
    the job definition cleanrl-single of cloud/examples/job_definition.json (with this account) and the image it
    names, cleanrl:latest, in ECR. `prefix` names the role and compute environment. Returns the Batch client."""
    boto_client(moto, "s3").create_bucket(Bucket=BUCKET)
    role = boto_client(moto, "iam").create_role(RoleName=f"{prefix}-batch-service",
                                                AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    batch = boto_client(moto, "batch")
    ce = batch.create_compute_environment(computeEnvironmentName=f"{prefix}-ce", type="UNMANAGED", serviceRole=role)
    batch.create_job_queue(jobQueueName=QUEUE, state="ENABLED", priority=1,
                           computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce["computeEnvironmentArn"]}])
    definition = json.loads((CLOUD / "examples" / "job_definition.json").read_text().replace("111122223333", ACCOUNT))
    batch.register_job_definition(**definition)
    boto_client(moto, "ecr").create_repository(repositoryName="cleanrl")
    push_image(moto, "cleanrl", "latest")
    return batch


def push_image(moto: "MotoServer", repository: str, tag: str, build: str = "") -> str:
    """What `docker push REPOSITORY:TAG` leaves in ECR: an image manifest under the tag (another `build` text, another
    image); its digest."""
    config = "sha256:" + hashlib.sha256(f"{repository}:{tag}:{build}".encode()).hexdigest()
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "config": {"digest": config}}
    )
    image = boto_client(moto, "ecr").put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag)["image"]
    return image["imageId"]["imageDigest"]
