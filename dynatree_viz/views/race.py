"""View 8: two (or more) runs on the same prompt as a race.

One lane per trace, stacked on a shared x axis that is either the target forwards spent
(``x="forwards"``: the prefill, then one verification per iteration, plus a re-run of the
committed tokens in ``kv_mode="recompute"``) or the measured time (``x="time"``: the prefill,
then each iteration's draft + verify + commit, as the trace recorded them). Each lane draws the
tokens committed so far as a step line (a run's tokens arrive at the end of each iteration), a
dot at its current position, the text committed so far, and a star where it finishes. The
animation advances x; the caption gives each lane's totals and its ratio to the baseline (the
AR lane if there is one, else the first), all computed from the traces.

:func:`race_data` returns the lanes and ratios (:class:`RaceData`), :func:`race` the figure.
"""

from __future__ import annotations

import bisect
import html
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.records.trace import Trace

from dynatree_viz.core import style
from dynatree_viz.core.controls import play_pause, step_slider
from dynatree_viz.core.tokens import TokenNamer

X_CHOICES: tuple[str, ...] = ("forwards", "time")
X_TITLES = {"forwards": "target forwards (prefill + verifications)",
            "time": "time (s): prefill + draft + verify + commit, as recorded"}
#: per-lane trace names: f"{label} {suffix}"
CURVE, HEAD, FINISH, TEXT = "tokens", "now", "finish", "text"
#: the lanes' y range (× the most tokens) and where the committed text hangs from: one text line
#: (11 px) above the finish star (18 px) and its label in a 190 px lane
Y_TOP, TEXT_Y = 1.38, 1.36
_TEXT_CHARS = 60


@dataclass
class Lane:
    """One run: its cumulative tokens after the prefill and after each iteration.

    ``xs[0] == 0`` (nothing done), ``xs[1]`` = after the prefill, then one entry per iteration;
    ``tokens`` and ``texts`` (the text committed so far) at those x values.
    """

    label: str
    method: str
    xs: list[float]
    tokens: list[int]
    texts: list[str]
    color: str
    dash: str = "solid"

    @property
    def end(self) -> float:
        return self.xs[-1]

    @property
    def total_tokens(self) -> int:
        return self.tokens[-1]

    @property
    def per_token(self) -> float:
        """x spent per committed token (prefill included)."""
        return self.end / self.total_tokens if self.total_tokens else float("inf")


@dataclass
class RaceData:
    """The lanes, the baseline lane's label, each lane's ratio to it and the caption.

    ``ratios[label]`` = baseline x per token ÷ lane x per token (``> 1``: the lane is faster /
    needs fewer target forwards); with equal token counts this is baseline end ÷ lane end.
    """

    x: str
    lanes: list[Lane]
    baseline: str
    ratios: dict[str, float]
    caption: str
    notes: list[str] = field(default_factory=list)


def _fmt_x(v: float, x: str) -> str:
    return f"{v:.3g} s" if x == "time" else f"{int(round(v))} forwards"


def _labelled(traces: Mapping[str, Any] | Sequence[Any]) -> list[tuple[str, Trace]]:
    if isinstance(traces, Trace):
        raise TypeError("race needs several traces: a dict {label: trace} or a list of traces")
    items = list(traces.items()) if isinstance(traces, Mapping) else [(None, t) for t in traces]
    if not items:
        raise ValueError("race needs at least one trace (two to compare)")
    out: list[tuple[str, Trace]] = []
    seen: dict[str, int] = {}
    for label, t in items:
        if isinstance(t, (str, os.PathLike)):
            t = Trace.from_json(t)
        if not isinstance(t, Trace):
            raise TypeError(f"race needs Trace objects or trace JSON paths; got {type(t).__name__}")
        if label is None:
            label = t.method
            seen[label] = seen.get(label, 0) + 1
            if seen[label] > 1:
                label = f"{label} ({seen[label]})"
        out.append((str(label), t))
    return out


def _prompt_desc(t: Trace) -> str:
    text = t.prompt_text
    if text is not None:
        short = text if len(text) <= 40 else text[:39] + "…"
        return f"prompt {short!r} ({len(t.prompt_tokens)} tokens)"
    return f"prompt tokens {t.prompt_tokens[:8]}{'…' if len(t.prompt_tokens) > 8 else ''}"


def _check_same_prompt(items: list[tuple[str, Trace]]) -> None:
    (l0, t0) = items[0]
    for label, t in items[1:]:
        same = (list(t.prompt_tokens) == list(t0.prompt_tokens) if t.prompt_tokens or
                t0.prompt_tokens else t.prompt_text == t0.prompt_text)
        if not same:
            raise ValueError(f"race needs traces of the same prompt: {l0!r} has "
                             f"{_prompt_desc(t0)} but {label!r} has {_prompt_desc(t)}")


