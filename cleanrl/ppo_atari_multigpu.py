# docs: docs/rl-algorithms/ppo-multigpu.md
"""PPO on Atari, data-parallel over processes (one GPU each, or CPU processes with gloo).

The algorithm of cleanrl/ppo_atari.py, run by N copies that each step their own share of the
environments and average their gradients with one all-reduce per minibatch, so all copies hold the
same weights at every step. Proximal Policy Optimization, Schulman et al. 2017,
https://arxiv.org/abs/1707.06347; Atari details from Huang et al. 2022,
https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/.

Run:
    python cleanrl/ppo_atari_multigpu.py --env-id BreakoutNoFrameskip-v4          # one process
    torchrun --standalone --nnodes=1 --nproc_per_node=2 cleanrl/ppo_atari_multigpu.py --env-id BreakoutNoFrameskip-v4
    # two machines with 4 GPUs each; run on both, --node-rank 0 on the machine at HOST, 1 on the other
    torchrun --nnodes=2 --nproc_per_node=4 --node-rank=R --master-addr=HOST --master-port=29500 \\
        cleanrl/ppo_atari_multigpu.py --env-id BeamRiderNoFrameskip-v4 --num-envs 32 --total-timesteps 100000000
    # long jobs: checkpoints, and up to 3 automatic restarts that continue from the last one
    torchrun --standalone --nnodes=1 --nproc_per_node=2 --max-restarts=3 cleanrl/ppo_atari_multigpu.py \\
        --env-id BreakoutNoFrameskip-v4 --save-model --checkpoint-frequency 50 --resume auto
    python cleanrl/ppo_atari_multigpu.py --help
"""

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributions.categorical import Categorical

import atari_envs
import checkpoints
import environments
import evaluation
import messages
import runtime
import speed
from flags import (
    NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, UnitFloat, whole_iterations, with_run_flags,
)
from messages import fail


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    amp: bool = False
    """if toggled, run the networks' forward passes under bf16 autocast (pays on CUDA GPUs; slow on most CPUs)"""
    eval_max_frames: Optional[PositiveInt] = None
    """if set, cut each evaluation game after this many emulator frames (None: the id's own limit, 108000)"""
    backend: Optional[Literal["nccl", "gloo"]] = None
    """the torch.distributed backend; None picks nccl when the processes use CUDA and gloo on CPU"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment: `<Game>NoFrameskip-v4` (no sticky actions) or `ALE/<Game>-v5` (sticky actions)"""
    env_backend: str = "ale-vector"
    """`ale-vector`: ale-py's native C++ vector env; `gymnasium`: gymnasium wrappers in a SyncVectorEnv"""
    pipeline_envs: Literal["auto", "on", "off"] = "auto"
    """`on`: the envs step in two halves, each while the policy acts on the other (the same data, sooner); `auto`:
    on when the policy acts on a GPU, off on the CPU (where the policy and the emulators share the cores)"""
    env_threads: NonNegativeInt = 0
    """each rank's emulator worker threads (ale-vector); 0: its share of the node's cores (cores / ranks on the node)"""
    total_timesteps: PositiveInt = 10000000
    """total environment steps of the experiment, all ranks together (agent steps; each is 4 emulator frames)"""
    learning_rate: PositiveFloat = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: PositiveInt = 8
    """the number of parallel environments over ALL ranks; each rank steps num_envs / world size of them"""
    num_steps: PositiveInt = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """if toggled, the learning rate decays linearly to 0 over the run"""
    gamma: UnitFloat = 0.99
    """the discount factor gamma"""
    gae_lambda: UnitFloat = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: PositiveInt = 4
    """the number of minibatches per update epoch (each one is split evenly over the ranks)"""
    update_epochs: PositiveInt = 4
    """the number of epochs over the rollout per update"""
    norm_adv: bool = True
    """if toggled, normalize advantages per minibatch (with the statistics of the global minibatch)"""
    clip_coef: PositiveFloat = 0.1
    """the surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the PPO paper's reference code"""
    ent_coef: NonNegativeFloat = 0.01
    """the coefficient of the entropy bonus"""
    vf_coef: NonNegativeFloat = 0.5
    """the coefficient of the value loss"""
    max_grad_norm: PositiveFloat = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: Optional[NonNegativeFloat] = None
    """if set, stop the update epochs early once the approximate KL (averaged over ranks) exceeds it"""


