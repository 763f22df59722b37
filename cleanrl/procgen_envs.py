# docs: docs/contributing.md (the layout of cleanrl/)
"""Procgen's environments as PPG's training loop uses them: envpool's games stepped together, their rewards normalized
on the host, env 0's frames made into videos, and tensors in and out on the run's device."""

from typing import Optional

import gymnasium as gym
import torch

import environments
from messages import say


def training_envs(env_id: str, args, run) -> tuple[gym.vector.VectorEnv, Optional[environments.RewardNormalizer]]:
    """The envs of a training run (--num-envs of the envpool id `env_id`, --env-threads, --capture-video; the rewards
    the update learns from scaled by a RewardNormalizer with --norm-reward) wrapped in environments.OnDevice, and that
    normalizer (None without the flag), whose statistics a checkpoint keeps. Episode statistics report the raw reward.

    envpool's state cannot be saved: a resumed run builds its environments with the seed seed + global_step (seeds not
    used before), so the episodes in progress at the checkpoint are dropped; it counts its episodes from 0 again, and
    its videos get file names of their own, so they never overwrite the earlier ones."""
    threads, why = environments.env_worker_threads(args.env_threads)
    say(f"environments: {args.num_envs} stepped together; {threads} envpool threads ({why}); "
        f"{torch.get_num_threads()} torch CPU threads")
    video_prefix = "rl-video" if run.checkpoint is None else f"rl-video-resumed-at-{run.global_step}"
    video = environments.VideoRecorder(f"videos/{run.name}", video_prefix) if args.capture_video else None
    normalizer = environments.RewardNormalizer(args.num_envs, args.gamma) if args.norm_reward else None
    envs = environments.make_procgen_envs(env_id, args.num_envs, args.seed + run.global_step, threads)
    return environments.OnDevice(environments.HostSteps(envs, normalizer, video), run.device), normalizer
