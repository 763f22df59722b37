"""Every script, run as a user runs it: through its learning updates (read back from the event file), a saved
and evaluated model, what it prints, and the same losses for the same seed."""

import re

import pytest

from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import script_params


def run_tiny(row, cwd, *extra: str):
    return run_script(row.name, *row.args, *extra, cwd=cwd, launcher=list(row.launcher) if row.launcher else None,
                      timeout=600)


@pytest.mark.parametrize("row", script_params())
def test_runs_through_updates_then_saves_and_evaluates_the_model(row, workdir):
    proc = run_tiny(row, workdir, "--save-model", "--eval-episodes", "1", *row.eval_args)
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    # the learning update ran at the expected steps, and every loss it computes was logged
    assert [step for step, _ in scalars[row.losses[0]]] == list(row.loss_steps)
    for key in row.losses:
        assert values(scalars, key), f"{key} was never logged"
    assert sorted(k for k in scalars if k.startswith("losses/")) == sorted(row.losses)
    for key, steps in row.other.items():
        assert [step for step, _ in scalars[key]] == list(steps), key
    assert values(scalars, "charts/SPS"), "no SPS after the warm-up"
    if row.episodes:
        assert values(scalars, "charts/episodic_return") and values(scalars, "charts/episodic_length")
    # the saved model, its evaluation, and the lines that say where everything went
    model = run_dir / f"{row.name[:-3]}.cleanrl_model"
    assert model.stat().st_size > 0 and (run_dir / "checkpoint.pt").is_file()
    assert len(values(scalars, "eval/episodic_return")) == 1
    # (under torchrun the ranks' lines interleave; rank 0 prints these, the other ranks only their start-up line)
    out = [line for line in proc.stdout.splitlines() if not line.startswith("rank ")]
    assert out[0] == f"run directory: runs/{run_dir.name}"
    assert f"model saved to runs/{run_dir.name}/{model.name}" in out
    assert any(line.startswith("eval: mean return ") for line in out)
    summary = re.compile(rf"done: {row.loss_steps[-1]} steps in \d+ s, mean return of the last \d+ episodes \S+; "
                         rf"logs in runs/{re.escape(run_dir.name)}; model runs/\S+, checkpoint runs/\S+")
    assert summary.fullmatch(out[-1]), out[-1]


@pytest.mark.parametrize("row", script_params())
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
