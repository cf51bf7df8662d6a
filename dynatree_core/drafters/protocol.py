"""The drafter protocol: what the decode loop asks of any source of draft distributions.

:class:`Drafter` (``start`` / ``propose`` / ``commit``), what a run gives it (:class:`DraftContext`,
once, at start) and what it answers (:class:`Proposal`), the per-level draft mask and positions
(:func:`level_visibility`, the one place they are built) and the shared constants.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import torch

from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.static.regions import region
from dynatree_core.runtime.ngram import TopKTensors

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree
    from dynatree_core.runtime.tree.phase import LentLevel
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


@region
def logits_topk(logits: torch.Tensor, top_k: int) -> TopKTensors:
    """The top-k (at most the vocabulary) of a level's logits [q, V]: token ids and log-probabilities
    (a compiled region on the fast path)."""
    top = torch.log_softmax(logits.float(), dim=-1).topk(min(top_k, logits.shape[-1]), dim=-1)
    return top.indices, top.values


def lm_head_topk(logits: torch.Tensor, ids: torch.Tensor, feats: torch.Tensor | None, top_k: int) -> TopKTensors:
    """A causal LM draft's head in a whole draft level (:func:`~dynatree_core.runtime.tree.phase.whole_level`):
    its forward's outputs are the logits, so the head is their top-k."""
    return logits_topk(logits, top_k)


@dataclass(frozen=True)
class DraftContext:
    """What a run gives its drafter, once, at :meth:`Drafter.start` (nobody sets a drafter's attributes).

    ``top_k``: candidates per expanded node; ``clock``: times the draft's forwards (engine
    overhead); ``sampler``: under sampling, turns a level's scores into the warped q and its
    candidates (None: greedy top-k); ``fast``: the draft model's fast-path forwards (a
    :class:`~dynatree_core.runtime.static.draft_forwards.DraftStaticForwards`: static cache, captured levels,
    built for :attr:`Drafter.fast_model`; None: eager); ``keep_chain``: report the chain view at level 0
    (:attr:`Proposal.chain`; a trace or the benchmark's oracle reads it); ``seq_capacity`` /
    ``seq_device``: the committed sequence's static room on the fast path (None: eager); ``runtime``: the run's."""

    top_k: int = 1
    clock: pl.ForwardClock | None = None
    sampler: "DraftSampler | None" = None
    fast: Any = None
    keep_chain: bool = False
    #: on the fast path: the committed sequence's room (prompt, new tokens: the target's static
    #: cache length) and its device, for drafters that keep the committed tokens in static buffers
    #: (prompt lookup); None: they grow as tokens are committed
    seq_capacity: int | None = None
    seq_device: str = "cpu"
    #: the run's runtime: how the fast path's compiled regions run
    #: (:func:`~dynatree_core.runtime.static.regions.compiled`)
    runtime: str = "eager"

    def __post_init__(self) -> None:
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 1:
            raise ValueError(f"DraftContext top_k must be an integer >= 1, got {self.top_k!r}")


@dataclass
class Proposal:
    """What :meth:`Drafter.propose` returns for one tree level (device tensors, one row per node).

    ``tokens`` / ``logps`` [q, k]: the candidates in rank order (greedy: sorted by q; shared
    noise: by log q + g; rejection: in draw order) and their log q; ``confidence`` [q]: c(u) when
    the first candidate is not the maximum (a draw, or the coupled confidence), else None;
    ``chain``: at level 0 with ``keep_chain``, the draft's top-k after each committed token it fed
    before the root (at most :data:`CHAIN_ROWS`: the oracle's view), else None."""

    tokens: torch.Tensor
    logps: torch.Tensor
    confidence: torch.Tensor | None = None
    chain: TopKTensors | None = None


