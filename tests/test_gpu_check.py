"""benchmark/gpu_check.py on a CPU machine: what it can check without a GPU. It refuses in one line, its steps
parse with the CLIs they call and fit the time limit, and its step runner stops a step at its limit (with the
step's children) and writes the summary. The speed anchor (benchmark/speed_anchor.py, anchor_launch.py): its plan and
dry run, why a LeanRL row cannot run, its windows, the profiler arithmetic, its table, and its launcher on tiny
scripts."""

import json
import os
import subprocess
import sys
import time

import pytest
import tyro

from benchmark import speed_anchor, throughput
from benchmark.gpu_check import ANCHOR_MARGIN_S, Step, plan, run_step, write_summary
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
    assert "20 tests collected" in collect.stdout, collect.stdout[-2000:]
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


# The speed anchor (benchmark/speed_anchor.py, the step speed-anchor): what runs without a GPU


def anchor_args(tmp_path, *flags: str) -> speed_anchor.Args:
    """The anchor's arguments as its command line gives them, with its folders in tmp_path unless flags name others."""
    return tyro.cli(speed_anchor.Args, args=["--leanrl", str(tmp_path / "leanrl"), "--leanrl-env", str(tmp_path / "env"),
                                             "--out", str(tmp_path / "anchor"), *flags])  # fmt: skip


def fake_leanrl(tmp_path, python: str) -> None:
    """A LeanRL snapshot and environment folder as benchmark/device_env.py lays them out, for Python `python`."""
    (tmp_path / "leanrl" / "leanrl").mkdir(parents=True)
    (tmp_path / "env" / "wheels").mkdir(parents=True)
    (tmp_path / "env" / "manifest.json").write_text(json.dumps({"python": python, "unpack": ["wheels/numpy-1.26.4.whl"]}))


def test_the_speed_anchor_step_gets_its_share_and_the_command_it_runs_parses(tmp_path):
    out = tmp_path / "out"
    (step,) = plan(out, 8.0, steps=("speed-anchor",))
    assert step.name == "speed-anchor" and step.seconds == 0.95 * 8 * 60
    args = tyro.cli(speed_anchor.Args, args=step.command[2:])
    # the tool bounds itself a margin inside the step's limit, so it writes its table before it could be stopped
    assert args.minutes * 60 == pytest.approx(step.seconds - ANCHOR_MARGIN_S, abs=1)
    assert args.out == str(out / "speed-anchor") and args.scripts == speed_anchor.DEFAULT_SCRIPTS and args.cuda
    # with the other two steps the three share the time; given more time (the last step), its own bound follows
    steps = plan(out, 8.0, steps=("cuda-tests", "throughput", "speed-anchor"))
    assert [s.name for s in steps] == ["cuda-tests", "throughput", "speed-anchor"]
    assert sum(s.seconds for s in steps) <= 8 * 60
    anchor = steps[-1]
    anchor.fit(300)
    assert tyro.cli(speed_anchor.Args, args=anchor.command[2:]).minutes == pytest.approx((300 - ANCHOR_MARGIN_S) / 60, abs=0.01)
    # the default steps are the two of before, with the same shares
    assert [(s.name, round(s.seconds, 6)) for s in plan(out, 8.0)] == [("cuda-tests", 216), ("throughput", 240)]


