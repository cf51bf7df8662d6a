"""Which drafter a ``ModelPair.draft`` gets: :func:`make_drafter` and its kind name."""

from __future__ import annotations

from typing import Any

from dynatree_core.drafters.feature_draft import FeatureDraftModel
from dynatree_core.drafters.feature_drafter import FeatureDrafter
from dynatree_core.drafters.lookup import LookupDrafter
from dynatree_core.drafters.mix import LookupMix, MixDrafter
from dynatree_core.drafters.model_drafter import ModelDrafter
from dynatree_core.drafters.protocol import Drafter
from dynatree_core.policy.lookup import PromptLookup


def drafter_kind(draft: Any, lookup: LookupMix | None = None) -> str | None:
    """The drafter kind a ``ModelPair.draft`` object gives (None for no draft), with ``+lookup``
    when prompt lookup is mixed in (``ModelPair.lookup``)."""
    if draft is None:
        return None
    if isinstance(draft, Drafter):
        return draft.kind or type(draft).__name__
    if isinstance(draft, PromptLookup):
        return "lookup"
    kind = "feature" if isinstance(draft, FeatureDraftModel) else "model"
    return kind + ("+lookup" if lookup is not None else "")


def make_drafter(draft: Any, lookup: LookupMix | None = None) -> Drafter:
    """The drafter for a ``ModelPair.draft``: a feature draft, a :class:`PromptLookup`, an
    independent causal LM, or a :class:`Drafter` of one's own (returned as it is); with ``lookup`` (a :class:`LookupMix`), prompt lookup mixed into the
    model draft's distributions. What a run gives it (top-k, clock, sampler, fast path) comes at
    :meth:`~dynatree_core.drafters.protocol.Drafter.start`."""
    if isinstance(draft, Drafter):  # one of one's own: the run starts it (``start`` forgets any earlier run)
        if lookup is not None:
            raise TypeError("LookupMix mixes prompt lookup into a model draft, not into a Drafter of one's own")
        return draft
    if isinstance(draft, FeatureDraftModel):
        base: Drafter = FeatureDrafter(draft)
    elif isinstance(draft, PromptLookup):
        base = LookupDrafter(draft)
    else:
        base = ModelDrafter(draft)
    return base if lookup is None else MixDrafter(base, lookup)
