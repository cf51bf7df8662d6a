"""Prompt lookup as device tensor ops: n-gram matching over the committed tokens, counting the
followers of the longest match, and copying spans (what the lookup drafter, the lookup mix and the
lookup tail read). No host round trip: contexts come from the tree's ancestor matrix, and the
distinct committed tokens are kept on the host as they are committed (:class:`CompactVocab`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from dynatree_core.policy.lookup import PromptLookup
from dynatree_core.runtime.host_syncs import to_device

#: top-k token ids [q, k] and their log-probs [q, k], on the device
TopKTensors = tuple[torch.Tensor, torch.Tensor]


def lookup_topk(seq: torch.Tensor, contexts: torch.Tensor, source: PromptLookup, k: int,
                vocab: "int | CompactVocab", limit: torch.Tensor | None = None) -> TopKTensors:
    """Prompt lookup for each row of ``contexts`` [q, width] (left-padded with -1) against the
    committed tokens ``seq`` [L]: the longest n-gram (``max_ngram`` down to ``min_ngram``) ending
    the row that occurs earlier in ``seq`` with a token after it, and the top-k of the tokens
    that followed its occurrences. ``vocab``: the token ids of ``seq`` are below it (an int), or
    :class:`CompactVocab` (the distinct tokens of ``seq``: the counting then runs over a few
    hundred tokens rather than the whole vocabulary); ``limit`` [q] (default: none) the last
    position of ``seq`` each row may see, for rows that stand at an earlier point of the sequence."""
    return lookup_matches(seq, contexts, source, vocab, limit).topk(k)


def lookup_spans(seq: torch.Tensor, contexts: torch.Tensor, source: PromptLookup, m: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt lookup as a copy (what prompt-lookup decoding drafts): for each row of ``contexts``
    [q, width], the longest n-gram (``max_ngram`` down to ``min_ngram``) ending it that occurs
    earlier in ``seq`` [L], and the ``m`` tokens that followed its latest occurrence with ``m``
    tokens after it (else its latest). Returns the spans [q, m], their log-probabilities [q, m]
    (each token log(C / (C + 1)) for an n-gram seen C times, as :class:`PromptLookup` scores a
    single follower) and how many of each span's tokens are real [q] (0: no match). Device ops only."""
    q, length, dev = contexts.shape[0], seq.shape[0], seq.device
    if length < 2:
        zeros = torch.zeros((q, m), dtype=torch.long, device=dev)
        return zeros, zeros.double(), torch.zeros(q, dtype=torch.long, device=dev)
    ngram, hit = longest_matches(seq, contexts, source)
    follow = torch.arange(1, length, device=dev)  # the position after each occurrence
    # the latest occurrence with m tokens after it outranks every shorter one; then the latest
    score = torch.where(hit, follow + (follow + m <= length) * length, 0)
    start = score.argmax(1)
    first = follow.index_select(0, start)  # [q]
    count = hit.sum(1)
    idx = first[:, None] + torch.arange(m, device=dev)[None, :]
    span = seq[idx.clamp(max=length - 1)]
    real = torch.where(ngram > 0, (length - first).clamp(max=m), 0)
    c = count.double()  # float64, as the reference scores it
    lp = torch.log(c / (c + 1.0))[:, None].expand(q, m)
    return span, lp, real


def contexts_ending_at(seq: torch.Tensor, ends: torch.Tensor, n: int) -> torch.Tensor:
    """[len(ends), n]: the n tokens of ``seq`` ending at each position of ``ends`` (-1 before the
    start), the context a lookup at that point reads."""
    idx = ends[:, None] + torch.arange(1 - n, 1, device=seq.device)[None, :]
    return torch.where(idx >= 0, seq[idx.clamp(min=0)], -1)


def compact_ids(index: dict[int, int], tokens: Sequence[int]) -> list[int]:
    """Each token's index among the distinct tokens seen so far, adding new ones to ``index`` (token
    -> index, in order of first occurrence)."""
    return [index.setdefault(t, len(index)) for t in tokens]


