"""A recording made for replay (``generate(..., trace="replay")``): each iteration drafts the
envelope of every tree a knob setting inside the offline page's ranges can grow, the target
verifies all of it in the same forward, and the run commits DynaTree's own accepted path at its
configured setting, so the output stays exact while any setting can later be replayed strictly.

The envelope (:func:`~dynatree_core.policy.replay.envelope_rule`) is the widest setting's tree
grown with no budget: N_max only cuts a tree, and it spends its budget level by level by path
probability, so a narrow setting can reach nodes the widest budgeted tree never pays for; without
a budget the widest gates hold them all. Its size is bounded by the page's smallest ρ_stop (at most
1 / ρ_stop nodes per level are expanded) times its largest breadth times its deepest D_max.
"""

from __future__ import annotations

from typing import Any

from dynatree_core.policy.config import DecoderConfig, DynaTreeConfig, GrowthRule
from dynatree_core.policy.knobs import check_in_page_ranges, page_ranges, slider_knobs
from dynatree_core.policy.replay import ENVELOPE_N_MAX, committed_path, envelope_rule
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.runtime.tree.tree import Selection
from dynatree_core.runtime.tree.to_host import host_tree


class ReplayRecording:
    """The envelope each iteration drafts and the own path it commits; :attr:`info` is what the
    trace keeps (``Trace.replay``): the ranges, each iteration's D_max cap and envelope size."""

    def __init__(self, config: DecoderConfig, sampling: SamplingConfig, runtime: str):
        if not isinstance(config, DynaTreeConfig):
            raise ValueError(f"trace='replay' records DynaTree's knobs: method must be 'dynatree', got {config.method!r}")
        if config.lookup_tail or config.cost_aware:
            raise ValueError("trace='replay' needs lookup_tail=0 and cost_aware=False (the page regrows the "
                             f"paper's rule), got lookup_tail={config.lookup_tail}, cost_aware={config.cost_aware}")
        if not (config.dynamic_breadth and config.dynamic_depth):
            raise ValueError("trace='replay' needs dynamic_breadth=dynamic_depth=True (the page's rule)")
        if not sampling.greedy and sampling.rule != "match":
            raise ValueError(f"trace='replay' needs greedy decoding or verify='match', got verify={sampling.rule!r}")
        if runtime not in ("auto", "eager"):
            raise ValueError(f"trace='replay' runs eagerly (the envelope has no fixed shape), got runtime={runtime!r}")
        self.ranges = page_ranges()
        check_in_page_ranges({k.name: getattr(config, k.name) for k in slider_knobs()}, self.ranges)
        self.info: dict[str, Any] = {"ranges": {k: list(v) for k, v in self.ranges.items()},
                                     "d_max_cap": [], "nodes": []}

    def envelope(self, remaining: int) -> GrowthRule:
        """This iteration's envelope (D_max capped at the tokens still wanted, less the bonus)."""
        self.info["d_max_cap"].append(remaining - 1)
        return envelope_rule(remaining - 1, self.ranges)

    def select(self, sel: Selection, draft_calls: int, rule: GrowthRule) -> tuple[Selection, int]:
        """Commit ``rule``'s own accepted path inside the verified envelope; returns the selection
        and the own tree's depth (what the history adapter reads)."""
        env = host_tree(sel.arrays, draft_calls, pruned=False)
        if "n_max" in env.stop_reasons:
            raise RuntimeError(f"the replay envelope reached {ENVELOPE_N_MAX} nodes: narrow the page ranges "
                               "(dynatree_core.policy.knobs: a larger smallest rho_stop, a smaller B or D_max)")
        path, bonus, own = committed_path(env, rule, sel.arrays["argmax"].tolist())
        self.info["nodes"].append(len(env) - 1)
        return Selection(path, bonus, sel.arrays), own.depth
