"""Static KV caches: preallocated once, written in place at explicit slots (the fast path's caches).

A :class:`SlotCache` is a transformers ``Cache`` whose every layer holds ``[1, heads, capacity, dim]``
key and value buffers, allocated at the first write and never reallocated. A forward writes its
q entries at the slots held in :attr:`SlotCache.slots` (a device tensor the caller fills before
the forward: the forward itself has static shapes and addresses, what graph capture and
``torch.compile`` need) and attends over all ``capacity`` slots under the caller's mask.

:class:`StaticTargetCache` keeps the target's committed entries in such a cache with the
bookkeeping the eager :class:`~dynatree_core.runtime.cache.dynamic.TargetCache` uses
(:class:`~dynatree_core.runtime.cache.entry_book.EntryBook`): a verified tree writes its
nodes at the next free slots; the root and the accepted path are committed where they are, the
rejected entries between them stay dead (masked), the rejected suffix is simply written over by the
next forward, and once the free room runs out the live entries are gathered to the front in place
(rare: amortised over many iterations). Positions stay logical (committed entries before a token),
so where an entry sits never changes attention.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.cache.entry_book import EntryBook


class SlotLayer(CacheLayerMixin):
    """One layer's static key/value buffers, written at the cache's slots."""

    is_compileable = True
    is_sliding = False

    def __init__(self, capacity: int, owner: "SlotCache"):
        super().__init__()
        self.capacity, self.owner = capacity, owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        b, h = key_states.shape[:2]
        self.keys = torch.zeros((b, h, self.capacity, key_states.shape[-1]), dtype=key_states.dtype,
                                device=self.device)
        self.values = torch.zeros((b, h, self.capacity, value_states.shape[-1]), dtype=value_states.dtype,
                                  device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        at = self.owner.slots[: key_states.shape[-2]]
        self.keys.index_copy_(2, at, key_states)
        self.values.index_copy_(2, at, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.capacity, 0

    def get_seq_length(self) -> int:
        return self.owner.written

    def get_max_length(self) -> int:
        return self.capacity


class SlotCache(Cache):
    """``layers`` static layers of ``capacity`` slots; a forward of q tokens writes at ``slots[:q]``
    (set with :meth:`write_at`, at most ``max_write`` per forward)."""

    def __init__(self, layers: int, capacity: int, max_write: int, device: torch.device):
        self.capacity, self.max_write = int(capacity), int(max_write)
        self.slots = torch.zeros(self.max_write, dtype=torch.long, device=device)
        self._ar = torch.arange(self.max_write, device=device)
        #: slots in use so far (what ``get_seq_length`` reports to a model that asks)
        self.written = 0
        super().__init__(layers=[SlotLayer(self.capacity, self) for _ in range(layers)])

    def write_at(self, start: int, count: int) -> None:
        """The next forward writes ``count`` entries at slots ``start ..`` (in place: the slot
        buffer's address never changes)."""
        self.claim(start, count)
        torch.add(self._ar[:count], start, out=self.slots[:count])

    def claim(self, start: int, count: int) -> None:
        """:meth:`write_at`'s checks and bookkeeping, for a caller that writes ``slots`` itself (a
        compiled region: ``slots[:count] = start + arange(count)``)."""
        if count > self.max_write or start + count > self.capacity:
            raise ValueError(f"a forward of {count} entries at slot {start} does not fit the static cache "
                             f"({self.capacity} slots, {self.max_write} per forward)")
        self.written = max(self.written, start + count)

    @property
    def allocated(self) -> bool:
        return bool(self.layers) and self.layers[0].is_initialized

    @torch.inference_mode()
    def move(self, src: torch.Tensor, dst_start: int) -> None:
        """Entries at slots ``src`` (ascending) to ``dst_start ..``, in place in every layer."""
        count = int(src.shape[0])
        for layer in self.layers:
            if layer.is_initialized:
                layer.keys[:, :, dst_start:dst_start + count] = layer.keys.index_select(2, src)
                layer.values[:, :, dst_start:dst_start + count] = layer.values.index_select(2, src)


class StaticTargetCache:
    """The target's committed entries in a :class:`SlotCache`: the interface of
    :class:`~dynatree_core.runtime.cache.dynamic.TargetCache` (``committed``, ``physical``,
    ``commit_written``, ``keep``, ``drop_written``, ``compact``) over static buffers.

    ``physical`` is the first free slot: every slot below it is committed or dead, and a forward
    writes from there (:meth:`reserve`)."""

    def __init__(self, cache: SlotCache):
        self.cache = cache
        self.reset()

    def reset(self) -> None:
        """Forget every entry (a new sequence; the buffers stay where they are)."""
        self.book = EntryBook()
        self._pending = 0  # entries the last forward wrote after the resolved ones
        self._visible: torch.Tensor | None = None
        self.compactions = 0
        self.cache.written = 0

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    @property
    def physical(self) -> int:
        return self.book.resolved

    @property
    def committed(self) -> int:
        return self.book.committed

    @property
    def dead(self) -> int:
        return self.book.dead

    def visible(self, device: torch.device) -> torch.Tensor:
        """Bool [capacity]: True at the committed slots (what every new token may attend to)."""
        if self._visible is None or self._visible.device != device:
            flags = np.zeros(self.capacity, dtype=bool)
            flags[: self.book.resolved] = self.book.alive
            self._visible = to_device(flags, device, torch.bool)
        return self._visible

    def reserve(self, count: int, write: bool = True) -> int:
        """Room for a forward of ``count`` entries at the first free slot (compacting the dead
        entries away first if they are in the way); returns that slot and points the writes there
        (``write=False``: the caller's compiled region writes the slots)."""
        if self._pending:
            raise RuntimeError("StaticTargetCache: resolve the last forward's entries before the next one")
        if self.physical + count > self.capacity and self.dead:
            self.compact()
        if self.physical + count > self.capacity:
            raise ValueError(f"the static cache is full: {self.committed} committed entries + a forward of {count} "
                             f"exceed its {self.capacity} slots (raise static_len)")
        start = self.physical
        if write:
            self.cache.write_at(start, count)
        else:
            self.cache.claim(start, count)
        self._pending = count
        return start

    def commit_written(self, count: int | None = None) -> None:
        """The first ``count`` (default: all) entries the last forward wrote are committed (a causal
        forward: prefill, or the recompute mode's re-run)."""
        self.book.commit(self._pending if count is None else count)
        self._pending = 0
        self._visible = None

    def keep(self, start: int, selected: Sequence[int]) -> None:
        """After a verify forward that wrote from ``start``: commit ``start + i`` for i in
        ``selected`` (ascending); the entries after the last kept one are free again."""
        self.book.keep(start, selected, self._pending)
        self._pending = 0
        self._visible = None

    def drop_written(self) -> None:
        """Forget what the last forward wrote (the recompute mode's crop)."""
        self._pending = 0

    def compact(self) -> None:
        """Gather the committed entries to the front, in place (one index_select per buffer)."""
        if not self.dead:
            return
        live = self.book.compacted()
        if self.cache.allocated:
            self.cache.move(to_device(live, self.cache.slots.device), 0)
        self._visible = None
        self.compactions += 1
