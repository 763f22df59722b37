"""(slow) Each algorithm learns its classic task: the mean episodic return over the last episodes of one seeded run
clears a threshold set from a measured run (python -m pytest -m slow tests/test_learning.py)."""

import numpy as np
import pytest

from tests.helpers import read_scalars, run_script, single_run_dir, values
from tests.scripts import SCRIPTS, names, needs

# the rows' learning cases (tests/scripts.py, Learning: budget, threshold and how they were measured)
CASES = [pytest.param(SCRIPTS[name], id=name, marks=[needs(SCRIPTS[name].learning.needs or SCRIPTS[name].needs)])
         for name in names(lambda row: row.learning)]


@pytest.mark.slow
@pytest.mark.parametrize("row", CASES)
def test_learns(row, workdir):
    case = row.learning
    run_script(row.name, *case.args, cwd=workdir, timeout=case.timeout)
    scalars = read_scalars(single_run_dir(workdir))
    returns = values(scalars, "charts/episodic_return")
    if case.episodes is not None:
        assert len(returns) == case.episodes
    if case.first_below is not None:
        assert np.mean(returns[:20]) < case.first_below, returns[:20]
    assert np.mean(returns[-case.last :]) >= case.at_least, returns[-case.last :]
    if case.evaluated is not None:
        evaluation = values(scalars, "eval/episodic_return")
        assert len(evaluation) == 10 and np.mean(evaluation) >= case.evaluated, evaluation
