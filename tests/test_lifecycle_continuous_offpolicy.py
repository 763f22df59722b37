"""The run lifecycle of the off-policy continuous scripts (ddpg_continuous_action.py, td3_continuous_action.py,
sac_continuous_action.py): checkpoints with the target networks, optimizers, SAC's log-alpha, the replay memory's
Generator and optionally the memory itself; kill and resume, signals, evaluation and the non-finite stop
(docs/saving-resuming.md). Every run is a real subprocess."""

import math
import os
import pty
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers import ROOT, read_scalars, run_dirs, run_script, script_env, single_run_dir
from tests.test_lifecycle import kill_after_first_checkpoint, load, start, wait_for_checkpoint

# Pendulum-v1, 600 steps (3 truncated episodes of 200), learning from step 201: 400 gradient steps, losses logged
# every 100 steps (300, 400, 500, 600), a checkpoint every 50 gradient steps with the flags below.
PENDULUM_SMALL = ["--env-id", "Pendulum-v1", "--total-timesteps", "600", "--learning-starts", "200",
                  "--batch-size", "32", "--buffer-size", "1000", "--eval-episodes", "1", "--no-progress"]
SAC_NETWORKS = ["actor", "qf1", "qf2", "qf1_target", "qf2_target"]
SAC_LOSSES = ["losses/qf1_loss", "losses/qf2_loss", "losses/qf_loss", "losses/actor_loss", "losses/alpha",
              "losses/alpha_loss", "losses/qf1_values"]


def test_sac_killed_and_resumed_with_buffer_equals_an_uninterrupted_run(workdir):
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    command = [*PENDULUM_SMALL, "--save-model", "--save-buffer", "--checkpoint-frequency", "50", "--resume", "auto"]
    run_script("sac_continuous_action.py", *command, cwd=workdir / "a")
    # the same command starts the run and, after the SIGKILL, resumes it (what an automatic restart does)
    checkpoint = kill_after_first_checkpoint("sac_continuous_action.py", command, workdir / "b")
    assert checkpoint["envs"] is not None, "Pendulum's state is saved like CartPole's"
    assert checkpoint["replay_buffer"] is not None and checkpoint["updates"] % 50 == 0 and checkpoint["updates"] > 0
    assert checkpoint["global_step"] == 200 + checkpoint["updates"]
    proc = run_script("sac_continuous_action.py", *command, cwd=workdir / "b")
    assert f"after iteration {checkpoint['iteration']} (global step {checkpoint['global_step']})" in proc.stdout
    resumed = single_run_dir(workdir / "b")
    assert resumed.name == checkpoint["run_name"]

    uninterrupted = single_run_dir(workdir / "a")
    a, b = load(uninterrupted / "checkpoint.pt"), load(resumed / "checkpoint.pt")
    assert a["finished"] and b["finished"] and a["global_step"] == b["global_step"] == 600
    assert a["updates"] == b["updates"] == 400
    for key in SAC_NETWORKS:
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), f"{key}.{name}"
    assert torch.equal(a["log_alpha"], b["log_alpha"]) and not torch.equal(a["log_alpha"], torch.zeros(1))
    for key in ("q_optimizer", "actor_optimizer", "a_optimizer"):
        for index, state in a[key]["state"].items():
            assert torch.equal(state["exp_avg_sq"], b[key]["state"][index]["exp_avg_sq"]), key
    assert a["buffer_rng"] == b["buffer_rng"]
    scalars_a, scalars_b = read_scalars(uninterrupted), read_scalars(resumed)
    for key in [*SAC_LOSSES, "charts/episodic_return"]:
        # steps and values equal: the killed process's events after its checkpoint were purged
        assert scalars_a[key] == scalars_b[key], key
    assert [s for s, _ in scalars_b["losses/qf_loss"]] == [300, 400, 500, 600]
    assert [s for s, _ in scalars_b["charts/episodic_return"]] == [200, 400, 600]
    again = run_script("sac_continuous_action.py", *command, cwd=workdir / "b")
    assert f"{resumed.name} has already finished; nothing to resume" in again.stdout

    # --eval-only on the finished run: by its directory (the checkpoint names the env) and by the bare model
    by_dir = run_script("sac_continuous_action.py", "--eval-only", str(resumed), "--eval-episodes", "2",
                        cwd=workdir / "b")
    by_file = run_script("sac_continuous_action.py", "--eval-only",
                         str(resumed / "sac_continuous_action.cleanrl_model"), "--env-id", "Pendulum-v1",
                         "--eval-episodes", "2", cwd=workdir / "b")
    line = [ln for ln in by_dir.stdout.splitlines() if ln.startswith("eval: mean return")]
    assert line and line[0].endswith("over 2 episodes of Pendulum-v1")
    mean = float(line[0].split("eval: mean return ")[1].split(" +- ")[0])
    assert -3300 < mean <= 0
    # the deterministic actor and the seeded evaluation envs give the same episodes
    assert line[0] == [ln for ln in by_file.stdout.splitlines() if ln.startswith("eval: mean return")][0]
    assert run_dirs(workdir / "b") == [resumed], "evaluation must not create a run"


