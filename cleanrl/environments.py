# docs: docs/contributing.md (the layout of cleanrl/)
"""The environments the scripts train on: classic control and MuJoCo (a SyncVectorEnv with same-step autoreset and
episode statistics), Atari (ale-py's native vector env or gymnasium's wrappers, with the preprocessing of Mnih et al.
2015), Procgen (envpool), and their videos; the normalization wrappers whose statistics a checkpoint keeps; and
the evaluation loop (evaluate_episodes)."""

import os
import sys
import time
from collections import deque
from typing import Callable, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd

import speed
from messages import fail, say, warn


# Which scripts take which spaces (docs/get-started/your-own-environment.md has the same table): the space checks
# below name them, so that a user whose environment one script refuses learns which script takes it.
SCRIPTS_FOR_ACTIONS = {
    "Discrete": ("ppo.py", "dqn.py", "c51.py"),
    "Box": ("ppo_continuous_action.py", "ddpg_continuous_action.py", "td3_continuous_action.py",
            "sac_continuous_action.py"),
}
ATARI_SCRIPTS = ("ppo_atari.py", "dqn_atari.py", "c51_atari.py", "ppo_atari_multigpu.py",
                 "ppo_atari_envpool_xla_jax_scan.py")


def listed(names) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def observation_space_advice(space) -> str:
    """What to do about an observation space the classic-control and MuJoCo scripts do not take, in a few words."""
    kind = type(space).__name__
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 3:
        return (f"images are taken by the Atari scripts ({listed(ATARI_SCRIPTS)}), on Atari games only: flatten "
                "yours where you register the env (gymnasium's FlattenObservation)")
    if isinstance(space, gym.spaces.Box):
        return "flatten it where you register the env (gymnasium's FlattenObservation)"
    return (f"no script takes a {kind} observation space: flatten it where you register the env (gymnasium's "
            "FlattenObservation; the docs page 'Your own environment' shows how)")


def make(env_id: str, **kwargs) -> gym.Env:
    """gym.make, without output that neither comes from the run nor means a problem. Rendering for --capture-video
    (render_mode="rgb_array"): the classic-control envs draw with pygame, which asks SDL for a display even though it
    draws on plain surfaces, and without one SDL prints "error: XDG_RUNTIME_DIR is invalid or not set"; SDL's dummy
    video driver (unless SDL_VIDEODRIVER is set) opens no display. Gymnasium's MuJoCo envs: quiet_mujoco(), and
    their frames drawn through EGL on a Linux machine without a display (unless MUJOCO_GL is set)."""
    if kwargs.get("render_mode") == "rgb_array":
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error:  # an id of another module (mypkg:Corridor-v0): its package imports on make
        entry_point = None
    if isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs.mujoco"):
        quiet_mujoco()
        if kwargs.get("render_mode") == "rgb_array" and headless_linux():
            os.environ.setdefault("MUJOCO_GL", "egl")  # its default, GLFW, needs a display: without one it crashes
    return gym.make(env_id, **kwargs)


def headless_linux() -> bool:
    """Linux without a display server (a server, a batch job): rendering must go through EGL, off screen."""
    return sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


# MuJoCo warnings that say nothing about the run: gymnasium's HalfCheetah model (half_cheetah.xml) sets the compiler
# attribute settotalmass, which MuJoCo 3.3 and later deprecate, so every HalfCheetah made (probe, training envs,
# evaluation) printed the warning and appended it to MUJOCO_LOG.TXT in the working directory. The model compiles as
# before; the fix belongs to gymnasium's asset.
MUJOCO_NOISE = ("compiler attribute 'settotalmass' is deprecated",)


def mujoco_warning(message: str) -> None:
    if not any(noise in message for noise in MUJOCO_NOISE):
        warn(f"MuJoCo: {message}")


