"""Drafters: where the draft distributions of a tree come from (any drafter feeds any tree policy).

The decode loop asks a :class:`Drafter` for the draft's top-k after a whole tree level at once
(:meth:`Drafter.propose`, called by :meth:`~dynatree_core.device_tree.DeviceTree.grow`) and
tells it what was committed (:meth:`Drafter.commit`). Everything stays on the model's device:
``propose`` gets the level's node ids as a tensor and answers with top-k tensors, so a level
costs one batched draft forward and no host round trip (the tree counts its syncs: at most one per
level). A level that continues a chain (one node, after levels of one node: always so for linear
drafting) is fed with the model's default causal mask and next position, with no tree mask to
build. How the distributions are made is the drafter's business; the tree policy (breadth,
depth, pruning, budget) never changes with it.

Shipped drafters:

* :class:`ModelDrafter` - an independent small causal LM with its own KV cache (the paper's
  setting; the reproduction path).
* :class:`FeatureDrafter` - a small head that reads the target's final hidden states
  (:mod:`dynatree_core.feature_draft`, the EAGLE idea). It sets ``needs_target_hidden``: the
  engine then takes the hidden states of the root and the accepted path from the verification
  forward it runs anyway (no extra target forward) and hands them to :meth:`Drafter.commit`.

Both keep committed tokens they have not consumed yet as *pending*; the first level of the next
tree feeds them (the root last) as a causal chain, later levels feed one tree level per forward
under the tree mask built by :func:`level_visibility` - the one place for per-level draft masks
and positions (built on the device from the tree's ancestor matrix).

* :class:`LookupDrafter` - model-free prompt lookup (:class:`PromptLookup`: the tokens that followed
  earlier occurrences of the context's last n-gram), also level-batched on the device.
* :class:`MixDrafter` - a model drafter with prompt lookup mixed into its distributions
  (:class:`LookupMix`, ``ModelPair(..., lookup=LookupMix())``): where the text repeats itself the
  lookup's followers gain weight, elsewhere the draft decides; no forward added.
"""

from __future__ import annotations

import copy
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import torch
from transformers import DynamicCache

from . import plumbing as pl
from .checks import int_at_least
from .device_tree import to_device
from .feature_draft import FeatureDraftModel

if TYPE_CHECKING:  # pragma: no cover
    from .device_tree import DeviceTree

#: the drafter kinds :func:`make_drafter` builds, by the kind of ``ModelPair.draft``
DRAFTER_KINDS: tuple[str, ...] = ("model", "feature", "lookup", "model+lookup", "feature+lookup")
#: what :meth:`Drafter.propose` returns: top-k token ids [q, k] and their log-probs [q, k], on the device
TopKTensors = tuple[torch.Tensor, torch.Tensor]
#: committed tokens before the root whose draft top-k level 0 keeps (pending tokens are the last
#: iteration's accepted leaves and bonus: a few; the first iteration's prompt is cut to these)
CHAIN_ROWS = 16


