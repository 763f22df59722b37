# docs: docs/benchmark.md
"""Training throughput of every script, plain and with its speed flags, next to Stable-Baselines3 and the raw env.

One invocation measures, for each script in --scripts, `rounds` alternating rounds of
    [plain, each speed-flag variant (--variants), Stable-Baselines3 (where SB3 has the algorithm), upstream CleanRL
     (with --cleanrl, where it has the script), raw env]
so load noise on a shared machine hits every column alike, and reports medians over the rounds and the ratios
variant/plain, ours/SB3, ours/CleanRL and ours/raw env, in results.json and results.md (with the machine, torch
version, the budget of each row and the 1-minute load average before and after every run).
- ours: `python cleanrl/<script>.py` (ppo_atari_multigpu.py: `python -m torch.distributed.run --standalone
  --nproc_per_node=2`, gloo on CPU) in a scratch working directory, with the hyperparameters that shape the work
  passed explicitly (SPECS); SPS = its last `charts/SPS`, which the scripts measure after a warm-up that holds the
  compilation (on-policy: from the end of the first iteration; off-policy: from just after the first gradient update).
- variants: `--variants compile compile+amp` runs `--compile` and `--compile --amp`: each variant is words joined by
  `+`, each word a boolean flag of the scripts, or flag=value (`compile+pipeline-envs=off`: `--compile
  --pipeline-envs off`, the ppo_atari scripts only; `loops=python`: `--loops python`, the JAX script only, whose
  torch-flag variants are n/a). `amp` applies to the CNN scripts only and `cudagraphs` to --cuda runs only; elsewhere
  the cell says n/a. A run that fails (a script without the flag, a crash, --timeout) is
  reported with its exit code, error line and log, the table goes on, and the tool exits 1 at the end.
- SB3: benchmark/throughput_sb3_helpers.py run by the python of a SEPARATE virtual environment (Stable-Baselines3 is
  not a dependency of this project), with keyword arguments that mirror ours (SPECS); SPS by the same warm-up rule.
- cleanrl: the upstream CleanRL script of the same name (a snapshot of github:vwxyzjn/cleanrl given by --cleanrl, never
  copied into this project), run as its users run it (ppo_atari_multigpu.py under torchrun, as ours): by the python of
  its own virtual environment (gymnasium 0.29.1, numpy<2; --cleanrl-python), its default torch threads, --no-cuda
  unless --cuda, the snapshot's root as the only PYTHONPATH (for cleanrl_utils), with the flags that do the same work
  as ours (SPECS `upstream`); its Atari scripts after `import ale_py` (ALE_LAUNCHER). Its charts/SPS
  counts from the process start (warm-up included), so its steady-state SPS is taken from the wall times of its
  charts/SPS events instead: (last step - first step) / (last wall time - first wall time), which starts after its
  first iteration (on-policy) or 100 steps after its first update (off-policy), as ours does.
- process SPS (every trainer run): the run's env steps / the seconds of its whole process, start-up and warm-up
  included: the speed a user waiting for the run sees.
- raw env: benchmark/throughput_raw_env.py: the script's vector env (SyncVectorEnv for classic control and MuJoCo,
  ale-py's native AtariVectorEnv for Atari, envpool for Procgen) with the script's number of envs, random actions,
  no learning, for --raw-seconds: the ceiling for any trainer's SPS with that env.
On CPU our scripts (--torch-threads 1) and the SB3 helper use one torch thread, upstream CleanRL torch's default;
--threads defaults runs every trainer at its own default instead.

Set up the SB3 environment once (the CPU torch wheel pinned, so pip does not pull a CUDA build; ale-py and OpenCV
for SB3's Atari wrappers, neither depends on torch):
    python benchmark/throughput.py --setup-sb3-venv benchmark/results/.venv-sb3
and the upstream CleanRL one (gymnasium 0.29.1, numpy<2, ale-py 0.9, mujoco 2.3.3, the same CPU torch):
    python benchmark/throughput.py --setup-cleanrl-venv benchmark/results/.venv-cleanrl

Run:
    python benchmark/throughput.py                                   # the whole CPU table (about 35 min idle)
    python benchmark/throughput.py --scripts ppo dqn --rounds 1      # a part of it
    python benchmark/throughput.py --cleanrl ~/src/cleanrl           # with upstream CleanRL (its repository root)
    python benchmark/throughput.py --cuda --scripts ppo_atari ppo_continuous_action sac_continuous_action \
        td3_continuous_action dqn_atari --variants compile+cudagraphs compile+cudagraphs+amp --no-sb3 --rounds 1 \
        --raw-seconds 2 --timeout 200 --out benchmark/results/speed-gpu     # the GPU table
    python benchmark/throughput.py --cuda --scripts ppo_atari ppo_atari_envpool_xla_jax_scan --variants \
        compile+cudagraphs loops=python --no-sb3 --rounds 1 --raw-seconds 2 --timeout 200 \
        --out benchmark/results/speed-jax-gpu      # torch against JAX on a GPU (needs JAX with CUDA there)
    python benchmark/throughput.py --help
"""

import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmark.kept import scalar_events  # noqa: E402  (a tool, not an algorithm script)


