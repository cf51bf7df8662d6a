"""Prompt lookup mixed into a model draft's distributions (:class:`LookupMix`, :class:`MixDrafter`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch

from dynatree_core.drafters.lookup import LookupDrafter
from dynatree_core.drafters.protocol import DraftContext, Drafter, Proposal
from dynatree_core.policy.lookup import PromptLookup
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.static.regions import compiled, region
from dynatree_core.runtime.ngram import LookupMatches, StaticSeq, TopKTensors, static_matches, tree_contexts
from dynatree_core.runtime.sampling import dense

if TYPE_CHECKING:  # pragma: no cover
    from dynatree_core.runtime.tree.tree import DeviceTree


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
        return _weights(m.total, m.ngram, _kappa_table(self, m.total.device))

    def settings(self) -> dict[str, Any]:
        return {"max_ngram": self.lookup.max_ngram, "min_ngram": self.lookup.min_ngram, "prior": list(self.prior)}


def mix_topk(draft: TopKTensors, m: LookupMatches, mix: LookupMix, k: int) -> TopKTensors:
    """The top-k of :class:`LookupMix`'s mixture for q rows: the draft's top-k ``draft`` ([q, k] ids
    and log-probs) and the lookup's ``m``. Device ops only."""
    return _mixed_topk(draft, m, _kappa_table(mix, m.counts.device), k)


def _mixed_topk(draft: TopKTensors, m: LookupMatches, kappa: torch.Tensor, k: int) -> TopKTensors:
    """:func:`mix_topk` with κ_n as a table by n-gram length (:func:`_kappa_table`)."""
    ids_d, lps_d = draft
    total = m.counts.sum(1)
    lam = _weights(total, m.ngram, kappa)[:, None]
    idx = m.top_index(ids_d.shape[1])
    ids_l = m.tokens[idx]
    cand = torch.cat([ids_d, ids_l], 1)  # [q, 2k]: a lookup candidate the draft lists is dropped below
    p_d = torch.cat([lps_d.exp(), torch.zeros(ids_l.shape, dtype=lps_d.dtype, device=lps_d.device)], 1)
    r = m.count_of(cand) / total.clamp(min=1.0)[:, None]
    mixed = lam * r + (1 - lam) * p_d
    dup = (ids_l[:, :, None] == ids_d[:, None, :]).any(-1)
    if m.size is not None:  # a static buffer's padding entries are no candidates
        dup = dup | (idx >= m.size)
    dup = torch.cat([torch.zeros_like(ids_d, dtype=torch.bool), dup], 1)
    top = mixed.masked_fill(dup, -1.0).topk(min(k, ids_d.shape[1]), dim=-1)
    return cand.gather(1, top.indices), top.values.log()


@region
def mix_level(draft_ids: torch.Tensor, draft_lps: torch.Tensor, s: StaticSeq, ancestors: torch.Tensor,
              depths: torch.Tensor, tree_tokens: torch.Tensor, ids: torch.Tensor, level: torch.Tensor,
              source: PromptLookup, kappa: torch.Tensor, k: int) -> TopKTensors:
    """A fast-path tree level's mixture, as one compiled region: prompt lookup over the committed
    tokens' static buffers (:class:`StaticSeq`) for each node of ``ids`` at ``level`` (a device
    scalar), mixed into the draft's top-k (``draft_ids`` / ``draft_lps``)."""
    contexts = tree_contexts(s.seq, s.lens[0], ancestors, depths, tree_tokens, ids, level, source.max_ngram)
    return _mixed_topk((draft_ids, draft_lps), static_matches(s, contexts, source), kappa, k)


def _weights(total: torch.Tensor, ngram: torch.Tensor, kappa: torch.Tensor) -> torch.Tensor:
    """λ = C / (C + κ_n) per row: ``total`` C, ``ngram`` n, ``kappa`` the table of :func:`_kappa_table`."""
    return total / (total + kappa[ngram])


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
        self.lookup = LookupDrafter(mix.lookup)
        super().__init__()
        self.kind = f"{base.kind}+lookup"  # type: ignore[misc]
        self.needs_target_hidden = base.needs_target_hidden  # type: ignore[misc]

    @property  # type: ignore[override]
    def forwards(self) -> int:
        """The wrapped model drafter's forwards (the lookup runs none)."""
        return self.base.forwards

    @property
    def fast_model(self) -> torch.nn.Module | None:
        return self.base.fast_model

    def start(self, prompt: Sequence[int], ctx: DraftContext, target_hidden: torch.Tensor | None = None) -> None:
        self.ctx = ctx
        self.base.start(prompt, ctx, target_hidden)
        self.lookup.start(prompt, ctx)

    def prefill(self) -> None:
        self.base.prefill()

    def fork(self, ctx: DraftContext | None = None) -> "MixDrafter":
        new = super().fork(ctx)
        new.base, new.lookup = self.base.fork(new.ctx), self.lookup.fork(new.ctx)
        return new

    def propose(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        if self.ctx.sampler is not None:
            return self._sampled_mix(tree, ids, level)
        k = self.ctx.top_k
        base = self.base.propose(tree, ids, level)
        static = self.lookup.static
        if static is not None and base.chain is None:  # the fast path: one compiled region
            fn = compiled(mix_level, self.ctx.runtime, tree.device)
            return Proposal(*fn(base.tokens, base.logps, static, tree.ancestors, tree.depths, tree.tokens, ids,
                                tree.level_tensor(level), self.mix.lookup, _kappa_table(self.mix, tree.device), k))
        top = mix_topk((base.tokens, base.logps), self.lookup.matches(tree, ids, level), self.mix, k)
        # the chain view (level 0): the model's rows, each mixed with the lookup as it stood then
        chain = None if base.chain is None else mix_topk(
            base.chain, self.lookup.chain_matches(base.chain[0].shape[0]), self.mix, k)
        return Proposal(*top, chain=chain)

    def _sampled_mix(self, tree: "DeviceTree", ids: torch.Tensor, level: int) -> Proposal:
        """Under sampling, the mixture over the whole vocabulary: q = λ r + (1 - λ) q_D with q_D the
        model draft's warped distribution, r the lookup's (its shares, warped) and λ from the
        counts as seen (the prior's pseudo-counts weigh occurrences, not warped shares)."""
        s = self.ctx.sampler
        assert s is not None
        scores, vocab_ids = self.base.level_scores(tree, ids, level)
        m = self.lookup.matches(tree, ids, level)
        q_d = dense(s.log_q(scores).exp(), vocab_ids, s.vocab_size, 0.0)
        r = dense(s.log_q(m.log_shares()).exp(), m.tokens, s.vocab_size, 0.0)
        lam = self.mix.weights(m)[:, None]
        return self._sampled(tree, ids, level, torch.log(lam * r + (1 - lam) * q_d), warped=True)

    def commit(self, path: list[int], committed: list[int], target_hidden: torch.Tensor | None = None,
               fed: int = 0) -> None:
        self.base.commit(path, committed, target_hidden, fed)
        self.lookup.commit(path, committed)

    def settings(self) -> dict[str, Any]:
        return {**self.base.settings(), "kind": self.kind, "lookup": self.mix.settings()}