def level_visibility(tree: "DeviceTree", ids: torch.Tensor, slot: torch.Tensor, base: int, past: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask and position offsets for feeding tree level ``ids`` to a draft with a KV cache.

    ``slot[u]`` is the cache index node u was fed at (-1: not fed), ``base`` the cache length once
    the root is fed (committed prefix, root included), ``past`` the current cache length. Returns
    the bool visibility ``[q, past + q]`` (prefix, own ancestors, itself) and each node's depth,
    the offset of its position from the root's - both on the device, without a host round trip.
    """
    q = ids.shape[0]
    anc = tree.ancestors[ids]  # [q, capacity]: ancestors and itself (not fed yet)
    fed = slot >= 0
    # each fed ancestor's cache column; unfed nodes (itself included) go to a dummy last column
    cols = torch.where(fed, slot, past + q).expand(q, -1)
    allowed = torch.zeros((q, past + q + 1), dtype=torch.int8, device=anc.device)
    allowed[:, :base] = 1  # committed prefix, root included
    allowed.scatter_(1, cols, (anc & fed).to(torch.int8))
    allowed[:, past:past + q] += torch.eye(q, dtype=torch.int8, device=anc.device)  # itself (no host scalar)
    return allowed[:, :past + q].bool(), tree.depths[ids]


class Drafter(ABC):
    """The protocol between the decode loop and a source of draft distributions.

    Lifecycle: :meth:`start` once per sequence, then per iteration :meth:`propose` once per tree
    level (level 0 is the root alone) and :meth:`commit` with the accepted path.
    """

    #: short name recorded in traces and benchmark JSON
    kind: ClassVar[str] = ""
    #: whether :meth:`start` / :meth:`commit` need the target's final hidden states
    needs_target_hidden: ClassVar[bool] = False

    def __init__(self, top_k: int):
        self.top_k = top_k
        self.forwards = 0  # draft forwards spent (what "draft fwd/iter" counts)
        self.clock: pl.ForwardClock | None = None  # times the draft's forwards (engine overhead)
        #: the draft's top-k after each committed token level 0 fed before the root (at most
        #: :data:`CHAIN_ROWS`, the last ones), or None: the oracle's view of the committed sequence
        #: where the tree had no fed node (an accepted leaf). Set by level 0 only when
        #: ``keep_chain`` (the engine asks for it when a trace or the benchmark reads records).
        self.chain_topk: TopKTensors | None = None
        self.keep_chain = False
        self._single = True  # every level of the current tree fed one node so far (a chain)

    @abstractmethod
    def start(self, prompt: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        """Begin a sequence (and forget any previous one). ``target_hidden`` [L-1, H]: the target's
        final hidden states of ``prompt[:-1]`` (only for drafters that need them)."""

    @abstractmethod
    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> TopKTensors:
        """The draft's top-k after each node of ``ids`` (one tree level, BFS order, on the device;
        level 0 is ``[0]``, the root): token ids and log-probs, ``[len(ids), k]`` each, sorted."""

    @abstractmethod
    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        """The iteration committed ``committed`` (accepted path tokens + bonus). ``target_hidden``
        [len(committed), H]: the target's final hidden states of the root and the path's nodes,
        row k being the state that predicted ``committed[k]``; ``fed``: how many leading nodes of
        ``path`` the draft consumed this iteration (the expanded ones)."""

    def prefill(self) -> None:
        """Consume the pending committed tokens except the root now (explorers call this once so
        that every regrown tree starts from a warm cache)."""

    def fork(self) -> "Drafter":
        """An independent copy of the current state (the model itself is shared)."""
        return copy.copy(self)

    def settings(self) -> dict[str, Any]:
        """What to record about this drafter in traces and results (JSON-safe)."""
        return {"kind": self.kind, "top_k": self.top_k}

    def _chain_level(self, ids: torch.Tensor, level: int) -> bool:
        """Whether level ``level`` continues a chain: it feeds one node and every earlier level fed
        one (always so for linear drafting). Its node then sees the whole draft cache and sits
        right after it, which is the model's default causal mask and position: no tree mask to build."""
        chain = (level <= 1 or self._single) and ids.shape[0] == 1
        self._single = chain
        return chain

    def _chain_rows(self) -> int:
        """Level 0's last rows whose top-k to compute: the root's, plus the chain's when kept."""
        return -CHAIN_ROWS - 1 if self.keep_chain else -1

    def _topk(self, logits: torch.Tensor) -> TopKTensors:
        k = min(self.top_k, logits.shape[-1])
        top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
        return top.indices, top.values