@dataclass
class Args:
    scripts: list[str] = field(default_factory=lambda: list(SPECS))
    """the scripts to measure (keys of SPECS: the names in cleanrl/ without .py)"""
    variants: list[str] = field(default_factory=lambda: ["compile"])
    """the speed-flag variants next to the plain path: words joined by '+', each a boolean flag (compile+amp runs
    --compile --amp); amp applies to the CNN scripts only, cudagraphs to --cuda runs only"""
    rounds: Optional[int] = None
    """alternating rounds per script; None uses SPECS (2 for classic control and MuJoCo, 1 for Atari and Procgen)"""
    budget_scale: float = 1.0
    """multiplies the measured part of every budget in SPECS (PPO-style iterations, off-policy steps after
    learning starts); at least 2 iterations (the first is warm-up) or 200 measured steps remain"""
    cuda: bool = False
    """if toggled, our runs get --cuda and SB3 runs on cuda; else --no-cuda and no GPU is visible to any run"""
    sb3: bool = True
    """if toggled, measure Stable-Baselines3 where it has the algorithm"""
    raw_seconds: float = 3.0
    """seconds of stepping in each raw env measurement"""
    seed: int = 1
    """the seed of every run"""
    sb3_python: str = "benchmark/results/.venv-sb3/bin/python"
    """the python of the virtual environment that has stable-baselines3"""
    setup_sb3_venv: Optional[str] = None
    """if set, create a virtual environment with stable-baselines3 at this path, and exit"""
    cleanrl: Optional[str] = None
    """a snapshot of upstream CleanRL (github:vwxyzjn/cleanrl): its repository root, or its cleanrl/ folder with
    cleanrl_utils/ beside it; None leaves the cleanrl column out"""
    cleanrl_python: str = "benchmark/results/.venv-cleanrl/bin/python"
    """the python of the virtual environment that runs the upstream CleanRL scripts"""
    setup_cleanrl_venv: Optional[str] = None
    """if set, create a virtual environment for the upstream CleanRL scripts at this path, and exit"""
    out: str = "benchmark/results/speed"
    """the folder for results.json, results.md and the scratch runs (work/<script>/<run>/round<k>/)"""
    timeout: float = 900
    """seconds after which one run is killed (it then counts as failed)"""
    threads: Literal["one", "defaults"] = "one"
    """CPU threads: `one` runs ours (--torch-threads 1) and SB3 on one torch thread each (the same resources);
    `defaults` runs every trainer as its users run it: ours at each script's default (the free cores for the wide
    and CNN networks), SB3 and upstream CleanRL at torch's default (one thread per core)"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


# What is compared, per script. `ours` are flags of our script (given explicitly, so a changed default cannot skew the
# comparison); `sb3` are the SB3 arguments that do the same work; `raw` the kind of raw env (see
# throughput_raw_env.py). Budgets: on-policy scripts run `iterations` iterations of `iteration` steps (the first one
# is warm-up, not measured); off-policy scripts `learning_starts` random steps (not measured) plus `measured` steps.
# They are sized so the whole default table takes about 35 minutes on an idle 2-core machine, each measured window
# lasting several seconds. Mapping notes:
# - PPO: SB3 batch_size is our minibatch size (num_envs * num_steps / num_minibatches); n_epochs = update_epochs;
#   clip_range_vf = clip_coef because our value loss is clipped (clip_vloss); Adam eps 1e-5 as ours; separate
#   64-64 tanh actor and critic with orthogonal init (SB3's default for MlpPolicy); linear lr annealing.
# - PPO continuous: VecNormalize for our observation and reward normalization (obs clipped at 10; SB3 also clips
#   the normalized reward at 10), log std initialized at 0 and state-independent as ours.
# - PPO Atari: SB3's CnnPolicy is the Nature CNN shared by the policy and value heads, as ours; SB3's AtariWrapper
#   preprocesses in Python wrappers over DummyVecEnv where ours uses ale-py's native vector env (the raw env column
#   shows that env's ceiling).
# - DQN: 120-84 ReLU Q-network as ours; SB3 clips gradients at max_grad_norm (we set it too high to bind) and uses
#   the Huber loss where ours uses the squared error (same cost); target_update_interval and train_freq count env
#   steps as ours do with 1 env. DQN Atari: Nature CNN Q-network, Huber loss in both.
# - DDPG/TD3/SAC: ReLU networks of the scripts' width (HIDDEN, 256-256), one gradient step per env step after
#   learning_starts, delayed actor updates every policy_frequency steps for TD3 (SB3 policy_delay); SB3's DDPG
#   updates its actor at every step (it has no policy delay) where ours does every 2nd, so SB3 does more work
#   there; SB3 uses one learning rate for actor and critic (noted per spec).
# - No SB3 counterpart: C51 (classic and Atari), PPG, and multi-process PPO.
# `upstream` are the flags of the upstream CleanRL script of the same name that do the same work (its defaults are
# not relied on either); `upstream_env_id` where its gymnasium 0.29 lacks our env id; `upstream_na` why there is no
# upstream column. Mapping notes:
# - Same flag names and the same hyperparameters as ours throughout; upstream CleanRL has no --env-backend (its Atari
#   scripts step Python wrappers (cleanrl_utils.atari_wrappers) over gymnasium's SyncVectorEnv, ours ale-py's native
#   vector env) and its DDPG has no --num-envs (always one env). Its DDPG and TD3 have one --learning-rate for actor
#   and critic (ours: --policy-lr and --q-lr, both 3e-4 here).
# - MuJoCo: HalfCheetah-v4 upstream (gymnasium 0.29 has no v5; the same model file and observation; v5 changed
#   mostly the env's arguments and info keys).
# - Off-policy: upstream loops global_step over range(total_timesteps) and logs charts/SPS at multiples of 100, so it
#   gets total_timesteps + 1 (one env step more) to log the last step that ours logs (see run_cleanrl).
PPO_MLP = dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn="tanh", ortho_init=True, optimizer_kwargs=dict(eps=1e-5))
OFF_POLICY_CONTINUOUS = ["--num-envs", "1", "--batch-size", "256", "--buffer-size", "100000", "--tau", "0.005"]

def script_width(script: str) -> int:
    """The hidden-layer width a script names once (`HIDDEN = 256`), read from its source (a tool never imports the
    scripts), so that SB3 is measured with networks of the same size."""
    return int(re.search(r"^HIDDEN = (\d+)", (ROOT / "cleanrl" / script).read_text(), re.MULTILINE).group(1))

SPECS = {
    "ppo": dict(
        script="ppo.py", env_id="CartPole-v1", family="classic", num_envs=4, iteration=512, iterations=100,
        ours=["--num-envs", "4", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
              "--learning-rate", "2.5e-4", "--anneal-lr", "--ent-coef", "0.01", "--clip-coef", "0.2", "--clip-vloss"],
        sb3=dict(algo="ppo", kwargs=dict(
            n_steps=128, batch_size=128, n_epochs=4, learning_rate=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
            clip_range=0.2, clip_range_vf=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, normalize_advantage=True,
            policy_kwargs=PPO_MLP,
        )),
        upstream=["--num-envs", "4", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
                  "--learning-rate", "2.5e-4", "--anneal-lr", "--ent-coef", "0.01", "--clip-coef", "0.2", "--clip-vloss"],
        raw="sync",
    ),
    "ppo_continuous_action": dict(
        script="ppo_continuous_action.py", env_id="HalfCheetah-v5", family="mujoco", num_envs=1, iteration=2048, iterations=5,
        ours=["--num-envs", "1", "--num-steps", "2048", "--num-minibatches", "32", "--update-epochs", "10",
              "--learning-rate", "3e-4", "--anneal-lr", "--ent-coef", "0.0", "--clip-vloss"],
        sb3=dict(algo="ppo", kwargs=dict(
            n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
            clip_range=0.2, clip_range_vf=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
            normalize=dict(norm_obs=True, norm_reward=True, clip_obs=10.0, gamma=0.99),
            policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn="tanh", log_std_init=0.0,
                               optimizer_kwargs=dict(eps=1e-5)),
        )),
        upstream=["--num-envs", "1", "--num-steps", "2048", "--num-minibatches", "32", "--update-epochs", "10",
                  "--learning-rate", "3e-4", "--anneal-lr", "--ent-coef", "0.0", "--clip-vloss"],
        upstream_env_id="HalfCheetah-v4",
        raw="sync",
    ),
    "ppo_atari": dict(
        script="ppo_atari.py", env_id="BreakoutNoFrameskip-v4", family="atari", cnn=True, num_envs=8, iteration=1024,
        iterations=3,
        ours=["--env-backend", "ale-vector", "--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4",
              "--update-epochs", "4", "--learning-rate", "2.5e-4", "--anneal-lr", "--clip-coef", "0.1", "--ent-coef", "0.01"],
        sb3=dict(algo="ppo", atari=True, kwargs=dict(
            n_steps=128, batch_size=256, n_epochs=4, learning_rate=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
            clip_range=0.1, clip_range_vf=0.1, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
            policy_kwargs=dict(optimizer_kwargs=dict(eps=1e-5)),
        )),
        upstream=["--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
                  "--learning-rate", "2.5e-4", "--anneal-lr", "--clip-coef", "0.1", "--ent-coef", "0.01"],
        raw="atari",
    ),
    # the JAX script, the same work: its defaults (--loops auto: Python loops of jitted steps on a CPU); JAX uses every
    # core whatever --threads says (compare it with --threads defaults, where ppo_atari takes the free cores too)
    "ppo_atari_envpool_xla_jax_scan": dict(
        script="ppo_atari_envpool_xla_jax_scan.py", env_id="BreakoutNoFrameskip-v4", family="atari", num_envs=8,
        iteration=1024, iterations=3,
        ours=["--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
              "--learning-rate", "2.5e-4", "--anneal-lr", "--clip-coef", "0.1", "--ent-coef", "0.01"],
        raw="envpool-atari", jax=True,
        upstream_na="upstream's script needs gym and the JAX, flax and envpool APIs of 2022",
    ),
    "ppo_atari_multigpu": dict(
        script="ppo_atari_multigpu.py", env_id="BreakoutNoFrameskip-v4", family="atari", cnn=True, num_envs=8,
        iteration=1024, iterations=3, nproc=2,
        ours=["--env-backend", "ale-vector", "--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4",
              "--update-epochs", "4", "--learning-rate", "2.5e-4", "--anneal-lr", "--clip-coef", "0.1", "--ent-coef", "0.01"],
        # upstream counts envs per rank (--local-num-envs); its all-reduce backend stays its default, gloo (ours: nccl
        # on CUDA), and its ranks print a debug line per iteration
        upstream=["--local-num-envs", "4", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
                  "--learning-rate", "2.5e-4", "--anneal-lr", "--clip-coef", "0.1", "--ent-coef", "0.01"],
        raw="atari",  # one native vector env with all 8 envs: the env work of both ranks together
    ),
    "dqn": dict(
        script="dqn.py", env_id="CartPole-v1", family="classic", num_envs=1, learning_starts=1000, measured=24000,
        ours=["--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "2.5e-4", "--batch-size", "128",
              "--train-frequency", "10", "--target-network-frequency", "500", "--tau", "1.0",
              "--exploration-fraction", "0.5", "--start-e", "1.0", "--end-e", "0.05"],
        sb3=dict(algo="dqn", kwargs=dict(
            buffer_size=10000, learning_rate=2.5e-4, batch_size=128, train_freq=10,
            gradient_steps=1, target_update_interval=500, tau=1.0, gamma=0.99, exploration_fraction=0.5,
            exploration_initial_eps=1.0, exploration_final_eps=0.05, max_grad_norm=1e9,
            policy_kwargs=dict(net_arch=[120, 84], activation_fn="relu"),
        )),
        upstream=["--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "2.5e-4", "--batch-size", "128",
                  "--train-frequency", "10", "--target-network-frequency", "500", "--tau", "1.0",
                  "--exploration-fraction", "0.5", "--start-e", "1.0", "--end-e", "0.05"],
        raw="sync",
    ),
    "c51": dict(
        script="c51.py", env_id="CartPole-v1", family="classic", num_envs=1, learning_starts=1000, measured=12000,
        ours=["--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "2.5e-4", "--batch-size", "128",
              "--train-frequency", "10", "--target-network-frequency", "500", "--n-atoms", "101"],
        upstream=["--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "2.5e-4", "--batch-size", "128",
                  "--train-frequency", "10", "--target-network-frequency", "500", "--n-atoms", "101"],
        raw="sync",
    ),
    "dqn_atari": dict(
        script="dqn_atari.py", env_id="BreakoutNoFrameskip-v4", family="atari", cnn=True, num_envs=1,
        learning_starts=1000, measured=2000,
        ours=["--env-backend", "ale-vector", "--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "1e-4",
              "--batch-size", "32", "--train-frequency", "4", "--target-network-frequency", "1000"],
        sb3=dict(algo="dqn", atari=True, kwargs=dict(
            buffer_size=10000, learning_rate=1e-4, batch_size=32, train_freq=4, gradient_steps=1,
            target_update_interval=1000, tau=1.0, gamma=0.99, exploration_fraction=0.1, exploration_initial_eps=1.0,
            exploration_final_eps=0.01, max_grad_norm=1e9,
        )),
        upstream=["--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "1e-4", "--batch-size", "32",
                  "--train-frequency", "4", "--target-network-frequency", "1000"],
        raw="atari",
    ),
    "c51_atari": dict(
        script="c51_atari.py", env_id="BreakoutNoFrameskip-v4", family="atari", cnn=True, num_envs=1,
        learning_starts=1000, measured=2000,
        ours=["--env-backend", "ale-vector", "--num-envs", "1", "--buffer-size", "10000", "--batch-size", "32",
              "--train-frequency", "4", "--target-network-frequency", "1000"],
        upstream=["--num-envs", "1", "--buffer-size", "10000", "--batch-size", "32", "--train-frequency", "4",
                  "--target-network-frequency", "1000"],
        raw="atari",
    ),
    "ddpg_continuous_action": dict(
        script="ddpg_continuous_action.py", env_id="HalfCheetah-v5", family="mujoco", num_envs=1, learning_starts=1000,
        measured=2000,
        ours=[*OFF_POLICY_CONTINUOUS, "--policy-lr", "3e-4", "--q-lr", "3e-4", "--exploration-noise", "0.1",
              "--policy-frequency", "2"],
        sb3=dict(algo="ddpg", kwargs=dict(
            batch_size=256, buffer_size=100000, learning_rate=3e-4, tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=1, action_noise_std=0.1,
            policy_kwargs=dict(net_arch=[script_width("ddpg_continuous_action.py")] * 2, activation_fn="relu"),
        )),
        upstream=["--batch-size", "256", "--buffer-size", "100000", "--tau", "0.005", "--learning-rate", "3e-4",
                  "--exploration-noise", "0.1", "--policy-frequency", "2"],
        upstream_env_id="HalfCheetah-v4",
        raw="sync",
    ),
    "td3_continuous_action": dict(
        script="td3_continuous_action.py", env_id="HalfCheetah-v5", family="mujoco", num_envs=1, learning_starts=1000,
        measured=1200,
        ours=[*OFF_POLICY_CONTINUOUS, "--policy-lr", "3e-4", "--q-lr", "3e-4", "--exploration-noise", "0.1",
              "--policy-frequency", "2", "--policy-noise", "0.2", "--noise-clip", "0.5"],
        sb3=dict(algo="td3", kwargs=dict(
            batch_size=256, buffer_size=100000, learning_rate=3e-4, tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=1, action_noise_std=0.1, policy_delay=2, target_policy_noise=0.2,
            target_noise_clip=0.5,
            policy_kwargs=dict(net_arch=[script_width("td3_continuous_action.py")] * 2, activation_fn="relu"),
        )),
        upstream=[*OFF_POLICY_CONTINUOUS, "--learning-rate", "3e-4", "--exploration-noise", "0.1", "--policy-frequency", "2",
                  "--policy-noise", "0.2", "--noise-clip", "0.5"],
        upstream_env_id="HalfCheetah-v4",
        raw="sync",
    ),
    "sac_continuous_action": dict(
        script="sac_continuous_action.py", env_id="HalfCheetah-v5", family="mujoco", num_envs=1, learning_starts=1000,
        measured=800,
        ours=[*OFF_POLICY_CONTINUOUS, "--autotune", "--policy-lr", "3e-4", "--q-lr", "1e-3", "--policy-frequency", "2",
              "--target-network-frequency", "1"],
        # ours: 2 actor updates every 2nd step (as CleanRL), SB3: 1 every step, so the same number of actor updates;
        # SB3 has one learning rate for all networks, 3e-4 (our critic's is 1e-3; the cost is the same)
        sb3=dict(algo="sac", kwargs=dict(
            batch_size=256, buffer_size=100000, learning_rate=3e-4, tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=1, ent_coef="auto",
            policy_kwargs=dict(net_arch=[script_width("sac_continuous_action.py")] * 2, activation_fn="relu"),
        )),
        upstream=[*OFF_POLICY_CONTINUOUS, "--autotune", "--policy-lr", "3e-4", "--q-lr", "1e-3", "--policy-frequency", "2",
                  "--target-network-frequency", "1"],
        upstream_env_id="HalfCheetah-v4",
        raw="sync",
    ),
    "ppg_procgen": dict(
        script="ppg_procgen.py", env_id="StarpilotEasy-v0", family="procgen", cnn=True, num_envs=8,
        iteration=512, iterations=4,
        # 2 policy iterations per phase, so the measured iterations 2-4 hold 1 auxiliary phase (after iteration 2)
        # and the start of the next; smaller than the script's defaults (64 envs x 256 steps, 32 iterations per
        # phase), which would take hours per phase on a 2-core CPU
        ours=["--num-envs", "8", "--num-steps", "64", "--num-minibatches", "4", "--n-iteration", "2",
              "--e-auxiliary", "1", "--num-aux-rollouts", "4"],
        upstream_na="upstream ppg_procgen.py needs procgen, which does not install on Python 3.11",
        raw="procgen",
    ),
}  # fmt: skip
FAMILY_ROUNDS = {"classic": 2, "mujoco": 2, "atari": 1, "procgen": 1}


def make_venv(path: str, packages: list[str], flag: str) -> None:
    """A new virtual environment at path with packages, for the python that `flag` points at."""
    venv = Path(path)
    if venv.exists():
        fail(f"{venv} exists; remove it first or use it with {flag} {venv}/bin/python")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"installing into {venv}: {' '.join(packages)}", flush=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *packages], check=True)
    print(f"done; use it with {flag} {venv}/bin/python", flush=True)


def setup_sb3_venv(path: str) -> None:
    import ale_py
    import gymnasium
    import torch

    # the same torch, gymnasium and ale-py versions as ours, so only the library differs; the CPU torch build is
    # pinned (its wheel comes from PyPI's default index, which on Linux is the CUDA build: hence the version's +cpu
    # local tag must match what is installed here); ale-py and OpenCV (SB3's Atari wrappers) do not depend on torch
    torch_version = torch.__version__.split("+")[0]
    make_venv(path, [f"torch=={torch_version}", "stable-baselines3", f"gymnasium[classic-control,mujoco]=={gymnasium.__version__}",
                     f"ale-py=={ale_py.__version__}", "opencv-python-headless", "tensorboard"], "--sb3-python")  # fmt: skip


def setup_cleanrl_venv(path: str) -> None:
    import torch

    # what upstream CleanRL's scripts need, at the versions they were written for (gymnasium 0.29 with its v4 MuJoCo
    # envs and imageio, numpy 1, ale-py 0.9, which registers the Atari ids when imported), and our CPU torch pinned (see
    # setup_sb3_venv); OpenCV below 4.12, whose wheels need numpy 2, for cleanrl_utils' Atari wrappers; rich for
    # its multi-GPU script
    torch_version = torch.__version__.split("+")[0]
    make_venv(path, [f"torch=={torch_version}", "gymnasium[mujoco]==0.29.1", "numpy<2", "tyro", "tensorboard", "ale-py==0.9.0",
                     "mujoco==2.3.3", "opencv-python-headless<4.12", "rich"], "--cleanrl-python")  # fmt: skip


def steady_sps(events: list[tuple[int, float, float]]) -> Optional[float]:
    """Env steps per second between the first and the last logged event, from their steps and wall times; None
    with fewer than two events at distinct times."""
    if len(events) < 2 or events[-1][1] <= events[0][1]:
        return None
    return (events[-1][0] - events[0][0]) / (events[-1][1] - events[0][1])


def budget(spec: dict, scale: float) -> tuple[int, str]:
    """(total timesteps, description) of one run of the spec, its measured part scaled."""
    if "iteration" in spec:
        iterations = max(2, round(spec["iterations"] * scale))
        return iterations * spec["iteration"], f"{iterations} iterations of {spec['iteration']}, the first one warm-up"
    measured = max(200, round(spec["measured"] * scale / 100) * 100)
    return spec["learning_starts"] + measured, f"{spec['learning_starts']} learning starts, then {measured} measured"


def variant_flags(variant: str) -> list[str]:
    """compile+amp -> --compile --amp; a word flag=value gives the flag its value (pipeline-envs=off)."""
    return [part for word in variant.split("+") for part in (f"--{word}".split("=", 1))]


def applies(variant: str, spec: dict, cuda: bool) -> Optional[str]:
    """None if the variant applies to the spec's script, else why not."""
    words = variant.split("+")
    loops = [word for word in words if word.startswith("loops=")]
    if spec.get("jax") and len(loops) < len(words):
        return "torch flags; XLA compiles the JAX script"
    if loops and not spec.get("jax"):
        return "loops: the JAX script only"
    if "amp" in words and not spec.get("cnn"):
        return "amp: CNN scripts only"
    if "cudagraphs" in words and not cuda:
        return "cudagraphs: CUDA only"
    if any(word.startswith("pipeline-envs=") for word in words) and not spec["script"].startswith("ppo_atari"):
        return "pipeline-envs: ppo_atari scripts only"
    return None


