"""dynatree_viz widgets driven like a user would: sliders, buttons, clicks."""

from __future__ import annotations

import math

import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.policy.growth import grow_tree
from dynatree_core.policy.replay import replay_tree
from dynatree_core.policy.tree import UNRECORDED
from dynatree_viz.widgets.explorer import DEFAULT_COST, SLIDERS, expected_accepted, trace_cost_model
from dynatree_viz.widgets.regrow import replay_partial
from dynatree_viz.views.tree import NODES, trace_index
from helpers.viz import FakeTokenizer, propose, record, rule, tiny_trace


@pytest.fixture(scope="module")
def trace():
    return dv.synthetic.synthetic_trace(6)


def _node_count(fig) -> int:
    return len(fig.data[trace_index(fig, NODES)].x)


def test_stepper_slider_and_buttons_redraw_every_view(trace):
    st = dv.show(trace)
    assert st.position == 0 and st.tree_fig.layout.title.text.startswith("Iteration 0:")
    before_mask = st.mask_fig.data[0].z
    st.slider.value = 3
    assert st.tree_fig.layout.title.text.startswith("Iteration 3:")
    assert _node_count(st.tree_fig) == len(trace[3].tree)
    assert len(st.mask_fig.data[0].z) == len(trace[3].tree)
    assert len(before_mask) == len(trace[0].tree) != len(trace[3].tree)
    assert st.text.value.count("data-iter=") == sum(len(r.committed) for r in trace.iterations[:4])
    assert "dt-current" in st.text.value
    band = [s for s in st.timeline_fig.layout.shapes if s.name == "current iteration"]
    assert band[0].x0 == 2.5
    st.next_button.click()
    assert st.position == 4 and st.tree_fig.layout.title.text.startswith("Iteration 4:")
    st.prev_button.click()
    st.prev_button.click()
    assert st.position == 2 and "iteration 2" in st.info.value
    st.show(5)  # programmatic jump moves the slider too
    assert st.slider.value == 5 and st.tree_fig.layout.title.text.startswith("Iteration 5:")


def test_stepper_clamps_at_both_ends(trace):
    st = dv.show(trace)
    st.prev_button.click()
    assert st.position == 0
    st.slider.value = len(trace) - 1
    st.next_button.click()
    assert st.position == len(trace) - 1


def test_stepper_colour_toggle_pruned_ghosts_and_linked_highlight(trace):
    st = dv.show(trace)
    nodes = lambda: st.tree_fig.data[trace_index(st.tree_fig, NODES)]
    colours = nodes().marker.color
    st.color_toggle.value = "cum_prob"
    assert nodes().marker.color != colours
    names = {t.name for t in st.tree_fig.data}
    assert trace[0].tree.pruned and "pruned" not in names
    st.pruned_checkbox.value = True
    ghosts = [t for t in st.tree_fig.data if t.name == "pruned"]
    assert len(ghosts) == 1 and len(ghosts[0].x) == len(trace[0].tree.pruned)
    st.select_node(2)
    assert [s for s in st.mask_fig.layout.shapes if s.name == "highlight"][0].y0 == 1.5
    assert nodes().marker.line.color[2] == dv.core.style.HIGHLIGHT
    st.next_button.click()  # a new iteration clears the selection
    assert not [s for s in st.mask_fig.layout.shapes if s.name == "highlight"]


def test_show_reads_a_trace_file(tmp_path):
    path = tmp_path / "t.json"
    tiny_trace(2).to_json(path)
    st = dv.show(str(path))
    assert st.slider.max == 1 and _node_count(st.tree_fig) == len(record().tree)


def test_explorer_replay_reproduces_the_recording_then_follows_n_max(trace):
    rec = trace[2]
    ex = dv.explore(trace, iteration=2)
    assert ex.error is None
    assert ex.result.tree.tokens == rec.tree.tokens  # sliders start at the recorded rule
    assert ex.result.scene.accepted == rec.accepted_path
    assert _node_count(ex.tree_fig) == len(rec.tree)
    ex.sliders["n_max"].value = 1
    assert ex.result.tree.num_drafted == 1 and _node_count(ex.tree_fig) == 2
    assert "nodes (verified)</td><td><b>1</b>" in ex.status.value
    ex.reset()
    assert ex.result.tree.num_drafted == rec.num_nodes


