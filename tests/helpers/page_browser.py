"""Playwright on Debian's Chromium for the offline explorer page's tests (no browser download):
the page's trees as the browser regrows them, and Python's strict replay of the same settings."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dynatree_core.policy.replay import committed_path, setting_rule
from dynatree_core.records.trace import Trace

from browser import chromium
from helpers.knob_settings import random_setting

#: the browser regrows a batch of settings in one call (a move per setting, one render at the end)
REGROW_BATCH = """cases => cases.map(c => { window.dynatreeExplorer.set(c[1]);
  try { return window.dynatreeExplorer.tree(c[0]); } catch (e) { return {error: e.message}; } })"""


def launch(pw: Any) -> Any:
    """Chromium with every non-file request refused (the page must need none)."""
    return pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])


def sync_playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright as sp
    except ImportError:  # a skip that names the browser: CI=true turns it into a failure
        pytest.skip("no playwright to drive the Chromium browser (pip install playwright)")
    return sp()


def open_page(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    """The page loaded, with the list of its network requests (file:// excluded) and its errors."""
    page = browser.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def refuse(route: Any) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            requests.append(route.request.url)
            route.abort()

    page.route("**/*", refuse)
    page.goto(url)
    page.wait_for_function("window.dynatreeExplorer !== undefined")
    return page, requests, errors


def python_tree(trace: Trace, i: int, values: dict[str, float]) -> dict[str, Any]:
    """What the page must return for iteration ``i`` at ``values``: strict replay_tree's nodes, ℓ."""
    rec = trace.iterations[i]
    cap = trace.max_new_tokens - sum(len(r.committed) for r in trace.iterations[:i]) - 1
    path, bonus, own = committed_path(rec.tree, setting_rule(values, cap), rec.target_argmax)
    nodes = [dict(token=t, parent=p, stop=s, depth=d)
             for t, p, s, d in zip(own.tokens, own.parents, own.stop_reasons, own.depths)]
    return dict(nodes=nodes, ell=len(path), bonus=bonus)


def differences(page: Any, trace: Trace, n: int, seed: int) -> tuple[int, int]:
    """(settings compared, settings whose page tree or ℓ differ from Python's) over ``n`` random
    settings at random iterations."""
    rng = random.Random(seed)
    cases = [(rng.randrange(len(trace.iterations)), random_setting(rng)) for _ in range(n)]
    got = page.evaluate(REGROW_BATCH, cases)
    diffs = sum(1 for (i, v), g in zip(cases, got) if g != python_tree(trace, i, v))
    return len(cases), diffs
