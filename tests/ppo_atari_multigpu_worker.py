"""One PPO update on a fixed batch with the distributed helpers of cleanrl/ppo_atari_multigpu.py.

Run by tests/test_ppo_atari_multigpu.py, either with plain `python` (one process holding the whole
batch) or under `torchrun --nproc_per_node=2` (each rank holding its half). Each rank writes what it
computed to OUT_DIR/rank{RANK}_of{WORLD_SIZE}.pt; the test compares the two cases. The loss below is
the clipped PPO loss exactly as the script's minibatch step writes it.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cleanrl"))  # the runtime module the script imports

from cleanrl.ppo_atari_multigpu import (  # noqa: E402
    Agent,
    all_reduce_gradients,
    broadcast_parameters,
    gather_episodes,
    normalize_advantages,
    stop_early,
)
from runtime import torchrun_env  # noqa: E402

GLOBAL_MINIBATCH = 16
N_ACTIONS = 4
CLIP_COEF, ENT_COEF, VF_COEF, MAX_GRAD_NORM = 0.1, 0.01, 0.5, 0.5


def fixed_batch(minibatch: int, seed: int) -> dict:
    """The same global minibatch on every rank, from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randint(0, 256, (GLOBAL_MINIBATCH, 4, 84, 84), generator=g).float(),
        "actions": torch.randint(0, N_ACTIONS, (GLOBAL_MINIBATCH,), generator=g),
        # old log-probabilities off the current policy's, so ratios differ from 1 and some get clipped
        "logprob_shift": 0.3 * torch.randn(GLOBAL_MINIBATCH, generator=g),
        "advantages": torch.randn(GLOBAL_MINIBATCH, generator=g) * 3.0 + 1.0,
        "returns": torch.randn(GLOBAL_MINIBATCH, generator=g),
        "values": torch.randn(GLOBAL_MINIBATCH, generator=g),
    }


def ppo_loss(agent: Agent, mb: dict, world_size: int) -> torch.Tensor:
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
    old_logprob = newlogprob.detach() + mb["logprob_shift"]
    ratio = (newlogprob - old_logprob).exp()
    mb_advantages = normalize_advantages(mb["advantages"], world_size)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - CLIP_COEF, 1 + CLIP_COEF)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    newvalue = newvalue.view(-1)
    v_clipped = mb["values"] + torch.clamp(newvalue - mb["values"], -CLIP_COEF, CLIP_COEF)
    v_loss = 0.5 * torch.max((newvalue - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
    return pg_loss - ENT_COEF * entropy.mean() + v_loss * VF_COEF


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    rank, _, _, world_size = torchrun_env()
    if world_size > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.set_num_threads(1)
        # every rank draws a different init on purpose: the broadcast must make rank 0's the common one
        torch.manual_seed(1 + rank)
        agent = Agent(N_ACTIONS)
        broadcast_parameters(agent, world_size)
        optimizer = optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
        share = GLOBAL_MINIBATCH // world_size
        mine = slice(rank * share, (rank + 1) * share)
        result = {"local_grads": [], "grads": [], "normalized_advantages": []}
        # two minibatches, so the second step also runs through Adam's moment estimates
        for seed in (0, 1):
            mb = {k: v[mine] for k, v in fixed_batch(GLOBAL_MINIBATCH, seed).items()}
            result["normalized_advantages"].append(normalize_advantages(mb["advantages"], world_size))
            optimizer.zero_grad()
            ppo_loss(agent, mb, world_size).backward()
            result["local_grads"].append(torch.cat([p.grad.reshape(-1) for p in agent.parameters()]).clone())
            all_reduce_gradients(list(agent.parameters()), world_size)
            result["grads"].append(torch.cat([p.grad.reshape(-1) for p in agent.parameters()]).clone())
            nn.utils.clip_grad_norm_(agent.parameters(), MAX_GRAD_NORM)
            optimizer.step()
        result["params"] = torch.cat([p.detach().reshape(-1) for p in agent.parameters()])  # reshape: conv weights are channels last
        # collective decisions: rank r reports KL r, so the rank-average is (world_size - 1) / 2
        kl = torch.tensor(float(rank))
        result["stop_at_0.4"] = stop_early(kl, 0.4, world_size)
        result["stop_at_0.6"] = stop_early(kl, 0.6, world_size)
        result["stop_without_target"] = stop_early(kl, None, world_size)
        # rank r finished one episode at global step 100 - 10 r with return r and length r + 1
        result["episodes"] = gather_episodes([(100 - 10 * rank, float(rank), rank + 1)], world_size)
        torch.save(result, out_dir / f"rank{rank}_of{world_size}.pt")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
