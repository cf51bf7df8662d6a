"""A draft model's KV cache on the fast path: static slots, device-side bookkeeping, captured levels.

The draft writes a causal chain at level 0 (the committed tokens it has not read, the root last)
and one tree level per forward after that. On the fast path its cache is a
:class:`~dynatree_core.runtime.static_cache.SlotCache` and which slots hold committed entries is a
bool vector *on the device* (:class:`DeviceSlotBook`): the accepted nodes' entries are committed
where they were written (one ``index_fill_``, no host read, no gather), rejected ones stay dead
and masked, and once the free room runs out the live entries are gathered to the front (rare;
one host read then). Each level's forward is padded to its bucket and replayed like the target's
(:class:`~dynatree_core.runtime.fast_path.FastPath`); its mask lets a node see the committed
entries, its fed ancestors and itself (a dummy row sees only itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynatree_core.runtime import plumbing as pl
from dynatree_core.runtime.fast_path import (FastPath, StaticInputs, bucket, buckets_for, check_owner, keep_or_make,
                                             static_inputs)
from dynatree_core.runtime.static_cache import SlotCache


class DeviceSlotBook:
    """Which slots of a draft's :class:`SlotCache` are committed, kept on the device."""

    def __init__(self, cache: SlotCache):
        self.cache = cache
        self.alive = torch.zeros(cache.capacity, dtype=torch.bool, device=cache.slots.device)
        self.reset()

    def reset(self) -> None:
        self.alive.zero_()
        self.physical = 0  # the first free slot
        self.committed = 0  # committed entries: the logical length (the next token's position)
        self.compactions = 0
        self.cache.written = 0

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    def reserve(self, count: int, room: int = 0) -> int:
        """The next forward writes ``count`` entries from the returned slot. With ``room``, the dead
        entries are compacted away first unless ``room`` more slots stay free after it: a tree's
        level 0 asks for the whole tree's room, so that no later level of the tree compacts (which
        would move the slots its fed nodes were written at)."""
        if self.physical + count + room > self.capacity:
            self.compact()
        if self.physical + count > self.capacity:
            raise ValueError(f"the draft's static cache is full: {self.committed} committed entries + a forward of "
                             f"{count} exceed its {self.capacity} slots (raise static_len)")
        start = self.physical
        self.cache.write_at(start, count)
        self.physical += count
        return start

    def commit_chain(self, start: int, count: int) -> None:
        """Entries [start, start + count) are committed (a level-0 chain of committed tokens)."""
        self.alive[start:start + count].fill_(True)
        self.committed += count

    def commit_slots(self, slots: torch.Tensor, count: int) -> None:
        """The entries at device ``slots`` (``count`` of them: the host knows how many) are committed."""
        if count:
            self.alive.index_fill_(0, slots, True)
            self.committed += count

    def compact(self) -> None:
        """Gather the committed entries to the front (one host read of how many there are)."""
        live = torch.nonzero(self.alive[: self.physical])[:, 0]
        count = int(live.shape[0])  # the one read: rare, when the free room has run out
        self.cache.move(live, 0)
        self.alive.zero_()
        self.alive[:count].fill_(True)
        self.physical = count
        self.compactions += 1


