"""How much a draft limits speculative *sampling*: the target's and the draft's warped distributions
p and q at every position of a token sequence (teacher-forced, scored as decoding scores them), and
what they allow.

At a node whose child fills position t, seeded AR's token is argmax(log p + g(seed, t, .)). Drafting
the top-B of q alone (independent drafts) puts the target's token among the children with
probability p(top-B of q); ranking by log q + the same noise (shared-noise drafting) makes the first
child the target's token with probability sum_x 1 / sum_y max(p_y / p_x, q_y / q_x)
(:func:`dynatree_core.policy.sampling.coupled_agreement`), at least (1 - TV) / (1 + TV).
:func:`position_stats` gives these per position, :func:`coupled_agreement_rows` the closed form in
O(V log V) per row (the reference is O(V^2)), and :func:`pair_scores` the two models' scores along a
sequence: the target's logits and the draft's level scores (its logits; the feature draft's compact
head logits with their token ids, depth 1: the target's real features, as a tree's root reads them).
p and q are warped as the device code warps them (:func:`dynatree_core.runtime.sampling.log_probs`;
q over the whole vocabulary by :func:`~dynatree_core.runtime.sampling.dense`, 0 outside a sparse
head). ``docs/bench/2026-11-28-shared-noise/measure_tv.py`` runs it on held-out text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynatree_core.drafters.feature_draft import FeatureDraftModel, target_states, unrolled_forward
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.runtime.sampling import dense, log_probs

#: the draft's top-B whose target mass :func:`position_stats` reports (independent top-B drafting)
TOP_B = 4
#: the per-position numbers of :func:`position_stats`, in table order
STAT_NAMES = ("tv", "coupled", "tv_bound", "p_top1", "p_topb", "hit_coupled1", "hit_coupledb", "hit_top1")


@dataclass
class PairScores:
    """Scores at the positions that predict a continuation's tokens: ``target`` logits [n, V],
    ``draft`` scores [n, U] with ``vocab_ids`` (the token id of each column; None: column = token id),
    and ``positions`` (the absolute position each row's token fills: its index in prompt + output)."""

    target: torch.Tensor
    draft: torch.Tensor
    vocab_ids: torch.Tensor | None
    positions: list[int]


@torch.no_grad()
def pair_scores(target, drafts: dict, prompt: list[int], cont: list[int]) -> dict[str, PairScores]:
    """Teacher-forced scores of each of ``drafts`` (name -> a causal LM draft, or a
    :class:`FeatureDraftModel`, read at depth 1) and of ``target`` at the positions predicting ``cont``
    after ``prompt`` (at least 2 tokens); one target forward for all of them."""
    if len(prompt) < 2 or not cont:
        raise ValueError(f"pair_scores needs a prompt of >= 2 tokens and a continuation (got {len(prompt)}, "
                         f"{len(cont)})")
    dev = next(target.parameters()).device
    x = torch.tensor([list(prompt) + list(cont)], device=dev)
    P, n = len(prompt), len(cont)
    states: dict[tuple[int, ...], torch.Tensor] = {}

    def feats(layers: tuple[int, ...]) -> torch.Tensor:
        if layers not in states:
            states[layers] = target_states(target, x, layers)
        return states[layers]

    H = target.config.hidden_size
    t_logits = target.lm_head(feats(())[0, P - 1:P - 1 + n, -H:]).float()
    out: dict[str, PairScores] = {}
    for name, draft in drafts.items():
        if isinstance(draft, FeatureDraftModel):
            f = feats(tuple(draft.config.target_layers)).to(draft.fc_emb.weight.dtype)
            # unrolled output i (position i + 1) predicts token i + 2: position P - 1 is output P - 2
            h = unrolled_forward(draft, x, f, 1)[0][0, P - 2:P - 2 + n]
            scores, vocab_ids = draft.head.forward_compact(h), draft.head.vocab_ids
        else:
            scores, vocab_ids = draft(input_ids=x).logits[0, P - 1:P - 1 + n], None
        out[name] = PairScores(t_logits, scores.float(), vocab_ids, list(range(P, P + n)))
    return out


def coupled_agreement_rows(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[n]: :func:`~dynatree_core.policy.sampling.coupled_agreement` of each row pair, exactly, in
    O(V log V): with tokens sorted by r = log p - log q, max(p_y / p_x, q_y / q_x) is p_y / p_x for
    r_y >= r_x and q_y / q_x below, so the inner sum is A_x / p_x + B_x / q_x with A the tail sum of p
    and B the head sum of q (ties give both ratios equal)."""
    p, q = p.double(), q.double()
    r = torch.log(p) - torch.log(q)  # -inf where p = 0, +inf where q = 0
    r = torch.nan_to_num(r, nan=0.0, posinf=float("inf"), neginf=float("-inf"))  # p = q = 0: adds nothing
    order = r.argsort(dim=-1)
    ps, qs = p.gather(-1, order), q.gather(-1, order)
    a = ps.flip(-1).cumsum(-1).flip(-1)  # sum over r_y >= r_x of p_y
    b = qs.cumsum(-1) - qs  # sum over r_y < r_x of q_y
    both = (ps > 0) & (qs > 0)
    den = torch.where(both, a * qs + b * ps, torch.ones_like(ps))
    return torch.where(both, ps * qs / den, torch.zeros_like(ps)).sum(-1)


def warped(scores: PairScores, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """p [n, V] and q [n, V] (float64) at ``temperature`` > 0, as the sampler warps them."""
    cfg = SamplingConfig(temperature=temperature)
    p = log_probs(scores.target, cfg).double().exp()
    q = dense(log_probs(scores.draft, cfg).double().exp(), scores.vocab_ids, p.shape[-1], 0.0)
    return p, q


def position_stats(scores: PairScores, temperature: float, generator: torch.Generator | None = None,
                   top_b: int = TOP_B, chunk: int = 64) -> dict[str, torch.Tensor]:
    """Per position [n] (float64), at ``temperature`` (0: greedy, where every number is a top-1 or
    top-B agreement): ``tv`` TV(p, q); ``coupled`` the closed-form coupled agreement; ``tv_bound``
    (1 - TV) / (1 + TV); ``p_top1`` / ``p_topb`` p's mass on the draft's top-1 / top-B by q (what
    independent drafts reach); and, for one draw of Gumbel noise per position shared by target and
    draft (from ``generator``: iid Gumbel noise, the law of seeded AR's counter-based stream, whose
    hash costs far more on a CPU), the indicators that the target's perturbed argmax is the draft's
    coupled top-1 (``hit_coupled1``), among its coupled top-B (``hit_coupledb``), and its top-1 by q
    (``hit_top1``): Monte Carlo checks of ``coupled`` and ``p_top1``, and the coupled top-B, which has
    no closed form here."""
    rows = {k: [] for k in STAT_NAMES}
    noise = generator if generator is not None else torch.Generator(scores.target.device).manual_seed(0)
    for i in range(0, scores.target.shape[0], chunk):
        part = PairScores(scores.target[i:i + chunk], scores.draft[i:i + chunk], scores.vocab_ids,
                          scores.positions[i:i + chunk])
        out = _greedy_stats(part, top_b) if temperature == 0 else _sampled_stats(part, temperature, noise, top_b)
        for k in STAT_NAMES:
            rows[k].append(out[k])
    return {k: torch.cat(v) for k, v in rows.items()}


def _draft_order(scores: PairScores, top_b: int) -> torch.Tensor:
    """[n, B] token ids: the draft's top-B by its scores (warping keeps the order)."""
    top = scores.draft.topk(top_b, dim=-1).indices
    return top if scores.vocab_ids is None else scores.vocab_ids[top]


def _greedy_stats(scores: PairScores, top_b: int) -> dict[str, torch.Tensor]:
    y = scores.target.argmax(-1)
    order = _draft_order(scores, top_b)
    hit1 = (order[:, 0] == y).double()
    hitb = (order == y[:, None]).any(-1).double()
    return {"tv": 1 - hit1, "coupled": hit1, "tv_bound": hit1, "p_top1": hit1, "p_topb": hitb,
            "hit_coupled1": hit1, "hit_coupledb": hitb, "hit_top1": hit1}


def _sampled_stats(scores: PairScores, temperature: float, noise: torch.Generator, top_b: int) -> dict[str, torch.Tensor]:
    p, q = warped(scores, temperature)
    tv = 0.5 * (p - q).abs().sum(-1)
    order = _draft_order(scores, top_b)
    u = torch.rand(p.shape, generator=noise, device=p.device, dtype=torch.float64)
    g = -torch.log(-torch.log(u))
    y = (p.log() + g).argmax(-1)  # seeded AR's draw (the target's perturbed argmax)
    coupled_top = (q.log() + g).topk(top_b, dim=-1).indices
    return {"tv": tv, "coupled": coupled_agreement_rows(p, q), "tv_bound": (1 - tv) / (1 + tv),
            "p_top1": p.gather(-1, order[:, :1])[:, 0], "p_topb": p.gather(-1, order).sum(-1),
            "hit_coupled1": (coupled_top[:, 0] == y).double(),
            "hit_coupledb": (coupled_top == y[:, None]).any(-1).double(),
            "hit_top1": (order[:, 0] == y).double()}


def continuations(target, prompts: list[list[int]], n_new: int, eos: set[int], temperature: float, seed: int = 0,
                  batch: int = 16) -> list[tuple[list[int], list[int]]]:
    """``(prompt, continuation)`` pairs: the target's own continuations of ``prompts``, greedy at
    temperature 0, else sampled at ``temperature`` (no top-k/top-p; torch's generator seeded with
    ``seed`` once), in batches (left-padded), each cut after its first EOS."""
    from dynatree_core.distill.decode import _continue

    torch.manual_seed(seed)
    out = []
    for i in range(0, len(prompts), batch):
        rows = _continue(target, 0, prompts[i:i + batch], n_new, eos, temperature > 0, max(temperature, 1e-6), 1.0)
        out += [(ids[:start], ids[start:]) for ids, start in rows]
    return out


def measure(target, drafts: dict, items: list[tuple[list[int], list[int]]], temperature: float, seed: int = 0,
            progress=None) -> dict[str, dict]:
    """Per draft: the mean of each :data:`STAT_NAMES` number over every position of ``items`` (and
    ``positions``, their count), at ``temperature``; ``progress(n)`` is told each item's positions."""
    sums = {name: {k: 0.0 for k in STAT_NAMES} for name in drafts}
    count = 0
    gen = torch.Generator(next(target.parameters()).device).manual_seed(seed)
    for prompt, cont in items:
        for name, s in pair_scores(target, drafts, prompt, cont).items():
            for k, v in position_stats(s, temperature, gen).items():
                sums[name][k] += float(v.sum())
        count += len(cont)
        if progress is not None:
            progress(len(cont))
    return {name: {**{k: v / max(1, count) for k, v in d.items()}, "positions": count} for name, d in sums.items()}
