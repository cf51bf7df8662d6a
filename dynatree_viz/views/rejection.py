"""View: recursive rejection sampling at one node, step by step (``verify="rejection"``).

At a node with candidates x_1, x_2, ... (drawn from the draft's q without replacement), step i tests x_i
against p_i and q_i: accepted with probability min(1, p_i(x_i) / q_i(x_i)) (the coin below it); on a
rejection p_{i+1} = norm((p_i - q_i)+), the residual, and q_{i+1} = q_i without x_i, renormalised. If every
candidate is rejected the token is drawn from the last residual with a uniform u (the token whose CDF
interval holds u). p_0 = p, q_0 = q.

This view draws one panel per step: p_i, q_i, min(p_i, q_i) and the residual on the same tokens (the
candidates, the drawn token and the largest of the rest) and one bar for all other tokens, so each
distribution's bars sum to 1, on a log scale so a bar of 1e-4 shows beside one of 0.9, with the step's
coin against its threshold in the panel's title; a residual draw adds the residual it was drawn from on a
linear scale (0.8 and 0.1 look it) and a strip of its cumulative distribution with the uniform u marked. It reads the trace's ``rejection_steps`` (recorded by
traced rejection runs at nodes where a candidate was rejected); :func:`rejection_steps_data` returns the
facts (testable without a figure), :func:`rejection_steps_view` the figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.records.trace import Trace

from dynatree_viz.core import style
from dynatree_viz.core.tokens import TokenNamer, resolve_namer

#: the figure's trace names (tests and the legend check read them)
P_BARS, Q_BARS, MIN_BARS, RESIDUAL_BARS = ("p_i: the target's p, then the residual it was left with",
                                           "q_i: the draft's q without the rejected candidates",
                                           "min(p_i, q_i)", "residual norm((p_i - q_i)+)")
COLOURS = {P_BARS: style.ACCEPTED, Q_BARS: style.OKABE_ITO["sky_blue"], MIN_BARS: style.OKABE_ITO["bluish_green"],
           RESIDUAL_BARS: style.REJECTED}
#: the bar that holds what the shown tokens do not: every distribution's bars sum to 1
OTHER = "all other tokens"
#: tokens drawn per panel (the candidates and the drawn token always among them)
SHOWN = 8


@dataclass
class Step:
    """One tested candidate: p_i, q_i on the shown tokens, the coin against min(1, p_i(x)/q_i(x)), and
    the residual it left where it was rejected (None where it was accepted)."""

    candidate: int
    text: str
    coin: float
    threshold: float
    accepted: bool
    p: list[float]
    q: list[float]
    residual: list[float] | None

    @property
    def margin(self) -> float:
        """How far the coin fell from the threshold (the rule's margin: a near tie decides by luck)."""
        return abs(self.coin - self.threshold)


@dataclass
class RejectionSteps:
    """The facts behind one node's recursive rejection sampling (see :func:`rejection_steps_data`)."""

    iteration: int
    node: int
    tokens: list[int]
    texts: list[str]
    steps: list[Step]
    drawn: int
    drawn_text: str
    #: a residual draw: the last residual on the shown tokens, the uniform and the drawn token's interval
    last_residual: list[float] | None = None
    uniform: float | None = None
    interval: tuple[float, float] | None = None
    rejected: int = field(init=False)

    def __post_init__(self) -> None:
        self.rejected = sum(not s.accepted for s in self.steps)

    @property
    def residual_draw(self) -> bool:
        return self.last_residual is not None


def rejection_steps_data(trace: Trace, iteration: int, node: int, *, namer: TokenNamer | None = None,
                         tokenizer: Any = None) -> RejectionSteps:
    """Each step of the rejection sampling at ``node`` of ``iteration`` (a node where a candidate was
    rejected, in a traced rejection run)."""
    rec = trace.iterations[iteration]
    s = rec.sampling or {}
    if "coins" not in s:
        raise ValueError("the steps of rejection sampling exist only in a run with verify='rejection' "
                         "(generate(..., temperature=0.7, verify='rejection', trace=True))")
    kept = (s.get("rejection_steps") or [None] * (node + 1))[node]
    if kept is None:
        raise ValueError(f"node {node} of iteration {iteration} rejected no candidate (or the trace predates "
                         "rejection_steps): choose one with rejection_example(trace, case='sibling' or 'residual')")
    namer = resolve_namer(trace, namer, tokenizer)
    all_tokens, ps, qs = kept
    rank, coins, thresholds = s["accepted_rank"][node], s["coins"][node], s["thresholds"][node]
    drawn = int(rec.target_argmax[node])
    candidates = rec.tree.topk_tokens[node]  # in draw order
    tested = len(ps) if rank >= 0 else len(ps) - 1  # states: before each tested candidate, and after the last rejection
    keep = _shown(all_tokens, ps, qs, list(candidates[:tested]) + [drawn])
    cols = [all_tokens.index(t) for t in keep]
    steps = []
    for i in range(tested):
        accepted = i == rank
        steps.append(Step(int(candidates[i]), namer(candidates[i]), float(coins[i]), float(thresholds[i]), accepted,
                          [ps[i][c] for c in cols], [qs[i][c] for c in cols],
                          None if accepted else [ps[i + 1][c] for c in cols]))
    out = RejectionSteps(rec.index, node, keep, [namer(t) for t in keep], steps, drawn, namer(drawn))
    if rank == -1:
        out.last_residual = [ps[-1][c] for c in cols]
        out.uniform, out.interval = float(s["uniform"][node]), tuple(s["interval"][node])
    return out


def _shown(tokens: list[int], ps: list[list[float]], qs: list[list[float]], must: list[int]) -> list[int]:
    """The candidates and the drawn token, then the rest by their largest p_i or q_i at any step, up to
    :data:`SHOWN`; ordered by p (most probable first)."""
    weight = {t: max(max(p[j], q[j]) for p, q in zip(ps, qs)) for j, t in enumerate(tokens)}
    chosen = list(dict.fromkeys(must))
    for t in sorted(tokens, key=lambda t: -weight[t]):
        if len(chosen) >= max(SHOWN, len(must)):
            break
        if t not in chosen and weight[t] > 0:
            chosen.append(t)
    first = {t: ps[0][tokens.index(t)] for t in chosen}
    return sorted(chosen, key=lambda t: (-first[t], t))


def _step_title(i: int, step: Step) -> str:
    tok = f"'{style.visible_token(step.text)}'"
    against = "p and q" if i == 0 else "the residual and the reduced q"
    if step.accepted:
        return (f"step {i + 1}: candidate {tok} against {against}: coin {step.coin:.3f} < min(1, p_i/q_i) = "
                f"{step.threshold:.3f}, accepted")
    return (f"step {i + 1}: candidate {tok} against {against}: coin {step.coin:.3f} ≥ min(1, p_i/q_i) = "
            f"{step.threshold:.3f}, rejected")


def _draw_title(data: RejectionSteps) -> str:
    lo, hi = data.interval
    return (f"every candidate rejected: u = {data.uniform:.3f} lies in [{lo:.3f}, {hi:.3f}), the interval of "
            f"'{style.visible_token(data.drawn_text)}' in the last residual's CDF, so it is drawn")


def rejection_steps_view(trace: Trace, iteration: int, node: int, *, namer: TokenNamer | None = None,
                         tokenizer: Any = None, title: str | None = None, width: int = 900) -> go.Figure:
    """One panel per step of the rejection sampling at ``node``: p_i, q_i, min(p_i, q_i) and the residual on
    a log scale, tokens as text plus an "all other tokens" bar (so each distribution's bars sum to 1), the
    step's coin and threshold in its title; a residual draw adds the last residual on a linear scale and a
    strip of its cumulative distribution with the uniform u marked."""
    data = rejection_steps_data(trace, iteration, node, namer=namer, tokenizer=tokenizer)
    titles = [_step_title(i, s) for i, s in enumerate(data.steps)]
    if data.residual_draw:
        titles += [_draw_title(data), _strip_title(data)]
    heights = [1.0] * len(data.steps) + ([1.0, 0.3] if data.residual_draw else [])
    fig = make_subplots(rows=len(titles), cols=1, subplot_titles=titles, row_heights=heights,
                        vertical_spacing=0.5 / len(titles))
    labels = [f"'{style.visible_token(t)}'" for t in data.texts] + [OTHER]
    shown: set[str] = set()
    for row, step in enumerate(data.steps, start=1):
        overlap = [min(p, q) for p, q in zip(step.p, step.q)]
        total = overlap_total(step)  # Σ min(p_i, q_i) over the whole vocabulary, where the residual gives it
        for name, ys, mass in ((P_BARS, step.p, 1.0), (Q_BARS, step.q, 1.0), (MIN_BARS, overlap, total),
                               (RESIDUAL_BARS, step.residual, 1.0)):
            if ys is not None:
                _bars(fig, name, labels, ys + [max(0.0, mass - sum(ys)) if mass is not None else 0.0], row, shown)
    values = [v for s in data.steps for ys in (s.p, s.q, s.residual or []) for v in ys if v > 0]
    # half a decade below the smallest value: the smallest bar is as tall as a half-decade, not a hairline
    floor = math.floor(math.log10(min(values)) - 0.5) if values else -6
    for row in range(1, len(data.steps) + 1):
        fig.update_yaxes(type="log", range=[floor, 0.05], title_text="probability (log)", dtick=1,
                         exponentformat="power", row=row, col=1)
    for row in range(1, len(data.steps) + (2 if data.residual_draw else 1)):
        _mark(fig, data, labels, row)
    if data.residual_draw:
        _draw_panels(fig, data, labels, len(data.steps) + 1, shown)
    heading = title or (f"iteration {data.iteration}, node {data.node}: recursive rejection sampling, "
                        f"{data.rejected} candidate(s) rejected, '{style.visible_token(data.drawn_text)}' emitted")
    fig.update_layout(barmode="group", width=width, height=180 + 260 * sum(heights), template="plotly_white",
                      title=dict(text=heading, font_size=13), bargap=0.25, margin=dict(t=90, b=60),
                      legend=dict(orientation="h", y=-0.12 / len(titles) * 2, yanchor="top", x=0))
    fig.update_annotations(font_size=12)
    return fig


def overlap_total(step: Step) -> float | None:
    """Σ min(p_i, q_i) over the whole vocabulary, from a rejected step's residual: norm((p_i - q_i)+) divides
    by Z = Σ (p_i - q_i)+ = 1 - Σ min(p_i, q_i), so any shown token with a residual gives Z. None where the
    step was accepted (no residual) or no shown token carries one."""
    if step.residual is None:
        return None
    best = max(range(len(step.residual)), key=lambda j: step.residual[j])
    if step.residual[best] <= 0:
        return None
    return 1.0 - (step.p[best] - step.q[best]) / step.residual[best]


def _strip_title(data: RejectionSteps) -> str:
    lo, hi = data.interval
    return (f"the draw: u = {data.uniform:.3f} on the last residual's cumulative distribution (tokens in id order); "
            f"'{style.visible_token(data.drawn_text)}' holds [{lo:.3f}, {hi:.3f})")


def _draw_panels(fig: go.Figure, data: RejectionSteps, labels: list[str], row: int, shown: set[str]) -> None:
    """The last residual on a linear axis (so 0.8 and 0.1 look it), every token's share accounted for, and
    below it the residual's CDF as one strip: the drawn token's interval, the mass before and after it in id
    order, and the uniform u that fell in it."""
    last = data.last_residual
    _bars(fig, RESIDUAL_BARS, labels, last + [max(0.0, 1.0 - sum(last))], row, shown)
    fig.update_yaxes(type="linear", range=[0, 1.05], title_text="probability", row=row, col=1)
    lo, hi = data.interval
    drawn = f"'{style.visible_token(data.drawn_text)}'"
    for x0, x1, text, colour in ((0.0, lo, "tokens before it (id order)", "#d9d9d9"),
                                 (lo, hi, drawn, COLOURS[RESIDUAL_BARS]), (hi, 1.0, "tokens after it", "#bdbdbd")):
        fig.add_trace(go.Bar(x=[x1 - x0], base=[x0], y=[0], orientation="h", showlegend=False, name=text,
                             offsetgroup="cdf",  # one row: the three intervals side by side, not grouped
                             marker=dict(color=colour, line=dict(color="white", width=1)), width=0.8,
                             text=[text if x1 - x0 > 0.08 else ""], textposition="inside", insidetextanchor="middle",
                             hovertemplate=f"{text}: [{x0:.3f}, {x1:.3f})<extra></extra>"), row=row + 1, col=1)
    fig.add_trace(go.Scatter(x=[data.uniform, data.uniform], y=[-0.55, 0.55], mode="lines", showlegend=False,
                             name="u", line=dict(color=style.OKABE_ITO["black"], width=3),
                             hovertemplate=f"u = {data.uniform:.3f}<extra></extra>"), row=row + 1, col=1)
    fig.add_annotation(x=data.uniform, y=0.55, xref=f"x{row + 1}", yref=f"y{row + 1}", yanchor="bottom",
                       showarrow=False, text=f"u = {data.uniform:.3f} → {drawn}", font=dict(size=12))
    fig.update_xaxes(range=[0, 1], title_text="cumulative probability of the last residual", row=row + 1, col=1)
    fig.update_yaxes(visible=False, range=[-0.7, 1.2], row=row + 1, col=1)


def _bars(fig: go.Figure, name: str, labels: list[str], ys: list[float], row: int, shown: set[str]) -> None:
    """One trace of bars (zeros left out: a log axis has no 0; the hover says the value)."""
    fig.add_trace(go.Bar(x=labels, y=[y if y > 0 else None for y in ys], name=name, legendgroup=name,
                         showlegend=name not in shown, marker=dict(color=COLOURS[name]),
                         customdata=ys, hovertemplate="%{x}: %{customdata:.3g}<extra>" + name + "</extra>"),
                  row=row, col=1)
    shown.add(name)


def _mark(fig: go.Figure, data: RejectionSteps, labels: list[str], row: int) -> None:
    """Underline the token the step tested (or, in the draw's panel, the drawn token) with its label."""
    if row <= len(data.steps):
        step = data.steps[row - 1]
        token, text = step.candidate, "tested" + (": accepted" if step.accepted else ": rejected")
    else:
        token, text = data.drawn, "drawn"
    x = labels[data.tokens.index(token)]
    fig.add_annotation(x=x, y=0, yref=f"y{row if row > 1 else ''} domain", yanchor="top", text=f"▲ {text}",
                       showarrow=False, font=dict(size=11, color=style.OKABE_ITO["black"]), yshift=-22,
                       xref=f"x{row if row > 1 else ''}")
