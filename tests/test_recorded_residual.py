"""The residual a trace records under verify="rejection" is the residual: norm((p - q)+) after the
rejections made at the node, and absent (None) where nothing was rejected there.

The nodes below have a known p and q and candidates whose fate does not depend on the coin: a candidate
with p(x) >= q(x) has min(1, p/q) = 1 and is always accepted, one with p(x) = 0 is always rejected.
"""

from __future__ import annotations

import types

import pytest
import torch

from dynatree_core import generate
from dynatree_core.engine.collector import RunCollector, _sampling_record
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.runtime.sampling import DraftCandidates, TargetSampler

from helpers import cached_pair

P = [0.6, 0.3, 0.1, 0.0]
Q = [0.1, 0.2, 0.3, 0.4]  # the device keeps q rows in float32: compared to 1e-7
#: norm((p - q)+) = (0.5, 0.1, 0, 0) / 0.6
RESIDUAL = [5 / 6, 1 / 6, 0.0, 0.0]
#: q without token 3, renormalised: what the second candidate is tested against beside the residual
Q_AFTER = [1 / 6, 1 / 3, 1 / 2, 0.0]


def recorded(candidates: list[list[int]], fed: list[bool], trace: bool = False) -> dict:
    """The sampling record of one verified tree whose every node has p = P and q = Q."""
    n = len(candidates)
    tokens = torch.tensor(candidates, dtype=torch.long)
    draft = DraftCandidates(tokens, torch.tensor(fed), torch.tensor([Q] * n, dtype=torch.float32)
                            * torch.tensor(fed)[:, None])
    cfg, gen = SamplingConfig(temperature=1.0, verify="rejection"), torch.Generator().manual_seed(0)
    sampler = TargetSampler(cfg, gen, trace=True) if trace else TargetSampler(cfg, gen)
    logits = torch.log(torch.tensor([P] * n, dtype=torch.float64))  # p = 0 -> -inf, as a warped score
    choice = sampler._rejection(logits, draft)
    tree = types.SimpleNamespace(n=n, topk_tokens=tokens)  # what the collector reads of the tree
    extras = RunCollector._sampling_extras(tree, choice)
    return _sampling_record({k: v.numpy() for k, v in extras.items()})


def residual_at(record: dict, node: int) -> list[float] | None:
    """The recorded residual of ``node`` as a dense row over the 4 tokens (None: none recorded)."""
    top = record["residual_top"][node]
    if top is None:
        return None
    row = [0.0] * 4
    for t, v in zip(*top):
        row[t] = v
    return row


def test_no_residual_is_recorded_where_the_first_candidate_was_accepted():
    rec = recorded([[0, 3], [1, 3]], [True, True])  # p(0) >= q(0), p(1) >= q(1): accepted at once
    assert rec["accepted_rank"] == [0, 0]
    assert residual_at(rec, 0) is None and residual_at(rec, 1) is None  # not p: nothing was rejected


def test_the_recorded_residual_is_norm_of_p_minus_q_after_a_rejection():
    # node 0: token 3 (p = 0) rejected, then token 0 accepted against the residual; node 1: token 3
    # rejected and nothing else offered: drawn from the residual
    rec = recorded([[3, 0], [3, 3]], [True, True])
    assert rec["accepted_rank"][0] == 1 and rec["accepted_rank"][1] == -1
    for node in (0, 1):
        assert residual_at(rec, node) == pytest.approx(RESIDUAL, abs=1e-7)
    # the second candidate's threshold min(1, p_1/q_1) was taken against the residual and the reduced q
    assert rec["thresholds"][0][1] == pytest.approx(min(1.0, RESIDUAL[0] / Q_AFTER[0]))
    lo, hi = rec["interval"][1]  # a residual draw's token lies in the residual's support
    assert hi - lo == pytest.approx(RESIDUAL[rec_token(rec, 1)], abs=1e-7)


def rec_token(rec: dict, node: int) -> int:
    """The drawn token of ``node`` (the record's p_top names p of it as choice_prob)."""
    return next(t for t, v in zip(*rec["p_top"][node]) if v == rec["choice_prob"][node])


def test_a_node_with_no_candidates_records_no_residual_and_draws_from_p():
    rec = recorded([[0, 3], [0, 3]], [True, False])
    assert rec["accepted_rank"][1] == -2 and residual_at(rec, 1) is None
    lo, hi = rec["interval"][1]
    assert hi - lo == pytest.approx(P[rec_token(rec, 1)], abs=1e-12)  # p itself: no residual was formed


def test_the_steps_record_p_and_q_before_each_candidate_up_to_the_last_rejection():
    rec = recorded([[3, 0], [0, 3]], [True, True], trace=True)
    assert rec["rejection_steps"][1] is None  # accepted at once: no steps beyond p and q themselves
    tokens, ps, qs = rec["rejection_steps"][0]
    assert sorted(tokens) == [0, 1, 2, 3] and len(ps) == len(qs) == 2  # before candidate 1 and candidate 2
    dense = lambda row: [row[tokens.index(t)] for t in range(4)]  # noqa: E731
    assert dense(ps[0]) == pytest.approx(P) and dense(qs[0]) == pytest.approx(Q, abs=1e-7)
    assert dense(ps[1]) == pytest.approx(RESIDUAL, abs=1e-7) and dense(qs[1]) == pytest.approx(Q_AFTER, abs=1e-7)
    assert "rejection_steps" not in recorded([[3, 0]], [True])  # kept only when traced


def test_a_traced_run_draws_the_same_tokens_and_records_residuals_only_where_it_rejected():
    pair = cached_pair("llama", "sdpa", 0.3)
    kw = dict(max_new_tokens=24, ignore_eos=True, temperature=1.0, verify="rejection")
    for seed in range(2):
        plain = generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig(tau=0.0, n_max=10), seed=seed, **kw)
        traced = generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig(tau=0.0, n_max=10), seed=seed, trace=True, **kw)
        assert traced.tokens == plain.tokens  # keeping the steps changes what is recorded, never a token
        for rec in traced.trace.iterations:
            s = rec.sampling
            for u, rank in enumerate(s["accepted_rank"]):
                rejected = rank == -1 or rank > 0
                assert (s["residual_top"][u] is not None) == rejected == (s["rejection_steps"][u] is not None)
                if rejected:  # the last step's p is the recorded residual, where both name a token
                    tokens, ps, _ = s["rejection_steps"][u]
                    last = dict(zip(tokens, ps[-1]))
                    assert all(abs(last[t] - v) < 1e-12 for t, v in zip(*s["residual_top"][u]) if t in last)
