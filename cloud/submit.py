# docs: docs/cloud.md
"""Run CleanRL scripts on AWS Batch: build and push the image, submit jobs, list, wait, cancel, show logs.

The infrastructure comes from cloud/*.tf (terraform); names below are its defaults (name_prefix "cleanrl").

Run:
    python cloud/submit.py build --repository cleanrl
    python cloud/submit.py submit --job-queue cleanrl-cpu-spot --scripts ppo.py \
        --env-ids CartPole-v1 Acrobot-v1 --seeds 1 2 3 --total-timesteps 500000
    python cloud/submit.py submit --no-build --array --seeds $(seq 1 100) --env-ids CartPole-v1
    python cloud/submit.py submit-multinode --num-nodes 2 --env-id BreakoutNoFrameskip-v4
    python cloud/submit.py list --job-queue cleanrl-cpu-spot
    python cloud/submit.py wait JOB_ID [JOB_ID ...]
    python cloud/submit.py cancel --terminate JOB_ID [JOB_ID ...]
    python cloud/submit.py logs JOB_ID
    python cloud/submit.py --help

Every input AWS would reject (job names, array sizes, vCPU/memory/GPU values, ...) is checked before the
first AWS call. W&B credentials (WANDB_API_KEY, ...) are read from your environment and handed to AWS only
inside the submit request as the job's environment: nothing is written to disk or baked into the image.
"""

import base64
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn, Optional, Union

import tyro

ROOT = Path(__file__).resolve().parent.parent

# Limits of the AWS Batch API (https://docs.aws.amazon.com/batch/latest/APIReference/).
JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")  # SubmitJob.jobName: 1-128, first alphanumeric
JOB_DEFINITION_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
IMAGE_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # docker tag grammar
ARRAY_SIZE_MIN, ARRAY_SIZE_MAX = 2, 10000  # ArrayProperties.size
MAX_DESCRIBE_IDS = 100  # DescribeJobs takes at most 100 job ids per call
MAX_LIST_RESULTS = 100  # ListJobs returns at most 100 jobs per call; the rest come with nextToken
MIN_TIMEOUT_SECONDS = 60  # JobTimeout.attemptDurationSeconds
STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED")
TERMINAL = ("SUCCEEDED", "FAILED")
# What a multi-node job's node gets per GPU when --gpus is given without --vcpus/--memory: terraform's defaults
# (multinode_vcpus_per_gpu, multinode_memory_mib_per_gpu), so that 8 GPUs ask for 64 vCPUs and 224000 MiB.
VCPUS_PER_GPU, MEMORY_MIB_PER_GPU = 8, 28000
# W&B settings passed from the caller's environment into the job's environment, and nowhere else.
WANDB_VARIABLES = ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_BASE_URL")


@dataclass
class Aws:
    region: Optional[str] = None
    """AWS region; None uses AWS_REGION / AWS_DEFAULT_REGION or your AWS config"""
    endpoint_url: Optional[str] = None
    """another AWS endpoint (a local one for tests); None uses AWS_ENDPOINT_URL or the real AWS"""


@dataclass
class Build(Aws):
    """Build the image from the repository's Dockerfile and push it to the ECR repository."""

    repository: str = "cleanrl"
    """name of the ECR repository (terraform output ecr_repository_url)"""
    tag: Optional[str] = None
    """image tag; None uses the git commit (with a -dirty suffix for uncommitted changes), else "latest". The image is
    pushed as :latest too (what the job definitions run, and `submit --no-build` without --image)"""
    dry_run: bool = False
    """if toggled, print the docker commands instead of running them (read-only AWS calls still happen)"""


