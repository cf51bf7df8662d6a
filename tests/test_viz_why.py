"""dynatree_viz.views.why: the draft's top-k at a node's parent against the target's choice."""

from __future__ import annotations

import re

import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_viz.views.why import CALLOUT, TARGET_MARK, why_data
from helpers.viz import FakeTokenizer, record, rule, tiny_trace


def _trace(rec, **cfg):
    """A one-iteration trace of ``rec`` whose config holds the rule's τ / N_max."""
    tr = tiny_trace(1)
    tr.iterations, tr.tokens = [rec], list(rec.committed)
    tr.config = DynaTreeConfig(d0=3, d_max=6, trace_top_k=3, **cfg).to_dict()
    return tr


def _callout(fig):
    return [a for a in fig.layout.annotations if a.name == CALLOUT]


def _bars(fig):
    """{y label: (fate legend name, q, outline width)} over every bar trace."""
    out = {}
    for t in fig.data:
        widths = t.marker.line.width if isinstance(t.marker.line.width, tuple) else [
            t.marker.line.width] * len(t.y)
        for y, x, w in zip(t.y, t.x, widths):
            out[y] = (t.name, x, w)
    return out


def test_rejected_node_shows_the_parents_top_k_and_the_targets_choice():
    tr = _trace(record())
    p = dv.views.why.why_data(tr, 0, node=2)  # " dog": the target chose " cat" at the root
    assert p.at == 0 and p.target_text == " cat" and p.target_fate == "accepted"
    assert [(c.text, c.fate) for c in p.candidates] == [
        (" cat", "accepted"), (" dog", "rejected"), (" a", "beyond_breadth")]
    assert p.branching == 2 and p.callout is None
    assert "Node #2 '␣dog'" in p.notes[0] and "rejected" in p.notes[0]
    fig = dv.why(tr, 0, node=2)
    bars = _bars(fig)
    assert bars["1st '␣cat'"][0] == "drafted, accepted" and bars["1st '␣cat'"][1] == pytest.approx(0.55)
    assert bars["1st '␣cat'"][2] == 3 and bars["2nd '␣dog'"][2] < 3  # the target's bar outlined
    assert bars["3rd '␣a'"][0].startswith("beyond B(u)")
    assert not _callout(fig)
    assert [s.name for s in fig.layout.shapes].count("breadth") == 1


def test_callout_when_the_targets_token_was_pruned_by_tau():
    # tau = 0.2 prunes every child of " dog"; the target takes " dog", then wants " fast"
    rec = record(growth=rule(tau=0.2), target={(1,): 3, (1, 3): 10})
    tr = _trace(rec, tau=0.2)
    p = dv.views.why.why_data(tr, 0)  # node=None: the decision where the accepted path ended
    assert p.at == 2 and p.on_accepted_path
    assert p.target_fate == "pruned_tau"
    assert p.callout and "Pruned by τ" in p.callout and "τ = 0.2" in p.callout
    assert "would have been accepted" in p.callout
    fig = dv.why(tr, 0, at=2)
    (box,) = _callout(fig)
    assert "Pruned by τ" in box.text
    assert [s for s in fig.layout.shapes if s.name == "tau"][0].x0 == pytest.approx(0.2 / p.p_at)
    fates = {c.token: c.fate for c in p.candidates}  # " ran", " sat", " fast"
    assert fates == {5: "pruned_tau", 4: "pruned_tau", 10: "pruned_tau"}


def test_callout_when_the_targets_token_was_pruned_by_n_max():
    # N_max = 3: the root's two children, then " cat"→" sat" takes the last slot; the
    # children of " dog" (which the target picks) lose the budget.
    rec = record(growth=rule(n_max=3), target={(1,): 3})
    tr = _trace(rec, n_max=3)
    p = dv.views.why.why_data(tr, 0, node=None)
    assert p.at == 2 and p.target_text == " ran" and p.target_fate == "pruned_n_max"
    assert "Pruned by N_max" in p.callout and "N_max = 3" in p.callout
    assert "Pruned by N_max" in _callout(dv.why(tr, 0))[0].text
    assert {c.fate for c in p.candidates} == {"pruned_n_max"}


