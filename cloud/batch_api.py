# docs: docs/cloud.md
"""AWS Batch for the commands of cloud/submit.py: where AWS is (Aws), the one boto3 client every command gets
(`client`, the one place tests point at a local endpoint), the API's limits, and the checks of what AWS Batch would
reject, which run before the first AWS call. A failure is one line for the user: `fail` raises SubmitError, and
cloud/submit.py prints it as `error: ...`."""

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional, Union

if TYPE_CHECKING:
    from cloud.submit import Submit, SubmitMultinode

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
# W&B settings passed from the caller's environment into the job's environment, and nowhere else.
WANDB_VARIABLES = ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_BASE_URL")


@dataclass
class Aws:
    region: Optional[str] = None
    """AWS region; None uses AWS_REGION / AWS_DEFAULT_REGION or your AWS config"""
    endpoint_url: Optional[str] = None
    """another AWS endpoint (a local one for tests); None uses AWS_ENDPOINT_URL or the real AWS"""


def client(args: Aws, service: str):
    """The boto3 client of `service` for the region and endpoint of `args`: every AWS call of cloud/submit.py's
    commands goes through it."""
    import boto3

    return boto3.client(service, region_name=args.region, endpoint_url=args.endpoint_url)


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