@dataclass
class Submit(Build):
    """Submit one job per (script, env id, seed), or one array job per (script, env id) over the seeds."""

    scripts: tuple[str, ...] = ("ppo.py",)
    """scripts to run: a name in cleanrl/ (ppo_atari.py) or a path from the repository root"""
    env_ids: tuple[str, ...] = ("CartPole-v1",)
    """environment ids; every script runs on every one"""
    seeds: tuple[int, ...] = (1,)
    """seeds; with --array they must be consecutive (child i runs seed seeds[0] + i)"""
    total_timesteps: Optional[int] = None
    """--total-timesteps of every run; None keeps the job definition's default"""
    extra_args: str = ""
    """more flags for the script, as one shell-quoted string, e.g. "--track --capture-video" """
    launcher: str = "python"
    """what starts the script in the container, e.g. "torchrun --standalone --nproc-per-node 2" """
    array: bool = False
    """if toggled, submit one array job per (script, env id) instead of one job per seed"""
    job_queue: str = "cleanrl-cpu-spot"
    """job queue (terraform output job_queues)"""
    job_definition: str = "cleanrl-single"
    """single-container job definition (terraform output single_job_definition)"""
    job_name_prefix: str = "cleanrl"
    """first part of every job name: {prefix}-{script}-{env id}-s{seed}"""
    vcpus: Optional[int] = None
    """vCPUs of each job; None keeps the job definition's"""
    memory: Optional[int] = None
    """memory of each job in MiB; None keeps the job definition's"""
    gpus: Optional[int] = None
    """GPUs of each job (use a GPU queue); None keeps the job definition's"""
    timeout_seconds: Optional[int] = None
    """stop an attempt after this many seconds (at least 60); None keeps the job definition's"""
    build: bool = True
    """if toggled, build and push the image first and run the jobs on it; --no-build uses --image"""
    image: Optional[str] = None
    """with --no-build: image URI to run; None runs the image the job definition names"""


@dataclass
class SubmitMultinode(Build):
    """Submit one multi-node parallel job: torchrun on every node, one process per GPU."""

    script: str = "ppo_atari_multigpu.py"
    """script torchrun starts: a name in cleanrl/ or a path from the repository root"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """environment id"""
    seed: int = 1
    """seed of the run"""
    total_timesteps: Optional[int] = None
    """--total-timesteps of the run; None keeps the job definition's default"""
    extra_args: str = ""
    """more flags for the script, as one shell-quoted string"""
    num_nodes: int = 2
    """number of nodes (instances)"""
    nproc_per_node: str = "gpu"
    """torchrun --nproc-per-node on every node: a number, or gpu / cpu / auto"""
    job_queue: str = "cleanrl-gpu-multinode"
    """job queue (terraform output job_queues); multi-node parallel jobs do not run on Spot compute environments"""
    job_definition: str = "cleanrl-multinode"
    """multi-node job definition (terraform output multinode_job_definition)"""
    job_name: str = "cleanrl-multinode"
    """name of the job"""
    vcpus: Optional[int] = None
    """vCPUs of each node; None keeps the job definition's, or with --gpus 8 per GPU"""
    memory: Optional[int] = None
    """memory of each node in MiB; None keeps the job definition's, or with --gpus 28000 per GPU"""
    gpus: Optional[int] = None
    """GPUs of each node; None keeps the job definition's"""
    timeout_seconds: Optional[int] = None
    """stop an attempt after this many seconds (at least 60); None keeps the job definition's"""
    build: bool = True
    """if toggled, build and push the image first and run the job on it; --no-build uses --image"""
    image: Optional[str] = None
    """with --no-build: image URI to run; None runs the image the job definition names"""


@dataclass
class List(Aws):
    """List the jobs of a queue (or the children of an array job)."""

    job_queue: str = "cleanrl-cpu-spot"
    """job queue to list"""
    statuses: tuple[str, ...] = STATUSES
    """statuses to list"""
    array_job_id: Optional[str] = None
    """list the children of this array job instead of the queue"""


