# docs: docs/benchmark.md
"""Learning curves, result tables and an aggregate with confidence intervals, from kept results or event files.

Reads every run below the given result folders, so no W&B account is needed: the kept per-run files
(benchmark/kept/<name>/, see benchmark/kept.py) when the folder holds any, else TensorBoard event files (what
benchmark/run.py writes to benchmark/results/<name>/, or any folder holding `runs/` directories of the scripts). A run is a directory with `events.out.tfevents.*`
files; its name `{env_id}__{exp_name}__{seed}__{unix time}` (relative to the nearest `runs/` folder, so env ids
with "/" work) gives the env id, the script (exp_name) and the seed. Folders whose name starts with "." (e.g. the
runner's `.incomplete/`) are not read. Two or more result folders are compared: each is one label, drawn on the
same axes. A folder that holds runs of several scripts (a kept file's "name", a run's exp_name), such as the records
of a cloud sweep (`python cloud/submit.py collect`), gives one label per script, LABEL/SCRIPT: two algorithms on
one env are never averaged together.

Each (label, env id, seed) counts once: of two runs of it, the one that finished last is read and the other is
named as skipped (a kept file's "finished"; a run's completion marker, else its last event). Unfinished runs are
skipped and counted: where a folder marks finished runs, with benchmark/run.py's DONE.json or cloud/durable.py's
cleanrl-complete.json beside a run's `runs/` folder, a run without its marker has failed, was stopped or is still
running. (Kept files are written for finished runs only; a folder without any marker is read whole.)

Writes to --out:
    <env>.png / <env>.svg      per env: mean episodic return over seeds vs environment steps, with a 95% band
    curves.png / curves.svg    all envs in one figure
    summary.md / summary.csv   per env and label: final return (mean, std, 95% CI; per seed in the csv), SPS, steps, runs
    runs.csv                   per run: final return, SPS, steps, episodes, event directory
    aggregate.md / .csv / .png IQM and mean of normalized final returns over all runs x envs, with 95%
                               stratified-bootstrap confidence intervals (Agarwal et al. 2021); only where
                               the envs have reference scores or --bounds (else aggregate.md says why)

Definitions (also in docs/benchmark.md):
- final return of a run: the mean `charts/episodic_return` of the episodes that ended in the last
  --final-fraction of the run's steps (the last logged episode if none did).
- SPS of a run: the last `charts/SPS` value (the scripts log global_step / seconds since the start of training).
- curve of a run: a moving average over --smooth consecutive episodes, interpolated onto --num-points steps
  from 0 to the longest run; a run contributes only inside the steps it covers. Band: the 95% percentile
  bootstrap interval of the mean over runs at each step (--bootstrap-reps resamples of the runs with replacement;
  none with one run). A mean of resampled runs never leaves their range, so the band stays inside the data
  (a t-interval of 3 runs can reach past the possible returns).
- normalized score: (final return - low) / (high - low) per env, with (low, high) from --bounds ENV=LOW:HIGH, or
  else the env's reference scores (benchmark/reference_scores.py: Atari random and human, Procgen's R_min and
  R_max, random actions and the best published CleanRL return). An env with neither is left out of the aggregate,
  and with no env left there is no aggregate: aggregate.md says why. (Bounds from the runs' own min and max
  would put every report near 0.5.)
- IQM: the mean of the middle 50% of the pooled (runs x envs) normalized scores (int(n/4) cut from each end, as
  scipy.stats.trim_mean(x, 0.25)). CI: percentile interval of --bootstrap-reps stratified bootstrap replicates,
  each resampling the runs of every env with replacement, separately per env.

Run:
    python benchmark/report.py --results benchmark/kept/ppo --out benchmark/report/ppo
    python benchmark/report.py --results benchmark/results/ppo --out benchmark/report/ppo
    python benchmark/report.py --results old/ppo new/ppo --labels before after --out benchmark/report/compare
"""

