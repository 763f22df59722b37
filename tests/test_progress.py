"""What a run prints, on a terminal and into a log file (docs/get-started/installation.md, First run)."""

import os
import pty
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, run_script, script_env, single_run_dir
from tests.scripts import SCRIPTS, names, script_params
from tests.test_run import run_lines

# the speed, or (PPG) how far the auxiliary phase has come; \x1b[K clears what a longer draw left to the right
DRAW = r"\r\d+/\d+ steps \(\d+%\) \| (\d+ SPS|auxiliary phase: [^|]+%) \| return \S+  \x1b\[K"


def output_on_a_terminal(row, cwd, *extra: str) -> str:
    """Run a script with stdout and stderr on one pseudo-terminal, as in an interactive shell; what it showed."""
    leader, follower = pty.openpty()
    cmd = list(row.launcher or [sys.executable]) + [str(ROOT / "cleanrl" / row.name), *row.args, *extra]
    proc = subprocess.Popen(cmd, cwd=cwd, env=script_env(), stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=600) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    # a terminal turns "\n" into "\r\n"; undo that so the progress line's own "\r" stand out
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


# one script of each family, and the two whose lines come another way: PPG's auxiliary phase, torchrun's ranks (the
# other scripts draw through the same runtime.Progress; tests/test_run.py checks that none prints between its lines)
DRAWN = names(lambda row: row.family_sample or row.name in ("ppg_procgen.py", "ppo_atari_multigpu.py"))


@pytest.mark.parametrize("row", script_params(DRAWN))
def test_on_a_terminal_only_the_progress_line_rewrites_itself(row, workdir):
    shown = output_on_a_terminal(row, workdir)
    total = row.loss_steps[-1]
    assert f"\r{total}/{total} steps (100%) |" in shown, shown[-2000:]
    # From its first draw to the end of the line, nothing but progress draws: no line is printed over it.
    start = shown.index("\r")
    line = shown[start : shown.index("\n", start) + 1]
    assert re.fullmatch(f"({DRAW})+\n", line), repr(line[-500:])
    if row.episodes:  # once episodes have ended, the line shows the mean of their returns
        last_draw = line[line.rindex("\r"):]
        assert re.match(r"\r\S+ steps \(\d+%\) \| \d+ SPS \| return -?\d", last_draw), repr(last_draw)
    assert "progress: step" not in shown, "the plain log lines are for files, not terminals"
    # the line replaces any per-iteration (or per-phase) log line (splitlines also splits the draws at "\r")
    assert not [ln for ln in shown.splitlines() if re.search(r"\b(iteration|phase)\b", ln) and " steps (" not in ln]
    assert run_lines(shown)[0] == f"run directory: runs/{single_run_dir(workdir).name}"
    assert run_lines(shown)[-1].startswith(f"done: {total} steps in ")


@pytest.mark.parametrize("row", script_params(names(family_sample=True)))  # one script of each family
def test_no_progress_draws_nothing_on_a_terminal(row, workdir):
    shown = output_on_a_terminal(row, workdir, "--no-progress")
    assert "\r" not in shown and "steps (" not in shown
    assert run_lines(shown)[-1].startswith(f"done: {row.loss_steps[-1]} steps in ")


# Into a log file (not a terminal): tests/test_run.py checks the plain progress lines and the summary of every
# script, on the same run that checks its updates.


def test_the_plain_lines_come_at_the_interval(workdir):
    # a 30-second interval on a run of a few seconds prints no progress line, only the start and the summary
    proc = run_script("ppo.py", *SCRIPTS["ppo.py"].args, cwd=workdir)
    assert "progress: " not in proc.stderr
    assert proc.stdout.splitlines()[0].startswith("run directory: runs/CartPole-v1__ppo__1__")