@dataclass
class Wait(Aws):
    """Wait until every job is SUCCEEDED or FAILED, printing progress; fails if any job FAILED."""

    job_ids: tyro.conf.Positional[tuple[str, ...]] = ()
    """ids of the jobs to wait for"""
    poll_seconds: float = 30.0
    """seconds between two status checks"""
    timeout_minutes: Optional[float] = None
    """give up after this many minutes; None waits forever"""


@dataclass
class Cancel(Aws):
    """Cancel jobs that have not started; with --terminate also stop running ones."""

    job_ids: tyro.conf.Positional[tuple[str, ...]] = ()
    """ids of the jobs to cancel"""
    terminate: bool = False
    """if toggled, terminate (also stops STARTING and RUNNING jobs) instead of cancel"""
    reason: str = "cancelled with cloud/submit.py"
    """reason recorded on the jobs"""


@dataclass
class Logs(Aws):
    """Show the CloudWatch log group and stream of each job (array children and nodes included)."""

    job_ids: tyro.conf.Positional[tuple[str, ...]] = ()
    """ids of the jobs"""


Command = Union[
    Annotated[Build, tyro.conf.subcommand("build")],
    Annotated[Submit, tyro.conf.subcommand("submit")],
    Annotated[SubmitMultinode, tyro.conf.subcommand("submit-multinode")],
    Annotated[List, tyro.conf.subcommand("list")],
    Annotated[Wait, tyro.conf.subcommand("wait")],
    Annotated[Cancel, tyro.conf.subcommand("cancel")],
    Annotated[Logs, tyro.conf.subcommand("logs")],
]


class SubmitError(Exception):
    """A failure with a one-line message for the user."""


def fail(message: str) -> NoReturn:
    raise SubmitError(message)


# ---------------------------------------------------------------------------------------------------
# Checks: everything here runs before the first AWS call.


def check_job_name(name: str) -> str:
    if not JOB_NAME_RE.match(name):
        if len(name) > 128:
            fail(f"job name {name!r} has {len(name)} characters; AWS Batch allows at most 128")
        fail(f"job name {name!r} is invalid: use letters, digits, '-' and '_' only, starting with a letter or digit")
    return name


def check_job_definition_name(name: str) -> None:
    # A name, name:revision or an ARN is accepted by SubmitJob; only a plain name is checked.
    if ":" not in name and not JOB_DEFINITION_NAME_RE.match(name):
        fail(f"job definition name {name!r} is invalid: 1-128 letters, digits, '-' and '_'")


def check_resources(vcpus: Optional[int], memory: Optional[int], gpus: Optional[int], what: str) -> None:
    if vcpus is not None and vcpus < 1:
        fail(f"--vcpus must be at least 1 per {what} on EC2, got {vcpus}")
    if memory is not None and memory < 4:
        fail(f"--memory is in MiB and must be at least 4, got {memory}")
    if gpus is not None and gpus < 0:
        fail(f"--gpus must be 0 or more, got {gpus}")


def check_timeout(timeout_seconds: Optional[int]) -> None:
    if timeout_seconds is not None and timeout_seconds < MIN_TIMEOUT_SECONDS:
        fail(f"--timeout-seconds must be at least {MIN_TIMEOUT_SECONDS} (AWS Batch minimum), got {timeout_seconds}")


def check_array_size(size: int) -> None:
    if not ARRAY_SIZE_MIN <= size <= ARRAY_SIZE_MAX:
        fail(
            f"an array job has {ARRAY_SIZE_MIN}..{ARRAY_SIZE_MAX} children, got {size} seeds"
            + ("; submit a single seed without --array" if size == 1 else "")
        )


def check_extra_args(extra_args: str) -> list[str]:
    try:
        return shlex.split(extra_args)
    except ValueError as e:
        fail(f"--extra-args is not valid shell text ({e}): {extra_args!r}")


