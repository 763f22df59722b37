# docs: docs/tuning.md
"""Hyperparameter tuning of any script in cleanrl/ with Optuna: each trial runs the script as its own process.

A trial runs `python cleanrl/<script>.py FLAGS --env-id ENV --seed K` for every env id and seed of the study, one
after the other, each in its own working directory (as benchmark/run.py does):

    <out>/<study>/trial<n>/<env_id>/seed<k>/          the run's working directory: runs/ (TensorBoard, checkpoints)
    <out>/<study>/trial<n>/<env_id>/seed<k>/log.txt   stdout and stderr of the run
    <out>/<study>/kept/trial<n>/<env_id>/seed<k>.json its episodes, in the benchmark's kept format (benchmark/kept.py)
    <out>/<study>/study.db                            the default store (SQLite): nothing to start

Score of a run: the mean of the last --metric-last-n-average-window values of --metric in its event files. Score of a
trial: the average (--aggregation) of its runs' scores; with several env ids each env is first normalised to
(score - low) / (high - low), by --target-scores ENV=LOW:HIGH or else by the reference scores the benchmark knows
(RANDOM_RETURN: a random policy's return as low; upstream CleanRL's published return of the script as high).

Pruning: while a run goes, the tuner reads its event files every --report-interval seconds and reports the trial's
score so far (finished runs by their score, the running one by its episodes so far) at --reports-per-run fixed steps
of each run (runs counted one after the other), so that trials are compared at the same steps. A run the pruner stops
gets SIGTERM: the script ends cleanly (exit 143, a checkpoint with --save-model) and the trial is recorded as pruned.
With --checkpoint-frequency a trial repeated after its worker died or was stopped continues its runs' checkpoints.

The tuner never imports a script: it learns the script's flags, their ranges and defaults from a parse of the
script's Args in a subprocess (script_flags).

Stores: --storage takes any Optuna RDB URL (or --storage-secret names an AWS Secrets Manager secret holding it). A
PostgreSQL URL (postgresql://user:password@host/db) is shared by every worker: start the same command on N processes or machines and they run one study. Workers write a heartbeat; a trial
whose worker died (kill -9, a lost machine) is marked failed once its heartbeat is older than --grace-period seconds
and is tried again with the same flags (RetryHeartbeatStaleTrialCallback, up to --max-retry times). A tuner stopped by
Ctrl-C, SIGTERM or SIGHUP stops its run with SIGTERM, marks the trial failed and queues its flags to run first.
Starting the same command again continues the study until it has --trials finished (complete or pruned) trials.

Bad input ends in one `error:` line before any trial: a flag the script does not have, a range outside the flag's
declared range (cleanrl/flags.py), a store that cannot be reached, a study of another direction or command.

Run:
    python benchmark/tuner.py tune --script cleanrl/ppo.py --env-ids CartPole-v1 --trials 20 \\
        --params learning-rate=log:1e-4:3e-3 ent-coef=float:0:0.05 num-minibatches=choice:2,4,8 \\
        --flags="--total-timesteps 50000"
    python benchmark/tuner.py best --study-name ppo        # the best trial's flags as a ready command line
    python benchmark/tuner.py export --study-name ppo       # kept files of the defaults and the best trial
    python benchmark/tuner.py --help
"""

import csv
import functools
import json
import platform
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, NoReturn, Optional, Union

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.kept import kept_path, portable_command, read_event_scalars, write_kept  # noqa: E402  (a tool)
from benchmark.run import STOP_SIGNALS, tie_to_runner  # noqa: E402  (runs end with the tuner that started them)
from benchmark.suite import PUBLISHED  # noqa: E402  (upstream CleanRL's published returns)

# A random policy's mean return (100 episodes; HalfCheetah 10), measured with gymnasium 1.x's action_space.sample():
# the low end of the reference normalisation. The high end is PUBLISHED's final return of the script.
RANDOM_RETURN = {"CartPole-v1": 23.68, "Acrobot-v1": -497.08, "MountainCar-v0": -200.0, "HalfCheetah-v5": -233.68,
                 "Hopper-v5": 16.67, "Walker2d-v5": 1.77}
TRIAL_STATES_DONE = ("COMPLETE", "PRUNED")  # the trials --trials counts


# Optuna calls its heartbeat and the retry of stale trials "experimental"
warnings.filterwarnings("ignore", message=".*(experimental|ExperimentalWarning)")


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def say(message: str) -> None:
    print(f"tuner: {message}", file=sys.stderr, flush=True)


def reference_scores(script: str, env_id: str) -> Optional[tuple[float, float]]:
    """(low, high) of the reference normalisation of `script` on `env_id`, or None where the benchmark knows none."""
    published = PUBLISHED.get(Path(script).stem, {}).get(env_id)
    if published is None or env_id not in RANDOM_RETURN:
        return None
    return RANDOM_RETURN[env_id], published[1]


# ---------------------------------------------------------------------------------------------------------------
# The script's flags, as its own parser declares them
PROBE = r"""
import dataclasses, importlib.util, json, os, sys, typing
path = sys.argv[1]
sys.path.insert(0, os.path.dirname(path))
sys.argv = [path]
spec = importlib.util.spec_from_file_location("tuned_script", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)  # the scripts train only under __main__
import flags
hints = typing.get_type_hints(module.Args, include_extras=True)
ranges = flags.flag_ranges(module.Args)
described = {}
for f in dataclasses.fields(module.Args):
    default = f.default if f.default is not dataclasses.MISSING else None
    plain = isinstance(default, (bool, int, float, str, type(None)))
    described[f.name] = {"type": flags.type_name(hints[f.name]), "range": ranges.get(f.name),
                         "default": default if plain else str(default)}
print(json.dumps(described))
"""


