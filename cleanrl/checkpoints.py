# docs: docs/saving-resuming.md
"""Runs on disk: run directories (named, claimed, held by one process at a time), checkpoint and model files (written
atomically with a checksum; read weights-only, after the checksum), the checkpoint --resume continues, the global
random generators, and the environments' state as plain data."""

import contextlib
import errno
import fcntl
import hashlib
import itertools
import json
import math
import os
import pickle  # only for its exception class: nothing here unpickles
import random
import re
import tempfile
import time
import zipfile
import zlib
from collections import deque
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from flags import flag_given, plain_name_problem
from messages import describe_os_error, fail, first_line, say, warn


def run_prefix(args) -> str:
    """Runs are named {env_id}__{exp_name}__{seed}__{unix time}, "/" and ":" made "-": one directory under runs/.
    The env id is --env-id, or what the script's run_env_id() names (PPG files its runs under envpool's id)."""
    env_id = args.run_env_id() if hasattr(args, "run_env_id") else args.env_id
    return f"{re.sub(r'[/:]', '-', env_id)}__{args.exp_name}__{args.seed}__"


def claim_run_directory(prefix: str) -> tuple[str, str]:
    """(name, note): runs/{prefix}{unix time}, created exclusively, so two runs never share one; a run that would get
    the name of one started in the same second gets -2, -3, ... appended, and the note says so."""
    stamp = str(int(time.time()))
    for n in itertools.count(1):
        name = prefix + stamp + ("" if n == 1 else f"-{n}")
        try:
            if not os.path.isdir("runs"):
                os.makedirs("runs", exist_ok=True)
            os.mkdir(os.path.join("runs", name))
            return name, "" if n == 1 else f" (runs/{prefix}{stamp} is another run started in the same second)"
        except FileExistsError:
            if os.path.isdir(os.path.join("runs", name)):
                continue
            fail(f"cannot create the run directory runs/{name}: runs is not a directory")
        except OSError as e:
            fail(f"cannot create the run directory runs/{name}: {e.strerror or e}")


