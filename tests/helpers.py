"""What the tests share: running a script as a user would, and reading back what it logged."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from tensorboard.backend.event_processing import event_accumulator

ROOT = Path(__file__).resolve().parent.parent


def script_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update(WANDB_MODE="offline", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    env.update(extra)
    return env


def run_script(script: str, *args: str, cwd: Path, timeout: float = 600, check: bool = True, env=None, launcher=None):
    """Run `python cleanrl/<script>` (or `launcher + [path]`) in `cwd`; the run writes runs/ and videos/ there."""
    path = str(ROOT / "cleanrl" / script)
    cmd = (launcher or [sys.executable]) + [path, *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env or script_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


def run_dirs(cwd: Path) -> list[Path]:
    runs = Path(cwd) / "runs"
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def single_run_dir(cwd: Path) -> Path:
    dirs = run_dirs(cwd)
    assert len(dirs) == 1, f"expected one run directory, found {dirs}"
    return dirs[0]


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's TensorBoard event files: {tag: [(step, value), ...]} in logged order."""
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def values(scalars: dict, tag: str) -> list[float]:
    return [v for _, v in scalars.get(tag, [])]


def assert_bad_input_rejected(script: str, args, message: str, cwd: Path, **kwargs) -> None:
    """Bad input: a non-zero exit, a last stderr line `error: ...` naming `message`, and no runs/ or videos/ entry."""
    proc = run_script(script, *args, cwd=cwd, check=False, **kwargs)
    assert proc.returncode != 0, f"{script} {' '.join(args)} exited 0"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, proc.stderr[-2000:]
    assert run_dirs(cwd) == [] and not (Path(cwd) / "videos").exists()


def assert_losses_close(reference: dict, other: dict, keys, rtol: float, atol: float) -> None:
    """Each key is logged at the same steps in both runs' scalars, the values within atol + rtol * |reference|."""
    for key in keys:
        assert [s for s, _ in other[key]] == [s for s, _ in reference[key]], key
        for (step, a), (_, b) in zip(reference[key], other[key]):
            # NaN counts as equal to NaN (explained variance of constant returns)
            assert (a != a and b != b) or abs(a - b) <= atol + rtol * abs(a), f"{key} at step {step}: {a} vs {b}"


def assert_compile_parity(script: str, args, cwd: Path, compiled: list[str], rtol: float, atol: float,
                          min_updates: int = 3, episodes_rtol: Optional[float] = 0.0, launcher=None) -> dict:
    """The --compile path and the plain path, same seed on CPU, log the same losses within (rtol, atol).

    The compiled run must really compile: torch's dynamo log must show every function named in `compiled`
    being traced, and no recompilation (a recompiling hot function is a silent slowdown).
    Every `losses/*` key must be logged at the same steps by both runs, at least `min_updates` times.
    Episode returns: with `episodes_rtol` 0 both runs must log identical ones (compiled code samples from
    torch's own generator, so one seed gives the same discrete actions until rounding moves a sample across a
    boundary); above 0, equal within that relative tolerance (continuous actions move by rounding); with None
    they are not compared (the budget ends no episode). The plain run's scalars are returned.
    """
    runs = {}
    for name, extra, env in (("plain", [], None), ("compiled", ["--compile"], script_env(TORCH_LOGS="dynamo,recompiles"))):
        (Path(cwd) / name).mkdir()
        proc = run_script(script, *args, *extra, "--no-cuda", cwd=Path(cwd) / name, launcher=launcher, env=env)
        runs[name] = read_scalars(single_run_dir(Path(cwd) / name))
    traced = {line.split("start tracing ")[1].split()[0] for line in proc.stderr.splitlines() if "start tracing " in line}
    assert set(compiled) <= traced, f"not compiled: {sorted(set(compiled) - traced)}; traced: {sorted(traced)}"
    assert "Recompiling function" not in proc.stderr, [l for l in proc.stderr.splitlines() if "Recompiling" in l]
    plain, compiled = runs["plain"], runs["compiled"]
    keys = sorted(k for k in plain if k.startswith("losses/"))
    assert keys, f"{script} logged no losses/* scalar"
    assert keys == sorted(k for k in compiled if k.startswith("losses/"))
    for key in keys:
        assert len(plain[key]) >= min_updates, f"{key}: {len(plain[key])} updates logged, want {min_updates}"
    assert_losses_close(plain, compiled, keys, rtol, atol)
    if episodes_rtol is not None:
        returns = values(plain, "charts/episodic_return")
        assert returns, "no episode ended; the budget is too small to compare"
        assert [s for s, _ in compiled["charts/episodic_return"]] == [s for s, _ in plain["charts/episodic_return"]]
        if episodes_rtol == 0:
            assert values(compiled, "charts/episodic_return") == returns
        else:
            for a, b in zip(returns, values(compiled, "charts/episodic_return")):
                assert abs(a - b) <= episodes_rtol * abs(a), f"episodic return {a} vs {b}"
    return plain
