# docs: docs/rl-algorithms/ppo-jax.md
"""PPO with the Nature CNN on Atari in JAX, the games stepped inside the compiled rollout (default
BreakoutNoFrameskip-v4).

Proximal Policy Optimization, Schulman et al. 2017, https://arxiv.org/abs/1707.06347, with the algorithm, network,
preprocessing and hyperparameters of ppo_atari.py (Mnih et al. 2015; Huang et al. 2022,
https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/). What differs is the machine: envpool's
XLA interface puts the emulators' step into the XLA program itself, so a whole rollout (policy, sampling, env steps,
episode statistics) and a whole update (every epoch and minibatch, Adam included) each compile to one program that
runs without a round trip to Python. Where XLA's loops are slow (its CPU convolutions inside a loop), the same
functions run as a Python loop of jitted steps instead (--loops).

Install (CPU; for a GPU, then `pip install -U "jax[cuda12]"`):
    pip install -r requirements/requirements-jax.txt
Run:
    python cleanrl/ppo_atari_envpool_xla_jax_scan.py --env-id BreakoutNoFrameskip-v4
    # checkpoints every 50 updates; the same command continues the run after a crash (docs/saving-resuming.md)
    python cleanrl/ppo_atari_envpool_xla_jax_scan.py --save-model --checkpoint-frequency 50 --resume auto
    python cleanrl/ppo_atari_envpool_xla_jax_scan.py --help
"""

from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import numpy as np

import atari_envs
import evaluation
import runtime
import speed
from checkpoints import PytreeState
from flags import (
    NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, UnitFloat, whole_iterations, with_run_flags,
)
from messages import fail, say

try:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
except ImportError as e:
    fail(f"this script needs JAX, flax and optax ({e.name} is missing): "
         "pip install -r requirements/requirements-jax.txt")


@with_run_flags  # then the run flags: --seed, --save-model, --resume, ... (flags.RunArgs)
@dataclass
class Args:
    loops: Literal["auto", "scan", "python"] = "auto"
    """`scan`: the rollout's steps and the update's minibatches are XLA loops (lax.scan), one program each;
    `python`: Python loops of jitted steps; `auto`: scan on a GPU or TPU, python on a CPU (where XLA's convolutions
    run several times slower inside a loop)"""
    eval_max_frames: Optional[PositiveInt] = None
    """if set, cut each evaluation game after this many emulator frames (None: 108000)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the Atari game: `<Game>NoFrameskip-v4` (no sticky actions), `ALE/<Game>-v5` (sticky actions) or envpool's
    `<Game>-v5` (no sticky actions)"""
    env_threads: NonNegativeInt = 0
    """envpool's worker threads; 0: the cores free at start"""
    total_timesteps: PositiveInt = 10000000
    """total environment steps of the experiment (agent steps; each is 4 emulator frames)"""
    learning_rate: PositiveFloat = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: PositiveInt = 8
    """the number of parallel environments"""
    num_steps: PositiveInt = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """if toggled, the learning rate decays linearly to 0 over the run"""
    gamma: UnitFloat = 0.99
    """the discount factor gamma"""
    gae_lambda: UnitFloat = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: PositiveInt = 4
    """the number of minibatches per update epoch"""
    update_epochs: PositiveInt = 4
    """the number of epochs over the rollout per update"""
    norm_adv: bool = True
    """if toggled, normalize advantages per minibatch"""
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
    """if set, skip the remaining update epochs once an epoch's last approximate KL exceeds it"""


def derive_sizes(args: Args) -> tuple[int, int, int]:
    """Batch sizes and iteration count follow from the flags; they are checked here, never set by hand."""
    if args.compile or args.cudagraphs:
        fail("--compile and --cudagraphs are torch flags; this script is always compiled, by XLA (see --loops)")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        fail(f"the batch (--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}) "
             f"does not divide into --num-minibatches {args.num_minibatches}")
    if args.norm_adv and batch_size // args.num_minibatches < 2:
        fail(f"minibatches of one transition (--num-minibatches {args.num_minibatches}): --norm-adv divides by their "
             "standard deviation, which needs 2; use fewer --num-minibatches or --no-norm-adv")
    num_iterations = whole_iterations(args.total_timesteps, batch_size, "one batch")
    return batch_size, batch_size // args.num_minibatches, num_iterations


