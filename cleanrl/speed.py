# docs: docs/speed.md
"""Where a run computes and how fast: the device and the CPU threads (--cuda, --torch-threads), the speed flags
(--compile and --cudagraphs: speed_up, CudaGraph), networks of one shape run as one (Ensemble), copies to a GPU
that the host does not wait for (PinnedStaging), and the memory a run may take on its device (nbytes,
check_memory). None of it changes the math."""

import os
import shutil
import time
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn

from messages import fail, say


def cpu_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of all cores together since boot, from the "cpu" line of /proc/stat; busy is all but
    idle and iowait."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def free_cores() -> int:
    """The cores no other work keeps busy as the run starts, measured over 0.1 s in /proc/stat; at least 1 (and 1
    where /proc/stat cannot be read). Seeds started together see each other start up (imports keep a core busy)."""
    try:
        busy0, total0 = cpu_ticks()
        time.sleep(0.1)
        busy1, total1 = cpu_ticks()
    except (OSError, ValueError, IndexError):
        return 1
    busy_cores = (busy1 - busy0) / max(total1 - total0, 1) * os.cpu_count()
    return max(1, min(len(os.sched_getaffinity(0)), round(os.cpu_count() - busy_cores)))


class ThreadGuard:
    """--torch-threads 0 on the CPU: as many torch threads as there are cores the rest of the machine leaves free,
    looked at again every `every` seconds of the run (from Run.log_sps). Other processes' share is the machine's busy
    time less this process's own (os.times: all its threads, spinning ones included). So a run that started alone
    with two threads drops to one at its next look after a second seed starts beside it (until then its threads
    stall on the busy core), and takes two again when that seed ends. Each change is printed; it changes float
    rounding from there on."""

    def __init__(self, every: float = 10.0):
        self.every, self.most = every, len(os.sched_getaffinity(0))
        self.mark = self.sample()

    @staticmethod
    def sample() -> Optional[tuple[float, int, int, float]]:
        try:
            busy, total = cpu_ticks()
        except (OSError, ValueError, IndexError):
            return None
        own = os.times()
        return time.monotonic(), busy, total, own.user + own.system

    def others_busy(self, start, end) -> float:
        """Cores that other processes kept busy between two samples."""
        busy = (end[1] - start[1]) - (end[3] - start[3]) * os.sysconf("SC_CLK_TCK")
        return max(0.0, busy / max(end[2] - start[2], 1) * os.cpu_count())

    def check(self) -> None:
        if self.mark is None or time.monotonic() - self.mark[0] < self.every:
            return
        now = self.sample()
        if now is None:
            return
        others = self.others_busy(self.mark, now)
        want, have = max(1, min(self.most, round(os.cpu_count() - others))), torch.get_num_threads()
        if want != have:
            say(f"torch threads: {have} -> {want} (other processes keep {others:.1f} of {os.cpu_count()} cores busy)")
            torch.set_num_threads(want)
        self.mark = now


def pick_device(args, local_rank: int = 0) -> torch.device:
    """CUDA when available and wanted, else the CPU with --torch-threads threads; 0: the cores free at start, and
    then as many as stay free (ThreadGuard). Each script's default says which its networks gain from: 1 for the
    small MLPs, 0 for wide and convolutional ones. More threads than free cores stall on every op when another
    process takes a core (SAC: 0.33x), and the count changes float rounding: docs/speed.md has the measurements."""
    if args.cuda and torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():  # torchrun started more processes on this node than it has GPUs
            fail(f"LOCAL_RANK {local_rank} has no GPU: this machine has {torch.cuda.device_count()}")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    torch.set_num_threads(args.torch_threads or free_cores())
    return torch.device("cpu")


# The GPU code path (replay memories and frames in device memory sampled there, the batched critics, pinned
# staging, CUDA graphs) is taken on a CUDA device. GPU_PATH_ON_CPU takes it on the CPU as well, with CPU tensors:
# tests/standin.py sets it, and stands in for the CUDA-graph recorder, to run that path where no GPU is at hand.
GPU_PATH_ON_CPU = False


def gpu_path(device: torch.device) -> bool:
    """Whether a run on `device` takes the GPU code path (GPU_PATH_ON_CPU)."""
    return device.type == "cuda" or GPU_PATH_ON_CPU


def check_speed_args(args) -> None:
    on_cuda, compiler = args.cuda and torch.cuda.is_available(), os.environ.get("CXX", "g++")
    if args.cudagraphs and not on_cuda and not GPU_PATH_ON_CPU:
        fail("--cudagraphs needs a CUDA device, and this run has none (CUDA unavailable or --no-cuda)")
    if args.compile and not on_cuda and shutil.which(compiler) is None:
        fail(f"--compile on CPU needs a C++ compiler and {compiler} was not found; install one or drop --compile")


