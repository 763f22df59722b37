# docs: docs/cloud.md
"""Run one command of an AWS Batch job so that its results outlive the container (the job scripts in cloud/jobs/
start every run through it).

    python cloud/durable.py -- python cleanrl/ppo.py --env-id CartPole-v1 --save-model --resume auto

With CLEANRL_RUNS_S3=s3://BUCKET/PREFIX (terraform sets it in the job definitions), the run's folder is
s3://BUCKET/PREFIX/RUN_ID/, where RUN_ID is the run's identity: CLEANRL_RUN_ID (cloud/submit.py gives one to every run
it submits, e.g. SWEEP/ppo-CartPole-v1-s1, and gives it again to a resubmission of the run, whatever its job id), else
AWS_BATCH_JOB_ID (Batch sets it, the same in every attempt of one job: the layout of jobs submitted without one):
0. a finished run (its folder holds the completion marker, below, of the same command) is not run again: this process
   says so and exits 0 at once, without downloading anything;
1. restore: what an earlier attempt of the run uploaded there is downloaded into runs/ and videos/ of the working
   directory, so the script's `--resume auto` finds the last checkpoint. In a folder of CLEANRL_RUN_ID a run
   directory without a checkpoint (an attempt stopped before its first one) is deleted instead (the bucket's
   versioning keeps it): the run starts again, and the folder holds one run;
2. run the command; every CLEANRL_SYNC_SECONDS (default 300) the new or changed files of runs/ and videos/ go up;
3. SIGTERM or SIGINT (a Spot reclaim, `docker stop`) is passed on to the command, which checkpoints and exits; then
   a last upload, and this process exits with the command's status (128 + the signal's number if the command,
   e.g. torchrun, ended otherwise after the signal), so Batch retries the job (its rule for exit code 143).
4. a finished run (the command exited 0) whose last upload went through gets a completion marker,
   s3://BUCKET/PREFIX/RUN_ID/cleanrl-complete.json (exit status, time, command): the run's results are all there.
Without CLEANRL_RUNS_S3 the command just runs. Of a multi-node job only the main node syncs (it holds runs/).

AWS Batch ends an attempt that outlives the job's timeout for good, never retried. With CLEANRL_TIME_LIMIT_SECONDS
(the attempt's timeout: terraform sets it beside the job definition's timeout, cloud/submit.py with --timeout-seconds)
this process sends the command SIGTERM CLEANRL_STOP_MARGIN_SECONDS before it (default 300 s, or a fifth of the limit
when that is less), counted from its own start: the run checkpoints, the last upload has the margin, and the attempt
exits 143, which Batch retries. Every node of a multi-node job does this.

Every S3 call has a timeout (CLEANRL_S3_TIMEOUT_SECONDS, default 60, for connecting and for each read) and botocore's
bounded retries with exponential backoff (3 retries after the first attempt); the last upload is tried FINAL_TRIES
times, waiting CLEANRL_S3_RETRY_SECONDS (default 10) and then 3 times as long between tries. When S3 cannot be
reached at the restore, or the last upload still fails, this process exits S3_FAILED (75, "temporary failure"), for
which the job definitions' retry rules start another attempt (which restores what did reach S3 and resumes).
The endpoint is boto3's: AWS_ENDPOINT_URL points it elsewhere (a local one in the tests). Each of the settings in
seconds must be above 0 and at most MAX_SECONDS (86400, a day; the time limit at most MAX_TIME_LIMIT_SECONDS, AWS
Batch's 14 days). CLEANRL_RUN_ID is 1-512 letters, digits and `_ . - = + :`, in parts separated by single slashes.

What goes up and comes back is data of the run only: regular files of runs/ and videos/, never a symbolic link (nor
what it points to) nor a temporary (a name with ".tmp"). A restore skips S3's zero-byte folder markers and
temporaries, and stops in one line at a key that would land elsewhere than on a file inside runs/ or videos/.
A command that is not found exits 127, as in a shell.
"""