def derive_sizes(args: Args, world_size: int) -> tuple[int, int, int, int]:
    """Per-rank sizes follow from the global flags; they are checked here, never set by hand. Returns
    (envs_per_rank, local_batch_size, local_minibatch_size, num_iterations). The global batch is num_envs * num_steps;
    each rank holds envs_per_rank * num_steps of it, and each global minibatch is one local minibatch of every rank.
    Each flag's own range is declared beside it, in its type."""
    if args.num_envs % world_size != 0:
        fail(f"--num-envs {args.num_envs} (all ranks together) does not divide evenly over {world_size} ranks")
    envs_per_rank = args.num_envs // world_size
    local_batch_size = envs_per_rank * args.num_steps
    if local_batch_size % args.num_minibatches != 0:
        fail(f"the batch of one rank (--num-envs {args.num_envs} / {world_size} ranks x --num-steps {args.num_steps}"
             f" = {local_batch_size}) does not divide into --num-minibatches {args.num_minibatches}")
    global_batch_size = args.num_envs * args.num_steps
    if args.norm_adv and global_batch_size // args.num_minibatches < 2:
        fail(f"minibatches of one transition (--num-minibatches {args.num_minibatches}): --norm-adv divides by their "
             "standard deviation, which needs 2; use fewer --num-minibatches or --no-norm-adv")
    num_iterations = whole_iterations(args.total_timesteps, global_batch_size, "one batch")
    return envs_per_rank, local_batch_size, local_batch_size // args.num_minibatches, num_iterations


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Nature CNN (Mnih et al. 2015) shared by a policy head and a value head."""

    def __init__(self, n_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),  # (batch, 64 * 7 * 7)
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)
        # Conv weights and frames in the channels-last layout: the same values, but the update's convolutions (256
        # frames, forward and backward) run about 1.3x faster on a CPU than in the default layout; rounding differs.
        self.to(memory_format=torch.channels_last)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        # uint8 frames in [0, 255] -> floats in [0, 1], channels last (the division keeps the layout)
        return self.network(x.contiguous(memory_format=torch.channels_last) / 255.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(x))

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        hidden = self.features(x)
        # No argument validation: it would stop a diverged run with a traceback inside the update, before
        # the once-per-update non-finite check can name the step and the quantity (and it costs time).
        # Logits and value in float32: under --amp's bf16 autocast the layers compute in bf16, while the
        # distribution, log-probabilities and entropy (and so the PPO ratio and losses) stay float32 (bf16 keeps
        # ~3 significant digits). Without autocast .float() returns the tensor itself.
        probs = Categorical(logits=self.actor(hidden).float(), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden).float()


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, terminations: torch.Tensor,
                dones: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, Eq. 16) over a rollout with episode ends.

    All inputs are (num_steps, num_envs). `next_values[t]` is V(s_{t+1}) of the true successor of s_t:
    for a step that ended an episode by truncation it is the value of the final observation, so a
    time-limit cut still bootstraps. `terminations[t]` = 1 drops that bootstrap (s_{t+1} is terminal).
    `dones[t]` = 1 (terminated or truncated) cuts the recursion, since step t+1 belongs to a new episode.
    Returns (advantages, returns), returns = advantages + values (the TD(lambda) value targets).
    """
    # delta_t and the decay gamma * lambda * (1 - done_t) of every step at once, then the backward recursion
    # A_t = delta_t + decay_t * A_{t+1}: the float32 ops of the one-step-at-a-time form, in its order (bit-identical)
    deltas = rewards + gamma * next_values * (1.0 - terminations) - values
    decays = gamma * gae_lambda * (1.0 - dones)
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        lastgaelam = deltas[t] + decays[t] * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


