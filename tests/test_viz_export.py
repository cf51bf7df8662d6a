"""dynatree_viz export: deterministic HTML, the offline report, images, torch-free import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import dynatree_viz as dv
from helpers.viz import record, tiny_trace

ROOT = Path(__file__).resolve().parents[1]


def test_figure_html_is_byte_stable():
    a = dv.core.images.figure_html(dv.tree_figure(record(), show_pruned=True), "tree-0")
    b = dv.core.images.figure_html(dv.tree_figure(record(), show_pruned=True), "tree-0")
    assert a == b and 'id="tree-0"' in a
    inlined = dv.core.images.figure_html(dv.mask_figure(record()), "m", include_plotlyjs=True)
    assert "* plotly.js v" in inlined and not re.search(r"<script[^>]+src=", inlined)


def test_report_is_deterministic_and_self_contained(tmp_path):
    tr = dv.synthetic.synthetic_trace(3)
    p1, p2 = tmp_path / "a.html", tmp_path / "b.html"
    dv.report(tr, p1, results=dv.synthetic.synthetic_results())
    dv.report(tr, p2, results=dv.synthetic.synthetic_results())
    text = p1.read_text(encoding="utf-8")
    assert p1.read_bytes() == p2.read_bytes()
    assert not re.search(r"<script[^>]+src=[\"']?https?:", text)  # offline: nothing fetched
    assert text.count("* plotly.js v") == 1  # plotly.js inlined exactly once
    for r in tr:
        assert f'id="dt-tree-{r.index}"' in text and f'id="dt-mask-{r.index}"' in text
    assert 'id="dt-timeline"' in text and 'id="dt-compare"' in text
    assert text.count("data-iter=") == len(tr.tokens)


def test_report_from_a_json_file_and_subset_of_iterations(tmp_path):
    path = tmp_path / "t.json"
    tiny_trace(3).to_json(path)
    html = dv.report(str(path), iterations=[1], masks=False)
    assert 'id="dt-tree-1"' in html and 'id="dt-tree-0"' not in html and "dt-mask" not in html


def test_static_image_export_or_a_clear_reason(tmp_path):
    ok, reason = dv.core.images.image_export_available()
    if not ok:
        # Where kaleido or a browser is missing, export fails cleanly with the reason (and
        # writes nothing) instead of hanging or leaving a half-written file.
        with pytest.raises(dv.core.images.ImageExportUnavailable, match="Chrome|kaleido"):
            dv.save_image(dv.tree_figure(record()), tmp_path / "t.png")
        assert not (tmp_path / "t.png").exists()
        return
    out = dv.save_image(dv.tree_figure(record()), tmp_path / "t.svg")
    assert out.read_text(encoding="utf-8").lstrip().startswith(("<svg", "<?xml"))


def test_import_works_with_torch_blocked():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import dynatree_viz as dv\n"
            "tr = dv.synthetic.synthetic_trace(2)\n"
            "html = dv.export.report.report_html(tr)\n"
            "st = dv.show(tr); st.next_button.click()\n"
            "ex = dv.explore(tr); ex.sliders['n_max'].value = 1\n"
            "assert ex.result.tree.num_drafted == 1 and st.position == 1\n"
            "assert not any(m.startswith(('dynatree_core.engine.loop', 'dynatree_core.pairs.pair'))"
            " for m in sys.modules)\n"
            "print('ok', len(html) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok True"


def _div_style(text: str, div_id: str) -> str:
    m = re.search(rf'<div id="{div_id}" class="plotly-graph-div" style="([^"]*)"', text)
    assert m, div_id
    return m.group(1)


def test_report_keeps_tree_and_mask_side_by_side_and_fluid():
    tr = dv.synthetic.synthetic_trace(3)
    text = dv.export.report.report_html(tr)
    css = re.search(r"<style>(.*?)</style>", text, re.S).group(1)
    row = re.search(r"\.dt-row \{([^}]*)\}", css).group(1)
    assert "grid-template-columns: minmax(0, 3fr) minmax(0, 2fr)" in row and "wrap" not in row
    stack = re.search(r"@media \(max-width: (\d+)px\)", css)
    assert stack and int(stack.group(1)) <= 900  # stacks only on phone-sized windows
    for r in tr:  # the figures fill their grid cell instead of a fixed pixel width
        for kind in ("tree", "mask"):
            style = _div_style(text, f"dt-{kind}-{r.index}")
            assert "width:100%" in style.replace(" ", ""), style
    assert "width:100%" in _div_style(text, "dt-timeline").replace(" ", "")


def test_report_has_a_navigation_and_every_link_has_a_target():
    tr = dv.synthetic.synthetic_trace(4)
    text = dv.export.report.report_html(tr, results=dv.synthetic.synthetic_results())
    nav = re.search(r"<nav class='dt-nav'>(.*?)</nav>", text, re.S).group(1)
    for anchor in ("run", "output", "timeline", "compare", "iterations"):
        assert f"href='#{anchor}'" in nav
    links = set(re.findall(r"href='#([^']+)'", text))
    ids = set(re.findall(r"id='([^']+)'", text)) | set(re.findall(r'id="([^"]+)"', text))
    assert links <= ids, links - ids
    for r in tr:  # an index entry and prev/next links for every iteration
        assert f"href='#iteration-{r.index}'" in text and f"id='iteration-{r.index}'" in text
    assert "href='#iteration-1'>1 ▶" in text and "href='#iteration-2'>◀ 2" in text


def test_report_takes_a_tokenizer_for_pruned_candidates():
    from helpers.viz import FakeTokenizer

    tr = tiny_trace(1)
    unnamed = ("⟨9⟩", "\\u27e89\\u27e9")  # plotly's JSON escapes non-ASCII text
    assert any(u in dv.export.report.report_html(tr) for u in unnamed)  # the pruned "\n": no stored text
    named = dv.export.report.report_html(tr, tokenizer=FakeTokenizer(), why=True)
    assert not any(u in named for u in unnamed) and 'id="dt-why-0"' in named


def test_report_renders_offline_in_headless_chromium(tmp_path):
    """The standalone report, opened by a real browser with the network off: plotly.js is inlined,
    so every figure of the page is drawn (where a Chromium is installed)."""
    from browser import dump_dom

    trace = dv.synthetic.synthetic_trace(3)
    path = tmp_path / "report.html"
    dv.report(trace, str(path))
    html_text = path.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=\"https?://", html_text)
    figures = len(re.findall(r'class="plotly-graph-div"', html_text))
    dom = dump_dom(path.as_uri(), tmp_path / "profile")
    assert figures >= 2 * len(trace.iterations)  # tree and mask per iteration at least
    assert dom.count('class="main-svg"') >= figures  # plotly drew each one
