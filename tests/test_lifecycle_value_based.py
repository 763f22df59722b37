"""The run lifecycle of the value-based scripts (dqn.py, c51.py, dqn_atari.py, c51_atari.py): checkpoints with the
target network, the Generators and optionally the replay memory, kill and resume, signals, evaluation and the
non-finite stop (docs/saving-resuming.md). Every run is a real subprocess."""

import json
import math
import os
import pty
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete

from runtime import ReplayBuffer, load_state_of, state_of
from tests.helpers import ROOT, read_scalars, run_dirs, run_script, script_env, single_run_dir
from tests.test_lifecycle import kill_after_first_checkpoint, load, start, wait_for_checkpoint

# CartPole, 2000 steps, learning from step 501 with a gradient step every 10 steps (150 updates, losses logged
# every 100 steps), target updates every 500 steps, a checkpoint every 10 updates; several episodes end.
CARTPOLE_SMALL = ["--total-timesteps", "2000", "--learning-starts", "500", "--batch-size", "32",
                  "--target-network-frequency", "500", "--eval-episodes", "1", "--no-progress"]
# Atari with a tiny memory: 400 steps, learning from step 101, a gradient step every 4 steps (75 updates)
ATARI_SMALL = ["--env-id", "BreakoutNoFrameskip-v4", "--total-timesteps", "400", "--buffer-size", "300",
               "--learning-starts", "100", "--batch-size", "8", "--train-frequency", "4",
               "--target-network-frequency", "100", "--eval-episodes", "1", "--eval-max-frames", "2000",
               "--no-progress"]
LOSS_KEYS = {"dqn.py": ["losses/td_loss", "losses/q_values"], "c51.py": ["losses/loss", "losses/q_values"]}


def test_generator_and_buffer_state_round_trip():
    rng = np.random.default_rng(7)
    rng.random(3)
    state = state_of(rng)
    assert isinstance(state, str)  # JSON text: weights_only-safe, and PCG64's 128-bit integers survive
    expected = rng.integers(0, 1000, size=5)
    other = np.random.default_rng(0)
    load_state_of(other, json.loads(json.dumps(state)))
    assert (other.integers(0, 1000, size=5) == expected).all()

    space = Box(-1, 1, (2,), np.float32)
    rb = ReplayBuffer(4, space, Discrete(3), torch.device("cpu"), seed=1)
    for k in range(5):  # wraps: pos 1, full
        rb.add(np.full((1, 2), k, np.float32), np.full((1, 2), k + 1, np.float32), np.array([k % 3]),
               np.array([float(k)]), np.array([0.0]))
    saved = rb.state_dict()
    assert saved["pos"] == 1 and saved["full"] is True and saved["observations"][0, 0].item() == 4.0
    copy = ReplayBuffer(4, space, Discrete(3), torch.device("cpu"), seed=1)
    copy.load_state_dict(torch.load(_roundtrip(saved), weights_only=True))
    assert copy.pos == 1 and copy.full and len(copy) == 4
    for name in ("observations", "next_observations", "actions", "rewards", "terminations"):
        assert (getattr(copy, name) == getattr(rb, name)).all(), name


def _roundtrip(obj):
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def assert_same_run(uninterrupted, resumed, network_keys, loss_keys):
    a, b = load(uninterrupted / "checkpoint.pt"), load(resumed / "checkpoint.pt")
    assert a["finished"] and b["finished"] and a["global_step"] == b["global_step"] == 2000
    assert a["updates"] == b["updates"] == 150 and a["target_updates"] == b["target_updates"]
    for key in network_keys:
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), f"{key}.{name}"
    scalars_a, scalars_b = read_scalars(uninterrupted), read_scalars(resumed)
    for key in [*loss_keys, "charts/episodic_return", "charts/epsilon", "charts/target_updates"]:
        # steps and values equal: the killed process's events after its checkpoint were purged
        assert scalars_a[key] == scalars_b[key], key
    assert [s for s, _ in scalars_b[loss_keys[0]]] == list(range(600, 2001, 100))


