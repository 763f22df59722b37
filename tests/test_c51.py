"""cleanrl/c51.py: the categorical projection by hand, end-to-end runs, determinism, bad input, learning."""

import numpy as np
import pytest
import torch

from cleanrl.c51 import categorical_projection
from tests.helpers import (
    assert_bad_input_rejected,
    assert_compile_parity,
    read_scalars,
    run_script,
    single_run_dir,
    values,
)

# 2000 steps, learning from step 501, a gradient step every 10, a target update every 500 steps, losses logged
# every 100 steps: gradient steps at 510..2000 (150), target updates at 1000, 1500, 2000.
E2E = ["--total-timesteps", "2000", "--learning-starts", "500", "--target-network-frequency", "500", "--batch-size", "32"]
# The learning test's budget: 150k steps, epsilon 1 -> 0.05 over the first 30k, learning from step 5001 with a
# gradient step every 4 steps, a 50k-transition memory and learning rate 1e-3 (the other flags are the defaults).
# Seed 1 on this machine: mean 500.0 over the last 20 episodes (learning rate 2.5e-4 gave 444.8; 120k steps
# with a 10k memory, 341.9).
LEARN = [
    "--total-timesteps", "150000", "--exploration-fraction", "0.2", "--learning-starts", "5000",
    "--train-frequency", "4", "--buffer-size", "50000", "--learning-rate", "1e-3",
]


def test_projection_by_hand_between_and_outside_the_support():
    atoms = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])  # v_min -2, v_max 2, delta_z 1
    p = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15])
    next_pmfs = p.repeat(4, 1)
    rewards = torch.tensor([1.0, 1.5, -2.5, 0.25])
    terminations = torch.tensor([0.0, 0.0, 1.0, 1.0])
    gammas = [0.5, 0.9]
    # row 0, r=1, gamma=0.5: Tz = 1 + 0.5 z = [0, 0.5, 1, 1.5, 2] -> b = [2, 2.5, 3, 3.5, 4]
    #   atom 0 (b=2, exactly on an atom): all 0.1 to atom 2; b=2.5 splits 0.2 evenly between atoms 2 and 3;
    #   b=3: 0.3 to atom 3; b=3.5: 0.25 split between 3 and 4; b=4: 0.15 to atom 4
    #   m = [0, 0, 0.1 + 0.1, 0.1 + 0.3 + 0.125, 0.125 + 0.15]
    row0 = categorical_projection(next_pmfs[:1], rewards[:1], terminations[:1], 0.5, atoms)
    torch.testing.assert_close(row0, torch.tensor([[0.0, 0.0, 0.2, 0.525, 0.275]]))
    # rows 1-3 with gamma=0.9
    # row 1, r=1.5: Tz = [-0.3, 0.6, 1.5, 2.4, 3.3], the last two clipped to 2 -> b = [1.7, 2.6, 3.5, 4, 4]
    #   b=1.7: 0.1 * 0.3 = 0.03 to atom 1, 0.07 to atom 2; b=2.6: 0.2 * 0.4 = 0.08 to atom 2, 0.12 to atom 3;
    #   b=3.5: 0.15 to atoms 3 and 4; b=4: 0.25 + 0.15 to atom 4
    #   m = [0, 0.03, 0.15, 0.27, 0.55]
    # row 2, terminal, r=-2.5: every Tz = -2.5, clipped to v_min: all mass on atom 0
    # row 3, terminal, r=0.25: b = 2.25 for every atom: 0.75 to atom 2, 0.25 to atom 3
    rows = categorical_projection(next_pmfs[1:], rewards[1:], terminations[1:], gammas[1], atoms)
    expected = torch.tensor([[0.0, 0.03, 0.15, 0.27, 0.55], [1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.75, 0.25, 0.0]])
    torch.testing.assert_close(rows, expected)


