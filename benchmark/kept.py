# docs: docs/benchmark.md
"""The kept result of one finished benchmark run: a small JSON file committed to the repository.

Event files and checkpoints stay on the machine that ran the benchmark; what the tables and figures need survives a
change of machine in one file per run:

    benchmark/kept/<name>/<env_id>/seed<k>.json

    {"name": "ppo", "env_id": "CartPole-v1", "seed": 1,
     "command": ["python", "cleanrl/ppo.py", "--total-timesteps", "500000", "--env-id", "CartPole-v1", "--seed", "1"],
     "total_timesteps": 500000, "last_step": 500000, "sps": 6120.0, "seconds": 84.3,
     "finished": "2026-12-03T14:20:00Z", "machine": "...",
     "episodes": {"step": [...], "return": [...]}}

`episodes` holds every episode's end step and its return (`charts/episodic_return`), rounded to 4 decimals; that
is what benchmark/report.py draws and tabulates. `command` names files relative to the repository root, so the
same command reruns the run on any checkout. A run of an AWS Batch sweep (`python cloud/submit.py collect`) also
records "sweep" and "job_id", and "machine" names the job queue.

A tool, not an algorithm script: it never imports the scripts.
"""

import json
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEPT = ROOT / "benchmark" / "kept"


def kept_path(kept_root: Path, name: str, env_id: str, seed: int) -> Path:
    return Path(kept_root) / name / env_id / f"seed{seed}.json"


def portable_command(argv: list[str]) -> list[str]:
    """The command with files below the repository root named relative to it, and the interpreter as `python`."""
    out = []
    for i, token in enumerate(argv):
        path = Path(token)
        if i == 0 and path.name.startswith("python"):
            out.append("python")
        elif path.is_absolute() and path.is_relative_to(ROOT):
            out.append(str(path.relative_to(ROOT)))
        else:
            out.append(token)
    return out


def total_timesteps(command: list[str]) -> int | None:
    for flag in ("--total-timesteps", "--total_timesteps"):
        if flag in command[:-1]:
            return int(float(command[command.index(flag) + 1]))
        for token in command:
            if token.startswith(flag + "="):
                return int(float(token.split("=", 1)[1]))
    return None


def scalar_events(run_dir: Path, tag: str) -> list[tuple[int, float, float]]:
    """(step, wall time, value) of every event of one scalar tag in the run's TensorBoard event files, in logged
    order; [] when the run never logged the tag."""
    return read_event_scalars(run_dir, wall_time=True).get(tag, [])


def read_event_scalars(run_dir: Path, wall_time: bool = False) -> dict[str, list[tuple]]:
    """Every scalar of the TensorBoard event files in `run_dir`: tag -> [(step, value), ...], or with wall_time
    [(step, wall time, value), ...]. The one reader of event files the benchmark tools and the tests share."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    if wall_time:
        return {tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def read_events(workdir: Path, tag: str = "charts/episodic_return", sps_tag: str = "charts/SPS") -> dict:
    """Episodes, last step and last SPS from the TensorBoard event files below `workdir` (one run's files)."""
    dirs = sorted({p.parent for p in Path(workdir).rglob("events.out.tfevents.*")})
    if len(dirs) != 1:
        raise ValueError(f"expected the event files of one run below {workdir}, found {len(dirs)} run directories")
    scalars = read_event_scalars(dirs[0])
    episodes = sorted(scalars.get(tag, []), key=lambda e: e[0])
    sps = scalars.get(sps_tag, [])
    return {
        "last_step": max((s for values in scalars.values() for s, _ in values), default=0),
        "sps": round(float(sps[-1][1]), 1) if sps else None,
        "episodes": {"step": [int(s) for s, _ in episodes], "return": [round(float(v), 4) for _, v in episodes]},
    }


def write_kept(path: Path, name: str, env_id: str, seed: int, argv: list[str], workdir: Path, seconds: float | None,
               finished: str | None = None, machine: str | None = None, extra: dict | None = None) -> dict:
    """Keep the run whose event files are below `workdir` in `path`. `finished` (UTC, 2026-12-03T14:20:00Z) and
    `machine` default to now and this machine, for a run that has just ended here; `extra` adds keys to the header
    (cloud/submit.py's `collect` records the sweep and the AWS Batch job)."""
    command = portable_command(argv)
    record = {
        "name": name,
        "env_id": env_id,
        "seed": seed,
        "command": command,
        "total_timesteps": total_timesteps(command),
        **read_events(workdir),
        "seconds": None if seconds is None else round(seconds, 1),
        "finished": finished or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine or f"{platform.machine()}, {os.cpu_count()} CPUs",
        **(extra or {}),
    }
    # one line per key, the episodes last: a kept file reads (and diffs) as a short header and two long lines
    episodes = record.pop("episodes")
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in record.items()]
    lines.append(' "episodes": {')
    lines.append('  "step": ' + json.dumps(episodes["step"], separators=(",", ":")) + ",")
    lines.append('  "return": ' + json.dumps(episodes["return"], separators=(",", ":")))
    text = "{\n" + "\n".join(lines) + "\n }\n}\n"
    record["episodes"] = episodes
    assert json.loads(text) == record
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text)
    tmp.rename(path)  # atomic: a kept file is whole or absent
    return record


def read_kept(path: Path) -> dict:
    try:
        record = json.loads(Path(path).read_text())
        steps, returns = record["episodes"]["step"], record["episodes"]["return"]
        if len(steps) != len(returns):
            raise ValueError("episodes.step and episodes.return differ in length")
        for key in ("name", "env_id", "seed", "command", "last_step"):
            record[key]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {path} is not a kept benchmark run ({type(e).__name__}: {e})")
    return record


def find_kept(folder: Path) -> list[Path]:
    """Kept files below `folder` (seed<k>.json), skipping hidden folders."""
    folder = Path(folder)
    return sorted(
        p for p in folder.rglob("seed*.json") if not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
