"""The device-resident draft phase of a run: its level step and, where a drafter lends its levels, each
level as ONE call (the forward's inputs, the draft's forward, the head's top-k, the step).

A draft level on a launch-bound GPU costs the calls the host makes, not the FLOPs. Run as parts, a level
is a host -> device copy, three compiled regions and a replayed forward with eager ops between them; run
whole, it is one function of static buffers and device scalars (:func:`whole_level`), which
``compiled`` and ``graphs`` compile with ``fullgraph=True`` (one graph per bucket and shape, each in a
code object of its own: :class:`~dynatree_core.runtime.static.regions.Region`) and ``static`` runs as written,
op for op (what the CPU's tests and ``scripts/count_ops.py`` read). :class:`DraftPhase` is made once
per run; the whole-level graphs are kept with the draft's fast path, so a later run of the same shapes
compiles nothing.

A drafter lends a level (:meth:`~dynatree_core.drafters.protocol.Drafter.lend_level`) when its levels are
a static forward and a pure head over it: the model and feature drafters, greedy, on a fast path. The
others (sampling, prompt lookup and its mixture) propose level by level, and the phase runs their step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.static.compile_cache import compile_backend, compile_scope
from dynatree_core.runtime.static.regions import COMPILING, Region, compiled, region
from dynatree_core.runtime.tree.level_step import Level, StepRule, TreeBuffers, resident_step
from dynatree_core.runtime.ngram import TopKTensors
from dynatree_core.runtime.static.draft_forwards import (ChainBooking, DraftStaticForwards, chain_inputs,
                                                         level_inputs)
from dynatree_core.runtime.host_syncs import to_device


@dataclass
class LentLevel:
    """What a drafter lends the phase for one level: its static forwards, the level's slots by node
    (``slot``), the root's position, the per-node features a feature draft keeps for its children
    (None: a plain LM), its ``head`` (a module-level pure function: the phase keys its graphs by it;
    ``head(outputs of the q nodes, their ids, feats, k, *head_args)`` -> the top-k token ids and
    log-probs) with ``head_args`` (tensors: the head's weight and ids), and ``k``. Level 0 (the root's)
    also carries its ``chain``: the committed tokens the draft has not read, the root last, booked in
    its cache; the call then fills ``slot`` (-1, the root's slot at node 0)."""

    forwards: DraftStaticForwards
    slot: torch.Tensor
    root_pos: int
    feats: torch.Tensor | None
    head: Callable[..., TopKTensors]
    head_args: tuple[torch.Tensor, ...]
    k: int
    clock: pl.ForwardClock | None = None
    chain: ChainBooking | None = None


class DraftPhase:
    """The resident draft phase of one run on ``runtime``: :meth:`step` (the level step as the runtime
    runs it) for a drafter that proposes level by level, :meth:`level` for one that lends its level."""

    def __init__(self, runtime: str, device: torch.device, levels: int = 8, step: Callable | None = None):
        self.runtime, self.device = runtime, device
        self.compiles = runtime in COMPILING
        #: :func:`resident_step` as the runtime runs it (``step``: one given, e.g. a test's own compile)
        self.step = step or (compiled(resident_step, runtime, device) if self.compiles else resident_step)
        self._depths: list[torch.Tensor] = []
        self._grow_depths(levels + 1)

    def depth(self, level: int) -> torch.Tensor:
        """``level`` as a device scalar (for compiled code whose shapes must not depend on it)."""
        if level >= len(self._depths):
            self._grow_depths(level)
        return self._depths[level]

    def _grow_depths(self, level: int) -> None:
        # each depth a device scalar made once per run (views of one arange: no op per level)
        self._depths = list(torch.arange(2 * level + 2, dtype=torch.long, device=self.device).unbind(0))

    def level(self, lent: LentLevel, tree: object, t: TreeBuffers, r: StepRule, ids: torch.Tensor,
              valid: torch.Tensor, level: int, n: torch.Tensor, budget: torch.Tensor, width: int,
              calls: torch.Tensor, overflow: torch.Tensor) -> tuple[Level, torch.Tensor, torch.Tensor]:
        """Grow level ``level`` from frontier ``ids`` in one call: the host books the level's slots
        (arithmetic, no op) and runs :func:`whole_level` (its scalars: :meth:`_scalars`); level 0 runs
        :meth:`_chain`."""
        if lent.chain is not None:
            return self._chain(lent, t, r, ids, valid, n, budget, width, calls, overflow)
        fwd, q = lent.forwards, ids.shape[0]
        b, start = fwd.begin_level(q)
        fn = self._whole(fwd, b, lent.head, whole_level)
        with pl.timed(lent.clock):
            out = fn(fwd.path.entry(b, False).inputs, tree.tokens, tree.depths, tree.parents, tree.ancestors,
                     fwd.book.alive, lent.slot, ids, lent.feats, self._scalars(lent, level, start, q),
                     fwd.path.cache.cache._ar, fwd.path.cache.cache.slots, lent.head_args, lent.k, t, r, valid,
                     self.depth(level + 1), n, budget, width, calls, overflow)
        fwd.end_level(start, q)
        return out

    def _chain(self, lent: LentLevel, t: TreeBuffers, r: StepRule, ids: torch.Tensor, valid: torch.Tensor,
               n: torch.Tensor, budget: torch.Tensor, width: int, calls: torch.Tensor, overflow: torch.Tensor
               ) -> tuple[Level, torch.Tensor, torch.Tensor]:
        """Level 0 in one call (:func:`whole_chain`): the chain the drafter booked, staged with one host ->
        device copy (a feature draft's features: two ops more), the root's candidates and the step."""
        fwd, c = lent.forwards, lent.chain
        assert c is not None and c.bucketed, "a lent chain is held by a bucket"
        x = fwd.path.entry(c.b, False).inputs
        fwd.stage_feats(x, c)
        staged = to_device(c.staged(), self.device)
        fn = self._whole(fwd, c.b, lent.head, whole_chain)
        cache = fwd.path.cache.cache
        with pl.timed(lent.clock):
            out = fn(x, fwd.book.alive, cache.slots, staged, cache._ar, fwd.after_chain, lent.slot, lent.feats,
                     lent.head_args, lent.k, t, r, ids, valid, self.depth(1), n, budget, width, calls, overflow)
        fwd.end_chain(c)
        return out

    def _scalars(self, lent: LentLevel, level: int, start: int, q: int) -> torch.Tensor:
        """What level 0 left on the device for the tree's levels ([the first slot after the chain, the
        root's position, the committed count]: no copy per level): a resident tree's levels have one
        width ``q`` and level 0 booked room for them all (no compaction between them), so level ``l``
        writes from that slot + (l - 1) q, which :func:`whole_level` computes from the depth. Checked
        here against the host's own booking (arithmetic, no op)."""
        fwd = lent.forwards
        first, root_pos, committed = fwd.after_chain_host
        if (start, root_pos, committed) != (first + (level - 1) * q, lent.root_pos, fwd.book.committed):
            raise RuntimeError(f"draft level {level} books slot {start} at root position {lent.root_pos} after "
                               f"{fwd.book.committed} committed entries; level 0 left {first + (level - 1) * q}, "
                               f"{root_pos}, {committed} on the device (a resident tree's levels share one width "
                               "and nothing may move its slots)")
        return fwd.after_chain

    def _whole(self, fwd: DraftStaticForwards, b: int, head: Callable, make: Callable) -> Callable:
        """The whole-level function (``make``: :func:`whole_level` or :func:`whole_chain`) of bucket ``b``
        with ``head``: kept with the draft's fast path (compiled once per process and shape on
        ``compiled`` / ``graphs``; as written elsewhere)."""
        key = (make.__name__, f"{head.__module__}.{head.__qualname__}", b, self.runtime, self.compiles)
        made = fwd.path.levels.get(key)
        if made is None:
            forward = fwd.path.spec.forward(fwd.path.model, fwd.path.cache.cache, fwd.path.entry(b, False).inputs,
                                            False)
            fn = make(forward, head)
            if self.compiles:
                device = self.device
                fn = Region(fn, compile_backend(), scope=lambda: compile_scope(device, freezing=False))
            made = fwd.path.levels[key] = fn
        return made


def whole_level(forward: Callable[[], tuple[torch.Tensor, torch.Tensor | None]], head: Callable[..., TopKTensors]
                ) -> Callable[..., tuple[Level, torch.Tensor, torch.Tensor]]:
    """One draft level as one function over a bucket's static buffers: its inputs
    (:func:`~dynatree_core.runtime.static.draft_forwards.level_inputs`), the draft's ``forward`` over them
    (its KV entries written at the level's slots), ``head`` on the q real rows, and
    :func:`~dynatree_core.runtime.tree.level_step.resident_step`. No host read and no shape that depends
    on data: it traces with ``fullgraph=True``."""

    def one_level(x, tokens, depths, parents, ancestors, alive, slot, ids, feats, after, ar, slots, head_args, k,
                  t, r, valid, depth, n, budget, width, calls, overflow):
        # level depth - 1 writes from the first slot after the chain + (depth - 2) q (DraftPhase._scalars)
        scalars = torch.stack([after[0] + (depth - 2) * ids.shape[0], after[1], after[2]])
        level_inputs(x, tokens, depths, parents, ancestors, alive, slot, ids, feats, scalars, ar, slots)
        out, _ = forward()
        top_ids, top_lps = head(out[:ids.shape[0]], ids, feats, k, *head_args)
        return resident_step(t, r, ids, valid, top_ids, top_lps, None, depth, n, budget, width, calls, overflow)

    return region(one_level)


def whole_chain(forward: Callable[[], tuple[torch.Tensor, torch.Tensor | None]], head: Callable[..., TopKTensors]
                ) -> Callable[..., tuple[Level, torch.Tensor, torch.Tensor]]:
    """Level 0 as one function over a bucket's static buffers: the chain's inputs
    (:func:`~dynatree_core.runtime.static.draft_forwards.chain_inputs`: the committed tokens the draft
    has not read, the root last, committed at once), the draft's ``forward``, ``head`` on the root's
    row (the chain's last: q is on the device, in ``staged``), the tree's slots by node (-1, the root's
    slot at node 0) and :func:`~dynatree_core.runtime.tree.level_step.resident_step`. No host read and
    no shape that depends on data (one graph per bucket)."""

    def chain_level(x, alive, slots, staged, ar, after, slot, feats, head_args, k, t, r, ids, valid, depth, n,
                    budget, width, calls, overflow):
        chain_inputs(x, alive, slots, staged, ar, after)
        out, _ = forward()
        b = x.ids.shape[1]
        root = out.index_select(0, staged[b + 3:] - 1)  # the chain's q - 1: the root's row
        slot.fill_(-1)
        slot[:1].copy_(after[:1] - 1)  # the root's slot: the chain's last
        top_ids, top_lps = head(root, ids, feats, k, *head_args)
        return resident_step(t, r, ids, valid, top_ids, top_lps, None, depth, n, budget, width, calls, overflow)

    return region(chain_level)
