"""The target's forwards, one object per run: what the decode loop and the explorer call, whatever the runtime.

:class:`EagerTarget` (dynamic cache, any tree size) and :class:`StaticTarget` (the fast path's
static cache, trees padded to buckets, forwards compiled or captured) have the same methods: ``prefill`` (commits the prompt),
``verify`` (root + tree in one forward; its entries stay pending), ``keep`` (the gather mode:
root + accepted path committed where they are) and ``rerun`` (the recompute mode: the pending
entries dropped, the committed tokens re-run), and ``draft_forwards`` gives a draft model the same
runtime. :func:`target_backend` picks one when a run starts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import torch

from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.static.regions import COMPILING, compiled, region
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.static.fast_path import FastPath, StaticInputs, check_owner, fast_path, forward_fn
from dynatree_core.runtime.cache.slots import StaticTargetCache
from dynatree_core.runtime.static.draft_forwards import DraftStaticForwards, draft_fast_path
from dynatree_core.runtime.static.size_read import SizeRead, read_price
from dynatree_core.runtime.cache.dynamic import TargetCache

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree


class TargetBackend(Protocol):
    """The target's forwards of one run (see the module docstring)."""

    runtime: str
    #: seconds spent capturing or compiling forwards before the run (None: eager, nothing built)
    capture_s: float | None
    #: the static cache's length (prompt, new tokens and a tree fit in it); None: eager, no bound
    capacity: int | None
    #: whether a resident tree reads its real size before its verify (None: eager, every tree's size is known)
    size_read: SizeRead | None

    def prefill(self, ids: torch.Tensor, want_hidden: bool, clock: pl.ForwardClock | None) -> torch.Tensor | None:
        """Commit the causal chain ``ids`` [1, q]; with ``want_hidden`` its final hidden states [q, H]."""

    def verify(self, tree: "DeviceTree", want_hidden: bool, clock: pl.ForwardClock | None) -> pl.DeviceVerified:
        """Root + every node of ``tree`` in ONE forward under the tree mask, at positions prefix + depth."""

    def keep(self, start: int, selected: Sequence[int]) -> None:
        """Commit the verified entries ``start + i`` for i in ``selected``; the rest are dead or freed."""

    def rerun(self, ids: torch.Tensor, clock: pl.ForwardClock | None) -> None:
        """Drop the verified entries and commit the causal chain ``ids`` [1, q] instead."""

    def draft_forwards(self, model: torch.nn.Module, length: int, levels: tuple[int, int] | None = None
                       ) -> DraftStaticForwards | None:
        """A draft model's level forwards on the same runtime (None: the draft stays eager)."""


class EagerTarget:
    """The target's forwards on a :class:`TargetCache` (a ``DynamicCache``; no padding)."""

    runtime = "eager"
    capture_s = None  # nothing is captured or compiled
    capacity = None  # a dynamic cache: no static length
    size_read = None  # a tree verifies its own nodes: no bucket

    def __init__(self, model: torch.nn.Module, cache: TargetCache | None = None):
        self.model = model
        self.cache = cache if cache is not None else TargetCache()

    def fork(self) -> "EagerTarget":
        """An independent copy (the explorer verifies each regrown tree on a copy of the prefilled cache)."""
        return EagerTarget(self.model, copy.deepcopy(self.cache))

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, want_hidden: bool, clock: pl.ForwardClock | None) -> torch.Tensor | None:
        hidden = pl.prefill(self.model, ids, self.cache.cache, want_hidden, clock)
        self.cache.commit_written()
        return hidden

    @torch.inference_mode()
    def verify(self, tree: "DeviceTree", want_hidden: bool, clock: pl.ForwardClock | None) -> pl.DeviceVerified:
        n, dev = tree.n, tree.device
        start, prefix_len = self.cache.physical, self.cache.committed  # dead entries sit below start, masked
        dtype = pl.model_dtype(self.model)
        lowest = torch.finfo(dtype).min
        # the additive mask written directly (no bool [n, past + n] first): fewer ops, cheaper on a GPU host
        mask = torch.zeros((1, 1, n, start + n), dtype=dtype, device=dev)
        dead = self.cache.dead_mask(dev)
        if dead is not None:
            mask[0, 0, :, :start].masked_fill_(dead, lowest)
        mask[0, 0, :, start:].masked_fill_(~tree.tree_mask(), lowest)
        ids, pos = tree.tokens[:n][None], prefix_len + tree.position_offsets()
        if want_hidden:
            logits, hidden = pl.forward_with_hidden(self.model, ids, self.cache.cache, mask, pos, clock)
        else:
            logits, hidden = pl.forward(self.model, ids, self.cache.cache, mask, pos, clock), None
        return pl.DeviceVerified(logits, hidden, prefix_len, logits.argmax(dim=-1), start)

    def keep(self, start: int, selected: Sequence[int]) -> None:
        self.cache.keep(start, selected)

    @torch.inference_mode()
    def rerun(self, ids: torch.Tensor, clock: pl.ForwardClock | None) -> None:
        self.cache.drop_written()
        pl.forward(self.model, ids, self.cache.cache, clock=clock)
        self.cache.commit_written()

    def draft_forwards(self, model: torch.nn.Module, length: int, levels: tuple[int, int] | None = None) -> None:
        return None  # an eager run drafts eagerly too


