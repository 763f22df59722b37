# docs: docs/benchmark.md
"""Regenerate every benchmark table and figure of the docs from the repository, with one command.

Reads only committed files, runs no training, so any checkout gives the same pages:
- benchmark/kept/<script>/ (the per-run results benchmark/suite.py keeps): benchmark/report.py draws each script's
  learning curves into docs/benchmark/<script>/curves.svg, and its table of final returns is written into
  the "Benchmark results" section of the script's algorithm page and into docs/benchmark.md;
- docs/benchmark/throughput.json (what `python benchmark/throughput.py` measured, copied here by --throughput
  PATH): the throughput table of docs/benchmark.md.
The "## Benchmark results" section of every algorithm page, and docs/benchmark.md, are generated: edit this file.

Run:
    python benchmark/make_docs.py                 # rewrite the pages and figures
    python benchmark/make_docs.py --check         # exit 1 if a committed page differs from what it gives
    python benchmark/make_docs.py --throughput benchmark/results/speed/results.json   # take a new throughput table
"""

import csv
import difflib
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.kept import KEPT, find_kept, read_kept  # noqa: E402  (tools, not algorithm scripts)
from benchmark.suite import PUBLISHED, SUITE  # noqa: E402

FIGURES = ROOT / "docs" / "benchmark"
# the algorithm pages and the scripts whose results each shows, in order
PAGES = {
    "rl-algorithms/ppo.md": ["ppo", "ppo_continuous_action", "ppo_atari"],
    "rl-algorithms/ppo-multigpu.md": ["ppo_atari_multigpu"],
    "rl-algorithms/dqn.md": ["dqn", "dqn_atari"],
    "rl-algorithms/c51.md": ["c51", "c51_atari"],
    "rl-algorithms/ddpg.md": ["ddpg_continuous_action"],
    "rl-algorithms/td3.md": ["td3_continuous_action"],
    "rl-algorithms/sac.md": ["sac_continuous_action"],
    "rl-algorithms/ppg.md": ["ppg_procgen"],
    "rl-algorithms/ppo-jax.md": ["ppo_atari_envpool_xla_jax_scan", "ppo_atari"],
}
FAMILIES = {
    "PPO": ["ppo", "ppo_continuous_action", "ppo_atari", "ppo_atari_multigpu", "ppo_atari_envpool_xla_jax_scan"],
    "DQN and C51": ["dqn", "c51", "dqn_atari", "c51_atari"],
    "DDPG, TD3 and SAC": ["ddpg_continuous_action", "td3_continuous_action", "sac_continuous_action"],
    "PPG": ["ppg_procgen"],
}
FINAL = "Final return: the mean episodic return of the episodes that ended in the last 10% of a run's steps; mean ± standard deviation over the seeds."  # fmt: skip
# What a same-budget comparison with the published figures means, where the table alone does not say it.
READINGS = {
    "ppo_continuous_action": (
        "Reading: ours ends above the published figures on all three tasks, but the comparison is not like for like. "
        "Ours ran the v5 MuJoCo tasks (gymnasium 1.x, a newer MuJoCo), the published runs v4; on HalfCheetah one seed "
        "of three found a much faster gait than the other two, which ended closer to the published mean; and three "
        "seeds give a wide interval. Read the table as: this implementation learns these tasks at least as well as "
        "the upstream script did, at the same budget and hyperparameters."
    ),
    "td3_continuous_action": (
        "Reading: 100k steps are the start of learning on MuJoCo (the first 25k are random actions). The upstream "
        "script, run on the same machine at the same budget and flags (Hopper-v4, seed 1, gymnasium 0.29), ended at "
        "309.2 on Hopper by the same measure (the mean return of the episodes in the last 10% of the steps), beside "
        "ours in the table: the two learn alike at this budget. The published figures below are at 1M steps."
    ),
    "c51_atari": (
        "Reading: at 500k steps C51 has barely begun on Breakout here, and the environment's FIRE rule accounts for "
        "it. Ours presses FIRE only at the start of a game; after a lost life the agent must learn to press it. The "
        "upstream script presses FIRE after every lost life: run on the same machine at the same budget and "
        "hyperparameters (seed 1, gymnasium 0.29), it ended at 23.3 by the same measure. The same upstream script and"
        " seed with FIRE pressed only at the start of a game, as in ours, ended at 2.7, beside ours in the table. "
        "DQN, on the same environment as ours (its target network copied every 1,000 steps, C51's every 10,000), is "
        "well on its way at this budget: see dqn_atari.py's table."
    ),
}