class ModelDrafter(Drafter):
    """An independent draft causal LM (Hugging Face, KV cache + 4D-mask interface) with a KV cache
    kept across iterations; accepted nodes it already consumed stay in its cache."""

    kind = "model"

    def __init__(self, model: torch.nn.Module, top_k: int):
        super().__init__(top_k)
        self.model = model
        self.device = pl.model_device(model)
        self.start([])

    def start(self, prompt: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.cache = DynamicCache()
        self.pending: list[int] = list(prompt)  # committed tokens the draft has not consumed
        self.slot: torch.Tensor | None = None  # per node: cache index it was fed at (-1: not fed)
        self.base = 0  # cache length once the root is fed (root at base - 1)

    def prefill(self) -> None:
        if len(self.pending) > 1:
            pl.forward(self.model, to_device(self.pending[:-1], self.device)[None], self.cache, clock=self.clock)
            self.forwards += 1
            self.pending = self.pending[-1:]

    def fork(self) -> "ModelDrafter":
        new = copy.copy(self)
        new.cache = copy.deepcopy(self.cache)
        new.pending = list(self.pending)
        new.slot = None if self.slot is None else self.slot.clone()
        return new

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> TopKTensors:
        if level == 0:
            # Level 0: feed the pending committed tokens, the root last, as a causal chain.
            inp = to_device(self.pending, self.device)[None]
            logits = pl.forward(self.model, inp, self.cache, clock=self.clock)[self._chain_rows():]
            top_ids, top_lps = self._topk(logits)
            self.chain_topk = (top_ids[:-1], top_lps[:-1]) if self.keep_chain else None
            self.forwards += 1
            self.base = pl.cache_length(self.cache)
            self.slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=self.device)
            self.slot[:1].fill_(self.base - 1)
            self.pending = []
            return top_ids[-1:], top_lps[-1:]
        assert self.slot is not None, "propose: level 0 (the root) comes first"
        past = pl.cache_length(self.cache)
        if self._chain_level(ids, level):  # the default causal mask and next position
            logits = pl.forward(self.model, tree.tokens[ids][None], self.cache, clock=self.clock)
        else:
            allowed, depth = level_visibility(tree, ids, self.slot, self.base, past)
            logits = pl.forward(self.model, tree.tokens[ids][None], self.cache, allowed, self.base - 1 + depth,
                                clock=self.clock)
        self.slot[ids] = past + torch.arange(ids.shape[0], device=self.device)
        self.forwards += 1
        return self._topk(logits)

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        """Keep the accepted nodes the draft consumed; queue the rest of ``committed``."""
        if self.slot is None:  # the root was never fed (nothing drafted this iteration)
            self.pending.extend(committed)
            return
        if fed:  # a prefix of the path: parents are fed before their children
            pl.keep_selected(self.cache, self.base, self.slot[to_device(path[:fed], self.device)] - self.base)
        else:
            pl.crop(self.cache, self.base)
        self.pending = list(committed[fed:])
        self.slot = None

    def settings(self) -> dict[str, Any]:
        cfg = getattr(self.model, "config", None)
        return {**super().settings(), "layers": getattr(cfg, "num_hidden_layers", None),
                "model_type": getattr(cfg, "model_type", None)}


