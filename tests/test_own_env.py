"""Your own environment (docs/get-started/your-own-environment.md): an env a package of the user's registers trains
through `--env-id mypkg:Corridor-v0`, its wrapper applied where it is registered; a space a script does not take
fails in one line that names the space and the scripts that take it."""

import ast
import re

import pytest

import environments
from tests.helpers import ROOT, read_scalars, run_script, script_env, single_run_dir, values
from tests.scripts import PPO_LOSSES
from tests.test_integrity import assert_one_error

PACKAGE = ROOT / "tests" / "toy_package"  # holds mypkg, the docs page's example package
PAGE = ROOT / "docs" / "get-started" / "your-own-environment.md"


def with_mypkg() -> dict:
    return script_env(PYTHONPATH=str(PACKAGE))  # as `pip install -e` of the user's package would make it importable


def test_a_registered_env_of_your_own_package_trains_saves_and_evaluates(workdir):
    run_script("ppo.py", "--env-id", "mypkg:Corridor-v0", "--num-steps", "32", "--total-timesteps", "256",
               "--save-model", "--eval-episodes", "2", "--no-progress", cwd=workdir, env=with_mypkg())
    run = single_run_dir(workdir)
    assert run.name.startswith("mypkg-Corridor-v0__ppo__1__"), run.name  # ":" cannot be in a directory name
    scalars = read_scalars(run)
    assert all(len(values(scalars, key)) == 2 for key in PPO_LOSSES), sorted(scalars)  # both updates happened
    assert len(values(scalars, "eval/episodic_return")) == 2
    # the saved model is evaluated on the id the user gives (a file alone never imports a module)
    proc = run_script("ppo.py", "--eval-only", str(run), "--env-id", "mypkg:Corridor-v0", "--eval-episodes", "1",
                      cwd=workdir, env=with_mypkg())
    assert "over 1 episodes of mypkg:Corridor-v0" in proc.stderr + proc.stdout


def test_a_continuous_script_trains_on_the_continuous_variant(workdir):
    run_script("sac_continuous_action.py", "--env-id", "mypkg:CorridorContinuous-v0", "--total-timesteps", "300",
               "--learning-starts", "200", "--batch-size", "16", "--no-progress", cwd=workdir, env=with_mypkg())
    scalars = read_scalars(single_run_dir(workdir))
    assert values(scalars, "losses/qf1_loss") and values(scalars, "losses/actor_loss"), sorted(scalars)


@pytest.mark.parametrize("script, env_id, parts", [
    ("dqn.py", "CorridorDict-v0", ("has observation space Dict(", "dqn.py supports flat Box observations only",
                                   "no script takes a Dict observation space", "FlattenObservation")),
    ("sac_continuous_action.py", "Corridor-v0", ("has action space Discrete(2)",
                                                 "Discrete actions: ppo.py, dqn.py and c51.py")),
    ("ppo.py", "CorridorContinuous-v0", ("has action space Box(", "ppo.py supports Discrete actions only",
                                         "Box actions: ppo_continuous_action.py, ddpg_continuous_action.py")),
])
def test_an_unsupported_space_fails_in_one_line_naming_the_scripts_that_take_it(workdir, script, env_id, parts):
    proc = run_script(script, "--env-id", f"mypkg:{env_id}", cwd=workdir, check=False, env=with_mypkg())
    assert_one_error(proc, f"error: mypkg:{env_id} ", *parts)
    assert not (workdir / "runs").exists()  # before any work started


def test_the_table_of_spaces_is_what_each_script_asks_for():
    """environments.SCRIPTS_FOR_ACTIONS (which the messages quote) against each script's probe_env calls."""
    asked = {}
    for path in sorted((ROOT / "cleanrl").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "probe_env"
                    and isinstance(node.args[1], ast.Attribute)):
                asked.setdefault(node.args[1].attr, set()).add(path.name)
    assert {kind: set(names) for kind, names in environments.SCRIPTS_FOR_ACTIONS.items()} == asked


def test_the_docs_page_shows_the_tested_package_and_the_table():
    text = PAGE.read_text()
    assert '--8<-- "tests/toy_package/mypkg/__init__.py"' in text  # the page's example is this test's package
    for kind, names in environments.SCRIPTS_FOR_ACTIONS.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| {kind} ")), "")
        assert all(name in row for name in names), (kind, row)
    assert re.search(r"--env-id mypkg:Corridor-v0\b", text)


def test_the_wrapper_example_wraps_where_the_env_is_registered(monkeypatch):
    import gymnasium as gym

    monkeypatch.syspath_prepend(str(PACKAGE))
    env = gym.make("mypkg:ScaledCartPole-v0")
    env.reset(seed=0)
    assert env.step(0)[1] == pytest.approx(0.1)  # CartPole's reward of 1, scaled
