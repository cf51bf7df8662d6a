"""Which entries of a KV cache are committed and which are dead: the bookkeeping both target caches share.

A verify forward writes one entry per tree node; only the root and the accepted path are
committed. The rejected entries between accepted ones stay where they are (*dead*: every later
forward's mask hides them), those after the last accepted one are freed. :class:`EntryBook` keeps
one flag per resolved physical entry on the host; the eager
:class:`~dynatree_core.runtime.cache.dynamic.TargetCache` and the fast path's
:class:`~dynatree_core.runtime.cache.slots.StaticTargetCache` differ only in storage.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def kept_flags(selected: Sequence[int], written: int) -> np.ndarray:
    """The alive flags of a verify forward's entries after ``keep``: True at the ``selected``
    offsets (ascending, below ``written``, the entries that forward wrote), up to the last kept one
    (the entries after it are free again)."""
    sel = np.asarray(list(selected), dtype=np.int64)
    if sel.size and (np.any(np.diff(sel) <= 0) or sel[0] < 0 or sel[-1] >= written):
        raise ValueError(f"keep: selected must be ascending offsets below {written}, got {sel.tolist()}")
    flags = np.zeros(int(sel[-1]) + 1 if sel.size else 0, dtype=bool)
    flags[sel] = True
    return flags


class EntryBook:
    """One flag per resolved physical entry (True: committed, False: dead) and the committed count."""

    def __init__(self) -> None:
        self.alive = np.zeros(0, dtype=bool)
        self.committed = 0  # the logical length: the position of the next token

    @property
    def resolved(self) -> int:
        """Physical entries resolved so far (committed or dead): the next forward writes from here."""
        return len(self.alive)

    @property
    def dead(self) -> int:
        return len(self.alive) - self.committed

    def commit(self, count: int) -> None:
        """``count`` more entries, all committed (a causal forward: prefill, or a re-run)."""
        if count:
            self.alive = np.concatenate([self.alive, np.ones(count, dtype=bool)])
            self.committed += count

    def keep(self, start: int, selected: Sequence[int], written: int) -> int:
        """Resolve a verify forward that wrote ``written`` entries from ``start``: ``start + i`` is
        committed for each i in ``selected`` (ascending). Returns how many entries stay resolved
        (up to the last kept one; the caller frees the rest)."""
        if start != self.resolved:
            raise ValueError(f"keep: start must be the first unresolved entry ({self.resolved}), got {start}")
        flags = kept_flags(selected, written)
        self.alive = np.concatenate([self.alive, flags])
        self.committed += int(flags.sum())
        return len(flags)

    def compacted(self) -> np.ndarray:
        """The committed entries' physical indices, ascending; the book then holds them at the front."""
        live = np.flatnonzero(self.alive)
        self.alive = np.ones(len(live), dtype=bool)
        return live