def error_line(log: Path) -> str:
    """The line of a failed run's log that says why: its last `error:` line, tyro's complaint, or the last line."""
    lines = [l.strip(" │╭╮╰╯─\t") for l in log.read_text(errors="replace").splitlines()]
    lines = [l for l in lines if l]
    for pattern in (r"^error:", r"^Unrecognized options:", r"^\w*(Error|Exception)\b"):
        hits = [l for l in lines if re.search(pattern, l)]
        if hits:
            return hits[-1]
    return lines[-1] if lines else "(empty log)"


def run_process(cmd: list[str], cwd: Path, env: dict, timeout: float) -> dict:
    """Run cmd in cwd with its output in cwd/log.txt. Returns wall seconds and, if it failed, why."""
    if cwd.exists():
        shutil.rmtree(cwd)
    cwd.mkdir(parents=True)
    log = cwd / "log.txt"
    start = time.time()
    with open(log, "w") as f:
        f.write("$ " + (f"PYTHONPATH={env['PYTHONPATH']} " if "PYTHONPATH" in env else "") + " ".join(cmd) + "\n")
        f.flush()
        # a session of its own, so a timeout also stops torchrun's workers
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"process_seconds": time.time() - start, "error": f"killed after --timeout {timeout:g} s (log {log})"}
        except BaseException:  # Ctrl-C or SIGTERM of the tool: the run goes too
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    seconds = time.time() - start
    if code != 0:
        return {"process_seconds": seconds, "error": f"exit {code}: {error_line(log)} (log {log})"}
    return {"process_seconds": seconds}


