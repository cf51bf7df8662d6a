"""The prompt-lookup tail on the device: copied spans below the drafted tree's most probable leaves.

A mixin of :class:`~dynatree_core.runtime.tree.tree.DeviceTree`; the torch-free reference is
:func:`~dynatree_core.policy.tail.add_tail`. The spans come from :func:`~dynatree_core.runtime.ngram.lookup_spans`
over the committed tokens, which the caller passes on the device (the lookup drafter keeps them).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import torch

from dynatree_core.policy.lookup import PromptLookup
from dynatree_core.policy.tree import LOOKUP_TAIL, TAIL_MIN_NGRAM
from dynatree_core.runtime.tree.codes import CODE
from dynatree_core.runtime.host_syncs import HostSyncs, to_device
from dynatree_core.runtime.ngram import lookup_spans


@functools.lru_cache(maxsize=8)
def _tail_source(source: PromptLookup) -> PromptLookup:
    """``source`` with n-grams of at least :data:`TAIL_MIN_NGRAM` tokens."""
    return dataclasses.replace(source, min_ngram=max(source.min_ngram, TAIL_MIN_NGRAM),
                               max_ngram=max(source.max_ngram, TAIL_MIN_NGRAM))


class TailGrowth:
    """:meth:`add_tail`, run by the engine after :meth:`DeviceTree.grow` when the rule has a tail."""

    def add_tail(self, seq: torch.Tensor, source: PromptLookup, syncs: HostSyncs, max_depth: int) -> "TailGrowth":
        """Below the drafted tree's leaves, the spans prompt lookup copies (:attr:`GrowthRule.lookup_tail`
        tokens each: what followed the latest earlier occurrence of the longest n-gram, of at least
        :data:`TAIL_MIN_NGRAM` tokens, ending the leaf's context, in the committed tokens ``seq``
        [L] on the tree's device, with ``source``'s n-gram bounds), most probable leaves first,
        :attr:`GrowthRule.tail_n_max` nodes in all, none deeper than ``max_depth``. One lookup for
        all leaves and one host read (the spans' lengths); no draft forward. Tail nodes are
        appended after the drafted ones, each span in path order, so a path still has increasing
        indices (what :meth:`select` reads) though the array is no longer in BFS order; the draft
        never reads them (an accepted one reaches it as a committed token)."""
        rule, dev, n = self.rule, self.device, self.n
        budget = min(rule.tail_n_max, self.scratch - n)
        if not rule.lookup_tail or budget <= 0:
            return self
        source = _tail_source(source)
        # the leaves (no child), most probable first (ties: BFS order); at most `budget` of them.
        # A resident tree's slots past its nodes are no leaves (their parent is written to the spare slot)
        live = self._ar[:n] < self._n_dev if self.resident else None
        parents = self.parents[1:n] if live is None else torch.where(live[1:], self.parents[1:n], n)
        has_child = torch.zeros(n + 1, dtype=torch.bool, device=dev).index_fill_(0, parents, True)[:n]
        stop = has_child if live is None else has_child | ~live
        key = self.cum_logps[:n].masked_fill(stop, -math.inf)
        ids = torch.argsort(key, descending=True, stable=True)[:budget]
        depth = self.depths.index_select(0, ids)
        span, lps, length = lookup_spans(seq, self._tail_contexts(seq, ids, depth, self.depth, source.max_ngram),
                                         source, rule.lookup_tail)
        room = (max_depth - depth).clamp(min=0)
        length = torch.minimum(length, room).masked_fill(stop.index_select(0, ids), 0)
        if self.resident:
            self._write_tail_resident(ids, depth, span, lps, length, budget)
            return self
        got = syncs.fetch(length=length)["length"]
        self.tail_reads = 1
        # the budget, leaf by leaf in order of probability: a span cut short keeps its first tokens
        take = np.minimum(got, np.maximum(0, budget - (np.cumsum(got) - got)))
        if int(take.sum()):
            self._write_tail(ids, depth, span, lps, take)
        return self

    def _write_tail(self, ids: torch.Tensor, depth: torch.Tensor, span: torch.Tensor, lps: torch.Tensor,
                    take: np.ndarray) -> None:
        """Append the first ``take[i]`` tokens of span i below leaf ``ids[i]`` (at ``depth[i]``)."""
        dev, c = self.device, int(take.sum())
        row = np.repeat(np.arange(len(take)), take)  # each tail node's leaf (its row in ids)
        step = np.arange(c) - np.repeat(np.cumsum(take) - take, take)  # its place in the span
        lo, hi = self.n, self.n + c
        # parent: the leaf for a span's first node, else the node before it
        par_tail = np.where(step == 0, -1, lo + np.arange(c) - 1)
        r, st, pt = to_device(row, dev), to_device(step, dev), to_device(par_tail, dev)
        parent = torch.where(pt >= 0, pt, ids.index_select(0, r))
        lp = lps[r, st].double()
        self.tokens[lo:hi] = span[r, st]
        self.parents[lo:hi] = parent
        self.depths[lo:hi] = depth.index_select(0, r) + st + 1
        # p(u) along a span: the leaf's times the span's share per token (cum = leaf + (step + 1) lp,
        # the reference's arithmetic, so both trees agree to the bit)
        self._floats[:, lo:hi] = torch.stack([lp, self.cum_logps.index_select(0, ids.index_select(0, r))
                                              + (st + 1).double() * lp])
        self.stop[lo:hi].fill_(CODE[LOOKUP_TAIL])
        # slots past an EAGLE-2 rerank still hold the grown tree's nodes: clear what a tail node lacks
        self.branching[lo:hi].fill_(0)
        self.fed[lo:hi].fill_(False)
        for buf in (self.topk_tokens, self.topk_logps, self.cand_status):
            buf[lo:hi].fill_(0)
        # ancestors: the leaf's row, then every earlier node of the same span, then itself
        self.ancestors[lo:hi] = self.ancestors.index_select(0, ids.index_select(0, r))
        same = (r[:, None] == r[None, :]) & (st[None, :] <= st[:, None])
        self.ancestors[lo:hi, lo:hi] = same
        if self.orig is not None:  # after an EAGLE-2 rerank: tail nodes were never in the grown tree
            self.orig = torch.cat([self.orig, self._ar[lo:hi]])
        self.n, self.tail_nodes = hi, c

    def _write_tail_resident(self, ids: torch.Tensor, depth: torch.Tensor, span: torch.Tensor, lps: torch.Tensor,
                             length: torch.Tensor, budget: int) -> None:
        """:meth:`_write_tail` without a host read: ``budget`` tail slots after the tree's nodes
        (on the device), slot j holding token ``st`` of leaf ``r``'s span, those past the spans'
        total written to the spare slot."""
        lo = self._n_dev
        take = torch.minimum(length, (budget - (torch.cumsum(length, 0) - length)).clamp(min=0))
        ends = torch.cumsum(take, 0)
        j = self._ar[:budget]
        r = torch.searchsorted(ends, j, right=True).clamp(max=ids.shape[0] - 1)  # each slot's leaf (row of ids)
        st = (j - (ends - take).index_select(0, r)).clamp(min=0, max=span.shape[1] - 1)  # its place in the span
        total = ends[-1]
        real = j < total
        dest = torch.where(real, lo + j, self.scratch)
        leaf = ids.index_select(0, r)
        parent = torch.where(st == 0, leaf, lo + j - 1)
        lp = lps[r, st].double()
        self._ints[:3].index_copy_(1, dest, torch.stack([span[r, st], parent, depth.index_select(0, r) + st + 1]))
        self._floats.index_copy_(1, dest, torch.stack([lp, self.cum_logps.index_select(0, leaf) + (st + 1).double() * lp]))
        self.stop.index_copy_(0, dest, torch.full_like(self.stop[:budget], CODE[LOOKUP_TAIL]))
        for buf in (self.branching, self.fed, self.topk_tokens, self.topk_logps, self.cand_status):
            buf.index_fill_(0, dest, 0)
        # ancestors: the leaf's row, every earlier node of the same span, itself
        same = (r[:, None] == r[None, :]) & (st[None, :] <= st[:, None]) & real[None, :]
        rows = self.ancestors.index_select(0, leaf).scatter_(1, dest[None, :].expand(budget, -1), same)
        self.ancestors.index_copy_(0, dest, rows)
        if self.orig is not None:
            self.orig = torch.cat([self.orig, self._ar[self.n:self.n + budget]])
        self._tail_dev = total
        self._n_dev = lo + total
        self.n += budget

    def _tail_contexts(self, seq: torch.Tensor, ids: torch.Tensor, depth: torch.Tensor, deepest: int,
                       width: int) -> torch.Tensor:
        """[q, width]: the last ``width`` tokens of each node's context (the committed tokens, the
        root last, then the node's path), right-aligned whatever the node's depth (-1 before the
        start); ``deepest`` bounds the nodes' depths."""
        q, n = ids.shape[0], self.n
        # the path's tokens by depth (column 0 unused: the root is the last committed token)
        anc = self.ancestors.index_select(0, ids)[:, :n]
        col = torch.where(anc, self.depths[None, :n], deepest + 1)
        path = torch.full((q, deepest + 2), -1, dtype=torch.long, device=self.device)
        path.scatter_(1, col, self.tokens[None, :n].expand(q, n))
        # the token `back` places before the row's last one sits at depth depth - back
        back = torch.arange(width - 1, -1, -1, device=self.device)[None, :]
        d = depth[:, None] - back
        in_seq = seq.shape[0] - 1 + d  # at or above the root: a committed token
        from_seq = torch.where(in_seq >= 0, seq[in_seq.clamp(min=0, max=seq.shape[0] - 1)], -1)
        return torch.where(d >= 1, path.gather(1, d.clamp(min=0, max=deepest + 1)), from_seq)

