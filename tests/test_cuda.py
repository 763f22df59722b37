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

import pytest
import torch

from tests.helpers import assert_compile_parity, read_scalars, run_script, single_run_dir, values
from tests.scripts import MULTIGPU_TINY, PPO_LOSSES, needs, standalone
from tests.test_compile import CASES

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmark/gpu_check.py runs these on a GPU)"),
]

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
    )