def ppg_reading(res: "ScriptResults") -> str:
    early = "; ".join(f"`{r['env_id']}` " + ", ".join(fmt(x) for x in r["early"]) for r in res.rows)
    return (
        "Reading: the smallest budget PPG runs whole is one phase: 32 policy iterations of 64 environments × 256 steps "
        "(524,288 steps), then the auxiliary phase, 6 epochs over that phase's 2,048 rollouts. One phase shows that "
        "learning has begun: the mean return of the episodes that ended in the first 10% of the steps was "
        f"{early} (seeds in order), against the final returns above. The published figure below comes after 25M "
        "steps, about 48 such phases."
    )


READINGS["ppg_procgen"] = ppg_reading
BAND = "Curves: the mean over seeds of each run's moving average over 10 episodes; the band is the 95% bootstrap interval of that mean, inside the runs' range."  # fmt: skip


@dataclass
class Args:
    check: bool = False
    """if toggled, write nothing: exit 1 naming every committed page that differs from what this gives, or a figure
    that is missing or left over (figures are compared by existence: their bytes depend on the matplotlib version)"""
    throughput: Optional[str] = None
    """a results.json of benchmark/throughput.py to copy to docs/benchmark/ first (throughput-gpu.json when it
    was measured with --cuda, else throughput.json)"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def steps(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


# ---- learning results ----


@dataclass
class ScriptResults:
    script: str
    rows: list[dict]  # per env: env_id, budget, seeds, mean, std, finals and early (per seed, in seed order)
    figure: Optional[bytes]  # curves.svg
    missing: list[tuple[str, int]]  # (env_id, budget) of suite entries with no kept run


def learning_results(script: str) -> ScriptResults:
    files = find_kept(KEPT / script) if (KEPT / script).is_dir() else []
    records = {(r["env_id"], int(r["seed"])): r for r in map(read_kept, files)}
    entries = [e for e in SUITE if e.script == script]
    missing = [(env, e.total_timesteps) for e in entries for env in e.env_ids if not any(k[0] == env for k in records)]
    if not records:
        return ScriptResults(script, [], None, missing)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "benchmark/report.py", "--results", str(KEPT / script), "--out", tmp, "--labels", script]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            fail(f"{shlex.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        figure = (Path(tmp) / "curves.svg").read_bytes()
        with open(Path(tmp) / "summary.csv") as f:
            summary = {row["env_id"]: row for row in csv.DictReader(f)}
    order = [env for e in entries for env in e.env_ids]
    rows = []
    for env_id in sorted(summary, key=lambda e: (order.index(e) if e in order else len(order), e)):
        budgets = sorted({r["total_timesteps"] or r["last_step"] for k, r in records.items() if k[0] == env_id})
        row = summary[env_id]
        rows.append(
            {
                "env_id": env_id,
                "budget": budgets[0] if len(budgets) == 1 else None,
                "seeds": row["seeds"],
                "mean": float(row["final_return_mean"]),
                "std": float(row["final_return_std"]),
                "finals": [float(x) for x in row["finals"].split()],
                "early": [early_return(records[(env_id, int(seed))]) for seed in row["seeds"].split()],
            }
        )
    return ScriptResults(script, rows, figure, missing)


def early_return(record: dict) -> float:
    """The mean return of the episodes that ended in the first 10% of a run's steps (nan if none did)."""
    end = 0.1 * (record["total_timesteps"] or record["last_step"])
    early = [float(r) for s, r in zip(record["episodes"]["step"], record["episodes"]["return"]) if s <= end]
    return sum(early) / len(early) if early else math.nan


def fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.1f}"


def published_cell(ref: tuple, env_id: str) -> str:
    budget, mean, env, std = ref
    text = f"{mean:,.1f}" + ("" if std is None else f" ± {std:,.1f}")
    return text if env == env_id else f"{text} ({env})"


