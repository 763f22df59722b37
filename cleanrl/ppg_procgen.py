# docs: docs/rl-algorithms/ppg.md
"""PPG (Phasic Policy Gradient) on Procgen through envpool (default starpilot, easy distribution).

Phasic Policy Gradient, Cobbe et al. 2021, https://arxiv.org/abs/2009.04416: separate policy and value
networks; a policy phase of N_pi PPO iterations, then an auxiliary phase of E_aux epochs that distills
the value function into the policy network (auxiliary value head) under a behavior-cloning KL penalty,
over every observation the policy phase collected. Procgen (Cobbe et al. 2020) comes from envpool,
which needs Debian's Qt 5 runtime (`apt-get install libqt5gui5`).

Run:
    python cleanrl/ppg_procgen.py --env-id starpilot
    python cleanrl/ppg_procgen.py --env-id bigfish --distribution-mode hard --seed 2 --track
    python cleanrl/ppg_procgen.py --env-id BossfightEasy-v0
    python cleanrl/ppg_procgen.py --env-id starpilot --compile --amp
    python cleanrl/ppg_procgen.py --help
"""

from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

import evaluation
import messages
import procgen_envs
import runtime
import speed
from flags import (
    NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, UnitFloat, whole_iterations, with_run_flags,
)
from messages import fail


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    env_id: str = "starpilot"
    """the Procgen game (`starpilot`, `bigfish`, ...; combined with --distribution-mode) or an envpool id
    such as `StarpilotEasy-v0` (which names its own distribution; --distribution-mode is then ignored)"""
    distribution_mode: Literal["easy", "hard", "extreme", "memory", "exploration"] = "easy"
    """the Procgen level distribution used with a plain game name"""
    total_timesteps: PositiveInt = 25_000_000
    """total environment steps of the experiment (only whole phases of N_pi iterations are run)"""
    learning_rate: PositiveFloat = 5e-4
    """the learning rate of the Adam optimizer (both phases, both networks)"""
    num_envs: PositiveInt = 64
    """the number of parallel environments"""
    num_steps: PositiveInt = 256
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """if toggled, the learning rate decays linearly to 0 over the run"""
    gamma: UnitFloat = 0.999
    """the discount factor gamma"""
    gae_lambda: UnitFloat = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: PositiveInt = 8
    """the number of minibatches per policy-phase epoch"""
    adv_norm_fullbatch: bool = True
    """if toggled, normalize advantages over the whole batch (as the PPG code does); otherwise per minibatch"""
    norm_reward: bool = True
    """if toggled, divide rewards by the running std of the discounted return and clip them to [-10, 10]
    (the PPG code's reward normalization); episode statistics always report the raw game reward"""
    clip_coef: PositiveFloat = 0.2
    """the surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """if toggled, clip the policy-phase value loss as in the PPO paper's reference code"""
    ent_coef: NonNegativeFloat = 0.01
    """the coefficient of the entropy bonus (beta_S in the paper)"""
    vf_coef: NonNegativeFloat = 0.5
    """the coefficient of the policy-phase value loss"""
    max_grad_norm: PositiveFloat = 0.5
    """the maximum norm for gradient clipping"""
    target_kl: Optional[NonNegativeFloat] = None
    """if set, stop the policy-phase epochs of an iteration early once the approximate KL exceeds it"""

    # PPG specific arguments
    n_iteration: PositiveInt = 32
    """N_pi: the number of PPO iterations (rollout + update) in each policy phase"""
    e_policy: PositiveInt = 1
    """E_pi: the number of epochs of policy (clipped surrogate + entropy) updates per iteration"""
    v_value: NonNegativeInt = 1
    """E_V: the number of epochs of value-network updates per iteration"""
    e_auxiliary: PositiveInt = 6
    """E_aux: the number of epochs over the auxiliary buffer in each auxiliary phase"""
    beta_clone: NonNegativeFloat = 1.0
    """beta_clone: the weight of the behavior-cloning KL term in the auxiliary phase's joint loss"""
    num_aux_rollouts: PositiveInt = 4
    """the number of whole rollouts (num_steps observations of one env) in each auxiliary minibatch"""
    n_aux_grad_accum: PositiveInt = 1
    """the number of chunks each auxiliary minibatch is split into, accumulating their gradients before one
    optimizer step (less memory, same update)"""
    amp: bool = False
    """if toggled, run the networks' forward passes under bf16 autocast (pays on CUDA GPUs; slow on most CPUs)"""
    env_threads: NonNegativeInt = 0
    """envpool's worker threads; 0: the cores free at start"""
    torch_threads: NonNegativeInt = 0
    """torch threads on the CPU; 0: as many as other work leaves cores free, looked at again as the run goes
    (the IMPALA CNN gains from a second core); a number for bit-identical reruns"""

    def run_env_id(self) -> str:
        """Runs are filed under the envpool id (runs/StarpilotEasy-v0__...), so `--resume auto` finds them."""
        return procgen_id(self)


