"""Picking the rejection-sampling node that shows the rule honestly, and the average beside it.

One node's coin is a single draw: a node where a candidate with p/q = 0.05 was accepted by a coin of
0.04 is true but a fluke, and teaches the opposite of the rule. :func:`rejection_example` picks a
node whose first candidate was tested against a known min(1, p/q) < 1 and whose coin landed
clearly on its side of it; :func:`rejection_counts` gives what happened over every node, so a
notebook can print the average next to the example.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynatree_core.records.trace import Trace

from dynatree_viz.views.sampling import SamplingPanel, first_threshold, sampling_data


@dataclass
class RejectionCounts:
    """Over the nodes of a rejection-verified trace that had candidates: where the draw came from."""

    nodes: int
    first: int      # the first candidate accepted
    sibling: int    # a later sibling accepted (tested against the residual)
    residual: int   # every candidate rejected: drawn from the residual

    @property
    def first_rate(self) -> float:
        return self.first / self.nodes if self.nodes else float("nan")


def _panels(trace: Trace) -> list[SamplingPanel]:
    return [sampling_data(trace, i, node=u) for i, rec in enumerate(trace.iterations)
            for u in [0] + list(rec.accepted_path) if rec.sampling and "coins" in rec.sampling]


def rejection_counts(trace: Trace) -> RejectionCounts:
    """How often the first candidate, a later sibling, or the residual supplied the token."""
    ranks = [p.accepted_rank for p in _panels(trace) if p.accepted_rank is not None and p.accepted_rank != -2]
    return RejectionCounts(len(ranks), sum(r == 0 for r in ranks), sum(r > 0 for r in ranks),
                           sum(r == -1 for r in ranks))


def rejection_example(trace: Trace, margin: float = 0.1) -> SamplingPanel | None:
    """A node whose first candidate was accepted with min(1, p/q) < 1 and a coin at least
    ``margin`` below it (the rule, not luck, decided); among those the largest threshold. None if
    no node qualifies."""
    fits = []
    for panel in _panels(trace):
        t = first_threshold(panel)
        if panel.accepted_rank == 0 and t is not None and t < 1.0 and panel.coins[0] <= t - margin:
            fits.append((t, panel))
    return max(fits, key=lambda f: f[0])[1] if fits else None


__all__ = ["RejectionCounts", "rejection_counts", "rejection_example"]
