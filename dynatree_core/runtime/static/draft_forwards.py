"""A draft model's KV cache on the fast path: static slots, device-side bookkeeping, captured levels.

The draft writes a causal chain at level 0 (the committed tokens it has not read, the root last)
and one tree level per forward after that. On the fast path its cache is a
:class:`~dynatree_core.runtime.cache.slots.SlotCache` and which slots hold committed entries is a
bool vector *on the device* (:class:`DeviceSlotBook`): the accepted nodes' entries are committed
where they were written (one ``index_fill_``, no host read, no gather), rejected ones stay dead
and masked, and once the free room runs out the live entries are gathered to the front (rare;
one host read then). Each level's forward is padded to its bucket and replayed like the target's
(:class:`~dynatree_core.runtime.static.fast_path.FastPath`); its mask lets a node see the committed
entries, its fed ancestors and itself (a dummy row sees only itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.static.fast_path import (FastPath, StaticInputs, bucket, buckets_for, check_owner,
                                                    keep_or_make, static_inputs)
from dynatree_core.runtime.static.regions import compiled, region
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.cache.slots import SlotCache


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

    def reserve(self, count: int, room: int = 0, write: bool = True) -> int:
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
        if write:
            self.cache.write_at(start, count)
        else:  # the caller's compiled region writes the slots
            self.cache.claim(start, count)
        self.physical += count
        return start

    def commit_chain(self, start: int, count: int, on_device: bool = True) -> None:
        """Entries [start, start + count) are committed (a level-0 chain of committed tokens);
        ``on_device=False``: a compiled region has marked them already (:func:`chain_inputs`)."""
        if on_device:
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
class ChainBooking:
    """Level 0's chain as booked in a draft's static cache (:meth:`DraftStaticForwards.book_chain`): its
    committed ``tokens`` (q; a feature draft's input ``feats`` [q, F]), padded to bucket ``b`` (run
    eagerly when no bucket holds it: ``bucketed`` False) and written from slot ``start``, the first at
    position ``first``, after ``committed`` committed entries."""

    tokens: list[int]
    feats: torch.Tensor | None
    b: int
    start: int
    first: int
    committed: int
    bucketed: bool

    @property
    def q(self) -> int:
        return len(self.tokens)

    def staged(self) -> list[int]:
        """:func:`chain_inputs`' ``staged``: the tokens padded to the bucket, then [first slot, first
        position, committed count, q] (one host -> device copy)."""
        return self.tokens + [0] * (self.b - self.q) + [self.start, self.first, self.committed, self.q]


@dataclass
class DraftStaticForwards:
    """A draft model's level forwards on a :class:`FastPath` whose cache is a :class:`DeviceSlotBook`."""

    path: FastPath
    #: slots a tree's levels may write after level 0 (its nodes plus one level's padding)
    tree_room: int = 0

    def __post_init__(self) -> None:
        self.path.owner = self
        #: what level 0 leaves for the tree's levels, on the device: [the first slot after the chain,
        #: the root's position, the committed count] (written by :func:`chain_inputs`: no copy per
        #: level) and its host mirror :attr:`after_chain_host`
        self.after_chain = torch.zeros(3, dtype=torch.long, device=self.path.cache.alive.device)
        self.after_chain_host = (0, 0, 0)

    @property
    def book(self) -> DeviceSlotBook:
        check_owner(self.path, self)
        return self.path.cache

    def bucketed(self, q: int) -> bool:
        """Whether a bucket holds a level-0 chain of ``q`` tokens (else it runs eagerly)."""
        return self._bucket(q) in self.path.buckets

    def book_chain(self, tokens: Sequence[int], feats: torch.Tensor | None = None,
                   first_pos: int | None = None) -> "ChainBooking":
        """Book level 0's chain of ``tokens`` (host arithmetic; a compaction reads once, rarely): its
        bucket, its first slot (with room after it for the whole tree, so that no later level of the
        tree compacts) and its first position (default: the committed count). ``feats``: a feature
        draft's input features [q, F]. :meth:`end_chain` closes it once its forward has run."""
        q, book = len(tokens), self.book
        b = self._bucket(q)
        bucketed = b in self.path.buckets
        committed = book.committed
        start = book.reserve(b, room=self.tree_room, write=not bucketed)
        return ChainBooking(list(tokens), feats, b, start, committed if first_pos is None else first_pos, committed,
                            bucketed)

    def stage_feats(self, x: StaticInputs, c: "ChainBooking") -> None:
        """A feature draft's chain features into the bucket's buffers (their count varies: eager ops, so
        that one compiled graph serves every chain of the bucket)."""
        if c.feats is not None:
            x.feats[0, :c.q].copy_(c.feats)
            x.feats[0, c.q:].zero_()

    def end_chain(self, c: "ChainBooking") -> None:
        """After the chain's forward: it is committed (a compiled region has marked a bucketed chain's
        slots already) and the padding's slots are free again."""
        self.book.commit_chain(c.start, c.q, on_device=not c.bucketed)
        self.book.physical = c.start + c.q
        self.after_chain_host = (c.start + c.q, c.first + c.q - 1, c.committed + c.q)

    @torch.inference_mode()
    def chain(self, tokens: Sequence[int], clock: pl.ForwardClock | None, feats: torch.Tensor | None = None,
              first_pos: int | None = None) -> tuple[torch.Tensor, int]:
        """Level 0: the causal chain ``tokens`` (q of them) after the committed entries, committed at
        once (they are committed tokens); returns its outputs [q, ...] (logits; a feature draft's
        predicted features) and its first slot. ``feats`` [q, F]: a feature draft's input features;
        ``first_pos``: the first token's position (default: the committed count). Padded to a bucket
        when one holds it (the inputs written by one compiled region, :func:`chain_inputs`), else run
        eagerly (a first level that reads the whole prompt)."""
        c = self.book_chain(tokens, feats, first_pos)
        q, b, start, book = c.q, c.b, c.start, self.book
        dev = book.alive.device
        if c.bucketed:
            x = self.path.entry(b, False).inputs
            self.stage_feats(x, c)
            compiled(chain_inputs, self.path.runtime, dev)(x, book.alive, self.path.cache.cache.slots,
                                                          to_device(c.staged(), dev), self.path.cache.cache._ar,
                                                          self.after_chain)
        else:
            self.after_chain.copy_(to_device([start + q, c.first + q - 1, c.committed + q], dev))
            x = self._inputs(b, q, start)
            x.ids[0, :q].copy_(to_device(c.tokens, dev))
            if feats is not None:
                x.feats[0, :q].copy_(feats)
            torch.add(self.path.cache.cache._ar[:q], c.first, out=x.pos[0, :q])
            rows = x.mask[0, 0, :q]
            rows.masked_fill_(book.alive[None, :], 0.0)
            rows[:, start:start + q].masked_fill_(pl.causal_allowed(q, 0, dev), 0.0)
        logits = self._run(b, q, x, clock)
        self.end_chain(c)
        return logits, start

    @torch.inference_mode()
    def level(self, tree: "object", ids: torch.Tensor, slot: torch.Tensor, root_pos: int,
              clock: pl.ForwardClock | None, feats: torch.Tensor | None = None) -> torch.Tensor:
        """One tree level ``ids`` [q]: each node sees the committed entries, its fed ancestors (their
        ``slot``) and itself, at position ``root_pos`` + depth; ``slot`` gets the level's slots.
        ``feats`` [cap, F]: a feature draft's predicted features by node (each node reads its parent's).
        The inputs are written by one compiled region (:func:`level_inputs`), the forward replayed."""
        q = ids.shape[0]
        b, start = self.begin_level(q)
        x = self.path.entry(b, False).inputs
        scalars = to_device([start, root_pos, self.book.committed], ids.device)  # one host -> device copy
        compiled(level_inputs, self.path.runtime, ids.device)(
            x, tree.tokens, tree.depths, tree.parents, tree.ancestors, self.book.alive, slot, ids, feats, scalars,
            self.path.cache.cache._ar, self.path.cache.cache.slots)
        logits = self._run(b, q, x, clock)
        self.end_level(start, q)
        return logits

    def begin_level(self, q: int) -> tuple[int, int]:
        """Book a tree level of ``q`` nodes (host arithmetic, no op): its bucket and first slot (the
        caller's compiled code writes the slots)."""
        b = self._bucket(q)
        if b not in self.path.buckets:  # never: a level has at most N_max nodes, the buckets hold the whole tree
            raise ValueError(f"a draft level of {q} nodes is wider than the largest bucket ({self.path.buckets[-1]})")
        return b, self.book.reserve(b, write=False)

    def end_level(self, start: int, q: int) -> None:
        """After a level's forward: the padding's slots are free again."""
        self.book.physical = start + q

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


