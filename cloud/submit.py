# docs: docs/cloud.md
"""Run CleanRL scripts on AWS Batch: build and push the image, submit jobs, list, wait, cancel, show logs; follow a
sweep (every job of one `submit`), resubmit its failed runs and bring its results home.

The infrastructure comes from cloud/*.tf (terraform); names below are its defaults (name_prefix "cleanrl").

Run:
    python cloud/submit.py build --repository cleanrl
    python cloud/submit.py submit --job-queue cleanrl-cpu-spot --scripts ppo.py \
        --env-ids CartPole-v1 Acrobot-v1 --seeds 1 2 3 --total-timesteps 500000
    python cloud/submit.py submit --no-build --array --seeds $(seq 1 100) --env-ids CartPole-v1 --sweep cartpole-100
    python cloud/submit.py status cartpole-100
    python cloud/submit.py resubmit cartpole-100 --failed
    python cloud/submit.py collect cartpole-100 --out sweeps/cartpole-100
    python cloud/submit.py submit-multinode --num-nodes 2 --env-id BreakoutNoFrameskip-v4
    python cloud/submit.py submit-tune --workers 8 --storage-secret cleanrl/tuning-db \
        --tuner-args="--script cleanrl/ppo.py --params learning-rate=log:1e-4:1e-2 --trials 100"
    python cloud/submit.py list --job-queue cleanrl-cpu-spot
    python cloud/submit.py wait JOB_ID [JOB_ID ...]
    python cloud/submit.py cancel --terminate JOB_ID [JOB_ID ...]
    python cloud/submit.py logs JOB_ID
    python cloud/submit.py --help

Every input AWS would reject (job names, array sizes, vCPU/memory/GPU values, ...) is checked before the
first AWS call. W&B credentials (WANDB_API_KEY, ...) are read from your environment and handed to AWS only
inside the submit request as the job's environment: nothing is written to disk or baked into the image.

A sweep's manifest (`submit` writes it to SWEEPS_DIR/NAME.json and beside the runs, s3://BUCKET/sweeps/NAME.json)
records each run (script, env id, seed, the command its job runs, its run id) and every job that ran it (job id, array
child PARENT:INDEX, queue, job definition, image); `resubmit` adds the new jobs to it, so the history stays.

A run is not a job: each run has an identity of its own, its run id (SWEEP/SCRIPT-ENV_ID-sSEED; for submit-multinode
--run-id), which the job gets as CLEANRL_RUN_ID and cloud/durable.py keys the run's S3 folder by,
s3://BUCKET/runs/RUN_ID/. Every attempt of a job and every resubmission of the run restores that folder and continues
the run from its last checkpoint; a finished run resubmitted exits 0 at once. A job's time limit (--timeout-seconds,
else its job definition's) goes to the job as CLEANRL_TIME_LIMIT_SECONDS: the run checkpoints and exits 143 (retried)
before AWS Batch's timeout, which is never retried, would end it.
"""

import base64
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Callable, NoReturn, Optional, Union

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
SWEEP_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # a file name and an S3 key, as typed
MANIFEST_FORMAT = 1  # a run without "run_id" is of the layout before run ids: its folder is its latest job's
# cloud/durable.py writes this beside a job's runs/ in S3 once the run finished and all of it was uploaded
MARKER = "cleanrl-complete.json"


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
    """scripts to run: a name in cleanrl/ (ppo_atari.py) or a path from the repository root, optionally with flags
    of its own before --extra-args ("dqn.py --learning-starts 1000")"""
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
    sweep: Optional[str] = None
    """name of the sweep (these jobs), for `status`, `resubmit` and `collect`; None makes one:
    {job_name_prefix}-{UTC time}-{8 hex digits}"""
    sweeps_dir: str = "sweeps"
    """folder of the sweep manifests on this machine: the manifest is SWEEPS_DIR/NAME.json"""


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
    run_id: Optional[str] = None
    """the run's identity, its S3 folder runs/RUN_ID/: give the run id of an earlier job (printed at its submit) to
    continue that run from its last checkpoint, on any number of nodes whose ranks divide --num-envs; None starts a
    new run: {job_name}-{UTC time}-{8 hex digits}"""
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
class SubmitTune(Build):
    """Submit the workers of one tuning study (benchmark/tuner.py, docs/tuning.md) as one array job: every child runs
    `benchmark/tuner.py tune` on the study whose store URL a Secrets Manager secret holds."""

    tuner_args: str = ""
    """the flags of `benchmark/tuner.py tune`, as one shell-quoted string: --script, --params, --env-ids, --trials, ...
    (not --storage: the workers read the URL from --storage-secret)"""
    storage_secret: str = ""
    """name or ARN of the Secrets Manager secret with the study's store URL (the job role must be allowed to read it:
    terraform's tuner_storage_secret_arn)"""
    workers: int = 2
    """the number of workers: the array job's children (1: a single job)"""
    job_queue: str = "cleanrl-cpu-spot"
    """job queue (terraform output job_queues)"""
    job_definition: str = "cleanrl-single"
    """single-container job definition whose container runs the workers (its command is replaced)"""
    job_name: str = "cleanrl-tune"
    """name of the job"""
    vcpus: Optional[int] = None
    """vCPUs of each worker; None keeps the job definition's"""
    memory: Optional[int] = None
    """memory of each worker in MiB; None keeps the job definition's"""
    gpus: Optional[int] = None
    """GPUs of each worker (use a GPU queue); None keeps the job definition's"""
    timeout_seconds: Optional[int] = None
    """stop an attempt after this many seconds (at least 60); None keeps the job definition's"""
    build: bool = True
    """if toggled, build and push the image first and run the workers on it; --no-build uses --image"""
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


