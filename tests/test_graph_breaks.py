"""The graph-break census of tests/graph_breaks.py, checked on its own: it reads torch 2.13's graph_breaks log, and
it names every break it allows (the compile parity test of every script, tests/test_compile.py, applies it)."""

import pytest

from tests.graph_breaks import ROOT, Break, assert_only_unavoidable_breaks, parse_breaks, source_line, unavoidable

# two records as torch 2.13 logs them: a full one, and a duplicate whose user stack dynamo suppressed
PREFIX = "V1206 06:53:41.191000 1 torch/_dynamo/symbolic_convert.py:5124] [2/0] [__graph_breaks] "
RECORDS = [
    "Graph break in user code at {ppo}:274",
    "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):",
    "",
    "Unsupported Tensor.backward() call",
    "  Explanation: Dynamo currently does not support tracing `Tensor.backward()` when trace_autograd_ops is off.",
    "User code traceback:",
    '  File "{ppo}", line 1, in update',
    "    loss.backward()",
    "",
    "Graph break (user stack suppressed due to duplicate graph break) in user code at {ppo}:274",
    "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):",
    "",
    "Call to `torch._dynamo.graph_break()`",
    "  Explanation: User-inserted graph break. Message: None",
]


def test_the_log_parser_reads_the_records_of_torch_2_13():
    ppo = ROOT / "cleanrl" / "ppo.py"
    stderr = "\n".join(["another line"] + [PREFIX + line.format(ppo=ppo) for line in RECORDS])
    location = f"cleanrl/ppo.py:1  {source_line(str(ppo), 1)}"
    breaks = parse_breaks(stderr)
    assert breaks == [
        Break("Unsupported Tensor.backward() call", "Explanation: Dynamo currently does not support tracing "
              "`Tensor.backward()` when trace_autograd_ops is off.", f"{ppo}:274", location),
        Break("Call to `torch._dynamo.graph_break()`", "Explanation: User-inserted graph break. Message: None",
              f"{ppo}:274", location),
    ]
    # a graph_break() is the optimizer's own only in torch/optim/optimizer.py
    assert [unavoidable(b) for b in breaks] == ["Tensor.backward()", None]


def test_a_break_that_is_not_named_fails_with_its_reason_and_place():
    ppo = ROOT / "cleanrl" / "ppo.py"
    stderr = "\n".join(PREFIX + line.format(ppo=ppo) for line in RECORDS)
    with pytest.raises(AssertionError) as e:
        assert_only_unavoidable_breaks("ppo.py", stderr)
    assert "1 of 2 graph breaks are not among UNAVOIDABLE" in str(e.value) and "cleanrl/ppo.py:1" in str(e.value)
