"""The table of scripts (tests/scripts.py) is the suite's one list of them: every script of cleanrl/ has its row, and
the rows hold together as the tables derived from them need."""

import re

from tests.helpers import ROOT
from tests.scripts import SCRIPTS, BadInput, BadLifecycle

MAIN = re.compile(r"""^if __name__ == ["']__main__["']:""", re.MULTILINE)


def runnable_scripts() -> set[str]:
    """The files of cleanrl/ that run as a script (`if __name__ == "__main__":`), not the modules they import."""
    return {path.name for path in (ROOT / "cleanrl").glob("*.py") if MAIN.search(path.read_text())}


def test_every_script_of_cleanrl_has_one_row_in_the_table_of_scripts():
    scripts = runnable_scripts()
    missing, stale = sorted(scripts - set(SCRIPTS)), sorted(set(SCRIPTS) - scripts)
    assert not missing, (
        f"{', '.join(f'cleanrl/{name}' for name in missing)} not in the test suite: add one Script row to SCRIPTS in "
        f"tests/scripts.py (a tiny budget through its updates, the losses it logs and their steps, its family and "
        f"action copy; its lifecycle, compile, bad-input and learning cases are fields of the same row), and every "
        f"behaviour test covers it")
    assert not stale, (f"tests/scripts.py has rows for {', '.join(stale)}, which cleanrl/ does not have as scripts "
                       f"(with `if __name__ == \"__main__\":`): remove the rows, or restore the scripts")


def test_the_rows_hold_what_the_derived_tables_need():
    for name, row in SCRIPTS.items():
        assert row.name == name and name.endswith(".py"), name
        assert all(isinstance(c, BadInput) for c in row.bad_input), name
        assert all(isinstance(c, BadLifecycle) for c in row.bad_lifecycle), name
        assert row.learning_rate_flag.startswith("--"), name
        # the evaluation and the non-finite stop start from the runs the resume and stop cases make
        if row.evaluation:
            assert row.resume, f"{name}: an evaluation case evaluates the run of its resume case, which it lacks"
        if row.non_finite:
            source = {"resumed": row.resume, "stopped": row.stop}[row.non_finite.source]
            assert source, f"{name}: its non_finite case poisons the {row.non_finite.source} run, which it lacks"
        if row.resume and row.resume.uninterrupted:
            assert row.saves_envs, f"{name}: a resume equals an uninterrupted run only where the envs are saved"
        if row.no_update_args:
            assert "--total-timesteps" in row.no_update_args, name
        if row.compile:
            assert set(row.compile.loss_steps) and row.compile.min_updates <= len(row.compile.loss_steps), name


# The line counts of upstream CleanRL's scripts (github.com/vwxyzjn/cleanrl, cleanrl/<name>, commit fe8d8a03):
# each script here does what its upstream counterpart does and more (checkpoints, resume, speed flags), and may take
# at most half as many lines again to do it; the run machinery no variant changes belongs in the companion modules.
UPSTREAM_LINES = {
    "ppo.py": 312, "ppo_continuous_action.py": 353, "ppo_atari.py": 329, "ppo_atari_multigpu.py": 403,
    "ppo_atari_envpool_xla_jax_scan.py": 522, "dqn.py": 248, "dqn_atari.py": 271, "c51.py": 279, "c51_atari.py": 302,
    "ddpg_continuous_action.py": 265, "td3_continuous_action.py": 317, "sac_continuous_action.py": 324,
    "ppg_procgen.py": 480,
}


def test_every_script_is_at_most_one_and_a_half_times_as_long_as_upstreams():
    too_long = {}
    for name in SCRIPTS:
        lines = len((ROOT / "cleanrl" / name).read_text().splitlines())
        if name in UPSTREAM_LINES and lines > 1.5 * UPSTREAM_LINES[name]:
            too_long[name] = f"{lines} lines, upstream {UPSTREAM_LINES[name]}: at most {int(1.5 * UPSTREAM_LINES[name])}"
    assert not too_long, too_long
