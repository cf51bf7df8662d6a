"""Every checker the suite relies on, shown to fail on a planted fault.

A check that has never failed may be unable to: each one here is fed the fault it exists to catch
and must report it, beside the same input without the fault, which must pass (so the failure is the
fault's, not the input's).

* the benchmark's exactness check (``output_checks``, bench/results.py) on a row whose tokens differ
  from AR's, and the CLI on a run with such a row: it writes the evidence, prints a banner and exits
  with ``EXACTNESS_FAILED``;
* ``assert_labels_clear`` (tests/helpers/viz.py) on labels that overlap, a label under a marker and
  one under an edge;
* the sync lint (tests/helpers/sync_lint.py) on each kind of device read it knows, planted in the
  decode loop's code;
* the CI rule (tests/helpers/ci.py): under CI=true a skip for want of a browser is a failure.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import plotly.graph_objects as go
import pytest

import dynatree_core
from dynatree_core.bench import execution
from dynatree_core.bench.results import output_checks
from dynatree_core.cli import main
from dynatree_core.cli.run import EXACTNESS_FAILED
from dynatree_core.policy.config import LinearConfig
from dynatree_core.runtime.host_syncs import HostSyncs

from helpers import cached_pair
from helpers.bench import bench_args, row
from helpers.ci import fail_browser_skip
from helpers.sync_lint import SyncLint
from helpers.viz import assert_labels_clear


# --- the benchmark's exactness check ------------------------------------------------------------------
def _rows(**sampling) -> list[dict]:
    """AR, linear and dynatree on two prompts of two datasets, every row with AR's tokens."""
    return [row(ds, label, i, 10.0, output_sha1=f"{ds}-{i}", **sampling)
            for ds in ("wikitext2", "pg19") for label in ("ar", "linear", "dynatree") for i in range(2)]


def _plant(rows: list[dict], label: str, dataset: str = "pg19", prompt: int = 1) -> list[dict]:
    rows = copy.deepcopy(rows)
    bad = next(r for r in rows if r["label"] == label and r["dataset"] == dataset and r["prompt_index"] == prompt)
    bad["output_sha1"] = "planted"
    return rows


def test_the_exactness_check_fails_on_a_row_whose_tokens_differ_from_ars():
    assert output_checks(_rows()) == {"outputs_identical_across_methods": True, "mismatching_cells": []}
    checks = output_checks(_plant(_rows(), "dynatree"))
    assert checks["outputs_identical_across_methods"] is False
    assert [c for c in checks["mismatching_cells"] if c.startswith("dynatree")], checks
    assert not [c for c in checks["mismatching_cells"] if c.startswith(("ar", "linear"))], checks


def test_the_exactness_check_fails_under_match_for_either_draft_noise_but_not_under_rejection():
    """Seeded AR is the reference of every ``match`` row, shared or independent drafts; ``rejection``
    rows are exact in distribution only, so their tokens are not compared (the chi-square tests are)."""
    sampled = [r | {"draft_noise": noise} for r in _rows(temperature=0.7, verify="match")
               for noise in (("shared", "none") if r["label"] != "ar" else (None,))]
    assert output_checks(sampled)["outputs_identical_across_methods"] is True
    for noise in ("shared", "none"):
        planted = copy.deepcopy(sampled)
        next(r for r in planted if r["label"] == "linear" and r["draft_noise"] == noise)["output_sha1"] = "planted"
        checks = output_checks(planted)
        assert checks["outputs_identical_across_methods"] is False
        assert any(noise in c for c in checks["mismatching_cells"]), (noise, checks)
    rejection = _plant([r | {"verify": "rejection"} if r["label"] != "ar" else r
                        for r in _rows(temperature=0.7)], "linear")
    assert output_checks(rejection)["outputs_identical_across_methods"] is True


def test_a_bench_run_with_a_mismatching_row_says_so_loudly_and_exits_non_zero(data_dir, tmp_path, capsys,
                                                                             monkeypatch):
    """One dynatree row carries tokens other than the decode's (its last token changed): the result file
    is still written (the evidence), with the check False, and the CLI ends on a banner and exits with
    ``EXACTNESS_FAILED``; the same run without the planted row exits 0 with no banner."""
    out = tmp_path / "run.json"
    assert main(bench_args(data_dir, out)) == 0
    assert "EXACTNESS CHECK FAILED" not in capsys.readouterr().err
    real = execution.make_row

    def planted(dataset, point, prompt, metrics, tokens, *rest):
        if point.spec.method == "dynatree" and prompt.index == 1:
            tokens = [*tokens[:-1], tokens[-1] + 1]
        return real(dataset, point, prompt, metrics, tokens, *rest)

    monkeypatch.setattr(execution, "make_row", planted)
    assert main(bench_args(data_dir, out, "--overwrite")) == EXACTNESS_FAILED
    err = capsys.readouterr().err
    assert "EXACTNESS CHECK FAILED" in err and "dynatree" in err.split("EXACTNESS CHECK FAILED")[1]
    d = json.loads(Path(out).read_text())
    assert d["checks"]["outputs_identical_across_methods"] is False


# --- assert_labels_clear --------------------------------------------------------------------------------
def _figure(*traces: go.Scatter) -> go.Figure:
    """A 400 x 300 px figure whose plot area (300 x 200 px) spans [0, 10] x [0, 10]."""
    fig = go.Figure(list(traces))
    fig.update_layout(width=400, height=300, margin=dict(l=40, r=60, t=30, b=70),
                      xaxis=dict(range=[0, 10]), yaxis=dict(range=[0, 10]))
    return fig


