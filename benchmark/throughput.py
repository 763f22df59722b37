# docs: docs/benchmark.md
"""Training throughput of our scripts next to Stable-Baselines3 on the same env and budget, and the env's own limit.

For each algorithm, in one invocation: `--repetitions` rounds of [ours, SB3, raw env], alternating, so load noise on
a shared machine hits both sides alike. Reported: medians over the rounds and the ratios ours/SB3 and ours/raw.
- ours: `python cleanrl/<script>.py` in a scratch working directory; SPS = its last `charts/SPS` (global_step /
  seconds since training started, set-up excluded). The hyperparameters that shape the work are passed explicitly.
- SB3: benchmark/throughput_sb3_helpers.py run by the python of a SEPARATE virtual environment (Stable-Baselines3 is
  not a dependency of this project), with keyword arguments that mirror ours (see SPECS); SPS = steps / wall time
  of `model.learn()`.
- raw env: gymnasium SyncVectorEnv with the same number of envs (same-step autoreset, episode statistics, as in our
  scripts), random actions, no learning: the most steps per second any trainer could reach with this vector env.
Both trainers run on CPU with one torch thread. The wall time of each whole process (imports included) is kept too.

Set up the SB3 environment once (the CPU torch wheel pinned, so pip does not pull a CUDA build):
    python benchmark/throughput.py --setup-sb3-venv benchmark/results/.venv-sb3

Run:
    python benchmark/throughput.py --algos ppo dqn --repetitions 2
    python benchmark/throughput.py --help
"""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Args:
    algos: list[str] = field(default_factory=lambda: ["ppo"])
    """the algorithms to compare (keys of SPECS: ppo, ppo_continuous_action, dqn, ddpg, td3, sac)"""
    repetitions: int = 2
    """the number of alternating rounds [ours, SB3, raw env] per algorithm"""
    total_timesteps: Optional[int] = None
    """the training budget of every run; None uses each algorithm's default in SPECS"""
    raw_steps: int = 20000
    """the environment steps of each raw env measurement"""
    seed: int = 1
    """the seed of every run"""
    sb3_python: str = "benchmark/results/.venv-sb3/bin/python"
    """the python of the virtual environment that has stable-baselines3"""
    setup_sb3_venv: Optional[str] = None
    """if set, create a virtual environment with stable-baselines3 at this path, and exit"""
    out: str = "benchmark/results/throughput"
    """the folder for results.json, results.md and the scratch runs"""
    timeout: float = 1800
    """seconds after which one training process is killed (the benchmark then fails)"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


# What is compared. `ours` are flags of our script (given explicitly, so a changed default cannot skew the
# comparison); `sb3` are the SB3 constructor arguments that do the same work. Mapping notes:
# - PPO: SB3 batch_size is our minibatch size (num_envs * num_steps / num_minibatches); n_epochs = update_epochs;
#   clip_range_vf = clip_coef because our value loss is clipped (clip_vloss); Adam eps 1e-5 as ours; separate
#   64-64 tanh actor and critic with orthogonal init (SB3's default for MlpPolicy); linear lr annealing.
# - PPO continuous: VecNormalize for our observation and reward normalization (obs clipped at 10; SB3 also clips
#   the normalized reward at 10), log std initialized at 0 and state-independent as ours.
# - DQN: 120-84 ReLU Q-network as ours; SB3 clips gradients at max_grad_norm (we set it too high to bind) and uses
#   the Huber loss where ours uses the squared error (same cost); target_update_interval and train_freq count env
#   steps as ours do with 1 env.
# - DDPG/TD3/SAC: 256-256 ReLU networks, one gradient step per env step after learning_starts, delayed actor
#   updates every policy_frequency steps for TD3 (SB3 policy_delay); SB3 uses one learning rate for actor and
#   critic, so both are set to our policy/q learning rates only where they are equal (noted per spec).
SPECS = {
    "ppo": dict(
        script="ppo.py",
        env_id="CartPole-v1",
        num_envs=4,
        total_timesteps=50_000,
        ours=["--num-envs", "4", "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
              "--learning-rate", "2.5e-4", "--anneal-lr", "--ent-coef", "0.01", "--clip-coef", "0.2", "--clip-vloss"],
        sb3=dict(algo="ppo", kwargs=dict(
            n_steps=128, batch_size=128, n_epochs=4, learning_rate=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
            clip_range=0.2, clip_range_vf=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, normalize_advantage=True,
            policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn="tanh", ortho_init=True,
                               optimizer_kwargs=dict(eps=1e-5)),
        )),
    ),
    "ppo_continuous_action": dict(
        script="ppo_continuous_action.py",
        env_id="HalfCheetah-v5",
        num_envs=1,
        total_timesteps=20_480,
        ours=["--num-envs", "1", "--num-steps", "2048", "--num-minibatches", "32", "--update-epochs", "10",
              "--learning-rate", "3e-4", "--anneal-lr", "--ent-coef", "0.0", "--clip-vloss"],
        sb3=dict(algo="ppo", kwargs=dict(
            n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
            clip_range=0.2, clip_range_vf=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
            normalize=dict(norm_obs=True, norm_reward=True, clip_obs=10.0, gamma=0.99),
            policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn="tanh", log_std_init=0.0,
                               optimizer_kwargs=dict(eps=1e-5)),
        )),
    ),
    "dqn": dict(
        script="dqn.py",
        env_id="CartPole-v1",
        num_envs=1,
        total_timesteps=50_000,
        ours=["--num-envs", "1", "--buffer-size", "10000", "--learning-rate", "2.5e-4", "--batch-size", "128",
              "--learning-starts", "10000", "--train-frequency", "10", "--target-network-frequency", "500",
              "--tau", "1.0", "--exploration-fraction", "0.5", "--start-e", "1.0", "--end-e", "0.05"],
        sb3=dict(algo="dqn", kwargs=dict(
            buffer_size=10000, learning_rate=2.5e-4, batch_size=128, learning_starts=10000, train_freq=10,
            gradient_steps=1, target_update_interval=500, tau=1.0, gamma=0.99, exploration_fraction=0.5,
            exploration_initial_eps=1.0, exploration_final_eps=0.05, max_grad_norm=1e9,
            policy_kwargs=dict(net_arch=[120, 84], activation_fn="relu"),
        )),
    ),
    "ddpg": dict(
        script="ddpg_continuous_action.py",
        env_id="Pendulum-v1",
        num_envs=1,
        total_timesteps=3_000,
        ours=["--num-envs", "1", "--learning-starts", "1000", "--batch-size", "256", "--buffer-size", "100000",
              "--policy-lr", "3e-4", "--q-lr", "3e-4", "--tau", "0.005", "--exploration-noise", "0.1", "--policy-frequency", "2"],
        sb3=dict(algo="ddpg", kwargs=dict(
            learning_starts=1000, batch_size=256, buffer_size=100000, learning_rate=3e-4, tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=1, action_noise_std=0.1,
            policy_kwargs=dict(net_arch=[256, 256], activation_fn="relu"),
        )),
    ),
    "td3": dict(
        script="td3_continuous_action.py",
        env_id="Pendulum-v1",
        num_envs=1,
        total_timesteps=3_000,
        ours=["--num-envs", "1", "--learning-starts", "1000", "--batch-size", "256", "--buffer-size", "100000",
              "--policy-lr", "3e-4", "--q-lr", "3e-4", "--tau", "0.005", "--exploration-noise", "0.1",
              "--policy-frequency", "2", "--policy-noise", "0.2", "--noise-clip", "0.5"],
        sb3=dict(algo="td3", kwargs=dict(
            learning_starts=1000, batch_size=256, buffer_size=100000, learning_rate=3e-4, tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=1, action_noise_std=0.1, policy_delay=2, target_policy_noise=0.2,
            target_noise_clip=0.5, policy_kwargs=dict(net_arch=[256, 256], activation_fn="relu"),
        )),
    ),
    "sac": dict(
        script="sac_continuous_action.py",
        env_id="Pendulum-v1",
        num_envs=1,
        total_timesteps=3_000,
        ours=["--num-envs", "1", "--learning-starts", "1000", "--batch-size", "256", "--buffer-size", "100000",
              "--tau", "0.005", "--autotune", "--policy-lr", "3e-4", "--q-lr", "1e-3", "--policy-frequency", "2",
              "--target-network-frequency", "1"],
        # ours: 2 actor updates every 2nd step (as CleanRL), SB3: 1 every step, so the same number of actor updates;
        # SB3 has one learning rate for all networks, 3e-4 (our critic's is 1e-3; the cost is the same)
        sb3=dict(algo="sac", kwargs=dict(
            learning_starts=1000, batch_size=256, buffer_size=100000, learning_rate=3e-4, tau=0.005, gamma=0.99,
            train_freq=1, gradient_steps=1, ent_coef="auto",
            policy_kwargs=dict(net_arch=[256, 256], activation_fn="relu"),
        )),
    ),
}


def setup_sb3_venv(path: str) -> None:
    import gymnasium
    import torch

    venv = Path(path)
    if venv.exists():
        fail(f"{venv} exists; remove it first or use it with --sb3-python {venv}/bin/python")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # the same torch and gymnasium versions as ours, so only the library differs; the CPU torch build is pinned
    torch_version = torch.__version__.split("+")[0]
    packages = [f"torch=={torch_version}", "stable-baselines3", f"gymnasium[classic-control,mujoco]=={gymnasium.__version__}", "tensorboard"]
    print(f"installing into {venv}: {' '.join(packages)}", flush=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *packages], check=True)
    print(f"done; use it with --sb3-python {venv}/bin/python", flush=True)


def read_last_scalar(run_dir: Path, tag: str) -> float:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        fail(f"{run_dir} has no {tag} scalar")
    return float(acc.Scalars(tag)[-1].value)


def run_process(cmd: list[str], cwd: Path, log: Path, timeout: float) -> float:
    """Run cmd with its output in `log`; a non-zero exit stops the benchmark with the log's tail. Returns wall seconds."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", WANDB_MODE="offline", CUDA_VISIBLE_DEVICES="")
    start = time.time()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    seconds = time.time() - start
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        fail(f"{' '.join(cmd)} exited {proc.returncode} (log {log}):\n{tail}")
    return seconds