def test_target_token_outside_the_top_k_and_an_unexpanded_decision_point():
    rec = record(target={(1, 2, 4): 8})  # after " sat" the target wants " a": not proposed
    p = dv.views.why.why_data(rec, node=7)
    assert p.at == 3 and p.target_fate == "not_in_top_k" and p.callout is None
    fig = dv.why(rec, node=7)
    assert any(t.name == TARGET_MARK for t in fig.data)
    assert "not in the draft's top-3" in fig.layout.annotations[-1].text
    last = dv.views.why.why_data(record())  # the walk ended at " on", which the depth gate stopped
    assert last.at == 7 and last.target_fate == "not_expanded" and last.candidates == []
    assert "depth_gate" in last.explanation


def test_a_decision_point_the_draft_never_ran_at_is_said_in_words_without_an_empty_chart():
    fig = dv.why(record())  # the walk ended at " on", which the depth gate stopped
    assert len(fig.data) == 0 and not fig.layout.xaxis.visible and not fig.layout.yaxis.visible
    words = fig.layout.title.text + " " + fig.layout.annotations[0].text
    assert "never ran at #7" in words.replace("<br>", " ") and "top-0" not in words
    assert "B(u) = 0" not in words and "depth_gate" in words


def test_why_validates_its_arguments_and_uses_the_tokenizer():
    tr = _trace(record())
    with pytest.raises(ValueError, match="root"):
        dv.why(tr, 0, node=0)
    with pytest.raises(ValueError, match="node must be"):
        dv.why(tr, 0, node=99)
    with pytest.raises(ValueError, match="iteration"):
        dv.why(tr, 5)
    # top-k at " sat" (#3) holds "\n", which no node or committed token carries
    plain = dv.views.why.why_data(tr, 0, at=3)
    assert "⟨9⟩" in [c.text for c in plain.candidates]
    named = dv.views.why.why_data(tr, 0, at=3, tokenizer=FakeTokenizer())
    assert "\n" in [c.text for c in named.candidates]


def test_a_linear_chain_says_its_breadth_is_one_by_construction_not_from_c_u():
    rec = record(growth=rule(b_min=1, b_mid=1, b_max=1), target={(1,): 3})  # wants " dog", rank 2
    chain = dv.why(rec, method="linear")
    words = (chain.layout.title.text + " " + chain.layout.annotations[-1].text).replace("<br>", " ")
    assert "beyond_breadth" == dv.views.why.why_data(rec, method="linear").target_fate
    assert "B = 1 by construction" in words and "a chain, by construction" in words
    assert "c(u)" not in words
    dyn = dv.why(rec)  # a DynaTree tree (or an unknown method): c(u) decided its breadth
    assert "c(u) decided B(u)" in dyn.layout.annotations[-1].text.replace("<br>", " ")
    tr = _trace(rec)
    tr.method = "linear"  # a trace says its own method
    assert "c(u)" not in dv.why(tr, 0).layout.title.text


def test_a_rank_is_an_ordinal_and_hash_names_only_nodes():
    # "after #2 '␣is' … the draft's #2" used "#" for a node and for a rank in one sentence
    from dynatree_viz.views.why import _nth
    assert [f"{k}{_nth(k)}" for k in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
    for v in range(1, len(record().tree)):
        p = why_data(record(), node=v)
        ranks = re.findall(r"#(\d+)", p.explanation)
        assert all(int(r) == p.at for r in ranks), p.explanation  # every "#k" is the decision node


def test_a_legend_swatch_never_wears_the_targets_frame_when_its_fate_has_other_bars():
    # the legend draws a bar trace's first bar: the target's black frame on "beyond B(u): not
    # drafted" made the swatch look like the target's (02's linear why panel)
    seen = 0
    traces = [_trace(record())] + [dv.synthetic.synthetic_trace(6, config=DynaTreeConfig.gpu())]
    for tr in traces:
        for i, rec in enumerate(tr.iterations):
            for v in range(1, len(rec.tree)):
                fig = dv.why(tr, i, node=v)
                for bar in (t for t in fig.data if t.type == "bar" and t.name != TARGET_MARK):
                    widths = list(bar.marker.line.width)
                    if len(widths) > 1 and max(widths) == 3:
                        seen += 1
                        assert widths[0] != 3 and widths[-1] == 3, bar.name
    assert seen  # the case occurs in these traces