# ---- data parallelism: what makes N ranks compute the update of one process holding the whole batch ----
def broadcast_parameters(module: nn.Module, world_size: int) -> None:
    """Copy rank 0's weights to every rank (one flat broadcast), so all replicas start identical."""
    if world_size == 1:
        return
    params = [p.detach() for p in module.parameters()]
    flat = torch.cat([p.reshape(-1) for p in params])  # reshape, not view: the conv weights are channels last
    dist.broadcast(flat, src=0)
    offset = 0
    for p in params:
        p.copy_(flat[offset : offset + p.numel()].view_as(p))  # copied in place: each keeps its layout
        offset += p.numel()


def all_reduce_gradients(params: list[nn.Parameter], world_size: int) -> None:
    """Replace every rank's gradients by their mean over ranks: one all-reduce of one flat buffer.

    Each rank's loss is a mean over its equal share of the global minibatch, so the mean of the ranks'
    gradients is exactly the gradient of the mean loss over the whole global minibatch. After this call
    every rank holds the same gradient, so the same clipping and optimizer step keep the replicas
    identical. One flat buffer costs one collective per minibatch instead of one per tensor.
    """
    if world_size == 1:
        return
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world_size  # ReduceOp.AVG exists on NCCL only; SUM then divide works on gloo as well
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def normalize_advantages(advantages: torch.Tensor, world_size: int) -> torch.Tensor:
    """(A - mean) / (std + 1e-8) with the mean and (unbiased) std of the GLOBAL minibatch.

    With per-rank statistics the update would depend on how the minibatch is cut over ranks; with global
    ones N ranks holding 1/N each compute what one process holding all of it computes. Two scalar
    all-reduces (mean first, then squared deviations) avoid the cancellation of a one-pass variance.
    """
    if world_size == 1:
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    count = advantages.numel() * world_size  # every rank holds an equal share
    total = advantages.sum()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    mean = total / count
    sq_dev = ((advantages - mean) ** 2).sum()
    dist.all_reduce(sq_dev, op=dist.ReduceOp.SUM)
    std = torch.sqrt(sq_dev / (count - 1))
    return (advantages - mean) / (std + 1e-8)


def mean_over_ranks(x: torch.Tensor, world_size: int) -> torch.Tensor:
    """The mean of a tensor over ranks (every rank gets it); the identity in a single process."""
    if world_size == 1:
        return x
    x = x.detach().clone()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x / world_size


def stop_early(approx_kl: torch.Tensor, target_kl: Optional[float], world_size: int) -> bool:
    """The target-kl test decided by all ranks together: each rank sees its own minibatch's KL, so local
    decisions could differ, and a rank that leaves the epoch loop early would leave the others waiting in
    an all-reduce forever. Every rank compares the same rank-averaged KL and so takes the same branch."""
    if target_kl is None:
        return False
    return bool(mean_over_ranks(approx_kl, world_size) > target_kl)


def gather_per_rank(obj, world_size: int) -> list:
    """[rank 0's obj, rank 1's obj, ...] on every rank."""
    if world_size == 1:
        return [obj]
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def gather_episodes(episodes: list[tuple[int, float, int]], world_size: int) -> list[tuple[int, float, int]]:
    """Every rank's finished episodes (global_step, return, length), collected on every rank, ordered by step.

    Called once per rollout rather than per step, so it costs one collective per iteration."""
    return sorted((e for rank_episodes in gather_per_rank(episodes, world_size) for e in rank_episodes),
                  key=lambda e: e[0])


def ppo_loss(newlogprob: torch.Tensor, entropy: torch.Tensor, newvalue: torch.Tensor, mb_logprobs: torch.Tensor,
             mb_advantages: torch.Tensor, mb_returns: torch.Tensor, mb_values: torch.Tensor, args: Args):
    """The PPO objective on one rank's local minibatch (all inputs (minibatch,)), whose advantages are already
    normalized with the global minibatch's statistics: returns (loss, pg_loss, v_loss, entropy_loss, old_approx_kl,
    approx_kl, clipfrac); the loss is what the optimizer minimizes."""
    logratio = newlogprob - mb_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # KL estimators k1 and k3, http://joschu.net/blog/kl-approx.html
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

    # clipped surrogate objective, Eq. (7), Schulman et al. 2017
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - mb_returns) ** 2
        v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - mb_returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - mb_returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef  # Eq. (9)
    return loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac


def evaluate(agent: Agent, args: Args, run_name: str, device: torch.device) -> list[float]:
    """Real game scores of args.eval_episodes whole games on a fresh env, actions sampled from the policy.

    Sampling, not argmax: a greedy Atari policy can get stuck (e.g. never pressing FIRE after a lost life in
    Breakout), which makes a game last until the frame limit. With --eval-only, --env-backend,
    --eval-max-frames, --seed and --capture-video come from the command line; videos go to videos/{name}-eval.
    """
    envs = atari_envs.make_atari_envs(args.env_id, 1, args.env_backend, args.capture_video, f"{run_name}-eval",
                                   max_frames=args.eval_max_frames)
    return evaluation.evaluate_episodes(envs, lambda x: agent.get_action_and_value(x)[0],
                                          args.eval_episodes, args.seed + 10_000, device, dtype=None)


def make_agent(args: Args) -> Agent:
    """An untrained agent for args.env_id (--eval-only loads the saved weights into it)."""
    atari_envs.check_atari(args.env_id, args.env_backend)
    probe = atari_envs.make_atari_envs(args.env_id, 1, args.env_backend)
    n_actions = int(probe.single_action_space.n)
    probe.close()
    return Agent(n_actions)


# ---- torchrun set-up ----
def per_rank_states(envs, world_size: int, save_model: bool) -> dict:
    """Every rank's generators and env state (None for Atari), for rank 0's checkpoint (with --save-model): they
    replace the run's own "rng" and "envs" entries with lists indexed by rank (each rank resumes its own streams)."""
    if not save_model:
        return {}
    states = gather_per_rank((checkpoints.rng_state(), checkpoints.env_state(envs)[0]), world_size)
    return {"rng": [rng for rng, _ in states], "envs": [env for _, env in states]}


def rollout_storage(num_steps: int, num_envs: int, device) -> tuple[torch.Tensor, ...]:
    """obs (uint8 frames: 4x less memory than float; the network scales them), actions, logprobs, rewards,
    terminations, truncations (the frame limit), values and final_values (the value of a truncated game's final
    frames), each (num_steps, num_envs, ...)."""
    obs = torch.zeros((num_steps, num_envs, 4, 84, 84), dtype=torch.uint8, device=device)
    actions = torch.zeros((num_steps, num_envs), dtype=torch.long, device=device)
    logprobs, rewards, terminations, truncations, values, final_values = (
        torch.zeros((num_steps, num_envs), device=device) for _ in range(6))
    return obs, actions, logprobs, rewards, terminations, truncations, values, final_values


