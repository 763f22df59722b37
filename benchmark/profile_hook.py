# docs: docs/speed.md
"""Run one training script under cProfile over the span its SPS measures, for benchmark/profile_split.py:

    python benchmark/profile_hook.py PROFILE_FILE cleanrl/<script>.py [flags...]

The script runs as `python cleanrl/<script>.py` would (as __main__, with cleanrl/ first on sys.path). This launcher
wraps two methods of the companion module's run handle, runtime.Run, before the script starts: the first
start_clock (where the SPS clock starts, after the warm-up) turns cProfile on, and finish (after the loop) turns it
off and writes the stats to PROFILE_FILE, and the span's first and last steps and seconds to PROFILE_FILE.json. So
start-up, warm-up and the final evaluation are left out. Tensor operators (`a * b`, `x[i] = y`) are C slots that
cProfile never sees called: under the profiler each is wrapped in a Python function named after it
(`Tensor.__mul__`), which profile_split counts as torch. It imports the companion module, never an algorithm script.
"""

import cProfile
import json
import os
import runpy
import sys
import time
from typing import Callable

import torch

TENSOR_OPERATORS = tuple(f"__{op}__" for op in (
    "add radd iadd sub rsub isub mul rmul imul truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod rmod pow "
    "rpow ipow matmul rmatmul neg pos abs invert and rand iand or ror ior xor rxor ixor lshift rshift lt le gt ge "
    "eq ne getitem setitem bool float int index").split())


def attribute_tensor_operators() -> None:
    """Wrap torch.Tensor's operators that are C slots (not Python functions) in named Python functions."""
    def wrap(name: str, slot: Callable) -> Callable:
        def operator(*args):
            return slot(*args)
        # the profile names the wrapper Tensor.__mul__ and the C call inside it after the wrapper's qualname
        operator.__code__ = operator.__code__.replace(co_name=f"Tensor.{name}")
        operator.__qualname__ = f"torch.Tensor.{name}"
        return operator

    for name in TENSOR_OPERATORS:
        slot = getattr(torch.Tensor, name, None)
        if slot is not None and not hasattr(slot, "__code__"):
            setattr(torch.Tensor, name, wrap(name, slot))


def profile_the_measured_span(runtime, path: str) -> None:
    """Wrap runtime.Run.start_clock and runtime.Run.finish so that rank 0's measured span is profiled into path."""
    profiler, span = cProfile.Profile(), {}
    start_clock, finish = runtime.Run.start_clock, runtime.Run.finish

    def profiled_start_clock(run, global_step: int) -> None:
        start_clock(run, global_step)
        if run.rank == 0 and not span:
            attribute_tensor_operators()
            span.update(first_step=global_step, started=time.time())
            profiler.enable()

    def profiled_finish(run, global_step: int, *args, **kwargs) -> None:
        if span:
            profiler.disable()
            profiler.dump_stats(path)
            with open(path + ".json", "w") as f:
                json.dump({"first_step": span["first_step"], "last_step": global_step,
                           "seconds": time.time() - span["started"]}, f)
        finish(run, global_step, *args, **kwargs)

    runtime.Run.start_clock, runtime.Run.finish = profiled_start_clock, profiled_finish


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python benchmark/profile_hook.py PROFILE_FILE SCRIPT [flags...]")
    path, script = sys.argv[1], os.path.abspath(sys.argv[2])
    sys.argv = [script, *sys.argv[3:]]
    sys.path[0] = os.path.dirname(script)  # as `python script` has it: the script imports its companion from there
    try:
        import runtime  # noqa: E402 (from the script's folder, set just above)
    except ImportError:
        runtime = None  # not a script of this project: it runs unprofiled, and profile_split says so
    if runtime is not None:
        profile_the_measured_span(runtime, path)
    runpy.run_path(script, run_name="__main__")
