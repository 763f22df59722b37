# docs: docs/rl-algorithms/dqn.md (the replay memories)
"""The off-policy scripts' replay memories: ReplayBuffer (a flat ring in host memory), DeviceReplayBuffer (the same
ring in a GPU's memory), FrameReplayBuffer (Atari frame stacks, every frame stored once, the frames in host or GPU
memory), and the true next observation of an episode's last step under same-step autoreset."""

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

from messages import fail, say
from speed import PinnedStaging, available_memory, check_memory, gpu_path


class ReplayBufferSamples(NamedTuple):
    observations: torch.Tensor  # (batch, *obs_shape)
    actions: torch.Tensor  # (batch, *action_shape), the action space's dtype (int64 for Discrete)
    next_observations: torch.Tensor  # (batch, *obs_shape), the true successor (final_obs at an episode end)
    rewards: torch.Tensor  # (batch,) float32
    terminations: torch.Tensor  # (batch,) float32: 1 only if the successor is terminal; a truncation stores 0


def check_holds_a_step(buffer_size: int, num_envs: int) -> None:
    """A memory stores a step of every env at once: it must hold at least num_envs transitions."""
    if buffer_size < num_envs:
        fail(f"--buffer-size {buffer_size} is smaller than one step of --num-envs {num_envs}")

class MemoryState:
    """state_dict()/load_state_dict() of a replay memory (--save-buffer): its arrays (numpy, or tensors on a device)
    as CPU tensors, so a memory saved in host memory loads into one on a GPU and the reverse; the script saves the
    sampling Generator."""

    def state_dict(self) -> dict:
        state = {}
        for name, value in vars(self).items():
            if isinstance(value, (np.ndarray, torch.Tensor)):
                state[name] = torch.from_numpy(value) if isinstance(value, np.ndarray) else value.cpu()
            elif isinstance(value, (bool, np.bool_, int, np.integer)):
                state[name] = bool(value) if isinstance(value, (bool, np.bool_)) else int(value)
        return state

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            current = getattr(self, name)
            if not isinstance(current, (np.ndarray, torch.Tensor)):
                setattr(self, name, value)
            elif tuple(value.shape) != tuple(current.shape):
                fail(f"the checkpoint's replay memory {name} has shape {tuple(value.shape)}, not "
                     f"{tuple(current.shape)}")
            elif isinstance(current, np.ndarray):
                current[...] = value.numpy()
            else:
                current.copy_(value)