@pytest.mark.parametrize("script", ["dqn.py", "c51.py"])
def test_killed_and_resumed_with_buffer_equals_an_uninterrupted_run(workdir, script):
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    run_script(script, *CARTPOLE_SMALL, "--save-model", "--save-buffer", cwd=workdir / "a")
    # the same command starts the run and, after the SIGKILL, resumes it (what an automatic restart does)
    command = [*CARTPOLE_SMALL, "--save-model", "--save-buffer", "--checkpoint-frequency", "10", "--resume", "auto"]
    checkpoint = kill_after_first_checkpoint(script, command, workdir / "b")
    assert checkpoint["envs"] is not None and checkpoint["replay_buffer"] is not None
    assert checkpoint["updates"] % 10 == 0 and checkpoint["updates"] > 0
    proc = run_script(script, *command, cwd=workdir / "b")
    assert f"after iteration {checkpoint['iteration']} (global step {checkpoint['global_step']})" in proc.stdout
    resumed = single_run_dir(workdir / "b")
    assert resumed.name == checkpoint["run_name"]
    assert_same_run(single_run_dir(workdir / "a"), resumed, ["q_network", "target_network"], LOSS_KEYS[script])
    a, b = load(single_run_dir(workdir / "a") / "checkpoint.pt"), load(resumed / "checkpoint.pt")
    assert a["action_rng"] == b["action_rng"] and a["buffer_rng"] == b["buffer_rng"]
    again = run_script(script, *command, cwd=workdir / "b")
    assert f"{resumed.name} has already finished; nothing to resume" in again.stdout