def derive_sizes(args: Args) -> tuple[int, int, int]:
    """(batch_size, minibatch_size, num_iterations of whole phases) from the flags, checked (ranges: in their types)."""
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        fail(f"the batch (--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}) "
             f"does not divide into --num-minibatches {args.num_minibatches}")
    aux_rollouts = args.n_iteration * args.num_envs
    if aux_rollouts % args.num_aux_rollouts != 0:
        messages.warn(f"the auxiliary buffer's {aux_rollouts} rollouts (--n-iteration {args.n_iteration} x --num-envs "
                     f"{args.num_envs}) are no multiple of --num-aux-rollouts {args.num_aux_rollouts}: the last "
                     f"auxiliary minibatch of each epoch holds {aux_rollouts % args.num_aux_rollouts}")
    if args.num_aux_rollouts % args.n_aux_grad_accum != 0:
        fail(f"--num-aux-rollouts {args.num_aux_rollouts} does not divide into "
             f"--n-aux-grad-accum {args.n_aux_grad_accum}")
    num_phases = whole_iterations(args.total_timesteps, batch_size * args.n_iteration,
                                          f"one phase (--n-iteration {args.n_iteration} batches)")
    return batch_size, batch_size // args.num_minibatches, num_phases * args.n_iteration


def procgen_id(args: Args) -> str:
    """The envpool id that --env-id and --distribution-mode name (starpilot, easy: StarpilotEasy-v0)."""
    return procgen_envs.resolve_env_id(args.env_id, args.distribution_mode, procgen_envs.load_envpool().list_all_envs())


