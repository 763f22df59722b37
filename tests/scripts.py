"""The one table of scripts the tests are parametrized over (as Stable-Baselines3's suite is): adding a script to the
suite is adding one `Script` row to SCRIPTS below (tests/test_registry.py fails for a script of cleanrl/ without one).

Each row gives a tiny budget that reaches the learning update more than once, the losses it must log and the
steps they are logged at, the values its schedules log, the optional dependency it needs and how it is launched;
and the script's cases in the behaviour tables, which the test files derive from the rows (a field left at its
default leaves the script out of that table):

  tests/test_run.py        every row (tiny budget, losses, schedules, eval_args, tracked); HalfCheetah: family
  tests/test_lifecycle.py  resume (kill -9 then --resume), stop (SIGTERM), evaluation (--eval-only), non_finite,
                           bad_lifecycle (bad --resume/--eval-only input); saves_envs splits the resumes into the
                           exact ones and those whose episodes restart
  tests/test_compile.py    compile (--compile parity with the plain path, and --amp); tests/test_cuda.py reuses it
  tests/test_bad_input.py  bad_input, learning_rate_flag (every script refuses a negative one), no_update_args
  tests/test_host_syncs.py action_copy
  tests/test_progress.py   every row; family_sample for the checks one script per family covers
  tests/test_learning.py   learning (slow)

A script copied from another (double_dqn.py from dqn.py) gets its row as `DQN.copy("double_dqn.py", ...)`, naming
only the fields that differ (c51.py's row is one).

`script_params(...)` turns rows into pytest parameters that skip (or, under CLEANRL_REQUIRE_ALL=1, fail) when the
extra is missing; `names(...)` picks the rows a table is over.
"""

import importlib.util
import math
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import pytest

TIMEOUT = 240  # seconds for one torchrun launch; a hang in a collective runs into it instead of blocking the suite
# rollouts of a policy; Q-learning from a replay memory; an actor and critics learning from one
FAMILIES = ("ppo", "value", "off_policy")


def torchrun(*launch_args: str) -> list[str]:
    """A real torchrun launcher, killed by `timeout` (TERM, then KILL 10 s later) if it overruns."""
    return ["timeout", "-k", "10", str(TIMEOUT), sys.executable, "-m", "torch.distributed.run", *launch_args]


def standalone(nproc: int) -> list[str]:
    return torchrun("--standalone", "--nnodes=1", f"--nproc_per_node={nproc}")


# ---------------------------------------------------------------------------------------------------------------
# The cases a row may have, one dataclass per table.
@dataclass(frozen=True)
class Resume:
    """(test_lifecycle.py) A run killed with SIGKILL after its first checkpoint, then resumed to its end."""

    args: tuple  # the run's flags, --save-model (and --save-buffer) among them
    every: int  # --checkpoint-frequency
    total: int  # its global steps
    iterations: int
    loss_steps: Optional[tuple]  # the steps its losses are logged at (None: the resume moves them)
    by_path: bool = False  # resumed by `--resume runs/<name>` alone, else by the same command with `--resume auto`
    uninterrupted: bool = False  # the environments' state is saved: the resumed run equals an uninterrupted one
    again: bool = False  # the same command once more after the end: nothing to resume
    updates: Optional[Callable[[int], int]] = None  # gradient updates after a global step (off-policy)
    episodes: tuple = ()  # the steps episodes end at (Pendulum truncates at 200)
    why: Optional[str] = None  # why the environments' state cannot be saved, where it cannot


@dataclass(frozen=True)
class Stop:
    """(test_lifecycle.py) A run with a budget far beyond the test, stopped by SIGTERM after its first checkpoint."""

    args: tuple
    per_iteration: int  # global steps an iteration
    logs_every_iteration: bool  # its losses are logged every iteration (else every 100 steps)


@dataclass(frozen=True)
class Eval:
    """(test_lifecycle.py) --eval-only of the resumed run's directory and of its bare .cleanrl_model."""

    episodes: int
    env: str  # the env the line names
    flags: tuple = ()  # for both evaluations
    file_flags: tuple = ()  # for the bare .cleanrl_model only (evaluated on --env-id)
    mean: tuple = (-math.inf, math.inf)  # where the mean return lies


@dataclass(frozen=True)
class NonFinite:
    """(test_lifecycle.py) NaN planted in a checkpoint: the resumed run stops, naming step and quantity."""

    source: str  # "resumed": the checkpoint a kill left (the row's resume), "stopped": the one SIGTERM left (its stop)
    poison: Callable[[dict], None]  # NaN into one of Adam's first moments: the next step writes NaN into a network
    expected: Callable[[dict], list]  # what the error line says, given the checkpoint


@dataclass(frozen=True)
class BadLifecycle:
    """(test_lifecycle.py) Bad --resume/--eval-only/checkpoint input: `args` fail with `message` (one `error:` line
    and exit 1 with one_line; the whole last line with exact)."""

    args: tuple
    message: str
    one_line: bool = True
    exact: bool = False


@dataclass(frozen=True)
class BadInput:
    """(test_bad_input.py) `args` fail naming `message`. `world`: WORLD_SIZE of a torchrun rank (multi-GPU script),
    whose checks run before the process group forms, so the torchrun variables alone reproduce a rank of a larger
    job without starting its peers."""

    args: tuple
    message: str
    world: Optional[str] = None


@dataclass(frozen=True)
class Amp:
    """(test_compile.py) --amp on the parity budget, beside the plain run: every loss at the plain run's steps and
    finite; `keys` within atol + rtol * |plain| (at every update, or at the first only); `moved` differs from the
    plain value, or autocast did nothing (an --amp that changed nothing would log the float32 values exactly)."""

    keys: tuple
    rtol: float
    atol: float
    moved: str
    first_update_only: bool = False


@dataclass(frozen=True)
class Parity:
    """(test_compile.py, test_cuda.py) The --compile path logs the losses of the plain path, same seed.

    The tolerances scale with what they compare (tests/helpers.py, assert_losses_close): a value a within
    atol + rtol * |a| of the plain one at the first logged update, and after it, where later_spread is given, also
    within later_spread * (the spread of the plain run's values of that loss over its logged updates).
      rtol: one update's float rounding (fused kernels, another reduction order) is relative to the magnitude of
        what it computes; it grows with the square root of a reduction's length, not with its size (a layer 2x as
        wide moves it by about 1.4x), so the margins below (10-100x over the measured gap) hold for wider networks.
      atol: the float32 resolution of the quantities a loss is computed from, for the losses computed by
        cancellation (KL estimates, explained variance, clip fractions) whose own value sits near 0: their
        rounding is set by their O(1) inputs (log-probabilities, returns), not by their own size, so it cannot be
        relative to them.
      later_spread: training amplifies a rounding difference, chaotically: a ReLU input or a sampled action that
        rounding moves across a boundary sends the runs apart (SAC on Pendulum, measured on this CPU: at 256 units
        1e-6 relative at all three logged updates; at 512 units 1e-6, 1e-4, then 2.2e-2 at the third, where the
        later updates were once held to 1e-2 relative and failed). The gap follows no network size or float-op
        count, so its yardstick is how far the loss itself moves along the plain run, its spread (the range of its
        logged values): runs a rounding apart stay a small fraction of it (2% at 512 units), runs that no longer
        follow each other do not (another --tau: up to 110% of it; another seed: 150%).
      What catches a wrong computation is the first update, held to rtol: a flipped sign moves a loss by 2|a|, a
        different loss or target by far more than 1e-4 (the discount 0.98 for 0.99 moved the first logged losses by
        up to 1.5e-3 relative for DDPG and TD3 and 7e-2 for SAC, while at the later updates it moved SAC's by
        17-26% of the spread but DDPG's and TD3's by 1% only); tests/test_compile.py checks the rule on measured
        values.
    """

    args: tuple
    compiled: tuple  # the functions --compile must trace
    rtol: float
    atol: float
    loss_steps: tuple  # the steps every loss is logged at
    min_updates: int = 3
    episodes_rtol: Optional[float] = 0.0  # see assert_compile_parity: 0 identical returns, None not compared
    episodes: Optional[int] = None  # how many episodes the budget ends (checked on the plain run)
    first_above_zero: tuple = ()  # losses whose first logged value must be above 0 in the plain run
    amp: Optional[Amp] = None
    later_spread: Optional[float] = None  # after the first update, also this fraction of the loss's spread (above)
    cuda_first_update_only: bool = False  # test_cuda.py compares the first update only (its runs part before it)


