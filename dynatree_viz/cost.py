"""A simple cost model for the parameter explorer: what would a tree of this shape cost?

One iteration costs one batched draft forward per expanded tree level plus one target forward
over all tree nodes::

    cost(tree) = draft_call_s * draft_calls + verify_base_s + verify_per_node_s * (nodes + 1)
    expected throughput = (E[ℓ] + 1) / cost

where E[ℓ] = Σ_u p(u) over drafted nodes is the expected accepted length *if the draft's own
probabilities were calibrated* (each node is accepted iff its whole path is, with probability
p(u)). The coefficients are fitted to a trace's recorded timings (least squares over
iterations) or default to unit-free values (draft call = 1, verify = 4 + 0.05 per node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynatree_core.records.trace import Trace
from dynatree_core.policy.tree import DraftTree


@dataclass(frozen=True)
class CostModel:
    draft_call_s: float = 1.0
    verify_base_s: float = 4.0
    verify_per_node_s: float = 0.05
    unit: str = "units"

    @classmethod
    def fit(cls, trace: Trace | None) -> "CostModel":
        """Fit to recorded ``timings`` ("draft", "verify"); the default model if too few."""
        its = [r for r in (trace.iterations if trace is not None else [])
               if "draft" in r.timings and "verify" in r.timings]
        if len(its) < 2:
            return cls()
        calls = np.array([max(r.tree.draft_calls, 0) for r in its], dtype=float)
        draft = np.array([r.timings["draft"] for r in its], dtype=float)
        per_call = float(draft.sum() / calls.sum()) if calls.sum() > 0 else 0.0
        nodes = np.array([len(r.tree) for r in its], dtype=float)
        verify = np.array([r.timings["verify"] for r in its], dtype=float)
        if np.ptp(nodes) > 0:
            slope, base = np.polyfit(nodes, verify, 1)
            slope, base = max(float(slope), 0.0), max(float(base), 0.0)
        else:
            slope, base = 0.0, float(verify.mean())
        return cls(draft_call_s=per_call, verify_base_s=base, verify_per_node_s=slope, unit="s")

    def cost(self, tree: DraftTree) -> float:
        return (self.draft_call_s * tree.draft_calls + self.verify_base_s
                + self.verify_per_node_s * len(tree))


def expected_accepted(tree: DraftTree) -> float:
    """E[ℓ] = Σ_u p(u) over drafted nodes (under the draft's own probabilities)."""
    return float(sum(math.exp(x) for x in tree.cum_logps[1:]))