def test_explorer_slider_ranges_follow_the_other_sliders():
    ex = dv.explore(record(), config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3))
    sl = ex.sliders
    assert sl["d0"].max == 5 and sl["d_max"].min == 4  # D0 in [1, D_max - 1]
    sl["d_max"].value = 4
    assert sl["d0"].max == 3 and ex.error is None
    sl["d0"].value = 6  # beyond what D_max allows: the slider clamps it instead of failing
    assert sl["d0"].value == 3 and ex.error is None
    assert sl["tau_l"].max == pytest.approx(sl["tau_h"].value - 0.01)
    sl["tau_l"].value = 0.95  # tau_h is 0.9
    assert sl["tau_l"].value < sl["tau_h"].value and ex.error is None
    sl["tau_h"].value = 0.5  # tau_l is 0.89 now, so tau_h cannot go below 0.9
    assert sl["tau_h"].value == pytest.approx(0.9) and ex.error is None
    sl["tau_l"].value = 0.3
    sl["tau_h"].value = 0.5
    assert sl["tau_l"].max == pytest.approx(0.49) and sl["tau_h"].min == pytest.approx(0.31)
    assert (sl["b_mid"].min, sl["b_mid"].max) == (sl["b_min"].value, sl["b_max"].value)
    assert sl["rho_stop"].max < sl["rho_deep"].value
    ex.reset()  # back to the start, even where the narrowed ranges excluded it
    assert (sl["d0"].value, sl["d_max"].value, sl["tau_h"].value) == (3, 6, 0.9)
    assert sl["d0"].max == 5


@pytest.mark.parametrize("name", list(dv.widgets.explorer.SLIDERS))
def test_every_value_a_slider_offers_is_valid(name):
    """Both ends of every slider's current range pass DynaTreeConfig's validation."""
    ex = dv.explore(record(), config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3))
    s = ex.sliders[name]
    for value in (s.max, s.min):
        s.value = value
        assert s.value == value and ex.error is None, (name, value, ex.error)


def test_explorer_shows_growth_errors_instead_of_crashing():
    def flaky(rule):
        if rule.n_max == 2:
            raise ValueError("no tree for you")
        tree = grow_tree(1, rule, propose)
        return tree, [7] * len(tree)

    ex = dv.explore(flaky, config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3))
    good = ex.result
    ex.sliders["n_max"].value = 2
    assert "no tree for you" in ex.error and ex.result is good  # last valid tree stays


def test_widgets_show_one_colour_switch():
    st = dv.show(tiny_trace(2))
    assert st.tree_fig.layout.updatemenus == ()  # no in-figure c(u)/p(u) buttons
    assert isinstance(st.color_toggle, dv.widgets.explorer.widgets.ToggleButtons)
    ex = dv.explore(tiny_trace(2))
    assert ex.tree_fig.layout.updatemenus == ()
    toggles = [w for w in ex.children[2].children if isinstance(w, dv.widgets.explorer.widgets.ToggleButtons)]
    assert len(toggles) == 1


def test_stepper_explains_the_end_of_the_walk_and_a_clicked_node():
    st = dv.show(tiny_trace(2), tokenizer=FakeTokenizer())
    assert st.why_fig.layout.title.text.startswith("Iteration 0: why?")
    assert "never ran at #7 '␣on'" in st.why_fig.layout.title.text  # where the accepted path ended
    st.select_node(2)  # " dog": explained at its parent, the root
    assert "after #0 '␣the'" in st.why_fig.layout.title.text
    st.select_node(0)
    assert "after #0" in st.why_fig.layout.title.text
    st.next_button.click()
    assert st.why_fig.layout.title.text.startswith("Iteration 1: why?")


