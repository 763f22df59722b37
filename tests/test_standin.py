"""The GPU code path on the CPU, through tests/standin.py's stand-in for the CUDA-graph recorder (issue 56).

Every script with the speed flags runs its GPU path (device replay memories, frames in device memory, batched
critics, pinned staging, the pipelined rollout) with `--compile --cudagraphs` through the stand-in, and plainly on the
same path. The recorded run must log the plain run's losses within the row's compile tolerance (its replays overwrite
the outputs a caller kept, as on a GPU: a script that keeps one past the next replay logs something else), record
every function the row names, and make no dynamo compilation and no host read while recording, nor a compilation
when replaying (on a GPU the first fails the capture, the second replays a stale graph). The stand-in itself is
checked by the recorder's old bug put back (--warm-up-on-arguments), on overlapping views as dqn_atari's update gets.
--amp is checked on the same path against the plain run (finite, close, and moved). SAC's and TD3's steps make at
most 10 torch calls outside their recorded functions (device work: each is a launch or a
copy on a GPU), counted by tests/census.py on the same path.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import speed
from tests.helpers import (ROOT, assert_compile_parity, assert_losses_close, read_scalars, run_script,
                           single_run_dir, values)
from tests.scripts import MULTIGPU_TINY, PARITY_PENDULUM_OFF, names, needs, script_params
from tests.standin import StandIn

STANDIN = ROOT / "tests" / "standin.py"
REPORT = "standin.json"
CASES = script_params(names(lambda row: row.compile))


def standin(*options: str) -> list[str]:
    """The launcher that runs a script through the stand-in, writing its report to the run's folder."""
    return [sys.executable, str(STANDIN), *options, REPORT]


def recordings(cwd: Path) -> list[dict]:
    return json.loads((Path(cwd) / REPORT).read_text())["recordings"]


def assert_clean_recordings(report: list[dict], functions) -> None:
    recorded = {r["function"] for r in report if r["replays"] > 0}
    assert set(functions) <= recorded, f"not recorded and replayed: {sorted(set(functions) - recorded)}: {report}"
    for r in report:
        problems = {k: r[k] for k in ("compiles_at_record", "host_reads_at_record", "compiles_at_replay") if r[k]}
        assert not problems, f"{r['function']} {r['key']}: {problems}"


@pytest.mark.heavy
@pytest.mark.parametrize("row", CASES)
def test_recorded_gpu_path_logs_the_plain_gpu_paths_losses_and_records_cleanly(row, workdir):
    case = row.compile
    plain = assert_compile_parity(
        row.name, list(case.args), workdir, list(case.compiled), rtol=case.rtol, atol=case.atol,
        min_updates=case.min_updates, episodes_rtol=case.episodes_rtol, later_spread=case.later_spread,
        launcher=standin(), flags=("--compile", "--cudagraphs"),
    )  # fmt: skip
    assert_clean_recordings(recordings(workdir / "compiled"), case.compiled)
    assert not recordings(workdir / "plain"), "the plain run recorded"
    losses = sorted(k for k in plain if k.startswith("losses/"))
    for key in losses:
        assert [step for step, _ in plain[key]] == list(case.loss_steps), key
    if case.episodes is not None:
        assert len(values(plain, "charts/episodic_return")) == case.episodes
    for key in case.first_above_zero:
        assert values(plain, key)[0] > 0, key
    if case.amp is not None:  # --amp (bf16 forward passes): finite losses close to the plain path's, and moved
        assert_amp_close_to(plain, row, losses, workdir / "amp")


def assert_amp_close_to(plain: dict, row, losses: list, cwd: Path) -> None:
    amp_cfg, case = row.compile.amp, row.compile
    cwd.mkdir()
    run_script(row.name, *case.args, "--amp", "--no-cuda", cwd=cwd, launcher=standin())
    amp = read_scalars(single_run_dir(cwd))
    for key in losses:
        assert [step for step, _ in amp[key]] == [step for step, _ in plain[key]], key
        assert all(math.isfinite(v) for v in values(amp, key)), key
    if amp_cfg.first_update_only:
        for key in amp_cfg.keys:
            a, b = values(plain, key)[0], values(amp, key)[0]
            assert abs(a - b) <= amp_cfg.atol + amp_cfg.rtol * abs(a), f"{key}: plain {a}, --amp {b}"
        assert values(amp, amp_cfg.moved)[0] != values(plain, amp_cfg.moved)[0]
    else:
        assert_losses_close(plain, amp, amp_cfg.keys, rtol=amp_cfg.rtol, atol=amp_cfg.atol)
        assert values(amp, amp_cfg.moved) != values(plain, amp_cfg.moved)


@pytest.mark.heavy
@needs("atari")
def test_multigpu_script_records_cleanly_in_one_process(workdir):
    args = [*MULTIGPU_TINY, "--update-epochs", "1", "--total-timesteps", "192", "--compile", "--cudagraphs"]
    run_script("ppo_atari_multigpu.py", *args, cwd=workdir, launcher=standin())
    assert_clean_recordings(recordings(workdir), ("policy_step", "grad_step", "optimizer_step"))


