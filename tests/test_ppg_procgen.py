"""cleanrl/ppg_procgen.py: the auxiliary buffer's reshaping, the auxiliary losses, reward scaling, env ids,
the missing-Qt error, end-to-end runs through both phases, determinism, and bad input."""

import math
import sys

import numpy as np
import pytest
import torch

from cleanrl.ppg_procgen import (
    AuxBuffer,
    RewardNormalizer,
    aux_buffer_bytes,
    aux_losses,
)
from runtime import procgen_import_problem, resolve_env_id
from tests.helpers import (
    assert_bad_input_rejected,
    assert_compile_parity,
    read_scalars,
    run_dirs,
    run_script,
    single_run_dir,
    values,
)

try:
    import envpool.procgen

    envpool.procgen.ProcgenEnvSpec  # noqa: B018 (raises ImportError when the Qt 5 runtime is missing)
    HAVE_PROCGEN = True
except ImportError:
    HAVE_PROCGEN = False

needs_procgen = pytest.mark.skipif(
    not HAVE_PROCGEN,
    reason="optional dependency envpool's Procgen is unavailable (pip install envpool; apt-get install libqt5gui5)",
)

POLICY_KEYS = [
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]
AUX_KEYS = ["losses/aux_kl_loss", "losses/aux_value_loss", "losses/aux_pi_value_loss"]
# 2 envs x 16 steps = 32 steps per iteration, 2 iterations per phase: 64 steps = one policy phase + one
# auxiliary phase over 4 stored rollouts in 2 minibatches of 2 rollouts.
TINY = [
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "2", "--num-aux-rollouts", "2",
    "--e-auxiliary", "1", "--num-minibatches", "2", "--total-timesteps", "64",
]  # fmt: skip


def test_aux_buffer_keeps_each_observation_beside_its_own_returns_logits_and_mask():
    n_iteration, num_envs, num_steps = 2, 3, 4
    buf = AuxBuffer(n_iteration, num_envs, num_steps, (1, 2, 2), n_actions=2)
    for it in range(n_iteration):
        # step-major like the rollout storage; every entry encodes (iteration, env, step) as it*50 + env*10 + step
        code = torch.tensor([[it * 50 + env * 10 + step for env in range(num_envs)] for step in range(num_steps)])
        obs = code.to(torch.uint8)[:, :, None, None, None].expand(num_steps, num_envs, 1, 2, 2)
        buf.store(it, obs, returns=code.float() / 2, valid=(code % 3 != 0))
    # pi_old as the script computes it: minibatches of whole rollouts through a "policy" whose logits read the obs
    inds = np.arange(buf.num_rollouts)
    for start in range(0, buf.num_rollouts, 2):
        rollouts = inds[start : start + 2]
        m_obs = buf.batch(rollouts, torch.device("cpu"))[0]
        pixel = m_obs[:, 0, 0, 0].float()
        buf.set_old_logits(rollouts, torch.stack([pixel, -pixel], dim=1))

    # rollout r = iteration * num_envs + env: row 4 is iteration 1 / env 1, row 2 is iteration 0 / env 2
    obs, returns, old_logits, valid = buf.batch(np.array([4, 2]), torch.device("cpu"))
    expected = torch.tensor([60, 61, 62, 63, 20, 21, 22, 23])
    assert obs.shape == (8, 1, 2, 2) and obs.dtype == torch.uint8
    assert torch.equal(obs[:, 0, 1, 1].long(), expected)
    assert torch.equal(returns, expected.float() / 2)
    assert torch.equal(old_logits, torch.stack([expected.float(), -expected.float()], dim=1))
    assert valid.tolist() == [False, True, True, False, True, False, True, True]  # code % 3 != 0


def test_aux_buffer_footprint_matches_the_formula_and_the_documented_default():
    buf = AuxBuffer(3, 2, 5, (3, 8, 8), n_actions=15)
    assert buf.nbytes() == aux_buffer_bytes(3, 2, 5, (3, 8, 8), 15) == 30 * (192 + 4 + 60 + 1)
    # defaults: 32 iterations x 64 envs x 256 steps = 524288 observations of 3x64x64 uint8, 15 actions
    default = aux_buffer_bytes(32, 64, 256, (3, 64, 64), 15)
    assert default == 524288 * (12288 + 4 + 60 + 1) == 6_476_529_664
    assert default / 2**30 == pytest.approx(6.03, abs=0.005)


