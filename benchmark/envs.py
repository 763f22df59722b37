# docs: docs/speed.md
"""How fast the environment engine steps on this machine: steps per second of each backend, number of envs, worker
thread count and stepping mode, alone and with a policy acting, so `--num-envs`, `--env-threads` and
`--pipeline-envs` can be chosen from numbers rather than guesses.

Backends. Atari ids (`<Game>NoFrameskip-v4`, `ALE/<Game>-v5`):
    ale-vector  atari_envs.make_atari_envs, the env layer the Atari scripts step (ale-py's threaded AtariVectorEnv
                per group, under our game statistics wrapper and the EnvGroups pipeline)
    raw         ale-py's bare AtariVectorEnv with the same settings and the same thread split: the ceiling
    envpool     envpool's Atari (`make_gymnasium("Breakout-v5", ...)`, the same preprocessing and emulator
                settings), when envpool is installed and has the game
    gymnasium   (only when asked for) make_atari_envs' gymnasium backend: wrappers in a SyncVectorEnv
Classic-control ids with discrete actions (CartPole-v1, Acrobot-v1, ...):
    gymnasium   environments.make_envs, the SyncVectorEnv the classic-control scripts step
    envpool     envpool's version of the id, when installed

Modes. sync: all envs step together, then the policy acts on all of them. pipelined: the envs are two fixed halves,
stepped in turn as the Atari scripts' rollout does: the policy acts on one half while the other steps in the
emulator threads (ale-vector, raw); envpool's own asynchronous mode (batch_size = num_envs // 2, its send and recv)
is its counterpart. Pipelined threads are the total: ale-vector and raw give each half threads // 2 (at least one);
envpool's halves share its pool. gymnasium steps in the calling process, so it has neither threads nor pipelining.

Two numbers per cell, in agent steps per second (every env's step counted): the env alone, with random actions
drawn by numpy, and with a policy step: a network of the scripts' size acting on each batch of observations before
its actions are sent (Atari: the Nature CNN, channels last, uint8 frames divided by 255; classic control: 64x64 tanh
actor and critic MLPs), sampling from a Categorical, on the CPU with the torch threads its script would take (the
free cores for Atari, 1 for classic control; --torch-threads). Each cell is built fresh, warmed up (--warmup-steps,
unmeasured), then run for --seconds; --rounds interleaved rounds (every cell once, then every cell again) give a
min-max range per cell, so the noise shows, and the cores other processes kept busy meanwhile are reported.

Run:
    python benchmark/envs.py --env-id BreakoutNoFrameskip-v4
    python benchmark/envs.py --env-id BreakoutNoFrameskip-v4 --num-envs 8 16 --threads 1 2 --seconds 3 --rounds 2
    python benchmark/envs.py --env-id CartPole-v1 --out envs.json

A tool, not an algorithm script: it never imports the scripts, only their companion modules cleanrl/environments.py and
cleanrl/atari_envs.py.
"""

import json
import os
import statistics
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional  # noqa: UP035 (the project's style)

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn
from torch.distributions import Categorical

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "cleanrl"))
import atari_envs  # noqa: E402  (the scripts' companion modules, not scripts)
import environments  # noqa: E402
import speed  # noqa: E402  (the scripts' companion module for threads)
from messages import fail  # noqa: E402

ATARI_BACKENDS = ("ale-vector", "raw", "envpool", "gymnasium")
CLASSIC_BACKENDS = ("gymnasium", "envpool")
MODES = ("sync", "pipelined")
THREADED = ("ale-vector", "raw", "envpool")  # the backends with worker threads and a pipelined mode