class ReplayBuffer(MemoryState):
    """A ring of the last `buffer_size` transitions (s, a, r, s', terminated), sampled uniformly; s' is the true
    successor (`true_next_obs`). Memory: 2 * buffer_size observations + actions + 8 bytes per transition."""

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                 seed: int):
        self.check_fits(buffer_size, observation_space, action_space)
        self.buffer_size, self.device, self.rng = buffer_size, device, np.random.default_rng(seed)
        self.staging = PinnedStaging(device)  # a sample goes to a GPU without a synchronisation
        self.observations = np.zeros((buffer_size, *observation_space.shape), dtype=observation_space.dtype)
        self.next_observations = np.zeros((buffer_size, *observation_space.shape), dtype=observation_space.dtype)
        self.actions = np.zeros((buffer_size, *action_space.shape), dtype=action_space.dtype)
        self.rewards = np.zeros(buffer_size, dtype=np.float32)
        self.terminations = np.zeros(buffer_size, dtype=np.float32)
        self.pos, self.full = 0, False  # the next slot to write; whether the ring has wrapped (every slot holds one)

    @staticmethod
    def nbytes_of(buffer_size: int, observation_space: gym.Space, action_space: gym.Space) -> int:
        def size(space):
            return int(np.prod(space.shape)) * np.dtype(space.dtype).itemsize
        return buffer_size * (2 * size(observation_space) + size(action_space) + 8)

    @staticmethod
    def check_fits(buffer_size: int, observation_space: gym.Space, action_space: gym.Space, num_envs: int = 1) -> None:
        """Fail in one line, before any work starts, when the memory cannot hold one step of every env or does not
        fit in the memory available."""
        check_holds_a_step(buffer_size, num_envs)
        check_memory(f"--buffer-size {buffer_size}", ReplayBuffer.nbytes_of(buffer_size, observation_space,
                                                                            action_space))

    def __len__(self) -> int:
        return self.buffer_size if self.full else self.pos

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminations: np.ndarray) -> None:
        """Store one step of every env (arrays with a leading num_envs axis), overwriting the oldest when full."""
        n = len(obs)
        # the slots pos .. pos + n - 1: a slice where they do not wrap (nearly always; the same writes, faster)
        end = self.pos + n
        idx = slice(self.pos, end) if end <= self.buffer_size else np.arange(self.pos, end) % self.buffer_size
        self.observations[idx], self.next_observations[idx] = obs, next_obs
        self.actions[idx] = np.asarray(actions).reshape((n, *self.actions.shape[1:]))
        self.rewards[idx], self.terminations[idx] = rewards, terminations
        self.full = self.full or self.pos + n >= self.buffer_size
        self.pos = (self.pos + n) % self.buffer_size

    @torch.compiler.disable(reason="host sampling: numpy's generator and host arrays, which dynamo cannot trace")
    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement, as tensors on the buffer's device. A compiled
        update that samples runs it as it is (torch.compiler.disable)."""
        idx = self.rng.integers(0, len(self), size=batch_size)
        names = ("observations", "actions", "next_observations", "rewards", "terminations")
        return ReplayBufferSamples(*(self.staging.to_device(name, getattr(self, name)[idx]) for name in names))


class DeviceReplayBuffer(MemoryState):
    """ReplayBuffer's ring, in a GPU's memory and sampled there with device work only: an index draw and gathers,
    no value read on the host (the number of transitions stored is a device tensor too), so a recorded update
    (--cudagraphs) can hold its own sampling. The indices come from torch's default generator on the device, whose
    draws CUDA graphs replay and checkpoints hold (rng is None: the memory has no generator of its own). What the
    environments return comes over in one copy per dtype of the fields (PinnedStaging) and is written in one call.
    The same transitions, fields and checkpoint entries as ReplayBuffer; flat (1-D) observations and actions."""

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                 seed: int):
        def ring(shape: tuple, dtype) -> torch.Tensor:
            return torch.zeros((buffer_size, *shape), dtype=torch.from_numpy(np.zeros(0, dtype)).dtype, device=device)

        self.buffer_size, self.device = buffer_size, device
        self.observations = ring(observation_space.shape, observation_space.dtype)
        self.next_observations = ring(observation_space.shape, observation_space.dtype)
        self.actions = ring(action_space.shape, action_space.dtype)
        self.rewards, self.terminations = ring((), np.float32), ring((), np.float32)
        self.pos, self.full = 0, False
        self.stored = torch.zeros((), dtype=torch.int64, device=device)  # len(self), on the device
        self.rng = None
        self.staging = PinnedStaging(device)
        # the fields sent together: those of one dtype, side by side in one array
        self.groups = {}
        for name in self.FIELDS:
            self.groups.setdefault(getattr(self, name).dtype, []).append(name)

    FIELDS = ("observations", "next_observations", "actions", "rewards", "terminations")

    def __len__(self) -> int:
        return self.buffer_size if self.full else self.pos

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminations: np.ndarray) -> None:
        """Store one step of every env (arrays with a leading num_envs axis), overwriting the oldest when full."""
        n, was_full = len(obs), self.full
        values = dict(zip(self.FIELDS, (obs, next_obs, actions, rewards, terminations)))
        # the slots pos .. pos + n - 1 as one or (wrapping past the end) two spans
        end = self.pos + n
        spans = [(self.pos, min(end, self.buffer_size), 0)]
        if end > self.buffer_size:
            spans.append((0, end - self.buffer_size, self.buffer_size - self.pos))
        rings, sources = [], []
        for dtype, names in self.groups.items():
            columns = [np.asarray(values[name]).reshape(n, -1) for name in names]
            sent = self.staging.to_device(f"add {dtype}", np.concatenate(columns, axis=1), dtype)
            first = 0
            for name, column in zip(names, columns):
                ring, width = getattr(self, name), column.shape[1]
                field = sent[:, first : first + width].reshape(n, *ring.shape[1:])
                for start, stop, offset in spans:
                    rings.append(ring[start:stop])
                    sources.append(field[offset : offset + stop - start])
                first += width
        torch._foreach_copy_(rings, sources)
        self.full = self.full or end >= self.buffer_size
        self.pos = end % self.buffer_size
        if not was_full:
            self.stored.fill_(len(self))

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement, gathered on the device."""
        # u in [0, 1) in float64: floor(u * stored) is uniform over the stored slots to 2^-53
        idx = (torch.rand(batch_size, dtype=torch.float64, device=self.device) * self.stored).long()
        return ReplayBufferSamples(**{name: getattr(self, name)[idx] for name in self.FIELDS})

    def state_dict(self) -> dict:
        state = super().state_dict()
        del state["stored"]  # (len(self): pos and full)
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.stored.fill_(len(self))


