"""The flat replay buffer shared from cleanrl/dqn.py: wrap-around, sampling, and true next observations; and its
twin in device memory (replay_memory.DeviceReplayBuffer, run here on the CPU), which must hold the same transitions."""

import gymnasium as gym
import numpy as np
import torch

import checkpoints
from replay_memory import DeviceReplayBuffer, ReplayBuffer, true_next_obs

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


def filled(buffer_size: int, n_steps: int, n_envs: int = 1, action_space=gym.spaces.Discrete(3),
           kind=ReplayBuffer) -> ReplayBuffer:
    """Transition k of env e has obs (k, e), next obs (k + 0.5, e), reward k, action k % 3, terminated k % 2."""
    rb = kind(buffer_size, OBS_SPACE, action_space, torch.device("cpu"), seed=0)
    for k in range(n_steps):
        e = np.arange(n_envs, dtype=np.float32)
        obs = np.stack([np.full(n_envs, k, np.float32), e], axis=1)
        nxt = np.stack([np.full(n_envs, k + 0.5, np.float32), e], axis=1)
        rb.add(obs, nxt, np.full(n_envs, k % 3), np.full(n_envs, float(k)), np.full(n_envs, float(k % 2)))
    return rb


def test_ring_keeps_the_most_recent_transitions_after_wrapping():
    rb = filled(buffer_size=5, n_steps=7)
    assert len(rb) == 5 and rb.full and rb.pos == 2
    # slots 0, 1 were overwritten by steps 5, 6; slots 2..4 still hold steps 2..4
    np.testing.assert_array_equal(rb.observations[:, 0], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(rb.next_observations[:, 0], [5.5, 6.5, 2.5, 3.5, 4.5])
    np.testing.assert_array_equal(rb.rewards, [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(rb.actions, [2, 0, 2, 0, 1])
    np.testing.assert_array_equal(rb.terminations, [1, 0, 0, 1, 0])


def test_several_envs_per_add_wrap_across_the_end():
    rb = filled(buffer_size=5, n_steps=3, n_envs=2)  # 6 transitions into 5 slots
    assert len(rb) == 5 and rb.pos == 1
    np.testing.assert_array_equal(rb.observations, [[2, 1], [0, 1], [1, 0], [1, 1], [2, 0]])


def test_before_wrapping_only_written_slots_are_sampled():
    rb = filled(buffer_size=100, n_steps=4)
    assert len(rb) == 4 and not rb.full
    data = rb.sample(500)
    assert set(data.observations[:, 0].tolist()) == {0.0, 1.0, 2.0, 3.0}
    # every field of a sample comes from the same transition
    torch.testing.assert_close(data.next_observations[:, 0], data.observations[:, 0] + 0.5)
    torch.testing.assert_close(data.rewards, data.observations[:, 0])
    torch.testing.assert_close(data.terminations, data.observations[:, 0] % 2)
    assert data.actions.dtype == torch.int64 and data.rewards.dtype == torch.float32
    torch.testing.assert_close(data.actions, data.observations[:, 0].long() % 3)


def test_continuous_actions_keep_their_shape_and_dtype():
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    rb = ReplayBuffer(4, OBS_SPACE, space, torch.device("cpu"), seed=0)
    rb.add(np.zeros((2, 2), np.float32), np.ones((2, 2), np.float32), np.array([[0.5, -0.5], [0.25, 1.0]]), np.zeros(2), np.zeros(2))
    data = rb.sample(8)
    assert data.actions.shape == (8, 2) and data.actions.dtype == torch.float32


def test_true_next_obs_is_the_final_observation_at_truncation():
    # CartPole cut to 3 steps: the third step truncates; same-step autoreset returns the reset obs and
    # keeps the real last observation in info["final_obs"], which the buffer must store as s'.
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=3), lambda: gym.make("CartPole-v1", max_episode_steps=5)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs, _ = envs.reset(seed=3)
    rb = ReplayBuffer(10, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), seed=0)
    for step in range(3):
        next_obs, rewards, terms, truncs, infos = envs.step(np.array([0, 1]))
        real_next = true_next_obs(next_obs, infos)
        rb.add(obs, real_next, np.array([0, 1]), rewards, terms)
        if step < 2:
            np.testing.assert_array_equal(real_next, next_obs)
        else:
            assert truncs[0] and not terms[0] and not truncs[1]
            np.testing.assert_array_equal(real_next[0], infos["final_obs"][0])
            np.testing.assert_array_equal(real_next[1], next_obs[1])
            assert not np.array_equal(real_next[0], next_obs[0])  # next_obs[0] is the reset observation
            # the stored successor of env 0's last step continues its own trajectory, and it bootstraps
            np.testing.assert_array_equal(rb.next_observations[4], infos["final_obs"][0])
            assert rb.terminations[4] == 0.0
        obs = next_obs
    envs.close()


def test_the_device_memory_holds_the_same_transitions_and_checkpoints_both_ways():
    for n_steps, n_envs in ((7, 1), (3, 2), (2, 2)):  # wrapped, wrapped across the end in one add, not full
        host = filled(5, n_steps, n_envs)
        device = filled(5, n_steps, n_envs, kind=DeviceReplayBuffer)
        assert (len(device), device.pos, device.full) == (len(host), host.pos, host.full)
        for name in ("observations", "next_observations", "actions", "rewards", "terminations"):
            stored = getattr(device, name)
            assert stored.dtype == torch.from_numpy(getattr(host, name)).dtype, name
            np.testing.assert_array_equal(stored.numpy(), getattr(host, name), err_msg=name)
        # a checkpoint of either loads into the other (a run resumed on another kind of device)
        other = filled(5, 0, kind=DeviceReplayBuffer)
        other.load_state_dict(host.state_dict())
        np.testing.assert_array_equal(other.observations.numpy(), host.observations)
        back = filled(5, 0)
        back.load_state_dict(device.state_dict())
        assert (back.pos, back.full) == (host.pos, host.full)
        np.testing.assert_array_equal(back.rewards, host.rewards)


def test_the_device_memory_samples_only_written_slots_from_torchs_generator():
    rb = filled(buffer_size=10, n_steps=4, kind=DeviceReplayBuffer)
    assert int(rb.stored) == 4 and rb.rng is None
    data = rb.sample(200)
    assert set(data.rewards.tolist()) == {0.0, 1.0, 2.0, 3.0}
    np.testing.assert_array_equal(data.next_observations[:, 0].numpy(), data.observations[:, 0].numpy() + 0.5)
    assert data.actions.dtype == torch.int64 and data.actions.tolist() == [int(k) % 3 for k in data.rewards.tolist()]
    # the draws are torch's default generator's (a checkpoint's "rng" entry): restored, it draws the same batch
    state = checkpoints.rng_state()
    first = rb.sample(8).rewards
    checkpoints.set_rng_state(state)
    assert torch.equal(rb.sample(8).rewards, first)
    # the count of stored transitions follows a checkpoint into a fresh memory
    other = filled(buffer_size=10, n_steps=0, kind=DeviceReplayBuffer)
    other.load_state_dict(rb.state_dict())
    assert int(other.stored) == 4 and "stored" not in rb.state_dict()


def test_a_sampling_generator_saved_by_the_other_kind_is_seeded_from_it():
    numpy_state = checkpoints.state_of(np.random.default_rng(3))
    a, b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    checkpoints.load_state_of(a, numpy_state)
    checkpoints.load_state_of(b, numpy_state)
    assert torch.equal(a.get_state(), b.get_state())  # the same saved state, the same seed
    rng = np.random.default_rng(0)
    checkpoints.load_state_of(rng, checkpoints.state_of(torch.Generator().manual_seed(5)))
    assert rng.integers(1 << 30) != np.random.default_rng(0).integers(1 << 30)


def test_a_memory_of_float64_observations_stored_as_float32_holds_float32_and_is_checked_at_that_size(monkeypatch):
    """SAC, TD3 and DDPG store a MuJoCo env's float64 observations as float32 (obs_dtype): the memory holds float32
    rows, and check_fits_env, before the run, counts their bytes at that size and closes the env it probed."""
    import replay_memory
    env = gym.make("Pendulum-v1")
    env.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    rb = replay_memory.replay_buffer(4, env.observation_space, env.action_space, torch.device("cpu"), 0,
                                     obs_dtype=np.float32)
    assert rb.observations.dtype == rb.next_observations.dtype == np.float32
    checked, closed = [], []
    monkeypatch.setattr(replay_memory, "check_memory", lambda flags, nbytes, *a, **k: checked.append(nbytes))
    monkeypatch.setattr(env, "close", lambda: closed.append(True))
    replay_memory.check_fits_env(env, 10, 1, obs_dtype=np.float32)
    assert checked == [10 * (2 * 3 * 4 + 4 + 8)]  # 2 float32 observations, one float32 action, reward and flag
    assert closed == [True]
