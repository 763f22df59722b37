"""The run lifecycle of ppo_atari_multigpu.py under torchrun (docs/distributed.md, docs/saving-resuming.md):
a rank killed mid-run, `torchrun --max-restarts=1` restarting the job with the same `--resume auto` command,
and the job finishing from the last checkpoint. Real torchrun subprocesses on CPU with gloo, tiny budgets."""

import os
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

pytest.importorskip("ale_py", reason="optional dependency ale-py (pip install '.[atari]') is not installed")

from cleanrl.ppo_atari_multigpu import Args  # noqa: E402
from tests.helpers import ROOT, read_scalars, run_dirs, run_script, script_env, single_run_dir  # noqa: E402
from tests.test_lifecycle import load  # noqa: E402
from tests.test_ppo_atari_multigpu import CHECKSUM, SCRIPT, TIMEOUT, checksums, torchrun  # noqa: E402

# 2 envs in all (1 per rank) x 32 steps = 64 global steps per iteration, 20 iterations
ITERATIONS = 20
SMALL = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1",
         "--total-timesteps", str(64 * ITERATIONS), "--eval-episodes", "1", "--eval-max-frames", "400", "--no-progress"]


def worker_pids(workdir: Path, rank: int) -> list[int]:
    """The pids of this job's worker processes of the given global rank (read from /proc)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            proc_dir = Path("/proc") / pid
            environ = (proc_dir / "environ").read_bytes().split(b"\0")
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
            same_job = any(arg.endswith(SCRIPT.encode()) for arg in cmdline) and os.readlink(proc_dir / "cwd") == str(
                workdir)
        except OSError:  # gone, or not ours to read
            continue
        # the torchrun agent has no RANK variable; its workers have RANK=<global rank>
        if same_job and f"RANK={rank}".encode() in environ:
            found.append(int(pid))
    return found


def test_torchrun_restarts_a_killed_rank_and_the_job_finishes_from_the_checkpoint(workdir):
    cmd = torchrun("--standalone", "--nnodes=1", "--nproc_per_node=2", "--max-restarts=1")
    cmd += [str(ROOT / "cleanrl" / SCRIPT), *SMALL, "--save-model", "--checkpoint-frequency", "1", "--resume", "auto"]
    proc = subprocess.Popen(cmd, cwd=workdir, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.time() + TIMEOUT
    while not list(workdir.glob("runs/*/checkpoint.pt")):
        assert proc.poll() is None, f"the job ended before its first checkpoint:\n{proc.stdout.read()[-3000:]}"
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    victims = worker_pids(workdir, rank=1)
    assert len(victims) == 1, victims
    os.kill(victims[0], signal.SIGKILL)
    checkpoint_path = single_run_dir(workdir) / "checkpoint.pt"
    killed_at = load(checkpoint_path)
    assert not killed_at["finished"], "the run finished before the kill; the test did not test a restart"

    output, _ = proc.communicate(timeout=TIMEOUT + 30)
    assert proc.returncode == 0, output[-4000:]
    # torchrun restarted both ranks, and the new rank 0 continued the run from a checkpoint of the first attempt
    assert output.count("rank 1/2 (node 0, local rank 1)") == 2, output[-4000:]
    resumed = [line for line in output.splitlines() if "resuming" in line and " after iteration " in line]
    assert len(resumed) == 1, output[-4000:]
    resumed_from = int(resumed[0].split(" after iteration ")[1].split()[0])
    assert killed_at["iteration"] <= resumed_from < ITERATIONS

    run_dir = single_run_dir(workdir)  # one run directory for both attempts
    final = load(checkpoint_path)
    assert final["finished"] and final["iteration"] == ITERATIONS and final["global_step"] == 64 * ITERATIONS
    assert len(final["rng"]) == 2, "every rank's generators are saved"
    # Adam continued: 20 updates x 2 minibatches steps in all, not only the restarted job's
    assert {int(state["step"]) for state in final["optimizer"]["state"].values()} == {2 * ITERATIONS}
    scalars = read_scalars(run_dir)
    for key in ("losses/value_loss", "losses/policy_loss", "charts/learning_rate"):
        # one value per update and none twice: the killed attempt's events after the checkpoint were purged
        assert [s for s, _ in scalars[key]] == [64 * i for i in range(1, ITERATIONS + 1)], key
    assert [v for _, v in scalars["charts/learning_rate"]] == pytest.approx(
        [2.5e-4 * (1 - i / ITERATIONS) for i in range(ITERATIONS)])
    # the restarted replicas end identical; rank 0 alone saved the final model and evaluated it
    sums = checksums(output)
    assert set(sums) == {0, 1} and sums[0] == sums[1] and len(CHECKSUM.findall(output)) == 2
    assert [p.name for p in run_dir.glob("*.cleanrl_model")] == ["ppo_atari_multigpu.cleanrl_model"]
    assert len(scalars["eval/episodic_return"]) == 1


def test_a_checkpoint_resumes_only_with_its_number_of_ranks(workdir):
    # each rank takes back its own generators, so a checkpoint of 2 ranks cannot continue in 1 process
    args = asdict(Args())
    common = {"script": SCRIPT, "args": args, "run_name": "x", "iteration": 1, "global_step": 1024,
              "finished": False, "envs": [None, None], "rng": [{}, {}]}
    torch.save(common, workdir / "two_ranks.pt")
    proc = run_script(SCRIPT, "--resume", "two_ranks.pt", cwd=workdir, check=False, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: the checkpoint was written by 2 ranks; resume it with as many, not 1"], proc.stderr[-2000:]
    assert run_dirs(workdir) == []
