"""The run lifecycle of ppo_atari.py (docs/saving-resuming.md): kill and resume, SIGTERM, non-finite stop,
evaluation of a saved model, and `--resume auto` with ALE/ ids. Every run is a real subprocess with a tiny
budget: the Nature CNN is slow on 2 CPU cores. The Atari envs' state cannot be saved, so games restart on
resume and the resumed run is not step-for-step the uninterrupted one; what must continue is the run itself
(directory, global step, learning-rate schedule, optimizer, TensorBoard log)."""

import math
import signal
from dataclasses import asdict

import pytest
import torch

pytest.importorskip("ale_py", reason="optional dependency ale-py (pip install '.[atari]') is not installed")
pytest.importorskip("cv2", reason="optional dependency opencv-python (pip install '.[atari]') is not installed")

from cleanrl.ppo_atari import Args  # noqa: E402
from tests.helpers import read_scalars, run_dirs, run_script, single_run_dir, values  # noqa: E402
from tests.test_lifecycle import load, start, wait_for_checkpoint  # noqa: E402

SCRIPT = "ppo_atari.py"
# 2 envs x 32 steps = 64 steps per iteration, 1 epoch of 2 minibatches; evaluation: one game cut at 400 frames
SMALL = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1",
         "--eval-episodes", "1", "--eval-max-frames", "400", "--no-progress"]
NOTE = "note: the environments' state cannot be saved (AtariVectorEnv is not a SyncVectorEnv); " \
       "a resumed run restarts its games"


