# docs: docs/benchmark.md
"""The Stable-Baselines3 side of benchmark/throughput.py; runs inside the separate SB3 virtual environment.

It is started by throughput.py as `<sb3 venv>/bin/python benchmark/throughput_sb3_helpers.py '<json spec>'`, never
imported by our code. The spec names the algorithm, env id, number of envs, budget, seed and the SB3 keyword
arguments that mirror our script's hyperparameters (throughput.py holds that mapping), and optionally "atari": true
(SB3's Atari preprocessing, make_atari_env + VecFrameStack(4), CnnPolicy) and "device". It trains once and prints one
line `THROUGHPUT {"sps": ..., "learn_sps": ..., "learn_seconds": ..., "timesteps": ..., "versions": {...}}`.
- sps: the rule of our scripts' charts/SPS: steps per second after a warm-up, the clock starting at the first
  rollout that begins after the first gradient update (PPO: after the first iteration; DQN/DDPG/TD3/SAC: after the
  first update past learning_starts) and stopping when `model.learn()` returns;
- learn_sps: all steps trained divided by the wall time of the whole `model.learn()` (model construction excluded).

Run (by hand, to check the venv):
    benchmark/results/.venv-sb3/bin/python benchmark/throughput_sb3_helpers.py '{"algo": "ppo", "env_id": "CartPole-v1", "n_envs": 4, "total_timesteps": 2048, "seed": 1, "kwargs": {"n_steps": 128}}'
"""

import json
import sys
import time

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize

ALGOS = {"ppo": PPO, "dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": DDPG}


def linear_schedule(initial: float):
    """SB3 calls a schedule with the remaining progress (1 at the start, 0 at the end): lr decays linearly to 0."""
    return lambda progress_remaining: progress_remaining * initial


def build(spec: dict):
    kwargs = dict(spec["kwargs"])
    if kwargs.pop("anneal_lr", False):
        kwargs["learning_rate"] = linear_schedule(kwargs["learning_rate"])
    policy_kwargs = kwargs.pop("policy_kwargs", {})
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[policy_kwargs["activation_fn"]]
    if spec.get("atari"):
        import ale_py

        gym.register_envs(ale_py)
        # SB3's AtariWrapper: no-op and FIRE reset, frame skip 4 with max-pooling, life loss ends an episode for
        # learning, 84x84 grayscale, reward clipping; then 4 stacked frames, as our Atari scripts preprocess
        env = make_atari_env(spec["env_id"], n_envs=spec["n_envs"], seed=spec["seed"], vec_env_cls=DummyVecEnv)
        env = VecFrameStack(env, n_stack=4)
    else:
        env = make_vec_env(spec["env_id"], n_envs=spec["n_envs"], seed=spec["seed"], vec_env_cls=DummyVecEnv)
    normalize = kwargs.pop("normalize", None)
    if normalize:
        env = VecNormalize(env, **normalize)
    if "action_noise_std" in kwargs:
        std = kwargs.pop("action_noise_std")
        n = env.action_space.shape[0]
        # our scripts scale the noise by the action range: std * (high - low) / 2 per dimension
        scale = (env.action_space.high - env.action_space.low) / 2.0
        kwargs["action_noise"] = NormalActionNoise(mean=np.zeros(n), sigma=std * scale * np.ones(n))
    algo = ALGOS[spec["algo"]]
    policy = "CnnPolicy" if spec.get("atari") else "MlpPolicy"
    device = spec.get("device", "cpu")
    return algo(policy, env, policy_kwargs=policy_kwargs, seed=spec["seed"], device=device, verbose=0, **kwargs)


class WarmupClock(BaseCallback):
    """Starts a clock at the first rollout that begins after the first gradient update (SB3 counts them in
    `_n_updates`), the point where our scripts start the clock of charts/SPS."""

    def __init__(self):
        super().__init__()
        self.start_time, self.start_step = None, None

    def _on_rollout_start(self) -> None:
        if self.start_time is None and self.model._n_updates > 0:
            self.start_time, self.start_step = time.time(), self.model.num_timesteps

    def _on_step(self) -> bool:
        return True


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    if spec.get("device", "cpu") == "cpu" and spec.get("one_thread", True):
        # as our scripts run in the default table: one intra-op thread (else torch's default, one per core)
        torch.set_num_threads(1)
    model = build(spec)
    clock = WarmupClock()
    start = time.time()
    model.learn(total_timesteps=spec["total_timesteps"], callback=clock)
    end = time.time()
    seconds = end - start
    if clock.start_time is None or model.num_timesteps <= clock.start_step:
        raise SystemExit("error: the budget ended before any step after the first gradient update; raise it")
    result = {
        "sps": (model.num_timesteps - clock.start_step) / (end - clock.start_time),
        "learn_sps": model.num_timesteps / seconds,
        "learn_seconds": seconds,
        "measured_steps": int(model.num_timesteps - clock.start_step),
        "timesteps": int(model.num_timesteps),
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__, "gymnasium": gym.__version__},
    }
    print("THROUGHPUT " + json.dumps(result), flush=True)
