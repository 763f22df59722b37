"""A stand-in for the CUDA-graph recorder: a script's GPU code path, --cudagraphs included, run on the CPU.

    python tests/standin.py OUT.json cleanrl/dqn_atari.py --compile --cudagraphs --total-timesteps 600 ...
    python tests/standin.py --census OUT.json cleanrl/sac_continuous_action.py --cudagraphs ...
    python tests/standin.py --warm-up-on-arguments OUT.json cleanrl/dqn_atari.py --compile --cudagraphs ...

The script runs as `python SCRIPT ARGS...` would (runpy), with speed.GPU_PATH_ON_CPU set: the replay memories and
Atari frames in "device" memory sampled there, the batched critics, the pinned staging and the pipelined rollout all
run, on CPU tensors. speed.CudaGraph keeps its logic (a recording per graph_key, static inputs that every call of the
function reads, the arguments copied in, the outputs returned as they are) and StandIn replaces its CUDA parts:
  - warm_up: the function on the static inputs;
  - record: the function once on the static inputs, which does the call's work (on a GPU the replay right after the
    recording does it), counting every dynamo compilation and every read of a tensor's value on the host it makes
    (.item, .cpu, .tolist, .numpy, bool/int/float of a tensor, nonzero, masked_select, unique, a boolean mask as an
    index) and every tensor made from host data (torch.tensor, as_tensor, from_numpy). On a GPU each of these fails
    the capture or makes a graph that replays stale values;
  - replay: the function again on the static inputs, its results copied into the recorded outputs (so a caller that
    kept an output sees it overwritten, as on a GPU), counting compilations: a graph replayed after one would replay
    what was compiled before it.
What the function does outside kernels (Python) runs at every replay here and once on a GPU; the results are the
eager ones all the same, which the stand-in test compares.

--census also takes tests/census.py's census of the run, on the GPU path, and counts per environment step the torch
calls made outside the recorded functions that touch device tensors and are not views, reads of metadata or
requires_grad_: on a GPU each is a kernel launch or a copy (for speed runs without --compile: dynamo guards on the
census's mode).

It writes, even when the script ends with SystemExit:
    {"recordings": [{"function": "update", "key": "...", "warm_ups": 3, "replays": 57, "compiles_at_record": 0,
                     "host_reads_at_record": {"item": 1}, "compiles_at_replay": 0}],
     "calls_per_step": {"12": 9, ...}, "census": {...}}   (the last two with --census)
"""

import functools
import json
import os
import runpy
import sys
from collections import Counter, defaultdict
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch._dynamo
from torch.overrides import _pop_mode_temporarily

ROOT = Path(__file__).resolve().parent.parent
CLEANRL = ROOT / "cleanrl"
sys.path.insert(0, str(CLEANRL))
sys.path.insert(0, str(ROOT))
import speed  # noqa: E402
from tests import census as census_module  # noqa: E402

T = torch.Tensor
# a tensor's value read on the host: each waits for the device, which a capture refuses
HOST_READS = {"item": (T, "item"), "tolist": (T, "tolist"), "numpy": (T, "numpy"), "__array__": (T, "__array__"),
              "bool": (T, "__bool__"), "int": (T, "__int__"), "float": (T, "__float__"), "index": (T, "__index__"),
              "cpu": (T, "cpu"), "nonzero": (T, "nonzero"), "masked_select": (T, "masked_select"),
              "unique": (T, "unique"), "torch.nonzero": (torch, "nonzero"),
              "torch.masked_select": (torch, "masked_select"), "torch.unique": (torch, "unique"),
              # host data made into a tensor inside the graph: a copy from pageable memory, refused in a capture
              "torch.tensor": (torch, "tensor"), "torch.as_tensor": (torch, "as_tensor"),
              "torch.from_numpy": (torch, "from_numpy")}


def boolean_index(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, (T, np.ndarray)) and p.dtype in (torch.bool, np.bool_) for p in parts)