def test_the_dry_run_lists_every_step_and_every_run_of_the_anchor_with_why_leanrl_cannot_run(tmp_path):
    proc = gpu_check("--dry-run", "--steps", "cuda-tests", "throughput", "speed-anchor", "--leanrl", "nowhere", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(at most ") == 3
    for script in speed_anchor.DEFAULT_SCRIPTS:
        for run in ("ours-plain", "ours-compile+cudagraphs", "profile-compile+cudagraphs-W ", "profile-compile+cudagraphs-WM "):
            assert f"[{script}] {run}" in proc.stdout, (script, run)
        assert f"[{script}] leanrl compile+cudagraphs: not run (no LeanRL snapshot at {tmp_path / 'nowhere'}" in proc.stdout
    assert proc.stdout.count("--total-timesteps") == 4 * 4  # each script: plain, compiled, two profiled runs
    # a step name it does not know is refused by its CLI
    assert gpu_check("--dry-run", "--steps", "nope", cwd=tmp_path).returncode != 0


def test_leanrl_runs_use_its_flags_environment_and_budgets_and_say_why_they_cannot_run(tmp_path):
    args = anchor_args(tmp_path)
    assert speed_anchor.leanrl_problem(args).startswith(f"no LeanRL snapshot at {tmp_path / 'leanrl'}")
    (tmp_path / "leanrl" / "leanrl").mkdir(parents=True)
    assert speed_anchor.leanrl_problem(args).startswith(f"no LeanRL environment at {tmp_path / 'env'}")
    fake_leanrl(tmp_path / "other", "3.99")
    other = anchor_args(tmp_path / "other")
    assert "was built for Python 3.99 and this is Python" in speed_anchor.leanrl_problem(other)
    # each row's LeanRL cell then says why, and its runs are not planned
    _, timed, not_run = speed_anchor.plan(other, speed_anchor.leanrl_problem(other), tmp_path / "unpacked")
    assert not any(r.kind == "leanrl" for r in timed)
    assert all("was built for Python 3.99" in not_run[s]["leanrl compile+cudagraphs"] for s in speed_anchor.DEFAULT_SCRIPTS)

    fake_leanrl(tmp_path / "ok", f"{sys.version_info.major}.{sys.version_info.minor}")
    ok = anchor_args(tmp_path / "ok")
    assert speed_anchor.leanrl_problem(ok) is None
    parallel, timed, not_run = speed_anchor.plan(ok, None, tmp_path / "unpacked")
    lean = {r.script: r for r in timed if r.kind == "leanrl"}
    sac = lean["sac_continuous_action"]
    # its snapshot's script under the launcher, the unpacked wheels first on PYTHONPATH, then its packages
    assert sac.command[2:5] == ["leanrl", "marks.json", str(tmp_path / "ok" / "leanrl" / "leanrl" / "sac_continuous_action_torchcompile.py")]
    assert sac.pythonpath.split(os.pathsep)[:2] == [str(tmp_path / "unpacked"), str(tmp_path / "ok" / "env")]
    flags = " ".join(sac.command)
    assert "--env-id HalfCheetah-v4 --seed 1 --total-timesteps 6500 --cuda --learning-starts 1000" in flags
    assert flags.endswith("--compile --cudagraphs") and "--q-lr 1e-3" in flags
    assert " --total-timesteps 14336 " in " ".join(lean["ppo_atari"].command)  # 4 + 10 iterations of 8 x 128
    assert " --total-timesteps 28672 " in " ".join(lean["ppo_continuous_action"].command)  # 4 + 10 of 2048
    # the compiled LeanRL runs also run once at the warm-up budget beside the profiled ones, to fill Inductor's cache
    assert {(r.script, r.steps) for r in parallel if r.kind == "warm"} >= {("sac_continuous_action", 1500), ("ppo_atari", 4096)}
    # order: ours compiled, LeanRL's, then ours plain
    kinds = [r.kind if r.variant != "plain" else "plain" for r in timed]
    assert kinds == sorted(kinds, key=["ours", "leanrl", "plain"].index)

    # the packages found in its environment decide per script (LEANRL_NEEDS)
    good = {n: {"version": v} for n, v in [("tensordict", "0.8.3"), ("torchrl", "0.8.1"), ("gymnasium", "0.29.1"),
                                           ("numpy", "1.26.4"), ("mujoco", "4.0.1"), ("tyro", "1.0.17"), ("tqdm", "4.70.1")]}  # fmt: skip
    assert speed_anchor.needs_problem("sac_continuous_action", good) is None
    newer = dict(good, tensordict={"version": "0.14.3"})
    assert speed_anchor.needs_problem("sac_continuous_action", newer).startswith("tensordict 0.14.3 in its environment: its policy")
    assert speed_anchor.needs_problem("td3_continuous_action", newer) is None
    gym1 = dict(good, gymnasium={"version": "1.4.0"})
    assert speed_anchor.needs_problem("ppo_continuous_action", gym1).startswith("gymnasium 1.4.0 in its environment")
    missing = dict(good, envpool={"error": "ModuleNotFoundError: No module named 'envpool'"})
    why = speed_anchor.needs_problem("ppo_atari", missing)
    assert why.startswith("cannot import envpool from LeanRL's environment (ModuleNotFoundError") and "envpool<1" in why


def test_per_step_counts_are_the_difference_of_the_two_profiled_runs_over_the_steps_between():
    # W: start-up, compilation, recording and W steps; W + M: the same and M more steps, 2 graph replays and one
    # synchronising read each
    w = {"cudaGraphLaunch": 1000, "cudaStreamSynchronize": 700, "cudaDeviceSynchronize": 3, "cudaLaunchKernel": 9000,
         "Memcpy DtoH (Device -> Pageable)": 650, "Memcpy HtoD (Pageable -> Device)": 40, "aten::_local_scalar_dense": 640,
         "aten::mm": 123456}  # fmt: skip
    wm = dict(w, cudaGraphLaunch=2000, cudaStreamSynchronize=1200, cudaEventSynchronize=5, cudaLaunchKernel=9000,
              **{"Memcpy DtoH (Device -> Pageable)": 1150, "Memcpy DtoH (Device -> Pinned)": 10,
                 "aten::_local_scalar_dense": 1140})  # fmt: skip
    counts = speed_anchor.per_step(w, wm, 500)
    assert counts["graph launches"] == 2.0
    assert counts["syncs"] == (500 + 5) / 500 and counts["syncs by call"] == {
        "cudaStreamSynchronize": 1.0, "cudaDeviceSynchronize": 0.0, "cudaEventSynchronize": 0.01}
    assert counts["D2H copies"] == 510 / 500 and counts["H2D copies"] == 0 and counts["kernel launches"] == 0
    assert counts["host reads"] == 1.0


def test_ours_and_leanrl_are_timed_over_the_same_window(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    args = anchor_args(tmp_path)
    w = speed_anchor.windows(throughput.SPECS["sac_continuous_action"], args)
    assert (w["warmup"], w["measured"], w["total"], w["profiled"]) == (1500, 5000, 6500, 500)
    ppo = speed_anchor.windows(throughput.SPECS["ppo_continuous_action"], args)
    assert (ppo["warmup"], ppo["measured"], ppo["item"]) == (4 * 2048, 10 * 2048, 2048)
    # ours: charts/SPS every 100 steps from the first update on, 10 s of compilation before step 1500 and 50 SPS
    # after it; the window starts at the event of step 1500
    start = 1_000_000.0
    work = tmp_path / "ours"
    writer = SummaryWriter(str(work / "runs" / "r"))
    for step in range(1100, 6600, 100):
        wall = start + 30 + step / 1000 if step <= 1500 else start + 30 + 1.5 + (step - 1500) / 50
        writer.add_scalar("charts/SPS", 7, step, walltime=wall)
    writer.close()
    r = speed_anchor.ours_result(None, w, work, start, {"process_seconds": 200.0})
    assert r["sps"] == pytest.approx(50) and r["window_steps"] == [1500, 6500] and r["own_sps"] == 7
    assert r["warmup_seconds"] == pytest.approx(31.5)
    # LeanRL's: a mark at the start of each loop item and one at its end; the same steps, at 40 SPS after 1500
    marks = [[k, start + k / 1000 if k <= 1500 else start + 1.5 + (k - 1500) / 40] for k in range(6501)]
    assert speed_anchor.marks_window(marks, 1500, 1) == (1500, start + 1.5, 6500, start + 1.5 + 125)
    (tmp_path / "lean").mkdir()
    (tmp_path / "lean" / "marks.json").write_text(json.dumps(
        {"marks": [[[0, start], [1, start + 1]], marks], "logged": [{"step": 6400, "time": 0, "speed": 39.0}], "exit_code": 0}))
    r = speed_anchor.leanrl_result(None, w, tmp_path / "lean", start - 5, {"process_seconds": 200.0})
    assert r["sps"] == pytest.approx(40) and r["window_steps"] == [1500, 6500] and r["own_sps"] == 39.0
    # PPO: a mark per iteration, 2048 steps each
    assert speed_anchor.marks_window([[k, float(k)] for k in range(15)], 4 * 2048, 2048) == (4 * 2048, 4.0, 14 * 2048, 14.0)
    assert speed_anchor.marks_window([[k, float(k)] for k in range(4)], 4 * 2048, 2048) is None  # too short


def test_the_table_says_why_a_cell_is_empty_and_gives_the_ratio_and_counts(tmp_path):
    header = {"command": "python benchmark/speed_anchor.py", "cuda": True, "started": "x", "variants": ["compile+cudagraphs"],
              "leanrl_variants": ["compile+cudagraphs"], "profile_variants": ["compile+cudagraphs"], "leanrl": "L",
              "leanrl_env": "E", "leanrl_note": None,
              "machine": {"cpu": "16 CPU cores", "gpu": "GPU 0: H100", "python": "3.12", "torch": "2.11"}}  # fmt: skip
    counts = speed_anchor.per_step({}, {"cudaGraphLaunch": 1000, "cudaStreamSynchronize": 500}, 500)
    rows = [
        {"script": "sac_continuous_action", "env_id": "HalfCheetah-v5", "leanrl_env_id": "HalfCheetah-v4", "window": "steps",
         "cells": {"ours plain": {"sps": 98.4, "window_steps": [1500, 6500], "window_seconds": 50.8, "process_seconds": 70.0},
                   "ours compile+cudagraphs": {"sps": 148.0}, "leanrl compile+cudagraphs": {"sps": 740.0}},
         "profile": {"compile+cudagraphs": dict(counts, steps=500)}},
        {"script": "ppo_atari", "env_id": "BreakoutNoFrameskip-v4", "leanrl_env_id": "Breakout-v5", "window": "its",
         "cells": {"ours plain": {"not_run": "not run (about 18 s needed, 3 s left of --minutes 7.27)"},
                   "ours compile+cudagraphs": {"error": "exit 1: RuntimeError: boom (log x)", "process_seconds": 5.0},
                   "leanrl compile+cudagraphs": {"not_run": "not run (cannot import envpool)"}},
         "profile": {"compile+cudagraphs": {"error": "profile-compile+cudagraphs-W: stopped at the phase's limit"}}},
    ]  # fmt: skip
    speed_anchor.write(tmp_path, header, rows)
    md = (tmp_path / "results.md").read_text()
    assert "| sac_continuous_action | HalfCheetah-v5 / HalfCheetah-v4 | steps | 98 | 148 | 740 | 0.20 |" in md
    assert "| ppo_atari | BreakoutNoFrameskip-v4 / Breakout-v5 | its | not run (about 18 s needed" in md
    assert "| failed: exit 1: RuntimeError: boom (log x) | not run (cannot import envpool) | - |" in md
    assert "| sac_continuous_action | compile+cudagraphs | 500 | 2 | 1 | 0 | 0 | 0 | 0 | 1 / 0 / 0 |" in md
    assert "| ppo_atari | compile+cudagraphs | - | failed: profile-compile+cudagraphs-W: stopped" in md
    assert "| sac_continuous_action | ours plain | 98 | 1500-6500 | 50.8 | - | 70.0 | - |  |" in md
    assert json.loads((tmp_path / "results.json").read_text())["rows"][1]["cells"]["ours plain"]["not_run"].startswith("not run")


def test_without_time_for_its_runs_the_anchor_still_writes_a_table_that_says_why_of_each_cell(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmark/speed_anchor.py"), "--no-cuda", "--minutes", "0.001", "--leanrl",
           "nowhere", "--leanrl-variants", "plain", "compile+cudagraphs", "--scripts", "sac_continuous_action", "ppo_atari",
           "--out", "anchor"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "anchor" / "results.json").read_text())
    sac, atari = results["rows"]
    assert sac["cells"]["ours plain"]["not_run"].startswith("not run (about ")
    assert sac["cells"]["ours compile+cudagraphs"]["not_run"] == "n/a (cudagraphs: CUDA only)"
    assert sac["cells"]["leanrl plain"]["not_run"].startswith("not run (no LeanRL snapshot at nowhere")
    assert sac["cells"]["leanrl compile+cudagraphs"]["not_run"] == "n/a (cudagraphs: CUDA only)"
    assert atari["profile"]["compile+cudagraphs"]["not_run"] == "n/a (cudagraphs: CUDA only)"
    md = (tmp_path / "anchor" / "results.md").read_text()
    assert "| sac_continuous_action | HalfCheetah-v5 / HalfCheetah-v4 | steps 1501-6500 (after 1000 random and 500 learning steps) | not run (about" in md
    assert not list((tmp_path / "anchor").glob("work/*/*/runs"))  # no script ran


def launch(tmp_path, mode: str, script: str, *argv: str) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(script)
    cmd = [sys.executable, str(ROOT / "benchmark/anchor_launch.py"), mode, "out.json", str(path), *argv]
    return subprocess.run(cmd, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=120, check=False)


def test_the_launcher_marks_a_leanrl_loop_and_records_its_wandb_logs_without_wandb(tmp_path):
    script = ("import sys, tqdm, wandb\nwandb.init(project='p', config={'a': 1})\n"
              "for i in tqdm.tqdm(range(int(sys.argv[1]))):\n    wandb.log({'speed': 2.5 * i, 'note': 'x'}, step=i)\n"
              "sys.exit(int(sys.argv[2]))\n")  # fmt: skip
    proc = launch(tmp_path, "leanrl", script, "5", "0")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "out.json").read_text())
    (marks,) = record["marks"]
    assert [m[0] for m in marks] == [0, 1, 2, 3, 4, 5] and all(a[1] <= b[1] for a, b in zip(marks, marks[1:]))
    assert [(r["step"], r["speed"]) for r in record["logged"]] == [(i, 2.5 * i) for i in range(5)]
    assert record["init"] == {"project": "p"} and not (tmp_path / "wandb").exists()
    # the script's exit code is the launcher's, and the record is written all the same
    assert launch(tmp_path, "leanrl", script, "2", "3").returncode == 3
    assert len(json.loads((tmp_path / "out.json").read_text())["marks"][0]) == 3


