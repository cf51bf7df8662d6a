"""Every figure a notebook stores names in its legend only traces it draws (helpers/legend.py): read
from the executed .ipynb (the Plotly JSON each figure output carries), no kernel needed. Every
notebook is checked (01's and 03's figures carry no legend, and pass as they are)."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
import pytest

from helpers.legend import unseen_legend_entries

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CHECKED = sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb"))


def stored_figures(name: str) -> list[tuple[int, go.Figure]]:
    """(cell index, figure) for every Plotly output of the executed notebook ``name``."""
    cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
    return [(i, go.Figure(out["data"]["application/vnd.plotly.v1+json"]))
            for i, cell in enumerate(cells) for out in cell.get("outputs", [])
            if "application/vnd.plotly.v1+json" in out.get("data", {})]


def test_every_notebook_is_checked():
    assert len(CHECKED) == len(list(NOTEBOOKS.glob("0*.py"))) >= 7


@pytest.mark.parametrize("name", CHECKED)
def test_no_legend_entry_names_a_trace_the_figure_does_not_draw(name):
    figures = stored_figures(name)
    assert figures, f"{name} stores no figures: execute it (notebooks/execute.sh)"
    unseen = {i: names for i, fig in figures if (names := unseen_legend_entries(fig))}
    assert not unseen, f"{name}: legend entries with no visible mark, by cell: {unseen}"
