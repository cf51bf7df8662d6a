"""What a notebook's prose claims is what its figures plot: each test recomputes a claim from the data a
stored figure draws (the Plotly JSON in the executed .ipynb) and compares it with the numbers the prose
states. No kernel, no models: the committed outputs are read as a reader sees them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"


def _cells(name: str) -> list[dict]:
    return json.loads((NOTEBOOKS / name).read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _text(out: dict) -> str:
    raw = out.get("text") or out.get("data", {}).get("text/markdown") or ""
    return "".join(raw) if isinstance(raw, list) else raw


def _figures(cells: list[dict], where: str) -> list[go.Figure]:
    """The figures stored by the code cells whose source contains ``where``."""
    return [go.Figure(o["data"][PLOTLY]) for c in cells if c["cell_type"] == "code" and where in _source(c)
            for o in c.get("outputs", []) if PLOTLY in o.get("data", {})]


def _outputs_of(cells: list[dict], where: str) -> str:
    return "\n".join(_text(o) for c in cells if c["cell_type"] == "code" and where in _source(c)
                     for o in c.get("outputs", []))


def _expand(ranges: str) -> list[int]:
    """'7-8, 10, 12' -> [7, 8, 10, 12]."""
    out: list[int] = []
    for part in ranges.split(","):
        lo, _, hi = part.strip().partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _undercut(xs: list[int], ys: list[float]) -> list[int]:
    """Every n with some m > n on the curve where c(m) < c(n): all pairs compared."""
    return [n for i, n in enumerate(xs) if any(ys[j] < ys[i] for j in range(i + 1, len(xs)))]


def _cost_curve(cells: list[dict], which: str) -> tuple[list[int], list[float]]:
    fig = _figures(cells, "dv.cost_figure(cost)")[0]
    trace = next(t for t in fig.data if t.name == f"c(n), {which}")
    return [int(x) for x in trace.x], [float(y) for y in trace.y]


def test_06_says_where_its_measured_cost_curve_dips_as_the_figure_draws_it():
    """06's sentence about the pair's own kernel names exactly the measured sizes that cost more than a
    larger measured size, recomputed over all pairs n < m of the figure's measured points."""
    cells = _cells("06_tree_policies.ipynb")
    kernel = re.search(r"linear kernel: (\w+)", _outputs_of(cells, "setup_notebook(PAIR")).group(1)
    xs, ys = _cost_curve(cells, "measured")
    claim = _outputs_of(cells, "curve_facts(kernel, cost)")
    said = re.search(rf"\*\*{kernel}\*\*:[^*]*", claim).group(0)
    stated = _expand(m.group(1)) if (m := re.search(r"\(n = ([\d, -]+)\)", said)) else []
    assert stated == _undercut(xs, ys), f"06 says {said!r}; the figure's measured c(n) dips at {_undercut(xs, ys)}"


def test_06_counts_the_sizes_that_cost_more_than_a_larger_tree_over_the_whole_curve():
    cells = _cells("06_tree_policies.ipynb")
    xs, ys = _cost_curve(cells, "interpolated")
    said = re.search(r"(\d+) sizes \(n = ([\d, -]+)\) cost more", _outputs_of(cells, "c_hat = np.array"))
    expected = _undercut(xs, ys)
    assert said and int(said.group(1)) == len(expected) and _expand(said.group(2)) == expected


def _quantity(name: str | None) -> str | None:
    """The per-iteration quantity a trace draws, read from its legend name (the old names and the new)."""
    name = name or ""
    for prefix, quantity in (("D0", "D0"), ("τ<sub>h</sub>", "τ_h"), ("ā", "ā"), ("a<sub>r</sub>", "a_r"),
                             ("drafted nodes", "drafted nodes"), ("draft time", "draft time")):
        if name.startswith(prefix):
            return quantity
    return None


def _colour(trace) -> str | None:
    line = getattr(trace, "line", None)
    return (line.color if line is not None and line.color else None) or getattr(trace.marker, "color", None)


def test_one_quantity_wears_one_colour_in_every_notebooks_timeline_and_history_chart():
    """D0, τ_h, ā, a_r, drafted nodes and draft time: each one colour across all notebooks' stored figures,
    and a count (drafted nodes) never the colour of a time (draft time)."""
    seen: dict[str, set[tuple[str, str]]] = {}
    for nb in sorted(NOTEBOOKS.glob("0*.ipynb")):
        for fig in _figures(_cells(nb.name), ""):
            for t in fig.data:
                if (q := _quantity(t.name)) and isinstance(c := _colour(t), str):
                    seen.setdefault(q, set()).add((c.lower(), nb.name[:2]))
    assert {"D0", "τ_h", "ā", "a_r", "drafted nodes", "draft time"} <= set(seen)
    mixed = {q: sorted(v) for q, v in seen.items() if len({c for c, _ in v}) > 1}
    assert not mixed, f"one quantity in several colours (colour, notebook): {mixed}"
    assert not {c for c, _ in seen["drafted nodes"]} & {c for c, _ in seen["draft time"]}


def test_04s_timeline_draws_each_whole_d0_over_its_own_iterations_only():
    """'D0 used' is a step line (each whole value from its first iteration to the next change), not a
    dash per iteration that reaches into its neighbours."""
    for fig in _figures(_cells("04_history_adaptation.ipynb"), ""):
        for t in fig.data:
            if (t.name or "").startswith("D0 used"):
                assert t.mode in (None, "lines") and t.line.shape == "hv", (t.name, t.mode, t.line.shape)


