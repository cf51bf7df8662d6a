"""A draft model drafting for several rows at once: ONE draft forward per tree level.

:class:`BatchModelDraft` keeps an independent draft's KV cache for every row in one
:class:`~dynatree_core.runtime.cache.rows.RowsCache`; each row's :class:`RowDrafter` turns the row's
slice of a level's scores into that row's proposal exactly as :class:`ModelDrafter` does at batch 1
(greedy top-k with the chain view, or the row's own sampler). The bookkeeping mirrors
:class:`ModelDrafter`'s per row: ``pending`` committed tokens, each node's cache column (``slot``,
-1: not fed), and the accepted nodes the draft consumed are kept where they were written. The
feature draft's batch (:class:`~dynatree_core.drafters.batch_feature.BatchFeatureDraft`) runs the
same levels with features beside the tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from dynatree_core.drafters.protocol import DraftContext, Drafter, Proposal, logits_topk
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.cache.rows import RowsCache
from dynatree_core.runtime.host_syncs import to_device

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree

#: a row's iteration as its drafter committed it: (path as grown, committed tokens, fed, the
#: target's hidden states of the root and the path, or None)
Staged = tuple[list[int], list[int], int, "torch.Tensor | None"]


class RowDrafter(Drafter):
    """Row b's side of a batched draft, under its own context (top-k, sampler, chain view).

    The batch runs the level's forward for every row and hands each row its logits (:meth:`give`;
    over the head's ids only for a feature draft, whose ids :attr:`vocab_ids` names);
    :meth:`propose` then answers from them, so a drafter wrapping this one (prompt lookup mixed in,
    :class:`~dynatree_core.drafters.mix.MixDrafter`) works unchanged. :meth:`commit` stages the row's
    iteration; :meth:`BatchModelDraft.commit_staged` commits every row at once."""

    def __init__(self, batch: "BatchModelDraft"):
        super().__init__()
        self.batch = batch
        self.kind = batch.kind  # type: ignore[misc]
        self.needs_target_hidden = batch.kind == "feature"  # type: ignore[misc]
        #: the vocabulary id of each logits column (None: the columns are the vocabulary)
        self.vocab_ids: torch.Tensor | None = batch.vocab_ids
        self._given: torch.Tensor | None = None

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        self.ctx = ctx

    def give(self, logits: torch.Tensor) -> None:
        """This row's rows of the level's logits, from the batch's forward."""
        self._given = logits

    def _take(self) -> torch.Tensor:
        if self._given is None:
            raise RuntimeError("a batched row's draft levels are answered by the batch's one forward per level "
                               "(BatchModelDraft.level, then give), not one row at a time")
        logits, self._given = self._given, None
        self.forwards += 1
        return logits

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        """The row's proposal from its rows of the level's logits (level 0: one row per pending
        committed token, the root last)."""
        logits = self._take()
        if level == 0:
            logits = logits[-1:] if self.ctx.sampler is not None else logits[self._chain_rows():]
        if self.ctx.sampler is not None:
            return self._sampled(tree, ids, level, logits, self.vocab_ids)
        return self._greedy(self._topk(logits), level)

    def _topk(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids, lps = logits_topk(logits, self.ctx.top_k)
        return (ids if self.vocab_ids is None else self.vocab_ids[ids]), lps

    def level_scores(self, tree: "DeviceTree", ids: torch.Tensor, level: int
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self._take()
        return (logits[-1:] if level == 0 else logits), self.vocab_ids

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.batch.staged[self] = (path, committed, fed, target_hidden)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), **self.batch.settings()}


