"""Trace invariants and the JSON round trip."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig, LinearConfig, config_from_dict
from dynatree_core.records.trace import SCHEMA_VERSION, Trace

from helpers import cached_pair


@pytest.fixture(scope="module")
def traced():
    pair = cached_pair("gpt_neox", "sdpa", 0.02)
    return generate(pair, [5, 6, 7, 8, 9], "dynatree", DynaTreeConfig(tau=0.01), max_new_tokens=40,
                    ignore_eos=True, trace=True)


def _ancestors(parents, i):
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


def test_mask_rows_are_ancestor_sets_and_positions_follow_depth(traced):
    for rec in traced.trace:
        mask = rec.attention_mask()
        n = len(rec.tree)
        assert mask.shape == (n, rec.prefix_len + n)
        assert mask[:, : rec.prefix_len].all()
        for i in range(n):
            assert set(np.flatnonzero(mask[i, rec.prefix_len:])) == _ancestors(rec.tree.parents, i)
        assert rec.position_ids == [rec.prefix_len + d for d in rec.tree.depths]


def test_accepted_path_is_a_root_to_node_chain_that_matches_the_target(traced):
    some_accepted = False
    for rec in traced.trace:
        prev = 0
        for node in rec.accepted_path:
            assert rec.tree.parents[node] == prev
            assert rec.tree.tokens[node] == rec.target_argmax[prev]
            prev = node
            some_accepted = True
        assert rec.bonus == rec.target_argmax[prev]
    assert some_accepted


def test_committed_tokens_equal_the_result(traced):
    assert traced.trace.committed_tokens() == traced.tokens
    assert traced.trace.tokens == traced.tokens
    assert sum(len(r.committed) for r in traced.trace) == traced.metrics.new_tokens


def test_expanded_nodes_keep_topk_and_stop_reasons_are_known(traced):
    for rec in traced.trace:
        t = rec.tree
        for i in range(len(t)):
            if t.topk_tokens[i] is not None:
                assert len(t.topk_tokens[i]) >= 8  # trace_top_k default, >= B_max
                assert t.confidences[i] == pytest.approx(np.exp(t.topk_logps[i][0]))
                assert 1 <= t.branching[i] <= 3
            assert t.stop_reasons[i] in ("expanded", "tau", "rho_stop", "depth_gate", "d_max", "n_max")


def test_target_prob_of_drafted_tokens_is_a_probability(traced):
    rec = traced.trace[0]
    assert rec.target_prob_drafted[0] is None
    assert all(0.0 <= p <= 1.0 for p in rec.target_prob_drafted[1:])
    assert len(rec.target_prob_drafted) == len(rec.tree)


def test_json_round_trip_is_lossless(traced, tmp_path):
    path = tmp_path / "t.json"
    traced.trace.to_json(path)
    back = Trace.from_json(path)
    assert back.to_dict() == traced.trace.to_dict()
    d = json.loads(path.read_text())
    assert d["schema_version"] == SCHEMA_VERSION
    assert d["config"]["method"] == "dynatree" and d["target_name"] == "tiny-gpt_neox"
    assert config_from_dict(d["config"]) == DynaTreeConfig(tau=0.01)


def test_unknown_schema_version_is_rejected(traced):
    d = traced.trace.to_dict()
    d["schema_version"] = "99.0"
    with pytest.raises(ValueError, match="schema_version"):
        Trace.from_dict(d)


def test_trace_loads_without_torch(traced, tmp_path):
    path = tmp_path / "t.json"
    traced.trace.to_json(path)
    code = ("import sys; sys.modules['torch'] = None\n"
            "from dynatree_core.records.trace import Trace\n"
            f"t = Trace.from_json({str(path)!r})\n"
            "print(len(t), t.iterations[0].attention_mask().shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == str(len(traced.trace))


@pytest.mark.parametrize("method,config", [("linear", LinearConfig(k=3)), ("fixed_tree", FixedTreeConfig(d=2, b=2))])
def test_counts_per_iteration_add_up(method, config):
    pair = cached_pair("llama", "sdpa", 0.02)
    res = generate(pair, [3, 3, 3], method, config, max_new_tokens=20, ignore_eos=True, trace=True)
    assert sum(r.draft_forwards for r in res.trace) == res.metrics.draft_forwards
    assert sum(r.target_forwards for r in res.trace) + 1 == res.metrics.target_forwards  # + prefill


def test_tracing_off_records_no_heavy_fields():
    pair = cached_pair("llama", "sdpa", 0.02)
    from dynatree_core import iterate
    recs = list(iterate(pair, [3, 4], "dynatree", max_new_tokens=10, ignore_eos=True))
    assert recs and all(r.token_texts == [] and r.target_prob_drafted == [] for r in recs)
