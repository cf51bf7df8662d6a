"""Prompt lookup's settings (torch-free): the n-gram bounds of the model-free draft and of the lookup tail.

The matching itself runs on the device (:mod:`dynatree_core.runtime.ngram`); the drafter that uses it
is :class:`~dynatree_core.drafters.lookup.LookupDrafter`, and the torch-free reference of the tail's
span is :func:`~dynatree_core.policy.tail.lookup_span`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynatree_core.policy.checks import int_at_least


@dataclass(frozen=True)
class PromptLookup:
    """A model-free draft: prompt lookup (n-gram matching over the text so far; no weights).

    Pass it as ``ModelPair(target, draft=PromptLookup())``. After a node, the draft looks for the
    longest suffix of the node's context (the committed tokens, then the node's path) of
    ``min_ngram``..``max_ngram`` tokens that occurred earlier in the committed tokens, and proposes
    the tokens that followed those occurrences: the most frequent first (ties: the most recent).
    Its "probability" of a token is its share of the occurrences, count / (occurrences + 1), so
    a single occurrence gives 0.5 and a pattern seen many times approaches 1 - what the tree
    policy's confidence thresholds read. A context with no earlier occurrence proposes nothing
    (log-probability -inf: τ, ρ_stop or the depth gate stop there).
    """

    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        for name in ("min_ngram", "max_ngram"):
            int_at_least(f"PromptLookup {name}", getattr(self, name), 1)
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"PromptLookup min_ngram ({self.min_ngram}) must be <= max_ngram ({self.max_ngram})")

