"""The frame-deduplicating Atari replay memory of cleanrl/dqn_atari.py (shared with c51_atari.py), with its frames in
host memory (a numpy array) and as a tensor (on a GPU in the scripts; on the CPU here, the same code)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from atari_envs import make_atari_envs
from replay_memory import FrameReplayBuffer, atari_true_next_obs, frame_replay_buffer

CPU = torch.device("cpu")
FRAMES = pytest.mark.parametrize("on_device", [False, True], ids=["host-frames", "tensor-frames"])


def tiny_buffer(buffer_size: int, stack: int = 2, on_device: bool = False) -> FrameReplayBuffer:
    """Frames of one pixel whose value names them, so stacks can be read as lists of frame ids."""
    space = gym.spaces.Box(0, 255, (stack, 1, 1), np.uint8)
    return FrameReplayBuffer(buffer_size, space, gym.spaces.Discrete(4), 1, CPU, seed=0, frames_on_device=on_device)


def stack(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.uint8).reshape(1, len(ids), 1, 1)


def as_ids(t: torch.Tensor) -> list[list[int]]:
    return t.reshape(len(t), -1).tolist()


def add(rb, obs, nxt, action, reward, term):
    rb.add(obs, nxt, np.array([action]), np.array([reward], np.float32), np.array([term], np.float32))


@FRAMES
def test_hand_traced_ring_with_a_game_end_and_wrap_around(on_device):
    # stack 2, buffer_size 4 -> 4 + 4 // 64 + 2 = 6 frame slots
    rb = tiny_buffer(4, on_device=on_device)
    assert isinstance(rb.frames, torch.Tensor) == on_device
    assert rb.capacity == 6
    # game A, zero-padded start [0, 1]; the third step ends it (terminated) with final observation [3, 4]
    add(rb, stack(0, 1), stack(1, 2), 1, 0.5, 0)  # writes 0, 1 (slots 0, 1) and 2 (slot 2); transition in slot 1
    add(rb, stack(1, 2), stack(2, 3), 2, 0.0, 0)  # continues: writes 3 (slot 3); transition in slot 2
    add(rb, stack(2, 3), stack(3, 4), 3, 1.0, 1)  # writes the final frame 4 (slot 4); transition in slot 3
    np.testing.assert_array_equal(rb.frames[0, :5, 0, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(rb.valid[0], [False, True, True, True, False, False])
    data = rb.transitions(np.zeros(3, np.int64), np.array([1, 2, 3]))
    assert as_ids(data.observations) == [[0, 1], [1, 2], [2, 3]]
    assert as_ids(data.next_observations) == [[1, 2], [2, 3], [3, 4]]
    assert data.actions.tolist() == [1, 2, 3] and data.rewards.tolist() == [0.5, 0.0, 1.0]
    assert data.terminations.tolist() == [0.0, 0.0, 1.0]

    # game B does not continue the ring ([0, 11] != [3, 4]): both frames are written (slots 5 and 0, wrapping),
    # then its next frame 12 (slot 1). Overwriting slots 0 and 1 drops game A's transitions in slots 1 and 2,
    # whose stacks would now mix in game B's frames.
    add(rb, stack(0, 11), stack(11, 12), 0, 0.0, 0)
    np.testing.assert_array_equal(rb.frames[0, :, 0, 0], [11, 12, 2, 3, 4, 0])
    np.testing.assert_array_equal(rb.valid[0], [True, False, False, True, False, False])
    add(rb, stack(11, 12), stack(12, 13), 2, -1.0, 0)  # writes 13 into slot 2: game A's last transition goes too
    np.testing.assert_array_equal(rb.valid[0], [True, True, False, False, False, False])
    assert len(rb) == 2

    samples = rb.sample(200)
    pairs = {(tuple(o), tuple(n)) for o, n in zip(as_ids(samples.observations), as_ids(samples.next_observations))}
    assert pairs == {((0, 11), (11, 12)), ((11, 12), (12, 13))}
    by_obs = dict(zip(map(tuple, as_ids(samples.observations)), zip(samples.actions.tolist(), samples.rewards.tolist())))
    assert by_obs == {(0, 11): (0, 0.0), (11, 12): (2, -1.0)}


@FRAMES
def test_a_lost_life_continues_the_ring_without_new_frames(on_device):
    # after a lost life the game goes on: the next observation [2, 3] is the following step's observation
    rb = tiny_buffer(8, on_device=on_device)
    add(rb, stack(0, 1), stack(1, 2), 0, 0.0, 0)
    add(rb, stack(1, 2), stack(2, 3), 0, 0.0, 1)  # life lost: terminated, but the game continues
    add(rb, stack(2, 3), stack(3, 4), 0, 0.0, 0)
    assert rb.written[0] == 5  # frames 0, 1, 2, 3, 4 once each
    data = rb.transitions(np.zeros(3, np.int64), np.array([1, 2, 3]))
    assert as_ids(data.observations) == [[0, 1], [1, 2], [2, 3]]
    assert data.terminations.tolist() == [0.0, 1.0, 0.0]


@FRAMES
def test_sampling_before_any_transition_and_a_broken_stack_are_refused(on_device):
    rb = tiny_buffer(8, on_device=on_device)
    with pytest.raises(ValueError, match="no complete transition"):
        rb.sample(4)
    with pytest.raises(ValueError, match="frame stack"):
        add(rb, stack(0, 1), stack(5, 2), 0, 0.0, 0)
    assert rb.written[0] == 0 and not rb.pending  # refused before anything was written


def test_frames_as_a_tensor_give_the_same_samples_and_checkpoints_as_in_host_memory():
    # two envs of random one-pixel frames with game ends (new stacks) and a ring that wraps; one seed
    host, tensor = tiny_buffer(20, stack=3), tiny_buffer(20, stack=3, on_device=True)
    rng = np.random.default_rng(0)

    def fill(buffers, steps: int) -> None:
        obs = rng.integers(0, 255, (2, 3, 1, 1), dtype=np.uint8)
        for _ in range(steps):
            nxt = np.concatenate([obs[:, 1:], rng.integers(0, 255, (2, 1, 1, 1), dtype=np.uint8)], axis=1)
            action, reward, term = rng.integers(0, 4, 2), rng.normal(size=2).astype(np.float32), rng.random(2) < 0.1
            for rb in buffers:
                rb.add(obs, nxt, action, reward, term.astype(np.float32))
            obs = np.where(term[:, None, None, None], rng.integers(0, 255, (2, 3, 1, 1), dtype=np.uint8), nxt)

    def assert_same_samples(a, b):
        for x, y in zip(a.sample(64), b.sample(64)):
            assert torch.equal(x, y)

    fill((host, tensor), 37)
    assert_same_samples(host, tensor)
    np.testing.assert_array_equal(host.frames, tensor.frames.numpy())
    # each memory's state loads into the other kind, and both go on as one
    host_state, tensor_state = host.state_dict(), tensor.state_dict()
    assert host_state.keys() == tensor_state.keys()
    for key, value in host_state.items():
        assert torch.equal(value, tensor_state[key]) if isinstance(value, torch.Tensor) else value == tensor_state[key]
    host2, tensor2 = tiny_buffer(20, stack=3), tiny_buffer(20, stack=3, on_device=True)
    host2.load_state_dict(tensor_state)
    tensor2.load_state_dict(host_state)
    for a, b in ((host, host2), (tensor, tensor2)):
        b.rng.bit_generator.state = a.rng.bit_generator.state
    fill((host, tensor, host2, tensor2), 11)
    assert_same_samples(host, host2)
    assert_same_samples(tensor, tensor2)
    assert_same_samples(host, tensor)


def test_frame_memory_on_the_cpu_keeps_its_frames_in_host_memory():
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    rb = frame_replay_buffer(100, space, gym.spaces.Discrete(4), 2, CPU, seed=0)
    assert isinstance(rb.frames, np.ndarray) and rb.where == "host memory"
    assert tiny_buffer(8, on_device=True).where == "frames in cpu memory"


def test_true_next_obs_takes_final_obs_only_where_a_game_ended():
    next_obs = np.zeros((2, 4, 2, 2), np.uint8)
    final = np.full((2, 4, 2, 2), 7, np.uint8)
    dense = {"final_obs": final, "_episode": np.array([False, True]), "life_lost": np.array([True, False])}
    real = atari_true_next_obs(next_obs, dense)
    assert (real[0] == 0).all() and (real[1] == 7).all()
    objects = np.empty(2, dtype=object)
    objects[0] = final[0]
    real = atari_true_next_obs(next_obs, {"final_obs": objects, "_episode": np.array([True, False])})
    assert (real[0] == 7).all() and (real[1] == 0).all()
    assert (atari_true_next_obs(next_obs, {"life_lost": np.array([True, True])}) == 0).all()


def test_default_footprint_is_under_8_gib():
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    rb = FrameReplayBuffer(1_000_000, space, gym.spaces.Discrete(4), 1, CPU, seed=0, touch=False)
    # 1,000,000 + 15,625 + 4 slots of 7056 (frame) + 8 (action) + 4 (reward) + 4 (termination) + 1 (valid) bytes
    assert rb.capacity == 1_015_629
    assert rb.nbytes == 1_015_629 * 7073 == 7_183_543_917
    assert rb.nbytes / 2**30 < 6.7
    assert FrameReplayBuffer.frames_nbytes(1_000_000, 1) == 1_015_629 * 7056  # what a GPU would hold


@pytest.mark.parametrize("backend, num_envs, on_device", [("ale-vector", 2, False), ("gymnasium", 1, False),
                                                         ("ale-vector", 2, True)])
def test_rebuilt_stacks_equal_what_the_agent_saw(backend, num_envs, on_device):
    # Real Breakout with random actions: lost lives (terminated, the game goes on), game overs and games cut by
    # a short frame limit (truncated), through the same env and next-observation code as the scripts. The ring
    # is small, so it wraps many times. Every transition still in the memory must come back exactly as seen.
    envs = make_atari_envs("BreakoutNoFrameskip-v4", num_envs, backend, max_frames=560)
    rb = FrameReplayBuffer(300, envs.single_observation_space, envs.single_action_space, num_envs, CPU, seed=0,
                           frames_on_device=on_device)
    rng = np.random.default_rng(0)
    seen = [[] for _ in range(num_envs)]
    counts = dict(life_lost=0, game_over=0, truncated=0)
    obs, _ = envs.reset(seed=5)
    for _ in range(700):
        actions = rng.integers(0, envs.single_action_space.n, size=num_envs)
        next_obs, rewards, terms, truncs, infos = envs.step(actions)
        real_next = atari_true_next_obs(next_obs, infos)
        rb.add(obs, real_next, actions, rewards, terms)
        for e in range(num_envs):
            seen[e].append((obs[e].copy(), real_next[e].copy(), actions[e], rewards[e], terms[e]))
        counts["life_lost"] += int(infos["life_lost"].sum())
        counts["truncated"] += int(truncs.sum())
        counts["game_over"] += int(np.logical_and(terms, ~infos["life_lost"]).sum())
        obs = next_obs
    envs.close()
    assert all(v > 0 for v in counts.values()), counts

    for e in range(num_envs):
        # the valid slots, oldest first, hold the most recent transitions of env e in order
        order = (rb.newest[e] + 1 + np.arange(rb.capacity)) % rb.capacity
        slots = order[rb.valid[e, order]]
        assert len(slots) >= 0.9 * 300 / num_envs
        data = rb.transitions(np.full(len(slots), e), slots)
        for k, (o, n, a, r, t) in enumerate(seen[e][-len(slots) :]):
            np.testing.assert_array_equal(data.observations[k].numpy(), o)
            np.testing.assert_array_equal(data.next_observations[k].numpy(), n)
            assert (data.actions[k].item(), data.rewards[k].item(), data.terminations[k].item()) == (a, r, float(t))
        # the transition just before the oldest kept one has lost a frame to the write head
        assert not rb.valid[e, (slots[0] - 1) % rb.capacity]