def test_killed_and_resumed_with_the_same_command_continues_the_run_then_eval_only(workdir):
    # 10 iterations; `--resume auto` starts the run, and the same command continues it after the SIGKILL
    command = [*SMALL, "--total-timesteps", "640", "--save-model", "--checkpoint-frequency", "1", "--resume", "auto"]
    proc = start(SCRIPT, *command, cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.kill()
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    checkpoint = load(checkpoint_path)
    assert not checkpoint["finished"], "the run finished before it was killed; the test did not test a resume"
    assert checkpoint["envs"] is None and checkpoint["global_step"] == 64 * checkpoint["iteration"]

    resumed = run_script(SCRIPT, *command, cwd=workdir, timeout=300)
    assert NOTE in resumed.stdout
    assert f"after iteration {checkpoint['iteration']} (global step {checkpoint['global_step']})" in resumed.stdout
    run_dir = single_run_dir(workdir)
    assert run_dir.name == checkpoint["run_name"]
    final = load(checkpoint_path)
    assert final["finished"] and final["global_step"] == 640 and final["iteration"] == 10
    # Adam continued from the checkpoint: 10 updates x 1 epoch x 2 minibatches steps in all, not just the resumed ones
    assert {int(state["step"]) for state in final["optimizer"]["state"].values()} == {20}

    scalars = read_scalars(run_dir)
    for key in ("losses/value_loss", "losses/policy_loss", "losses/approx_kl", "charts/learning_rate"):
        # one value per update, none twice: what the killed process logged after its checkpoint was purged
        assert [s for s, _ in scalars[key]] == [64 * i for i in range(1, 11)], key
    # the annealed learning rate continues its schedule over the whole run
    assert values(scalars, "charts/learning_rate") == pytest.approx([2.5e-4 * (1 - i / 10) for i in range(10)])
    assert len(values(scalars, "eval/episodic_return")) == 1

    # --eval-only on the saved model: the run directory (its checkpoint brings the env id) and the bare
    # .cleanrl_model (evaluated on --env-id); evaluation creates no run
    by_dir = run_script(SCRIPT, "--eval-only", str(run_dir), "--eval-episodes", "2", "--eval-max-frames", "400",
                        cwd=workdir, timeout=120)
    by_file = run_script(SCRIPT, "--eval-only", str(run_dir / "ppo_atari.cleanrl_model"), "--eval-episodes", "2",
                         "--eval-max-frames", "400", cwd=workdir, timeout=120)
    line = [ln for ln in by_dir.stdout.splitlines() if ln.startswith("eval: mean return")]
    assert line and line[0].endswith("over 2 episodes of BreakoutNoFrameskip-v4"), by_dir.stdout
    mean = float(line[0].split("eval: mean return ")[1].split(" +- ")[0])
    assert 0 <= mean <= 20  # real Breakout scores of games cut at 400 frames (100 agent steps)
    # the same weights: the sampled actions come from the seeded torch generator, the eval env from seed + 10000
    assert line[0] == [ln for ln in by_file.stdout.splitlines() if ln.startswith("eval: mean return")][0]
    assert run_dirs(workdir) == [run_dir]


def test_sigterm_saves_a_loadable_checkpoint_then_a_non_finite_resume_stops_and_keeps_it(workdir):
    proc = start(SCRIPT, *SMALL, "--total-timesteps", "64000", "--save-model", "--checkpoint-frequency", "1",
                 cwd=workdir)
    checkpoint_path = wait_for_checkpoint(proc, workdir)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    checkpoint = load(checkpoint_path)  # weights_only: the whole checkpoint is plain tensors and values
    assert f"SIGTERM: stopped after global step {checkpoint['global_step']}; checkpoint saved" in stdout
    assert not checkpoint["finished"] and checkpoint["global_step"] == 64 * checkpoint["iteration"]
    assert not list(workdir.glob("runs/*/checkpoint.pt.tmp"))
    assert not list(workdir.glob("runs/*/*.cleanrl_model")), "a stopped run is not finished: no final model"
    assert read_scalars(checkpoint_path.parent)["losses/value_loss"][-1][0] == checkpoint["global_step"]

    # Poison Adam's first moment of the actor head (parameter 8, after the 4 layers of the Nature CNN): the first
    # optimizer step of the resumed run writes NaN into it, the second minibatch's losses are NaN, and the
    # end-of-update check must stop the run before the next checkpoint is written.
    checkpoint["optimizer"]["state"][8]["exp_avg"][0, 0] = math.nan
    torch.save(checkpoint, checkpoint_path)
    before = checkpoint_path.read_bytes()
    proc = run_script(SCRIPT, "--resume", str(checkpoint_path.parent), cwd=workdir, check=False, timeout=120)
    assert proc.returncode == 1
    step, iteration = checkpoint["global_step"] + 64, checkpoint["iteration"] + 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite losses/") and "(nan)" in last, proc.stderr[-3000:]
    assert f"at global step {step} (iteration {iteration}); stopped without saving" in last
    assert checkpoint_path.read_bytes() == before, "the last good checkpoint was overwritten"


def test_resume_auto_finds_the_run_of_an_ale_id(workdir):
    # run directories of ALE/ ids use "-" for "/"; `auto` must find them, else every restart would start afresh.
    # A finished run: the same command exits 0 without training again (and makes no new run).
    run_dir = workdir / "runs" / "ALE-Pong-v5__ppo_atari__1__1700000000"
    run_dir.mkdir(parents=True)
    args = {**asdict(Args()), "env_id": "ALE/Pong-v5"}
    torch.save({"script": "ppo_atari.py", "args": args, "run_name": run_dir.name, "iteration": 3,
                "global_step": 3072, "finished": True, "envs": None}, run_dir / "checkpoint.pt")
    proc = run_script(SCRIPT, "--env-id", "ALE/Pong-v5", "--resume", "auto", cwd=workdir, timeout=120)
    assert f"{run_dir.name} has already finished; nothing to resume" in proc.stdout
    assert run_dirs(workdir) == [run_dir]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resume", "ppo.pt"], "error: ppo.pt is not a checkpoint of ppo_atari.py (it was written by ppo.py)"),
        (["--eval-only", "nothing.cleanrl_model"], "error: no saved model at nothing.cleanrl_model"),
    ],
)
def test_bad_lifecycle_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    torch.save({"script": "ppo.py", "args": {}, "run_name": "x", "iteration": 1, "global_step": 64,
                "finished": False, "envs": None}, workdir / "ppo.pt")
    proc = run_script(SCRIPT, *args, cwd=workdir, check=False, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert run_dirs(workdir) == []
