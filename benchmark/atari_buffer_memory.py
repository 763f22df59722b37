# docs: docs/rl-algorithms/dqn.md
"""Peak resident memory (RSS) of an Atari value-based script with its full-size replay memory.

The scripts (cleanrl/dqn_atari.py, cleanrl/c51_atari.py) allocate their frame replay memory at start and write
every page of it (FrameReplayBuffer with touch=True), so the memory of a full buffer is resident from the first
step: filling it with transitions writes into those pages and allocates nothing more. This tool therefore runs
the real script as a user would, through its command line, for a short budget that reaches the learning update
(sampling and a Nature CNN gradient step), and reports the peak RSS of that process as the kernel counts it
(getrusage of the waited-for child, ru_maxrss). It does not import the script.

It is a measurement, not a timed test: it needs about 7 GiB of free memory and a minute or two.

Run:
    python benchmark/atari_buffer_memory.py
    python benchmark/atari_buffer_memory.py --script cleanrl/c51_atari.py --limit-gib 8
    python benchmark/atari_buffer_memory.py --help
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Args:
    script: str = "cleanrl/dqn_atari.py"
    """the script to measure, relative to the repository root"""
    buffer_size: int = 1000000
    """the replay memory size passed as --buffer-size"""
    total_timesteps: int = 1000
    """the run's --total-timesteps; with --learning-starts below it, a few gradient steps are included"""
    learning_starts: int = 900
    """the run's --learning-starts"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the run's --env-id"""
    limit_gib: float = 8.0
    """exit 1 if the peak RSS reaches this many GiB"""
    out: Optional[str] = None
    """if set, also write the result as JSON to this path"""


def main(args: Args) -> int:
    script = ROOT / args.script
    if not script.is_file():
        raise SystemExit(f"error: no script at {script}")
    cmd = [
        sys.executable,
        str(script),
        "--env-id", args.env_id,
        "--buffer-size", str(args.buffer_size),
        "--total-timesteps", str(args.total_timesteps),
        "--learning-starts", str(args.learning_starts),
    ]
    with tempfile.TemporaryDirectory() as workdir:
        start = time.time()
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - start
    returncode = os.waitstatus_to_exitcode(status)
    if returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {returncode}:\n{output[-2000:]}")
    peak_gib = usage.ru_maxrss * 1024 / 2**30  # ru_maxrss is in KiB on Linux
    result = dict(
        command=" ".join(cmd),
        buffer_size=args.buffer_size,
        peak_rss_gib=round(peak_gib, 3),
        limit_gib=args.limit_gib,
        wall_s=round(wall, 1),
        script_reported=[line for line in output.splitlines() if line.startswith("replay memory:")],
    )
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if peak_gib >= args.limit_gib:
        print(f"error: peak RSS {peak_gib:.2f} GiB is not under {args.limit_gib} GiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