def _labels(xs, ys, texts, mode="text") -> go.Scatter:
    return go.Scatter(x=xs, y=ys, text=texts, mode=mode, name="labels", textposition="bottom center",
                      textfont=dict(size=12), marker=dict(size=10, color="black"))


def test_labels_clear_passes_labels_apart_from_markers_and_edges():
    edge = go.Scatter(x=[1, 1], y=[9, 6], mode="lines", name="edge")
    assert len(assert_labels_clear(_figure(edge, _labels([1, 8], [6, 2], ["cat", "dog"], "markers+text")))) == 2


def test_labels_clear_catches_two_labels_that_overlap():
    with pytest.raises(AssertionError, match="'cat' and 'dog' overlap"):
        assert_labels_clear(_figure(_labels([5, 5.2], [5, 5], ["cat", "dog"])))


def test_labels_clear_catches_a_label_under_a_marker():
    disc = go.Scatter(x=[5], y=[4.5], mode="markers", name="disc", marker=dict(size=20, color="red"))
    with pytest.raises(AssertionError, match="'cat' .* under a marker"):
        assert_labels_clear(_figure(disc, _labels([5], [5], ["cat"])))


def test_labels_clear_catches_a_label_under_an_edge():
    edge = go.Scatter(x=[3, 7], y=[4.6, 4.6], mode="lines", name="edge")  # across the label, below its point
    with pytest.raises(AssertionError, match="'cat' .* under an edge"):
        assert_labels_clear(_figure(edge, _labels([5], [5], ["cat"])))


def test_labels_clear_fails_a_figure_without_labels():
    with pytest.raises(AssertionError, match="no labels drawn"):
        assert_labels_clear(_figure(go.Scatter(x=[1, 2], y=[1, 2], mode="lines")))


# --- the sync lint --------------------------------------------------------------------------------------
#: one planted read per kind the lint knows, as a statement on a [3] CPU tensor ``t``, and how it reports it
PLANTED_READS = {
    "item": ("t[0].item()", ".item()"),
    "tolist": ("t.tolist()", ".tolist()"),
    "int": ("int(t[1])", ".__int__()"),
    "float": ("float(t[1])", ".__float__()"),
    "bool": ("bool(t[0] > 0)", ".__bool__()"),
    "bool_mask": ("t[t > 0]", "t[bool mask]"),
    "scalar_write": ("t[torch.tensor([0])] = 1", "t[index] = scalar"),
    "torch_tensor": ("torch.tensor([1, 2], device=t.device)", "torch.tensor(device=...)"),
}


def _planted_fetch(statement: str):
    """HostSyncs.fetch with ``statement`` run first, in code that claims to be the package's own
    (host_syncs.py's file name, a function not named fetch): what a stray read in the loop looks like."""
    source = ("def planted(real, torch):\n"
              "    def fetch_and_read(self, **tensors):\n"
              "        t = torch.arange(3)\n"
              f"        {statement}\n"
              "        return real(self, **tensors)\n"
              "    return fetch_and_read\n")
    namespace: dict = {}
    exec(compile(source, str(Path(dynatree_core.__file__).parent / "runtime" / "host_syncs.py"), "exec"), namespace)
    return namespace["planted"](HostSyncs.fetch, __import__("torch"))


@pytest.mark.parametrize("kind", list(PLANTED_READS))
def test_the_sync_lint_catches_a_planted_read(kind, monkeypatch):
    statement, reported = PLANTED_READS[kind]
    pair = cached_pair("llama", "sdpa", 0.02)
    with monkeypatch.context() as m:  # the same loop without the planted read: nothing to report
        assert SyncLint(m).steady_calls(pair, [5, 9, 14, 3], "linear", LinearConfig(k=3)) == []
    monkeypatch.setattr(HostSyncs, "fetch", _planted_fetch(statement))
    calls = SyncLint(monkeypatch).steady_calls(pair, [5, 9, 14, 3], "linear", LinearConfig(k=3))
    assert any(c.startswith(f"{reported} at host_syncs.py:4 in fetch_and_read") for c in calls), calls


# --- no silent skips on CI ------------------------------------------------------------------------------
def _skip_report(reason: str, **kw) -> pytest.TestReport:
    return pytest.TestReport("t.py::test", ("t.py", 1, "test"), {}, "skipped", ("t.py", 1, f"Skipped: {reason}"),
                             "call", **kw)


@pytest.mark.parametrize("reason", ["no Chromium on this machine (apt-get install chromium)",
                                    "needs kaleido and a Chromium"])
def test_on_ci_a_skip_for_want_of_a_browser_fails(reason):
    report = _skip_report(reason)
    fail_browser_skip(report, {"CI": "true"})
    assert report.failed and "browser" in str(report.longrepr)
    report = _skip_report(reason)
    fail_browser_skip(report, {})  # off CI (a laptop without Chromium) it stays a skip
    assert report.skipped


def test_on_ci_other_skips_and_xfails_stay_what_they_are():
    report = _skip_report("needs a CUDA device (run by scripts/gpu_check.sh)")
    fail_browser_skip(report, {"CI": "true"})
    assert report.skipped
    xfail = _skip_report("browser flake", wasxfail="")
    fail_browser_skip(xfail, {"CI": "true"})
    assert xfail.skipped
