"""cleanrl/ppo_atari_multigpu.py: the distributed helpers, and real torchrun runs on CPU with gloo.

Every multi-process test launches real `torchrun` (python -m torch.distributed.run) subprocesses,
bounded by `timeout`, with budgets that reach several learning updates. The Nature CNN is slow on
2 CPU cores, so the budgets are tiny (e.g. 4 envs in total, 16 steps, 2 minibatches, 2 epochs).
Its bad input and its --compile parity with two ranks are in tests/test_bad_input.py and tests/test_compile.py.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cleanrl.ppo_atari_multigpu import Args, derive_sizes, mean_over_ranks, normalize_advantages, stop_early
from runtime import torchrun_env
from tests.helpers import (
    ROOT,
    checksums,
    games_finished,
    read_scalars,
    run_script,
    script_env,
    single_run_dir,
    values,
    worker_pids,
)
from tests.scripts import MULTIGPU_TINY, PPO_LOSSES, TIMEOUT, standalone, torchrun

SCRIPT = "ppo_atari_multigpu.py"
WORKER = ROOT / "tests" / "ppo_atari_multigpu_worker.py"
# 4 envs x 16 steps = a global batch of 64; 192 steps = 3 iterations, each with 2 epochs x 2 minibatches
TINY = [*MULTIGPU_TINY, "--update-epochs", "2"]
START = re.compile(
    r"rank (\d+)/(\d+) \(node (\d+), local rank (\d+)\) on cpu with gloo: (\d+) envs, env seeds (\d+)\.\.(\d+)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the helpers in a single process (world size 1 must be the plain single-process math) ----


def test_normalize_advantages_in_one_process_is_the_plain_formula():
    adv = torch.tensor([1.0, 2.0, 3.0, 4.0])
    # mean 2.5, unbiased std sqrt((2.25 + 0.25 + 0.25 + 2.25) / 3) = sqrt(5/3) = 1.2909944
    expected = torch.tensor([-1.5, -0.5, 0.5, 1.5]) / (1.2909944 + 1e-8)
    torch.testing.assert_close(normalize_advantages(adv, world_size=1), expected)


def test_sizes_split_over_ranks():
    # the two-machine example of the docs: 32 envs on 2 x 4 ranks, 128 steps, 4 minibatches, 100M steps
    args = Args(num_envs=32, num_steps=128, num_minibatches=4, total_timesteps=100_000_000)
    # 4 envs per rank; a rank holds 4 x 128 = 512 of the global 4096; minibatch 512 / 4 = 128 per rank;
    # iterations 100M // 4096 = 24414
    assert derive_sizes(args, world_size=8) == (4, 512, 128, 24414)
    # one process: the sizes of ppo_atari.py
    assert derive_sizes(args, world_size=1) == (32, 4096, 1024, 24414)


def test_rank_comes_from_rank_not_local_rank(monkeypatch):
    # the second process on the second machine of a 2 x 4 job
    for k, v in dict(RANK="5", LOCAL_RANK="1", GROUP_RANK="1", WORLD_SIZE="8").items():
        monkeypatch.setenv(k, v)
    assert torchrun_env() == (5, 1, 1, 8)
    monkeypatch.setenv("RANK", "8")
    with pytest.raises(SystemExit, match="inconsistent"):
        torchrun_env()


def test_stop_early_and_mean_in_one_process():
    kl = torch.tensor(0.02)
    assert stop_early(kl, 0.01, world_size=1) is True
    assert stop_early(kl, 0.03, world_size=1) is False
    assert stop_early(kl, None, world_size=1) is False
    x = torch.tensor([1.0, -2.0])
    assert torch.equal(mean_over_ranks(x, world_size=1), x)


# ---- gradient equivalence: one process with the whole minibatch vs two ranks with half each ----


def test_two_ranks_with_half_the_minibatch_each_make_the_same_update_as_one_process(tmp_path):
    env = script_env()
    single = subprocess.run(
        ["timeout", str(TIMEOUT), sys.executable, str(WORKER), str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert single.returncode == 0, single.stderr[-3000:]
    double = subprocess.run(
        standalone(2) + [str(WORKER), str(tmp_path)], env=env, capture_output=True, text=True, timeout=TIMEOUT + 30
    )
    assert double.returncode == 0, double.stderr[-3000:]
    one = torch.load(tmp_path / "rank0_of1.pt")
    r0, r1 = torch.load(tmp_path / "rank0_of2.pt"), torch.load(tmp_path / "rank1_of2.pt")

    for k in range(2):
        # advantages are normalized with the statistics of the whole global minibatch, not of each half
        halves = torch.cat([r0["normalized_advantages"][k], r1["normalized_advantages"][k]])
        torch.testing.assert_close(halves, one["normalized_advantages"][k], rtol=1e-5, atol=1e-6)
        # after the all-reduce both ranks hold the same gradient, equal to the whole minibatch's gradient
        assert torch.equal(r0["grads"][k], r1["grads"][k])
        torch.testing.assert_close(r0["grads"][k], one["grads"][k], rtol=1e-4, atol=1e-6)
        # negative control: one half's own gradient is NOT the whole minibatch's (the all-reduce matters)
        assert not torch.allclose(r0["local_grads"][k], one["grads"][k], rtol=1e-2, atol=1e-4)
    # after two clipped Adam steps the parameters agree (bit-identical between the two ranks)
    assert torch.equal(r0["params"], r1["params"])
    torch.testing.assert_close(r0["params"], one["params"], rtol=1e-5, atol=1e-6)

    # collective decisions: KL 0 on rank 0 and 1 on rank 1 average to 0.5, so both ranks agree, even at
    # 0.6 where rank 1 alone would have stopped
    for r in (r0, r1):
        assert (r["stop_at_0.4"], r["stop_at_0.6"], r["stop_without_target"]) == (True, False, False)
    # episodes of both ranks reach every rank, ordered by global step
    assert r0["episodes"] == r1["episodes"] == [(90, 1.0, 2), (100, 0.0, 1)]
    assert one["episodes"] == [(100, 0.0, 1)]


# ---- one process: the same run as ppo_atari.py ----


def test_plain_python_is_ppo_atari(workdir):
    # world size 1: no process group, no collective; seeds, rollout and update are ppo_atari.py's. Both on one torch
    # thread: ppo_atari.py's default takes the free cores, and its channels-last convolutions round differently on two
    logged = []
    for script in ("ppo_atari.py", SCRIPT):
        cwd = workdir / script
        cwd.mkdir()
        run_script(script, *TINY, "--total-timesteps", "128", "--torch-threads", "1", cwd=cwd, timeout=TIMEOUT)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: [(s, v) for s, v in scalars[k]] for k in PPO_LOSSES + ("charts/learning_rate",)})
    assert logged[0] == logged[1]
    assert [s for s, _ in logged[0]["losses/policy_loss"]] == [64, 128]


# ---- end to end under torchrun ----


def test_two_ranks_end_to_end_identical_parameters_and_rank0_logs_only(workdir):
    # 1 env per rank for 5 iterations of 64 steps: long enough for random Breakout games to end on both ranks.
    # --save-model: rank 0 alone saves and evaluates (one game cut at 400 frames keeps it short)
    args = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "2"]
    args += ["--total-timesteps", "640", "--save-model", "--eval-episodes", "1", "--eval-max-frames", "400"]
    proc = run_script(SCRIPT, *args, cwd=workdir, launcher=standalone(2), timeout=TIMEOUT + 30)
    sums = checksums(proc.stdout)
    assert set(sums) == {0, 1}, proc.stdout
    assert sums[0] == sums[1], "the replicas drifted apart"
    starts = {int(m[0]): m for m in START.findall(proc.stdout)}
    assert set(starts) == {0, 1}
    # 1 env per rank, seeded 1 on rank 0 and 2 on rank 1
    assert [(starts[r][4], starts[r][5], starts[r][6]) for r in (0, 1)] == [("1", "1", "1"), ("1", "2", "2")]

    run_dir = single_run_dir(workdir)
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1, "only rank 0 may write an event file"
    scalars = read_scalars(run_dir)
    for key in PPO_LOSSES + ("charts/learning_rate", "charts/update_epochs"):
        # global steps: each iteration adds num_envs (all ranks) x num_steps = 128
        assert [s for s, _ in scalars.get(key, [])] == [128, 256, 384, 512, 640], key
    # SPS is measured from the end of the first iteration (the warm-up), which logs none
    assert [s for s, _ in scalars["charts/SPS"]] == [256, 384, 512, 640]
    assert values(scalars, "charts/update_epochs") == [2] * 5
    assert values(scalars, "charts/learning_rate") == pytest.approx([2.5e-4 * k / 5 for k in (5, 4, 3, 2, 1)])
    # rank 0 logged the games of both ranks
    games = games_finished(proc.stdout)
    assert games[0] >= 1 and games[1] >= 1, games
    assert len(values(scalars, "charts/episodic_return")) == games[0] + games[1]
    assert len(values(scalars, "charts/episodic_length")) == games[0] + games[1]
    assert len(values(scalars, "eval/episodic_return")) == 1
    assert [p.name for p in run_dir.glob("*.cleanrl_model")] == ["ppo_atari_multigpu.cleanrl_model"]


def test_early_stopping_on_target_kl_is_collective_and_does_not_hang(workdir):
    # target-kl 0 stops after the first epoch of every update (the KL after a gradient step is > 0);
    # if ranks decided alone and disagreed, one would wait forever in an all-reduce and `timeout` would kill it.
    # With --amp (bf16 forward passes, float32 losses) as well: the replicas must still stay bit-identical and
    # the losses finite (a non-finite loss would stop the run with exit 1).
    args = [*MULTIGPU_TINY, "--update-epochs", "4", "--total-timesteps", "128", "--target-kl", "0", "--amp"]
    proc = run_script(SCRIPT, *args, cwd=workdir, launcher=standalone(2), timeout=TIMEOUT + 30)
    sums = checksums(proc.stdout)
    assert set(sums) == {0, 1} and sums[0] == sums[1]
    assert values(read_scalars(single_run_dir(workdir)), "charts/update_epochs") == [1, 1]


def test_two_nodes_on_one_machine_finish_together(workdir):
    # Two torchrun agents, as on two machines: node 1's only process has LOCAL_RANK 0 but RANK 1.
    port = free_port()
    common = ["--nnodes=2", "--nproc_per_node=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
    script = [str(ROOT / "cleanrl" / SCRIPT), *TINY, "--total-timesteps", "128"]
    procs = [
        subprocess.Popen(
            torchrun(*common, f"--node-rank={node}") + script,
            cwd=workdir,
            env=script_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [p.communicate(timeout=TIMEOUT + 30) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    # rank 0 (node 0) prints the checksum line of every rank; node 1's rank prints none
    node_sums = [checksums(out) for out, _ in outputs]
    assert set(node_sums[0]) == {0, 1} and node_sums[1] == {}
    assert node_sums[0][0] == node_sums[0][1]
    start1 = START.search(outputs[1][0])
    # node 1, local rank 0, global rank 1 of 2, envs seeded 3..4 (rank 0 has 1..2)
    assert start1 and start1.groups() == ("1", "2", "1", "0", "2", "3", "4")
    scalars = read_scalars(single_run_dir(workdir))
    assert [s for s, _ in scalars["losses/policy_loss"]] == [64, 128]


def only_child(pid: int) -> int:
    """The one child process of `pid` (Linux /proc)."""
    (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)


def descendants(pid: int) -> list[int]:
    """pid and every process under it, parents first (Linux /proc)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid] + [d for child in children for d in descendants(int(child))]