import json
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

FOLDERS = ("runs", "videos")  # what the scripts write, relative to the working directory
MARKER = "cleanrl-complete.json"  # beside them in the job's folder: the run finished and all of it was uploaded
S3_FAILED = 75  # exit status when S3 could not be read or written: the job definitions retry it (BSD's EX_TEMPFAIL)
FINAL_TRIES = 3  # tries of the last upload
# The longest interval, timeout or wait a setting may ask for. Far below what threading's waits and socket timeouts
# take (inf and 1e10 raise OverflowError, in the sync thread where nobody sees it); a longer sync interval would
# save nothing before a Spot reclaim.
MAX_SECONDS = 86400
NOT_FOUND, CANNOT_RUN = 127, 126  # exit statuses when the command does not exist or cannot run, as a shell's
MAX_TIME_LIMIT_SECONDS = 14 * 86400  # the longest JobTimeout.attemptDurationSeconds AWS Batch takes
# a run's identity: parts of S3-safe characters (':' for the job ids of array children) joined by single slashes
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.=+:-]+(/[A-Za-z0-9_.=+:-]+)*$")
MAX_RUN_ID = 512


def positive_seconds(name: str, default: str, most: int = MAX_SECONDS) -> float:
    value = os.environ.get(name, default)
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    # checked with an if, not an assert: `python -O` drops asserts; nan fails every comparison
    if not 0 < seconds <= most:
        fail(f"{name} must be a positive number of seconds, at most {most} ({most // 86400} days), got {value!r}"
             if most != MAX_SECONDS else
             f"{name} must be a positive number of seconds, at most {MAX_SECONDS} (a day), got {value!r}")
    return seconds


def stop_after() -> Optional[float]:
    """Seconds after which the command gets SIGTERM: the attempt's time limit less the margin; None without one."""
    if not os.environ.get("CLEANRL_TIME_LIMIT_SECONDS"):
        return None
    limit = positive_seconds("CLEANRL_TIME_LIMIT_SECONDS", "", MAX_TIME_LIMIT_SECONDS)
    margin = positive_seconds("CLEANRL_STOP_MARGIN_SECONDS", str(min(300.0, limit / 5)))
    if margin >= limit:
        fail(f"CLEANRL_STOP_MARGIN_SECONDS ({margin:g}) must be less than CLEANRL_TIME_LIMIT_SECONDS ({limit:g})")
    return limit - margin


def run_id() -> str:
    """The run's identity: CLEANRL_RUN_ID, else the AWS Batch job's id (a node of a multi-node job, <id>#<node>, is
    its job; an array child, <id>:<index>, is a job of its own); "" outside Batch."""
    given = os.environ.get("CLEANRL_RUN_ID", "")
    if given and (len(given) > MAX_RUN_ID or not RUN_ID_RE.match(given) or given.startswith(".")
                  or any(part in (".", "..") for part in given.split("/"))):
        fail(f"CLEANRL_RUN_ID must be 1-{MAX_RUN_ID} letters, digits and _ . - = + : in parts joined by single "
             f"slashes, got {given!r}" + (" (the job's command did not fill in {seed}: register the job definition "
                                         "again, terraform apply in cloud/)" if "{" in given else ""))
    return given or os.environ.get("AWS_BATCH_JOB_ID", "").split("#")[0]


def fail(message: str):
    raise SystemExit(f"error: {message}")


def say(message: str) -> None:
    sys.stderr.write(f"cloud/durable.py: {message}\n")
    sys.stderr.flush()


