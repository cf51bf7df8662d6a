"""The parameter explorer (ipywidgets): move a knob's slider, the tree regrows under the new rule
and redraws with its statistics (:func:`explore`). The iteration stepper is
:mod:`dynatree_viz.widgets.stepper`; what the explorer starts at and prices trees with is
:mod:`dynatree_viz.widgets.explorer_setting`; the offline page with the same sliders is
:mod:`dynatree_viz.export.page`.

A ``ipywidgets.VBox`` subclass that exposes its controls and figure as attributes, so code (and
tests) can drive it: ``explorer.sliders["n_max"].value = 4``. One slider per knob of the knob
table (:mod:`dynatree_core.policy.knobs`). The figure is a plotly ``FigureWidget`` (it needs
anywidget); each redraw replaces its data and layout wholesale and copies the figure into the
widget state (:mod:`dynatree_viz.widgets.figure_state`), so a page reload shows what Python holds.

Sampling: the explorer in live mode (a ``TreeSession`` or a
``regrow(rule, sampling)`` callable) has sampling controls in ``explorer.sampling_sliders``
(``"temperature"`` 0-1.5, 0 = greedy; ``"top_p"`` 0.05-1; ``"seed"``, an IntText): a change
rebuilds the :class:`~dynatree_core.policy.sampling.SamplingConfig` and re-grows with the same seed.
In replay mode ``sampling_sliders`` is empty and the header names the recorded temperature.
"""

from __future__ import annotations

import html
import math
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from dynatree_core.policy.config import DynaTreeConfig, GrowthRule
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.policy.knobs import ORDERED_PAIRS, knob, slider_bounds, slider_knobs  # noqa: F401
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.widgets.figure_state import figure_widget, replace_figure
from dynatree_viz.widgets.regrow import LiveBackend, RegrowResult, ReplayBackend
from dynatree_viz.widgets.sampling import SamplingControls, sampling_summary
from dynatree_viz.core.scene import sampling_active
from dynatree_viz.widgets.static import StaticFallback, figure_snapshot_html
from dynatree_viz.core.tokens import TokenNamer, resolve_namer
from dynatree_viz.views.tree import resolve_color_by, tree_figure


from dynatree_viz.widgets.explorer_setting import (DEFAULT_COST, config_for_record, cost_model_text,  # noqa: F401
                                                   expected_accepted, trace_cost_model)
from dynatree_viz.widgets.stepper import COLOR_TOGGLE_STYLE, Stepper, show  # noqa: F401  (dv.widgets.explorer.show)

#: explorer slider specs: name -> (kind, min, max, step, paper symbol), from the knob table
#: (:data:`dynatree_core.policy.knobs.KNOBS`; the widget itself reads the table when it is built)
SLIDERS: dict[str, tuple[str, float, float, float, str]] = {
    k.name: (k.kind, k.lo, k.hi, k.step, k.symbol) for k in slider_knobs()}


def _set_range(slider: widgets.ValueWidget, lo: float, hi: float) -> None:
    """Set min and max in the order that never makes min > max in between (a TraitError)."""
    if lo > slider.max:
        slider.max = hi
        slider.min = lo
    else:
        slider.min = lo
        slider.max = hi