if __name__ == "__main__":
    rank, local_rank, node_rank, world_size = runtime.torchrun_env()
    # On every rank, before the process group forms; with a group, --resume waits for it (broadcast_resume below).
    args, checkpoint = runtime.parse_args(Args, rank, resume_later=world_size > 1)
    if args.eval_only is not None:
        # evaluation runs in this one process (no process group), even under torchrun
        runtime.eval_only(args, "agent", lambda _: make_agent(args), evaluate)
    # Everything that can be wrong with the input is checked before the process group forms and before the run
    # directory exists, so all ranks fail alike before any of them waits. With --resume the flags are the
    # checkpoint's, known once rank 0 has read it: they are checked below, on every rank alike.
    if args.resume is None:
        derive_sizes(args, world_size)
        atari_envs.check_atari(args.env_id, args.env_backend)
    # one GPU per process, chosen by LOCAL_RANK and made current (else NCCL would use GPU 0 in every process)
    device = speed.pick_device(args, local_rank)
    # On a GPU the dense layers' matmuls run in TF32 (a 10-bit mantissa on tensor cores), as cuDNN's convolutions
    # already do by default: PPO's gradients are far noisier than that rounding.
    torch.backends.cuda.matmul.allow_tf32 = True
    # join the group (NCCL on GPUs, gloo on CPUs, unless --backend says); blocks until all WORLD_SIZE ranks joined
    backend = runtime.init_process_group(args.backend, rank, world_size, device)
    if world_size > 1:
        # Only rank 0 reads runs/ (on a multi-node job only node 0 has it) and sends the flags and checkpoint to all.
        args, checkpoint = runtime.broadcast_resume(Args, args, rank)
    envs_per_rank, local_batch_size, local_minibatch_size, num_iterations = derive_sizes(args, world_size)
    atari_envs.check_atari(args.env_id, args.env_backend)
    # this rank's rollout storage's memory, from its shapes and dtypes (tensors on the meta device take none)
    speed.check_memory(f"--num-steps {args.num_steps} x {envs_per_rank} envs a rank", speed.nbytes(rollout_storage(
        args.num_steps, envs_per_rank, "meta")), "a rollout storage", cuda=args.cuda)
    # each rank's share of the checkpoint (on another number of ranks: the same global batch, new streams and games)
    checkpoint = runtime.rank_share(checkpoint, rank, world_size, args, envs_per_rank)
    # Only rank 0 writes: one event file, one W&B run, one video folder, one checkpoint.
    run = runtime.start(args, checkpoint, num_iterations, args.num_envs * args.num_steps, rank, local_rank)
    device, writer = run.device, run.writer

    # Distinct seeds per rank: rank r's python/numpy/torch streams (action sampling, minibatch order) start from
    # seed + r, its envs' seeds from seed + r * envs_per_rank: all ranks' envs get seed ... seed + num_envs - 1.
    runtime.seed_everything(args.seed + rank, args.torch_deterministic)
    env_seed = args.seed + rank * envs_per_rank
    messages.say(f"rank {rank}/{world_size} (node {node_rank}, local rank {local_rank}) on {device} with {backend}: "
                f"{envs_per_rank} envs, env seeds {env_seed}..{env_seed + envs_per_rank - 1}")

    # env setup: this rank's share of the environments (only rank 0 records video); they take the actions as a
    # tensor and return tensors on the device (environments.OnDevice)
    envs = environments.OnDevice(atari_envs.make_atari_envs(
        args.env_id, envs_per_rank, args.env_backend, args.capture_video and rank == 0, run.name,
        **atari_envs.atari_engine(envs_per_rank, args.env_backend, args.env_threads, args.pipeline_envs, device,
                                    rank == 0)), device)
    obs_shape = envs.single_observation_space.shape  # (4, 84, 84) uint8
    agent = Agent(int(envs.single_action_space.n)).to(device)
    # Every rank drew its own random init (seeded differently); rank 0's becomes everyone's.
    broadcast_parameters(agent, world_size)
    # Adam (eps 1e-5) as the speed flags need it: a tensor learning rate annealed in place, capturable, fused
    optimizer = speed.adam(agent.parameters(), args.learning_rate, device, eps=1e-5)

    obs, actions, logprobs, rewards, terminations, truncations, values, final_values = rollout_storage(
        args.num_steps, envs_per_rank, device)

    # A resumed run loads the same weights and optimizer state on every rank, so the replicas are identical again;
    # the games in progress are dropped (no Atari env state can be saved). global_step counts the environment steps
    # of ALL ranks (in lockstep). The learning-rate schedule is a function of the iteration, its whole state.
    next_obs, start_iteration, global_step = run.restore(envs, {"agent": agent, "optimizer": optimizer}, env_seed)
    next_obs = torch.as_tensor(next_obs, device=device).clone()  # each half's next frames are written into it
    rank_games = 0  # games finished on this rank's envs, for the last line it prints

    def policy_step(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp):
            action, logprob, _, value = agent.get_action_and_value(obs)
        return action, logprob, value

    def grad_step(mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values) -> tuple[torch.Tensor, ...]:
        """Forward, losses and backward on this rank's local minibatch, whose advantages are already normalized
        with the global minibatch's statistics; leaves this rank's gradients in .grad and returns the losses and
        diagnostics, detached. No collective in here (see where it is wrapped below)."""
        # --amp: only the forward pass is autocast; the losses are float32 and backward runs outside autocast
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp):
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb_obs, mb_actions)
        loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = ppo_loss(
            newlogprob, entropy, newvalue.view(-1), mb_logprobs, mb_advantages, mb_returns, mb_values, args)

        optimizer.zero_grad(set_to_none=False)  # zeroes the gradient buffers allocated below, in place
        loss.backward()  # adds into them
        return pg_loss.detach(), v_loss.detach(), entropy_loss.detach(), old_approx_kl, approx_kl, clipfrac

    def optimizer_step() -> torch.Tensor:
        """Clip the rank-averaged gradients and step Adam; returns the gradient norm before clipping."""
        grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        return grad_norm

    # --compile / --cudagraphs wrap exactly these three functions; without the flags they run as written. The
    # collectives (advantage normalization, gradient all-reduce) stay outside them, eager, between grad_step and
    # optimizer_step: compiled code then never has to trace or capture a collective, and every rank issues the same
    # all-reduces in the same order as in the plain path.
    # GAE is only recorded as a CUDA graph (one launch for its loop's 2 x num_steps ops), not compiled: dynamo would
    # unroll the loop.
    policy_step, grad_step = speed.speed_up(policy_step, args), speed.speed_up(grad_step, args)
    optimizer_step = speed.speed_up(optimizer_step, args)
    gae = speed.speed_up(compute_gae, args, compile=False)
    # The gradients live in buffers allocated once, here, that backward adds into: with --cudagraphs a gradient
    # handed over by the captured backward would be graph memory, which the next captured call (optimizer_step)
    # may overwrite before it reads it. The values are those of set_to_none gradients (0 + g = g).
    for p in agent.parameters():
        p.grad = torch.zeros_like(p)

    for iteration in range(start_iteration, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"].fill_(frac * args.learning_rate)

        # rollout, pipelined (--pipeline-envs on, or auto on a GPU): this rank's envs step in two fixed halves (one
        # group when off), one half's step in the emulator threads while the policy acts on the other, so stepping
        # and acting overlap; every env still acts on its own newest frames with the same policy, so the data are
        # those of a synchronous rollout (only the order of the policy's random draws differs). half: a slice of them.
        def act(step: int, half: slice) -> torch.Tensor:
            obs[step, half] = next_obs[half]
            action, logprob, value = policy_step(next_obs[half])
            values[step, half] = value.flatten()
            actions[step, half] = action
            logprobs[step, half] = logprob
            return action

        def store(step: int, half: slice, half_next_obs, reward, term, trunc, infos) -> None:
            next_obs[half] = half_next_obs
            # rewards are sign-clipped and a lost life terminates (atari_envs.AtariGameStatistics); the game goes on
            rewards[step, half] = reward
            terminations[step, half] = term
            truncations[step, half] = trunc
            # A truncated game (frame limit) did not end in a terminal state: its last transition bootstraps from the
            # value of the true final observation (info["final_obs"]). A step that both lost a life and hit the
            # limit counts as terminated.
            final = envs.truncated_final_obs()  # (envs, final frames), or None
            if final is not None:
                with torch.no_grad():
                    final_values[step, final[0]] = agent.get_value(final[1]).flatten()
            if "episode" in infos:  # whole games, real (unclipped) score over all lives
                for i in np.nonzero(infos["_episode"])[0]:
                    episodes.append((global_step + (step + 1) * args.num_envs, float(infos["episode"]["r"][i]),
                                     int(infos["episode"]["l"][i])))

        episodes = []
        envs.rollout(args.num_steps, act, store)
        global_step += args.num_steps * args.num_envs

        # the games of all ranks, logged by rank 0 (one collective per rollout, not per step)
        rank_games += len(episodes)
        for episode_step, episodic_return, episodic_length in gather_episodes(episodes, world_size):
            if rank == 0:
                run.log_episode(episodic_return, episodic_length, episode_step)

        # an episode ended at step t when it terminated or was truncated (a time limit); a truncated one that did not
        # terminate bootstraps from the value of its final observation
        dones = torch.maximum(terminations, truncations)
        truncated = truncations > terminations

        # advantages: the successor of step t is stored at t+1, except after the last step and at truncations
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            next_values = torch.cat([values[1:], next_value], dim=0)
            next_values = torch.where(truncated, final_values, next_values)
            advantages, returns = gae(rewards, values, next_values, terminations, dones, args.gamma, args.gae_lambda)

        # flatten this rank's share of the batch: (num_steps * envs_per_rank, ...)
        b_obs = obs.reshape((-1,) + obs_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # optimize the policy and value network: each rank cuts its own share into local minibatches in its own
        # shuffled order (drawn on its device); the ranks' k-th local minibatches together make the k-th global
        # minibatch
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(local_batch_size, device=device)
            for start in range(0, local_batch_size, local_minibatch_size):
                mb_inds = b_inds[start : start + local_minibatch_size]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = normalize_advantages(mb_advantages, world_size)  # global minibatch statistics
                pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = grad_step(
                    b_obs[mb_inds], b_actions[mb_inds], b_logprobs[mb_inds], mb_advantages, b_returns[mb_inds],
                    b_values[mb_inds])
                clipfracs.append(clipfrac.clone())  # kept: a replayed update (--cudagraphs) overwrites its outputs
                # Average the gradients over ranks with one flat all-reduce: every rank then clips and steps with
                # the gradient of the whole global minibatch, so the replicas stay identical (see all_reduce_gradients).
                all_reduce_gradients(list(agent.parameters()), world_size)
                optimizer_step()

            if stop_early(approx_kl, args.target_kl, world_size):  # the same decision on every rank
                break

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # the last minibatch's statistics, averaged over ranks in one all-reduce, with this rank's stop flag: its mean
        # is > 0 when any rank got SIGINT/SIGTERM, so all ranks stop after the same update and none is left waiting
        logged = torch.stack([v_loss, pg_loss, entropy_loss, old_approx_kl, approx_kl, torch.stack(clipfracs).mean(),
                              torch.tensor(explained_var, dtype=torch.float32, device=device),
                              torch.tensor(float(run.stop.received is not None), device=device)])
        logged = mean_over_ranks(logged, world_size).tolist()
        losses = {"losses/value_loss": logged[0], "losses/policy_loss": logged[1], "losses/entropy": logged[2],
                  "losses/old_approx_kl": logged[3], "losses/approx_kl": logged[4]}
        if writer is not None:
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"].item(), global_step)
            for key, value in losses.items():
                writer.add_scalar(key, value, global_step)
            writer.add_scalar("losses/clipfrac", logged[5], global_step)
            writer.add_scalar("losses/explained_variance", logged[6], global_step)
            writer.add_scalar("charts/update_epochs", epoch + 1, global_step)
        # SPS leaves out the first iteration: a warm-up that holds --compile's compilation (or CUDA graph recording)
        run.start_clock(global_step)
        run.log_sps(global_step)  # global steps (all ranks) per second of rank 0's wall clock
        # Checked before any save, so a checkpoint never holds NaN or inf. The losses are the rank-averaged ones and
        # the replicas' parameters are identical, so every rank finds the same answer without a collective and all
        # stop together. (The explained variance may legitimately be NaN.)
        run.check_finite(losses, global_step, f"iteration {iteration}")
        # All ranks stop together, on the all-reduced flag (a signal that arrives after the all-reduce waits for the
        # next update); the checkpoint holds every rank's generators.
        stop = (run.stop.received or "a signal to another rank") if logged[7] > 0 else None
        run.end_of_iteration(iteration, global_step, next_obs, stop=stop,
                             **per_rank_states(envs, world_size, args.save_model))

    run.finish(global_step, next_obs, model=agent, evaluate=lambda: evaluate(agent, args, run.name, device),
               **per_rank_states(envs, world_size, args.save_model))
    # one line per rank, all printed by rank 0 (one writer, so no line breaks into another rank's progress line):
    # equal checksums on all ranks mean the replicas never drifted apart
    own = rank_games, checkpoints.parameter_checksum(agent)
    for r, (games, checksum) in enumerate(gather_per_rank(own, world_size)):
        if rank == 0:
            messages.say(f"rank {r}/{world_size}: {games} games finished, parameter checksum {checksum}")