def test_dqn_sigterm_then_resume_without_buffer_refills_the_memory(workdir):
    proc = start("dqn.py", "--total-timesteps", "200000", "--learning-starts", "500", "--batch-size", "32",
                 "--save-model", "--checkpoint-frequency", "10", "--no-progress", cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    checkpoint = load(checkpoint_path)  # weights_only: the whole checkpoint is plain tensors and values
    stopped_at = checkpoint["global_step"]
    assert f"SIGTERM: stopped after global step {stopped_at}; checkpoint saved" in stdout
    assert not checkpoint["finished"] and checkpoint["replay_buffer"] is None and checkpoint["updates"] >= 10
    assert checkpoint["global_step"] == checkpoint["iteration"] and 510 <= stopped_at < 200000
    assert not list(workdir.glob("runs/*/checkpoint.pt.tmp")) and not list(workdir.glob("runs/*/*.cleanrl_model"))
    before = read_scalars(checkpoint_path.parent)["losses/td_loss"]
    assert before[-1][0] <= stopped_at

    # resume without a replay memory: learning waits until the memory has refilled for --learning-starts steps;
    # stop again with SIGTERM once 5 more gradient steps have been checkpointed
    proc = start("dqn.py", "--resume", str(checkpoint_path.parent), "--checkpoint-frequency", "5", "--no-progress",
                 cwd=workdir)
    deadline = time.time() + 120
    while time.time() < deadline and load(checkpoint_path)["updates"] < checkpoint["updates"] + 5:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert f"learning resumes after global step {stopped_at + 500}" in stdout
    after = load(checkpoint_path)
    assert after["updates"] >= checkpoint["updates"] + 5
    losses = read_scalars(checkpoint_path.parent)["losses/td_loss"]
    resumed_steps = [s for s, _ in losses if s > stopped_at]
    assert resumed_steps and min(resumed_steps) > stopped_at + 500  # no gradient step while the memory refilled
    assert len(run_dirs(workdir)) == 1


def test_eval_only_on_a_saved_dqn(workdir):
    run_script("dqn.py", "--total-timesteps", "300", "--learning-starts", "100", "--batch-size", "16",
               "--save-model", "--eval-episodes", "1", cwd=workdir)
    run_dir = single_run_dir(workdir)
    by_dir = run_script("dqn.py", "--eval-only", str(run_dir), "--eval-episodes", "3", cwd=workdir)
    by_file = run_script("dqn.py", "--eval-only", str(run_dir / "dqn.cleanrl_model"), "--eval-episodes", "3",
                         cwd=workdir)
    line = [ln for ln in by_dir.stdout.splitlines() if ln.startswith("eval: mean return")]
    assert line and line[0].endswith("over 3 episodes of CartPole-v1")
    # the evaluation's epsilon-greedy Generator and envs are seeded, so both give the same episodes
    assert line[0] == next(ln for ln in by_file.stdout.splitlines() if ln.startswith("eval: mean return"))
    assert run_dirs(workdir) == [run_dir], "evaluation must not create a run"
    wrong = run_script("c51.py", "--eval-only", str(run_dir), cwd=workdir, check=False)
    assert wrong.returncode == 1 and "is not a checkpoint of c51.py (it was written by dqn.py)" in wrong.stderr


def test_dqn_non_finite_stops_naming_step_and_quantity_and_keeps_the_checkpoint(workdir):
    command = [*CARTPOLE_SMALL, "--save-model", "--checkpoint-frequency", "10"]
    checkpoint = kill_after_first_checkpoint("dqn.py", command, workdir)
    checkpoint_path = single_run_dir(workdir) / "checkpoint.pt"
    # Poison Adam's first moment of the first layer's weight: the next gradient step writes NaN into the network
    checkpoint["optimizer"]["state"][0]["exp_avg"][0, 0] = math.nan
    torch.save(checkpoint, checkpoint_path)
    before = checkpoint_path.read_bytes()
    proc = run_script("dqn.py", "--resume", str(checkpoint_path.parent), cwd=workdir, check=False)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite ") and "at global step " in last, proc.stderr[-3000:]
    assert "stopped without saving, so the last good checkpoint is kept" in last
    assert checkpoint_path.read_bytes() == before


@pytest.mark.parametrize("script", ["dqn_atari.py", "c51_atari.py"])
def test_atari_killed_and_resumed_with_the_frame_memory(workdir, script):
    pytest.importorskip("ale_py", reason="optional dependency ale-py is not installed")
    command = [*ATARI_SMALL, "--save-model", "--save-buffer", "--checkpoint-frequency", "25", "--resume", "auto"]
    checkpoint = kill_after_first_checkpoint(script, command, workdir)
    # the games' state is not saved; the frame memory is, with its bookkeeping and its sampling Generator
    assert checkpoint["envs"] is None and checkpoint["updates"] == 25 and checkpoint["global_step"] == 200
    memory = checkpoint["replay_buffer"]
    assert memory["frames"].dtype == torch.uint8 and memory["written"].sum().item() >= 200
    proc = run_script(script, *command, cwd=workdir)
    assert "the environments' state cannot be saved" in proc.stdout
    assert "after iteration 200 (global step 200)" in proc.stdout
    run_dir = single_run_dir(workdir)
    assert run_dir.name == checkpoint["run_name"]
    final = load(run_dir / "checkpoint.pt")
    # the memory came back, so learning went on at once: (400 - 100) / 4 gradient steps over the whole run
    assert final["finished"] and final["global_step"] == 400 and final["updates"] == 75
    loss_key = "losses/td_loss" if script == "dqn_atari.py" else "losses/loss"
    assert [s for s, _ in read_scalars(run_dir)[loss_key]] == [200, 300, 400]
    assert (run_dir / script.replace(".py", ".cleanrl_model")).exists()
    if script == "dqn_atari.py":
        evaluated = run_script(script, "--eval-only", str(run_dir), "--eval-episodes", "1", "--eval-max-frames",
                               "2000", cwd=workdir)
        assert "over 1 episodes of BreakoutNoFrameskip-v4" in evaluated.stdout
        assert run_dirs(workdir) == [run_dir]


def test_dqn_progress_line_only_on_a_terminal(workdir):
    args = [str(ROOT / "cleanrl" / "dqn.py"), "--total-timesteps", "300", "--learning-starts", "100", "--batch-size",
            "16"]

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
    assert "\r300/300 steps (100%) |" in shown and " SPS | return " in shown
    assert "steps (" not in stderr_on_a_terminal("--no-progress")


SAVE_BUFFER_ERROR = "error: --save-buffer puts the replay memory into checkpoints, which needs --save-model"


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("dqn.py", ["--save-buffer"], SAVE_BUFFER_ERROR),
        ("dqn_atari.py", ["--save-buffer"], SAVE_BUFFER_ERROR),
        ("c51_atari.py", ["--resume", "runs/nowhere"], "error: no checkpoint at runs/nowhere"),
    ],
)
def test_bad_lifecycle_input_fails_in_one_line_before_any_run_directory(workdir, script, args, message):
    proc = run_script(script, *args, cwd=workdir, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr[-2000:]
    assert not (workdir / "runs").exists()


def test_resume_refuses_to_change_the_run(workdir):
    run_script("dqn.py", "--total-timesteps", "300", "--learning-starts", "100", "--batch-size", "16", "--save-model",
               "--save-buffer", "--eval-episodes", "1", "--no-progress", cwd=workdir)
    run_dir = single_run_dir(workdir)
    checkpoint = load(run_dir / "checkpoint.pt")
    assert checkpoint["finished"] and checkpoint["replay_buffer"]["pos"] == 300
    checkpoint["finished"] = False  # as if stopped at the end
    torch.save(checkpoint, run_dir / "checkpoint.pt")
    proc = run_script("dqn.py", "--resume", str(run_dir), "--seed", "2", "--learning-rate", "0.1", cwd=workdir,
                      check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == ("error: cannot change --seed (the checkpoint has 1), "
                                                    "--learning-rate (the checkpoint has 0.00025) when resuming")