def test_aux_losses_by_hand():
    # observation 0: pi_old uniform over 2 actions, pi_new = (3/4, 1/4); observation 1 is a reset step (masked)
    old_logits = torch.tensor([[0.0, 0.0], [5.0, -5.0]])
    logits = torch.tensor([[math.log(3.0), 0.0], [-5.0, 5.0]])
    aux_values, values_, returns = torch.tensor([1.0, 50.0]), torch.tensor([2.0, -50.0]), torch.tensor([3.0, 100.0])
    mask = torch.tensor([True, False])
    kl, aux_v, v = aux_losses(logits, aux_values, values_, old_logits, returns, mask)
    # KL(old || new) = 1/2 ln((1/2)/(3/4)) + 1/2 ln((1/2)/(1/4)) = 1/2 ln(4/3)
    assert kl.item() == pytest.approx(0.5 * math.log(4 / 3))
    assert aux_v.item() == pytest.approx(0.5 * (1.0 - 3.0) ** 2)
    assert v.item() == pytest.approx(0.5 * (2.0 - 3.0) ** 2)
    # gradient accumulation: chunks divided by the whole minibatch's count add up to the minibatch mean
    mask2 = torch.tensor([True, True])
    whole = aux_losses(logits, aux_values, values_, old_logits, returns, mask2)
    n = mask2.sum()
    parts = [aux_losses(logits[i : i + 1], aux_values[i : i + 1], values_[i : i + 1], old_logits[i : i + 1],
                        returns[i : i + 1], mask2[i : i + 1], n) for i in range(2)]  # fmt: skip
    for k in range(3):
        assert (parts[0][k] + parts[1][k]).item() == pytest.approx(whole[k].item())


def test_reward_normalizer_by_hand():
    norm = RewardNormalizer(num_envs=2, gamma=0.5)
    # step 1: discounted returns (2, 4), batch variance 1 -> rewards divided by 1
    out = norm(np.array([2.0, 4.0]), done=np.array([False, False]), valid=np.array([True, True]))
    np.testing.assert_allclose(out, [2.0, 4.0], rtol=1e-6)
    # step 2: env 0 ends its episode (return 0.5 * 2 + 2 = 3); env 1 is a reset step that must not count.
    # Statistics over (2, 4, 3): mean 3, variance 2/3
    out = norm(np.array([2.0, 0.0]), done=np.array([True, False]), valid=np.array([True, False]))
    np.testing.assert_allclose(out, [2.0 / math.sqrt(2 / 3), 0.0], rtol=1e-6)
    assert norm.var == pytest.approx(2 / 3) and norm.mean == pytest.approx(3.0)
    np.testing.assert_allclose(norm.ret, [0.0, 4.0])  # env 0's return restarts after its episode end
    # identical returns have variance 0: the scaled rewards are clipped to +-10
    clipped = RewardNormalizer(num_envs=2, gamma=0.5)(np.array([-5.0, -5.0]), np.zeros(2, bool), np.ones(2, bool))
    np.testing.assert_allclose(clipped, [-10.0, -10.0])


def test_env_id_resolution():
    known = ["StarpilotEasy-v0", "StarpilotHard-v0", "StarpilotExtreme-v0", "BigfishEasy-v0", "BigfishHard-v0",
             "CartPole-v1", "Pong-v5"]  # fmt: skip
    assert resolve_env_id("starpilot", "easy", known) == "StarpilotEasy-v0"
    assert resolve_env_id("bigfish", "hard", known) == "BigfishHard-v0"
    assert resolve_env_id("StarpilotExtreme-v0", "easy", known) == "StarpilotExtreme-v0"
    with pytest.raises(SystemExit, match="bigfish has no 'extreme' distribution.*easy, hard"):
        resolve_env_id("bigfish", "extreme", known)
    for bad in ("CartPole-v1", "nosuchgame"):
        with pytest.raises(SystemExit, match=f"unknown Procgen game '{bad}'"):
            resolve_env_id(bad, "easy", known)


def test_missing_qt_message_names_the_debian_package():
    try:
        try:
            raise ImportError("libQt5Core.so.5: cannot open shared object file: No such file or directory")
        except ImportError as inner:
            raise ImportError("EnvPool Procgen requires the system Qt 5 runtime on Linux.") from inner
    except ImportError as e:
        message = procgen_import_problem(e)
    assert "libqt5gui5" in message and "libQt5Core.so.5" in message


