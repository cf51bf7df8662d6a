"""An independent draft model drafting for several rows at once: ONE draft forward per tree level.

:class:`BatchModelDraft` keeps the draft's KV cache for every row in one
:class:`~dynatree_core.runtime.batch_cache.RowsCache`; each row's :class:`RowDrafter` turns the row's
slice of a level's logits into that row's proposal exactly as :class:`ModelDrafter` does at batch 1
(greedy top-k with the chain view, or the row's own sampler). The bookkeeping mirrors
:class:`ModelDrafter`'s per row: ``pending`` committed tokens, each node's cache column (``slot``,
-1: not fed), and the accepted nodes the draft consumed are kept where they were written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from dynatree_core.drafters.protocol import DraftContext, Drafter, Proposal
from dynatree_core.runtime import plumbing as pl
from dynatree_core.runtime.batch_cache import RowsCache
from dynatree_core.runtime.host_syncs import to_device

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.device_tree import DeviceTree


class RowDrafter(Drafter):
    """Row b's side of a batched model draft, under its own context (top-k, sampler, chain view).

    The batch runs the level's forward for every row and hands each row its logits (:meth:`give`);
    :meth:`propose` then answers from them, so a drafter wrapping this one (prompt lookup mixed in,
    :class:`~dynatree_core.drafters.mix.MixDrafter`) works unchanged. :meth:`commit` stages the row's
    iteration; :meth:`BatchModelDraft.commit_staged` commits every row at once."""

    kind = "model"

    def __init__(self, batch: "BatchModelDraft"):
        super().__init__()
        self.batch = batch
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
            return self._sampled(tree, ids, level, logits)
        return self._greedy(self._topk(logits), level)

    def level_scores(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> tuple[torch.Tensor, None]:
        logits = self._take()
        return (logits[-1:] if level == 0 else logits), None

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.batch.staged[self] = (path, committed, fed)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), **self.batch.settings()}


class BatchModelDraft:
    """A draft causal LM's cache and level forwards for B rows (one forward per level for all rows)."""

    def __init__(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]]):
        self.model = model
        self.device = pl.model_device(model)
        self.cache = RowsCache(model, len(prompts), self.device)
        self.pending: list[list[int]] = [list(p) for p in prompts]  # per row: committed, not consumed yet
        self.slot: list[torch.Tensor | None] = [None] * len(prompts)  # per row: node -> cache column
        #: draft forwards run (each serves every row that drafts at that level)
        self.forwards = 0
        self.rows = [RowDrafter(self) for _ in prompts]
        #: each row's iteration as its drafter committed it (path as grown, committed tokens, fed)
        self.staged: dict[RowDrafter, tuple[list[int], list[int], int]] = {}

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
        logits, start = c.chain([self.pending[b] if b in asks else [] for b in range(c.rows)], clock)
        self.forwards += 1
        out = {}
        for b, (tree, _) in asks.items():
            m = len(self.pending[b])
            slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=dev)
            slot[:1].fill_(start + m - 1)  # the root's column
            self.slot[b] = slot
            out[b] = logits[b, :m]
        # the pending tokens are committed: live at once (the root's position is the row's count - 1)
        c.commit([torch.arange(start, start + len(self.pending[b]), device=dev) if b in asks else []
                  for b in range(c.rows)], tidy=False)  # this iteration's columns are referred to by index
        for b in asks:
            self.pending[b] = []
        return out

    def _nodes(self, asks: dict[int, tuple["DeviceTree", torch.Tensor]], clock: pl.ForwardClock | None
               ) -> dict[int, torch.Tensor]:
        """Levels >= 1: each asking row feeds the level's nodes; a node sees its row's committed
        entries, its fed ancestors' entries (written earlier this iteration) and itself, at the
        position of the root (the row's count - 1) plus its depth."""
        c, dev = self.cache, self.device
        q = max(int(ids.shape[0]) for _, ids in asks.values())
        ids_in, pos, allowed = c.padding(q)
        seen = torch.zeros((c.rows, q, c.width), dtype=torch.bool, device=dev)
        for b, (tree, ids) in asks.items():
            n, slot = int(ids.shape[0]), self.slot[b]
            assert slot is not None, "a row's level 0 (its root) comes first"
            ids_in[b, :n] = tree.tokens[ids]
            pos[b, :n] = c.count[b] - 1 + tree.depths[ids]
            anc = tree.ancestors[ids] & (slot >= 0)  # [n, capacity]: fed ancestors
            cols = torch.where(anc, slot, c.width)  # a dummy column past the cache for the others
            row = torch.zeros((n, c.width + 1), dtype=torch.bool, device=dev)
            row.scatter_(1, cols, anc)
            seen[b, :n] = row[:, :c.width]
        start = c.width
        logits, _ = c.forward(ids_in, pos, allowed, seen, clock=clock)
        self.forwards += 1
        out = {}
        for b, (tree, ids) in asks.items():
            n = int(ids.shape[0])
            self.slot[b][ids] = start + torch.arange(n, device=dev)
            out[b] = logits[b, :n]
        return out

    def commit(self, kept: dict[int, tuple[list[int], list[int], int]]) -> None:
        """Every row's iteration at once (row -> (path as grown, committed tokens, fed)): keep the
        accepted nodes each row's draft consumed where they were written, queue the rest."""
        cols: list[Any] = [[] for _ in range(self.cache.rows)]
        for b, (path, committed, fed) in kept.items():
            slot = self.slot[b]
            if slot is None:  # the root was never fed (nothing drafted this iteration)
                self.pending[b].extend(committed)
                continue
            if fed:
                cols[b] = slot[to_device(path[:fed], self.device)]
            self.pending[b] = list(committed[fed:])
            self.slot[b] = None
        self.cache.commit(cols)

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