def _lane_xs(label: str, t: Trace, x: str) -> list[float]:
    m = t.metrics or {}
    if x == "forwards":
        steps = [float(r.target_forwards) for r in t.iterations]
        if t.iterations and sum(steps) == 0:
            raise ValueError(f"trace {label!r} records no target forwards: use x='time'")
        prefill = float(m.get("target_forwards", 0) or 0) - sum(steps)
    else:
        steps = [float(sum((r.timings or {}).values())) for r in t.iterations]
        if t.iterations and sum(steps) == 0:
            raise ValueError(f"trace {label!r} records no timings: use x='forwards'")
        prefill = float(m.get("prefill_time_s", 0.0) or 0.0)
    xs = [0.0, max(prefill, 0.0)]
    for s in steps:
        xs.append(xs[-1] + s)
    return xs


def _lane_styles(items: list[tuple[str, Trace]]) -> list[style.MethodStyle]:
    out: list[style.MethodStyle] = []
    used: set[str] = set()
    spare = [c for c in style.SERIES_COLORS]
    for label, t in items:
        st = style.method_style(label) or style.method_style(t.method)
        if st is None or st.color in used:
            color = next((c for c in spare if c not in used), style.SERIES_COLORS[0])
            st = style.MethodStyle(color)
        used.add(st.color)
        out.append(st)
    return out


def race_data(traces: Mapping[str, Trace | str] | Sequence[Trace | str], *,
              x: str = "forwards", tokenizer: Any = None,
              baseline: str | None = None) -> RaceData:
    """The facts of :func:`race` (same arguments), without drawing."""
    if x not in X_CHOICES:
        raise ValueError(f"x must be one of {', '.join(repr(c) for c in X_CHOICES)}; got {x!r}")
    items = _labelled(traces)
    _check_same_prompt(items)
    labels = [lab for lab, _ in items]
    if baseline is None:
        baseline = next((lab for lab, t in items if t.method == "ar"), labels[0])
    elif baseline not in labels:
        raise ValueError(f"baseline must be one of the lanes {labels}; got {baseline!r}")
    lanes = [_lane(label, t, x, st, tokenizer)
             for (label, t), st in zip(items, _lane_styles(items))]
    base = next(ln for ln in lanes if ln.label == baseline)
    same_tokens = len({ln.total_tokens for ln in lanes}) == 1
    ratios = {}
    for ln in lanes:
        if same_tokens:
            ratios[ln.label] = base.end / ln.end if ln.end > 0 else float("inf")
        else:
            ratios[ln.label] = base.per_token / ln.per_token if ln.per_token > 0 else float("inf")
    return RaceData(x=x, lanes=lanes, baseline=baseline, ratios=ratios,
                    caption=_caption(lanes, ratios, baseline, x), notes=_notes(items, lanes))


def _lane(label: str, t: Trace, x: str, st: style.MethodStyle, tokenizer: Any) -> Lane:
    """One run's lane: its tokens and text after the prefill and after each iteration."""
    namer = TokenNamer.from_trace(t, tokenizer=tokenizer)
    tokens, texts = [0, 0], ["", ""]
    for r in t.iterations:
        stored = list(r.committed_texts or [])
        piece = "".join(stored[k] if k < len(stored) else namer(tok)
                        for k, tok in enumerate(r.committed))
        tokens.append(tokens[-1] + len(r.committed))
        texts.append(texts[-1] + piece)
    return Lane(label, t.method, _lane_xs(label, t, x), tokens, texts, st.color, st.dash)


def _notes(items: list[tuple[str, Trace]], lanes: list[Lane]) -> list[str]:
    """What makes the comparison less than like for like."""
    notes = []
    if len({ln.total_tokens for ln in lanes}) > 1:
        notes.append("the runs committed different numbers of tokens "
                     f"({', '.join(f'{ln.label} {ln.total_tokens}' for ln in lanes)}): the ratio "
                     "compares x per token")
    outs = [t.tokens or t.committed_tokens() for _, t in items]
    common = min(len(o) for o in outs)
    if any(o[:common] != outs[0][:common] for o in outs[1:]):
        notes.append("the outputs differ: these are not the same greedy run")
    if len({t.target_name for _, t in items}) > 1:
        notes.append("the target models differ: " + ", ".join(
            f"{lab} {t.target_name}" for lab, t in items))
    return notes


