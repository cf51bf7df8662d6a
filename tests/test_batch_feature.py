"""The feature draft in a batch (:mod:`dynatree_core.drafters.batch_feature`): every row is its batch-1 run.

Tiny Llama targets with random feature drafts (whose proposals depend on the features they read):
every row equals the target's greedy decode, grows its batch-1 trees node for node beside other rows
(so its features, positions and cache are its own), and ``match`` / ``rejection`` rows equal their
seeded batch-1 runs. One draft forward and one head call per level whatever B. A variant that keeps
the tree's entries made from predicted features (as the independent draft keeps its own) is shown
to fail.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate, iterate
from dynatree_core.drafters import LookupMix
from dynatree_core.drafters.batch_feature import BatchFeatureDraft
from dynatree_core.drafters.batch_model import BatchModelDraft
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.batch_budget import BatchBudget, BatchCost
from dynatree_core.policy.config import DynaTreeConfig, HistoryConfig

from helpers.exactness import method_configs, prompts
from helpers.features import agreeing_feature_pair, feature_pair, target_greedy

ROWS = [[5, 9, 2, 33, 7], [1, 2], [40, 41, 42, 43, 44, 45, 3], [7]]
TREE_KEYS = ("tokens", "parents", "depths", "branching", "stop_reasons", "topk_tokens")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=st.sampled_from((0, 1, 2)), mc=method_configs, rows=st.lists(prompts, min_size=1, max_size=4),
       runtime=st.sampled_from(("eager", "static")), data=st.data())
def test_every_feature_row_equals_the_target_greedy(head, mc, rows, runtime, data):
    method, config = mc
    news = data.draw(st.lists(st.integers(0, 12), min_size=len(rows), max_size=len(rows)))
    res = generate(feature_pair("sdpa", head), [list(p) for p in rows], method, config, max_new_tokens=news,
                   ignore_eos=True, runtime=runtime)  # static: the verify's hidden states from bucketed forwards
    assert [r.tokens for r in res] == [target_greedy("sdpa", 0, p, n) for p, n in zip(rows, news)]


def _trees_equal_batch_one(pair, rows, method, config=None, n=14):
    """Each row's trace in one batch, against its batch-1 trace: same trees, scores, paths."""
    kw = dict(max_new_tokens=n, ignore_eos=True, trace=True)
    batch = [r.trace for r in generate(pair, rows, method, config, **kw)]
    for p, tb in zip(rows, batch):
        ta = generate(pair, p, method, config, **kw).trace
        if len(ta) != len(tb) or ta.tokens != tb.tokens:
            return False
        for a, b in zip(ta, tb):
            da, db = a.tree.to_dict(), b.tree.to_dict()
            if any(da.get(k) != db.get(k) for k in TREE_KEYS) or a.accepted_path != b.accepted_path:
                return False
            # batch 1 feeds a chain level under the default causal mask, the batch under an explicit one
            if db["logps"] != pytest.approx(da["logps"], rel=1e-4, abs=1e-5):
                return False
    return True


@pytest.mark.parametrize("agreeing", [False, True])
@pytest.mark.parametrize("method", ["linear", "dynatree", "eagle2"])
def test_feature_rows_grow_their_batch_one_trees_beside_other_rows(method, agreeing):
    pair = agreeing_feature_pair() if agreeing else feature_pair("sdpa", 1)
    assert _trees_equal_batch_one(pair, ROWS, method)


def test_a_feature_batch_of_one_grows_todays_trees():
    pair = feature_pair("sdpa", 2)
    assert _trees_equal_batch_one(pair, ROWS[:1], "dynatree", DynaTreeConfig(n_max=16))
    assert _trees_equal_batch_one(pair, [[9]], "dynatree")  # a one-token prompt reads a zero feature once


def test_a_batch_that_keeps_entries_made_from_predicted_features_is_caught(monkeypatch):
    """At batch 1 a feature draft drops its tree's entries at commit (they were computed from
    predicted features) and re-reads the committed tokens with the target's own. A batch that keeps
    the accepted nodes' entries, as the independent draft does, grows other trees."""
    pair = agreeing_feature_pair()
    assert _trees_equal_batch_one(pair, ROWS[:2], "dynatree")
    monkeypatch.setattr(BatchFeatureDraft, "_kept_columns", BatchModelDraft._kept_columns)
    assert not _trees_equal_batch_one(pair, ROWS[:2], "dynatree")


