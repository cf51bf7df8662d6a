"""The widgets' FigureWidget loads plotly.js once per page, outside anywidget's start-up limit
(:mod:`dynatree_viz.widgets.plotly_once`; issue 59: 01's stepper came back empty after a page reload
on a slow machine, anywidget having failed the models whose 5 MB module took over 2 s to import).

What it guarantees, asserted here:

* the module anywidget imports and times (``_esm``) is the small shim, and the synced ``_plotly_esm`` is
  plotly's own widget module, unchanged (so the figure a page draws is plotly's);
* in Chromium, with a plotly module that takes longer than anywidget's 2 s to load, every figure's
  ``initialize`` returns at once, the module is evaluated once for all the figures of a page, and each
  figure renders after plotly's ``initialize`` ran for it;
* the installed plotly's module has the shape the shim calls (a default export making the widget, with
  ``initialize`` and ``render``): a plotly upgrade that changes it fails here, not on a reader's page.
"""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
from plotly.basewidget import BaseFigureWidget

from dynatree_viz.widgets import plotly_once
from dynatree_viz.widgets.figure_state import figure_widget
from helpers.page_browser import launch, sync_playwright

#: anywidget 0.11 fails a model whose module import plus ``initialize`` take longer than this
ANYWIDGET_LIMIT_MS = 2000

#: a stand-in for plotly's module: it takes ``DELAY`` ms to evaluate (a 5 MB bundle on a slow machine),
#: counts its evaluations and logs each widget's initialize and render
SLOW_MODULE = """
globalThis.__evaluations = (globalThis.__evaluations || 0) + 1;
await new Promise((resolve) => setTimeout(resolve, %(delay)d));
export default () => ({
  async initialize({model}) { globalThis.__log.push("initialize " + model.id); },
  async render({model, el}) { globalThis.__log.push("render " + model.id); el.textContent = "drawn " + model.id; },
});
"""

#: JS: start ``n`` figures as anywidget does (import the shim from a Blob URL, make the widget, call
#: ``initialize`` under a clock, then ``render``), the page's ``__log`` collecting what ran
START_FIGURES = """async ([shim, bundle, n]) => {
  globalThis.__log = [];
  const url = URL.createObjectURL(new Blob([shim], {type: "text/javascript"}));
  const mod = await import(url);
  const initMs = [], renders = [];
  for (let i = 0; i < n; i++) {
    const model = {id: i, get: (key) => (key === "_plotly_esm" ? bundle : undefined)};
    const widget = mod.default();
    const t0 = performance.now();
    await widget.initialize({model});
    initMs.push(performance.now() - t0);
    const el = document.createElement("div");
    document.body.appendChild(el);
    renders.push(widget.render({model, el}).then(() => el.textContent));
  }
  const drawn = await Promise.all(renders);
  return {initMs, drawn, log: globalThis.__log, evaluations: globalThis.__evaluations};
}"""

#: JS: plotly's real module, imported as the shim imports it: the shape of what its default export makes
PLOTLY_SHAPE = """async (bundle) => {
  const url = URL.createObjectURL(new Blob([bundle], {type: "text/javascript"}));
  const mod = await import(url);
  const widget = typeof mod.default === "function" ? await mod.default() : mod.default;
  return {defaultType: typeof mod.default, initialize: typeof widget.initialize, render: typeof widget.render};
}"""


def test_the_timed_module_is_the_small_shim_and_the_bundle_is_plotlys_own():
    w = figure_widget(go.Figure([go.Scatter(x=[0, 1], y=[1, 0])]))
    assert isinstance(w, go.FigureWidget)
    state = w.get_state()
    assert len(state["_esm"]) < 4000  # what anywidget imports under its clock: a few lines
    assert state["_plotly_esm"] == str(BaseFigureWidget._esm) == plotly_once.PLOTLY_ESM
    assert len(state["_plotly_esm"]) > 1_000_000  # the bundle the shim moved out of the clock
    assert "export default" in state["_esm"] and "_plotly_esm" in state["_esm"]


@pytest.fixture(scope="module")
def page():
    with sync_playwright() as pw:
        browser = launch(pw)
        pg = browser.new_page()
        pg.set_content("<html><body></body></html>")
        yield pg
        browser.close()


def test_a_slow_plotly_module_neither_holds_initialize_nor_loads_twice(page):
    delay_ms, figures = 2500, 4  # a module slower than anywidget's limit; 01's stepper has four figures
    got = page.evaluate(START_FIGURES, [plotly_once.SHIM_ESM, SLOW_MODULE % {"delay": delay_ms}, figures])
    assert max(got["initMs"]) < ANYWIDGET_LIMIT_MS / 4, got["initMs"]  # none waits for the module
    assert got["evaluations"] == 1  # one import for the page's figures, not one per figure
    assert got["drawn"] == [f"drawn {i}" for i in range(figures)]
    for i in range(figures):  # plotly's initialize before its render, for each figure
        assert got["log"].index(f"initialize {i}") < got["log"].index(f"render {i}"), got["log"]


def test_plotlys_module_has_the_shape_the_shim_calls(page):
    got = page.evaluate(PLOTLY_SHAPE, plotly_once.PLOTLY_ESM)
    assert got == {"defaultType": "function", "initialize": "function", "render": "function"}