def _caption(lanes: list[Lane], ratios: dict[str, float], baseline: str, x: str) -> str:
    """Each lane's totals, then each lane's ratio to the baseline in words."""
    parts = [f"{ln.label}: {ln.total_tokens} tokens in {_fmt_x(ln.end, x)}" for ln in lanes]
    sentences = []
    for ln in lanes:
        if ln.label == baseline:
            continue
        r = ratios[ln.label]
        if x == "forwards":
            what = (f"{r:.2f}× fewer target forwards than {baseline}" if r >= 1 else
                    f"{1 / r:.2f}× more target forwards than {baseline} (ratio {r:.2f}×)")
        else:
            what = (f"{r:.2f}× the speed of {baseline}" + (" (faster)" if r > 1 else
                                                            " (slower)" if r < 1 else ""))
        sentences.append(f"{ln.label}: {what}")
    return "; ".join(parts) + (" → " + "; ".join(sentences) if sentences else "")


def _frame_xs(lanes: list[Lane], max_frames: int) -> list[float]:
    events = sorted({v for ln in lanes for v in ln.xs})
    if len(events) <= max_frames:
        return events
    top = max(ln.end for ln in lanes)
    grid = set(np.linspace(0.0, top, max(max_frames - len(lanes), 2)).tolist())
    grid |= {ln.end for ln in lanes}
    return sorted(grid)


def lane_at(lane: Lane, t: float) -> tuple[list[float], list[int], int, str, bool]:
    """A lane at x = ``t``: (curve xs, curve tokens, tokens so far, text so far, finished)."""
    k = bisect.bisect_right(lane.xs, t + 1e-12 * max(1.0, abs(t)))
    xs, ys = list(lane.xs[:k]), list(lane.tokens[:k])
    done = k == len(lane.xs)
    if not done and (not xs or t > xs[-1]):  # still running: the flat stretch up to now
        xs.append(t)
        ys.append(ys[-1] if ys else 0)
    return xs, ys, (ys[-1] if ys else 0), lane.texts[k - 1] if k else "", done


def _tail(text: str) -> str:
    s = style.visible_token(text).replace("␣", " ")
    return html.escape(("…" + s[-_TEXT_CHARS:]) if len(s) > _TEXT_CHARS else s, quote=False)


def _lane_traces(ln: Lane, k: int, t: float, x: str, top_x: float, top_y: float) -> list[go.Scatter]:
    """Lane ``k`` at x = ``t``: its curve so far, the dot now, the finish star (once finished)
    and the text committed so far, on the lane's own axes."""
    axes = dict(xaxis="x" if k == 0 else f"x{k + 1}", yaxis="y" if k == 0 else f"y{k + 1}")
    unit = "s" if x == "time" else "forwards"
    xs, ys, tok, text, done = lane_at(ln, t)
    name = html.escape(ln.label)
    return [
        go.Scatter(x=xs, y=ys, mode="lines", name=f"{ln.label} {CURVE}", showlegend=False,
                   line=dict(color=ln.color, width=3, shape="hv", dash=ln.dash),
                   hoverinfo="skip", **axes),
        go.Scatter(
            x=[min(t, ln.end)], y=[tok], mode="markers+text", name=f"{ln.label} {HEAD}",
            # once finished the star's label says the count: a second "64" would sit on the star
            cliponaxis=False, text=["" if done else f"{tok}"], textposition="middle left",
            showlegend=False,
            marker=dict(size=11, color=ln.color, line=dict(color="#fff", width=1.5)),
            textfont=dict(size=11, color=ln.color, shadow=style.LABEL_HALO),
            hovertemplate=f"{name}: %{{y}} tokens at %{{x:.4g}} {unit}<extra></extra>", **axes),
        go.Scatter(
            x=[ln.end] if done else [], y=[ln.total_tokens] if done else [],
            mode="markers+text", name=f"{ln.label} {FINISH}", showlegend=False, cliponaxis=False,
            text=[f"finish: {ln.total_tokens} tokens · {_fmt_x(ln.end, x)}"] if done else [],
            textposition="middle right" if ln.end < 0.7 * top_x else "top left",
            textfont=dict(size=11, shadow=style.LABEL_HALO),
            marker=dict(symbol="star", size=18, color=ln.color, line=dict(color="#000", width=1)),
            hovertemplate=f"{name} finished: %{{y}} tokens at %{{x:.4g}} {unit}<extra></extra>",
            **axes),
        go.Scatter(
            # hung from the top of the lane, above the finish star (at top_y) and its label
            x=[0.0], y=[top_y * TEXT_Y], mode="text", name=f"{ln.label} {TEXT}",
            text=[_tail(text) or " "], textposition="bottom right", showlegend=False,
            textfont=dict(family="Menlo, Consolas, monospace", size=11, color="#333"),
            hoverinfo="skip", **axes),
    ]


def _frame_names(xs: list[float], x: str) -> list[str]:
    names = [f"{v:.3g}" if x == "time" else f"{v:g}" for v in xs]
    for k in range(1, len(names)):  # frame names must be unique
        if names[k] in names[:k]:
            names[k] = f"{names[k]}#{k}"
    return names


