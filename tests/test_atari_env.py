"""The shared Atari env block of cleanrl/ppo_atari.py: both backends agree, and scores are real.

The block is copied verbatim into other Atari scripts (`# [shared:atari-env]`), so testing it here tests them.
"""

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="optional dependency ale-py (pip install '.[atari]') is not installed")
pytest.importorskip("cv2", reason="optional dependency opencv-python (pip install '.[atari]') is not installed")

import gymnasium as gym  # noqa: E402
from ale_py.vector_env import AtariVectorEnv  # noqa: E402

from environments import AtariGameStatistics, atari_emulator_settings
from environments import make_atari_envs  # noqa: E402


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
