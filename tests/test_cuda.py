"""CUDA parity, for a GPU machine: `--compile --cudagraphs` logs the losses of the plain CUDA path, `--amp` on CUDA
stays close to float32 for the CNN scripts, and a 1-process NCCL run of ppo_atari_multigpu.py trains, plain and with
`--compile --cudagraphs` alike.

Every test skips without CUDA (CI machines have none); `python benchmark/gpu_check.py` runs them on a GPU machine
with the GPU throughput table, in about 8 minutes. The budgets are the CPU parity budgets (the compile cases of
tests/scripts.py, as tests/test_compile.py runs them). The tolerances are the CPU ones widened 10x for cuDNN's and
cuBLAS's kernel choices (other reduction orders); all the tests passed with them on an NVIDIA H200 (torch 2.11,
CUDA 13.0), SAC's after it was limited to its first update; ppg_procgen's have not run there (no envpool on that
machine), nor has DDPG's and TD3's later-update allowance since it became a fraction of the loss's spread (it was
10% of each value).
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl import sac_continuous_action, td3_continuous_action
from replay_memory import FrameReplayBuffer, frame_replay_buffer
from tests.helpers import assert_compile_parity, read_scalars, run_script, single_run_dir, values
from tests.scripts import MULTIGPU_TINY, PPO_LOSSES, needs, standalone
from tests.test_compile import CASES

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmark/gpu_check.py runs these on a GPU)"),
]

# The two runs draw the same random numbers: on CUDA inductor would draw the compiled code's samples (randn_like,
# the Gaussian policies' and TD3's noise) from its own generator, fused into its kernels, and the runs would part at
# the first sampled action; TORCHINDUCTOR_FALLBACK_RANDOM=1 has it call torch's generator as eager code does (on the
# CPU speed.speed_up sets that itself). CUDA graphs replay the default generator's draws as eager code makes them.
EQUAL_DRAWS = {"TORCHINDUCTOR_FALLBACK_RANDOM": "1"}

# every script with a CPU parity case, the row's (ppg_procgen's needs envpool, and skips where it is missing); a row
# whose runs part before their first logged update on a GPU says so (Parity.cuda_first_update_only: SAC)
CUDA_CASES = CASES


@pytest.mark.parametrize("row", CUDA_CASES)
def test_compile_cudagraphs_logs_the_losses_of_the_plain_cuda_path(row, workdir):
    # the later updates' allowance is a fraction of the loss's spread (tests/scripts.py, Parity); widened 10x like
    # the rest, as a 10x larger rounding difference at the start grows into a 10x larger one while training
    # amplifies it: at most the spread itself, the range the loss moves over the run
    case = row.compile
    assert_compile_parity(
        row.name, list(case.args), workdir, list(case.compiled), rtol=10 * case.rtol, atol=10 * case.atol,
        min_updates=case.min_updates, episodes_rtol=None, device="--cuda", flags=("--compile", "--cudagraphs"),
        first_update_only=case.cuda_first_update_only,
        later_spread=None if case.later_spread is None else min(1.0, 10 * case.later_spread),
        extra_env=EQUAL_DRAWS,
    )  # fmt: skip


@pytest.mark.parametrize("row", [c for c in CUDA_CASES if c.values[0].compile.amp is not None])
def test_amp_on_cuda_stays_close_to_float32(row, workdir):
    """bf16 autocast on CUDA: finite losses at the plain run's steps, the first update close, and moved."""
    case = row.compile
    runs = {}
    for name, extra in (("plain", []), ("amp", ["--amp"])):
        (workdir / name).mkdir()
        run_script(row.name, *case.args, *extra, "--cuda", cwd=workdir / name)
        runs[name] = read_scalars(single_run_dir(workdir / name))
    plain, amp = runs["plain"], runs["amp"]
    for key in case.amp.keys:
        assert [s for s, _ in amp[key]] == [s for s, _ in plain[key]], key
        assert all(math.isfinite(v) for v in values(amp, key)), key
        a, b = values(plain, key)[0], values(amp, key)[0]
        assert abs(a - b) <= 10 * case.amp.atol + 2 * case.amp.rtol * abs(a), f"{key}: plain {a}, --amp {b}"
    assert values(amp, case.amp.moved)[0] != values(plain, case.amp.moved)[0], "--amp changed nothing"


