"""cleanrl/c51.py: the categorical projection by hand, and against a loop over atoms (Bellemare et al. 2017).
Its epsilon schedule is checked in tests/test_dqn.py, its runs in the behaviour files."""

import numpy as np
import torch

from cleanrl.c51 import categorical_projection


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


def test_projection_stays_on_the_support_where_delta_z_rounds_down():
    # 47 atoms on [-7, 7]: float32 rounds delta_z down, so v_max's b = 14 / delta_z is 46.000004, whose ceil is 47,
    # one past the last atom (on a GPU 51 atoms on [-10, 10] do the same: CUDA divides by a scalar through its
    # reciprocal). A reward above v_max puts all the mass on the last atom; below v_min, on the first.
    from cleanrl.c51_atari import categorical_projection as atari_projection

    atoms = torch.linspace(-7, 7, 47)
    assert ((atoms[-1] - atoms[0]) / ((atoms[-1] - atoms[0]) / 46)).ceil() == 47  # the rounding this is about
    next_pmfs = torch.softmax(torch.randn(3, 47, generator=torch.Generator().manual_seed(0)), dim=1)
    rewards, terminations = torch.tensor([9.0, -9.0, 7.0]), torch.tensor([1.0, 1.0, 0.0])
    expected = torch.zeros(3, 47)
    expected[0, -1] = expected[1, 0] = 1.0
    for projection in (categorical_projection, atari_projection):
        m = projection(next_pmfs, rewards, terminations, 0.99, atoms)
        torch.testing.assert_close(m[:2], expected[:2])
        torch.testing.assert_close(m.sum(dim=1), torch.ones(3))
        # r = v_max, not terminal: every Tz = 7 + 0.99 z >= v_max for z >= 0, so atom 46 gets at least their mass
        assert m[2, -1] >= next_pmfs[2, 23:].sum() - 1e-6
