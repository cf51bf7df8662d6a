"""The offline explorer page (dynatree_viz.explorer_page) in headless Chromium: its trees equal
Python's strict replay_tree node for node (tokens, parents, stop reasons, depths) with ℓ equal, over
hundreds of random settings on replay recordings of both tiny architectures (greedy, and sampled
under match) and of the default pair; a port with one comparison flipped is caught; it makes no
network request; text it did not write runs nothing, in the page and in the report."""

from __future__ import annotations

from pathlib import Path

import pytest

import dynatree_viz as dv
from dynatree_core import DynaTreeConfig, generate
from dynatree_core.records.trace import Trace
from dynatree_viz.export import page as page_mod
from helpers import cached_pair
from helpers.page_browser import differences, launch, open_page, sync_playwright

PROMPT = [5, 9, 13, 2, 7, 11, 3, 8, 14, 6]  # token ids (the tiny pairs here carry no tokenizer)
DEFAULT_RECORDING = Path(__file__).parent / "data" / "replay_default_64.json"
EVIL = '</script><script>window.__pwned = 1</script>"\' <img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="module")
def recordings() -> dict[str, Trace]:
    """Replay recordings: both tiny architectures greedy, llama sampled under match, the default pair."""
    out = {}
    for arch in ("llama", "gpt_neox"):
        pair = cached_pair(arch, "sdpa", 0.02)
        out[arch] = generate(pair, PROMPT, "dynatree", DynaTreeConfig.paper(), max_new_tokens=24,
                             trace="replay", ignore_eos=True).trace
    out["llama match"] = generate(cached_pair("llama", "sdpa", 0.02), PROMPT, "dynatree", DynaTreeConfig.paper(),
                                  max_new_tokens=24, trace="replay", ignore_eos=True, temperature=0.8, seed=2,
                                  verify="match").trace
    out["default pair"] = Trace.from_json(DEFAULT_RECORDING)  # recorded by the default pair, 64 tokens
    return out


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


def test_the_pages_trees_equal_replay_tree_over_hundreds_of_settings(recordings, browser, tmp_path):
    total = 0
    for k, (name, trace) in enumerate(recordings.items()):
        path = dv.explorer_page(trace, tmp_path / f"page{k}.html")
        page, requests, errors = open_page(browser, path.as_uri())
        n, diffs = differences(page, trace, 140, seed=k)
        assert diffs == 0, f"{name}: {diffs} of {n} settings differ"
        assert requests == [] and errors == [], (requests, errors)  # offline, and no script error
        total += n
        page.close()
    assert total >= 500


def test_a_port_with_one_comparison_flipped_is_caught(recordings, browser, tmp_path, monkeypatch):
    original = page_mod._asset

    def flipped(name: str) -> str:
        text = original(name)
        if name == "explorer_page.js":
            assert "if (p < k.rho_stop) return" in text
            text = text.replace("if (p < k.rho_stop) return", "if (p > k.rho_stop) return")
        return text

    monkeypatch.setattr(page_mod, "_asset", flipped)
    trace = recordings["llama"]
    path = dv.explorer_page(trace, tmp_path / "wrong.html")
    page, _, _ = open_page(browser, path.as_uri())
    n, diffs = differences(page, trace, 60, seed=9)
    assert diffs > n // 4


def test_the_default_pairs_page_data_stays_under_3_mb(recordings):
    data = page_mod.script_json(page_mod.page_data(recordings["default pair"], dv.core.tokens.TokenNamer.from_trace(
        recordings["default pair"])))
    assert len(data.encode()) < 3e6
    assert recordings["default pair"].max_new_tokens == 64


def _evil_trace() -> Trace:
    trace = dv.synthetic.synthetic_trace(3, max_new_tokens=20)
    trace.prompt_text = EVIL
    for rec in trace.iterations:
        rec.token_texts = [EVIL for _ in rec.token_texts]
        rec.committed_texts = [EVIL for _ in rec.committed_texts]
    return trace


def test_text_the_page_did_not_write_renders_as_text_and_runs_nothing(browser, tmp_path):
    path = dv.explorer_page(_evil_trace(), tmp_path / "evil.html", title=EVIL)
    page, requests, errors = open_page(browser, path.as_uri())
    page.click("#dt-next")
    page.evaluate("window.dynatreeExplorer.render()")
    assert page.evaluate("window.__pwned") is None and errors == []
    assert EVIL in page.inner_text("#dt-text") and EVIL in page.title()
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert requests == []  # the evil <img src=x> was never loaded


def test_the_reports_escaping_holds_the_same_text(browser, tmp_path):
    path = tmp_path / "report.html"
    dv.report(_evil_trace(), path, title=EVIL, explorer=True)  # the report, with the page in a frame
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("iframe")
    frame = page.frames[1]  # sandboxed (its own origin): driven from inside
    frame.wait_for_function("window.dynatreeExplorer !== undefined")
    assert page.evaluate("window.__pwned") is None and frame.evaluate("window.__pwned") is None and errors == []
    assert EVIL in page.inner_text("body") and EVIL in frame.inner_text("#dt-text")
    assert page.evaluate("document.querySelectorAll('img[src=x]').length") == 0
    assert frame.evaluate("window.dynatreeExplorer.tree(0).nodes.length") >= 1  # its sliders work there