def layer_init_normed(layer: nn.Module, scale: float = 1.0) -> nn.Module:
    """PPG code's init: each output unit's weight vector rescaled to norm `scale`, bias zero."""
    with torch.no_grad():
        dims = tuple(range(1, layer.weight.dim()))
        layer.weight.mul_(scale / torch.linalg.vector_norm(layer.weight, dim=dims, keepdim=True))
        layer.bias.zero_()
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels: int, scale: float):
        super().__init__()
        self.conv0 = layer_init_normed(nn.Conv2d(channels, channels, 3, padding=1), np.sqrt(scale))
        self.conv1 = layer_init_normed(nn.Conv2d(channels, channels, 3, padding=1), np.sqrt(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """conv 3x3, max-pool 3x3 stride 2, two residual blocks (Espeholt et al. 2018, IMPALA)."""

    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = layer_init_normed(nn.Conv2d(in_channels, out_channels, 3, padding=1))
        self.res0 = ResidualBlock(out_channels, scale / np.sqrt(2))
        self.res1 = ResidualBlock(out_channels, scale / np.sqrt(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res1(self.res0(x))


class ImpalaEncoder(nn.Module):
    """IMPALA CNN with channels (16, 32, 32) and a 256-unit dense layer, as in the Procgen and PPG papers."""

    def __init__(self, obs_shape: tuple, channels: tuple = (16, 32, 32), hidden: int = 256):
        super().__init__()
        c, h, w = obs_shape  # envpool's Procgen observations are channel-first: (3, 64, 64) uint8
        seqs = []
        for out in channels:
            seqs.append(ConvSequence(c, out, scale=1 / np.sqrt(len(channels))))
            c, h, w = out, (h + 1) // 2, (w + 1) // 2
        self.convs = nn.Sequential(*seqs)
        self.dense = layer_init_normed(nn.Linear(c * h * w, hidden), scale=1.4)
        # Conv weights and frames in the channels-last layout: the same values, but the convolutions ran 1.66x
        # faster on a CPU (64-frame forward passes and 512-frame updates alike); float rounding differs.
        self.convs.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # uint8 frames -> floats in [0, 1], channels last (the conversion and division keep the layout); flatten(1)
        # reads the logical (channel, height, width) order, so the dense layer sees what it did before
        x = self.convs(x.contiguous(memory_format=torch.channels_last).float() / 255.0)
        return torch.relu(self.dense(torch.relu(x.flatten(1))))


class PolicyNetwork(nn.Module):
    """pi_theta with the auxiliary value head V_theta_pi that the auxiliary phase trains (Cobbe et al. 2021)."""

    def __init__(self, obs_shape: tuple, n_actions: int):
        super().__init__()
        self.encoder = ImpalaEncoder(obs_shape)
        self.actor = layer_init_normed(nn.Linear(256, n_actions), scale=0.1)
        self.aux_critic = layer_init_normed(nn.Linear(256, 1), scale=0.1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, auxiliary value)"""
        hidden = self.encoder(x)
        return self.actor(hidden), self.aux_critic(hidden).flatten()


class ValueNetwork(nn.Module):
    """V_theta_V: a separate IMPALA CNN, so value training never disturbs the policy's features."""

    def __init__(self, obs_shape: tuple):
        super().__init__()
        self.encoder = ImpalaEncoder(obs_shape)
        self.critic = layer_init_normed(nn.Linear(256, 1), scale=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.encoder(x)).flatten()


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminations: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
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


class AuxBuffer:
    """Every observation of one policy phase, with its value target and, before distillation, pi_old's logits.

    Stored rollout-major: row r = iteration * num_envs + env holds that env's num_steps consecutive observations from
    that iteration, so an auxiliary minibatch of whole rollouts is one index on dim 0. Observations stay uint8 (3x64x64
    bytes each); the size follows from the flags (on the meta device it has shapes but no memory: the memory check)."""

    def __init__(self, n_iteration: int, num_envs: int, num_steps: int, obs_shape: tuple, n_actions: int,
                 device="cpu"):
        self.num_envs, self.n_iteration = num_envs, n_iteration
        self.stored = 0  # iterations of the current policy phase stored so far
        self.distilling = False  # inside the auxiliary phase: every row is stored and pi_old's logits are recorded
        self.phases = 0  # auxiliary phases this process has run
        rows = n_iteration * num_envs
        self.obs = torch.empty((rows, num_steps) + tuple(obs_shape), dtype=torch.uint8, device=device)
        self.returns = torch.empty((rows, num_steps), device=device)
        self.valid = torch.empty((rows, num_steps), dtype=torch.bool, device=device)
        # zeros: a checkpoint holds no stray memory
        self.old_logits = torch.zeros((rows, num_steps, n_actions), device=device)

    @property
    def num_rollouts(self) -> int:
        return self.obs.shape[0]

    def nbytes(self) -> int:
        return speed.nbytes((self.obs, self.returns, self.valid, self.old_logits))

    def store(self, iteration: int, obs: torch.Tensor, returns: torch.Tensor, valid: torch.Tensor) -> None:
        """Store one policy iteration's rollout; inputs are step-major (num_steps, num_envs, ...)."""
        rows = slice(iteration * self.num_envs, (iteration + 1) * self.num_envs)
        self.obs[rows] = obs.transpose(0, 1).cpu()  # (num_envs, num_steps, *obs_shape)
        self.returns[rows] = returns.transpose(0, 1).cpu()
        self.valid[rows] = valid.transpose(0, 1).cpu()
        self.stored = iteration + 1

    def set_old_logits(self, rollouts: np.ndarray, logits: torch.Tensor) -> None:
        """Write logits computed on `self.batch(rollouts)`'s flat observations back beside them."""
        self.old_logits[rollouts] = logits.reshape((len(rollouts), -1, logits.shape[-1])).cpu()

    def state_dict(self) -> Optional[dict]:
        """For a checkpoint. Inside a policy phase: the rollouts stored so far (copies: torch.save would write a
        slice's whole underlying storage). Inside the auxiliary phase: the whole buffer with pi_old's logits (some
        not yet recorded if it stopped while recording them). None after an auxiliary phase, which spent the buffer."""
        if self.distilling:
            return {"obs": self.obs, "returns": self.returns, "valid": self.valid, "old_logits": self.old_logits}
        if self.stored == self.n_iteration:
            return None
        rows = self.stored * self.num_envs
        return {"obs": self.obs[:rows].clone(), "returns": self.returns[:rows].clone(),
                "valid": self.valid[:rows].clone()}

    def load_state_dict(self, state: dict) -> None:
        rows = state["obs"].shape[0]
        self.obs[:rows], self.returns[:rows], self.valid[:rows] = state["obs"], state["returns"], state["valid"]
        self.stored = rows // self.num_envs
        self.distilling = "old_logits" in state
        if self.distilling:
            self.old_logits.copy_(state["old_logits"])

    def batch(self, rollouts: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Whole rollouts, flattened to (len(rollouts) * num_steps, ...): obs, returns, old logits, valid."""
        tensors = (self.obs, self.returns, self.old_logits, self.valid)
        return tuple(t[rollouts].flatten(0, 1).to(device) for t in tensors)


@dataclass
class AuxPosition:
    """Where an auxiliary phase is: the pass that records pi_old (epoch -1), then E_aux distillation epochs, each over
    minibatches of `size` whole rollouts in a new shuffled order. A checkpoint taken inside the phase saves it (as
    "aux_phase"); the resumed run passes it back and goes on at the next minibatch, bit for bit."""

    order: np.ndarray  # the buffer's rollouts in this epoch's order
    size: int  # rollouts per minibatch (--num-aux-rollouts)
    epochs: int  # E_aux
    epoch: int = -1  # -1 while recording pi_old
    start: int = 0  # the next minibatch's first index into `order`
    losses: list = field(default_factory=list)  # (kl_loss, aux_value_loss, value_loss) of each chunk of the last epoch

    def minibatches(self, epoch: int) -> Iterator[np.ndarray]:
        """The minibatches (rollout indices) of `epoch` still to run: all of a new epoch (a distillation epoch shuffles
        the order first, with np.random as the PPG code), the rest of the one a resumed run stopped in."""
        if epoch < self.epoch:
            return
        if epoch > self.epoch:
            self.epoch, self.start = epoch, 0
        if epoch >= 0 and self.start == 0:
            np.random.shuffle(self.order)
        while self.start < len(self.order):
            self.start += self.size
            yield self.order[self.start - self.size : self.start]

    def part(self) -> str:
        return "recording pi_old" if self.epoch == -1 else f"epoch {self.epoch + 1}/{self.epochs}"

    def during(self) -> str:
        """How far the phase has come, for the progress line."""
        return f"auxiliary phase: {self.part()}, {100 * min(self.start, len(self.order)) // len(self.order)}%"

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "start": self.start, "order": torch.from_numpy(self.order.copy()),
                "losses": torch.stack(self.losses).cpu() if self.losses else torch.zeros(0, 3)}

    @classmethod
    def resumed(cls, saved: dict, size: int, epochs: int) -> "AuxPosition":
        position = cls(saved["order"].numpy().copy(), size, epochs, saved["epoch"], saved["start"],
                       list(saved["losses"]))
        messages.say(f"continuing the auxiliary phase: {position.part()}, from rollout {position.start}/"
                     f"{len(position.order)}")
        return position


def masked_mean(x: torch.Tensor, mask: torch.Tensor, denominator: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean of x over mask (the reset steps of NEXT_STEP autoreset are not transitions); `denominator`
    overrides the count, so chunks of one minibatch sum to the minibatch's mean."""
    count = mask.sum() if denominator is None else denominator
    return (x * mask).sum() / count.clamp(min=1)


def policy_objective(logits: torch.Tensor, mb_actions: torch.Tensor, mb_logprobs: torch.Tensor,
                     mb_advantages: torch.Tensor, mb_mask: torch.Tensor, args: Args) -> tuple[torch.Tensor, ...]:
    """The policy phase's policy objective on one padded minibatch, every mean over its real transitions (mb_mask):
    (pg_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac); the network minimizes pg_loss - ent_coef * entropy."""
    # No argument validation (here and in the rollout): it would stop a diverged run with a traceback before the
    # once-per-iteration non-finite check can name the step and the quantity.
    probs = Categorical(logits=logits, validate_args=False)
    newlogprob, entropy = probs.log_prob(mb_actions), probs.entropy()
    logratio = newlogprob - mb_logprobs
    ratio = logratio.exp()
    with torch.no_grad():
        # KL estimators k1 and k3, http://joschu.net/blog/kl-approx.html
        old_approx_kl = masked_mean(-logratio, mb_mask)
        approx_kl = masked_mean((ratio - 1) - logratio, mb_mask)
        clipfrac = masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), mb_mask)
    if not args.adv_norm_fullbatch:
        # mean and (unbiased, as torch.std) standard deviation over the real transitions
        adv_mean = masked_mean(mb_advantages, mb_mask)
        adv_var = ((mb_advantages - adv_mean) ** 2 * mb_mask).sum() / (mb_mask.sum() - 1).clamp(min=1)
        mb_advantages = (mb_advantages - adv_mean) / (adv_var.sqrt() + 1e-8)
    # clipped surrogate objective, Eq. (7), Schulman et al. 2017 (L^clip in PPG's Eq. 1)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mb_mask)
    return pg_loss, masked_mean(entropy, mb_mask), old_approx_kl, approx_kl, clipfrac


def value_objective(newvalue: torch.Tensor, mb_returns: torch.Tensor, mb_values: torch.Tensor, mb_mask: torch.Tensor,
                    args: Args) -> torch.Tensor:
    """The policy phase's value loss on one padded minibatch (clipped with --clip-vloss, as the PPO paper's code)."""
    if args.clip_vloss:
        v_loss_unclipped = (newvalue - mb_returns) ** 2
        v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
        return 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - mb_returns) ** 2), mb_mask)
    return 0.5 * masked_mean((newvalue - mb_returns) ** 2, mb_mask)  # L^value, Eq. (3), Cobbe et al. 2021