class BatchModelDraft:
    """A draft causal LM's cache and level forwards for B rows (one forward per level for all rows)."""

    kind = "model"
    #: the vocabulary id of each logits column (None: the full vocabulary)
    vocab_ids: torch.Tensor | None = None

    def __init__(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]]):
        self.model = model
        self.device = pl.model_device(model)
        self.cache = self._cache(len(prompts))
        self.pending: list[list[int]] = [list(p) for p in prompts]  # per row: committed, not consumed yet
        self.slot: list[torch.Tensor | None] = [None] * len(prompts)  # per row: node -> cache column
        #: draft forwards run (each serves every row that drafts at that level)
        self.forwards = 0
        self.rows = [RowDrafter(self) for _ in prompts]
        #: each row's iteration as its drafter committed it
        self.staged: dict[RowDrafter, Staged] = {}

    def _cache(self, rows: int) -> RowsCache:
        return RowsCache(self.model, rows, self.device)

    def settings(self) -> dict[str, Any]:
        cfg = getattr(self.model, "config", None)
        return {"layers": getattr(cfg, "num_hidden_layers", None), "model_type": getattr(cfg, "model_type", None)}

    def level(self, asks: dict[int, tuple["DeviceTree", torch.Tensor]], level: int,
              clock: pl.ForwardClock | None = None) -> dict[int, torch.Tensor]:
        """ONE forward for tree level ``level`` of every row in ``asks`` (row -> (tree, node ids));
        the other rows feed one padding query each. Returns each asking row's logits."""
        return self._chain(asks, clock) if level == 0 else self._nodes(asks, clock)

    def _chain(self, asks: dict[int, tuple["DeviceTree", torch.Tensor]], clock: pl.ForwardClock | None
               ) -> dict[int, torch.Tensor]:
        """Level 0: each asking row feeds its pending committed tokens, the root last, as a causal chain."""
        c, dev = self.cache, self.device
        fed = [len(self.pending[b]) if b in asks else 0 for b in range(c.rows)]
        out, start, _ = c.chain([self.pending[b][:n] for b, n in enumerate(fed)], clock, feats=self._chain_feats(fed))
        self.forwards += 1
        rows = {}
        for b, (tree, _) in asks.items():
            slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=dev)
            slot[:1].fill_(start + fed[b] - 1)  # the root's column
            self.slot[b] = slot
            rows[b] = out[b, :fed[b]][self.rows[b]._chain_rows():]  # the root's row last (and the chain view's)
            self._root_fed(b, tree, rows[b])
            self._consumed(b, fed[b])
        # the pending tokens are committed: live at once (the root's position is the row's next - 1)
        c.commit([torch.arange(start, start + m, device=dev) for m in fed],
                 tidy=False)  # this iteration's columns are referred to by index
        return self._scores(rows)

    def prefill(self, clock: pl.ForwardClock | None = None) -> bool:
        """Feed each row's pending tokens but the ones its next level 0 reads (the root, and the chain
        view's rows when kept) as ONE causal chain, kept: the prompt's one-time cost, paid before the
        first iteration as the target's prefill is (a shared budget then measures iterations alike).
        Whether there was anything to feed."""
        fed = [max(0, len(p) + self.rows[b]._chain_rows()) for b, p in enumerate(self.pending)]
        if not any(fed):
            return False
        c, dev = self.cache, self.device
        _, start, _ = c.chain([p[:n] for p, n in zip(self.pending, fed)], clock, feats=self._chain_feats(fed))
        c.commit([torch.arange(start, start + n, device=dev) for n in fed])
        for b, n in enumerate(fed):
            self._consumed(b, n)
        self.forwards += 1
        return True

    def _nodes(self, asks: dict[int, tuple["DeviceTree", torch.Tensor]], clock: pl.ForwardClock | None
               ) -> dict[int, torch.Tensor]:
        """Levels >= 1: each asking row feeds the level's nodes; a node sees its row's committed
        entries, its fed ancestors' entries (written earlier this iteration) and itself, at the
        position of the root (the row's next position - 1) plus its depth."""
        c, dev = self.cache, self.device
        q = max(int(ids.shape[0]) for _, ids in asks.values())
        ids_in, pos, allowed = c.padding(q)
        seen = torch.zeros((c.rows, q, c.width), dtype=torch.bool, device=dev)
        feats = self._node_feats(asks, q)
        for b, (tree, ids) in asks.items():
            n, slot = int(ids.shape[0]), self.slot[b]
            assert slot is not None, "a row's level 0 (its root) comes first"
            ids_in[b, :n] = tree.tokens[ids]
            pos[b, :n] = c.next_position(b) - 1 + tree.depths[ids]
            anc = tree.ancestors[ids] & (slot >= 0)  # [n, capacity]: fed ancestors
            cols = torch.where(anc, slot, c.width)  # a dummy column past the cache for the others
            row = torch.zeros((n, c.width + 1), dtype=torch.bool, device=dev)
            row.scatter_(1, cols, anc)
            seen[b, :n] = row[:, :c.width]
        start = c.width
        out, _ = c.forward(ids_in, pos, allowed, seen, clock=clock, feats=feats)
        self.forwards += 1
        rows = {}
        for b, (tree, ids) in asks.items():
            n = int(ids.shape[0])
            self.slot[b][ids] = start + torch.arange(n, device=dev)
            rows[b] = out[b, :n]
            self._nodes_fed(b, ids, rows[b])
        return self._scores(rows)

    # --- what a feature draft adds (features in, predicted features kept, the head) -------------
    def _chain_feats(self, fed: list[int]) -> list[torch.Tensor | None] | None:
        """The input features of each row's first ``fed[b]`` pending tokens (None: tokens alone)."""
        return None

    def _consumed(self, b: int, n: int) -> None:
        """Row b's first ``n`` pending tokens were fed."""
        self.pending[b] = self.pending[b][n:]

    def _node_feats(self, asks: dict[int, tuple["DeviceTree", torch.Tensor]], q: int) -> torch.Tensor | None:
        """The input features [B, q, H] of a tree level's nodes (None: tokens alone)."""
        return None

    def _root_fed(self, b: int, tree: "DeviceTree", out: torch.Tensor) -> None:
        """Row b's level 0 ran (``out``: its last rows, the root's last)."""

    def _nodes_fed(self, b: int, ids: torch.Tensor, out: torch.Tensor) -> None:
        """Row b's nodes ``ids`` ran (``out``: one row each)."""

    def _scores(self, rows: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Each asking row's logits from its rows of the forward's output (here: the logits)."""
        return rows

    # --- commit -----------------------------------------------------------------------------
    def commit(self, kept: dict[int, Staged]) -> None:
        """Every row's iteration at once (row -> what it staged): keep the accepted nodes each row's
        draft consumed where they were written, queue the rest."""
        cols: list[Any] = [[] for _ in range(self.cache.rows)]
        for b, (path, committed, fed, hidden) in kept.items():
            slot = self.slot[b]
            if slot is None:  # the root was never fed (nothing drafted this iteration)
                self._queue(b, committed, hidden, extend=True)
                continue
            cols[b] = self._kept_columns(slot, path, fed)
            self._queue(b, committed[len(cols[b]):], None if hidden is None else hidden[len(cols[b]):],
                        extend=False)
            self.slot[b] = None
        self.cache.commit(cols)

    def _kept_columns(self, slot: torch.Tensor, path: list[int], fed: int) -> torch.Tensor | list:
        """The cache columns a row keeps of its accepted path: the nodes its draft consumed."""
        return slot[to_device(path[:fed], self.device)] if fed else []

    def _queue(self, b: int, tokens: list[int], hidden: torch.Tensor | None, extend: bool) -> None:
        """Row b's committed ``tokens`` wait for its next level 0 (``extend``: behind what waits)."""
        self.pending[b] = self.pending[b] + list(tokens) if extend else list(tokens)

    def commit_staged(self) -> None:
        """Commit what every row's drafter staged this iteration (rows that staged nothing keep
        their state)."""
        staged, self.staged = self.staged, {}
        self.commit({self.rows.index(d): kept for d, kept in staged.items()})

    def keep_rows(self, rows: Sequence[int]) -> None:
        """Drop every row not in ``rows`` (finished rows leave the batch)."""
        self.cache.keep_rows(rows)
        self.pending = [self.pending[r] for r in rows]
        self.slot = [self.slot[r] for r in rows]
        self.rows = [self.rows[r] for r in rows]
