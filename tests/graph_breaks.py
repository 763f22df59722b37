"""Graph breaks of --compile: the parser of torch's graph_breaks log and the breaks torch forces (UNAVOIDABLE).

A graph break splits a compiled function into several graphs with eager Python between them: each break costs a
return to the interpreter, and on a GPU it ends a fused region (and, under --cudagraphs, the captured graph). The
GPU-speed work asks that compiled code break only where torch itself forces it. The compile parity test of every
script (tests/test_compile.py, through tests/helpers.py's assert_compile_parity) runs its compiled path with
TORCH_LOGS=graph_breaks and calls assert_only_unavoidable_breaks: every break dynamo records is parsed from stderr
(its reason, and the innermost line of cleanrl/ on its user stack), and each must be one of UNAVOIDABLE, which says
why it cannot be avoided. Any other break fails with its reason, where it is and how often it occurred. Dynamo logs a
break when it compiles a frame, so a count is per compilation, not per call.
"""

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # (tests/helpers.py imports this module)

# a line of the graph_breaks log, after glog's prefix: "[frame/compile] [__graph_breaks] text"; under torchrun each
# line starts with its rank ("[rank1]:"), and the ranks' lines interleave
LOG_LINE = re.compile(r"^(?:\[rank(\d+)\]:)?[IWEV]\d{4} [\d:.]+ \d+ \S+\] \[[^\]]+\] \[__graph_breaks\] ?(.*)$")
HEADER = re.compile(r"^Graph break(?: \(user stack suppressed due to duplicate graph break\))? in user code at (.+)$")
FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
CLEANRL = str(ROOT / "cleanrl") + "/"
OPTIM = "/torch/optim/"


@dataclass(frozen=True)
class Break:
    """One graph break dynamo logged: its reason (the first line of the record after `Graph Break Reason:`), its
    explanation, the torch or user line it happened at, and the innermost line of cleanrl/ that led there."""

    reason: str
    explanation: str
    at: str  # FILE:LINE of the record's header
    location: str  # cleanrl/FILE:LINE  source, or `at` when no line of cleanrl/ is on the stack


@dataclass(frozen=True)
class Unavoidable:
    reason: str  # the break's reason line starts with this
    why: str  # why it cannot be avoided
    explanation: str = ""  # and its explanation contains this
    at: str = ""  # and its header's FILE:LINE contains this


UNAVOIDABLE = {
    "Tensor.backward()": Unavoidable(
        "Unsupported Tensor.backward() call",
        "dynamo does not trace the backward pass: compiled autograd compiles it on its own, and "
        "torch._dynamo.config.trace_autograd_ops is experimental (tried on torch 2.13: the parameters did not "
        "change)"),
    "the optimizer step's graph_break()": Unavoidable(
        "Call to `torch._dynamo.graph_break()`",
        "torch/optim/optimizer.py's _use_grad breaks the graph on purpose around every Optimizer.step, so that "
        "the step's grad mode is not traced into the caller's graph (pytorch/pytorch#104053)",
        at=OPTIM + "optimizer.py"),
    "the optimizer step's fused kernel": Unavoidable(
        "Skip calling `torch.compiler.disable()`d function",
        "torch.optim's fused Adam kernel is wrapped in torch.compiler.disable by torch itself (\"don't trace into "
        "fused optimizer\"): one kernel already, it runs as it is",
        explanation="don't trace into fused optimizer", at=OPTIM),
    "an optimizer step kept out of dynamo": Unavoidable(
        "Skip calling `torch.compiler.disable()`d function",
        "DDPG's, TD3's and SAC's gradient_step (zero_grad, backward, step) and PPG's clipped_step (clipping, step) "
        "are torch.compiler.disable'd: they hold the breaks above (backward, the optimizer step's) and a fused Adam "
        "step that runs as one eager kernel anyway, and dynamo would compile Adam.step again for every optimizer "
        "object (three in SAC) or, in PPG, again in each phase; --cudagraphs records them with the rest all the same",
        explanation="an optimizer step, kept out of dynamo"),
    "the host replay memory's sample": Unavoidable(
        "Skip inlining `torch.compiler.disable()`d function",
        "DDPG's, TD3's and SAC's updates sample their batch themselves; from a replay memory in host memory the "
        "sample is numpy's generator and host arrays (replay_memory.ReplayBuffer.sample, torch.compiler.disable'd), "
        "which dynamo cannot trace; the memory in a GPU's memory samples with torch ops that it traces",
        explanation="host sampling"),
    "Optimizer.zero_grad": Unavoidable(
        "Attempted to inline function marked as skipped",
        "dynamo marks Optimizer.zero_grad as skipped (torch/_compile.py's disable wrapper): it sets the gradients "
        "to None outside the graph",
        explanation="`Optimizer.zero_grad` should not be traced"),
}