def check_script(script: str) -> str:
    """The script's path from the repository root (the image's working directory); a bare name is in cleanrl/."""
    path = script if "/" in script else f"cleanrl/{script}"
    # The image is built from this checkout: a script that is not here is not in the image either.
    if not (ROOT / path).is_file():
        fail(f"script {script!r} is not a file of this repository ({ROOT / path} does not exist)")
    return path


def wandb_environment(extra_args: list[str]) -> list[dict]:
    """W&B settings of the caller's environment, for the job's environment only."""
    env = [{"name": k, "value": os.environ[k]} for k in WANDB_VARIABLES if os.environ.get(k)]
    if "--track" in extra_args and not os.environ.get("WANDB_API_KEY"):
        fail("--extra-args has --track but WANDB_API_KEY is not set in your environment")
    return env


def slug(text: str) -> str:
    """Characters a job name may hold; e.g. ALE/Breakout-v5 -> ALE-Breakout-v5."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)


def container_overrides(vcpus, memory, gpus, environment: list[dict]) -> dict:
    requirements = []
    if vcpus is not None:
        requirements.append({"type": "VCPU", "value": str(vcpus)})
    if memory is not None:
        requirements.append({"type": "MEMORY", "value": str(memory)})
    if gpus:
        requirements.append({"type": "GPU", "value": str(gpus)})
    overrides: dict = {}
    if requirements:
        overrides["resourceRequirements"] = requirements
    if environment:
        overrides["environment"] = environment
    return overrides


def check_image_flags(args: Union["Submit", "SubmitMultinode"]) -> None:
    if args.build and args.image is not None:
        fail("--image is for --no-build; a build pushes its own image")


def plan_jobs(args: Submit) -> list[dict]:
    """The SubmitJob requests of `submit`, checked, without jobQueue/jobDefinition (filled in later)."""
    check_image_flags(args)
    check_job_definition_name(args.job_definition)
    check_resources(args.vcpus, args.memory, args.gpus, "job")
    check_timeout(args.timeout_seconds)
    extra = check_extra_args(args.extra_args)
    if not args.scripts or not args.env_ids or not args.seeds:
        fail("--scripts, --env-ids and --seeds each need at least one value")
    if any(s < 0 for s in args.seeds):
        fail(f"seeds must be 0 or more, got {list(args.seeds)}")
    if len(set(args.seeds)) != len(args.seeds):
        fail(f"--seeds has repeated values: {list(args.seeds)}")
    if args.total_timesteps is not None and args.total_timesteps < 1:
        fail(f"--total-timesteps must be at least 1, got {args.total_timesteps}")
    if args.array:
        check_array_size(len(args.seeds))
        if list(args.seeds) != list(range(args.seeds[0], args.seeds[0] + len(args.seeds))):
            fail(
                "with --array the seeds must be consecutive and ascending (child i runs seed first + i), "
                f"got {list(args.seeds)}"
            )
    scripts = [check_script(script) for script in args.scripts]
    environment = wandb_environment(extra)
    overrides = container_overrides(args.vcpus, args.memory, args.gpus, environment)
    requests = []
    for script in scripts:
        command = " ".join([args.launcher, shlex.quote(script), *map(shlex.quote, extra)])
        stem = Path(script).stem
        for env_id in args.env_ids:
            groups = [args.seeds] if args.array else [(s,) for s in args.seeds]
            for seeds in groups:
                if len(seeds) == 1:
                    name = f"{args.job_name_prefix}-{stem}-{slug(env_id)}-s{seeds[0]}"
                else:
                    name = f"{args.job_name_prefix}-{stem}-{slug(env_id)}-s{seeds[0]}-{seeds[-1]}"
                parameters = {"script": command, "envId": env_id, "seed": str(seeds[0])}
                if args.total_timesteps is not None:
                    parameters["totalTimesteps"] = str(args.total_timesteps)
                request = {"jobName": check_job_name(name), "parameters": parameters}
                if args.array:
                    request["arrayProperties"] = {"size": len(seeds)}
                if overrides:
                    request["containerOverrides"] = overrides
                if args.timeout_seconds is not None:
                    request["timeout"] = {"attemptDurationSeconds": args.timeout_seconds}
                requests.append(request)
    return requests


def plan_multinode(args: SubmitMultinode) -> dict:
    """The SubmitJob request of `submit-multinode`, checked, without jobQueue/jobDefinition."""
    check_image_flags(args)
    check_job_name(args.job_name)
    check_job_definition_name(args.job_definition)
    check_resources(args.vcpus, args.memory, args.gpus, "node")
    check_timeout(args.timeout_seconds)
    extra = check_extra_args(args.extra_args)
    script = check_script(args.script)
    if args.num_nodes < 1:
        fail(f"--num-nodes must be at least 1, got {args.num_nodes}")
    if args.nproc_per_node not in ("gpu", "cpu", "auto") and not (
        args.nproc_per_node.isdigit() and int(args.nproc_per_node) >= 1
    ):
        fail(f"--nproc-per-node must be a positive number or gpu, cpu, auto; got {args.nproc_per_node!r}")
    if args.seed < 0:
        fail(f"--seed must be 0 or more, got {args.seed}")
    if args.total_timesteps is not None and args.total_timesteps < 1:
        fail(f"--total-timesteps must be at least 1, got {args.total_timesteps}")
    environment = wandb_environment(extra)
    parameters = {
        "script": " ".join([shlex.quote(script), *map(shlex.quote, extra)]),
        "envId": args.env_id,
        "seed": str(args.seed),
        "nprocPerNode": args.nproc_per_node,
    }
    if args.total_timesteps is not None:
        parameters["totalTimesteps"] = str(args.total_timesteps)
    node_overrides: dict = {"numNodes": args.num_nodes}
    # more GPUs per node need more CPUs (each rank steps its envs on the CPU) and memory
    vcpus = args.vcpus if args.vcpus is not None or not args.gpus else VCPUS_PER_GPU * args.gpus
    memory = args.memory if args.memory is not None or not args.gpus else MEMORY_MIB_PER_GPU * args.gpus
    overrides = container_overrides(vcpus, memory, args.gpus, environment)
    if overrides:
        node_overrides["nodePropertyOverrides"] = [{"targetNodes": "0:", "containerOverrides": overrides}]
    request = {"jobName": args.job_name, "parameters": parameters, "nodeOverrides": node_overrides}
    if args.timeout_seconds is not None:
        request["timeout"] = {"attemptDurationSeconds": args.timeout_seconds}
    return request


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------------------------------------------
# AWS and docker.


def client(args: Aws, service: str):
    import boto3

    return boto3.client(service, region_name=args.region, endpoint_url=args.endpoint_url)


def git_tag() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    except FileNotFoundError:
        return "latest"
    if head.returncode != 0:
        return "latest"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def run_docker(argv: list[str], dry_run: bool, input_text: Optional[str] = None, env: Optional[dict] = None) -> None:
    shown = " ".join(shlex.quote(a) for a in argv) + (" < (password on stdin)" if input_text is not None else "")
    print(f"+ {shown}", file=sys.stderr)
    if dry_run:
        return
    try:
        proc = subprocess.run(argv, input=input_text, text=True, env=env)
    except FileNotFoundError:
        fail("docker is not installed or not on PATH (use --no-build --image URI to skip the build)")
    if proc.returncode != 0:
        fail(f"{argv[0]} {argv[1]} exited with status {proc.returncode}")


def build_and_push(args: Build) -> str:
    """Build the image, log in to ECR and push; returns the image URI. The ECR password goes to docker on
    stdin and docker keeps it in a DOCKER_CONFIG in memory (/dev/shm) that is deleted after the push."""
    tag = args.tag or git_tag()
    if not IMAGE_TAG_RE.match(tag):
        fail(f"image tag {tag!r} is invalid: 1-128 letters, digits, '_', '.', '-', not starting with '.' or '-'")
    ecr = client(args, "ecr")
    repos = ecr.describe_repositories(repositoryNames=[args.repository])["repositories"]
    repo = repos[0]
    image = f"{repo['repositoryUri']}:{tag}"
    run_docker(
        ["docker", "build", "--platform", "linux/amd64", "-f", str(ROOT / "Dockerfile"), "-t", image, str(ROOT)],
        args.dry_run,
    )
    auth = ecr.get_authorization_token(registryIds=[repo["registryId"]])["authorizationData"][0]
    username, password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="cleanrl-docker-", dir=shm) as docker_config:
        env = dict(os.environ, DOCKER_CONFIG=docker_config)
        run_docker(
            ["docker", "login", "--username", username, "--password-stdin", auth["proxyEndpoint"]],
            args.dry_run,
            input_text=password,
            env=env,
        )
        run_docker(["docker", "push", image], args.dry_run, env=env)
        if tag != "latest":
            latest = f"{repo['repositoryUri']}:latest"
            run_docker(["docker", "tag", image, latest], args.dry_run, env=env)
            run_docker(["docker", "push", latest], args.dry_run, env=env)
    return image


def job_definition_with_image(batch, name: str, image: Optional[str], dry_run: bool = False) -> str:
    """The ARN of the newest ACTIVE revision of `name` that runs `image` (None: whatever it runs); registers a
    new revision (a copy with the image swapped) when the image differs."""
    if name.startswith("arn:"):
        found = batch.describe_job_definitions(jobDefinitions=[name])["jobDefinitions"]
        found = [d for d in found if d["status"] == "ACTIVE"]
    else:
        base, _, revision = name.partition(":")
        found = batch.describe_job_definitions(jobDefinitionName=base, status="ACTIVE")["jobDefinitions"]
        if revision:
            found = [d for d in found if str(d["revision"]) == revision]
    if not found:
        fail(f"job definition {name!r} does not exist or is not ACTIVE (terraform apply in cloud/ creates it)")
    newest = max(found, key=lambda d: d["revision"])
    if image is None:
        return newest["jobDefinitionArn"]
    copy = {
        k: newest[k]
        for k in (
            "jobDefinitionName",
            "type",
            "parameters",
            "retryStrategy",
            "timeout",
            "platformCapabilities",
            "propagateTags",
            "tags",
        )
        if newest.get(k)
    }
    if newest["type"] == "multinode":
        if "nodeProperties" not in newest:
            fail(f"AWS returned no nodeProperties for the multi-node job definition {name!r}; cannot change its image")
        nodes = newest["nodeProperties"]
        if all(r["container"]["image"] == image for r in nodes["nodeRangeProperties"]):
            return newest["jobDefinitionArn"]
        copy["nodeProperties"] = {
            **nodes,
            "nodeRangeProperties": [
                {**r, "container": {**r["container"], "image": image}} for r in nodes["nodeRangeProperties"]
            ],
        }
    else:
        if newest["containerProperties"]["image"] == image:
            return newest["jobDefinitionArn"]
        copy["containerProperties"] = {**newest["containerProperties"], "image": image}
    if dry_run:
        print(f"would register a new revision of {copy['jobDefinitionName']} with image {image}", file=sys.stderr)
        return newest["jobDefinitionArn"]
    registered = batch.register_job_definition(**copy)
    print(f"registered {registered['jobDefinitionName']}:{registered['revision']} with image {image}", file=sys.stderr)
    return registered["jobDefinitionArn"]


def image_for(args: Union[Submit, SubmitMultinode]) -> Optional[str]:
    if args.build:
        return build_and_push(args)
    return args.image


def submit_requests(args: Union[Submit, SubmitMultinode], requests: list[dict]) -> list[str]:
    image = image_for(args)
    batch = client(args, "batch")
    definition = job_definition_with_image(batch, args.job_definition, image, args.dry_run)
    ids = []
    for request in requests:
        request = {**request, "jobQueue": args.job_queue, "jobDefinition": definition}
        if args.dry_run:
            shown = {**request}
            for key in ("containerOverrides",):
                if "environment" in shown.get(key, {}):
                    shown[key] = {
                        **shown[key],
                        "environment": [{"name": e["name"], "value": "***"} for e in shown[key]["environment"]],
                    }
            print(f"would submit {shown}")
            continue
        job = batch.submit_job(**request)
        ids.append(job["jobId"])
        print(f"{job['jobId']}\t{job['jobName']}", flush=True)
    return ids


def describe(batch, job_ids: list[str]) -> list[dict]:
    """DescribeJobs for any number of ids, 100 per call (the API's limit)."""
    jobs = []
    for part in chunks(list(job_ids), MAX_DESCRIBE_IDS):
        jobs.extend(batch.describe_jobs(jobs=part)["jobs"])
    return jobs


def job_summaries(batch, statuses, **where) -> list[dict]:
    """ListJobs of every status in `statuses`, every page (the API returns at most 100 jobs a call)."""
    summaries = []
    for status in statuses:
        token = None
        while True:
            page = batch.list_jobs(**where, jobStatus=status, maxResults=MAX_LIST_RESULTS,
                                   **({"nextToken": token} if token else {}))
            summaries.extend(page["jobSummaryList"])
            token = page.get("nextToken")
            if not token:
                break
    return summaries


def list_jobs(args: List) -> list[dict]:
    bad = [s for s in args.statuses if s not in STATUSES]
    if bad:
        fail(f"unknown status {bad[0]!r}; choose from {', '.join(STATUSES)}")
    batch = client(args, "batch")
    where = {"arrayJobId": args.array_job_id} if args.array_job_id else {"jobQueue": args.job_queue}
    summaries = job_summaries(batch, args.statuses, **where)
    for job in summaries:
        print(f"{job['jobId']}\t{job['status']}\t{job['jobName']}")
    return summaries


def wait(args: Wait) -> dict[str, str]:
    if not args.job_ids:
        fail("give the ids of the jobs to wait for")
    if args.poll_seconds <= 0:
        fail(f"--poll-seconds must be positive, got {args.poll_seconds}")
    batch = client(args, "batch")
    deadline = None if args.timeout_minutes is None else time.monotonic() + 60 * args.timeout_minutes
    last = None
    while True:
        jobs = describe(batch, list(args.job_ids))
        missing = set(args.job_ids) - {j["jobId"] for j in jobs}
        if missing:
            fail(f"no such job: {sorted(missing)[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        counts = {s: sum(j["status"] == s for j in jobs) for s in STATUSES}
        done = counts["SUCCEEDED"] + counts["FAILED"]
        line = ", ".join(f"{s} {n}" for s, n in counts.items() if n)
        if line != last:
            print(f"[{time.strftime('%H:%M:%S')}] {done}/{len(jobs)} done: {line}", file=sys.stderr, flush=True)
            last = line
        if done == len(jobs):
            break
        if deadline is not None and time.monotonic() > deadline:
            fail(f"{len(jobs) - done} of {len(jobs)} jobs still not done after {args.timeout_minutes} minutes")
        time.sleep(args.poll_seconds)
    for j in jobs:
        print(f"{j['jobId']}\t{j['status']}\t{j['jobName']}\t{j.get('statusReason', '')}".rstrip())
    failed = [j for j in jobs if j["status"] == "FAILED"]
    if failed:
        fail(
            f"{len(failed)} of {len(jobs)} jobs FAILED, e.g. {failed[0]['jobId']}: {failed[0].get('statusReason', '?')}"
        )
    return {j["jobId"]: j["status"] for j in jobs}


def cancel(args: Cancel) -> None:
    if not args.job_ids:
        fail("give the ids of the jobs to cancel")
    if not args.reason.strip():
        fail("--reason must not be empty")
    batch = client(args, "batch")
    for job_id in args.job_ids:
        if args.terminate:
            batch.terminate_job(jobId=job_id, reason=args.reason)
        else:
            batch.cancel_job(jobId=job_id, reason=args.reason)
        print(f"{'terminated' if args.terminate else 'cancelled'}\t{job_id}")


def log_group_of(batch, definition_arn: str, cache: dict) -> str:
    if definition_arn not in cache:
        found = batch.describe_job_definitions(jobDefinitions=[definition_arn])["jobDefinitions"]
        group = "/aws/batch/job"  # where Batch writes without a logConfiguration of its own
        if found:
            d = found[0]
            props = d.get("containerProperties") or (d.get("nodeProperties") or {}).get("nodeRangeProperties", [{}])[
                0
            ].get("container", {})
            group = props.get("logConfiguration", {}).get("options", {}).get("awslogs-group", group)
        cache[definition_arn] = group
    return cache[definition_arn]


def logs(args: Logs) -> list[tuple[str, str, str]]:
    if not args.job_ids:
        fail("give the ids of the jobs")
    batch = client(args, "batch")
    jobs = describe(batch, list(args.job_ids))
    missing = set(args.job_ids) - {j["jobId"] for j in jobs}
    if missing:
        fail(f"no such job: {sorted(missing)[0]}")
    rows, cache = [], {}
    for job in jobs:
        # An array parent has no container of its own: its children (id:index) do. So do the nodes (id#node).
        if "arrayProperties" in job and "index" not in job["arrayProperties"]:
            children = [c["jobId"] for c in job_summaries(batch, STATUSES, arrayJobId=job["jobId"])]
            parts = describe(batch, sorted(children))
        elif "nodeProperties" in job and "nodeIndex" not in job.get("nodeDetails", {}):
            n = job["nodeProperties"].get("numNodes", 0)
            parts = describe(batch, [f"{job['jobId']}#{i}" for i in range(n)]) or [job]
        else:
            parts = [job]
        for part in parts:
            stream = part.get("container", {}).get("logStreamName") or "(no log stream yet)"
            group = log_group_of(batch, part["jobDefinition"], cache)
            rows.append((part["jobId"], group, stream))
            print(f"{part['jobId']}\t{group}\t{stream}")
    if any(r[2] != "(no log stream yet)" for r in rows):
        print("read one with: aws logs get-log-events --log-group-name GROUP --log-stream-name STREAM", file=sys.stderr)
    return rows


def main(args: Command) -> object:
    if isinstance(args, Submit):
        requests = plan_jobs(args)
        ids = submit_requests(args, requests)
        print(f"submitted {len(ids)} job(s) to {args.job_queue}", file=sys.stderr)
        return ids
    if isinstance(args, SubmitMultinode):
        request = plan_multinode(args)
        return submit_requests(args, [request])
    if isinstance(args, Build):
        image = build_and_push(args)
        print(image)
        return image
    if isinstance(args, List):
        return list_jobs(args)
    if isinstance(args, Wait):
        return wait(args)
    if isinstance(args, Cancel):
        return cancel(args)
    if isinstance(args, Logs):
        return logs(args)
    raise AssertionError(f"unknown command {args!r}")


def cli(argv: Optional[list[str]] = None) -> object:
    args = tyro.cli(Command, args=argv, description=__doc__.split("\n\n")[0])
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return main(args)
    except SubmitError as e:
        raise SystemExit(f"error: {e}")
    except ClientError as e:
        err = e.response.get("Error", {})
        raise SystemExit(f"error: AWS {e.operation_name}: {err.get('Code', '?')}: {err.get('Message', e)}")
    except BotoCoreError as e:
        raise SystemExit(f"error: AWS: {e}")


if __name__ == "__main__":
    cli()
