"""One figure per benchmark sweep (``dynatree sweep``): the aggregates of a result file against the
swept value (the sweeps themselves are :mod:`dynatree_core.bench.sweeps`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from dynatree_viz.views.compare import compare_figure

# --- figures -------------------------------------------------------------------------------
#: sweep -> (x column, columns naming one line / bar series); x None: grouped bars
_FIG: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "fixed_tree": ("d", ("b", "tau")),
    "length": ("max_new_tokens", ("label",)),
    "prompt_length": ("max_prompt_len", ("label",)),
    "sensitivity": (None, ("label",)),
}


def _series_rows(name: str, aggs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aggregates with a ``series`` column (one line per value; dataset added when several)."""
    x, keys = _FIG[name]
    multi = len({a.get("dataset") for a in aggs}) > 1
    rows = []
    for a in aggs:
        if x is not None and a.get(x) is None:  # AR has no D/B/tau: it is the speedup = 1 line
            continue
        parts = [f"{k}={a.get(k)}" if k != "label" else str(a.get("label")) for k in keys]
        if multi:
            parts.append(str(a.get("dataset")))
        rows.append({**a, "series": ", ".join(parts)})
    return rows


def sweep_figure(name: str, aggs: Sequence[dict[str, Any]]):
    """Speedup, throughput, L̄ and acceptance against the swept value (bars for sensitivity),
    drawn by :func:`~dynatree_viz.views.compare.compare_figure`."""
    x, _ = _FIG[name]
    return compare_figure(_series_rows(name, aggs), x=x, color="series", title=f"DynaTree sweep: {name}")


def write_figure(fig: Any, path: str | os.PathLike, div_id: str) -> Path:
    """Write self-contained HTML atomically (fixed ``div_id``: reproducible output)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.write_html(str(tmp), include_plotlyjs=True, full_html=True, div_id=div_id)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