@pytest.mark.parametrize("verify", ["match", "rejection"])
@pytest.mark.parametrize("method", ["linear", "dynatree", "eagle2"])
def test_sampled_feature_rows_equal_their_batch_one_runs_with_their_seeds(verify, method):
    pair = feature_pair("sdpa", 1)
    seeds = [3, 4, 5, 6]
    kw = dict(max_new_tokens=12, ignore_eos=True, temperature=0.8, top_p=0.95, verify=verify)
    res = generate(pair, ROWS, method, seed=seeds, **kw)
    assert [r.tokens for r in res] == [generate(pair, p, method, seed=s, **kw).tokens for p, s in zip(ROWS, seeds)]


class _Calls:
    def __init__(self, module):
        self.calls = 0
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1


@pytest.mark.parametrize("rows", [1, 4])
def test_one_feature_draft_forward_and_one_head_call_per_level(rows, monkeypatch):
    pair = feature_pair("sdpa", 1)
    head = []
    compact = type(pair.draft.head).forward_compact

    def counted(self, x):
        head.append(x.shape[0])
        return compact(self, x)

    monkeypatch.setattr(type(pair.draft.head), "forward_compact", counted)
    body = _Calls(pair.draft)
    try:
        run = iterate(pair, ROWS[:rows], "dynatree", DynaTreeConfig(n_max=12), max_new_tokens=12, ignore_eos=True)
        its = list(run)
    finally:
        body.handle.remove()
    assert body.calls == sum(i.draft_forwards for i in its) == run.draft_forwards
    assert [i.draft_forwards for i in its] == [max(r.draft_forwards for r in i.records.values()) for i in its]
    assert len(head) == run.draft_forwards  # the head runs once per level over every asking row's rows


def test_feature_rows_with_lookup_mixed_in_a_lookup_tail_a_history_and_the_budget_are_exact():
    base = agreeing_feature_pair()
    pair = ModelPair(target=base.target, draft=base.draft, lookup=LookupMix(),
                     target_name="tiny-llama", draft_name="feature-1+lookup")
    rows = [[5, 9, 2, 5, 9, 2, 5], [7, 8, 7, 8, 7], [3]]
    cfg = DynaTreeConfig(lookup_tail=3, history=HistoryConfig(enabled=True, window=3, eta_d=0.5, eta_h=0.5))
    cost = BatchCost((1, 4), tuple(tuple(0.05 + 2e-3 * b * w for w in range(1, 40)) for b in (1, 4)), (0.005, 0.005))
    expected = [target_greedy("sdpa", 0, tuple(p), 14) for p in rows]
    assert [r.tokens for r in generate(pair, rows, "dynatree", cfg, max_new_tokens=14, ignore_eos=True)] == expected
    assert [r.tokens for r in generate(pair, rows, "dynatree", cfg, max_new_tokens=14, ignore_eos=True,
                                       budget=BatchBudget(cost))] == expected
    assert [r.tokens for r in generate(pair, rows, "dynatree", cfg, max_new_tokens=14, ignore_eos=True,
                                       budget=BatchBudget(cost), runtime="static")] == expected
    assert _trees_equal_batch_one(pair, rows, "dynatree", cfg)


def test_a_feature_batch_refuses_missing_target_states():
    pair = feature_pair("sdpa", 1)
    draft = BatchFeatureDraft(pair.draft, [[5, 9, 2]], [torch.zeros((2, pair.draft.config.hidden_size))])
    with pytest.raises(ValueError, match="one target hidden state per committed token"):
        draft._queue(0, [4, 5], None, extend=True)
    with pytest.raises(ValueError, match="wide states"):
        BatchFeatureDraft(pair.draft, [[5, 9, 2]], [torch.zeros((2, 3))])


def test_the_batch_cost_times_a_feature_draft_on_its_own_store():
    from dynatree_core.engine.batch_calibrate import measure_batch_cost

    cost = measure_batch_cost(feature_pair("sdpa", 1), rows=3, widest=4, repeats=1)
    assert cost.rows == (1, 2, 3) and len(cost.verify_s[0]) == 4
    assert all(d > 0 for d in cost.draft_s)


def test_under_the_budget_a_feature_draft_reads_the_prompts_first_and_stays_exact():
    pair = agreeing_feature_pair()
    rows = [list(range(2, 32)), [5, 9, 2], list(range(40, 62))]  # longer than the chain view, and not
    cost = BatchCost((1, 4), tuple(tuple(0.05 + 1e-5 * b * w for w in range(1, 40)) for b in (1, 4)), (1e-4, 1e-4))
    body = _Calls(pair.draft)
    try:
        run = iterate(pair, rows, "dynatree", max_new_tokens=12, ignore_eos=True, budget=BatchBudget(cost))
        its = list(run)
        res = run.finish()
    finally:
        body.handle.remove()
    assert [r.tokens for r in res] == [target_greedy("sdpa", 0, tuple(p), 12) for p in rows]
    assert body.calls == run.draft_forwards == 1 + sum(i.draft_forwards for i in its)
