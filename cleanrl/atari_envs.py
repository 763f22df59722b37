# docs: docs/contributing.md (the layout of cleanrl/)
"""Atari environments: ale-py's native vector env or gymnasium's wrappers with the preprocessing of Mnih et al.
2015, the engine that steps them in groups (EnvGroups, for the pipelined rollout), and envpool's Atari for the
JAX script."""

import os
import time
from collections import deque
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space

import speed
from messages import fail, say


# Atari environments with the preprocessing of Mnih et al. 2015 (OpenAI Baselines' atari_wrappers): noop reset (up
# to 30), FIRE at game start, 4-frame skip with a max over the last two frames, 84x84 grayscale (cv2 INTER_AREA), a
# stack of the last 4 frames (zeros before the first), episodic life and sign-clipped rewards for learning.
ATARI_BACKENDS = ("ale-vector", "gymnasium")


def import_ale():
    """ale-py (the `atari` extra), imported on first use so that the other scripts never need it."""
    try:
        import ale_py
    except ImportError as e:
        fail(f"the Atari scripts need ale-py: pip install -e '.[atari]' ({e})")
    gym.register_envs(ale_py)
    return ale_py


def atari_emulator_settings(env_id: str) -> dict:
    """The emulator settings of an Atari id: `<Game>NoFrameskip-v4` no sticky actions (the DQN and PPO papers, CleanRL's
    benchmarks), `ALE/<Game>-v5` sticky with p=0.25 (Machado et al. 2018); minimal action set, 108000 frames a game.
    Ids that skip frames themselves (`Breakout-v4`), v0, `-ram` and non-ale-py ids are refused (`error:`, exit 1)."""
    import_ale()
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as e:
        fail(f"cannot make environment {env_id!r}: {e}")
    if spec.entry_point != "ale_py.env:AtariEnv":
        fail(f"{env_id} is not an Atari game; use an id like BreakoutNoFrameskip-v4 or ALE/Breakout-v5")
    kwargs = spec.kwargs
    supported = env_id.endswith("NoFrameskip-v4") or (spec.namespace == "ALE" and spec.version == 5)
    if not supported or kwargs.get("obs_type", "rgb") != "rgb":
        fail(f"{env_id} is not supported; use a <Game>NoFrameskip-v4 or ALE/<Game>-v5 id (image observations)")
    return dict(game=kwargs["game"], repeat_action_probability=float(kwargs.get("repeat_action_probability", 0.25)),
                full_action_space=bool(kwargs.get("full_action_space", False)),
                max_num_frames_per_episode=int(kwargs.get("max_num_frames_per_episode", 108000)))


def check_atari(env_id: str, backend: str) -> None:
    """Fail in one line, before any work starts, on an id that is not a supported Atari game or an unknown
    --env-backend (the Atari scripts, for training and --eval-only)."""
    atari_emulator_settings(env_id)
    if backend not in ATARI_BACKENDS:
        fail(f"unknown --env-backend {backend!r}; choose one of {', '.join(ATARI_BACKENDS)}")


