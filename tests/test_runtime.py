"""cleanrl/runtime.py on its own: the non-finite check, atomic checkpoints, the state of Generators and replay
memories, run names, the progress line. (Its replay memories and Atari environments have their own files:
test_replay_buffer.py, test_replay_frames.py, test_atari_env.py.)"""

import io
import json
import math
import os
from dataclasses import dataclass
from typing import Annotated

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn
from gymnasium.spaces import Box, Discrete

import checkpoints
import environments
import replay_memory
import flags
import runtime
import speed
from checkpoints import load_state_of, save_checkpoint, state_of
from replay_memory import ReplayBuffer
from runtime import find_non_finite
from tests.scripts import SCRIPTS, have, needs


def roundtrip(obj):
    """obj through torch.save and torch.load(weights_only=True), as a checkpoint entry travels."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_find_non_finite_names_the_quantity():
    module = nn.Linear(2, 1)
    assert find_non_finite({"losses/value_loss": 1.0}, {"agent": module}) is None
    assert find_non_finite({"losses/value_loss": math.inf}, {"agent": module}) == "losses/value_loss (inf)"
    with torch.no_grad():
        module.bias.fill_(math.nan)
    assert find_non_finite({"losses/value_loss": 1.0}, {"agent": module}) == "parameter agent.bias"
    assert find_non_finite({}, {}) is None


def test_save_checkpoint_is_atomic(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    save_checkpoint({"global_step": 1}, path)
    with pytest.raises(Exception):
        save_checkpoint({"global_step": 2, "bad": lambda: None}, path)  # fails while writing
    assert torch.load(path, weights_only=True) == {"global_step": 1}
    save_checkpoint({"global_step": 3}, path)
    assert torch.load(path, weights_only=True) == {"global_step": 3}
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def test_generator_and_buffer_state_round_trip():
    rng = np.random.default_rng(7)
    rng.random(3)
    state = state_of(rng)
    assert isinstance(state, str)  # JSON text: weights_only-safe, and PCG64's 128-bit integers survive
    expected = rng.integers(0, 1000, size=5)
    other = np.random.default_rng(0)
    load_state_of(other, json.loads(json.dumps(state)))
    assert (other.integers(0, 1000, size=5) == expected).all()

    space = Box(-1, 1, (2,), np.float32)
    rb = ReplayBuffer(4, space, Discrete(3), torch.device("cpu"), seed=1)
    for k in range(5):  # wraps: pos 1, full
        rb.add(np.full((1, 2), k, np.float32), np.full((1, 2), k + 1, np.float32), np.array([k % 3]),
               np.array([float(k)]), np.array([0.0]))
    saved = rb.state_dict()
    assert saved["pos"] == 1 and saved["full"] is True and saved["observations"][0, 0].item() == 4.0
    copy = ReplayBuffer(4, space, Discrete(3), torch.device("cpu"), seed=1)
    copy.load_state_dict(roundtrip(saved))
    assert copy.pos == 1 and copy.full and len(copy) == 4
    for name in ("observations", "next_observations", "actions", "rewards", "terminations"):
        assert (getattr(copy, name) == getattr(rb, name)).all(), name
    smaller = ReplayBuffer(3, space, Discrete(3), torch.device("cpu"), seed=1)
    with pytest.raises(SystemExit, match="replay memory observations has shape"):
        smaller.load_state_dict(roundtrip(saved))


@dataclass
class EnvArgs(flags.RunArgs):
    env_id: str = "CartPole-v1"


@pytest.mark.parametrize("env_id, prefix", [
    ("CartPole-v1", "CartPole-v1__ppo__3__"),
    ("ALE/Pong-v5", "ALE-Pong-v5__ppo__3__"),
    ("mymodule:custom/Env-v1", "mymodule-custom-Env-v1__ppo__3__"),
])
def test_run_names_are_one_directory(env_id, prefix):
    assert checkpoints.run_prefix(EnvArgs(env_id=env_id, exp_name="ppo", seed=3)) == prefix


def test_env_state_is_plain_data_that_restores_classic_control_exactly(workdir):
    envs = environments.make_envs("CartPole-v1", 2, False, "x")
    envs.reset(seed=1)
    for _ in range(30):  # past an episode end, so the statistics wrapper holds returns
        envs.step(np.array([0, 1]))
    state, why = checkpoints.env_state(envs)
    assert state is not None and why == ""
    # through a real checkpoint file, read as a resume reads it (weights only: no pickled object could load)
    save_checkpoint({"envs": state}, "c.pt")
    loaded = checkpoints.read_torch_file("c.pt", "checkpoint")["envs"]
    after = [envs.step(np.array([1, 1])) for _ in range(40)]
    copy = environments.make_envs("CartPole-v1", 2, False, "x")
    copy.reset(seed=99)
    assert checkpoints.load_env_state(copy, loaded, "c.pt")
    again = [copy.step(np.array([1, 1])) for _ in range(40)]
    for (obs, reward, term, trunc, _), (obs2, reward2, term2, trunc2, _) in zip(after, again):
        assert (obs == obs2).all() and (reward == reward2).all() and (term == term2).all() and (trunc == trunc2).all()
    assert list(copy.return_queue) == list(envs.return_queue) and len(envs.return_queue) > 0
    assert (copy.episode_lengths == envs.episode_lengths).all()
    assert copy.action_space.sample().tolist() == envs.action_space.sample().tolist()  # the generators go on alike

    class Rebuilt(gym.Env, gym.utils.EzPickle):
        observation_space, action_space = Box(-1, 1, (1,)), Discrete(2)

    sync = gym.vector.SyncVectorEnv([lambda: Rebuilt()])
    state, why = checkpoints.env_state(sync)
    assert state is None and "Rebuilt keeps its state outside Python" in why


def test_an_env_state_saved_from_a_class_that_since_moved_out_of_its_script_still_restores(workdir):
    """ppo_continuous_action.py's NormalizeObservation lived in the script (saved as __main__.NormalizeObservation)
    before it moved to environments.py: such a state restores into the moved class; another class still fails."""
    def renamed(entry, old: str, new: str):
        if isinstance(entry, (tuple, list)):
            items = [new if item == old else renamed(item, old, new) for item in entry]
            return tuple(items) if isinstance(entry, tuple) else items
        if isinstance(entry, dict):
            return {k: renamed(v, old, new) for k, v in entry.items()}
        return entry

    def normalized() -> gym.vector.VectorEnv:
        return environments.NormalizeObservation(environments.make_envs("Pendulum-v1", 1, False, "x"))

    envs = normalized()
    envs.reset(seed=1)
    for _ in range(5):
        envs.step(np.zeros((1, 1), dtype=np.float32))
    state = checkpoints.env_state(envs)[0]
    moved = "environments.NormalizeObservation"
    assert moved in repr(state)
    old = renamed(state, moved, "__main__.NormalizeObservation")
    copy = normalized()
    copy.reset(seed=2)
    assert checkpoints.load_env_state(copy, old, "c.pt")
    # (the statistics are a checkpoint entry of their own, environments.Statistics; the env state holds the rest)
    pendulum, copied = envs.env.env.env.envs[0].unwrapped, copy.env.env.env.envs[0].unwrapped
    assert (copied.state == pendulum.state).all() and copy.env.episode_lengths.tolist() == [5]
    with pytest.raises(SystemExit, match="was a __main__.Other"):
        checkpoints.load_env_state(normalized(), renamed(state, moved, "__main__.Other"), "c.pt")

def test_an_env_state_for_other_envs_or_of_foreign_entries_fails_in_one_line(workdir):
    cartpole = environments.make_envs("CartPole-v1", 2, False, "x")
    cartpole.reset(seed=1)
    state = checkpoints.env_state(cartpole)[0]
    acrobot = environments.make_envs("Acrobot-v1", 2, False, "x")
    with pytest.raises(SystemExit) as e:
        checkpoints.load_env_state(acrobot, state, "c.pt")
    assert str(e.value).startswith("error: cannot restore the environments' state from c.pt: envs.env.envs[0]")
    assert "CartPoleEnv" in str(e.value) and "\n" not in str(e.value)
    # entries that would build something other than plain data are refused, whatever they name
    for entry in [("object", "os._wrap_close", {}), ("array", "|O", [1], b"12345678"),
                  ("generator", json.dumps({"bit_generator": "os.system", "state": {}})), ("call", "os.system"),
                  ["a list is no entry"], ("array", "<f8", [4], b"short")]:
        crafted = ("object", checkpoints.class_name(cartpole), {"episode_returns": entry})
        with pytest.raises(SystemExit, match="error: cannot restore the environments' state from c.pt: "):
            checkpoints.load_env_state(cartpole, crafted, "c.pt")


def test_an_env_state_saved_as_a_pickle_by_an_older_version_is_never_unpickled(workdir, capsys):
    class Payload:
        def __reduce__(self):
            return (open, (str(workdir / "marker"), "w"))

    import pickle
    envs = environments.make_envs("CartPole-v1", 1, False, "x")
    assert checkpoints.load_env_state(envs, pickle.dumps(Payload()), "c.pt") is False
    assert not (workdir / "marker").exists()
    assert "note: c.pt holds its environments' state as a pickle" in capsys.readouterr().out


def test_progress_plain_lines_at_the_interval(capsys, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock[0])
    progress = runtime.Progress(1000, enabled=True, interval=30.0)
    progress.terminal = False
    for r in (1.0, 2.0, 6.0):
        progress.episode(r)
    progress.update(100, 50)  # 0 s after the start: nothing yet
    clock[0] += 30.0
    progress.update(200, 60)
    clock[0] += 10.0
    progress.update(300, 60)  # 10 s after the last line: nothing
    progress.update(1000, 70)  # the end: the summary line says it, not a progress line
    assert capsys.readouterr().err == (
        "progress: step 200/1000 (20%), 60 SPS, mean return of the last 3 episodes 3.0\n")


def test_progress_says_how_many_episodes_its_mean_covers(capsys):
    progress = runtime.Progress(1000, enabled=True, interval=30.0)
    assert progress.returns_said() == "no episode finished yet"
    assert progress.returns_said(run_over=True) == "no episode finished"
    progress.episode(4.0)
    assert progress.returns_said() == "mean return of the last 1 episode 4.0"
    for r in range(1, 31):  # the last 20: 11..30, mean 20.5
        progress.episode(float(r))
    assert progress.returns_said() == "mean return of the last 20 episodes 20.5"


def test_progress_on_a_terminal_redraws_one_line(capsys, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock[0])
    progress = runtime.Progress(200, enabled=True, interval=30.0)
    progress.terminal = True
    clock[0] += 0.3
    progress.update(100, 10)
    progress.update(150, 10)  # within 0.25 s of the last draw
    progress.update(200, 12)  # the last step is always drawn
    progress.close()
    assert capsys.readouterr().err == ("\r100/200 steps (50%) | 10 SPS | return -  \x1b[K"
                                       "\r200/200 steps (100%) | 12 SPS | return -  \x1b[K\n")


def test_progress_shows_a_long_part_of_an_iteration_in_place_of_the_speed(capsys, monkeypatch):
    # PPG's auxiliary phase comes after the last step of its phase: the line still shows how far it has come
    clock = [0.0]
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock[0])
    for terminal in (True, False):
        progress = runtime.Progress(200, enabled=True, interval=30.0)
        progress.terminal = terminal
        clock[0] += 31
        progress.update(200, 0, "auxiliary phase: epoch 2/6, 50%")
        progress.update(200, 0, "auxiliary phase: epoch 2/6, 51%")  # too soon after the last draw
        clock[0] += 31
        progress.update(200, 15)  # the end, drawn on a terminal, left to the summary line in a file
        progress.close()
    assert capsys.readouterr().err == (
        "\r200/200 steps (100%) | auxiliary phase: epoch 2/6, 50% | return -  \x1b[K"
        "\r200/200 steps (100%) | 15 SPS | return -  \x1b[K\n"
        "progress: step 200/200 (100%), auxiliary phase: epoch 2/6, 50%, no episode finished yet\n")


# ---- declared flag ranges, budgets, run directories, unreadable checkpoints, failed writes (bad input) ----
SCRIPT_MODULES = [name[:-3] for name in SCRIPTS]


# (importing the JAX script needs its extra: skipped, naming it, where it is missing)
@pytest.mark.parametrize("module", [pytest.param(m, marks=[needs("jax")] if SCRIPTS[f"{m}.py"].needs == "jax" else [])
                                    for m in SCRIPT_MODULES])
def test_every_numeric_flag_of_every_script_declares_its_range(module):
    import dataclasses
    import importlib
    import typing

    args_cls = importlib.import_module(module).Args
    ranges = flags.flag_ranges(args_cls)
    for field in dataclasses.fields(args_cls):
        types = {typing.get_origin(t) and typing.get_args(t)[0] or t
                 for t in (field.type, *typing.get_args(field.type))} - {type(None)}
        if types & {int, float} and bool not in types:
            flag = "--" + field.name.replace("_", "-")
            assert field.name in ranges, f"{module}.py: {flag} declares no range (give it a type such as PositiveFloat)"
    flags.check_flag_ranges(args_cls())  # the defaults lie in their ranges


def one_flag(name: str, value, interval: str = ""):
    """A dataclass of one flag, its type declaring `interval` (none where empty)."""
    from dataclasses import make_dataclass

    kind = type(value) if not interval else Annotated[type(value), flags.Range(interval)]
    return make_dataclass("Args", [(name, kind, value)])()


def all_ranges() -> dict[str, tuple[str, type]]:
    """{flag: (interval, int or float)} over every script."""
    import importlib
    import typing

    found = {}
    for module in SCRIPT_MODULES:
        if SCRIPTS[f"{module}.py"].needs == "jax" and not have("jax"):
            continue  # its flags are checked where the extra is installed (CI installs every extra)
        args_cls = importlib.import_module(module).Args
        hints = typing.get_type_hints(args_cls, include_extras=True)
        for name, interval in flags.flag_ranges(args_cls).items():
            hint = hints[name]
            annotated = next(h for h in (hint, *typing.get_args(hint)) if hasattr(h, "__metadata__"))
            found[name] = interval, typing.get_args(annotated)[0]
    return found


def test_flag_ranges_take_their_ends_as_declared_and_refuse_what_lies_outside():
    for name, (interval, kind) in all_ranges().items():
        low, high = (float(end) for end in interval[1:-1].split(","))
        if low == -math.inf:
            continue  # any finite number: only the finiteness check below applies
        inside, outside = [], [kind(low) - 1]
        (inside if interval[0] == "[" else outside).append(kind(low))
        if high != math.inf:
            (inside if interval[-1] == "]" else outside).append(kind(high))
            outside.append(kind(high) + 1)
        else:
            inside.append(kind(low) + 1000)
        for value in inside:
            flags.check_flag_ranges(one_flag(name, value, interval))
        flag = f"--{name.replace('_', '-')}"
        for value in outside:
            with pytest.raises(SystemExit) as e:
                flags.check_flag_ranges(one_flag(name, value, interval))
            assert str(e.value).startswith(f"error: {flag} must be ") and str(e.value).endswith(f"got {value}")
    for value in (math.nan, math.inf, -math.inf):  # every float flag, ranged or not
        for name, interval in (("learning_rate", "(0, inf)"), ("v_min", "(-inf, inf)"), ("unranged", "")):
            with pytest.raises(SystemExit, match=f"--{name.replace('_', '-')} must be a finite number"):
                flags.check_flag_ranges(one_flag(name, value, interval))


def test_ranges_read_as_words():
    for name, value, interval, message in [
        ("learning_rate", -1.0, "(0, inf)", "--learning-rate must be above 0, got -1.0"),
        ("num_envs", 0, "[1, inf)", "--num-envs must be at least 1, got 0"),
        ("gamma", 1.5, "[0, 1]", "--gamma must be in [0, 1], got 1.5"),
        ("tau", 0.0, "(0, 1]", "--tau must be in (0, 1], got 0.0"),
    ]:
        with pytest.raises(SystemExit) as e:
            flags.check_flag_ranges(one_flag(name, value, interval))
        assert str(e.value) == f"error: {message}"


def test_run_flags_come_after_the_algorithm_flags_and_a_script_default_stays():
    import dataclasses
    import importlib

    names = [f.name for f in dataclasses.fields(importlib.import_module("ppo_atari").Args)]
    assert names.index("env_id") < names.index("learning_rate") < names.index("seed") < names.index("resume"), names
    assert importlib.import_module("ppo_atari").Args().torch_threads == 0  # its own default, not RunArgs' 1
    assert importlib.import_module("ppo").Args().torch_threads == 1


def test_whole_iterations_warns_when_it_drops_more_than_a_percent_and_fails_below_one(capsys):
    assert flags.whole_iterations(500_000, 512, "one batch") == 976  # the defaults: 288 steps dropped, silently
    assert capsys.readouterr().err == ""
    assert flags.whole_iterations(1000, 512, "one batch") == 1
    assert capsys.readouterr().err == ("warning: --total-timesteps 1000 is not a multiple of one batch (512 steps): "
                                       "the run takes 512 steps\n")
    with pytest.raises(SystemExit, match="--total-timesteps 100 is less than one batch"):
        flags.whole_iterations(100, 512, "one batch")


def test_run_directories_are_claimed_exclusively_within_one_second(workdir, monkeypatch):
    monkeypatch.setattr(runtime.time, "time", lambda: 1700000000.5)
    names = [checkpoints.claim_run_directory("Env__x__1__") for _ in range(3)]
    assert [n for n, _ in names] == ["Env__x__1__1700000000", "Env__x__1__1700000000-2", "Env__x__1__1700000000-3"]
    assert names[0][1] == "" and "runs/Env__x__1__1700000000 is another run started in the same second" in names[1][1]
    assert sorted(os.listdir("runs")) == [n for n, _ in names]


def test_a_runs_file_in_the_way_fails_in_one_line(workdir):
    (workdir / "runs").write_text("")
    with pytest.raises(SystemExit, match="error: cannot create the run directory runs/Env__x__1__.*: runs is not a"):
        checkpoints.claim_run_directory("Env__x__1__")


def a_checkpoint(script: str = "ppo.py", **entries) -> dict:
    run = {"script": script, "args": {}, "run_name": "r", "iteration": 1, "global_step": 8, "finished": False,
           "rng": {}, "envs": None, "next_obs": torch.zeros(1)}
    return run | entries


def test_resume_auto_takes_the_newest_name_it_gave_and_ignores_others(workdir):
    @dataclass
    class Args:
        env_id: str = "CartPole-v1"
        exp_name: str = "ppo"
        seed: int = 1
        resume: str = "auto"

        def run_env_id(self):
            return self.env_id

    prefix = checkpoints.run_prefix(Args())
    for suffix, step in [("100", 1), ("100-2", 2), ("99", 3), ("100__backup", 4), ("300backup", 5), ("300-x", 6)]:
        os.makedirs(f"runs/{prefix}{suffix}")
        torch.save(a_checkpoint(global_step=step), f"runs/{prefix}{suffix}/checkpoint.pt")
    found = checkpoints.find_resume_checkpoint(Args(), "ppo.py")
    assert found["global_step"] == 2 and found["loaded_from"] == f"runs/{prefix}100-2/checkpoint.pt"


@pytest.mark.parametrize("content, message", [
    (b"hello world\n", "cannot read checkpoint x: KeyError"),  # the weights-only unpickler on text
    (b"", "cannot read checkpoint x: EOFError"),
    (b"PK\x03\x04 torn zip", "cannot read checkpoint x:"),
    ("list", "x is not a checkpoint of ppo.py"),
    ("partial", "x is not a whole checkpoint of ppo.py: it lacks run_name, iteration, global_step"),
    ("dqn", "x is not a checkpoint of ppo.py (it was written by dqn.py)"),
])
def test_any_file_that_is_no_checkpoint_of_the_script_fails_in_one_line(workdir, content, message):
    if content == "list":
        torch.save([1, 2, 3], "x")
    elif content == "partial":
        torch.save({"script": "ppo.py", "args": {}}, "x")
    elif content == "dqn":
        torch.save(a_checkpoint("dqn.py"), "x")
    else:
        (workdir / "x").write_bytes(content)
    with pytest.raises(SystemExit) as e:
        checkpoints.load_checkpoint("x", "ppo.py")
    assert str(e.value).startswith(f"error: {message}") and "\n" not in str(e.value)
    if isinstance(content, bytes):  # --eval-only of a bare model file reads it the same way
        with pytest.raises(SystemExit) as e:
            checkpoints.read_torch_file("x", "model")
        assert str(e.value).startswith(f"error: {message.replace('checkpoint', 'model')}")


def test_a_checkpoint_whose_entries_do_not_fit_fails_in_one_line(workdir):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    args = type("Args", (), {"save_model": False, "exp_name": "x", "progress": False, "progress_interval": 1.0,
                             "torch_threads": 1, "max_runtime": 0.0})()

    def restore(checkpoint):
        run = runtime.Run(args, "ppo.py", "r", ".", None, torch.device("cpu"), checkpoint | {"loaded_from": "x.pt"},
                          1, 1, 0)
        run.restore(envs, {"agent": nn.Linear(2, 2)}, 1)

    with pytest.raises(SystemExit, match=r"^error: x.pt has no 'agent' entry"):
        restore(a_checkpoint())
    with pytest.raises(SystemExit, match=r"^error: cannot restore 'agent' from x.pt: shapes differ: weight \(3, 3\) in "
                                         r"the file, \(2, 2\) here; bias \(3,\) in the file, \(2,\) here$"):
        restore(a_checkpoint(agent={"weight": torch.zeros(3, 3), "bias": torch.zeros(3)}))
    envs.close()


def test_a_failed_write_fails_in_one_line_keeps_the_old_checkpoint_and_leaves_no_tmp(tmp_path):
    # a real failed write: the file-size limit makes write() fail with EFBIG partway through the new checkpoint
    import resource
    import signal

    path = str(tmp_path / "checkpoint.pt")
    save_checkpoint({"global_step": 1}, path)
    old = open(path, "rb").read()
    limits, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with pytest.raises(SystemExit) as e:
            save_checkpoint({"global_step": 2, "weights": torch.zeros(100_000)}, path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    message = str(e.value)
    assert message.startswith(f"error: cannot save {path}: ") and message.endswith("the previous one is intact")
    assert open(path, "rb").read() == old and os.listdir(tmp_path) == ["checkpoint.pt"]
    with pytest.raises(SystemExit, match="nothing was written"):
        save_checkpoint({}, str(tmp_path / "no" / "such" / "dir.pt"))


def test_memory_beyond_this_machine_fails_naming_the_flag_and_the_bytes():
    obs, act = Box(-1, 1, (4,), np.float32), Discrete(2)
    ReplayBuffer.check_fits(1_000_000, obs, act)
    with pytest.raises(SystemExit) as e:
        ReplayBuffer.check_fits(10**11, obs, act)
    assert str(e.value).startswith("error: --buffer-size 100000000000 asks for a replay memory of "
                                   "4,800,000,000,000 bytes (4,470.3 GiB); this machine has ")
    with pytest.raises(SystemExit, match="--buffer-size 100000000000 asks for a replay memory of"):
        replay_memory.FrameReplayBuffer.check_fits(10**11, 1)
    # the estimate is what the memory really allocates
    frames = replay_memory.FrameReplayBuffer(1000, Box(0, 255, (4, 84, 84), np.uint8), Discrete(4), 2, torch.device("cpu"), 0)
    per_slot = frames.nbytes // (2 * frames.capacity)
    assert per_slot == 84 * 84 + 8 + 9


def test_free_cores_counts_a_core_another_process_keeps_busy():
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count())]
    try:
        import time

        time.sleep(0.5)
        assert speed.free_cores() == 1  # every core busy: one thread, never more
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert 1 <= speed.free_cores() <= len(os.sched_getaffinity(0))


def test_thread_guard_counts_other_processes_busy_time_not_its_own(monkeypatch):
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runtime.os, "sysconf", lambda name: 100)  # clock ticks per second
    guard = speed.ThreadGuard.__new__(speed.ThreadGuard)
    # 10 s on 2 cores: 2000 ticks in all, 1000 of them busy; this process used 2 s of CPU (200 ticks): others 800
    start, end = (0.0, 1000, 4000, 5.0), (10.0, 2000, 6000, 7.0)
    assert guard.others_busy(start, end) == pytest.approx(0.8)
    # this process alone kept the machine busy (a rounding tick more than the machine counted): none, never below
    assert guard.others_busy(start, (10.0, 1400, 6000, 9.01)) == 0.0


def test_thread_guard_leaves_out_its_own_busy_time_and_gives_up_threads_when_other_processes_take_the_cores():
    # robust to other tests running beside it (pytest-xdist): its own busy thread is compared with the machine's
    # busy time, and the drop to one thread needs every core taken by other processes
    import subprocess
    import sys
    import threading
    import time

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        guard = speed.ThreadGuard(every=0.5)
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                pass

        spinner = threading.Thread(target=spin)
        start = guard.sample()
        spinner.start()
        try:  # until it has spun about a core-second (longer where the other tests leave it less than a core)
            deadline = time.monotonic() + 10
            while guard.sample()[3] - start[3] < 0.8 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            spinner.join()
        end = guard.sample()
        machine_busy = (end[1] - start[1]) / (end[2] - start[2]) * os.cpu_count()
        own = end[3] - start[3]  # about one core-second of spinning
        assert own > 0.5
        assert guard.others_busy(start, end) == pytest.approx(max(0.0, machine_busy - own / (end[0] - start[0])),
                                                              abs=0.25)
        guard.mark = guard.sample()
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count())]
        try:
            time.sleep(1.0)
            guard.check()
            assert torch.get_num_threads() == 1  # every core busy elsewhere: one thread
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    finally:
        torch.set_num_threads(before)


def test_progress_shows_the_rate_since_start_before_the_sps_clock_starts(capsys, monkeypatch):
    # off-policy scripts start their SPS clock when learning starts; the steps before it still show a speed, not 0
    args = type("Args", (), {"save_model": False, "exp_name": "x", "progress": True, "progress_interval": 0.0,
                             "torch_threads": 1, "checkpoint_frequency": 0, "max_runtime": 0.0})()
    now = [1000.0]
    monkeypatch.setattr(runtime.time, "time", lambda: now[0])
    run = runtime.Run(args, "dqn.py", "r", ".", None, torch.device("cpu"), None, 10, 100, 0)
    run.progress.terminal = False
    now[0] += 4.0
    run.end_of_iteration(1, 200, None)  # no clock yet: 200 steps in 4 s since the run began
    run.start_clock(200)
    now[0] += 2.0
    run.end_of_iteration(2, 300, None)  # the clock's rate: 100 steps in 2 s
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(", ")[1] for line in lines] == ["50 SPS", "50 SPS"]
    now[0] += 2.0
    run.end_of_iteration(3, 600, None)  # 400 steps in 4 s since the clock started
    assert capsys.readouterr().err.split(", ")[1] == "100 SPS"


def test_a_resumed_run_shows_the_returns_it_showed_when_stopped(workdir):
    @dataclass
    class Args:
        save_model: bool = True
        exp_name: str = "x"
        progress: bool = True
        progress_interval: float = 30.0
        torch_threads: int = 1
        checkpoint_frequency: int = 0
        max_runtime: float = 0.0

    stopped = runtime.Run(Args(), "ppo.py", "r", str(workdir), None, torch.device("cpu"), None, 10, 100, 0)
    for episodic_return in (1.0, 2.0, 6.0):
        stopped.progress.episode(episodic_return)
    stopped.envs = environments.make_envs("CartPole-v1", 1, False, "x")
    stopped.save(3, 300, np.zeros(1), finished=False)
    saved = checkpoints.load_checkpoint(str(workdir / "checkpoint.pt"), "ppo.py")
    assert saved["recent_returns"] == [1.0, 2.0, 6.0]
    resumed = runtime.Run(Args(), "ppo.py", "r", str(workdir), None, torch.device("cpu"), saved, 10, 100, 0)
    assert resumed.progress.recent_return() == "3.0"
    # a checkpoint written before the entry existed resumes with an empty line, as before
    older = runtime.Run(Args(), "ppo.py", "r", str(workdir), None, torch.device("cpu"), a_checkpoint(), 10, 100, 0)
    assert older.progress.recent_return() == "-"


def test_a_state_that_does_not_fit_names_the_entries_and_shapes():
    wide, narrow = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)), nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2))
    why = checkpoints.state_mismatch(narrow, wide.state_dict())
    assert why == ("shapes differ: 0.weight (8, 4) in the file, (6, 4) here; 0.bias (8,) in the file, (6,) here; "
                   "1.weight (2, 8) in the file, (2, 6) here")
    extra = dict(wide.state_dict(), scale=torch.ones(1))
    del extra["1.bias"]
    assert checkpoints.state_mismatch(wide, extra) == "missing from the file: 1.bias, not in this network: scale"
    assert checkpoints.state_mismatch(wide, wide.state_dict()) is None


def test_eval_only_of_a_checkpoint_builds_the_network_from_the_saved_flags(workdir, monkeypatch):
    """A flag the command line does not give comes from the checkpoint (a network a flag shapes is rebuilt as it was
    trained); one it gives wins; the evaluation's own flags (--eval-episodes, ...) never come from the file."""
    from tests.helpers import run_script, single_run_dir
    run_script("dqn.py", "--total-timesteps", "600", "--learning-starts", "500", "--batch-size", "16", "--seed", "7",
               "--gamma", "0.9", "--eval-episodes", "3", "--no-progress", "--save-model", cwd=workdir)
    path = str(single_run_dir(workdir) / "checkpoint.pt")
    import dqn
    seen = {}

    def make(saved):
        seen.update(seed=args.seed, gamma=args.gamma, episodes=args.eval_episodes)
        return dqn.make_q_network(args.env_id)

    monkeypatch.setattr(runtime, "evaluate_only", lambda evaluate, args: [1.0])
    monkeypatch.setattr("sys.argv", ["dqn.py", "--eval-only", path, "--gamma", "0.5"])
    args = dqn.Args(eval_only=path, gamma=0.5)
    with pytest.raises(SystemExit) as stop:
        runtime.eval_only(args, "q_network", make, lambda *a: [1.0])
    assert stop.value.code == 0
    assert seen == {"seed": 7, "gamma": 0.5, "episodes": dqn.Args().eval_episodes}
