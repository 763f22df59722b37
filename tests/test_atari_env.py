"""The Atari envs of cleanrl/atari_envs.py that every Atari script builds: both backends agree, scores are real,
two pipelined halves step each env as one batch does, and the worker threads come from the free cores.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py", reason="optional dependency ale-py (pip install '.[atari]') is not installed")
pytest.importorskip("cv2", reason="optional dependency opencv-python (pip install '.[atari]') is not installed")

import gymnasium as gym  # noqa: E402
from ale_py.vector_env import AtariVectorEnv  # noqa: E402

from atari_envs import AtariGameStatistics, atari_emulator_settings, concat_infos, make_atari_envs
from environments import OnDevice  # noqa: E402


def test_native_and_gymnasium_backends_agree_frame_for_frame():
    # Without noops (the two backends draw their noop counts from different RNGs) and without sticky actions,
    # the emulator is deterministic, so everything must match exactly: frames, clipped rewards, life-loss
    # terminations, game ends (with the autoreset into the next game) and the logged real scores.
    native = make_atari_envs("BreakoutNoFrameskip-v4", 2, "ale-vector", noop_max=0)
    wrapped = make_atari_envs("BreakoutNoFrameskip-v4", 2, "gymnasium", noop_max=0)
    assert native.single_observation_space == wrapped.single_observation_space
    assert native.single_observation_space.shape == (4, 84, 84)
    assert native.single_observation_space.dtype == np.uint8
    assert native.single_action_space == wrapped.single_action_space == gym.spaces.Discrete(4)

    obs_n, info_n = native.reset(seed=3)
    obs_w, info_w = wrapped.reset(seed=3)
    assert obs_n.dtype == obs_w.dtype == np.uint8
    np.testing.assert_array_equal(obs_n, obs_w)
    assert not obs_n[:, :3].any() and obs_n[:, 3].any(), "a new game's stack is [0, 0, 0, first frame]"
    np.testing.assert_array_equal(info_n["lives"], info_w["lives"])

    rng = np.random.default_rng(0)
    life_losses, games, nonzero_rewards = 0, 0, 0
    for step in range(700):
        actions = rng.integers(0, 4, size=2)
        obs_n, r_n, term_n, trunc_n, info_n = native.step(actions)
        obs_w, r_w, term_w, trunc_w, info_w = wrapped.step(actions)
        np.testing.assert_array_equal(obs_n, obs_w, err_msg=f"step {step}")
        np.testing.assert_array_equal(r_n, r_w, err_msg=f"step {step}")
        np.testing.assert_array_equal(term_n, term_w, err_msg=f"step {step}")
        np.testing.assert_array_equal(trunc_n, trunc_w, err_msg=f"step {step}")
        np.testing.assert_array_equal(info_n["life_lost"], info_w["life_lost"], err_msg=f"step {step}")
        assert ("episode" in info_n) == ("episode" in info_w)
        if "episode" in info_n:
            np.testing.assert_array_equal(info_n["_episode"], info_w["_episode"])
            np.testing.assert_array_equal(info_n["episode"]["r"], info_w["episode"]["r"])
            np.testing.assert_array_equal(info_n["episode"]["l"], info_w["episode"]["l"])
            game_over = info_n["_episode"]
            final_n, final_w = np.stack(info_n["final_obs"][game_over]), np.stack(info_w["final_obs"][game_over])
            np.testing.assert_array_equal(final_n, final_w)
            games += game_over.sum()
        life_losses += info_n["life_lost"].sum()
        nonzero_rewards += np.count_nonzero(r_n)
    # the run must have exercised what it claims to compare
    assert life_losses >= 4 and games >= 2 and nonzero_rewards >= 2, (life_losses, games, nonzero_rewards)
    native.close()
    wrapped.close()


def test_logged_return_is_the_real_score_of_a_whole_game():
    # Space Invaders pays 5 to 30 points per alien and has 3 lives, so a clipped or per-life return differs.
    # Reference: ale-py's vector env used directly, no clipping, no episodic life; same seed and actions.
    settings = atari_emulator_settings("SpaceInvadersNoFrameskip-v4")
    reference = AtariVectorEnv(
        settings["game"], 1, autoreset_mode="SameStep", reward_clipping=False, episodic_life=False, noop_max=30
    )
    envs = make_atari_envs("SpaceInvadersNoFrameskip-v4", 1, "ale-vector", noop_max=30)
    reference.reset(seed=5)
    envs.reset(seed=5)
    rng = np.random.default_rng(1)
    raw_score, clipped_sum, life_loss_terminations, logged = 0.0, 0.0, 0, None
    for _ in range(5000):
        actions = rng.integers(0, envs.single_action_space.n, size=1)
        _, ref_reward, ref_term, ref_trunc, _ = reference.step(actions)
        _, reward, term, trunc, info = envs.step(actions)
        raw_score += float(ref_reward[0])
        clipped_sum += float(reward[0])
        assert reward[0] in (-1.0, 0.0, 1.0)
        if "episode" in info:
            logged = info["episode"]
            assert ref_term[0] or ref_trunc[0], "the logged game ends when the real game ends"
            break
        life_loss_terminations += int(term[0])
        assert not (ref_term[0] or ref_trunc[0])
    assert logged is not None, "no game ended within 5000 steps"
    assert logged["r"][0] == raw_score
    assert raw_score > clipped_sum, "rewards above 1 must have been clipped for learning"
    assert life_loss_terminations == 2, "each of the first two lost lives ends a learning episode"
    reference.close()
    envs.close()


class ScriptedVectorEnv(gym.vector.VectorEnv):
    """Two fake games whose rewards, lives and game ends are scripted step by step."""

    def __init__(self, script):
        self.num_envs = 2
        self.single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.single_action_space = gym.spaces.Discrete(4)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 2)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 2)
        self.script = script

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros((2, 4, 84, 84), np.uint8), {"lives": np.array([3, 5])}

    def step(self, actions):
        rewards, lives, terminated, truncated = self.script[self.t]
        self.t += 1
        info = {"lives": np.array(lives)}
        return np.zeros((2, 4, 84, 84), np.uint8), np.array(rewards), np.array(terminated), np.array(truncated), info


def test_game_statistics_by_hand():
    # env 0: rewards 4, -2, 30 and a lost life at step 1; at step 2 the game is over (lives already reset to 3).
    # env 1: reward 1 and a lost life at step 0, nothing at step 1, cut by the frame limit at step 2 (lives 5).
    script = [
        ([4, 1], [3, 4], [False, False], [False, False]),
        ([-2, 0], [2, 4], [False, False], [False, False]),
        ([30, 0], [3, 5], [True, False], [False, True]),
        ([7, 2], [3, 5], [False, False], [False, False]),
    ]
    envs = AtariGameStatistics(ScriptedVectorEnv(script))
    envs.reset()
    steps = [envs.step(np.zeros(2, dtype=np.int64)) for _ in range(4)]
    rewards = np.stack([s[1] for s in steps])
    terminated = np.stack([s[2] for s in steps])
    truncated = np.stack([s[3] for s in steps])
    np.testing.assert_array_equal(rewards, [[1, 1], [-1, 0], [1, 0], [1, 1]])
    np.testing.assert_array_equal(terminated, [[False, True], [True, False], [True, False], [False, False]])
    np.testing.assert_array_equal(truncated, [[False, False], [False, False], [False, True], [False, False]])
    assert "episode" not in steps[0][4] and "episode" not in steps[1][4] and "episode" not in steps[3][4]
    info = steps[2][4]
    np.testing.assert_array_equal(info["_episode"], [True, True])
    np.testing.assert_array_equal(info["episode"]["r"], [4 - 2 + 30, 1])  # raw score, all lives
    np.testing.assert_array_equal(info["episode"]["l"], [3, 3])
    # the counters restart with the next game
    assert envs.game_returns.tolist() == [7.0, 2.0] and envs.game_lengths.tolist() == [1, 1]

    raw = AtariGameStatistics(ScriptedVectorEnv(script), terminal_on_life_loss=False, clip_rewards=False)
    raw.reset()
    first = raw.step(np.zeros(2, dtype=np.int64))
    np.testing.assert_array_equal(first[1], [4, 1])
    np.testing.assert_array_equal(first[2], [False, False])
    np.testing.assert_array_equal(first[4]["life_lost"], [False, True])


@pytest.mark.parametrize(
    "env_id, settings",
    [
        ("BreakoutNoFrameskip-v4", dict(game="breakout", repeat_action_probability=0.0, full_action_space=False)),
        ("ALE/Pong-v5", dict(game="pong", repeat_action_probability=0.25, full_action_space=False)),
    ],
)
def test_accepted_ids_map_to_emulator_settings(env_id, settings):
    assert atari_emulator_settings(env_id) == dict(settings, max_num_frames_per_episode=108000)


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("NoSuchGame-v0", "NoSuchGame-v0"),
        ("CartPole-v1", "not an Atari game"),
        ("Breakout-v4", "not supported"),
        ("BreakoutNoFrameskip-v0", "not supported"),
    ],
)
def test_refused_ids_fail_in_one_line(env_id, message):
    with pytest.raises(SystemExit) as exc:
        atari_emulator_settings(env_id)
    text = str(exc.value.code)
    assert text.startswith("error:") and message in text and "\n" not in text


def test_sticky_v5_ids_run_on_both_backends_and_time_limit_truncates(workdir):
    # ALE/Pong-v5: sticky actions draw from each backend's own RNG, so only shapes and semantics are compared.
    # A 120-frame limit (30 agent steps) truncates every game; the autoreset keeps the last frame in final_obs.
    # No noops: ALE counts the reset's noop frames towards the limit, the native env does not.
    for backend in ("ale-vector", "gymnasium"):
        envs = make_atari_envs(
            "ALE/Pong-v5", 2, backend, noop_max=0, max_frames=120, capture_video=True, run_name=backend
        )
        assert envs.single_action_space == gym.spaces.Discrete(6)
        envs.reset(seed=1)
        for step in range(30):
            obs, _, terminated, truncated, info = envs.step(np.zeros(2, dtype=np.int64))
            if truncated.any():
                break
        assert truncated.all() and not terminated.any(), (backend, step)
        assert info["_episode"].all() and info["episode"]["l"].tolist() == [step + 1] * 2
        assert np.stack(info["final_obs"]).shape == (2, 4, 84, 84)
        assert not obs[:, :3].any(), "the observation is already the next game's first"
        envs.close()
        assert list((workdir / "videos" / backend).glob("*.mp4")), f"{backend}: no video of env 0's game"


@pytest.mark.parametrize("backend", ["ale-vector", "gymnasium"])
def test_each_env_steps_the_same_in_two_pipelined_halves_as_in_one_batch(backend):
    # 5 envs: halves of 3 and 2. Both vector envs get the same fixed action sequence; the grouped one steps its
    # halves with send/recv (the second half sent while the first still steps). Short games (a 400-frame limit)
    # put truncations, game overs and autoresets into the comparison.
    n = 5
    whole = make_atari_envs("BreakoutNoFrameskip-v4", n, backend, max_frames=400, threads=2)
    halves = make_atari_envs("BreakoutNoFrameskip-v4", n, backend, max_frames=400, groups=2, threads=2)
    assert halves.halves == [slice(0, 3), slice(3, 5)] and whole.halves == [slice(0, 5)]
    obs_whole, _ = whole.reset(seed=3)
    obs_halves, _ = halves.reset(seed=3)
    np.testing.assert_array_equal(obs_whole, obs_halves)
    rng, games, truncations = np.random.default_rng(0), 0, 0
    for t in range(300):
        actions = rng.integers(0, 4, n)
        obs, reward, terminated, truncated, info = whole.step(actions)
        for g, half in enumerate(halves.halves):
            halves.send(actions[half], g)
        assert halves.in_flight == 2
        for g, half in enumerate(halves.halves):  # received in the order sent
            got_half, h_obs, h_reward, h_terminated, h_truncated, h_info = halves.recv()
            assert got_half == half
            for mine, theirs in ((h_obs, obs), (h_reward, reward), (h_terminated, terminated), (h_truncated, truncated),
                                 (h_info["lives"], info["lives"]), (h_info["life_lost"], info["life_lost"])):
                np.testing.assert_array_equal(mine, theirs[half], err_msg=f"step {t}, envs {half}")
            if "episode" in info and info["_episode"][half].any():
                np.testing.assert_array_equal(h_info["_episode"], info["_episode"][half])
                for key in ("r", "l"):
                    np.testing.assert_array_equal(h_info["episode"][key][h_info["_episode"]],
                                                  info["episode"][key][half][info["_episode"][half]])
                for i in np.flatnonzero(h_info["_episode"]):
                    np.testing.assert_array_equal(h_info["final_obs"][i], info["final_obs"][half][i])
            else:
                assert "episode" not in h_info or not h_info["_episode"].any()
        assert halves.in_flight == 0
        games += int(np.logical_or(terminated, truncated).sum())
        truncations += int(truncated.sum())
    assert games >= 5 and truncations >= 1, (games, truncations)
    whole.close()
    halves.close()


def test_on_device_rollout_over_two_halves_stores_what_one_batch_steps_and_acts_while_the_other_half_steps():
    # OnDevice.rollout over two halves against OnDevice.step of one batch, with the same actions per (step, env):
    # every stored tensor, its dtype and the truncated envs' final frames agree, and act for a half comes before the
    # other half's step of the previous rollout step is stored (the pipelining).
    n, steps = 5, 120  # games of 400 frames: 100 steps
    actions = torch.as_tensor(np.random.default_rng(0).integers(0, 4, (steps, n)))
    whole = OnDevice(make_atari_envs("BreakoutNoFrameskip-v4", n, "ale-vector", max_frames=400), torch.device("cpu"))
    halves = OnDevice(make_atari_envs("BreakoutNoFrameskip-v4", n, "ale-vector", max_frames=400, groups=2),
                      torch.device("cpu"))
    whole.reset(seed=3)
    halves.reset(seed=3)
    expected, got, calls = [], {}, []
    for t in range(steps):
        obs, reward, terminated, truncated, _ = whole.step(actions[t])
        final = whole.truncated_final_obs()
        expected.append((obs.clone(), reward, terminated, truncated, final))
        assert obs.dtype == torch.uint8 and reward.dtype == torch.float32 and terminated.dtype == torch.bool

    def act(step, half):
        calls.append(("act", step, half.start))
        return actions[step, half]

    def store(step, half, obs, reward, terminated, truncated, info):
        calls.append(("store", step, half.start))
        got[step, half.start] = (obs.clone(), reward, terminated, truncated, halves.truncated_final_obs())

    halves.rollout(steps, act, store)
    assert calls[:6] == [("act", 0, 0), ("act", 0, 3), ("store", 0, 0), ("act", 1, 0), ("store", 0, 3), ("act", 1, 3)]
    truncations = 0
    for t, (obs, reward, terminated, truncated, final) in enumerate(expected):
        for half in (slice(0, 3), slice(3, 5)):
            h_obs, h_reward, h_terminated, h_truncated, h_final = got[t, half.start]
            for mine, theirs in ((h_obs, obs), (h_reward, reward), (h_terminated, terminated),
                                 (h_truncated, truncated)):
                assert torch.equal(mine, theirs[half]), f"step {t}, envs {half}"
            in_half = None if final is None else (final[0] >= half.start) & (final[0] < half.stop)
            if in_half is None or not in_half.any():
                assert h_final is None
            else:
                truncations += 1
                assert torch.equal(h_final[0], final[0][in_half]) and torch.equal(h_final[1], final[1][in_half])
    assert truncations >= 1
    whole.close()
    halves.close()


def test_the_infos_of_the_halves_join_as_one_vector_envs_info():
    # a game over in the first half (of 2 envs) only: its entries are filled for the second half's 3 envs with
    # False, zeros or None, as a vector env fills an entry for the envs it does not concern
    first = {"lives": np.array([5, 4]), "_episode": np.array([False, True]),
             "episode": {"r": np.array([0.0, 7.0]), "l": np.array([0, 90])},
             "final_obs": np.array([None, "frames"], dtype=object)}
    second = {"lives": np.array([3, 2, 1])}
    joined = concat_infos([first, second], [2, 3])
    np.testing.assert_array_equal(joined["lives"], [5, 4, 3, 2, 1])
    np.testing.assert_array_equal(joined["_episode"], [False, True, False, False, False])
    np.testing.assert_array_equal(joined["episode"]["r"], [0.0, 7.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(joined["episode"]["l"], [0, 90, 0, 0, 0])
    assert joined["final_obs"].tolist() == [None, "frames", None, None, None]
    # ale-py's final observations are one uint8 array: zeros for the envs of a half without them
    frames = {"final_obs": np.ones((1, 4, 84, 84), np.uint8)}
    joined = concat_infos([{}, frames], [2, 1])
    assert joined["final_obs"].shape == (3, 4, 84, 84) and joined["final_obs"][:2].max() == 0
    assert joined["final_obs"][2].min() == 1


def test_env_threads_take_the_free_cores_a_share_under_torchrun_or_the_flag(monkeypatch):
    from atari_envs import env_worker_threads

    assert env_worker_threads(3) == (3, "--env-threads")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cores = len(os.sched_getaffinity(0))
    assert env_worker_threads(0) == (max(1, cores // 2), f"{cores} cores shared by 2 ranks on this node")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    # a process spinning on one core leaves the others: on this 2-core machine, one
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        threads, why = env_worker_threads(0)
    finally:
        spinner.kill()
        spinner.wait()
    assert 1 <= threads <= max(1, os.cpu_count() - 1) and why.endswith(f"of {os.cpu_count()} cores free"), why
