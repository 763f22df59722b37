"""benchmark/report.py's aggregate on reference scores (issue 59, item 4): an env's normalized score is measured
from known references (Atari random and human, Procgen's R_min and R_max, random actions and the best published
CleanRL return), not from the runs' own min and max; an env without any is left out, and with none left there is no
aggregate, and aggregate.md says why."""

from pathlib import Path

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from benchmark.reference_scores import ATARI, PROCGEN_EASY, RANDOM_POLICY, reference
from benchmark.suite import PUBLISHED
from tests.test_benchmark import read_csv, report

FINALS = {"CartPole-v1": (300.0, 400.0, 500.0), "MyEnv-v0": (1.0, 2.0, 3.0)}  # an env of the user's: no reference


def write_runs(folder: Path, env_ids) -> None:
    """Real TensorBoard event files, as the scripts write them: seed s's episodes all return FINALS[env][s - 1]."""
    for env_id in env_ids:
        for seed, final in enumerate(FINALS[env_id], start=1):
            with SummaryWriter(folder / "runs" / f"{env_id}__ppo__{seed}__1700000000") as writer:
                for step in range(100, 1100, 100):
                    writer.add_scalar("charts/episodic_return", final, step)
                writer.add_scalar("charts/SPS", 1000, 1000)


def test_the_default_aggregate_is_on_reference_scores_and_leaves_out_an_env_without_them(tmp_path):
    write_runs(tmp_path / "results", ["CartPole-v1", "MyEnv-v0"])
    report("--results", "results", "--out", "rep", "--bootstrap-reps", "200", cwd=tmp_path)
    low, high = RANDOM_POLICY["CartPole-v1"], PUBLISHED["ppo"]["CartPole-v1"][1]
    assert reference("CartPole-v1") == (low, high, "random actions; best published CleanRL return (ppo.py)")
    (agg,) = read_csv(tmp_path / "rep" / "aggregate.csv")
    scores = (np.array(FINALS["CartPole-v1"]) - low) / (high - low)
    assert agg["envs"] == "1" and agg["runs"] == "3"
    assert float(agg["mean"]) == pytest.approx(scores.mean()) and float(agg["median"]) == pytest.approx(scores[1])
    text = (tmp_path / "rep" / "aggregate.md").read_text()
    assert "| CartPole-v1 | 23.68 | 490.04 | random actions; best published CleanRL return (ppo.py) |" in text
    assert "Not in the aggregate (no reference scores; give --bounds ENV=LOW:HIGH): MyEnv-v0." in text
    # (--bounds for such an env: test_benchmark.py's report test)


def test_no_reference_scores_no_aggregate_and_it_says_why(tmp_path):
    write_runs(tmp_path / "results", ["MyEnv-v0"])
    proc = report("--results", "results", "--out", "rep", cwd=tmp_path)
    out = tmp_path / "rep"
    assert not (out / "aggregate.csv").exists() and not (out / "aggregate.png").exists()
    why = (out / "aggregate.md").read_text()
    assert why.startswith("No aggregate: no reference scores for MyEnv-v0, so a normalized score would mean nothing")
    assert why.splitlines()[0] in proc.stdout and (out / "summary.csv").exists()  # the rest of the report is there


@pytest.mark.parametrize("env_id, expected", [
    ("BreakoutNoFrameskip-v4", (1.7, 30.5)), ("ALE/Pong-v5", (-20.7, 14.6)), ("Breakout-v5", (1.7, 30.5)),
    ("starpilot", (2.5, 64.0)), ("StarpilotEasy-v0", (2.5, 64.0)), ("StarpilotHard-v0", None),
    ("HalfCheetah-v5", (-282.49, 10374.0)), ("Pendulum-v1", None), ("mypkg:Corridor-v0", None),
])
def test_reference_scores_by_env_id(env_id, expected):
    found = reference(env_id)
    assert (found[:2] if found else None) == expected


def test_the_tables_are_whole():
    assert len(ATARI) == 57 and all(random < human for random, human in ATARI.values())
    assert len(PROCGEN_EASY) == 16 and all(low < high for low, high in PROCGEN_EASY.values())
    # every env of a published CleanRL result has its random-policy return, so it has a reference
    published = {env for entries in PUBLISHED.values() for env in entries}
    assert {e for e in published if reference(e) is None} == set()
