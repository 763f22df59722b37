"""The published benchmark results: the docs regenerate from the kept per-run files, every algorithm page shows
the figure of each script with kept runs, and the kept files are whole."""

import math
import re
import subprocess
import sys

import pytest

from benchmark.kept import KEPT, find_kept, read_kept
from benchmark.make_docs import PAGES, READINGS, early_return, learning_results
from benchmark.suite import SUITE
from tests.helpers import ROOT


def test_committed_pages_regenerate_from_the_kept_runs():
    proc = subprocess.run(
        [sys.executable, "benchmark/make_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, "run `python benchmark/make_docs.py` and commit its output:\n" + proc.stdout[-4000:] + proc.stderr[-2000:]


def kept_runs(script: str) -> list:
    return find_kept(KEPT / script) if (KEPT / script).is_dir() else []


def results_section(page: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    return text[text.index("## Benchmark results") :]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_algorithm_page_shows_the_figure_of_each_script_with_kept_runs(page):
    section = results_section(page)
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
    for figure in figures:
        assert (ROOT / "docs" / page).parent.joinpath(figure).resolve().is_file(), f"{page}: {figure} does not exist"
    for script in PAGES[page]:
        kept = kept_runs(script)
        if kept:
            assert f"../benchmark/{script}/curves.svg" in figures, f"{page} has no figure of {script}'s {len(kept)} kept runs"
            assert "| env | steps | seeds | final return |" in section
        else:
            assert f"### `{script}.py`" in section and "Not run yet" in section, f"{page} must say {script} is not run yet"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_script_with_kept_runs_shows_its_seeds_and_its_reading(page):
    # Each script's block runs from its heading to the next one; the per-seed finals and the written reading belong
    # there whether or not the upstream script published a figure at the same budget.
    section = results_section(page)
    for script in PAGES[page]:
        kept = kept_runs(script)
        if not kept:
            continue
        block = section[section.index(f"### `{script}.py`"):]
        end = block.find("\n### ")
        block = block if end < 0 else block[:end]
        if len(kept) > 1:
            assert "Final returns per seed (seeds in order):" in block, f"{page}: {script} gives no per-seed finals"
        if script in READINGS:
            reading = READINGS[script]
            expected = reading if isinstance(reading, str) else reading(learning_results(script))
            assert expected in block, f"{page}: {script}'s reading is missing"


def test_early_return_averages_the_episodes_that_ended_in_the_first_tenth_of_the_steps():
    record = {"total_timesteps": 10_000, "last_step": 10_000,
              "episodes": {"step": [100, 900, 1000, 1001, 5000], "return": [1.0, 2.0, 3.0, 10.0, 20.0]}}
    assert early_return(record) == 2.0  # (1 + 2 + 3) / 3: the episodes that ended by step 1,000
    # a stopped run without a budget counts its tenth from the last step it reached
    record = {"total_timesteps": None, "last_step": 5_000, "episodes": {"step": [400, 600], "return": [4.0, 8.0]}}
    assert early_return(record) == 4.0
    # no episode ended that early: no number, rather than a made-up one
    late = {"total_timesteps": 100, "last_step": 100, "episodes": {"step": [50], "return": [1.0]}}
    assert math.isnan(early_return(late))


def test_kept_runs_are_whole_and_belong_to_the_suite():
    """Every kept file is a finished run of a command of benchmark/suite.py (so the suite skips it and the docs
    state its budget truthfully), with an episode list that ends inside the run."""
    commands = {
        (e.script, env, seed): [*e.command(), "--env-id", env, "--seed", str(seed)] for e in SUITE for env in e.env_ids for seed in e.seeds
    }
    files = find_kept(KEPT) if KEPT.is_dir() else []
    for path in files:
        record = read_kept(path)
        key = (record["name"], record["env_id"], record["seed"])
        assert path == KEPT / record["name"] / record["env_id"] / f"seed{record['seed']}.json"
        assert key in commands, f"{path.relative_to(ROOT)} is no run of benchmark/suite.py"
        assert record["command"] == commands[key], f"{path.relative_to(ROOT)} was made by another command than the suite's"
        steps = record["episodes"]["step"]
        assert steps == sorted(steps) and len(steps) > 0 and steps[-1] <= record["last_step"] <= record["total_timesteps"]
        # a whole run: it reached its last iteration (on-policy scripts stop at a whole batch below the budget)
        assert record["last_step"] >= 0.99 * record["total_timesteps"], f"{path.relative_to(ROOT)} stopped early"


def test_throughput_table_has_the_upstream_columns_only_when_measured():
    from benchmark.make_docs import throughput_section

    def row(ratios: dict) -> dict:
        return dict(script="ppo", env_id="CartPole-v1", sps={"plain": 5000.0}, ratios=ratios, runs=[dict(load_before=0.5, load_after=1.0)])

    tp = dict(machine=dict(cpu="2 CPU cores (x)", gpu="no GPU", torch="2.13.0"), variants=[], started="s", command="c",
              results=[row({"plain/sb3": 1.1, "plain/raw": 0.1})])  # fmt: skip
    assert "| script | plain SPS | plain / SB3 |\n" in throughput_section(tp)
    assert "| script | plain / raw env |\n" in throughput_section(tp)  # the second table: flags and the env
    assert "CleanRL" not in throughput_section(tp)
    tp["results"].append(row({"plain/cleanrl": 1.5, "plain/cleanrl (process)": 1.25, "plain/raw": 0.1}))
    tp["cleanrl"] = dict(versions=dict(gymnasium="0.29.1", numpy="1.26.4", torch="2.13.0+cpu"))
    text = throughput_section(tp)
    assert "| script | plain SPS | plain / SB3 | plain / CleanRL | plain / CleanRL (process) |\n" in text
    assert "| `ppo` | 5,000 | 1.10 | - | - |\n" in text
    assert "| `ppo` | 5,000 | - | 1.50 | 1.25 |\n" in text
    assert text.count("| `ppo` | 0.10 |\n") == 2
    assert "Environments: `CartPole-v1` for `ppo`, `ppo`." in text
    assert "gymnasium 0.29.1, numpy 1.26.4, torch 2.13.0+cpu" in text and "one torch thread per trainer of ours and SB3" in text


def test_suite_dry_run_passes_workers_but_runs_ppg_one_at_a_time():
    """--workers reaches benchmark/run.py, except for an entry with a cap (PPG's 6.5 GB phase buffer per run); the
    long entries carry the checkpoint flags and --resume-stopped."""
    cmd = [sys.executable, str(ROOT / "benchmark/suite.py"), "--dry-run", "--workers", "2", "--only", "ppg_procgen", "ppo_atari"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runners = [line.split() for line in proc.stdout.splitlines() if line.startswith("python benchmark/run.py")]
    by_script = {next(t for t in r if t.endswith(".py") and t.startswith("cleanrl/")): r for r in runners}
    ppo, ppg = by_script["cleanrl/ppo_atari.py"], by_script["cleanrl/ppg_procgen.py"]
    assert ppo[2:4] == ["--workers", "2"] and "--workers" not in ppg
    for runner in (ppo, ppg):
        assert "--resume-stopped" in runner[: runner.index("--")]
        assert runner[-2:] == ["--resume", "auto"] and "--save-model" in runner
