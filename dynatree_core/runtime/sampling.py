"""Speculative sampling on the device: the warped distributions, the drafts' candidates and the
target's token at every verified node, vectorised over the tree (no host round trip).

The rules and why they keep the target's distribution are in :mod:`dynatree_core.policy.sampling`,
whose numpy functions are the reference these are tested against. Two objects, one per side:

* :class:`DraftSampler` (a drafter gets it at start, in its context): a level's draft scores -> the
  warped q -> candidates: under ``match`` the top-k of q, or with shared draft noise of log q + the
  target's Gumbel noise (with their coupled confidence); under ``rejection`` a sample without
  replacement from q (Gumbel-top-k, in draw order), keeping each expanded node's q row for verification;
* :class:`TargetSampler` (held by the loop): after the verify forward, the target's token after every
  node: the Gumbel-max draw with the noise of the position it fills (``match``; AR too), or recursive
  rejection sampling over the node's candidates (``rejection``). The tree's selection then walks as
  under greedy decoding, with these tokens in place of the argmax.

Randomness: ``match`` reads the counter-based noise (:class:`NoiseStream`: integer hashing on the
device, one row per position, computed once per run); ``rejection`` draws from one
``torch.Generator`` on the device, seeded once per run, in an order that depends only on the tree's
shape (never on whether a trace is kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from dynatree_core.policy.sampling import ROUND, SamplingConfig, coupling_scale, mix32, position_key

#: entries of p and q kept per node in a trace (the sampling view's bars)
TRACE_TOP = 8


def warp(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p, as Hugging Face's warpers compute them (float32, the
    same ops: ``tests/test_sampling.py`` compares against them); -inf outside."""
    x = logits.float() / cfg.temperature
    if cfg.top_k:
        kth = torch.topk(x, min(cfg.top_k, x.shape[-1]))[0][..., -1, None]
        x = x.masked_fill(x < kth, -math.inf)
    if cfg.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=False)
        cum = sorted_x.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1 - cfg.top_p)
        drop[..., -1:] = False  # the most probable token always stays
        x = x.masked_fill(drop.scatter(-1, order, drop), -math.inf)
    return x