class ParameterExplorer(StaticFallback, widgets.VBox):
    """Move a slider → re-grow the tree under the new rule → redraw, with its statistics.

    ``backend`` is a :class:`ReplayBackend` (no model; from a recorded iteration) or a
    :class:`LiveBackend` (``regrow(rule[, sampling])`` callable, see :mod:`dynatree_viz.widgets.regrow`).
    Attributes: ``sliders`` (name → widget, names as in :data:`SLIDERS`), ``sampling_sliders``
    (``"temperature"``, ``"top_p"``, ``"seed"``: only for a live backend that samples, else
    empty; see the module docstring), ``dynamic_breadth`` / ``dynamic_depth`` (checkboxes),
    ``reset_button``, ``tree_fig``, ``status`` (HTML); after each redraw ``config``, ``rule``,
    ``sampling`` (the SamplingConfig re-grown with; None in replay) and ``result`` hold the
    latest valid state and ``error`` the latest validation/growth error (None if the last change
    was valid).
    """

    def __init__(self, backend: ReplayBackend | LiveBackend, config: DynaTreeConfig | None = None,
                 *, cost_model: CostModel | None = None, color_by: str = "auto",
                 recorded: IterationRecord | None = None,
                 sampling: SamplingConfig | dict | None = None):
        """Slider ranges follow the other sliders (:func:`slider_bounds`): D0 stays below D_max,
        τ_l below τ_h, ρ_stop below ρ_deep and B_min ≤ B_mid ≤ B_max at every position.
        ``sampling`` sets the starting sampling controls (live mode; default greedy)."""
        self.backend = backend
        self.base_config = config or DynaTreeConfig()
        self.cost_model = cost_model or DEFAULT_COST
        self.recorded = recorded
        self.config: DynaTreeConfig | None = None
        self.rule: GrowthRule | None = None
        self.sampling: SamplingConfig | None = None
        self.result: RegrowResult | None = None
        self.error: str | None = None
        self._suspended = False  # set while reset() moves several sliders at once
        self._build_sliders()
        self._sampling_controls = self._build_sampling(sampling)
        self.sampling_sliders: dict[str, widgets.ValueWidget] = (
            self._sampling_controls.widgets if self._sampling_controls else {})
        # as wide as their text (a checkbox's default is 300 px: with them the colour switch had
        # no room in a 1,168 px output and wrapped its third button under the others)
        self.dynamic_breadth = widgets.Checkbox(value=self.base_config.dynamic_breadth, indent=False,
                                                description="dynamic breadth", layout=widgets.Layout(width="auto"))
        self.dynamic_depth = widgets.Checkbox(value=self.base_config.dynamic_depth, indent=False,
                                              description="dynamic depth", layout=widgets.Layout(width="auto"))
        for cb in (self.dynamic_breadth, self.dynamic_depth):
            cb.observe(self._on_change, names="value")
        # live trees carry no p(token): "auto" colours by it only for a sampled recording
        sampled = recorded is not None and recorded.sampling is not None
        self.color_toggle = widgets.ToggleButtons(
            options=[(f"colour: {style.COLOR_BY_TITLES[k]}", k) for k in style.COLOR_BY_CHOICES],
            value=resolve_color_by(color_by, sampled), style=COLOR_TOGGLE_STYLE)
        self.color_toggle.observe(lambda _: self._draw(), names="value")
        self.reset_button = widgets.Button(description="reset")
        self.reset_button.on_click(lambda _: self.reset())
        self.status = widgets.HTML()
        self.tree_fig = figure_widget()  # filled (and its state synced) by regrow() below
        grid = widgets.GridBox(
            list(self.sliders.values()),
            layout=widgets.Layout(grid_template_columns="repeat(3, 330px)"))
        rows = [widgets.HTML(self._header_html()), grid,
                widgets.HBox([self.dynamic_breadth, self.dynamic_depth, self.color_toggle,
                              self.reset_button], layout=widgets.Layout(flex_flow="row wrap"))]
        if self._sampling_controls is not None:
            rows.append(self._sampling_controls.box)
        super().__init__(rows + [self.status, self.tree_fig])
        self.regrow()

    def _build_sliders(self) -> None:
        """One slider per knob of the table (:func:`~dynatree_core.policy.knobs.slider_knobs`), starting at ``base_config``."""
        self.sliders: dict[str, widgets.ValueWidget] = {}
        #: each slider's widest range (its SLIDERS range, stretched to the starting value)
        self.base_bounds: dict[str, tuple[float, float]] = {}
        for k in slider_knobs():
            name, lo, hi = k.name, k.lo, k.hi
            value = getattr(self.base_config, name)
            cls = widgets.IntSlider if k.kind == "int" else widgets.FloatSlider
            extra = {} if k.kind == "int" else {"readout_format": ".3f"}
            self.base_bounds[name] = (min(lo, value), max(hi, value))
            s = cls(value=value, min=min(lo, value), max=max(hi, value),
                    step=k.step, description=k.symbol, description_allow_html=False,
                    tooltip=k.help, continuous_update=False, **extra)
            s.observe(self._on_change, names="value")
            self.sliders[name] = s
        self._sync_ranges()

    def _build_sampling(self, sampling: SamplingConfig | dict | None) -> SamplingControls | None:
        """Sampling controls for a live backend whose regrow takes a SamplingConfig, else None
        (a replay can only show what was drawn when it was recorded)."""
        if not getattr(self.backend, "takes_sampling", False):
            return None
        start = SamplingConfig.from_dict(sampling) if isinstance(sampling, dict) else sampling
        controls = SamplingControls(start)
        controls.observe(self._on_change)
        return controls

    def _header_html(self) -> str:
        """The title line: mode, drafter and, in replay, the recorded sampling."""
        mode = getattr(self.backend, "mode", "live")
        drafter = getattr(self.backend, "drafter_kind", None)
        out = (f"<b>parameter explorer</b> ({mode} mode"
               + (f", {html.escape(drafter)} drafter" if drafter else "") + ")")
        rec_sampled = self.recorded is not None and self.recorded.sampling is not None
        if mode == "replay" and (rec_sampled or sampling_active(getattr(self.backend, "sampling", None))):
            out += (f"<br>recorded under sampling ({html.escape(self._replayed_sampling())}): replay "
                    "shows the recorded temperature and draws; sampling sliders need live mode")
        return out

    def _replayed_sampling(self) -> str:
        recorded = getattr(self.backend, "sampling", None)
        return sampling_summary(recorded) if sampling_active(recorded) else "settings not recorded"

    # --- state ---------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """Current slider values as DynaTreeConfig keyword arguments."""
        v = {k: s.value for k, s in self.sliders.items()}
        v["dynamic_breadth"] = self.dynamic_breadth.value
        v["dynamic_depth"] = self.dynamic_depth.value
        return v

    def reset(self) -> None:
        """Back to the starting configuration (one redraw, not one per slider)."""
        self._suspended = True
        try:
            # Widen first: the narrowed ranges of the current setting may exclude the start.
            for k, s in self.sliders.items():
                _set_range(s, *self.base_bounds[k])
            for k, s in self.sliders.items():
                s.value = getattr(self.base_config, k)
            self.dynamic_breadth.value = self.base_config.dynamic_breadth
            self.dynamic_depth.value = self.base_config.dynamic_depth
            if self._sampling_controls is not None:
                self._sampling_controls.reset()
            self._sync_ranges()
        finally:
            self._suspended = False
        self.regrow()

    def _sync_ranges(self) -> None:
        """Narrow every slider's range to what the other sliders' values allow."""
        was, self._suspended = self._suspended, True  # a clamped value must not regrow
        try:
            values = {k: s.value for k, s in self.sliders.items()}
            for k, (lo, hi) in slider_bounds(values, self.base_bounds).items():
                _set_range(self.sliders[k], lo, hi)
        finally:
            self._suspended = was

    def _on_change(self, _change: Any = None) -> None:
        if not self._suspended:
            self._sync_ranges()
            self.regrow()

    def regrow(self) -> RegrowResult | None:
        """Validate the sliders, re-grow, redraw. Invalid settings show their error instead."""
        v = self.values()
        try:
            cfg = self.base_config.replace(
                **v, trace_top_k=max(self.base_config.trace_top_k, v["b_max"]))
            rule = cfg.growth_rule()
            sampling = self._sampling_controls.config() if self._sampling_controls else None
        except (ValueError, TypeError) as e:
            return self._fail(f"invalid setting: {e}")
        try:  # a replay backend takes the rule alone
            result = self.backend(rule) if sampling is None else self.backend(rule, sampling)
        except Exception as e:  # a live model failing must not kill the widget
            return self._fail(f"re-growing failed: {type(e).__name__}: {e}")
        self.config, self.rule, self.sampling, self.result, self.error = cfg, rule, sampling, result, None
        self._draw()
        return result

    def sampling_text(self) -> str:
        """The sampling in force: the controls' last valid setting (live) or the recording's."""
        if self._sampling_controls is not None:
            return sampling_summary(self.sampling)
        if self.recorded is not None and self.recorded.sampling is not None:
            return f"recorded: {self._replayed_sampling()}"
        return "greedy (temperature 0)"

    def static_html(self) -> str:
        """The current setting as static HTML (for viewers without a kernel): the slider values,
        the statistics and an image of the tree."""
        values = ", ".join(f"{knob(name).symbol} = {w.value:g}" for name, w in self.sliders.items())
        # the status table has a sampling row where sampling is in play: say it once
        sampling = ("" if self._shows_sampling_row() else
                    f"<br><b>sampling:</b> {html.escape(self.sampling_text())}")
        return (f"<p><b>settings:</b> {html.escape(values)}{sampling}</p>" + self.status.value
                + figure_snapshot_html(go.Figure(self.tree_fig), "re-grown tree"))

    def _shows_sampling_row(self) -> bool:
        """Whether the status table names the sampling (live sampling controls, or a sampled recording)."""
        return self._sampling_controls is not None or bool(self.recorded is not None
                                                           and self.recorded.sampling)

    def _fail(self, message: str) -> None:
        self.error = message
        self.status.value = (f"<div style='color:{style.REJECTED}'><b>⚠ {html.escape(message)}"
                             "</b><br>(the tree below still shows the last valid setting)</div>")
        return None

    def _draw(self) -> None:
        if self.result is None:
            return
        replace_figure(self.tree_fig, tree_figure(self.result.scene, color_by=self.color_toggle.value,
                                                  show_pruned=True, color_buttons=False))
        self.status.value = self._status_html()

    def _status_html(self) -> str:
        res, cm = self.result, self.cost_model
        tree, scene = res.tree, res.scene
        cost = cm.iteration_cost(len(tree), tree.draft_calls)
        e_l = expected_accepted(tree)
        acc = len(scene.accepted)
        acc_txt = f"{'≥ ' if not scene.complete else ''}{acc}"
        past = f"— (the curve stops at {len(cm.verify_s)} tokens)"
        rows = [("nodes (verified)", f"{tree.num_drafted}"), ("depth", f"{tree.depth}"),
                ("draft forwards", f"{tree.draft_calls}"),
                ("accepted ℓ (target)", acc_txt),
                ("committed (ℓ + bonus)", f"{acc_txt} + {1 if scene.bonus is not None else '?'}"),
                ("E[ℓ] = Σ p(u) (draft-calibrated)", f"{e_l:.2f}"),
                ("expected cost (ms)", f"{cost * 1e3:.2f}" if math.isfinite(cost) else past),
                ("expected tokens per s", f"{(e_l + 1) / cost:.1f}" if math.isfinite(cost) else past),
                ("cost model", cost_model_text(cm))]
        if self.recorded is not None:
            rows.append(("recorded: nodes / ℓ", f"{self.recorded.num_nodes} / "
                                                f"{self.recorded.accepted_length}"))
        if self._shows_sampling_row():
            rows.append(("sampling", self.sampling_text()))
        if self.config is not None and not self.config.dynamic_depth:
            rows.append(("note", "dynamic depth off: D_max, ρ_stop, ρ_deep unused (depth = D0)"))
        if self.config is not None and not self.config.dynamic_breadth:
            rows.append(("note", "dynamic breadth off: B_mid everywhere, τ_h / τ_l unused"))
        table = "".join(f"<tr><td style='padding-right:14px'>{html.escape(k)}</td>"
                        f"<td><b>{html.escape(v)}</b></td></tr>" for k, v in rows)
        notes = "".join(f"<div style='color:#8a5a00'>ⓘ {html.escape(n)}</div>" for n in res.notes)
        return f"<table style='font-size:13px'>{table}</table>{notes}"


