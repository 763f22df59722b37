"""Every script, run as a user runs it: through its learning updates (read back from the event file), a saved
and evaluated model, what it prints, and the same losses for the same seed; each on its row's tiny budget
(tests/scripts.py), and the continuous off-policy family on HalfCheetah too."""

import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, read_scalars, run_script, script_env, single_run_dir, values
from tests.scripts import HALFCHEETAH_OFF, names, needs, script_params


def run_tiny(row, cwd, *extra: str):
    return run_script(row.name, *row.args, *extra, cwd=cwd, launcher=list(row.launcher) if row.launcher else None,
                      timeout=600)


# torchrun's own banner (when OMP_NUM_THREADS is unset), the ranks' start-up and checksum lines, and W&B's lines
NOT_THE_RUNS = re.compile(r"^(\**|Setting OMP_NUM_THREADS .*|rank \d+/\d+[ :].*|wandb: .*)$")


def run_lines(text: str) -> list[str]:
    """The lines the run itself prints (the run directory first, the summary last), without torchrun's or W&B's."""
    lines = (re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines())  # W&B colours its lines
    return [line for line in lines if not NOT_THE_RUNS.match(line)]


@pytest.mark.parametrize("row", script_params())
def test_runs_through_updates_then_saves_evaluates_and_says_where_into_a_log_file(row, workdir):
    # stdout and stderr both go to one file, as with `python cleanrl/X.py > log 2>&1` (nohup, a batch job's log);
    # with --capture-video, but for the rows whose own test files check it (row.tracked: video of both Atari env
    # backends, two ranks, envpool's frames); with --track on one script of each family (runtime.start's one
    # wandb.init call serves every script, and W&B's offline start-up alone takes about 10 s a run)
    tracked = (("--track",) if row.tracked and row.family_sample else ()) + (
        ("--capture-video",) if row.tracked else ())
    log = workdir / "log"
    cmd = list(row.launcher or [sys.executable]) + [str(ROOT / "cleanrl" / row.name), *row.args, "--save-model",
                                                     "--eval-episodes", "2", *row.eval_args, *tracked,
                                                     "--progress-interval", "0.001"]
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=workdir, env=script_env(), stdout=f, stderr=subprocess.STDOUT, timeout=600)
    assert proc.returncode == 0, log.read_text()[-4000:]
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    # the learning update ran at the expected steps, and every loss it computes was logged at every update
    for key in row.losses:  # (PPG's auxiliary losses have their own steps, in row.other)
        assert [step for step, _ in scalars[key]] == list(row.other.get(key, row.loss_steps)), key
    assert sorted(k for k in scalars if k.startswith("losses/")) == sorted(row.losses)
    for key, steps in row.other.items():
        assert [step for step, _ in scalars[key]] == list(steps), key
    # the algorithm's schedules: learning-rate annealing, target-network updates, Pendulum's 200-step episodes
    for key, expected in row.logged.items():
        assert values(scalars, key) == pytest.approx(list(expected)), key
    assert values(scalars, "charts/SPS"), "no SPS after the warm-up"
    if row.episodes:
        assert values(scalars, "charts/episodic_return") and values(scalars, "charts/episodic_length")
    # the saved model and its evaluation
    model = run_dir / f"{row.name[:-3]}.cleanrl_model"
    assert model.stat().st_size > 0 and (run_dir / "checkpoint.pt").is_file()
    assert len(values(scalars, "eval/episodic_return")) == 2
    if "--track" in tracked:
        assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    if tracked:
        # a training episode of env 0, or (Atari, where the tiny budget ends no game) the evaluation's first game
        assert list((workdir / "videos").rglob("*.mp4")), "no video was written"
    # what the log shows: where the run goes, plain progress lines (no terminal redraws), where everything went
    text = log.read_text()
    lines = run_lines(text)
    assert "\r" not in text
    assert lines[0] == f"run directory: runs/{run_dir.name}"
    assert f"model saved to runs/{run_dir.name}/{model.name}" in lines
    assert any(line.startswith("eval: mean return ") for line in lines)
    progress = [line for line in lines if line.startswith("progress: ")]
    assert progress, lines
    # nothing else is printed while the run trains (a stray line would also break the redrawn line on a terminal,
    # which tests/test_progress.py checks for one script of each kind)
    between = lines[lines.index(progress[0]) : len(lines) - lines[::-1].index(progress[-1])]
    assert [line for line in between if not line.startswith("progress: ")] == [], between
    for line in progress:
        # the speed, or (PPG) how far its auxiliary phase has come
        assert re.fullmatch(r"progress: step \d+/\d+ \(\d+%\), (\d+ SPS|auxiliary phase: (recording pi_old|epoch "
                            r"\d+/\d+), \d+%), (mean return of the last \d+ episodes? \S+|no episode finished yet)", line), line
    summary = re.compile(rf"done: {row.loss_steps[-1]} steps in \d+ s, (mean return of the last \d+ episodes? \S+"
                         rf"|no episode finished); "
                         rf"logs in runs/{re.escape(run_dir.name)}; model runs/\S+, checkpoint runs/\S+")
    assert summary.fullmatch(lines[-1]), lines[-1]


# Same seed, same run: the rows whose resume equals an uninterrupted run bit for bit (tests/test_lifecycle.py, default
# run) show it already, as two processes of one seed that end alike; so does PPG's stop inside its auxiliary phase
# (heavy). The JAX script's scan and Python loops agree only to XLA's rounding, so it stays here.
SHOWN_BY_AN_EXACT_RESUME = set(names(lambda row: row.resume and row.resume.uninterrupted)) | {"ppg_procgen.py"}


@pytest.mark.heavy
@pytest.mark.parametrize("row", script_params([n for n in names() if n not in SHOWN_BY_AN_EXACT_RESUME]))
def test_same_seed_gives_identical_losses(row, workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_tiny(row, cwd)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: v for k, v in scalars.items() if k.startswith(("losses/", "charts/episodic"))})
    assert logged[0] == logged[1]
    assert len(logged[0][row.losses[0]]) == len(row.loss_steps)


@needs("mujoco")
@pytest.mark.parametrize("row", script_params(names(family="off_policy")))
def test_off_policy_scripts_run_through_their_updates_on_halfcheetah(row, workdir):
    run_script(row.name, *HALFCHEETAH_OFF, cwd=workdir)
    scalars = read_scalars(single_run_dir(workdir))
    for key in row.losses + ("charts/SPS",):
        assert [step for step, _ in scalars.get(key, [])] == [200], key