@dataclass
class CompactVocab:
    """The distinct tokens of a sequence, for counting over them only: ``tokens`` [U] (in order of
    first occurrence) and ``seq_index`` [L], each position's index into ``tokens``. The lookup
    drafter keeps both on the host as tokens are committed (no device read) and copies them over."""

    tokens: torch.Tensor
    seq_index: torch.Tensor

    @staticmethod
    def of(seq: Sequence[int], device: torch.device | str = "cpu") -> "CompactVocab":
        index: dict[int, int] = {}
        pos = compact_ids(index, seq)
        dev = torch.device(device)
        return CompactVocab(to_device(list(index), dev), to_device(pos, dev))


@dataclass
class LookupMatches:
    """What prompt lookup found for q contexts (device tensors): ``counts`` [q, U], how often each
    token of ``tokens`` [U] followed the matched n-gram; ``recency`` [q, U] in [0, 1), the latest
    such occurrence (ties); ``ngram`` [q], the matched n-gram's length (0: no match). ``dense``:
    ``tokens`` is every id 0..U-1 (then ``counts`` is indexed by token id)."""

    counts: torch.Tensor
    recency: torch.Tensor
    ngram: torch.Tensor
    tokens: torch.Tensor
    dense: bool = False
    #: [] how many entries of ``tokens`` are real (a static buffer's: :class:`StaticSeq`); None: all
    size: torch.Tensor | None = None

    @functools.cached_property
    def total(self) -> torch.Tensor:
        """[q]: the matched n-gram's occurrences (0: no match)."""
        return self.counts.sum(1)

    def topk(self, k: int) -> TopKTensors:
        """The lookup's proposals: the top-k followers (:meth:`top_index`) and their log-probabilities
        count / (occurrences + 1) (-inf for a token that never followed)."""
        idx = self.top_index(k)
        return self.tokens[idx], torch.log(self.counts.gather(1, idx) / (self.total[:, None] + 1.0))

    def log_shares(self) -> torch.Tensor:
        """[q, U]: log of each token's share c(t) / C of the matched n-gram's occurrences (-inf for a
        token that never followed; a row with no match is -inf everywhere): the lookup's
        distribution under sampling, before it is warped like any draft's."""
        return torch.log(self.counts / self.total.clamp(min=1.0)[:, None])

    def top_index(self, k: int) -> torch.Tensor:
        """[q, min(k, U)]: indices into ``tokens`` of the k followers by count, ties to the most
        recent; a row that found nothing lists indices 0, 1, ... (count 0) rather than whatever
        order top-k gives equal scores."""
        q, width = self.counts.shape
        found = (self.ngram > 0)[:, None]
        place = torch.arange(width, device=self.counts.device)
        score = torch.where(found, self.counts + self.recency, -place.float())
        if self.size is not None:  # a static buffer's entries past the real ones rank last
            score = score.masked_fill(place >= self.size, -math.inf)
        return torch.topk(score, min(k, width), dim=-1).indices

    def top(self, k: int) -> torch.Tensor:
        """[q, min(k, U)]: the token ids of :meth:`top_index`."""
        return self.tokens[self.top_index(k)]

    def count_of(self, ids: torch.Tensor) -> torch.Tensor:
        """[q, m]: how often each token id of ``ids`` [q, m] followed the row's match (0 for a token
        the sequence never had)."""
        width = self.counts.shape[1]
        if self.dense:
            return torch.where(ids < width, self.counts.gather(1, ids.clamp(max=width - 1)), 0.0)
        same = ids[:, :, None] == self.tokens[None, None, :]  # [q, m, U]: m and U are small here
        return (same * self.counts[:, None, :]).sum(-1)


