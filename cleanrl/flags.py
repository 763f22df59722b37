# docs: docs/contributing.md (the layout of cleanrl/)
"""The flags every run takes (RunArgs) and how a script's own flags join them (with_run_flags), the ranges flags
declare in their types, and the checks made on a command line before anything is written.

A numeric flag carries its range in its type, beside the flag in the file that owns it: Annotated[int,
Range("[1, inf)")] or one of the names below (PositiveInt, UnitFloat, ...). check_flag_ranges checks every flag
against it, and every float flag must also be finite (tyro reads "nan" and "inf")."""

import ast
import dataclasses
import inspect
import math
import os
import sys
import textwrap
import typing
import unicodedata
from dataclasses import asdict, dataclass
from typing import Annotated, NamedTuple, Optional

import tyro

from messages import fail, warn


class Range(NamedTuple):
    """The values a numeric flag may take: "[" and "]" include an end, "(" and ")" exclude it; ends may be inf."""
    interval: str


# the ranges most flags take
PositiveFloat = Annotated[float, Range("(0, inf)")]
NonNegativeFloat = Annotated[float, Range("[0, inf)")]
UnitFloat = Annotated[float, Range("[0, 1]")]  # probabilities, discounts, fractions
AnyFloat = Annotated[float, Range("(-inf, inf)")]  # any finite number
PositiveInt = Annotated[int, Range("[1, inf)")]  # sizes, counts of steps or epochs
NonNegativeInt = Annotated[int, Range("[0, inf)")]


@dataclass
class RunArgs:
    exp_name: str = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    """the name of this experiment; the run is logged to runs/{env_id}__{exp_name}__{seed}__{unix time}"""
    seed: Annotated[int, Range("[0, 2147483647]")] = 1  # numpy's global seed must be below 2**32; env seeds count up
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, use CUDA when it is available"""
    track: bool = False
    """if toggled, also log to Weights and Biases (set WANDB_MODE=offline to stay offline)"""
    wandb_project_name: str = "cleanRL"
    """the W&B project name"""
    wandb_entity: Optional[str] = None
    """the W&B entity (team); None uses your default entity"""
    capture_video: bool = False
    """if toggled, record videos of the first environment's episodes to videos/{run_name}"""
    save_model: bool = False
    """if toggled, save the model to runs/{run_name}/{exp_name}.cleanrl_model and evaluate it"""
    eval_episodes: NonNegativeInt = 10
    """number of episodes of the evaluation that follows --save-model"""
    eval_max_seconds: PositiveFloat = 1800.0
    """stop an evaluation that takes longer than this many seconds (it then gives no result)"""
    checkpoint_frequency: NonNegativeInt = 0
    """with --save-model, also checkpoint every this many updates (0: only at the end and on SIGINT, SIGTERM, SIGHUP)"""
    max_runtime: NonNegativeFloat = 0.0
    """stop at the first safe point after this many seconds, as on SIGTERM: a checkpoint (with --save-model) and
    exit 143, to go on with --resume. Give a scheduler's hard time limit (AWS Batch's job timeout, which is final)
    less the time a checkpoint and its upload take (0: no limit)"""
    resume: Optional[str] = None
    """continue a run from a checkpoint or run directory; `auto`: the newest run of this env/exp/seed, if any (a
    finished run trains on when --total-timesteps is larger than its own)"""
    init_from: Optional[str] = None
    """start a new run from the weights of a saved model (a .cleanrl_model, or a run directory with one); the
    optimizer, the schedules and the step count start afresh"""
    eval_only: Optional[str] = None
    """only evaluate a saved model (checkpoint, run directory or .cleanrl_model), print mean and std return"""
    progress: bool = True
    """report progress on stderr: a self-rewriting line on a terminal, else a plain line every --progress-interval"""
    progress_interval: PositiveFloat = 30.0
    """seconds between the plain progress lines printed when stderr is not a terminal (a log file, a batch job)"""
    compile: bool = False
    """if toggled, torch.compile the policy step and the update (same math, float rounding aside)"""
    cudagraphs: bool = False
    """if toggled, replay the policy step and the update as CUDA graphs (needs CUDA)"""
    torch_threads: NonNegativeInt = 1
    """torch threads on the CPU; 0: the cores left free by other work, looked at again as the run goes (for
    bit-identical reruns give a number: the count changes float rounding)"""