def test_sac_sigterm_saves_a_loadable_checkpoint_and_exits_0(workdir):
    proc = start("sac_continuous_action.py", *PENDULUM_SMALL[:-1], "--total-timesteps", "100000", "--save-model",
                 "--checkpoint-frequency", "20", "--no-progress", cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    checkpoint = load(checkpoint_path)  # weights_only: the whole checkpoint is plain tensors and values
    stopped_at = checkpoint["global_step"]
    assert f"SIGTERM: stopped after global step {stopped_at}; checkpoint saved" in stdout
    assert not checkpoint["finished"] and checkpoint["replay_buffer"] is None and checkpoint["updates"] >= 20
    assert checkpoint["updates"] == stopped_at - 200 and checkpoint["log_alpha"].shape == (1,)
    assert checkpoint["a_optimizer"]["state"], "the temperature's optimizer has taken steps"
    assert not list(workdir.glob("runs/*/checkpoint.pt.tmp")) and not list(workdir.glob("runs/*/*.cleanrl_model"))


@pytest.mark.parametrize("script", ["td3_continuous_action.py", "ddpg_continuous_action.py"])
def test_killed_and_resumed_smoke(workdir, script):
    # td3 with the replay memory (learning goes on at once, and the end equals an uninterrupted run's); ddpg
    # without it (the memory refills first)
    with_buffer = script == "td3_continuous_action.py"
    command = [*PENDULUM_SMALL, "--save-model", "--checkpoint-frequency", "50", "--resume", "auto"]
    command += ["--save-buffer"] if with_buffer else []
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    checkpoint = kill_after_first_checkpoint(script, command, workdir / "b")
    assert checkpoint["envs"] is not None and (checkpoint["replay_buffer"] is not None) == with_buffer
    stopped_at = checkpoint["global_step"]
    proc = run_script(script, *command, cwd=workdir / "b")
    assert f"(global step {stopped_at})" in proc.stdout
    run_dir = single_run_dir(workdir / "b")
    final = load(run_dir / "checkpoint.pt")
    assert final["finished"] and final["global_step"] == 600
    steps = [s for s, _ in read_scalars(run_dir)["losses/qf1_loss"]]
    assert steps == sorted(set(steps)), "no duplicate steps after the purge"
    if with_buffer:
        assert final["updates"] == 400 and steps == [300, 400, 500, 600]
        run_script(script, *command, cwd=workdir / "a")
        uninterrupted = load(single_run_dir(workdir / "a") / "checkpoint.pt")
        for key in ("actor", "qf1", "qf2", "target_actor", "qf1_target", "qf2_target"):
            for name, tensor in uninterrupted[key].items():
                assert torch.equal(tensor, final[key][name]), f"{key}.{name}"
    else:
        assert f"learning resumes after global step {stopped_at + 200}" in proc.stdout
        assert final["updates"] == 400 - 200
        assert [s for s in steps if s > stopped_at] and all(s > stopped_at + 200 for s in steps if s > stopped_at)
    assert (run_dir / script.replace(".py", ".cleanrl_model")).exists()


def test_sac_halfcheetah_sigint_then_resume_restarts_episodes(workdir):
    pytest.importorskip("mujoco", reason="optional dependency mujoco is not installed")
    command = ["--env-id", "HalfCheetah-v5", "--total-timesteps", "100000", "--learning-starts", "100",
               "--batch-size", "32", "--buffer-size", "1000", "--save-model", "--checkpoint-frequency", "20",
               "--no-progress"]
    proc = start("sac_continuous_action.py", *command, cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert "the environments' state cannot be saved (HalfCheetahEnv pickles by re-construction" in stdout
    first = load(checkpoint_path)
    assert f"SIGINT: stopped after global step {first['global_step']}; checkpoint saved" in stdout
    assert first["envs"] is None and first["updates"] >= 20
    # resume (episodes restart from a fresh reset), then stop again once 20 more gradient steps are checkpointed
    proc = start("sac_continuous_action.py", "--resume", "auto", *command, cwd=workdir)
    deadline = time.time() + 120
    while time.time() < deadline and load(checkpoint_path)["updates"] < first["updates"] + 20:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert f"after iteration {first['iteration']} (global step {first['global_step']})" in stdout
    second = load(checkpoint_path)
    # the replay memory was not saved, so learning waited for --learning-starts new steps
    assert second["global_step"] >= first["global_step"] + 100 + 20
    assert second["updates"] == first["updates"] + second["global_step"] - first["global_step"] - 100
    assert len(run_dirs(workdir)) == 1


def test_sac_non_finite_stops_naming_step_and_quantity_and_keeps_the_checkpoint(workdir):
    command = [*PENDULUM_SMALL, "--save-model", "--save-buffer", "--checkpoint-frequency", "50"]
    checkpoint = kill_after_first_checkpoint("sac_continuous_action.py", command, workdir)
    checkpoint_path = single_run_dir(workdir) / "checkpoint.pt"
    # Poison Adam's first moment of qf1's first layer: the next gradient step writes NaN into the critic
    checkpoint["q_optimizer"]["state"][0]["exp_avg"][0, 0] = math.nan
    torch.save(checkpoint, checkpoint_path)
    before = checkpoint_path.read_bytes()
    proc = run_script("sac_continuous_action.py", "--resume", str(checkpoint_path.parent), cwd=workdir, check=False)
    assert proc.returncode == 1
    # found at the next logging step (every 100) or before the next save (50 updates later), whichever comes first
    g = checkpoint["global_step"]
    step = min((g // 100 + 1) * 100, g + 50)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite ") and f"at global step {step} (gradient update {step - 200})" in last, (
        proc.stderr[-3000:])
    assert "stopped without saving, so the last good checkpoint is kept" in last
    assert checkpoint_path.read_bytes() == before
    assert not list(workdir.glob("runs/*/*.cleanrl_model"))


@pytest.mark.parametrize("script", ["sac_continuous_action.py", "td3_continuous_action.py",
                                    "ddpg_continuous_action.py"])
def test_save_buffer_needs_save_model(workdir, script):
    proc = run_script(script, "--env-id", "Pendulum-v1", "--save-buffer", cwd=workdir, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: --save-buffer puts the replay memory into checkpoints, which needs --save-model"]
    assert run_dirs(workdir) == []


def test_sac_progress_line_only_on_a_terminal(workdir):
    args = [str(ROOT / "cleanrl" / "sac_continuous_action.py"), "--env-id", "Pendulum-v1", "--total-timesteps", "250",
            "--learning-starts", "200", "--batch-size", "32", "--buffer-size", "1000"]

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
    # one episode (200 steps) has ended by the last draw, so its return is shown
    assert "\r250/250 steps (100%) |" in shown and " SPS | return -" in shown, shown[-500:]
    assert "steps (" not in stderr_on_a_terminal("--no-progress")
