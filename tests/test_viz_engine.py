"""dynatree_viz on real engine output (tiny random models)."""

from __future__ import annotations

import pytest
import torch

import dynatree_viz as dv
from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.pairs.tiny import tiny_pair
from dynatree_viz.views.tree import NODES, trace_index


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return tiny_pair("llama", noise=0.02)


@pytest.fixture(scope="module")
def real_trace(pair):
    return generate(pair, "the cat sat on the mat", method="dynatree", max_new_tokens=12,
                    trace=True, ignore_eos=True).trace


def test_views_render_a_real_trace(real_trace):
    tr = real_trace
    assert len(tr) > 0
    for rec in tr:
        fig = dv.tree_figure(rec, show_pruned=True)
        assert len(fig.data[trace_index(fig, NODES)].x) == len(rec.tree)
        assert len(dv.mask_figure(rec).data[0].z) == len(rec.tree)
    assert dv.text_html(tr).count("data-iter=") == len(tr.tokens)
    html = dv.export.report.report_html(tr)
    assert html == dv.export.report.report_html(tr) and html.count("* plotly.js v") == 1


def test_stepper_and_replay_explorer_on_a_real_trace(real_trace):
    st = dv.show(real_trace)
    if len(real_trace) > 1:
        st.next_button.click()
        assert st.tree_fig.layout.title.text.startswith(f"Iteration {real_trace[1].index}:")
    biggest = max(range(len(real_trace)), key=lambda i: real_trace[i].num_nodes)
    ex = dv.explore(real_trace, iteration=biggest)
    assert ex.error is None
    assert ex.result.tree.tokens == real_trace[biggest].tree.tokens  # replay reproduces it
    ex.sliders["n_max"].value = 1
    assert ex.result.tree.num_drafted == min(1, real_trace[biggest].num_nodes)


def test_live_explorer_regrows_with_the_models(pair):
    ex = dv.explore(pair, "the cat sat on the mat", config=DynaTreeConfig(n_max=8))
    assert ex.error is None and 0 < ex.result.tree.num_drafted <= 8
    ex.sliders["n_max"].value = 2
    assert ex.error is None and ex.result.tree.num_drafted <= 2
    assert ex.result.scene.complete  # live mode knows the target's choice at every node
    assert not any(t.startswith("⟨") for t in ex.result.scene.texts)  # tokenizer names tokens