def test_07s_rejection_figures_account_for_every_distributions_mass():
    """Each step's p_i, q_i and residual, and the last residual a token is drawn from: the bars drawn (the
    shown tokens and "all other tokens") sum to 1, panel by panel, as the figure stores them."""
    from dynatree_viz.views.rejection import OTHER, P_BARS, Q_BARS, RESIDUAL_BARS

    figures = _figures(_cells("07_speculative_sampling.ipynb"), "rejection_steps_view(rejection.trace")
    assert len(figures) == 2  # the sibling case and the residual draw
    for fig in figures:
        panels = [(t.name, t.xaxis, sum(t.customdata)) for t in fig.data
                  if t.name in (P_BARS, Q_BARS, RESIDUAL_BARS)]
        assert panels and all(OTHER in t.x for t in fig.data if t.name in (P_BARS, Q_BARS, RESIDUAL_BARS))
        off = [(name, axis, round(total, 4)) for name, axis, total in panels if abs(total - 1) > 1e-4]
        assert not off, f"distributions whose bars do not sum to 1: {off}"


def _markdown(cells: list[dict], where: str) -> str:
    return "\n".join(_text(o) for c in cells if c["cell_type"] == "code" and where in _source(c)
                     for o in c.get("outputs", []) if "text/markdown" in o.get("data", {}))


def _table_value(cells: list[dict], where: str, method: str, temperature: float, column: int) -> float:
    """A number from a DataFrame a cell displays (its text/plain rows: index, temperature, method, ...)."""
    plain = next("".join(o["data"]["text/plain"]) for c in cells if c["cell_type"] == "code" and where in _source(c)
                 for o in c.get("outputs", []) if "text/plain" in o.get("data", {}) and "method" in
                 "".join(o["data"]["text/plain"]))
    for line in plain.splitlines()[1:]:
        cols = line.split()
        if len(cols) > column and cols[2] == method and float(cols[1]) == temperature:
            return float(cols[column])
    raise AssertionError(f"no row {method} at {temperature} in {plain!r}")


def test_07s_match_run_at_0_7_is_section_3s_run():
    """Section 4's "the same DynaTree run at 0.7" reports under match the L̄ section 3's table gives it."""
    cells = _cells("07_speculative_sampling.ipynb")
    in_table = _table_value(cells, "rows, same = [], []", "dynatree", 0.7, 4)
    said = re.search(r"L̄ \*\*([\d.]+)\*\* under match", _markdown(cells, "verify=\"rejection\")"))
    assert said and abs(float(said.group(1)) - in_table) < 0.006, (said and said.group(1), in_table)


def test_07_reconciles_alpha_nodes_accepting_and_acceptance_with_the_runs_numbers():
    """The sentence that names the three "accepted" quantities: its counts add up (nodes accepting + residual
    draws = nodes tested), its acceptance is accepted tokens ÷ depth, and it is the rejection run's acceptance
    section 4 reports; α is section 1's Σ min(p, q)."""
    cells = _cells("07_speculative_sampling.ipynb")
    text = _markdown(cells, "dv.rejection_counts(rejection.trace)")
    nodes = re.search(r"of the (\d+) nodes where this run's walk tested candidates, (\d+) \(\d+%\) accepted one .*?"
                      r"at the other (\d+) the residual", text)
    assert nodes and int(nodes.group(2)) + int(nodes.group(3)) == int(nodes.group(1)), text
    rate = re.search(r"(\d+) accepted tokens over the (\d+) levels .*?= \*\*([\d.]+)\*\*", text)
    assert rate and abs(int(rate.group(1)) / int(rate.group(2)) - float(rate.group(3))) < 0.006
    section4 = re.search(r"under rejection \(acceptance ([\d.]+) against ([\d.]+)\)",
                         _markdown(cells, "verify=\"rejection\")"))
    assert section4 and section4.group(2) == rate.group(3)
    alpha = re.search(r"α = Σ min\(p, q\) = \*\*([\d.]+)\*\*", _markdown(cells, "recursive_rejection(p, q"))
    p, q = [0.50, 0.25, 0.15, 0.10], [0.10, 0.20, 0.30, 0.40]   # section 1's p and q, as its cell defines them
    assert alpha and abs(float(alpha.group(1)) - sum(map(min, p, q))) < 0.006
    assert f"Σ min(p, q): {alpha.group(1)}" in text


def test_07_says_a_likely_draft_was_rejected_where_one_was():
    """The tree section draws the iteration where the run's likeliest draft was rejected, and its sentence's
    numbers hold: that draft had p ≥ 0.5, it loses with 1 − p, and the unlikely accepted draw is 1 in 1/p."""
    text = _markdown(_cells("07_speculative_sampling.ipynb"), "likeliest_rejected(")
    likely = re.search(r"had p = ([\d.]+) at its parent and is still marked rejected.*?1 − p = ([\d.]+)", text)
    assert likely and float(likely.group(1)) >= 0.5, text
    assert abs(1 - float(likely.group(1)) - float(likely.group(2))) < 0.0015
    if unlikely := re.search(r"accepted with p = ([\d.]+): a 1-in-(\d+) draw", text):
        p, n = float(unlikely.group(1)), int(unlikely.group(2))   # p shown to 3 decimals: 1/p within its rounding
        assert 1 / (p + 0.0005) - 0.5 <= n <= (1 / (p - 0.0005) if p > 0.0005 else float("inf")) + 0.5
