"""Pearson's chi-square against an exact distribution, for the statistical tests of sampling
(tests/test_sampling_stats.py, tests/test_outside_references.py)."""

from __future__ import annotations

import math
from typing import Mapping

#: alpha of the statistical tests and its standard normal quantile (one-sided)
ALPHA, Z = 1e-4, 3.719


def chi2_critical(dof: int) -> float:
    """The chi-square quantile 1 - ALPHA (Wilson-Hilferty: accurate to < 1% from a few degrees of freedom)."""
    return dof * (1 - 2 / (9 * dof) + Z * math.sqrt(2 / (9 * dof))) ** 3


def chi2(counts: Mapping[tuple[int, ...], int], runs: int,
         expected: Mapping[tuple[int, ...], float]) -> tuple[float, int]:
    """Pearson's statistic of ``counts`` (``runs`` draws) against the exact distribution ``expected``
    over the sequences (those expected < 5 times pooled into one cell) and its degrees of freedom.
    A sequence drawn that ``expected`` gives no probability at all (or does not list) makes the
    statistic infinite: no sampling noise explains it."""
    cells, pooled_obs, pooled_exp = [], 0, 0.0
    for seq, p in expected.items():
        if runs * p >= 5:
            cells.append((counts.get(seq, 0), runs * p))
        else:
            pooled_obs, pooled_exp = pooled_obs + counts.get(seq, 0), pooled_exp + runs * p
    impossible = sum(n for seq, n in counts.items() if expected.get(seq, 0.0) == 0.0)
    if impossible:
        return math.inf, max(len(cells) - 1, 1)
    if pooled_exp > 0:
        cells.append((pooled_obs, pooled_exp))
    return sum((o - e) ** 2 / e for o, e in cells), len(cells) - 1