def graph_break_log(stderr: str) -> list[str]:
    """The text of the graph_breaks log lines of stderr, without glog's prefix, one process after the other (each
    torchrun rank's lines in their order)."""
    by_process: dict[str, list[str]] = {}
    for m in map(LOG_LINE.match, stderr.splitlines()):
        if m:
            by_process.setdefault(m.group(1) or "", []).append(m.group(2))
    return [text for lines in by_process.values() for text in lines]


def source_line(path: str, line: int) -> str:
    with open(path) as f:
        return f.read().splitlines()[line - 1].strip()


def parse_breaks(stderr: str) -> list[Break]:
    """Every graph break of a TORCH_LOGS=graph_breaks run, in order. A record whose user stack dynamo suppressed (a
    duplicate of an earlier break at the same place) takes the location of the last full record there."""
    records, lines = [], graph_break_log(stderr)
    for text in lines:
        if HEADER.match(text):
            records.append([text])
        elif records:
            records[-1].append(text)
    breaks, located = [], {}
    for record in records:
        at = HEADER.match(record[0]).group(1)
        body = record[1:]
        start = next((i for i, t in enumerate(body) if t.startswith("Graph Break Reason:")), None)
        assert start is not None, "\n".join(record)
        reason = next(t.strip() for t in body[start + 1:] if t.strip())
        explanation = next((t.strip() for t in body[start + 1:] if t.strip().startswith("Explanation:")), "")
        explanation = re.sub(r" at 0x[0-9a-f]+>", ">", explanation)  # `<function f at 0x7f...>`: one name per run
        frames = []
        if "User code traceback:" in body:
            for t in body[body.index("User code traceback:") + 1:]:
                m = FRAME.match(t)
                if m:
                    frames.append((m.group(1), int(m.group(2))))
        ours = [(path, line) for path, line in frames if path.startswith(CLEANRL)]
        if ours:
            path, line = ours[-1]
            location = f"{Path(path).relative_to(ROOT)}:{line}  {source_line(path, line)}"
            located[at] = location
        else:
            location = located.get(at, at)
        breaks.append(Break(reason, explanation, at, location))
    return breaks


def unavoidable(brk: Break) -> str | None:
    """The name of the UNAVOIDABLE entry a break is, or None."""
    for name, u in UNAVOIDABLE.items():
        if brk.reason.startswith(u.reason) and u.explanation in brk.explanation and u.at in brk.at:
            return name
    return None


def break_table(breaks: list[Break]) -> str:
    """count  reason  location, one line per (reason, location), most frequent first."""
    counts = Counter((b.reason, b.explanation, b.location) for b in breaks)
    return "\n".join(f"{n:4}  {reason}  [{explanation}]  at {location}"
                     for (reason, explanation, location), n in counts.most_common())


def assert_only_unavoidable_breaks(name: str, stderr: str) -> None:
    """Every graph break in a TORCH_LOGS=graph_breaks run's stderr is one of UNAVOIDABLE; else fail with a table."""
    breaks = parse_breaks(stderr)
    assert "[__graph_breaks]" not in stderr or breaks, "graph_breaks log lines but no record parsed"
    avoidable = [b for b in breaks if unavoidable(b) is None]
    assert not avoidable, (f"{name}: {len(avoidable)} of {len(breaks)} graph breaks are not among UNAVOIDABLE "
                           f"(count, reason, [explanation], where):\n{break_table(avoidable)}\nall of them:\n"
                           f"{break_table(breaks)}")