def results_block(res: ScriptResults, figures_url: str, page_url: str) -> str:
    """Markdown for one script: heading, figure, table, the published figures, what is not run yet."""
    published = PUBLISHED.get(res.script, {})
    out = [f"### `{res.script}.py`", ""]
    if res.figure is not None:
        out += [f"![{res.script}.py learning curves]({figures_url}/{res.script}/curves.svg)", ""]
        same = [r for r in res.rows if r["env_id"] in published and published[r["env_id"]][0] == r["budget"]]
        head = "| env | steps | seeds | final return |" + (" reference CleanRL, same budget |" if same else "")
        out += [head, "|---|---|---|---|" + ("---|" if same else "")]
        for r in res.rows:
            budget = steps(r["budget"]) if r["budget"] else "mixed"
            n = len(r["seeds"].split())
            std = "" if n < 2 else f" ± {fmt(r['std'])}"
            cells = [f"`{r['env_id']}`", budget, str(n), f"{fmt(r['mean'])}{std}"]
            if same:
                ref = published.get(r["env_id"])
                cells.append(published_cell(ref, r["env_id"]) if ref and ref[0] == r["budget"] else "")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        per_seed = "; ".join(
            f"`{r['env_id']}` " + ", ".join(fmt(x) for x in r["finals"]) for r in res.rows if len(r["finals"]) > 1
        )
        paragraph = []
        if same:
            paragraph.append(
                "The reference numbers are the upstream CleanRL script's published results (3 seeds, gymnasium 0.29; "
                "in brackets the environment version it ran where it differs from ours). Its tools average the end of "
                "a run in their own way, so read differences within a standard deviation as noise."
            )
        if per_seed:
            paragraph.append(f"Final returns per seed (seeds in order): {per_seed}.")
        if paragraph:
            out += [" ".join(paragraph), ""]
        if res.script in READINGS:
            reading = READINGS[res.script]
            out += [reading if isinstance(reading, str) else reading(res), ""]
    context = {e: v for e, v in published.items() if not any(r["env_id"] == e and r["budget"] == v[0] for r in res.rows)}
    if context:
        quoted = ", ".join(f"{v[2]} {v[1]:,.1f} at {steps(v[0])} steps" for v in context.values())
        out += [f"For context, not comparison (other budgets): the upstream CleanRL script published {quoted}.", ""]
    if res.missing:
        todo = ", ".join(f"`{e}` at {steps(b)} steps" for e, b in res.missing)
        out += [f"Not run yet: {todo}. `python benchmark/suite.py --only {res.script}` runs it ([how to reproduce]({page_url})).", ""]
    return "\n".join(out).rstrip() + "\n"


def page_section(scripts: list[ScriptResults], figures_url: str, page_url: str) -> str:
    intro = (
        f"Learning curves and final returns on a CPU machine, 3 seeds per env unless the table says otherwise. {FINAL} "
        f"{BAND} Machine, commands and the other algorithms: [Benchmark]({page_url})."
    )
    return "\n".join(["## Benchmark results", "", intro, "", *[results_block(r, figures_url, page_url) for r in scripts]])


def with_section(page_text: str, section: str) -> str:
    """The page with its "## Benchmark results" section (the last one, to the end of the page) replaced."""
    m = re.search(r"^## Benchmark results\n", page_text, re.MULTILINE)
    if m is None:
        fail("an algorithm page has no '## Benchmark results' section")
    if re.search(r"^## ", page_text[m.end() :], re.MULTILINE):
        fail("'## Benchmark results' must be the last section of an algorithm page")
    return page_text[: m.start()] + section


# ---- throughput ----