def run_env(cuda: bool) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", WANDB_MODE="offline")
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def script_argv(spec: dict, steps: int, seed: int, cuda: bool, threads: str = "one") -> list[str]:
    """The flags of our script's plain run: one torch thread, as the SB3 helper, unless `threads` is "defaults"."""
    starts = ["--learning-starts", str(spec["learning_starts"])] if "learning_starts" in spec else []
    one = ["--torch-threads", "1"] if threads == "one" else []
    return ["--env-id", spec["env_id"], "--seed", str(seed), "--total-timesteps", str(steps),
            "--cuda" if cuda else "--no-cuda", *one, *starts, *spec["ours"]]  # fmt: skip


def run_ours(spec: dict, steps: int, flags: list[str], args: Args, work: Path) -> dict:
    script = str(ROOT / "cleanrl" / spec["script"])
    launch = [sys.executable, script]
    if spec.get("nproc"):
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc_per_node={spec['nproc']}", script]  # fmt: skip
    cmd = [*launch, *script_argv(spec, steps, args.seed, args.cuda, args.threads), *flags]
    result = run_process(cmd, work, run_env(args.cuda), args.timeout)
    if "error" in result:
        return result
    result["process_sps"] = steps / result["process_seconds"]
    run_dir = the_run_dir(work)
    if isinstance(run_dir, str):
        return dict(result, error=run_dir)
    events = scalar_events(run_dir, "charts/SPS")
    if not events:
        return dict(result, error=f"{run_dir} has no charts/SPS: the budget ends before any measured step")
    return dict(result, sps=float(events[-1][2]))  # the script's own figure, counted from after its warm-up


