"""The run lifecycle of ppo.py and ppo_continuous_action.py: checkpoints, kill and resume, signals, evaluation,
non-finite stops and the progress line (docs/saving-resuming.md). Every run is a real subprocess."""

import math
import os
import pty
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from cleanrl.ppo import Args as PPOArgs
from runtime import find_non_finite, save_checkpoint
from tests.helpers import ROOT, assert_losses_close, read_scalars, run_dirs, run_script, script_env, single_run_dir

# ppo.py: 4 envs x 32 steps = 128 steps per iteration, 8 iterations
PPO_SMALL = ["--num-steps", "32", "--total-timesteps", "1024", "--eval-episodes", "1", "--no-progress"]
# ppo_continuous_action.py on Pendulum: 1 env x 64 steps, 8 iterations; one episode ends (truncated at 200)
PENDULUM_SMALL = ["--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2",
                  "--total-timesteps", "512", "--eval-episodes", "1", "--no-progress"]
LOSS_KEYS = ["losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl"]


def start(script: str, *args: str, cwd: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(ROOT / "cleanrl" / script), *args]
    return subprocess.Popen(cmd, cwd=cwd, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_checkpoint(proc: subprocess.Popen, cwd: Path, timeout: float = 120) -> Path:
    """Poll until the run's first checkpoint exists (the training loop is then running)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = list((cwd / "runs").glob("*/checkpoint.pt")) if (cwd / "runs").exists() else []
        if found:
            return found[0]
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before its first checkpoint:\n{proc.stderr.read()[-3000:]}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no checkpoint appeared")


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def kill_after_first_checkpoint(script: str, args: list[str], cwd: Path) -> dict:
    proc = start(script, *args, cwd=cwd)
    checkpoint_path = wait_for_checkpoint(proc, cwd)
    proc.kill()
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    checkpoint = load(checkpoint_path)
    assert not checkpoint["finished"], "the run finished before it was killed; the test did not test a resume"
    return checkpoint


def assert_same_run(uninterrupted: Path, resumed: Path, keys: list[str]) -> None:
    """Same final parameters and the same logged curves, step for step, as the uninterrupted run."""
    a, b = load(uninterrupted / "checkpoint.pt"), load(resumed / "checkpoint.pt")
    assert a["finished"] and b["finished"] and a["global_step"] == b["global_step"]
    for name, tensor in a["agent"].items():
        assert torch.equal(tensor, b["agent"][name]), name
    scalars_a, scalars_b = read_scalars(uninterrupted), read_scalars(resumed)
    for key in keys:
        # steps and values equal: the killed process's events after its checkpoint were purged
        assert scalars_a[key] == scalars_b[key], key


def test_ppo_killed_and_resumed_equals_an_uninterrupted_run(workdir):
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    run_script("ppo.py", *PPO_SMALL, "--save-model", cwd=workdir / "a")
    # `--resume auto` starts a fresh run the first time, and the same command resumes it after the kill:
    # what an automatic restart (torchrun --max-restarts, a retried batch job) does
    command = [*PPO_SMALL, "--save-model", "--checkpoint-frequency", "1", "--resume", "auto"]
    checkpoint = kill_after_first_checkpoint("ppo.py", command, workdir / "b")
    assert checkpoint["envs"] is not None, "CartPole's state should be saved"
    proc = run_script("ppo.py", *command, cwd=workdir / "b")
    assert f"after iteration {checkpoint['iteration']} (global step {checkpoint['global_step']})" in proc.stdout
    resumed = single_run_dir(workdir / "b")
    assert resumed.name == checkpoint["run_name"]
    assert_same_run(single_run_dir(workdir / "a"), resumed,
                    LOSS_KEYS + ["charts/learning_rate", "charts/episodic_return", "charts/episodic_length"])
    assert [s for s, _ in read_scalars(resumed)["losses/value_loss"]] == [128 * i for i in range(1, 9)]
    # the same command once more: the run has finished, so there is nothing to do (and no new run)
    again = run_script("ppo.py", *command, cwd=workdir / "b")
    assert f"{resumed.name} has already finished; nothing to resume" in again.stdout
    assert run_dirs(workdir / "b") == [resumed]


def test_a_plain_run_resumes_with_compile(workdir):
    # --compile changes speed only, so a run may switch it on when resumed; the losses follow the uninterrupted
    # plain run within float rounding (the parity tolerance of tests/test_ppo.py)
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    run_script("ppo.py", *PPO_SMALL, "--save-model", cwd=workdir / "a")
    command = [*PPO_SMALL, "--save-model", "--checkpoint-frequency", "1", "--resume", "auto"]
    checkpoint = kill_after_first_checkpoint("ppo.py", command, workdir / "b")
    run_script("ppo.py", *command, "--compile", cwd=workdir / "b")
    plain, resumed = read_scalars(single_run_dir(workdir / "a")), read_scalars(single_run_dir(workdir / "b"))
    assert_losses_close(plain, resumed, LOSS_KEYS, rtol=1e-4, atol=1e-6)
    assert checkpoint["global_step"] < plain["losses/value_loss"][-1][0]


def test_ppo_continuous_killed_and_resumed_equals_an_uninterrupted_run(workdir):
    # Pendulum is pure Python: its state, and that of the normalization wrappers, is saved
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    run_script("ppo_continuous_action.py", *PENDULUM_SMALL, "--save-model", cwd=workdir / "a")
    command = [*PENDULUM_SMALL, "--save-model", "--checkpoint-frequency", "1"]
    checkpoint = kill_after_first_checkpoint("ppo_continuous_action.py", command, workdir / "b")
    assert checkpoint["envs"] is not None
    run_script("ppo_continuous_action.py", "--resume", f"runs/{checkpoint['run_name']}", cwd=workdir / "b")
    resumed = single_run_dir(workdir / "b")
    assert_same_run(single_run_dir(workdir / "a"), resumed,
                    LOSS_KEYS + ["charts/learning_rate", "charts/episodic_return"])
    a, b = load(single_run_dir(workdir / "a") / "checkpoint.pt"), load(resumed / "checkpoint.pt")
    for key in ("mean", "var"):
        assert torch.equal(a["obs_rms"][key], b["obs_rms"][key])
        assert torch.equal(a["return_rms"][key], b["return_rms"][key])


def test_halfcheetah_sigint_then_resume_restarts_episodes(workdir):
    pytest.importorskip("mujoco", reason="optional dependency mujoco is not installed")
    # 1 env x 64 steps per iteration, 40 iterations; HalfCheetah episodes are 1000 steps long
    proc = start("ppo_continuous_action.py", "--env-id", "HalfCheetah-v5", "--num-steps", "64", "--num-minibatches",
                 "2", "--update-epochs", "1", "--total-timesteps", "2560", "--save-model", "--checkpoint-frequency",
                 "1", "--eval-episodes", "1", "--no-progress", cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert "the environments' state cannot be saved (HalfCheetahEnv pickles by re-construction" in stdout
    checkpoint = load(checkpoint_path)
    assert f"SIGINT: stopped after global step {checkpoint['global_step']}" in stdout
    assert checkpoint["envs"] is None and not checkpoint["finished"]
    stopped_at = checkpoint["global_step"]
    assert stopped_at < 1000

    run_script("ppo_continuous_action.py", "--resume", str(checkpoint_path), cwd=workdir)
    scalars = read_scalars(single_run_dir(workdir))
    assert [s for s, _ in scalars["losses/value_loss"]] == [64 * i for i in range(1, 41)]
    # the episode in progress was dropped: the first one ends 1000 steps after the resume, not at step 1000
    assert [s for s, _ in scalars["charts/episodic_length"]] == [stopped_at + 1000, stopped_at + 2000][
        : 1 + (stopped_at + 2000 <= 2560)]
    assert load(checkpoint_path)["finished"]


def test_sigterm_saves_a_loadable_checkpoint_and_exits_0(workdir):
    proc = start("ppo.py", "--num-steps", "32", "--total-timesteps", "100000", "--save-model",
                 "--checkpoint-frequency", "1", "--no-progress", cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    checkpoint = load(checkpoint_path)  # weights_only: the whole checkpoint is plain tensors and values
    assert f"SIGTERM: stopped after global step {checkpoint['global_step']}; checkpoint saved" in stdout
    assert not checkpoint["finished"] and 128 <= checkpoint["global_step"] < 100000
    assert checkpoint["global_step"] == 128 * checkpoint["iteration"]
    assert not list(workdir.glob("runs/*/checkpoint.pt.tmp"))
    assert not list(workdir.glob("runs/*/*.cleanrl_model")), "a stopped run is not finished: no final model"
    # the last logged update is the checkpoint's
    assert read_scalars(checkpoint_path.parent)["losses/value_loss"][-1][0] == checkpoint["global_step"]


def test_eval_only_on_a_saved_model(workdir):
    trained = run_script("ppo.py", "--num-steps", "32", "--total-timesteps", "256", "--save-model", "--eval-episodes",
                         "1", cwd=workdir)
    assert "steps (" not in trained.stderr, "no progress line when stderr is not a terminal"
    run_dir = single_run_dir(workdir)
    # a run directory (its checkpoint: the env id comes from it) and a bare .cleanrl_model (on --env-id)
    by_dir = run_script("ppo.py", "--eval-only", str(run_dir), "--eval-episodes", "3", cwd=workdir)
    by_file = run_script("ppo.py", "--eval-only", str(run_dir / "ppo.cleanrl_model"), "--eval-episodes", "3",
                         "--capture-video", cwd=workdir)
    line = [ln for ln in by_dir.stdout.splitlines() if ln.startswith("eval: mean return")]
    assert line and line[0].endswith("over 3 episodes of CartPole-v1")
    # the greedy policy and the seeded evaluation envs make it deterministic
    assert line[0] == [ln for ln in by_file.stdout.splitlines() if ln.startswith("eval: mean return")][0]
    assert run_dirs(workdir) == [run_dir], "evaluation must not create a run"
    assert list((workdir / "videos").glob("*-eval/*.mp4"))


def test_eval_only_ppo_continuous(workdir):
    run_script("ppo_continuous_action.py", "--env-id", "Pendulum-v1", "--num-steps", "64", "--total-timesteps", "128",
               "--save-model", "--eval-episodes", "1", cwd=workdir)
    run_dir = single_run_dir(workdir)
    proc = run_script("ppo_continuous_action.py", "--eval-only", str(run_dir), "--eval-episodes", "2", cwd=workdir)
    mean, std = proc.stdout.split("eval: mean return ")[1].split(" over")[0].split(" +- ")
    assert -3300 < float(mean) < 0 and float(std) >= 0
    assert "over 2 episodes of Pendulum-v1" in proc.stdout


def test_non_finite_stops_naming_step_and_quantity_and_keeps_the_checkpoint(workdir):
    command = ["--num-steps", "32", "--total-timesteps", "1024", "--save-model", "--checkpoint-frequency", "1",
               "--no-progress"]
    checkpoint = kill_after_first_checkpoint("ppo.py", command, workdir)
    checkpoint_path = single_run_dir(workdir) / "checkpoint.pt"
    # Poison Adam's first moment of the actor's first layer (parameter 6, after the critic's 3 layers): the first
    # optimizer step of the resumed run writes NaN into the actor, the following minibatches diverge inside
    # the update, and the end-of-update check must stop the run before the next checkpoint is written.
    checkpoint["optimizer"]["state"][6]["exp_avg"][0, 0] = math.nan
    torch.save(checkpoint, checkpoint_path)
    before = checkpoint_path.read_bytes()
    proc = run_script("ppo.py", "--resume", str(checkpoint_path.parent), cwd=workdir, check=False)
    assert proc.returncode == 1
    step, iteration = checkpoint["global_step"] + 128, checkpoint["iteration"] + 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite losses/") and "(nan)" in last, proc.stderr[-3000:]
    assert f"at global step {step} (iteration {iteration}); stopped without saving" in last
    assert checkpoint_path.read_bytes() == before, "the last good checkpoint was overwritten"
    assert not list(workdir.glob("runs/*/*.cleanrl_model"))


def test_progress_line_only_on_a_terminal(workdir):
    args = [str(ROOT / "cleanrl" / "ppo.py"), "--num-steps", "32", "--total-timesteps", "256"]

    def stderr_on_a_terminal(*extra: str) -> str:
        leader, follower = pty.openpty()
        proc = subprocess.Popen([sys.executable, *args, *extra], cwd=workdir, env=script_env(),
                                stdout=subprocess.DEVNULL, stderr=follower)
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
        assert proc.wait(timeout=120) == 0
        return b"".join(chunks).decode(errors="replace")

    shown = stderr_on_a_terminal()
    assert "\r256/256 steps (100%) |" in shown and " SPS | return " in shown
    assert "steps (" not in stderr_on_a_terminal("--no-progress")


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("ppo.py", ["--resume", "runs/nowhere"], "error: no checkpoint at runs/nowhere"),
        ("ppo.py", ["--resume", "missing.pt"], "error: no checkpoint at missing.pt"),
        ("ppo.py", ["--checkpoint-frequency", "5"],
         "error: --checkpoint-frequency writes checkpoints, which needs --save-model"),
        ("ppo.py", ["--checkpoint-frequency", "-1", "--save-model"],
         "error: --checkpoint-frequency must be at least 0"),
        ("ppo.py", ["--eval-only", "nothing.cleanrl_model"], "error: no saved model at nothing.cleanrl_model"),
        ("ppo.py", ["--resume", "other.pt"],
         "error: other.pt is not a checkpoint of ppo.py (it was written by dqn.py)"),
        ("ppo_continuous_action.py", ["--resume", "ppo.pt"],
         "error: ppo.pt is not a checkpoint of ppo_continuous_action.py (it was written by ppo.py)"),
        ("ppo.py", ["--resume", "ppo.pt", "--env-id", "Acrobot-v1"],
         "error: cannot change --env-id (the checkpoint has 'CartPole-v1') when resuming"),
        ("ppo.py", ["--resume", "ppo.pt", "--cudagraphs"],
         "error: cannot change --cudagraphs (the checkpoint has False) when resuming"),
        ("ppo.py", ["--resume", "finished.pt"], "error: finished.pt is the end of a finished run (global step 1024)"),
        ("ppo.py", ["--resume", "garbage.pt"], "error: cannot read checkpoint garbage.pt"),
    ],
)
def test_bad_lifecycle_input_fails_in_one_line_before_any_run_directory(workdir, script, args, message):
    ppo_args = asdict(PPOArgs())
    common = {"run_name": "x", "iteration": 8, "global_step": 1024, "finished": False, "envs": None}
    torch.save({"script": "dqn.py", "args": {}, **common}, workdir / "other.pt")
    torch.save({"script": "ppo.py", "args": ppo_args, **common}, workdir / "ppo.pt")
    torch.save({"script": "ppo.py", "args": ppo_args, **common, "finished": True}, workdir / "finished.pt")
    (workdir / "garbage.pt").write_bytes(b"not a checkpoint")
    proc = run_script(script, *args, cwd=workdir, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert run_dirs(workdir) == []


def test_find_non_finite_names_the_quantity():
    module = nn.Linear(2, 1)
    assert find_non_finite({"losses/value_loss": 1.0}, {"agent": module}) is None
    assert find_non_finite({"losses/value_loss": math.inf}, {"agent": module}) == "losses/value_loss (inf)"
    with torch.no_grad():
        module.bias.fill_(math.nan)
    assert find_non_finite({"losses/value_loss": 1.0}, {"agent": module}) == "parameter agent.bias"


def test_save_checkpoint_is_atomic(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    save_checkpoint({"global_step": 1}, path)
    with pytest.raises(Exception):
        save_checkpoint({"global_step": 2, "bad": lambda: None}, path)  # fails while writing
    assert torch.load(path, weights_only=True) == {"global_step": 1}
    save_checkpoint({"global_step": 3}, path)
    assert torch.load(path, weights_only=True) == {"global_step": 3}
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]
