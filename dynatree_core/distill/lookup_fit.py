"""Prompt lookup mixed into a draft (:class:`~dynatree_core.drafters.LookupMix`): fitting its
pseudo-counts κ_n on training text, and its teacher-forced agreement next to the draft's own.

Both read *position records*: for each position of a target's greedy continuation, the draft's
distribution there (depth 1: a feature draft reads the target's real feature of the previous
position, as every tree root does) and the prompt-lookup counts over the tokens known at that
point (:func:`~dynatree_core.runtime.ngram.lookup_matches` with a per-row limit: the engine's own
lookup). Agreement is the top-1 of :func:`~dynatree_core.drafters.mix_topk`, the very function the
drafter uses, so what is measured is what decodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dynatree_core.runtime.ngram import LookupMatches, contexts_ending_at, lookup_matches
from dynatree_core.drafters import LookupMix, PromptLookup, mix_topk
from dynatree_core.drafters.feature_draft import FeatureDraftModel, target_states, unrolled_forward

#: the candidates per position the agreement merges (the drafter's top-k in a tree is about this)
RECORD_TOP_K = 8
#: κ values the fit tries for each n-gram length (a log grid)
KAPPA_GRID = tuple(round(0.125 * 2 ** (i / 2), 4) for i in range(27))  # 0.125 .. 1024 (1024: all but off)


@dataclass
class PositionRecords:
    """Per position of one or more continuations: the target's token ``y`` [N], the draft's full
    probability of it ``p_y`` [N], its top-k (``top_ids``, ``top_lps`` [N, k]) and the lookup's
    counts (``matches``, over the tokens known at that point)."""

    y: torch.Tensor
    p_y: torch.Tensor
    top_ids: torch.Tensor
    top_lps: torch.Tensor
    matches: LookupMatches

    @staticmethod
    def cat(parts: list["PositionRecords"]) -> "PositionRecords":
        vocab = max(p.matches.counts.shape[1] for p in parts)

        def widen(t: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(t, (0, vocab - t.shape[1]))

        return PositionRecords(
            torch.cat([p.y for p in parts]), torch.cat([p.p_y for p in parts]),
            torch.cat([p.top_ids for p in parts]), torch.cat([p.top_lps for p in parts]),
            LookupMatches(torch.cat([widen(p.matches.counts) for p in parts]),
                          torch.cat([widen(p.matches.recency) for p in parts]),
                          torch.cat([p.matches.ngram for p in parts]), torch.arange(vocab), dense=True))

    def __len__(self) -> int:
        return int(self.y.shape[0])


@torch.no_grad()
def draft_logprobs(draft, target, ids: list[int]) -> torch.Tensor:
    """[len(ids) - 1, V] log-probabilities of the draft after each position but the last (row p
    predicts ``ids[p + 1]``); a feature draft reads the target's real features (depth 1)."""
    x = torch.tensor([ids], device=next(target.parameters()).device)
    if isinstance(draft, FeatureDraftModel):
        f = target_states(target, x, draft.config.target_layers).to(draft.fc_emb.weight.dtype)
        out = unrolled_forward(draft, x, f, 1)[0][0]  # row i is position i + 1
        compact = torch.log_softmax(draft.head.forward_compact(out).float(), -1).cpu()
        full = torch.full((out.shape[0], int(draft.head.vocab_ids.max()) + 1), -math.inf)
        full[:, draft.head.vocab_ids.cpu()] = compact
        # position 0 has no previous feature (the drafter never drafts there): a uniform row
        return torch.cat([torch.full((1, full.shape[1]), -math.log(full.shape[1])), full])
    return torch.log_softmax(draft(input_ids=x).logits[0, :-1].float(), -1).cpu()