@dataclass(frozen=True)
class Learning:
    """(test_learning.py, slow) The algorithm learns its classic task."""

    args: tuple
    timeout: float  # seconds
    last: int  # the episodes averaged at the end
    at_least: float  # their mean return must reach this
    first_below: Optional[float] = None  # the first 20 episodes average below this (it really started from scratch)
    episodes: Optional[int] = None  # the run ends exactly this many episodes
    evaluated: Optional[float] = None  # with --save-model: the deterministic policy's evaluation averages this
    needs: Optional[str] = None  # the task's optional dependency, where it is not the script's (MuJoCo for PPO)


@dataclass(frozen=True)
class Script:
    name: str
    args: tuple  # a tiny budget through several updates
    losses: tuple  # every losses/* key the tiny run logs
    loss_steps: tuple  # the global steps the tiny run logs its losses at
    family: str  # one of FAMILIES
    # (test_host_syncs.py) the source of the one line that may synchronise at every step; None for the JAX script,
    # which has no torch op in its loop (tests/test_ppo_atari_jax.py counts its host-device transfers instead)
    action_copy: Optional[str]
    episodes: bool = True  # the tiny run ends at least one episode
    needs: Optional[str] = None  # optional dependency: "atari", "mujoco", "procgen" or "jax"
    eval_args: tuple = ()  # flags that keep the final evaluation short
    launcher: Optional[tuple] = None  # torchrun for the distributed script
    other: dict = field(default_factory=dict)  # other keys the tiny run logs, with their steps (SPS after the warm-up)
    logged: dict = field(default_factory=dict)  # values of the tiny run's schedules: {key: values in logged order}
    tracked: bool = True  # test_run.py runs it with --track and --capture-video (else its own test file checks them)
    family_sample: bool = False  # the script of its family that the checks sampled over the families run
    copied_from: Optional[str] = None  # the script this one's row was copied from (Script.copy)
    saves_envs: bool = True  # its environments' state goes into checkpoints (not Atari's, nor envpool's Procgen)
    learning_rate_flag: str = "--learning-rate"  # a flag that refuses -1 (test_bad_input.py)
    resume: Optional[Resume] = None
    stop: Optional[Stop] = None
    evaluation: Optional[Eval] = None
    non_finite: Optional[NonFinite] = None
    bad_lifecycle: tuple = ()  # BadLifecycle cases
    compile: Optional[Parity] = None
    bad_input: tuple = ()  # BadInput cases
    no_update_args: Optional[tuple] = None  # a budget that ends before --learning-starts (replay-memory scripts)
    learning: Optional[Learning] = None

    def copy(self, name: str, **differs) -> "Script":
        """The row of a script copied from this one (double_dqn.py from dqn.py): this row's budgets, cases and
        measurements, but for the fields given; a copy is not its family's sample."""
        return replace(self, name=name, family_sample=False, copied_from=self.name, **differs)

    def __post_init__(self):
        assert self.family in FAMILIES, f"{self.name}: family {self.family!r} is not one of {FAMILIES}"


# ---------------------------------------------------------------------------------------------------------------
# Tiny budgets (the rows' args) and what several rows share
# The scripts whose --torch-threads defaults to 0 (as many threads as cores are free) run at one thread in the tests:
# the count changes float rounding, and tests compare runs bit for bit (speed.ThreadGuard has tests of its own).
ONE_THREAD = ("--torch-threads", "1")
PPO_LOSSES = ("losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
              "losses/approx_kl", "losses/clipfrac", "losses/explained_variance")
AUX_LOSSES = ("losses/aux_kl_loss", "losses/aux_value_loss", "losses/aux_pi_value_loss")
ATARI_EVAL = ("--eval-max-frames", "400")
# ppo_atari_multigpu.py, tiny: 4 envs x 16 steps = a global batch of 64 (split over the ranks) in 2 minibatches;
# each test adds its own --update-epochs and --total-timesteps (64 per iteration)
MULTIGPU_TINY = ("--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2")
# value-based: 2000 CartPole steps, learning after 500 with a gradient step every 10 steps; losses every 100 steps
CLASSIC_VALUE = ("--total-timesteps", "2000", "--learning-starts", "500", "--target-network-frequency", "500",
                 "--batch-size", "32")
# value-based Atari: 400 steps, learning after 100, a gradient step every 4, a 300-transition memory that wraps
ATARI_VALUE = ONE_THREAD + (
    "--total-timesteps", "400", "--learning-starts", "100", "--buffer-size", "300", "--batch-size", "8",
    "--target-network-frequency", "100")
# continuous off-policy on Pendulum: 400 steps, learning after 200; losses every 100 steps; 2 episodes of 200
PENDULUM_OFF = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--learning-starts", "200", "--total-timesteps", "400", "--batch-size", "32")
# the same three on HalfCheetah-v5 (optional dependency mujoco): 200 steps, learning after 100; losses and SPS at 200
HALFCHEETAH_OFF = ONE_THREAD + ("--env-id", "HalfCheetah-v5", "--learning-starts", "100", "--total-timesteps",
                                "200", "--batch-size", "32")
VALUE_OTHER = {"charts/target_updates": (1000, 1500, 2000), "charts/SPS": tuple(range(600, 2001, 100))}
ATARI_VALUE_OTHER = {"charts/target_updates": (200, 300, 400), "charts/SPS": (200, 300, 400)}
OFF_POLICY_LOSSES = ("losses/qf1_loss", "losses/qf2_loss", "losses/qf1_values", "losses/qf2_values",
                     "losses/qf_loss", "losses/actor_loss")

# The line of each family allowed to synchronise at every step (tests/test_host_syncs.py)
ROLLOUT_COPY = "actions.cpu().numpy()"  # the sampled actions to the environments (environments.OnDevice)
# the greedy actions, copied only at the steps where some env exploits (epsilon-greedy's coin flips are numpy)
GREEDY_COPY = "lambda: policy_step("
# the noisy deterministic (DDPG, TD3) or sampled squashed-Gaussian (SAC) actions after the random warm-up
ACTOR_COPY = "actions = policy_step("

# ---------------------------------------------------------------------------------------------------------------
# Lifecycle budgets (tests/test_lifecycle.py)
SAVE, BUFFER = ("--save-model",), ("--save-buffer",)
# ppo.py on CartPole: 4 envs x 32 steps = 128 steps an iteration, 8 iterations
LIFE_PPO = ("--num-steps", "32", "--total-timesteps", "1024", "--eval-episodes", "1", "--no-progress")
# ppo_continuous_action.py on Pendulum: 1 env x 64 steps, 8 iterations; episodes are truncated at 200 steps
LIFE_PPO_PENDULUM = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2",
    "--total-timesteps", "512", "--eval-episodes", "1", "--no-progress")
# dqn.py, c51.py on CartPole: 2000 steps, learning from step 501 with a gradient step every 10 steps (150 updates,
# losses every 100 steps), target updates every 500 steps; several episodes end
LIFE_CARTPOLE_VALUE = ("--total-timesteps", "2000", "--learning-starts", "500", "--batch-size", "32",
                       "--target-network-frequency", "500", "--eval-episodes", "1", "--no-progress")
# ddpg, td3, sac on Pendulum: 600 steps (3 episodes of 200), learning from step 201: 400 gradient steps, losses
# every 100 steps (300, 400, 500, 600)
LIFE_PENDULUM_OFF = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--learning-starts", "200", "--batch-size", "32", "--buffer-size", "1000",
    "--eval-episodes", "1", "--no-progress")
# ppo_atari.py: 2 envs x 32 steps = 64 steps an iteration, 1 epoch of 2 minibatches (the Nature CNN is slow on
# 2 CPU cores); evaluation: a game cut at 400 frames. Its rollout pipelined (--pipeline-envs on; auto is off on the
# CPU), so a stop or kill lands in a pipelined rollout; ppo_atari_multigpu.py's rows keep auto (off here).
# ppo_atari_envpool_xla_jax_scan.py: as ppo_atari.py's, 64 steps an iteration
LIFE_JAX = ("--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1",
            "--eval-episodes", "1", "--eval-max-frames", "400", "--no-progress")