def log_probs(scores: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """log of the warped distribution of each row (float32); a row with no finite score (a
    lookup that matched nothing) stays -inf everywhere instead of becoming NaN."""
    return log_softmax_rows(warp(scores, cfg))


def log_softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """log_softmax of each row; a row with no finite entry stays -inf everywhere instead of NaN."""
    empty = ~torch.isfinite(x).any(-1, keepdim=True)
    return torch.log_softmax(x.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, -math.inf)


def probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """p of each row, float64 (the inverse CDF sums it)."""
    return torch.softmax(warp(logits, cfg).double(), dim=-1)


def inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[n] tokens: in each row of ``p`` [n, V], the token whose cumulative interval holds ``u`` [n]
    (token-id order; a zero-probability token is never chosen)."""
    cdf = p.cumsum(-1)
    at = (u.to(cdf.dtype) * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, at, right=True)[:, 0].clamp(max=p.shape[-1] - 1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm((p - q)+) per row, or p itself where p <= q everywhere (no rejection could happen there)."""
    r = (p - q).clamp(min=0.0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp(min=1e-300), p)


def dense(rows: torch.Tensor, vocab_ids: torch.Tensor | None, vocab_size: int, fill: float) -> torch.Tensor:
    """Rows over a compact vocabulary (``vocab_ids`` [U]: the token id of each column) as rows over
    the whole vocabulary, ``fill`` elsewhere; rows already over it pass through."""
    if vocab_ids is None:
        return rows
    out = torch.full((rows.shape[0], vocab_size), fill, dtype=rows.dtype, device=rows.device)
    return out.index_copy_(1, vocab_ids, rows)


class DraftSampler:
    """A drafter's candidates under sampling (see the module docstring)."""

    def __init__(self, cfg: SamplingConfig, vocab_size: int, generator: torch.Generator | None = None,
                 noise: "NoiseStream | None" = None, trace: bool = False):
        self.cfg, self.vocab_size, self.generator = cfg, int(vocab_size), generator
        self.rejection = cfg.rule == "rejection"
        #: match with shared draft noise: the target's Gumbel stream (None: the plain top-k of q)
        self.noise = noise
        #: rejection: row u holds q(.|u) of the node grown in slot u (float32 [capacity, V])
        self.q_rows: torch.Tensor | None = None
        #: shared noise, traced: row u holds the largest perturbed scores log q + g after the node
        #: grown in slot u (tokens [capacity, TRACE_TOP], scores float64) and log q of those tokens
        self.trace = trace and noise is not None
        self.score_rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def log_q(self, scores: torch.Tensor) -> torch.Tensor:
        """The warped draft distribution of each row of ``scores`` (logits, or log counts)."""
        return log_probs(scores, self.cfg)

    def candidates(self, logq: torch.Tensor, k: int, ids: torch.Tensor, vocab_ids: torch.Tensor | None = None,
                   position: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor]:
        """Candidates of nodes ``ids`` from their warped log q [q, U] (``vocab_ids``: the token id of
        each column, None: column = token id), for the absolute ``position`` their children fill:
        ``match``, the top-k of q (sorted, so the first column carries c(u) = max q) or, with shared
        noise, of the perturbed scores log q + g(seed, position, .) with their coupled confidence
        (:meth:`coupled`); ``rejection``, a sample without replacement in draw order, its log q, and
        c(u) = max q as a third tensor (the first column is a draw, not the maximum)."""
        k = min(k, logq.shape[-1])
        if not self.rejection:
            if self.noise is not None:
                return self.coupled(logq, k, vocab_ids, position, ids)
            top = logq.topk(k, dim=-1)
            return (top.indices if vocab_ids is None else vocab_ids[top.indices]), top.values
        u = torch.rand(logq.shape, generator=self.generator, device=logq.device, dtype=torch.float64)
        keys = logq - torch.log(-torch.log(u))  # + Gumbel noise: top-k of the keys = a draw w/o replacement
        draw = keys.topk(k, dim=-1).indices
        self._keep_rows(ids, dense(logq.exp(), vocab_ids, self.vocab_size, 0.0))
        tokens = draw if vocab_ids is None else vocab_ids[draw]
        return tokens, logq.gather(1, draw), logq.max(-1).values.exp()

    def perturbed(self, logq: torch.Tensor, vocab_ids: torch.Tensor | None, position: int) -> torch.Tensor:
        """log q + g(seed, position, .) of each row (float64; -inf stays -inf): the draft's scores
        perturbed by the noise the target's draw at ``position`` uses."""
        assert self.noise is not None, "perturbed scores need the shared noise stream"
        g = self.noise.row(position, logq.shape[-1] if vocab_ids is None else None)
        return logq.double() + (g if vocab_ids is None else g.index_select(0, vocab_ids))

    def coupled(self, logq: torch.Tensor, k: int, vocab_ids: torch.Tensor | None, position: int | None,
                ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Shared noise: the top-k of the perturbed scores (the first is the draft's coupled sample)
        and, as their log-probabilities, the log of the chance that the target's perturbed argmax
        lands on each: log softmax(scores / beta), beta = beta_0 / T (:func:`~dynatree_core.policy.
        sampling.coupled_confidence`), what the tree policy reads where it reads q under independent drafts."""
        if position is None:
            raise ValueError("shared draft noise needs the absolute position the candidates fill "
                             "(DeviceTree(..., position=the root's index in prompt + output))")
        score = self.perturbed(logq, vocab_ids, position)
        top = score.topk(k, dim=-1)
        conf = log_softmax_rows(score / coupling_scale(self.cfg.temperature))  # a lookup may match nothing
        tokens = top.indices if vocab_ids is None else vocab_ids[top.indices]
        if self.trace and ids is not None:  # what the sampling view shows beside the target's scores
            self._keep_scores(ids, score, logq, vocab_ids)
        return tokens, conf.gather(1, top.indices).float()

    def _keep_scores(self, ids: torch.Tensor, score: torch.Tensor, logq: torch.Tensor,
                     vocab_ids: torch.Tensor | None) -> None:
        assert self.score_rows is not None, "DraftSampler.begin(capacity) comes before a level's candidates"
        top = score.topk(min(TRACE_TOP, score.shape[-1]), dim=-1)
        tokens = top.indices if vocab_ids is None else vocab_ids[top.indices]
        m = tokens.shape[1]
        for buf, rows in zip(self.score_rows, (tokens, top.values, logq.double().gather(1, top.indices))):
            buf[:, :m].index_copy_(0, ids, rows.to(buf.dtype))

    def _keep_rows(self, ids: torch.Tensor, q: torch.Tensor) -> None:
        assert self.q_rows is not None, "DraftSampler.begin(capacity) comes before a level's candidates"
        self.q_rows.index_copy_(0, ids, q.to(self.q_rows.dtype))

    def begin(self, capacity: int, device: torch.device) -> None:
        """A new tree of up to ``capacity`` slots (rejection keeps one q row per slot; the buffer is
        reused, and rows of slots not expanded this tree are never read)."""
        if self.rejection and (self.q_rows is None or self.q_rows.shape[0] < capacity
                               or self.q_rows.device != device):
            self.q_rows = torch.zeros((capacity, self.vocab_size), dtype=torch.float32, device=device)
        if self.trace and (self.score_rows is None or self.score_rows[0].shape[0] < capacity):
            self.score_rows = (torch.zeros((capacity, TRACE_TOP), dtype=torch.long, device=device),
                               torch.full((capacity, TRACE_TOP), -math.inf, dtype=torch.float64, device=device),
                               torch.full((capacity, TRACE_TOP), -math.inf, dtype=torch.float64, device=device))


class NoiseStream:
    """Gumbel noise g(seed, t, x) for every token x at absolute position t, on the device: the same
    integer hashing as :func:`~dynatree_core.policy.sampling.gumbel_noise` (so the two agree to the
    last bit before the logs), one [V] row per position, computed when first asked for and dropped
    once the decode has passed it."""

    def __init__(self, seed: int, vocab: int, device: torch.device):
        self.seed, self.vocab, self.device = seed, vocab, device
        self._token_mix = mix32(torch.arange(vocab, dtype=torch.int64, device=device))  # position-free half
        self._rows: dict[int, torch.Tensor] = {}

    def row(self, position: int, width: int | None = None) -> torch.Tensor:
        """[V] noise of ``position`` (``width``: the first ``width`` tokens; a token's noise does not
        depend on the vocabulary's size, so a wider draft head gets the same values, computed apart)."""
        if width is not None and width > self.vocab:
            return NoiseStream(self.seed, width, self.device).row(position)
        if position not in self._rows:
            h1 = mix32(self._token_mix ^ position_key(self.seed, position))
            h2 = mix32(h1 ^ ROUND)
            u = (((h1 << 21) ^ (h2 >> 11)).double() + 0.5) / float(1 << 53)
            self._rows[position] = -torch.log(-torch.log(u))
        return self._rows[position] if width is None else self._rows[position][:width]

    def rows(self, first: int, count: int) -> torch.Tensor:
        """[count, V]: the rows of positions first .. first + count - 1 (older ones are forgotten)."""
        for t in [t for t in self._rows if t < first]:
            del self._rows[t]
        return torch.stack([self.row(first + i) for i in range(count)])


@dataclass
class TargetChoice:
    """The target's token after every node of a verified tree (device tensors, [n] unless said)."""

    tokens: torch.Tensor
    #: log p up to a constant per row (the warped logits, float64 [n, V]; -inf outside top-k / top-p)
    scores: torch.Tensor
    #: match: each node's Gumbel noise [n, V] (its position's row); rejection: the uniform [n] that drew
    #: from the last residual
    noise: torch.Tensor
    #: rejection: the candidates' coins [n, k], the rank of the accepted candidate (-1: drawn from
    #: the residual; -2: the node had no candidates), the number of candidates rejected at each node
    #: [n] and the last residual norm((p - q)+) after them [n, V] (a row of zeros where nothing was
    #: rejected: there p itself was the distribution, and no residual was ever formed)
    coins: torch.Tensor | None = None
    accepted_rank: torch.Tensor | None = None
    rejections: torch.Tensor | None = None
    residual: torch.Tensor | None = None
    #: rejection: the draft's q rows the candidates were drawn from ([n, V]; None: nothing drafted)
    q: torch.Tensor | None = None
    #: rejection: each tested candidate's acceptance probability min(1, p_i(x_i) / q_i(x_i)) against
    #: the residual and the reduced q at its turn [n, k] (NaN: not tested)
    thresholds: torch.Tensor | None = None
    #: rejection, traced: (p_i, q_i) before candidate i = 0 .. k-1 and after the last ([n, V] each, k + 1
    #: pairs): the distributions each candidate was tested against (None: not traced)
    steps: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def drawn_from(self) -> torch.Tensor:
        """[n, V]: what a node's token is drawn from when no candidate is accepted: the last residual
        where a candidate was rejected, p where none was (or none was drafted)."""
        return torch.where((self.rejections > 0)[:, None], self.residual, self.p)

    @property
    def p(self) -> torch.Tensor:
        """p after every node, float64 [n, V] (computed when first read: traces read it)."""
        if not hasattr(self, "_p"):
            self._p = torch.softmax(self.scores, dim=-1)
        return self._p


class TargetSampler:
    """The loop's side: the target's token after every node (see the module docstring)."""

    def __init__(self, cfg: SamplingConfig, generator: torch.Generator | None = None,
                 noise: NoiseStream | None = None, trace: bool = False):
        self.cfg, self.generator = cfg, generator
        #: match: the Gumbel stream (shared with the draft's sampler under shared noise)
        self.noise = noise
        #: rejection: keep every step's p_i and q_i for the trace (references only: each step makes new tensors)
        self.trace = trace

    def choose(self, logits: torch.Tensor, depths: torch.Tensor, deepest: int, prefix_len: int,
               draft: "DraftCandidates | None" = None) -> TargetChoice:
        """``logits`` [n, V] of the verify forward; ``depths`` [n] of the nodes (at most ``deepest``),
        the root at ``prefix_len``: node u's token fills position prefix_len + depth(u) + 1."""
        x = warp(logits, self.cfg).double()
        if self.cfg.rule == "rejection":
            assert draft is not None, "rejection sampling reads the tree's candidates"
            return self._rejection(x, draft)
        if self.noise is None or self.noise.vocab != x.shape[-1] or self.noise.device != x.device:
            self.noise = NoiseStream(self.cfg.seed, x.shape[-1], x.device)
        g = self.noise.rows(prefix_len + 1, deepest + 1).index_select(0, depths)  # by the position each fills
        return TargetChoice((x + g).argmax(dim=-1), x, g)

    def _rejection(self, x: torch.Tensor, draft: "DraftCandidates") -> TargetChoice:
        """Recursive rejection sampling at every node at once (candidates in draw order)."""
        p = torch.softmax(x, dim=-1)
        n, k = draft.tokens.shape
        coins = torch.rand((n, k), generator=self.generator, device=p.device, dtype=torch.float64)
        last = torch.rand(n, generator=self.generator, device=p.device, dtype=torch.float64)
        p_i = p
        q_i = draft.q.double() if k else None
        rank = torch.where(draft.fed, -1, -2)
        out = torch.full((n,), -1, dtype=torch.long, device=p.device)
        rejections = torch.zeros(n, dtype=torch.long, device=p.device)
        thresholds = torch.full((n, k), math.nan, dtype=torch.float64, device=p.device)
        steps = [] if self.trace and k else None
        for i in range(k):
            if steps is not None:
                steps.append((p_i, q_i))
            cand = draft.tokens[:, i:i + 1]
            px, qx = p_i.gather(1, cand)[:, 0], q_i.gather(1, cand)[:, 0]
            live = (out < 0) & draft.fed & (qx > 0)
            thresholds[:, i] = torch.where(live, (px / qx.clamp(min=1e-300)).clamp(max=1.0), math.nan)
            ok = live & (coins[:, i] * qx < px)
            out = torch.where(ok, cand[:, 0], out)
            rank = torch.where(ok, i, rank)
            rej = (live & ~ok)[:, None]
            rejections += rej[:, 0]
            p_i = torch.where(rej, residual(p_i, q_i), p_i)
            q_next = q_i.scatter(1, cand, 0.0)
            q_i = torch.where(rej, q_next / q_next.sum(-1, keepdim=True).clamp(min=1e-300), q_i)
        if steps is not None:
            steps.append((p_i, q_i))
        tokens = torch.where(out >= 0, out, inverse_cdf(p_i, last))
        # where nothing was rejected p_i is still p: no residual was formed there, and none is recorded
        res = torch.where((rejections > 0)[:, None], p_i, 0.0)
        choice = TargetChoice(tokens, x, last, coins, rank, rejections, res, draft.q, thresholds, steps)
        choice._p = p
        return choice


def make_samplers(cfg: SamplingConfig, device: torch.device, vocab_size: int, trace: bool = False
                  ) -> tuple[DraftSampler, TargetSampler] | None:
    """The draft's and the target's samplers of one run (None: greedy). ``rejection`` draws from one
    generator on ``device``, seeded once; ``match`` needs none (it reads the counter-based noise,
    one stream that both read under shared draft noise: each row is computed once). ``trace``: the
    draft's sampler keeps each expanded node's largest perturbed scores, the target's (rejection)
    every step's p_i and q_i, for the trace."""
    if cfg.greedy:
        return None
    if cfg.rule == "rejection":
        gen = torch.Generator(device=device)
        gen.manual_seed(cfg.seed)
        return DraftSampler(cfg, vocab_size, gen), TargetSampler(cfg, gen, trace=trace)
    noise = NoiseStream(cfg.seed, vocab_size, device)
    shared = noise if cfg.noise == "shared" else None
    return DraftSampler(cfg, vocab_size, noise=shared, trace=trace), TargetSampler(cfg, noise=noise)


def draft_candidates(tree: Any, sampler: DraftSampler | None) -> "DraftCandidates":
    """What rejection sampling reads of a grown device tree: each node's candidates in draw order
    and the q row of its slot as grown (an EAGLE-2 rerank compacts the tree: ``tree.orig`` maps back)."""
    n = tree.n
    if sampler is None or sampler.q_rows is None:  # nothing was ever drafted: no candidates
        return DraftCandidates(tree.topk_tokens[:n, :0], torch.zeros_like(tree.fed[:n]), None)
    slots = tree.orig[:n] if tree.orig is not None else torch.arange(n, device=tree.device)
    fed = tree.fed[:n]
    q = sampler.q_rows.index_select(0, slots) * fed[:, None]  # rows of slots not fed hold stale values
    return DraftCandidates(tree.topk_tokens[:n, :tree.k_used], fed, q)


@dataclass
class DraftCandidates:
    """What rejection sampling reads of a grown tree: each node's candidates in draw order [n, k],
    whether it was expanded [n], and its q row [n, V] (zeros where not expanded; None when nothing
    was drafted, k = 0)."""

    tokens: torch.Tensor
    fed: torch.Tensor
    q: torch.Tensor | None
