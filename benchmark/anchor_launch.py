# docs: docs/benchmark.md
"""Runs one training script in this process, as `python SCRIPT ARGS...` would, and records what benchmark/speed_anchor.py
needs from it into a JSON file. It imports nothing of this project, so it also runs in LeanRL's environment.

    python benchmark/anchor_launch.py profile OUT.json SCRIPT [ARGS...]
        the whole run under torch.profiler (CPU, and CUDA where there is a device); OUT.json: the number of events of
        each name (key_averages: aten ops, CUDA runtime calls such as cudaGraphLaunch and cudaStreamSynchronize, GPU
        memcpys such as "Memcpy DtoH (Device -> Pageable)") and the script's exit code
    python benchmark/anchor_launch.py leanrl OUT.json SCRIPT [ARGS...]
        a LeanRL script with two stand-ins, neither of which changes its work: its progress bar (tqdm.tqdm, which
        wraps its training loop) also records the wall time at which each loop item starts and the loop ends, and
        `wandb` is a recorder that keeps what the script logs (its own `speed`), converting tensors to numbers as
        wandb.log does (so the same host reads happen), and sends nothing anywhere; OUT.json: the marks
        [[items done, wall time], ...] of each progress bar, the logged rows and the script's exit code

The exit code is the script's own (an exception: 1, with its traceback on stderr).
"""

import json
import os
import runpy
import sys
import time
import traceback
import types


def run_script(script: str, argv: list[str]) -> int:
    """runpy the script as __main__ with the argv and sys.path[0] that `python SCRIPT` gives it; its exit code."""
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # was this launcher's folder
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)  # SystemExit("error: ...") prints its message, as the interpreter would
        return 1
    except Exception:  # the script's own failure: its traceback, as python would print it
        traceback.print_exc()
        return 1
    return 0


def profile(out: str, script: str, argv: list[str]) -> int:
    import torch
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch.profiler.profile(activities=activities) as prof:
        code = run_script(script, argv)
    counts: dict[str, int] = {}
    for event in prof.key_averages():
        counts[event.key] = counts.get(event.key, 0) + event.count
    with open(out, "w") as f:
        json.dump({"exit_code": code, "activities": [a.name for a in activities], "counts": counts}, f)
    return code


def wandb_recorder(record: dict) -> types.ModuleType:
    """A `wandb` module whose init and log keep what they are given in `record`."""
    module = types.ModuleType("wandb")

    def number(value):
        value = value.item() if hasattr(value, "item") else value  # a tensor comes to the host, as in wandb.log
        return float(value) if isinstance(value, (int, float)) else None

    def init(**kwargs):
        record["init"] = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None)))}

    def log(data: dict, step=None, commit=None):
        row = {"step": step, "time": time.time()}
        for key, value in data.items():
            if (x := number(value)) is not None:
                row[key] = x
        record["logged"].append(row)

    module.init, module.log, module.finish = init, log, lambda *args, **kwargs: None
    module.run, module.config = None, {}
    return module


def leanrl(out: str, script: str, argv: list[str]) -> int:
    import tqdm

    record: dict = {"marks": [], "logged": [], "init": None}

    class MarkedTqdm(tqdm.tqdm):
        def __iter__(self):
            marks, done = [], 0
            record["marks"].append(marks)
            for item in super().__iter__():
                marks.append((done, time.time()))
                yield item
                done += 1
            marks.append((done, time.time()))

    tqdm.tqdm = MarkedTqdm
    sys.modules["wandb"] = wandb_recorder(record)
    code = 1
    try:
        code = run_script(script, argv)
    finally:
        with open(out, "w") as f:
            json.dump(dict(record, exit_code=code), f)
    return code


if __name__ == "__main__":
    modes = {"profile": profile, "leanrl": leanrl}
    if len(sys.argv) < 4 or sys.argv[1] not in modes:
        raise SystemExit(f"usage: python {sys.argv[0]} {{profile,leanrl}} OUT.json SCRIPT [ARGS...]")
    sys.exit(modes[sys.argv[1]](sys.argv[2], sys.argv[3], sys.argv[4:]))