def test_projection_keeps_mass_and_matches_a_loop_over_atoms():
    torch.manual_seed(0)
    atoms = torch.linspace(-10, 10, 51)
    next_pmfs = torch.softmax(torch.randn(64, 51), dim=1)
    rewards = torch.randn(64) * 3
    terminations = (torch.rand(64) < 0.3).float()
    m = categorical_projection(next_pmfs, rewards, terminations, 0.99, atoms)
    torch.testing.assert_close(m.sum(dim=1), torch.ones(64))
    # Algorithm 1 of Bellemare et al. 2017, one atom at a time
    expected = torch.zeros(64, 51, dtype=torch.float64)
    for i in range(64):
        for j in range(51):
            tz = float(rewards[i]) + (1 - float(terminations[i])) * 0.99 * float(atoms[j])
            b = (min(max(tz, -10.0), 10.0) + 10.0) / 0.4
            lo, up = int(np.floor(b)), int(np.ceil(b))
            if lo == up:
                expected[i, lo] += float(next_pmfs[i, j])
            else:
                expected[i, lo] += float(next_pmfs[i, j]) * (up - b)
                expected[i, up] += float(next_pmfs[i, j]) * (b - lo)
    torch.testing.assert_close(m, expected.float(), atol=1e-5, rtol=1e-4)


def test_end_to_end_updates_the_network_and_the_target(workdir):
    run_script("c51.py", *E2E, "--save-model", "--eval-episodes", "2", "--track", "--capture-video", cwd=workdir)
    run_dir = single_run_dir(workdir)
    scalars = read_scalars(run_dir)
    # losses are logged at the gradient steps on multiples of 100 after learning_starts: 600, 700, ..., 2000
    assert [s for s, _ in scalars["losses/loss"]] == list(range(600, 2001, 100))
    assert len(values(scalars, "losses/q_values")) == 15 and len(values(scalars, "charts/SPS")) == 15
    assert scalars["charts/target_updates"] == [(1000, 1.0), (1500, 2.0), (2000, 3.0)]
    assert values(scalars, "charts/episodic_return") and values(scalars, "charts/episodic_length")
    eps = values(scalars, "charts/epsilon")
    assert eps == sorted(eps, reverse=True) and 0.05 <= eps[-1] < 1.0
    assert len(values(scalars, "eval/episodic_return")) == 2
    assert (run_dir / "c51.cleanrl_model").stat().st_size > 0
    assert list((workdir / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert list((workdir / "videos").rglob("*.mp4")), "no video was written"


def test_same_seed_gives_identical_losses(workdir):
    logged = []
    for i in range(2):
        cwd = workdir / f"run{i}"
        cwd.mkdir()
        run_script("c51.py", "--total-timesteps", "1000", "--learning-starts", "500", "--num-envs", "2", "--train-frequency", "2", cwd=cwd)
        scalars = read_scalars(single_run_dir(cwd))
        logged.append({k: values(scalars, k) for k in ("losses/loss", "losses/q_values", "charts/episodic_return")})
    assert logged[0] == logged[1]
    assert len(logged[0]["losses/loss"]) == 5


def test_compile_logs_the_same_losses_as_the_plain_path(workdir):
    # 500 steps, learning from step 201: 30 gradient steps of batch 128, losses logged at 300, 400, 500, a target
    # copy at 500; CartPole episodes end every ~20 steps, so both runs must also act alike. Measured: compiled and
    # plain losses agree to about 1e-6 relative (float rounding of fused kernels); the tolerance leaves room.
    assert_compile_parity(
        "c51.py", ["--total-timesteps", "500", "--learning-starts", "200"], workdir, ["policy_step", "update"],
        rtol=1e-4, atol=1e-5, min_updates=3,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "Pendulum-v1"], "Discrete"),
        (["--learning-starts", "600", "--total-timesteps", "600"], "learning-starts"),
        (["--v-min", "10", "--v-max", "-10"], "v-min"),
        (["--n-atoms", "1"], "n-atoms"),
        (["--cudagraphs", "--no-cuda"], "--cudagraphs needs a CUDA device"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_run_directory(workdir, args, message):
    assert_bad_input_rejected("c51.py", args, message, cwd=workdir)


@pytest.mark.slow
def test_learns_cartpole(workdir):
    run_script("c51.py", *LEARN, cwd=workdir, timeout=1800)
    returns = values(read_scalars(single_run_dir(workdir)), "charts/episodic_return")
    assert np.mean(returns[-20:]) >= 400, returns[-20:]