def start_nodes(dirs, args) -> list[subprocess.Popen]:
    """Two torchrun agents on loopback as on two machines, each in its own working directory (no shared runs/)."""
    common = ["--nnodes=2", "--nproc_per_node=1", "--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    return [
        subprocess.Popen(
            torchrun(*common, f"--node-rank={node}") + [str(ROOT / "cleanrl" / SCRIPT), *args],
            cwd=cwd,
            env=script_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node, cwd in enumerate(dirs)
    ]


@pytest.mark.heavy
def test_two_nodes_without_a_shared_runs_directory_resume_from_node_0(tmp_path):
    # As a retried multi-node AWS Batch job: node 0 has runs/ (restored from S3), node 1 an empty directory. Rank 0
    # reads the checkpoint and broadcasts it; if rank 1 started afresh instead, its Adam state (and its iteration
    # count) would differ from rank 0's and the replicas' checksums would differ at the end (or the job would hang).
    dirs = [tmp_path / "node0", tmp_path / "node1"]
    for d in dirs:
        d.mkdir()
    iterations = 12  # 4 envs x 16 steps = 64 global steps an iteration
    args = [*TINY, "--total-timesteps", str(64 * iterations), "--save-model", "--checkpoint-frequency", "1",
            "--resume", "auto", "--eval-episodes", "1", "--eval-max-frames", "200"]
    procs = start_nodes(dirs, args)
    deadline = time.time() + TIMEOUT
    while not list(dirs[0].glob("runs/*/checkpoint.pt")):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "no checkpoint on node 0"
        time.sleep(0.05)
    # AWS Batch stops every node's container with one SIGTERM to its main process: here the torchrun agent, the child
    # of the test's `timeout` wrapper. Not the wrapper: GNU timeout passes a signal on to its child and again to its
    # whole process group, so the agent could get it twice, and a second signal stops a run at once.
    for p in procs:
        os.kill(only_child(p.pid), signal.SIGTERM)
    outputs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert "SIGTERM: stopped after global step" in outputs[0][0], outputs[0][1][-3000:]  # at its iteration's end
    assert all(p.returncode != 0 for p in procs), "a node finished its run after the signal"
    (checkpoint,) = dirs[0].glob("runs/*/checkpoint.pt")
    stopped = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert not stopped["finished"], "the run finished before the signal; the test did not test a resume"
    assert not (dirs[1] / "runs").exists()

    procs = start_nodes(dirs, args)
    outputs = [p.communicate(timeout=TIMEOUT + 30) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    assert f"resuming {checkpoint.parent.name} after iteration {stopped['iteration']}" in outputs[0][0]
    sums = checksums(outputs[0][0])
    assert set(sums) == {0, 1} and sums[0] == sums[1], "the replicas are not bit-identical"
    final = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert final["finished"] and final["global_step"] == 64 * iterations
    # Adam of the whole run on the ranks: 2 epochs x 2 minibatches a update, every update once
    assert {int(s["step"]) for s in final["optimizer"]["state"].values()} == {4 * iterations}
    assert not (dirs[1] / "runs").exists(), "a rank other than 0 wrote runs/"
    scalars = read_scalars(checkpoint.parent)
    assert [s for s, _ in scalars["losses/policy_loss"]] == [64 * i for i in range(1, iterations + 1)]


# ---- the scaling benchmark's reading of an event file ----


@pytest.mark.slow
def test_a_killed_rank_ends_the_job_instead_of_hanging(workdir):
    # kill -9 rank 1 during training: torchrun must stop rank 0 and exit non-zero, naming rank 1 as the root cause
    args = [*TINY, "--total-timesteps", "64000", "--progress-interval", "1"]
    cmd = standalone(2) + [str(ROOT / "cleanrl" / SCRIPT), *args]
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for line in proc.stdout:  # rank 0 prints a progress line (on stderr) every second; wait for the first
        if line.startswith("progress: step"):
            break

    victims = worker_pids(workdir, SCRIPT, 1)
    assert len(victims) == 1, victims
    killed_at = time.time()
    os.kill(victims[0], signal.SIGKILL)
    rest, _ = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode not in (0, 124, 137), "the job did not fail by itself"
    assert time.time() - killed_at < 120
    assert re.search(r"Root Cause.*?rank\s*: 1 \(local_rank: 1\).*?SIGKILL", rest, re.DOTALL), rest[-3000:]


# ---- elastic: a checkpoint resumes on another number of ranks ----


def run_until_stopped(workdir, launcher: list, args: list) -> tuple[str, dict]:
    """Start the run under `launcher` (torchrun), SIGTERM its agent once a checkpoint newer than any before is there;
    (the run's output, the checkpoint it stopped with)."""
    checkpoints = list(workdir.glob("runs/*/checkpoint.pt"))
    before = checkpoints[0].stat().st_mtime_ns if checkpoints else 0
    proc = subprocess.Popen(launcher + [str(ROOT / "cleanrl" / SCRIPT), *args], cwd=workdir, env=script_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + TIMEOUT
    while not [p for p in workdir.glob("runs/*/checkpoint.pt") if p.stat().st_mtime_ns > before]:
        assert time.time() < deadline and proc.poll() is None, f"no new checkpoint\n{proc.communicate()[0][-3000:]}"
        time.sleep(0.05)
    os.kill(only_child(proc.pid), signal.SIGTERM)  # the torchrun agent, which passes it on to its workers
    out, _ = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode != 0 and "SIGTERM: stopped after global step" in out, out[-3000:]
    (checkpoint,) = workdir.glob("runs/*/checkpoint.pt")
    return out, torch.load(checkpoint, map_location="cpu", weights_only=True)


@pytest.mark.heavy
def test_a_checkpoint_of_two_ranks_resumes_on_one_and_back_on_two(workdir):
    # The global batch stays (4 envs: 2 a rank, then 4, then 2); the iterations, Adam's steps and the losses logged
    # go on from the checkpoint each time, and the two replicas of the last part end bit-identical.
    iterations = 8  # 4 envs x 16 steps = 64 global steps an iteration, 2 epochs x 2 minibatches each
    args = [*TINY, "--total-timesteps", str(64 * iterations), "--save-model", "--checkpoint-frequency", "1",
            "--resume", "auto", "--eval-episodes", "1", "--eval-max-frames", "200"]
    _, first = run_until_stopped(workdir, standalone(2), args)
    out, second = run_until_stopped(workdir, standalone(1), args)
    assert "note: the checkpoint's world size was 2, this resume's is 1: 4 of the 4 envs a rank" in out, out[-3000:]
    assert first["iteration"] < second["iteration"] < iterations and len(second["rng"]) == 1
    proc = subprocess.run(standalone(2) + [str(ROOT / "cleanrl" / SCRIPT), *args], cwd=workdir, env=script_env(),
                          capture_output=True, text=True, timeout=TIMEOUT + 30)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "note: the checkpoint's world size was 1, this resume's is 2: 2 of the 4 envs a rank" in proc.stdout
    sums = checksums(proc.stdout)
    assert set(sums) == {0, 1} and sums[0] == sums[1], "the replicas are not bit-identical"
    (path,) = workdir.glob("runs/*/checkpoint.pt")
    final = torch.load(path, map_location="cpu", weights_only=True)
    assert final["finished"] and final["global_step"] == 64 * iterations and len(final["rng"]) == 2
    assert {int(s["step"]) for s in final["optimizer"]["state"].values()} == {4 * iterations}
    scalars = read_scalars(path.parent)
    assert [s for s, _ in scalars["losses/policy_loss"]] == [64 * i for i in range(1, iterations + 1)]


@pytest.mark.heavy
def test_torchrun_elastic_reforms_the_job_on_the_node_left_and_the_run_continues(workdir):
    # Two torchrun agents of one process each on one c10d rendezvous (--nnodes=1:2), as two machines sharing runs/.
    # The second agent and its worker are killed (a lost node): the first agent's worker fails in its next
    # collective, the agent restarts it, the rendezvous re-forms with the one node left, and the run goes on from its
    # last checkpoint at world size 1 to the end.
    iterations = 10
    port = free_port()
    launcher = torchrun("--nnodes=1:2", "--nproc_per_node=1", "--max-restarts=2", "--rdzv-backend=c10d",
                        f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic",
                        "--rdzv-conf=last_call_timeout=3,join_timeout=60,close_timeout=5")
    args = [*TINY, "--total-timesteps", str(64 * iterations), "--save-model", "--checkpoint-frequency", "1",
            "--resume", "auto", "--eval-episodes", "1", "--eval-max-frames", "200"]
    command = launcher + [str(ROOT / "cleanrl" / SCRIPT), *args]
    kept = subprocess.Popen(command, cwd=workdir, env=script_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + TIMEOUT
    while True:  # the first agent hosts the rendezvous store: the second starts once it listens
        assert time.time() < deadline and kept.poll() is None, "the rendezvous store did not start"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    lost = subprocess.Popen(command, cwd=workdir, env=script_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + TIMEOUT
    while not list(workdir.glob("runs/*/checkpoint.pt")):
        assert time.time() < deadline and kept.poll() is None and lost.poll() is None, "no checkpoint"
        time.sleep(0.05)
    for pid in descendants(lost.pid):  # the node is gone: its agent and its worker (a process group of its own)
        os.kill(pid, signal.SIGKILL)
    lost.wait()
    out, _ = kept.communicate(timeout=TIMEOUT + 60)
    assert kept.returncode == 0, out[-4000:]
    assert "note: the checkpoint's world size was 2, this resume's is 1" in out, out[-4000:]
    (path,) = workdir.glob("runs/*/checkpoint.pt")
    final = torch.load(path, map_location="cpu", weights_only=True)
    assert final["finished"] and final["global_step"] == 64 * iterations and len(final["rng"]) == 1
    assert {int(s["step"]) for s in final["optimizer"]["state"].values()} == {4 * iterations}
