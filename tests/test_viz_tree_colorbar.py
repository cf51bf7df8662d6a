"""The tree's colour bar is a bar under its caption, not a stub, however shallow the tree (07's
two-level trees drew a 40 px bar under a seven-line caption)."""

from __future__ import annotations

from dynatree_core import generate
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_viz import tree_figure
from dynatree_viz.views.tree import COLORBAR

from helpers import cached_pair

#: px per caption line (plotly's default 12 px font with its line spacing, rounded up)
LINE_PX = 18


def test_a_shallow_trees_colour_bar_keeps_at_least_120_px_under_its_caption():
    res = generate(cached_pair("llama", "sdpa", 0.1), [5, 9, 14, 3, 22, 7], "dynatree",
                   DynaTreeConfig(tau=0.0, n_max=4, d_max=3, d0=1), max_new_tokens=6, ignore_eos=True, trace=True,
                   temperature=0.9, seed=2)
    shallow = res.trace.iterations[0]
    assert shallow.tree.depth == 1  # one level below the root: the plot is about 150 px tall
    fig = tree_figure(shallow)
    bar = next(t for t in fig.data if t.name == COLORBAR).marker.colorbar
    caption = bar.title.text.count("<br>") + 1
    length = bar.len if bar.lenmode == "pixels" else bar.len * (fig.layout.height - fig.layout.margin.t
                                                                  - fig.layout.margin.b)
    assert length - caption * LINE_PX >= 120, (length, caption)
    assert fig.layout.margin.t + length <= fig.layout.height  # it ends inside the figure