def throughput_section(tp: Optional[dict]) -> str:
    if tp is None:
        return "No throughput table has been measured yet: see the command below."
    m = tp["machine"]
    cores = int(re.match(r"\d+", m["cpu"])[0]) if re.match(r"\d+", m["cpu"]) else 0
    variants = tp["variants"]
    # the upstream CleanRL columns only in tables measured with --cleanrl
    upstream = any("plain/cleanrl" in row["ratios"] for row in tp["results"])
    one_round = all(row.get("rounds") == 1 for row in tp["results"])
    # two tables, so that each fits the page: ours against the other implementations; the flags and the env
    sb3 = any("plain/sb3" in row["ratios"] for row in tp["results"])  # not in a table measured with --no-sb3
    peers = ["script", "plain SPS", *(["plain / SB3"] if sb3 else [])]
    peers += ["plain / CleanRL", "plain / CleanRL (process)"] if upstream else []
    # a variant's name spaced at its `+` (compile + cudagraphs + amp), so a narrow page can wrap the header
    own = ["script", *[f"{v.replace('+', ' + ')} / plain" for v in variants], "plain / raw env"]
    tables = [["| " + " | ".join(h) + " |", "|" + "---|" * len(h)] for h in (peers, own)]
    busy = False
    for row in tp["results"]:
        loads = [x for r in row["runs"] for x in (r["load_before"], r["load_after"])]
        mark = ""
        if loads and max(loads) > cores + 0.5:
            mark, busy = " *", True

        def ratio(key: str) -> str:
            v = row["ratios"].get(key)
            return "-" if v is None else f"{v:.2f}"

        sps = row["sps"].get("plain")
        cells = [f"`{row['script']}`{mark}", "failed" if sps is None else f"{sps:,.0f}"]
        cells += [ratio("plain/sb3")] if sb3 else []
        cells += [ratio("plain/cleanrl"), ratio("plain/cleanrl (process)")] if upstream else []
        tables[0].append("| " + " | ".join(cells) + " |")
        cells = [f"`{row['script']}`{mark}", *[ratio(f"{v}/plain") for v in variants], ratio("plain/raw")]
        tables[1].append("| " + " | ".join(cells) + " |")
    envs: dict[str, list[str]] = {}
    for row in tp["results"]:
        envs.setdefault(row["env_id"], []).append(f"`{row['script']}`")
    note = "\n\nEnvironments: " + "; ".join(f"`{e}` for {', '.join(s)}" for e, s in envs.items()) + "."
    if tp.get("note"):  # written into results.json by hand where a table was put together from two runs
        note += "\n\n" + tp["note"]
    if busy:
        note += f"\n\n\\* other work shared the CPU during this row (load above {cores} cores): its ratios are uncertain."
    if upstream:
        v = tp["cleanrl"]["versions"]
        note += (
            f"\n\n`plain / CleanRL`: ours against the upstream CleanRL script of the same name doing the same work, run as "
            f"its users run it (its own virtual environment: gymnasium {v['gymnasium']}, numpy {v['numpy']}, torch "
            f"{v['torch']}; torch's default threads, one per core, {cores} here; HalfCheetah-v4 where ours runs v5), "
            "by the same steady-state rule (from the wall times of its logged SPS); `(process)`: env steps over the "
            "seconds of the whole process, start-up and warm-up included, as a user waiting for a run sees it. "
            "`CLEANRL_SNAPSHOT` is a checkout of the upstream CleanRL repository; `--setup-cleanrl-venv` makes its "
            "virtual environment."
        )
    command = re.sub(r"--cleanrl \S+", "--cleanrl CLEANRL_SNAPSHOT", tp["command"].strip())  # no local path
    command = re.sub(r" --out \S+", "", command)  # where the results went on the measuring machine
    return (
        f"Measured {tp['started']} on {m['cpu']}, {re.sub(r' [(]UUID: [^)]*[)]', '', m['gpu'])}, torch {m['torch']}, "
        + ((("one torch thread per trainer" + (" of ours and SB3, " if upstream else ", ")))
           if tp.get("threads", "one") == "one" else "every trainer at its default torch threads, ")
        + f"by `{command}`. Steps per second after warm-up, "
        + ("one run of each" if one_round else "medians of alternated rounds")
        + "; `X / plain` "
        "is the speed-up of a flag, "
        + ("`plain / SB3` ours against Stable-Baselines3 doing the same work (above 1: ours is faster; `-`: SB3 has no "
           "such algorithm), " if sb3 else "")
        + "`plain / raw env` the share of the environment's own speed that "
        "training reaches.\n\n" + ("Against the other implementations" if sb3 or upstream else "The plain path")
        + ":\n\n" + "\n".join(tables[0])
        + "\n\nThe speed flags, and the share of the environment's own speed:\n\n" + "\n".join(tables[1])
        + note + "\n\nEvery run, with its budget and load: [throughput.json](benchmark/throughput.json)."
    )


# ---- the benchmark page ----


def gpu_section(tp_gpu: Optional[dict]) -> str:
    if tp_gpu is None:
        return "\nNo GPU table has been measured yet: `python benchmark/gpu_check.py` (below) makes one.\n"
    return "\n### On a GPU\n\n" + throughput_section(tp_gpu).replace("benchmark/throughput.json", "benchmark/throughput-gpu.json") + "\n"


