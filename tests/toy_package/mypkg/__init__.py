"""A package of your own that registers a gymnasium environment: importing it registers Corridor-v0 (and its
variants), which the scripts then train on with `--env-id mypkg:Corridor-v0` (gymnasium imports `mypkg` first).

The environment: an agent on a corridor of 8 cells starts in cell 0 and is rewarded 1 for reaching the last cell
(the episode then terminates), -0.01 for every other step; the time limit cuts an episode after 50 steps."""

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import FlattenObservation

LENGTH = 8


class Corridor(gym.Env):
    """Observes a Dict (where the agent is, how far the goal is); moves left or right (Discrete), or by a step in
    [-1, 1] with `continuous=True` (Box)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, continuous: bool = False, render_mode=None):
        self.continuous, self.render_mode = continuous, render_mode
        self.observation_space = gym.spaces.Dict({
            "position": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
            "distance": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
        })
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        self.position = 0.0

    def observation(self) -> dict:
        where = self.position / (LENGTH - 1)
        return {"position": np.array([where], np.float32), "distance": np.array([1.0 - where], np.float32)}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0.0
        return self.observation(), {}

    def step(self, action):
        move = float(np.clip(action[0], -1.0, 1.0)) if self.continuous else (1.0 if action == 1 else -1.0)
        self.position = float(np.clip(self.position + move, 0.0, LENGTH - 1))
        reached = self.position >= LENGTH - 1
        return self.observation(), 1.0 if reached else -0.01, reached, False, {}

    def render(self):
        frame = np.zeros((16, 16 * LENGTH, 3), np.uint8)
        cell = int(round(self.position))
        frame[:, 16 * cell : 16 * (cell + 1)] = 255
        return frame


def flat_corridor(**kwargs) -> gym.Env:
    """The corridor with its observations flattened to one 1-D array (what the classic-control and MuJoCo scripts
    take): a wrapper applied where the env is registered, so training, evaluation and videos all get it."""
    return FlattenObservation(Corridor(**kwargs))


def scaled_cartpole(**kwargs) -> gym.Env:
    """A wrapper around an env you did not write: CartPole with its rewards scaled by 0.1."""
    return gym.wrappers.TransformReward(gym.make("CartPole-v1", **kwargs), lambda reward: 0.1 * reward)


# The raw env: a Dict observation, which no script takes (it fails in one line, naming the space).
gym.register("CorridorDict-v0", entry_point=Corridor, max_episode_steps=50)
# The ids to train on: flattened, with discrete or continuous moves.
gym.register("Corridor-v0", entry_point=flat_corridor, max_episode_steps=50)
gym.register("CorridorContinuous-v0", entry_point=flat_corridor, kwargs={"continuous": True}, max_episode_steps=50)
gym.register("ScaledCartPole-v0", entry_point=scaled_cartpole)  # CartPole-v1's own time limit is kept inside