LIFE_PPO_ATARI = ONE_THREAD + (
    "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "1",
    "--eval-max-frames", "400", "--no-progress", "--pipeline-envs", "on")
# dqn_atari.py, c51_atari.py: 400 steps, learning from step 101 with a gradient step every 4 steps (75 updates),
# a 300-transition frame memory
LIFE_ATARI_VALUE = ONE_THREAD + (
    "--env-id", "BreakoutNoFrameskip-v4", "--total-timesteps", "400", "--buffer-size", "300", "--learning-starts",
    "100", "--batch-size", "8", "--train-frequency", "4", "--target-network-frequency", "100", "--eval-episodes", "1",
    "--eval-max-frames", "2000", "--no-progress")
# ppg_procgen.py: 2 envs x 16 steps = 32 steps an iteration; one policy phase of 4 iterations (128 steps), then one
# auxiliary phase: checkpoints after iterations 1-3 fall inside the policy phase
LIFE_PPG = ONE_THREAD + (
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "4", "--num-aux-rollouts", "2", "--e-auxiliary", "1",
    "--num-minibatches", "2", "--total-timesteps", "128", "--eval-episodes", "1", "--no-progress")


def cartpole_updates(step: int) -> int:  # dqn.py, c51.py: a gradient step at every 10th step after step 500
    return max(step - 500, 0) // 10


def pendulum_updates(step: int) -> int:  # ddpg, td3, sac: a gradient step at every step after step 200
    return max(step - 200, 0)


def atari_updates(step: int) -> int:  # dqn_atari.py, c51_atari.py: at every 4th step after step 100
    return max(step - 100, 0) // 4


def nan_into_first_element(entry: Callable[[dict], object]) -> Callable[[dict], None]:
    """A poison: NaN into the first element of the checkpoint's tensor `entry(checkpoint)`, whatever its layout."""

    def poison(checkpoint: dict) -> None:
        tensor = entry(checkpoint)
        tensor[(0,) * tensor.dim()] = math.nan

    return poison


def first_moment(optimizer: str, index: int) -> Callable[[dict], None]:
    """NaN into Adam's first moment of parameter `index` of the checkpoint's torch `optimizer`."""
    return nan_into_first_element(lambda c: c[optimizer]["state"][index]["exp_avg"])


def jax_first_moment(leaf: str) -> Callable[[dict], None]:
    """NaN into Adam's first moment (optax's `mu`) of the JAX script's parameter `leaf` (its path in the tree)."""
    return nan_into_first_element(lambda c: c["optimizer"][f".mu{leaf}"])


def after_iteration(steps: int, losses: bool = True) -> Callable[[dict], list]:
    # the resumed iteration's first optimizer step writes NaN, the next minibatch's losses are NaN, and the
    # end-of-update check stops the run before the next checkpoint is written
    return lambda c: [f"error: non-finite {'losses/' if losses else ''}", "(nan)",
                      f"at global step {c['global_step'] + steps} (iteration {c['iteration'] + 1}); stopped without"]


def two_critics(algorithm: str) -> BadLifecycle:
    """A checkpoint from before the twin critics were stacked into one network (entries qf1, qf2, ...; the fixture
    two_critics_<algorithm>.pt of test_lifecycle) is refused in one line, before the run goes on."""
    return BadLifecycle(("--resume", f"two_critics_{algorithm}.pt"),
                        f"error: two_critics_{algorithm}.pt has no 'qf' entry; it was not written by this version of "
                        f"{algorithm}_continuous_action.py", exact=True)


def stacked_critics(algorithm: str) -> BadLifecycle:
    """A checkpoint from before the twin critics became two QNetworks (one network of stacked weights w1 ... b3; the
    fixture stacked_critics_<algorithm>.pt of test_lifecycle) is refused in one line that names the change."""
    return BadLifecycle(("--resume", f"stacked_critics_{algorithm}.pt"),
                        f"error: cannot restore 'qf' from stacked_critics_{algorithm}.pt: it holds the twin critics as "
                        "one network of stacked weights (w1 ... b3), from before they became two QNetworks of "
                        "nn.Linear layers (0.fc1.weight ... 1.fc3.bias), which this version does not read",
                        exact=True)