def position_records(draft, target, prompt: list[int], cont: list[int], source: PromptLookup,
                     k: int = RECORD_TOP_K) -> PositionRecords:
    """The records of the continuation ``cont`` of ``prompt`` (its positions, teacher-forced)."""
    ids = prompt + cont
    lp = draft_logprobs(draft, target, ids)
    P = len(prompt)
    rows = torch.arange(P - 1, len(ids) - 1)  # position p predicts ids[p + 1]
    y = torch.tensor(ids[P:])
    lp = lp[rows]
    top = lp.topk(min(k, lp.shape[1]), dim=-1)
    seq = torch.tensor(ids)
    ctx = contexts_ending_at(seq, rows, source.max_ngram)
    m = lookup_matches(seq, ctx, source, vocab=max(ids) + 1, limit=rows)  # dense: records of many texts concatenate
    p_y = torch.where(y < lp.shape[1], lp.gather(1, y.clamp(max=lp.shape[1] - 1)[:, None])[:, 0].exp(), 0.0)
    return PositionRecords(y, p_y, top.indices, top.values, m)


def mix_likelihood(rec: PositionRecords, mix: LookupMix) -> float:
    """Mean log q(y) under the mixture with the draft's full probability (floored at 1e-9)."""
    lam = mix.weights(rec.matches)
    r = rec.matches.count_of(rec.y[:, None])[:, 0] / rec.matches.total.clamp(min=1.0)
    q = lam * r + (1 - lam) * rec.p_y
    return float(q.clamp(min=1e-9).log().mean())


def fit_prior(rec: PositionRecords, source: PromptLookup, grid: tuple[float, ...] = KAPPA_GRID
              ) -> tuple[float, ...]:
    """κ_n for n = 1..max_ngram maximising the mixture's likelihood of the target's tokens. The
    n-gram lengths are fitted one at a time: a position's weight depends on its own n only."""
    prior = [1.0] * source.max_ngram
    for n in range(source.min_ngram, source.max_ngram + 1):
        sel = rec.matches.ngram == n
        if not bool(sel.any()):
            continue
        sub = PositionRecords(rec.y[sel], rec.p_y[sel], rec.top_ids[sel], rec.top_lps[sel],
                              LookupMatches(rec.matches.counts[sel], rec.matches.recency[sel], rec.matches.ngram[sel],
                                            rec.matches.tokens, rec.matches.dense))
        best = max(grid, key=lambda kappa: mix_likelihood(
            sub, LookupMix(source, prior=tuple(kappa if i == n - 1 else 1.0 for i in range(source.max_ngram)))))
        prior[n - 1] = best
    return tuple(prior)


def agreement(rec: PositionRecords, mix: LookupMix | None) -> float:
    """Top-1 agreement with the target's tokens: the draft's own (``mix`` None) or the mixture's,
    as :func:`~dynatree_core.drafters.mix_topk` ranks it."""
    return _rate(_top1(rec, mix) == rec.y)


def hit_counts(rec: PositionRecords, mix: LookupMix) -> dict[str, tuple[int, int]]:
    """(hits, positions) for the draft, the lookup, either and the mixture, for pooling and
    bootstrap intervals."""
    return {k: (int(h.sum()), len(rec)) for k, h in _hits(rec, mix).items()}


def _hits(rec: PositionRecords, mix: LookupMix) -> dict[str, torch.Tensor]:
    """Per position, whether the target's token is the top-1 of the draft, of the lookup (a match
    needed; no match is a miss), of either (what a mixture could reach at best), and of the mixture."""
    draft = _top1(rec, None) == rec.y
    look = (rec.matches.top(1)[:, 0] == rec.y) & (rec.matches.ngram > 0)
    return {"draft": draft, "lookup": look, "either": draft | look, "mix": _top1(rec, mix) == rec.y}


def _top1(rec: PositionRecords, mix: LookupMix | None) -> torch.Tensor:
    if mix is None:
        return rec.top_ids[:, 0]
    return mix_topk((rec.top_ids, rec.top_lps), rec.matches, mix, 1)[0][:, 0]


def _rate(hits: torch.Tensor) -> float:
    return float(hits.float().mean()) if hits.numel() else float("nan")
