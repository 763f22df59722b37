# docs: docs/benchmark.md
"""The Stable-Baselines3 side of benchmark/throughput.py; runs inside the separate SB3 virtual environment.

It is started by throughput.py as `<sb3 venv>/bin/python benchmark/throughput_sb3_helpers.py '<json spec>'`, never
imported by our code. The spec names the algorithm, env id, number of envs, budget, seed and the SB3 keyword
arguments that mirror our script's hyperparameters (throughput.py holds that mapping). It trains once and prints one
line `THROUGHPUT {"sps": ..., "learn_seconds": ..., "timesteps": ..., "versions": {...}}`. SPS is the steps trained
divided by the wall time of `model.learn()` (model construction excluded, as our scripts exclude set-up from their
charts/SPS).

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
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

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
    return algo("MlpPolicy", env, policy_kwargs=policy_kwargs, seed=spec["seed"], device="cpu", verbose=0, **kwargs)


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    # as our scripts do on CPU for small networks: one intra-op thread
    torch.set_num_threads(1)
    model = build(spec)
    start = time.time()
    model.learn(total_timesteps=spec["total_timesteps"])
    seconds = time.time() - start
    result = {
        "sps": model.num_timesteps / seconds,
        "learn_seconds": seconds,
        "timesteps": int(model.num_timesteps),
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__, "gymnasium": gym.__version__},
    }
    print("THROUGHPUT " + json.dumps(result), flush=True)