def speed_up(fn: Callable, args, compile: bool = True) -> Callable:
    """fn (returning a tensor or a tuple of tensors) as written, or wrapped: --compile compiles it (torch.compile's
    default mode: the whole function in as few graphs as torch allows), --cudagraphs records it, compiled or not,
    into one CUDA graph (CudaGraph) and replays that. The math is the same. Random ops: on the CPU compiled code
    draws from torch's generator as eager code does (inductor's fallback_random: the compile parity tests rely on
    it); on CUDA inductor fuses its draws into the kernels (other draws, the same distribution), unless the
    environment sets TORCHINDUCTOR_FALLBACK_RANDOM=1 (the CUDA parity tests do, to compare equal draws).
    compile=False: only recorded (a loop over thousands of steps, which dynamo would unroll into a graph that takes
    minutes to compile)."""
    if args.compile and compile:
        if not (args.cuda and torch.cuda.is_available()):
            torch._inductor.config.fallback_random = True
        fn = torch.compile(fn)
    return CudaGraph(fn) if args.cudagraphs else fn


def adam_options(args) -> dict:
    """The speed options of every script's Adam: capturable keeps its step count on the device, which CUDA graphs
    (--cudagraphs) need; fused updates every parameter in one kernel (faster than torch's per-tensor loop on a CPU,
    with different rounding). The same update either way."""
    return {"capturable": args.cudagraphs, "fused": True}


def graph_key(args: tuple) -> tuple:
    """What a recording is made for: each non-tensor argument's value, each tensor's shape, strides, dtype and
    device (a layout change gets a recording of its own instead of a compiled function's recompilation)."""
    return tuple((i, "tensor", arg.shape, arg.stride(), arg.dtype, arg.device) if isinstance(arg, torch.Tensor)
                 else (i, arg) for i, arg in enumerate(args))


class Recording:
    """One CudaGraph recording: the tensors fn always reads (static inputs), its calls so far, the graph, and the
    outputs each replay writes."""

    def __init__(self, inputs: list):
        self.inputs, self.calls, self.graph, self.outputs = inputs, 0, None, None


