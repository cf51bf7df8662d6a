"""dv.sampling_view: what speculative sampling did at one node, read from a saved trace."""

from __future__ import annotations

import functools
import math

import pytest

import dynatree_viz as dv
from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.records.trace import Trace
from dynatree_viz.views.sampling import (COIN_MARKS, DRAFT_FIRST_BAR, DRAFT_SCORE_BARS, MIN_BARS, P_BARS, Q_BARS,
                                         RESIDUAL_BARS, SCORE_BARS, THRESHOLD_MARKS)

from helpers import cached_pair


@functools.lru_cache(maxsize=None)
def sampled(verify: str) -> Trace:
    pair = cached_pair("llama", "sdpa", 0.1)
    res = generate(pair, [5, 9, 14, 3, 22, 7], "dynatree", DynaTreeConfig(tau=0.0, n_max=10), max_new_tokens=24,
                   ignore_eos=True, trace=True, temperature=0.9, seed=2, verify=verify)
    return Trace.from_json(res.trace.to_json())  # the view reads what a saved trace holds


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_the_panel_names_the_drawn_token_and_what_the_walk_did(verify):
    trace = sampled(verify)
    for i, rec in enumerate(trace):
        panel = dv.views.sampling.sampling_data(trace, i)  # the node where the accepted path ended
        end = rec.accepted_path[-1] if rec.accepted_path else 0
        assert panel.node == end and panel.verify == verify and panel.drawn == rec.target_argmax[end]
        assert panel.followed is None  # the path ended here: the drawn token was the bonus
        assert "bonus" in panel.reason or "verified" in panel.reason
        ps = [r.p for r in panel.rows if r.p is not None]
        assert ps[:8] == sorted(ps[:8], reverse=True) and any(r.token == panel.drawn for r in panel.rows)
        for r in panel.rows:  # min(p, q) is the overlap rejection sampling accepts
            if r.p is not None and r.q is not None:
                assert r.overlap == min(r.p, r.q)
        if rec.accepted_path:  # one node up the path, the walk went on into the next node
            up = dv.views.sampling.sampling_data(trace, i, node=([0] + rec.accepted_path)[-2])
            assert up.followed == rec.accepted_path[-1] and "walk went on" in up.reason


def test_match_panels_show_the_gumbel_max_draw():
    trace = sampled("match")
    panel = dv.views.sampling.sampling_data(trace, 0)
    token, _, score = panel.scores[0]  # the largest perturbed score is the drawn token's
    assert token == panel.drawn and all(score >= v for _, _, v in panel.scores)
    assert "Gumbel-max" in panel.reason and panel.uniform is None


def test_rejection_panels_say_which_candidate_was_accepted_or_that_the_residual_drew():
    trace = sampled("rejection")
    panels = [dv.views.sampling.sampling_data(trace, i, node=u) for i, rec in enumerate(trace) for u in [0] + rec.accepted_path]
    assert any("accepted: its coin" in p.reason for p in panels)
    for p in panels:
        if p.accepted_rank == -1:  # a residual draw: the uniform lies in the drawn token's CDF interval
            assert p.interval[0] - 1e-12 <= p.uniform < p.interval[1] + 1e-12 and "residual" in p.reason
    panel = dv.views.sampling.sampling_data(trace, 0, node=0)
    assert len(panel.coins) >= 1 and panel.accepted_rank >= -1


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_the_figure_shows_p_q_their_overlap_and_the_draw(verify):
    fig = dv.sampling_view(sampled(verify), 1)
    names = {t.name for t in fig.data}
    assert {P_BARS, Q_BARS, MIN_BARS} <= names
    assert (RESIDUAL_BARS in names) == (COIN_MARKS in names) == (verify == "rejection")
    assert (SCORE_BARS in names) == (verify == "match")
    assert (DRAFT_SCORE_BARS in names) == (verify == "match")  # shared draft noise: the draft's scores beside
    assert (DRAFT_FIRST_BAR in names) == (verify == "match")  # its first child's frame has a legend entry
    title = fig.layout.title.text.replace("<br>", " ")  # the title wraps at spaces
    assert "committed as the bonus" in title or "verified" in title


def test_shared_noise_panels_show_the_drafts_perturbed_scores_and_whether_they_agreed():
    trace = sampled("match")
    nodes = [(i, u) for i, rec in enumerate(trace) for u in [0] + rec.accepted_path
             if rec.sampling.get("draft_score_top") and rec.sampling["draft_score_top"][u] is not None]
    assert nodes
    panels = [dv.views.sampling.sampling_data(trace, i, node=u) for i, u in nodes]
    for (i, u), p in zip(nodes, panels):
        first = p.draft_scores[0][0]
        assert ("perturbed argmaxes agreed" in p.reason) == (first == p.drawn)
        # q comes from the draft's own log q, not from the coupled confidence the tree reads
        tokens, _, logq = trace.iterations[i].sampling["draft_score_top"][u]
        q = {r.token: r.q for r in p.rows}
        assert all(abs(q[t] - math.exp(lq)) < 1e-9 for t, lq in zip(tokens, logq) if math.isfinite(lq))
    assert any("agreed" in p.reason for p in panels) and any("picked another token" in p.reason for p in panels)


