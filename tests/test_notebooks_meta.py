"""The notebooks' sources are Jupytext percent files (``notebooks/NAME.py``) paired with the executed
``NAME.ipynb`` (nbval checks their outputs). These tests keep each pair in sync and the notebooks
well-formed; they read files only (no kernel, no models)."""

from __future__ import annotations

import base64
import configparser
import json
import re
import struct
from pathlib import Path

import jupytext
import nbformat
import plotly.graph_objects as go
import pytest

import dynatree_viz as dv

from helpers.scripts import load_script

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
IGNORE = "nbval-ignore-output"
DISPLAY_MIME = ("application/vnd.jupyter.widget-view+json", "application/vnd.plotly.v1+json", "text/html")
NAMES = sorted(p.with_suffix(".ipynb").name for p in NB_DIR.glob("0*.py"))


def _read(name):
    return nbformat.read(NB_DIR / name, as_version=4)


def _tags(cell):
    return [t for t in cell.metadata.get("tags", []) if t != "injected-parameters"]


def test_every_source_has_its_executed_notebook_and_nothing_else():
    assert len(NAMES) == 8
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


# --- what a reader without a kernel sees (issue 33) ----------------------------------------------
TEMPLATES = NB_DIR / "templates"
#: machine-specific or alarming text that must never be in a committed output
NOISE = re.compile(r"Warning|Traceback|/root/|/work/|/home/|/tmp/|/Users/|site-packages|[A-Z]:\\\\?[A-Za-z]")
_INLINE_IMAGE = re.compile(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+")
NETWORK_SCRIPT = re.compile(r"<script[^>]+src=[\"']?(https?:)?//|<link[^>]+href=[\"']?(https?:)?//|"
                            r"import\(\s*[\"'](https?:)?//", re.I)


def _texts(out):
    """Every text of an output (stream, error, each non-image mime type), inline images dropped."""
    if out.output_type == "stream":
        yield out.get("text", "")
    elif out.output_type == "error":
        yield "\n".join([out.get("ename", ""), out.get("evalue", "")] + out.get("traceback", []))
    for mime, value in out.get("data", {}).items():
        if not mime.startswith("image/"):
            text = value if isinstance(value, str) else json.dumps(value)
            yield _INLINE_IMAGE.sub("data:image", text)


@pytest.mark.parametrize("name", NAMES)
def test_no_warning_traceback_or_machine_path_in_any_committed_output(name):
    """A reader sees no stderr, no warning, no traceback and no path of the machine that ran it
    (e.g. kaleido's "kopts" UserWarning with a site-packages path), in any cell, tagged or not."""
    for k, cell in enumerate(_read(name).cells):
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr", f"{name} cell {k}: stderr: {out.get('text', '')[:200]!r}"
            for text in _texts(out):
                hit = NOISE.search(text)
                assert not hit, f"{name} cell {k}: {hit.group(0)!r} in {text[max(hit.start() - 80, 0):hit.end() + 80]!r}"


def _offline_html(nb) -> str:
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(TEMPLATES)])
    return exporter.from_notebook_node(nb)[0]


@pytest.mark.parametrize("name", NAMES)
def test_offline_html_loads_no_script_from_the_network(name):
    """The template option `--template offline` (notebooks/templates/offline, used by
    notebooks/html.sh) drops what nbconvert's lab page loads from CDNs: require.js and MathJax
    (and mermaid, the widget manager). The lab page itself does load them."""
    from nbconvert import HTMLExporter

    nb = _read(name)
    lab = HTMLExporter(template_name="lab").from_notebook_node(nb)[0]
    assert re.search(r"require\.js|require\.min\.js", lab) and "mathjax" in lab.lower()
    page = _offline_html(nb)
    hit = NETWORK_SCRIPT.search(page)
    assert not hit, f"{name}: {page[hit.start():hit.start() + 160]!r}"
    assert "mathjax" not in page.lower() and "require.min.js" not in page
    assert page.count('src="data:image/png;base64,') >= len(_outputs(nb, FIGURE_MIME))


# counts, once the page has loaded, the images the browser decoded and drew (appended to a copy)
_PROBE = ("<script>window.addEventListener('load', function () { var n = 0;"
          " document.querySelectorAll('img').forEach(function (i) {"
          " if (i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0) { n++; } });"
          " document.body.setAttribute('data-drawn-images', String(n)); });</script>")


