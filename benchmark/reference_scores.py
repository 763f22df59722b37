# docs: docs/benchmark.md
"""Reference scores that give a final return a meaning: for each env, a low end (what a policy that knows nothing
scores) and a high end (a known good result), so that a normalized score (return - low) / (high - low) reads as
"0: random, 1: the reference". benchmark/report.py normalizes with them where they exist and aggregates nothing
where they do not.

- Atari (any id of the game: BreakoutNoFrameskip-v4, ALE/Breakout-v5, envpool's Breakout-v5): the random and human
  scores of the Atari-57 literature (random: uniform actions; human: a professional tester's mean; both with up to
  30 no-op starts), as tabulated by Mnih et al. 2015 and Badia et al. 2020 (Agent57, Table H.1). 0 random, 1 human.
- Procgen, easy distribution (`starpilot`, the default --distribution-mode, or envpool's StarpilotEasy-v0): the
  normalization constants (R_min, R_max) of Cobbe et al. 2020, "Leveraging Procedural Generation to Benchmark
  Reinforcement Learning", whose min is a policy trained without learning signal and max the best known return.
- The other envs of the published CleanRL results (benchmark/suite.py's PUBLISHED): low, the mean return of
  uniformly random actions over 100 episodes measured here (`python benchmark/reference_scores.py` prints them
  again); high, the best final return upstream CleanRL published for that env (any script, its budget). 1 means
  "as good as the best published CleanRL run", the same scale for every script on the env.

An env with none of these (Pendulum-v1, your own env) has no reference: give --bounds to report.py.

Run:
    python benchmark/reference_scores.py                        # measure the random-policy returns again
    python benchmark/reference_scores.py --env-ids Pendulum-v1  # or of other envs
"""

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmark.suite import PUBLISHED  # noqa: E402  (a tool, not an algorithm script)


class Reference(NamedTuple):
    low: float
    high: float
    source: str  # said beside the bounds in the report


# game: (random, human)
ATARI = {
    "Alien": (227.8, 7127.7), "Amidar": (5.8, 1719.5), "Assault": (222.4, 742.0), "Asterix": (210.0, 8503.3),
    "Asteroids": (719.1, 47388.7), "Atlantis": (12850.0, 29028.1), "BankHeist": (14.2, 753.1),
    "BattleZone": (2360.0, 37187.5), "BeamRider": (363.9, 16926.5), "Berzerk": (123.7, 2630.4),
    "Bowling": (23.1, 160.7), "Boxing": (0.1, 12.1), "Breakout": (1.7, 30.5), "Centipede": (2090.9, 12017.0),
    "ChopperCommand": (811.0, 7387.8), "CrazyClimber": (10780.5, 35829.4), "Defender": (2874.5, 18688.9),
    "DemonAttack": (152.1, 1971.0), "DoubleDunk": (-18.6, -16.4), "Enduro": (0.0, 860.5),
    "FishingDerby": (-91.7, -38.7), "Freeway": (0.0, 29.6), "Frostbite": (65.2, 4334.7), "Gopher": (257.6, 2412.5),
    "Gravitar": (173.0, 3351.4), "Hero": (1027.0, 30826.4), "IceHockey": (-11.2, 0.9), "Jamesbond": (29.0, 302.8),
    "Kangaroo": (52.0, 3035.0), "Krull": (1598.0, 2665.5), "KungFuMaster": (258.5, 22736.3),
    "MontezumaRevenge": (0.0, 4753.3), "MsPacman": (307.3, 6951.6), "NameThisGame": (2292.3, 8049.0),
    "Phoenix": (761.4, 7242.6), "Pitfall": (-229.4, 6463.7), "Pong": (-20.7, 14.6), "PrivateEye": (24.9, 69571.3),
    "Qbert": (163.9, 13455.0), "Riverraid": (1338.5, 17118.0), "RoadRunner": (11.5, 7845.0),
    "Robotank": (2.2, 11.9), "Seaquest": (68.4, 42054.7), "Skiing": (-17098.1, -4336.9),
    "Solaris": (1236.3, 12326.7), "SpaceInvaders": (148.0, 1668.7), "StarGunner": (664.0, 10250.0),
    "Surround": (-10.0, 6.5), "Tennis": (-23.8, -8.3), "TimePilot": (3568.0, 5229.2), "Tutankham": (11.4, 167.6),
    "UpNDown": (533.4, 11693.2), "Venture": (0.0, 1187.5), "VideoPinball": (0.0, 17667.9),
    "WizardOfWor": (563.5, 4756.5), "YarsRevenge": (3092.9, 54576.9), "Zaxxon": (32.5, 9173.3),
}  # fmt: skip

