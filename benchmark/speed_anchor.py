# docs: docs/benchmark.md
"""The GPU speed anchor: our scripts next to LeanRL's (github:pytorch-labs/LeanRL, the PyTorch team's compiled fork of
CleanRL) on the same device in one run, and how often our scripts launch CUDA graphs, synchronise and copy to the host
per environment step. One table, in results.md and results.json.

Rows: sac_continuous_action, td3_continuous_action, ppo_continuous_action (HalfCheetah) and ppo_atari (Breakout) by
default. Columns:
- ours: `python cleanrl/<script>.py` plain and with each --variants (default `--compile --cudagraphs`), with the flags
  that shape the work from benchmark/throughput.py's SPECS and each script's default torch threads;
- LeanRL: its `leanrl/<script>_torchcompile.py` with each --leanrl-variants (default `--compile --cudagraphs`), from a
  snapshot (--leanrl, never copied into this project), with the flags that do the same work (LEANRL below), run by
  benchmark/anchor_launch.py with LeanRL's own packages first on PYTHONPATH (--leanrl-env, see
  benchmark/device_env.py); HalfCheetah-v4 (its gymnasium 0.29 has no v5) and envpool's Breakout-v5;
- per environment step of ours (each --profile-variants): CUDA graph launches (cudaGraphLaunch), synchronisations
  (cudaStreamSynchronize + cudaDeviceSynchronize + cudaEventSynchronize), device-to-host and host-to-device copies
  (the GPU's "Memcpy DtoH" / "Memcpy HtoD" records), kernel launches outside graphs (cudaLaunchKernel,
  cuLaunchKernel) and host reads of a tensor's value (aten::_local_scalar_dense: .item(), bool(t), float(t)).

Measured windows, the same rule for ours and LeanRL's: a run does W warm-up steps, then N measured ones, and its SPS
is N / (the wall time at step W+N - the wall time at step W).
- off-policy: W = 1,000 random steps + --offpolicy-warmup (500) learning steps, which hold the compilation and the
  CUDA graph recording; N = --offpolicy-measured (5,000);
- PPO: W = --ppo-warmup iterations (4: ours records a CUDA graph at its 4th call, and GAE runs once per iteration;
  LeanRL's CudaGraphModule at its 3rd); N = --ppo-measured iterations (10).
The wall times: ours from the TensorBoard events of charts/SPS (every iteration for PPO, every 100 steps off-policy,
each stamped when it is written); LeanRL's from its progress bar, which wraps its training loop: anchor_launch.py
records the wall time at which each loop item (a step, or an iteration) starts and the loop ends. Each run's own
figure is kept beside it (ours: the last charts/SPS, from the end of its first update; LeanRL's: its last logged
`speed`, from its 3rd iteration or step after learning starts).

Per-step counts (torch.profiler, ours only): each profiled variant runs twice under anchor_launch.py's profiler, with
budgets W and W + M (M = --profile-steps off-policy, a multiple of the scripts' 100-step logging so that its syncs
average out right, or --profile-iterations PPO iterations), and count = (count(W + M) - count(W)) / M: start-up,
compilation, graph recording and the run's end are the same in both runs and cancel, so what is left is M steady
steps. The profiled runs also fill Inductor's cache (TORCHINDUCTOR_CACHE_DIR, one per check) so that the timed
compiled runs compile from it; LeanRL's compiled variants run once with budget W for the same reason.

Time: --minutes bounds the whole tool. The profiled and cache-filling runs go first, in parallel (--jobs at a time;
their counts do not depend on speed), for at most --profile-share of the time; then the timed runs one at a time,
script by script ours' variants and then LeanRL's (a tool stopped early still has whole pairs), then ours plain (the
shortest first). A run whose expected time (ESTIMATE_* below, from the speeds seen so far) no longer fits is not run,
and its cell says so; a run killed at its limit, a failed run and a LeanRL script whose packages are missing or of a
version it cannot run with (LEANRL_NEEDS, checked before any run; a package its environment's manifest.json leaves
out says why) each say why in their cell; the table goes on and is written after every run. `--dry-run` prints
every run, its command and its expected seconds. Expected on one H100 or H200 at the speeds seen so far, with the
default windows: the parallel runs about 2 min; then ours compiled sac 63 s, td3 52 s, ppo_continuous_action 56 s,
ppo_atari 30 s; LeanRL's compiled 33, 31 and 41 s (its Atari row is not run: no envpool); ours plain ppo_atari 18 s,
td3 42 s, sac 67 s, ppo_continuous_action 69 s: about 10.5 min in all. benchmark/gpu_check.py runs it with shorter
windows (its ANCHOR_FLAGS) in its share of 7.5 minutes.

On a CPU (--no-cuda) the cudagraphs variants are n/a and the CUDA counts are 0: use it to try the tool (about 4
minutes, with a LeanRL environment made for this machine's Python by benchmark/device_env.py), e.g.
    python benchmark/speed_anchor.py --no-cuda --variants --leanrl-variants plain --profile-variants plain \
        --scripts sac_continuous_action --offpolicy-warmup 100 --offpolicy-measured 300 --profile-steps 200 \
        --leanrl-env benchmark/results/leanrl-env-py311 --out benchmark/results/speed-anchor-cpu
Run on a GPU machine (benchmark/gpu_check.py --steps speed-anchor runs it as one of its steps):
    python benchmark/speed_anchor.py --out benchmark/results/speed-anchor
    python benchmark/speed_anchor.py --dry-run
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.kept import scalar_events  # noqa: E402  (tools, not algorithm scripts)
from benchmark.throughput import SPECS, applies, error_line, machine_description, run_env, run_process, script_argv  # noqa: E402
from benchmark.throughput import the_run_dir, variant_flags  # noqa: E402

LAUNCHER = ROOT / "benchmark" / "anchor_launch.py"
DEFAULT_SCRIPTS = ["sac_continuous_action", "td3_continuous_action", "ppo_continuous_action", "ppo_atari"]


@dataclass
class Args:
    scripts: list[str] = field(default_factory=lambda: list(DEFAULT_SCRIPTS))
    """the rows: scripts of benchmark/throughput.py's SPECS (one process each; LeanRL has the four defaults)"""
    variants: list[str] = field(default_factory=lambda: ["compile+cudagraphs"])
    """our speed-flag variants next to plain: words joined by '+', each a boolean flag (compile+cudagraphs runs
    --compile --cudagraphs); cudagraphs applies to CUDA runs only"""
    leanrl_variants: list[str] = field(default_factory=lambda: ["compile+cudagraphs"])
    """LeanRL's variants (plain, compile, cudagraphs, compile+cudagraphs: its --compile and --cudagraphs flags)"""
    profile_variants: list[str] = field(default_factory=lambda: ["compile+cudagraphs"])
    """our variants whose per-step counts torch.profiler takes (plain or one of --variants); none: no profiling"""
    leanrl: str = "benchmark/results/leanrl"
    """a snapshot of github:pytorch-labs/LeanRL: the folder that holds leanrl/ (benchmark/device_env.py makes it)"""
    leanrl_env: str = "benchmark/results/leanrl-env"
    """LeanRL's packages, put first on PYTHONPATH for its runs (benchmark/device_env.py makes it; wheels listed in its
    manifest.json under `unpack` are unpacked into --out first)"""
    cuda: bool = True
    """if toggled, every run uses the GPU; else none sees one (to try the tool on a CPU)"""
    minutes: float = 7.5
    """the time limit of the whole tool"""
    profile_share: float = 0.3
    """the share of --minutes that the parallel profiled and cache-filling runs may take at most"""
    jobs: int = 12
    """profiled and cache-filling runs at a time (each gets the CPU cores / this many compile threads)"""
    timeout: float = 300
    """seconds after which one run is killed (it then counts as failed)"""
    offpolicy_warmup: int = 500
    """off-policy: learning steps after the 1,000 random ones before the measured window"""
    offpolicy_measured: int = 5000
    """off-policy: steps in the measured window"""
    ppo_warmup: int = 4
    """PPO: iterations before the measured window"""
    ppo_measured: int = 10
    """PPO: iterations in the measured window"""
    profile_steps: int = 500
    """off-policy: steps between the two profiled runs (a multiple of 100, the scripts' logging interval)"""
    profile_iterations: int = 2
    """PPO: iterations between the two profiled runs"""
    seed: int = 1
    """the seed of every run"""
    out: str = "benchmark/results/speed-anchor"
    """the folder for results.json, results.md and the runs (work/<script>/<run>/)"""
    dry_run: bool = False
    """if toggled, print every run with its command and expected seconds, and run nothing"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


# LeanRL's script for each row, the flags that do the work ours does (SPECS `ours`), and its env id. Its off-policy
# scripts always step one env and its PPO scripts count iterations as ours do; it has no --num-envs for SAC and TD3,
# and one --learning-rate for TD3's actor and critic (ours: --policy-lr 3e-4 --q-lr 3e-4).
OFF_POLICY = ["--batch-size", "256", "--buffer-size", "100000", "--tau", "0.005"]
LEANRL = {
    "sac_continuous_action": dict(
        script="leanrl/sac_continuous_action_torchcompile.py", env_id="HalfCheetah-v4",
        flags=[*OFF_POLICY, "--policy-lr", "3e-4", "--q-lr", "1e-3", "--policy-frequency", "2",
               "--target-network-frequency", "1", "--autotune"],
        needs=["tensordict<0.9", "torchrl", "gymnasium<1", "numpy<2.4", "mujoco", "tyro", "tqdm"],
    ),
    "td3_continuous_action": dict(
        script="leanrl/td3_continuous_action_torchcompile.py", env_id="HalfCheetah-v4",
        flags=[*OFF_POLICY, "--learning-rate", "3e-4", "--exploration-noise", "0.1", "--policy-frequency", "2",
               "--policy-noise", "0.2", "--noise-clip", "0.5"],
        needs=["tensordict", "torchrl", "gymnasium<1", "mujoco", "tyro", "tqdm"],
    ),
    "ppo_continuous_action": dict(
        script="leanrl/ppo_continuous_action_torchcompile.py", env_id="HalfCheetah-v4",
        flags=["--num-envs", "1", "--num-steps", "2048", "--num-minibatches", "32", "--update-epochs", "10",
               "--learning-rate", "3e-4", "--anneal-lr", "--ent-coef", "0.0", "--clip-vloss"],
        needs=["tensordict", "gymnasium<1", "mujoco", "tyro", "tqdm"],
    ),
    "ppo_atari": dict(
        script="leanrl/ppo_atari_envpool_torchcompile.py", env_id="Breakout-v5",
        flags=["--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
               "--learning-rate", "2.5e-4", "--anneal-lr", "--clip-coef", "0.1", "--ent-coef", "0.01"],
        needs=["tensordict", "envpool<1", "gym<0.26", "tyro", "tqdm"],
    ),
}  # fmt: skip
# Why a LeanRL script needs a version below a bound (read in its code and seen failing here otherwise)
NEEDS_WHY = {
    "tensordict<0.9": "its policy is a TensorDictModule whose function returns 3 tensors for 1 out_key, an error "
                      "since tensordict 0.9",
    "gymnasium<1": "it was written for gymnasium 0.29 (infos['final_observation'] and infos['final_info'], the 0.x "
                   "signatures of its wrappers), which gymnasium 1.0 changed",
    "numpy<2.4": "it takes float() of the 1-element arrays of episode returns, an error since numpy 2.4",
    "envpool<1": "it steps envpool's env_type='gym' with the old 4-tuple API and sets envs.num_envs; envpool 1.x "
                 "follows gymnasium's API and its num_envs is read-only",
    "gym<0.26": "it uses the old gym API (LeanRL's requirements pin gym<0.26 for envpool)",
}  # fmt: skip

# Expected seconds of one run on one H100 or H200, to fit the plan into --minutes and for --dry-run: start-up (python,
# torch, CUDA, the envs) + compilation + the steps at the speeds seen so far: ours on one H200 (2026-12-04, short
# windows), LeanRL's published H100 figures (its README). A profiled run takes twice as long
# per step; parallel runs slow each other by PARALLEL_SLOWDOWN. Update them as measurements come in.
ESTIMATE_START_S = 10
ESTIMATE_COMPILE_S = {"cold": 45, "cached": 15}  # a compiled variant's compilation: from scratch, from Inductor's cache
ESTIMATE_RANDOM_SPS = 2000
PARALLEL_SLOWDOWN = 1.5
ESTIMATE_SPS = {
    "sac_continuous_action": {"ours": {"plain": 98, "compile+cudagraphs": 148},
                              "leanrl": {"plain": 130, "compile": 255, "compile+cudagraphs": 725}},
    "td3_continuous_action": {"ours": {"plain": 175, "compile+cudagraphs": 209},
                              "leanrl": {"plain": 247, "compile": 272, "compile+cudagraphs": 936}},
    "ppo_continuous_action": {"ours": {"plain": 488, "compile+cudagraphs": 930},
                              "leanrl": {"plain": 683, "compile": 908, "compile+cudagraphs": 1774}},
    "ppo_atari": {"ours": {"plain": 1892, "compile+cudagraphs": 3051},
                  "leanrl": {"plain": 3728, "compile": 3841, "compile+cudagraphs": 6809}},
}  # fmt: skip
ESTIMATE_DEFAULT_SPS = 200

# The per-step counts: column -> prefixes of the profiler's event names it sums
COUNTED = {
    "graph launches": ("cudaGraphLaunch",),
    "syncs": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
    "D2H copies": ("Memcpy DtoH",),
    "H2D copies": ("Memcpy HtoD",),
    "kernel launches": ("cudaLaunchKernel", "cuLaunchKernel"),
    "host reads": ("aten::_local_scalar_dense",),  # of any tensor: a CPU one's too (a non-capturable Adam's step count)
}
SYNC_NAMES = COUNTED["syncs"]

# run with LeanRL's PYTHONPATH: each module's version, or why it does not import
PREFLIGHT = """import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        out[name] = {"version": str(getattr(module, "__version__", "0"))}
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
print("PREFLIGHT " + json.dumps(out))
"""


@dataclass
class Run:
    """One process: `kind` ours (timed), leanrl (timed), profile (ours under the profiler, budget `point` W or WM)
    or warm (LeanRL with budget W, to fill Inductor's cache)."""

    script: str
    kind: str
    variant: str
    steps: int
    command: list[str]
    pythonpath: Optional[str]
    estimate: float
    point: str = ""

    @property
    def label(self) -> str:
        return "-".join(x for x in (self.kind, self.variant, self.point) if x)


def windows(spec: dict, args: Args) -> dict:
    """The steps of one row's runs: warm-up W, measured N, total, profiled M, and what a step of LeanRL's loop is."""
    if "iteration" in spec:
        it = spec["iteration"]
        return dict(warmup=args.ppo_warmup * it, measured=args.ppo_measured * it, profiled=args.profile_iterations * it,
                    item=it, total=(args.ppo_warmup + args.ppo_measured) * it,
                    describe=f"iterations {args.ppo_warmup + 1}-{args.ppo_warmup + args.ppo_measured} of {it} steps "
                             f"(after {args.ppo_warmup} warm-up iterations)")  # fmt: skip
    warmup = spec["learning_starts"] + args.offpolicy_warmup
    return dict(warmup=warmup, measured=args.offpolicy_measured, profiled=args.profile_steps, item=spec["num_envs"],
                total=warmup + args.offpolicy_measured,
                describe=f"steps {warmup + 1}-{warmup + args.offpolicy_measured} (after {spec['learning_starts']} "
                         f"random and {args.offpolicy_warmup} learning steps)")  # fmt: skip


def estimate(script: str, who: str, variant: str, steps: int, spec: dict, cache: str, profiled: bool = False) -> float:
    """Expected seconds of one run (see ESTIMATE_*)."""
    sps = ESTIMATE_SPS.get(script, {}).get(who, {})
    rate = sps.get(variant, sps.get("plain", ESTIMATE_DEFAULT_SPS))
    random = min(steps, spec.get("learning_starts", 0))
    seconds = ESTIMATE_START_S + random / ESTIMATE_RANDOM_SPS + (steps - random) / rate * (2 if profiled else 1)
    return seconds + (ESTIMATE_COMPILE_S[cache] if "compile" in variant.split("+") else 0)


def leanrl_argv(script: str, steps: int, variant: str, args: Args) -> list[str]:
    spec, lean = SPECS[script], LEANRL[script]
    starts = ["--learning-starts", str(spec["learning_starts"])] if "learning_starts" in spec else []
    flags = [] if variant == "plain" else variant_flags(variant)
    return ["--env-id", lean["env_id"], "--seed", str(args.seed), "--total-timesteps", str(steps),
            "--cuda" if args.cuda else "--no-cuda", *starts, *lean["flags"], *flags]  # fmt: skip


def ours_command(script: str, steps: int, variant: str, args: Args) -> list[str]:
    flags = [] if variant == "plain" else variant_flags(variant)
    return [str(ROOT / "cleanrl" / SPECS[script]["script"]), *script_argv(SPECS[script], steps, args.seed, args.cuda, "defaults"), *flags]  # fmt: skip


def leanrl_pythonpath(env: Path, unpacked: Path) -> str:
    """LeanRL's packages first (the wheels its manifest has unpacked before them), then the caller's PYTHONPATH."""
    parts = [str(unpacked.absolute())] if unpacked_wheels(env) else []
    parts.append(str(env.absolute()))
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def manifest(env: Path) -> dict:
    path = env / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def unpacked_wheels(env: Path) -> list[str]:
    return manifest(env).get("unpack", [])


def leanrl_problem(args: Args) -> Optional[str]:
    """Why no LeanRL script can run (its snapshot or environment missing, or built for another Python); None if they
    may (LEANRL_NEEDS are checked by preflight())."""
    snapshot, env = Path(args.leanrl), Path(args.leanrl_env)
    if not (snapshot / "leanrl").is_dir():
        return (f"no LeanRL snapshot at {snapshot} (a folder holding leanrl/); make it with python benchmark/device_env.py "
                "--leanrl-git PATH_OR_URL")  # fmt: skip
    if not env.is_dir():
        return f"no LeanRL environment at {env}; make it with python benchmark/device_env.py"
    built = manifest(env).get("python")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if built and built != here:
        return (f"{env} was built for Python {built} and this is Python {here}; make one for it with python "
                f"benchmark/device_env.py --python-version {here} --leanrl-env OTHER_FOLDER")  # fmt: skip
    return None


def satisfies(version: str, need: str) -> Optional[str]:
    """None if `version` of the module meets `need` ("name<bound" or a bare name), else why not."""
    if "<" not in need:
        return None
    from packaging.version import InvalidVersion, Version

    name, bound = need.split("<")
    try:
        if Version(version) < Version(bound):
            return None
    except InvalidVersion:
        return None  # a version string we cannot compare: let the run say whether it works
    return f"{name} {version} in its environment: {NEEDS_WHY.get(need, need)}"


def needs_problem(script: str, modules: dict, left_out: Optional[dict] = None) -> Optional[str]:
    """Why LeanRL's script cannot run with the modules the preflight found; None if it can. left_out: the modules its
    environment leaves out, with why (its manifest.json's `left_out`)."""
    for need in LEANRL[script]["needs"]:
        name = need.split("<")[0]
        found = modules.get(name, {"error": "not checked"})
        if "error" in found:
            why = (f"{name} is left out of LeanRL's environment: {left_out[name]}" if name in (left_out or {})
                   else f"cannot import {name} from LeanRL's environment ({found['error']})")  # fmt: skip
            return why + (f"; it needs {need}: {NEEDS_WHY[need]}" if need in NEEDS_WHY else "")
        why = satisfies(found["version"], need)
        if why:
            return why
    return None


def preflight(scripts: list[str], pythonpath: str, args: Args, work: Path) -> dict:
    """The version of every module the LeanRL scripts need (and torch's), or why it does not import."""
    names = sorted({"torch", "numpy", *(n.split("<")[0] for s in scripts for n in LEANRL[s]["needs"])})
    env = dict(run_env(args.cuda), PYTHONPATH=pythonpath)
    result = run_process([sys.executable, "-c", PREFLIGHT, *names], work, env, 120)
    lines = [l for l in (work / "log.txt").read_text(errors="replace").splitlines() if l.startswith("PREFLIGHT ")]
    if "error" in result or not lines:
        return {n: {"error": result.get("error", "the check printed nothing")} for n in names}
    return json.loads(lines[-1][len("PREFLIGHT ") :])


def unpack(env: Path, target: Path) -> None:
    """Unzip the wheels the environment's manifest lists under `unpack` into target (a wheel is a zip of its files)."""
    for wheel in unpacked_wheels(env):
        with zipfile.ZipFile(env / wheel) as z:
            z.extractall(target)


def per_step(counts_w: dict, counts_wm: dict, steps: int) -> dict:
    """(count over the longer run - count over the shorter one) / the steps between them, for each COUNTED column,
    and each sync call's own figure."""
    def total(counts: dict, prefixes: tuple) -> int:
        return sum(n for name, n in counts.items() if name.startswith(prefixes))

    out = {column: (total(counts_wm, p) - total(counts_w, p)) / steps for column, p in COUNTED.items()}
    out["syncs by call"] = {name: (total(counts_wm, (name,)) - total(counts_w, (name,))) / steps for name in SYNC_NAMES}
    return out


def plan(args: Args, leanrl_missing: Optional[str], unpacked: Path) -> tuple[list[Run], list[Run], dict]:
    """(the parallel runs, the timed runs in the order they run, the cells that will not run: row -> column -> why);
    leanrl_missing: why no LeanRL script can run (leanrl_problem), or None."""
    parallel, timed_pairs, timed_plain, not_run = [], [], [], {}  # timed_pairs: script by script, ours then LeanRL's
    pythonpath = leanrl_pythonpath(Path(args.leanrl_env), unpacked)
    snapshot = Path(args.leanrl).absolute()
    for script in args.scripts:
        spec, w = SPECS[script], windows(SPECS[script], args)
        skip = not_run.setdefault(script, {})
        for v in ["plain", *args.variants]:
            why = applies(v, spec, args.cuda) if v != "plain" else None
            if why:
                skip[f"ours {v}"] = f"n/a ({why})"
                continue
            cached = "cached" if v in args.profile_variants else "cold"
            run = Run(script, "ours", v, w["total"], [sys.executable, *ours_command(script, w["total"], v, args)], None,
                      estimate(script, "ours", v, w["total"], spec, cached))  # fmt: skip
            (timed_plain if v == "plain" else timed_pairs).append(run)
        for v in args.profile_variants:
            why = applies(v, spec, args.cuda) if v != "plain" else None
            if why:
                skip[f"profile {v}"] = f"n/a ({why})"
                continue
            for point, steps in (("W", w["warmup"]), ("WM", w["warmup"] + w["profiled"])):
                json_path = f"profile-{v}-{point}.json"
                cmd = [sys.executable, str(LAUNCHER), "profile", json_path, *ours_command(script, steps, v, args)]
                parallel.append(Run(script, "profile", v, steps, cmd, None,
                                    estimate(script, "ours", v, steps, spec, "cold", profiled=True), point))  # fmt: skip
        for v in args.leanrl_variants:
            why = "LeanRL has no such script" if script not in LEANRL else applies(v, spec, args.cuda) if v != "plain" else None
            if why or leanrl_missing:
                skip[f"leanrl {v}"] = f"n/a ({why})" if why else f"not run ({leanrl_missing})"
                continue
            path = str(snapshot / LEANRL[script]["script"])
            cmd = [sys.executable, str(LAUNCHER), "leanrl", "marks.json", path, *leanrl_argv(script, w["total"], v, args)]
            timed_pairs.append(Run(script, "leanrl", v, w["total"], cmd, pythonpath,
                                   estimate(script, "leanrl", v, w["total"], spec, "cached" if "compile" in v else "cold")))  # fmt: skip
            if "compile" in v.split("+"):
                cmd = [sys.executable, str(LAUNCHER), "leanrl", "marks.json", path, *leanrl_argv(script, w["warmup"], v, args)]
                parallel.append(Run(script, "warm", v, w["warmup"], cmd, pythonpath,
                                    estimate(script, "leanrl", v, w["warmup"], spec, "cold")))  # fmt: skip
    # plain last, the shortest first: as many of them as the time left allows
    return parallel, [*timed_pairs, *sorted(timed_plain, key=lambda r: r.estimate)], not_run


def run_parallel(runs: list[Run], out: Path, args: Args, limit: float) -> dict:
    """Run them `args.jobs` at a time, each in its own folder and process session, all stopped at `limit` seconds;
    label -> {exit_code, process_seconds} or {error}."""
    pending, running, results, start = list(runs), {}, {}, time.time()
    threads = str(max(1, (os.cpu_count() or 1) // max(1, min(args.jobs, len(runs)))))
    try:
        while pending or running:
            while pending and len(running) < args.jobs:
                run = pending.pop(0)
                work = out / "work" / run.script / run.label
                if work.exists():
                    shutil.rmtree(work)
                work.mkdir(parents=True)
                env = run_env_for(run, args, out)
                env["TORCHINDUCTOR_COMPILE_THREADS"] = threads  # several compilations at once share the cores
                log = open(work / "log.txt", "w")
                log.write("$ " + command_line(run) + "\n")
                log.flush()
                proc = subprocess.Popen(run.command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
                running[run.label + run.script] = (run, proc, time.time(), log, work)
            time.sleep(0.2)
            for key, (run, proc, t0, log, work) in list(running.items()):
                code = proc.poll()
                over = time.time() - start > limit or time.time() - t0 > args.timeout
                if code is None and not over:
                    continue
                if code is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    why = f"--timeout {args.timeout:g} s" if time.time() - t0 > args.timeout else f"the parallel runs' limit of {limit:.0f} s"
                    result = {"error": f"stopped at {why} (log {work / 'log.txt'})"}
                elif code != 0:
                    result = {"error": f"exit {code}: {error_line(work / 'log.txt')} (log {work / 'log.txt'})"}
                else:
                    result = {"exit_code": 0}
                result["process_seconds"] = round(time.time() - t0, 1)
                log.close()
                results[(run.script, run.label)] = result
                del running[key]
                print(f"[{run.script}] {run.label}: {result.get('error', 'done')} ({result['process_seconds']} s)", flush=True)
    finally:
        for run, proc, _, log, _ in running.values():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.close()
    return results


def run_env_for(run: Run, args: Args, out: Path) -> dict:
    env = run_env(args.cuda)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(out / "inductor-cache")  # one per check: the timed runs compile from it
    if run.pythonpath is not None:
        env["PYTHONPATH"] = run.pythonpath
    return env


def command_line(run: Run) -> str:
    return (f"PYTHONPATH={run.pythonpath} " if run.pythonpath else "") + shlex.join(run.command)


def ours_result(run: Run, w: dict, work: Path, started: float, result: dict) -> dict:
    """The measured window of one of our timed runs, from its charts/SPS events' steps and wall times."""
    run_dir = the_run_dir(work)
    if isinstance(run_dir, str):
        return dict(result, error=run_dir)
    events = scalar_events(run_dir, "charts/SPS")
    inside = [e for e in events if e[0] >= w["warmup"]]
    if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
        return dict(result, error=f"{run_dir} has {len(inside)} charts/SPS event(s) from step {w['warmup']} on: no window")
    (s0, t0, _), (s1, t1, own) = inside[0], inside[-1]
    return dict(result, sps=(s1 - s0) / (t1 - t0), window_steps=[s0, s1], window_seconds=t1 - t0,
                warmup_seconds=t0 - started, own_sps=own)  # fmt: skip


def marks_window(marks: list, warmup: int, item: int) -> Optional[tuple[int, float, int, float]]:
    """(first step, its wall time, last step, its wall time) of a LeanRL run's window: from the first mark at or after
    `warmup` steps done to the loop's end; None without such a window. A mark is [loop items done, wall time]."""
    inside = [(done * item, t) for done, t in marks if done * item >= warmup]
    if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
        return None
    return (*inside[0], *inside[-1])


def leanrl_result(run: Run, w: dict, work: Path, started: float, result: dict) -> dict:
    path = work / "marks.json"
    if not path.is_file():
        return dict(result, error=f"the LeanRL run wrote no {path.name}")
    record = json.loads(path.read_text())
    marks = max(record["marks"], key=len) if record["marks"] else []  # its training loop's progress bar
    window = marks_window(marks, w["warmup"], w["item"])
    if window is None:
        return dict(result, error=f"its progress bar gave no window from step {w['warmup']} on ({len(marks)} marks)")
    s0, t0, s1, t1 = window
    speeds = [r["speed"] for r in record["logged"] if "speed" in r]
    return dict(result, sps=(s1 - s0) / (t1 - t0), window_steps=[s0, s1], window_seconds=t1 - t0,
                warmup_seconds=t0 - started, own_sps=speeds[-1] if speeds else None)  # fmt: skip


def profile_result(script: str, variant: str, w: dict, out: Path, parallel: dict) -> dict:
    """Per-step counts from the two profiled runs of one variant, or why there are none."""
    counts = []
    for point in ("W", "WM"):
        label = f"profile-{variant}-{point}"
        r = parallel.get((script, label))
        if r is None:
            return {"not_run": f"not run (no time was left for the profiled run {label})"}
        if "error" in r:
            return {"error": f"{label}: {r['error']}"}
        path = out / "work" / script / label / f"{label}.json"
        if not path.is_file():
            return {"error": f"{label} wrote no {path.name}"}
        counts.append(json.loads(path.read_text())["counts"])
    return dict(per_step(counts[0], counts[1], w["profiled"]), steps=w["profiled"],
                budgets=[w["warmup"], w["warmup"] + w["profiled"]])  # fmt: skip


def cell(row: dict, column: str) -> str:
    c = row["cells"].get(column)
    if c is None:
        return "-"
    if "sps" in c:
        return f"{c['sps']:.0f}"
    return c.get("not_run") or f"failed: {c['error']}"


def count_cell(p: dict, column: str) -> str:
    return f"{p[column]:.3g}" if column in p else "-"


def markdown(header: dict, rows: list[dict]) -> str:
    variants, lean = header["variants"], header["leanrl_variants"]
    head = ["script", "ours env / LeanRL env", "measured window", "ours plain SPS", *[f"ours {v} SPS" for v in variants],
            *[f"LeanRL {v} SPS" for v in lean], *[f"ours {v} / LeanRL {v}" for v in variants if v in lean]]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["script"], f"{row['env_id']} / {row['leanrl_env_id']}", row["window"], cell(row, "ours plain"),
                 *[cell(row, f"ours {v}") for v in variants], *[cell(row, f"leanrl {v}") for v in lean]]  # fmt: skip
        for v in variants:
            if v in lean:
                a, b = row["cells"].get(f"ours {v}", {}), row["cells"].get(f"leanrl {v}", {})
                cells.append(f"{a['sps'] / b['sps']:.2f}" if "sps" in a and "sps" in b else "-")
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if not header["profile_variants"]:
        return "\n".join(lines)
    lines += ["", "Per environment step of ours (torch.profiler, (count(W + M) - count(W)) / M):", ""]
    head = ["script", "variant", "M steps", *COUNTED, "syncs: stream / device / event"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        for v, p in row["profile"].items():
            if "error" in p or "not_run" in p:
                why = p.get("not_run") or f"failed: {p['error']}"
                lines.append(f"| {row['script']} | {v} | - | {why.replace('|', '/')} |" + " |" * len(COUNTED))
                continue
            by = " / ".join(f"{p['syncs by call'][n]:.3g}" for n in SYNC_NAMES)
            lines.append(f"| {row['script']} | {v} | {p['steps']} | " + " | ".join(count_cell(p, c) for c in COUNTED) + f" | {by} |")
    return "\n".join(lines)


def runs_markdown(rows: list[dict]) -> str:
    lines = ["| script | run | SPS | window steps | window s | warm-up s | process s | own figure | note |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        for column, c in row["cells"].items():
            if "not_run" in c:
                continue
            sps = f"{c['sps']:.0f}" if "sps" in c else "failed"
            win = f"{c['window_steps'][0]}-{c['window_steps'][1]}" if "window_steps" in c else "-"
            secs = [f"{c[k]:.1f}" if c.get(k) is not None else "-" for k in ("window_seconds", "warmup_seconds", "process_seconds")]
            own = f"{c['own_sps']:.0f}" if c.get("own_sps") is not None else "-"
            lines.append(f"| {row['script']} | {column} | {sps} | {win} | {' | '.join(secs)} | {own} | "
                         f"{c.get('error', '').replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines)


def write(out: Path, header: dict, rows: list[dict]) -> None:
    payload = dict(header, finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rows=rows)
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    m = header["machine"]
    notes = [f"- LeanRL: {header['leanrl_note']}"] if header.get("leanrl_note") else []
    text = [
        f"Command: `{header['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['gpu']}; Python {m['python']}, torch {m['torch']}; device {'cuda' if header['cuda'] else 'cpu'}.",
        f"LeanRL: the snapshot at {header['leanrl']} ({header.get('leanrl_commit') or 'commit unknown'}), its packages "
        f"from {header['leanrl_env']}: {header.get('leanrl_versions') or 'not checked'}.",
        f"Started {header['started']}, finished {payload['finished']}.",
        "",
        "SPS: steps in the measured window / its wall time, the same rule for ours and LeanRL's (ours: the wall times of "
        "its charts/SPS events; LeanRL's: of its progress bar's items). Not run / failed cells say why.",
        "",
        markdown(header, rows),
        "",
        *notes,
        "",
        "Every run (warm-up s: from the process start to the window's start; own figure: ours' last charts/SPS, LeanRL's "
        "last logged speed):",
        "",
        runs_markdown(rows),
        "",
    ]
    (out / "results.md").write_text("\n".join(text))


def check(args: Args) -> None:
    unknown = [s for s in args.scripts if s not in SPECS or SPECS[s].get("nproc")]
    if unknown or not args.scripts:
        fail(f"--scripts {' '.join(unknown) or '(none)'}: choose one-process scripts of {', '.join(s for s in SPECS if not SPECS[s].get('nproc'))}")
    for v in [*args.variants, *args.leanrl_variants, *args.profile_variants]:
        if not re.fullmatch(r"[a-z][a-z0-9-]*(\+[a-z][a-z0-9-]*)*", v):
            fail(f"variant {v!r}: flag names without '--' joined by '+', like compile+cudagraphs, or plain")
    if "plain" in args.variants:
        fail("--variants must not include plain (ours always runs plain)")
    bad = [v for v in args.leanrl_variants if v != "plain" and not set(v.split("+")) <= {"compile", "cudagraphs"}]
    if bad:
        fail(f"--leanrl-variants {bad}: LeanRL's speed flags are compile and cudagraphs (plain: neither)")
    bad = [v for v in args.profile_variants if v != "plain" and v not in args.variants]
    if bad:
        fail(f"--profile-variants {bad}: each must be plain or one of --variants")
    if args.profile_steps <= 0 or args.profile_steps % 100:
        fail(f"--profile-steps must be a positive multiple of 100 (the scripts' logging interval), got {args.profile_steps}")
    for name in ("ppo_measured", "profile_iterations", "jobs"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1")
    # the windows start and end at one of our logged charts/SPS events: off-policy every 100 steps from the first
    # update on, PPO at the end of every iteration from the 2nd on (the SPS clock starts after the 1st)
    for name in ("offpolicy_warmup", "offpolicy_measured"):
        if getattr(args, name) < 100 or getattr(args, name) % 100:
            fail(f"--{name.replace('_', '-')} must be a positive multiple of 100 (our scripts log every 100 steps)")
    if args.ppo_warmup < 2:
        fail("--ppo-warmup must be at least 2 (our PPO scripts log their first SPS at the end of the 2nd iteration)")
    if not args.minutes > 0 or not 0 <= args.profile_share <= 1:
        fail("--minutes must be above 0 and --profile-share between 0 and 1")


def main(args: Args) -> int:
    check(args)
    out = Path(args.out).absolute()
    unpacked = out / "leanrl-unpacked"
    problem = leanrl_problem(args)
    parallel, timed, not_run = plan(args, problem, unpacked)
    if args.dry_run:
        if problem:
            print(f"LeanRL's runs: not run: {problem}")
        print(f"parallel, {args.jobs} at a time, at most {args.profile_share * args.minutes * 60:.0f} s; about "
              f"{max((r.estimate for r in parallel), default=0) * PARALLEL_SLOWDOWN:.0f} s expected:")
        for r in parallel:
            print(f"  [{r.script}] {r.label} (about {r.estimate:.0f} s): {command_line(r)}")
        print(f"then one at a time, in this order, until {args.minutes * 60:.0f} s:")
        total = max((r.estimate for r in parallel), default=0) * PARALLEL_SLOWDOWN
        for r in timed:
            total += r.estimate
            print(f"  [{r.script}] {r.label} (about {r.estimate:.0f} s, {total:.0f} s in all): {command_line(r)}")
        for script, skip in not_run.items():
            for column, why in skip.items():
                print(f"  [{script}] {column}: {why}")
        return 0
    start = time.time()
    deadline = start + args.minutes * 60

    def interrupted(signum, frame):
        raise KeyboardInterrupt  # gpu_check stops a step with SIGINT; SIGTERM alike: the running runs stop

    signal.signal(signal.SIGTERM, interrupted)
    out.mkdir(parents=True, exist_ok=True)
    header = dict(command="python benchmark/speed_anchor.py " + shlex.join(sys.argv[1:]), machine=machine_description(),
                  cuda=args.cuda, started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), variants=args.variants,
                  leanrl_variants=args.leanrl_variants, profile_variants=args.profile_variants,
                  leanrl=str(Path(args.leanrl).absolute()), leanrl_env=str(Path(args.leanrl_env).absolute()),
                  leanrl_note=problem, windows={s: windows(SPECS[s], args)["describe"] for s in args.scripts})  # fmt: skip
    snapshot_info = Path(args.leanrl) / "SNAPSHOT.json"
    if snapshot_info.is_file():
        header["leanrl_commit"] = json.loads(snapshot_info.read_text()).get("commit")
    lean_scripts = sorted({r.script for r in timed if r.kind == "leanrl"})
    if lean_scripts:
        unpack(Path(args.leanrl_env), unpacked)
        modules = preflight(lean_scripts, leanrl_pythonpath(Path(args.leanrl_env), unpacked), args, out / "work" / "preflight")
        header["leanrl_versions"] = ", ".join(f"{n} {m.get('version', 'missing')}" for n, m in sorted(modules.items()))
        for script in lean_scripts:
            why = needs_problem(script, modules, manifest(Path(args.leanrl_env)).get("left_out"))
            if why:
                for r in [r for r in timed + parallel if r.script == script and r.kind in ("leanrl", "warm")]:
                    not_run[script][f"leanrl {r.variant}"] = f"not run ({why})"
                timed = [r for r in timed if not (r.script == script and r.kind == "leanrl")]
                parallel = [r for r in parallel if not (r.script == script and r.kind == "warm")]
    rows = {s: dict(script=s, env_id=SPECS[s]["env_id"], leanrl_env_id=LEANRL.get(s, {}).get("env_id", "-"),
                    window=windows(SPECS[s], args)["describe"], cells={c: {"not_run": why} for c, why in not_run[s].items()
                                                                       if not c.startswith("profile")},
                    profile={c[len("profile "):]: {"not_run": why} for c, why in not_run[s].items() if c.startswith("profile")})
            for s in args.scripts}  # fmt: skip
    try:
        limit = min(args.profile_share * args.minutes * 60, deadline - time.time())
        results = run_parallel(parallel, out, args, limit) if parallel and limit > 0 else {}
        for s in args.scripts:
            for v in args.profile_variants:
                if v not in rows[s]["profile"]:
                    rows[s]["profile"][v] = profile_result(s, v, windows(SPECS[s], args), out, results)
        for (script, label), r in results.items():
            variant = label[len("warm-"):]
            if label.startswith("warm-") and r.get("error", "").startswith("exit "):
                # LeanRL's script failed at budget W: it would fail again, so its timed run is not spent
                rows[script]["cells"][f"leanrl {variant}"] = {"error": f"its cache-filling run failed: {r['error']}"}
                timed = [t for t in timed if not (t.script == script and t.kind == "leanrl" and t.variant == variant)]
        write(out, header, list(rows.values()))
        for run in timed:
            column, left = f"{run.kind} {run.variant}", deadline - time.time()
            if run.estimate > left:
                rows[run.script]["cells"][column] = {"not_run": f"not run (about {run.estimate:.0f} s needed, {left:.0f} s left of --minutes {args.minutes:g})"}
                print(f"[{run.script}] {run.label}: not run, {left:.0f} s left", flush=True)
                continue
            work, w = out / "work" / run.script / run.label, windows(SPECS[run.script], args)
            started = time.time()
            result = run_process(run.command, work, run_env_for(run, args, out), min(args.timeout, left))
            result = {k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}
            if "error" not in result:
                result = (ours_result if run.kind == "ours" else leanrl_result)(run, w, work, started, result)
            result["command"] = command_line(run)
            rows[run.script]["cells"][column] = result
            print(f"[{run.script}] {run.label}: {result.get('error') or format(result['sps'], '.0f') + ' SPS'} "
                  f"({result['process_seconds']} s)", flush=True)  # fmt: skip
            write(out, header, list(rows.values()))
    finally:
        write(out, header, list(rows.values()))
    print(f"\n{markdown(header, list(rows.values()))}\n\nwrote {out / 'results.md'} and {out / 'results.json'} in {(time.time() - start) / 60:.1f} min")
    failed = [f"{r['script']} {c}" for r in rows.values() for c, x in r["cells"].items() if "error" in x]
    failed += [f"{r['script']} profile {v}" for r in rows.values() for v, p in r["profile"].items() if "error" in p]
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
