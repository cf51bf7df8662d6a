"""dynatree_viz: figures, widgets and exports of DynaTree traces (Plotly + ipywidgets).

Rooms: :mod:`~dynatree_viz.views` (one figure function per module), :mod:`~dynatree_viz.widgets`
(stepper, batch stepper, explorer and its setting, regrow, sampling controls, static fallbacks),
:mod:`~dynatree_viz.export` (GIF, slides, report, the offline explorer page), :mod:`~dynatree_viz.examples`
(choosers of the case a figure teaches),
:mod:`~dynatree_viz.core` (style, labels, tokens, layout, scene, HTML and image writing),
:mod:`~dynatree_viz.notebook` (the setup every notebook opens with: it alone loads a pair, lazily) and
:mod:`~dynatree_viz.synthetic` (synthetic traces for tests, a batched run's among them). The names below are what the
notebooks and README use; everything else is imported from its module. ``CostModel`` is the
core's (:mod:`dynatree_core.policy.cost_model`), re-exported for the explorer's ``cost_model=``.
Only torch-free parts of :mod:`dynatree_core` are imported at module level.
"""

from __future__ import annotations

from dynatree_core.policy.cost_model import CostModel

from dynatree_viz import core, examples, export, synthetic, views, widgets
from dynatree_viz.core.images import save_image
from dynatree_viz.examples.branching import EXAMPLE_PROMPTS, branching_example, off_top1
from dynatree_viz.examples.knobs import knob_example, state_tokens
from dynatree_viz.examples.match import match_example
from dynatree_viz.examples.rejection import rejection_counts, rejection_example
from dynatree_viz.export.gif import export_gif
from dynatree_viz.export.page import explorer_page
from dynatree_viz.export.report import report
from dynatree_viz.export.slides import export_slides
from dynatree_viz.notebook import setup_notebook
from dynatree_viz.views.animation import animate, animation_steps
from dynatree_viz.views.batch import batch_figure, batch_summary
from dynatree_viz.views.compare import compare_figure
from dynatree_viz.views.cost import cost_figure
from dynatree_viz.views.mask import mask_figure
from dynatree_viz.views.oracle_gap import oracle_gap_figure
from dynatree_viz.views.policy_table import policy_table
from dynatree_viz.views.race import race, race_data
from dynatree_viz.views.reliability import calibration_figure
from dynatree_viz.views.sampling import sampling_view
from dynatree_viz.views.text import text_html
from dynatree_viz.views.timeline import timeline_figure
from dynatree_viz.views.tree import tree_figure
from dynatree_viz.views.why import why
from dynatree_viz.widgets.batch_stepper import batch_stepper
from dynatree_viz.widgets.explorer import explore
from dynatree_viz.widgets.stepper import show
from dynatree_viz.widgets.static import use_static_fallbacks

__all__ = [
    "tree_figure", "mask_figure", "timeline_figure", "text_html", "compare_figure", "why",
    "sampling_view", "calibration_figure", "cost_figure", "oracle_gap_figure", "policy_table",
    "animate", "animation_steps", "race", "race_data", "batch_figure", "batch_summary",
    "show", "explore", "batch_stepper", "CostModel", "use_static_fallbacks", "setup_notebook",
    "export_gif", "export_slides", "report", "save_image", "explorer_page",
    "EXAMPLE_PROMPTS", "branching_example", "off_top1", "knob_example", "state_tokens",
    "match_example", "rejection_counts", "rejection_example",
]