def run_ours(spec: dict, steps: int, seed: int, work: Path, timeout: float) -> dict:
    if work.exists():
        shutil.rmtree(work)
    cmd = [sys.executable, str(ROOT / "cleanrl" / spec["script"]), "--env-id", spec["env_id"], "--seed", str(seed),
           "--total-timesteps", str(steps), "--no-cuda", *spec["ours"]]  # fmt: skip
    seconds = run_process(cmd, work, work / "log.txt", timeout)
    run_dirs = [p for p in (work / "runs").iterdir() if p.is_dir()]
    if len(run_dirs) != 1:
        fail(f"expected one run directory in {work / 'runs'}, found {run_dirs}")
    return {"sps": read_last_scalar(run_dirs[0], "charts/SPS"), "process_seconds": seconds}


def run_sb3(spec: dict, steps: int, seed: int, sb3_python: str, work: Path, timeout: float) -> dict:
    if work.exists():
        shutil.rmtree(work)
    payload = dict(spec["sb3"], env_id=spec["env_id"], n_envs=spec["num_envs"], total_timesteps=steps, seed=seed)
    cmd = [sb3_python, str(ROOT / "benchmark" / "throughput_sb3_helpers.py"), json.dumps(payload)]
    seconds = run_process(cmd, work, work / "log.txt", timeout)
    lines = [l for l in (work / "log.txt").read_text().splitlines() if l.startswith("THROUGHPUT ")]
    if not lines:
        fail(f"the SB3 run printed no THROUGHPUT line; see {work / 'log.txt'}")
    result = json.loads(lines[-1][len("THROUGHPUT ") :])
    return {"sps": result["sps"], "process_seconds": seconds, "versions": result["versions"], "timesteps": result["timesteps"]}