@dataclass
class Args:
    """Measures the environment engine: python benchmark/envs.py --env-id BreakoutNoFrameskip-v4."""

    env_id: str = "BreakoutNoFrameskip-v4"
    """an Atari id (`<Game>NoFrameskip-v4`, `ALE/<Game>-v5`) or a classic-control id with discrete actions"""
    num_envs: tuple[int, ...] = ()
    """the numbers of envs to measure; default: 8 16 for Atari, 4 16 64 for classic control"""
    threads: tuple[int, ...] = ()
    """the worker thread counts (in all, both halves together); 0: what --env-threads 0 would choose (the free
    cores); default: 1, 2, 4, ... up to this machine's core count"""
    backends: tuple[str, ...] = ()
    """default: ale-vector raw envpool for Atari (gymnasium on request), gymnasium envpool for classic control;
    envpool is skipped with a note where it is not installed or lacks the game"""
    modes: tuple[str, ...] = MODES
    """sync: all envs step together; pipelined: two halves, the policy acting on one while the other steps"""
    seconds: float = 3.0
    """measured seconds per cell and column, after the warm-up"""
    rounds: int = 2
    """interleaved rounds: every cell once, then every cell again; the table gives each cell's min-max"""
    warmup_steps: int = 5
    """unmeasured steps of all envs before each measurement (the pipeline fills, the network allocates)"""
    torch_threads: int = 0
    """the policy's torch CPU threads; 0: the scripts' default: the free cores for Atari (ppo_atari.py's
    --torch-threads 0), 1 for classic control (ppo.py's), since threads beyond the free cores stall"""
    seed: int = 1
    """seed of the envs, the random actions and the network's initial weights"""
    out: Optional[str] = None
    """if set, also write every cell's per-round numbers and the recommendations as JSON to this file"""


# The environments as batches that wait for actions: next_batch() returns (key, observations) of some envs ready
# to act, act(key, actions) hands them their actions. So one loop (measure) steps every backend in its own way: the
# Atari scripts' rollout over fixed halves, envpool's recv/send loop, or gymnasium's synchronous step.


class Halves:
    """An env of fixed groups that step on their own (atari_envs.EnvGroups): its halves in turn, as the Atari
    scripts' pipelined rollout steps them; with one group, the synchronous rollout (send, then recv)."""

    def __init__(self, envs, seed: int):
        self.envs, self.starts = envs, [half.start for half in envs.halves]
        obs, _ = envs.reset(seed=seed)
        self.ready = deque((g, obs[half]) for g, half in enumerate(envs.halves))  # after reset every half can act

    def next_batch(self):
        if self.ready:
            return self.ready.popleft()
        half, obs = self.envs.recv()[:2]  # the group sent earliest
        return self.starts.index(half.start), obs

    def act(self, group: int, actions: np.ndarray) -> None:
        self.envs.send(actions, group)

    def close(self) -> None:
        while self.envs.in_flight:  # no step left running in the worker threads
            self.envs.recv()
        self.envs.close()