@dataclass
class StaticTarget:
    """The decode loop's target forwards on a :class:`FastPath` (the methods of
    :class:`~dynatree_core.runtime.backend.EagerTarget`): prefill (eager: its length varies),
    verify (the bucket's captured forward), keep, and the recompute mode's re-run (eager)."""

    path: FastPath
    runtime: str = ""
    size_read: SizeRead | None = None
    _inputs_warm: bool = False  # the verify inputs of every bucket a size read may choose are compiled

    def __post_init__(self) -> None:
        self.path.owner = self  # a later run on the same target takes the path over
        self.runtime = self.path.runtime
        if self.size_read is None:
            self.size_read = SizeRead(self.path.buckets, dict(self.path.bucket_s),
                                      read_price(self.path.cache.cache.slots.device))

    @property
    def capacity(self) -> int:
        return self.path.capacity

    @property
    def cache(self) -> StaticTargetCache:
        check_owner(self.path, self)
        return self.path.cache

    @property
    def capture_s(self) -> float:
        """Seconds spent building (capturing, compiling) the path's forwards, apart from any decode."""
        return self.path.capture_s

    def draft_forwards(self, model: torch.nn.Module, length: int, levels: tuple[int, int] | None = None
                       ) -> DraftStaticForwards:
        """A draft model's level forwards on the same runtime, levels up to this path's largest bucket
        (``levels``: the resident draft phase's level count and frontier width)."""
        return draft_fast_path(model, self.runtime, length, self.path.buckets[-1], static_len=None, levels=levels)

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, want_hidden: bool, clock: pl.ForwardClock | None) -> torch.Tensor | None:
        """Commit the causal chain ``ids`` [1, q]; the final hidden states with ``want_hidden``."""
        hidden = self._chain(ids, want_hidden, clock, logits=False)[1]
        self.cache.commit_written()
        return hidden

    def keep(self, start: int, selected: Sequence[int]) -> None:
        self.cache.keep(start, selected)

    @torch.inference_mode()
    def rerun(self, ids: torch.Tensor, clock: pl.ForwardClock | None) -> None:
        """The recompute mode: drop the verified entries, re-run the committed tokens ``ids`` [1, q]."""
        self.cache.drop_written()
        self._chain(ids, False, clock)
        self.cache.commit_written()

    def _chain(self, ids: torch.Tensor, want_hidden: bool, clock: pl.ForwardClock | None, logits: bool = True
               ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        model, cache = self.path.model, self.cache
        q, dev, dtype = ids.shape[1], ids.device, pl.model_dtype(model)
        committed = cache.committed
        start = cache.reserve(q)  # first: it may compact, which moves the committed entries
        visible = cache.visible(dev)
        mask = torch.full((1, 1, q, cache.capacity), torch.finfo(dtype).min, dtype=dtype, device=dev)
        mask[0, 0].masked_fill_(visible[None, :], 0.0)
        mask[0, 0, :, start:start + q].masked_fill_(pl.causal_allowed(q, 0, dev), 0.0)
        inputs = StaticInputs(ids, mask, torch.arange(committed, committed + q, device=dev)[None])
        with pl.timed(clock):
            return forward_fn(model, cache.cache, inputs, want_hidden, logits)()

    @torch.inference_mode()
    def verify(self, tree: Any, want_hidden: bool, clock: pl.ForwardClock | None) -> pl.DeviceVerified:
        """Root + tree in one forward, the tree padded to its bucket with dummy nodes that see only
        themselves: one replayed forward. Its entries stay pending (``keep`` or ``rerun`` resolve them)."""
        n, cache = tree.n, self.cache
        b = self.size_read.padded(n)  # the cheapest bucket that holds n (bucket(n) where untimed)
        entry = self.path.entry(b, want_hidden)
        committed = cache.committed
        start = cache.reserve(b, write=False)  # first: it may compact, which moves the committed entries
        visible = cache.visible(tree.device)
        staged = to_device([start, committed, n], tree.device)  # one host -> device copy
        inputs = compiled(verify_inputs, self.runtime, tree.device)
        if self.size_read.reads and not self._inputs_warm:
            self._warm_inputs(inputs, tree, want_hidden, visible)
        inputs(entry.inputs, tree.tokens, tree.depths, tree.ancestors, visible, cache.cache.slots, staged,
               cache.cache._ar)
        with pl.timed(clock):
            logits, hidden = entry.run()
        logits = logits[:n]
        return pl.DeviceVerified(logits, None if hidden is None else hidden[:n], committed, logits.argmax(dim=-1),
                                 start)

    def _warm_inputs(self, inputs: Any, tree: Any, want_hidden: bool, visible: torch.Tensor) -> None:
        """At a run's first size read, the verify-inputs region called (compiled, on a compiling runtime) for
        every bucket below the tree's shape, rather than in whichever later iteration first verifies a tree
        that small: a benchmark's untimed warm-up decode then compiles them all. Each call writes its own
        bucket's buffers and the slot list's first entries (slots 0..b-1 of a one-node tree: in range), which
        the iteration's own call then writes over."""
        self._inputs_warm = True
        if self.runtime not in COMPILING:
            return
        cache, top = self.cache, self.size_read.padded(tree.slots)
        staged = to_device([0, 0, 1], tree.device)
        for b in self.path.buckets:
            if b < top:
                inputs(self.path.entry(b, want_hidden).inputs, tree.tokens, tree.depths, tree.ancestors, visible,
                       cache.cache.slots, staged, cache.cache._ar)


@region
def verify_inputs(x: StaticInputs, tokens: torch.Tensor, depths: torch.Tensor, ancestors: torch.Tensor,
                  visible: torch.Tensor, slots: torch.Tensor, staged: torch.Tensor, ar: torch.Tensor) -> None:
    """The verify forward's inputs in the bucket's buffers ``x``: the root and the tree's first n
    nodes (``tokens``, ``depths``, ``ancestors``: the tree's arrays) after the committed entries
    (``visible``), each seeing those, its ancestors and itself at position committed + depth; rows
    past n are dummies that see only their own slot; the cache slots written (``slots``).
    ``staged``: [first slot, committed count, n] on the device: shapes depend only on the bucket,
    the tree's capacity and the cache, so one compiled graph per bucket."""
    b, last = x.ids.shape[1], tokens.shape[0] - 1
    start, committed, n = staged.unbind(0)
    row = ar[:b]
    real = row < n
    node = row.clamp(max=last)
    x.ids[0].copy_(torch.where(real, tokens.index_select(0, node), 0))
    x.pos[0].copy_(torch.where(real, depths.index_select(0, node) + committed, committed))
    col = start + row
    slots[:b].copy_(col)
    tree = ancestors.index_select(0, node).index_select(1, node) & real[:, None] & real[None, :]
    block = tree | (row[None, :] == row[:, None])
    seen = (visible[None, :] & real[:, None]).scatter(1, col[None, :].expand(b, b), block)
    x.mask[0, 0].copy_(pl.additive_mask(seen, x.mask.dtype, seen.device)[0, 0])


def target_backend(model: torch.nn.Module, runtime: str, length: int, max_tree: int, hidden: bool,
                   buckets: tuple[int, ...] | None = None, static_len: int | None = None) -> TargetBackend:
    """The target's forwards for a resolved ``runtime`` (see
    :func:`~dynatree_core.runtime.static.fast_path.resolve_runtime`): eager, or the fast path kept for the
    target that holds ``length`` tokens plus a tree of ``max_tree`` nodes, every bucket's forward
    built (captured, compiled) now, before the run is timed; ``hidden``: with the final hidden
    states (a feature draft reads them)."""
    if runtime == "eager":
        return EagerTarget(model)
    path = fast_path(model, runtime, length, max_tree, buckets, static_len)
    path.prepare(hidden=hidden)
    return StaticTarget(path)
