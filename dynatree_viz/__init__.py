"""dynatree_viz: interactive views of DynaTree traces (Plotly + ipywidgets).

Views (plotly figures): :func:`tree_figure` (one iteration's draft tree), :func:`mask_figure`
(its tree-attention mask), :func:`timeline_figure` (per-iteration statistics),
:func:`text_html` (the output coloured by iteration), :func:`compare_figure` (benchmarks),
:func:`why` (one node: the draft's top-k at its parent against the target's choice).
Teaching animations: :func:`animate` (one iteration step by step: draft level by level, verify,
select, commit; play/pause and a step slider) and :func:`race` (runs of the same prompt as a
race over target forwards or time), exported as offline slides (:func:`export_slides`), one
image per frame (:func:`export_frames`, kaleido) or one GIF (:func:`export_gif`, with Pillow;
also of a stepper); their static image is their whole story (:func:`static_figure`: every step
of an animation side by side, :func:`animation_strip`; a race's finish).
Every view takes ``tokenizer=`` (``.decode(list[int])``) for tokens the trace has no text for.
Worked examples: :func:`branching_example` (the iteration whose accepted path took a draft
candidate that was not the first choice, :func:`off_top1`), :func:`knob_example` (the iteration
where the accepted length moves with the explorer's knobs).
Widgets: :func:`show` (iteration stepper), :func:`explore` (parameter explorer, replay or live).
Export: :func:`report` (offline HTML report), :func:`figure_html`, :func:`save_html`,
:func:`save_image` (PNG/SVG via kaleido, where a browser is available).
Static viewers: :func:`use_static_fallbacks` stores a PNG beside each figure's Plotly JSON, and
the widgets carry an HTML snapshot of their state, so nbconvert HTML, nbviewer and GitHub show
every figure and widget without JavaScript or a kernel.

Only torch-free parts of :mod:`dynatree_core` are imported, so saved traces can be rendered on
a machine without torch; the live explorer imports the engine lazily.
"""

from __future__ import annotations

from dynatree_viz._demo import demo_results, demo_trace
from dynatree_viz.animate import (AnimationStep, animate, animation_steps, animation_strip, export_frames,
                      export_slides, frame_figures, slides_html, static_figure)
from dynatree_viz.compare import compare_figure, load_results
from dynatree_viz.cost import CostModel, expected_accepted
from dynatree_viz.examples import EXAMPLE_PROMPTS, OffTop1, branching_example, off_top1
from dynatree_viz.knob_example import KnobExample, knob_example, knob_sweeps, state_tokens
from dynatree_viz.export import (ImageExportUnavailable, figure_html, image_export_available, save_html,
                     save_image)
from dynatree_viz.gif import export_gif
from dynatree_viz.layout import draft_tree_graph, layered_layout, tree_graph
from dynatree_viz.mask_view import mask_figure, mask_matrix
from dynatree_viz.policies import calibration_figure, cost_figure, oracle_gap_figure, policy_rows, policy_table
from dynatree_viz.regrow import LiveBackend, RegrowResult, ReplayBackend, replay_partial
from dynatree_viz.race import Lane, RaceData, race, race_data
from dynatree_viz.report import report, report_html
from dynatree_viz.scene import TreeScene, greedy_walk
from dynatree_viz.static import StaticFallback, use_static_fallbacks
from dynatree_viz.text_view import text_html
from dynatree_viz.timeline import timeline_figure
from dynatree_viz.tokens import TokenNamer
from dynatree_viz.tree_view import tree_figure
from dynatree_viz.widgets import ParameterExplorer, Stepper, explore, show
from dynatree_viz.sampling_view import SamplingPanel, sampling_data, sampling_view
from dynatree_viz.sampling_examples import RejectionCounts, rejection_counts, rejection_example
from dynatree_viz.why import WhyPanel, why, why_data

__all__ = [
    "AnimationStep", "Lane", "RaceData", "animate", "animation_steps", "animation_strip",
    "export_frames", "export_gif", "export_slides", "frame_figures", "race", "race_data",
    "slides_html", "static_figure",
    "CostModel", "ImageExportUnavailable", "LiveBackend", "ParameterExplorer", "RegrowResult",
    "ReplayBackend", "Stepper", "TokenNamer", "TreeScene", "compare_figure", "demo_results",
    "demo_trace", "draft_tree_graph", "expected_accepted", "explore", "figure_html",
    "greedy_walk", "image_export_available", "layered_layout", "load_results", "mask_figure",
    "mask_matrix", "replay_partial", "report", "report_html", "save_html", "save_image", "show",
    "StaticFallback", "use_static_fallbacks", "text_html", "timeline_figure", "tree_figure", "tree_graph", "why", "why_data", "WhyPanel",
    "calibration_figure", "cost_figure", "oracle_gap_figure", "policy_rows", "policy_table",
    "SamplingPanel", "sampling_data", "sampling_view",
    "RejectionCounts", "rejection_counts", "rejection_example",
    "EXAMPLE_PROMPTS", "OffTop1", "branching_example", "off_top1",
    "KnobExample", "knob_example", "knob_sweeps", "state_tokens",
]