class Counts:
    """What happened while a recorded function ran: compilations by phase, host reads at recording."""

    def __init__(self):
        self.phase = None  # the recording and phase ("record", "replay") under way, or None
        self.reads = None  # the Counter of host reads while recording

    def compiled(self, *_) -> None:
        if self.phase is not None:
            recording, phase = self.phase
            recording[f"compiles_at_{phase}"] += 1

    def patched(self, owner, name: str, kind: str):
        original = getattr(owner, name)

        @functools.wraps(original)
        def counted(*args, **kwargs):
            if self.reads is not None:
                self.reads[kind] += 1
            return original(*args, **kwargs)
        return original, counted

    def masked(self, original):
        @functools.wraps(original)
        def counted(tensor, index, *rest):
            if self.reads is not None and boolean_index(index):
                self.reads["boolean mask"] += 1
            return original(tensor, index, *rest)
        return original, counted


COUNTS = Counts()
RECORDINGS = []  # one dict per recording, in the order they were made


def function_name(fn) -> str:
    inner = getattr(fn, "_torchdynamo_orig_callable", fn)
    return getattr(inner, "__name__", None) or getattr(fn, "__name__", repr(fn))


class StandIn(speed.CudaGraph):
    """speed.CudaGraph with its CUDA parts on the CPU (the module's docstring)."""

    census = None  # the Census of a --census run, kept off while the recorded function runs

    def __init__(self, fn, warmup: int = 3):
        super().__init__(fn, warmup)
        self.name = function_name(fn)

    def run(self, inputs):
        if self.census is None:
            return self.fn(*inputs)
        with _pop_mode_temporarily():
            return self.fn(*inputs)

    def warm_up(self, inputs):
        return self.run(inputs)

    def record(self, inputs):
        key = next(k for k, r in self.recordings.items() if r.inputs is inputs)
        entry = {"function": self.name, "key": repr(key), "warm_ups": self.warmup, "replays": 0,
                 "compiles_at_record": 0, "host_reads_at_record": Counter(), "compiles_at_replay": 0}
        RECORDINGS.append(entry)
        patches = [COUNTS.patched(owner, name, kind) + (owner, name) for kind, (owner, name) in HOST_READS.items()]
        patches += [COUNTS.masked(getattr(T, name)) + (T, name) for name in ("__getitem__", "__setitem__")]
        for _, counted, owner, name in patches:
            setattr(owner, name, counted)
        COUNTS.phase, COUNTS.reads = (entry, "record"), entry["host_reads_at_record"]
        try:
            outputs = self.run(inputs)
        finally:
            COUNTS.phase = COUNTS.reads = None
            for original, _, owner, name in patches:
                setattr(owner, name, original)
        return {"entry": entry, "inputs": inputs, "fresh": True}, outputs

    def replay(self, graph) -> None:
        if graph["fresh"]:  # the recording call did this call's work
            graph["fresh"] = False
            return
        entry = graph["entry"]
        entry["replays"] += 1
        recording = next(r for r in self.recordings.values() if r.graph is graph)
        COUNTS.phase = (entry, "replay")
        try:
            results = self.run(graph["inputs"])
        finally:
            COUNTS.phase = None
        outputs = recording.outputs
        if isinstance(outputs, torch.Tensor):
            outputs, results = (outputs,), (results,)
        if outputs:  # what the graph's replay writes: no call of the script's, so kept from the census
            with torch.no_grad(), (_pop_mode_temporarily() if self.census is not None else nullcontext()):
                torch._foreach_copy_(list(outputs), [r.detach() for r in results])
        if self.census is not None:
            self.census.replays_per_step[self.census.steps] += 1


