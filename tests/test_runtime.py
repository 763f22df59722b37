"""cleanrl/runtime.py on its own: the non-finite check, atomic checkpoints, the state of Generators and replay
memories, run names, the progress line. (Its replay memories and Atari environments have their own files:
test_replay_buffer.py, test_replay_frames.py, test_atari_env.py.)"""

import io
import json
import math
import os
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn
from gymnasium.spaces import Box, Discrete

import runtime
from runtime import ReplayBuffer, find_non_finite, load_state_of, save_checkpoint, state_of


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
class EnvArgs(runtime.RunArgs):
    env_id: str = "CartPole-v1"


@pytest.mark.parametrize("env_id, prefix", [
    ("CartPole-v1", "CartPole-v1__ppo__3__"),
    ("ALE/Pong-v5", "ALE-Pong-v5__ppo__3__"),
    ("mymodule:custom/Env-v1", "mymodule-custom-Env-v1__ppo__3__"),
])
def test_run_names_are_one_directory(env_id, prefix):
    assert runtime.run_prefix(EnvArgs(env_id=env_id, exp_name="ppo", seed=3)) == prefix


def test_env_state_saves_classic_control_and_refuses_what_pickles_by_reconstruction():
    envs = runtime.make_envs("CartPole-v1", 2, False, "x")
    envs.reset(seed=1)
    envs.step(np.array([0, 1]))
    state, why = runtime.env_state(envs)
    assert state is not None and why == ""
    after = [envs.step(np.array([1, 1]))[0] for _ in range(3)]
    copy = runtime.make_envs("CartPole-v1", 2, False, "x")
    copy.reset(seed=99)
    runtime.load_env_state(copy, state)
    assert all((copy.step(np.array([1, 1]))[0] == obs).all() for obs in after)

    class Rebuilt(gym.Env, gym.utils.EzPickle):
        observation_space, action_space = Box(-1, 1, (1,)), Discrete(2)

    sync = gym.vector.SyncVectorEnv([lambda: Rebuilt()])
    state, why = runtime.env_state(sync)
    assert state is None and "Rebuilt pickles by re-construction" in why


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
        "progress: step 200/1000 (20%), 60 SPS, mean return of the last 20 episodes 3.0\n")


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
    assert capsys.readouterr().err == ("\r100/200 steps (50%) | 10 SPS | return -  "
                                       "\r200/200 steps (100%) | 12 SPS | return -  \n")