def quiet_mujoco() -> None:
    """MuJoCo's warnings through mujoco_warning: the ones in MUJOCO_NOISE dropped, every other one a `warning:`
    line on stderr (none written to MUJOCO_LOG.TXT)."""
    import mujoco

    mujoco.set_mju_user_warning(mujoco_warning)


def probe_env(env_id: str, action_space: type, finite_actions: bool = False) -> gym.Env:
    """One environment, built to check the id and its spaces before any work starts; fails in one line that names
    the script running (the file python was given) and the scripts that take the space it refuses."""
    script = os.path.basename(sys.argv[0])
    try:
        env = make(env_id)
    except gym.error.Error as e:
        fail(f"cannot make environment {env_id!r}: {e}")
    space, obs_space = env.action_space, env.observation_space
    kind = "Discrete" if action_space is gym.spaces.Discrete else "Box (continuous)"
    if not isinstance(space, action_space):
        found = type(space).__name__
        takers = SCRIPTS_FOR_ACTIONS.get(found)
        fail(f"{env_id} has action space {space}; {script} supports {kind} actions only ("
             + (f"{found} actions: {listed(takers)})" if takers else f"no script takes {found} actions)"))
    if action_space is gym.spaces.Box:
        if len(space.shape) != 1:
            fail(f"{env_id} has action shape {space.shape}; {script} supports 1-D Box actions only, as every "
                 "continuous script does: reshape the action in a wrapper where you register the env")
        if finite_actions and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            fail(f"{env_id} has unbounded action space {space}; {script} needs finite low and high bounds")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        fail(f"{env_id} has observation space {obs_space}; {script} supports flat Box observations only (a 1-D "
             f"array of numbers); {observation_space_advice(obs_space)}")
    return env


def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            return gym.wrappers.RecordVideo(make(env_id, render_mode="rgb_array"), f"videos/{run_name}")
        return make(env_id)
    return thunk