import csv
import json
import math
import re
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NoReturn, Optional

import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmark.kept import find_kept, read_event_scalars, read_kept  # noqa: E402  (a tool, not an algorithm script)
from benchmark.reference_scores import reference  # noqa: E402


@dataclass
class Args:
    results: list[str]
    """the result folders to read; two or more are compared on the same axes"""
    labels: Optional[list[str]] = None
    """one label per result folder; None uses the folders' names"""
    out: str = "benchmark/report"
    """the folder to write figures and tables to"""
    tag: str = "charts/episodic_return"
    """the TensorBoard scalar of the learning curves and final returns"""
    sps_tag: str = "charts/SPS"
    """the TensorBoard scalar of the steps per second"""
    final_fraction: float = 0.1
    """the final return averages the episodes of this last fraction of each run's steps"""
    smooth: int = 10
    """the number of consecutive episodes in the moving average of a curve (1: no smoothing)"""
    num_points: int = 100
    """the number of step values a curve is interpolated onto"""
    bounds: list[str] = field(default_factory=list)
    """ENV=LOW:HIGH score bounds for the normalization, e.g. CartPole-v1=0:500; other envs use their reference
    scores (benchmark/reference_scores.py), and an env without any is left out of the aggregate"""
    bootstrap_reps: int = 2000
    """the number of bootstrap replicates of the curve bands and of the aggregate confidence intervals"""
    seed: int = 0
    """the seed of the bootstrap"""
    dpi: int = 100
    """the resolution of the PNG figures"""
    title: Optional[str] = None
    """a title prefix for the figures"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


# two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30; above 30 the normal 1.96 is close enough
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(n: int) -> float:
    """The 95% two-sided Student-t quantile for the mean of n values (NaN for n < 2)."""
    return math.nan if n < 2 else (T975[n - 2] if n - 1 <= len(T975) else 1.96)


def t_halfwidth(x: np.ndarray, axis: int = 0):
    """Half width of the 95% t confidence interval of the mean along `axis`, ignoring NaN (NaN for n < 2)."""
    x = np.asarray(x, dtype=np.float64)
    n = np.sum(~np.isnan(x), axis=axis)
    with warnings.catch_warnings():  # nanstd warns where fewer than 2 values are left; those stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = np.nanstd(x, axis=axis, ddof=1)
    half = np.vectorize(t975, otypes=[float])(n) * sd / np.sqrt(np.maximum(n, 1))
    return float(half) if np.ndim(half) == 0 else half


@dataclass
class RunData:
    label: str
    env_id: str
    seed: int
    path: Path
    steps: np.ndarray  # global steps at which episodes ended
    returns: np.ndarray  # their episodic returns
    sps: float
    last_step: int
    final_return: float = math.nan
    script: str = ""  # a kept file's name, a run's exp_name: the algorithm
    finished: float = math.nan  # when the run ended, in seconds since the epoch (NaN: not known)


RUN_NAME = re.compile(r"^(?P<env_id>.+)__(?P<exp_name>.+)__(?P<seed>-?\d+)__(?P<time>\d+)$")


def parse_run_name(run_dir: Path) -> tuple[str, int]:
    env_id, _, seed = parse_run_name_parts(run_dir)
    return env_id, seed


def parse_run_name_parts(run_dir: Path) -> tuple[str, str, int]:
    """(env id, exp name, seed) of a run directory."""
    parts = run_dir.parts
    if "runs" in parts:  # the name below the last runs/ folder, which keeps env ids such as ALE/Pong-v5 whole
        last = len(parts) - 1 - parts[::-1].index("runs")
        rel = "/".join(parts[last + 1 :])
    else:
        rel = run_dir.name
    m = RUN_NAME.match(rel)
    if m is None:
        fail(f"cannot read env id and seed from {run_dir}: expected a directory named {{env_id}}__{{exp_name}}__{{seed}}__{{unix time}}")
    return m["env_id"], m["exp_name"], int(m["seed"])


# beside the runs/ folder of a finished run: benchmark/run.py's marker, cloud/durable.py's (a job's folder)
MARKERS = ("DONE.json", "cleanrl-complete.json")


def completion_marker(run_dir: Path) -> Optional[Path]:
    """The completion marker in the folder that holds the run's `runs/` folder, if there is one."""
    parts = run_dir.parts
    if "runs" not in parts:
        return None
    workdir = Path(*parts[: len(parts) - 1 - parts[::-1].index("runs")])
    return next((workdir / m for m in MARKERS if (workdir / m).is_file()), None)


