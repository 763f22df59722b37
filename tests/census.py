"""A census of the host-device synchronisations of one run of a script, taken on the CPU.

    python tests/census.py OUT.json cleanrl/ppo.py --num-steps 32 --total-timesteps 256

On a CUDA device some tensor operations make the host wait until the device has finished its queued work:
  - a value read back to the host: .item(), .tolist(), .numpy() (np.asarray goes through Tensor.__array__),
    bool()/int()/float()/operator.index() of a tensor, formatting one, `x in tensor`, torch.equal/allclose;
  - a copy towards the CPU: .cpu(), .to("cpu"), host_tensor.copy_(device_tensor);
  - an operation whose output shape depends on the data: nonzero/argwhere, torch.where(cond), masked_select,
    unique, repeat_interleave without output_size, and indexing with a boolean mask (x[mask], x[mask] = v);
  - a blocking copy from the host (kind "h2d"): torch.as_tensor/tensor/asarray of host data with device=the run's
    device, .to(device) or .cuda() of a host tensor without non_blocking=True, device_tensor.copy_(host_tensor), an
    index given as a numpy array, a list or a host tensor, and a numpy array or host tensor assigned into a device
    tensor. PyTorch synchronises the stream after every copy between host and device unless asked not to
    (non_blocking=True), so each of these waits for all queued work.
On the CPU nothing waits, but the same calls are made, so they can be counted here. This module runs the script as
`python SCRIPT ARGS...` would (runpy, as __main__, the script's folder first on sys.path) under a TorchFunctionMode
that records each such call at the innermost line of a file under cleanrl/ (the script or runtime.py) that led to it.
It also counts the environment steps (the calls of a gymnasium vector env's step, or of the send that starts a
pipelined half-step, that the script file makes or OnDevice.rollout makes for it, a chain of wrappers counting once), the optimizer steps, and the
points at which the run logs a losses/* scalar. It writes, even when the script ends with SystemExit:

    {"steps": N, "updates": U, "log_points": [[steps, updates], ...],
     "sites": {"cleanrl/ppo.py:298": {"count": c, "occasions": o, "off_log": f, "source": "...", "kind": "cpu"}}}

`count` is the number of such calls at the line, `kind` what they were (comma-separated when several). `occasions`
is the number of distinct points of the run's progress (env steps, optimizer steps so far) at which the line made
any: a line that reads three losses in one logging block makes 3 calls on 1 occasion, a line in the rollout one on
every step. `off_log`: the occasions that were neither before the first step (the set-up) nor a logging point.

Where a CUDA run would hold each tensor is inferred, as here all are on the CPU: a tensor is on the device unless it
was made on the host (no device, device="cpu", torch.from_numpy, a copy towards the CPU) or computed from host
tensors only. The run's device is the object speed.pick_device returned (torch.device("cpu") here): `device=device`
means the device and `device="cpu"` the host; another torch.device("cpu") means the host when a line of cleanrl/
passes it and the device when torch's own code does (it passes on the devices of tensors). A device tensor's
`.device` is that object (equal to what the getter returns), so `device=x.device` follows x. A value read from a host
tensor is no synchronisation, so `x.cpu().numpy()` counts once.
The run is the run the script makes without the census (the mode returns what each call returns). What torch does
in C++ (torch.save of a checkpoint) is not seen, and code that branches on the device (`if device.type == "cuda"`) is
seen on its CPU side only: a GPU path is checked here only where the CPU run takes the same path.
"""

import functools
import json
import linecache
import os
import runpy
import sys
import weakref
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.overrides import TorchFunctionMode
from torch.utils.tensorboard import SummaryWriter

ROOT = Path(__file__).resolve().parent.parent
CLEANRL = str(ROOT / "cleanrl") + os.sep
THIS = os.path.abspath(__file__)

T = torch.Tensor
# the value of a device tensor read back to the host
READS = {T.item: "item", T.tolist: "tolist", T.numpy: "numpy", T.__array__: "numpy", T.__bool__: "bool",
         T.__int__: "int", T.__float__: "float", T.__index__: "index", T.__format__: "format", T.__repr__: "format",
         T.__contains__: "contains", torch.equal: "equal", T.equal: "equal", torch.allclose: "allclose",
         T.allclose: "allclose"}
# output shapes that depend on the data: the host learns the size before it can allocate the output
DATA_DEPENDENT = {torch.nonzero: "nonzero", T.nonzero: "nonzero", torch.argwhere: "nonzero", T.argwhere: "nonzero",
                  torch.masked_select: "masked_select", T.masked_select: "masked_select", torch.unique: "unique",
                  T.unique: "unique", torch.unique_consecutive: "unique", T.unique_consecutive: "unique"}
