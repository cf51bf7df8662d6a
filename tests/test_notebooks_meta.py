"""The notebooks' sources are Jupytext percent files (``notebooks/NAME.py``) paired with the executed
``NAME.ipynb`` (nbval checks their outputs). These tests keep each pair in sync and the notebooks
well-formed; they read files only (no kernel, no models)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
IGNORE = "nbval-ignore-output"
DISPLAY_MIME = ("application/vnd.jupyter.widget-view+json", "application/vnd.plotly.v1+json", "text/html")
NAMES = sorted(p.with_suffix(".ipynb").name for p in NB_DIR.glob("0*.py"))


def _read(name):
    return nbformat.read(NB_DIR / name, as_version=4)


def _tags(cell):
    return [t for t in cell.metadata.get("tags", []) if t != "injected-parameters"]


def test_every_source_has_its_executed_notebook_and_nothing_else():
    assert len(NAMES) == 6
    assert sorted(p.name for p in NB_DIR.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_matches_its_jupytext_source(name):
    source = jupytext.read(NB_DIR / name.replace(".ipynb", ".py"))
    committed = [(c.cell_type, c.source, _tags(c)) for c in _read(name).cells]
    fresh = [(c.cell_type, c.source, _tags(c)) for c in source.cells]
    assert committed == fresh, f"{name} differs from its .py source: run `bash notebooks/execute.sh {name}`"
    assert _read(name).metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"


@pytest.mark.parametrize("name", NAMES)
def test_pair_is_a_papermill_parameter(name):
    """`bash notebooks/variant.sh OUT tiny` runs every notebook on the tiny pair through papermill."""
    cells = [c for c in _read(name).cells if c.cell_type == "code"]
    assert "parameters" in cells[0].metadata.get("tags", []) and 'PAIR = "default"' in cells[0].source


@pytest.mark.parametrize("name", NAMES)
def test_opens_with_what_you_will_learn_and_ends_with_what_to_try_next(name):
    cells = _read(name).cells
    assert cells[0].cell_type == "markdown" and "What you will learn" in cells[0].source
    assert cells[-1].cell_type == "markdown" and "What to try next" in cells[-1].source


@pytest.mark.parametrize("name", NAMES)
def test_no_error_outputs_are_committed(name):
    for cell in _read(name).cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{name}: committed error {out.get('ename')}: {out.get('evalue')}"
            assert out.get("name") != "stderr" or IGNORE in _tags(cell), f"{name}: stderr in a checked cell"


@pytest.mark.parametrize("name", NAMES)
def test_figures_and_widgets_are_not_compared_by_nbval(name):
    for cell in _read(name).cells:
        if cell.cell_type != "code" or "RUN_PAPER" in cell.source:  # off by default: prints one line
            continue
        displays = any(m in out.get("data", {}) for out in cell.get("outputs", []) for m in DISPLAY_MIME)
        calls = re.search(r"\bdv\.(show|explore|tree_figure|mask_figure|timeline_figure|compare_figure|text_html)\(|"
                          r"^fig$|\bdisplay\(", cell.source, re.M)
        if displays or calls:
            assert IGNORE in _tags(cell), f"{name}: display cell not tagged {IGNORE}:\n{cell.source}"


@pytest.mark.parametrize("name", NAMES)
def test_checked_cells_print_no_wall_clock_numbers_and_no_failed_check(name):
    for cell in _read(name).cells:
        if cell.cell_type != "code" or IGNORE in _tags(cell):
            continue
        assert not re.search(r"tokens_per_s|wall_time|ttft|tpot|time\.", cell.source), cell.source
        text = "".join(out.get("text", "") for out in cell.get("outputs", []) if out.output_type == "stream")
        assert "False" not in text, f"{name}: a check printed False:\n{text}"


@pytest.mark.parametrize("name", NAMES)
def test_no_hard_coded_paths_or_devices(name):
    for cell in _read(name).cells:
        if cell.cell_type != "code" or "RUN_PAPER" in cell.source:  # the paper's GPU settings are the point there
            continue
        assert not re.search(r"/(work|home|tmp|root|Users)/|[A-Z]:\\\\", cell.source), cell.source
        assert not re.search(r"""device\s*=\s*["'](cuda|cpu)(:\d+)?["'](?!\s*if\b)""", cell.source), cell.source


def test_sanitize_cfg_has_valid_regexes():
    cfg = configparser.ConfigParser()
    cfg.read(NB_DIR / "sanitize.cfg")
    assert cfg.sections()
    for section in cfg.sections():
        re.compile(cfg[section]["regex"])
        assert "replace" in cfg[section]


# --- static viewers: every figure and widget shows without JavaScript or a kernel ----------------
FIGURE_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _outputs(nb, mime):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if mime in o.get("data", {})]


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_and_widget_has_a_static_fallback(name):
    """Static viewers (nbconvert, nbviewer, GitHub) cannot draw Plotly JSON or a widget without state:
    each figure must carry a PNG beside its JSON and each widget an HTML snapshot."""
    nb = _read(name)
    figures, widgets = _outputs(nb, FIGURE_MIME), _outputs(nb, WIDGET_MIME)
    missing = [i for i, o in enumerate(figures) if "image/png" not in o["data"]]
    assert not missing, f"{name}: figures {missing} (of {len(figures)}) have no PNG fallback"
    for o in widgets:
        snap = o["data"].get("text/html", "")
        assert "Static snapshot" in snap, f"{name}: a widget output has no static snapshot"
        assert "no static image" not in snap, f"{name}: a widget snapshot was made without images"


@pytest.mark.parametrize("name", NAMES)
def test_static_html_export_shows_every_figure_offline_in_headless_chromium(name, tmp_path):
    """The exported page, opened by a real browser with the network off: every figure's image and
    every widget's snapshot image is in the rendered DOM (runs where a Chromium is installed)."""
    from browser import chromium, dump_dom

    chromium()  # skips where there is none
    from nbconvert import HTMLExporter

    nb = _read(name)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    page = tmp_path / f"{name}.html"
    page.write_text(body, encoding="utf-8")
    dom = dump_dom(page.as_uri(), tmp_path / "profile")
    figures = len(_outputs(nb, FIGURE_MIME))
    widget_images = sum(o["data"].get("text/html", "").count("data:image/png") for o in _outputs(nb, WIDGET_MIME))
    shown = len(re.findall(r'<img[^>]+src="data:image/png;base64,', dom))
    assert shown >= figures + widget_images, f"{name}: {shown} images in the page, expected {figures + widget_images}"
    assert "Static snapshot" in dom or not _outputs(nb, WIDGET_MIME)