def with_run_flags(cls):
    """A script's flags (a dataclass) followed by the run flags of RunArgs, as one dataclass: `--help` lists the
    algorithm's flags first. A run flag the script declares again (a default of its own) keeps the script's default
    and its place. A script whose runs are filed under another id than --env-id defines run_env_id(). A flag whose
    docstring spans lines gets it as one paragraph of help (one_line_help)."""
    run_fields = {g.name for g in dataclasses.fields(RunArgs)}
    own = {f.name: f for f in dataclasses.fields(cls) if f.name in run_fields}
    docs = {**field_docstrings(RunArgs), **field_docstrings(cls)}
    fields = {f.name: f for f in (*dataclasses.fields(RunArgs), *dataclasses.fields(cls))}  # the script's win
    written = cls.__doc__ if not (cls.__doc__ or "").startswith(f"{cls.__name__}(") else None  # not dataclass's
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": written,
                 "__annotations__": {name: f.type for name, f in own.items()}}
    namespace.update((name, f.default) for name, f in own.items())
    for name, f in fields.items():
        if "\n" not in docs.get(name, ""):
            continue
        namespace["__annotations__"][name] = Annotated[f.type, tyro.conf.arg(help=one_line_help(docs[name]))]
        namespace[name] = dataclasses.field(default=f.default, default_factory=f.default_factory)
    return dataclass(type(cls.__name__, (RunArgs, cls), namespace))


def field_docstrings(cls) -> dict[str, str]:
    """{field: the string literal under it} in the class's source (what tyro shows as the flag's help)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # no source (a class made at run time): tyro finds no docstrings either
        return {}
    body = tree.body[0].body
    return {a.target.id: b.value.value for a, b in zip(body, body[1:]) if isinstance(a, ast.AnnAssign)
            and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
            and isinstance(b.value.value, str)}


def one_line_help(docstring: str) -> str:
    """A field docstring that spans lines, as one paragraph: tyro 1.0 keeps the break before an indented line, so
    `--help` would show a line cut in the middle of a sentence."""
    return " ".join(docstring.split())


# Flags that leave a run's course unchanged, so a resumed run may give them anew. --compile and --amp change
# speed (and float rounding) only; --cudagraphs is not among them: a resumed optimizer keeps its capturable setting.
ALLOWED_ON_RESUME = ("resume", "checkpoint_frequency", "max_runtime", "progress", "progress_interval", "eval_episodes",
                     "eval_max_seconds", "cuda", "track", "wandb_project_name", "wandb_entity", "compile", "amp",
                     "torch_threads")


def script_name(args_cls) -> str:
    """The file name of the script that defines args_cls (the name its checkpoints carry)."""
    return os.path.basename(sys.modules[args_cls.__module__].__file__)


def check_flags_given_once(argv: list[str]) -> None:
    """A flag given twice (`--seed 1 --seed 2`, or `--track --no-track`) fails: the parser would silently take the
    last one, and a command line that says two things is a mistake (often an edited, rerun command)."""
    seen: dict[str, str] = {}
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--") or len(token) == 2:
            continue
        spelled = token.split("=", 1)[0]
        name = spelled[2:].replace("_", "-")
        name = name[3:] if name.startswith("no-") else name
        if name in seen:
            fail(f"{spelled} is given twice; give each flag once" if seen[name] == spelled else
                 f"{seen[name]} and {spelled} are both given; give one of them")
        seen[name] = spelled


def plain_name_problem(name) -> Optional[str]:
    """Why `name` cannot name a file or directory inside runs/ (a '/', '.', '..', a control character, which would also
    split a one-line message), or None: --exp-name, and a run name a checkpoint brings."""
    if not isinstance(name, str) or not name:
        return "it is empty" if name == "" else f"it is a {type(name).__name__}, not text"
    if "/" in name or name in (".", ".."):
        return "it is a path, not a plain name"
    if any(unicodedata.category(c).startswith("C") for c in name):
        return "it holds a control character"
    return None


def check_run_flags(args) -> None:
    """The run flags that must agree with each other and with the machine, checked before anything is written."""
    name = args.exp_name
    if plain_name_problem(name):
        fail(f"--exp-name {name!r} must be a plain name (no '/', no control character): it names a directory under "
             "runs/ and appears in one-line messages")
    if args.eval_only is not None and args.resume is not None:
        fail("--eval-only evaluates a saved model and --resume continues a run's training; give one of them")
    for other in ("resume", "eval_only"):
        if flag_given("init_from") is not None and flag_given(other) is not None:
            fail(f"--init-from starts a new run from a model's weights and --{other.replace('_', '-')} "
                 f"{'continues a run with its own' if other == 'resume' else 'evaluates a saved model'}; give one "
                 "of them")
    if args.capture_video:
        try:
            import moviepy  # noqa: F401 (gymnasium's video writer imports it only once the first video is saved)
        except ImportError:
            fail("--capture-video writes mp4 files with moviepy, which is not installed: pip install moviepy")


def flag_ranges(args_cls) -> dict[str, str]:
    """{flag: interval} of every flag whose type declares a Range (through Optional[...] too)."""
    ranges = {}
    for name, hint in typing.get_type_hints(args_cls, include_extras=True).items():
        for part in (hint, *typing.get_args(hint)):
            ranges.update((name, m.interval) for m in getattr(part, "__metadata__", ()) if isinstance(m, Range))
    return ranges


def check_flag_ranges(args) -> None:
    """Every flag within the range its type declares, every float flag finite; else fail naming the flag."""
    check_flag_values(type(args), asdict(args))


def check_flag_values(args_cls, values: dict) -> None:
    """check_flag_ranges for flag values by name (a checkpoint's saved flags, before they become args_cls)."""
    ranges = flag_ranges(args_cls)
    for name, value in values.items():
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"{flag} must be a finite number, got {value}")
        if name in ranges:
            interval = ranges[name]
            low, high = (float(end) for end in interval[1:-1].split(","))
            if not ((low <= value if interval[0] == "[" else low < value)
                    and (value <= high if interval[-1] == "]" else value < high)):
                if high < math.inf:
                    fail(f"{flag} must be in {interval}, got {value}")
                fail(f"{flag} must be {'at least' if interval[0] == '[' else 'above'} {low:g}, got {value}")


