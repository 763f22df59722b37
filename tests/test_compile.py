"""--compile and --amp, every script: the compiled path logs the losses of the plain path (same seed, CPU) within
float rounding, really compiles the functions it names, and never recompiles (tests/helpers.py,
assert_compile_parity); --amp (bf16 forward passes) logs finite losses close to the plain path's."""

import math
from dataclasses import dataclass
from typing import Optional

import pytest

from tests.helpers import (
    assert_compile_parity,
    assert_losses_close,
    checksums,
    read_scalars,
    run_script,
    single_run_dir,
    values,
)
from tests.scripts import MULTIGPU_TINY, ONE_THREAD, PPO_LOSSES, SCRIPTS, needs, standalone


@dataclass(frozen=True)
class Amp:
    """--amp on the parity budget, beside the plain run: every loss at the plain run's steps and finite; `keys`
    within atol + rtol * |plain| (at every update, or at the first only); `moved` differs from the plain value,
    or autocast did nothing (an --amp that changed nothing would log the float32 values exactly)."""

    keys: tuple
    rtol: float
    atol: float
    moved: str
    first_update_only: bool = False


@dataclass(frozen=True)
class Parity:
    script: str
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
    later_rtol: Optional[float] = None  # the updates after the first: rounding that training amplified (None: rtol)


def parity(*args, **kwargs):
    case = Parity(*args, **kwargs)
    return pytest.param(case, id=case.script, marks=[needs(SCRIPTS[case.script].needs)])


PENDULUM_PPO = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2",
    "--total-timesteps", "256")
