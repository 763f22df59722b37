"""benchmark/gpu_check.py on a CPU machine: what it can check without a GPU. It refuses in one line, its steps
parse with the CLIs they call and fit the time limit, and its step runner stops a step at its limit (with the
step's children) and writes the summary."""

import json
import os
import subprocess
import sys
import time

import tyro

from benchmark import throughput
from benchmark.gpu_check import Step, plan, run_step, write_summary
from tests.helpers import ROOT, script_env


def gpu_check(*args: str, cwd) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmark/gpu_check.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=script_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=120, check=False)


def test_without_cuda_it_refuses_in_one_line_and_writes_nothing(tmp_path):
    proc = gpu_check("--out", "check", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: no CUDA device (torch.cuda.is_available() is False): run the GPU check on a machine with an NVIDIA GPU"
    ]
    assert not (tmp_path / "check").exists()


def test_the_steps_parse_and_fit_the_time_limit(tmp_path):
    steps = plan(tmp_path / "out", 8.0)
    assert [s.name for s in steps] == ["cuda-tests", "throughput"] and sum(s.seconds for s in steps) <= 8 * 60
    tests, table = steps
    # the tests it names are collected on this machine (and skip here for want of CUDA)
    collect = subprocess.run([*tests.command[:4], "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert collect.returncode == 0, collect.stdout[-2000:]
    assert "17 tests collected" in collect.stdout, collect.stdout[-2000:]
    # the throughput command parses with the tool's own flags and names scripts it knows
    args = tyro.cli(throughput.Args, args=table.command[2:])
    assert args.cuda and not args.sb3 and set(args.scripts) <= set(throughput.SPECS)
    assert args.out == str(tmp_path / "out" / "speed-gpu")
    # every run of the table is killed by the tool's own timeout before the step's limit could cut a row short
    assert args.timeout < table.seconds
    proc = gpu_check("--dry-run", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("(at most ") == 2
    # --scripts chooses the table's rows; a name the table does not know is refused in one line
    proc = gpu_check("--dry-run", "--scripts", "dqn", "c51_atari", cwd=tmp_path)
    assert proc.returncode == 0 and "--scripts dqn c51_atari --variants" in proc.stdout
    proc = gpu_check("--dry-run", "--scripts", "dqn", "nope", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[0].startswith("error: --scripts nope: the table knows")


def test_a_step_past_its_limit_is_stopped_with_its_children_and_the_summary_says_so(tmp_path):
    hang = "import subprocess, time; p = subprocess.Popen(['sleep', '120']); print('child', p.pid, flush=True); time.sleep(120)"
    steps = [
        Step("ok", [sys.executable, "-c", "print('fine')"], 30),
        Step("fails", [sys.executable, "-c", "import sys; print('bad'); sys.exit(3)"], 30),
        Step("hangs", [sys.executable, "-c", hang], 2),
    ]
    start = time.time()
    results = [run_step(s, tmp_path) for s in steps]
    assert time.time() - start < 60
    assert [r["exit_code"] for r in results[:2]] == [0, 3]
    assert results[0]["tail"][-1] == "fine" and results[1]["tail"][-1] == "bad"
    hung = results[2]
    assert hung["exit_code"] != 0 and hung["note"] == "stopped at its time limit of 2 s"
    child = int((tmp_path / "hangs.log").read_text().split("child ")[1].split()[0])
    time.sleep(0.5)
    assert not os.path.exists(f"/proc/{child}") or "Z" in open(f"/proc/{child}/stat").read().split()[2], "the step's child outlived it"
    write_summary(tmp_path, {"gpu": "test", "torch": "x", "cuda": "y"}, results)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == ["ok", "fails", "hangs"]
    md = (tmp_path / "summary.md").read_text()
    assert "| fails | 3 |" in md and "stopped at its time limit of 2 s" in md
