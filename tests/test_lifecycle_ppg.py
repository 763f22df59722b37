"""The run lifecycle of ppg_procgen.py (docs/saving-resuming.md): a checkpoint inside a policy phase carries the
auxiliary buffer's stored rollouts, SIGKILL and resume continue the same run, SIGTERM leaves a loadable checkpoint,
a non-finite resume keeps it, --eval-only, and bad input. Every run is a real subprocess on envpool's Procgen."""

import math
import os
import pty
import signal
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest
import torch

from cleanrl.ppg_procgen import Args as PPGArgs
from cleanrl.ppg_procgen import AuxBuffer, RewardNormalizer
from cleanrl.ppo import Args as PPOArgs
from tests.helpers import ROOT, read_scalars, run_dirs, run_script, script_env, single_run_dir
from tests.test_lifecycle import kill_after_first_checkpoint, load, start, wait_for_checkpoint
from tests.test_ppg_procgen import TINY, needs_procgen

# 2 envs x 16 steps = 32 steps per iteration, one policy phase of 4 iterations (128 steps), then one auxiliary
# phase over 8 rollouts in 4 minibatches: checkpoints after iterations 1-3 fall inside the policy phase.
SMALL = [
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "4", "--num-aux-rollouts", "2", "--e-auxiliary", "1",
    "--num-minibatches", "2", "--total-timesteps", "128", "--eval-episodes", "1", "--no-progress",
]  # fmt: skip
OBS_SHAPE = (3, 64, 64)


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """A run SIGKILLed after its first checkpoint and resumed with the same command to the end:
    (working directory, the checkpoint it resumed from, the resumed process)."""
    cwd = tmp_path_factory.mktemp("ppg_resume")
    # `--resume auto` starts a fresh run the first time; the same command continues it after the kill
    command = [*SMALL, "--save-model", "--checkpoint-frequency", "1", "--resume", "auto"]
    checkpoint = kill_after_first_checkpoint("ppg_procgen.py", command, cwd)
    resumed = run_script("ppg_procgen.py", *command, cwd=cwd, timeout=300)
    return cwd, checkpoint, resumed