class Agent(nn.Module):
    """Nature CNN (Mnih et al. 2015) shared by a policy head and a value head; the layers and initialisation of
    ppo_atari.py's Agent (orthogonal, gain sqrt 2; the policy head 0.01, the value head 1; zero biases)."""

    n_actions: int

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        # uint8 frames (batch, 4, 84, 84) in [0, 255] -> floats in [0, 1], channels last (XLA's convolution layout)
        x = jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        relu_init = dict(kernel_init=nn.initializers.orthogonal(np.sqrt(2)), bias_init=nn.initializers.zeros)
        x = nn.relu(nn.Conv(32, (8, 8), strides=(4, 4), padding="VALID", **relu_init)(x))
        x = nn.relu(nn.Conv(64, (4, 4), strides=(2, 2), padding="VALID", **relu_init)(x))
        x = nn.relu(nn.Conv(64, (3, 3), strides=(1, 1), padding="VALID", **relu_init)(x))
        # (batch, 7, 7, 64) -> (batch, 64 * 7 * 7), in the order torch's Flatten gives its (64, 7, 7) maps
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape((x.shape[0], -1))
        hidden = nn.relu(nn.Dense(512, **relu_init)(x))
        logits = nn.Dense(self.n_actions, kernel_init=nn.initializers.orthogonal(0.01),
                          bias_init=nn.initializers.zeros, name="actor")(hidden)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), bias_init=nn.initializers.zeros,
                         name="critic")(hidden)
        return logits, value[:, 0]