def make_envs(env_id: str, num_envs: int, capture_video: bool, run_name: str) -> gym.vector.VectorEnv:
    """num_envs copies of env_id with episode statistics in a SyncVectorEnv (Async costs 10x on 2 cores), same-step
    autoreset: an episode's last step returns the next one's first observation and the true last in info["final_obs"],
    so every step is a real transition and a truncated episode can bootstrap from its final observation."""
    envs = gym.vector.SyncVectorEnv([make_env(env_id, i, capture_video, run_name) for i in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return gym.wrappers.vector.RecordEpisodeStatistics(FiniteObservations(envs, env_id))


class FiniteObservations(gym.vector.VectorWrapper):
    """Stops the run in one line when an environment observes NaN or inf: it would reach the policy at once (a
    sampled action fails inside torch) and then the losses. Checked where the observations are still numpy on the
    host, so no device synchronisation is added: one np.isfinite per step (the wrapper costs about 3.5 us a step on
    4 CartPole envs, of 52 us) and one per ended episode's final observation. An observation that follows a
    non-finite continuous action is not checked: the policy, not the environment, went wrong. Holds no state (its
    step count, for the message, starts at 0 in each process): checkpoints.encode_state passes through it
    (`transparent`), so a checkpoint's environment state is the same with or without it."""

    transparent = True

    def __init__(self, env: gym.vector.VectorEnv, env_id: str):
        super().__init__(env)
        self.env_id, self.steps = env_id, 0
        self.floats = np.dtype(env.single_observation_space.dtype).kind == "f"  # else nothing to check (integers)
        self.float_actions = np.dtype(env.single_action_space.dtype).kind == "f"

    def check(self, obs, where: str) -> None:
        if self.floats and not np.isfinite(obs).all():
            obs = np.asarray(obs)
            bad = obs[~np.isfinite(obs)].flat[0]
            fail(f"{self.env_id} observed {bad} ({where}, environment step {self.steps}); a policy cannot act on it: "
                 "the run stops without saving, so no checkpoint holds it (fix the environment, or clip its "
                 "observations with a wrapper)")

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.check(obs, "at a reset")
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.steps += 1
        if self.float_actions and not np.isfinite(actions).all():
            # the policy itself went non-finite (its parameters): the environment is not to blame, and the run's
            # once-per-update check names the parameter
            return obs, reward, terminated, truncated, info
        self.check(obs, "in a step")
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                self.check(info["final_obs"][i], "as an episode's final observation")
        return obs, reward, terminated, truncated, info


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


class OnDevice(gym.vector.VectorWrapper):
    """The vector env as a training loop on `device` uses it: step() takes the actions as a tensor and returns the
    observations (in obs_dtype), the rewards (float32) and the terminated and truncated flags (bool) as tensors on
    the device; infos stay as the envs wrote them. On the GPU path what the envs return reaches the device through
    pinned host memory (speed.PinnedStaging), so the host never waits for the copy: the observations in one copy, the
    rewards and both flags packed into another. rollout() steps an EnvGroups engine's groups in turn (pipelined)."""

    transparent = True  # no state of its own: a checkpoint saves the envs beneath

    def __init__(self, env: gym.vector.VectorEnv, device: torch.device, obs_dtype: Optional[torch.dtype] = None):
        super().__init__(env)
        self.device, self.obs_dtype, self.staging = device, obs_dtype, speed.PinnedStaging(device)
        self.last: tuple = (0, np.zeros(0, bool), np.zeros(0, bool), {})  # the last step's, for truncated_final_obs

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.staging.to_device("obs", obs, self.obs_dtype), info

    def to_device(self, envs: slice, obs, reward, terminated, truncated, info) -> tuple:
        """What the step of the envs `envs` (a slice of the batch) returned, as (obs, reward, terminated, truncated,
        info) with the first four on the device."""
        self.last = envs.start, terminated, truncated, info
        obs = self.staging.to_device(f"obs{envs.start}", obs, self.obs_dtype)
        if not speed.gpu_path(self.device):  # the arrays as tensors, no copy (the bool flags' memory is shared)
            return obs, torch.as_tensor(reward, dtype=torch.float32), torch.as_tensor(terminated, dtype=torch.bool), \
                torch.as_tensor(truncated, dtype=torch.bool), info
        flags = self.staging.to_device(f"flags{envs.start}", np.stack([reward, terminated, truncated]), torch.float32)
        return obs, flags[0], flags[1].bool(), flags[2].bool(), info

    def step(self, actions: torch.Tensor):
        return self.to_device(slice(0, self.num_envs), *self.env.step(actions.cpu().numpy()))

    def truncated_final_obs(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """(envs, their final observations) on the device for the envs whose episode the last step truncated without
        terminating it: gymnasium's same-step autoreset keeps that observation in info["final_obs"]. None where there
        are none, the usual case, which the host knows without asking the device."""
        start, terminated, truncated, info = self.last
        if not truncated.any():
            return None
        only_truncated = np.logical_and(truncated, np.logical_not(terminated))
        if not only_truncated.any():
            return None
        envs = torch.as_tensor(start + np.flatnonzero(only_truncated), device=self.device)
        return envs, torch.as_tensor(np.stack(info["final_obs"][only_truncated]), dtype=self.obs_dtype,
                                     device=self.device)

    def rollout(self, num_steps: int, act: Callable, store: Callable) -> None:
        """num_steps steps of every env. The envs step in the groups of the engine beneath (EnvGroups.halves; one
        group of all the envs for another vector env): act(step, envs) returns the actions of the envs `envs` (a
        slice of the batch) at rollout step `step`, which start that group's step; while it runs, act is called for
        the next group. store(step, envs, obs, reward, terminated, truncated, info) then takes what the group's step
        returned (to_device), before act is called for that group again. With two groups the emulator threads step
        one half while the policy acts on the other; every env still acts on its own newest observation."""
        groups = getattr(self.env, "halves", None)
        if groups is None:  # a vector env without groups: one synchronous step of all the envs
            for step in range(num_steps):
                store(step, slice(0, self.num_envs), *self.step(act(step, slice(0, self.num_envs))))
            return
        sent = {}  # each group's (by its first env) rollout step
        for step in range(num_steps):
            for group, envs in enumerate(groups):
                actions = act(step, envs)
                self.env.send(actions.cpu().numpy(), group)
                sent[envs.start] = step
                if self.env.in_flight == len(groups):  # the other group stepped meanwhile: take its results
                    self.receive(sent, store)
        while self.env.in_flight:  # the rollout's last step of the group still stepping
            self.receive(sent, store)

    def receive(self, sent: dict, store: Callable) -> None:
        envs, *results = self.env.recv()
        store(sent[envs.start], envs, *self.to_device(envs, *results))


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


# Procgen, from envpool (the procgen package does not install on current Python)
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot", "heist",
                 "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")


def procgen_import_problem(exc: ImportError) -> str:
    """The one-line reason why envpool's Procgen cannot be used, naming what to install."""
    chain, e = [], exc
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    if "Qt" in " ".join(chain):
        return ("envpool's Procgen needs the Qt 5 runtime, which is missing: install Debian's libqt5gui5 "
                f"(apt-get install libqt5gui5) ({chain[-1]})")
    return f"the Procgen scripts need envpool (pip install 'envpool>=0.8') and Debian's libqt5gui5: {chain[0]}"


def load_envpool():
    """Import envpool and its Procgen extension, or stop in one line saying what is missing."""
    try:
        import envpool
        import envpool.procgen
        envpool.procgen.ProcgenEnvSpec  # noqa: B018 (envpool defers the Qt ImportError to this attribute)
    except ImportError as e:
        fail(procgen_import_problem(e))
    return envpool


def resolve_env_id(env_id: str, distribution_mode: str, known_ids: list[str]) -> str:
    """`starpilot`, easy -> StarpilotEasy-v0 (envpool's id); an envpool Procgen id passes through unchanged."""
    game = env_id.lower()
    if game in PROCGEN_GAMES:
        resolved = f"{game.capitalize()}{distribution_mode.capitalize()}-v0"
        if resolved not in known_ids:
            modes = sorted(i[len(game) : -len("-v0")].lower() for i in known_ids if i.lower().startswith(game))
            fail(f"{env_id} has no {distribution_mode!r} distribution (it has: {', '.join(modes)})")
        return resolved
    modes = ("Easy", "Hard", "Extreme", "Memory", "Exploration")
    if env_id in {f"{g.capitalize()}{m}-v0" for g in PROCGEN_GAMES for m in modes} & set(known_ids):
        return env_id
    fail(f"unknown Procgen game {env_id!r}; use one of {', '.join(PROCGEN_GAMES)} or an envpool id like "
         "StarpilotEasy-v0")


def make_procgen_envs(env_id: str, num_envs: int, seed: int, threads: int = 1) -> gym.vector.VectorEnv:
    """num_envs envs of the envpool Procgen id env_id, all levels (num_levels=0), with episode statistics; `threads`
    envpool worker threads (at most one per env)."""
    # envpool's Procgen is a gymnasium VectorEnv with NEXT_STEP autoreset and no same-step mode. Procgen
    # itself starts the next level inside the step that ends an episode, so that step's observation is
    # already a new level's frame and the true final observation is lost; envpool then spends the
    # following step on a reset (action ignored, reward 0, elapsed_step 0, obs = first frame of the
    # episode actually played). Those reset steps are masked out of learning (ppg_procgen.py's `valid`).
    # Procgen's own time limit (e.g. 1000 steps in starpilot) is reported as truncation, but with no
    # final observation to bootstrap from it is treated as termination, as in the Procgen and PPG papers.
    # RecordEpisodeStatistics understands NEXT_STEP: it counts no reward and no length on the reset steps.
    envs = load_envpool().make_gymnasium(env_id, num_envs=num_envs, seed=seed, num_levels=0, start_level=0,
                                         num_threads=min(threads, num_envs))
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


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


class VideoRecorder:
    """Env 0's episodes from its 64x64 RGB observations (envpool has no video wrapper), on the capped cubic schedule."""

    def __init__(self, folder: str, name_prefix: str = "rl-video"):
        from gymnasium.utils.save_video import capped_cubic_video_schedule

        self.folder, self.trigger = folder, capped_cubic_video_schedule
        self.name_prefix, self.frames, self.episode = name_prefix, [], 0

    def add(self, obs: np.ndarray, done: bool) -> None:
        """obs: (3, 64, 64) uint8 returned by a step; at an episode end it is already another level's frame."""
        if not done:
            self.frames.append(np.transpose(obs, (1, 2, 0)))
        else:
            if self.trigger(self.episode) and self.frames:
                save_frames(self.frames, self.folder, self.episode, self.name_prefix)
            self.frames, self.episode = [], self.episode + 1


def save_frames(frames: list, folder: str, episode: int, name_prefix: str = "rl-video") -> None:
    """One episode's RGB frames (height, width, 3) as folder/{name_prefix}-episode-{episode}.mp4 (moviepy)."""
    from gymnasium.utils.save_video import save_video  # moviepy: only when asked
    save_video(frames, folder, fps=15, name_prefix=name_prefix, episode_index=episode, episode_trigger=lambda _: True)


def evaluate_episodes(envs, policy: Callable, episodes: int, seed: Optional[int], device: torch.device,
                      dtype: Optional[torch.dtype] = torch.float32) -> list[float]:
    """The returns of the first `episodes` episodes that end on `envs` (fresh ones, reset with `seed`; None: seeded
    when built) under `policy`: observations (a tensor on `device`, of `dtype`; None keeps the envs' dtype, e.g.
    Atari's uint8 frames) to actions (a tensor or numpy), run without gradients. Closes the envs."""
    obs, _ = envs.reset(seed=seed) if seed is not None else envs.reset()
    returns = []
    while len(returns) < episodes:
        with torch.no_grad():
            actions = policy(torch.as_tensor(obs, dtype=dtype, device=device))
        obs, _, _, _, infos = envs.step(actions.cpu().numpy() if isinstance(actions, torch.Tensor) else actions)
        if "episode" in infos:
            returns += [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    return returns[:episodes]


# Normalization wrappers with state to save: observations (same-step autoreset aware), rewards (Procgen)
def normalize_obs(obs: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float, clip: float) -> np.ndarray:
    """(obs - mean) / sqrt(var + epsilon), clipped to [-clip, clip], as float32."""
    return np.clip((obs - mean) / np.sqrt(var + epsilon), -clip, clip).astype(np.float32)


class RunningMeanStdOfOne(RunningMeanStd):
    """gymnasium's RunningMeanStd, with a shortcut for a batch of one (one env, the default): its mean is the row
    itself and its variance 0, the very values np.mean and np.var return, without their cost at every step."""

    def update(self, x: np.ndarray) -> None:
        if len(x) == 1:
            self.update_from_moments(x[0], np.zeros_like(x[0]), 1)
        else:
            super().update(x)


class NormalizeObservation(gym.vector.VectorWrapper):
    """Running mean/std normalization and clipping of a vector env's observations, for same-step autoreset.

    gymnasium 1.4's gym.wrappers.vector.NormalizeObservation refuses same-step autoreset: above such an env it
    would normalize the returned observations but leave info["final_obs"] raw, and a truncated episode would
    bootstrap from V(raw final obs), an input on a scale the value network never sees. This wrapper also
    normalizes every info["final_obs"] entry, with the very statistics that normalized this step's
    observations (final observations do not update them). `obs_rms` (mean, var, count) is the state to save;
    `update_running_mean = False` freezes it, as in evaluation.
    """

    def __init__(self, env: gym.vector.VectorEnv, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__(env)
        self.clip, self.epsilon = clip, epsilon
        self.obs_rms = RunningMeanStdOfOne(shape=self.env.single_observation_space.shape)
        self.update_running_mean = True
        self.single_observation_space = gym.spaces.Box(-clip, clip, self.env.single_observation_space.shape, np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        return normalize_obs(obs, self.obs_rms.mean, self.obs_rms.var, self.epsilon, self.clip)

    def reset(self, *, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        return self.normalize(obs), infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        if "final_obs" in infos:
            final_obs = infos["final_obs"].copy()  # object array, one entry per env, set where "_final_obs"
            for i in np.nonzero(infos["_final_obs"])[0]:
                final_obs[i] = self.normalize(final_obs[i])
            infos["final_obs"] = final_obs
        return self.normalize(obs), rewards, terminations, truncations, infos


def rms_state(rms: RunningMeanStd) -> dict:
    """RunningMeanStd as tensors, so the checkpoint loads with torch.load(weights_only=True)."""
    return {"mean": torch.as_tensor(rms.mean), "var": torch.as_tensor(rms.var), "count": float(rms.count)}


def load_rms_state(rms: RunningMeanStd, state: dict) -> None:
    rms.mean, rms.var, rms.count = state["mean"].numpy(), state["var"].numpy(), state["count"]


class Statistics:
    """A checkpoint entry for one normalization wrapper's RunningMeanStd (`obs_rms` or `return_rms`), read from
    the wrapper at save and load time: a restored environment state replaces the wrapper's object."""

    def __init__(self, wrapper: gym.vector.VectorWrapper, name: str):
        self.wrapper, self.name = wrapper, name

    def state_dict(self) -> dict:
        return rms_state(getattr(self.wrapper, self.name))

    def load_state_dict(self, state: dict) -> None:
        load_rms_state(getattr(self.wrapper, self.name), state)


class HostSteps(gym.vector.VectorWrapper):
    """What PPG's loop does on the host with each step of its envpool envs: the rewards scaled by `normalizer` (a
    RewardNormalizer, None: as they are) from real transitions only (a step right after an episode end is envpool's
    reset step, not one), and env 0's frames given to `video` (a VideoRecorder; None: no video)."""

    def __init__(self, env: gym.vector.VectorEnv, normalizer: Optional["RewardNormalizer"],
                 video: Optional[VideoRecorder]):
        super().__init__(env)
        self.normalizer, self.video, self.prev_done = normalizer, video, np.zeros(env.num_envs, dtype=bool)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = np.logical_or(terminated, truncated)
        if self.normalizer is not None:
            reward = self.normalizer(reward, done, ~self.prev_done)
        if self.video is not None:
            self.video.add(obs[0], bool(done[0]))
        self.prev_done = done
        return obs, reward, terminated, truncated, info


class RewardNormalizer:
    """Scales rewards by the running std of the discounted return (PPG code, Baselines' VecNormalize), then clips.

    Only real transitions update the statistics; the return accumulator restarts after every episode end.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.ret = np.zeros(num_envs)
        self.mean, self.var, self.count = 0.0, 1.0, epsilon

    def update(self, x: np.ndarray) -> None:
        """Parallel mean/variance update (Chan et al.) with the batch x."""
        if x.size == 0:
            return
        b_mean, b_var, b_count = x.mean(), x.var(), x.size
        delta, total = b_mean - self.mean, self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.mean, self.var, self.count = self.mean + delta * b_count / total, m2 / total, total

    def state_dict(self) -> dict:
        """The statistics for a checkpoint. The running returns are left out: a resumed run starts new episodes."""
        return {"mean": float(self.mean), "var": float(self.var), "count": float(self.count)}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]

    def __call__(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray) -> np.ndarray:
        self.ret = np.where(valid, self.ret * self.gamma + reward, self.ret)
        self.update(self.ret[valid])
        scaled = np.clip(reward / np.sqrt(self.var + self.epsilon), -self.clip, self.clip)
        self.ret[done] = 0.0
        return scaled