@functools.lru_cache(maxsize=None)
def script_flags(script: str, python: str = sys.executable) -> dict[str, dict]:
    """{flag name (underscores): {"type", "range", "default"}} of the script, from a parse of its Args in a subprocess
    (the tuner itself never imports a script)."""
    proc = subprocess.run([python, "-c", PROBE, str(Path(script).resolve())], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if proc.returncode != 0:
        fail(f"cannot read the flags of {script}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def in_range(value: float, interval: str) -> bool:
    low, high = (float(end) for end in interval[1:-1].split(","))
    above = low <= value if interval[0] == "[" else low < value
    return above and (value <= high if interval[-1] == "]" else value < high)


def flag_key(name: str) -> str:
    """A flag's name as the script's Args has it: `--learning-rate` and `learning_rate` are `learning_rate`."""
    return name.lstrip("-").replace("-", "_")


def as_flags(params: dict) -> list[str]:
    """The command-line words of a trial's parameters: --name value, and --name / --no-name for booleans."""
    words = []
    for name, value in params.items():
        flag = flag_key(name).replace("_", "-")
        if isinstance(value, bool):
            words.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            words += [f"--{flag}", str(value)]
    return words


def flag_names(words: list[str]) -> list[str]:
    return [flag_key(w.split("=", 1)[0]).removeprefix("no_") for w in words if w.startswith("--")]


# ---------------------------------------------------------------------------------------------------------------
# The search space of the command line: NAME=KIND:... (float:LOW:HIGH, log:LOW:HIGH, int:LOW:HIGH, intlog:LOW:HIGH,
# choice:A,B,C); choices are read as numbers or true/false where they look like them
def parse_value(text: str):
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_param(spec: str) -> tuple[str, str, tuple]:
    name, eq, rest = spec.partition("=")
    kind, _, values = rest.partition(":")
    if not eq or not name or kind not in ("float", "log", "int", "intlog", "choice"):
        fail(f"--params {spec!r} is not NAME=KIND:...; KIND is float:LOW:HIGH, log:LOW:HIGH, int:LOW:HIGH, "
             "intlog:LOW:HIGH or choice:A,B,...")
    if kind == "choice":
        choices = tuple(parse_value(v) for v in values.split(","))
        if len(choices) < 2 or len(set(map(repr, choices))) != len(choices):
            fail(f"--params {spec!r}: give two or more different choices")
        return name, kind, choices
    try:
        low, high = (int(v) if kind.startswith("int") else float(v) for v in values.split(":"))
    except ValueError:
        fail(f"--params {spec!r}: {kind} takes LOW:HIGH, two {'integers' if kind.startswith('int') else 'numbers'}")
    if not low < high or (kind in ("log", "intlog") and low <= 0):
        fail(f"--params {spec!r}: LOW must be below HIGH" + (" and above 0 on a log scale" if "log" in kind else ""))
    return name, kind, (low, high)


def params_from_specs(specs: list[str]) -> Callable:
    space = [parse_param(spec) for spec in specs]
    if len({flag_key(n) for n, _, _ in space}) != len(space):
        fail("--params names a flag twice")

    def params_fn(trial) -> dict:
        params = {}
        for name, kind, values in space:
            key = flag_key(name).replace("_", "-")
            if kind == "choice":
                params[key] = trial.suggest_categorical(key, list(values))
            elif kind in ("int", "intlog"):
                params[key] = trial.suggest_int(key, values[0], values[1], log=kind == "intlog")
            else:
                params[key] = trial.suggest_float(key, values[0], values[1], log=kind == "log")
        return params

    return params_fn


# ---------------------------------------------------------------------------------------------------------------
class TrialRunFailed(Exception):
    """A run of a trial ended with an exit status other than 0 that the tuner did not ask for."""


class Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Tuner:
    """An Optuna study over one script's flags; its trials are runs of the script (see the module docstring).

    target_scores: {env_id: [low, high] or None}, as upstream CleanRL's tuner takes it; its keys are the env ids when
    env_ids is not given. params_fn(trial) returns {flag: value}, drawn with trial.suggest_*."""

    script: str
    params_fn: Callable
    env_ids: Optional[list[str]] = None
    target_scores: Optional[dict] = None
    metric: str = "charts/episodic_return"
    direction: str = "maximize"
    aggregation_type: str = "average"
    metric_last_n_average_window: int = 50
    seeds: tuple[int, ...] = (1,)
    flags: tuple[str, ...] = ()
    sampler: object = None
    pruner: object = None
    storage: Optional[str] = None
    study_name: Optional[str] = None
    out: str = "benchmark/results/tuning"
    enqueue_defaults: bool = True
    report_interval: float = 5.0
    reports_per_run: int = 10
    checkpoint_frequency: int = 0
    heartbeat_interval: int = 30
    grace_period: int = 90
    max_retry: int = 1
    popen: Callable = subprocess.Popen
    python: str = sys.executable
    quiet: bool = False

    def __post_init__(self):
        self.script = str(self.script)
        if not Path(self.script).is_file() or not self.script.endswith(".py"):
            fail(f"--script {self.script}: no such script (give a path such as cleanrl/ppo.py)")
        if self.env_ids is None:
            if not self.target_scores:
                fail("give the env ids (--env-ids), or target scores whose keys are env ids")
            self.env_ids = list(self.target_scores)
        self.env_ids, self.seeds, self.flags = list(self.env_ids), tuple(self.seeds), tuple(self.flags)
        self.target_scores = dict(self.target_scores or {})
        if not self.env_ids or not self.seeds or len(set(self.env_ids)) != len(self.env_ids) or \
                len(set(self.seeds)) != len(self.seeds):
            fail("give one or more env ids and seeds, none twice")
        if self.direction not in ("maximize", "minimize"):
            fail(f"direction must be maximize or minimize, got {self.direction!r}")
        aggregations = {"average": np.mean, "median": np.median, "max": np.max, "min": np.min}
        if self.aggregation_type not in aggregations:
            fail(f"aggregation must be one of {', '.join(aggregations)}, got {self.aggregation_type!r}")
        self.aggregate = aggregations[self.aggregation_type]
        if self.metric_last_n_average_window < 1:
            fail("the metric window must be at least 1 episode")
        self.study_name = self.study_name or Path(self.script).stem
        self.root = Path(self.out).resolve() / self.study_name
        if self.storage is None:
            self.storage = f"sqlite:///{self.root / 'study.db'}"
        self.bounds = self.normalisation()

    # -- checks made before any trial ----------------------------------------------------------------------------
    def normalisation(self) -> dict[str, Optional[tuple[float, float]]]:
        unknown = sorted(set(self.target_scores) - set(self.env_ids))
        if unknown:
            fail(f"target scores for {', '.join(unknown)}, which is not among the env ids {', '.join(self.env_ids)}")
        bounds = {}
        for env_id in self.env_ids:
            given = self.target_scores.get(env_id)
            if given is not None:
                low, high = (float(v) for v in given)
            elif len(self.env_ids) == 1:
                bounds[env_id] = None  # one env: its raw score
                continue
            elif reference_scores(self.script, env_id) is not None:
                low, high = reference_scores(self.script, env_id)
            else:
                fail(f"a study over several env ids normalises each; give target scores for {env_id} "
                     f"(--target-scores {env_id}=LOW:HIGH): the benchmark has no reference for it")
            if not high > low:
                fail(f"the scores {env_id}={low:g}:{high:g} do not normalise (HIGH must be above LOW); give others "
                     f"with --target-scores")
            bounds[env_id] = (low, high)
        return bounds

    def search_space(self) -> dict:
        """The distributions params_fn draws from, by a real draw on a throwaway in-memory study."""
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            trial = optuna.create_study(direction=self.direction).ask()
        params = self.params_fn(trial)
        if not isinstance(params, dict) or not params:
            fail("params_fn must return a dict of one or more {flag: value}")
        missing = set(map(flag_key, params)) - set(map(flag_key, trial.distributions))
        if missing:
            fail(f"params_fn returns {', '.join(sorted(missing))} without a trial.suggest_* of the same name")
        return trial.distributions

    def check(self) -> dict:
        """Everything the trials need, before the first: the script's flags, the search space against their names and
        declared ranges, the fixed flags. Returns the script's flags."""
        declared = script_flags(self.script, self.python)
        if "total_timesteps" not in declared:
            fail(f"{self.script} has no --total-timesteps; the tuner reports each run's score at fractions of it")
        self.run_steps = total_steps(list(self.flags), declared["total_timesteps"]["default"])
        if self.reports_per_run < 1 or self.reports_per_run > self.run_steps:
            fail(f"reports per run must be in [1, {self.run_steps}] (the steps of a run), got {self.reports_per_run}")
        for name in ("env_id", "seed"):
            if name not in declared:
                fail(f"{self.script} has no --{name.replace('_', '-')}; the tuner sets it for every run")
        tuner_set = {"env_id", "seed"}
        if self.checkpoint_frequency:
            tuner_set |= {"save_model", "checkpoint_frequency", "resume"}
        for name in flag_names(list(self.flags)):
            if name in tuner_set:
                fail(f"--flags sets --{name.replace('_', '-')}, which the tuner sets for each run")
            if name not in declared:
                fail(f"--flags names --{name.replace('_', '-')}, which {self.script} does not have (see its --help)")
        for name, dist in self.search_space().items():
            key = flag_key(name)
            flag = f"--{key.replace('_', '-')}"
            if key not in declared:
                near = [f"--{k.replace('_', '-')}" for k in declared if key in k or k in key]
                fail(f"{flag} is not a flag of {self.script}" + (f" (did you mean {', '.join(near)}?)" if near else
                                                                 " (see its --help)"))
            if key in tuner_set or key in flag_names(list(self.flags)):
                fail(f"{flag} is tuned and also set by --flags or by the tuner; set it in one place")
            kind, interval = declared[key]["type"], declared[key]["range"]
            values = list(getattr(dist, "choices", ())) or [dist.low, dist.high]
            for value in values:
                if kind == "bool" and not isinstance(value, bool):
                    fail(f"{flag} is a boolean flag; its choices must be true and false, got {value!r}")
                if "int" in kind.split(" or ") and "float" not in kind and isinstance(value, float):
                    fail(f"{flag} takes an integer; tune it with int:LOW:HIGH (suggest_int), got {value!r}")
                if interval and isinstance(value, (int, float)) and not isinstance(value, bool) and \
                        not in_range(value, interval):
                    fail(f"{flag} is tuned over {values[0]!r}..{values[-1]!r}, outside the flag's range {interval}")
        return declared

    def open_study(self, declared: dict):
        """The study, created or continued; a study of another direction or another command fails."""
        import optuna
        import sqlalchemy.exc
        from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

        if self.storage.startswith("sqlite:///"):
            Path(self.storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = {"connect_args": {"connect_timeout": 10}} if self.storage.startswith("postgresql") else {}
        for attempt in range(3):
            try:
                retry = RetryHeartbeatStaleTrialCallback(max_retry=self.max_retry)
                storage = RDBStorage(self.storage, engine_kwargs=engine, heartbeat_interval=self.heartbeat_interval,
                                     grace_period=self.grace_period, heartbeat_stale_trial_callback=retry)
                break
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
                # workers started together on an empty database race to create Optuna's tables: the loser tries again
                if attempt == 2:
                    raise
                time.sleep(1 + attempt)
            except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as e:
                reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
                fail(f"cannot open the store {redact(self.storage)}: {reason}")
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # the tuner says what happens to each trial itself
        command = {"script": portable_command([str(Path(self.script).resolve())])[0], "env_ids": self.env_ids,
                   "seeds": list(self.seeds), "flags": list(self.flags), "metric": self.metric,
                   "window": self.metric_last_n_average_window, "aggregation": self.aggregation_type,
                   "bounds": {k: list(v) if v else None for k, v in self.bounds.items()}}
        names = {s.study_name: s for s in optuna.get_all_study_summaries(storage)}
        if self.study_name in names:
            existing = names[self.study_name]
            if existing.direction.name.lower() != self.direction:
                fail(f"the study {self.study_name} in {redact(self.storage)} is one to "
                     f"{existing.direction.name.lower()}, not to {self.direction}; give another --study-name")
            old = existing.user_attrs.get("command")
            if old is not None and old != command:
                diff = ", ".join(k for k in command if old.get(k) != command[k])
                fail(f"the study {self.study_name} in {redact(self.storage)} tunes another command (its {diff} "
                     "differ); give another --study-name")
        study = optuna.create_study(study_name=self.study_name, storage=storage, direction=self.direction,
                                    sampler=self.sampler, pruner=self.pruner, load_if_exists=True)
        if study.trials:
            # a continued study: a seeded sampler would draw its first trials again, which this worker (or the one
            # stopped before it) has already run
            study.sampler.reseed_rng()
        if "command" not in study.user_attrs:
            study.set_user_attr("command", command)
            study.set_user_attr("defaults", {k: v["default"] for k, v in declared.items()})
            if self.enqueue_defaults:  # trial 0: the script's own defaults, the baseline every study reports
                # (a flag whose default is None, "off", has no value in the space: that one is drawn)
                defaults = {name: declared[flag_key(name)]["default"] for name in self.search_space()
                            if declared[flag_key(name)]["default"] is not None}
                study.enqueue_trial(defaults, user_attrs={"defaults": True}, skip_if_exists=True)
        return study

    # -- one trial ---------------------------------------------------------------------------------------------
    def normalise(self, env_id: str, score: float) -> float:
        bounds = self.bounds[env_id]
        return score if bounds is None else (score - bounds[0]) / (bounds[1] - bounds[0])

    def run_scores(self, workdir: Path, upto: list[int]) -> tuple[list[Optional[float]], int]:
        """The run's score as it stood at each step of `upto` (the mean of the last window of the metric logged at
        or before it; None before its first value) and the last step the metric was logged at, from the event files
        below `workdir`."""
        dirs = sorted({p.parent for p in workdir.glob("runs/*/events.out.tfevents.*")})
        values = read_event_scalars(dirs[-1]).get(self.metric, []) if dirs else []
        steps = np.array([s for s, _ in values])
        scores = []
        for step in upto:
            seen = [v for _, v in values[: int(np.searchsorted(steps, step, side="right"))]]
            scores.append(float(np.mean(seen[-self.metric_last_n_average_window:])) if seen else None)
        return scores, int(steps[-1]) if len(steps) else 0

    def run_score(self, workdir: Path) -> tuple[Optional[float], int]:
        """(the run's final score or None, the last step the metric was logged at)."""
        scores, last = self.run_scores(workdir, [2 ** 62])
        return scores[0], last

    def objective(self, trial, stop: list) -> float:
        import optuna
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        params = self.params_fn(trial)
        frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
        first = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
        # a repeat of a trial whose worker died or was stopped runs in the directories of the trial it repeats (the
        # first of a chain of repeats): with --checkpoint-frequency its runs continue from their checkpoints there
        history = RetryHeartbeatStaleTrialCallback.retry_history(frozen)
        home = trial.user_attrs.get("home_trial", history[0] if history else trial.number)
        trial.set_user_attr("home_trial", home)
        trial.set_user_attr("flags", as_flags(params))
        trial.set_user_attr("worker", f"{platform.node()}:{os.getpid()}")
        if first is not None:
            trial.set_user_attr("retry_of", first)
        scores, runs, step_base = [], [], 0
        for env_id in self.env_ids:
            for seed in self.seeds:
                workdir = self.root / f"trial{home}" / env_id / f"seed{seed}"
                resume = ("--save-model", "--checkpoint-frequency", str(self.checkpoint_frequency), "--resume",
                          "auto") if self.checkpoint_frequency else ()
                argv = [self.python, str(Path(self.script).resolve()), *self.flags, *as_flags(params), *resume,
                        "--env-id", env_id, "--seed", str(seed)]
                record = {"env_id": env_id, "seed": seed, "workdir": str(workdir)}
                code, pruned = self.run(trial, argv, workdir, scores, step_base, stop, record)
                score, last_step = self.run_score(workdir)
                record.update(exit_code=code, score=score, last_step=last_step, pruned=pruned)
                if score is not None:
                    self.keep(trial.number, env_id, seed, argv, workdir, record)
                runs.append(record)
                trial.set_user_attr("runs", runs)
                if stop:
                    raise Stopped(stop[0])
                if pruned:
                    trial.set_user_attr("pruned_by", "SIGTERM")
                    raise optuna.TrialPruned(f"pruned at step {step_base + last_step}")
                if code != 0:
                    raise TrialRunFailed(f"{env_id} seed {seed} exited {code}; log {workdir / 'log.txt'}")
                if score is None:
                    raise TrialRunFailed(f"{env_id} seed {seed} logged no {self.metric}; log {workdir / 'log.txt'}")
                scores.append(self.normalise(env_id, score))
                step_base += self.run_steps
        return float(self.aggregate(scores))

    def run(self, trial, argv, workdir: Path, scores: list, step_base: int, stop: list, record: dict):
        """Run one (env id, seed) of the trial, reporting its score so far; SIGTERM it when the trial is pruned.
        (exit status, last step reported, pruned).

        The trial reports at fixed steps, --reports-per-run of each run's steps (runs counted one after the other),
        whatever the moment the tuner reads the events: the pruner compares trials at the same steps."""
        if workdir.exists() and not (self.checkpoint_frequency and list(workdir.glob("runs/*/checkpoint.pt"))):
            # an attempt that left no checkpoint to continue from: set aside, and the run starts again from zero
            stale = self.root / ".incomplete" / f"{workdir.relative_to(self.root)}-{int(time.time())}"
            stale.parent.mkdir(parents=True, exist_ok=True)
            workdir.rename(stale)
        workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        grid = [round(self.run_steps * (k + 1) / self.reports_per_run) for k in range(self.reports_per_run)]
        started, reported, pruned = time.time(), 0, False

        def report(running: bool) -> bool:
            """Report the grid steps the run has passed; whether the trial is to be pruned."""
            nonlocal reported
            due = grid[reported:]
            if not due:
                return False
            now, last = self.run_scores(workdir, due)
            for step, score in zip(due, now):
                if running and step > last:
                    break  # not passed yet: the run may still log episodes up to it
                reported += 1
                if score is None:
                    continue
                value = float(self.aggregate(scores + [self.normalise(record["env_id"], score)]))
                trial.report(value, step_base + step)
                self.show(f"trial {trial.number} {record['env_id']} seed {record['seed']}: step {step}, "
                          f"score so far {value:.4g}", transient=True)
            return running and trial.should_prune()

        with open(workdir / "log.txt", "a") as log:  # a continued run's log goes on
            log.write(f"$ cd {workdir} && {shlex.join(argv)}\n")
            log.flush()
            kwargs = {"preexec_fn": tie_to_runner()} if self.popen is subprocess.Popen else {}
            proc = self.popen(argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, **kwargs)
            try:
                while proc.poll() is None:
                    deadline = time.time() + self.report_interval
                    while time.time() < deadline and proc.poll() is None and not stop:
                        time.sleep(0.05)
                    if stop:
                        proc.terminate()
                        break
                    if proc.poll() is None and report(running=True):
                        proc.terminate()  # SIGTERM: the script stops after its current step, saves, exits 143
                        pruned = True
                        break
                code = proc.wait()
            except BaseException:
                proc.terminate()
                proc.wait()
                raise
        if code == 0:
            report(running=False)  # the steps passed since the last read
        record["seconds"] = round(time.time() - started, 1)
        return code, pruned

    def keep(self, number: int, env_id: str, seed: int, argv: list, workdir: Path, record: dict) -> None:
        """The run's episodes in the kept format, locally and in the study (so `export` works from any machine)."""
        try:
            kept = write_kept(kept_path(self.root / "kept", f"trial{number}", env_id, seed), self.study_name, env_id,
                              seed, argv, workdir, record.get("seconds"))
        except ValueError:
            return
        record["episodes"] = kept["episodes"]
        record["command"] = kept["command"]

    # -- the study ---------------------------------------------------------------------------------------------
    def show(self, line: str, transient: bool = False) -> None:
        if self.quiet:
            return
        if sys.stderr.isatty():
            print(f"\r\033[Ktuner: {line}", end="" if transient else "\n", file=sys.stderr, flush=True)
        elif not transient:
            say(line)

    def progress(self, study) -> str:
        trials = study.get_trials(deepcopy=False)
        count = {s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}
        best = ""
        if count["COMPLETE"]:
            b = study.best_trial
            best = f"; best {b.value:.4g} (trial {b.number})"
        return (f"{count['COMPLETE'] + count['PRUNED']} trials done ({count['COMPLETE']} complete, {count['PRUNED']} "
                f"pruned), {count['FAIL']} failed, {count['RUNNING']} running{best}")

    def tune(self, num_trials: int):
        """Run trials until the study has `num_trials` finished (complete or pruned) ones; the best trial."""
        import optuna
        from optuna.study import MaxTrialsCallback
        from optuna.trial import TrialState

        if num_trials < 1:
            fail("--trials must be at least 1")
        declared = self.check()
        study = self.open_study(declared)
        say(f"study {self.study_name} in {redact(self.storage)}: {self.progress(study)}; runs in {self.root}")
        stop: list[int] = []
        previous = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in STOP_SIGNALS}

        stopped_trials = []

        def objective(trial):
            try:
                if stop:
                    raise Stopped(stop[0])
                return self.objective(trial, stop)
            except Stopped:
                trial.set_user_attr("stopped", True)
                stopped_trials.append(trial)
                raise
            except TrialRunFailed as e:
                trial.set_user_attr("failure", str(e))
                raise

        def after(study, trial):
            if trial.state == TrialState.FAIL and trial.user_attrs.get("stopped"):
                return
            outcome = {"COMPLETE": f"value {trial.value:.4g}", "PRUNED": "pruned by SIGTERM",
                       "FAIL": f"failed ({trial.user_attrs.get('failure')})"}[trial.state.name]
            self.show(f"trial {trial.number} {outcome}; {self.progress(study)}")

        done = (TrialState.COMPLETE, TrialState.PRUNED)
        try:
            if sum(t.state in done for t in study.get_trials(deepcopy=False)) < num_trials:
                study.optimize(objective, callbacks=[MaxTrialsCallback(num_trials, states=done), after],
                               catch=(TrialRunFailed,))
        except Stopped as stopped:
            for trial in stopped_trials:  # the stopped trial runs first next time, with the same flags
                if trial.params:
                    attrs = {"retry_of": trial.number, "home_trial": trial.user_attrs.get("home_trial", trial.number),
                             **({"defaults": True} if trial.user_attrs.get("defaults") else {})}
                    study.enqueue_trial(trial.params, user_attrs=attrs)
            say(f"stopped by {stopped}; {self.progress(study)}; the same command continues the study")
            raise SystemExit(128 + stopped.signum)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        say(f"{self.progress(study)}")
        if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
            fail("no trial completed; see the runs' log.txt below " + str(self.root))
        print_best(study)
        return study.best_trial


def storage_from_secret(secret_id: str) -> str:
    """The store's URL kept in AWS Secrets Manager (so that workers, an AWS Batch array job's children included, share
    it without a password on their command line): the secret's text is the URL itself, or a JSON object with a "url",
    or the JSON of an RDS-managed secret (engine, host, port, username, password, dbname). boto3 takes the region and
    credentials from the environment as usual, and AWS_ENDPOINT_URL where set."""
    try:
        import boto3
        import botocore.exceptions
    except ImportError:
        fail("--storage-secret reads AWS Secrets Manager with boto3, which is not installed: pip install -e '.[cloud]'")
    try:
        text = boto3.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"]
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, KeyError) as e:
        fail(f"cannot read the secret {secret_id} from AWS Secrets Manager: {e}")
    if not text.lstrip().startswith("{"):
        return text.strip()
    try:
        fields = json.loads(text)
        if "url" in fields:
            return fields["url"]
        engine = {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql+pymysql"}[fields["engine"]]
        user, password = (urllib.parse.quote(fields[k], safe="") for k in ("username", "password"))
        where = f"{fields['host']}:{fields.get('port', 5432)}/{fields.get('dbname', 'postgres')}"
        return f"{engine}://{user}:{password}@{where}"
    except (ValueError, KeyError, TypeError) as e:
        fail(f"the secret {secret_id} is neither a store URL nor JSON with a \"url\" or RDS's fields (missing {e})")


def redact(url: str) -> str:
    """A store's URL without its password, for messages."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        user, host = rest.rsplit("@", 1)
        return f"{scheme}://{user.split(':')[0]}:***@{host}"
    return url


# ---------------------------------------------------------------------------------------------------------------
# What a study gives: the best flags as a command line, kept files of the defaults and the best trial
def best_commands(study) -> list[str]:
    command = study.user_attrs["command"]
    flags = [*command["flags"], *study.best_trial.user_attrs["flags"]]
    return [shlex.join(["python", command["script"], *flags, "--env-id", env_id]) for env_id in command["env_ids"]]


def defaults_trial(study):
    done = [t for t in study.trials if t.user_attrs.get("defaults") and t.state.name == "COMPLETE"]
    return done[0] if done else None


def heldout_commands(study, seeds: list[int], keep: str) -> list[str]:
    """benchmark/run.py commands that run the script's defaults and the best flags on other seeds than the study's,
    kept in `keep` for benchmark/report.py, and the report.py command that draws one against the other."""
    command = study.user_attrs["command"]
    overlap = sorted(set(seeds) & set(command["seeds"]))
    if overlap:
        fail(f"--heldout-seeds {' '.join(map(str, overlap))} tuned the study; held-out seeds must be others")
    lines, folders = [], []
    for label, tuned in (("defaults", []), ("best", study.best_trial.user_attrs["flags"])):
        name = f"{study.study_name}-heldout-{label}"
        folders.append(f"{keep}/{name}")
        lines.append(shlex.join(["python", "benchmark/run.py", "--keep", keep, "--name", name, "--env-ids",
                                 *command["env_ids"], "--seeds", *map(str, seeds), "--", "python", command["script"],
                                 *command["flags"], *tuned]))
    lines.append(shlex.join(["python", "benchmark/report.py", "--results", *folders, "--labels", "defaults", "best",
                             "--out", f"benchmark/report/{study.study_name}-heldout"]))
    return lines


def print_best(study, heldout_seeds: Optional[list[int]] = None, keep: str = "benchmark/tuning") -> None:
    best = study.best_trial
    print(f"best trial {best.number}: value {best.value:.6g}, {json.dumps(best.params)}")
    for line in best_commands(study):
        print(line)
    defaults = defaults_trial(study)
    if defaults is not None:
        print(f"the script's defaults (trial {defaults.number}): value {defaults.value:.6g}")
    if heldout_seeds:
        print("# the defaults against the best flags on held-out seeds:")
        for line in heldout_commands(study, heldout_seeds, keep):
            print(line)


def export(study, keep: Path) -> list[Path]:
    """The runs of the defaults trial and of the best trial, on the study's seeds, as kept files:
    keep/<study>-tuning-defaults/ and keep/<study>-tuning-best/ (benchmark/report.py --results with both folders draws
    one against the other), and keep/<study>-trials.csv: every trial's state, value and flags."""
    written = []
    chosen = {"best": study.best_trial}
    if defaults_trial(study) is not None:
        chosen["defaults"] = defaults_trial(study)
    table = keep / f"{study.study_name}-trials.csv"
    table.parent.mkdir(parents=True, exist_ok=True)
    with open(table, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["trial", "state", "value", "seconds", "worker", "flags"])
        for t in study.trials:
            seconds = sum(r.get("seconds") or 0 for r in t.user_attrs.get("runs", []))
            out.writerow([t.number, t.state.name, "" if t.value is None else f"{t.value:.6g}", f"{seconds:.1f}",
                          t.user_attrs.get("worker", ""), shlex.join(t.user_attrs.get("flags", []))])
    written.append(table)
    for label, trial in chosen.items():
        name = f"{study.study_name}-tuning-{label}"
        for run in trial.user_attrs.get("runs", []):
            if "episodes" not in run:
                continue
            path = kept_path(keep, name, run["env_id"], run["seed"])
            record = {"name": name, "env_id": run["env_id"], "seed": run["seed"], "command": run["command"],
                      "last_step": run["last_step"], "seconds": run.get("seconds"), "trial": trial.number,
                      "study": study.study_name, "value": trial.value, "episodes": run["episodes"]}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record) + "\n")
            written.append(path)
    return written