def utc_seconds(text) -> float:
    """2026-12-03T14:20:00Z (kept files and completion markers) in seconds since the epoch; NaN if not that."""
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return math.nan


def marker_time(marker: Path) -> float:
    try:
        return utc_seconds(json.loads(marker.read_text()).get("finished"))
    except (OSError, ValueError, AttributeError):
        return math.nan


def find_run_dirs(folder: Path) -> list[Path]:
    dirs = {p.parent for p in folder.rglob("events.out.tfevents.*")}
    return sorted(d for d in dirs if not any(part.startswith(".") for part in d.relative_to(folder).parts))


def final_return(steps: np.ndarray, returns: np.ndarray, last_step: int, fraction: float) -> float:
    """Mean return of the episodes that ended in the last `fraction` of the run (the last episode if none did)."""
    if len(returns) == 0:
        return math.nan
    window = steps >= (1.0 - fraction) * last_step
    return float(np.mean(returns[window])) if window.any() else float(returns[-1])


def load_kept_runs(files: list[Path], label: str, args: Args) -> list[RunData]:
    runs = []
    for path in files:
        record = read_kept(path)
        steps = np.array(record["episodes"]["step"], dtype=np.int64)
        returns = np.array(record["episodes"]["return"], dtype=np.float64)
        sps = math.nan if record.get("sps") is None else float(record["sps"])
        run = RunData(label, record["env_id"], int(record["seed"]), path, steps, returns, sps, int(record["last_step"]))
        run.final_return = final_return(steps, returns, run.last_step, args.final_fraction)
        run.script, run.finished = str(record["name"]), utc_seconds(record.get("finished"))
        runs.append(run)
    return runs


def load_runs(folder: Path, label: str, args: Args, unfinished: list[Path]) -> list[RunData]:
    """The runs below `folder`; the unfinished ones are left out and appended to `unfinished`."""
    if not folder.is_dir():
        fail(f"result folder {folder} does not exist")
    kept = find_kept(folder)
    if kept:
        return load_kept_runs(kept, label, args)
    run_dirs = find_run_dirs(folder)
    if not run_dirs:
        fail(f"no kept results (seed*.json) and no TensorBoard event files below {folder}")
    markers = {run_dir: completion_marker(run_dir) for run_dir in run_dirs}
    marked = any(markers.values())  # this folder says which runs finished
    runs = []
    for run_dir in run_dirs:
        if marked and markers[run_dir] is None:
            unfinished.append(run_dir)
            continue
        env_id, script, seed = parse_run_name_parts(run_dir)
        timed = read_event_scalars(run_dir, wall_time=True)
        scalars = {tag: [(s, v) for s, _, v in events] for tag, events in timed.items()}
        episodes = sorted(scalars.get(args.tag, []), key=lambda e: e[0])
        steps = np.array([s for s, _ in episodes], dtype=np.int64)
        returns = np.array([v for _, v in episodes], dtype=np.float64)
        sps_values = scalars.get(args.sps_tag, [])
        last_step = max([s for tag in scalars.values() for s, _ in tag], default=0)
        run = RunData(label, env_id, seed, run_dir, steps, returns, float(sps_values[-1][1]) if sps_values else math.nan, last_step)
        run.final_return = final_return(steps, returns, last_step, args.final_fraction)
        run.script = script
        run.finished = marker_time(markers[run_dir]) if markers[run_dir] else math.nan
        if math.isnan(run.finished):
            run.finished = max((w for events in timed.values() for _, w, _ in events), default=math.nan)
        runs.append(run)
    return runs  # never empty: where one run lacks its marker, another has one


