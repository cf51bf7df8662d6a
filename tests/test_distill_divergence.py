"""The divergence measurement of docs/bench/2026-11-28-shared-noise (issue 39, part 3): the closed-form
coupled agreement in O(V log V) against the reference, and the per-position numbers on cases with a
known answer (a draft equal to its target, a sparse head)."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def test_coupled_agreement_rows_is_the_reference_closed_form():
    from dynatree_core.distill.divergence import coupled_agreement_rows
    from dynatree_core.policy.sampling import coupled_agreement, total_variation

    rng = np.random.default_rng(0)
    for V in (1, 2, 7, 40):
        for case in range(12):
            p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
            if case % 3 == 1:  # a sparse head: q = 0 outside it
                q[rng.integers(V, size=V // 3 + 1)] = 0.0
                q = q / q.sum() if q.sum() > 0 else np.full(V, 1.0 / V)
            if case % 4 == 2:  # ties: q proportional to p on part of the vocabulary
                q = p.copy()
            got = float(coupled_agreement_rows(torch.tensor(p)[None], torch.tensor(q)[None])[0])
            assert got == pytest.approx(coupled_agreement(p, q), abs=1e-12)
            tv = total_variation(p, q)
            assert got >= (1 - tv) / (1 + tv) - 1e-12


def test_position_stats_of_a_draft_equal_to_its_target():
    from dynatree_core.distill.divergence import PairScores, position_stats

    g = torch.Generator().manual_seed(1)
    t = torch.randn(6, 30, generator=g) * 2
    same = position_stats(PairScores(t, t.clone(), None, list(range(6))), 0.7)
    assert torch.allclose(same["tv"], torch.zeros(6, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(same["coupled"], torch.ones(6, dtype=torch.float64)) and bool((same["hit_coupled1"] == 1).all())
    # a sparse head (compact scores + their ids): q is 0 outside it, so TV >= p's mass there
    ids = torch.arange(0, 30, 2)
    sparse = position_stats(PairScores(t, t[:, ids], ids, list(range(6))), 1.0)
    p_out = torch.softmax(t.double(), -1)[:, 1::2].sum(-1)
    assert torch.allclose(sparse["tv"], p_out, atol=1e-6)
    greedy = position_stats(PairScores(t, t[:, ids], ids, list(range(6))), 0.0)
    assert torch.equal(greedy["p_top1"], (t.argmax(-1) % 2 == 0).double())