def test_the_launcher_profiles_a_run_and_two_budgets_give_the_per_step_count(tmp_path):
    script = ("import sys, torch\nx = torch.ones(3)\nfor _ in range(2):\n    x.max().item()\n"  # start-up: 2 reads
              "for _ in range(int(sys.argv[1])):\n    float(x.sum())\nsys.exit(sys.argv[2] if len(sys.argv) > 2 else 0)\n")  # fmt: skip
    counts = []
    for argv, code in ((["5"], 0), (["15", "error: the end"], 1)):
        proc = launch(tmp_path, "profile", script, *argv)
        assert proc.returncode == code, proc.stderr
        record = json.loads((tmp_path / "out.json").read_text())
        assert record["exit_code"] == code and record["activities"] == ["CPU"]
        counts.append(record["counts"])
    # a script's SystemExit("error: ...") is its exit 1 with the message, as python gives it; its counts are written
    assert "error: the end" in proc.stderr
    assert counts[1]["aten::_local_scalar_dense"] == 17
    assert speed_anchor.per_step(counts[0], counts[1], 10)["host reads"] == 1.0


def test_the_parallel_runs_stop_at_their_limit_and_say_so(tmp_path):
    args = anchor_args(tmp_path)
    runs = [speed_anchor.Run("ppo", "profile", "plain", 1, [sys.executable, "-c", "print('ok')"], None, 1, "W"),
            speed_anchor.Run("ppo", "profile", "plain", 2, [sys.executable, "-c", "import sys; sys.exit(4)"], None, 1, "WM"),
            speed_anchor.Run("dqn", "warm", "compile", 3, [sys.executable, "-c", "import time; time.sleep(60)"], None, 1)]  # fmt: skip
    start = time.time()
    results = speed_anchor.run_parallel(runs, tmp_path, args, limit=3)
    assert time.time() - start < 30
    assert results[("ppo", "profile-plain-W")]["exit_code"] == 0
    assert results[("ppo", "profile-plain-WM")]["error"].startswith("exit 4")
    assert results[("dqn", "warm-compile")]["error"].startswith("stopped at the parallel runs' limit of 3 s")
