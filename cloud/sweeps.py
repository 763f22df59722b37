# docs: docs/cloud.md
"""Sweeps for cloud/submit.py: the manifest of one `submit` (every run, its run id and every job that ran it), and the
commands that read it: `status`, `resubmit --failed` and `collect`, which brings the finished runs home."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from cloud import batch_api
from cloud.batch_api import ROOT, STATUSES, SubmitError, check_wandb_key, fail, time_limit, wandb_environment
from cloud.batch_jobs import Planned, describe, shown_request, with_run_environment

if TYPE_CHECKING:
    from cloud.submit import Collect, Resubmit, Status, Submit, SweepCommand

SWEEP_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # a file name and an S3 key, as typed
MANIFEST_FORMAT = 1  # a run without "run_id" is of the layout before run ids: its folder is its latest job's
# cloud/durable.py writes this beside a job's runs/ in S3 once the run finished and all of it was uploaded
MARKER = "cleanrl-complete.json"


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

            self.s3 = batch_api.client(self.args, "s3")
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
            body = batch_api.client(args, "s3").get_object(Bucket=bucket, Key=key)["Body"].read()
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
    jobs = latest_jobs(batch_api.client(args, "batch"), manifest)
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
    batch = batch_api.client(args, "batch")
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
    s3 = batch_api.client(args, "s3") if manifest.get("manifest_s3") and not args.dry_run else None
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

    jobs = latest_jobs(batch_api.client(args, "batch"), manifest)
    s3 = batch_api.client(args, "s3")
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