def split_s3_url(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX -> (BUCKET, PREFIX without a trailing slash)."""
    if not url.startswith("s3://") or not url[5:].split("/")[0]:
        fail(f"CLEANRL_RUNS_S3 must look like s3://BUCKET/PREFIX, got {url!r}")
    bucket, _, prefix = url[5:].partition("/")
    return bucket, prefix.strip("/")


def synced(name: str) -> bool:
    """Whether a file of this name goes up to S3 and comes back at a restore (one rule for both): not the scripts'
    half-written files (checkpoint.pt.tmp*, ...), which they rename when complete."""
    return ".tmp" not in name


def run_folder(prefix: str, run: str) -> str:
    return "/".join(p for p in (prefix, run) if p) + "/"


class Sync:
    """Uploads of runs/ and videos/ to one S3 folder; a file goes up again only when its size or mtime changed."""

    def __init__(self, bucket: str, folder: str, timeout: float):
        import boto3
        from botocore.config import Config

        # without timeouts a call to an endpoint that accepts and never answers waits for ever
        config = Config(connect_timeout=timeout, read_timeout=timeout, retries={"mode": "standard", "max_attempts": 3})
        self.s3, self.bucket, self.folder = boto3.client("s3", config=config), bucket, folder
        self.sent: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()

    def finished(self) -> Optional[dict]:
        """The completion marker of the folder, None without one (or one that is not a JSON object)."""
        from botocore.exceptions import ClientError

        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=self.folder + MARKER)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        try:
            marker = json.loads(body)
        except ValueError:
            return None
        return marker if isinstance(marker, dict) else None

    def forget_marker(self) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self.folder + MARKER)

    def restore(self, one_run: bool) -> int:
        """Download the files under the folder into runs/ and videos/ of the working directory; the number of files.
        A key is data for the run: it never names a file elsewhere (S3 keys may hold `..`), nor runs/ itself. With
        `one_run` (the folder is one run's), a run directory without a checkpoint (runs/NAME/ with no
        runs/NAME/checkpoint.pt, and its videos/NAME/) is an attempt stopped before its first checkpoint, beside which
        `--resume auto` would start a second run: it is deleted from the folder and not downloaded."""
        objects = [obj for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                                      Prefix=self.folder)
                   for obj in page.get("Contents", [])]
        keys = {obj["Key"][len(self.folder):] for obj in objects}
        started = {k.split("/")[1] for k in keys if k.startswith("runs/") and k.count("/") >= 2}
        stale = {name for name in started if f"runs/{name}/checkpoint.pt" not in keys} if one_run else set()
        if stale:
            dirs = {(folder, name) for folder in FOLDERS for name in stale}
            doomed = [obj["Key"] for obj in objects if tuple(obj["Key"][len(self.folder):].split("/")[:2]) in dirs]
            for part in range(0, len(doomed), 1000):  # DeleteObjects takes 1000 keys a call
                self.s3.delete_objects(Bucket=self.bucket,
                                       Delete={"Objects": [{"Key": k} for k in doomed[part:part + 1000]]})
            say(f"deleted {len(doomed)} files of {len(stale)} run directories without a checkpoint (an attempt "
                f"stopped before its first one; the run starts again): {', '.join(sorted(stale))}")
            objects = [obj for obj in objects if obj["Key"] not in set(doomed)]
        count = 0
        for obj in objects:
            relative = obj["Key"][len(self.folder):]
            # the completion marker, a folder marker (a zero-byte `name/` the S3 console makes; the job's
            # folder has one too) or a temporary, which uploads skip: nothing to restore
            if relative in ("", MARKER) or relative.endswith("/") or not synced(relative.rsplit("/", 1)[-1]):
                continue
            where, target = f"s3://{self.bucket}/{obj['Key']}", Path(relative)
            parts = relative.split("/")
            if len(parts) < 2 or parts[0] not in FOLDERS or any(p in ("", ".", "..") for p in parts):
                fail(f"{where} is not a file of {' or '.join(FOLDERS)}/; not restoring it")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                clash = target.is_dir()
            except (FileExistsError, NotADirectoryError):
                clash = True
            if clash:  # S3 holds both runs/a and runs/a/b, which no file system can
                fail(f"{where} would be a file and a folder at once with another key; not restoring it")
            self.s3.download_file(self.bucket, obj["Key"], relative)
            restored = os.stat(relative)
            self.sent[relative] = (restored.st_size, restored.st_mtime_ns)
            count += 1
        return count

    def upload(self) -> int:
        """Upload the new and changed files; the number uploaded. Each file goes up from a hard link made first: a
        checkpoint replaced (renamed over) during the upload cannot mix two versions."""
        count = 0
        with self.lock, tempfile.TemporaryDirectory(prefix=".cleanrl-sync-", dir=".") as staging:
            for key, now in self.files().items():
                if self.sent.get(key) == (now.st_size, now.st_mtime_ns):
                    continue
                frozen = os.path.join(staging, str(count))
                try:
                    # a link made not through a symbolic link: a file replaced by one since the listing is caught
                    # below, not followed
                    os.link(key, frozen, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # replaced since the listing: the next round sees the new file
                except OSError:
                    # a file system without hard links: a copy freezes it too (a symbolic link is copied as one)
                    shutil.copyfile(key, frozen, follow_symlinks=False)
                sent = os.lstat(frozen)
                if stat.S_ISREG(sent.st_mode):
                    self.s3.upload_file(frozen, self.bucket, self.folder + key)
                    self.sent[key] = (sent.st_size, sent.st_mtime_ns)
                    count += 1
                os.unlink(frozen)
        return count

    @staticmethod
    def files() -> dict[str, os.stat_result]:
        """The regular files of runs/ and videos/ that are synced, by their keys relative to the job's folder. A
        symbolic link is neither uploaded nor followed, runs/ or videos/ being one included: a link to a credentials
        file is not data of the run."""
        found = {}
        for folder in FOLDERS:
            if os.path.islink(folder):
                continue
            for parent, _, names in os.walk(folder):  # os.walk does not descend into linked folders
                for name in names:
                    path = os.path.join(parent, name)
                    try:
                        info = os.lstat(path)
                    except FileNotFoundError:
                        continue  # deleted since the listing
                    if synced(name) and stat.S_ISREG(info.st_mode):
                        found[Path(path).as_posix()] = info
        return dict(sorted(found.items()))

    def mark_complete(self, status: int, command: list[str]) -> None:
        body = json.dumps({"exit_status": status, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "command": command})
        self.s3.put_object(Bucket=self.bucket, Key=self.folder + MARKER, Body=body.encode())


def wandb_run_id(run: Optional[str] = None) -> Optional[str]:
    """The W&B run id of a run: its identity (run_id(): CLEANRL_RUN_ID, else the AWS Batch job id), which every
    attempt and every resubmission of the run keeps, so they continue one W&B run. None outside Batch: W&B makes a
    new id."""
    run = run_id() if run is None else run
    return re.sub(r"[^A-Za-z0-9_-]", "-", run) or None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    started = time.monotonic()  # the attempt's clock: the restore counts against its time limit
    interval_s = positive_seconds("CLEANRL_SYNC_SECONDS", "300")
    timeout_s = positive_seconds("CLEANRL_S3_TIMEOUT_SECONDS", "60")
    retry_s = positive_seconds("CLEANRL_S3_RETRY_SECONDS", "10")
    url = os.environ.get("CLEANRL_RUNS_S3", "")
    main_node = os.environ.get("AWS_BATCH_JOB_NODE_INDEX", "0") == os.environ.get("AWS_BATCH_JOB_MAIN_NODE_INDEX", "0")
    sync: Optional[Sync] = None
    stop_s = stop_after()
    run = run_id()
    if url and main_node:
        bucket, prefix = split_s3_url(url)
        if not run:
            fail("CLEANRL_RUNS_S3 is set but AWS_BATCH_JOB_ID is not (nor CLEANRL_RUN_ID)")
        sync = Sync(bucket, run_folder(prefix, run), timeout_s)
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"s3://{bucket}/{sync.folder}"
        try:
            marker = sync.finished()
            if marker is not None and marker.get("command") == argv:
                say(f"{where} is a finished run (completed {marker.get('finished', '?')}, this command): not running "
                    "it again")
                return 0
            if marker is not None:  # another command (a longer --total-timesteps, say): the run goes on, unfinished
                sync.forget_marker()
                say(f"{where} finished as another command; running this one on it")
            restored = sync.restore(one_run=bool(os.environ.get("CLEANRL_RUN_ID")))
        except (BotoCoreError, ClientError) as e:
            sys.stderr.write(f"error: cannot read {where} (exit {S3_FAILED}, retried): {e}\n")
            return S3_FAILED
        say(f"{where}: " + (f"restored {restored} files of an earlier attempt" if restored
                            else "nothing to restore, a first attempt"))
    elif not url:
        say("CLEANRL_RUNS_S3 is not set: runs/ stays in the container")

    received: list[int] = []
    # with --track, every attempt of the run continues one W&B run: wandb.init reads its id from the environment
    wandb_id, child_env = wandb_run_id(run), dict(os.environ)
    if wandb_id and "WANDB_RUN_ID" not in child_env:
        child_env.update(WANDB_RUN_ID=wandb_id, WANDB_RESUME="allow")
    try:
        child = subprocess.Popen(argv, env=child_env)
    except FileNotFoundError:
        sys.stderr.write(f"error: command not found: {argv[0]}\n")
        return NOT_FOUND
    except OSError as e:  # not executable, not a program
        sys.stderr.write(f"error: cannot run {argv[0]}: {e.strerror or e}\n")
        return CANNOT_RUN

    def forward(signum, frame):
        # The command checkpoints and exits on its own; a second signal is passed on too (it then stops at once).
        received.append(signum)
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    stop = threading.Event()

    def time_up():
        say(f"the attempt's time limit (CLEANRL_TIME_LIMIT_SECONDS) is near: SIGTERM to the command after "
            f"{stop_s:g} s, so that it checkpoints and exits 143, which AWS Batch retries (a timeout is not retried)")
        forward(signal.SIGTERM, None)

    limit_timer = threading.Timer(max(0.0, stop_s - (time.monotonic() - started)), time_up) if stop_s else None
    if limit_timer is not None:
        limit_timer.daemon = True
        limit_timer.start()

    def periodic():
        while not stop.wait(interval_s):
            try:
                sync.upload()
            except Exception as e:  # noqa: BLE001 - a failed round is retried next round; the run goes on
                say(f"upload failed, retrying in {interval_s:.0f} s: {e}")

    thread = threading.Thread(target=periodic, daemon=True)
    if sync is not None:
        thread.start()
    status = child.wait()
    stop.set()
    if limit_timer is not None:
        limit_timer.cancel()
    status = 128 - status if status < 0 else status  # killed by a signal: the shell's convention
    if received and status != 0:
        status = 128 + received[0]
    if sync is not None:
        thread.join()
        return last_upload(sync, status, argv, retry_s)
    return status


def last_upload(sync: Sync, status: int, command: list[str], retry_s: float) -> int:
    """Upload what is left, FINAL_TRIES times at most; then the completion marker of a finished run. The command's
    status, or S3_FAILED when the results could not all be saved (the job must not look successful)."""
    for attempt in range(1, FINAL_TRIES + 1):
        try:
            say(f"uploaded {sync.upload()} files to s3://{sync.bucket}/{sync.folder}")
            if status == 0:
                sync.mark_complete(status, command)
            return status
        except Exception as e:  # noqa: BLE001 - said in one line, then tried again
            if attempt == FINAL_TRIES:
                sys.stderr.write(f"error: the last upload to s3://{sync.bucket}/{sync.folder} failed {FINAL_TRIES} "
                                 f"times (exit {S3_FAILED}, retried): {e}\n")
                return S3_FAILED
            wait = retry_s * 3 ** (attempt - 1)
            say(f"the last upload failed (try {attempt} of {FINAL_TRIES}), trying again in {wait:g} s: {e}")
            time.sleep(wait)
    return S3_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
