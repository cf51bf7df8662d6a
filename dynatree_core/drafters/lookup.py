"""The model-free prompt-lookup drafter: the tokens that followed earlier occurrences of a node's
context, counted on the device (:mod:`dynatree_core.runtime.ngram`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from dynatree_core.drafters.protocol import CHAIN_ROWS, DraftContext, Drafter, Proposal
from dynatree_core.policy.lookup import PromptLookup
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.ngram import (CompactVocab, LookupMatches, StaticSeq, TopKTensors, compact_ids,
                                         contexts_ending_at, lookup_matches)

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree


class LookupDrafter(Drafter):
    """Drafts by :class:`PromptLookup`, as tensor operations on the target's device (no host
    round trip: the node contexts are read from the tree's ancestor matrix)."""

    kind = "lookup"

    def __init__(self, source: PromptLookup):
        super().__init__()
        self.source = source
        self.start([], self.ctx)

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        self.ctx = ctx
        self.seq: list[int] = list(prompt)  # the committed tokens, the root last
        # the distinct tokens (first-occurrence order) and each position's index among them, kept
        # on the host as tokens are committed: counting runs over them, not the whole vocabulary
        self._index: dict[int, int] = {}
        self._seq_index = compact_ids(self._index, self.seq)
        self._dev: tuple[torch.Tensor, CompactVocab] | None = None  # seq and vocab on the tree's device
        self._fresh = len(self.seq)  # tokens committed since the last level 0 (the chain it reports)
        #: on the fast path (``ctx.seq_capacity``): the committed tokens in static buffers, which a
        #: compiled region reads (:func:`~dynatree_core.drafters.mix.mix_level`); None: device copies
        #: that grow as tokens are committed
        self.static: StaticSeq | None = None
        if ctx.seq_capacity is not None:
            self.static = StaticSeq.empty(ctx.seq_capacity, torch.device(ctx.seq_device))
            self.static.extend(self.seq, self._seq_index, list(self._index))

    def fork(self, ctx: DraftContext | None = None) -> "LookupDrafter":
        new = super().fork(ctx)
        new.seq, new._index, new._seq_index = list(self.seq), dict(self._index), list(self._seq_index)
        if self.static is not None:
            new.static, new._dev = self.static.clone(), None
        return new

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        chain = None
        if level == 0:
            self._on(tree.device)
            if self.ctx.sampler is None:
                chain = self._chain()
        m = self.matches(tree, ids, level)
        if self.ctx.sampler is not None:  # q: the followers' shares, warped (none where nothing matched)
            return self._sampled(tree, ids, level, m.log_shares(), m.tokens)
        return Proposal(*m.topk(self.ctx.top_k), chain=chain)

    def matches(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> LookupMatches:
        """The lookup's counts for tree level ``ids`` (what :class:`MixDrafter` mixes in)."""
        seq, vocab = self._on(tree.device)
        if level == 0:
            self._fresh = 0
        return lookup_matches(seq, self._contexts(tree, ids, level), self.source, vocab)

    def chain_matches(self, rows: int) -> LookupMatches:
        """The counts after each of the last ``rows`` committed tokens before the root, each from
        the tokens known then (the oracle's chain view; call after level 0)."""
        assert self._dev is not None, "chain_matches: level 0 comes first"
        seq, vocab = self._dev
        ends = torch.arange(seq.shape[0] - 1 - rows, seq.shape[0] - 1, device=seq.device)  # positions p
        return lookup_matches(seq, contexts_ending_at(seq, ends, self.source.max_ngram), self.source, vocab,
                              limit=ends)

    def committed_on(self, device: torch.device) -> torch.Tensor:
        """The committed tokens (the root last) on ``device``: what a lookup tail copies from."""
        return self._on(device)[0]

    def _on(self, device: torch.device) -> tuple[torch.Tensor, CompactVocab]:
        """The committed tokens and their compact vocabulary on ``device`` (copied when first needed
        there; :meth:`commit` extends them)."""
        if self.static is not None:
            if self._dev is None:  # views of the static buffers (dropped at each commit)
                self._dev = self.static.views()
            return self._dev
        if self._dev is None or self._dev[0].device != device:
            self._dev = (to_device(self.seq, device),
                         CompactVocab(to_device(list(self._index), device), to_device(self._seq_index, device)))
        return self._dev

    def _chain(self) -> TopKTensors | None:
        """With ``keep_chain``: what the lookup proposed after each token committed since the last
        level 0 (before the root, at most :data:`CHAIN_ROWS`), each from the tokens known then - the
        oracle's view, as a model drafter gives it from the committed tokens it feeds."""
        c = min(self._fresh, CHAIN_ROWS + 1) - 1
        self._fresh = 0
        return self.chain_matches(max(c, 0)).topk(self.ctx.top_k) if self.ctx.keep_chain else None

    def _contexts(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> torch.Tensor:
        """[q, max_ngram + level]: the last max_ngram committed tokens (-1 before the start), then
        each node's path below the root, by depth (every node of a level has depth ``level``)."""
        n, dev = self.source.max_ngram, tree.device
        ctx = torch.full((ids.shape[0], n + level + 1), -1, dtype=torch.long, device=dev)
        tail = self._dev[0][-n:]  # type: ignore[index]
        ctx[:, n - tail.shape[0]:n] = tail
        if level:
            # ancestor a at depth d goes to column n - 1 + d (the root, depth 0, is the last committed
            # token: n - 1 already holds it); non-ancestors to the spare last column
            anc = tree.ancestors.index_select(0, ids)
            col = torch.where(anc, tree.depths[None, :] + (n - 1), n + level)
            ctx.scatter_(1, col, tree.tokens[None, :].expand_as(col))
        return ctx[:, :n + level]

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.seq.extend(committed)
        self._fresh += len(committed)
        known = len(self._index)
        new_index = compact_ids(self._index, committed)
        self._seq_index.extend(new_index)
        if self.static is not None:
            self.static.extend(committed, new_index, list(self._index)[known:])
            self._dev = None
        elif self._dev is not None:  # extend the device copies (host-to-device only: no sync)
            seq, vocab = self._dev
            dev = seq.device
            self._dev = (torch.cat([seq, to_device(committed, dev)]),
                         CompactVocab(torch.cat([vocab.tokens, to_device(list(self._index)[known:], dev)]),
                                      torch.cat([vocab.seq_index, to_device(new_index, dev)])))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "max_ngram": self.source.max_ngram, "min_ngram": self.source.min_ngram}

