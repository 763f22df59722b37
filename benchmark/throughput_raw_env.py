# docs: docs/benchmark.md
"""The raw-environment side of benchmark/throughput.py: steps per second of a vector env alone, random actions.

Started by throughput.py as `python benchmark/throughput_raw_env.py '<json spec>'` (never imported by the scripts,
and it imports none of them). It builds the vector env the way the compared script builds it, steps it with random
actions (no network, no learning) for `seconds` after `warmup_steps` unmeasured steps, and prints one line
`RAW_ENV {"sps": ..., "steps": ..., "seconds": ...}`: the most steps per second any trainer could reach with that
vector env on this machine. Kinds:
- "sync": gymnasium SyncVectorEnv of `num_envs` copies of `env_id` with same-step autoreset and the vector
  RecordEpisodeStatistics, as the classic-control and MuJoCo scripts build it;
- "atari": ale-py's native AtariVectorEnv (C++, threaded) with the settings of the Atari scripts' default
  "ale-vector" backend: frameskip 4 with max-pooling, 84x84 grayscale, 4 stacked frames, up to 30 no-ops and FIRE
  at reset, no episodic life, no reward clipping, same-step autoreset; the game and its emulator settings
  (sticky actions, action set, frame limit) are read from the gymnasium registration of `env_id`;
- "envpool-atari": envpool's Atari with the settings the JAX script gives it (episodic life, clipped rewards,
  envpool's next-step autoreset), stepped from Python (the script steps it inside XLA);
- "procgen": envpool's Procgen (`envpool.make_gymnasium(env_id, num_envs, seed, num_levels=0, start_level=0)`)
  with the vector RecordEpisodeStatistics, as ppg_procgen.py builds it.

Run (by hand):
    python benchmark/throughput_raw_env.py '{"kind": "sync", "env_id": "CartPole-v1", "num_envs": 4, "seconds": 2, "seed": 1}'
"""

import json
import sys
import time

import gymnasium as gym
import numpy as np


def make(spec: dict) -> gym.vector.VectorEnv:
    kind, num_envs = spec["kind"], spec["num_envs"]
    if kind == "sync":
        env_id = spec["env_id"]
        if env_id.startswith(("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "Swimmer", "InvertedPendulum")):
            import mujoco  # noqa: F401  (fails clearly if the MuJoCo extra is missing)
        envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
        return gym.wrappers.vector.RecordEpisodeStatistics(envs)
    if kind == "atari":
        import ale_py
        from ale_py.vector_env import AtariVectorEnv

        gym.register_envs(ale_py)
        # the emulator settings the id stands for, from its registration (as the Atari scripts read them)
        kwargs = gym.spec(spec["env_id"]).kwargs
        return AtariVectorEnv(
            kwargs["game"],
            num_envs,
            repeat_action_probability=float(kwargs.get("repeat_action_probability", 0.25)),
            full_action_space=bool(kwargs.get("full_action_space", False)),
            max_num_frames_per_episode=int(kwargs.get("max_num_frames_per_episode", 108000)),
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            img_height=84,
            img_width=84,
            grayscale=True,
            stack_num=4,
            frameskip=4,
            maxpool=True,
            noop_max=30,
            use_fire_reset=True,
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
        )
    if kind == "envpool-atari":  # as cleanrl/environments.make_envpool_atari builds it for the JAX script
        import envpool

        game = spec["env_id"].replace("NoFrameskip-v4", "-v5")
        return envpool.make(game, env_type="gymnasium", num_envs=num_envs, seed=spec["seed"], episodic_life=True,
                            reward_clip=True, repeat_action_probability=0.0, noop_max=30, use_fire_reset=True)
    if kind == "procgen":
        import envpool
        import envpool.procgen  # noqa: F401

        envs = envpool.make_gymnasium(spec["env_id"], num_envs=num_envs, seed=spec["seed"], num_levels=0, start_level=0)
        return gym.wrappers.vector.RecordEpisodeStatistics(envs)
    raise SystemExit(f"error: unknown raw env kind {kind!r}")


def measure(spec: dict) -> dict:
    envs = make(spec)
    if spec["kind"] in ("procgen", "envpool-atari"):
        envs.reset()  # envpool takes its seed at creation (above) and ignores reset's
    else:
        envs.reset(seed=spec["seed"])
    envs.action_space.seed(spec["seed"])
    rng = np.random.default_rng(spec["seed"])

    def sample():
        if spec["kind"] in ("procgen", "envpool-atari"):
            # envpool's action_space is one env's Discrete space, and it wants int32 actions, one per env
            return rng.integers(0, envs.action_space.n, size=spec["num_envs"], dtype=np.int32)
        return envs.action_space.sample()

    for _ in range(spec.get("warmup_steps", 10)):
        envs.step(sample())
    n, start = 0, time.perf_counter()
    while True:
        envs.step(sample())
        n += 1
        seconds = time.perf_counter() - start
        if seconds >= spec["seconds"]:
            break
    envs.close()
    steps = n * spec["num_envs"]
    return {"sps": steps / seconds, "steps": steps, "seconds": seconds}


if __name__ == "__main__":
    print("RAW_ENV " + json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
