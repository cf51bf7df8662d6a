"""Trees coloured by the target's p(token): the third colour choice, picked by ``"auto"`` for
sampled runs only, in the tree figure, the stepper and the replay explorer (no model, no torch)."""

from __future__ import annotations

import pytest
from plotly.colors import sample_colorscale

import dynatree_viz as dv
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_viz.core import style
from dynatree_viz.core.scene import TreeScene
from dynatree_viz.views.tree import COLORBAR, LEGEND_NO_TARGET_P, NO_VALUE_COLOR, NODES, trace_index, tree_figure
from helpers.viz import record, tiny_trace

SAMPLING = SamplingConfig(temperature=0.9, top_p=0.8, seed=3)


def _probs(n: int) -> list[float | None]:
    """A p(token) per node that runs against c(u) and p(u): the deepest nodes get the most."""
    return [None] + [round(0.1 + 0.8 * i / (n - 1), 6) for i in range(1, n)]


def _sampled(rec):
    rec.target_prob_drafted = _probs(len(rec.tree))
    rec.sampling = {"choice_prob": [0.5] * len(rec.tree)}  # the per-node record a sampled run keeps
    return rec


def sampled_trace(n: int = 2):
    trace = tiny_trace(n)
    for rec in trace.iterations:
        _sampled(rec)
    trace.sampling = SAMPLING.to_dict()
    return trace


def _colors(fig) -> list[str]:
    return list(fig.data[trace_index(fig, NODES)].marker.color)


def _caption(fig) -> str:
    return fig.data[trace_index(fig, COLORBAR)].marker.colorbar.title.text


def test_target_p_colours_follow_the_targets_probability_of_each_token():
    rec = _sampled(record())
    probs = rec.target_prob_drafted
    colors = _colors(tree_figure(rec, color_by="target_p"))
    assert colors[0] == NO_VALUE_COLOR  # the root has no p(token): grey, like a missing c(u)
    scale = sample_colorscale(style.COLORSCALE, probs[1:])
    assert colors[1:] == scale  # each node's colour is the scale's colour at its own p
    hi, lo = max(range(1, len(probs)), key=probs.__getitem__), min(range(1, len(probs)), key=probs.__getitem__)
    assert colors[hi] == sample_colorscale(style.COLORSCALE, [probs[hi]])[0] != colors[lo]
    assert colors != _colors(tree_figure(rec, color_by="confidence"))
    assert colors != _colors(tree_figure(rec, color_by="cum_prob"))


def test_a_node_with_a_higher_p_gets_the_colour_of_a_higher_value():
    rec = record()
    rec.target_prob_drafted = [None, 0.9] + [0.2] * (len(rec.tree) - 2)
    colors = _colors(tree_figure(rec, color_by="target_p"))
    assert colors[1] == sample_colorscale(style.COLORSCALE, [0.9])[0]
    assert colors[2] == sample_colorscale(style.COLORSCALE, [0.2])[0] != colors[1]


def test_unknown_target_p_is_grey_and_has_a_legend_entry():
    rec = record()
    rec.target_prob_drafted = []  # a re-grown tree: the target's p was never recorded
    fig = tree_figure(rec, color_by="target_p")
    assert set(_colors(fig)) == {NO_VALUE_COLOR}
    assert LEGEND_NO_TARGET_P in {t.name for t in fig.data}
    assert LEGEND_NO_TARGET_P not in {t.name for t in tree_figure(rec, color_by="confidence").data}


def test_auto_colours_by_target_p_only_for_sampled_records():
    greedy = record()
    greedy.target_prob_drafted = _probs(len(greedy.tree))
    assert greedy.sampling is None
    fig = tree_figure(greedy)
    assert _colors(fig) == _colors(tree_figure(greedy, color_by="confidence"))
    assert _caption(fig) == style.COLOR_BY_CAPTIONS["confidence"] and fig.layout.updatemenus[0].active == 0
    sampled = _sampled(record())
    fig = tree_figure(sampled)
    assert _colors(fig) == _colors(tree_figure(sampled, color_by="target_p"))
    assert "p(token)" in _caption(fig) and "warped" in _caption(fig)
    assert fig.layout.updatemenus[0].active == style.COLOR_BY_CHOICES.index("target_p")