class Drafter(ABC):
    """The protocol between the decode loop and a source of draft distributions.

    Lifecycle: :meth:`start` once per sequence (with the run's :class:`DraftContext`), then per
    iteration :meth:`propose` once per tree level (level 0 is the root alone) and :meth:`commit`
    with the accepted path. :meth:`fork` copies the state for an explorer; :meth:`prefill` warms it.
    """

    #: short name recorded in traces and benchmark JSON
    kind: ClassVar[str] = ""
    #: whether :meth:`start` / :meth:`commit` need the target's final hidden states
    needs_target_hidden: ClassVar[bool] = False
    #: draft forwards spent (what "draft fwd/iter" counts; the collector reads it)
    forwards: int = 0

    def __init__(self) -> None:
        self.ctx = DraftContext()
        self._single = True  # every level of the current tree fed one node so far (a chain)

    @abstractmethod
    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        """Begin a sequence (and forget any previous one) under the run's ``ctx``. ``target_hidden``
        [L-1, H]: the target's final hidden states of ``prompt[:-1]`` (drafters that need them)."""

    @abstractmethod
    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        """The draft's candidates after each node of ``ids`` (one tree level, BFS order, on the
        device; level 0 is ``[0]``, the root)."""

    @abstractmethod
    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        """The iteration committed ``committed`` (accepted path tokens + bonus). ``target_hidden``
        [len(committed), H]: the target's final hidden states of the root and the path's nodes,
        row k being the state that predicted ``committed[k]``; ``fed``: how many leading nodes of
        ``path`` the draft consumed this iteration (the expanded ones)."""

    def lend_level(self, tree: "DeviceTree", level: int) -> "LentLevel | None":
        """Level ``level`` of a resident tree as the parts the run's
        :class:`~dynatree_core.runtime.tree.phase.DraftPhase` runs in one call (its forward counted
        here; level 0 with its chain booked in the draft's cache), or None (the default): the tree
        asks :meth:`propose` for it. A drafter that lends a level has committed to it: the phase runs it."""
        return None

    def prefill(self) -> None:
        """Consume the pending committed tokens except the root now (explorers call this once so
        that every regrown tree starts from a warm cache)."""

    def fork(self, ctx: DraftContext | None = None) -> "Drafter":
        """An independent copy of the current state (the model itself is shared), under ``ctx``
        (default: this drafter's context)."""
        new = copy.copy(self)
        new.ctx = ctx if ctx is not None else self.ctx
        return new

    @property
    def fast_model(self) -> torch.nn.Module | None:
        """The draft model whose level forwards a fast-path run builds for it (the context's
        ``fast``); None: this drafter runs no forward there (prompt lookup; the feature head)."""
        return None

    def settings(self) -> dict[str, Any]:
        """What to record about this drafter in traces and results (JSON-safe)."""
        return {"kind": self.kind, "top_k": self.ctx.top_k}

    def _sampled(self, tree: "DeviceTree", ids: torch.Tensor, level: int, scores: torch.Tensor,
                 vocab_ids: torch.Tensor | None = None, warped: bool = False) -> Proposal:
        """Under sampling: the candidates of ``ids`` from their scores (``warped``: already the warped
        log q), by the sampler; no chain view (the oracle reads greedy runs)."""
        sampler = self.ctx.sampler
        assert sampler is not None
        if level == 0:
            sampler.begin(tree.capacity, tree.device)
        logq = scores if warped else sampler.log_q(scores)
        # a level's nodes share a depth (one BFS level): their children fill one absolute position
        at = tree.position + tree.depth + 1 if tree.position is not None else None
        return Proposal(*sampler.candidates(logq, self.ctx.top_k, ids, vocab_ids, at))

    def _take_context(self, ctx: DraftContext) -> None:
        """Take the run's context at :meth:`start`; a model drafter on the fast path (``ctx.fast``: the
        static level forwards built for :attr:`fast_model`) starts their static cache afresh."""
        self.ctx = ctx
        self.fast = ctx.fast
        if self.fast is not None:
            self.fast.book.reset()

    def _chain_level(self, ids: torch.Tensor, level: int) -> bool:
        """Whether level ``level`` continues a chain: it feeds one node and every earlier level fed
        one (always so for linear drafting). Its node then sees the whole draft cache and sits
        right after it, which is the model's default causal mask and position: no tree mask to build."""
        chain = (level <= 1 or self._single) and ids.shape[0] == 1
        self._single = chain
        return chain

    def _chain_rows(self) -> int:
        """Level 0's last rows whose top-k to compute: the root's, plus the chain's when kept."""
        return -CHAIN_ROWS - 1 if self.ctx.keep_chain else -1

    def _topk(self, logits: torch.Tensor) -> TopKTensors:
        return logits_topk(logits, self.ctx.top_k)

    def _greedy(self, top: TopKTensors, level: int) -> Proposal:
        """A model draft's greedy proposal from the top-k of its level's rows: at level 0 the last
        row is the root's and the rows before it are the chain view (kept only with keep_chain)."""
        ids, lps = top
        if level:
            return Proposal(ids, lps)
        return Proposal(ids[-1:], lps[-1:], chain=(ids[:-1], lps[:-1]) if self.ctx.keep_chain else None)