def raw_groups(env_id: str, num_envs: int, groups: int, threads: int):
    """ale-py's bare AtariVectorEnv, one per group, in EnvGroups (its send/recv/halves): the ceiling for ale-vector,
    built as make_atari_envs builds its groups (sizes, thread split, settings) but without its wrappers."""
    settings = atari_envs.atari_emulator_settings(env_id)
    sizes = atari_envs.group_sizes(num_envs, groups)
    return atari_envs.EnvGroups([atari_envs.ale_vector_env(settings, size, threads // len(sizes))
                                   for size in sizes])


class EnvpoolBatches:
    """envpool's own loop: recv() returns whichever batch_size envs finished first (info["env_id"]), send(actions,
    env_id) steps them. batch_size = num_envs is its synchronous step; num_envs // 2 its asynchronous mode."""

    def __init__(self, envs):
        self.envs = envs
        envs.async_reset()  # envpool takes its seed at creation

    def next_batch(self):
        obs, _, _, _, info = self.envs.recv()
        return info["env_id"], obs

    def act(self, env_ids: np.ndarray, actions: np.ndarray) -> None:
        self.envs.send(actions, env_ids)

    def close(self) -> None:
        self.envs.close()


class SyncSteps:
    """A vector env that steps in this process (gymnasium's SyncVectorEnv): act steps every env at once."""

    def __init__(self, envs, seed: int):
        self.envs = envs
        self.obs, _ = envs.reset(seed=seed)

    def next_batch(self):
        return None, self.obs

    def act(self, _, actions: np.ndarray) -> None:
        self.obs = self.envs.step(actions)[0]

    def close(self) -> None:
        self.envs.close()


def envpool_id(env_id: str, kind: str, settings: Optional[dict]) -> tuple[Optional[str], str]:
    """envpool's id for env_id (its Atari games are `<Game>-v5`), or None and why it is skipped."""
    try:
        import envpool
    except ImportError as e:
        return None, f"envpool skipped: not installed ({e})"
    known = envpool.list_all_envs()
    name = env_id if kind == "classic" else "".join(w.capitalize() for w in settings["game"].split("_")) + "-v5"
    if name not in known:
        return None, f"envpool skipped: it has no {name}"
    return name, ""


def build(cell: dict, env_id: str, kind: str, settings: Optional[dict], seed: int):
    """The cell's environments, reset, as batches waiting for actions."""
    backend, num_envs, threads, pipelined = cell["backend"], cell["num_envs"], cell["threads"], cell["mode"] != "sync"
    groups = 2 if pipelined else 1
    if backend == "ale-vector":
        envs = atari_envs.make_atari_envs(env_id, num_envs, "ale-vector", groups=groups, threads=threads)
        return Halves(envs, seed)
    if backend == "raw":
        return Halves(raw_groups(env_id, num_envs, groups, threads), seed)
    if backend == "gymnasium" and kind == "atari":
        return Halves(atari_envs.make_atari_envs(env_id, num_envs, "gymnasium"), seed)
    if backend == "gymnasium":
        return SyncSteps(environments.make_envs(env_id, num_envs, False, ""), seed)
    import envpool

    batch_size = num_envs // 2 if pipelined else num_envs
    extra = {}
    if kind == "atari":  # the preprocessing and emulator settings of make_atari_envs (envpool counts agent steps)
        extra = dict(repeat_action_probability=settings["repeat_action_probability"],
                     full_action_space=settings["full_action_space"],
                     max_episode_steps=settings["max_num_frames_per_episode"] // 4, stack_num=4, frame_skip=4,
                     noop_max=30, use_fire_reset=True, episodic_life=False, reward_clip=False, img_height=84,
                     img_width=84, gray_scale=True)
    envs = envpool.make_gymnasium(cell["envpool_id"], num_envs=num_envs, batch_size=batch_size, num_threads=threads,
                                  seed=seed, **extra)
    return EnvpoolBatches(envs)


# The policy of the "with policy" column: a network of the scripts' size, on the CPU, acting without gradients.


def nature_cnn_policy(n_actions: int) -> Callable[[np.ndarray], tuple[torch.Tensor, ...]]:
    """The Atari scripts' network: Nature CNN (Mnih et al. 2015) with a policy and a value head, channels last (the
    layout the scripts use, where the CPU's convolutions are fastest). Returns (action, log-probability, value)."""
    trunk = nn.Sequential(
        nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
    ).to(memory_format=torch.channels_last)
    actor, critic = nn.Linear(512, n_actions), nn.Linear(512, 1)

    @torch.no_grad()
    def policy_step(obs: np.ndarray) -> tuple[torch.Tensor, ...]:
        # uint8 frames (n, 4, 84, 84) -> floats in [0, 1], channels last (the division keeps the layout)
        hidden = trunk(torch.as_tensor(obs).contiguous(memory_format=torch.channels_last) / 255.0)
        dist = Categorical(logits=actor(hidden), validate_args=False)
        action = dist.sample()
        return action, dist.log_prob(action), critic(hidden)  # what a PPO rollout stores

    return policy_step


def mlp_policy(obs_dim: int, n_actions: int) -> Callable[[np.ndarray], tuple[torch.Tensor, ...]]:
    """The classic-control PPO network: separate 64x64 tanh actor and critic MLPs. Returns (action, log-probability,
    value)."""
    def mlp(out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))

    actor, critic = mlp(n_actions), mlp(1)

    @torch.no_grad()
    def policy_step(obs: np.ndarray) -> tuple[torch.Tensor, ...]:
        x = torch.as_tensor(obs, dtype=torch.float32)
        dist = Categorical(logits=actor(x), validate_args=False)
        action = dist.sample()
        return action, dist.log_prob(action), critic(x)

    return policy_step