@region
def level_inputs(x: StaticInputs, tokens: torch.Tensor, depths: torch.Tensor, parents: torch.Tensor,
                 ancestors: torch.Tensor, alive: torch.Tensor, slot: torch.Tensor, ids: torch.Tensor,
                 feats: torch.Tensor | None, scalars: torch.Tensor, ar: torch.Tensor, slots: torch.Tensor) -> None:
    """A tree level's forward inputs in the bucket's buffers ``x`` (rows past ``ids``' q are dummies
    that see only their own slot), the cache slots it writes (``slots``) and the level's slots by
    node in ``slot``. ``scalars``: [first slot written, the root's position, the committed count] on
    the device; ``ar``: an arange of at least the cache's length. Shapes depend only on q, the bucket
    and the cache: one compiled graph."""
    q, b, cap = ids.shape[0], x.ids.shape[1], alive.shape[0]
    start, root_pos, committed = scalars.unbind(0)
    slots[:b].copy_(start + ar[:b])
    x.ids[0, :q].copy_(tokens.index_select(0, ids))
    x.ids[0, q:].zero_()
    if feats is not None and x.feats is not None:  # a node reads the feature its parent's step predicted
        x.feats[0, :q].copy_(feats.index_select(0, parents.index_select(0, ids)))
        x.feats[0, q:].zero_()
    x.pos[0, :q].copy_(depths.index_select(0, ids) + root_pos)
    x.pos[0, q:].copy_(committed.expand(b - q))
    # seen: the committed entries, each fed ancestor's slot (others to the spare last column), itself
    anc = ancestors.index_select(0, ids) & (slot >= 0)[None, :]
    seen = torch.zeros((b, cap + 1), dtype=torch.bool, device=ids.device)
    seen[:q].scatter_(1, torch.where(anc, slot[None, :], cap), True)
    seen[:q, :cap] |= alive[None, :]
    seen.index_put_((ar[:b], start + ar[:b]), torch.ones((), dtype=torch.bool, device=ids.device))
    x.mask[0, 0].copy_(pl.additive_mask(seen[:, :cap], x.mask.dtype, seen.device)[0, 0])
    slot.index_copy_(0, ids, ar[:q] + start)


