# docs: docs/contributing.md (the layout of cleanrl/)
"""The evaluation loop (evaluate_episodes) and videos made from observations."""

from typing import Callable, Optional

import numpy as np
import torch


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