@dataclass
class DraftStaticForwards:
    """A draft model's level forwards on a :class:`FastPath` whose cache is a :class:`DeviceSlotBook`."""

    path: FastPath
    #: slots a tree's levels may write after level 0 (its nodes plus one level's padding)
    tree_room: int = 0

    def __post_init__(self) -> None:
        self.path.owner = self

    @property
    def book(self) -> DeviceSlotBook:
        check_owner(self.path, self)
        return self.path.cache

    @torch.inference_mode()
    def chain(self, ids: torch.Tensor, clock: pl.ForwardClock | None, feats: torch.Tensor | None = None,
              first_pos: int | None = None) -> tuple[torch.Tensor, int]:
        """Level 0: the causal chain ``ids`` [q] after the committed entries, committed at once (they
        are committed tokens); returns its outputs [q, ...] (logits; a feature draft's predicted
        features) and its first slot. ``feats`` [q, F]: a feature draft's input features; ``first_pos``:
        the first token's position (default: the committed count). Padded to a bucket when one holds
        it, else run eagerly (a first level that reads the whole prompt)."""
        q, book = ids.shape[0], self.book
        committed, b = book.committed, self._bucket(q)
        start = book.reserve(b, room=self.tree_room)
        x = self._inputs(b, q, start)
        x.ids[0, :q].copy_(ids)
        if feats is not None:
            x.feats[0, :q].copy_(feats)
        torch.add(self.path.cache.cache._ar[:q], committed if first_pos is None else first_pos, out=x.pos[0, :q])
        rows = x.mask[0, 0, :q]
        rows.masked_fill_(book.alive[None, :], 0.0)
        rows[:, start:start + q].masked_fill_(pl.causal_allowed(q, 0, ids.device), 0.0)
        logits = self._run(b, q, x, clock)
        book.commit_chain(start, q)
        book.physical = start + q  # the padding's slots are free again
        return logits, start

    @torch.inference_mode()
    def level(self, tree: "object", ids: torch.Tensor, slot: torch.Tensor, root_pos: int,
              clock: pl.ForwardClock | None, feats: torch.Tensor | None = None) -> torch.Tensor:
        """One tree level ``ids`` [q]: each node sees the committed entries, its fed ancestors (their
        ``slot``) and itself, at position ``root_pos`` + depth; ``slot`` gets the level's slots.
        ``feats`` [q, F]: a feature draft's input features."""
        q, book = ids.shape[0], self.book
        b = self._bucket(q)
        start = book.reserve(b)
        x = self._inputs(b, q, start)
        x.ids[0, :q].copy_(tree.tokens[ids])
        if feats is not None:
            x.feats[0, :q].copy_(feats)
        torch.add(tree.depths[ids], root_pos, out=x.pos[0, :q])
        rows = x.mask[0, 0, :q]
        rows.masked_fill_(book.alive[None, :], 0.0)
        anc = tree.ancestors.index_select(0, ids) & (slot >= 0)[None, :]
        cols = torch.where(anc, slot[None, :], book.capacity)  # not an ancestor: the spare column
        seen = torch.zeros((q, book.capacity + 1), dtype=torch.bool, device=ids.device).scatter_(1, cols, True)
        rows.masked_fill_(seen[:, :book.capacity], 0.0)
        rows[:, start:start + q].diagonal().fill_(0.0)
        logits = self._run(b, q, x, clock)
        slot.index_copy_(0, ids, self.path.cache.cache._ar[:q] + start)
        book.physical = start + q
        return logits

    def _bucket(self, q: int) -> int:
        return bucket(q, self.path.buckets) if q <= self.path.buckets[-1] else q

    def _inputs(self, b: int, q: int, start: int) -> StaticInputs:
        """The bucket's buffers, cleared (an over-size chain: fresh ones, run eagerly)."""
        if b in self.path.buckets:
            x = self.path.entry(b, False).inputs
        else:
            x = static_inputs(b, self.book.capacity, self.book.alive.device, pl.model_dtype(self.path.model),
                              self.path.spec.feature_width)
        x.ids[0, q:].fill_(0)
        if x.feats is not None:
            x.feats[0, q:].fill_(0.0)
        x.pos[0, q:].fill_(self.book.committed)
        x.mask.fill_(torch.finfo(x.mask.dtype).min)
        x.mask[0, 0, q:, start + q:start + b].diagonal().fill_(0.0)  # a dummy row sees only itself
        return x

    def _run(self, b: int, q: int, x: StaticInputs, clock: pl.ForwardClock | None) -> torch.Tensor:
        with pl.timed(clock):
            if b in self.path.buckets:
                logits, _ = self.path.entry(b, False).run()
            else:
                logits, _ = self.path.spec.forward(self.path.model, self.path.cache.cache, x, False)()
        return logits[:q]


def draft_fast_path(model: torch.nn.Module, runtime: str, length: int, max_level: int,
                    buckets: tuple[int, ...] | None = None, static_len: int | None = None,
                    levels: tuple[int, int] | None = None) -> DraftStaticForwards:
    """A draft model's fast path for ``runtime`` (kept for the model and reused, like the target's):
    room for ``length`` committed tokens plus one tree's dead entries, levels up to ``max_level``
    nodes in buckets; every bucket's forward built now. ``levels``: (count, width) of a
    device-resident draft phase, whose every level writes a padded frontier."""
    sizes = buckets_for(max_level, buckets)
    room = max_level + sizes[-1]
    if levels is not None:
        room = max(room, levels[0] * bucket(min(levels[1], sizes[-1]), sizes))
    path = keep_or_make(model, f"draft:{runtime}", runtime, length, max_level, buckets, static_len, DeviceSlotBook,
                        room)
    path.prepare(hidden=False)
    return DraftStaticForwards(path, tree_room=room)