# Runs the script with envpool's compiled Procgen module failing to load as it does without Debian's Qt 5.
HIDE_QT = """
import os, runpy, sys
class NoQt:
    def find_spec(self, name, path=None, target=None):
        if name == "envpool.procgen.procgen_envpool":
            raise ImportError("libQt5Core.so.5: cannot open shared object file: No such file or directory")
sys.meta_path.insert(0, NoQt())
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # as `python script.py` does, for the runtime module beside it
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@needs_procgen
def test_missing_qt_fails_in_one_line_naming_libqt5gui5(workdir):
    proc = run_script("ppg_procgen.py", *TINY, cwd=workdir, check=False, launcher=[sys.executable, "-c", HIDE_QT])
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "libqt5gui5" in last
    assert run_dirs(workdir) == []


@needs_procgen
def test_end_to_end_policy_and_auxiliary_phase_then_saved_model_is_evaluated(workdir):
    run_script("ppg_procgen.py", *TINY, "--save-model", "--eval-episodes", "1", cwd=workdir, timeout=300)
    run_dir = single_run_dir(workdir)
    assert run_dir.name.startswith("StarpilotEasy-v0__ppg_procgen__1__")
    scalars = read_scalars(run_dir)
    for key in POLICY_KEYS + ["charts/learning_rate"]:
        assert len(scalars.get(key, [])) == 2, key  # both PPO iterations of the policy phase updated
    # SPS is measured from the end of the first iteration (the warm-up), so only the second one logs it
    assert [step for step, _ in scalars["charts/SPS"]] == [64]
    for key in AUX_KEYS:  # the auxiliary phase ran and logged once, after the policy phase (global step 64)
        assert [s for s, _ in scalars.get(key, [])] == [64], key
        assert all(math.isfinite(v) and v >= 0 for v in values(scalars, key)), key
    assert values(scalars, "losses/aux_kl_loss")[0] > 0, "the policy moved during distillation, so KL > 0"
    assert len(values(scalars, "eval/episodic_return")) == 1
    assert (run_dir / "ppg_procgen.cleanrl_model").stat().st_size > 0


@needs_procgen
def test_track_and_capture_video(workdir):
    # one env, 128 steps: with seed 1 the first episode of env 0 ends within them, so a video is written
    args = ["--num-envs", "1", "--num-steps", "128", "--n-iteration", "1", "--num-aux-rollouts", "1",
            "--e-auxiliary", "1", "--num-minibatches", "1", "--total-timesteps", "128"]  # fmt: skip
    run_script("ppg_procgen.py", *args, "--track", "--capture-video", cwd=workdir, timeout=300)
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"


@needs_procgen
def test_same_seed_gives_identical_losses(workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_script("ppg_procgen.py", *TINY, cwd=cwd, timeout=300)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: values(scalars, k) for k in POLICY_KEYS + AUX_KEYS})
    assert logged[0] == logged[1]
    assert len(logged[0]["losses/aux_kl_loss"]) == 1


# 2 envs x 16 steps, one iteration per phase, 3 phases: 3 policy-phase updates (2 minibatches of 16 each) and 3
# auxiliary phases (2 minibatches of one 16-step rollout each, so the second one sees a moved policy and KL > 0).
# The policy-phase minibatch and the auxiliary minibatch both hold 16 observations.
PARITY = [
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "1", "--num-aux-rollouts", "1",
    "--e-auxiliary", "1", "--num-minibatches", "2", "--total-timesteps", "96", "--no-progress",
]  # fmt: skip


@needs_procgen
def test_compile_logs_the_same_losses_as_the_plain_path_and_amp_stays_close(workdir):
    # Both runs build envpool with the same seed and sample their actions from torch's generator with the same
    # seed (compiled sampling falls back to eager's random ops), so they see the same observations: the losses of
    # iterations 2 and 3 are computed on frames that depend on every earlier action. Measured: the first update's
    # losses agree to within 1e-5 relative (float rounding of fused kernels), and the gap grows as training
    # amplifies it: at the third update 5e-5 on the policy loss and 1.3e-3 on old_approx_kl, 2e-3 on aux_kl_loss
    # (a KL of about 1e-4 between nearly equal policies, which float32 resolves only to about 1e-7 absolute).
    # Tolerance: 1e-2 relative + 1e-6 absolute. No episode of starpilot ends within 48 steps per env, so there
    # are no returns to compare.
    plain = assert_compile_parity(
        "ppg_procgen.py", PARITY, workdir, ["policy_step", "update", "aux_update"], rtol=1e-2, atol=1e-6,
        min_updates=3, episodes_rtol=None,
    )  # fmt: skip
    assert values(plain, "losses/aux_kl_loss")[0] > 0, "the second auxiliary minibatch sees a moved policy"

    # --amp (bf16 autocast of the forward passes, plain path) on the same budget. bf16 keeps about 3 significant
    # digits, and a changed digit in a logit can change a sampled action and from then on the whole run, so only
    # the first update of each loss is compared, within 15% relative (+1e-6): measured differences were 3.3% on the
    # policy loss, 2.5% on the value loss, 2e-6 on the entropy, 2.6-5% on the three auxiliary losses. The KL
    # estimates, clip fraction and explained variance are left out (tiny or thresholded quantities). Every loss
    # of the run must be finite, and the first policy loss must differ from the plain one, or autocast did nothing.
    cwd = workdir / "amp"
    cwd.mkdir()
    run_script("ppg_procgen.py", *PARITY, "--amp", "--no-cuda", cwd=cwd, timeout=300)
    amp = read_scalars(single_run_dir(cwd))
    for key in sorted(k for k in plain if k.startswith("losses/")):
        assert [s for s, _ in amp[key]] == [s for s, _ in plain[key]], key
        assert all(math.isfinite(v) for v in values(amp, key)), key
    for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy") + tuple(AUX_KEYS):
        a, b = values(plain, key)[0], values(amp, key)[0]
        assert abs(a - b) <= 1e-6 + 0.15 * abs(a), f"{key}: plain {a}, --amp {b}"
    assert values(amp, "losses/policy_loss")[0] != values(plain, "losses/policy_loss")[0]


@needs_procgen
@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "nosuchgame"], "nosuchgame"),
        (["--env-id", "coinrun", "--distribution-mode", "extreme"], "extreme"),
        (["--num-aux-rollouts", "3"], "num-aux-rollouts"),
        (["--total-timesteps", "100000"], "one phase"),
        (["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    assert_bad_input_rejected("ppg_procgen.py", args, message, cwd=workdir)