def by_script(runs: list[RunData], label: str) -> list[str]:
    """Label the runs of a folder LABEL/SCRIPT when it holds several scripts; the labels, in order."""
    scripts = sorted({r.script for r in runs})
    if len(scripts) == 1:
        return [label]
    for r in runs:
        r.label = f"{label}/{r.script}"
    return [f"{label}/{script}" for script in scripts]


def latest_of_each(runs: list[RunData]) -> tuple[list[RunData], list[tuple[RunData, RunData]]]:
    """One run per (label, env id, seed): the one that finished last; and (skipped, kept instead) for the others."""
    groups = defaultdict(list)
    for r in runs:
        groups[(r.label, r.env_id, r.seed)].append(r)
    kept, skipped = [], []
    for group in groups.values():
        group.sort(key=lambda r: (-math.inf if math.isnan(r.finished) else r.finished, str(r.path)))
        kept.append(group[-1])
        skipped += [(r, group[-1]) for r in group[:-1]]
    return kept, skipped


def moving_average(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last `window` values (fewer at the start)."""
    c = np.cumsum(np.insert(x, 0, 0.0))
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def curve_on_grid(run: RunData, grid: np.ndarray, smooth: int) -> np.ndarray:
    """The run's smoothed returns interpolated onto `grid`; NaN outside the steps where it has episodes."""
    out = np.full(len(grid), np.nan)
    if len(run.returns) == 0:
        return out
    y = moving_average(run.returns, max(smooth, 1))
    inside = (grid >= run.steps[0]) & (grid <= run.steps[-1])
    out[inside] = np.interp(grid[inside], run.steps, y)
    return out


def bootstrap_band(ys: np.ndarray, reps: int, rng: np.random.Generator, ci: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ys (runs x points, NaN where a run has no value): the percentile bootstrap interval of the
    mean over the runs there. NaN where fewer than 2 runs have a value. Each bound is a mean of values of that
    column, so the band never leaves the column's min and max."""
    lo, hi = np.full(ys.shape[1], np.nan), np.full(ys.shape[1], np.nan)
    alpha = (1.0 - ci) / 2.0
    for j in range(ys.shape[1]):
        x = ys[:, j][~np.isnan(ys[:, j])]
        if len(x) < 2:
            continue
        means = x[rng.integers(0, len(x), size=(reps, len(x)))].mean(axis=1)
        lo[j], hi[j] = np.quantile(means, alpha), np.quantile(means, 1.0 - alpha)
    return lo, hi


# ---- aggregate statistics (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice") ----


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along `axis`: sort, drop int(n/4) values from each end, average the rest.

    The same as scipy.stats.trim_mean(x, 0.25), which rliable (Agarwal et al. 2021) uses; pass a flat array
    of all (runs x envs) scores for the aggregate.
    """
    x = np.sort(np.asarray(scores, dtype=np.float64), axis=axis)
    n = x.shape[axis]
    cut = int(0.25 * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def normalize(final: dict[str, np.ndarray], bounds: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    out = {}
    for env_id, x in final.items():
        low, high = bounds[env_id]
        out[env_id] = (x - low) / (high - low) if high != low else np.zeros_like(x)
    return out


def stratified_bootstrap_ci(
    scores_per_env: list[np.ndarray], statistic, reps: int, rng: np.random.Generator, ci: float = 0.95
) -> tuple[float, float, float]:
    """Point estimate and percentile CI of statistic(pooled scores), resampling runs within each env.

    `statistic` maps a (reps, n) array to (reps,) values. Every replicate draws, for each env separately, as many
    runs as that env has, with replacement, and pools them (the "stratified" bootstrap of Agarwal et al. 2021).
    """
    pooled = np.concatenate(scores_per_env)
    point = float(statistic(pooled[None, :])[0])
    samples = [x[rng.integers(0, len(x), size=(reps, len(x)))] for x in scores_per_env]
    values = statistic(np.concatenate(samples, axis=1))
    alpha = (1.0 - ci) / 2.0
    return point, float(np.quantile(values, alpha)), float(np.quantile(values, 1.0 - alpha))


def iqm_rows(x: np.ndarray) -> np.ndarray:
    return iqm(x, axis=1)


def mean_rows(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=1)


def median_rows(x: np.ndarray) -> np.ndarray:
    return np.median(x, axis=1)


# ---- output ----


def slug(env_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", env_id)


def fmt(x: float, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def parse_bounds(items: list[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for item in items:
        m = re.match(r"^(.+)=(-?[0-9.eE+-]+):(-?[0-9.eE+-]+)$", item)
        if m is None:
            fail(f"--bounds {item!r} is not ENV=LOW:HIGH")
        low, high = float(m[2]), float(m[3])
        if not high > low:
            fail(f"--bounds {item!r}: HIGH must be greater than LOW")
        out[m[1]] = (low, high)
    return out


def main(args: Args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    # the same data gives the same SVG bytes (fixed element ids, no date), so committed figures change only with data
    matplotlib.rcParams["svg.hashsalt"] = "cleanrl-benchmark"

    if args.labels is not None and len(args.labels) != len(args.results):
        fail(f"--labels has {len(args.labels)} values for {len(args.results)} --results folders")
    if not 0.0 < args.final_fraction <= 1.0:
        fail(f"--final-fraction must be in (0, 1], got {args.final_fraction}")
    folder_labels = args.labels or [Path(r).name for r in args.results]
    if len(set(folder_labels)) != len(folder_labels):
        fail(f"labels must differ, got {folder_labels}; name them with --labels")
    user_bounds = parse_bounds(args.bounds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    runs: list[RunData] = []
    labels: list[str] = []
    unfinished: list[Path] = []
    for folder, label in zip(args.results, folder_labels):
        found = load_runs(Path(folder), label, args, unfinished)
        labels += by_script(found, label)
        runs += found
    if len(set(labels)) != len(labels):
        fail(f"labels must differ, got {labels}; name the folders with --labels")
    runs, duplicates = latest_of_each(runs)
    notes = []
    if unfinished:
        notes.append(f"Skipped {len(unfinished)} unfinished run{'s' if len(unfinished) != 1 else ''} (no completion "
                     f"marker beside its runs/ folder): " + ", ".join(str(p) for p in unfinished) + ".")
    if duplicates:
        notes.append(f"Skipped {len(duplicates)} duplicate run{'s' if len(duplicates) != 1 else ''} (the same label, "
                     "env id and seed as a run that finished later, which is read instead): "
                     + ", ".join(f"{r.path} (read {newer.path})" for r, newer in duplicates) + ".")
    envs = sorted({r.env_id for r in runs})
    by = defaultdict(list)
    for r in runs:
        by[(r.env_id, r.label)].append(r)
    for key in by:
        by[key].sort(key=lambda r: (r.seed, str(r.path)))
    colors = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}

    # per-run table
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env_id", "label", "seed", "final_return", "sps", "steps", "episodes", "run_dir"])
        for r in sorted(runs, key=lambda r: (r.env_id, labels.index(r.label), r.seed)):
            w.writerow([r.env_id, r.label, r.seed, repr(r.final_return), repr(r.sps), r.last_step, len(r.returns), str(r.path)])

    # per env x label summary
    summary = []
    for env_id in envs:
        for label in labels:
            group = by.get((env_id, label), [])
            if not group:
                continue
            finals = np.array([r.final_return for r in group])
            summary.append(
                dict(
                    env_id=env_id,
                    label=label,
                    runs=len(group),
                    seeds=" ".join(str(r.seed) for r in group),
                    final_return_mean=float(np.nanmean(finals)) if np.any(~np.isnan(finals)) else math.nan,
                    final_return_std=float(np.nanstd(finals, ddof=1)) if np.sum(~np.isnan(finals)) > 1 else math.nan,
                    final_return_ci95=t_halfwidth(finals),
                    sps_mean=float(np.nanmean([r.sps for r in group])) if any(not math.isnan(r.sps) for r in group) else math.nan,
                    steps=int(np.median([r.last_step for r in group])),
                    finals=" ".join(repr(float(x)) for x in finals),  # per seed, in the order of `seeds`
                )
            )
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0]))
        w.writeheader()
        for row in summary:
            w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    md = [
        "| env | label | runs (seeds) | final return mean ± std | 95% CI of mean | SPS | steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        md.append(
            f"| {row['env_id']} | {row['label']} | {row['runs']} ({row['seeds']}) | {fmt(row['final_return_mean'])} ± "
            f"{fmt(row['final_return_std'])} | ± {fmt(row['final_return_ci95'])} | {fmt(row['sps_mean'], 0)} | {row['steps']} |"
        )
    (out / "summary.md").write_text("\n".join(md) + "\n")

    # learning curves: one figure per env, and all envs in one grid
    def draw(ax, env_id: str) -> None:
        max_step = max(r.last_step for r in runs if r.env_id == env_id)
        grid = np.linspace(0, max_step, args.num_points)
        for label in labels:
            group = by.get((env_id, label), [])
            if not group:
                continue
            ys = np.stack([curve_on_grid(r, grid, args.smooth) for r in group])
            with warnings.catch_warnings():  # nanmean warns at steps no run covers; those stay NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(ys, axis=0)
            lo, hi = bootstrap_band(ys, args.bootstrap_reps, np.random.default_rng(args.seed))
            count = f"{len(group)} run{'s' if len(group) != 1 else ''}"
            ax.plot(grid, mean, color=colors[label], label=f"{label} ({count})", linewidth=1.5)
            ax.fill_between(grid, lo, hi, color=colors[label], alpha=0.2, linewidth=0)
        if not any(len(r.returns) for r in runs if r.env_id == env_id):
            ax.text(0.5, 0.5, "no finished episode", transform=ax.transAxes, ha="center", va="center")
            ax.set_xlim(0, max(max_step, 1))
        ax.set_title(env_id if not args.title else f"{args.title}: {env_id}", fontsize=10)
        ax.set_xlabel("environment steps")
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))  # 100k, 1M: short labels that never overlap
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        ax.set_ylabel("episodic return")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)

    for env_id in envs:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        draw(ax, env_id)
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(out / f"{slug(env_id)}.{ext}", dpi=args.dpi, metadata={"Date": None} if ext == "svg" else None)
        plt.close(fig)
    ncols = min(3, len(envs))
    nrows = math.ceil(len(envs) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.8 * nrows), squeeze=False)
    for ax, env_id in zip(axes.flat, envs):
        draw(ax, env_id)
    for ax in list(axes.flat)[len(envs) :]:
        ax.axis("off")
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"curves.{ext}", dpi=args.dpi, metadata={"Date": None} if ext == "svg" else None)
    plt.close(fig)

    # aggregate over the envs every label has
    def has_final(env_id: str, label: str) -> bool:
        return any(not math.isnan(r.final_return) for r in by.get((env_id, label), []))

    finished = [e for e in envs if all(has_final(e, label) for label in labels)]
    bounds, source = {}, {}
    for env_id in finished:
        known = reference(env_id)
        if env_id in user_bounds:
            bounds[env_id], source[env_id] = user_bounds[env_id], "--bounds"
        elif known is not None:
            bounds[env_id], source[env_id] = (known.low, known.high), known.source
    common = [e for e in finished if e in bounds]  # the envs whose scores mean the same for every label
    rng = np.random.default_rng(args.seed)
    agg = []
    for label in labels:
        final = {e: np.array([r.final_return for r in by[(e, label)] if not math.isnan(r.final_return)]) for e in common}
        per_env = [x for x in normalize(final, bounds).values() if len(x)]
        if not per_env:
            continue
        row = dict(label=label, envs=len(per_env), runs=int(sum(len(x) for x in per_env)))
        for name, stat in (("iqm", iqm_rows), ("mean", mean_rows), ("median", median_rows)):
            point, lo, hi = stratified_bootstrap_ci(per_env, stat, args.bootstrap_reps, rng)
            row.update({name: point, f"{name}_ci_low": lo, f"{name}_ci_high": hi})
        agg.append(row)
    if common:
        lines = [
            f"Aggregate over {len(common)} envs ({', '.join(common)}), normalized final returns (0: the low bound, "
            f"1: the high bound), 95% stratified-bootstrap CIs ({args.bootstrap_reps} replicates).",
            "",
            "| label | envs | runs | IQM [95% CI] | mean [95% CI] | median [95% CI] |",
            "|---|---|---|---|---|---|",
        ]
        for row in agg:
            cells = [f"{fmt(row[n], 3)} [{fmt(row[n + '_ci_low'], 3)}, {fmt(row[n + '_ci_high'], 3)}]"
                     for n in ("iqm", "mean", "median")]
            lines.append(f"| {row['label']} | {row['envs']} | {row['runs']} | " + " | ".join(cells) + " |")
        lines += ["", "| env | low | high | source of the bounds |", "|---|---|---|---|"]
        lines += [f"| {e} | {fmt(bounds[e][0])} | {fmt(bounds[e][1])} | {source[e]} |" for e in common]
    else:
        lines = ["No aggregate: " + ("no env has a finished episode for every label." if not finished else
                 f"no reference scores for {', '.join(finished)}, so a normalized score would mean nothing (the "
                 "runs' own min and max make any report read about 0.5). Give --bounds ENV=LOW:HIGH for each env.")]
    unfinished = [e for e in envs if e not in finished]
    if unfinished:
        lines += ["", f"Not in the aggregate (no finished episode for every label): {', '.join(unfinished)}."]
    unknown = [e for e in finished if e not in bounds]
    if unknown and common:
        lines += ["", f"Not in the aggregate (no reference scores; give --bounds ENV=LOW:HIGH): {', '.join(unknown)}."]
    (out / "aggregate.md").write_text("\n".join(lines) + "\n")
    if agg:
        with open(out / "aggregate.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(agg[0]))
            w.writeheader()
            for row in agg:
                w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
        fig, axes = plt.subplots(1, 2, figsize=(7, 0.6 + 0.45 * len(agg)), squeeze=False)
        for ax, name in zip(axes.flat, ("iqm", "mean")):
            for i, row in enumerate(agg):
                ax.errorbar(
                    row[name], i, xerr=[[row[name] - row[f"{name}_ci_low"]], [row[f"{name}_ci_high"] - row[name]]],
                    fmt="o", color=colors[row["label"]], capsize=4,
                )
            ax.set_yticks(range(len(agg)), [row["label"] for row in agg])
            ax.set_ylim(-0.5, len(agg) - 0.5)
            ax.set_title("IQM" if name == "iqm" else "mean", fontsize=10)
            ax.set_xlabel("normalized score")
            ax.grid(alpha=0.3, axis="x")
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(out / f"aggregate.{ext}", dpi=args.dpi, metadata={"Date": None} if ext == "svg" else None)
        plt.close(fig)

    print("\n".join(md))
    print()
    print("\n".join(lines))
    for note in notes:
        print(f"\n{note}")
    print(f"\nwrote {len(envs)} env figures, curves.png, summary.md/csv, runs.csv, "
          f"{'aggregate.md/csv/png' if agg else 'aggregate.md'} to {out}")


if __name__ == "__main__":
    main(tyro.cli(Args))
