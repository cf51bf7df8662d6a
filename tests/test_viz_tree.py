"""dynatree_viz tree view and layout: figure data checked against the recorded tree."""

from __future__ import annotations

import math

import pytest

from dynatree_core.policy.config import FixedTreeConfig
from dynatree_viz import tree_figure
from dynatree_viz.core.layout import layered_layout, tree_graph
from dynatree_viz.synthetic import synthetic_trace
from dynatree_viz.core import style
from dynatree_viz.views import tree as tv
from dynatree_viz.views.tree import ACCEPTED_EDGES, BONUS, EDGES, NODES, PRUNED, trace_index
from helpers.viz import VOCAB, FakeTokenizer, edge_of, record, segments as _segments


def _nodes(fig):
    return fig.data[trace_index(fig, NODES)]


def test_layout_is_layered_tidy_and_deterministic():
    parents = [-1, 0, 0, 1, 1, 2, 3]
    pos = layered_layout(tree_graph(parents))
    assert pos == layered_layout(tree_graph(parents))
    assert [pos[i][1] for i in range(len(parents))] == [0, 1, 1, 2, 2, 2, 3]
    leaves = sorted((i for i in range(len(parents)) if i not in parents), key=lambda i: pos[i][0])
    assert [pos[i][0] for i in leaves] == [0.0, 1.0, 2.0]  # consecutive leaf slots
    for i, p in enumerate(parents):  # every inner node is centred over its children
        kids = [j for j, q in enumerate(parents) if q == i]
        if kids:
            assert pos[i][0] == pytest.approx((pos[kids[0]][0] + pos[kids[-1]][0]) / 2)


def test_layout_handles_a_deep_chain_without_recursion():
    parents = [-1] + list(range(2999))
    pos = layered_layout(tree_graph(parents))
    assert pos[2999] == (0.0, 2999)


def test_nodes_and_edges_match_the_tree():
    rec = record()
    fig = tree_figure(rec)
    nodes = _nodes(fig)
    n = len(rec.tree)
    assert len(nodes.x) == n and list(nodes.customdata) == list(range(n))
    assert nodes.mode == "markers"  # the labels are one trace of their own, drawn last
    labels = fig.data[trace_index(fig, tv.LABELS)]
    assert labels.mode == "markers+text" and list(labels.text[:n]) == list(nodes.text)
    xy = {(nodes.x[i], nodes.y[i]): i for i in range(n)}
    assert len(xy) == n  # no two nodes share a position
    assert list(nodes.y) == rec.tree.depths
    bonus = fig.data[trace_index(fig, BONUS)]
    points = dict({i: (nodes.x[i], nodes.y[i]) for i in range(n)}, bonus=(bonus.x[0], bonus.y[0]))
    edges = set()
    for name in (EDGES, ACCEPTED_EDGES):  # each edge starts below its parent, under its labels
        edges |= {edge_of(sg, points) for sg in _segments(fig.data[trace_index(fig, name)])}
    assert edges == {(p, i) for i, p in enumerate(rec.tree.parents) if p >= 0} | {(7, "bonus")}


def test_accepted_path_rejected_nodes_and_bonus_are_styled():
    rec = record()
    fig = tree_figure(rec)
    line = _nodes(fig).marker.line.color
    assert rec.accepted_path == [1, 3, 7]
    for i in rec.accepted_path:
        assert line[i] == style.ACCEPTED
    assert line[2] == style.REJECTED  # " dog": the target chose " cat" at the root
    assert line[4] not in (style.ACCEPTED, style.REJECTED)  # under the rejected node
    acc_edges = _segments(fig.data[trace_index(fig, ACCEPTED_EDGES)])
    assert len(acc_edges) == len(rec.accepted_path) + 1  # + the edge to the bonus star
    bonus = fig.data[trace_index(fig, BONUS)]
    assert bonus.marker.symbol == "star" and bonus.text[0] == "a"
    assert bonus.y[0] == rec.tree.depths[rec.accepted_path[-1]] + 1


