"""Retrieval drafting in the spirit of REST (He et al. 2024): a datastore of the target's own text, and
after each node the tokens that followed the longest suffix of its context found there.

:class:`Datastore` holds token sequences (the shipped one: the embedded target's greedy continuations
of the distillation prompts, raw text and chat template, ``dynatree_core/data/retrieval/``) and an
index built at load: for each n-gram length n (``min_ngram``..``max_ngram``) the sorted 64-bit keys of
the n-grams followed by a token, each with its ``followers`` most frequent followers and their counts
(ties: the follower seen first in the store). A lookup hashes each context's last n tokens, longest n
first, and checks the match against the store's tokens, so it returns exactly what a scan would
(``tests/test_retrieval.py`` holds the scan). The lookup runs on the host (numpy): one read of the
level's contexts from the device per tree level, cheap on a CPU, a host round trip on a GPU.

:class:`RetrievalDrafter` drafts from the datastore alone (``ModelPair(draft=RetrievalDrafter(store))``);
:class:`RetrievalMix` (a :class:`LookupMix`: prompt lookup too) mixes it into a model draft
(``ModelPair(draft=model, lookup=RetrievalMix(store))``, kind ``"<draft>+lookup+retrieval"``):

    q(t) = λ_L r_L(t) + (1 - λ_L) (λ_R r_R(t) + (1 - λ_R) q_D(t)),   λ = C / (C + κ_n)

r_R the followers' shares in the datastore (C their count, n the matched length), r_L prompt
lookup's, each λ with its own pseudo-counts. Under sampling q is built over the whole vocabulary from
the warped q_D and the warped shares (as :class:`MixDrafter` does), so verification stays exact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from dynatree_core.drafters.mix import LookupMix, MixDrafter, mix_topk
from dynatree_core.drafters.protocol import CHAIN_ROWS, DraftContext, Drafter, Proposal
from dynatree_core.paths import PACKAGE_DATA
from dynatree_core.policy.lookup import PromptLookup
from dynatree_core.runtime.ngram import LookupMatches, TopKTensors
from dynatree_core.runtime.sampling import dense

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.device_tree import DeviceTree

#: where the shipped datastore lives (``store.npy``, ``meta.json``, ``SOURCES.md``)
STORE_DIR = PACKAGE_DATA / "retrieval"
#: the token id that separates sequences in a datastore (above any vocabulary it serves)
SEPARATOR = 65535
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier of the n-gram keys


def _keys(windows: np.ndarray) -> np.ndarray:
    """[m] uint64 keys of n-grams ``windows`` [m, n] (token ids >= 0; wrapping arithmetic)."""
    h = np.zeros(windows.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(windows.shape[1]):
            h = h * _MULT + (windows[:, j].astype(np.uint64) + np.uint64(1))
    return h


@dataclass
class _Level:
    """The index of one n-gram length: sorted unique ``keys`` [G], a position of each n-gram ``rep``
    [G], and its followers ``tokens`` / ``counts`` (ragged: ``offsets`` [G + 1], most frequent first)."""

    keys: np.ndarray
    rep: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    counts: np.ndarray


def _build_level(seq: np.ndarray, n: int, followers: int) -> _Level:
    """Index the n-grams of ``seq`` (int64, :data:`SEPARATOR` between sequences) that a token follows."""
    starts = np.arange(max(seq.shape[0] - n, 0))
    win = np.lib.stride_tricks.sliding_window_view(seq, n + 1)[: starts.shape[0]] if starts.size else \
        np.zeros((0, n + 1), dtype=seq.dtype)
    ok = ~(win == SEPARATOR).any(1)
    win, starts = win[ok], starts[ok]
    keys, nxt = _keys(win[:, :n]), win[:, n]
    order = np.lexsort((starts, nxt, keys))  # by key, follower, then position
    keys, nxt, starts = keys[order], nxt[order], starts[order]
    new_pair = np.ones(keys.shape[0], dtype=bool)
    new_pair[1:] = (keys[1:] != keys[:-1]) | (nxt[1:] != nxt[:-1])
    pair_at = np.flatnonzero(new_pair)
    p_key, p_tok, p_first = keys[pair_at], nxt[pair_at], starts[pair_at]
    p_cnt = np.diff(np.append(pair_at, keys.shape[0]))
    order = np.lexsort((p_first, -p_cnt, p_key))  # per key: most frequent first, then first seen
    p_key, p_tok, p_cnt, p_first = p_key[order], p_tok[order], p_cnt[order], p_first[order]
    new_key = np.ones(p_key.shape[0], dtype=bool)
    new_key[1:] = p_key[1:] != p_key[:-1]
    group = np.cumsum(new_key) - 1
    rank = np.arange(p_key.shape[0]) - np.flatnonzero(new_key)[group]
    keep = rank < followers
    g_at = np.flatnonzero(new_key)
    rep = np.minimum.reduceat(p_first, g_at) if g_at.size else p_first[:0]
    _check_no_collision(seq, keys, starts, n, p_key[g_at], rep)
    offsets = np.searchsorted(group[keep], np.arange(g_at.shape[0] + 1))
    return _Level(p_key[g_at], rep, offsets, p_tok[keep], p_cnt[keep].astype(np.float32))


def _check_no_collision(seq: np.ndarray, keys: np.ndarray, starts: np.ndarray, n: int, g_keys: np.ndarray,
                        rep: np.ndarray) -> None:
    """Every occurrence grouped under a key is the same n-gram (a 64-bit key collision would merge two)."""
    g = np.searchsorted(g_keys, keys)
    ar = np.arange(n)
    if not np.array_equal(seq[starts[:, None] + ar], seq[rep[g][:, None] + ar]):
        raise RuntimeError(f"two different {n}-grams share a 64-bit key in this datastore")


class Datastore:
    """Token sequences to retrieve continuations from, and their n-gram index (built here, at load).

    ``sequences``: token id lists (ids below :data:`SEPARATOR`); ``min_ngram``..``max_ngram``: the
    suffix lengths matched (longest first); ``followers``: the followers kept per n-gram, most
    frequent first (their shares are of these: the rest would never make a top-k)."""

    def __init__(self, sequences: Sequence[Sequence[int]] | np.ndarray, max_ngram: int = 8, min_ngram: int = 2,
                 followers: int = 16, name: str = "datastore"):
        PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram)  # the bounds' checks, errors naming them
        if not isinstance(followers, int) or isinstance(followers, bool) or followers < 1:
            raise ValueError(f"Datastore followers must be an integer >= 1, got {followers!r}")
        flat = np.asarray(sequences, dtype=np.int64) if isinstance(sequences, np.ndarray) else _flatten(sequences)
        if flat.size and (flat.min() < 0 or flat.max() > SEPARATOR):
            raise ValueError(f"Datastore sequences must hold token ids in [0, {SEPARATOR}), "
                             f"got {flat.min()}..{flat.max()}")
        self.tokens, self.name, self.followers = flat, name, followers
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.levels = {n: _build_level(flat, n, followers) for n in range(min_ngram, max_ngram + 1)}

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> "Datastore":
        """A datastore from ``store.npy`` (uint16 ids, :data:`SEPARATOR` between sequences) in ``path``."""
        path = Path(path)
        file = path / "store.npy" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no datastore at {file} (build one: python scripts/build_retrieval_store.py)")
        return cls(np.load(file).astype(np.int64), name=str(options.pop("name", file.parent.name)), **options)

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def default() -> "Datastore":
        """The shipped datastore (the embedded target's continuations; ``dynatree_core/data/retrieval``)."""
        return Datastore.load(STORE_DIR, name="smollm2-135m-distill-prompts")

    def lookup(self, contexts: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        """For each row of ``contexts`` [q, w] (-1: before the start): the longest n whose last n tokens
        occur in the store with a follower ([q], 0: none), and that n-gram's followers and counts."""
        q = contexts.shape[0]
        ngram = np.zeros(q, dtype=np.int64)
        group = np.zeros(q, dtype=np.int64)
        for n in range(min(self.max_ngram, contexts.shape[1]), self.min_ngram - 1, -1):
            lvl, tail = self.levels[n], contexts[:, -n:]
            open_ = (ngram == 0) & (tail >= 0).all(1)
            if not open_.any() or lvl.keys.size == 0:
                continue
            g = np.minimum(np.searchsorted(lvl.keys, _keys(np.maximum(tail, 0))), lvl.keys.size - 1)
            same = (self.tokens[lvl.rep[g][:, None] + np.arange(n)] == tail).all(1)
            hit = open_ & same
            ngram[hit], group[hit] = n, g[hit]
        fol, cnt = [], []
        for i in range(q):
            if ngram[i]:
                lvl = self.levels[int(ngram[i])]
                a, b = lvl.offsets[group[i]], lvl.offsets[group[i] + 1]
                fol.append(lvl.tokens[a:b]), cnt.append(lvl.counts[a:b])
            else:
                fol.append(np.zeros(0, dtype=np.int64)), cnt.append(np.zeros(0, dtype=np.float32))
        return ngram, fol, cnt

    def matches(self, contexts: np.ndarray, width: int, device: torch.device) -> LookupMatches:
        """:meth:`lookup` as :class:`LookupMatches` on ``device`` (counts over the rows' followers, at
        least ``width`` columns; ties to the follower seen first in the store)."""
        ngram, fol, cnt = self.lookup(contexts)
        tokens = list(dict.fromkeys(int(t) for f in fol for t in f))
        filler = (t for t in range(width + len(tokens)) if t not in set(tokens))
        tokens += [next(filler) for _ in range(max(width - len(tokens), 0))]
        col = {t: j for j, t in enumerate(tokens)}
        counts = np.zeros((len(fol), len(tokens)), dtype=np.float32)
        recency = np.zeros_like(counts)
        for i, (f, c) in enumerate(zip(fol, cnt)):
            j = [col[int(t)] for t in f]
            counts[i, j] = c
            recency[i, j] = 1.0 - (np.arange(len(j)) + 1.0) / (len(j) + 1.0)  # earlier rank wins a tie
        t = lambda a, dt=None: torch.as_tensor(a, dtype=dt).to(device)  # noqa: E731
        return LookupMatches(t(counts), t(recency), t(ngram, torch.long), t(tokens, torch.long))

    def settings(self) -> dict[str, Any]:
        return {"name": self.name, "tokens": int((self.tokens != SEPARATOR).sum()),
                "sequences": int((self.tokens == SEPARATOR).sum()), "max_ngram": self.max_ngram,
                "min_ngram": self.min_ngram, "followers": self.followers}


def _flatten(sequences: Sequence[Sequence[int]]) -> np.ndarray:
    """The sequences' tokens, :data:`SEPARATOR` after each (a token id must be below it)."""
    flat: list[int] = []
    for s in sequences:
        flat += [int(t) for t in s] + [SEPARATOR]
    out = np.asarray(flat, dtype=np.int64)
    tokens = out[out != SEPARATOR] if len(flat) > len(sequences) else out[:0]
    if (out == SEPARATOR).sum() != len(sequences) or (tokens.size and tokens.min() < 0):
        raise ValueError(f"Datastore sequences must hold token ids in [0, {SEPARATOR}), got "
                         f"{min(flat)}..{max(flat)}")
    return out


def node_contexts(tree: "DeviceTree", ids: torch.Tensor, level: int, tail: Sequence[int], n: int) -> np.ndarray:
    """[q, n + level] on the host: the last ``n`` committed tokens ``tail`` (-1 before the start), then
    each node's path below the root by depth (the root, depth 0, is the last committed token)."""
    q = ids.shape[0]
    ctx = np.full((q, n + level), -1, dtype=np.int64)
    tail = list(tail)[-n:]
    if tail:
        ctx[:, n - len(tail):n] = tail
    if level:
        anc = tree.ancestors.index_select(0, ids).cpu().numpy()  # [q, capacity]: one read per level
        depths, tokens = tree.depths.cpu().numpy(), tree.tokens.cpu().numpy()
        for i in range(q):
            nodes = np.flatnonzero(anc[i] & (depths > 0))
            ctx[i, n - 1 + depths[nodes]] = tokens[nodes]
    return ctx


class RetrievalDrafter(Drafter):
    """Drafts from a :class:`Datastore` alone (model-free, kind ``"retrieval"``): after each node, the
    followers of the longest suffix of its context found in the store, most frequent first, with
    log q = log(count / (C + 1)) as prompt lookup scores them; nothing found: -inf (the policy stops)."""

    kind = "retrieval"

    def __init__(self, store: Datastore):
        if not isinstance(store, Datastore):
            raise TypeError(f"RetrievalDrafter store must be a Datastore, got {type(store).__name__}")
        super().__init__()
        self.store = store
        self.start([], self.ctx)

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        self.ctx = ctx
        self.seq: list[int] = list(prompt)  # the committed tokens, the root last
        self._fresh = len(self.seq)  # committed since the last level 0 (the chain view's rows)

    def fork(self, ctx: DraftContext | None = None) -> "RetrievalDrafter":
        new = super().fork(ctx)
        new.seq = list(self.seq)
        return new

    def matches(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> LookupMatches:
        """The datastore's counts for tree level ``ids`` (what :class:`RetrievalMixDrafter` mixes in)."""
        ctx = node_contexts(tree, ids, level, self.seq, self.store.max_ngram)
        return self.store.matches(ctx, self.ctx.top_k, tree.device)

    def chain_matches(self, rows: int, device: torch.device) -> LookupMatches:
        """The counts after each of the last ``rows`` committed tokens before the root (the oracle's view)."""
        n, end = self.store.max_ngram, len(self.seq) - 1
        ctx = np.asarray([[self.seq[j] if j >= 0 else -1 for j in range(p - n + 1, p + 1)]
                          for p in range(end - rows, end)], dtype=np.int64).reshape(rows, n)
        return self.store.matches(ctx, self.ctx.top_k, device)

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        m = self.matches(tree, ids, level)
        if self.ctx.sampler is not None:
            return self._sampled(tree, ids, level, m.log_shares(), m.tokens)
        chain = None
        if level == 0:
            rows = max(min(self._fresh, CHAIN_ROWS + 1) - 1, 0)
            self._fresh = 0
            if self.ctx.keep_chain:
                chain = self.chain_matches(rows, tree.device).topk(self.ctx.top_k)
        return Proposal(*m.topk(self.ctx.top_k), chain=chain)

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.seq.extend(committed)
        self._fresh += len(committed)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "store": self.store.settings()}


@dataclass(frozen=True)
class RetrievalMix(LookupMix):
    """Prompt lookup (``lookup``, ``prior``: as :class:`LookupMix`) and a datastore (``store``, default
    :meth:`Datastore.default`) mixed into a model draft: ``ModelPair(draft=model, lookup=RetrievalMix())``.
    ``retrieval_prior``: κ_n of a datastore match of n tokens (index n - 1; the last entry serves longer
    ones), the λ_R = C / (C + κ_n) of the module docstring's formula. The defaults are set by hand, not
    fitted: a bigram match is all but ignored (as prompt lookup's unigram), a match of 5 tokens or more
    is trusted over the draft (docs/bench/2026-11-28-retrieval/ measures them)."""

    store: Datastore = field(default_factory=Datastore.default, compare=False)
    retrieval_prior: tuple[float, ...] = (256.0, 256.0, 16.0, 4.0, 2.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.store, Datastore):
            raise TypeError(f"RetrievalMix store must be a Datastore, got {type(self.store).__name__}")
        object.__setattr__(self, "retrieval_prior", self.retrieval.prior)

    @property
    def retrieval(self) -> LookupMix:
        """The datastore's weighting λ_R, as a :class:`LookupMix` over the store's n-gram bounds."""
        bounds = PromptLookup(max_ngram=self.store.max_ngram, min_ngram=self.store.min_ngram)
        try:
            return LookupMix(lookup=bounds, prior=self.retrieval_prior)
        except ValueError as e:
            raise ValueError(str(e).replace("LookupMix prior", "RetrievalMix retrieval_prior")) from None

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "retrieval": {**self.store.settings(), "prior": list(self.retrieval_prior)}}


class RetrievalMixDrafter(MixDrafter):
    """A model drafter with prompt lookup and a datastore mixed in (:class:`RetrievalMix`); kind
    ``"<draft kind>+lookup+retrieval"``. The model drafter and the prompt lookup run as in
    :class:`MixDrafter`; the datastore's followers are mixed into the draft first, the lookup's over both."""

    def __init__(self, base: Drafter, mix: RetrievalMix):
        super().__init__(base, mix)
        self.rmix = mix
        self.weights_r = mix.retrieval
        self.retrieval = RetrievalDrafter(mix.store)
        self.kind = f"{base.kind}+lookup+retrieval"  # type: ignore[misc]

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        super().start(prompt, ctx, target_hidden)
        self.retrieval.start(prompt, ctx)

    def fork(self, ctx: DraftContext | None = None) -> "RetrievalMixDrafter":
        new = super().fork(ctx)
        new.retrieval = self.retrieval.fork(new.ctx)
        return new  # type: ignore[return-value]

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        if self.ctx.sampler is not None:
            return self._sampled_mix(tree, ids, level)
        k = self.ctx.top_k
        base = self.base.propose(tree, ids, level)
        top = self._mixed((base.tokens, base.logps), self.retrieval.matches(tree, ids, level),
                          self.lookup.matches(tree, ids, level), k)
        chain = None
        if base.chain is not None:  # each chain row mixed with both as they stood then
            rows = base.chain[0].shape[0]
            chain = self._mixed(base.chain, self.retrieval.chain_matches(rows, tree.device),
                                self.lookup.chain_matches(rows), k)
        return Proposal(*top, chain=chain)

    def _mixed(self, draft: TopKTensors, r: LookupMatches, m: LookupMatches, k: int) -> TopKTensors:
        """The top-k of λ_L r_L + (1 - λ_L)(λ_R r_R + (1 - λ_R) q_D) from the draft's top-k."""
        return mix_topk(mix_topk(draft, r, self.weights_r, k), m, self.mix, k)

    def _sampled_mix(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        """Under sampling, the same mixture over the whole vocabulary from the warped q_D and shares."""
        s = self.ctx.sampler
        assert s is not None
        scores, vocab_ids = self.base.level_scores(tree, ids, level)  # type: ignore[attr-defined]
        q = dense(s.log_q(scores).exp(), vocab_ids, s.vocab_size, 0.0)
        for m, weights in ((self.retrieval.matches(tree, ids, level), self.weights_r),
                           (self.lookup.matches(tree, ids, level), self.mix)):
            r = dense(s.log_q(m.log_shares()).exp(), m.tokens, s.vocab_size, 0.0)
            lam = weights.weights(m)[:, None]
            q = lam * r + (1 - lam) * q
        return self._sampled(tree, ids, level, torch.log(q), warped=True)

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        super().commit(path, committed, target_hidden, fed)
        self.retrieval.commit(path, committed)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "kind": self.kind, "lookup": self.rmix.settings()}