def longest_matches(seq: torch.Tensor, contexts: torch.Tensor, source: PromptLookup,
                     limit: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row of ``contexts`` [q, width] against ``seq`` [L >= 2]: the length of the longest
    n-gram (``min_ngram``..``max_ngram``) ending the row that occurs earlier in ``seq`` with a token
    after it ([q], 0: none), and where it occurs (bool [q, L - 1]: column j - 1 is the occurrence
    followed by position j); ``limit`` [q]: the last position each row may see."""
    length, dev, big = seq.shape[0], seq.device, source.max_ngram
    width = contexts.shape[1]
    if width < big:  # a context shorter than the longest n-gram: pad it on the left as the start is
        contexts = torch.nn.functional.pad(contexts, (big - width, 0), value=-1)
        width = big
    # All n-gram lengths at once (a handful of ops per level, not a handful per n): for the token at
    # each position j >= 1, how many of the tokens before it equal the context's last ones (up to
    # max_ngram; -2 pads the start and equals nothing, not even the contexts' -1 padding)
    padded = torch.cat([torch.full((big,), -2, dtype=seq.dtype, device=dev), seq])
    before = padded.unfold(0, big, 1)[1:length]  # [L - 1, big]: the big tokens before position j
    same = before[None] == contexts[:, None, width - big:]  # [q, L - 1, big]
    run = same.flip(-1).to(torch.int8).cumprod(-1).sum(-1)  # the matched suffix's length at each j
    run = torch.where(run >= source.min_ngram, run, 0)
    if limit is not None:  # an occurrence counts if the token after it was known then
        run = torch.where(torch.arange(1, length, device=dev)[None, :] <= limit[:, None], run, 0)
    ngram = run.amax(1)
    return ngram, (run == ngram[:, None]) & (ngram[:, None] > 0)  # the occurrences of the longest match


def lookup_matches(seq: torch.Tensor, contexts: torch.Tensor, source: PromptLookup, vocab: "int | CompactVocab",
                   limit: torch.Tensor | None = None) -> LookupMatches:
    """The counting behind :func:`lookup_topk` (same arguments), for every token of ``vocab``."""
    q, length = contexts.shape[0], seq.shape[0]
    if isinstance(vocab, CompactVocab):
        tokens, index, dense = vocab.tokens, vocab.seq_index, False
    else:
        tokens, index, dense = torch.arange(vocab, device=seq.device), seq, True
    size, dev = tokens.shape[0], seq.device
    if length < 2:  # no token has one before it: nothing can match
        zeros = torch.zeros((q, size), dtype=torch.float32, device=dev)
        return LookupMatches(zeros, zeros.clone(), torch.zeros(q, dtype=torch.long, device=dev), tokens, dense)
    ngram, hit = longest_matches(seq, contexts, source, limit)
    nxt = index[1:].expand(q, -1)  # the token at each j (as a column of counts)
    counts = torch.zeros((q, size), dtype=torch.float32, device=dev)
    counts.scatter_add_(1, nxt, hit.float())
    # the most recent occurrence of each token breaks count ties (positions scaled into (0, 1))
    recency = torch.zeros((q, size), dtype=torch.float32, device=dev)
    pos = torch.arange(1, length, device=dev, dtype=torch.float32) / (length + 1)
    recency.scatter_reduce_(1, nxt, hit * pos, reduce="amax")
    return LookupMatches(counts, recency, ngram.long(), tokens, dense)


@dataclass
class StaticSeq:
    """The committed tokens in buffers of a fixed ``capacity`` (the fast path's: shapes never change,
    so a lookup over them is one compiled region): ``seq`` [cap], ``index`` [cap] (each position's
    index among the distinct tokens), ``tokens`` [cap] (the distinct tokens, first occurrence order)
    and ``lens`` [2] = (L, U) on the device, how many of each are real; ``length`` and ``unique``: the
    same on the host, which writes every committed token (no device read)."""

    seq: torch.Tensor
    index: torch.Tensor
    tokens: torch.Tensor
    lens: torch.Tensor
    length: int = 0
    unique: int = 0

    @staticmethod
    def empty(capacity: int, device: torch.device) -> "StaticSeq":
        long = dict(dtype=torch.long, device=device)
        return StaticSeq(torch.zeros(capacity, **long), torch.zeros(capacity, **long), torch.zeros(capacity, **long),
                         torch.zeros(2, **long))

    def extend(self, tokens: Sequence[int], index: Sequence[int], new: Sequence[int]) -> None:
        """Append committed ``tokens`` (their compact ``index``; ``new``: the distinct tokens first seen
        in them): one host -> device copy, then writes at host-known offsets."""
        m, u, cap = len(tokens), len(new), self.seq.shape[0]
        if self.length + m > cap:
            raise ValueError(f"the lookup's static buffer holds {cap} tokens: {self.length} + {m} do not fit")
        end, uend = self.length + m, self.unique + u
        staged = to_device(list(tokens) + list(index) + list(new) + [end, uend], self.seq.device)
        self.seq[self.length:end].copy_(staged[:m])
        self.index[self.length:end].copy_(staged[m:2 * m])
        if u:
            self.tokens[self.unique:uend].copy_(staged[2 * m:2 * m + u])
        self.lens.copy_(staged[2 * m + u:])
        self.length, self.unique = end, uend

    def clone(self) -> "StaticSeq":
        """An independent copy (a forked drafter's)."""
        return StaticSeq(self.seq.clone(), self.index.clone(), self.tokens.clone(), self.lens.clone(), self.length,
                         self.unique)

    def views(self) -> tuple[torch.Tensor, CompactVocab]:
        """The real tokens and their compact vocabulary (views: what the dynamic lookups read)."""
        return self.seq[:self.length], CompactVocab(self.tokens[:self.unique], self.index[:self.length])


def tree_contexts(seq: torch.Tensor, length: torch.Tensor, ancestors: torch.Tensor, depths: torch.Tensor,
                  tree_tokens: torch.Tensor, ids: torch.Tensor, level: torch.Tensor, n: int) -> torch.Tensor:
    """[q, n]: the last ``n`` tokens ending at each node of ``ids`` (tree level ``level``, a device
    scalar): its path below the root, then the committed tokens ``seq`` (``length`` real; the root is
    the last), -1 before the start. Fixed shapes whatever the level (what :class:`StaticSeq` reads)."""
    q, width = ids.shape[0], ancestors.shape[1]
    anc = ancestors.index_select(0, ids)
    # each node's path tokens by depth (column = depth; others to the spare last column)
    col = torch.where(anc, depths.clamp(0, width - 1)[None, :], width)
    path = torch.full((q, width + 1), -1, dtype=seq.dtype, device=seq.device)
    path.scatter_(1, col, tree_tokens[None, :].expand(q, -1))
    back = torch.arange(n - 1, -1, -1, device=seq.device)  # column c holds the token n - 1 - c back
    depth = level - back  # that token's depth: >= 1 in the tree; <= 0 committed, at length - 1 + depth
    in_tree = path.gather(1, depth.clamp(0, width - 1)[None, :].expand(q, -1))
    pos = length - 1 + depth
    committed = torch.where(pos >= 0, seq.index_select(0, pos.clamp(0, seq.shape[0] - 1)), -1)  # tree columns: any index
    return torch.where((depth >= 1)[None, :], in_tree, committed[None, :])


def static_matches(s: StaticSeq, contexts: torch.Tensor, source: PromptLookup) -> LookupMatches:
    """:func:`lookup_matches` over a :class:`StaticSeq` (device lengths: no host value, fixed shapes):
    occurrences past the real tokens are masked by the ``limit`` every row shares."""
    length = s.lens[0]
    limit = (length - 1).expand(contexts.shape[0])
    m = lookup_matches(s.seq, contexts, source, CompactVocab(s.tokens, s.index), limit)
    m.size = s.lens[1]
    return m
