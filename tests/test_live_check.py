"""scripts/live_notebook_check.py's verdict on a figure after a reload: stuck only where the kernel's state
moved on and the page's figure did not (a model the reloaded page failed to start), never where a slider's
step had nothing to change (03's explorer: τ_h 0.91 and 0.92 grow one tree)."""

from __future__ import annotations

from helpers.scripts import load_script


def _check_module():
    return load_script("live_notebook_check")


def _figs(*sigs: int) -> list[dict]:
    return [{"sig": s, "title": f"figure {k}"} for k, s in enumerate(sigs)]


def test_a_figure_the_kernel_moved_but_the_page_did_not_is_stuck():
    stuck = _check_module()._stuck
    # figure 0 followed the first move (1 -> 2), kept 2 after the second move while the kernel holds 3
    found = stuck(_figs(1, 7), _figs(2, 7), _figs(2, 7), _figs(2, 7), _figs(3, 7))
    assert len(found) == 1 and "figure 0" in found[0]


def test_a_step_that_changes_nothing_is_not_stuck():
    stuck = _check_module()._stuck
    assert stuck(_figs(1), _figs(2), _figs(2), _figs(2), _figs(2)) == []  # the kernel's figure is the page's
    assert stuck(_figs(1), _figs(1), _figs(1), _figs(1), _figs(5)) == []  # it never followed the slider
    assert stuck(_figs(1, 2), _figs(2), _figs(2), _figs(2), _figs(3)) == []  # a figure missing: counted elsewhere