def whole_iterations(total_timesteps: int, steps_per_iteration: int, unit: str) -> int:
    """--total-timesteps in whole iterations of `steps_per_iteration` steps (`unit` names them: "one batch"). The
    remainder is dropped, with a warning line when that leaves less than 99% of the budget (the defaults drop a
    few hundred steps of millions); a budget below one iteration fails."""
    iterations = total_timesteps // steps_per_iteration
    if iterations == 0:
        fail(f"--total-timesteps {total_timesteps} is less than {unit} ({steps_per_iteration} steps)")
    if iterations * steps_per_iteration < 0.99 * total_timesteps:
        warn(f"--total-timesteps {total_timesteps} is not a multiple of {unit} ({steps_per_iteration} steps): the "
             f"run takes {iterations * steps_per_iteration} steps")
    return iterations


def resumed_args(args_cls, checkpoint: dict):
    """The checkpoint's flags, the given ones on top; only ALLOWED_ON_RESUME may differ (else not the same run). The
    saved flags are checked as typed ones are (saved_args); the merged ones by check_run_flags here and by
    check_flag_ranges in the caller."""
    saved = saved_args(args_cls, checkpoint["args"], checkpoint["loaded_from"])
    args = tyro.cli(args_cls, default=saved)
    changed = [k for k, v in asdict(args).items() if k not in ALLOWED_ON_RESUME and v != getattr(saved, k)
               and not (k == "total_timesteps" and v > getattr(saved, k))]  # a larger budget: the run trains on
    if changed:
        fail("cannot change " + ", ".join(f"--{k.replace('_', '-')} (the checkpoint has {getattr(saved, k)!r})"
                                          for k in changed) + " when resuming")
    check_run_flags(args)
    return args


def saved_args(args_cls, saved: dict, path: str):
    """The flags a checkpoint holds, as args_cls, checked as the command line is: each of this script's flags, of its
    declared type (a Literal's values only), and an env id that imports no module unless the command line names it
    (trust_env_id)."""
    check_saved_flags(args_cls, saved, path)
    try:
        return args_cls(**saved)
    except TypeError as e:
        fail(f"the checkpoint's flags do not fit this script's: {e}")


def check_saved_flags(args_cls, saved: dict, path: str) -> None:
    """Each of the saved flags that args_cls has: its declared type, its range; the env id by trust_env_id."""
    hints = typing.get_type_hints(args_cls, include_extras=True)
    known = {name: value for name, value in saved.items() if name in hints}
    for name, value in known.items():
        if not fits_type(value, hints[name]):
            fail(f"{path} holds --{name.replace('_', '-')} {value!r}, which is not a {type_name(hints[name])}")
    check_flag_values(args_cls, known)
    if "env_id" in known:
        trust_env_id(known["env_id"], path)


def fits_type(value, hint) -> bool:
    """Whether `value` is of the flag type `hint` (bool, int, float, str, None, Literal, Optional, Annotated)."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return fits_type(value, typing.get_args(hint)[0])
    if origin is typing.Union:
        return any(fits_type(value, part) for part in typing.get_args(hint))
    if origin is typing.Literal:
        return any(type(value) is type(choice) and value == choice for choice in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return type(value) in (int, float)
    return type(value) is hint


def type_name(hint) -> str:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return type_name(typing.get_args(hint)[0])
    if origin is typing.Union:
        return " or ".join(type_name(part) for part in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(choice) for choice in typing.get_args(hint))
    return "None" if hint is type(None) else hint.__name__


def flag_given(name: str, argv: Optional[list[str]] = None) -> Optional[str]:
    """The value the command line gives flag `name` (--env-id X or --env-id=X, either spelling), or None."""
    argv = sys.argv[1:] if argv is None else argv
    spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
    for i, token in enumerate(argv):
        if token == "--":
            break
        flag, eq, value = token.partition("=")
        if flag in spellings:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def trust_env_id(env_id: str, path: str) -> None:
    """An env id a file gives ("module:Env-v0" makes gym.make import `module`, which can run any code on sys.path)
    is used only without a module prefix, unless the command line names the same id: a file cannot choose code."""
    if ":" in env_id and flag_given("env_id") != env_id:
        fail(f"{path} names the env id {env_id!r}, which would import the module {env_id.split(':')[0]!r}; an id "
             f"from a file imports nothing unless you give it yourself: add --env-id {env_id}")
