"""What one tree picture shows, independent of where the tree came from.

A :class:`TreeScene` is a draft tree plus what the target said about it. It is built from a
recorded :class:`~dynatree_core.records.trace.IterationRecord`, or by the parameter explorer from a
re-grown tree, where the target's choice is only known at some nodes (``None`` elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from dynatree_core.records.trace import IterationRecord
from dynatree_core.policy.tree import DraftTree

from dynatree_viz.core.tokens import TokenNamer, node_texts

#: node status along the verification: how far the target's greedy walk got
STATUSES: tuple[str, ...] = ("root", "accepted", "rejected", "below_rejection", "unknown")


@dataclass
class TreeScene:
    """A draft tree and the verification outcome to draw over it.

    ``target_argmax[i]`` is the target's greedy token after node i, or None where unknown.
    ``accepted`` are the accepted node ids (root excluded); ``bonus`` the target's token after the
    last accepted node (None if unknown or cut off); ``complete`` is False when the accepted
    length is only a lower bound (the walk reached a node the target never saw).
    ``target_prob[i]`` is the target's probability of node i's token at its parent (warped under
    sampling; None or absent where unknown); ``sampled`` says the tree was verified under sampling
    (``target_argmax`` then holds the target's draws), which makes ``"auto"`` colour by p(token).
    """

    tree: DraftTree
    texts: list[str]
    target_argmax: list[int | None]
    accepted: list[int]
    bonus: int | None
    namer: TokenNamer
    title: str = ""
    complete: bool = True
    target_prob: list[float | None] = field(default_factory=list)
    index: int | None = None
    sampled: bool = False

    @classmethod
    def from_record(cls, rec: IterationRecord, namer: TokenNamer | None = None) -> "TreeScene":
        namer = namer or TokenNamer.from_trace(rec)
        return cls(tree=rec.tree, texts=node_texts(rec, namer),
                   target_argmax=[int(t) for t in rec.target_argmax],
                   accepted=list(rec.accepted_path), bonus=rec.bonus, namer=namer,
                   target_prob=list(rec.target_prob_drafted or []), index=rec.index,
                   sampled=rec.sampling is not None)

    @classmethod
    def from_partial(cls, tree: DraftTree, target_argmax: Sequence[int | None],
                     namer: TokenNamer, texts: Sequence[str] | None = None,
                     target_prob: Sequence[float | None] = (), sampled: bool = False) -> "TreeScene":
        """A scene whose target choices are known only at some nodes (greedy walk stops there)."""
        accepted, bonus, complete = greedy_walk(tree, target_argmax)
        texts = list(texts) if texts is not None else [namer(t) for t in tree.tokens]
        return cls(tree=tree, texts=texts, target_argmax=list(target_argmax), accepted=accepted,
                   bonus=bonus, namer=namer, complete=complete, target_prob=list(target_prob),
                   sampled=sampled)

    def statuses(self) -> list[str]:
        """Per node: root, accepted, rejected (the target chose another token at its parent),
        below_rejection (under a rejected node) or unknown (target choice at parent unknown)."""
        acc = set(self.accepted)
        on_path = {0} | acc
        out = []
        for i, p in enumerate(self.tree.parents):
            if i == 0:
                out.append("root")
            elif i in acc:
                out.append("accepted")
            elif p in on_path:
                out.append("rejected" if self.target_argmax[p] is not None else "unknown")
            else:
                out.append("below_rejection")
        return out


def greedy_walk(tree: DraftTree, target_argmax: Sequence[int | None]) -> tuple[list[int], int | None, bool]:
    """:meth:`DraftTree.greedy_walk`: :meth:`DraftTree.greedy_path` tolerant of unknown target
    choices. Returns (accepted node ids, bonus token or None, complete)."""
    return tree.greedy_walk(target_argmax)


def sampling_active(sampling: Any) -> bool:
    """Whether ``sampling`` (a ``SamplingConfig``, its dict as ``Trace.sampling`` stores it, or
    None) samples: temperature > 0 (temperature 0 is greedy decoding)."""
    if sampling is None:
        return False
    t = sampling.get("temperature", 0.0) if isinstance(sampling, dict) else getattr(sampling, "temperature", 0.0)
    return float(t or 0.0) > 0.0
