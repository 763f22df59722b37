"""Training on from where a run ended (issue 59, item 2): a finished run resumed with a larger --total-timesteps
trains on, its schedules following the new budget; --init-from starts a new run from a saved model's weights, and a
model that does not fit fails in one line that names the shapes, leaving no run directory behind."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import checkpoints
import runtime
from tests.helpers import read_scalars, run_dirs, run_script, single_run_dir, values
from tests.test_integrity import assert_one_error

TINY = ("--num-steps", "32", "--eval-episodes", "1", "--no-progress")  # 4 envs x 32 steps: 128 steps an iteration
LEARNING_RATE = 2.5e-4  # ppo.py's default


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished ppo.py run of 2 iterations (256 steps), with --save-model."""
    cwd = tmp_path_factory.mktemp("finished")
    run_script("ppo.py", *TINY, "--total-timesteps", "256", "--save-model", cwd=cwd)
    return cwd, single_run_dir(cwd)


def test_a_finished_run_with_a_larger_budget_trains_on_and_its_anneal_follows_the_new_budget(finished, tmp_path):
    import shutil

    shutil.copytree(finished[0] / "runs", tmp_path / "runs")
    run = single_run_dir(tmp_path)
    proc = run_script("ppo.py", "--resume", str(run), "--total-timesteps", "512", "--no-progress", cwd=tmp_path)
    assert "note: --total-timesteps 512 extends the run's 256" in proc.stderr + proc.stdout
    assert run_dirs(tmp_path) == [run]  # the same run goes on
    scalars = read_scalars(run)
    # the learning rate of iterations 1-4 of a 4-iteration budget: 1, 3/4 of the first 2 (logged before the
    # extension, when the budget was 2 iterations: 1, 1/2), then 1/2, 1/4 of the new one
    assert [s for s, _ in scalars["charts/learning_rate"]] == [128, 256, 384, 512]
    assert values(scalars, "charts/learning_rate") == pytest.approx([LEARNING_RATE * f for f in (1, 0.5, 0.5, 0.25)])
    assert [s for s, _ in scalars["losses/value_loss"]] == [128, 256, 384, 512]
    saved = checkpoints.load_checkpoint(str(run / "checkpoint.pt"), "ppo.py")
    assert saved["finished"] and saved["global_step"] == 512 and saved["args"]["total_timesteps"] == 512
    # evaluated again at the new end: eval/episodic_return, logged by episode index, holds both evaluations
    assert [s for s, _ in scalars["eval/episodic_return"]] == [0, 0]

    # no budget given, or one not larger: nothing to resume, and the line says how to train on
    for budget in ((), ("--total-timesteps", "512"), ("--total-timesteps", "384")):
        proc = run_script("ppo.py", "--resume", str(run), *budget, cwd=tmp_path, check=False)
        assert_one_error(proc, "is the end of a finished run (global step 512); nothing to resume (give a larger "
                               "--total-timesteps to train it on)")


def test_resume_auto_with_a_larger_budget_trains_a_finished_run_on(finished, tmp_path):
    import shutil

    shutil.copytree(finished[0] / "runs", tmp_path / "runs")
    same = ("ppo.py", *TINY, "--save-model", "--resume", "auto")
    proc = run_script(*same, "--total-timesteps", "256", cwd=tmp_path)
    assert "has already finished; nothing to resume" in proc.stderr + proc.stdout
    run_script(*same, "--total-timesteps", "384", cwd=tmp_path)
    (run,) = run_dirs(tmp_path)
    assert checkpoints.load_checkpoint(str(run / "checkpoint.pt"), "ppo.py")["global_step"] == 384


def test_init_from_starts_a_new_run_from_the_saved_weights(finished, tmp_path):
    source = finished[1]
    proc = run_script("ppo.py", *TINY, "--total-timesteps", "128", "--seed", "2", "--save-model", "--init-from",
                      str(source), cwd=tmp_path)
    assert f"initialized agent from {source}/ppo.cleanrl_model" in proc.stderr + proc.stdout
    run = single_run_dir(tmp_path)
    assert run.name.startswith("CartPole-v1__ppo__2__")
    saved = checkpoints.load_checkpoint(str(run / "checkpoint.pt"), "ppo.py")
    assert saved["global_step"] == 128 and saved["args"]["init_from"] == str(source)
    # one update away from the file's weights (a fresh network would be far from them), with a fresh optimizer
    start = torch.load(source / "ppo.cleanrl_model", weights_only=True)
    moved = max((saved["agent"][k] - v).abs().max().item() for k, v in start.items())
    assert 0 < moved < 0.05
    assert all(s["step"].item() == 16 for s in saved["optimizer"]["state"].values())  # 4 epochs x 4 minibatches


def test_init_from_a_model_of_other_shapes_fails_in_one_line_and_leaves_no_run(finished, tmp_path):
    proc = run_script("ppo.py", "--env-id", "Acrobot-v1", "--init-from", str(finished[1]), cwd=tmp_path,
                      check=False)
    assert_one_error(proc, f"--init-from {finished[1]}/ppo.cleanrl_model does not fit this ppo.py model: shapes "
                           "differ: critic.0.weight (64, 4) in the file, (64, 6) here")
    assert run_dirs(tmp_path) == []
    for bad, message in ((("--init-from", "nowhere"), "--init-from nowhere: no such file"),
                         (("--init-from", str(finished[1]), "--resume", "auto"), "give one of them")):
        proc = run_script("ppo.py", *bad, cwd=tmp_path, check=False)
        assert_one_error(proc, message)
        assert run_dirs(tmp_path) == []


def fake_run(state: dict, path) -> SimpleNamespace:
    """What Run.init_weights reads of a Run, around real networks."""
    run = SimpleNamespace(state=state, script="x.py", checkpoint=None, rank=0, dir=str(path / "run"), close=lambda: None)
    run.abandon = lambda: runtime.Run.abandon(run)
    return run


def test_init_from_loads_named_networks_and_makes_their_targets_copies(tmp_path):
    torch.manual_seed(0)
    trained = {"actor": nn.Linear(3, 2), "qf": nn.Linear(5, 1)}
    checkpoints.save_checkpoint({k: m.state_dict() for k, m in trained.items()}, str(tmp_path / "m.cleanrl_model"))
    state = {"actor": nn.Linear(3, 2), "qf": nn.Linear(5, 1), "qf_target": nn.Linear(5, 1),
             "target_actor": nn.Linear(3, 2)}
    optimizer = torch.optim.Adam(state["qf"].parameters())
    state["q_optimizer"] = optimizer
    runtime.Run.init_weights(fake_run(state, tmp_path), str(tmp_path / "m.cleanrl_model"))
    for name, built_as in (("actor", "actor"), ("qf", "qf"), ("qf_target", "qf"), ("target_actor", "actor")):
        assert torch.equal(state[name].weight, trained[built_as].weight), name
    assert optimizer.state == {}


def test_init_from_a_single_network_file_fills_the_model_and_its_target(tmp_path):
    torch.manual_seed(0)
    trained = nn.Linear(4, 2)
    checkpoints.save_checkpoint(trained.state_dict(), str(tmp_path / "q.cleanrl_model"))
    state = {"q_network": nn.Linear(4, 2), "target_network": nn.Linear(4, 2), "other": nn.Linear(4, 2)}
    runtime.Run.init_weights(fake_run(state, tmp_path), str(tmp_path / "q.cleanrl_model"))
    assert torch.equal(state["q_network"].weight, trained.weight)
    assert torch.equal(state["target_network"].weight, trained.weight)
    assert not torch.equal(state["other"].weight, trained.weight)  # not a target: as built
