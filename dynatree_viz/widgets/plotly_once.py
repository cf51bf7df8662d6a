"""A plotly ``FigureWidget`` whose front end loads plotly.js once per page, outside anywidget's start-up limit.

plotly's ``FigureWidget`` is an anywidget whose module (``_esm``) is the whole plotly.js bundle (about
5 MB). The anywidget front end (0.11) imports each widget's module from its own Blob URL and gives the
import plus the widget's ``initialize`` 2 s; after that the model is marked failed and every later
message to it is dropped. When a page reloads while the kernel runs, all of a notebook's figures
(01's stepper has four) are rebuilt at once and each imports the 5 MB bundle anew: on a slow machine
(seen on a VM where AR ran at 8.5 tok/s; reproduced with Chromium's CPU throttled 6x by
``scripts/live_notebook_check.py --slow-browser 6``) one or more models fail, and a figure stops
following the controls (the stepper's timeline kept its band on the old iteration).

Here the widget's module is a small shim that starts the bundle's import (the bundle is a synced trait,
``_plotly_esm``), shared by every figure of the page, and returns at once; plotly's own ``initialize``
and ``render`` run when the bundle is loaded, with no time limit. Changes sent meanwhile update the
model's state (``_widget_data``, ``_widget_layout``: :mod:`dynatree_viz.widgets.figure_state` keeps it
equal to the figure), which is what a view draws when it renders.
"""

from __future__ import annotations

import plotly
import plotly.graph_objects as go
import traitlets
from plotly.basewidget import BaseFigureWidget

#: plotly's own widget module (its ``FigureModel``, ``FigureView`` and plotly.js), loaded by the shim
PLOTLY_ESM: str = str(BaseFigureWidget._esm)

#: the module anywidget imports and times: it only starts the shared import of ``_plotly_esm``
SHIM_ESM: str = """
const KEY = "__dynatree_plotly_esm_%(version)s_%(size)d";
function loadPlotly(model) {  // one import per page, whichever figure asks first
  if (!globalThis[KEY]) {
    const url = URL.createObjectURL(new Blob([model.get("_plotly_esm")], {type: "text/javascript"}));
    globalThis[KEY] = import(/* webpackIgnore: true */ url).finally(() => URL.revokeObjectURL(url));
  }
  return globalThis[KEY];
}
export default () => {
  let widget, ready;
  return {
    initialize(props) {  // not awaited: anywidget gives initialize 2 s, the bundle may take longer
      ready = loadPlotly(props.model).then(async (mod) => {
        // anywidget's module contract: the default export is the widget, or a function making it (plotly's)
        widget = typeof mod.default === "function" ? await mod.default() : mod.default;
        await widget.initialize?.(props);
      });
      ready.catch((err) => console.error("[dynatree] plotly's widget module failed to load", err));
    },
    async render(props) {
      await ready;
      return widget.render(props);
    },
  };
};
""" % {"version": plotly.__version__.replace(".", "_"), "size": len(PLOTLY_ESM)}


class FigureWidget(go.FigureWidget):
    """``go.FigureWidget`` with the shim above as its module and plotly's bundle as a trait."""

    _esm = SHIM_ESM
    _plotly_esm = traitlets.Unicode(PLOTLY_ESM).tag(sync=True)
