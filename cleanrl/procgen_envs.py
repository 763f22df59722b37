# docs: docs/contributing.md (the layout of cleanrl/)
"""Procgen environments from envpool as PPG's training loop uses them (training_envs): envpool's games stepped together,
their rewards normalized on the host and env 0's frames made into videos (HostSteps), tensors in and out on the run's
device."""

from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from atari_envs import env_worker_threads
from environments import OnDevice
from evaluation import VideoRecorder
from messages import fail, say


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


def training_envs(env_id: str, args, run) -> tuple[OnDevice, Optional["RewardNormalizer"]]:
    """The envs of a training run (--num-envs of the envpool id `env_id`, --env-threads, --capture-video; the rewards
    the update learns from scaled by a RewardNormalizer with --norm-reward) wrapped in OnDevice, and that normalizer
    (None without the flag), whose statistics a checkpoint keeps. Episode statistics report the raw reward.

    envpool's state cannot be saved: a resumed run builds its environments with the seed seed + global_step (seeds not
    used before), so the episodes in progress at the checkpoint are dropped; it counts its episodes from 0 again, and
    its videos get file names of their own, so they never overwrite the earlier ones."""
    threads, why = env_worker_threads(args.env_threads)
    say(f"environments: {args.num_envs} stepped together; {threads} envpool threads ({why}); "
        f"{torch.get_num_threads()} torch CPU threads")
    video_prefix = "rl-video" if run.checkpoint is None else f"rl-video-resumed-at-{run.global_step}"
    video = VideoRecorder(f"videos/{run.name}", video_prefix) if args.capture_video else None
    normalizer = RewardNormalizer(args.num_envs, args.gamma) if args.norm_reward else None
    envs = make_procgen_envs(env_id, args.num_envs, args.seed + run.global_step, threads)
    return OnDevice(HostSteps(envs, normalizer, video), run.device), normalizer

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