# game: (R_min, R_max), easy distribution
PROCGEN_EASY = {
    "coinrun": (5.0, 10.0), "starpilot": (2.5, 64.0), "caveflyer": (3.5, 12.0), "dodgeball": (1.5, 19.0),
    "fruitbot": (-1.5, 32.4), "chaser": (0.5, 13.0), "miner": (1.5, 13.0), "jumper": (3.0, 10.0),
    "leaper": (3.0, 10.0), "maze": (5.0, 10.0), "bigfish": (1.0, 40.0), "heist": (3.5, 10.0),
    "climber": (2.0, 12.6), "plunder": (4.5, 30.0), "ninja": (3.5, 10.0), "bossfight": (0.5, 13.0),
}  # fmt: skip

# the mean return of uniformly random actions, 100 episodes (seeds 0-99), measured with `python
# benchmark/reference_scores.py` (gymnasium 1.x, the envs' own time limits)
RANDOM_POLICY = {
    "CartPole-v1": 23.68, "Acrobot-v1": -497.08, "MountainCar-v0": -200.0, "HalfCheetah-v5": -282.49,
    "Hopper-v5": 16.67, "Walker2d-v5": 1.77,
}  # fmt: skip


def atari_game(env_id: str) -> Optional[str]:
    m = re.fullmatch(r"(?:ALE/)?([A-Z]\w*?)(?:NoFrameskip)?-v[45]", env_id)
    return m[1] if m and m[1] in ATARI else None


def procgen_game(env_id: str) -> Optional[str]:
    """A Procgen game of the easy distribution: a bare game name (ppg_procgen.py's --env-id, easy by default) or
    envpool's id (StarpilotEasy-v0)."""
    if env_id in PROCGEN_EASY:
        return env_id
    m = re.fullmatch(r"([A-Z][a-z]+)Easy-v0", env_id)
    return m[1].lower() if m and m[1].lower() in PROCGEN_EASY else None


def best_published(env_id: str) -> Optional[tuple[float, str]]:
    """(the best final return upstream CleanRL published for env_id, which script), or None."""
    results = [(entries[env_id][1], script) for script, entries in PUBLISHED.items() if env_id in entries]
    return max(results) if results else None


def reference(env_id: str) -> Optional[Reference]:
    """The reference scores of env_id, or None where there are none (the module docstring says where from)."""
    if game := atari_game(env_id):
        return Reference(*ATARI[game], "Atari random and human scores")
    if game := procgen_game(env_id):
        return Reference(*PROCGEN_EASY[game], "Procgen easy R_min and R_max (Cobbe et al. 2020)")
    published = best_published(env_id)
    if published and env_id in RANDOM_POLICY and published[0] > RANDOM_POLICY[env_id]:
        return Reference(RANDOM_POLICY[env_id], published[0],
                         f"random actions; best published CleanRL return ({published[1]}.py)")
    return None


@dataclass
class Args:
    env_ids: list[str] = field(default_factory=lambda: list(RANDOM_POLICY))
    """the envs whose random-policy return to measure"""
    episodes: int = 100
    """episodes per env, seeded 0, 1, ..."""


def random_policy_return(env_id: str, episodes: int) -> float:
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


if __name__ == "__main__":
    args = tyro.cli(Args)
    for env_id in args.env_ids:
        print(f'"{env_id}": {random_policy_return(env_id, args.episodes):.2f},', flush=True)
