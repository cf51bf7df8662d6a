"""Time the offline explorer page's regrow per slider move in headless Chromium (Debian's, via
playwright): each move sets a random knob setting inside the page ranges, regrows the shown
iteration by the JavaScript rule and redraws the tree (plotly.js, or the SVG the page draws without
it). Prints the median and 95th-percentile milliseconds per move and the page's sizes; a
benchmark record, not a test (docs/bench/)."""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from dynatree_core.records.trace import Trace  # noqa: E402
from dynatree_viz.core.tokens import TokenNamer  # noqa: E402
from dynatree_viz.export.page import explorer_page_html, page_data, script_json  # noqa: E402
from helpers.knob_settings import random_setting  # noqa: E402

MOVE = """cases => cases.map(c => { const t0 = performance.now(); window.dynatreeExplorer.show(c[0]);
  window.dynatreeExplorer.set(c[1]); window.dynatreeExplorer.render(); return performance.now() - t0; })"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("trace", help="a trace JSON (best: a replay recording)")
    ap.add_argument("--moves", type=int, default=300)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    trace = Trace.from_json(a.trace)
    data = script_json(page_data(trace, TokenNamer.from_trace(trace)))
    print(f"{len(trace.iterations)} iterations; page data {len(data.encode()) / 1e6:.2f} MB")
    rng = random.Random(0)
    cases = [(rng.randrange(len(trace.iterations)), random_setting(rng)) for _ in range(a.moves)]
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
        for label, plotly in (("plotly.js", True), ("SVG (no plotly.js)", False)):
            path = Path(tmp) / f"page-{plotly}.html"
            path.write_text(explorer_page_html(trace, plotly_js=plotly), encoding="utf-8")
            page = browser.new_page()
            page.goto(path.as_uri())
            page.wait_for_function("window.dynatreeExplorer !== undefined")
            page.evaluate(MOVE, cases[:20])  # warm up
            ms = sorted(page.evaluate(MOVE, cases))
            print(f"{label}: file {path.stat().st_size / 1e6:.2f} MB; regrow + redraw per move: median "
                  f"{statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * len(ms))]:.1f} ms, max {ms[-1]:.1f} ms "
                  f"over {len(ms)} moves")
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