@needs("atari")
def test_one_process_nccl_run_trains(workdir):
    proc = run_script(
        "ppo_atari_multigpu.py", "--cuda", *MULTIGPU_TINY, "--update-epochs", "1", "--total-timesteps", "192",
        cwd=workdir, launcher=standalone(1),
    )
    assert "on cuda:0 with nccl" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    scalars = read_scalars(single_run_dir(workdir))
    for key in PPO_LOSSES:
        assert len(values(scalars, key)) == 3 and all(math.isfinite(v) or key == "losses/explained_variance" for v in values(scalars, key)), key


@needs("atari")
def test_one_process_nccl_run_with_compile_cudagraphs_logs_the_losses_of_the_plain_path(workdir):
    # the compiled functions (policy_step, grad_step, optimizer_step) leave the NCCL all-reduce between them eager;
    # one process, as one GPU allows (NCCL refuses two ranks on one device). Tolerance: the CPU two-rank one, 10x
    args = [*MULTIGPU_TINY, "--update-epochs", "1", "--total-timesteps", "192"]
    assert_compile_parity(
        "ppo_atari_multigpu.py", args, workdir, ["policy_step", "grad_step", "optimizer_step"], rtol=1e-2, atol=1e-4,
        min_updates=3, episodes_rtol=None, launcher=standalone(1), device="--cuda", flags=("--compile", "--cudagraphs"),
        extra_env=EQUAL_DRAWS,
    )


@pytest.mark.parametrize("module", [sac_continuous_action, td3_continuous_action], ids=["sac", "td3"])
def test_twin_critics_batched_on_cuda_compute_what_they_compute_one_by_one(module):
    """The scripts batch their critics on CUDA (one vmap: one batched matmul per layer for both): the same values and
    gradients as the one-by-one form the CPU runs, from the same weights."""
    torch.manual_seed(0)
    batched = module.twin_critics(17, 6, batched=True).cuda()
    one_by_one = module.twin_critics(17, 6, batched=False).cuda()
    one_by_one.load_state_dict(batched.state_dict())
    obs, act, target = (torch.randn(*shape, device="cuda") for shape in ((256, 17), (256, 6), (256,)))
    for qf in (batched, one_by_one):
        ((qf(obs, act) - target) ** 2).mean(1).sum().backward()
    torch.testing.assert_close(batched(obs, act), one_by_one(obs, act), rtol=1e-4, atol=1e-5)
    for a, b in zip(batched.parameters(), one_by_one.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_frame_memory_on_cuda_samples_what_host_memory_samples():
    """Frames in the GPU's memory (frame_replay_buffer's choice there): the same samples as frames in host memory."""
    space, actions = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(4)
    device = torch.device("cuda")
    on_gpu = frame_replay_buffer(500, space, actions, 2, device, seed=0)
    assert isinstance(on_gpu.frames, torch.Tensor) and on_gpu.frames.is_cuda
    assert on_gpu.where == f"frames in {on_gpu.frames.device} memory"
    on_host = FrameReplayBuffer(500, space, actions, 2, device, seed=0)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, (2, 4, 84, 84), dtype=np.uint8)
    for _ in range(300):
        nxt = np.concatenate([obs[:, 1:], rng.integers(0, 255, (2, 1, 84, 84), dtype=np.uint8)], axis=1)
        act, rew, term = rng.integers(0, 4, 2), rng.normal(size=2).astype(np.float32), rng.random(2) < 0.02
        for rb in (on_gpu, on_host):
            rb.add(obs, nxt, act, rew, term.astype(np.float32))
        obs = np.where(term[:, None, None, None], rng.integers(0, 255, (2, 4, 84, 84), dtype=np.uint8), nxt)
    for _ in range(3):
        for a, b in zip(on_gpu.sample(32), on_host.sample(32)):
            assert a.is_cuda and b.is_cuda and torch.equal(a, b)
