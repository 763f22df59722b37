"""benchmark/envs.py run as a user runs it, on a tiny budget: the table has a row per backend, num_envs, threads and
mode, every speed is positive, the JSON holds the same cells round by round, the recommendations are printed, and
bad input stops in one `error:` line before anything is measured."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, script_env

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
SPS = re.compile(r"\d[\d,]*")  # 1,234


def envs_tool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmark" / "envs.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=120)


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of the table's body rows (after its header and separator lines)."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert rows and rows[0][:4] == ["backend", "num_envs", "threads", "mode"], stdout
    return rows[1:]


def speeds(cell: str) -> list[float]:
    """'1,234' or the range '1,234-1,456' as numbers."""
    assert re.fullmatch(r"\d[\d,]*(-\d[\d,]*)?", cell), cell
    return [float(n.replace(",", "")) for n in SPS.findall(cell)]


@pytest.mark.parametrize(
    "env_id, threads, rounds, expected",
    [
        # Atari: the scripts' env layer, the bare ale-py ceiling and envpool, each sync and pipelined
        ("BreakoutNoFrameskip-v4", "1", 1,
         [("ale-vector", "1", "sync"), ("ale-vector", "1", "pipelined"), ("raw", "1", "sync"),
          ("raw", "1", "pipelined")] + [("envpool", "1", "sync"), ("envpool", "1", "pipelined")] * HAS_ENVPOOL),
        # classic control: gymnasium has no threads and no pipelined mode; threads 0 is the free cores' choice
        ("CartPole-v1", "0", 2,
         [("gymnasium", "-", "sync")] + [("envpool", "0", "sync"), ("envpool", "0", "pipelined")] * HAS_ENVPOOL),
    ],
)  # fmt: skip
def test_every_cell_is_measured_and_written(env_id, threads, rounds, expected, tmp_path):
    proc = envs_tool("--env-id", env_id, "--num-envs", "2", "--threads", threads, "--seconds", "0.2",
                     "--rounds", str(rounds), "--warmup-steps", "2", "--out", "cells.json", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = table_rows(proc.stdout)
    # threads 0 shows the count it chose: "0 (2)"
    assert [(r[0], r[2].split(" ")[0], r[3]) for r in rows] == expected
    for row in rows:
        assert row[1] == "2"
        for cell in row[4:6]:  # env alone, with the policy
            numbers = speeds(cell)
            assert len(numbers) == min(rounds, 2) and all(n > 0 for n in numbers) and numbers == sorted(numbers)
        if row[0] in ("ale-vector", "envpool") and env_id.startswith("Breakout"):
            assert float(row[6]) > 0  # the env layer against the bare ale-py env of the same cell
        else:
            assert row[6] == "-"
    if not HAS_ENVPOOL:
        assert "Note: envpool skipped: not installed" in proc.stdout

    result = json.loads((tmp_path / "cells.json").read_text())
    assert result["env_id"] == env_id and result["rounds"] == rounds
    cells = result["cells"]
    assert [(c["backend"], "-" if c["threads"] is None else str(c["threads"]), c["mode"]) for c in cells] == expected
    for c, row in zip(cells, rows):
        assert c["num_envs"] == 2 and len(c["env_sps"]) == len(c["policy_sps"]) == rounds
        assert all(sps > 0 for sps in c["env_sps"] + c["policy_sps"])
        # the table shows the rounds' range of the same numbers
        assert speeds(row[4]) == [round(min(c["env_sps"])), round(max(c["env_sps"]))][: len(speeds(row[4]))]
        if c["threads"] == 0:  # the count --env-threads 0 chose, shown beside the 0
            assert c["thread_count"] >= 1 and row[2] == f"0 ({c['thread_count']})"

    advice = proc.stdout.split("Recommendations")[1]
    assert re.search(r"^- 2 envs: .*\d SPS", advice, re.MULTILINE)
    if env_id.startswith("Breakout"):  # in the scripts' own flags
        assert re.search(r"^- 2 envs: `--env-threads 1 --pipeline-envs (on|off)`", advice, re.MULTILINE)
    line = ("Threads and pipelining do not change the algorithm; num_envs changes the batch size (and so the "
            "learning), choose it for the algorithm first.")
    assert line in advice and result["recommendations"][-1] == line


@pytest.mark.parametrize(
    "args, error",
    [
        (["--env-id", "NoSuchEnv-v0"], "error: cannot make environment 'NoSuchEnv-v0'"),
        (["--num-envs", "0"], "error: --num-envs must be at least 1, got 0"),
        (["--backends", "sample-factory"], "error: unknown backend 'sample-factory' for BreakoutNoFrameskip-v4; "
                                           "choose from ale-vector, raw, envpool, gymnasium"),
        (["--env-id", "CartPole-v1", "--backends", "raw"], "error: unknown backend 'raw' for CartPole-v1"),
    ],
)  # fmt: skip
def test_bad_input_stops_in_one_line_before_measuring(args, error, tmp_path):
    proc = envs_tool(*args, "--out", "cells.json", cwd=tmp_path)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(error) and proc.stderr.strip().endswith(errors[0]), proc.stderr
    assert "|" not in proc.stdout and not (tmp_path / "cells.json").exists()
