"""The target's KV cache across iterations: a verified tree's rejected entries are hidden, not moved.

A verification forward writes one cache entry per tree node; only the root and the accepted
path are committed. Moving those into place (gathering them down, as :func:`keep_selected`
does) costs two ops per key/value tensor per layer *every iteration*: ~120 ops for a 30-layer
target, ~1.7 ms on the launch-bound H100 host of docs/gpu/2026-11-27-h100. Instead:

* rejected entries *after* the last accepted one are cropped (slicing: views, nothing copied);
* rejected entries *between* accepted ones stay where they are, and every later target forward's
  attention mask hides them (:meth:`TargetCache.dead_mask`, one bool per entry on the device);
* once :attr:`TargetCache.compact_after` such dead entries have piled up, one gather per layer
  compacts the cache (amortised over many iterations).

The per-layer cache surgery both use (:func:`cache_length`, :func:`crop`, :func:`keep_selected`)
is here too; :mod:`dynatree_core.runtime.model.forwards` re-exports it.

Positions are *logical*: a new token's position is the number of committed entries before it
(:attr:`TargetCache.committed`), never its physical index. Keys were rotated at their logical
positions when they were written, so attention does not depend on where an entry sits, and a
masked entry gets exactly zero weight (its additive mask is dtype-min, its softmax term
underflows to 0). Chains (AR, linear) never leave dead entries: their rejected suffix is cropped.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from dynatree_core.runtime.cache.entry_book import EntryBook
from dynatree_core.runtime.host_syncs import to_device

#: dead entries that trigger a compaction (a gather per layer). On a GPU the dead entries' extra
#: attention work is negligible next to a gather's launches; on a CPU 64 entries against a
#: prefix of hundreds cost little as well
COMPACT_AFTER = 64


def compact_threshold(compact_after: int | None) -> int:
    """``compact_after`` checked (dead entries that trigger a compaction, >= 1; None: :data:`COMPACT_AFTER`)."""
    compact_after = COMPACT_AFTER if compact_after is None else compact_after
    if not isinstance(compact_after, int) or isinstance(compact_after, bool) or compact_after < 1:
        raise ValueError(f"compact_after must be an integer >= 1, got {compact_after!r}")
    return compact_after


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def crop(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` entries of every layer."""
    drop = cache_length(cache) - length
    if drop > 0:
        cache.crop(-drop)


@torch.inference_mode()
def keep_selected(cache: DynamicCache, start: int, selected: Sequence[int] | torch.Tensor) -> None:
    """Keep entries [0, start) plus ``start + i`` for i in ``selected`` (ascending), drop the rest.

    Used to keep the accepted path of a verified tree: its entries are moved down to
    [start, start + len(selected)) and the cache is cut there. Nothing is recomputed.
    ``selected`` may be a device tensor (no host round trip) or host ints.
    """
    if isinstance(selected, torch.Tensor):
        count, move, src = int(selected.shape[0]), True, selected + start
    else:
        selected = list(selected)
        count = len(selected)
        move = selected != list(range(count))  # already contiguous at the front: no move needed
        src = None
    if move and count:
        for layer in cache.layers:
            if src is None:
                src = to_device([start + i for i in selected], layer.keys.device)
            idx = src.to(layer.keys.device)
            layer.keys[:, :, start:start + count] = layer.keys.index_select(2, idx)
            layer.values[:, :, start:start + count] = layer.values.index_select(2, idx)
    crop(cache, start + count)


class TargetCache:
    """A ``DynamicCache`` plus which of its entries are committed (host bookkeeping only).

    Every physical entry is *committed*, *dead* (a rejected tree node still inside the cache)
    or *pending* (written by the last forward and not yet resolved by :meth:`keep` or
    :meth:`commit_written`).
    """

    def __init__(self, cache: DynamicCache | None = None, compact_after: int | None = None):
        self.cache = cache if cache is not None else DynamicCache()
        self.compact_after = compact_threshold(compact_after)
        self.book = EntryBook()
        self._dead_dev: torch.Tensor | None = None  # device copy of ~alive, made once per change
        #: compactions so far (a gather per layer each)
        self.compactions = 0

    # --- sizes ---------------------------------------------------------------------------------
    @property
    def physical(self) -> int:
        """Entries in the cache, dead ones included."""
        return cache_length(self.cache)

    @property
    def committed(self) -> int:
        """Committed entries: the logical length, and the position of the next token."""
        return self.book.committed

    @property
    def dead(self) -> int:
        return self.book.dead

    def dead_mask(self, device: torch.device) -> torch.Tensor | None:
        """Bool [physical] on ``device``, True at the dead entries; None when there are none
        (then every entry is visible: the caller's mask needs no prefix part)."""
        if not self.dead:
            return None
        if self.book.resolved != self.physical:
            raise RuntimeError(f"TargetCache: {self.physical - self.book.resolved} cache entries were written "
                               f"and never resolved by keep() or commit_written()")
        if self._dead_dev is None or self._dead_dev.device != device:
            self._dead_dev = to_device(~self.book.alive, device, torch.bool)
        return self._dead_dev

    # --- resolving what a forward wrote --------------------------------------------------------
    def commit_written(self) -> None:
        """Every entry written since the last resolve is committed (a causal forward: prefill,
        or the committed tokens re-run in the paper's recompute mode)."""
        new = self.physical - self.book.resolved
        if new:
            self.book.commit(new)
            self._dead_dev = None

    def keep(self, start: int, selected: Sequence[int]) -> None:
        """After a verification forward that wrote entries [start, physical): commit
        ``start + i`` for each i in ``selected`` (ascending), drop the others."""
        kept = self.book.keep(start, selected, self.physical - start)
        crop(self.cache, start + kept)  # the rejected entries after the last kept one: a slice, nothing moves
        self._dead_dev = None  # one host -> device copy per verify while dead entries remain
        if self.dead >= self.compact_after:
            self.compact()

    def drop_written(self) -> None:
        """Drop every entry written since the last resolve (the recompute mode's crop)."""
        crop(self.cache, self.book.resolved)

    def compact(self) -> None:
        """Move the committed entries down over the dead ones: one gather per key/value tensor."""
        if not self.dead:
            return
        if self.book.resolved != self.physical:
            raise RuntimeError("compact: resolve the last forward's entries first")
        first = self.cache.layers[0].keys.device
        keep_selected(self.cache, 0, to_device(self.book.compacted(), first))
        self._dead_dev = None
        self.compactions += 1