def test_explorer_replay_stops_gracefully_where_the_draft_never_ran():
    rec = record()  # " on" (node 7) stopped at the depth gate: never expanded when recorded
    ex = dv.explore(rec, config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3))
    ex.sliders["d0"].value = 5  # now the depth gate lets " on" grow
    assert ex.error is None
    tree = ex.result.tree
    stopped = ex.result.stopped
    assert [tree.tokens[i] for i in stopped] == [6]
    assert tree.stop_reasons[stopped[0]] == UNRECORDED
    assert "never expanded" in ex.status.value


def test_replay_partial_equals_replay_tree_when_everything_was_recorded():
    rec = record()
    smaller = rule(n_max=3)
    exact = replay_tree(rec.tree, smaller)
    tree, stopped = replay_partial(rec.tree, smaller)
    assert stopped == [] and tree.to_dict() == exact.to_dict()


@pytest.mark.parametrize("tau", [0.05, 0.0])
def test_replay_partial_keeps_budget_and_drops_sentinels(tau):
    rec = record()
    wider = rule(d0=5, tau=tau)
    tree, stopped = replay_partial(rec.tree, wider)
    full = grow_tree(1, wider, propose)  # what the draft itself would have grown
    assert stopped and all(full.tokens[:len(tree)][k] == tree.tokens[k] for k in range(len(tree)))
    assert all(p.token >= 0 for p in tree.pruned)
    assert all(tree.confidences[i] is None for i in stopped)


def test_explorer_live_mode_calls_regrow_with_the_rule():
    calls = []

    def regrow(rule):
        calls.append(rule)
        tree = grow_tree(1, rule, propose)
        return tree, [2] + [7] * (len(tree) - 1)

    regrow.decode = lambda t: f"<{t}>"
    ex = dv.explore(regrow, config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3))
    assert len(calls) == 1 and calls[0].n_max == 256
    ex.sliders["n_max"].value = 2
    assert calls[-1].n_max == 2 and ex.result.tree.num_drafted == 2
    assert ex.result.scene.accepted == [1] and ex.result.scene.bonus == 7
    assert "live mode" in ex.children[0].value


def test_explorer_surfaces_live_backend_errors():
    def broken(rule):
        raise RuntimeError("model on fire")

    ex = dv.explore(broken)
    assert ex.result is None and "model on fire" in ex.error


def test_explore_rejects_unknown_sources():
    with pytest.raises(TypeError, match="explore"):
        dv.explore(42)


def test_explorer_prices_trees_with_the_core_cost_model_fitted_to_the_trace(trace):
    cm = trace_cost_model(trace)
    assert dv.CostModel is CostModel and isinstance(cm, CostModel)
    assert cm.draft_s > 0 and cm.verify(2) > cm.verify(1) > 0 and cm.iteration_s > 0  # commit time
    tree = trace[0].tree
    cost = cm.iteration_cost(len(tree), tree.draft_calls)
    assert cost == pytest.approx(cm.draft_s * tree.draft_calls + cm.verify_s[len(tree) - 1] + cm.iteration_s)
    assert expected_accepted(tree) == pytest.approx(sum(math.exp(x) for x in tree.cum_logps[1:]))
    ex = dv.explore(trace, iteration=0)
    assert ex.cost_model == cm and f"expected cost (ms)</td><td><b>{cost * 1e3:.2f}<" in ex.status.value
    assert "fitted to 6 recorded iterations" in ex.status.value


def test_explorer_without_timings_uses_the_default_in_seconds_and_says_so():
    assert trace_cost_model(None) is DEFAULT_COST and DEFAULT_COST.n_max >= SLIDERS["n_max"][2]
    ex = dv.explore(record(), config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3))
    assert ex.cost_model is DEFAULT_COST and "illustrative default" in ex.status.value
    short = CostModel(verify_s=(0.01, 0.02), draft_s=0.001)  # a curve over 1-2 tokens only
    ex = dv.explore(record(), config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3), cost_model=short)
    assert len(ex.result.tree) > 2 and "the curve stops at 2 tokens" in ex.status.value