def lock_run_directory(run_dir: str) -> int:
    """Hold the run directory for this process: an exclusive flock on run_dir/.lock, which the kernel drops when the
    process ends, however it ends (kill -9 included), so a stale lock never blocks a resume. A second process (two
    resumes of one run) fails in one line naming the holder's pid. A run directory or a .lock that is a symbolic link
    is refused (a planted link would have the lock file's truncation land on its target), and, once the lock is held,
    the temporaries of writes that a kill cut short are removed. Returns the open descriptor, kept for the run."""
    if os.path.islink(run_dir):
        fail(f"{run_dir} is a symbolic link; a run directory must be a real directory (move the run there)")
    path = os.path.join(run_dir, ".lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            fail(f"{path} is a symbolic link; a run's lock file is never followed (remove the link)")
        fail(f"cannot write in the run directory {run_dir}: {describe_os_error(e)}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip()
        os.close(fd)
        fail(f"{run_dir} is in use by another process (pid {holder or 'unknown'}): a run directory takes one process "
             "at a time")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        with tempfile.TemporaryFile(dir=run_dir):  # the lock file may be older than a permission change
            pass
    except OSError as e:
        os.close(fd)
        fail(f"cannot write in the run directory {run_dir}: {describe_os_error(e)}")
    remove_stale_temporaries(run_dir)
    return fd


# save_checkpoint's temporaries: {file}.tmp.{random}, beside the checkpoint or model they become
TEMPORARY = re.compile(r".+\.(pt|cleanrl_model)\.tmp\..+")


def remove_stale_temporaries(run_dir: str) -> None:
    """Remove the temporaries in run_dir that no write will finish: a kill -9 during a checkpoint write, or a second
    signal during a signal's checkpoint, leaves one behind (gigabytes, with --save-buffer). Called with the lock held,
    so no process of this run is writing one; a link is removed as a link, never followed."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(run_dir):
            if TEMPORARY.fullmatch(entry.name) and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.remove(entry.path)


HELD_DIRECTORIES: dict[str, int] = {}  # the run directories this process holds: real path -> lock descriptor


def hold_run_directory(run_dir: str) -> int:
    """lock_run_directory, once per directory and process: --resume takes the lock before it reads the checkpoint
    (so it never continues from one that another process is about to replace), and start() keeps it."""
    key = os.path.realpath(run_dir)
    if key not in HELD_DIRECTORIES:
        HELD_DIRECTORIES[key] = lock_run_directory(run_dir)
    return HELD_DIRECTORIES[key]


def checkpoint_path_of(path: str) -> str:
    """A checkpoint file, or a run directory's checkpoint.pt; a missing one fails in one line, and so does a path that
    cannot be looked into (a directory without the permission to read it), saying why."""
    candidate = os.path.join(path, "checkpoint.pt") if os.path.isdir(path) else path
    try:
        os.stat(candidate)
    except (FileNotFoundError, NotADirectoryError):
        fail(f"no checkpoint at {candidate}")
    except OSError as e:
        fail(f"cannot read {candidate}: {describe_os_error(e)}")
    if not os.path.isfile(candidate):
        fail(f"no checkpoint at {candidate}")
    return candidate


# the entries every checkpoint holds, besides the script's own
RUN_ENTRIES = ("script", "args", "run_name", "iteration", "global_step", "finished", "rng", "envs", "next_obs")

# Integrity. torch.save writes a zip archive; save_checkpoint then adds one more record to it, the SHA-256 of every
# other record (its name, size and bytes), which torch.load ignores. A reader recomputes the digest before it reads
# anything else, so a changed byte anywhere (a tensor, the pickled structure) fails, naming the file.
CHECKSUM_RECORD = "cleanrl.sha256"


def records_digest(archive: zipfile.ZipFile) -> str:
    digest = hashlib.sha256()
    for info in archive.infolist():
        if info.filename.rsplit("/", 1)[-1] == CHECKSUM_RECORD:
            continue
        digest.update(f"{info.filename}\0{info.file_size}\0".encode())
        with archive.open(info) as record:
            while chunk := record.read(1 << 22):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def parameter_checksum(module: torch.nn.Module) -> str:
    """SHA-256 of the exact bytes of a module's parameters: equal checksums mean bit-identical replicas."""
    digest = hashlib.sha256()
    for p in module.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def add_checksum(path: str) -> None:
    with zipfile.ZipFile(path, "a") as archive:
        folder = archive.namelist()[0].split("/")[0]
        archive.writestr(f"{folder}/{CHECKSUM_RECORD}", records_digest(archive))


def verify_checksum(path: str, what: str, hint: str = "") -> None:
    """Fail in one line, leaving the file as it is, when the torch file at path does not match its checksum; a file
    from before checksums (no record) is read with a warning."""
    try:
        with zipfile.ZipFile(path) as archive:
            records = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == CHECKSUM_RECORD]
            if not records:
                warn(f"{path} has no checksum (an older version wrote it): its contents are not verified")
                return
            expected, actual = archive.read(records[-1]).decode("ascii", "replace"), records_digest(archive)
    except zipfile.BadZipFile as e:  # a record whose CRC-32 fails, a torn archive
        fail(f"{what} {path} is damaged ({first_line(e)}); the file is left as it is{hint}")
    except (OSError, EOFError, zlib.error) as e:
        fail(f"cannot read {what} {path}: {describe_os_error(e) if isinstance(e, OSError) else first_line(e)}")
    if expected != actual:
        fail(f"{what} {path} is damaged: its contents do not match the checksum written with them; the file is left "
             f"as it is{hint}")


def read_torch_file(path: str, what: str, hint: str = ""):
    """torch.load(path) on the CPU, weights only, after verify_checksum; any failure to read (not a torch file, torn,
    damaged, unreadable, a pickle of anything but plain data) fails in one line: the weights-only unpickler raises
    many exception types on foreign bytes (KeyError on a text file). A torch file (a zip archive) is memory-mapped
    (private, copy-on-write): a checkpoint's replay memory (7 GB for DQN on Atari) is copied from the page cache into
    the script's arrays instead of first into memory of its own, so a resume needs it once, not twice. Other bytes
    are read plainly, so the error names what they are. `hint` ends the line of a damaged file."""
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as e:
        fail(f"cannot read {what} {path}: {describe_os_error(e)}")
    if is_zip:
        verify_checksum(path, what, hint)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except pickle.UnpicklingError as e:  # the weights-only reader met a class or a function, and refused it
        named = re.search(r"GLOBAL [\w.]+", str(e))
        fail(f"cannot read {what} {path}: it holds Python objects, not only data ("
             f"{named[0] if named else first_line(e)}); such a file is never loaded")
    except Exception as e:  # noqa: BLE001 - whatever the bytes were, they are not a readable torch file
        fail(f"cannot read {what} {path}: {type(e).__name__}" + (f": {first_line(e)}" if str(e) else ""))


def load_checkpoint(path: str, script: str, hint: str = "") -> dict:
    """Read a checkpoint on the CPU and check that this script wrote it, whole. `loaded_from` (not saved) is its
    path: a resumed run goes on writing in the checkpoint's directory, wherever it is started."""
    checkpoint = read_torch_file(path, "checkpoint", hint)
    found = checkpoint.get("script") if isinstance(checkpoint, dict) else None
    if found != script:
        fail(f"{path} is not a checkpoint of {script}" + (f" (it was written by {found})" if found else ""))
    missing = [key for key in RUN_ENTRIES if key not in checkpoint]
    if missing or not isinstance(checkpoint["args"], dict):
        fail(f"{path} is not a whole checkpoint of {script}: it lacks {', '.join(missing or ['args'])}")
    problem = run_entries_problem(checkpoint)
    if problem:
        fail(f"{path} is not a checkpoint this script can continue: {problem}")
    return checkpoint | {"loaded_from": path}


def is_count(value) -> bool:
    return type(value) is int and value >= 0


def run_entries_problem(checkpoint: dict) -> Optional[str]:
    """What is wrong with the run entries of a checkpoint (their types and ranges, as start() and Run use them), or
    None. A checkpoint is data from wherever it came from: its entries are checked as a command line's
    flags are (flags.saved_args checks its flags)."""
    name_problem = plain_name_problem(checkpoint["run_name"])
    if name_problem:
        return f"its run name {checkpoint['run_name']!r} cannot name a run directory ({name_problem})"
    for key in ("iteration", "global_step"):
        if not is_count(checkpoint[key]):
            return f"its {key} is {checkpoint[key]!r}, not a whole number at least 0"
    if "updates" in checkpoint and not is_count(checkpoint["updates"]):
        return f"its updates is {checkpoint['updates']!r}, not a whole number at least 0"
    if type(checkpoint["finished"]) is not bool:
        return f"its finished is {checkpoint['finished']!r}, not True or False"
    if not isinstance(checkpoint["next_obs"], torch.Tensor):
        return f"its next_obs is a {type(checkpoint['next_obs']).__name__}, not a tensor"
    returns = checkpoint.get("recent_returns", [])
    if not (isinstance(returns, list) and all(type(r) in (int, float) for r in returns)):
        return "its recent_returns is not a list of numbers"
    return None  # rng and envs: a multi-GPU checkpoint holds one per rank; Run.restore checks the rank's own


def rng_state_problem(state) -> Optional[str]:
    """Why `state` is not an rng_state() that set_rng_state can put back, or None: tried on fresh generators of each
    kind, so the global ones are never left half set."""
    try:
        random.Random().setstate(state["python"])
        key = state["numpy_key"]
        if not (isinstance(key, torch.Tensor) and key.dtype == torch.int64 and tuple(key.shape) == (624,)):
            raise ValueError("numpy_key is not 624 int64 words")
        if not (type(state["numpy_pos"]) is int and 0 <= state["numpy_pos"] <= 624):
            raise ValueError(f"numpy_pos {state['numpy_pos']!r} is not in [0, 624]")
        has_gauss, gauss = state["numpy_gauss"]
        np.random.RandomState().set_state(("MT19937", key.numpy().astype(np.uint32), int(state["numpy_pos"]),
                                           int(has_gauss), float(gauss)))
        torch.Generator().set_state(state["torch"])
        if not (isinstance(state["cuda"], list) and all(isinstance(t, torch.Tensor) for t in state["cuda"])):
            raise ValueError("cuda is not a list of generator states")
    except (TypeError, ValueError, KeyError, IndexError, RuntimeError, OverflowError) as e:
        return f"its rng entry is not a random generators' state ({type(e).__name__}: {first_line(e)})"
    return None


# how a damaged checkpoint is got past: a run keeps one checkpoint, the latest
DAMAGED_HINT = ("; a run keeps no earlier checkpoint: restore this one from a copy, or start the run again without "
                "--resume")


def find_resume_checkpoint(args, script: str) -> Optional[dict]:
    """The checkpoint --resume names, or None for a fresh run. `auto` (for automatic restarts of the same command)
    continues the newest run of this env id, exp name and seed, if any; if it has finished, the process exits 0. A
    run directory that cannot be looked into fails, naming it: `auto` never silently starts over beside a run."""
    if args.resume is None:
        return None
    if args.resume != "auto":
        path = checkpoint_path_of(args.resume)
        hold_run_directory(os.path.dirname(path) or ".")
        checkpoint = load_checkpoint(path, script, DAMAGED_HINT)
        if checkpoint["finished"] and not extends(args, checkpoint):
            fail(f"{path} is the end of a finished run (global step {checkpoint['global_step']}); nothing to resume "
                 "(give a larger --total-timesteps to train it on)")
        return checkpoint
    prefix = run_prefix(args)
    try:
        names = os.listdir("runs")
    except FileNotFoundError:
        return None
    except OSError as e:
        fail(f"--resume auto cannot look for the runs of {prefix}* in runs/: {describe_os_error(e)}")
    # only the names start() gives: {prefix}{unix time}, or {prefix}{unix time}-{n} after a clash in one second
    started = {}
    for name in names:
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", name[len(prefix):]) if name.startswith(prefix) else None
        if match is None:
            continue
        path = os.path.join("runs", name, "checkpoint.pt")
        try:
            os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # a run that saved no checkpoint
        except OSError as e:
            fail(f"--resume auto cannot look into runs/{name}: {describe_os_error(e)}; make it readable, or move it "
                 "away to start a new run")
        started[path] = (int(match[1]), int(match[2] or 1))
    if not started:
        return None
    newest = max(started, key=started.get)
    hold_run_directory(os.path.dirname(newest))
    checkpoint = load_checkpoint(newest, script, DAMAGED_HINT)
    if checkpoint["finished"] and not extends(args, checkpoint):  # a restart after the run ended must not train again
        say(f"{os.path.dirname(newest)} has already finished; nothing to resume")
        raise SystemExit(0)
    return checkpoint


def extends(args, checkpoint: dict) -> bool:
    """Whether the command line gives --total-timesteps above the checkpoint's: a finished run then trains on."""
    given, saved = flag_given("total_timesteps"), checkpoint["args"].get("total_timesteps")
    try:
        return given is not None and is_count(saved) and int(given) > saved
    except ValueError:  # not a number: the flag parser has said so already
        return False


def rng_state() -> dict:
    """The global generators of python, numpy and torch (CPU and every visible GPU), as weights_only-safe types."""
    np_state = np.random.get_state(legacy=False)
    return {"python": random.getstate(), "numpy_key": torch.as_tensor(np_state["state"]["key"].astype(np.int64)),
            "numpy_pos": int(np_state["state"]["pos"]),
            "numpy_gauss": (int(np_state["has_gauss"]), float(np_state["gauss"])), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state({"bit_generator": "MT19937", "has_gauss": state["numpy_gauss"][0],
                         "state": {"key": state["numpy_key"].numpy().astype(np.uint32), "pos": state["numpy_pos"]},
                         "gauss": state["numpy_gauss"][1]})
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# The environments' state as data. A checkpoint holds no pickled Python object, so loading one runs no code: the state
# of a vector env is read off its objects' attributes as plain values (numbers, strings, arrays as bytes, generator
# states as JSON) and written back, attribute by attribute, into envs built by the same code. Only the objects gymnasium
# builds (envs, wrappers, vector envs, spaces) are entered; what a constructor makes (functions, closures, specs, enums,
# renderers) is never saved and stays as built. Every value is tagged: ("array", dtype, shape, bytes), ("list", items),
# ("object", class name, {attribute: value}), ...; a plain str, int, float, bool or None stands for itself.
STATE_OBJECTS = (gym.Env, gym.vector.VectorEnv, gym.Space)

ARRAY_KINDS = "biufc"  # bool, int, unsigned, float, complex: arrays of numbers only (never object arrays)

BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")

SKIP, MISSING = object(), object()


class EnvStateError(ValueError):
    """A saved environment state that does not describe these environments (or is malformed)."""


def class_name(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def encode_state(value, seen: set):
    """`value` as tagged plain data, or SKIP where it holds something that is not data (a function, say)."""
    kind = type(value)
    if value is None or kind in (bool, float, str):
        return value
    if kind is int:
        return value if -2**63 <= value < 2**63 else ("int", str(value))
    if isinstance(value, np.generic) and value.dtype.kind in ARRAY_KINDS:
        return ("scalar", value.dtype.str, value.tobytes())
    if kind is np.ndarray and value.dtype.kind in ARRAY_KINDS:
        return ("array", value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes())
    if kind is np.random.Generator:
        return ("generator", json.dumps(value.bit_generator.state))
    if kind in (list, tuple, deque, dict):
        pairs = value.items() if kind is dict else enumerate(value)
        items = [(encode_state(k, seen), encode_state(v, seen)) for k, v in pairs]
        if any(k is SKIP or v is SKIP for k, v in items):
            return SKIP
        if kind is dict:
            return ("dict", [list(item) for item in items])
        values = [v for _, v in items]
        return ("deque", value.maxlen, values) if kind is deque else (kind.__name__, values)
    if getattr(type(value), "transparent", False):  # a wrapper without state: its inner env stands in its place
        return encode_state(value.env, seen)
    if isinstance(value, STATE_OBJECTS) and hasattr(value, "__dict__"):
        if id(value) in seen:  # an object met before (a space shared by two layers) is restored where first met
            return ("seen",)
        seen.add(id(value))
        attributes = {name: encode_state(attr, seen) for name, attr in vars(value).items()}
        return ("object", class_name(value), {k: v for k, v in attributes.items() if v is not SKIP})
    return SKIP


def array_dtype(dtype: str) -> np.dtype:
    if type(dtype) is not str or np.dtype(dtype).kind not in ARRAY_KINDS:
        raise EnvStateError(f"an array of dtype {dtype!r}")
    return np.dtype(dtype)


def restore_state(current, saved, where: str = "envs", depth: int = 0):
    """The value `saved` (encode_state's) describes; an object is written into `current`, its counterpart in the
    freshly built envs, which must be of the same class. Raises EnvStateError when they do not match."""
    if depth > 64:
        raise EnvStateError(f"{where} is nested too deeply")
    if saved is None or type(saved) in (bool, int, float, str):
        return saved
    if type(saved) is not tuple or not saved or type(saved[0]) is not str:
        raise EnvStateError(f"{where} holds a {type(saved).__name__}, not a saved value")
    tag, body = saved[0], saved[1:]
    try:
        if tag == "int":
            return int(body[0][:100])
        if tag == "scalar":
            dtype = array_dtype(body[0])
            if len(body[1]) != dtype.itemsize:
                raise EnvStateError(f"{where}: {len(body[1])} bytes for one {dtype}")
            return np.frombuffer(body[1], dtype)[0]
        if tag == "array":
            dtype, shape = array_dtype(body[0]), tuple(int(n) for n in body[1])
            if len(body[2]) != dtype.itemsize * math.prod(shape):
                raise EnvStateError(f"{where}: {len(body[2])} bytes for a {dtype} array of shape {shape}")
            return np.frombuffer(body[2], dtype).reshape(shape).copy()
        if tag == "generator":
            state = json.loads(body[0])
            if state.get("bit_generator") not in BIT_GENERATORS:
                raise EnvStateError(f"{where}: unknown bit generator {state.get('bit_generator')!r}")
            generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
            generator.bit_generator.state = state
            return generator
        if tag in ("list", "tuple", "deque"):
            items = body[-1]
            if type(items) is not list:
                raise EnvStateError(f"{where}: a {tag} without a list of items")
            same = type(current).__name__ == tag and len(current) == len(items)
            values = [restore_state(current[i] if same else MISSING, item, f"{where}[{i}]", depth + 1)
                      for i, item in enumerate(items)]
            if tag == "deque":
                return deque(values, maxlen=None if body[0] is None else int(body[0]))
            return values if tag == "list" else tuple(values)
        if tag == "dict":
            restored = {}
            for key, value in body[0]:
                key = restore_state(MISSING, key, f"{where} key", depth + 1)
                inner = current.get(key, MISSING) if type(current) is dict else MISSING
                restored[key] = restore_state(inner, value, f"{where}[{key!r}]", depth + 1)
            return restored
        if tag == "seen":
            if current is MISSING:
                raise EnvStateError(f"{where} has no counterpart in these environments")
            return current
        if tag == "object":
            name, attributes = body
            outer = current  # a transparent wrapper (encode_state) stays where it is; its inner env is restored
            while getattr(type(current), "transparent", False):
                current = current.env
            # (a class saved from a script, __main__, may since have moved to a companion module)
            moved = name.startswith("__main__.") and name[9:] == type(current).__qualname__
            if current is MISSING or class_name(current) != name and not moved:
                found = "nothing" if current is MISSING else class_name(current)
                raise EnvStateError(f"{where} was a {name}; these environments have {found} there")
            for attr, value in attributes.items():
                vars(current)[attr] = restore_state(vars(current).get(attr, MISSING), value, f"{where}.{attr}",
                                                    depth + 1)
            return outer
    except EnvStateError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        raise EnvStateError(f"{where}: a malformed {tag!r} entry ({type(e).__name__}: {first_line(e)})") from None
    raise EnvStateError(f"{where}: unknown entry {tag!r}")


def env_state(envs: gym.vector.VectorEnv) -> tuple[Optional[tuple], str]:
    """The vector env's state as data (encode_state), or (None, why not): for a SyncVectorEnv of pure-Python envs,
    every layer's attributes (sub-envs, wrappers, generators, elapsed steps, statistics). Envs whose state lives
    outside Python (MuJoCo, Box2D and Atari: gymnasium's EzPickle envs) would come back freshly reset, so they are
    refused."""
    layers = [envs]
    while isinstance(layers[-1], gym.vector.VectorWrapper):
        layers.append(layers[-1].env)
    if not isinstance(layers[-1], gym.vector.SyncVectorEnv):
        return None, f"{type(layers[-1]).__name__} is not a SyncVectorEnv"
    for sub_env in layers[-1].envs:
        if isinstance(sub_env.unwrapped, gym.utils.EzPickle):
            return None, f"{type(sub_env.unwrapped).__name__} keeps its state outside Python, where it cannot be saved"
        wrapper = sub_env
        while isinstance(wrapper, gym.Wrapper):
            if isinstance(wrapper, gym.wrappers.RecordVideo):
                return None, "the video recorder (--capture-video) holds the frames of the episode under way"
            wrapper = wrapper.env
    return encode_state(envs, set()), ""


def load_env_state(envs: gym.vector.VectorEnv, state, path: str) -> bool:
    """Put a saved env_state into envs built by the same code (same wrappers, same number of envs); False, with a
    note, for a state an older version saved as a pickle, which is never loaded (loading a pickle can run code)."""
    if isinstance(state, (bytes, bytearray)):
        say(f"note: {path} holds its environments' state as a pickle (an older version wrote it), which is never "
            "loaded: the episodes in progress restart")
        return False
    try:
        restore_state(envs, state)
    except EnvStateError as e:
        fail(f"cannot restore the environments' state from {path}: {e}")
    return True


def state_of(obj):
    """A checkpoint entry for a stateful object: a state_dict, a tensor (a learned scalar such as SAC's log alpha),
    a numpy Generator's state as JSON text (its 128-bit integers fit no tensor; text loads with weights_only), or a
    torch Generator's state (a byte tensor)."""
    if isinstance(obj, np.random.Generator):
        return json.dumps(obj.bit_generator.state)
    if isinstance(obj, torch.Generator):
        return obj.get_state()
    return obj.detach().cpu().clone() if isinstance(obj, torch.Tensor) else obj.state_dict()


# Module layouts that earlier versions saved and this one reads no more: (the file's entry names, what they held and
# what replaced them). A state of one of them is refused naming the change, not only the names that differ.
RETIRED_LAYOUTS = (
    ({"w1", "b1", "w2", "b2", "w3", "b3"},
     "the twin critics as one network of stacked weights (w1 ... b3), from before they became two QNetworks of "
     "nn.Linear layers (0.fc1.weight ... 1.fc3.bias), which this version does not read"),
)


def state_mismatch(obj, state) -> Optional[str]:
    """Why a module's saved state_dict does not fit `obj`, in one line: a retired layout's change (RETIRED_LAYOUTS),
    or the entries whose shapes differ (the file's against this network's), then those missing or unexpected; None
    where the names and shapes all fit (or `obj` is no module)."""
    if not isinstance(obj, torch.nn.Module) or not isinstance(state, dict):
        return None
    mine = obj.state_dict()
    for names, change in RETIRED_LAYOUTS:
        if set(state) == names and not names <= set(mine):
            return f"it holds {change}"

    def listed(what: str, items: list) -> list:
        more = f" and {len(items) - 3} more" if len(items) > 3 else ""
        return [f"{what} {'; '.join(items[:3])}{more}"] if items else []

    shapes = [f"{k} {tuple(state[k].shape)} in the file, {tuple(v.shape)} here" for k, v in mine.items()
              if k in state and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(v.shape)]
    parts = (listed("shapes differ:", shapes) + listed("missing from the file:", [k for k in mine if k not in state])
             + listed("not in this network:", [k for k in state if k not in mine]))
    return ", ".join(parts) or None


def load_state_of(obj, state) -> None:
    """Put a state_of entry back. A generator saved by the other kind (a replay memory sampled on the host by a run
    now resumed on a GPU, or the reverse) is seeded from the saved state instead: the run goes on, not exactly."""
    host, saved_on_host = isinstance(obj, np.random.Generator), isinstance(state, str)
    if isinstance(obj, (np.random.Generator, torch.Generator)) and host != saved_on_host:
        raw = state.encode() if saved_on_host else state.numpy().tobytes()
        seed = int.from_bytes(hashlib.sha256(raw).digest()[:8], "little")
        if host:
            obj.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        else:
            obj.manual_seed(seed)
    elif isinstance(obj, np.random.Generator):
        obj.bit_generator.state = json.loads(state)
    elif isinstance(obj, torch.Generator):
        obj.set_state(state)
    elif isinstance(obj, torch.Tensor):
        with torch.no_grad():
            obj.copy_(state)
    elif isinstance(obj, torch.optim.Optimizer):
        # A learning rate held as a tensor (filled in place by a schedule, read by compiled code) stays that tensor
        # on its device; load_state_dict would put the saved value there (a CPU tensor, or a float in older files).
        rates = [group["lr"] for group in obj.param_groups]
        obj.load_state_dict(state)
        for group, rate in zip(obj.param_groups, rates):
            if isinstance(rate, torch.Tensor):
                rate.fill_(float(group["lr"]))
                group["lr"] = rate
    else:
        obj.load_state_dict(state)


class FailedWrites:
    """A binary file that remembers why its first failed write failed: torch.save reports one as a RuntimeError
    ("unexpected pos ..."), which says nothing of a full disk."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self.file.flush()


# The mode a plain open() gives a new file, 0o666 less the umask, which can only be read by setting it: read once, at
# import, before the run starts any thread that could create a file meanwhile.
UMASK = os.umask(0o022)
os.umask(UMASK)
NEW_FILE_MODE = 0o666 & ~UMASK


def save_checkpoint(checkpoint, path: str) -> None:
    """Atomic and sealed: write a temporary beside path, add its checksum record, fsync, os.replace over path; a kill
    leaves the old or the new file, never a torn one. The temporary is made by mkstemp: a name nobody can predict,
    created exclusively and never through a link, so a link planted in the run directory cannot redirect the write.
    A failed write (a full disk, a quota, an I/O error) fails in one line that says why, the old file intact and no
    temporary left behind."""
    sink, tmp = None, None
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=os.path.basename(path) + ".tmp.")
        os.fchmod(fd, NEW_FILE_MODE)  # mkstemp's 0o600 would hide the checkpoint from the run's other readers
        with open(fd, "wb") as f:
            sink = FailedWrites(f)
            torch.save(checkpoint, sink)
        add_checksum(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # the rename itself reaches the disk with the directory
            directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            os.fsync(directory)
            os.close(directory)
    except BaseException as e:  # also a kill signal's exception or a bug: never leave the temporary behind
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        # torch.save reports a failed write as a RuntimeError, zipfile a torn archive as BadZipFile
        if not isinstance(e, (OSError, RuntimeError, zipfile.BadZipFile)):
            raise
        cause = sink.error if sink is not None and sink.error is not None else e
        kept = "the previous one is intact" if os.path.exists(path) else "nothing was written"
        fail(f"cannot save {path}: {describe_os_error(cause) if isinstance(cause, OSError) else first_line(cause)}; "
             f"{kept}")


class PytreeState:
    """A JAX pytree (a network's parameters, an optimizer's state, a PRNG key) as a checkpoint entry: `tree` is the
    current value, which the script sets as it trains. Saved as its leaves, plain tensors keyed by their path in the
    tree (`['params']['Conv_0']['kernel']`), so a JAX checkpoint is read by the same weights-only reader as the
    others; loaded into a tree of the same structure (the one the script built), each leaf checked for shape and
    given its dtype back. jax is imported by the script that uses it, never here."""

    def __init__(self, tree):
        self.tree = tree

    def leaves(self) -> list:
        import jax
        return jax.tree_util.tree_flatten_with_path(self.tree)[0]

    def state_dict(self) -> dict:
        import jax
        state = {}
        for path, leaf in self.leaves():
            array = np.array(jax.device_get(leaf))
            # unsigned PRNG key words are kept as int64 (their value exactly); the dtype comes back from the tree
            state[jax.tree_util.keystr(path)] = torch.from_numpy(array.astype(np.int64) if array.dtype.kind == "u"
                                                                 else array)
        return state

    def load_state_dict(self, state: dict) -> None:
        import jax
        import jax.numpy as jnp
        if not isinstance(state, dict):
            raise TypeError(f"expected a dict of arrays, got {type(state).__name__}")
        flat, treedef = jax.tree_util.tree_flatten_with_path(self.tree)
        names = [jax.tree_util.keystr(path) for path, _ in flat]
        if set(names) != set(state):
            missing, unexpected = sorted(set(names) - set(state)), sorted(set(state) - set(names))
            raise RuntimeError(f"its entries are not this tree's ({len(missing)} missing, e.g. "
                               f"{', '.join(missing[:2]) or '-'}; {len(unexpected)} unexpected, e.g. "
                               f"{', '.join(unexpected[:2]) or '-'})")
        leaves = []
        for name, (_, leaf) in zip(names, flat):
            saved = state[name]
            if not isinstance(saved, torch.Tensor) or tuple(saved.shape) != tuple(np.shape(leaf)):
                raise RuntimeError(f"{name} has shape {tuple(getattr(saved, 'shape', ()))}, expected {np.shape(leaf)}")
            leaves.append(jnp.asarray(saved.numpy().astype(np.asarray(leaf).dtype)))
        self.tree = jax.tree_util.tree_unflatten(treedef, leaves)

    def non_finite(self) -> Optional[str]:
        """The path of the first leaf holding NaN or inf, or None (a reduction per leaf, one host read)."""
        import jax
        import jax.numpy as jnp
        floats = [(path, leaf) for path, leaf in self.leaves() if jnp.issubdtype(leaf.dtype, jnp.floating)]
        finite = jax.device_get([jnp.isfinite(leaf).all() for _, leaf in floats])
        return next((jax.tree_util.keystr(path) for (path, _), ok in zip(floats, finite) if not ok), None)
