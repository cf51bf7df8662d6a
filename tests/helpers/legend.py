"""A figure's legend must not name a trace the reader cannot see.

``unseen_legend_entries(fig)`` lists the legend entries (traces shown in the legend, by name) with no
visible mark: no finite value at all, only zero-height bars, only values a log axis cannot draw (<= 0),
or bars all thinner than ``min_share`` of their axis's span (a sliver). A legend key (a point-less
scatter in a legend group, standing for marks other traces draw) is not a trace of its own. The notebooks' and the views'
tests call it on the figures they draw.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import plotly.graph_objects as go


def _axis(fig: go.Figure, trace: Any, letter: str) -> Any:
    ref = getattr(trace, f"{letter}axis", None) or letter
    return fig.layout[f"{letter}axis{ref[1:]}"]


def _decoded(values: Any) -> list:
    """The values as a list (a stored figure keeps numeric arrays as plotly's base64 typed arrays)."""
    if isinstance(values, dict) and "bdata" in values:  # shape, if any, does not matter here
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).tolist()
    return list(values) if values is not None else []


def _finite(values: Any) -> list[float]:
    out = []
    for v in _decoded(values):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _present(v: Any) -> bool:
    """A coordinate plotly draws: a category (text) or a finite number."""
    if isinstance(v, str):
        return True
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _span(fig: go.Figure, axis_letter: str, trace: Any, values: list[float]) -> tuple[bool, float]:
    """(log axis?, the axis's span in its own units: its range, else that of every trace on it)."""
    axis = _axis(fig, trace, axis_letter)
    log = axis.type == "log"
    if axis.range is not None:
        lo, hi = axis.range
        return log, abs(hi - lo)
    ref = getattr(trace, f"{axis_letter}axis", None) or axis_letter
    pool = [v for t in fig.data if (getattr(t, f"{axis_letter}axis", None) or axis_letter) == ref
            for v in _finite(_values(t)[0] if _values(t)[1] == axis_letter else [])]
    pool = [math.log10(v) for v in pool if v > 0] if log else pool + [0.0]
    return log, (max(pool) - min(pool)) if pool else 0.0


def _values(trace: Any) -> tuple[Any, str]:
    """The trace's values and the axis letter they are measured on (bars: along their orientation)."""
    if isinstance(trace, go.Bar) and trace.orientation == "h":
        return trace.x, "x"
    return trace.y, "y"


def _seen(fig: go.Figure, trace: Any, min_share: float) -> bool:
    values, letter = _values(trace)
    finite = _finite(values)
    if not isinstance(trace, go.Bar):  # markers and lines: any point with both coordinates is a mark
        return any(_present(x) and _present(y) for x, y in zip(_decoded(trace.x), _decoded(trace.y)))
    log, span = _span(fig, letter, trace, finite)
    if log:  # a bar reaches up from the axis's floor: it shows if its value is above the floor
        floor = (_axis(fig, trace, letter).range or [-math.inf])[0]
        return any(v > 0 and math.log10(v) > floor for v in finite)
    heights = [abs(v) for v in finite if v != 0]
    return bool(heights) and (span == 0 or max(heights) >= min_share * span)


def _is_key(trace: Any) -> bool:
    """A legend key: a scatter with no point at all, in a legend group, that says what an encoding
    drawn by other traces means (the tree view adds one only for an encoding in use, a contract
    tests/test_viz_tree.py checks); not a trace that failed to draw."""
    return isinstance(trace, go.Scatter) and bool(trace.legendgroup) and all(
        v is None for v in _decoded(trace.x) + _decoded(trace.y))


def unseen_legend_entries(fig: go.Figure, min_share: float = 0.01) -> list[str]:
    """Names of legend entries with no visible mark (see the module docstring)."""
    if fig.layout.showlegend is False or (fig.layout.showlegend is None and len(fig.data) == 1):
        return []  # no legend drawn (plotly hides it for a single trace unless asked)
    out = []
    for trace in fig.data:
        if _is_key(trace):
            continue
        in_legend = trace.showlegend is not False and (trace.name or "") != ""
        if in_legend and getattr(trace, "visible", True) not in (False, "legendonly") and not _seen(fig, trace, min_share):
            out.append(trace.name)
    return out


def assert_legend_shows_what_it_names(fig: go.Figure, min_share: float = 0.01) -> None:
    unseen = unseen_legend_entries(fig, min_share)
    assert not unseen, f"the legend names traces with no visible mark: {unseen}"