def _race_title(data: RaceData, title: str | None, fig_height: int) -> dict:
    """The title: the runs, then the caption (totals, ratios, notes) and the key."""
    lanes = data.lanes
    head = title if title is not None else (
        f"Race on the same prompt: {' vs '.join(ln.label for ln in lanes)} "
        f"({'target forwards' if data.x == 'forwards' else 'wall-clock time'})")
    caption = data.caption.replace(" → ", "<br>→ ") + (
        "<br>note: " + "; ".join(data.notes) if data.notes else "")
    key = (f"line = tokens committed so far (they arrive at the end of each "
           f"{'iteration' if any(ln.method != 'ar' for ln in lanes) else 'step'}) · "
           "● = now · ★ = finish")
    return dict(text=f"{html.escape(head)}<br><span style='font-size:12px;color:#333'>"
                     f"{html.escape(caption).replace('&lt;br&gt;', '<br>')}<br>"
                     f"<span style='color:#666'>{html.escape(key)}</span></span>",
                x=0.01, y=1.0 - 18 / fig_height, yref="container", yanchor="top",
                font=dict(size=15))


def race(traces: Mapping[str, Trace | str] | Sequence[Trace | str], *, x: str = "forwards",
         tokenizer: Any = None, baseline: str | None = None, max_frames: int = 150,
         frame_ms: int = 120, title: str | None = None, width: int = 1000,
         height: int | None = None) -> go.Figure:
    """Runs of the same prompt (``{label: trace}``, or a list labelled by method) as an animated
    race: one lane per run, tokens committed so far against ``x="forwards"`` (target forwards)
    or ``x="time"`` (recorded seconds), a star where each lane finishes, play/pause and a
    slider over x, and a caption with each lane's totals and its ratio to ``baseline`` (the AR
    lane if any, else the first). ValueError for traces of different prompts or an unknown
    ``x``. Trace names per lane: ``f"{label} tokens"``, ``"… now"``, ``"… finish"``,
    ``"… text"``; ``layout.meta["race"]`` holds the lanes' totals and the ratios. Its static
    image (a notebook read without a kernel) is the last frame: every lane finished.
    """
    data = race_data(traces, x=x, tokenizer=tokenizer, baseline=baseline)
    lanes = data.lanes
    n = len(lanes)
    top_x = max(max(ln.end for ln in lanes), 1e-9)
    top_y = max(max(ln.total_tokens for ln in lanes), 1)

    def at(t: float) -> list[go.Scatter]:
        return [tr for k, ln in enumerate(lanes) for tr in _lane_traces(ln, k, t, x, top_x, top_y)]

    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.12 / max(n, 1),
                        subplot_titles=[f"<b>{html.escape(ln.label)}</b>" for ln in lanes])
    fig.add_traces(at(0.0))  # each already names its lane's axes
    xs = _frame_xs(lanes, max_frames)
    names = _frame_names(xs, x)
    fig.frames = [go.Frame(name=nm, data=at(v), traces=list(range(4 * n)))
                  for nm, v in zip(names, xs)]
    fig_height = height if height is not None else 240 + 190 * n
    many = len(names) > 24  # then only the current value is written, not every step's label
    fig.update_layout(
        title=_race_title(data, title, fig_height),
        template="plotly_white", width=width, showlegend=False, height=fig_height,
        margin=dict(l=60, r=30, t=130 + 17 * len(data.notes), b=130),
        meta={"race": {"x": x, "baseline": data.baseline, "ratios": data.ratios,
                       "caption": data.caption, "notes": data.notes,
                       "lanes": {ln.label: {"tokens": ln.total_tokens, "end": ln.end}
                                 for ln in lanes}}},
        updatemenus=[play_pause(frame_ms, x=0.0, y=0.0, xanchor="left", yanchor="top",
                                pad=dict(t=60, r=10))],
        sliders=[step_slider(names, [nm.split("#")[0] for nm in names], x=0.2, len=0.8, y=0.0,
                             yanchor="top", pad=dict(t=44), ticklen=0 if many else 7,
                             font=dict(color="rgba(0,0,0,0)" if many else "#444"),
                             currentvalue=dict(prefix="x = ", font=dict(size=12, color="#333"),
                                               suffix=" s" if x == "time" else " forwards"))])
    fig.update_xaxes(range=[0, top_x * 1.03], showgrid=True)
    fig.update_xaxes(title_text=X_TITLES[x], row=n, col=1)
    fig.update_yaxes(range=[0, top_y * Y_TOP], title_text="tokens", zeroline=True)
    return fig


__all__ = ["CURVE", "FINISH", "HEAD", "Lane", "RaceData", "TEXT", "X_CHOICES", "lane_at", "race",
           "race_data"]