def test_every_view_names_the_drafter_of_a_trace(tmp_path):
    """A trace says which drafter grew its trees; the stepper, tree titles, explorer and report show it."""
    t = tiny_trace(2)
    t.drafter = {"kind": "feature", "top_k": 3, "layers": 1, "head_ids": 8192, "hidden_size": 576}
    st = dv.show(t)
    assert "drafter: feature" in st.info.value
    assert "(feature drafter)" in st.tree_fig.layout.title.text
    ex = dv.explore(t)
    assert "feature drafter" in ex.children[0].value
    out = tmp_path / "r.html"
    dv.report(t, str(out))
    assert "feature (layers 1, head_ids 8192, hidden_size 576)" in out.read_text()
    # a trace without the field (older files, AR) shows no drafter rather than failing
    t.drafter = None
    assert "drafter" not in dv.show(t).info.value


def _px(width: str) -> float:
    assert width.endswith("px"), width
    return float(width[:-2])


def test_sampling_row_says_no_top_k_for_top_k_zero():
    from dynatree_core.policy.sampling import SamplingConfig
    from dynatree_viz.widgets.sampling import sampling_summary

    off = sampling_summary(SamplingConfig(temperature=0.7, seed=0))
    assert "no top-k" in off and "top-k 0" not in off
    assert "top-k 5" in sampling_summary(SamplingConfig(temperature=0.7, top_k=5, seed=0))


def test_widget_labels_have_room_for_their_text():
    """13 px widget font: "temperature" needs its label box wider than the default 80 px cut it
    at, and "colour: p(token)" a button wider than the 110 px it wrapped in."""
    from dynatree_viz.core.labels import text_width
    from dynatree_viz.widgets.sampling import SamplingControls

    for name, w in SamplingControls().widgets.items():
        assert _px(w.style.description_width) >= text_width(w.description, 13) + 8, name
    for toggle in (dv.show(tiny_trace(2)).color_toggle, dv.explore(tiny_trace(2)).color_toggle):
        room = _px(toggle.style.button_width) - 2 * 12  # the button's side padding
        assert all(text_width(label, 13) <= room for label, _ in toggle.options), toggle.options


def test_stepper_can_open_with_a_node_selected():
    tr = tiny_trace(2)
    st = dv.show(tr, tokenizer=FakeTokenizer(), node=2)  # " dog": the draft ran at its parent
    assert st.selected == 2 and "after #0 '␣the'" in st.why_fig.layout.title.text
    assert len(st.why_fig.data) > 0 and "why node #2" in st.static_html()
    st.next_button.click()  # a move clears it, as a click would
    assert st.selected is None and "why the accepted path ended there" in st.static_html()
    with pytest.raises(ValueError, match="node must be"):
        dv.show(tr, node=99)


def test_explorer_snapshot_names_the_sampling_once_and_the_knobs_by_symbol():
    from dynatree_core.policy.sampling import SamplingConfig

    greedy = dv.explore(tiny_trace(2)).static_html()  # no sampling row: the settings line says it
    assert greedy.count("greedy (temperature 0)") == 1 and "τ_h = " in greedy and "tau_h=" not in greedy
    trace = tiny_trace(2)
    trace.sampling = SamplingConfig(temperature=0.7, seed=1).to_dict()
    for rec in trace.iterations:
        rec.sampling = {"choice_prob": [0.5] * len(rec.tree)}
    snap = dv.explore(trace).static_html()  # the status table's sampling row is the one mention
    assert snap.count("temperature 0.7") == 1, snap.split("<img")[0]


def test_control_rows_wrap_whole_controls_and_checkboxes_take_their_texts_width(trace):
    # live in JupyterLab at 1,600 px, the explorer's row (two checkboxes at ipywidgets' default
    # 300 px, the colour switch, reset) overflowed its 1,168 px output, and the switch wrapped its
    # third button ("colour: p(token)") under the others: a row wraps whole controls instead
    import ipywidgets as widgets

    for w in (dv.explore(trace, iteration=2), dv.show(trace)):
        rows = [c for c in w.children if isinstance(c, widgets.HBox) and w.color_toggle in c.children]
        assert len(rows) == 1 and rows[0].layout.flex_flow == "row wrap"
        boxes = [c for c in rows[0].children if isinstance(c, widgets.Checkbox)]
        assert boxes and all(b.layout.width == "auto" for b in boxes)