class WarmUpOnArguments(StandIn):
    """The recorder as it was before issue 56 fixed it, kept to check that the stand-in catches what it did: its
    warm-ups ran on the caller's tensors and its recording on copies of them, so a compiled function warmed up on
    non-contiguous views (dqn_atari's frame stacks) recompiled at recording, which on a GPU fails the capture."""

    def __call__(self, *args):
        key = speed.graph_key(args)
        recording = self.recordings.setdefault(key, speed.Recording(None))
        if recording.calls < self.warmup:
            recording.calls += 1
            return self.warm_up(list(args))
        if recording.graph is None:
            recording.inputs = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
            recording.graph, recording.outputs = self.record(recording.inputs)
        else:
            for static, arg in zip(recording.inputs, args):
                if isinstance(arg, torch.Tensor):
                    static.copy_(arg)
        self.replay(recording.graph)
        return recording.outputs


class LaunchCensus(census_module.Census):
    """tests/census.py's Census, also counting per environment step the torch calls outside the recorded functions
    that a GPU would run as a launch or a copy (the module's docstring)."""

    def __init__(self, script: str):
        super().__init__(script)
        self.calls_per_step = defaultdict(int)
        self.replays_per_step = defaultdict(int)  # graph launches
        self.call_sites = Counter()  # "cleanrl/FILE:LINE name" -> calls, over the whole run

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        touches = False
        if name not in ("__get__", "__set__") and not getattr(func, "__self__", None) is census_module.DEVICE_GETTER:
            inputs = [t for a in list(args) + list(kwargs.values()) for t in census_module.tensors_in(a)]
            touches = any(not self.is_host(t) for t in inputs) or self.output_placement(func, args, kwargs) == "device"
        out = super().__torch_function__(func, types, args, kwargs)
        if touches and self.launches(func, name, args, out):
            self.calls_per_step[self.steps] += 1
            self.call_sites[f"{self.site()[0]} {name}"] += 1
        return out

    @staticmethod
    def launches(func, name: str, args, out) -> bool:
        if name == "requires_grad_":
            return False
        in_place = name.endswith("_") and not name.startswith("__")
        if func in census_module.READS or in_place or name in ("__setitem__", "cpu", "to"):
            return not (name == "to" and out is args[0])  # .to() that changed nothing returns its input
        results = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        if not results:
            return False  # metadata: size, dim, ...
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        storage = LaunchCensus.storage(first) if first is not None else None
        return not all(LaunchCensus.storage(t) == storage for t in results)  # a view shares its storage

    @staticmethod
    def storage(t: torch.Tensor) -> int:
        """Where t's data is; inside torch.vmap (speed.Ensemble's batched critics) that of the tensor it batches."""
        while torch._C._functorch.is_batchedtensor(t):
            t = torch._C._functorch.get_unwrapped(t)
        return t.untyped_storage().data_ptr()


def run(out: str, script: str, args: list[str], with_census: bool = False, recorder=StandIn) -> int:
    script = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    speed.GPU_PATH_ON_CPU = True
    speed.CudaGraph = recorder
    torch._dynamo.callback_handler.register_start_callback(COUNTS.compiled)
    census = None
    if with_census:
        census = StandIn.census = LaunchCensus(script)
        census.install()
    code = 0
    try:
        if census is None:
            runpy.run_path(script, run_name="__main__")
        else:
            with census:
                runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    finally:
        report = {"recordings": [dict(r, host_reads_at_record=dict(r["host_reads_at_record"])) for r in RECORDINGS]}
        if census is not None:
            report["calls_per_step"] = {str(k): v for k, v in sorted(census.calls_per_step.items())}
            report["replays_per_step"] = {str(k): v for k, v in sorted(census.replays_per_step.items())}
            report["call_sites"] = dict(census.call_sites.most_common())
            report["census"] = census.report()
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    return code


if __name__ == "__main__":
    argv, options = sys.argv[1:], set()
    while argv and argv[0] in ("--census", "--warm-up-on-arguments"):
        options.add(argv.pop(0))
    if len(argv) < 2:
        raise SystemExit("usage: python tests/standin.py [--census] [--warm-up-on-arguments] OUT.json SCRIPT.py "
                         "[ARGS...]")
    raise SystemExit(run(argv[0], argv[1], argv[2:], "--census" in options,
                         WarmUpOnArguments if "--warm-up-on-arguments" in options else StandIn))