def load_sample() -> tuple[int, int, float]:
    """(busy, all) clock ticks of the machine from /proc/stat's "cpu" line, and this process's CPU seconds."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    own = os.times()
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks), own.user + own.system


def others_busy(start: tuple[int, int, float], end: tuple[int, int, float]) -> float:
    """The cores other processes kept busy between two samples: the machine's busy time less this process's own."""
    busy = (end[0] - start[0]) - (end[2] - start[2]) * os.sysconf("SC_CLK_TCK")
    return max(0.0, busy / max(end[1] - start[1], 1) * os.cpu_count())


def measure(batches, choose: Callable[[np.ndarray], np.ndarray], num_envs: int, seconds: float,
            warmup_steps: int) -> tuple[float, float]:
    """(agent steps per second, cores other processes kept busy meanwhile): every env's step counted when its
    observations come back, over `seconds` after `warmup_steps` unmeasured steps of all envs."""
    done = 0
    while done < warmup_steps * num_envs:
        key, obs = batches.next_batch()
        batches.act(key, choose(obs))
        done += len(obs)
    steps, before, start = 0, load_sample(), time.perf_counter()
    while True:
        key, obs = batches.next_batch()  # waits for the oldest batch in flight (sync: the step just sent)
        steps += len(obs)
        batches.act(key, choose(obs))
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed, others_busy(before, load_sample())


def env_kind(env_id: str) -> tuple[str, Optional[dict]]:
    """("atari", its emulator settings) or ("classic", None); fails in one line on an id this tool cannot step."""
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass  # then Atari ids are unknown, and classic control still works
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as e:
        fail(f"cannot make environment {env_id!r}: {e}")
    if spec.entry_point == "ale_py.env:AtariEnv":
        return "atari", atari_envs.atari_emulator_settings(env_id)  # refuses the ids the Atari scripts refuse
    env = environments.probe_env(env_id, gym.spaces.Discrete)
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        fail(f"{env_id} has observation space {env.observation_space}; envs.py measures flat Box observations only")
    env.close()
    return "classic", None


def plan(args: Args) -> tuple[str, Optional[dict], list[dict], list[str], int]:
    """Check the input and list the cells to measure: (kind, settings, cells, notes, the threads 0 stands for)."""
    kind, settings = env_kind(args.env_id)
    num_envs = args.num_envs or ((8, 16) if kind == "atari" else (4, 16, 64))
    cores = len(os.sched_getaffinity(0))
    threads = args.threads or tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if t < cores) + (cores,)
    known = ATARI_BACKENDS if kind == "atari" else CLASSIC_BACKENDS
    backends = args.backends or (("ale-vector", "raw", "envpool") if kind == "atari" else CLASSIC_BACKENDS)
    for n in num_envs:
        if n < 1:
            fail(f"--num-envs must be at least 1, got {n}")
    for t in threads:
        if t < 0:
            fail(f"--threads must be 0 (the free cores) or more, got {t}")
    for b in backends:
        if b not in known:
            fail(f"unknown backend {b!r} for {args.env_id}; choose from {', '.join(known)}")
    for m in args.modes:
        if m not in MODES:
            fail(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
    if not args.seconds > 0:
        fail(f"--seconds must be positive, got {args.seconds}")
    if args.rounds < 1:
        fail(f"--rounds must be at least 1, got {args.rounds}")
    if args.torch_threads < 0:
        fail(f"--torch-threads must be 0 (the scripts' default) or more, got {args.torch_threads}")
    if args.warmup_steps < 0:
        fail(f"--warmup-steps must be 0 or more, got {args.warmup_steps}")
    if args.out is not None and not Path(args.out).resolve().parent.is_dir():
        fail(f"--out {args.out}: its folder does not exist")

    auto, why = atari_envs.env_worker_threads(0)  # what the scripts' default, --env-threads 0, takes now
    notes, cells = [], []
    if 0 in threads:
        notes.append(f"threads 0: {auto} ({why}), as --env-threads 0 would choose now")
    if kind == "atari" and "pipelined" in args.modes:
        notes.append("pipelined threads are the total: ale-vector and raw give each half threads // 2, at least one "
                     "(threads 1: one per half, two in all); envpool's halves share its threads")
    for backend in dict.fromkeys(backends):
        pool_id = None
        if backend == "envpool":
            pool_id, why = envpool_id(args.env_id, kind, settings)
            if pool_id is None:
                notes.append(why)
                continue
        if backend not in THREADED:
            notes.append(f"{backend} steps in this process: no worker threads, no pipelined mode")
        for n in dict.fromkeys(num_envs):
            for t in dict.fromkeys(threads) if backend in THREADED else (None,):
                for mode in args.modes if backend in THREADED else ("sync",):
                    if mode == "pipelined" and n < 2:
                        continue  # one env has no halves
                    count = None if t is None else (auto if t == 0 else t)
                    cells.append(dict(backend=backend, num_envs=n, threads=t, thread_count=count, mode=mode,
                                      envpool_id=pool_id, env_sps=[], policy_sps=[],
                                      others_busy=[]))
    if "pipelined" in args.modes and 1 in num_envs:
        notes.append("1 env: no pipelined mode (it needs two halves)")
    if not cells:
        fail("nothing to measure: no backend is available for these settings")
    return kind, settings, cells, notes, auto


def median(values: list[float]) -> float:
    return statistics.median(values)


def sps_range(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:,.0f}" if len(values) == 1 else f"{low:,.0f}-{high:,.0f}"


def threads_label(cell: dict) -> str:
    if cell["threads"] is None:
        return "-"
    return f"0 ({cell['thread_count']})" if cell["threads"] == 0 else str(cell["threads"])


def table(cells: list[dict], kind: str) -> str:
    raw = {(c["num_envs"], c["threads"], c["mode"]): median(c["env_sps"]) for c in cells if c["backend"] == "raw"}
    lines = ["| backend | num_envs | threads | mode | env alone (SPS) | with policy (SPS) | env alone / raw |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        ceiling = raw.get((c["num_envs"], c["threads"], c["mode"])) if c["backend"] != "raw" else None
        ratio = f"{median(c['env_sps']) / ceiling:.2f}" if ceiling else "-"
        lines.append(f"| {c['backend']} | {c['num_envs']} | {threads_label(c)} | {c['mode']} | "
                     f"{sps_range(c['env_sps'])} | {sps_range(c['policy_sps'])} | {ratio} |")
    return "\n".join(lines)


def describe(cell: dict, kind: str) -> str:
    if kind == "atari" and cell["backend"] == "ale-vector":
        pipeline = "on" if cell["mode"] == "pipelined" else "off"
        return f"`--env-threads {cell['threads']} --pipeline-envs {pipeline}`"
    if cell["threads"] is None:
        return cell["backend"]
    return f"{cell['backend']}, threads {threads_label(cell)}, {cell['mode']}"


def recommendations(cells: list[dict], kind: str, auto_threads: int) -> list[str]:
    """Per num_envs, the fastest cell with the policy (medians of the rounds): among ale-vector's for Atari (the
    scripts' flags), and the fastest backend of all where that is another one; and the Atari scripts' default
    on the CPU (--env-threads 0 --pipeline-envs auto: auto_threads threads now, stepped together) where it was
    measured."""
    lines = []
    for n in dict.fromkeys(c["num_envs"] for c in cells):
        row = [c for c in cells if c["num_envs"] == n]
        ranked = sorted(row, key=lambda c: -median(c["policy_sps"]))
        scripts = [c for c in ranked if c["backend"] == ("ale-vector" if kind == "atari" else "gymnasium")]
        if scripts:
            best = scripts[0]
            text = f"- {n} envs: {describe(best, kind)}, {median(best['policy_sps']):,.0f} SPS with the policy"
            if len(scripts) > 1:
                second = scripts[1]
                close = min(best["policy_sps"]) <= max(second["policy_sps"])  # the rounds' ranges overlap
                text += (f" (next: {describe(second, kind)}, {median(second['policy_sps']):,.0f}"
                         + ("; within the noise of the rounds)" if close else ")"))
            if ranked[0] is not best:
                top = ranked[0]
                text += (f"; fastest of all backends: {describe(top, kind)}, {median(top['policy_sps']):,.0f} "
                         f"({median(top['policy_sps']) / median(best['policy_sps']):.2f}x)")
        else:
            top = ranked[0]
            text = f"- {n} envs: fastest measured: {describe(top, kind)}, {median(top['policy_sps']):,.0f} SPS"
        lines.append(text)
    default = {c["num_envs"]: median(c["policy_sps"]) for c in cells if c["backend"] == "ale-vector"
               and c["mode"] == "sync" and c["thread_count"] == auto_threads}
    if kind == "atari" and default:
        lines.append(f"The scripts' default on the CPU, `--env-threads 0 --pipeline-envs auto` (stepped together, "
                     f"{auto_threads} threads here): "
                     + ", ".join(f"{sps:,.0f} SPS at {n} envs" for n, sps in default.items()) + ".")
    if kind == "classic":
        lines.append("The classic-control scripts step gymnasium's SyncVectorEnv in the training process: they have "
                     "no thread or pipelining flags.")
    lines.append("Threads and pipelining do not change the algorithm; num_envs changes the batch size (and so the "
                 "learning), choose it for the algorithm first.")
    return lines


def main(args: Args) -> int:
    # envpool's spaces are declared in float64 and gymnasium warns on every build; nothing to act on
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32.*")
    kind, settings, cells, notes, auto_threads = plan(args)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    # A policy with more torch threads than free cores stalls at every op (with another process on one of 2 cores,
    # CartPole's MLP step measured 100x slower at 2 threads than at 1), so it gets the count its script would take.
    torch.set_num_threads(args.torch_threads or (speed.free_cores() if kind == "atari" else 1))
    probe = gym.make(args.env_id)  # the action count (Atari: the id's action set) and the observation size
    n_actions, obs_shape = int(probe.action_space.n), probe.observation_space.shape
    probe.close()
    policy_step = nature_cnn_policy(n_actions) if kind == "atari" else mlp_policy(obs_shape[0], n_actions)

    def policy_actions(obs: np.ndarray) -> np.ndarray:
        return policy_step(obs)[0].numpy()

    def random_actions(obs: np.ndarray) -> np.ndarray:
        return rng.integers(0, n_actions, size=len(obs))

    print(f"{args.env_id}: {len(os.sched_getaffinity(0))} cores, torch threads for the policy: "
          f"{torch.get_num_threads()}; {args.seconds:g} s per measurement after {args.warmup_steps} warm-up steps, "
          f"{args.rounds} interleaved rounds", flush=True)
    for round_index in range(args.rounds):
        for c in cells:
            batches = build(c, args.env_id, kind, settings, args.seed)
            try:
                for column, choose in (("env", random_actions), ("policy", policy_actions)):
                    sps, others = measure(batches, choose, c["num_envs"], args.seconds, args.warmup_steps)
                    c[f"{column}_sps"].append(sps)
                    c["others_busy"].append(round(others, 2))
            finally:
                batches.close()
            sys.stderr.write(f"round {round_index + 1}/{args.rounds}: {c['backend']} {c['num_envs']} envs, threads "
                             f"{threads_label(c)}, {c['mode']}: {c['env_sps'][-1]:,.0f} alone, "
                             f"{c['policy_sps'][-1]:,.0f} with the policy\n")
            sys.stderr.flush()
    lines = ["", table(cells, kind), ""]
    lines += [f"Note: {note}." for note in notes]
    load = [x for c in cells for x in c["others_busy"]]
    lines.append(f"Note: other processes kept {min(load):.1f}-{max(load):.1f} of {os.cpu_count()} cores busy during "
                 f"the measurements (mean {statistics.mean(load):.1f}); a cell measured beside such load reads low.")
    advice = recommendations(cells, kind, auto_threads)
    lines += ["", "Recommendations (fastest with the policy, median of the rounds):", *advice]
    print("\n".join(lines), flush=True)
    if args.out is not None:
        result = {"env_id": args.env_id, "kind": kind, "cores": len(os.sched_getaffinity(0)),
                  "torch_threads": torch.get_num_threads(), "seconds": args.seconds, "rounds": args.rounds,
                  "warmup_steps": args.warmup_steps, "notes": notes, "recommendations": advice,
                  "cells": [{k: c[k] for k in ("backend", "num_envs", "threads", "thread_count", "mode", "env_sps",
                                               "policy_sps", "others_busy")} for c in cells]}
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