def stored_as(observation_space: gym.Space, obs_dtype=None) -> gym.Space:
    """The observation space as a memory stores it: obs_dtype in place of the env's own (float32, the networks'
    dtype, where MuJoCo envs emit float64); None: as the env gives it."""
    if obs_dtype is None:
        return observation_space
    return gym.spaces.Box(-np.inf, np.inf, observation_space.shape, obs_dtype)


def check_fits_env(env: gym.Env, buffer_size: int, num_envs: int, obs_dtype=None) -> None:
    """ReplayBuffer.check_fits, before the run starts, for the spaces of `env` (an env built to check the id: it is
    closed here), observations stored as obs_dtype (stored_as)."""
    env.close()
    ReplayBuffer.check_fits(buffer_size, stored_as(env.observation_space, obs_dtype), env.action_space, num_envs)


def replay_buffer(buffer_size: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device,
                  seed: int, obs_dtype=None):
    """The replay memory for a run on `device`, observations stored as obs_dtype (stored_as): on a GPU, in its
    memory when it takes at most half of what is free there (DeviceReplayBuffer; the rest is left to the networks
    and the compiled graphs), else in host memory (ReplayBuffer, whose fit was checked before the run started),
    with a note."""
    observation_space = stored_as(observation_space, obs_dtype)
    if gpu_path(device):
        nbytes = ReplayBuffer.nbytes_of(buffer_size, observation_space, action_space)
        free = available_memory(cuda=True)[0]
        if nbytes <= free // 2:
            return DeviceReplayBuffer(buffer_size, observation_space, action_space, device, seed)
        say(f"note: the replay memory ({nbytes / 2**30:.1f} GiB) takes more than half of the GPU's free memory "
            f"({free / 2**30:.1f} GiB): it is kept in host memory and each sample is copied over")
    return ReplayBuffer(buffer_size, observation_space, action_space, device, seed)


