"""benchmark/gpu_check.py on a CPU machine: what it can check without a GPU. It refuses in one line, its steps
parse with the CLIs they call and fit the time limit with their shares, its step runner stops a step at its limit
(with the step's children) and writes the summary, which names every file, and it packs its results for the device
tool. What prepares the GPU machine: benchmark/device_env.py's size refusal and the device tool's call it prints (the
one docs/speed.md shows), and benchmark/device_install.py on small wheels. The speed anchor
(benchmark/speed_anchor.py, anchor_launch.py): its plan and dry run, why a LeanRL row cannot run, its windows, the
profiler arithmetic, its table, and its launcher on tiny scripts."""

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
import types
import zipfile

import pytest
import torch
import tyro

from benchmark import device_env, speed_anchor, throughput
from benchmark import gpu_check as tool
from benchmark.gpu_check import ANCHOR_MARGIN_S, PACK_MAX_MIB, PACKED, STEP_FILES, STEP_WEIGHTS, STEPS, Step, limit, pack, plan
from benchmark.gpu_check import Args as CheckArgs
from benchmark.gpu_check import run_step, write_summary
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
    steps = plan(tmp_path / "out", 7.5)
    assert [s.name for s in steps] == ["cuda-tests", "throughput", "speed-anchor"]
    # the three share 95% of the limit in the proportions of STEP_WEIGHTS, which say what each share is for
    assert sum(s.seconds for s in steps) == pytest.approx(0.95 * 7.5 * 60)
    assert [round(s.seconds) for s in steps] == [115, 51, 261] and [s.share for s in steps] == list(STEP_WEIGHTS.values())
    tests, table, anchor = steps
    # the tests it names are collected on this machine (and skip here for want of CUDA)
    collect = subprocess.run([*tests.command[:4], "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert collect.returncode == 0, collect.stdout[-2000:]
    collected = re.search(r"(\d+) tests? collected", collect.stdout)
    assert collected and int(collected.group(1)) >= 10, collect.stdout[-2000:]  # every CUDA parity case
    # the throughput command parses with the tool's own flags and names scripts it knows
    args = tyro.cli(throughput.Args, args=table.command[2:])
    assert args.cuda and not args.sb3 and set(args.scripts) <= set(throughput.SPECS)
    assert args.out == str(tmp_path / "out" / "speed-gpu")
    # every run of the table is killed by the tool's own timeout before the step's limit could cut a row short
    assert args.timeout < table.seconds
    # the anchor's shorter windows (ANCHOR_FLAGS) and its own bound inside the step's limit
    anchor_args = tyro.cli(speed_anchor.Args, args=anchor.command[2:])
    assert (anchor_args.offpolicy_measured, anchor_args.ppo_measured, anchor_args.profile_share) == (1000, 3, 0.5)
    assert anchor_args.minutes * 60 == pytest.approx(anchor.seconds - ANCHOR_MARGIN_S, abs=1)
    proc = gpu_check("--dry-run", "--pack", "back", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # each step with its share, its limit and the files it writes; then the check's own files and the packed ones
    for step in steps:
        assert f"{step.name} ({step.share:.0%} of the steps' time, at most {step.seconds:.0f} s): " in proc.stdout
        assert f"    writes {step.name}.log, " + ", ".join(STEP_FILES[step.name]) in proc.stdout
    assert "the check writes machine.json, summary.md, summary.json into benchmark/results/gpu-check, and after every "\
           "step summary.md and gpu-check.tar.gz into back" in proc.stdout  # fmt: skip
    # --scripts chooses the table's rows; a name the table does not know is refused in one line
    proc = gpu_check("--dry-run", "--steps", "throughput", "--scripts", "dqn", "c51_atari", cwd=tmp_path)
    assert proc.returncode == 0 and "--scripts dqn c51_atari --variants" in proc.stdout
    proc = gpu_check("--dry-run", "--scripts", "dqn", "nope", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[0].startswith("error: --scripts nope: the table knows")


def test_a_step_gets_its_share_and_what_the_steps_before_it_left(tmp_path):
    steps = plan(tmp_path, 7.5)
    budget = 0.95 * 7.5 * 60
    shares = [s.seconds for s in steps]
    assert limit(steps, 0, 0, budget) == shares[0]
    # the tests took 70 s of their 115: the table gets its 51 and the 45 left, the anchor still its 261
    assert limit(steps, 1, 70, budget) == pytest.approx(shares[1] + shares[0] - 70)
    # the tests and the table overran by 10 s in all: the next step keeps its whole share, never less
    assert limit(steps, 2, shares[0] + shares[1] + 10, budget) == shares[2]
    assert limit(steps, 2, 100, budget) == pytest.approx(budget - 100)


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
    # every file the check wrote is named, with its size
    assert {f["path"] for f in summary["files"]} == {"ok.log", "fails.log", "hangs.log"}
    assert "- hangs.log (0.00 MiB)" in md


def test_a_whole_check_with_stand_in_steps_writes_its_summary_and_pack_after_every_step(tmp_path, monkeypatch, capsys):
    """main() past its CUDA check (a stand-in device), with three quick steps in place of the real ones."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(name="Stand-in", total_memory=2**34))
    seen = []

    def stand_in_plan(out, minutes, *rest, **kw):
        steps = plan(out, minutes, *rest, **kw)
        for step, code in zip(steps, (0, 0, 2)):  # each writes a file of its own; the last one fails
            name = STEP_FILES[step.name][0].split(" ")[0]
            step.command = [sys.executable, "-c", f"import pathlib, sys; p = pathlib.Path({str(out / name)!r}); "
                            f"p.parent.mkdir(parents=True, exist_ok=True); p.write_text('x'); sys.exit({code})"]  # fmt: skip
            step.minutes_flag = None
        seen.append(steps)
        return steps

    monkeypatch.setattr(tool, "plan", stand_in_plan)
    args = tyro.cli(CheckArgs, args=["--out", str(tmp_path / "check"), "--pack", str(tmp_path / "OUT")])
    assert tool.main(args) == 1  # a failed step fails the check
    summary = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert [(s["step"], s["exit_code"]) for s in summary["steps"]] == [("cuda-tests", 0), ("throughput", 0), ("speed-anchor", 2)]
    assert [s["share"] for s in summary["steps"]] == list(STEP_WEIGHTS.values())
    # the first step's limit is its share; each later one also got what the quick steps before it left
    limits = [s["limit_seconds"] for s in summary["steps"]]
    assert limits[0] == 115 and limits[1] > 51 + 100 and limits[2] > 261 + 100
    assert summary["machine"]["gpu"] == "1 x Stand-in (16 GiB)" and "numpy" in summary["machine"]["packages"]
    assert {f["path"] for f in summary["files"]} == {"machine.json", "cuda-tests.log", "throughput.log", "speed-anchor.log",
                                                     "cuda-tests.xml", "speed-gpu/results.json", "speed-anchor/results.json"}  # fmt: skip
    with tarfile.open(tmp_path / "OUT" / "gpu-check.tar.gz") as tar:
        assert "check/speed-anchor/results.json" in tar.getnames() and "check/summary.md" in tar.getnames()
    out = capsys.readouterr().out
    assert f"packed it and gpu-check.tar.gz into {tmp_path / 'OUT'}" in out and "| speed-anchor | 2 |" in out
    # a second check into the same folder is refused before it runs anything
    with pytest.raises(SystemExit, match="exists; give the check a new --out folder"):
        tool.main(args)


def test_the_pack_for_the_device_tool_holds_every_result_but_the_caches_and_names_what_it_leaves_out(tmp_path):
    out = tmp_path / "gpu-check"
    for name, text in [("cuda-tests.log", "passed"), ("speed-anchor/results.md", "| sac |"),
                       ("speed-anchor/work/sac/ours-plain/log.txt", "done"), ("speed-anchor/inductor-cache/a/b.py", "x"),
                       ("speed-anchor/leanrl-unpacked/numpy/__init__.py", "y")]:  # fmt: skip
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    with open(out / "speed-gpu-big.bin", "wb") as f:
        f.truncate((PACK_MAX_MIB + 1) * 2**20)  # sparse: a file over the limit without the disk space
    for name in ("a.bin", "b.bin"):  # two under the limit, but together with the rest over the archive's total
        with open(out / name, "wb") as f:
            f.truncate(7 * 2**20)
    write_summary(out, {"gpu": "test", "packages": {"numpy": "1.26.4 (/tmp/site)"}}, [])
    back = tmp_path / "OUT"
    pack(out, back)
    assert sorted(p.name for p in back.iterdir()) == sorted(PACKED)  # two files: the device tool returns 8 at most
    with tarfile.open(back / "gpu-check.tar.gz") as tar:
        names = sorted(tar.getnames())
    assert names == ["gpu-check/a.bin", "gpu-check/cuda-tests.log", "gpu-check/speed-anchor/results.md",
                     "gpu-check/speed-anchor/work/sac/ours-plain/log.txt", "gpu-check/summary.json", "gpu-check/summary.md"]  # fmt: skip
    files = {f["path"]: f for f in json.loads((out / "summary.json").read_text())["files"]}
    assert files["cuda-tests.log"] == {"path": "cuda-tests.log", "bytes": 6, "packed": True, "why": ""}
    md = (back / "summary.md").read_text()
    assert md == (out / "summary.md").read_text() and "Packages: numpy 1.26.4 (/tmp/site)" in md
    assert "- speed-anchor/inductor-cache/ (1 files, 0.00 MiB): not packed, a cache" in md
    assert f"- speed-gpu-big.bin (9.00 MiB): not packed, over {PACK_MAX_MIB} MiB" in md
    assert "- a.bin (7.00 MiB)\n" in md and "- b.bin (7.00 MiB): not packed, the archive's 12 MiB were full" in md
    assert "leanrl-unpacked/numpy" not in md
    # a second pack (after the next step) replaces the first, and leaves nothing else behind
    (out / "throughput.log").write_text("table")
    pack(out, back)
    with tarfile.open(back / "gpu-check.tar.gz") as tar:
        assert "gpu-check/throughput.log" in tar.getnames()
    assert sorted(p.name for p in back.iterdir()) == sorted(PACKED) and not list(tmp_path.glob("*.part"))


# What prepares a GPU machine: benchmark/device_env.py (here) and benchmark/device_install.py (there)


def device_env_run(*flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmark/device_env.py"), "--parts", *flags]  # --parts alone: makes nothing
    return subprocess.run(cmd, cwd=ROOT, env=script_env(), capture_output=True, text=True, timeout=120, check=False)


def test_device_env_prints_what_a_call_carries_and_refuses_over_64_mib_in_one_line(tmp_path):
    wheels, leanrl, env = (tmp_path / name for name in ("device-wheels", "leanrl", "leanrl-env"))
    for folder in (wheels, leanrl, env):
        folder.mkdir()
    (wheels / "a.whl").write_bytes(b"x" * 2**20)
    flags = ["--device-wheels", str(wheels), "--leanrl", str(leanrl), "--leanrl-env", str(env)]
    proc = device_env_run(*flags)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    tree = float(lines[0].removeprefix("the working tree that a GPU call sends: ").removesuffix(" MiB"))
    assert lines[1:4] == [f"{wheels}: 1.0 MiB", f"{leanrl}: 0.0 MiB", f"{env}: 0.0 MiB"]
    assert lines[4].startswith("in all ") and lines[4].endswith(" MiB of the 64 MiB a call may carry")
    assert float(lines[4].split()[2]) == pytest.approx(tree + 1, abs=0.06)
    assert f"warning: {wheels} is outside the checkout ({ROOT}); the device tool carries paths inside it only" in lines
    assert lines[-3:] == ["carry: " + json.dumps([str(wheels), str(leanrl), str(env)]), "timeout_s: 600",
                          "command: " + device_env.device_command(tyro.cli(device_env.Args, args=flags))]  # fmt: skip
    # over 64 MiB with the working tree: the total, then one error line and no call to copy
    with open(env / "numpy.whl", "wb") as f:
        f.truncate(63 * 2**20)  # sparse: its size without the disk space
    proc = device_env_run(*flags)
    total = next(l for l in proc.stdout.splitlines() if l.startswith("in all ")).split()[2]
    assert float(total) == pytest.approx(tree + 64, abs=0.06)
    assert proc.returncode == 1 and "command:" not in proc.stdout
    assert proc.stderr.strip().splitlines() == [f"error: {total} MiB would not travel in one GPU call (limit 64 MiB): carry less"]
    # a folder not made yet is named before any call is printed
    (env / "numpy.whl").unlink()
    proc = device_env_run(*flags[:-1], str(tmp_path / "none"))
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'none'} missing: make them (--parts) before the GPU call"]


def test_the_device_call_installs_the_carried_packages_then_runs_the_whole_check_as_docs_speed_shows():
    args = device_env.Args()
    command = device_env.device_command(args)
    assert len(command) < 2000  # the device tool's limit
    install, export, check = command.split(" && ")
    assert shlex.split(install) == ["python3", "benchmark/device_install.py", args.device_wheels, "/tmp/site"]
    assert export == "export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1"
    words = shlex.split(check)
    assert words[:2] == ["python3", "benchmark/gpu_check.py"]
    parsed = tyro.cli(CheckArgs, args=words[2:])
    # the whole check, its results packed into the folder the device tool brings back, its own folder new each call
    assert parsed.steps == STEPS and parsed.minutes == 7.5 and parsed.pack == "$OUT" and parsed.out == "/tmp/gpu-check-$$"
    assert (parsed.leanrl, parsed.leanrl_env) == (args.leanrl, args.leanrl_env)
    # other folders inside the checkout: named relative to its root, as the copy there has another
    other = tyro.cli(device_env.Args, args=["--leanrl-env", str(ROOT / "benchmark/results/leanrl-env-2")])
    assert device_env.device_command(other).endswith(" --pack $OUT --leanrl-env benchmark/results/leanrl-env-2")
    # docs/speed.md shows this call: its command, its folders to carry, its time limit
    page = (ROOT / "docs" / "speed.md").read_text()
    assert command in page and json.dumps([args.device_wheels, args.leanrl, args.leanrl_env]) in page and "600" in page


def fake_wheel(folder, dist: str, module: str) -> str:
    """A wheel of one empty module, as pip installs it."""
    name = f"{dist.replace('-', '_')}-1.0-py3-none-any.whl"
    info = f"{dist.replace('-', '_')}-1.0.dist-info"
    files = {f"{module}/__init__.py": "", f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}  # fmt: skip
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / name, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return name


def test_device_install_adds_ours_and_what_the_machine_lacks_and_warns_of_what_was_not_carried(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    ours = fake_wheel(wheels, "gpu-check-ours", "gpu_check_ours")
    lacked = fake_wheel(wheels, "gpu-check-lacked", "gpu_check_lacked")
    shadow = fake_wheel(wheels, "pytest", "pytest_shadow")  # this machine has pytest: its own stays
    manifest = {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "ours": [ours],
                "if_missing": {"pytest": [shadow], "gpu-check-lacked": [lacked]},
                "not_carried": {"gpu_check_absent": "too large, says why", "json": "present: no warning"}}  # fmt: skip
    (wheels / "manifest.json").write_text(json.dumps(manifest))

    def install(*argv) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(ROOT / "benchmark/device_install.py"), *argv]
        return subprocess.run(cmd, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=120, check=False)

    proc = install(str(wheels), str(target))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == ["gpu_check_lacked", "gpu_check_ours"]
    lines = proc.stdout.splitlines()
    assert f"{ours}: ours, first on the path" in lines and f"{lacked}: carried, as this machine has no gpu-check-lacked" in lines
    assert any(l.startswith("pytest ") and l.endswith(f": this machine's (its {shadow} not installed)") for l in lines)
    assert [l for l in lines if l.startswith("warning")] == [
        "warning: this machine has no gpu_check_absent, and it was not carried: too large, says why"]
    assert lines[-1] == f"installed 2 wheels into {target}"
    # again over the same folder (a warm machine's second call): replaced, not refused
    assert install(str(wheels), str(target)).returncode == 0
    # wheels for another Python, a wheel left behind, no arguments: one line each
    (wheels / "manifest.json").write_text(json.dumps(dict(manifest, python="3.99")))
    proc = install(str(wheels), str(target))
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"error: {wheels} holds wheels for Python 3.99 and this is Python {manifest['python']}: make them with "
        f"python benchmark/device_env.py --python-version {manifest['python']}"]  # fmt: skip
    (wheels / "manifest.json").write_text(json.dumps(dict(manifest, ours=[ours, "../gone.whl"])))
    proc = install(str(wheels), str(target))
    assert proc.returncode == 1 and "../gone.whl missing beside" in proc.stderr
    assert install().returncode == 1


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
    assert step.name == "speed-anchor" and step.seconds == pytest.approx(0.95 * 8 * 60) and step.share == pytest.approx(1)
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
    # the default steps are all three
    assert [s.name for s in plan(out, 8.0)] == ["cuda-tests", "throughput", "speed-anchor"]


def test_the_dry_run_lists_every_step_and_every_run_of_the_anchor_with_why_leanrl_cannot_run(tmp_path):
    proc = gpu_check("--dry-run", "--leanrl", "nowhere", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("% of the steps' time, at most ") == 3
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
    # order: script by script ours compiled and LeanRL's, so that a tool stopped early has whole pairs; then ours plain
    assert [(r.script, r.kind, r.variant) for r in timed[:8]] == [
        (s, kind, "compile+cudagraphs") for s in speed_anchor.DEFAULT_SCRIPTS for kind in ("ours", "leanrl")
    ]
    assert [(r.kind, r.variant) for r in timed[8:]] == [("ours", "plain")] * 4

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
    # a module its environment leaves out (device_env.py's manifest: envpool, too large to carry) says why
    why = speed_anchor.needs_problem("ppo_atari", missing, {"envpool": "envpool (a 77 MiB wheel), too large to carry"})
    assert why.startswith("envpool is left out of LeanRL's environment: envpool (a 77 MiB wheel), too large to carry; "
                          "it needs envpool<1: it steps envpool's")  # fmt: skip


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