class FireOnReset(gym.Wrapper):
    """Press FIRE for one emulator frame after each game reset, before the noops, like the native use_fire_reset
    (Breakout waits for FIRE). Under the frame skip, so it costs one frame; after a lost life the agent fires."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self.fire_action = meanings.index("FIRE") if "FIRE" in meanings else None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if self.fire_action is not None:
            obs, _, terminated, truncated, info = self.env.step(self.fire_action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def make_atari_env(env_id: str, idx: int, capture_video: bool, run_name: str, noop_max: int, max_frames: int):
    """Thunk for the gymnasium backend: one whole game per episode (life loss is handled by AtariGameStatistics)."""

    def thunk():
        settings = atari_emulator_settings(env_id)
        # frameskip=1: AtariPreprocessing skips frames itself (v5 ids skip 4 by default).
        kwargs = dict(frameskip=1, repeat_action_probability=settings["repeat_action_probability"],
                      full_action_space=settings["full_action_space"], max_num_frames_per_episode=max_frames)
        if capture_video and idx == 0:  # every emulator frame in colour, whole games (all lives)
            env = gym.wrappers.RecordVideo(gym.make(env_id, render_mode="rgb_array", **kwargs), f"videos/{run_name}")
        else:
            env = gym.make(env_id, **kwargs)
        env = gym.wrappers.AtariPreprocessing(FireOnReset(env), noop_max=noop_max, frame_skip=4, screen_size=84,
                                              grayscale_obs=True)
        # padding_type="zero": the first observation of a game is [0, 0, 0, frame], as in the native env.
        return gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
    return thunk


class SplitStep(gym.vector.VectorWrapper):
    """A vector wrapper whose step comes in two parts, so that the caller can work while the envs step: send(actions)
    starts the inner env's step (ale-py's vector env steps in its worker threads meanwhile; an env without send, such
    as a SyncVectorEnv, steps at recv), recv() waits for it and returns its result through this wrapper's
    after_step. step() is send then recv."""

    def after_step(self, obs, reward, terminated, truncated, info):
        return obs, reward, terminated, truncated, info

    def send(self, actions) -> None:
        if hasattr(self.env, "send"):
            self.env.send(actions)
        else:
            self.sent_actions = actions

    def recv(self):
        return self.after_step(*(self.env.recv() if hasattr(self.env, "send") else self.env.step(self.sent_actions)))

    def step(self, actions):
        self.send(actions)
        return self.recv()


class RecordFirstGameFrames(SplitStep):
    """Video for ale-vector, which renders nothing: env 0's newest 84x84 frame, one mp4 per game on the capped cubic
    schedule (games 0, 1, 8, 27, ..., 1000, 2000, ...), 15 fps. Wrap the full-game env, under AtariGameStatistics."""

    def __init__(self, env: gym.vector.VectorEnv, video_folder: str):
        super().__init__(env)
        self.video_folder, self.game_index, self.frames = video_folder, 0, []
        # imported here: it imports moviepy, which a run without --capture-video should not wait for
        from gymnasium.utils.save_video import capped_cubic_video_schedule, save_video
        self.schedule, self.save = capped_cubic_video_schedule, save_video

    def _add(self, stacked_obs: np.ndarray) -> None:
        if self.schedule(self.game_index):
            self.frames.append(np.repeat(stacked_obs[-1][..., None], 3, axis=-1))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.frames = []
        self._add(obs[0])
        return obs, info

    def after_step(self, obs, reward, terminated, truncated, info):
        if terminated[0] or truncated[0]:
            self._add(info["final_obs"][0])  # same-step autoreset: obs[0] already shows the next game
            if self.frames:
                self.save(self.frames, self.video_folder, episode_index=self.game_index, fps=15)
            self.game_index, self.frames = self.game_index + 1, []
        self._add(obs[0])
        return obs, reward, terminated, truncated, info


class AtariGameStatistics(SplitStep):
    """The learning signal and the real score over a vector env of whole games. step() returns reward sign(r) if
    clip_rewards, else the raw score change; terminated: game over, or (terminal_on_life_loss) a life lost
    (info["life_lost"]; the game goes on, nothing bootstraps across it); truncated: the frame limit; at a game end
    (same-step autoreset: info["final_obs"]) RecordEpisodeStatistics' info["episode"] = {"r": raw score over all
    lives, "l": agent steps, "t": seconds since the wrapper was made} and its mask info["_episode"]."""

    def __init__(self, env: gym.vector.VectorEnv, terminal_on_life_loss: bool = True, clip_rewards: bool = True):
        super().__init__(env)
        self.terminal_on_life_loss, self.clip_rewards = terminal_on_life_loss, clip_rewards
        self.start_time = time.perf_counter()
        self.game_returns = np.zeros(self.num_envs, dtype=np.float64)
        self.game_lengths, self.lives = (np.zeros(self.num_envs, dtype=np.int64) for _ in range(2))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.game_returns[:], self.game_lengths[:] = 0, 0
        self.lives = np.asarray(info["lives"], dtype=np.int64).copy()
        return obs, info

    def after_step(self, obs, reward, terminated, truncated, info):
        raw_reward = np.asarray(reward, dtype=np.float64)
        self.game_returns += raw_reward
        self.game_lengths += 1
        game_over = np.logical_or(terminated, truncated)
        # at a game end, info["lives"] already belongs to the next game, so only compare within a game
        lives = np.asarray(info["lives"], dtype=np.int64)
        info["life_lost"] = life_lost = np.logical_and(lives < self.lives, np.logical_not(game_over))
        self.lives = lives.copy()
        if game_over.any():
            info["episode"] = {"r": np.where(game_over, self.game_returns, 0.0),
                               "l": np.where(game_over, self.game_lengths, 0),
                               "t": np.where(game_over, round(time.perf_counter() - self.start_time, 6), 0.0)}
            info["_episode"] = game_over
            self.game_returns[game_over], self.game_lengths[game_over] = 0, 0
        terminated = np.logical_or(terminated, life_lost) if self.terminal_on_life_loss else terminated
        reward = np.sign(raw_reward) if self.clip_rewards else reward
        return obs, reward.astype(np.float32), terminated, truncated, info


def concat_infos(infos: list[dict], sizes: list[int]) -> dict:
    """The infos of vector envs of `sizes` envs as the info of one vector env of them all: each entry's arrays joined
    along the env axis, an entry that some env group lacks filled with zeros (False, None) there, as gymnasium's
    vector envs fill an entry for the envs it does not concern."""
    out = {}
    for key in dict.fromkeys(k for info in infos for k in info):
        parts = [info.get(key) for info in infos]
        if any(isinstance(part, dict) for part in parts):
            out[key] = concat_infos([part or {} for part in parts], sizes)
            continue
        like = np.asarray(next(part for part in parts if part is not None))
        out[key] = np.concatenate([np.asarray(part) if part is not None else
                                   np.full((n,) + like.shape[1:], None if like.dtype == object else 0, like.dtype)
                                   for part, n in zip(parts, sizes)])
    return out


class EnvGroups(gym.vector.VectorEnv):
    """One vector env of `num_envs` envs made of fixed groups that step on their own (each a SplitStep stack over its
    own vector env, with its own worker threads). Pipelining: send(actions, g) starts group g's step and returns at
    once; recv() waits for the group sent earliest and returns (its envs as a slice of the batch, obs, reward,
    terminated, truncated, info of those envs); in_flight counts the groups sent and not yet received. step() steps
    every group at once and returns the whole batch, as one vector env would. reset(seed=s) resets env i with s + i
    whatever group it is in, so each env's trajectory, given its actions, does not depend on the grouping."""

    def __init__(self, groups: list):
        self.groups = groups
        sizes = [group.num_envs for group in groups]
        ends = np.cumsum(sizes).tolist()
        self.halves = [slice(end - size, end) for size, end in zip(sizes, ends)]  # each group's envs in the batch
        self.num_envs, self.sent = sum(sizes), deque()
        self.single_observation_space = groups[0].single_observation_space
        self.single_action_space = groups[0].single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = groups[0].metadata

    @property
    def in_flight(self) -> int:
        return len(self.sent)

    def reset(self, *, seed=None, options=None):
        while self.sent:  # a group still stepping finishes first
            self.recv()
        if len(self.groups) == 1:
            return self.groups[0].reset(seed=seed, options=options)
        results = [group.reset(seed=None if seed is None else seed + half.start, options=options)
                   for group, half in zip(self.groups, self.halves)]
        return (np.concatenate([obs for obs, _ in results]),
                concat_infos([info for _, info in results], [group.num_envs for group in self.groups]))

    def send(self, actions, group: int) -> None:
        """Start group `group`'s step with its envs' actions (len(halves[group]) of them)."""
        if group in self.sent:
            raise RuntimeError(f"env group {group} was sent again before its last step was received")
        self.groups[group].send(actions)
        self.sent.append(group)

    def recv(self):
        """(slice of the batch, obs, reward, terminated, truncated, info) of the group sent earliest."""
        group = self.sent.popleft()
        return (self.halves[group],) + tuple(self.groups[group].recv())

    def step(self, actions):
        if len(self.groups) == 1:  # nothing to join
            return self.groups[0].step(actions)
        actions = np.asarray(actions)
        for g, half in enumerate(self.halves):
            self.send(actions[half], g)
        results = [self.recv()[1:] for _ in self.halves]
        obs, reward, terminated, truncated = (np.concatenate([r[i] for r in results]) for i in range(4))
        return obs, reward, terminated, truncated, concat_infos([r[4] for r in results],
                                                                [group.num_envs for group in self.groups])

    def close_extras(self, **kwargs):
        for group in self.groups:
            group.close()