def the_run_dir(work: Path):
    """The one run directory with an event file under work/runs, or why there is not exactly one."""
    runs = work / "runs"
    run_dirs = [p for p in runs.rglob("*") if p.is_dir() and any(p.glob("events.out.tfevents.*"))] if runs.is_dir() else []
    if len(run_dirs) != 1:
        return f"expected one run directory with an event file in {runs}, found {len(run_dirs)}"
    return run_dirs[0]


# runs an upstream Atari script after `import ale_py`, which registers the Atari env ids with gymnasium 0.29
# (upstream pins ale-py 0.8 with AutoROM, which registered them itself); argv: the script path, then its flags
ALE_LAUNCHER = "import runpy, sys; import ale_py; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def cleanrl_argv(spec: dict, steps: int, seed: int, cuda: bool) -> tuple[int, list[str]]:
    """The env steps and the flags of the upstream CleanRL script's run."""
    # off-policy: its last step is total_timesteps - 1 (see the SPECS notes); one more reaches our last logged step
    total = steps + 1 if "learning_starts" in spec else steps
    starts = ["--learning-starts", str(spec["learning_starts"])] if "learning_starts" in spec else []
    flags = ["--env-id", spec.get("upstream_env_id", spec["env_id"]), "--seed", str(seed), "--total-timesteps", str(total),
             "--cuda" if cuda else "--no-cuda", *starts, *spec["upstream"]]  # fmt: skip
    return total, flags