def test_auto_reads_the_sampling_passed_for_a_scene_that_does_not_know_it():
    rec = record()
    rec.target_prob_drafted = _probs(len(rec.tree))
    scene = TreeScene.from_record(rec)
    assert not scene.sampled
    by_p = _colors(tree_figure(scene, color_by="target_p"))
    assert _colors(tree_figure(scene, sampling=SAMPLING.to_dict())) == by_p
    assert _colors(tree_figure(scene, sampling=SAMPLING)) == by_p
    greedy = _colors(tree_figure(scene, sampling={"temperature": 0.0}))  # temperature 0 is greedy
    assert greedy == _colors(tree_figure(scene, color_by="confidence")) != by_p


def test_the_colour_buttons_offer_every_choice_with_its_own_colours():
    rec = _sampled(record())
    fig = tree_figure(rec)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == [style.COLOR_BY_TITLES[k] for k in style.COLOR_BY_CHOICES]
    assert [b.label for b in buttons] == ["c(u)", "p(u)", "p(token)"]
    for key, b in zip(style.COLOR_BY_CHOICES, buttons):
        assert list(b.args[0]["marker.color"][0]) == _colors(tree_figure(rec, color_by=key))


@pytest.mark.parametrize("bad", ["rank", "", "target_prob", "AUTO"])
def test_a_bad_color_by_names_the_allowed_values(bad):
    with pytest.raises(ValueError, match=r"color_by must be 'auto' or one of .*'confidence'.*'cum_prob'.*'target_p'"):
        tree_figure(record(), color_by=bad)


def test_the_stepper_colours_a_sampled_trace_by_target_p_and_names_its_settings():
    trace = sampled_trace(2)
    st = dv.show(trace)
    assert st.color_toggle.value == "target_p"
    assert [v for _, v in st.color_toggle.options] == list(style.COLOR_BY_CHOICES)
    assert list(st.tree_fig.data[trace_index(st.tree_fig, NODES)].marker.color) == _colors(
        tree_figure(trace.iterations[0], color_by="target_p"))
    for text in (st.info.value, st.static_html()):
        assert "temperature 0.9" in text and "top-p 0.8" in text and "seed 3" in text
    assert "replayed" in st.info.value
    st.color_toggle.value = "confidence"  # the toggle still switches
    assert list(st.tree_fig.data[trace_index(st.tree_fig, NODES)].marker.color) == _colors(
        tree_figure(trace.iterations[0], color_by="confidence"))


def test_the_stepper_of_a_greedy_trace_is_unchanged():
    st = dv.show(tiny_trace(2))
    assert st.color_toggle.value == "confidence"
    assert "sampled" not in st.info.value and "temperature" not in st.info.value


def test_the_replay_explorer_has_no_sampling_sliders_and_names_the_recorded_temperature():
    trace = sampled_trace(2)
    ex = dv.explore(trace)
    assert ex.backend.mode == "replay" and ex.sampling_sliders == {} and ex.sampling is None
    assert not any(isinstance(w, dv.widgets.explorer.widgets.HBox) and any(
        getattr(c, "description", "") == "temperature" for c in w.children) for w in ex.children)
    header = ex.children[0].value
    assert "temperature 0.9" in header and "replay shows the recorded temperature" in header
    snapshot = ex.static_html()
    assert "temperature 0.9" in snapshot and "top-p 0.8" in snapshot
    # the replayed tree keeps the recorded p(token), so "auto" colours by it
    assert ex.color_toggle.value == "target_p"
    assert ex.result.scene.target_prob == trace.iterations[0].target_prob_drafted
    assert _colors(ex.tree_fig) == _colors(tree_figure(trace.iterations[0], color_by="target_p",
                                                       show_pruned=True))


def test_the_replay_explorer_of_a_greedy_trace_says_greedy():
    ex = dv.explore(tiny_trace(2))
    assert ex.sampling_sliders == {} and ex.color_toggle.value == "confidence"
    assert "greedy (temperature 0)" in ex.static_html() and "sampling" not in ex.children[0].value