# 2 envs x 16 steps = 32 per iteration, 3 iterations of 2 minibatches: the smallest budget with 3 logged updates.
# 48 steps per env end no Breakout game (a random game lasts a few hundred steps), so no episodes are compared.
PPO_ATARI = ONE_THREAD + ("--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                          "--total-timesteps", "96")
# 400 agent steps, learning from step 101 with a gradient step every 4 (75 steps of batch 8), a target update every
# 100 steps (at 200, 300, 400), losses logged every 100 steps (at 200, 300, 400). A buffer of 300 transitions wraps
# before the end. (The row of tests/scripts.py.)
ATARI_VALUE = SCRIPTS["dqn_atari.py"].args
# Pendulum-v1, 100 random steps then 300 critic steps, losses logged at steps 200, 300 and 400.
PENDULUM_OFF = ONE_THREAD + (
    "--env-id", "Pendulum-v1", "--learning-starts", "100", "--total-timesteps", "400", "--batch-size", "32",
    "--no-progress")
# 2 envs x 16 steps, one iteration per phase, 3 phases: 3 policy-phase updates (2 minibatches of 16 each) and 3
# auxiliary phases (2 minibatches of one 16-step rollout each, so the second one sees a moved policy and KL > 0).
# The policy-phase minibatch and the auxiliary minibatch both hold 16 observations.
PPG = ONE_THREAD + (
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "1", "--num-aux-rollouts", "1", "--e-auxiliary", "1",
    "--num-minibatches", "2", "--total-timesteps", "96", "--no-progress")
OFF_POLICY_COMPILED = ("policy_step", "update_critic", "update_actor")

CASES = [
    # 4 updates of 16 minibatch steps each. Measured: compiled and plain losses agree to about 1e-6 relative
    # (float rounding of fused kernels); the tolerance leaves room for that to grow over 4 updates.
    parity("ppo.py", ("--total-timesteps", "2048"), ("policy_step", "update"), rtol=1e-4, atol=1e-6,
           loss_steps=(512, 1024, 1536, 2048), min_updates=4),
    # Pendulum, 4 updates of 2 epochs x 4 minibatches; one episode ends (truncated at step 200).
    # Measured (fused Adam in both runs): compiled and plain losses agree to within 5e-7 absolute, the explained
    # variance (a ratio near 0 here) to within 1.5e-5 absolute (float rounding of fused kernels); the tolerance
    # leaves room for that to grow over 4 updates. The episode return agrees within 1e-5 relative, not exactly:
    # Gaussian samples are continuous, so rounding moves every action a little (measured: 2e-4 on about -1000).
    parity("ppo_continuous_action.py", PENDULUM_PPO, ("policy_step", "update"), rtol=1e-4, atol=4e-5,
           loss_steps=(64, 128, 192, 256), min_updates=4, episodes_rtol=1e-5, episodes=1),
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
    parity("ppo_atari.py", PPO_ATARI, ("policy_step", "update"), rtol=1e-3, atol=1e-5, loss_steps=(32, 64, 96),
           episodes_rtol=None,
           amp=Amp(tuple(k for k in PPO_LOSSES if k != "losses/explained_variance"), rtol=0.05, atol=2e-4,
                   moved="losses/value_loss")),
    # 500 steps, learning from step 201: 30 gradient steps of batch 128, losses logged at 300, 400, 500, a target
    # copy at 500; CartPole episodes end every ~20 steps, so both runs must also act alike. Measured: compiled and
    # plain losses agree to about 1e-6 relative (float rounding of fused kernels); the tolerance leaves room.
    parity("dqn.py", ("--total-timesteps", "500", "--learning-starts", "200"), ("policy_step", "update"), rtol=1e-4,
           atol=1e-5, loss_steps=(300, 400, 500)),
    # (the same budget and measurement as dqn.py)
    parity("c51.py", ("--total-timesteps", "500", "--learning-starts", "200"), ("policy_step", "update"), rtol=1e-4,
           atol=1e-5, loss_steps=(300, 400, 500)),
    # The Atari budget on the default backend: 75 gradient steps, losses logged at 200, 300, 400. No game ends in
    # 400 steps of Breakout, so only the losses are compared. Measured: compiled and plain agree to about 1e-5
    # relative (td_loss, values ~1e-5..1e-3) and 1e-6 (q_values). --amp (bf16 forward passes) is compared at the
    # first update only: bf16 rounding depends on the CPU and grows with the updates. Measured on a CPU with
    # AVX-512: q_values within 8% at every update; on an AVX2-only CPU, where torch emulates bf16: 0.6% at the first
    # update (td_loss 3.7%, 8e-7 absolute), 11% at the second, 43% at the third.
    parity("dqn_atari.py", ATARI_VALUE, ("policy_step", "update"), rtol=1e-3, atol=1e-6, loss_steps=(200, 300, 400),
           episodes_rtol=None,
           amp=Amp(("losses/td_loss", "losses/q_values"), rtol=0.1, atol=1e-6, moved="losses/q_values",
                   first_update_only=True)),
    # The Atari budget: measured, compiled and plain agree to about 1e-7 relative (loss) and 1e-6 (q_values).
    # --amp (bf16 forward passes), at the first update only, as for dqn_atari: the loss moved by 4e-4 relative and
    # q_values by up to 8% (0.002 absolute) over the three updates with AVX-512; on an AVX2-only CPU 6e-5 and 1.3% at
    # the first update, 8% at the second.
    parity("c51_atari.py", ATARI_VALUE, ("policy_step", "update"), rtol=1e-3, atol=1e-6, loss_steps=(200, 300, 400),
           episodes_rtol=None,
           amp=Amp(("losses/loss", "losses/q_values"), rtol=0.1, atol=1e-6, moved="losses/q_values",
                   first_update_only=True)),
    # 300 critic steps, 150 delayed actor updates. Measured: compiled and plain losses differ by at most 8e-7
    # relative (fused kernels' rounding); the exploration noise comes from torch's generator in both paths.
    # The first logged update (100 critic steps) is held to 1e-4: a wrong target or a skipped step moves the losses
    # by far more. The later ones to 1e-2, as rounding can jump: in TD3's run (logged every step, torch 2.13, this
    # CPU) qf2_loss agreed within 4e-7 up to step 310 and by 2e-5 at 311, then drifted to 8e-4 at 400 while qf1
    # stayed within 1e-5: a jump inside one network (a ReLU input or an Adam step near zero, say), not a steady
    # growth. DDPG and SAC train the same kind of networks with the same optimizer, so the three share the rule.
    # Episode returns agree within 1e-5 relative, not exactly: from step 101 the episodes act with the learning
    # policy, whose rounding-level differences move the returns in the 7th digit (measured).
    parity("ddpg_continuous_action.py", PENDULUM_OFF, OFF_POLICY_COMPILED, rtol=1e-4, atol=1e-6,
           loss_steps=(200, 300, 400), episodes_rtol=1e-5, episodes=2, later_rtol=1e-2),
    # 300 critic steps, 150 delayed actor updates. Measured: at most 4e-7 relative at the first logged update, 8e-4
    # (qf2_loss) at the last; the smoothing noise comes from torch's generator in both paths. As for ddpg.
    parity("td3_continuous_action.py", PENDULUM_OFF, OFF_POLICY_COMPILED, rtol=1e-4, atol=1e-6,
           loss_steps=(200, 300, 400), episodes_rtol=1e-5, episodes=2, later_rtol=1e-2),
    # 300 critic steps and 300 actor and temperature steps (2 every 2nd step, one function). Measured: at most 5e-6
    # relative; the policy's samples come from torch's generator in both paths (fallback_random). As for ddpg.
    parity("sac_continuous_action.py", PENDULUM_OFF, OFF_POLICY_COMPILED, rtol=1e-4, atol=1e-6,
           loss_steps=(200, 300, 400), episodes_rtol=1e-5, episodes=2, later_rtol=1e-2),
    # Both runs build envpool with the same seed and sample their actions from torch's generator with the same
    # seed (compiled sampling falls back to eager's random ops), so they see the same observations: the losses of
    # iterations 2 and 3 are computed on frames that depend on every earlier action. Measured: the first update's
    # losses agree to within 1e-5 relative (float rounding of fused kernels), and the gap grows as training
    # amplifies it: at the third update 5e-5 on the policy loss and 1.3e-3 on old_approx_kl, 2e-3 on aux_kl_loss
    # (a KL of about 1e-4 between nearly equal policies, which float32 resolves only to about 1e-7 absolute).
    # Tolerance: 1e-2 relative + 1e-6 absolute. No episode of starpilot ends within 48 steps per env, so there
    # are no returns to compare. The second auxiliary minibatch sees a moved policy: aux_kl_loss > 0.
    # --amp (bf16 autocast of the forward passes, plain path) on the same budget. bf16 keeps about 3 significant
    # digits, and a changed digit in a logit can change a sampled action and from then on the whole run, so only
    # the first update of each loss is compared, within 15% relative (+1e-6): measured differences were 3.3% on the
    # policy loss, 2.5% on the value loss, 2e-6 on the entropy, 2.6-5% on the three auxiliary losses. The KL
    # estimates, clip fraction and explained variance are left out (tiny or thresholded quantities). Every loss
    # of the run must be finite, and the first policy loss must differ from the plain one, or autocast did nothing.
    parity("ppg_procgen.py", PPG, ("policy_step", "update", "aux_update"), rtol=1e-2, atol=1e-6,
           loss_steps=(32, 64, 96), episodes_rtol=None, first_above_zero=("losses/aux_kl_loss",),
           amp=Amp(("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/aux_kl_loss",
                    "losses/aux_value_loss", "losses/aux_pi_value_loss"), rtol=0.15, atol=1e-6,
                   moved="losses/policy_loss", first_update_only=True)),
]


@pytest.mark.parametrize("case", CASES)
def test_compile_logs_the_same_losses_as_the_plain_path(case, workdir):
    plain = assert_compile_parity(case.script, list(case.args), workdir, list(case.compiled), rtol=case.rtol,
                                  atol=case.atol, min_updates=case.min_updates, episodes_rtol=case.episodes_rtol,
                                  later_rtol=case.later_rtol)
    losses = sorted(k for k in plain if k.startswith("losses/"))
    for key in losses:
        assert [step for step, _ in plain[key]] == list(case.loss_steps), key
    if case.episodes is not None:
        assert len(values(plain, "charts/episodic_return")) == case.episodes
    for key in case.first_above_zero:
        assert values(plain, key)[0] > 0, key
    if case.amp is None:
        return
    amp_cfg, cwd = case.amp, workdir / "amp"
    cwd.mkdir()
    run_script(case.script, *case.args, "--amp", "--no-cuda", cwd=cwd)
    amp = read_scalars(single_run_dir(cwd))
    for key in losses:
        assert [step for step, _ in amp[key]] == [step for step, _ in plain[key]], key
        assert all(math.isfinite(v) for v in values(amp, key)), key
    if amp_cfg.first_update_only:
        for key in amp_cfg.keys:
            a, b = values(plain, key)[0], values(amp, key)[0]
            assert abs(a - b) <= amp_cfg.atol + amp_cfg.rtol * abs(a), f"{key}: plain {a}, --amp {b}"
        assert values(amp, amp_cfg.moved)[0] != values(plain, amp_cfg.moved)[0]
    else:
        assert_losses_close(plain, amp, amp_cfg.keys, rtol=amp_cfg.rtol, atol=amp_cfg.atol)
        assert values(amp, amp_cfg.moved) != values(plain, amp_cfg.moved)


@needs("atari")
def test_compile_with_two_ranks_logs_the_losses_of_the_plain_path_and_replicas_stay_identical(workdir):
    # --compile wraps policy_step, grad_step (forward, losses, backward) and optimizer_step (clipping, Adam); the
    # advantage normalization and the gradient all-reduce run eagerly between them, so compiled code never
    # holds a collective. Two real ranks exercise the all-reduce: both paths must log the same rank-averaged
    # losses, and in each run both ranks must end with bit-identical parameters (a rank that skipped or
    # misplaced the all-reduce would drift). Measured (torch 2.13, CPU): at most 2.1e-6 absolute difference,
    # 1e-4 relative on the explained variance (about -57); rtol 1e-3, atol 1e-5. 3 iterations of 1 epoch x 2
    # minibatches; 48 steps per env end no Breakout game, so no episodes are compared.
    # stdout goes through tee to ranks.out in each run's directory, for the checksum lines of both ranks
    launcher = ["bash", "-c", 'set -o pipefail; "$@" | tee ranks.out', "bash", *standalone(2)]
    args = [*MULTIGPU_TINY, "--update-epochs", "1", "--total-timesteps", "192"]
    assert_compile_parity(
        "ppo_atari_multigpu.py", args, workdir, ["policy_step", "grad_step", "optimizer_step"], rtol=1e-3, atol=1e-5,
        min_updates=3, episodes_rtol=None, launcher=launcher,
    )
    for name in ("plain", "compiled"):
        sums = checksums((workdir / name / "ranks.out").read_text())
        assert set(sums) == {0, 1} and sums[0] == sums[1], (name, sums)