def explore(source: Any, prompt: Any = None, *, iteration: int = 0,
            config: DynaTreeConfig | None = None, cost_model: CostModel | None = None,
            namer: TokenNamer | None = None, tokenizer: Any = None,
            sampling: SamplingConfig | dict | None = None, **model_kwargs: Any) -> ParameterExplorer:
    """The parameter explorer.

    ``source`` may be:

    * a :class:`Trace` (replay mode on ``trace.iterations[iteration]``; the cost model is
      fitted to the trace's timings, :func:`trace_cost_model`) or a path to a trace JSON file,
    * an :class:`IterationRecord` (replay mode),
    * a ``regrow(rule)`` callable or an object with ``.regrow`` (live mode; protocol in
      :mod:`dynatree_viz.widgets.regrow`),
    * a ``ModelPair`` together with ``prompt`` (live mode): a
      ``dynatree_core.engine.session.TreeSession(pair, prompt, top_k=...)`` is built (imported lazily,
      so this module never needs torch) and re-drafts/verifies the prompt's next tree.

    ``config`` sets the starting sliders (default: the rule the recorded iteration used);
    ``sampling`` (a SamplingConfig or its dict) the starting temperature / top-p / seed in live
    mode, where a ``TreeSession`` or a ``regrow(rule, sampling)`` callable gets sampling sliders
    (a replay shows the recorded sampling instead); ``tokenizer`` (``.decode(list[int])``) names
    tokens a replayed trace has no text for. ``cost_model`` (a
    :class:`~dynatree_core.policy.cost_model.CostModel`: measured by
    :mod:`dynatree_core.engine.calibrate` or :meth:`~CostModel.fit` to recorded timings) prices each
    tree in the status panel; default: fitted to a replayed trace, else :data:`DEFAULT_COST`.
    """
    if isinstance(source, (str, bytes)) and not callable(source):
        source = Trace.from_json(source)
    if isinstance(source, Trace):
        if not source.iterations:
            raise ValueError("the trace has no iterations to explore")
        rec = source.iterations[iteration]
        namer = resolve_namer(source, namer, tokenizer)
        backend = ReplayBackend(rec, namer, drafter_kind=source.drafter_kind, sampling=source.sampling)
        return ParameterExplorer(backend,
                                 config or config_for_record(source, rec),
                                 cost_model=cost_model or trace_cost_model(source), recorded=rec)
    if isinstance(source, IterationRecord):
        namer = resolve_namer(source, namer, tokenizer)
        return ParameterExplorer(ReplayBackend(source, namer), config or config_for_record(None, source),
                                 cost_model=cost_model, recorded=source)
    if namer is None and tokenizer is not None:
        namer = TokenNamer.from_trace(None, tokenizer=tokenizer)
    if prompt is None and (callable(source) or hasattr(source, "regrow")):
        return ParameterExplorer(LiveBackend(source, namer), config, cost_model=cost_model,
                                 sampling=sampling)
    if prompt is not None:
        # Lazy: live mode is the only path that needs torch and the models.
        from dynatree_core.engine.session import TreeSession

        top_k = model_kwargs.pop("top_k", max(8, config.b_max if config is not None else 8))
        session = TreeSession(source, prompt, top_k=top_k, **model_kwargs)
        return ParameterExplorer(LiveBackend(session, namer), config, cost_model=cost_model,
                                 sampling=sampling)
    raise TypeError("explore() needs a Trace, an IterationRecord, a regrow(rule) callable, or a "
                    f"model pair with a prompt; got {type(source).__name__}")