def benchmark_page(results: dict[str, ScriptResults], tp: Optional[dict], tp_gpu: Optional[dict]) -> str:
    families = []
    for family, scripts in FAMILIES.items():
        families += [f"## {family}", "", *[results_block(results[s], "benchmark", "#reproduce") for s in scripts]]
    machines = sorted({read_kept(p)["machine"] for p in find_kept(KEPT)}) if KEPT.is_dir() else []
    suite = "\n".join(shlex.join(e.runner_command()) for e in SUITE)
    sh_files = sorted(p.name for p in (ROOT / "benchmark").glob("*.sh"))
    collapsed = "\n\n".join(f'??? note "benchmark/{name}"\n\n    ```bash\n    --8<-- "benchmark/{name}"\n    ```' for name in sh_files)
    return f"""# Benchmark

<!-- generated by `python benchmark/make_docs.py` from benchmark/kept/ and docs/benchmark/throughput.json; edit benchmark/make_docs.py -->

Learning curves and final returns of every script, then how fast they train. {FINAL} {BAND}
Budgets fit a CPU machine: the published budget where it fits (classic control 500k steps, PPO on MuJoCo 1M),
else the largest that does; each table says its budget.

{chr(10).join(families)}
## Throughput

{throughput_section(tp)}
{gpu_section(tp_gpu)}
## Reproduce

Every result above was trained on {", ".join(machines) or "a CPU machine"}, one or two runs at a time (`--workers`), by
`python benchmark/suite.py`, which runs these commands (3 seeds each):

```bash
{suite}
```

A finished run's episodes are kept in `benchmark/kept/<script>/<env>/seed<k>.json` (committed), so the suite
resumes where it stopped, on any machine; `python benchmark/suite.py --dry-run` shows what is kept. The long
SAC, Atari and Procgen runs also checkpoint as they go (DQN and C51 with their replay memory): stopped, a run continues
from its last checkpoint on the same machine (`--resume-stopped`, `--resume auto`) instead of starting over; the games
in progress restart. To stop the suite, press Ctrl-C or send it SIGTERM (`kill <pid>`): the runs save a checkpoint and
exit before the suite does. A finished run's checkpoint is deleted. This page,
the figures and the "Benchmark results" sections of the algorithm pages are then regenerated from the kept files:

```bash
python benchmark/make_docs.py
```

The throughput table: `python benchmark/throughput.py --threads defaults --cleanrl CLEANRL_SNAPSHOT` (about 20
minutes with nothing else running; `--threads one` puts every trainer on one torch thread instead), then
`python benchmark/make_docs.py --throughput benchmark/results/speed/results.json`. On a machine with an NVIDIA GPU,
one command runs, in at most 7.5 minutes and into one folder with a `summary.md`, the CUDA parity tests
(`--compile --cudagraphs` and `--amp` against the plain CUDA path, a 1-process NCCL run of `ppo_atari_multigpu.py`),
a GPU throughput row (`c51_atari`) and the speed anchor, which times SAC, TD3 and PPO (continuous and Atari) plain
and with `--compile --cudagraphs` beside LeanRL's compiled scripts (the PyTorch team's compiled fork of CleanRL) on
the same device over the same measured windows (warm-up left out), and counts with `torch.profiler` how many CUDA
graph launches, synchronisations and copies each of our steps makes:

```bash
python benchmark/gpu_check.py --out benchmark/results/gpu-check
```

LeanRL's scripts run from a snapshot of its repository, with their own packages; `python benchmark/device_env.py
--leanrl-git PATH` prepares both, and our scripts' packages as wheels, for a GPU machine that has no package index,
and prints the call that runs the check there ([speed flags](speed.md#the-gpu-check)). Other steps and rows, each
in its own call (`--steps throughput --scripts ...` for table rows: `python benchmark/make_docs.py --throughput
<out>/speed-gpu/results.json` then puts that table on this page in place of the one above):

```bash
python benchmark/device_env.py --leanrl-git /path/to/LeanRL/.git
python benchmark/gpu_check.py --steps speed-anchor --out benchmark/results/gpu-anchor
python benchmark/gpu_check.py --steps throughput --scripts ppo dqn c51 ddpg_continuous_action --out benchmark/results/gpu-table
```

The benchmarks at the upstream CleanRL budgets (10M Atari steps, 1M MuJoCo steps for every algorithm, 25M Procgen
steps) are one shell file per script, for a machine with GPUs:

{collapsed}

## The tools

- `benchmark/run.py` runs one command over env ids x seeds (`--workers` at a time, GPUs handed out round-robin),
  each run in its own directory under `benchmark/results/`, and with `--keep DIR` keeps each finished run in DIR (the suite passes `benchmark/kept`). A failed run is listed
  with its exit code and log tail, and the runner exits 1; `python benchmark/run.py --help` lists the flags. A run
  never outlives its runner: on Linux the kernel sends it SIGTERM (it saves a checkpoint) when the runner ends, even
  by `kill -9`, and a runner refuses a result folder in which a run still holds its directory's lock. A `DONE.json`
  that is not a marker the runner wrote (cut short, edited, a link) counts as not finished, with a `warning:` line.
- `benchmark/report.py` draws curves and tables from kept files or TensorBoard event files, and compares result
  folders on the same axes (`--results old/ppo new/ppo --labels before after`), with an aggregate over envs (IQM
  and mean of normalized scores with stratified-bootstrap intervals, after Agarwal et al. 2021,
  [Deep RL at the Edge of the Statistical Precipice](https://arxiv.org/abs/2108.13264)). A score is normalized
  by known references, 0 at the low and 1 at the high one (`benchmark/reference_scores.py`): Atari's random and
  human scores, Procgen's R_min and R_max, and elsewhere random actions and the best return upstream CleanRL
  published for the env. An env without references (`--bounds ENV=LOW:HIGH` gives them) is left out of the
  aggregate, and with none left the report gives no aggregate and says why.
- `benchmark/throughput.py` measures every script plain and with its speed flags, beside Stable-Baselines3 (in its
  own virtual environment: `python benchmark/throughput.py --setup-sb3-venv benchmark/results/.venv-sb3`) and the
  raw environment, alternating them so load noise hits all alike.
- `benchmark/profile_split.py` profiles the span a run's SPS measures and splits its time between the
  environment, torch and the Python around them ([where the time goes](speed.md#where-the-time-goes)).
"""