def test_hover_text_has_token_depth_probabilities_and_target_choice():
    rec = record()
    hover = _nodes(tree_figure(rec)).hovertext
    assert "␣sat" in hover[3] and "depth 2" in hover[3] and "BFS #3" in hover[3]
    assert "c(u) = 0.900" in hover[3] and "B(u) = 1" in hover[3]
    assert f"p(u) = {math.exp(rec.tree.cum_logps[3]):.4f}" in hover[3]
    assert "rejected: target chose '␣cat'" in hover[2]
    assert "depth_gate" in hover[7]


def test_stop_reasons_set_marker_symbols_and_legend():
    rec = record()
    fig = tree_figure(rec)
    symbols = _nodes(fig).marker.symbol
    assert symbols[7] == style.STOP_SYMBOLS["depth_gate"]
    assert symbols[5] == style.STOP_SYMBOLS["rho_stop"]
    assert symbols[0] == style.STOP_SYMBOLS["expanded"]
    legend = {t.name.split(" (")[0] for t in fig.data}
    assert {"stop: expanded", "stop: rho_stop", "stop: depth_gate"} <= legend
    names = [t.name for t in fig.data if t.name and t.name.startswith("stop: ")]
    assert "stop: expanded (has children)" in names
    assert not any(n.count("expanded") > 1 or "((" in n for n in names)  # the reason said once


#: marker shapes that read as the expanded node's circle at legend size (10 px): seen in 02's 5-node tree,
#: where n_max's octagon and the expanded circle were two identical grey dots in the legend
_ROUND_AT_10PX = {"circle", "octagon", "circle-dot", "octagon-dot"}


def test_each_stop_reason_has_its_own_shape_none_but_expanded_round():
    shapes = {r: s for r, s in style.STOP_SYMBOLS.items() if r != "unrecorded"}  # the explorer's open ring
    assert len(set(shapes.values())) == len(shapes)
    assert [r for r, s in shapes.items() if s in _ROUND_AT_10PX] == ["expanded"]


def _says_reason_once(line: str, reason: str) -> bool:
    """The reason's description once, never wrapped in the reason again ("expanded (expanded (...))")."""
    desc = style.STOP_DESCRIPTIONS.get(reason, reason)
    return line.count(desc) == 1 and f"{reason} ({reason}" not in line


def test_hover_text_says_each_stop_reason_once():
    rec = record()
    fig = tree_figure(rec)
    hover = _nodes(fig).hovertext
    for i, reason in enumerate(rec.tree.stop_reasons):
        lines = [ln for ln in hover[i].split("<br>") if ln.startswith(tv.STOP_PREFIX)]
        assert len(lines) == 1 and _says_reason_once(lines[0], reason), hover[i]
    assert f"{tv.STOP_PREFIX}expanded (has children)" in hover[0]
    legend = {t.name for t in fig.data if t.name and t.name.startswith(tv.STOP_PREFIX)}
    hover_lines = {ln for h in hover for ln in h.split("<br>") if ln.startswith(tv.STOP_PREFIX)}
    assert hover_lines == legend  # the node says what its legend entry says


@pytest.mark.parametrize("reason", sorted(style.STOP_DESCRIPTIONS))
def test_every_stop_reason_is_worded_with_the_reason_once(reason):
    assert _says_reason_once(style.stop_label(reason), reason)


def test_colour_by_confidence_or_cum_prob_and_switch_buttons():
    rec = record()
    by_c = _nodes(tree_figure(rec, color_by="confidence")).marker.color
    by_p = _nodes(tree_figure(rec, color_by="cum_prob")).marker.color
    assert by_c != by_p
    assert by_c[5] == "#f0f0f0"  # a leaf the draft never ran on has no c(u)
    assert all(isinstance(c, str) and c for c in by_p)
    buttons = tree_figure(rec).layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["c(u)", "p(u)", "p(token)"]  # every choice, p(token) too
    assert tuple(buttons[1].args[0]["marker.color"][0]) == tuple(by_p)
    with pytest.raises(ValueError, match="color_by"):
        tree_figure(rec, color_by="rank")