@region
def chain_inputs(x: StaticInputs, alive: torch.Tensor, slots: torch.Tensor, staged: torch.Tensor,
                 ar: torch.Tensor, after: torch.Tensor) -> None:
    """Level 0's forward inputs in the bucket's buffers ``x``: the chain of q committed tokens after
    the committed entries, causal among themselves (rows past q are dummies that see only their own
    slot), its cache slots (``slots``) and the chain marked committed (``alive``). ``staged``: the
    tokens padded to the bucket, then [first slot, first position, committed count, q], on the
    device: shapes depend only on the bucket and the cache, so one compiled graph per bucket. ``after``
    gets what the tree's levels read: [the first slot after the chain, the root's position, the
    committed count once the chain is committed]."""
    b, cap = x.ids.shape[1], alive.shape[0]
    start, first, committed, q = staged[b:].unbind(0)
    row = ar[:b]
    real = row < q
    x.ids[0].copy_(staged[:b])
    x.pos[0].copy_(torch.where(real, row + first, committed))
    col = start + row
    slots[:b].copy_(col)
    # a real row sees the committed entries and the chain up to itself; a dummy row only itself
    own = row[None, :] == row[:, None]
    block = (row[None, :] <= row[:, None]) & real[:, None] | own
    seen = alive[None, :] & real[:, None]
    seen = seen.scatter(1, col[None, :].expand(b, b), block)
    x.mask[0, 0].copy_(pl.additive_mask(seen, x.mask.dtype, seen.device)[0, 0])
    alive.index_put_((col,), real)
    after.copy_(torch.stack([start + q, first + q - 1, committed + q]))


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