def main(args: Args) -> int:
    if args.throughput:
        src = Path(args.throughput)
        if not src.is_file():
            fail(f"--throughput {src}: no such file")
        name = "throughput-gpu.json" if json.loads(src.read_text()).get("cuda") else "throughput.json"
        if not args.check:
            FIGURES.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, FIGURES / name)
    tp, tp_gpu = (json.loads(f.read_text()) if f.exists() else None for f in (FIGURES / "throughput.json", FIGURES / "throughput-gpu.json"))
    scripts = sorted({s for ss in [*PAGES.values(), *FAMILIES.values()] for s in ss})
    results = {s: learning_results(s) for s in scripts}

    wanted: dict[Path, bytes] = {}
    for s, r in results.items():
        if r.figure is not None:
            wanted[FIGURES / s / "curves.svg"] = r.figure
    for page, ss in PAGES.items():
        path = ROOT / "docs" / page
        section = page_section([results[s] for s in ss], "../benchmark", "../benchmark.md")
        wanted[path] = with_section(path.read_text(), section).encode()
    wanted[ROOT / "docs" / "benchmark.md"] = benchmark_page(results, tp, tp_gpu).encode()
    stale = [p for p in FIGURES.glob("*/curves.svg") if p not in wanted]

    changed = [p for p, data in wanted.items() if not p.exists() or p.read_bytes() != data]
    if args.check:
        changed = [p for p in changed if p.suffix == ".md" or not p.exists()]
        for p in changed:
            print(f"differs: {p.relative_to(ROOT)}")
            if p.suffix == ".md" and p.exists():
                diff = difflib.unified_diff(p.read_text().splitlines(), wanted[p].decode().splitlines(), lineterm="", n=1)
                print("\n".join(list(diff)[:40]))
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (no kept results)")
        return 1 if changed or stale else 0
    for p in changed:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(wanted[p])
    for p in stale:
        p.unlink()
    kept = sum(len(find_kept(KEPT / s)) for s in scripts if (KEPT / s).is_dir())
    print(f"{kept} kept runs; wrote {len(changed)} files, removed {len(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
