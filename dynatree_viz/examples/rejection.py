"""Picking the rejection-sampling nodes that show the rule honestly, and the average beside them.

One node's coin is a single draw: a node where a candidate with p/q = 0.05 was accepted by a coin of
0.04 is true but a fluke, and teaches the opposite of the rule. :func:`rejection_example` picks a
node of one of three cases where every coin landed clearly on its side of its threshold: ``"first"``,
the first candidate accepted with min(1, p/q) < 1; ``"sibling"``, a candidate rejected and a later
sibling accepted against the residual; ``"residual"``, every candidate rejected and the token drawn
from the last residual. :func:`rejection_counts` gives what happened over every node, so a notebook
can print the average next to the example.
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


#: the cases :func:`rejection_example` picks
CASES = ("first", "sibling", "residual")


def rejection_example(trace: Trace, margin: float = 0.1, case: str = "first") -> SamplingPanel | None:
    """A node of ``case`` (see the module docstring) where every tested candidate's coin lay at least
    ``margin`` from its threshold min(1, p_i/q_i) (the rule, not luck, decided). ``"first"``: among
    those the largest threshold under 1; ``"sibling"`` and ``"residual"`` (nodes whose steps the trace
    recorded): ``"sibling"`` one rejection before the accepted sibling where there is one,
    ``"residual"`` two or three candidates rejected where there are such (steps to see, not a wall of
    panels), then the largest smallest margin. None if no node qualifies."""
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    fits = []
    for panel in _panels(trace):
        rank = panel.accepted_rank
        tested = (rank + 1 if rank >= 0 else sum(t is not None for t in panel.thresholds)) if rank != -2 else 0
        gaps = [abs(c - t) for c, t in zip(panel.coins[:tested], panel.thresholds[:tested]) if t is not None]
        if tested == 0 or len(gaps) < tested or min(gaps) < margin:
            continue
        if case == "first" and rank == 0:
            t = first_threshold(panel) if panel.thresholds[0] is None else panel.thresholds[0]
            if t is not None and t < 1.0:
                fits.append(((t,), panel))
        elif case == "sibling" and rank >= 1 and _stepped(trace, panel):
            fits.append(((rank == 1, min(gaps)), panel))
        elif case == "residual" and rank == -1 and _stepped(trace, panel):
            fits.append(((2 <= tested <= 3, min(gaps)), panel))  # steps to see, not a wall of panels
    return max(fits, key=lambda f: f[0])[1] if fits else None


def _stepped(trace: Trace, panel: SamplingPanel) -> bool:
    """Whether the trace recorded the node's steps (p_i and q_i before each candidate)."""
    steps = trace.iterations[panel.iteration].sampling.get("rejection_steps")
    return bool(steps) and steps[panel.node] is not None


__all__ = ["CASES", "RejectionCounts", "rejection_counts", "rejection_example"]