def sample_action(logits: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A categorical sample and its log-probability."""
    action = jax.random.categorical(key, logits)
    logprob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
    return action, logprob


def compute_gae(rewards, values, next_values, terminations, dones, gamma: float, gae_lambda: float):
    """Generalized advantage estimation (Schulman et al. 2016, Eq. 16) over a rollout with episode ends; the math of
    ppo_atari.py's compute_gae, as a reverse lax.scan.

    All inputs are (num_steps, num_envs). `next_values[t]` is V(s_{t+1}) of the true successor of s_t (envpool
    returns the true final frames at the step that ends an episode, so a time-limit cut still bootstraps).
    `terminations[t]` = 1 drops that bootstrap; `dones[t]` = 1 (terminated or truncated) cuts the recursion.
    Returns (advantages, returns), returns = advantages + values (the TD(lambda) value targets).
    """
    deltas = rewards + gamma * next_values * (1.0 - terminations) - values
    decays = gamma * gae_lambda * (1.0 - dones)

    def backward(lastgaelam, delta_decay):  # A_t = delta_t + decay_t * A_{t+1}
        delta, decay = delta_decay
        lastgaelam = delta + decay * lastgaelam
        return lastgaelam, lastgaelam

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(rewards[0]), (deltas, decays), reverse=True)
    return advantages, advantages + values


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def ppo_loss(newlogprob, entropy, newvalue, mb_logprobs, mb_advantages, mb_returns, mb_values, mb_mask, args: Args):
    """The PPO objective on one minibatch (all inputs (minibatch,)), as ppo_atari.py's ppo_loss, every mean taken
    over the real transitions only (mb_mask = 0 marks envpool's reset steps, which are not transitions): returns
    (loss, (pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac)); the loss is what Adam minimizes."""
    logratio = newlogprob - mb_logprobs
    ratio = jnp.exp(logratio)

    # KL estimators k1 and k3, http://joschu.net/blog/kl-approx.html
    old_approx_kl = jax.lax.stop_gradient(masked_mean(-logratio, mb_mask))
    approx_kl = jax.lax.stop_gradient(masked_mean((ratio - 1) - logratio, mb_mask))
    clipfrac = jax.lax.stop_gradient(masked_mean((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32),
                                                 mb_mask))

    if args.norm_adv:  # the unbiased standard deviation, as torch's Tensor.std
        mean = masked_mean(mb_advantages, mb_mask)
        std = jnp.sqrt(((mb_advantages - mean) ** 2 * mb_mask).sum() / jnp.maximum(mb_mask.sum() - 1.0, 1.0))
        mb_advantages = (mb_advantages - mean) / (std + 1e-8)

    # clipped surrogate objective, Eq. (7), Schulman et al. 2017
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = masked_mean(jnp.maximum(pg_loss1, pg_loss2), mb_mask)

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - mb_returns) ** 2
        v_clipped = mb_values + jnp.clip(newvalue - mb_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - mb_returns) ** 2
        v_loss = 0.5 * masked_mean(jnp.maximum(v_loss_unclipped, v_loss_clipped), mb_mask)
    else:
        v_loss = 0.5 * masked_mean((newvalue - mb_returns) ** 2, mb_mask)

    entropy_loss = masked_mean(entropy, mb_mask)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef  # Eq. (9)
    return loss, (pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac)


def clip_by_global_norm(grads, max_norm: float):
    """Scale the gradients by max_norm / (their global norm + 1e-6) when that is below 1, as torch's
    clip_grad_norm_ does."""
    norm = optax.global_norm(grads)
    scale = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
    return jax.tree.map(lambda g: g * scale, grads)


class Rollout(NamedTuple):
    """One rollout, (num_steps, num_envs) each: what the update learns from and the games that ended."""

    obs: jax.Array  # (num_steps, num_envs, 4, 84, 84) uint8
    actions: jax.Array
    logprobs: jax.Array
    values: jax.Array
    rewards: jax.Array  # sign-clipped
    terminations: jax.Array
    dones: jax.Array
    valid: jax.Array  # 0 at envpool's reset steps (the step after an episode end): not a transition
    game_over: jax.Array  # a whole game (all lives) ended at this step
    game_return: jax.Array  # its real (unclipped) score, where game_over
    game_length: jax.Array  # its agent steps, where game_over


class EnvCarry(NamedTuple):
    """What the rollout carries from step to step (and from rollout to rollout)."""

    handle: jax.Array  # envpool's XLA handle
    obs: jax.Array  # the newest frames
    done: jax.Array  # the last step ended an episode, so the next one is a reset step
    game_return: jax.Array  # the real score of each game so far
    game_length: jax.Array


def evaluate(params, args: Args, run_name: str) -> list[float]:
    """Real game scores of args.eval_episodes whole games on a fresh env, actions sampled from the policy (a greedy
    Atari policy can get stuck, e.g. never pressing FIRE after a lost life in Breakout). With --capture-video the
    evaluation's games are recorded (the training rollout runs inside XLA, where no frame reaches the host)."""
    envs = atari_envs.make_envpool_atari(args.env_id, 1, args.seed + 10_000, 1, args.eval_max_frames,
                                           render=args.capture_video)
    agent = Agent(envs.single_action_space.n)
    act = jax.jit(lambda params, obs, key: sample_action(agent.apply(params, obs)[0], key)[0])
    key = jax.random.PRNGKey(args.seed + 10_000)
    obs, _ = envs.reset()
    returns, game_return, frames = [], 0.0, []
    while len(returns) < args.eval_episodes:
        key, action_key = jax.random.split(key)
        if args.capture_video:
            frames.append(envs.render()[0])
        obs, _, terminated, truncated, info = envs.step(np.asarray(act(params, obs, action_key)))
        game_return += float(info["reward"][0])
        if info["terminated"][0] or truncated[0]:
            if args.capture_video:
                evaluation.save_frames(frames, f"videos/{run_name}-eval", len(returns))
            returns.append(game_return)
            game_return, frames = 0.0, []
    envs.close()
    return returns


def make_agent(args: Args) -> tuple[Agent, PytreeState]:
    """An untrained agent for args.env_id and its parameters (--eval-only loads the saved ones into them)."""
    probe = atari_envs.make_envpool_atari(args.env_id, 1, args.seed)
    agent = Agent(probe.single_action_space.n)
    probe.close()
    return agent, PytreeState(agent.init(jax.random.PRNGKey(0), jnp.zeros((1, 4, 84, 84), jnp.uint8)))


if __name__ == "__main__":
    args, checkpoint = runtime.parse_args(Args)
    if not args.cuda:
        jax.config.update("jax_platforms", "cpu")
    if args.eval_only is not None:
        runtime.eval_only(args, "agent", lambda _: make_agent(args)[1],
                          lambda params, args, name, _: evaluate(params.tree, args, name))
    batch_size, minibatch_size, num_iterations = derive_sizes(args)
    atari_envs.envpool_atari_id(args.env_id)
    scan = args.loops == "scan" or args.loops == "auto" and jax.default_backend() != "cpu"

    # env setup. envpool's state cannot be saved: a resumed run builds its environments with the seed moved on by
    # the global step, so that its new games are not the ones already played.
    threads, why = atari_envs.env_worker_threads(args.env_threads)
    resumed_step = 0 if checkpoint is None else checkpoint["global_step"]
    envs = atari_envs.make_envpool_atari(args.env_id, args.num_envs, args.seed + resumed_step, threads)
    agent = Agent(envs.single_action_space.n)
    key = jax.random.PRNGKey(args.seed)
    key, init_key = jax.random.split(key)
    params = agent.init(init_key, jnp.zeros((1, 4, 84, 84), jnp.uint8))
    # Adam with torch's eps placement (outside the square root) and the learning rate applied outside, so the
    # annealed rate is an argument of the compiled update instead of a constant compiled into it
    adam = optax.scale_by_adam(eps=1e-5)
    handle, _, _, env_step = envs.xla()
    zeros = jnp.zeros(args.num_envs)

    def first_carry(obs) -> EnvCarry:
        return EnvCarry(handle, obs, zeros.astype(bool), zeros, zeros.astype(jnp.int32))

    def rollout_step(params, carry: EnvCarry, key):
        """Act on the newest frames and step the games, inside XLA; returns the next carry and key, and what to
        store. The key is carried from step to step (not split into num_steps keys up front), so both --loops draw
        the same actions."""
        key, action_key = jax.random.split(key)
        logits, value = agent.apply(params, carry.obs)
        action, logprob = sample_action(logits, action_key)
        handle, (next_obs, reward, terminated, truncated, info) = env_step(carry.handle, action)
        # A lost life terminates the episode (episodic life; nothing bootstraps across it) while the game goes on;
        # info["terminated"] is the real game over. A step cut by the frame limit is truncated, not terminated: its
        # successor, the frames envpool returns at that step, is bootstrapped by GAE. The step after any episode end
        # is envpool's reset step (action ignored, reward 0): stored, but masked out of the update (valid = 0), and
        # not counted in the game's length.
        valid = ~carry.done
        done = terminated | truncated
        game_over = (info["terminated"] > 0) | truncated
        game_return = carry.game_return + info["reward"]
        game_length = carry.game_length + valid
        stored = Rollout(carry.obs, action, logprob, value, reward, terminated.astype(jnp.float32),
                         done.astype(jnp.float32), valid, game_over, game_return, game_length)
        next_carry = EnvCarry(handle, next_obs, done, jnp.where(game_over, 0.0, game_return),
                              jnp.where(game_over, 0, game_length))
        return next_carry, key, stored

    def rollout_scan(params, carry: EnvCarry, key):
        def step(carry_key, _):
            carry, key, stored = rollout_step(params, *carry_key)
            return (carry, key), stored
        (carry, key), stored = jax.lax.scan(step, (carry, key), length=args.num_steps)
        return carry, key, stored

    def rollout_python(params, carry: EnvCarry, key):
        stored = []
        for _ in range(args.num_steps):
            carry, key, step = rollout_step_jit(params, carry, key)
            stored.append(step)
        return carry, key, stack_jit(stored)

    def advantages_of(params, carry: EnvCarry, rollout: Rollout):
        """GAE over the rollout: the successor of step t is stored at t+1, after the last step it is the carry's."""
        next_values = jnp.concatenate([rollout.values[1:], agent.apply(params, carry.obs)[1][None]], axis=0)
        return compute_gae(rollout.rewards, rollout.values, next_values, rollout.terminations, rollout.dones,
                           args.gamma, args.gae_lambda)

    def minibatch_step(params, opt_state, lr, minibatch):
        """One gradient step on one minibatch; returns the new parameters and Adam state, and the diagnostics."""
        mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values, mb_mask = minibatch

        def loss_fn(params):
            logits, newvalue = agent.apply(params, mb_obs)
            logp = jax.nn.log_softmax(logits)
            newlogprob = jnp.take_along_axis(logp, mb_actions[:, None], axis=1)[:, 0]
            entropy = -(jnp.exp(logp) * logp).sum(axis=1)
            return ppo_loss(newlogprob, entropy, newvalue, mb_logprobs, mb_advantages, mb_returns, mb_values,
                            mb_mask, args)

        (_, diagnostics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        grads = clip_by_global_norm(grads, args.max_grad_norm)
        updates, opt_state = adam.update(grads, opt_state)
        params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
        return params, opt_state, diagnostics

    def shuffled_minibatches(batch, key):
        """One epoch's minibatches, (num_minibatches, minibatch_size, ...), the indices drawn on the device."""
        key, permutation_key = jax.random.split(key)
        permutation = jax.random.permutation(permutation_key, batch_size)
        return key, jax.tree.map(
            lambda x: x[permutation].reshape((args.num_minibatches, minibatch_size) + x.shape[1:]), batch)

    def flat_batch(rollout: Rollout, advantages, returns):
        # (num_steps, num_envs, ...) -> (num_steps * num_envs, ...)
        flat = (rollout.obs, rollout.actions, rollout.logprobs, advantages, returns, rollout.values,
                rollout.valid.astype(jnp.float32))
        return tuple(x.reshape((batch_size,) + x.shape[2:]) for x in flat)

    def update_scan(params, opt_state, carry, rollout, lr, key):
        """Every epoch and minibatch as one XLA program. --target-kl: once an epoch ends above it, the epochs left
        are skipped (lax.cond), as the torch script's loop breaks."""
        advantages, returns = advantages_of(params, carry, rollout)
        batch = flat_batch(rollout, advantages, returns)

        def epoch(state, _):
            params, opt_state, key, stopped, last = state

            def train(params, opt_state, key):
                key, minibatches = shuffled_minibatches(batch, key)

                def step(p_o, minibatch):
                    params, opt_state, diagnostics = minibatch_step(*p_o, lr, minibatch)
                    return (params, opt_state), diagnostics
                (params, opt_state), diagnostics = jax.lax.scan(step, (params, opt_state), minibatches)
                return params, opt_state, key, diagnostics

            def skip(params, opt_state, key):  # draws nothing, as the Python loop's break
                nothing = tuple(jnp.full(args.num_minibatches, jnp.nan) for _ in range(6))
                return params, opt_state, key, nothing

            params, opt_state, key, diagnostics = jax.lax.cond(stopped, skip, train, params, opt_state, key)
            last = jax.tree.map(lambda new, old: jnp.where(stopped, old, new), diagnostics, last)  # of a trained epoch
            if args.target_kl is not None:
                stopped = stopped | (diagnostics[4][-1] > args.target_kl)
            return (params, opt_state, key, stopped, last), diagnostics

        nothing = tuple(jnp.zeros(args.num_minibatches) for _ in range(6))
        (params, opt_state, key, _, last), diagnostics = jax.lax.scan(
            epoch, (params, opt_state, key, jnp.array(False), nothing), length=args.update_epochs)
        return params, opt_state, key, diagnostics, last, batch

    def update_python(params, opt_state, carry, rollout, lr, key):
        advantages, returns = advantages_of_jit(params, carry, rollout)
        batch = flat_batch_jit(rollout, advantages, returns)
        epochs = []
        for _ in range(args.update_epochs):
            key, minibatches = split_minibatches_jit(batch, key)
            steps = []
            for minibatch in minibatches:
                params, opt_state, diagnostics = minibatch_step_jit(params, opt_state, lr, minibatch)
                steps.append(diagnostics)
            epochs.append(stack_jit(steps))
            # --target-kl: the one case where the host waits inside an update (the epoch's last KL decides)
            if args.target_kl is not None and jax.device_get(epochs[-1][4][-1]) > args.target_kl:
                break
        return params, opt_state, key, stack_jit(epochs), epochs[-1], batch

    # --loops: one compiled program each for the rollout and the update (scan), or Python loops of jitted steps
    rollout_step_jit, minibatch_step_jit = jax.jit(rollout_step), jax.jit(minibatch_step, donate_argnums=(0, 1))
    advantages_of_jit, flat_batch_jit = jax.jit(advantages_of), jax.jit(flat_batch)
    stack_jit = jax.jit(lambda trees: jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees))  # a list along axis 0

    @jax.jit
    def split_minibatches_jit(batch, key):  # an epoch's minibatches as a list, sliced inside XLA
        key, minibatches = shuffled_minibatches(batch, key)
        return key, [jax.tree.map(lambda x: x[i], minibatches) for i in range(args.num_minibatches)]

    rollout = jax.jit(rollout_scan) if scan else rollout_python
    update = jax.jit(update_scan, donate_argnums=(0, 1)) if scan else update_python

    def iteration_storage(params, carry: EnvCarry, key):
        """What an iteration holds at once: the rollout, the update's flat batch and an epoch's shuffled copy of it."""
        stored = rollout_scan(params, carry, key)[2]
        batch = flat_batch(stored, *advantages_of(params, carry, stored))
        return stored, batch, shuffled_minibatches(batch, key)[1]

    # its memory, before the run starts: the shapes and dtypes jax.eval_shape finds by tracing the functions above
    # (nothing runs or compiles), on the envs' observation shape
    frames = jax.ShapeDtypeStruct((args.num_envs, *envs.single_observation_space.shape), jnp.uint8)
    storage = jax.eval_shape(iteration_storage, params, first_carry(frames), key)
    speed.check_memory(f"--num-steps {args.num_steps} x --num-envs {args.num_envs}",
                       speed.nbytes(jax.tree.leaves(storage)), "a rollout storage", cuda=jax.default_backend() == "gpu")

    run = runtime.start(args, checkpoint, num_iterations, batch_size)
    writer = run.writer
    say(f"environments: {args.num_envs} envpool Atari games, {threads} threads ({why}); JAX on "
        f"{jax.default_backend()}, {'lax.scan' if scan else 'Python'} loops (--loops {args.loops})")
    state = {"agent": PytreeState(params), "optimizer": PytreeState(adam.init(params)), "key": PytreeState(key)}

    # A fresh run resets the envs; a resumed one builds new ones (above) and resets them, so the games in progress at
    # the checkpoint are dropped (never logged). The learning-rate schedule is a function of the iteration.
    next_obs_np, start_iteration, global_step = run.restore(envs, state, seed=None)
    params, opt_state, key = state["agent"].tree, state["optimizer"].tree, state["key"].tree
    carry = first_carry(jnp.asarray(next_obs_np))

    for iteration in range(start_iteration, num_iterations + 1):
        lr = args.learning_rate * (1.0 - (iteration - 1.0) / num_iterations if args.anneal_lr else 1.0)
        iteration_start = global_step

        carry, key, stored = rollout(params, carry, key)
        global_step += args.num_steps * args.num_envs
        params, opt_state, key, diagnostics, last_epoch, batch = update(params, opt_state, carry, stored,
                                                                        jnp.float32(lr), key)

        # The games that ended, their scores, the losses and the value targets come to the host once per iteration,
        # in one transfer, for logging; besides them only the non-finite check's flags and the newest frames (for a
        # checkpoint) leave the device, once per iteration too (tests/test_ppo_atari_jax.py counts the transfers).
        game_over, game_return, game_length, last_epoch, clipfracs, y_true, y_pred, valid = jax.device_get((
            stored.game_over, stored.game_return, stored.game_length, last_epoch, diagnostics[5], batch[4], batch[5],
            batch[6]))
        for step, env in zip(*np.nonzero(game_over)):
            run.log_episode(float(game_return[step, env]), int(game_length[step, env]),
                            iteration_start + (int(step) + 1) * args.num_envs)
        pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, _ = (float(x[-1]) for x in last_epoch)
        y_pred, y_true = y_pred[valid > 0], y_true[valid > 0]
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        losses = {
            "losses/value_loss": v_loss,
            "losses/policy_loss": pg_loss,
            "losses/entropy": entropy_loss,
            "losses/old_approx_kl": old_approx_kl,
            "losses/approx_kl": approx_kl,
        }
        writer.add_scalar("charts/learning_rate", lr, global_step)
        for key_name, value in losses.items():
            writer.add_scalar(key_name, value, global_step)
        writer.add_scalar("losses/clipfrac", float(np.nanmean(clipfracs)), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        # SPS leaves out the first iteration: a warm-up that holds XLA's compilation
        run.start_clock(global_step)
        run.log_sps(global_step)
        state["agent"].tree, state["optimizer"].tree, state["key"].tree = params, opt_state, key
        # Checked before any save, so a checkpoint never holds NaN or inf
        run.check_finite(losses, global_step, f"iteration {iteration}")
        # progress; a checkpoint every --checkpoint-frequency updates or on SIGINT/SIGTERM
        run.end_of_iteration(iteration, global_step, np.array(jax.device_get(carry.obs)))

    run.finish(global_step, np.array(jax.device_get(carry.obs)), model={"agent": state["agent"]},
               evaluate=lambda: evaluate(params, args, run.name))