def aux_losses(logits: torch.Tensor, aux_values: torch.Tensor, values: torch.Tensor, old_logits: torch.Tensor,
               returns: torch.Tensor, mask: torch.Tensor, denominator: Optional[torch.Tensor] = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Auxiliary-phase losses over flat observations: (kl_loss, aux_value_loss, value_loss).

    L^joint = aux_value_loss + beta_clone * kl_loss, Eq. (2), Cobbe et al. 2021, trains the policy network:
    KL[pi_old(.|s) || pi_theta(.|s)] keeps the policy while its auxiliary head fits the value targets.
    L^value = value_loss, Eq. (3), trains the value network again on the same targets.
    """
    old_logp = torch.log_softmax(old_logits, dim=-1)
    new_logp = torch.log_softmax(logits, dim=-1)
    kl = (old_logp.exp() * (old_logp - new_logp)).sum(-1)
    kl_loss = masked_mean(kl, mask, denominator)
    aux_value_loss = 0.5 * masked_mean((aux_values - returns) ** 2, mask, denominator)
    value_loss = 0.5 * masked_mean((values - returns) ** 2, mask, denominator)
    return kl_loss, aux_value_loss, value_loss


def auxiliary_phase(aux: AuxBuffer, position: AuxPosition, policy: PolicyNetwork, optimizer: optim.Optimizer,
                    aux_update: Callable, args: Args, device: torch.device, safe_point: Callable[[], None]) -> dict:
    """AUXILIARY PHASE (Algorithm 1), after a policy phase's last iteration: record pi_old on every observation of the
    buffer, then E_aux epochs of L^joint (policy network) and L^value (value network) over minibatches of whole
    rollouts. It takes hours on a CPU, so it goes on from `position` (a resumed run's) and calls safe_point() after
    each minibatch (on a signal: a checkpoint, and exit). Returns the mean losses of the last epoch's minibatches."""
    aux.distilling = True
    with torch.no_grad():  # pi_old(.|s) for every s in the buffer
        for rollouts in position.minibatches(-1):
            m_obs = aux.batch(rollouts, device)[0]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp):
                old_logits = policy(m_obs)[0]
            aux.set_old_logits(rollouts, old_logits.float())
            safe_point()

    chunk = args.num_aux_rollouts // args.n_aux_grad_accum  # rollouts per gradient-accumulation chunk
    for epoch in range(args.e_auxiliary):
        for mb_rollouts in position.minibatches(epoch):
            mb_count = aux.valid[mb_rollouts].sum().to(device)
            optimizer.zero_grad()
            # (the last minibatch is smaller when the rollouts are no multiple of --num-aux-rollouts)
            for c in range(0, len(mb_rollouts), chunk):
                last_chunk = c + chunk >= len(mb_rollouts)  # takes the optimizer step
                losses = aux_update(*aux.batch(mb_rollouts[c : c + chunk], device), mb_count, last_chunk)
                if epoch == args.e_auxiliary - 1:
                    position.losses.append(torch.stack(losses))
            safe_point()
    aux.distilling, aux.phases = False, aux.phases + 1

    # a minibatch's loss is the sum of its chunks'; the means come to the host once per phase
    num_minibatches = -(-aux.num_rollouts // args.num_aux_rollouts)
    rows = [row.to(device) for row in position.losses]  # a resumed phase's first rows: from the checkpoint
    kl_mean, aux_value_mean, value_mean = (torch.stack(rows).sum(0) / num_minibatches).tolist()
    aux_logged = {"losses/aux_kl_loss": kl_mean, "losses/aux_pi_value_loss": aux_value_mean,
                  "losses/aux_value_loss": value_mean}
    return aux_logged


def evaluate(policy: PolicyNetwork, args: Args, run_name: str, device: torch.device) -> list[float]:
    """Run the stochastic policy for args.eval_episodes full episodes on a fresh environment (new levels).
    Sampling, not argmax: Procgen policies trained with an entropy bonus can stall under a greedy policy."""
    envs = procgen_envs.make_procgen_envs(procgen_id(args), 1, args.seed + 10_000)
    return evaluation.evaluate_episodes(envs, lambda x: Categorical(logits=policy(x)[0]).sample(), args.eval_episodes,
                                          None, device, dtype=None)


def make_policy(args: Args, saved: dict) -> PolicyNetwork:
    """An untrained policy for --eval-only, which loads the saved weights into it. A checkpoint brings its
    --distribution-mode; args.env_id becomes the envpool id, so the eval line names the distribution it ran on."""
    args.distribution_mode = saved["args"]["distribution_mode"] if "args" in saved else args.distribution_mode
    args.env_id = procgen_id(args)
    probe = procgen_envs.make_procgen_envs(args.env_id, 1, args.seed)
    policy = PolicyNetwork(probe.single_observation_space.shape, int(probe.single_action_space.n))
    probe.close()
    return policy


def rollout_storage(num_steps: int, num_envs: int, device) -> tuple[torch.Tensor, ...]:
    """obs (uint8 frames until they enter a network), actions, logprobs, rewards, dones, values and valid (False at
    envpool's reset steps, the step after an episode end: not a transition), each (num_steps, num_envs, ...)."""
    obs = torch.zeros((num_steps, num_envs, 3, 64, 64), dtype=torch.uint8, device=device)
    actions = torch.zeros((num_steps, num_envs), dtype=torch.long, device=device)
    logprobs, rewards, dones, values = (torch.zeros((num_steps, num_envs), device=device) for _ in range(4))
    valid = torch.zeros((num_steps, num_envs), dtype=torch.bool, device=device)
    return obs, actions, logprobs, rewards, dones, values, valid


def check_memory(args: Args) -> None:
    """Fail in one line if the rollout storage or the auxiliary buffer won't fit (on the meta device: no memory)."""
    speed.check_memory(f"--num-steps {args.num_steps} x --num-envs {args.num_envs}", speed.nbytes(rollout_storage(
        args.num_steps, args.num_envs, "meta")), "a rollout storage", cuda=args.cuda)
    speed.check_memory(f"--n-iteration {args.n_iteration} x --num-envs {args.num_envs} x --num-steps "
                       f"{args.num_steps}", AuxBuffer(args.n_iteration, args.num_envs, args.num_steps, (3, 64, 64), 15,
                                                      "meta").nbytes(), "an auxiliary buffer")


if __name__ == "__main__":
    args, checkpoint = runtime.parse_args(Args)
    if args.eval_only is not None:
        runtime.eval_only(args, "policy", lambda saved: make_policy(args, saved), evaluate)
    env_id = procgen_id(args)  # before any other check, as a missing Qt runtime fails here
    batch_size, minibatch_size, num_iterations = derive_sizes(args)
    check_memory(args)
    run = runtime.start(args, checkpoint, num_iterations, batch_size)
    device, writer = run.device, run.writer

    # env setup: actions in and observations, rewards (normalized: --norm-reward) and dones out as device tensors
    envs, reward_normalizer = procgen_envs.training_envs(env_id, args, run)
    obs_shape, n_actions = envs.single_observation_space.shape, int(envs.single_action_space.n)

    policy = PolicyNetwork(obs_shape, n_actions).to(device)
    value_net = ValueNetwork(obs_shape).to(device)
    params = list(policy.parameters()) + list(value_net.parameters())
    optimizer = speed.adam(params, args.learning_rate, device, eps=1e-8)  # one Adam over both networks (PPG code)

    obs, actions, logprobs, rewards, dones, values, valid = rollout_storage(args.num_steps, args.num_envs, device)
    staging = speed.PinnedStaging(device)  # minibatch indices reach the device without a synchronisation
    aux = AuxBuffer(args.n_iteration, args.num_envs, args.num_steps, obs_shape, n_actions)

    # Checkpoints are taken between iterations, and on a signal inside the auxiliary phase (AuxPosition). One taken
    # inside a policy phase holds the rollouts stored so far, so the auxiliary phase distills the same buffer as an
    # uninterrupted run. The learning-rate schedule is a function of the iteration, so the iteration is its state.
    state = {"policy": policy, "value": value_net, "optimizer": optimizer, "reward_normalizer": reward_normalizer,
             "aux": aux}
    next_obs, start_iteration, global_step = run.restore(envs, state, seed=None)
    next_obs = torch.as_tensor(next_obs, device=device)
    prev_done = torch.zeros(args.num_envs, dtype=torch.bool, device=device)  # the previous step ended an episode

    # --amp: the forward passes under bf16 autocast (else a no-op); distributions and losses in float32 (.float())
    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.amp)

    def policy_step(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Act on one step's observations: (sampled action, its log-probability, V_theta_V(s))."""
        with torch.no_grad():
            with autocast():
                logits, _ = policy(obs)
                value = value_net(obs)
            probs = Categorical(logits=logits.float(), validate_args=False)
            action = probs.sample()
        return action, probs.log_prob(action), value.float()

    # never compiled: a compiled Adam step would recompile between phases (the aux head has a gradient in one only)
    @torch.compiler.disable(reason="an optimizer step, kept out of dynamo")
    def clipped_step() -> None:
        nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        optimizer.step()

    def update(mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values, mb_mask, train_policy: bool,
               train_value: bool) -> tuple[torch.Tensor, ...]:
        """One policy-phase gradient step on one minibatch (padded to minibatch_size, so every call has one shape;
        mb_mask marks its real transitions): the policy objective while train_policy, the value one while train_value.
        Returns (pg_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac, v_loss), detached (0 if not trained)."""
        optimizer.zero_grad()
        zero = torch.zeros((), device=mb_obs.device)
        loss = pg_loss = entropy_loss = old_approx_kl = approx_kl = clipfrac = v_loss = zero
        if train_policy:
            with autocast():
                logits, _ = policy(mb_obs)
            pg_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = policy_objective(
                logits.float(), mb_actions, mb_logprobs, mb_advantages, mb_mask, args)
            loss = loss + pg_loss - args.ent_coef * entropy_loss
        if train_value:
            with autocast():
                newvalue = value_net(mb_obs)
            v_loss = value_objective(newvalue.float(), mb_returns, mb_values, mb_mask, args)
            loss = loss + args.vf_coef * v_loss
        loss.backward()
        clipped_step()
        return pg_loss.detach(), entropy_loss.detach(), old_approx_kl, approx_kl, clipfrac, v_loss.detach()

    def aux_update(m_obs, m_returns, m_old_logits, m_valid, mb_count, step: bool) -> tuple[torch.Tensor, ...]:
        """One chunk of an auxiliary minibatch: the distillation losses' gradients, added to those of the minibatch's
        earlier chunks (each chunk's sums are divided by the whole minibatch's count, mb_count, so the accumulated
        gradient is the minibatch mean's); with `step`, the optimizer step. Returns the losses, detached."""
        with autocast():
            logits, aux_values = policy(m_obs)
            new_values = value_net(m_obs)
        kl_loss, aux_value_loss, value_loss = aux_losses(
            logits.float(), aux_values.float(), new_values.float(), m_old_logits, m_returns, m_valid, mb_count
        )
        joint_loss = aux_value_loss + args.beta_clone * kl_loss  # L^joint, Eq. (2), Cobbe et al. 2021
        (joint_loss + value_loss).backward()
        if step:
            clipped_step()
        return kl_loss.detach(), aux_value_loss.detach(), value_loss.detach()

    # --compile / --cudagraphs wrap exactly these three functions; without the flags they run as written. (With
    # --e-policy != --v-value, or --n-aux-grad-accum > 1, one is compiled once more for its other bool arguments.)
    policy_step, update = speed.speed_up(policy_step, args), speed.speed_up(update, args)
    aux_update = speed.speed_up(aux_update, args)

    def distill(iteration: int, position: AuxPosition) -> None:
        """The auxiliary phase ending `iteration`, from `position` (a signal's checkpoint saves it); logs its losses."""
        aux_logged = auxiliary_phase(aux, position, policy, optimizer, aux_update, args, device, lambda: run.safe_point(
            iteration, global_step, next_obs, lambda: {"aux_phase": position.state_dict()}, position.during()))
        for key, value in aux_logged.items():
            writer.add_scalar(key, value, global_step)
        run.check_finite(aux_logged, global_step, f"iteration {iteration}")
        # The first auxiliary phase of this process is a warm-up too (it compiles aux_update): the SPS clock
        # restarts after it, so later SPS values include the auxiliary phases after the first one only.
        run.start_clock(global_step, restart=aux.phases == 1)

    if run.resumed("aux_phase") is not None:  # the checkpoint was taken inside this iteration's auxiliary phase
        distill(start_iteration - 1, AuxPosition.resumed(run.resumed("aux_phase"), args.num_aux_rollouts,
                                                         args.e_auxiliary))
        run.end_of_iteration(start_iteration - 1, global_step, next_obs)

    for iteration in range(start_iteration, num_iterations + 1):
        # POLICY PHASE: N_pi iterations of PPO with separate policy and value networks (Algorithm 1)
        phase_iteration = (iteration - 1) % args.n_iteration
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"].fill_(frac * args.learning_rate)

        # rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            valid[step] = ~prev_done
            action, logprob, value = policy_step(next_obs)
            values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, term, trunc, infos = envs.step(action)
            prev_done = term | trunc
            rewards[step] = reward
            dones[step] = prev_done
            run.log_episodes(infos, global_step)  # charts/episodic_return and charts/episodic_length

        # advantages: every episode end counts as terminal (Procgen's time limit leaves no final obs to bootstrap
        # from, see procgen_envs.make_procgen_envs), so terminations = dones. The reset step that follows an end gets
        # a (meaningless) advantage of its own, but dones[t] cuts the recursion before it can leak into the finished
        # episode, and `valid` keeps it out of every loss.
        with torch.no_grad():
            with autocast():
                next_value = value_net(next_obs)
            next_value = next_value.float().reshape(1, -1)
            next_values = torch.cat([values[1:], next_value], dim=0)
            advantages, returns = compute_gae(rewards, values, next_values, dones, dones, args.gamma, args.gae_lambda)

        # flatten the batch: (num_steps * num_envs, ...)
        b_obs = obs.reshape((-1,) + obs_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)
        b_inds = np.flatnonzero(valid.reshape(-1).cpu().numpy())  # the real transitions, on the host
        real_inds = staging.to_device("real", b_inds)
        if args.adv_norm_fullbatch:  # the PPG code normalizes once over the whole batch
            real = b_advantages[real_inds]
            b_advantages = (b_advantages - real.mean()) / (real.std() + 1e-8)

        # optimize: E_pi epochs of the policy objective, E_V epochs of the value objective; one shared
        # minibatch loop, each network's loss only while its epoch count lasts. Reset steps are dropped,
        # so the minibatches split the real transitions into num_minibatches near-equal parts; each is padded
        # to minibatch_size with a masked-out index, so the update always sees one shape.
        positions = torch.arange(minibatch_size, device=device)
        clipfracs = []
        pg_loss = v_loss = entropy_loss = old_approx_kl = approx_kl = torch.tensor(float("nan"))
        for epoch in range(max(args.e_policy, args.v_value)):
            train_policy, train_value = epoch < args.e_policy, epoch < args.v_value
            np.random.shuffle(b_inds)
            parts = np.array_split(b_inds, args.num_minibatches)
            padded = np.zeros((args.num_minibatches, minibatch_size), dtype=b_inds.dtype)
            for k, part in enumerate(parts):
                padded[k, : len(part)] = part
            epoch_inds = staging.to_device("minibatches", padded)  # one copy per epoch, a row per minibatch
            for k, part in enumerate(parts):
                mb_mask, mb_inds = positions < len(part), epoch_inds[k]
                out = update(
                    b_obs[mb_inds], b_actions[mb_inds], b_logprobs[mb_inds], b_advantages[mb_inds],
                    b_returns[mb_inds], b_values[mb_inds], mb_mask, train_policy, train_value,
                )  # fmt: skip
                if train_policy:
                    pg_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = out[:5]
                    clipfracs.append(clipfrac.clone())  # kept: a replayed update (--cudagraphs) overwrites its outputs
                if train_value:
                    v_loss = out[5]

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = b_values[real_inds].cpu().numpy(), b_returns[real_inds].cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # the losses come to the host once per iteration, for logging and for the non-finite check
        losses = {
            "losses/value_loss": v_loss.item(),
            "losses/policy_loss": pg_loss.item(),
            "losses/entropy": entropy_loss.item(),
            "losses/old_approx_kl": old_approx_kl.item(),
            "losses/approx_kl": approx_kl.item(),
        }
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"].item(), global_step)
        for key, value in losses.items():
            writer.add_scalar(key, value, global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        if iteration == start_iteration:
            # SPS leaves out the first iteration: a warm-up that holds --compile's compilation of the policy step
            # and the update (or CUDA graph recording), which would otherwise dominate short runs; it logs no SPS.
            run.start_clock(global_step, restart=True)
        run.log_sps(global_step)
        # Checked before any save, so a checkpoint never holds NaN or inf. (The explained variance is left
        # out: it is legitimately NaN when the returns have zero variance.)
        run.check_finite(losses, global_step, f"iteration {iteration}")

        # keep the rollout for the auxiliary phase, with the value targets of this iteration
        aux.store(phase_iteration, obs, returns, valid)

        if phase_iteration == args.n_iteration - 1:
            distill(iteration, AuxPosition(np.arange(aux.num_rollouts), args.num_aux_rollouts, args.e_auxiliary))

        # the safe point between iterations (the phase's last one after its auxiliary phase): progress; a checkpoint
        # every --checkpoint-frequency iterations or on SIGTERM
        run.end_of_iteration(iteration, global_step, next_obs)

    run.finish(global_step, next_obs, model={"policy": policy, "value": value_net},
               evaluate=lambda: evaluate(policy, args, run.name, device))