def run_cleanrl(spec: dict, steps: int, args: Args, python: str, root: Path, work: Path) -> dict:
    """One run of the upstream CleanRL script as its users run it; SPS from its charts/SPS events' wall times."""
    script = str(root / "cleanrl" / spec["script"])
    total, flags = cleanrl_argv(spec, steps, args.seed, args.cuda)
    launch = [python, "-c", ALE_LAUNCHER] if spec["family"] == "atari" else [python]
    if spec.get("nproc"):  # torchrun starts the launcher itself (--no-python), once per rank
        launch = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc_per_node={spec['nproc']}", "--no-python", *launch]  # fmt: skip
    env = run_env(args.cuda)
    env["PYTHONPATH"] = str(root)  # its cleanrl_utils, and nothing of ours
    result = run_process([*launch, script, *flags], work, env, args.timeout)
    if "error" in result:
        return result
    result.update(total_timesteps=total, process_sps=total / result["process_seconds"])
    run_dir = the_run_dir(work)
    if isinstance(run_dir, str):
        return dict(result, error=run_dir)
    events = scalar_events(run_dir, "charts/SPS")
    sps = steady_sps(events)
    if sps is None:
        return dict(result, error=f"{run_dir} has {len(events)} charts/SPS event(s): too few for a steady-state SPS (raise --budget-scale)")
    # its own charts/SPS, over the whole process since its start, for reference
    return dict(result, sps=sps, logged_sps=events[-1][2])


def run_sb3(spec: dict, steps: int, args: Args, sb3_python: str, work: Path) -> dict:
    payload = dict(spec["sb3"], env_id=spec["env_id"], n_envs=spec["num_envs"], total_timesteps=steps, seed=args.seed,
                   device="cuda" if args.cuda else "cpu", one_thread=args.threads == "one")  # fmt: skip
    if "learning_starts" in spec:
        payload["kwargs"] = dict(payload["kwargs"], learning_starts=spec["learning_starts"])
    cmd = [sb3_python, str(ROOT / "benchmark" / "throughput_sb3_helpers.py"), json.dumps(payload)]
    result = run_process(cmd, work, run_env(args.cuda), args.timeout)
    if "error" in result:
        return result
    lines = [l for l in (work / "log.txt").read_text().splitlines() if l.startswith("THROUGHPUT ")]
    if not lines:
        return dict(result, error=f"the SB3 run printed no THROUGHPUT line (log {work / 'log.txt'})")
    out = json.loads(lines[-1][len("THROUGHPUT ") :])
    return dict(result, sps=out["sps"], learn_sps=out["learn_sps"], versions=out["versions"], process_sps=steps / result["process_seconds"])


def run_raw(spec: dict, args: Args, work: Path) -> dict:
    payload = dict(kind=spec["raw"], env_id=spec["env_id"], num_envs=spec["num_envs"], seconds=args.raw_seconds, seed=args.seed)
    cmd = [sys.executable, str(ROOT / "benchmark" / "throughput_raw_env.py"), json.dumps(payload)]
    result = run_process(cmd, work, run_env(False), args.timeout)
    if "error" in result:
        return result
    lines = [l for l in (work / "log.txt").read_text().splitlines() if l.startswith("RAW_ENV ")]
    if not lines:
        return dict(result, error=f"the raw env run printed no RAW_ENV line (log {work / 'log.txt'})")
    return dict(result, sps=json.loads(lines[-1][len("RAW_ENV ") :])["sps"])


def machine_description() -> dict:
    import torch

    cpu = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [l.split(":", 1)[1].strip() for l in cpuinfo.read_text().splitlines() if l.startswith("model name")]
        if names:
            cpu = names[0]
    gpu = "no GPU"
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            gpu = "; ".join(proc.stdout.strip().splitlines())
    return dict(cpu=f"{os.cpu_count()} CPU cores ({cpu})", gpu=gpu, python=platform.python_version(), torch=torch.__version__)