def true_next_obs(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The successor of every env's last observation under same-step autoreset: where an episode ended
    (terminated or truncated), next_obs is the next episode's first; the true one is info["final_obs"]."""
    real_next_obs = next_obs.copy()
    if "final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs


class FrameReplayBuffer(MemoryState):
    """Replay memory for frame-stacked observations (4 x 84 x 84 uint8) that stores every frame once: each env keeps
    a ring of single frames; stacks are rebuilt at sample time. The transition in slot s has the observation
    frames[s - stack + 1 .. s] and the next observation frames[s - stack + 2 .. s + 1]. Per step and env, `add` writes
    the observation's `stack` frames as they are (padding included) unless it continues the ring (every ordinary
    step, and after a lost life), so a sampled stack is what the agent saw and never mixes two games; then the next
    observation's newest frame to slot s + 1 (at a game end, that of info["final_obs"]: truncated games bootstrap from
    their real last state). `valid` slots (frames s - stack + 1 .. s + 1 all still in the ring) are sampled; writing
    slot w clears valid at w and at w + stack - 1 (whose stack would now reach across the write head).
    Capacity: ceil(buffer_size / num_envs) * (1 + 1/64) + stack slots per env; a game costs `stack` frames beyond
    its transitions, so buffer_size transitions fit while games average 256 steps or more (random Breakout games,
    about 180 steps: about 99.3%). Per slot: frame (84 * 84 = 7056 bytes) + action (8) + reward (4) + termination (4)
    + valid (1) = 7073 bytes; 1,000,000 transitions, one env: 1,015,629 slots = 7.18e9 bytes = 6.69 GiB (stacked obs
    and next obs: 52.6 GiB). touch=True writes every page now (np.zeros maps them lazily), so a lack of memory shows
    at start, not hours into a run.

    frames_on_device: the frames (nearly all of the memory) live in `device`'s memory as a tensor, written there by
    index and gathered there at sample time, so no frame crosses from the host when sampling; the bookkeeping, the
    actions, rewards and terminations stay in host memory, where sampling draws its slots. The same transitions and
    the same samples as in host memory (one seed), and checkpoints that load into either."""

    def __init__(self, buffer_size: int, observation_space: gym.Space, action_space: gym.Space, num_envs: int,
                 device: torch.device, seed: int, touch: bool = True, frames_on_device: bool = False):
        self.check_fits(buffer_size, num_envs, observation_space.shape, np.dtype(action_space.dtype).itemsize,
                        host_frames=not frames_on_device)
        self.stack = observation_space.shape[0]
        self.capacity = self.slots(buffer_size, num_envs, self.stack)
        self.num_envs, self.device, self.rng = num_envs, device, np.random.default_rng(seed)
        self.staging = PinnedStaging(device)  # a sample goes to a GPU without a synchronisation
        frames_shape = (num_envs, self.capacity, *observation_space.shape[1:])
        self.frames = (torch.zeros(frames_shape, dtype=torch.uint8, device=device) if frames_on_device
                       else np.zeros(frames_shape, dtype=observation_space.dtype))
        # each env's newest `stack` frames in the ring, in host memory: what add() compares an observation with
        self.last_stack = np.zeros((num_envs, *observation_space.shape), dtype=observation_space.dtype)
        self.pending = []  # (env, slot, frame) written by add(), sent to the frames in one copy at its end
        self.actions = np.zeros((num_envs, self.capacity, *action_space.shape), dtype=action_space.dtype)
        self.rewards, self.terminations = (np.zeros((num_envs, self.capacity), dtype=np.float32) for _ in range(2))
        self.valid = np.zeros((num_envs, self.capacity), dtype=bool)
        self.newest = np.full(num_envs, -1, dtype=np.int64)  # slot of each env's newest frame
        self.written = np.zeros(num_envs, dtype=np.int64)  # frames written so far per env
        if touch:  # (a tensor's zeros are written already)
            for array in (self.frames, self.actions, self.rewards, self.terminations, self.valid):
                if isinstance(array, np.ndarray):
                    array.fill(0)

    @staticmethod
    def slots(buffer_size: int, num_envs: int, stack: int) -> int:
        """Frame slots per env: buffer_size / num_envs transitions, 1/64 spare, and one stack."""
        per_env = -(-buffer_size // num_envs)
        return per_env + per_env // 64 + stack

    @classmethod
    def check_fits(cls, buffer_size: int, num_envs: int, obs_shape: tuple = (4, 84, 84), action_bytes: int = 8,
                   host_frames: bool = True) -> None:
        """As ReplayBuffer.check_fits, for the host memory it takes (without the frames where they live on a GPU)."""
        check_holds_a_step(buffer_size, num_envs)
        frame = int(np.prod(obs_shape[1:])) if host_frames else 0  # uint8 frames
        check_memory(f"--buffer-size {buffer_size}",
                     num_envs * cls.slots(buffer_size, num_envs, obs_shape[0]) * (frame + action_bytes + 9))

    @classmethod
    def frames_nbytes(cls, buffer_size: int, num_envs: int, obs_shape: tuple = (4, 84, 84)) -> int:
        return num_envs * cls.slots(buffer_size, num_envs, obs_shape[0]) * int(np.prod(obs_shape[1:]))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.frames, self.actions, self.rewards, self.terminations, self.valid))

    @property
    def where(self) -> str:
        """Where the frames live, for the run's first lines."""
        return "host memory" if isinstance(self.frames, np.ndarray) else f"frames in {self.frames.device} memory"

    def __len__(self) -> int:
        """The number of transitions that can be sampled."""
        return int(self.valid.sum())

    def _write_frame(self, env: int, frame: np.ndarray) -> int:
        slot = (self.newest[env] + 1) % self.capacity
        self.pending.append((env, slot, frame))
        self.valid[env, [slot, (slot + self.stack - 1) % self.capacity]] = False
        self.newest[env] = slot
        self.written[env] += 1
        return slot

    def _stack_slots(self, slots: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return (slots[:, None] + offsets[None, :]) % self.capacity

    def add(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminations: np.ndarray) -> None:
        """Store one step of every env: obs and next_obs (num_envs, stack, H, W), the others (num_envs,)."""
        for env in range(self.num_envs):
            if not np.array_equal(next_obs[env][:-1], obs[env][1:]):
                raise ValueError("the next observation does not continue the observation's frame stack")
        for env in range(self.num_envs):
            if not (self.written[env] >= self.stack and np.array_equal(self.last_stack[env], obs[env])):
                for frame in obs[env]:
                    self._write_frame(env, frame)
            slot = self.newest[env]
            self._write_frame(env, next_obs[env][-1])
            self.last_stack[env] = next_obs[env]  # the ring's newest `stack` frames now
            self.actions[env, slot], self.rewards[env, slot] = actions[env], rewards[env]
            self.terminations[env, slot], self.valid[env, slot] = terminations[env], True
        # the step's new frames, in one write (one copy to a GPU, by index)
        envs, slots, frames = (np.array(column) for column in zip(*self.pending))
        self.pending.clear()
        if isinstance(self.frames, np.ndarray):
            self.frames[envs, slots] = frames
        else:
            where = self.staging.to_device("write_at", np.stack([envs, slots]))
            self.frames[where[0], where[1]] = self.staging.to_device("write_frames", frames)

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """`batch_size` transitions drawn uniformly with replacement among the valid slots, as tensors."""
        if not self.valid.any():
            raise ValueError("the replay memory holds no complete transition yet")
        envs, slots = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        filled = np.minimum(self.written, self.capacity)
        while len(slots) < batch_size:  # rejection sampling: almost every written slot is valid
            e = self.rng.integers(0, self.num_envs, size=2 * batch_size)
            s = (self.rng.random(2 * batch_size) * filled[e]).astype(np.int64)
            keep = self.valid[e, s]
            envs, slots = np.concatenate([envs, e[keep]]), np.concatenate([slots, s[keep]])
        return self.transitions(envs[:batch_size], slots[:batch_size])

    def transitions(self, envs: np.ndarray, slots: np.ndarray) -> ReplayBufferSamples:
        """The transitions stored in the given (env, slot) pairs, stacks rebuilt from the frame rings."""
        # window: (batch, stack + 1, H, W); the observation is its first `stack` frames, the next its last
        window_slots = self._stack_slots(slots, np.arange(-self.stack + 1, 2))
        window_envs = np.broadcast_to(envs[:, None], window_slots.shape)
        if isinstance(self.frames, np.ndarray):
            window = self.staging.to_device("window", self.frames[window_envs, window_slots])
        else:  # gathered where the frames are: only the indices cross from the host
            where = self.staging.to_device("window_at", np.stack([window_envs, window_slots]))
            window = self.frames[where[0], where[1]]
        small = (self.actions[envs, slots], self.rewards[envs, slots], self.terminations[envs, slots])
        actions, rewards, terminations = (self.staging.to_device(name, a) for name, a in
                                          zip(("actions", "rewards", "terminations"), small))
        return ReplayBufferSamples(window[:, :-1], actions, window[:, 1:], rewards, terminations)


def frame_replay_buffer(buffer_size: int, observation_space: gym.Space, action_space: gym.Space, num_envs: int,
                        device: torch.device, seed: int) -> FrameReplayBuffer:
    """The Atari scripts' frame memory for a run on `device`, with a line saying its size and where its frames are: on
    a GPU they live in the GPU's memory when they take at most half of what is free there (as replay_buffer
    decides), else, and on a CPU, in host memory."""
    on_device = False
    if gpu_path(device):
        nbytes = FrameReplayBuffer.frames_nbytes(buffer_size, num_envs, observation_space.shape)
        free = available_memory(cuda=True)[0]
        on_device = nbytes <= free // 2
        if not on_device:
            say(f"note: the replay memory's frames ({nbytes / 2**30:.1f} GiB) take more than half of the GPU's free "
                f"memory ({free / 2**30:.1f} GiB): they are kept in host memory and each sample is copied over")
    memory = FrameReplayBuffer(buffer_size, observation_space, action_space, num_envs, device, seed,
                               frames_on_device=on_device)
    say(f"replay memory: {memory.nbytes / 2**30:.2f} GiB for {buffer_size} transitions ({memory.where})")
    return memory


def atari_true_next_obs(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """true_next_obs for AtariGameStatistics envs: after a lost life next_obs goes on; where a game ended
    (info["_episode"]) the true one is info["final_obs"] (dense on ale-vector, an object array on gymnasium)."""
    real_next_obs = next_obs.copy()
    if "_episode" in infos:
        game_over = np.asarray(infos["_episode"], dtype=bool)
        real_next_obs[game_over] = np.stack(list(infos["final_obs"][game_over]))
    return real_next_obs