@needs_procgen
def test_killed_inside_a_policy_phase_then_resumed_continues_the_same_run(killed_and_resumed):
    cwd, checkpoint, resumed = killed_and_resumed
    iteration, stopped_at = checkpoint["iteration"], checkpoint["global_step"]
    assert 1 <= iteration <= 3 and stopped_at == 32 * iteration
    # inside the phase: the rollouts stored so far, 2 per iteration (one per env), whole and uint8
    aux = checkpoint["aux"]
    assert aux["obs"].shape == (2 * iteration, 16, *OBS_SHAPE) and aux["obs"].dtype == torch.uint8
    assert aux["returns"].shape == aux["valid"].shape == (2 * iteration, 16)
    assert aux["obs"].untyped_storage().nbytes() == aux["obs"].numel(), "a slice saved with its whole storage"
    assert aux["obs"].float().std() > 0, "the saved observations are frames, not empty memory"
    assert checkpoint["envs"] is None  # envpool's state cannot be saved
    assert set(checkpoint["reward_normalizer"]) == {"mean", "var", "count"}
    assert checkpoint["reward_normalizer"]["count"] > 1  # it has seen the first iteration's returns

    assert "note: the environments' state cannot be saved (ProcgenGymnasiumEnvPool" in resumed.stdout
    assert f"after iteration {iteration} (global step {stopped_at})" in resumed.stdout
    run_dir = single_run_dir(cwd)
    assert run_dir.name == checkpoint["run_name"] and run_dir.name.startswith("StarpilotEasy-v0__ppg_procgen__1__")
    scalars = read_scalars(run_dir)
    # one TensorBoard log, every iteration once: the killed process's events after its checkpoint were purged
    for key in ("losses/value_loss", "losses/policy_loss", "charts/learning_rate"):
        assert [s for s, _ in scalars[key]] == [32, 64, 96, 128], key
    for key in ("losses/aux_kl_loss", "losses/aux_value_loss", "losses/aux_pi_value_loss"):
        assert [s for s, _ in scalars[key]] == [128], key  # the auxiliary phase ran once, at the phase's end
        assert all(math.isfinite(v) and v >= 0 for _, v in scalars[key]), key
    # episodes restart on resume: one that ends after the resume is no longer than the steps since then
    lengths = dict(scalars.get("charts/episodic_length", []))
    assert all(length <= (step - stopped_at) // 2 for step, length in lengths.items() if step > stopped_at)
    final = load(run_dir / "checkpoint.pt")
    assert final["finished"] and final["global_step"] == 128 and final["iteration"] == 4
    assert final["aux"] is None, "after the auxiliary phase the buffer is spent and not saved"
    assert (run_dir / "ppg_procgen.cleanrl_model").stat().st_size > 0


@needs_procgen
def test_eval_only_on_the_saved_model(killed_and_resumed):
    cwd = killed_and_resumed[0]
    run_dir = single_run_dir(cwd)
    # a run directory (its checkpoint brings the env id) and a bare .cleanrl_model (evaluated on --env-id)
    by_dir = run_script("ppg_procgen.py", "--eval-only", str(run_dir), "--eval-episodes", "1", cwd=cwd)
    by_file = run_script("ppg_procgen.py", "--eval-only", str(run_dir / "ppg_procgen.cleanrl_model"),
                         "--env-id", "starpilot", "--eval-episodes", "1", cwd=cwd)  # fmt: skip
    line = [ln for ln in by_dir.stdout.splitlines() if ln.startswith("eval: mean return")]
    assert line and line[0].endswith("over 1 episodes of StarpilotEasy-v0"), by_dir.stdout
    mean, std = line[0].split("eval: mean return ")[1].split(" over")[0].split(" +- ")
    assert float(mean) >= 0 and float(std) >= 0  # starpilot's rewards are non-negative
    # the sampled actions come from the seeded generator and the evaluation envs have a fixed seed
    assert line[0] in by_file.stdout
    assert run_dirs(cwd) == [run_dir], "evaluation must not create a run"


@needs_procgen
def test_sigterm_leaves_a_loadable_checkpoint_and_a_non_finite_resume_keeps_it(workdir):
    command = ["--num-envs", "2", "--num-steps", "16", "--n-iteration", "2", "--num-aux-rollouts", "2",
               "--e-auxiliary", "1", "--num-minibatches", "2", "--total-timesteps", "100000", "--save-model",
               "--checkpoint-frequency", "1", "--no-progress"]  # fmt: skip
    proc = start("ppg_procgen.py", *command, cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    checkpoint = load(checkpoint_path)  # weights_only: plain tensors and values
    step, iteration = checkpoint["global_step"], checkpoint["iteration"]
    assert f"SIGTERM: stopped after global step {step}; checkpoint saved" in stdout
    assert not checkpoint["finished"] and step == 32 * iteration and iteration >= 1
    # odd iterations end inside a policy phase of 2 and carry one iteration's rollouts; even ones end a phase
    assert (checkpoint["aux"] is None) == (iteration % 2 == 0)
    assert not list(workdir.glob("runs/*/checkpoint.pt.tmp"))
    assert not list(workdir.glob("runs/*/*.cleanrl_model")), "a stopped run is not finished: no final model"
    assert read_scalars(checkpoint_path.parent)["losses/value_loss"][-1][0] == step

    # Poison Adam's first moment of the policy's first conv layer (parameter 0): the resumed iteration's first
    # optimizer step writes NaN into the policy, the next minibatch's losses are NaN, and the end-of-iteration
    # check must stop the run before anything is saved.
    checkpoint["optimizer"]["state"][0]["exp_avg"].view(-1)[0] = math.nan
    torch.save(checkpoint, checkpoint_path)
    before = checkpoint_path.read_bytes()
    proc = run_script("ppg_procgen.py", "--resume", str(checkpoint_path.parent), cwd=workdir, check=False)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite ") and "(nan)" in last, proc.stderr[-3000:]
    assert f"at global step {step + 32} (iteration {iteration + 1}); stopped without saving" in last
    assert checkpoint_path.read_bytes() == before, "the last good checkpoint was overwritten"


@needs_procgen
@pytest.mark.parametrize(
    "args, message",
    [
        (["--resume", "ppo.pt"], "error: ppo.pt is not a checkpoint of ppg_procgen.py (it was written by ppo.py)"),
        (["--resume", "ppg.pt", "--env-id", "bigfish"],
         "error: cannot change --env-id (the checkpoint has 'starpilot') when resuming"),
        (["--eval-only", "nothing.cleanrl_model"], "error: no saved model at nothing.cleanrl_model"),
    ],
)  # fmt: skip
def test_bad_lifecycle_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    common = {"run_name": "x", "iteration": 1, "global_step": 32, "finished": False, "envs": None}
    torch.save({"script": "ppo.py", "args": asdict(PPOArgs()), **common}, workdir / "ppo.pt")
    torch.save({"script": "ppg_procgen.py", "args": asdict(PPGArgs()), **common}, workdir / "ppg.pt")
    proc = run_script("ppg_procgen.py", *args, cwd=workdir, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert run_dirs(workdir) == []


@needs_procgen
def test_progress_line_on_a_terminal_replaces_the_iteration_lines(workdir):
    """TINY: 2 iterations of 32 steps and one auxiliary phase; stderr is a terminal, stdout a pipe."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(ROOT / "cleanrl" / "ppg_procgen.py"), *TINY], cwd=workdir,
                            env=script_env(), stdout=subprocess.PIPE, stderr=follower, text=True)  # fmt: skip
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
    stdout = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0
    shown = b"".join(chunks).decode(errors="replace")
    assert "\r64/64 steps (100%) |" in shown and " SPS | return " in shown
    assert "phase 1 iteration" not in stdout and "auxiliary phase took" not in stdout


def test_aux_buffer_state_round_trip_holds_only_the_stored_iterations():
    n_iteration, num_envs, num_steps = 3, 2, 4
    buf = AuxBuffer(n_iteration, num_envs, num_steps, (1, 2, 2), n_actions=3)
    for it in range(2):  # two of the phase's three iterations stored, as at a checkpoint after its 2nd iteration
        code = torch.tensor([[it * 50 + env * 10 + step for env in range(num_envs)] for step in range(num_steps)])
        buf.store(it, code.to(torch.uint8)[:, :, None, None, None].expand(num_steps, num_envs, 1, 2, 2),
                  returns=code.float() / 2, valid=(code % 3 != 0))  # fmt: skip
    state = buf.state_dict()
    assert state["obs"].shape == (4, num_steps, 1, 2, 2) and state["returns"].shape == (4, num_steps)
    # copies, so torch.save writes these rows and not the whole (partly unfilled) buffer
    assert state["obs"].untyped_storage().nbytes() == 4 * num_steps * 4
    restored = AuxBuffer(n_iteration, num_envs, num_steps, (1, 2, 2), n_actions=3)
    restored.load_state_dict(state)
    rows = np.arange(4)
    for a, b in zip(buf.batch(rows, torch.device("cpu"))[:2], restored.batch(rows, torch.device("cpu"))[:2]):
        assert torch.equal(a, b)
    assert torch.equal(buf.valid[:4], restored.valid[:4])
    # row 3 = iteration 1, env 1: codes 60..63
    assert restored.obs[3, :, 0, 0, 0].tolist() == [60, 61, 62, 63]


def test_reward_normalizer_state_round_trip_restarts_the_running_returns():
    norm = RewardNormalizer(num_envs=2, gamma=0.5)
    for reward in ([2.0, 4.0], [1.0, -3.0], [0.5, 7.0]):
        norm(np.array(reward), done=np.zeros(2, bool), valid=np.ones(2, bool))
    state = norm.state_dict()
    assert all(type(v) is float for v in state.values())  # plain floats load with weights_only=True
    restored = RewardNormalizer(num_envs=2, gamma=0.5)
    restored.load_state_dict(state)
    assert (restored.mean, restored.var, restored.count) == (norm.mean, norm.var, norm.count)
    np.testing.assert_array_equal(restored.ret, [0.0, 0.0])  # new episodes after a resume
    # with the same statistics and the returns restarted, the next rewards are scaled the same way
    norm.ret[:] = 0.0
    step = (np.array([3.0, -1.0]), np.zeros(2, bool), np.ones(2, bool))
    np.testing.assert_array_equal(restored(*step), norm(*step))
