"""Headless Chromium for tests of static pages (nbconvert HTML, reports, slides) with the network off."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    """The Chromium executable, or skip the calling test (apt-get install chromium)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    return browser


def dump_dom(url: str, profile: Path, budget_ms: int = 15000) -> str:
    """The page's DOM after its scripts ran, loaded with every host name unresolvable (no network)."""
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True).stdout