def test_rejection_panels_draw_every_tested_candidates_threshold():
    trace = sampled("rejection")
    panels = [dv.views.sampling.sampling_data(trace, i, node=u) for i, rec in enumerate(trace) for u in [0] + rec.accepted_path]
    tested = [p for p in panels if p.accepted_rank is not None and p.accepted_rank != -2]
    assert tested
    for p in tested:
        used = len(p.coins) if p.accepted_rank < 0 else p.accepted_rank + 1
        assert all(t is not None and 0.0 <= t <= 1.0 for t in p.thresholds[:used])
        if p.accepted_rank >= 0:  # the accepted candidate's coin fell below its threshold, the others' did not
            assert p.coins[p.accepted_rank] < p.thresholds[p.accepted_rank]
        assert all(p.coins[i] >= p.thresholds[i] for i in range(used) if i != p.accepted_rank)
    fig = dv.sampling_view(trace, 0, node=0)
    marks = [t for t in fig.data if t.name == THRESHOLD_MARKS]
    assert marks and len(marks[0].x) == sum(t is not None for t in dv.views.sampling.sampling_data(trace, 0, node=0).thresholds)


def test_a_greedy_record_has_no_draw_to_show():
    pair = cached_pair("llama", "sdpa", 0.1)
    res = generate(pair, [5, 9, 14], "linear", LinearConfig(k=2), max_new_tokens=6, trace=True, ignore_eos=True)
    with pytest.raises(ValueError, match="decoded greedily"):
        dv.sampling_view(res.trace, 0)


def test_the_rejection_example_is_decided_by_the_rule_not_by_luck_and_draws_its_threshold():
    from dynatree_viz.examples.rejection import rejection_counts, rejection_example
    from dynatree_viz.views.sampling import THRESHOLD_MARKS, first_threshold
    trace = sampled("rejection")
    counts = rejection_counts(trace)
    assert counts.nodes == counts.first + counts.sibling + counts.residual > 0
    panel = rejection_example(trace, margin=0.1)  # this run has one: a first candidate accepted by its coin
    assert panel is not None, "no node accepted by a coin below a threshold < 1 in this run"
    t = first_threshold(panel)
    assert panel.accepted_rank == 0 and t < 1 and panel.coins[0] <= t - 0.1
    fig = dv.sampling_view(trace, panel.iteration, panel.node)
    assert THRESHOLD_MARKS in {tr.name for tr in fig.data}
    assert rejection_example(trace, margin=2.0) is None  # no coin lies 2 below a threshold <= 1


def test_long_titles_wrap_at_spaces():
    from dynatree_viz.views.sampling import wrap
    text = "candidate 1 accepted: its coin 0.037 < min(1, p/q) = 0.047; no child carries it, so it was committed"
    lines = wrap(text, 40).split("<br>")
    assert all(len(line) <= 40 for line in lines) and " ".join(lines) == text


def test_the_match_example_shows_a_visible_draw_where_the_draft_ran():
    # 07's match figure used the default node, a lookup-tail node: no q bars, and the drawn token had
    # p = 2.5e-5, a bar no one could see
    from dynatree_viz.examples.match import match_example
    trace = sampled("match")
    panel = match_example(trace, min_p=0.05)
    assert panel is not None and panel.verify == "match"
    drawn = next(r for r in panel.rows if r.token == panel.drawn)
    assert drawn.p >= 0.05 and drawn.q is not None  # its bars can be seen, p beside q
    assert sum(r.q is not None and r.p is not None for r in panel.rows) >= 2
    rec = trace.iterations[panel.iteration]
    assert panel.node in [0] + list(rec.accepted_path)
    # every other qualifying node ranks no higher: a draw that is not p's argmax comes first
    top = max(panel.rows, key=lambda r: r.p or 0.0)
    others = [dv.views.sampling.sampling_data(trace, i, node=u) for i, r in enumerate(trace)
              for u in [0] + list(r.accepted_path)]
    if any(max(p.rows, key=lambda r: r.p or 0.0).token != p.drawn
           and next(r for r in p.rows if r.token == p.drawn).p >= 0.05
           and next(r for r in p.rows if r.token == p.drawn).q is not None
           and sum(r.q is not None and r.p is not None for r in p.rows) >= 2 for p in others):
        assert top.token != panel.drawn
    assert match_example(sampled("rejection")) is None  # rejection nodes are rejection_example's
    with pytest.raises(ValueError, match="min_p"):
        match_example(trace, min_p=0.0)
