"""Drafters: where a tree's draft distributions come from (any drafter feeds any tree policy).

The contract (:mod:`~dynatree_core.drafters.protocol`, docs/drafters.md): ``start(prompt, ctx)`` once per
sequence with the run's :class:`DraftContext`, ``propose(tree, ids, level)`` once per tree level (device
tensors in, a :class:`Proposal` out: one batched forward, no host round trip), ``commit(...)`` once per
iteration. Shipped: :class:`ModelDrafter` (an independent draft LM), :class:`FeatureDrafter` (a head on the
target's hidden states), :class:`LookupDrafter` (prompt lookup) and :class:`MixDrafter` (lookup mixed into a
model draft); :func:`make_drafter` picks one for a ``ModelPair.draft``. Imports the runtime and the policy,
never a pair or the engine.
"""

from __future__ import annotations

from dynatree_core.drafters.factory import drafter_kind, make_drafter
from dynatree_core.drafters.feature_drafter import FeatureDrafter
from dynatree_core.drafters.lookup import LookupDrafter
from dynatree_core.drafters.mix import LookupMix, MixDrafter, mix_topk
from dynatree_core.drafters.model_drafter import ModelDrafter
from dynatree_core.drafters.protocol import CHAIN_ROWS, DRAFTER_KINDS, DraftContext, Drafter, Proposal, level_visibility
from dynatree_core.policy.lookup import PromptLookup

__all__ = ["CHAIN_ROWS", "DRAFTER_KINDS", "DraftContext", "Drafter", "Proposal", "FeatureDrafter", "LookupDrafter",
           "LookupMix", "MixDrafter", "ModelDrafter", "PromptLookup", "drafter_kind", "level_visibility", "make_drafter",
           "mix_topk"]