def sac_expected(c: dict) -> list:
    # found at the next logging step (every 100) or before the next save (50 updates later), whichever comes first
    g = c["global_step"]
    step = min((g // 100 + 1) * 100, g + 50)
    return [f"at global step {step} (gradient update {step - 200})"]


def dqn_expected(c: dict) -> list:
    # no memory saved: it refills for 500 steps; the first gradient step then writes NaN into the network, found at
    # the next logging step (multiples of 100) or before the next checkpoint (every 10 updates)
    step, updates = c["global_step"], c["updates"]
    while True:
        step += 1
        if step > c["global_step"] + 500 and step % 10 == 0:
            updates += 1
            if step % 100 == 0:
                return [f"at global step {step} (gradient update {updates})"]
            if updates % 10 == 0:
                return [f"at global step {step} (iteration {step})"]


def ppg_aux_expected(c: dict) -> list:
    # the SIGTERM's checkpoint falls inside iteration 2's auxiliary phase: the resumed phase's first optimizer step
    # writes NaN, and the phase's losses are checked at its end
    return ["error: non-finite losses/aux_kl_loss (nan)",
            f"at global step {c['global_step']} (iteration {c['iteration']}); stopped without"]


SAVE_BUFFER_ERROR = "error: --save-buffer puts the replay memory into checkpoints, which needs --save-model"
NO_SAVED_MODEL = BadLifecycle(("--eval-only", "nothing.cleanrl_model"),
                              "error: no saved model at nothing.cleanrl_model")
# the continuous off-policy scripts (a bounded Box of actions; test_bad_input.py)
OFF_POLICY_BAD_INPUT = (
    BadInput(("--env-id", "CartPole-v1"), "Box (continuous) actions only"),
    BadInput(("--env-id", "NoSuchEnv-v0"), "NoSuchEnv-v0"),
    BadInput(("--env-id", "Pendulum-v1", "--cudagraphs", "--no-cuda"), "--cudagraphs needs a CUDA device"),
)
NO_CUDAGRAPHS = BadInput(("--cudagraphs", "--no-cuda"), "--cudagraphs needs a CUDA device")
HUGE_MEMORY = "--buffer-size 100000000000 asks for a replay memory of"  # a memory beyond this machine's, in bytes

# ---------------------------------------------------------------------------------------------------------------
# Compile parity budgets (tests/test_compile.py)
PARITY_PENDULUM_PPO = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2",
    "--total-timesteps", "256")
# 2 envs x 16 steps = 32 per iteration, 3 iterations of 2 minibatches: the smallest budget with 3 logged updates.
# 48 steps per env end no Breakout game (a random game lasts a few hundred steps), so no episodes are compared.
PARITY_PPO_ATARI = ONE_THREAD + (
    "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "96")
# 500 CartPole steps, learning from step 201: 30 gradient steps of batch 128, losses logged at 300, 400, 500
PARITY_CARTPOLE_VALUE = ("--total-timesteps", "500", "--learning-starts", "200")
# Pendulum-v1, 100 random steps then 300 critic steps, losses logged at steps 200, 300 and 400.
PARITY_PENDULUM_OFF = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--learning-starts", "100", "--total-timesteps", "400", "--batch-size", "32",
    "--no-progress")
# 2 envs x 16 steps, one iteration per phase, 3 phases: 3 policy-phase updates (2 minibatches of 16 each) and 3
# auxiliary phases (2 minibatches of one 16-step rollout each, so the second one sees a moved policy and KL > 0).
# The policy-phase minibatch and the auxiliary minibatch both hold 16 observations.
PARITY_PPG = ONE_THREAD + (
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "1", "--num-aux-rollouts", "1", "--e-auxiliary", "1",
    "--num-minibatches", "2", "--total-timesteps", "96", "--no-progress")
ROLLOUT_COMPILED = ("policy_step", "update")
OFF_POLICY_COMPILED = ("policy_step", "update_critic", "update_actor")
# The continuous off-policy scripts: 300 critic steps on Pendulum. The first logged update (100 critic steps) is
# held to 1e-4 relative: a wrong target or a skipped step moves the losses by far more. The later ones by
# later_spread, 10% of the loss's spread over the run (see Parity), as rounding can jump: in TD3's run (logged every
# step, torch 2.13, this CPU) qf2_loss agreed within 4e-7 up to step 310 and by 2e-5 at 311, then drifted to 8e-4
# at 400 while qf1 stayed within 1e-5: a jump inside one network (a ReLU input or an Adam step near zero, say), not
# a steady growth. DDPG and SAC train the same kind of networks with the same optimizer, so the three share the
# rule. Episode returns agree within 1e-3 relative, not exactly: from step 101 the episodes act with the learning
# policy, whose actions move with the networks' rounding-level differences, and those grow with the networks as
# the losses' do (measured on the 200- and 400-step returns: 1e-7 relative at SAC's 256 units, 1e-4 at 512). It
# cannot scale with the run itself (two episodes have no spread worth the name). Pendulum's returns are a weak
# detector of a different policy (TD3 with --exploration-noise 0.11 instead of 0.1 moved them by 4e-4 relative,
# measured): the losses check the update; this checks that the episodes end at the same steps with close returns.
PARITY_PENDULUM_OFF_LATE = tuple("150" if previous == "--learning-starts" else arg
                                 for previous, arg in zip(("",) + PARITY_PENDULUM_OFF, PARITY_PENDULUM_OFF))
OFF_POLICY_PARITY = dict(args=PARITY_PENDULUM_OFF, compiled=OFF_POLICY_COMPILED, rtol=1e-4, atol=1e-6,
                         loss_steps=(200, 300, 400), episodes_rtol=1e-3, episodes=2, later_spread=0.1)

# ---------------------------------------------------------------------------------------------------------------
# Learning budgets (tests/test_learning.py): 20k Pendulum steps, seed 1, 1000 random steps first (the defaults,
# 25k/5k, are tuned for MuJoCo's 1M-step runs)
LEARNING_PENDULUM_OFF = ("--env-id", "Pendulum-v1", "--seed", "1", "--total-timesteps", "20000", "--learning-starts",
                         "1000")
# 100 Pendulum episodes of 200 steps, then the evaluation of --save-model: 10 episodes of the deterministic
# policy (no exploration noise), whose mean must be above -250 (a random policy: about -1200). The last 10
# training episodes, exploration included, must average above -400. Seed 1, evaluation / last 10 training
# episodes: DDPG -174.7 / -213.4, TD3 -177.1 / -347.8 (its training episodes dip at the very end: -622, -505,
# -776 among the last six), SAC -172.2 / -188.5. The training episodes alone were too fragile a measure: the
# same seed with torch's per-tensor Adam, whose update is the same up to rounding, gave TD3 -175.2 / -218.0.
OFF_POLICY_LEARNING = Learning((*LEARNING_PENDULUM_OFF, "--save-model"), 3600, last=10, at_least=-400, episodes=100,
                               evaluated=-250)

# ---------------------------------------------------------------------------------------------------------------
# The rows that others are copies of (Script.copy)
DQN = Script(
    "dqn.py", CLASSIC_VALUE, ("losses/td_loss", "losses/q_values"), tuple(range(600, 2001, 100)),
    family="value", action_copy=GREEDY_COPY, other=VALUE_OTHER, logged={"charts/target_updates": (1, 2, 3)},
    family_sample=True,
    resume=Resume(LIFE_CARTPOLE_VALUE + SAVE + BUFFER, 10, 2000, 2000, tuple(range(600, 2001, 100)),
                  uninterrupted=True, again=True, updates=cartpole_updates),
    stop=Stop(("--total-timesteps", "200000", "--learning-starts", "500", "--batch-size", "32", "--save-model",
               "--checkpoint-frequency", "10", "--no-progress"), 1, False),
    # the evaluation's epsilon-greedy Generator and envs are seeded
    evaluation=Eval(3, "CartPole-v1"),
    # the first layer's weight
    non_finite=NonFinite("stopped", first_moment("optimizer", 0), dqn_expected),
    bad_lifecycle=(
        BadLifecycle(("--eval-only", "hello.txt"), "error: cannot read checkpoint hello.txt: KeyError"),
        BadLifecycle(("--resume", "dqn.pt", "--seed", "2", "--learning-rate", "0.1"),
                     "error: cannot change --learning-rate (the checkpoint has 0.00025), --seed (the checkpoint "
                     "has 1) when resuming", exact=True),
        BadLifecycle(("--save-buffer",), SAVE_BUFFER_ERROR, one_line=False),
    ),
    # 500 steps, learning from step 201: 30 gradient steps of batch 128, losses logged at 300, 400, 500, a target
    # copy at 500; CartPole episodes end every ~20 steps, so both runs must also act alike. Measured: compiled and
    # plain losses agree to about 1e-6 relative (float rounding of fused kernels); the tolerance leaves room.
    compile=Parity(PARITY_CARTPOLE_VALUE, ROLLOUT_COMPILED, rtol=1e-4, atol=1e-5, loss_steps=(300, 400, 500)),
    bad_input=(
        BadInput(("--env-id", "NoSuchEnv-v0"), "NoSuchEnv-v0"),
        BadInput(("--env-id", "Pendulum-v1"), "Discrete"),
        BadInput(("--num-envs", "3"), "num-envs"),
        BadInput(("--tau", "0"), "tau"),
        NO_CUDAGRAPHS,
        BadInput(("--start-e", "5", "--end-e", "-2"), "--start-e must be in [0, 1], got 5.0"),
        BadInput(("--buffer-size", "100000000000"), HUGE_MEMORY),
        BadInput(("--num-envs", "2", "--buffer-size", "1"),
                 "--buffer-size 1 is smaller than one step of --num-envs 2"),
        BadInput(("--seed", "1", "--seed", "2"), "--seed is given twice; give each flag once"),
    ),
    # budgets that end before --learning-starts: a smoke run of the loop without an update
    no_update_args=("--total-timesteps", "200", "--learning-starts", "500"),
    # The defaults (500k steps, about 3 minutes). Seed 1, mean of the last 20 episodes: 479.4 with torch's
    # per-tensor Adam, 489.7 with the fused one; seeds 2 and 3 (per-tensor) 500.0 each. A shorter budget was too
    # fragile for one seed: at 120k steps (epsilon over 30k, a gradient step every 4) seeds 1-4 ended at 429, 393,
    # 499, 500 with the per-tensor Adam and 236, 409, 467, 500 with the fused one, where only the rounding differs.
    learning=Learning(("--total-timesteps", "500000"), 1800, last=20, at_least=450),
)


DQN_ATARI = Script(
    "dqn_atari.py", ATARI_VALUE, ("losses/td_loss", "losses/q_values"), (200, 300, 400), family="value",
    action_copy=GREEDY_COPY, episodes=False, needs="atari", eval_args=ATARI_EVAL, other=ATARI_VALUE_OTHER,
    logged={"charts/target_updates": (1, 2, 3)}, saves_envs=False,
    resume=Resume(LIFE_ATARI_VALUE + SAVE + BUFFER, 25, 400, 400, (200, 300, 400), updates=atari_updates),
    evaluation=Eval(1, "BreakoutNoFrameskip-v4", flags=("--eval-max-frames", "2000")),
    bad_lifecycle=(BadLifecycle(("--save-buffer",), SAVE_BUFFER_ERROR, one_line=False),),
    # The Atari budget (the row's args) on the default backend: 75 gradient steps, losses logged at 200, 300,
    # 400. No game ends in 400 steps of Breakout, so only the losses are compared. Measured: compiled and plain
    # agree to about 1e-5 relative (td_loss, values ~1e-5..1e-3) and 1e-6 (q_values). --amp (bf16 forward
    # passes) is compared at the first update only: bf16 rounding depends on the CPU and grows with the updates.
    # Measured on a CPU with AVX-512: q_values within 8% at every update; on an AVX2-only CPU, where torch
    # emulates bf16: 0.6% at the first update (td_loss 3.7%, 8e-7 absolute), 11% at the second, 43% at the third.
    compile=Parity(ATARI_VALUE, ROLLOUT_COMPILED, rtol=1e-3, atol=1e-6, loss_steps=(200, 300, 400),
                   episodes_rtol=None,
                   amp=Amp(("losses/td_loss", "losses/q_values"), rtol=0.1, atol=1e-6, moved="losses/q_values",
                           first_update_only=True)),
    bad_input=(
        BadInput(("--env-id", "CartPole-v1"), "not an Atari game"),
        BadInput(("--env-backend", "envpool"), "env-backend"),
        BadInput(("--batch-size", "0"), "batch-size"),
        NO_CUDAGRAPHS,
        BadInput(("--buffer-size", "100000000000"), HUGE_MEMORY),
    ),
    no_update_args=("--total-timesteps", "64", "--learning-starts", "100", "--buffer-size", "1000"),
)


# ---------------------------------------------------------------------------------------------------------------
SCRIPTS = {s.name: s for s in [
    # 4 envs x 32 steps = 128 steps an iteration, 2 iterations
    # (SPS counts from the end of the first iteration, the warm-up; the learning rate anneals linearly: 1, 1/2)
    Script(
        "ppo.py", ("--num-steps", "32", "--total-timesteps", "256"), PPO_LOSSES, (128, 256), family="ppo",
        action_copy=ROLLOUT_COPY, other={"charts/SPS": (256,)}, logged={"charts/learning_rate": (2.5e-4, 1.25e-4)},
        family_sample=True,
        resume=Resume(LIFE_PPO + SAVE, 1, 1024, 8, tuple(128 * i for i in range(1, 9)), uninterrupted=True,
                      again=True),
        stop=Stop(("--num-steps", "32", "--total-timesteps", "100000", "--save-model", "--checkpoint-frequency", "1",
                   "--no-progress"), 128, True),
        # the greedy policy and the seeded evaluation envs make it deterministic (videos change nothing)
        evaluation=Eval(3, "CartPole-v1", file_flags=("--capture-video",)),
        # parameter 6 is the actor's first layer, after the critic's 3 layers
        non_finite=NonFinite("resumed", first_moment("optimizer", 6), after_iteration(128)),
        bad_lifecycle=(
            # what --resume names
            BadLifecycle(("--resume", "runs/nowhere"), "error: no checkpoint at runs/nowhere"),
            BadLifecycle(("--resume", "missing.pt"), "error: no checkpoint at missing.pt"),
            BadLifecycle(("--resume", "garbage.pt"), "error: cannot read checkpoint garbage.pt"),
            # the weights-only unpickler meets text with a KeyError; any failure to read is the one line
            BadLifecycle(("--resume", "hello.txt"), "error: cannot read checkpoint hello.txt: KeyError"),
            BadLifecycle(("--resume", "partial.pt"),
                         "error: partial.pt is not a whole checkpoint of ppo.py: it lacks run_name, iteration, "
                         "global_step, finished, rng, envs, next_obs", exact=True),
            BadLifecycle(("--resume", "finished.pt"),
                         "error: finished.pt is the end of a finished run (global step 1024)"),
            # another script's checkpoint
            BadLifecycle(("--resume", "dqn.pt"),
                         "error: dqn.pt is not a checkpoint of ppo.py (it was written by dqn.py)"),
            # flags a resumed run may not change
            BadLifecycle(("--resume", "ppo.pt", "--env-id", "Acrobot-v1"),
                         "error: cannot change --env-id (the checkpoint has 'CartPole-v1') when resuming"),
            BadLifecycle(("--resume", "ppo.pt", "--cudagraphs"),
                         "error: cannot change --cudagraphs (the checkpoint has False) when resuming"),
            # checkpoint flags
            BadLifecycle(("--checkpoint-frequency", "5"),
                         "error: --checkpoint-frequency writes checkpoints, which needs --save-model"),
            BadLifecycle(("--checkpoint-frequency", "-1", "--save-model"),
                         "error: --checkpoint-frequency must be at least 0, got -1", exact=True),
            NO_SAVED_MODEL,
        ),
        # 4 updates of 16 minibatch steps each. Measured: compiled and plain losses agree to about 1e-6 relative
        # (float rounding of fused kernels); the tolerance leaves room for that to grow over 4 updates.
        compile=Parity(("--total-timesteps", "2048"), ROLLOUT_COMPILED, rtol=1e-4, atol=1e-6,
                       loss_steps=(512, 1024, 1536, 2048), min_updates=4),
        bad_input=(
            BadInput(("--env-id", "NoSuchEnv-v0"), "NoSuchEnv-v0"),
            BadInput(("--env-id", "Pendulum-v1"), "Discrete"),
            BadInput(("--num-minibatches", "3"), "num-minibatches"),
            BadInput(("--num-steps", "1", "--num-minibatches", "4"),
                     "minibatches of one transition (--num-minibatches 4): --norm-adv divides by their standard"),
            BadInput(("--total-timesteps", "100"), "total-timesteps"),
            NO_CUDAGRAPHS,
            BadInput(("--seed", "-1"), "--seed must be in [0, 2147483647], got -1"),
            # a rollout storage beyond the memory available, named in bytes
            BadInput(("--num-steps", "10000000000", "--total-timesteps", "40000000000"),
                     "--num-steps 10000000000 x --num-envs 4 asks for a rollout storage of"),
            # run flags that cannot mean what they say
            BadInput(("--exp-name", "a/b"), "--exp-name 'a/b' must be a plain name (no '/', no control character)"),
            BadInput(("--exp-name", "a\nb"), "--exp-name 'a\\nb' must be a plain name"),  # would split the lines
            BadInput(("--track", "--no-track"), "--track and --no-track are both given; give one of them"),
        ),
        # 250k steps with the learning rate doubled from the 500k-step default (2.5e-4), so the annealed
        # schedule fits the shorter budget; measured here: 500.0 over the last 20 episodes (seed 1).
        learning=Learning(("--total-timesteps", "250000", "--learning-rate", "5e-4"), 1200, last=20, at_least=475),
    ),
    # 1 env x 64 steps, 4 iterations; one 200-step episode ends; the learning rate anneals 1, 3/4, 1/2, 1/4
    Script(
        "ppo_continuous_action.py", ONE_THREAD + ("--env-id", "Pendulum-v1", "--num-steps", "64",
                                                  "--num-minibatches", "4", "--update-epochs", "2",
                                                  "--total-timesteps", "256"),
        PPO_LOSSES, (64, 128, 192, 256), family="ppo", action_copy=ROLLOUT_COPY, other={"charts/SPS": (128, 192, 256)},
        logged={"charts/learning_rate": (3e-4, 2.25e-4, 1.5e-4, 0.75e-4), "charts/episodic_length": (200,)},
        resume=Resume(LIFE_PPO_PENDULUM + SAVE, 1, 512, 8, tuple(64 * i for i in range(1, 9)), by_path=True,
                      uninterrupted=True, episodes=(200, 400)),
        evaluation=Eval(2, "Pendulum-v1", file_flags=("--env-id", "Pendulum-v1"), mean=(-3300, 0)),
        bad_lifecycle=(
            BadLifecycle(("--resume", "ppo.pt"),
                         "error: ppo.pt is not a checkpoint of ppo_continuous_action.py (it was written by ppo.py)"),
        ),
        # Pendulum, 4 updates of 2 epochs x 4 minibatches; one episode ends (truncated at step 200).
        # Measured (fused Adam in both runs): compiled and plain losses agree to within 5e-7 absolute, the explained
        # variance (a ratio near 0 here) to within 1.5e-5 absolute (float rounding of fused kernels); the tolerance
        # leaves room for that to grow over 4 updates. The episode return agrees within 1e-5 relative, not exactly:
        # Gaussian samples are continuous, so rounding moves every action a little (measured: 2e-4 on about -1000).
        compile=Parity(PARITY_PENDULUM_PPO, ROLLOUT_COMPILED, rtol=1e-4, atol=4e-5, loss_steps=(64, 128, 192, 256),
                       min_updates=4, episodes_rtol=1e-5, episodes=1),
        bad_input=(
            BadInput(("--env-id", "NoSuchEnv-v0"), "NoSuchEnv-v0"),
            BadInput(("--env-id", "CartPole-v1"), "Box"),
            BadInput(("--num-minibatches", "3"), "num-minibatches"),
            BadInput(("--env-id", "Pendulum-v1", "--num-steps", "32"), "minibatches of one transition"),
            NO_CUDAGRAPHS,
            BadInput(("--gamma", "1.5"), "--gamma must be in [0, 1], got 1.5"),
            BadInput(("--num-steps", "10000000000", "--total-timesteps", "10000000000"),
                     "--num-steps 10000000000 x --num-envs 1 asks for a rollout storage of"),
        ),
        # Measured with seed 1 (42 s of CPU, 3 min wall on the loaded 2-core machine): the first 20 episodes
        # average 6, the return first reaches the 1000 maximum near step 23k, the last 10 episodes average 1000.
        learning=Learning(("--env-id", "InvertedPendulum-v5", "--total-timesteps", "40960"), 1200, last=10,
                          at_least=500, first_below=50, needs="mujoco"),
    ),
    # 2 envs x 32 steps = 64 steps an iteration, 2 iterations (no Breakout game ends that soon); pipelined halves
    Script(
        "ppo_atari.py", ONE_THREAD + ("--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2",
                                      "--update-epochs", "1", "--total-timesteps", "128", "--pipeline-envs", "on"),
        PPO_LOSSES, (64, 128), family="ppo", action_copy=ROLLOUT_COPY, episodes=False, needs="atari",
        eval_args=ATARI_EVAL, other={"charts/SPS": (128,)},
        tracked=False,  # tests/test_ppo_atari.py checks the video of both env backends
        saves_envs=False,
        resume=Resume(LIFE_PPO_ATARI + ("--total-timesteps", "640") + SAVE, 1, 640, 10,
                      tuple(64 * i for i in range(1, 11)), why="EnvGroups is not a SyncVectorEnv"),
        stop=Stop(LIFE_PPO_ATARI + ("--total-timesteps", "64000", "--save-model", "--checkpoint-frequency", "1"), 64,
                  True),
        # the sampled actions come from the seeded torch generator, the eval env from seed + 10000; real Breakout
        # scores of games cut at 400 frames (100 agent steps)
        evaluation=Eval(2, "BreakoutNoFrameskip-v4", flags=("--eval-max-frames", "400"), mean=(0, 20)),
        # parameter 8 is the actor head, after the 4 layers of the Nature CNN
        non_finite=NonFinite("stopped", first_moment("optimizer", 8), after_iteration(64)),
        bad_lifecycle=(
            BadLifecycle(("--resume", "ppo.pt"),
                         "error: ppo.pt is not a checkpoint of ppo_atari.py (it was written by ppo.py)"),
            NO_SAVED_MODEL,
        ),
        # Measured (torch 2.13, CPU): the compiled losses differ from the plain ones by at most 2e-6 absolute, and
        # the explained variance (about -84 after the first update) by 3e-5 relative (float rounding of inductor's
        # kernels); the tolerance leaves a margin of ~5-30x. A cold inductor cache makes the compiled run take
        # ~100 s on the 2-core machine, a warm one ~30 s.
        # --amp runs the convolutions and linear layers in bf16 (~3 significant digits) while the distribution,
        # log-probabilities and losses stay float32. Measured on this CPU with the same seed: policy loss within
        # 5.2e-5, value loss within 4.2e-4 (0.159 vs 0.159), old_approx_kl within 3.2e-5, entropy within 5e-6;
        # hence rtol 5%, atol 2e-4. Log-probabilities computed in bf16 would be off by ~1e-3 per sample and fail
        # the KL bounds. The explained variance (a ratio of tiny variances early on: -0.149 vs -0.113) is only
        # required to be finite. Both runs act alike only while bf16 rounding moves no sampled action, so the
        # budget stays tiny.
        compile=Parity(PARITY_PPO_ATARI, ROLLOUT_COMPILED, rtol=1e-3, atol=1e-5, loss_steps=(32, 64, 96),
                       episodes_rtol=None,
                       amp=Amp(tuple(k for k in PPO_LOSSES if k != "losses/explained_variance"), rtol=0.05,
                               atol=2e-4, moved="losses/value_loss")),
        bad_input=(
            # with --capture-video, so that "no videos/ entry" means something
            BadInput(("--env-id", "NoSuchGame-v0", "--capture-video"), "NoSuchGame-v0"),
            BadInput(("--env-id", "CartPole-v1", "--capture-video"), "not an Atari game"),
            BadInput(("--env-backend", "envpool", "--capture-video"), "env-backend"),
            BadInput(("--cudagraphs", "--no-cuda", "--capture-video"), "--cudagraphs needs a CUDA device"),
            BadInput(("--eval-max-frames", "0"), "--eval-max-frames must be at least 1, got 0"),
            BadInput(("--num-steps", "100000000", "--total-timesteps", "800000000"),
                     "--num-steps 100000000 x --num-envs 8 asks for a rollout storage of"),
        ),
        # CleanRL's ppo_atari reaches a Breakout score of ~400 after 10M steps. On 2 CPU cores (~200 SPS idle) this
        # only checks clear progress over a random policy (~1-2 points per game) after 1M steps (about 1.5 h).
        # Not yet run to completion on this machine: the threshold is an estimate from published learning curves.
        learning=Learning(("--total-timesteps", "1000000"), 4 * 3600, last=20, at_least=10),
    ),
    # the same budget as ppo_atari.py's, in JAX: 2 envpool games x 32 steps = 64 steps an iteration, 2 iterations
    Script(
        "ppo_atari_envpool_xla_jax_scan.py", ("--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2",
                                              "--update-epochs", "1", "--total-timesteps", "128"),
        PPO_LOSSES, (64, 128), family="ppo", action_copy=None, episodes=False, needs="jax", eval_args=ATARI_EVAL,
        other={"charts/SPS": (128,)},
        # with --capture-video it records the evaluation's games (its training frames never leave XLA)
        saves_envs=False,
        resume=Resume(LIFE_JAX + ("--total-timesteps", "640") + SAVE, 1, 640, 10,
                      tuple(64 * i for i in range(1, 11)), why="AtariGymnasiumEnvPool is not a SyncVectorEnv"),
        stop=Stop(LIFE_JAX + ("--total-timesteps", "64000", "--save-model", "--checkpoint-frequency", "1"), 64, True),
        # actions sampled from the run's JAX key, the eval env from seed + 10000; real Breakout scores of games cut at
        # 400 frames (100 agent steps)
        evaluation=Eval(2, "BreakoutNoFrameskip-v4", flags=("--eval-max-frames", "400"), mean=(0, 20)),
        non_finite=NonFinite("stopped", jax_first_moment("['params']['actor']['kernel']"), after_iteration(64)),
        bad_lifecycle=(
            BadLifecycle(("--resume", "ppo.pt"),
                         "error: ppo.pt is not a checkpoint of ppo_atari_envpool_xla_jax_scan.py (it was written by "
                         "ppo.py)"),
            # a torch network's weights are not the JAX tree's leaves
            BadLifecycle(("--eval-only", "torch.cleanrl_model"),
                         "error: torch.cleanrl_model does not hold a ppo_atari_envpool_xla_jax_scan.py model for "
                         "BreakoutNoFrameskip-v4: its entries are not this tree's (12 missing"),
            NO_SAVED_MODEL,
        ),
        bad_input=(
            BadInput(("--env-id", "NoSuchGame-v0"), "NoSuchGame-v0"),
            BadInput(("--env-id", "CartPole-v1"), "not an Atari game"),
            BadInput(("--compile",), "--compile and --cudagraphs are torch flags"),
            BadInput(("--num-minibatches", "3"), "num-minibatches"),
            BadInput(("--eval-max-frames", "0"), "--eval-max-frames must be at least 1, got 0"),
            BadInput(("--num-steps", "100000000", "--total-timesteps", "800000000"),
                     "--num-steps 100000000 x --num-envs 8 asks for a rollout storage of"),
        ),
    ),
    # 2 ranks with 1 env each x 32 steps = 64 global steps an iteration, 2 iterations
    # (its compile parity and its lifecycle under torchrun have tests of their own: two ranks, their checksums)
    Script(
        "ppo_atari_multigpu.py", ("--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2",
                                  "--update-epochs", "1", "--total-timesteps", "128", "--no-cuda"),
        PPO_LOSSES, (64, 128), family="ppo",
        action_copy=ROLLOUT_COPY,  # the same, in the one process of a plain-python run
        episodes=False, needs="atari", eval_args=ATARI_EVAL, launcher=tuple(standalone(2)),
        other={"charts/SPS": (128,)},
        tracked=False,  # tests/test_ppo_atari_multigpu.py checks its two ranks' logging
        saves_envs=False,
        bad_input=(
            BadInput(("--num-envs", "3"), "divide evenly over 2 ranks", world="2"),
            BadInput(("--num-envs", "4", "--num-steps", "3", "--num-minibatches", "4"), "num-minibatches", world="2"),
            BadInput(("--num-envs", "4", "--total-timesteps", "100"), "total-timesteps", world="1"),
            BadInput(("--backend", "nccl", "--no-cuda"), "nccl needs CUDA", world="1"),
            BadInput(("--cudagraphs", "--no-cuda"), "--cudagraphs needs a CUDA device", world="1"),
            BadInput(("--num-steps", "100000000", "--total-timesteps", "800000000"),
                     "--num-steps 100000000 x 8 envs a rank asks for a rollout storage of", world="1"),
        ),
    ),
    DQN,
    # C51 is DQN's loop with a distributional head: its row is dqn.py's, but for what differs
    DQN.copy(
        "c51.py", losses=("losses/loss", "losses/q_values"), stop=None, evaluation=None, non_finite=None,
        bad_lifecycle=(
            BadLifecycle(("--eval-only", "dqn_run"),
                         "error: dqn_run/checkpoint.pt is not a checkpoint of c51.py (it was written by dqn.py)"),
        ),
        bad_input=(
            BadInput(("--env-id", "Pendulum-v1"), "Discrete"),
            BadInput(("--v-min", "10", "--v-max", "-10"), "v-min"),
            BadInput(("--n-atoms", "1"), "n-atoms"),
            NO_CUDAGRAPHS,
        ),
        # 150k steps, epsilon 1 -> 0.05 over the first 30k, learning from step 5001 with a gradient step every 4
        # steps, a 50k-transition memory and learning rate 1e-3 (the other flags are the defaults). Seed 1 on this
        # machine: mean 500.0 over the last 20 episodes (learning rate 2.5e-4 gave 444.8; 120k steps with a 10k
        # memory, 341.9).
        learning=Learning(("--total-timesteps", "150000", "--exploration-fraction", "0.2", "--learning-starts",
                           "5000", "--train-frequency", "4", "--buffer-size", "50000", "--learning-rate", "1e-3"),
                          1800, last=20, at_least=400),
    ),
    DQN_ATARI,
    # The Atari budget: measured, compiled and plain agree to about 1e-7 relative (loss) and 1e-6 (q_values).
    # --amp (bf16 forward passes), at the first update only, as for dqn_atari: the loss moved by 4e-4 relative and
    # q_values by up to 8% (0.002 absolute) over the three updates with AVX-512; on an AVX2-only CPU 6e-5 and 1.3%
    # at the first update, 8% at the second.
    DQN_ATARI.copy(
        "c51_atari.py", losses=("losses/loss", "losses/q_values"), evaluation=None,
        bad_lifecycle=(BadLifecycle(("--resume", "runs/nowhere"), "error: no checkpoint at runs/nowhere",
                                    one_line=False),),
        compile=replace(DQN_ATARI.compile, amp=replace(DQN_ATARI.compile.amp, keys=("losses/loss", "losses/q_values"))),
        bad_input=(
            BadInput(("--env-id", "CartPole-v1"), "not an Atari game"),
            BadInput(("--env-backend", "envpool"), "env-backend"),
            BadInput(("--batch-size", "0"), "batch-size"),
            BadInput(("--v-min", "1", "--v-max", "1"), "v-min"),
            NO_CUDAGRAPHS,
        ),
    ),
    Script(
        "ddpg_continuous_action.py", PENDULUM_OFF, ("losses/qf1_loss", "losses/qf1_values", "losses/actor_loss"),
        (300, 400), family="off_policy", action_copy=ACTOR_COPY, other={"charts/SPS": (300, 400)},
        logged={"charts/episodic_length": (200, 200)}, learning_rate_flag="--q-lr",
        # without --save-buffer the memory refills after the resume, so the losses move
        resume=Resume(LIFE_PENDULUM_OFF + ("--total-timesteps", "600") + SAVE, 50, 600, 600, None),
        bad_lifecycle=(BadLifecycle(("--env-id", "Pendulum-v1", "--save-buffer"), SAVE_BUFFER_ERROR, exact=True),),
        # 300 critic steps, 150 delayed actor updates. Measured: compiled and plain losses differ by at most 8e-7
        # relative (fused kernels' rounding); the exploration noise comes from torch's generator in both paths.
        compile=Parity(**OFF_POLICY_PARITY),
        bad_input=OFF_POLICY_BAD_INPUT,
        no_update_args=("--env-id", "Pendulum-v1", "--total-timesteps", "135"),
        learning=OFF_POLICY_LEARNING,
    ),
    Script(
        "td3_continuous_action.py", PENDULUM_OFF, OFF_POLICY_LOSSES, (300, 400), family="off_policy",
        action_copy=ACTOR_COPY, other={"charts/SPS": (300, 400)}, logged={"charts/episodic_length": (200, 200)},
        learning_rate_flag="--policy-lr",
        resume=Resume(LIFE_PENDULUM_OFF + ("--total-timesteps", "600") + SAVE + BUFFER, 50, 600, 600,
                      (300, 400, 500, 600), uninterrupted=True, updates=pendulum_updates, episodes=(200, 400, 600)),
        bad_lifecycle=(BadLifecycle(("--env-id", "Pendulum-v1", "--save-buffer"), SAVE_BUFFER_ERROR, exact=True),
                       two_critics("td3"), stacked_critics("td3")),
        # 300 critic steps, 150 delayed actor updates. Measured: at most 4e-7 relative at the first logged update,
        # 8e-4 (qf2_loss) at the last; the smoothing noise comes from torch's generator in both paths.
        compile=Parity(**OFF_POLICY_PARITY),
        bad_input=(*OFF_POLICY_BAD_INPUT, BadInput(("--tau", "2"), "--tau must be in (0, 1], got 2.0")),
        no_update_args=("--env-id", "Pendulum-v1", "--total-timesteps", "135"),
        learning=OFF_POLICY_LEARNING,
    ),
    Script(
        "sac_continuous_action.py", PENDULUM_OFF, OFF_POLICY_LOSSES + ("losses/alpha", "losses/alpha_loss"),
        (300, 400), family="off_policy", action_copy=ACTOR_COPY, other={"charts/SPS": (300, 400)},
        logged={"charts/episodic_length": (200, 200)}, family_sample=True, learning_rate_flag="--q-lr",
        resume=Resume(LIFE_PENDULUM_OFF + ("--total-timesteps", "600") + SAVE + BUFFER, 50, 600, 600,
                      (300, 400, 500, 600), uninterrupted=True, again=True, updates=pendulum_updates,
                      episodes=(200, 400, 600)),
        stop=Stop(LIFE_PENDULUM_OFF + ("--total-timesteps", "100000", "--save-model", "--checkpoint-frequency", "20"),
                  1, False),
        # the deterministic actor and the seeded evaluation envs
        evaluation=Eval(2, "Pendulum-v1", file_flags=("--env-id", "Pendulum-v1"), mean=(-3300, 0)),
        # qf1's first layer; the replay memory was saved, so learning goes on at once
        non_finite=NonFinite("resumed", first_moment("q_optimizer", 0), sac_expected),
        bad_lifecycle=(BadLifecycle(("--env-id", "Pendulum-v1", "--save-buffer"), SAVE_BUFFER_ERROR, exact=True),
                       two_critics("sac"), stacked_critics("sac")),
        # 300 critic steps and 300 actor and temperature steps (2 every 2nd step, one function). Measured: at most
        # 5e-6 relative at 256 units; at 512 units 1e-6, 1e-4 and 2.2e-2 (2% of the loss's spread) at the three
        # updates (see Parity); the policy's samples come from torch's generator in both paths (fallback_random).
        # On a GPU (tests/test_cuda.py) the runs part before the first logged update (the first episode's returns
        # differed in the 5th digit: the plain and compiled kernels round differently, and the stochastic policy
        # carries that into the states), so only the first update is compared there.
        # Learning from step 150, not 100: on an AVX-512 CPU (AMD EPYC, 2026-12-07) the runs that learn from step 100
        # parted by 2e-3 relative at the first logged update (qf losses; the first episode's return by 7e-5): the
        # stochastic policy acting from step 101 carries a rounding difference into the states. From step 150 (and
        # 199) they agreed to 2e-6 at all three updates, as they did from step 100 on the earlier CPUs.
        compile=Parity(**(OFF_POLICY_PARITY | {"args": PARITY_PENDULUM_OFF_LATE}), cuda_first_update_only=True),
        bad_input=(
            *OFF_POLICY_BAD_INPUT,
            BadInput(("--policy-lr", "nan"), "--policy-lr must be a finite number, got nan"),
            BadInput(("--env-id", "Pendulum-v1", "--buffer-size", "100000000000"), HUGE_MEMORY),
            BadInput(("--env-id", "Pendulum-v1", "--num-envs", "2", "--buffer-size", "1"),
                     "--buffer-size 1 is smaller than one step of --num-envs 2"),
            BadInput(("--eval-only", "x", "--resume", "auto"),
                     "--eval-only evaluates a saved model and --resume continues a run's training; give one of them"),
        ),
        no_update_args=("--env-id", "Pendulum-v1", "--total-timesteps", "135"),
        learning=OFF_POLICY_LEARNING,
    ),
    # 2 envs x 16 steps = 32 steps an iteration, 2 iterations a phase: one policy phase and one auxiliary phase
    # (over the 4 stored rollouts in 2 minibatches of 2), which logs once, after the policy phase
    Script(
        "ppg_procgen.py", ONE_THREAD + ("--num-envs", "2", "--num-steps", "16", "--n-iteration", "2",
                                        "--num-aux-rollouts", "2", "--e-auxiliary", "1", "--num-minibatches", "2",
                                        "--total-timesteps", "64"),
        PPO_LOSSES + AUX_LOSSES, (32, 64), family="ppo", action_copy=ROLLOUT_COPY, episodes=False, needs="procgen",
        other={"charts/SPS": (64,), "charts/learning_rate": (32, 64), **{key: (32, 64) for key in PPO_LOSSES},
               **{key: (64,) for key in AUX_LOSSES}},
        tracked=False,  # tests/test_ppg_procgen.py checks its own recorder of envpool's frames
        saves_envs=False,
        resume=Resume(LIFE_PPG + SAVE, 1, 128, 4, (32, 64, 96, 128),
                      why="ProcgenGymnasiumEnvPool is not a SyncVectorEnv"),
        # policy phases of 2 iterations: odd iterations end inside one
        stop=Stop(("--num-envs", "2", "--num-steps", "16", "--n-iteration", "2", "--num-aux-rollouts", "2",
                   "--e-auxiliary", "1", "--num-minibatches", "2", "--total-timesteps", "100000", "--save-model",
                   "--checkpoint-frequency", "1", "--no-progress"), 32, True),
        # starpilot's rewards are non-negative
        evaluation=Eval(1, "StarpilotEasy-v0", file_flags=("--env-id", "starpilot"), mean=(0, math.inf)),
        # parameter 0 is the policy's first conv layer, poisoned in the SIGTERM's checkpoint (inside an auxiliary phase)
        non_finite=NonFinite("stopped", first_moment("optimizer", 0), ppg_aux_expected),
        bad_lifecycle=(
            BadLifecycle(("--resume", "ppo.pt"),
                         "error: ppo.pt is not a checkpoint of ppg_procgen.py (it was written by ppo.py)"),
            BadLifecycle(("--resume", "ppg.pt", "--env-id", "bigfish"),
                         "error: cannot change --env-id (the checkpoint has 'starpilot') when resuming"),
            NO_SAVED_MODEL,
        ),
        # Both runs build envpool with the same seed and sample their actions from torch's generator with the same
        # seed (compiled sampling falls back to eager's random ops), so they see the same observations: the losses of
        # iterations 2 and 3 are computed on frames that depend on every earlier action. Measured: the first
        # update's losses agree to within 1e-5 relative (float rounding of fused kernels), and the gap grows as
        # training amplifies it: at the third update 5e-5 on the policy loss and 1.3e-3 on old_approx_kl (1.5e-3 of
        # its spread), 2e-3 on aux_kl_loss (a KL of about 1e-4 between nearly equal policies, which float32 resolves
        # only to about 1e-7 absolute: atol). Measured again (torch 2.13, this CPU), at the third update: 1.2e-5
        # relative on the policy loss, and at most 1.4e-3 of a loss's spread (aux_kl_loss, 1.7e-7 absolute). Hence
        # the rule of the off-policy scripts (see Parity): 1e-4 relative at the first update, then 10% of the
        # spread. No episode of starpilot ends within 48 steps per env, so there are no returns to compare. The
        # second auxiliary minibatch sees a moved policy: aux_kl_loss > 0.
        # --amp (bf16 autocast of the forward passes, plain path) on the same budget. bf16 keeps about 3 significant
        # digits, and a changed digit in a logit can change a sampled action and from then on the whole run, so only
        # the first update of each loss is compared, within 15% relative (+1e-6): measured differences were 3.3% on
        # the policy loss, 2.5% on the value loss, 2e-6 on the entropy, 2.6-5% on the three auxiliary losses. The KL
        # estimates, clip fraction and explained variance are left out (tiny or thresholded quantities). Every loss
        # of the run must be finite, and the first policy loss must differ from the plain one, or autocast did
        # nothing.
        compile=Parity(PARITY_PPG, ("policy_step", "update", "aux_update"), rtol=1e-4, atol=1e-6,
                       loss_steps=(32, 64, 96), episodes_rtol=None, first_above_zero=("losses/aux_kl_loss",),
                       later_spread=0.1,
                       amp=Amp(("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/aux_kl_loss",
                                "losses/aux_value_loss", "losses/aux_pi_value_loss"), rtol=0.15, atol=1e-6,
                               moved="losses/policy_loss", first_update_only=True)),
        bad_input=(
            BadInput(("--env-id", "nosuchgame"), "nosuchgame"),
            BadInput(("--env-id", "coinrun", "--distribution-mode", "extreme"), "extreme"),
            BadInput(("--total-timesteps", "100000"), "one phase"),
            NO_CUDAGRAPHS,
            # PPG's auxiliary buffer beyond the memory available, named in bytes
            BadInput(("--n-iteration", "100000", "--total-timesteps", "1638400000"),
                     "--n-iteration 100000 x --num-envs 64 x --num-steps 256 asks for an auxiliary buffer of"),
        ),
    ),
]}


def have(extra: Optional[str]) -> bool:
    """Whether an optional dependency is importable (for Procgen: envpool with its Qt 5 runtime)."""
    if extra is None:
        return True
    if extra == "procgen":
        try:
            import envpool.procgen

            envpool.procgen.ProcgenEnvSpec  # noqa: B018 (raises ImportError when the Qt 5 runtime is missing)
            return True
        except ImportError:
            return False
    if extra == "jax":  # JAX, flax, optax and envpool (whose Atari games need no Qt)
        return all(importlib.util.find_spec(m) is not None for m in ("jax", "flax", "optax", "envpool"))
    return importlib.util.find_spec({"atari": "ale_py", "mujoco": "mujoco"}[extra]) is not None


def needs(extra: Optional[str]):
    """A skip mark for a missing optional dependency (tests/conftest.py fails it instead under CLEANRL_REQUIRE_ALL=1)."""
    return pytest.mark.skipif(not have(extra), reason=f"optional dependency {extra} is not installed")


def names(where: Optional[Callable[[Script], object]] = None, **equal) -> list[str]:
    """The names of the rows, in table order, for which `where(row)` is true and each field given equals its value:
    names(lambda row: row.stop) are the rows with a SIGTERM case, names(family="value", needs="atari") the Atari
    value-based scripts."""
    return [name for name, row in SCRIPTS.items()
            if (where is None or where(row)) and all(getattr(row, k) == v for k, v in equal.items())]


def script_params(rows=None) -> list:
    """pytest parameters for the rows named (all by default), each with its dependency's skip mark."""
    rows = [SCRIPTS[n] for n in rows] if rows is not None else list(SCRIPTS.values())
    return [pytest.param(row, id=row.name, marks=[needs(row.needs)]) for row in rows]