INDEXING = {T.__getitem__, T.__setitem__, T.index_put_, T.index_put}
FROM_DATA = {torch.as_tensor, torch.tensor, torch.asarray}  # a tensor from data, on `device` (their 3rd argument)
DEVICE_GETTER = torch._C.TensorBase.__dict__["device"]
HOST, DEVICE = "host", "device"


def tensors_in(obj):
    """The tensors among a call's arguments (one level into lists and tuples)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            if isinstance(item, torch.Tensor):
                yield item


def index_parts(index) -> list:
    """The parts of an index: x[a, b] is (a, b), x[a] is [a]."""
    return list(index) if isinstance(index, tuple) else [index]


class Census(TorchFunctionMode):
    """Counts the calls that would make the host wait for a CUDA device, per line of cleanrl/ (see the module)."""

    def __init__(self, script: str):
        super().__init__()
        self.script = os.path.abspath(script)
        self.steps = self.updates = self.stepping = 0  # stepping: env steps under way (a wrapper's inner ones)
        self.log_points = set()  # the (steps, updates) at which the run logged a losses/* scalar
        self.run_devices = []  # what speed.pick_device returned: the device of a GPU run
        self.host = {}  # id(tensor) -> weakref, for the tensors a GPU run would hold in host memory
        self.fresh = None  # a copy towards the CPU that returned its input (a no-op here), for the next call only
        self.sites = defaultdict(lambda: {"count": 0, "occasions": set(), "kinds": set()})
        self.where_cache = {}

    # ---- where tensors live in a GPU run
    def is_host(self, t: torch.Tensor) -> bool:
        return id(t) in self.host or (self.fresh is not None and self.fresh() is t)

    def place(self, t: torch.Tensor, placement: str) -> None:
        if placement == HOST:
            if id(t) not in self.host:
                key = id(t)
                self.host[key] = weakref.ref(t, lambda _, key=key: self.host.pop(key, None))
        else:
            self.host.pop(id(t), None)

    def device_placement(self, spec):
        """HOST or DEVICE for a device argument (None when there is none). "cpu" is the host. A torch.device("cpu")
        is the run's device if it is the object speed.pick_device returned; any other is the host where a line of
        cleanrl/ passes it and the device where torch's own code does (clip_grad_norm_, Module.to and the optimizers
        pass on devices they read from tensors, in C++, where the getter below does not reach)."""
        if spec is None:
            return None
        if isinstance(spec, torch.device):
            if spec.type != "cpu" or any(spec is d for d in self.run_devices):
                return DEVICE
            return HOST if self.called_from_cleanrl() else DEVICE
        if isinstance(spec, str):
            return HOST if spec.split(":")[0] == "cpu" else DEVICE
        return DEVICE  # an int: a CUDA ordinal

    def called_from_cleanrl(self) -> bool:
        """Whether the torch function being handled was called by a line of cleanrl/ itself."""
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename == THIS or frame.f_code.co_filename.endswith(
                os.path.join("torch", "overrides.py"))):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(CLEANRL)

    def to_target(self, args, kwargs) -> tuple:
        """(placement of the destination or None, non_blocking) of Tensor.to's arguments."""
        target, non_blocking = self.device_placement(kwargs.get("device")), kwargs.get("non_blocking", False)
        for arg in args[1:]:
            if isinstance(arg, (torch.device, str, int)) and not isinstance(arg, bool):
                target = self.device_placement(arg)
            elif isinstance(arg, torch.Tensor):
                target = HOST if self.is_host(arg) else DEVICE
            elif isinstance(arg, bool):
                non_blocking = arg
        return target, non_blocking

    def output_placement(self, func, args, kwargs):
        """Where a GPU run would hold the output of func(*args, **kwargs)."""
        if func is T.cpu or func is T.pin_memory or func in READS:
            return HOST
        if func is T.cuda:
            return DEVICE
        if func is T.to:
            target, _ = self.to_target(args, kwargs)
            return target or (HOST if self.is_host(args[0]) else DEVICE)
        if func in INDEXING:
            return HOST if self.is_host(args[0]) else DEVICE
        device = kwargs.get("device")
        if device is None and func in FROM_DATA and len(args) > 2:
            device = args[2]
        if device is not None:
            return self.device_placement(device)
        # made without a device (torch.zeros(3), torch.as_tensor(array)): the host; else where its inputs are
        inputs = [t for a in list(args) + list(kwargs.values()) for t in tensors_in(a)]
        return HOST if all(self.is_host(t) for t in inputs) else DEVICE

    # ---- which calls wait
    def sync_kind(self, func, args, kwargs):
        """The kind of synchronisation func(*args, **kwargs) makes on a GPU, or None."""
        first = args[0] if args else None
        on_device = isinstance(first, torch.Tensor) and not self.is_host(first)
        if func in READS:
            return READS[func] if on_device or func in (torch.equal, torch.allclose) and not all(
                self.is_host(t) for t in tensors_in(args)) else None
        if func in DATA_DEPENDENT:
            return DATA_DEPENDENT[func] if on_device else None
        if func is torch.where and len(args) + len(kwargs) == 1:
            return "nonzero" if on_device else None
        if func in (torch.repeat_interleave, T.repeat_interleave):
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
            if isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None and len(args) < 4:
                return "repeat_interleave"
            return None
        if func is T.cpu:
            return "cpu" if on_device else None
        if func is T.to:
            target, non_blocking = self.to_target(args, kwargs)
            if target == HOST and on_device:
                return "to-cpu"
            if target == DEVICE and not on_device and not non_blocking:
                return "h2d"
            return None
        if func is T.cuda:
            return "h2d" if not on_device and not (kwargs.get("non_blocking") or len(args) > 2 and args[2]) else None
        if func is T.copy_:
            src = args[1] if len(args) > 1 else kwargs.get("src")
            non_blocking = kwargs.get("non_blocking", len(args) > 2 and args[2])
            if not on_device and isinstance(src, torch.Tensor) and not self.is_host(src):
                return "copy-to-cpu"
            if on_device and isinstance(src, torch.Tensor) and self.is_host(src) and src.dim() > 0 and not non_blocking:
                return "h2d"
            return None
        if func in FROM_DATA:
            data = args[0] if args else kwargs.get("data")
            if self.output_placement(func, args, kwargs) == DEVICE:
                if isinstance(data, torch.Tensor):
                    return "h2d" if self.is_host(data) else None
                return "h2d"
            return None
        if func in INDEXING and on_device:
            return self.index_kind(func, args, kwargs)
        return None

    def index_kind(self, func, args, kwargs):
        """A boolean mask, or an index or value that must first be copied from the host, in an index of a device
        tensor: "bool-mask", "h2d" or None."""
        index = args[1] if len(args) > 1 else kwargs.get("indices")
        upload = False
        for part in index_parts(index):
            if isinstance(part, (torch.Tensor, np.ndarray)) and part.dtype in (torch.bool, torch.uint8, np.bool_):
                return "bool-mask"
            if isinstance(part, (np.ndarray, list)) or isinstance(part, torch.Tensor) and self.is_host(part):
                upload = True
        if func is not T.__getitem__ and len(args) > 2:
            value = args[2]
            if isinstance(value, (np.ndarray, list)) or (
                    isinstance(value, torch.Tensor) and self.is_host(value) and value.dim() > 0):
                upload = True
        return "h2d" if upload else None

    # ---- where in cleanrl/ a call came from
    def site(self) -> tuple[str, str]:
        """("cleanrl/FILE:LINE", source text) of the innermost frame in a file under cleanrl/; failing that, the
        innermost frame outside torch."""
        frame, outside = sys._getframe(2), None
        while frame is not None:
            path = frame.f_code.co_filename
            inside = self.where_cache.get(path)
            if inside is None:
                inside = self.where_cache[path] = path.startswith(CLEANRL)
            if inside:
                return f"{os.path.relpath(path, ROOT)}:{frame.f_lineno}", linecache.getline(path, frame.f_lineno)
            if outside is None and f"{os.sep}torch{os.sep}" not in path and path != THIS:
                outside = frame
            frame = frame.f_back
        if outside is None:
            return "<torch>:0", ""
        path = outside.f_code.co_filename
        return f"{path}:{outside.f_lineno}", linecache.getline(path, outside.f_lineno)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is DEVICE_GETTER:
            device = func(*args, **kwargs)
            # a device tensor's .device is the run's device (so device=x.device means the device, as on a GPU)
            return self.run_devices[0] if self.run_devices and not self.is_host(args[0]) else device
        kind = self.sync_kind(func, args, kwargs)
        if kind is not None:
            key, source = self.site()
            entry = self.sites[key]
            entry["count"] += 1
            entry["occasions"].add((self.steps, self.updates))
            entry["kinds"].add(kind)
            entry["source"] = source.strip()
        placement = self.output_placement(func, args, kwargs)
        first = args[0] if args else None
        out = func(*args, **kwargs)
        fresh = self.fresh() if self.fresh is not None else None
        self.fresh = None
        if isinstance(out, torch.Tensor):
            if placement == HOST and out is first and not self.is_host(first):
                self.fresh = weakref.ref(out)  # x.cpu() returned x itself: a host copy for the next call only
            elif out is fresh:
                self.fresh = weakref.ref(out)  # .contiguous() of that copy, still that copy
            elif out is not first or func in (T.to, T.cuda):
                self.place(out, placement)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, torch.Tensor) and t is not first:
                    self.place(t, placement)
        return out

    # ---- the counters
    def counting_pick_device(self, pick_device):
        @functools.wraps(pick_device)
        def pick(*args, **kwargs):
            device = pick_device(*args, **kwargs)
            self.run_devices.append(device)
            return device
        return pick

    def count_steps_of(self, cls) -> None:
        """Count the calls of cls.step and cls.send (where cls defines them) that the script file makes itself, or
        environments.OnDevice.rollout for it, outermost only: the inner steps of a chain of wrappers (the script's own among them) are part of the outer
        one. A pipelined rollout's send starts the step of half the envs and counts as one step."""
        for name in ("step", "send"):
            self.count_calls_of(cls, name)

    def count_calls_of(self, cls, name: str) -> None:
        step = cls.__dict__.get(name)
        if step is None or getattr(step, "census", False):
            return

        @functools.wraps(step)
        def counted(env, *args, **kwargs):
            caller = sys._getframe(1).f_code
            if self.stepping == 0 and (caller.co_filename == self.script or caller.co_qualname == "OnDevice.rollout"):
                self.steps += 1
            self.stepping += 1
            try:
                return step(env, *args, **kwargs)
            finally:
                self.stepping -= 1
        counted.census = True
        setattr(cls, name, counted)

    def count_env_steps(self) -> None:
        """Count the steps of every gymnasium vector env and wrapper class, those defined later included."""
        from gymnasium.vector import VectorEnv

        pending = [VectorEnv]
        while pending:
            cls = pending.pop()
            self.count_steps_of(cls)
            pending += cls.__subclasses__()
        census = self

        def init_subclass(cls, **kwargs):
            super(VectorEnv, cls).__init_subclass__(**kwargs)
            census.count_steps_of(cls)
        VectorEnv.__init_subclass__ = classmethod(init_subclass)

    def made_on_host(self, make):
        """torch.from_numpy or torch.frombuffer (which no TorchFunctionMode sees), marking what it makes as host."""
        @functools.wraps(make)
        def made(*args, **kwargs):
            t = make(*args, **kwargs)
            self.place(t, HOST)
            return t
        return made

    def count_update(self, optimizer, args, kwargs) -> None:
        self.updates += 1

    def counting_add_scalar(self, add_scalar):
        """SummaryWriter.add_scalar, noting the points of the run at which it logs a losses/* scalar."""
        @functools.wraps(add_scalar)
        def add(writer, tag, *args, **kwargs):
            if tag.startswith("losses/"):
                self.log_points.add((self.steps, self.updates))
            return add_scalar(writer, tag, *args, **kwargs)
        return add

    def install(self) -> None:
        """Hook the counters into this process, before the script runs: the run's device (as runtime.start calls
        speed.pick_device), env steps, optimizer steps, logging points, and tensors made from host memory."""
        import runtime

        runtime.pick_device = self.counting_pick_device(runtime.pick_device)
        self.count_env_steps()
        register_optimizer_step_post_hook(self.count_update)
        SummaryWriter.add_scalar = self.counting_add_scalar(SummaryWriter.add_scalar)
        torch.from_numpy, torch.frombuffer = self.made_on_host(torch.from_numpy), self.made_on_host(torch.frombuffer)

    def report(self) -> dict:
        sites = {}
        for key in sorted(self.sites, key=lambda k: (k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1] or 0))):
            entry = self.sites[key]
            # occasions other than the set-up (before the first step) and the points at which losses were logged
            off_log = [o for o in entry["occasions"] if o[0] > 0 and o not in self.log_points]
            sites[key] = {"count": entry["count"], "occasions": len(entry["occasions"]), "off_log": len(off_log),
                          "source": entry["source"], "kind": ",".join(sorted(entry["kinds"]))}
        return {"steps": self.steps, "updates": self.updates, "log_points": sorted(self.log_points), "sites": sites}


def run(out: str, script: str, args: list[str]) -> int:
    """Run the script as `python script args...` under the census; write the census to `out`; the exit status."""
    script = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)  # as `python script` has it: the scripts import runtime from there
    if CLEANRL.rstrip(os.sep) not in sys.path:
        sys.path.insert(1, CLEANRL.rstrip(os.sep))  # a script elsewhere (the census's own test)
    census = Census(script)
    census.install()
    code = 0
    try:
        with census:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    finally:
        with open(out, "w") as f:
            json.dump(census.report(), f, indent=1)
    return code


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python tests/census.py OUT.json SCRIPT.py [ARGS...]")
    raise SystemExit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