def test_pruned_candidates_appear_as_ghost_nodes_only_on_request():
    rec = record()
    assert len(rec.tree.pruned) == 1
    assert PRUNED not in {t.name for t in tree_figure(rec).data}
    ghosts = tree_figure(rec, show_pruned=True).data
    ghost = next(t for t in ghosts if t.name == PRUNED)
    assert len(ghost.x) == 1 and "pruned by τ (p(u) < τ)" in ghost.hovertext[0]
    assert "p(u) = " in ghost.hovertext[0]  # the value τ is compared with
    assert ghost.y[0] == rec.tree.depths[rec.tree.pruned[0].parent] + 1


def test_256_node_tree_uses_one_text_trace_and_no_annotations():
    rec = synthetic_trace(1, config=FixedTreeConfig(d=5, b=4, tau=0.0, n_max=256))[0]
    assert rec.num_nodes == 256
    fig = tree_figure(rec)
    assert len(_nodes(fig).x) == 257 and len(_nodes(fig).text) == 257
    assert len(fig.layout.annotations) == 0
    assert max(len(t) for t in _nodes(fig).text) <= 6  # labels shortened when dense
    leaves = sum(1 for i in range(len(rec.tree)) if not rec.tree.children(i))
    assert fig.layout.width >= 26 * leaves  # room for every leaf label


def test_highlight_rings_one_node():
    fig = tree_figure(record(), highlight=4)
    assert _nodes(fig).marker.line.color[4] == style.HIGHLIGHT


def _simulate(hex_color: str, matrix) -> list[float]:
    """sRGB (0-255) of ``hex_color`` as seen with a colour-vision deficiency (Machado 2009)."""
    def lin(c):
        c /= 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    def enc(x):
        x = min(max(x, 0.0), 1.0)
        return 255 * (12.92 * x if x <= 0.0031308 else 1.055 * x ** (1 / 2.4) - 0.055)

    rgb = [lin(float(int(hex_color[k:k + 2], 16))) for k in (1, 3, 5)]
    return [enc(sum(m * c for m, c in zip(row, rgb))) for row in matrix]


DEUTERANOPIA = [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                [-0.011820, 0.042940, 0.968881]]
PROTANOPIA = [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
              [-0.003882, -0.048116, 1.051998]]


@pytest.mark.parametrize("matrix", [DEUTERANOPIA, PROTANOPIA], ids=["deuteranopia", "protanopia"])
def test_accepted_and_rejected_colours_stay_apart_for_colour_blind_readers(matrix):
    def dist(a, b):
        return math.dist(_simulate(a, matrix), _simulate(b, matrix))

    assert dist(style.ACCEPTED, style.REJECTED) > 120
    assert dist("#1a9850", "#d73027") < 120 or matrix is PROTANOPIA  # the old green/red did not
    assert {style.ACCEPTED, style.REJECTED, style.BONUS} <= set(style.OKABE_ITO.values())


def test_accepted_and_rejected_nodes_also_differ_in_shape():
    rec = record()
    fig = tree_figure(rec)
    acc = fig.data[trace_index(fig, tv.ACCEPTED_MARKS)]
    rej = fig.data[trace_index(fig, tv.REJECTED_MARKS)]
    nodes = _nodes(fig)
    at = {(nodes.x[i], nodes.y[i]): i for i in range(len(nodes.x))}
    assert [at[xy] for xy in zip(acc.x, acc.y)] == rec.accepted_path
    assert [at[xy] for xy in zip(rej.x, rej.y)] == [2]  # " dog"
    assert acc.marker.symbol != rej.marker.symbol
    assert acc.marker.symbol == style.ACCEPTED_MARK and rej.marker.symbol == style.REJECTED_MARK
    # the marks are bigger than the nodes, so they show around the stop-reason symbol
    assert acc.marker.size > max(nodes.marker.size) and rej.marker.size > max(nodes.marker.size)


