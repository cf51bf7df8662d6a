"""What the parameter explorer starts at and prices trees with: the setting a recorded iteration
was grown with (:func:`config_for_record`), the cost model fitted to a trace's timings
(:func:`trace_cost_model`, :data:`DEFAULT_COST` without timings) and the expected accepted length."""

from __future__ import annotations

import math

from dynatree_core.policy.config import DynaTreeConfig, config_from_dict
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.policy.knobs import knob
from dynatree_core.policy.tree import DraftTree
from dynatree_core.records.trace import IterationRecord, Trace


def config_for_record(trace: Trace | None, rec: IterationRecord | None) -> DynaTreeConfig:
    """The DynaTreeConfig that reproduces the rule ``rec`` was grown with (as far as possible).

    DynaTree traces: the trace's config with the adapter's D0 / τ_h of that iteration. Fixed-tree
    and linear traces map to the fixed backbone (``dynamic_breadth=dynamic_depth=False``).
    Anything else: the paper defaults.
    """
    cfg_dict = dict((trace.config if trace is not None else None) or {})
    method = cfg_dict.get("method", trace.method if trace is not None else None)
    try:
        cfg = config_from_dict(cfg_dict) if method else None
    except Exception:
        cfg = None
    if isinstance(cfg, DynaTreeConfig):
        h = (rec.history_before if rec is not None else None) or {}
        if cfg.adaptive and h:
            d0 = int(h.get("d0_effective", cfg.d0))
            return cfg.replace(d0=min(max(d0, 1), cfg.d_max - 1), tau_h=float(h.get("tau_h", cfg.tau_h)))
        return cfg
    if method in ("fixed_tree", "linear") and cfg is not None:
        rule = cfg.growth_rule()
        return DynaTreeConfig(d0=rule.d0, d_max=rule.d0 + 1, b_min=rule.b_mid, b_mid=rule.b_mid,
                              b_max=rule.b_mid, tau=rule.tau, n_max=rule.n_max,
                              dynamic_breadth=False, dynamic_depth=False,
                              lookup_tail=cfg.lookup_tail, tail_n_max=cfg.tail_n_max)
    return DynaTreeConfig()


#: the explorer's cost model when it has no timings to fit: illustrative seconds, not a measurement
#: (a draft level 10 ms, c(n) = 40 + 0.5 n ms), over every tree the sliders can grow
DEFAULT_COST = CostModel(verify_s=tuple(0.040 + 0.0005 * n for n in range(1, int(knob("n_max").hi) + 2)),
                         draft_s=0.010, meta={"source": "illustrative default (no timings given)"})


def trace_cost_model(trace: Trace | None) -> CostModel:
    """The core :class:`CostModel` fitted to a trace's recorded timings
    (:meth:`CostModel.fit`); :data:`DEFAULT_COST` when fewer than two iterations were timed."""
    samples = [(len(r.tree), r.tree.draft_calls, r.timings)
               for r in (trace.iterations if trace is not None else [])
               if "draft" in r.timings and "verify" in r.timings]
    return CostModel.fit(samples) if len(samples) >= 2 else DEFAULT_COST


def expected_accepted(tree: DraftTree) -> float:
    """E[ℓ] = Σ_u p(u) over drafted nodes: the expected accepted length if the draft's own
    probabilities were calibrated (a node is accepted iff its whole path is, with probability p(u))."""
    return math.fsum(math.exp(x) for x in tree.cum_logps[1:])


def cost_model_text(cm: CostModel) -> str:
    """Where the cost row's milliseconds come from (a fit to a trace's timings, a measured curve or
    the illustrative default) and what the model charges per iteration."""
    source = cm.meta.get("source") or (f"measured on {cm.device}" if cm.device else "given")
    top = len(cm.verify_s)
    return (f"{source}; per iteration: {cm.draft_s * 1e3:.1f} ms per draft level + c(n) from "
            f"{cm.verify(1) * 1e3:.1f} ms (n = 1) to {cm.verify(top) * 1e3:.1f} ms (n = {top})"
            + (f" + {cm.iteration_s * 1e3:.1f} ms besides" if cm.iteration_s else ""))

