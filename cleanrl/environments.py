# docs: docs/contributing.md (the layout of cleanrl/)
"""The environments of the classic-control and MuJoCo scripts (a SyncVectorEnv with same-step autoreset and episode
statistics) and what every script's envs share: OnDevice (the envs as a training loop on a device uses them), the
normalization wrappers whose statistics a checkpoint keeps, and the space checks. Atari is in atari_envs.py, Procgen
in procgen_envs.py, the evaluation loop and videos in evaluation.py."""

import os
import sys
from typing import Callable, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd

import speed
from messages import fail, warn


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


# Normalization wrappers with state to save: observations (same-step autoreset aware); Procgen's rewards: procgen_envs.py
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
