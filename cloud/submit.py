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

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional, Union

import tyro

if __package__ in (None, ""):  # run as `python cloud/submit.py`: its modules are the package cloud/ of this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cloud.batch_api import STATUSES, Aws, SubmitError  # noqa: E402
from cloud.batch_jobs import (  # noqa: E402
    build_and_push,
    cancel,
    list_jobs,
    logs,
    plan_multinode,
    plan_sweep,
    plan_tune,
    submit_requests,
    wait,
)
from cloud.sweeps import NewSweep, collect, resubmit, sweep_status  # noqa: E402


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
