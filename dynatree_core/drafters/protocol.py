"""The drafter protocol: what the decode loop asks of any source of draft distributions.

:class:`Drafter` (``start`` / ``propose`` / ``commit``), the per-level draft mask and positions
(:func:`level_visibility`, the one place they are built) and the shared constants.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import torch

from dynatree_core.runtime import plumbing as pl
from dynatree_core.runtime.ngram import TopKTensors

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.device_tree import DeviceTree
    from dynatree_core.runtime.sampling import DraftSampler

#: the drafter kinds :func:`make_drafter` builds, by the kind of ``ModelPair.draft``
DRAFTER_KINDS: tuple[str, ...] = ("model", "feature", "lookup", "model+lookup", "feature+lookup")
#: committed tokens before the root whose draft top-k level 0 keeps (pending tokens are the last
#: iteration's accepted leaves and bonus: a few; the first iteration's prompt is cut to these)
CHAIN_ROWS = 16


def level_visibility(tree: "DeviceTree", ids: torch.Tensor, slot: torch.Tensor, base: int, past: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask and position offsets for feeding tree level ``ids`` to a draft with a KV cache.

    ``slot[u]`` is the cache index node u was fed at (-1: not fed), ``base`` the cache length once
    the root is fed (committed prefix, root included), ``past`` the current cache length. Returns
    the bool visibility ``[q, past + q]`` (prefix, own ancestors, itself) and each node's depth,
    the offset of its position from the root's - both on the device, without a host round trip.
    """
    q = ids.shape[0]
    anc = tree.ancestors[ids]  # [q, capacity]: ancestors and itself (not fed yet)
    fed = slot >= 0
    # each fed ancestor's cache column; unfed nodes (itself included) go to a dummy last column
    cols = torch.where(fed, slot, past + q).expand(q, -1)
    allowed = torch.zeros((q, past + q + 1), dtype=torch.int8, device=anc.device)
    allowed[:, :base] = 1  # committed prefix, root included
    allowed.scatter_(1, cols, (anc & fed).to(torch.int8))
    allowed[:, past:past + q] += torch.eye(q, dtype=torch.int8, device=anc.device)  # itself (no host scalar)
    return allowed[:, :past + q].bool(), tree.depths[ids]


class Drafter(ABC):
    """The protocol between the decode loop and a source of draft distributions.

    Lifecycle: :meth:`start` once per sequence, then per iteration :meth:`propose` once per tree
    level (level 0 is the root alone) and :meth:`commit` with the accepted path.
    """

    #: short name recorded in traces and benchmark JSON
    kind: ClassVar[str] = ""
    #: whether :meth:`start` / :meth:`commit` need the target's final hidden states
    needs_target_hidden: ClassVar[bool] = False

    def __init__(self, top_k: int):
        self.top_k = top_k
        self.forwards = 0  # draft forwards spent (what "draft fwd/iter" counts)
        self.clock: pl.ForwardClock | None = None  # times the draft's forwards (engine overhead)
        #: the draft's top-k after each committed token level 0 fed before the root (at most
        #: :data:`CHAIN_ROWS`, the last ones), or None: the oracle's view of the committed sequence
        #: where the tree had no fed node (an accepted leaf). Set by level 0 only when
        #: ``keep_chain`` (the engine asks for it when a trace or the benchmark reads records).
        self.chain_topk: TopKTensors | None = None
        self.keep_chain = False
        self._single = True  # every level of the current tree fed one node so far (a chain)
        #: under sampling (the engine sets it): turns a level's scores into the warped q and its
        #: candidates (:class:`~dynatree_core.runtime.sampling.DraftSampler`); None: greedy top-k
        self.sampler: DraftSampler | None = None

    @abstractmethod
    def start(self, prompt: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        """Begin a sequence (and forget any previous one). ``target_hidden`` [L-1, H]: the target's
        final hidden states of ``prompt[:-1]`` (only for drafters that need them)."""

    @abstractmethod
    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> TopKTensors:
        """The draft's top-k after each node of ``ids`` (one tree level, BFS order, on the device;
        level 0 is ``[0]``, the root): token ids and log-probs, ``[len(ids), k]`` each, sorted."""

    @abstractmethod
    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        """The iteration committed ``committed`` (accepted path tokens + bonus). ``target_hidden``
        [len(committed), H]: the target's final hidden states of the root and the path's nodes,
        row k being the state that predicted ``committed[k]``; ``fed``: how many leading nodes of
        ``path`` the draft consumed this iteration (the expanded ones)."""

    def prefill(self) -> None:
        """Consume the pending committed tokens except the root now (explorers call this once so
        that every regrown tree starts from a warm cache)."""

    def fork(self) -> "Drafter":
        """An independent copy of the current state (the model itself is shared)."""
        return copy.copy(self)

    def settings(self) -> dict[str, Any]:
        """What to record about this drafter in traces and results (JSON-safe)."""
        return {"kind": self.kind, "top_k": self.top_k}

    def use_fast(self, fast: Any) -> None:
        """Run the draft's forwards on the fast path (a :class:`~dynatree_core.runtime.static_draft.
        DraftStaticForwards`); drafters without a model (prompt lookup) have nothing to run there."""

    @property
    def fast_model(self) -> torch.nn.Module | None:
        """The draft model the fast path captures the forwards of (None: this drafter runs no
        forward there, or has no fast path yet: it stays eager)."""
        return None

    def level_scores(self, tree: "DeviceTree", ids: torch.Tensor, level: int
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The draft's scores after each node of ``ids`` (one row per node; logits, or log counts),
        and the token id of each column (None: column = token id): what a mixture reads under
        sampling. Model drafters implement it."""
        raise NotImplementedError(f"{type(self).__name__} has no level scores")

    def _sampled(self, tree: "DeviceTree", ids: torch.Tensor, level: int, scores: torch.Tensor,
                 vocab_ids: torch.Tensor | None = None, warped: bool = False) -> TopKTensors:
        """Under sampling: the candidates of ``ids`` from their scores (``warped``: already the warped
        log q), by the sampler; no chain view (the oracle reads greedy runs)."""
        assert self.sampler is not None
        if level == 0:
            self.sampler.begin(tree.capacity, tree.device)
        self.chain_topk = None
        logq = scores if warped else self.sampler.log_q(scores)
        # a level's nodes share a depth (one BFS level): their children fill one absolute position
        at = tree.position + tree.depth + 1 if tree.position is not None else None
        return self.sampler.candidates(logq, self.top_k, ids, vocab_ids, at)

    def _chain_level(self, ids: torch.Tensor, level: int) -> bool:
        """Whether level ``level`` continues a chain: it feeds one node and every earlier level fed
        one (always so for linear drafting). Its node then sees the whole draft cache and sits
        right after it, which is the model's default causal mask and position: no tree mask to build."""
        chain = (level <= 1 or self._single) and ids.shape[0] == 1
        self._single = chain
        return chain

    def _chain_rows(self) -> int:
        """Level 0's last rows whose top-k to compute: the root's, plus the chain's when kept."""
        return -CHAIN_ROWS - 1 if self.keep_chain else -1

    def _topk(self, logits: torch.Tensor) -> TopKTensors:
        k = min(self.top_k, logits.shape[-1])
        top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
        return top.indices, top.values

