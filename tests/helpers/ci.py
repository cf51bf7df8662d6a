"""On CI a test that cannot run is a failure, not a skip: a skip for want of a browser (Chromium,
kaleido's Chrome) would let the figure and page checks pass without running. The conftest hook calls
:func:`fail_browser_skip` on every report; tests/test_checks_fail.py shows it turn such a skip red."""

from __future__ import annotations

import os
import re
from typing import Mapping

import pytest

#: what the suite's skips for a missing browser say (tests/browser.py, ``image_export_available``)
BROWSER_SKIP = re.compile(r"chromium|chrome|browser|kaleido", re.IGNORECASE)


def on_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """CI=true (GitHub Actions, GitLab and most others set it)."""
    return environ.get("CI", "").lower() == "true"


def fail_browser_skip(report: pytest.TestReport, environ: Mapping[str, str] = os.environ) -> None:
    """Under CI=true, turn ``report`` into a failure if it is a skip for a missing browser (xfails
    and other skips are left alone)."""
    if not (report.skipped and on_ci(environ)) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if BROWSER_SKIP.search(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true, and this test was skipped for want of a browser ({reason}): install one"
