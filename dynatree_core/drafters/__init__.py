"""Drafters: where the draft distributions of a tree come from (any drafter feeds any tree policy).

The decode loop asks a :class:`Drafter` for the draft's top-k after a whole tree level at once
(:meth:`Drafter.propose`, called by :meth:`~dynatree_core.device_tree.DeviceTree.grow`) and
tells it what was committed (:meth:`Drafter.commit`). Everything stays on the model's device:
``propose`` gets the level's node ids as a tensor and answers with top-k tensors, so a level
costs one batched draft forward and no host round trip (the tree counts its syncs: at most one per
level). A level that continues a chain (one node, after levels of one node: always so for linear
drafting) is fed with the model's default causal mask and next position, with no tree mask to
build. How the distributions are made is the drafter's business; the tree policy (breadth,
depth, pruning, budget) never changes with it.

Shipped drafters:

* :class:`ModelDrafter` - an independent small causal LM with its own KV cache (the paper's
  setting; the reproduction path).
* :class:`FeatureDrafter` - a small head that reads the target's final hidden states
  (:mod:`dynatree_core.feature_draft`, the EAGLE idea). It sets ``needs_target_hidden``: the
  engine then takes the hidden states of the root and the accepted path from the verification
  forward it runs anyway (no extra target forward) and hands them to :meth:`Drafter.commit`.

Both keep committed tokens they have not consumed yet as *pending*; the first level of the next
tree feeds them (the root last) as a causal chain, later levels feed one tree level per forward
under the tree mask built by :func:`level_visibility` - the one place for per-level draft masks
and positions (built on the device from the tree's ancestor matrix).

* :class:`LookupDrafter` - model-free prompt lookup (:class:`PromptLookup`: the tokens that followed
  earlier occurrences of the context's last n-gram), also level-batched on the device.
* :class:`MixDrafter` - a model drafter with prompt lookup mixed into its distributions
  (:class:`LookupMix`, ``ModelPair(..., lookup=LookupMix())``): where the text repeats itself the
  lookup's followers gain weight, elsewhere the draft decides; no forward added.

Modules: ``protocol`` (:class:`Drafter`, :func:`level_visibility`), ``model_drafter``,
``feature_drafter``, ``lookup``, ``mix``, ``factory`` (:func:`make_drafter`), and the draft networks
``draft_model`` (the independent 2-layer draft) and ``feature_draft`` (the feature draft). The
n-gram matching on the device is :mod:`dynatree_core.runtime.ngram`; :class:`PromptLookup`'s settings
live in :mod:`dynatree_core.policy.lookup` (torch-free) and are re-exported here.

Imports the runtime (device ops, plumbing) and the policy; never a pair or the engine.
"""

from __future__ import annotations

from dynatree_core.drafters.factory import drafter_kind, make_drafter
from dynatree_core.drafters.feature_drafter import FeatureDrafter
from dynatree_core.drafters.lookup import LookupDrafter
from dynatree_core.drafters.mix import LookupMix, MixDrafter, mix_topk
from dynatree_core.drafters.model_drafter import ModelDrafter
from dynatree_core.drafters.protocol import CHAIN_ROWS, DRAFTER_KINDS, DraftContext, Drafter, Proposal, level_visibility
from dynatree_core.policy.lookup import PromptLookup

__all__ = ["CHAIN_ROWS", "DRAFTER_KINDS", "DraftContext", "Drafter", "Proposal", "FeatureDrafter", "LookupDrafter", "LookupMix", "MixDrafter",
           "ModelDrafter", "PromptLookup", "drafter_kind", "level_visibility", "make_drafter", "mix_topk"]