class FeatureDrafter(Drafter):
    """Drafts with a :class:`~dynatree_core.feature_draft.FeatureDraftModel`.

    Committed token ``x_j`` is fed with the target's hidden state ``f_{j-1}``; a tree node is fed
    with the feature its parent's draft step predicted. After each iteration the tree's cache
    entries are dropped (they were computed from predicted features) and the committed tokens
    are queued with the target's real features, so the next level 0 re-reads them (EAGLE does
    the same): a few tokens through the small head.
    """

    kind = "feature"
    needs_target_hidden = True

    def __init__(self, model: FeatureDraftModel, top_k: int):
        super().__init__(top_k)
        self.model = model
        p = model.fc_emb.weight
        self.device, self.dtype = p.device, p.dtype
        self.start([0])

    # --- state -----------------------------------------------------------------------------
    def start(self, prompt: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        prompt = list(prompt)
        H = self.model.config.hidden_size
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer, [1, kv_heads, n, head_dim]
        self.slot: torch.Tensor | None = None  # per node: cache index it was fed at (-1: not fed)
        self.base = 0
        self.feats: torch.Tensor | None = None  # per node: the feature its draft step predicted [cap, H]
        if len(prompt) > 1:
            if target_hidden is None or target_hidden.shape[0] != len(prompt) - 1:
                raise ValueError("FeatureDrafter.start needs the target's hidden states of prompt[:-1] "
                                 f"({len(prompt) - 1} rows), got "
                                 f"{None if target_hidden is None else tuple(target_hidden.shape)}")
            # x_0 has no previous feature: the draft's sequence starts at x_1 (as in training)
            self.pending = prompt[1:]
            self.pending_feats = target_hidden.to(self.device, self.dtype)
            self.pos0 = 1
        else:  # a one-token prompt: no feature exists yet, a zero vector stands in once
            self.pending = prompt
            self.pending_feats = torch.zeros((len(prompt), H), device=self.device, dtype=self.dtype)
            self.pos0 = 0
        self.root_pos = self.pos0 + len(self.pending) - 1

    def fork(self) -> "FeatureDrafter":
        new = copy.copy(self)
        new.pending = list(self.pending)
        new.slot = None if self.slot is None else self.slot.clone()
        new.feats = None if self.feats is None else self.feats.clone()
        return new

    def cache_length(self) -> int:
        return 0 if self.kv is None else int(self.kv[0][0].shape[2])

    def _run(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
             allowed: torch.Tensor | None) -> torch.Tensor:
        past = self.cache_length()
        q = tokens.shape[0]
        if allowed is None:
            allowed = pl.causal_allowed(q, past, self.device)
        mask = pl.additive_mask(allowed, self.dtype, self.device)
        with pl.timed(self.clock):
            out, new = self.model(tokens[None], feats[None], positions[None], mask, self.kv)
        self.kv = new if self.kv is None else [(torch.cat([k0, k], dim=2), torch.cat([v0, v], dim=2))
                                               for (k0, v0), (k, v) in zip(self.kv, new)]
        self.forwards += 1
        return out[0]

    def _positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n, device=self.device)

    def prefill(self) -> None:
        if len(self.pending) > 1:
            n = len(self.pending) - 1
            self._run(to_device(self.pending[:-1], self.device), self.pending_feats[:-1],
                      self._positions(self.pos0, n), None)
            self.pending, self.pending_feats = self.pending[-1:], self.pending_feats[-1:]
            self.pos0 += n

    # --- the protocol ----------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> TopKTensors:
        if level == 0:
            n = len(self.pending)
            out = self._run(to_device(self.pending, self.device), self.pending_feats,
                            self._positions(self.pos0, n), None)[self._chain_rows():]
            self.base = self.cache_length()
            self.slot = torch.full((tree.capacity,), -1, dtype=torch.long, device=self.device)
            self.slot[:1].fill_(self.base - 1)
            self.feats = torch.zeros((tree.capacity, out.shape[-1]), device=self.device, dtype=out.dtype)
            self.root_pos = self.pos0 + n - 1
            self.pending, self.pending_feats = [], self.pending_feats[:0]
            top_ids, top_lps = self._head_topk(out)
            self.chain_topk = (top_ids[:-1], top_lps[:-1]) if self.keep_chain else None
            self.feats[ids] = out[-1:]
            return top_ids[-1:], top_lps[-1:]
        assert self.slot is not None and self.feats is not None, "propose: level 0 (the root) comes first"
        past = self.cache_length()
        if self._chain_level(ids, level):  # causal: the node at depth = level, right after the cache
            allowed, positions = None, self._positions(self.root_pos + level, 1)
        else:
            allowed, depth = level_visibility(tree, ids, self.slot, self.base, past)
            positions = self.root_pos + depth
        out = self._run(tree.tokens[ids], self.feats[tree.parents[ids]], positions, allowed)
        self.slot[ids] = past + torch.arange(ids.shape[0], device=self.device)
        self.feats[ids] = out
        return self._head_topk(out)

    def _head_topk(self, out: torch.Tensor) -> TopKTensors:
        # Top-k over the head ids only: ids outside the head have logit dtype-min (probability 0).
        with pl.timed(self.clock):  # the head is part of the draft model's forward
            logits = self.model.head.forward_compact(out)
        compact = torch.log_softmax(logits.float(), dim=-1)
        k = min(self.top_k, compact.shape[-1])
        top = compact.topk(k, dim=-1)
        return self.model.head.vocab_ids[top.indices], top.values

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        if target_hidden is None or target_hidden.shape[0] < len(committed):
            raise ValueError("FeatureDrafter.commit needs one target hidden state per committed token")
        new_feats = target_hidden[: len(committed)].to(self.device, self.dtype)
        if self.slot is None:  # the root was never fed: queue behind the pending tokens
            self.pending = self.pending + list(committed)
            self.pending_feats = torch.cat([self.pending_feats, new_feats])
            return
        # Drop the tree's entries (made from predicted features); the root's entry stays.
        self.kv = [(k[:, :, : self.base], v[:, :, : self.base]) for k, v in self.kv]
        self.pending, self.pending_feats = list(committed), new_feats
        self.pos0 = self.root_pos + 1
        self.slot, self.feats = None, None

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), **self.model.settings()}