def test_the_stand_in_catches_the_recorders_old_recompilation_at_recording(monkeypatch):
    """dqn_atari's update takes a sample's observations and next observations as overlapping views of one window of
    frames. The recorder as it was (tests/standin.py's WarmUpOnArguments: warm-ups on those views, recording on
    contiguous copies) makes a compiled function recompile at recording, which fails a CUDA capture; the stand-in
    must see it (by the same run of dqn_atari.py: 2 compilations at recording, and host reads inside them), and the
    recorder as it is must not."""
    monkeypatch.setattr(speed, "GPU_PATH_ON_CPU", True)
    standin_module = sys.modules[StandIn.__module__]
    torch._dynamo.reset()
    found = {}
    for recorder in (standin_module.WarmUpOnArguments, StandIn):
        monkeypatch.setattr(standin_module, "RECORDINGS", [])
        torch._dynamo.callback_handler.register_start_callback(standin_module.COUNTS.compiled)

        def td_error(obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
            return (next_obs.float().mean((1, 2, 3)) - obs.float().mean((1, 2, 3))).abs()

        update = recorder(torch.compile(td_error))
        for step in range(6):
            window = torch.randint(0, 255, (8, 5, 12, 12), dtype=torch.uint8)
            out = update(window[:, :-1], window[:, 1:])
            assert torch.allclose(out, td_error(window[:, :-1], window[:, 1:])), (recorder.__name__, step)
        found[recorder.__name__] = standin_module.RECORDINGS[0]["compiles_at_record"]
        torch._dynamo.callback_handler.remove_start_callback(standin_module.COUNTS.compiled)
        torch._dynamo.reset()
    assert found["WarmUpOnArguments"] > 0 and found["StandIn"] == 0, found


@pytest.mark.parametrize("script", ["sac_continuous_action.py", "td3_continuous_action.py"])
def test_a_sac_or_td3_step_makes_at_most_10_torch_calls_outside_its_recordings(script, workdir):
    # learning from step 101 of 400: the recordings are made by step 104; steps 300-399 are counted (one of them
    # logs the losses)
    run_script(script, *PARITY_PENDULUM_OFF, "--cudagraphs", cwd=workdir, launcher=standin("--census"))
    report = json.loads((workdir / REPORT).read_text())
    calls = [report["calls_per_step"].get(str(step), 0) for step in range(300, 400)]
    replays = [report["replays_per_step"].get(str(step), 0) for step in range(300, 400)]
    per_step = sum(calls) / len(calls)
    sites = "\n".join(f"{n:6}  {site}" for site, n in report["call_sites"].items())
    assert per_step <= 10, f"{per_step} torch calls per step outside the recordings; over the run:\n{sites}"
    assert sum(replays) / len(replays) >= 2, "the step's policy and critic updates were not replayed"


def test_the_recorder_calls_its_function_on_the_same_tensors_from_the_first_call_on():
    """Warm-ups, recording and replays all read the recording's static inputs, whatever layout the caller's tensors
    have (overlapping views of one window, as dqn_atari's frame stacks); a non-tensor argument gets a recording of its
    own; a replay returns the recorded outputs, which the next replay overwrites."""
    seen = []

    def double(x: torch.Tensor, scale: bool) -> torch.Tensor:
        seen.append(x)
        return x * (2 if scale else 1)

    recorder = StandIn(double)
    results = []
    for i in range(7):
        window = torch.arange(30.0).reshape(3, 10) + i
        out = recorder(window[:, :-1], True)
        assert torch.equal(out, 2 * window[:, :-1]), i
        results.append(out)
    assert all(x is seen[0] for x in seen) and seen[0].is_contiguous()
    assert results[-1] is results[-2] is results[-3]  # replays: the recorded outputs themselves
    assert torch.equal(results[-3], 2 * (torch.arange(30.0).reshape(3, 10)[:, :-1] + 6))  # overwritten
    assert torch.equal(recorder(torch.ones(3, 9), False), torch.ones(3, 9)) and len(recorder.recordings) == 2
    recorder(torch.ones(9, 3).t(), True)  # another layout: a recording of its own
    assert len(recorder.recordings) == 3


def test_pinned_staging_keeps_a_pair_of_buffers_per_name_and_shape(monkeypatch):
    """Atari frame writes change shape at each game start: each shape keeps its own two buffers, used in turn,
    instead of new pinned memory at every change; each call returns a copy of its own, in the dtype asked for."""
    monkeypatch.setattr(speed, "GPU_PATH_ON_CPU", True)
    staging = speed.PinnedStaging(torch.device("cpu"))
    sent = [staging.to_device("frames", np.full((1 + k % 3, 4), k, np.float64), torch.float32) for k in range(20)]
    assert len(staging.buffers) == 6
    for k, out in enumerate(sent):
        assert out.dtype == torch.float32 and out.shape == (1 + k % 3, 4) and bool((out == k).all()), k