def venv_versions(python: Path) -> dict:
    """The versions of the packages that shape a run, in another virtual environment."""
    code = "import json, gymnasium, numpy, torch; print(json.dumps(dict(gymnasium=gymnasium.__version__, numpy=numpy.__version__, torch=torch.__version__)))"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
    if proc.returncode != 0:
        fail(f"{python} cannot import gymnasium, numpy and torch: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(proc.stdout)


def columns(variants: list[str]) -> list[str]:
    """The labels of one row's measurements, in the order they run in a round."""
    return ["plain", *variants, "sb3", "cleanrl", "raw"]


def summarize(row: dict) -> None:
    """Medians over the rounds of each column (steady-state SPS and process SPS), and the ratios, into the row."""

    def medians(key: str) -> dict:
        out = {}
        for label in row["columns"]:
            values = [r[key] for r in row["runs"] if r["label"] == label and key in r and "error" not in r]
            if values:
                out[label] = statistics.median(values)
        return out

    sps, process = medians("sps"), medians("process_sps")
    ratios = {}
    ours = ["plain", *row["variants"]]
    for v in row["variants"]:
        if v in sps and "plain" in sps:
            ratios[f"{v}/plain"] = sps[v] / sps["plain"]
    for o in ours:
        for other in ("sb3", "cleanrl", "raw"):
            if o in sps and other in sps:
                ratios[f"{o}/{other}"] = sps[o] / sps[other]
        for other in ("sb3", "cleanrl"):
            if o in process and other in process:
                ratios[f"{o}/{other} (process)"] = process[o] / process[other]
    row["sps"], row["process_sps"], row["ratios"] = sps, process, ratios


def cell(row: dict, label: str) -> str:
    if label in row["sps"]:
        return f"{row['sps'][label]:.0f}"
    return row["not_run"].get(label, "failed")


def ratio(row: dict, key: str) -> str:
    return f"{row['ratios'][key]:.2f}" if key in row["ratios"] else "-"


def markdown(results: list[dict], variants: list[str]) -> str:
    head = ["script", "env (envs)", "budget per run", "rounds", "plain SPS"]
    for v in variants:
        head += [f"{v} SPS", f"{v} / plain"]
    head += ["SB3 SPS", *[f"{o} / SB3" for o in ["plain", *variants]]]
    head += ["CleanRL SPS", "plain / CleanRL", "plain / CleanRL (process)"]
    head += ["raw env SPS", *[f"{o} / raw" for o in ["plain", *variants]], "load before → after"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in results:
        cells = [row["script"], f"{row['env_id']} ({row['num_envs']})", f"{row['total_timesteps']}: {row['budget']}", str(row["rounds"]), cell(row, "plain")]
        for v in variants:
            cells += [cell(row, v), ratio(row, f"{v}/plain")]
        cells += [cell(row, "sb3"), *[ratio(row, f"{o}/sb3") for o in ["plain", *variants]]]
        cells += [cell(row, "cleanrl"), ratio(row, "plain/cleanrl"), ratio(row, "plain/cleanrl (process)")]
        cells += [cell(row, "raw"), *[ratio(row, f"{o}/raw") for o in ["plain", *variants]]]
        loads = [x for r in row["runs"] for x in (r["load_before"], r["load_after"])]
        cells.append(f"{min(loads):.1f} to {max(loads):.1f}" if loads else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def runs_markdown(results: list[dict]) -> str:
    lines = ["| script | round | run | SPS | process s | process SPS | load before | load after | note |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in results:
        for r in row["runs"]:
            sps = f"{r['sps']:.0f}" if "sps" in r else "failed"
            process = f"{r['process_sps']:.0f}" if "process_sps" in r else "-"
            note = r.get("error", "")
            if "learn_sps" in r:
                note = f"SB3 over the whole learn(): {r['learn_sps']:.0f} SPS"
            if "logged_sps" in r:
                note = f"upstream {row.get('cleanrl_env_id', row['env_id'])}, {r['total_timesteps']} steps; its own charts/SPS (from its start): {r['logged_sps']:.0f}"
            lines.append(
                f"| {row['script']} | {r['round']} | {r['label']} | {sps} | {r['process_seconds']:.1f} | {process} | "
                f"{r['load_before']:.2f} | {r['load_after']:.2f} | {note.replace('|', '/')} |"
            )
    return "\n".join(lines)


def write(out: Path, header: dict, results: list[dict], variants: list[str]) -> None:
    payload = dict(header, finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), results=results)
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    m = header["machine"]
    sb3 = next((r["versions"]["stable_baselines3"] for row in results for r in row["runs"] if "versions" in r), None)
    text = [
        f"Command: `{header['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['gpu']}; Python {m['python']}, torch {m['torch']}"
        + (f", Stable-Baselines3 {sb3}" if sb3 else "")
        + f"; device {'cuda' if header['cuda'] else 'cpu'}.",
        *([f"Upstream CleanRL: the snapshot at {c['path']}, run by {c['python']} (gymnasium {c['versions']['gymnasium']}, "
           f"numpy {c['versions']['numpy']}, torch {c['versions']['torch']})."] if (c := header.get("cleanrl")) else []),
        f"Started {header['started']}, finished {payload['finished']}.",
        "",
        "SPS: median over the rounds. Ours: the script's last `charts/SPS` (after its warm-up); SB3: by the same "
        "warm-up rule; CleanRL: the upstream script (its own venv, default torch threads), from the wall times of its "
        "`charts/SPS` events (after its first iteration or update); raw env: the vector env alone with random actions. "
        "Process SPS: env steps / seconds of the whole process (start-up and warm-up included). Load: the 1-minute "
        f"load average before and after each run of the row, on {os.cpu_count()} cores.",
        "",
        markdown(results, variants),
        "",
        "Every run:",
        "",
        runs_markdown(results),
        "",
    ]
    (out / "results.md").write_text("\n".join(text))


def check(args: Args) -> tuple[Optional[Path], Optional[tuple[Path, Path]]]:
    """Checks the input before any run or result folder exists; returns the SB3 python if SB3 runs, and the upstream
    CleanRL python and repository root if CleanRL runs."""
    unknown = [s for s in args.scripts if s not in SPECS]
    if unknown:
        fail(f"unknown --scripts {unknown}; choose from {', '.join(SPECS)}")
    if not args.scripts:
        fail("--scripts is empty")
    for name in args.scripts:
        script = ROOT / "cleanrl" / SPECS[name]["script"]
        if not script.is_file():
            fail(f"--scripts {name} needs {script.relative_to(ROOT)}, which does not exist")
    word = r"[a-z][a-z0-9-]*(=[a-z0-9.-]+)?"
    bad = [v for v in args.variants if not re.fullmatch(rf"{word}(\+{word})*", v)]
    if bad:
        fail(f"--variants {bad}: each is flag names without '--' joined by '+', like compile or compile+amp "
             "(or flag=value)")
    if "plain" in args.variants or len(set(args.variants)) != len(args.variants):
        fail("--variants must be distinct and must not include plain (the plain path always runs)")
    if args.rounds is not None and args.rounds < 1:
        fail(f"--rounds must be at least 1, got {args.rounds}")
    if not args.budget_scale > 0:
        fail(f"--budget-scale must be positive, got {args.budget_scale}")
    if not args.raw_seconds > 0:
        fail(f"--raw-seconds must be positive, got {args.raw_seconds}")
    sb3_python = None
    if args.sb3 and any("sb3" in SPECS[s] for s in args.scripts):
        # absolute (each run starts in its own directory) but not resolved: the venv's python is a symlink that must
        # keep its venv path to find the venv's packages
        sb3_python = Path(args.sb3_python).absolute()
        if not sb3_python.is_file():
            fail(f"no Stable-Baselines3 python at {sb3_python}; create it with: python benchmark/throughput.py --setup-sb3-venv {sb3_python.parent.parent} (or add --no-sb3)")
    if args.cleanrl is None:
        return sb3_python, None
    root = cleanrl_root(Path(args.cleanrl).absolute())
    upstream = [s for s in args.scripts if "upstream" in SPECS[s]]
    missing = [s for s in upstream if not (root / "cleanrl" / SPECS[s]["script"]).is_file()]
    if missing:
        fail(f"--cleanrl {args.cleanrl} has no cleanrl/{SPECS[missing[0]]['script']} (--scripts {' '.join(missing)})")
    if not upstream:
        return sb3_python, None
    cleanrl_python = Path(args.cleanrl_python).absolute()
    if not cleanrl_python.is_file():
        fail(f"no upstream CleanRL python at {cleanrl_python}; create it with: python benchmark/throughput.py --setup-cleanrl-venv {cleanrl_python.parent.parent} (or leave out --cleanrl)")
    return sb3_python, (cleanrl_python, root)


def cleanrl_root(path: Path) -> Path:
    """The repository root of an upstream CleanRL snapshot given as its root or as its cleanrl/ folder."""
    if not path.exists():
        fail(f"--cleanrl {path} does not exist")
    for root in (path, path.parent):
        if (root / "cleanrl").is_dir() and (root / "cleanrl_utils").is_dir():
            return root
    fail(f"--cleanrl {path} is not an upstream CleanRL snapshot: neither it nor its parent holds cleanrl/ and cleanrl_utils/")


def main(args: Args) -> None:
    if args.setup_sb3_venv:
        setup_sb3_venv(args.setup_sb3_venv)
        return
    if args.setup_cleanrl_venv:
        setup_cleanrl_venv(args.setup_cleanrl_venv)
        return
    sb3_python, cleanrl = check(args)

    def interrupted(signum, frame):
        raise KeyboardInterrupt  # unwinds through run_process, which stops the running child

    signal.signal(signal.SIGTERM, interrupted)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    header = dict(
        command="python benchmark/throughput.py " + " ".join(sys.argv[1:]), machine=machine_description(), cuda=args.cuda,
        started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), variants=args.variants, threads=args.threads,
    )  # fmt: skip
    if cleanrl:
        header["cleanrl"] = dict(path=str(cleanrl[1]), python=str(cleanrl[0]), versions=venv_versions(cleanrl[0]))
    results, failures, t0 = [], [], time.time()
    for name in args.scripts:
        spec = SPECS[name]
        steps, described = budget(spec, args.budget_scale)
        rounds = args.rounds or FAMILY_ROUNDS[spec["family"]]
        not_run = {v: f"n/a ({why})" for v in args.variants if (why := applies(v, spec, args.cuda))}
        if "sb3" not in spec:
            not_run["sb3"] = "n/a (no SB3 algorithm)"
        elif not args.sb3:
            not_run["sb3"] = "not run (--no-sb3)"
        if "upstream" not in spec:
            not_run["cleanrl"] = f"n/a ({spec['upstream_na']})"
        elif cleanrl is None:
            not_run["cleanrl"] = "not run (no --cleanrl path)"
        row = dict(
            script=name, env_id=spec["env_id"], family=spec["family"], num_envs=spec["num_envs"], total_timesteps=steps,
            budget=described, rounds=rounds, variants=args.variants, columns=columns(args.variants), not_run=not_run, runs=[],
            cleanrl_env_id=spec.get("upstream_env_id", spec["env_id"]),
        )  # fmt: skip
        failed = set()
        for k in range(1, rounds + 1):
            for label in row["columns"]:
                if label in not_run:
                    continue
                work = out / "work" / name / label / f"round{k}"
                if label in failed:
                    continue  # it failed in an earlier round: it would fail again
                load_before = os.getloadavg()[0]
                if label == "sb3":
                    r = run_sb3(spec, steps, args, str(sb3_python), work)
                elif label == "cleanrl":
                    r = run_cleanrl(spec, steps, args, str(cleanrl[0]), cleanrl[1], work)
                elif label == "raw":
                    r = run_raw(spec, args, work)
                else:
                    r = run_ours(spec, steps, [] if label == "plain" else variant_flags(label), args, work)
                r.update(round=k, label=label, load_before=load_before, load_after=os.getloadavg()[0])
                row["runs"].append(r)
                if "error" in r:
                    failed.add(label)
                    failures.append(f"{name} {label} round {k}: {r['error']}")
                    print(f"[{name} round {k}/{rounds}] {label}: FAILED {r['error']}", flush=True)
                else:
                    print(f"[{name} round {k}/{rounds}] {label}: {r['sps']:.0f} SPS ({r['process_seconds']:.1f} s, load {r['load_before']:.1f} -> {r['load_after']:.1f})", flush=True)  # fmt: skip
        summarize(row)
        results.append(row)
        write(out, header, results, args.variants)  # after every script, so a later failure keeps what was measured
    print(f"\n{markdown(results, args.variants)}\n\nwrote {out / 'results.json'} and {out / 'results.md'} in {(time.time() - t0) / 60:.1f} min")
    if failures:
        print(f"\n{len(failures)} run(s) FAILED:\n" + "\n".join(f"- {f}" for f in failures), flush=True)
        fail(f"{len(failures)} run(s) failed (listed above and in {out / 'results.md'})")


if __name__ == "__main__":
    main(tyro.cli(Args))