@dataclass(frozen=True)
class PromptLookup:
    """A model-free draft: prompt lookup (n-gram matching over the text so far; no weights).

    Pass it as ``ModelPair(target, draft=PromptLookup())``. After a node, the draft looks for the
    longest suffix of the node's context (the committed tokens, then the node's path) of
    ``min_ngram``..``max_ngram`` tokens that occurred earlier in the committed tokens, and proposes
    the tokens that followed those occurrences: the most frequent first (ties: the most recent).
    Its "probability" of a token is its share of the occurrences, count / (occurrences + 1), so
    a single occurrence gives 0.5 and a pattern seen many times approaches 1 - what the tree
    policy's confidence thresholds read. A context with no earlier occurrence proposes nothing
    (log-probability -inf: τ, ρ_stop or the depth gate stop there).
    """

    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        for name in ("min_ngram", "max_ngram"):
            int_at_least(f"PromptLookup {name}", getattr(self, name), 1)
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"PromptLookup min_ngram ({self.min_ngram}) must be <= max_ngram ({self.max_ngram})")


class LookupDrafter(Drafter):
    """Drafts by :class:`PromptLookup`, as tensor operations on the target's device (no host
    round trip: the node contexts are read from the tree's ancestor matrix)."""

    kind = "lookup"

    def __init__(self, source: PromptLookup, top_k: int):
        super().__init__(top_k)
        self.source = source
        self.start([])

    def start(self, prompt: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.seq: list[int] = list(prompt)  # the committed tokens, the root last
        # the distinct tokens (first-occurrence order) and each position's index among them, kept
        # on the host as tokens are committed: counting runs over them, not the whole vocabulary
        self._index: dict[int, int] = {}
        self._seq_index = compact_ids(self._index, self.seq)
        self._dev: tuple[torch.Tensor, CompactVocab] | None = None  # seq and vocab on the tree's device
        self._fresh = len(self.seq)  # tokens committed since the last level 0 (the chain it reports)

    def fork(self) -> "LookupDrafter":
        new = copy.copy(self)
        new.seq, new._index, new._seq_index = list(self.seq), dict(self._index), list(self._seq_index)
        return new

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> TopKTensors:
        if level == 0:
            self._on(tree.device)
            self._chain()
        return self.matches(tree, ids, level).topk(self.top_k)

    def matches(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> LookupMatches:
        """The lookup's counts for tree level ``ids`` (what :class:`MixDrafter` mixes in)."""
        seq, vocab = self._on(tree.device)
        if level == 0:
            self._fresh = 0
        return lookup_matches(seq, self._contexts(tree, ids, level), self.source, vocab)

    def chain_matches(self, rows: int) -> LookupMatches:
        """The counts after each of the last ``rows`` committed tokens before the root, each from
        the tokens known then (the oracle's chain view; call after level 0)."""
        assert self._dev is not None, "chain_matches: level 0 comes first"
        seq, vocab = self._dev
        ends = torch.arange(seq.shape[0] - 1 - rows, seq.shape[0] - 1, device=seq.device)  # positions p
        return lookup_matches(seq, contexts_ending_at(seq, ends, self.source.max_ngram), self.source, vocab,
                              limit=ends)

    def _on(self, device: torch.device) -> tuple[torch.Tensor, CompactVocab]:
        """The committed tokens and their compact vocabulary on ``device`` (copied when first needed
        there; :meth:`commit` extends them)."""
        if self._dev is None or self._dev[0].device != device:
            self._dev = (to_device(self.seq, device),
                         CompactVocab(to_device(list(self._index), device), to_device(self._seq_index, device)))
        return self._dev

    def _chain(self) -> None:
        """With ``keep_chain``: what the lookup proposed after each token committed since the last
        level 0 (before the root, at most :data:`CHAIN_ROWS`), each from the tokens known then - the
        oracle's view, as a model drafter gives it from the committed tokens it feeds."""
        c = min(self._fresh, CHAIN_ROWS + 1) - 1
        self._fresh = 0
        self.chain_topk = self.chain_matches(max(c, 0)).topk(self.top_k) if self.keep_chain else None

    def _contexts(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> torch.Tensor:
        """[q, max_ngram + level]: the last max_ngram committed tokens (-1 before the start), then
        each node's path below the root, by depth (every node of a level has depth ``level``)."""
        n, dev = self.source.max_ngram, tree.device
        ctx = torch.full((ids.shape[0], n + level + 1), -1, dtype=torch.long, device=dev)
        tail = self._dev[0][-n:]  # type: ignore[index]
        ctx[:, n - tail.shape[0]:n] = tail
        if level:
            # ancestor a at depth d goes to column n - 1 + d (the root, depth 0, is the last committed
            # token: n - 1 already holds it); non-ancestors to the spare last column
            anc = tree.ancestors.index_select(0, ids)
            col = torch.where(anc, tree.depths[None, :] + (n - 1), n + level)
            ctx.scatter_(1, col, tree.tokens[None, :].expand_as(col))
        return ctx[:, :n + level]

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.seq.extend(committed)
        self._fresh += len(committed)
        known = len(self._index)
        new_index = compact_ids(self._index, committed)
        self._seq_index.extend(new_index)
        if self._dev is not None:  # extend the device copies (host-to-device only: no sync)
            seq, vocab = self._dev
            dev = seq.device
            self._dev = (torch.cat([seq, to_device(committed, dev)]),
                         CompactVocab(torch.cat([vocab.tokens, to_device(list(self._index)[known:], dev)]),
                                      torch.cat([vocab.seq_index, to_device(new_index, dev)])))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "max_ngram": self.source.max_ngram, "min_ngram": self.source.min_ngram}


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
    ngram, hit = _longest_matches(seq, contexts, source)
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

    @functools.cached_property
    def total(self) -> torch.Tensor:
        """[q]: the matched n-gram's occurrences (0: no match)."""
        return self.counts.sum(1)

    def topk(self, k: int) -> TopKTensors:
        """The lookup's proposals: the top-k followers (:meth:`top_index`) and their log-probabilities
        count / (occurrences + 1) (-inf for a token that never followed)."""
        idx = self.top_index(k)
        return self.tokens[idx], torch.log(self.counts.gather(1, idx) / (self.total[:, None] + 1.0))

    def top_index(self, k: int) -> torch.Tensor:
        """[q, min(k, U)]: indices into ``tokens`` of the k followers by count, ties to the most
        recent; a row that found nothing lists indices 0, 1, ... (count 0) rather than whatever
        order top-k gives equal scores."""
        q, width = self.counts.shape
        found = (self.ngram > 0)[:, None]
        score = torch.where(found, self.counts + self.recency,
                            -torch.arange(width, device=self.counts.device, dtype=torch.float32))
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


def _longest_matches(seq: torch.Tensor, contexts: torch.Tensor, source: PromptLookup,
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
    ngram, hit = _longest_matches(seq, contexts, source, limit)
    nxt = index[1:].expand(q, -1)  # the token at each j (as a column of counts)
    counts = torch.zeros((q, size), dtype=torch.float32, device=dev)
    counts.scatter_add_(1, nxt, hit.float())
    # the most recent occurrence of each token breaks count ties (positions scaled into (0, 1))
    recency = torch.zeros((q, size), dtype=torch.float32, device=dev)
    pos = torch.arange(1, length, device=dev, dtype=torch.float32) / (length + 1)
    recency.scatter_reduce_(1, nxt, hit * pos, reduce="amax")
    return LookupMatches(counts, recency, ngram.long(), tokens, dense)


@dataclass(frozen=True)
class LookupMix:
    """Prompt lookup mixed into a model draft's distributions (``ModelPair(..., lookup=LookupMix())``).

    After each node the model draft gives q_D and the lookup its followers' shares r(t) = c(t) / C
    (``lookup``: counts c of the tokens that followed the longest matched n-gram, C in all). The
    node's distribution is the mixture

        q(t) = λ r(t) + (1 - λ) q_D(t),   λ = C / (C + κ_n)

    with κ_n (``prior[n - 1]``; the last entry for longer n-grams) a pseudo-count for a match of n
    tokens: a long n-gram seen many times outweighs the draft, a unigram match barely moves it, and
    no match leaves q_D as it is. The tree policy reads q as it reads any draft's: confidence
    c(u) = max q, path probability p(u) the product along the path. Candidates are the draft's
    top-k and the lookup's top-k (a token outside the draft's top-k counts q_D = 0). Costs a few
    tensor ops per level, no forward.

    The defaults (n-grams up to 5, κ = 256, 16, 2, 2, 0.5) maximise the likelihood of the target's
    greedy tokens under the mixture with the embedded feature draft, on continuations of *training*
    text (``scripts/fit_lookup_mix.py``, ``docs/bench/2026-11-27-lookup-mix/fit.json``; never the
    evaluation text): unigram matches are all but ignored, 5-gram matches trusted.
    """

    lookup: PromptLookup = PromptLookup(max_ngram=5)
    #: κ_n for n = 1, 2, ... (pseudo-counts > 0; larger: trust the lookup less); the last entry
    #: serves every longer n-gram
    prior: tuple[float, ...] = (256.0, 16.0, 2.0, 2.0, 0.5)

    def __post_init__(self) -> None:
        if not isinstance(self.lookup, PromptLookup):
            raise TypeError(f"LookupMix lookup must be a PromptLookup, got {type(self.lookup).__name__}")
        prior = tuple(self.prior)
        if not prior:
            raise ValueError("LookupMix prior needs at least one pseudo-count (κ_1)")
        for n, kappa in enumerate(prior, start=1):
            if not isinstance(kappa, (int, float)) or isinstance(kappa, bool) or not kappa > 0:
                raise ValueError(f"LookupMix prior[{n - 1}] (κ_{n}) must be a number > 0, got {kappa!r}")
        object.__setattr__(self, "prior", tuple(float(k) for k in prior))

    def kappa(self, n: int) -> float:
        """κ_n, the pseudo-count of an n-gram match (n >= 1)."""
        return self.prior[min(n, len(self.prior)) - 1]

    def weights(self, m: LookupMatches) -> torch.Tensor:
        """λ per row of ``m``: C / (C + κ_n) for its match of n tokens seen C times (0: no match)."""
        total = m.total
        return total / (total + _kappa_table(self, total.device)[m.ngram])

    def settings(self) -> dict[str, Any]:
        return {"max_ngram": self.lookup.max_ngram, "min_ngram": self.lookup.min_ngram, "prior": list(self.prior)}


def mix_topk(draft: TopKTensors, m: LookupMatches, mix: LookupMix, k: int) -> TopKTensors:
    """The top-k of :class:`LookupMix`'s mixture for q rows: the draft's top-k ``draft`` ([q, k] ids
    and log-probs) and the lookup's ``m``. Device ops only."""
    ids_d, lps_d = draft
    total = m.total
    lam = mix.weights(m)[:, None]
    ids_l = m.top(ids_d.shape[1])
    cand = torch.cat([ids_d, ids_l], 1)  # [q, 2k]: a lookup candidate the draft lists is dropped below
    p_d = torch.cat([lps_d.exp(), torch.zeros(ids_l.shape, dtype=lps_d.dtype, device=lps_d.device)], 1)
    r = m.count_of(cand) / total.clamp(min=1.0)[:, None]
    mixed = lam * r + (1 - lam) * p_d
    dup = torch.cat([torch.zeros_like(ids_d, dtype=torch.bool),
                     (ids_l[:, :, None] == ids_d[:, None, :]).any(-1)], 1)
    top = mixed.masked_fill(dup, -1.0).topk(min(k, ids_d.shape[1]), dim=-1)
    return cand.gather(1, top.indices), top.values.log()


@functools.lru_cache(maxsize=32)
def _kappa_table(mix: LookupMix, device: torch.device) -> torch.Tensor:
    """κ_n indexed by the matched n-gram length (index 0, no match, has C = 0: any value does), made
    once per device (a host-to-device copy per level would be a needless transfer)."""
    return to_device([1.0] + [mix.kappa(n) for n in range(1, mix.lookup.max_ngram + 1)], device,
                     dtype=torch.float32)


class MixDrafter(Drafter):
    """A model drafter (independent or feature) with prompt lookup mixed in (:class:`LookupMix`).

    The model drafter runs as it would alone (its forwards, caches, chain view); the lookup reads
    the same tree level's contexts; :func:`mix_topk` merges the two. Kind: ``"<draft kind>+lookup"``.
    """

    def __init__(self, base: Drafter, mix: LookupMix):
        if isinstance(base, (LookupDrafter, MixDrafter)):
            raise TypeError("LookupMix mixes prompt lookup into a model draft: the draft must be a model "
                            "(an independent draft LM or a feature draft)")
        self.base, self.mix = base, mix
        self.lookup = LookupDrafter(mix.lookup, base.top_k)
        self._keep = False
        super().__init__(base.top_k)
        self.kind = f"{base.kind}+lookup"  # type: ignore[misc]
        self.needs_target_hidden = base.needs_target_hidden  # type: ignore[misc]

    # the loop sets and reads these on the drafter; they belong to the model drafter it wraps
    @property  # type: ignore[override]
    def forwards(self) -> int:
        return self.base.forwards

    @forwards.setter
    def forwards(self, value: int) -> None:
        self.base.forwards = value

    @property  # type: ignore[override]
    def clock(self) -> pl.ForwardClock | None:
        return self.base.clock

    @clock.setter
    def clock(self, value: pl.ForwardClock | None) -> None:
        self.base.clock = value

    @property  # type: ignore[override]
    def keep_chain(self) -> bool:
        return self._keep

    @keep_chain.setter
    def keep_chain(self, value: bool) -> None:
        self._keep = self.base.keep_chain = bool(value)

    def start(self, prompt: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.base.start(prompt, target_hidden)
        self.lookup.start(prompt)

    def prefill(self) -> None:
        self.base.prefill()

    def fork(self) -> "MixDrafter":
        new = copy.copy(self)
        new.base, new.lookup = self.base.fork(), self.lookup.fork()
        return new

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> TopKTensors:
        top = mix_topk(self.base.propose(tree, ids, level), self.lookup.matches(tree, ids, level), self.mix,
                       self.top_k)
        if level == 0:  # the chain view: the model's rows, each mixed with the lookup as it stood then
            chain, self.base.chain_topk = self.base.chain_topk, None
            self.chain_topk = None if chain is None else mix_topk(
                chain, self.lookup.chain_matches(chain[0].shape[0]), self.mix, self.top_k)
        return top

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.base.commit(path, committed, target_hidden, fed)
        self.lookup.commit(path, committed)

    def settings(self) -> dict[str, Any]:
        return {**self.base.settings(), "kind": self.kind, "lookup": self.mix.settings()}


def drafter_kind(draft: Any, lookup: LookupMix | None = None) -> str | None:
    """The drafter kind a ``ModelPair.draft`` object gives (None for no draft), with ``+lookup``
    when prompt lookup is mixed in (``ModelPair.lookup``)."""
    if draft is None:
        return None
    if isinstance(draft, PromptLookup):
        return "lookup"
    kind = "feature" if isinstance(draft, FeatureDraftModel) else "model"
    return kind + ("+lookup" if lookup is not None else "")


def make_drafter(draft: Any, top_k: int, lookup: LookupMix | None = None) -> Drafter:
    """The drafter for a ``ModelPair.draft``: a feature draft, a :class:`PromptLookup` or an
    independent causal LM; with ``lookup`` (a :class:`LookupMix`), prompt lookup mixed into the
    model draft's distributions."""
    if isinstance(draft, Drafter):
        raise TypeError("pass the draft model, not a Drafter instance, as ModelPair.draft")
    if isinstance(draft, FeatureDraftModel):
        base: Drafter = FeatureDrafter(draft, top_k)
    elif isinstance(draft, PromptLookup):
        base = LookupDrafter(draft, top_k)
    else:
        base = ModelDrafter(draft, top_k)
    return base if lookup is None else MixDrafter(base, lookup)