class CudaGraph:
    """fn recorded once into a CUDA graph and then replayed: one launch for all it does (forward, backward, gradient
    clipping, a capturable optimizer's step, a target network's update), with no host work between its kernels.
    A recording is made per graph_key of the arguments (the values of non-tensor ones: a bool, say; the shapes,
    strides and dtypes of tensor ones). Its first call copies the tensor arguments into tensors of its own, the
    static inputs, and every call of fn from then on reads those: each later call copies its arguments in (one
    call for all). So the warm-up calls, the recording and the replays see the very same tensors, and compiled code
    has nothing to recompile for at recording (a recompilation there fails: it reads the generator's seed).
    The first `warmup` calls run fn as it is, on a side stream (they allocate the optimizer's state, let cuDNN and
    cuBLAS pick kernels, and compile); the next call records it, then replays the graph to do its work; later calls
    replay. A replayed call returns the graph's outputs themselves, which the next replay of the same recording
    overwrites: a caller that keeps an output past that copies it. Each graph has its own memory pool, so the
    parameter gradients one graph records stay its own when another graph records gradients of the same parameters.
    Random draws: torch's default generator (registered with each graph by torch), as eager code on the device.
    What fn does outside CUDA kernels happens once, at recording: it must not read tensor values on the host (a
    synchronisation fails the recording), and its Python control flow may depend on its non-tensor arguments only.
    warm_up, record and replay are the CUDA parts; tests/standin.py replaces them to run the rest on the CPU."""

    def __init__(self, fn: Callable, warmup: int = 3):
        self.fn, self.warmup, self.recordings = fn, warmup, {}
        self.side = torch.cuda.Stream() if torch.cuda.is_available() else None

    def __call__(self, *args):
        key = graph_key(args)
        recording = self.recordings.get(key)
        if recording is None:
            inputs = [arg.detach().clone() if isinstance(arg, torch.Tensor) else arg for arg in args]
            recording = self.recordings[key] = Recording(inputs)
        else:
            pairs = [(s, a) for s, a in zip(recording.inputs, args) if isinstance(a, torch.Tensor) and s is not a]
            if pairs:
                torch._foreach_copy_([s for s, _ in pairs], [a for _, a in pairs])
        if recording.calls < self.warmup:
            recording.calls += 1
            return self.warm_up(recording.inputs)
        if recording.graph is None:
            recording.graph, recording.outputs = self.record(recording.inputs)
        self.replay(recording.graph)
        return recording.outputs

    def warm_up(self, inputs: list):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = self.fn(*inputs)
        torch.cuda.current_stream().wait_stream(self.side)
        return out

    def record(self, inputs: list) -> tuple:
        """(graph, outputs) of fn recorded on `inputs`; nothing has run yet."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = self.fn(*inputs)
        return graph, outputs

    def replay(self, graph) -> None:
        graph.replay()


class Ensemble(nn.ModuleList):
    """Networks of one architecture, each with its own weights, called as one on the same inputs: ensemble(*inputs)
    is their outputs stacked, (len(ensemble), ...), and ensemble[i] is network i, a plain module (state dict entries
    "0.fc1.weight", "1.fc1.weight", ...). With `batched` (the GPU path) one torch.vmap over their weights, stacked
    layer by layer as it runs, computes them all: one batched matmul a layer for all of them instead of one matmul a
    layer each. Without it they run one after the other, which on a CPU measured faster for the twin critics'
    sizes. The same function either way, up to rounding."""

    def __init__(self, networks: list[nn.Module], batched: bool = False):
        super().__init__(networks)
        self.batched = batched

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if not self.batched:
            return torch.stack([network(*inputs) for network in self])
        each = [dict(network.named_parameters()) | dict(network.named_buffers()) for network in self]
        stacked = {name: torch.stack([tensors[name] for tensors in each]) for name in each[0]}
        return torch.vmap(lambda tensors: torch.func.functional_call(self[0], tensors, inputs))(stacked)


class PinnedStaging:
    """Host arrays to the device without a synchronisation: each is copied into pinned (page-locked) host memory and
    sent from there with an asynchronous copy, which the host does not wait for (a copy from ordinary memory waits
    for the device to finish all it was given). Each name and shape of arrays has two pinned buffers used in turn
    (a name whose shape varies, as the frames an Atari memory writes, keeps a pair per shape), and one is written
    again only once its last copy is done (an event): the host waits only when it is two steps ahead of the device.
    `dtype` converts on the host, as the array is written into its buffer. Off the GPU path the array becomes a
    tensor as it is (no copy, as torch.as_tensor); on it with CPU tensors (GPU_PATH_ON_CPU) the buffers are
    ordinary memory and the copy a copy."""

    def __init__(self, device: torch.device):
        self.device, self.buffers, self.turns = device, {}, {}
        self.cuda = device.type == "cuda"

    def to_device(self, name: str, array: np.ndarray, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        if not gpu_path(self.device):  # nothing to send: the array as a tensor (no copy, unless dtype converts)
            tensor = torch.as_tensor(array, dtype=dtype)
            return tensor if self.device.type == "cpu" else tensor.to(self.device, non_blocking=True)
        array = np.asarray(array)
        turn = self.turns[name, array.shape] = self.turns.get((name, array.shape), -1) + 1
        key = (name, array.shape, turn % 2)
        if key not in self.buffers:
            pinned = torch.empty(array.shape, dtype=dtype or torch.from_numpy(np.empty(0, array.dtype)).dtype,
                                 pin_memory=self.cuda)
            self.buffers[key] = pinned, torch.cuda.Event() if self.cuda else None
        pinned, copied = self.buffers[key]
        if copied is not None:
            copied.synchronize()
        pinned.numpy()[...] = array
        out = pinned.to(self.device, non_blocking=True, copy=True)
        if copied is not None:
            copied.record()
        return out


def adam(params, lr: float, device: torch.device, eps: float = 1e-8) -> torch.optim.Adam:
    """torch's Adam, set up for the speed flags: the learning rate is a tensor, annealed in place
    (param_groups[0]["lr"].fill_), so a compiled update reads the new value instead of recompiling for every new float;
    capturable on the GPU path keeps Adam's step count on the device, as CUDA graphs need; fused: one kernel updates
    every parameter (faster on a CPU than torch's per-tensor loop). The math is Adam's."""
    return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), eps=eps, capturable=gpu_path(device),
                            fused=True)


def nbytes(tensors) -> int:
    """The bytes `tensors` take, or would take: tensors on the meta device have shapes and dtypes but no memory, as
    have the jax.ShapeDtypeStruct leaves of jax.eval_shape's output (JAX arrays count too)."""
    return sum(t.element_size() * t.nelement() if isinstance(t, torch.Tensor) else t.size * t.dtype.itemsize
               for t in tensors)


def available_memory(cuda: bool = False) -> tuple[int, str]:
    """(bytes, whose) that a new allocation can take now: with cuda (and a GPU) the free memory of this process's GPU
    (LOCAL_RANK's); else this machine's available RAM (MemAvailable: free memory and the caches the kernel can give
    back), or all of its RAM where /proc/meminfo cannot be read."""
    if cuda and torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        return torch.cuda.mem_get_info(index)[0], f"GPU {index} ({torch.cuda.get_device_name(index)}) has"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this machine has"
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"


def check_memory(flags: str, nbytes: int, what: str = "a replay memory", cuda: bool = False) -> None:
    """Fail in one line, before any work starts, when an allocation the flags size (`what`, `nbytes`) exceeds the
    memory available to it (available_memory: the GPU's with cuda, where the run uses one)."""
    have, whose = available_memory(cuda)
    if nbytes > have:
        fail(f"{flags} asks for {what} of {nbytes:,} bytes ({nbytes / 2**30:,.1f} GiB); {whose} {have:,} bytes "
             f"({have / 2**30:,.1f} GiB) available")