@dataclass
class SweepCommand(Aws):
    sweep: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="SWEEP")] = ""
    """the sweep: its name (the manifest SWEEPS_DIR/NAME.json), a manifest file, or s3://BUCKET/sweeps/NAME.json"""
    sweeps_dir: str = "sweeps"
    """folder of the sweep manifests on this machine"""


@dataclass
class Status(SweepCommand):
    """Count the runs of a sweep by the status of their latest job: one line per (script, env id)."""


@dataclass
class Resubmit(SweepCommand):
    """Submit again, with the same command, the runs of a sweep whose latest job FAILED; the manifest keeps both
    jobs."""

    failed: bool = False
    """if toggled, resubmit the runs whose latest job FAILED (the one choice so far; it must be given)"""
    dry_run: bool = False
    """if toggled, print what would be resubmitted instead of submitting it"""


@dataclass
class Collect(SweepCommand):
    """Download the finished runs of a sweep and keep each as a benchmark/kept.py record for benchmark/report.py."""

    out: Optional[str] = None
    """folder of the records (OUT/<script>/<env id>/seed<k>.json) and of the downloaded runs (OUT/jobs/<job id>/);
    None: SWEEPS_DIR/NAME"""
    checkpoints: bool = False
    """if toggled, download each run's checkpoint.pt too (the state to resume from; DQN's on Atari hold the replay
    memory, gigabytes)"""