def raw_env_sps(env_id: str, num_envs: int, steps: int, seed: int) -> float:
    """Steps per second of the vector env alone: random actions, same wrappers and autoreset as our scripts."""
    import gymnasium as gym

    if env_id.startswith(("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid")):
        import mujoco  # noqa: F401  (fails clearly if the MuJoCo extra is missing)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    n = max(steps // num_envs, 1)
    start = time.perf_counter()
    for _ in range(n):
        envs.step(envs.action_space.sample())
    seconds = time.perf_counter() - start
    envs.close()
    return n * num_envs / seconds


def machine_description() -> str:
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
    return f"{os.cpu_count()} CPU cores ({cpu}), {gpu}, Python {platform.python_version()}, torch {torch.__version__}"


def markdown(results: list[dict]) -> str:
    lines = [
        "| algorithm | env | num envs | steps per run | ours SPS | SB3 SPS | ours / SB3 | raw env SPS | ours / raw env | ours SPS per round | SB3 SPS per round |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['algo']} ({r['script']}) | {r['env_id']} | {r['num_envs']} | {r['total_timesteps']} | {r['ours_sps']:.0f} | "
            f"{r['sb3_sps']:.0f} | {r['ours_over_sb3']:.2f} | {r['raw_sps']:.0f} | {r['ours_over_raw']:.3f} | "
            f"{', '.join(f'{x:.0f}' for x in r['ours_rounds'])} | {', '.join(f'{x:.0f}' for x in r['sb3_rounds'])} |"
        )
    return "\n".join(lines)