# ---------------------------------------------------------------------------------------------------------------
# The command line
@dataclass
class Tune:
    """Tune a script's flags: trials run until the study has --trials finished ones (see docs/tuning.md)."""

    script: str
    """the script to tune, e.g. cleanrl/ppo.py"""
    params: list[str]
    """the search space, one flag each: NAME=float:LOW:HIGH, NAME=log:LOW:HIGH (log scale), NAME=int:LOW:HIGH,
    NAME=intlog:LOW:HIGH or NAME=choice:A,B,..."""
    env_ids: list[str] = field(default_factory=lambda: ["CartPole-v1"])
    """the env ids every trial runs on"""
    seeds: list[int] = field(default_factory=lambda: [1])
    """the seeds every trial runs with, for every env id"""
    trials: int = 20
    """the number of finished (complete or pruned) trials the study stops at, over all its workers"""
    flags: str = ""
    """flags given to every run, as one string (e.g. "--total-timesteps 50000")"""
    metric: str = "charts/episodic_return"
    """the TensorBoard scalar a run is scored by"""
    direction: Literal["maximize", "minimize"] = "maximize"
    """whether a higher or a lower score is better"""
    metric_last_n_average_window: int = 50
    """a run's score is the mean of this many last values of the metric"""
    aggregation: Literal["average", "median", "max", "min"] = "average"
    """how a trial's runs' (normalised) scores become the trial's value"""
    target_scores: list[str] = field(default_factory=list)
    """ENV=LOW:HIGH: normalise ENV's scores to (score - LOW) / (HIGH - LOW); default: the benchmark's reference"""
    study_name: Optional[str] = None
    """the study's name; None: the script's name (ppo)"""
    storage: Optional[str] = None
    """an Optuna RDB URL (postgresql://user:password@host:5432/db for many workers); None: SQLite in --out"""
    storage_secret: Optional[str] = None
    """instead of --storage: the name or ARN of an AWS Secrets Manager secret holding the URL (or RDS's JSON)"""
    out: str = "benchmark/results/tuning"
    """the folder of the runs: <out>/<study>/trial<n>/<env_id>/seed<k>/"""
    sampler: Literal["tpe", "random"] = "tpe"
    """the Optuna sampler"""
    sampler_seed: Optional[int] = None
    """the sampler's seed: a new study on one worker draws the same trials again (a continued study, or workers
    started together, need other draws: the seed then applies to the first worker on a new study only)"""
    pruner: Literal["median", "none"] = "median"
    """the Optuna pruner: median stops a run scoring below the median of earlier trials at the same step"""
    pruner_startup_trials: int = 5
    """the median pruner prunes nothing before this many trials have finished"""
    pruner_warmup_fraction: float = 0.2
    """nor in the first this fraction of a trial's steps"""
    report_interval: float = 5.0
    """seconds between two reads of a running run's metric"""
    reports_per_run: int = 10
    """a trial reports its score at this many evenly spaced steps of each run (the pruner's checks)"""
    heartbeat_interval: int = 30
    """seconds between two heartbeats of a running trial to the store"""
    grace_period: int = 90
    """a running trial whose last heartbeat is older than this is marked failed (its worker died) and retried"""
    max_retry: int = 1
    """how many times a trial whose worker died is tried again"""
    enqueue_defaults: bool = True
    """if toggled, the study's first trial runs the script's defaults of the tuned flags (the baseline)"""
    checkpoint_frequency: int = 0
    """> 0: runs checkpoint every this many updates (--save-model --checkpoint-frequency N --resume auto), and a
    trial repeated after its worker died or was stopped continues its runs from their checkpoints (same --out)"""