Command = Union[
    Annotated[Build, tyro.conf.subcommand("build")],
    Annotated[Submit, tyro.conf.subcommand("submit")],
    Annotated[SubmitMultinode, tyro.conf.subcommand("submit-multinode")],
    Annotated[SubmitTune, tyro.conf.subcommand("submit-tune")],
    Annotated[List, tyro.conf.subcommand("list")],
    Annotated[Wait, tyro.conf.subcommand("wait")],
    Annotated[Cancel, tyro.conf.subcommand("cancel")],
    Annotated[Logs, tyro.conf.subcommand("logs")],
    Annotated[Status, tyro.conf.subcommand("status")],
    Annotated[Resubmit, tyro.conf.subcommand("resubmit")],
    Annotated[Collect, tyro.conf.subcommand("collect")],
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


def wandb_environment(extra_args: list[str], where: str = "--extra-args") -> list[dict]:
    """W&B settings of the caller's environment, for the job's environment only. A --track run without
    WANDB_API_KEY here needs the key from the job definition (a Secrets Manager secret): `check_wandb_key`."""
    return [{"name": k, "value": os.environ[k]} for k in WANDB_VARIABLES if os.environ.get(k)]


def tracks(request: dict) -> bool:
    return "--track" in shlex.split(request.get("parameters", {}).get("script", ""))


def definition_gives(definition: dict, variable: str) -> bool:
    """Whether every container of a job definition gets `variable`, from a secret or its environment."""
    if definition.get("type") == "multinode":
        ranges = definition.get("nodeProperties", {}).get("nodeRangeProperties", [])
        containers = [r.get("container", {}) for r in ranges]
    else:
        containers = [definition.get("containerProperties", {})]
    return bool(containers) and all(
        any(item.get("name") == variable for item in c.get("secrets", []) + c.get("environment", []))
        for c in containers
    )


def check_wandb_key(batch, definition_arn: str, requests: list[dict]) -> None:
    """Before any job is submitted: a --track run gets the W&B key from your environment or from the job definition
    (terraform's wandb_secret_arn puts a Secrets Manager secret there); with neither it would fail at its start."""
    if os.environ.get("WANDB_API_KEY") or not any(tracks(r) for r in requests):
        return
    found = batch.describe_job_definitions(jobDefinitions=[definition_arn])["jobDefinitions"]
    if not (found and definition_gives(found[0], "WANDB_API_KEY")):
        fail(f"--track needs the W&B key: set WANDB_API_KEY in your environment, or give the job definition "
             f"{definition_arn.rsplit('/', 1)[-1]} a WANDB_API_KEY secret (terraform: wandb_secret_arn)")


def slug(text: str) -> str:
    """Characters a job name may hold; e.g. ALE/Breakout-v5 -> ALE-Breakout-v5."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)


# a run id (cloud/durable.py's CLEANRL_RUN_ID): parts of S3-safe characters joined by single slashes
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.=+:-]+(/[A-Za-z0-9_.=+:-]+)*$")
MAX_RUN_ID = 512


def check_run_id(run_id: str) -> str:
    if len(run_id) > MAX_RUN_ID or not RUN_ID_RE.match(run_id) or any(p in (".", "..") for p in run_id.split("/")):
        fail(f"run id {run_id!r} is invalid: 1-{MAX_RUN_ID} letters, digits and _ . - = + : in parts joined by single "
             "slashes")
    return run_id


def with_environment(overrides: dict, variables: dict[str, str]) -> dict:
    """Container overrides with `variables` set in their environment (a copy; a variable given already is replaced)."""
    kept = [e for e in overrides.get("environment", []) if e["name"] not in variables]
    return {**overrides, "environment": kept + [{"name": k, "value": v} for k, v in variables.items()]}


def time_limit(request: dict, definition: dict) -> dict[str, str]:
    """CLEANRL_TIME_LIMIT_SECONDS for a job: its --timeout-seconds, else its job definition's timeout where the
    definition does not pass it on itself (terraform's do); cloud/durable.py stops the run before it."""
    given = request.get("timeout", {}).get("attemptDurationSeconds")
    if given is None and not definition_gives(definition, "CLEANRL_TIME_LIMIT_SECONDS"):
        given = (definition.get("timeout") or {}).get("attemptDurationSeconds")
    return {} if given is None else {"CLEANRL_TIME_LIMIT_SECONDS": str(given)}


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


@dataclass
class Planned:
    """One SubmitJob request of `submit` and the runs it starts: one per seed (an array job's child i runs seeds[i])."""

    script: str  # path from the repository root
    env_id: str
    seeds: tuple[int, ...]
    request: dict  # without jobQueue/jobDefinition (filled in later)
    names: tuple[str, ...]  # the job name of each seed's run submitted on its own (what `resubmit` sends)

    def run_id(self, sweep: str, seed: object) -> str:
        """The run id of one seed's run (with seed "{seed}": what an array job's children fill in, single.sh)."""
        return f"{sweep}/{Path(self.script).stem}-{slug(self.env_id)}-s{seed}"


def check_script_entry(entry: str) -> tuple[str, list[str]]:
    """A --scripts entry: the script's path and the flags of its own ("dqn.py --learning-starts 1000")."""
    try:
        words = shlex.split(entry)
    except ValueError as e:
        fail(f"--scripts entry {entry!r} is not valid shell text ({e})")
    if not words:
        fail("--scripts has an empty entry")
    return check_script(words[0]), words[1:]


def plan_sweep(args: Submit) -> list[Planned]:
    """The SubmitJob requests of `submit` and the runs of each, checked."""
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
    if len(set(args.env_ids)) != len(args.env_ids):
        fail(f"--env-ids has repeated values: {list(args.env_ids)}")
    if args.total_timesteps is not None and args.total_timesteps < 1:
        fail(f"--total-timesteps must be at least 1, got {args.total_timesteps}")
    if args.array:
        check_array_size(len(args.seeds))
        if list(args.seeds) != list(range(args.seeds[0], args.seeds[0] + len(args.seeds))):
            fail(
                "with --array the seeds must be consecutive and ascending (child i runs seed first + i), "
                f"got {list(args.seeds)}"
            )
    scripts = [check_script_entry(entry) for entry in args.scripts]
    paths = [path for path, _ in scripts]
    if len(set(paths)) != len(paths):
        twice = next(p for p in paths if paths.count(p) > 1)
        fail(f"--scripts names {twice} twice: a sweep runs each script once per env id and seed (a variant with other "
             "flags is a sweep of its own)")
    own_flags = [flag for _, own in scripts for flag in own]
    environment = wandb_environment(extra + own_flags, "--extra-args" if "--track" in extra else "--scripts")
    overrides = container_overrides(args.vcpus, args.memory, args.gpus, environment)
    planned = []
    for script, own in scripts:
        command = " ".join([args.launcher, shlex.quote(script), *map(shlex.quote, own + extra)])
        stem = Path(script).stem
        for env_id in args.env_ids:
            groups = [args.seeds] if args.array else [(s,) for s in args.seeds]
            for seeds in groups:
                names = tuple(check_job_name(f"{args.job_name_prefix}-{stem}-{slug(env_id)}-s{s}") for s in seeds)
                if len(seeds) == 1:
                    name = names[0]
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
                planned.append(Planned(script, env_id, tuple(seeds), request, names))
    return planned


def plan_jobs(args: Submit) -> list[dict]:
    """The SubmitJob requests of `submit`, checked, without jobQueue/jobDefinition (filled in later)."""
    return [p.request for p in plan_sweep(args)]


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
    # a new run unless --run-id names one: a job submitted again with it continues that run, on any number of nodes
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run_id = check_run_id(args.run_id or f"{args.job_name}-{stamp}-{uuid.uuid4().hex[:8]}")
    environment = wandb_environment(extra) + [{"name": "CLEANRL_RUN_ID", "value": run_id}]
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
    node_overrides["nodePropertyOverrides"] = [{"targetNodes": "0:", "containerOverrides": overrides}]
    request = {"jobName": args.job_name, "parameters": parameters, "nodeOverrides": node_overrides}
    if args.timeout_seconds is not None:
        request["timeout"] = {"attemptDurationSeconds": args.timeout_seconds}
    return request


def plan_tune(args: SubmitTune) -> dict:
    """The SubmitJob request of `submit-tune`, checked (the tuner's flags by its own parser), without
    jobQueue/jobDefinition. A retried attempt of a worker (Spot) starts the same command, which joins the study again;
    the trial the lost worker ran is retried by the tuner's heartbeat."""
    import contextlib
    import io

    check_image_flags(args)
    check_job_definition_name(args.job_definition)
    check_resources(args.vcpus, args.memory, args.gpus, "worker")
    check_timeout(args.timeout_seconds)
    if not args.storage_secret.strip():
        fail("--storage-secret is needed: the workers read the study's store URL from that Secrets Manager secret")
    if not 1 <= args.workers <= ARRAY_SIZE_MAX:
        fail(f"--workers must be in 1..{ARRAY_SIZE_MAX}, got {args.workers}")
    try:
        words = shlex.split(args.tuner_args)
    except ValueError as e:
        fail(f"--tuner-args is not valid shell text ({e}): {args.tuner_args!r}")
    if any(w.split("=")[0] in ("--storage", "--storage-secret") for w in words):
        fail("--tuner-args must not give --storage or --storage-secret: the workers read the URL from --storage-secret")
    sys.path.insert(0, str(ROOT))
    from benchmark import tuner

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as said:
            tuned = tyro.cli(tuner.Tune, args=words)
    except SystemExit:
        # tyro's box, in one line: what is missing, what it did not recognise
        missing, unknown, errors, mode = [], [], [], None
        for line in (line.strip(" │╭╮╰╯─") for line in said.getvalue().splitlines()):
            if not line.strip("-─"):
                continue  # a rule between the box's sections
            if line.startswith("Error parsing"):
                errors.append(line[0].lower() + line[1:])
            if line.startswith(("Missing", "Unrecognized", "For full", "Argument helptext")):
                mode = line[0]
            elif mode == "M" and line.startswith("--"):
                missing.append(line.split()[0])
            elif mode == "U" and line:
                unknown.append(line)
        reason = "; ".join(errors + ([f"missing {' '.join(missing)}"] if missing else [])
                           + ([f"unrecognized {' '.join(unknown)}"] if unknown else [])) or "see its --help"
        fail(f"--tuner-args are not flags of benchmark/tuner.py tune ({reason})")
    check_script(tuned.script)
    command = ["python", "benchmark/tuner.py", "tune", *words, "--storage-secret", args.storage_secret]
    overrides = container_overrides(args.vcpus, args.memory, args.gpus, [])
    request = {"jobName": check_job_name(args.job_name), "containerOverrides": {"command": command, **overrides}}
    if args.workers > 1:
        request["arrayProperties"] = {"size": args.workers}
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
    """Build the image, log in to ECR and push; returns the image by its digest (REPOSITORY@sha256:...), which no
    later push can change, so every attempt of a job and every child of an array runs this build (a dry run returns
    the tag). The ECR password goes to docker on stdin and docker keeps it in a DOCKER_CONFIG in memory (/dev/shm)
    that is deleted after the push."""
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
    if args.dry_run:
        print(f"would pin the job definition to the digest ECR gives {image}", file=sys.stderr)
        return image
    found = ecr.describe_images(repositoryName=args.repository, imageIds=[{"imageTag": tag}])["imageDetails"]
    if not found:
        fail(f"ECR has no image tagged {tag} in {args.repository} after the push")
    pinned = f"{repo['repositoryUri']}@{found[0]['imageDigest']}"
    print(f"image {image} is {pinned}", file=sys.stderr)
    return pinned


ECR_IMAGE_RE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([^:@]+)(?::([^:@/]+))?$")


def pinned_image(args: Aws, image: str) -> str:
    """An ECR image named by its tag (or by none: :latest) as REPOSITORY@DIGEST, what the tag names in ECR now. A tag
    can be pushed again; a digest cannot change, so every attempt of a job, a resubmission of it and every child of
    an array then runs the same image. Other images are returned as they are, with a warning for a tag."""
    if "@sha256:" in image:
        return image
    m = ECR_IMAGE_RE.match(image)
    if m is None:
        print(f"warning: {image} is not in ECR; its tag is not pinned to a digest, so a retried job runs whatever the "
              "tag names when it starts (give --image REPOSITORY@sha256:... to pin it)", file=sys.stderr)
        return image
    registry, region, repository, tag = m[1], m[2], m[3], m[4] or "latest"
    from botocore.exceptions import ClientError

    ecr = client(Aws(region=region, endpoint_url=args.endpoint_url), "ecr")
    try:
        found = ecr.describe_images(registryId=registry, repositoryName=repository, imageIds=[{"imageTag": tag}])
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("ImageNotFoundException", "RepositoryNotFoundException"):
            fail(f"{image} is not in ECR (push it with `python cloud/submit.py build`, or give --image)")
        raise
    pinned = f"{image[: -len(tag) - 1] if m[4] else image}@{found['imageDetails'][0]['imageDigest']}"
    print(f"image {image} is {pinned}", file=sys.stderr)
    return pinned


def job_definition_with_image(
    batch, name: str, image: Optional[str], dry_run: bool = False, pin: Optional[Callable[[str], str]] = None
) -> str:
    """The ARN of the newest ACTIVE revision of `name` that runs `image` (None: whatever it runs, pinned by `pin`);
    registers a new revision (a copy with the image swapped) when the image differs."""
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
    if image is None and pin is not None:
        ranges = (newest.get("nodeProperties") or {}).get("nodeRangeProperties", [])
        images = {r["container"]["image"] for r in ranges} or {newest.get("containerProperties", {}).get("image")}
        if len(images) == 1 and None not in images:
            image = pin(images.pop())
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
    """The image of the jobs by its digest: the one built and pushed, or --image; None: the job definition's, pinned
    by job_definition_with_image."""
    if args.build:
        return build_and_push(args)
    return pinned_image(args, args.image) if args.image is not None else None


def shown_request(request: dict) -> dict:
    """A SubmitJob request as printed: the values of the environment (W&B credentials) masked."""
    shown = {**request}
    if "environment" in shown.get("containerOverrides", {}):
        shown["containerOverrides"] = {
            **shown["containerOverrides"],
            "environment": [{"name": e["name"], "value": "***"} for e in shown["containerOverrides"]["environment"]],
        }
    return shown


def submit_requests(
    args: Union[Submit, SubmitMultinode], requests: list[dict], sweep: Optional["NewSweep"] = None
) -> list[str]:
    image = image_for(args)
    batch = client(args, "batch")
    pin = None if args.build else lambda named: pinned_image(args, named)
    definition = job_definition_with_image(batch, args.job_definition, image, args.dry_run, pin)
    check_wandb_key(batch, definition, requests)
    if sweep is not None and not args.dry_run:
        sweep.open(batch, definition)
    described = batch.describe_job_definitions(jobDefinitions=[definition])["jobDefinitions"]
    ids = []
    try:
        for i, request in enumerate(requests):
            request = with_run_environment(request, time_limit(request, described[0] if described else {}),
                                           sweep.run_variables(i) if sweep is not None else {})
            request = {**request, "jobQueue": args.job_queue, "jobDefinition": definition}
            if args.dry_run:
                print(f"would submit {shown_request(request)}")
                continue
            job = batch.submit_job(**request)
            ids.append(job["jobId"])
            print(f"{job['jobId']}\t{job['jobName']}", flush=True)
            if sweep is not None:
                sweep.submitted(i, job["jobId"])
            elif "nodeOverrides" in request:
                run_id = run_id_of(request)
                print(f"run id {run_id}: its S3 folder is runs/{run_id}/; to continue the run after its job FAILED, "
                      f"submit again with --run-id {run_id} (on as many nodes as you like)", file=sys.stderr)
    finally:
        if sweep is not None and ids:
            # also after a failed SubmitJob: the jobs that were submitted are in the manifest, nothing is lost track of
            sweep.save(complete=len(ids) == len(requests))
    if sweep is not None and args.dry_run:
        print(f"would write the manifest of sweep {sweep.name} to {sweep.path}", file=sys.stderr)
    return ids


def run_id_of(request: dict) -> Optional[str]:
    for part in [request.get("containerOverrides", {})] + [
            o["containerOverrides"] for o in request.get("nodeOverrides", {}).get("nodePropertyOverrides", [])]:
        for e in part.get("environment", []):
            if e["name"] == "CLEANRL_RUN_ID":
                return e["value"]
    return None


def with_run_environment(request: dict, *variables: dict[str, str]) -> dict:
    """A SubmitJob request whose containers (every node's) get these variables too."""
    merged = {k: v for part in variables for k, v in part.items()}
    if not merged:
        return request
    if "nodeOverrides" in request:
        nodes = request["nodeOverrides"]
        parts = nodes.get("nodePropertyOverrides") or [{"targetNodes": "0:", "containerOverrides": {}}]
        parts = [{**o, "containerOverrides": with_environment(o["containerOverrides"], merged)} for o in parts]
        return {**request, "nodeOverrides": {**nodes, "nodePropertyOverrides": parts}}
    return {**request, "containerOverrides": with_environment(request.get("containerOverrides", {}), merged)}


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


# ---------------------------------------------------------------------------------------------------
# Sweeps: the manifest of one `submit`, its status, resubmission of failed runs, and its results brought home.


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def check_sweep_name(name: str) -> str:
    if not SWEEP_NAME_RE.match(name):
        fail(f"sweep name {name!r} is invalid: 1-128 letters, digits, '-', '_', '.', starting with a letter or digit")
    return name


def split_s3_url(url: str, what: str) -> tuple[str, str]:
    """s3://BUCKET/KEY -> (BUCKET, KEY without slashes at either end)."""
    bucket, _, key = url[5:].partition("/") if url.startswith("s3://") else ("", "", "")
    if not bucket:
        fail(f"{what} must look like s3://BUCKET/..., got {url!r}")
    return bucket, key.strip("/")


def run_folder(runs_s3: str, run: dict) -> tuple[str, str]:
    """(bucket, key prefix) of a run's folder: cloud/durable.py keeps the run in s3://BUCKET/PREFIX/RUN_ID/; a run
    of a manifest before run ids, in its latest job's folder, s3://BUCKET/PREFIX/JOB_ID/."""
    bucket, prefix = split_s3_url(runs_s3, "the runs folder")
    return bucket, "/".join(p for p in (prefix, run_id_of_run(run)) if p) + "/"


def run_id_of_run(run: dict) -> str:
    """A manifest run's identity; a run of a manifest before run ids is its latest job's (durable.py's folder of it)."""
    return run.get("run_id") or run["jobs"][-1]["job_id"].split("#")[0]


def sweep_url(runs_s3: str, name: str) -> str:
    """The manifest beside the runs: s3://BUCKET/runs -> s3://BUCKET/sweeps/NAME.json."""
    bucket, prefix = split_s3_url(runs_s3, "the runs folder")
    parent = prefix.rpartition("/")[0]
    return f"s3://{bucket}/" + "/".join(p for p in (parent, "sweeps", f"{name}.json") if p)


def run_command(parameters: dict) -> str:
    """The command cloud/jobs/single.sh starts (under cloud/durable.py) for a job's parameters."""
    names = ("script", "envId", "totalTimesteps", "seed", "checkpointFrequency")
    p = {k: parameters.get(k, f"Ref::{k}") for k in names}  # a parameter nobody gave stays Ref::NAME, as in Batch
    return (
        f"{p['script']} --env-id {shlex.quote(p['envId'])} --total-timesteps {shlex.quote(p['totalTimesteps'])} "
        f"--seed {shlex.quote(p['seed'])} --save-model --checkpoint-frequency {shlex.quote(p['checkpointFrequency'])} "
        "--resume auto"
    )


def without_environment(request: dict) -> dict:
    """A SubmitJob request as the manifest keeps it: no environment (W&B credentials are never written down)."""
    request = {**request}
    overrides = {k: v for k, v in request.pop("containerOverrides", {}).items() if k != "environment"}
    if overrides:
        request["containerOverrides"] = overrides
    return request


class NewSweep:
    """The manifest `submit` writes: every run (script, env id, seed, command) and the job that runs it."""

    def __init__(self, args: Submit, planned: list[Planned]):
        self.id = uuid.uuid4().hex
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        self.name = check_sweep_name(args.sweep or f"{args.job_name_prefix}-{stamp}-{self.id[:8]}")
        folder = Path(args.sweeps_dir)
        if folder.exists() and not folder.is_dir():
            fail(f"--sweeps-dir {folder} is not a folder")
        self.path = folder / f"{self.name}.json"
        if self.path.exists():
            fail(f"sweep {self.name!r} exists already ({self.path}); give the new one another --sweep name")
        self.args, self.planned = args, planned
        self.manifest: dict = {}
        self.s3 = None

    def open(self, batch, definition_arn: str) -> None:
        """Read the job definition's image, default parameters and runs folder; check that S3 has no sweep of this
        name. Before any job is submitted."""
        found = batch.describe_job_definitions(jobDefinitions=[definition_arn])["jobDefinitions"]
        container = found[0].get("containerProperties", {}) if found else {}
        self.image = container.get("image")
        self.defaults = found[0].get("parameters", {}) if found else {}
        runs_s3 = {e["name"]: e["value"] for e in container.get("environment", [])}.get("CLEANRL_RUNS_S3")
        manifest_s3 = sweep_url(runs_s3, self.name) if runs_s3 else None
        if manifest_s3:
            from botocore.exceptions import ClientError

            self.s3 = client(self.args, "s3")
            bucket, key = split_s3_url(manifest_s3, "the manifest")
            try:
                self.s3.head_object(Bucket=bucket, Key=key)
                fail(f"sweep {self.name!r} exists already ({manifest_s3}); give the new one another --sweep name")
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "?")
                if code not in ("404", "NoSuchKey", "NotFound"):
                    # e.g. 403: your credentials may not read sweeps/ of the bucket; the jobs need no manifest
                    print(f"warning: cannot read {manifest_s3} (AWS HeadObject: {code}): the manifest is written "
                          f"to {self.path} only", file=sys.stderr)
                    self.s3 = manifest_s3 = None
        else:
            print(f"warning: job definition {definition_arn} sets no CLEANRL_RUNS_S3: its runs stay in the containers, "
                  "so `collect` cannot bring them home", file=sys.stderr)
        self.definition = definition_arn
        self.manifest = {
            "format": MANIFEST_FORMAT,
            "sweep": self.name,
            "id": self.id,
            "created": utc_now(),
            "region": batch.meta.region_name,
            "runs_s3": runs_s3,
            "manifest_s3": manifest_s3,
            "runs": [],
        }

    def run_variables(self, index: int) -> dict[str, str]:
        """CLEANRL_RUN_ID of request `index`: an array job's children fill in their seeds (cloud/jobs/single.sh)."""
        p = self.planned[index]
        return {"CLEANRL_RUN_ID": p.run_id(self.name, "{seed}" if len(p.seeds) > 1 else p.seeds[0])}

    def submitted(self, index: int, job_id: str) -> None:
        p = self.planned[index]
        array = "arrayProperties" in p.request
        for i, (seed, name) in enumerate(zip(p.seeds, p.names)):
            request = without_environment({k: v for k, v in p.request.items() if k != "arrayProperties"})
            request.update(jobName=name, parameters={**p.request["parameters"], "seed": str(seed)})
            job = {"job_id": f"{job_id}:{i}" if array else job_id, "submitted": utc_now(),
                   "job_queue": self.args.job_queue, "job_definition": self.definition, "image": self.image}
            self.manifest["runs"].append({
                "script": p.script,
                "env_id": p.env_id,
                "seed": seed,
                "command": run_command({**self.defaults, **request["parameters"]}),
                "run_id": p.run_id(self.name, seed),
                "request": request,
                "jobs": [job],
            })

    def save(self, complete: bool) -> None:
        where = " and ".join(save_manifest(self.manifest, self.path, self.s3))
        if complete:
            print(f"sweep {self.name}: {len(self.manifest['runs'])} runs, manifest {where}", file=sys.stderr)
        else:
            print(f"sweep {self.name}: the {len(self.manifest['runs'])} runs submitted before the error are in the "
                  f"manifest {where}", file=sys.stderr)


def save_manifest(manifest: dict, path: Optional[Path], s3) -> list[str]:
    """Write the manifest whole: to its local file (a temporary name renamed over it) and to S3; where it went."""
    text = json.dumps(manifest, indent=1) + "\n"
    written = []
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(str(path))
    if manifest.get("manifest_s3") and s3 is not None:
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3_url(manifest["manifest_s3"], "the manifest")
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=text.encode(), ContentType="application/json")
            written.append(manifest["manifest_s3"])
        except (BotoCoreError, ClientError) as e:
            # the jobs were submitted: say so, and keep the local copy, rather than fail after the fact
            if path is None:
                raise
            print(f"warning: the manifest is in {path} but not in {manifest['manifest_s3']}: {e}", file=sys.stderr)
    return written


