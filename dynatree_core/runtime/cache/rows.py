"""The KV cache of several rows decoded together: one rectangular cache, a live set per row.

A batched forward writes the same number of entries, q, into every row (the rows' inputs padded
to the widest); which of them a row keeps differs. So the cache is a ``DynamicCache`` of batch B
whose entries are *live* or *dead* per row (:attr:`RowsCache.live`, bool [B, S] on the device):

* a forward's mask lets row b's queries see its live entries (plus, in a draft tree level, the
  entries of their fed ancestors written earlier this iteration) and the new entries its own
  ``allowed`` names; a padded query sees only itself;
* a kept entry becomes live where it was written: nothing moves (:meth:`RowsCache.commit`);
* columns dead in every row at the end are cropped (a slice), and once ``compact_after`` columns
  (:data:`~dynatree_core.runtime.cache.dynamic.COMPACT_AFTER`) past the longest row's live entries pile
  up, one gather per layer moves every row's live entries to the front.

Positions are logical per row: a new token's position is the row's first position plus its live
count before it (plus its depth in a tree), never its column. Keys are rotated at their positions
when written, so attention does not depend on where an entry sits, and a masked entry gets exactly
zero weight.

What holds the keys and values, and runs the model over them, is the cache's store: :class:`ModelKV`
(a Hugging Face causal LM over a ``DynamicCache``) by default; the feature draft brings its own
(:class:`~dynatree_core.drafters.batch_feature.FeatureKV`), and the static runtime keeps them in
preallocated buffers (:class:`~dynatree_core.runtime.cache.rows_static.SlotKV`, which has a
``capacity``: :meth:`RowsCache.room` makes room for a forward before its columns are read).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch
from transformers import DynamicCache

from dynatree_core.runtime.cache.dynamic import compact_threshold
from dynatree_core.runtime.cache.dynamic import crop as crop_cache
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.model.compat import cache_kwargs
from dynatree_core.runtime.host_syncs import to_device


class KVStore(Protocol):
    """What a :class:`RowsCache` keeps its keys and values in and runs its model with."""

    layers: Any  # per layer: an object with ``keys`` and ``values`` [B, heads, S, head_dim]

    def crop(self, length: int) -> None: ...

    def run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, hidden: bool,
            feats: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def gather(self, order: torch.Tensor, width: int) -> None: ...

    def keep_rows(self, idx: torch.Tensor) -> None: ...


def column_index(order: torch.Tensor, buf: torch.Tensor, width: int) -> torch.Tensor:
    """``order`` [B, width] (each row's columns) as the index a gather of ``buf`` [B, heads, S, dim] along
    its columns takes."""
    return order.to(buf.device)[:, None, :, None].expand(buf.shape[0], buf.shape[1], width, buf.shape[3])


def gather_layers(layers: Any, order: torch.Tensor, width: int) -> None:
    """Every layer's row b keeps its columns ``order[b]`` ([B, width]), in that order, as its first
    ``width`` (new tensors: one gather per key/value tensor)."""
    for layer in layers:
        idx = column_index(order, layer.keys, width)
        layer.keys = layer.keys.gather(2, idx)
        layer.values = layer.values.gather(2, idx)


def select_layer_rows(layers: Any, idx: torch.Tensor) -> None:
    """Every layer keeps rows ``idx`` (in that order)."""
    for layer in layers:
        layer.keys = layer.keys.index_select(0, idx.to(layer.keys.device))
        layer.values = layer.values.index_select(0, idx.to(layer.values.device))


class ModelKV:
    """A Hugging Face causal LM over a ``DynamicCache``: logits out (and, with ``hidden``, the final
    hidden states a feature draft reads)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.cache = DynamicCache()

    @property
    def layers(self) -> Any:
        return self.cache.layers

    def crop(self, length: int) -> None:
        crop_cache(self.cache, length)

    def run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, hidden: bool,
            feats: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        inputs = dict(input_ids=ids, attention_mask=mask, position_ids=positions,
                      **cache_kwargs(self.model, self.cache), use_cache=True)
        if hidden:
            return pl.run_with_hidden(self.model, inputs)
        return self.model(**inputs).logits, None

    def gather(self, order: torch.Tensor, width: int) -> None:
        gather_layers(self.cache.layers, order, width)

    def keep_rows(self, idx: torch.Tensor) -> None:
        select_layer_rows(self.cache.layers, idx)


class RowsCache:
    """A batch-B KV cache with a live set, a logical length and a first position per row."""

    def __init__(self, model: torch.nn.Module, rows: int, device: torch.device, compact_after: int | None = None,
                 kv: KVStore | None = None, first: Sequence[int] | None = None):
        # columns a compaction would reclaim before one runs (a gather per layer, every row at once)
        self.model, self.device, self.compact_after = model, device, compact_threshold(compact_after)
        self.dtype = pl.model_dtype(model)
        self.kv: KVStore = ModelKV(model) if kv is None else kv
        #: bool [B, S]: the entries each row has committed
        self.live = torch.zeros((rows, 0), dtype=torch.bool, device=device)
        #: per row: committed entries (the logical length)
        self.count: list[int] = [0] * rows
        #: per row: the position of its first entry (a feature draft's sequence starts at token 1)
        self.first: list[int] = [0] * rows if first is None else list(first)
        #: gathers so far (one per layer each)
        self.compactions = 0

    @property
    def rows(self) -> int:
        return len(self.count)

    def next_position(self, b: int) -> int:
        """The logical position of row b's next committed token."""
        return self.first[b] + self.count[b]

    @property
    def width(self) -> int:
        """S: the cache's columns, live or dead."""
        return int(self.live.shape[1])

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor,
                seen: torch.Tensor | None = None, clock: pl.ForwardClock | None = None,
                hidden: bool = False, feats: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward of ``ids`` [B, q] at ``positions`` [B, q]: row b's query i sees row b's live
        entries, the old columns ``seen[b, i]`` marks (bool [B, q, S]; None: none) and the new
        entries ``allowed[b, i]`` (bool [B, q, q]) marks. Writes q new (not yet live) columns in
        every row. Returns the store's output [B, q, ·] (logits, or a feature draft's predicted
        features, read with ``feats`` [B, q, H]) and, with ``hidden``, the final hidden states."""
        b, q = ids.shape
        if self.width + q > self.capacity:
            raise RuntimeError(f"a forward of {q} entries after {self.width} columns overflows the static store's "
                               f"{self.capacity}: call room({q}) before reading the cache's width")
        old = self.live[:, None, :].expand(b, q, self.width)
        if seen is not None:
            old = old | seen
        vis = torch.cat([old, allowed], dim=2)
        mask = torch.zeros(vis.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~vis, torch.finfo(self.dtype).min)
        with pl.timed(clock):
            logits, states = self.kv.run(ids, positions, mask[:, None], hidden, feats)
        self.live = torch.cat([self.live, torch.zeros((b, q), dtype=torch.bool, device=self.device)], dim=1)
        return pl.on_device(logits, self.device), states

    @property
    def capacity(self) -> int | float:
        """The columns the store holds at most (a static store's buffers; unbounded otherwise)."""
        return getattr(self.kv, "capacity", float("inf"))

    def room(self, q: int) -> None:
        """Make room for a forward of q entries in a static store: compact the dead columns away
        when they are in the way (call it before reading :attr:`width` for the forward's columns)."""
        if self.width + q <= self.capacity:
            return
        self.compact()
        if self.width + q > self.capacity:
            raise ValueError(f"the static cache is full: {max(self.count)} live entries in the longest row + a "
                             f"forward of {q} exceed its {self.capacity} columns (raise static_len)")

    def padding(self, q: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inputs of a forward of q queries per row, all padding: token 0 at position 0 seeing only
        itself (its entry is never committed); callers fill each row's real queries in."""
        eye = torch.eye(q, dtype=torch.bool, device=self.device).expand(self.rows, q, q).clone()
        zeros = torch.zeros((self.rows, q), dtype=torch.long, device=self.device)
        return zeros, zeros.clone(), eye

    def chain(self, tokens: Sequence[Sequence[int]], clock: pl.ForwardClock | None = None, hidden: bool = False,
              feats: Sequence[torch.Tensor | None] | None = None) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """ONE forward of each row's ``tokens`` as a causal chain after its live entries, at its
        logical positions (shorter rows padded; ``feats``: each row's input features, for a feature
        draft). Returns the output [B, q, ·], the column the chains start at (row b's token j at
        ``start + j``) and, with ``hidden``, the final hidden states; nothing is committed."""
        q = max(len(t) for t in tokens)
        self.room(q)
        ids, pos, allowed = self.padding(q)
        tril = torch.ones((q, q), dtype=torch.bool, device=self.device).tril()
        for b, t in enumerate(tokens):
            m = len(t)
            if m:
                ids[b, :m] = to_device(list(t), self.device)
                pos[b, :m] = torch.arange(self.next_position(b), self.next_position(b) + m, device=self.device)
                allowed[b, :m, :m] = tril[:m, :m]
        x = None if feats is None else self.features(feats, q)
        start = self.width
        out, states = self.forward(ids, pos, allowed, clock=clock, hidden=hidden, feats=x)
        return out, start, states

    def features(self, feats: Sequence[torch.Tensor | None], q: int) -> torch.Tensor:
        """Each row's input features (``feats[b]`` [n_b, H], or None) padded to q queries: the
        [B, q, H] a feature draft reads beside the tokens (padding reads zeros)."""
        width = next(f.shape[-1] for f in feats if f is not None)
        x = torch.zeros((self.rows, q, width), dtype=self.dtype, device=self.device)
        for b, f in enumerate(feats):
            if f is not None and len(f):
                x[b, :len(f)] = f
        return x

    def commit(self, columns: Sequence[torch.Tensor | Sequence[int]], tidy: bool = True) -> None:
        """Row b keeps the entries at ``columns[b]`` (written by a forward: they become live where
        they are); the rest of what the forwards wrote stays dead. ``tidy``: crop and maybe compact
        now (False while other columns written this iteration are still referred to by index)."""
        for b, cols in enumerate(columns):
            n = int(cols.shape[0]) if isinstance(cols, torch.Tensor) else len(cols)
            if n:
                idx = cols if isinstance(cols, torch.Tensor) else to_device(list(cols), self.device)
                self.live[b].index_fill_(0, idx.to(self.device), True)
                self.count[b] += n
        if tidy:
            self._tidy()

    def commit_column(self, column: int) -> None:
        """Every row keeps its entry at ``column`` (a batch's AR step: one op, not one per row). The column is
        the last one written, so nothing past it is cropped; a compaction may still fall due."""
        if not 0 <= column < self.width:
            raise ValueError(f"column {column} is not among the cache's {self.width} columns")
        self.live[:, column] = True
        self.count = [c + 1 for c in self.count]
        self._tidy(last_live=column == self.width - 1)

    def keep_rows(self, rows: Sequence[int]) -> None:
        """Drop every row not in ``rows`` (finished rows leave the batch), in that order."""
        idx = to_device(list(rows), self.device)
        self.kv.keep_rows(idx)
        self.live = self.live.index_select(0, idx)
        self.count = [self.count[r] for r in rows]
        self.first = [self.first[r] for r in rows]
        self._tidy()

    def _tidy(self, last_live: bool = False) -> None:
        """Crop the columns dead in every row at the end (a slice); compact once
        :attr:`compact_after` columns would be reclaimed. ``last_live``: the last column is known live
        (nothing to crop, and no read of the live set to find out)."""
        s = self.width
        if not s:
            return
        used = s if last_live else int(self.live.any(0).nonzero().max()) + 1 if bool(self.live.any()) else 0
        if used < s:
            self.kv.crop(used)
            self.live = self.live[:, :used]
        # what a compaction would reclaim: columns past the longest row's live entries (a shorter
        # row's columns past its own count are padding a rectangle keeps anyway)
        if self.width - max(self.count) >= self.compact_after:
            self.compact()

    def compact(self) -> None:
        """Move every row's live entries to its front (order kept): one gather per key/value tensor."""
        width = max(self.count)
        # a stable sort of "dead" puts each row's live columns first, in their order
        order = torch.sort((~self.live).to(torch.int8), dim=1, stable=True).indices[:, :width]
        self.kv.gather(order, width)
        counts = to_device(self.count, self.device)
        self.live = torch.arange(width, device=self.device)[None, :] < counts[:, None]
        self.compactions += 1
