"""Picking a `match`-verified node whose draw a student can see.

The default node of :func:`dynatree_viz.sampling_view` is where the accepted path ended. That is often
a copied lookup-tail node with no q, whose drawn token can have p = 2.5e-5: a bar no one sees, and a
draw that reads as Gumbel-max failing. :func:`match_example` picks a node where the draft ran (q is
known for the tokens shown), the drawn token's p is visible, and sampling shows: preferably the draw is
not p's most probable token and it landed on a drafted child, so the walk went on.
"""

from __future__ import annotations

from dynatree_core.records.trace import Trace

from dynatree_viz.views.sampling import SamplingPanel, sampling_data


def match_example(trace: Trace, min_p: float = 0.05) -> SamplingPanel | None:
    """A node of a `match` trace where q is known for at least two of the tokens shown and the drawn
    token has q known and p ≥ ``min_p``. Among those, first the draws that are not p's most probable
    token (a draw, not an argmax), then those the walk followed into a drafted child, then the
    largest p of the drawn token. None if no node qualifies."""
    if not 0.0 < min_p < 1.0:
        raise ValueError(f"min_p must be in (0, 1), got {min_p}")
    fits = []
    for i, rec in enumerate(trace.iterations):
        if not rec.sampling or "coins" in rec.sampling:
            continue  # greedy, or verified by rejection
        for u in [0] + list(rec.accepted_path):
            panel = sampling_data(trace, i, node=u)
            drawn = next((r for r in panel.rows if r.token == panel.drawn), None)
            with_q = [r for r in panel.rows if r.q is not None and r.p is not None]
            if drawn is None or drawn.q is None or (drawn.p or 0.0) < min_p or len(with_q) < 2:
                continue
            top = max(panel.rows, key=lambda r: r.p or 0.0)
            fits.append(((top.token != panel.drawn, panel.followed is not None, drawn.p), panel))
    return max(fits, key=lambda f: f[0])[1] if fits else None


__all__ = ["match_example"]