@dataclass
class Best:
    """Print the best trial's value and flags as a ready command line."""

    study_name: str
    storage: Optional[str] = None
    """the store; None: SQLite in --out/<study>/study.db"""
    out: str = "benchmark/results/tuning"
    heldout_seeds: list[int] = field(default_factory=lambda: [101, 102, 103])
    """also print the benchmark/run.py commands that run the defaults and the best flags on these seeds (none: not)"""
    keep: str = "benchmark/tuning"
    """the folder those commands keep their runs in"""


@dataclass
class Export:
    """Write the defaults trial's and the best trial's runs as kept files, for benchmark/report.py."""

    study_name: str
    keep: str = "benchmark/tuning"
    """the folder of the kept files: <keep>/<study>-best/<env_id>/seed<k>.json and <study>-defaults/..."""
    storage: Optional[str] = None
    out: str = "benchmark/results/tuning"


def total_steps(flags: list[str], default) -> Optional[int]:
    value = None
    for i, word in enumerate(flags):
        if word.split("=")[0] in ("--total-timesteps", "--total_timesteps"):
            value = word.split("=", 1)[1] if "=" in word else flags[i + 1]
    return int(float(value)) if value is not None else default


def tuner_from(args: Tune) -> Tuner:
    import optuna

    targets = {}
    for item in args.target_scores:
        env_id, eq, span = item.partition("=")
        try:
            low, high = (float(v) for v in span.split(":"))
        except ValueError:
            fail(f"--target-scores {item!r} is not ENV=LOW:HIGH")
        targets[env_id] = [low, high]
    flags = shlex.split(args.flags)
    if args.storage is not None and args.storage_secret is not None:
        fail("give --storage or --storage-secret, not both")
    storage = storage_from_secret(args.storage_secret) if args.storage_secret else args.storage
    if args.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=args.sampler_seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=args.sampler_seed)
    tuner = Tuner(script=args.script, params_fn=params_from_specs(args.params), env_ids=args.env_ids,
                  target_scores=targets, metric=args.metric, direction=args.direction,
                  aggregation_type=args.aggregation, metric_last_n_average_window=args.metric_last_n_average_window,
                  seeds=tuple(args.seeds), flags=tuple(flags), sampler=sampler, storage=storage,
                  study_name=args.study_name, out=args.out, enqueue_defaults=args.enqueue_defaults,
                  report_interval=args.report_interval, reports_per_run=args.reports_per_run,
                  checkpoint_frequency=args.checkpoint_frequency,
                  heartbeat_interval=args.heartbeat_interval,
                  grace_period=args.grace_period, max_retry=args.max_retry)
    if args.pruner == "median":
        if not 0 <= args.pruner_warmup_fraction < 1:
            fail("--pruner-warmup-fraction must be in [0, 1)")
        steps = total_steps(flags, None) or script_flags(args.script, sys.executable)["total_timesteps"]["default"]
        # one run's steps times the runs of a trial: the steps the trial reports at
        warmup = int(args.pruner_warmup_fraction * (steps or 0) * len(args.env_ids) * len(args.seeds))
        tuner.pruner = optuna.pruners.MedianPruner(n_startup_trials=args.pruner_startup_trials, n_warmup_steps=warmup)
    else:
        tuner.pruner = optuna.pruners.NopPruner()
    return tuner


def load(study_name: str, storage: Optional[str], out: str):
    import optuna
    import sqlalchemy.exc

    url = storage or f"sqlite:///{Path(out).resolve() / study_name / 'study.db'}"
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        fail(f"no study store at {url.removeprefix('sqlite:///')}; give --storage or --out")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=url)
    except KeyError:
        fail(f"no study {study_name} in {redact(url)}")
    except sqlalchemy.exc.SQLAlchemyError as e:
        fail(f"cannot open the store {redact(url)}: {str(getattr(e, 'orig', None) or e).strip().splitlines()[0]}")
    if not any(t.state.name == "COMPLETE" for t in study.trials):
        fail(f"the study {study_name} has no complete trial yet")
    return study


# the command line: `tune`, `best` or `export`, then that command's flags
Args = Union[Tune, Best, Export]


def main(argv: list[str]) -> int:
    args = tyro.cli(Args, args=argv)
    if isinstance(args, Tune):
        tuner_from(args).tune(args.trials)
        return 0
    study = load(args.study_name, args.storage, args.out)
    if isinstance(args, Best):
        print_best(study, args.heldout_seeds, args.keep)
    else:
        for path in export(study, Path(args.keep)):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