def env_worker_threads(requested: int = 0) -> tuple[int, str]:
    """--env-threads: the emulator worker threads of this process and how they were chosen. 0: the cores this process
    may use, as --torch-threads 0 counts them: those free as the run starts, or under torchrun an even share of this
    node's cores among its ranks (LOCAL_WORLD_SIZE), which start together and would count each other busy."""
    if requested:
        return requested, "--env-threads"
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if ranks > 1:
        cores = len(os.sched_getaffinity(0))
        return max(1, cores // ranks), f"{cores} cores shared by {ranks} ranks on this node"
    free = speed.free_cores()
    return free, f"{free} of {os.cpu_count()} cores free"


PIPELINE_MODES = ("auto", "on", "off")


def atari_engine(num_envs: int, backend: str, env_threads: int, pipeline: str, device: torch.device,
                 announce: bool = True) -> dict:
    """make_atari_envs' groups and threads for a training run, from --num-envs, --env-threads and --pipeline-envs;
    printed among the run's first lines (announce). Neither changes the algorithm: only how fast the same data come.
    --pipeline-envs auto: two halves when the policy acts on a GPU; on the CPU the envs step together, since there
    the policy's torch threads and the emulator threads share the cores, and on 2 cores the pipelined rollout was
    not faster (docs/speed.md has the measurements)."""
    if pipeline not in PIPELINE_MODES:
        fail(f"unknown --pipeline-envs {pipeline!r}; choose one of {', '.join(PIPELINE_MODES)}")
    pipelined = pipeline == "on" or pipeline == "auto" and speed.gpu_path(device)
    groups = 2 if pipelined and num_envs > 1 else 1
    threads, why = env_worker_threads(env_threads)
    if announce:
        how = ("in two halves, each stepping while the policy acts on the other" if groups == 2 else
               "stepped together" + (" (--pipeline-envs auto on the CPU)" if pipeline == "auto" else ""))
        where = (f"{threads} emulator threads ({why})" if backend == "ale-vector" else
                 "emulated in this process (gymnasium backend)")
        say(f"environments: {num_envs} {how}; {where}; {torch.get_num_threads()} torch CPU threads")
    return dict(groups=groups, threads=threads)


def group_sizes(num_envs: int, groups: int) -> list[int]:
    """The sizes of `groups` groups of `num_envs` envs (at most one group per env), the first ones larger by one."""
    groups = min(groups, num_envs)
    return [num_envs // groups + (g < num_envs % groups) for g in range(groups)]


def ale_vector_env(settings: dict, num_envs: int, threads: int, noop_max: int = 30,
                   max_frames: Optional[int] = None):
    """ale-py's bare AtariVectorEnv of `num_envs` games with the preprocessing of make_atari_envs (settings: of
    atari_emulator_settings), its episodic life and reward clipping off, `threads` worker threads (at most one per
    game); max_frames: the id's own frame limit when None."""
    from ale_py.vector_env import AtariVectorEnv

    max_frames = settings["max_num_frames_per_episode"] if max_frames is None else max_frames
    return AtariVectorEnv(
        settings["game"], num_envs, repeat_action_probability=settings["repeat_action_probability"],
        full_action_space=settings["full_action_space"], max_num_frames_per_episode=max_frames,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, img_height=84, img_width=84, grayscale=True,
        stack_num=4, frameskip=4, maxpool=True, noop_max=noop_max, use_fire_reset=True, episodic_life=False,
        life_loss_info=False, reward_clipping=False, num_threads=max(1, min(num_envs, threads)))


def make_atari_envs(env_id: str, num_envs: int, backend: str = "ale-vector", capture_video: bool = False,
                    run_name: str = "", noop_max: int = 30, terminal_on_life_loss: bool = True,
                    clip_rewards: bool = True, max_frames: Optional[int] = None, groups: int = 1,
                    threads: int = 1) -> EnvGroups:
    """`num_envs` preprocessed Atari games, same-step autoreset; reset(seed=s) seeds env i with s + i; observations
    uint8 (num_envs, 4, 84, 84), scaled in the network. "ale-vector": ale-py's threaded C++ AtariVectorEnv, its reward
    clipping and episodic life off (its episodic_life resets the game at each lost life); "gymnasium": the wrappers
    above. They agree frame for frame but for the reset noops: native 0..noop_max-1 from its own RNG (one fewer after
    FIRE), gymnasium 1..noop_max from np_random. capture_video: env 0 (gymnasium: in colour; ale-vector: as seen).
    max_frames overrides the id's frame limit per game. groups: 2 splits the envs into two halves that step on their
    own (EnvGroups, for a pipelined rollout; at most num_envs groups); threads: ale-vector's worker threads in all,
    shared among the groups (each gets at least one)."""
    if backend not in ATARI_BACKENDS:
        fail(f"unknown env backend {backend!r}; choose one of {', '.join(ATARI_BACKENDS)}")
    settings = atari_emulator_settings(env_id)
    max_frames = settings["max_num_frames_per_episode"] if max_frames is None else max_frames
    sizes = group_sizes(num_envs, groups)
    if backend == "gymnasium":
        return EnvGroups([AtariGameStatistics(gym.vector.SyncVectorEnv(
            [make_atari_env(env_id, start + i, capture_video, run_name, noop_max, max_frames) for i in range(size)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), terminal_on_life_loss, clip_rewards)
            for start, size in zip(np.cumsum([0] + sizes).tolist(), sizes)])
    stacks = []
    for g, size in enumerate(sizes):
        envs = ale_vector_env(settings, size, threads // len(sizes), noop_max, max_frames)
        envs = RecordFirstGameFrames(envs, f"videos/{run_name}") if capture_video and g == 0 else envs
        stacks.append(AtariGameStatistics(envs, terminal_on_life_loss, clip_rewards))
    return EnvGroups(stacks)


# Atari from envpool, for the JAX script (its XLA interface steps the games inside a compiled program)
def envpool_atari_id(env_id: str) -> tuple[str, float]:
    """(envpool id, sticky-action probability) of an Atari id: `<Game>NoFrameskip-v4` -> `<Game>-v5` without sticky
    actions, `ALE/<Game>-v5` -> `<Game>-v5` with p=0.25 (the emulator settings make_atari_envs gives those ids);
    an envpool id `<Game>-v5` keeps envpool's own settings (no sticky actions). Anything else fails in one line."""
    try:
        import envpool
    except ImportError as e:
        fail(f"the JAX script needs envpool: pip install -r requirements/requirements-jax.txt ({e})")
    game, sticky = env_id, 0.0
    if env_id.endswith("NoFrameskip-v4"):
        game = env_id[: -len("NoFrameskip-v4")] + "-v5"
    elif env_id.startswith("ALE/") and env_id.endswith("-v5"):
        game, sticky = env_id[len("ALE/"):], 0.25
    if game not in envpool.list_all_envs() or type(envpool.make_spec(game)).__name__ != "AtariEnvSpec":
        fail(f"{env_id} is not an Atari game of envpool; use an id like BreakoutNoFrameskip-v4, ALE/Breakout-v5 "
             "or Breakout-v5")
    return game, sticky


def make_envpool_atari(env_id: str, num_envs: int, seed: int, threads: int = 0, max_frames: Optional[int] = None,
                       render: bool = False):
    """num_envs envpool Atari games with the preprocessing of make_atari_envs: 30 noops and FIRE at reset, 4 frames
    skipped (max of the last two), 84x84 grayscale, 4 frames stacked, a lost life ends the episode, rewards
    sign-clipped (info["reward"] keeps the raw score change, info["terminated"] marks a real game over), a game cut
    after max_frames emulator frames (default 108000). envpool autoresets on the next step: the step after an
    episode end (a lost life or a game over) is a reset step, whose action is ignored and whose reward is 0, while
    the episode-ending step returns its true final frames. `threads`: envpool worker threads (0: its own choice)."""
    envpool_id, sticky = envpool_atari_id(env_id)
    import envpool
    kwargs = {} if max_frames is None else {"max_episode_steps": -(-max_frames // 4)}
    return envpool.make(envpool_id, env_type="gymnasium", num_envs=num_envs, seed=seed, episodic_life=True,
                        reward_clip=True, repeat_action_probability=sticky, noop_max=30, use_fire_reset=True,
                        num_threads=min(threads, num_envs), render_mode="rgb_array" if render else None, **kwargs)