def check_manifest(manifest, where: str) -> dict:
    try:
        assert isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT, "not of this format"
        check_sweep_name(manifest["sweep"])
        for run in manifest["runs"]:
            for key in ("script", "env_id", "seed", "command", "request"):
                run[key]
            assert run["jobs"] and all(job["job_id"] for job in run["jobs"]), "a run without a job"
    except (AssertionError, KeyError, TypeError, SubmitError) as e:
        fail(f"{where} is not a sweep manifest of cloud/submit.py ({type(e).__name__}: {e})")
    return manifest


def sweep_location(args: SweepCommand) -> tuple[Optional[Path], Optional[str]]:
    """(local file, None) or (None, s3 url) of the sweep the command names; checked before any AWS call."""
    if not args.sweep:
        fail("give the sweep: its name, its manifest file or s3://BUCKET/sweeps/NAME.json")
    if args.sweep.startswith("s3://"):
        split_s3_url(args.sweep, "the sweep")
        return None, args.sweep
    if args.sweep.endswith(".json") or "/" in args.sweep:
        path = Path(args.sweep)
    else:
        path = Path(args.sweeps_dir) / f"{check_sweep_name(args.sweep)}.json"
    if not path.is_file():
        fail(f"no sweep manifest {path}" + ("" if "/" in args.sweep else
             " (a sweep submitted elsewhere: give s3://BUCKET/sweeps/NAME.json, or --sweeps-dir)"))
    return path, None


