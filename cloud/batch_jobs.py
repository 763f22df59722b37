# docs: docs/cloud.md
"""AWS Batch jobs for cloud/submit.py: the image (build and push, pinned to its digest, job definitions that run it),
the SubmitJob requests of `submit`, `submit-multinode` and `submit-tune` (checked, with run ids and time limits), their
submission, and `list`, `wait`, `cancel` and `logs`."""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

import tyro

from cloud import batch_api
from cloud.batch_api import (
    ARRAY_SIZE_MAX,
    Aws,
    IMAGE_TAG_RE,
    MAX_DESCRIBE_IDS,
    MAX_LIST_RESULTS,
    ROOT,
    STATUSES,
    check_array_size,
    check_extra_args,
    check_image_flags,
    check_job_definition_name,
    check_job_name,
    check_resources,
    check_run_id,
    check_script,
    check_timeout,
    check_wandb_key,
    container_overrides,
    fail,
    slug,
    time_limit,
    wandb_environment,
    with_environment,
)

if TYPE_CHECKING:
    from cloud.submit import Build, Cancel, List, Logs, Submit, SubmitMultinode, SubmitTune, Wait
    from cloud.sweeps import NewSweep

# What a multi-node job's node gets per GPU when --gpus is given without --vcpus/--memory: terraform's defaults
# (multinode_vcpus_per_gpu, multinode_memory_mib_per_gpu), so that 8 GPUs ask for 64 vCPUs and 224000 MiB.
VCPUS_PER_GPU, MEMORY_MIB_PER_GPU = 8, 28000


# ---------------------------------------------------------------------------------------------------
# The SubmitJob requests, checked: everything here runs before the first AWS call.


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
# The image: built and pushed with docker, pinned to its ECR digest, and the job definitions that run it.


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
    ecr = batch_api.client(args, "ecr")
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

    ecr = batch_api.client(Aws(region=region, endpoint_url=args.endpoint_url), "ecr")
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


# ---------------------------------------------------------------------------------------------------
# Submitting the requests, and the jobs once submitted: list, wait, cancel, logs.


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
    batch = batch_api.client(args, "batch")
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
    batch = batch_api.client(args, "batch")
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
    batch = batch_api.client(args, "batch")
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
    batch = batch_api.client(args, "batch")
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
    batch = batch_api.client(args, "batch")
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