def test_labels_are_drawn_after_every_edge_and_mark_with_a_halo():
    fig = tree_figure(record(), show_pruned=True)
    kinds = [(k, t) for k, t in enumerate(fig.data) if t.x and t.x[0] is not None]
    lines = [k for k, t in kinds if "lines" in t.mode or t.name in (tv.ACCEPTED_MARKS,
                                                                     tv.REJECTED_MARKS)]
    labelled = [k for k, t in kinds if "text" in t.mode]
    assert {fig.data[k].name for k in labelled} == {tv.LABELS}
    assert len(fig.data[labelled[0]].text) == len(record().tree) + 2  # + the ghost and the bonus
    assert max(lines) < min(labelled)  # plotly paints in trace order: labels on top
    for k in labelled:
        assert fig.data[k].textfont.shadow == style.LABEL_HALO
        assert all(t for t in fig.data[k].text)  # accepted ',' '.' 'a' alike get a label


def test_every_encoding_in_use_has_a_legend_entry():
    rec = record()
    fig = tree_figure(rec, show_pruned=True, highlight=3)
    shown = {t.name for t in fig.data if t.showlegend is not False}
    assert {tv.LEGEND_ACCEPTED, tv.LEGEND_REJECTED, tv.LEGEND_BONUS, tv.LEGEND_FADED,
            tv.LEGEND_HOLLOW, tv.LEGEND_PRUNED, tv.LEGEND_SELECTED} <= shown
    assert all(k.x == (None,) for k in fig.data if k.name in shown)  # keys carry no data
    assert "c(u)" in fig.data[trace_index(fig, tv.COLORBAR)].marker.colorbar.title.text
    # only encodings that appear: p(u) has no hollow nodes; no pruned/selected unless asked
    plain = {t.name for t in tree_figure(rec, color_by="cum_prob").data}
    assert not {tv.LEGEND_HOLLOW, tv.LEGEND_PRUNED, tv.LEGEND_SELECTED} & plain


def test_a_tokenizer_names_pruned_candidates_the_trace_has_no_text_for():
    rec = record()
    (pruned,) = rec.tree.pruned
    assert pruned.token not in rec.tree.tokens + rec.committed  # no stored text for it
    ghost = lambda fig: fig.data[trace_index(fig, PRUNED)]
    assert ghost(tree_figure(rec, show_pruned=True)).text[0] == f"⟨{pruned.token}⟩"
    named = ghost(tree_figure(rec, show_pruned=True, tokenizer=FakeTokenizer()))
    assert named.text[0] == style.short_label(VOCAB[pruned.token])
    assert "⟨" not in named.hovertext[0]
    # a plain decode(id) callable works too
    assert ghost(tree_figure(rec, show_pruned=True,
                             tokenizer=lambda t: VOCAB[t])).text[0] == named.text[0]


def test_color_buttons_can_be_left_out_for_widgets():
    assert tree_figure(record(), color_buttons=False).layout.updatemenus == ()


def test_a_label_dropped_to_a_lower_row_has_a_leader_to_its_node_and_no_other_does():
    # 02: 'man' beside 'king' one row lower read as either node's label; the leader says whose
    best = max(synthetic_trace(), key=lambda r: len(r.tree))
    fig = tree_figure(best, show_pruned=True)
    labels = next(t for t in fig.data if t.name == tv.LABELS)
    leaders = next(t for t in fig.data if t.name == tv.LEADERS)
    first = min(labels.marker.size)
    lowered = {(x, y) for x, y, size in zip(labels.x, labels.y, labels.marker.size) if size > first + 1}
    assert lowered  # the case happens in this tree
    segments = list(zip(leaders.x[0::3], leaders.y[0::3], leaders.x[1::3], leaders.y[1::3]))
    assert {(x0, math.floor(y0)) for x0, y0, _, _ in segments} == lowered  # one per lowered label, at its node
    assert all(x0 == x1 and y1 > y0 for x0, y0, x1, y1 in segments)  # straight down from under the node