@pytest.mark.parametrize("name", NAMES)
def test_static_html_export_shows_every_figure_offline_in_headless_chromium(name, tmp_path):
    """The offline page, opened by a real browser with the network off: every figure's image and
    every widget's snapshot images are decoded and drawn (runs where a Chromium is installed)."""
    from browser import chromium, dump_dom

    chromium()  # skips where there is none
    nb = _read(name)
    page = tmp_path / f"{name}.html"
    page.write_text(_offline_html(nb).replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = dump_dom(page.as_uri(), tmp_path / "profile")
    figures = len(_outputs(nb, FIGURE_MIME))
    widget_images = sum(o["data"].get("text/html", "").count("data:image/png") for o in _outputs(nb, WIDGET_MIME))
    drawn = re.search(r'data-drawn-images="(\d+)"', dom)
    assert drawn, f"{name}: the page did not finish loading offline"
    assert int(drawn.group(1)) >= figures + widget_images > 0, \
        f"{name}: {drawn.group(1)} images drawn, expected {figures + widget_images}"
    assert "Static snapshot" in dom or not _outputs(nb, WIDGET_MIME)


def _png_size(b64: str) -> tuple[int, int]:
    raw = base64.b64decode(b64[:64])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


def _figures(nb):
    return [(go.Figure(o["data"][FIGURE_MIME]), o["data"].get("image/png")) for o in _outputs(nb, FIGURE_MIME)]


@pytest.mark.parametrize("name", NAMES)
def test_animated_figures_store_their_story_as_their_image(name):
    """An animation's PNG is every step side by side, a race's is its finish: the stored image
    has the size of that story figure, not of the first frame."""
    from dynatree_viz.views.animation import is_animation

    kinds = []
    for fig, png in _figures(_read(name)):
        if not fig.frames:
            continue
        story = dv.views.strip.static_figure(fig)
        kinds.append("animate" if is_animation(fig) else "race")
        assert _png_size(png) == (story.layout.width, story.layout.height), f"{name}: {kinds[-1]}"
        if kinds[-1] == "race":
            finish = [t for t in story.data if t.name.endswith(" finish")]
            assert finish and all(len(t.x) == 1 for t in finish)  # every lane finished, starred
    expected = {"01_quickstart.ipynb": ["race"], "02_speculative_decoding_explained.ipynb": ["animate"]}
    assert kinds == expected.get(name, kinds)


@pytest.mark.parametrize("name", NAMES)
def test_every_widget_snapshot_shows_its_iteration_complete(name):
    for o in _outputs(_read(name), WIDGET_MIME):
        snap = o["data"].get("text/html", "")
        if "<b>iteration " in snap:  # a stepper: tree, mask, why panel and timeline of that iteration
            assert snap.count("data:image/png;base64,") == 4, f"{name}: stepper snapshot incomplete"


@pytest.mark.parametrize("name", NAMES)
def test_committed_tree_labels_sit_under_no_marker_or_edge(name):
    """Every committed tree view and animation frame passes the geometric check of
    tests/test_viz_labels.py on its own coordinates; masks name their accepted rows."""
    from helpers.viz import assert_labels_clear

    from dynatree_viz.views.animation import frame_figures
    from dynatree_viz.views.mask import ACCEPTED_NAMES, MASK_SHAPE
    from dynatree_viz.views.tree import LABELS, NODES

    checked = 0
    for fig, _ in _figures(_read(name)):
        for f in frame_figures(fig) if fig.frames else [fig]:
            names = {t.name for t in f.data}
            if NODES in names:  # a tree picture: its labels hang clear of everything
                assert LABELS in names, f"{name}: a tree figure drawn before the label placement"
                assert_labels_clear(f)
                checked += 1
        if fig.data and fig.data[0].type == "heatmap" and fig.data[0].name == "mask":
            named = sum(a.name == ACCEPTED_NAMES for a in fig.layout.annotations)
            assert named == sum(sh.name == MASK_SHAPE for sh in fig.layout.shapes), f"{name}: mask"
    if name.startswith("02"):
        assert checked >= 4


def test_notebook_02s_worked_example_branches_and_is_explained_from_the_trace():
    """02 picks its DynaTree example from the run: >= 15 drafted nodes and an accepted node that
    was not its parent's top-1; a Markdown cell computed from the trace tells that story."""
    nb = _read("02_speculative_decoding_explained.ipynb")
    streams = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    for claim in ("the example has at least 15 drafted nodes: True",
                  "an accepted node was not its parent's top-1 draft choice: True",
                  "a chain of first choices would have accepted fewer tokens: True"):
        assert claim in streams
    source = "".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "dv.branching_example(" in source and "DynaTreeConfig.gpu()" in source
    stories = [o["data"]["text/markdown"] for o in _outputs(nb, "text/markdown")]
    assert stories and "choice number" in stories[0] and "A chain of first choices would have stopped" in stories[0]
    it = re.search(r"\*\*Iteration (\d+)\.\*\* The draft grew \*\*(\d+) nodes\*\*", stories[0])
    assert it and int(it.group(2)) >= 15
    titles = [f.layout.title.text for f, _ in _figures(nb) if f.layout.title.text]
    assert any(t.startswith(f"DynaTree (gpu preset), iteration {it.group(1)}:") for t in titles)


def _notebook_times():
    return load_script("notebook_times")


def test_readme_run_times_are_the_stored_outputs_within_15_percent():
    """notebooks/README.md's run time per notebook against the one its stored outputs record (cell metadata):
    a re-executed notebook whose time moves by more than 15% must move the README with it."""
    text = (NB_DIR / "README.md").read_text()
    para = text[text.index("Run time of each notebook"):].split("\n\n")[0]
    stated = {k: float(v) for k, v in re.findall(r"\b(0\d): (\d+(?:\.\d+)?) s\b", para)}
    stored = {name[:2]: _notebook_times().stored_run_time(NB_DIR / name) for name in NAMES}
    assert set(stated) == set(stored), f"the README times {sorted(stated)}, the notebooks are {sorted(stored)}"
    drift = {k: (stated[k], round(stored[k], 1)) for k in stored
             if stored[k] is None or abs(stated[k] - stored[k]) > 0.15 * stored[k]}
    assert not drift, f"README run time (stated, stored) off by more than 15%: {drift}"