def load_sweep(args: SweepCommand) -> tuple[dict, Optional[Path], SweepCommand]:
    """The manifest, its local file (None when read from S3), and the args with the sweep's region when none is
    given."""
    path, url = sweep_location(args)
    if path is not None:
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            fail(f"cannot read the sweep manifest {path}: {e}")
        manifest = check_manifest(manifest, str(path))
    else:
        from botocore.exceptions import ClientError

        bucket, key = split_s3_url(url, "the sweep")
        try:
            body = client(args, "s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                fail(f"no sweep manifest at {url}")
            raise
        try:
            manifest = check_manifest(json.loads(body), url)
        except ValueError as e:
            fail(f"{url} is not a sweep manifest of cloud/submit.py ({e})")
    return manifest, path, replace(args, region=args.region or manifest.get("region"))


def latest_jobs(batch, manifest: dict) -> dict[str, dict]:
    """The description of each run's latest job, by job id; DescribeJobs takes 100 ids a call."""
    return {j["jobId"]: j for j in describe(batch, [run["jobs"][-1]["job_id"] for run in manifest["runs"]])}


def status_of(run: dict, jobs: dict[str, dict]) -> str:
    # Batch forgets a job some days after it ended
    return jobs.get(run["jobs"][-1]["job_id"], {}).get("status", "NOT_FOUND")


def shown_script(script: str) -> str:
    return script.removeprefix("cleanrl/")


def failure_of(job: dict) -> str:
    attempts = job.get("attempts") or [{}]
    code = attempts[-1].get("container", {}).get("exitCode")
    return (job.get("statusReason") or "no reason given") + ("" if code is None else f", exit code {code}")


def sweep_status(args: Status) -> dict[tuple[str, str], dict[str, int]]:
    manifest, _, args = load_sweep(args)
    jobs = latest_jobs(client(args, "batch"), manifest)
    counts: dict[tuple[str, str], Counter] = {}
    for run in manifest["runs"]:
        counts.setdefault((run["script"], run["env_id"]), Counter())[status_of(run, jobs)] += 1
    order = [*STATUSES, "NOT_FOUND"]
    for (script, env_id), c in counts.items():
        line = ", ".join(f"{s} {c[s]}" for s in order if c[s])
        print(f"{shown_script(script)}\t{env_id}\t{sum(c.values())} runs\t{line}")
    total = Counter(status_of(run, jobs) for run in manifest["runs"])
    said = ", ".join(f"{s} {total[s]}" for s in order if total[s])
    print(f"sweep {manifest['sweep']}: {len(manifest['runs'])} runs: {said}", file=sys.stderr)
    for run in manifest["runs"]:
        if status_of(run, jobs) == "FAILED":
            job = jobs[run["jobs"][-1]["job_id"]]
            print(f"FAILED: {shown_script(run['script'])} {run['env_id']} seed {run['seed']}, job {job['jobId']}: "
                  f"{failure_of(job)}", file=sys.stderr)
    return {key: dict(c) for key, c in counts.items()}


def resubmit(args: Resubmit) -> list[str]:
    if not args.failed:
        fail("say which runs to resubmit: --failed (the runs whose latest job FAILED)")
    manifest, path, args = load_sweep(args)
    # the W&B credentials of a --track run come from your environment now, as at `submit`
    environments = {id(run): wandb_environment(shlex.split(run["command"]), "the command of a run")
                    for run in manifest["runs"]}
    batch = client(args, "batch")
    jobs = latest_jobs(batch, manifest)
    failed = [run for run in manifest["runs"] if status_of(run, jobs) == "FAILED"]
    if not failed:
        print(f"sweep {manifest['sweep']}: no run's latest job FAILED; nothing resubmitted", file=sys.stderr)
        return []
    definitions = {}
    for definition in sorted({run["jobs"][-1]["job_definition"] for run in failed}):
        requests = [run["request"] for run in failed if run["jobs"][-1]["job_definition"] == definition]
        check_wandb_key(batch, definition, requests)
        found = batch.describe_job_definitions(jobDefinitions=[definition])["jobDefinitions"]
        definitions[definition] = found[0] if found else {}
    ids = []
    s3 = client(args, "s3") if manifest.get("manifest_s3") and not args.dry_run else None
    try:
        for run in failed:
            last = run["jobs"][-1]
            request = {**run["request"], "jobQueue": last["job_queue"], "jobDefinition": last["job_definition"]}
            if environments[id(run)]:
                overrides = {**request.get("containerOverrides", {}), "environment": environments[id(run)]}
                request["containerOverrides"] = overrides
            # the run's identity: the new job restores the run's folder and continues it (a run of a manifest before
            # run ids continues in its latest job's folder, which becomes its run id)
            legacy = "run_id" not in run
            request = with_run_environment(request, {"CLEANRL_RUN_ID": run_id_of_run(run)},
                                           time_limit(request, definitions[last["job_definition"]]))
            what = f"{shown_script(run['script'])} {run['env_id']} seed {run['seed']}"
            if args.dry_run:
                print(f"would resubmit {what} (job {last['job_id']} FAILED): {shown_request(request)}")
                continue
            job = batch.submit_job(**request)
            if legacy:
                run["run_id"] = run_id_of_run(run)
            run["jobs"].append({"job_id": job["jobId"], "submitted": utc_now(), "job_queue": last["job_queue"],
                                "job_definition": last["job_definition"], "image": last.get("image")})
            ids.append(job["jobId"])
            print(f"{job['jobId']}\t{job['jobName']}", flush=True)
            print(f"resubmitted {what}: job {last['job_id']} FAILED ({failure_of(jobs[last['job_id']])}), "
                  f"now job {job['jobId']}, continuing run {run['run_id']} from its last checkpoint", file=sys.stderr)
    finally:
        where = save_manifest(manifest, path, s3) if ids else []
    if ids:
        print(f"sweep {manifest['sweep']}: resubmitted {len(ids)} FAILED run(s); manifest {' and '.join(where)}",
              file=sys.stderr)
    return ids


def kept_module():
    """benchmark/kept.py, the writer of the per-run records benchmark/report.py reads (a tool, not a script)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmark import kept

    return kept


def download_folder(s3, bucket: str, prefix: str, dest: Path, checkpoints: bool) -> int:
    """Every file of s3://BUCKET/PREFIX into dest (checkpoint.pt only with `checkpoints`); a file already there with
    the same size is kept. The number of files downloaded."""
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            relative = obj["Key"][len(prefix):]
            parts = Path(relative).parts
            if not parts or ".." in parts or Path(relative).is_absolute():
                fail(f"s3://{bucket}/{obj['Key']} does not name a file inside the job's folder; not downloading it")
            if parts[-1] == "checkpoint.pt" and not checkpoints:
                continue
            local = dest / relative
            if local.is_file() and local.stat().st_size == obj["Size"]:
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(local))  # to a temporary name, renamed when whole
            count += 1
    return count


def collect(args: Collect) -> dict:
    manifest, _, args = load_sweep(args)
    out = Path(args.out) if args.out else Path(args.sweeps_dir) / manifest["sweep"]
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is not a folder")
    if not manifest.get("runs_s3"):
        fail(f"sweep {manifest['sweep']} has no runs folder in S3 (its job definition set no CLEANRL_RUNS_S3)")
    kept = kept_module()
    from botocore.exceptions import ClientError

    jobs = latest_jobs(client(args, "batch"), manifest)
    s3 = client(args, "s3")
    finished, skipped = [], Counter()
    for run in manifest["runs"]:
        job_id = run["jobs"][-1]["job_id"]
        status = status_of(run, jobs)
        if status != "SUCCEEDED":
            skipped["FAILED" if status == "FAILED" else f"unfinished ({status})"] += 1
            continue
        bucket, folder = run_folder(manifest["runs_s3"], run)
        try:
            marker = json.loads(s3.get_object(Bucket=bucket, Key=folder + MARKER)["Body"].read())
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
            skipped[f"SUCCEEDED without {MARKER}"] += 1
            continue
        except ValueError:
            marker = None
        if not isinstance(marker, dict):  # a damaged marker: the run's files cannot be trusted as finished
            skipped[f"SUCCEEDED with a damaged {MARKER}"] += 1
            continue
        record = kept.kept_path(out, Path(run["script"]).stem, run["env_id"], run["seed"])
        if record.exists():
            old = kept.read_kept(record)
            if old.get("job_id") != job_id:
                fail(f"{record} holds a run of another job ({old.get('job_id', 'not a sweep job')}); collect into "
                     "another --out folder")
        finished.append((run, job_id, bucket, folder, marker, record))
    jobs_dir = out / "jobs"
    collected = []
    for run, job_id, bucket, folder, marker, record in finished:
        local = jobs_dir / re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)
        download_folder(s3, bucket, folder, local, args.checkpoints)
        command = kept.portable_command(marker.get("command") or shlex.split(run["command"]))
        try:
            kept.write_kept(record, Path(run["script"]).stem, run["env_id"], run["seed"], command, local, None,
                            finished=marker.get("finished"), machine=f"AWS Batch, {run['jobs'][-1]['job_queue']}",
                            extra={"sweep": manifest["sweep"], "job_id": job_id})
        except ValueError as e:
            skipped[f"finished, but not one run's event files ({e})"] += 1
            continue
        collected.append(record)
        print(f"{record}\t{job_id}")
    said = "; ".join(f"{n} {why}" for why, n in skipped.items())
    print(f"sweep {manifest['sweep']}: collected {len(collected)} of {len(manifest['runs'])} runs into {out} (their "
          f"files in {jobs_dir})" + (f"; skipped {sum(skipped.values())}: {said}" if skipped else ""), file=sys.stderr)
    return {"collected": collected, "skipped": dict(skipped), "out": out}


def main(args: Command) -> object:
    if isinstance(args, Submit):
        planned = plan_sweep(args)
        sweep = NewSweep(args, planned)
        ids = submit_requests(args, [p.request for p in planned], sweep)
        print(f"submitted {len(ids)} job(s) to {args.job_queue}", file=sys.stderr)
        return ids
    if isinstance(args, SubmitMultinode):
        request = plan_multinode(args)
        return submit_requests(args, [request])
    if isinstance(args, SubmitTune):
        return submit_requests(args, [plan_tune(args)])
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
    if isinstance(args, Status):
        return sweep_status(args)
    if isinstance(args, Resubmit):
        return resubmit(args)
    if isinstance(args, Collect):
        return collect(args)
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