def main(args: Args) -> None:
    if args.setup_sb3_venv:
        setup_sb3_venv(args.setup_sb3_venv)
        return
    unknown = [a for a in args.algos if a not in SPECS]
    if unknown:
        fail(f"unknown --algos {unknown}; choose from {sorted(SPECS)}")
    if args.repetitions < 1:
        fail(f"--repetitions must be at least 1, got {args.repetitions}")
    for algo in args.algos:
        script = ROOT / "cleanrl" / SPECS[algo]["script"]
        if not script.is_file():
            fail(f"--algos {algo} needs {script.relative_to(ROOT)}, which does not exist (yet)")
    # absolute (each run starts in its own directory) but not resolved: the venv's python is a symlink that must
    # keep its venv path to find the venv's packages
    sb3_python = Path(args.sb3_python).absolute()
    if not sb3_python.is_file():
        fail(f"no Stable-Baselines3 python at {sb3_python}; create it with: python benchmark/throughput.py --setup-sb3-venv {sb3_python.parent.parent}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmark/throughput.py " + " ".join(sys.argv[1:])
    results = []
    for algo in args.algos:
        spec = SPECS[algo]
        steps = args.total_timesteps or spec["total_timesteps"]
        ours, sb3, raw, versions, load = [], [], [], {}, []
        for k in range(args.repetitions):
            o = run_ours(spec, steps, args.seed, out / "work" / algo / "ours", args.timeout)
            print(f"[{algo} round {k + 1}] ours {o['sps']:.0f} SPS ({o['process_seconds']:.1f} s process)", flush=True)
            s = run_sb3(spec, steps, args.seed, str(sb3_python), out / "work" / algo / "sb3", args.timeout)
            print(f"[{algo} round {k + 1}] SB3  {s['sps']:.0f} SPS ({s['process_seconds']:.1f} s process)", flush=True)
            r = raw_env_sps(spec["env_id"], spec["num_envs"], args.raw_steps, args.seed)
            print(f"[{algo} round {k + 1}] raw env {r:.0f} SPS", flush=True)
            ours.append(o), sb3.append(s), raw.append(r)
            load.append(round(os.getloadavg()[0], 1))  # 1-minute load average after the round: how shared the CPU was
            versions = s["versions"]
        row = dict(
            algo=algo, script=spec["script"], env_id=spec["env_id"], num_envs=spec["num_envs"], total_timesteps=steps,
            ours_sps=statistics.median(o["sps"] for o in ours), sb3_sps=statistics.median(s["sps"] for s in sb3),
            raw_sps=statistics.median(raw), ours_rounds=[o["sps"] for o in ours], sb3_rounds=[s["sps"] for s in sb3],
            raw_rounds=raw, ours_process_seconds=[o["process_seconds"] for o in ours],
            sb3_process_seconds=[s["process_seconds"] for s in sb3], sb3_versions=versions, load_average=load,
        )
        row["ours_over_sb3"] = row["ours_sps"] / row["sb3_sps"]
        row["ours_over_raw"] = row["ours_sps"] / row["raw_sps"]
        results.append(row)
        write(out, command, results)  # after every algorithm, so a later failure keeps what was measured
    print(f"\n{markdown(results)}\n\nwrote {out / 'results.json'} and {out / 'results.md'}")


def write(out: Path, command: str, results: list[dict]) -> None:
    machine = machine_description()
    payload = dict(command=command, machine=machine, finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), results=results)
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / "results.md").write_text(f"Command: `{command}`\n\nMachine: {machine}\n\n{markdown(results)}\n")


if __name__ == "__main__":
    main(tyro.cli(Args))
