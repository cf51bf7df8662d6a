"""View: what speculative sampling did at one node (p against q, the draw, the residual).

Under sampling (``trace.sampling``) every verified node u drew the target's next token from p(.|u):
under ``match`` by the Gumbel-max trick with the noise of the position it fills (the token with the
largest log p + g wins), under ``rejection`` by recursive rejection sampling over u's drafted
candidates (accept candidate x with probability min(1, p(x) / q(x)), else draw from the normalised
residual (p - q)+ with a uniform). This view puts the two distributions side by side for the tokens
the trace knows at u (p's largest entries, q's largest entries, u's children), with min(p, q), the
mass rejection sampling accepts, and the residual under ``rejection``; below, the draw itself: the
largest perturbed scores log p + g (``match``), or each candidate's coin against min(1, p/q) and the
uniform inside the CDF interval of a residual draw (``rejection``). The title says which token was
committed and why.

:func:`sampling_data` returns the facts (:class:`SamplingPanel`, testable without a figure),
:func:`sampling_view` the figure. Everything comes from the trace; no model is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.core.style import wrap
from dynatree_viz.core.tokens import TokenNamer, resolve_namer

#: names of the figure's traces (tests look them up)
P_BARS, Q_BARS, MIN_BARS, RESIDUAL_BARS, UNIFORM_LINE, INTERVAL_BAR, SCORE_BARS, COIN_MARKS = (
    "p: target", "q: draft", "min(p, q)", "residual (p - q)+", "uniform u", "drawn token's CDF interval",
    "log p + Gumbel noise", "coins against min(1, p/q)")
THRESHOLD_MARKS = "threshold min(1, p/q)"
#: match: the drawn token's perturbed score (the largest)
WINNER_BAR = "the largest log p + g: the drawn token"
#: shared draft noise: the draft's perturbed scores beside the target's
DRAFT_SCORE_BARS = "log q + Gumbel noise (draft)"
#: the draft's largest log q + g: the token its first child carries (framed in the accepted path's blue)
DRAFT_FIRST_BAR = "the draft's largest log q + g: its first child"


@dataclass
class TokenRow:
    """One token at the node: its p and q where the trace knows them (None: below the recorded top)."""

    token: int
    text: str
    p: float | None
    q: float | None
    child: int | None  # the child node carrying it, if drafted
    residual: float | None = None

    @property
    def overlap(self) -> float | None:
        return None if self.p is None or self.q is None else min(self.p, self.q)


@dataclass
class SamplingPanel:
    """The facts behind one node's draw (see :func:`sampling_data`)."""

    iteration: int
    node: int
    verify: str
    temperature: float
    rows: list[TokenRow]
    drawn: int
    drawn_text: str
    #: match: the largest perturbed scores (token, text, log p + g), the drawn token first
    scores: list[tuple[int, str, float]] = field(default_factory=list)
    #: match with shared draft noise: the draft's largest log q + g at the same position (token, text,
    #: score), its coupled sample first; empty when the drafts were independent or the node not expanded
    draft_scores: list[tuple[int, str, float]] = field(default_factory=list)
    #: rejection: each tested candidate's threshold min(1, p_i / q_i) (None: not tested or not recorded)
    thresholds: list[float | None] = field(default_factory=list)
    #: rejection: the candidate accepted (-1: drawn from the residual, -2: no candidates), the coins,
    #: and a residual draw's uniform and the drawn token's CDF interval
    accepted_rank: int | None = None
    coins: list[float] = field(default_factory=list)
    uniform: float | None = None
    interval: tuple[float, float] | None = None
    followed: int | None = None  # the child the walk went into, or None (the drawn token was the bonus)
    reason: str = ""


def sampling_data(source: Trace | IterationRecord, iteration: int = 0, node: int | None = None, *,
                  namer: TokenNamer | None = None, tokenizer: Any = None) -> SamplingPanel:
    """The draw at ``node`` (default: the node where the accepted path ended) of one iteration."""
    rec = source if isinstance(source, IterationRecord) else source.iterations[iteration]
    s = rec.sampling
    if s is None:
        raise ValueError("this record was decoded greedily (temperature 0): there is no draw to show; decode with "
                         "temperature > 0 (generate(..., temperature=0.7, trace=True))")
    cfg = source.sampling if isinstance(source, Trace) else None
    verify = "rejection" if "coins" in s else "match"
    namer = resolve_namer(source, namer, tokenizer)
    tree = rec.tree
    node = (rec.accepted_path[-1] if rec.accepted_path else 0) if node is None else int(node)
    if not 0 <= node < len(tree.tokens):
        raise ValueError(f"node must be in [0, {len(tree.tokens) - 1}] (the iteration's tree), got {node}")
    rows = _rows(rec, node, namer)
    drawn = int(rec.target_argmax[node])
    children = {tree.tokens[c]: c for c in tree.children(node)}
    path = [0] + list(rec.accepted_path)
    at = path.index(node) if node in path else None
    followed = path[at + 1] if at is not None and at + 1 < len(path) else None
    rank = s["accepted_rank"][node] if verify == "rejection" else None
    panel = SamplingPanel(iteration=rec.index, node=node, verify=verify,
                          temperature=float((cfg or {}).get("temperature", float("nan"))), rows=rows, drawn=drawn,
                          drawn_text=namer(drawn), followed=followed)
    if verify == "match":
        panel.scores = [(int(t), namer(t), float(v)) for t, v in zip(*s["score_top"][node])]
        drafted = (s.get("draft_score_top") or [None] * (node + 1))[node]
        if drafted is not None:
            panel.draft_scores = [(int(t), namer(t), float(v)) for t, v in zip(drafted[0], drafted[1])
                                  if math.isfinite(v)]
    else:
        panel.accepted_rank, panel.coins = rank, list(s["coins"][node])
        panel.uniform, panel.interval = float(s["uniform"][node]), tuple(s["interval"][node])
        panel.thresholds = list(s["thresholds"][node]) if "thresholds" in s else [first_threshold(panel)]
    panel.reason = _reason(panel, children, tree)
    return panel


def _rows(rec: IterationRecord, node: int, namer: TokenNamer) -> list[TokenRow]:
    """Every token the trace knows at ``node``: p's top entries, q's (the draft's top-k, or under
    rejection q's recorded top), the node's children and the drawn token; most probable under p first."""
    s, tree = rec.sampling, rec.tree
    p = dict(zip(*s["p_top"][node]))
    q: dict[int, float] = {}
    # under shared draft noise a node's log-probabilities are its coupled confidence, not q: q comes
    # from the draft scores the trace kept (log q beside log q + g)
    coupled = "draft_score_top" in s
    if "q_top" in s:
        q.update(zip(*s["q_top"][node]))
    elif coupled:
        kept = s["draft_score_top"][node] or [[], [], []]
        q.update((t, math.exp(lq)) for t, lq in zip(kept[0], kept[2]) if math.isfinite(lq))
    elif tree.topk_tokens[node] is not None:
        q.update((t, math.exp(lp)) for t, lp in zip(tree.topk_tokens[node], tree.topk_logps[node]))
    child_of: dict[int, int] = {}
    for c in tree.children(node):
        tok = tree.tokens[c]
        child_of[tok] = c
        if rec.target_prob_drafted and rec.target_prob_drafted[c] is not None:
            p.setdefault(tok, rec.target_prob_drafted[c])
        if tree.stop_reasons[c] != "lookup_tail" and not coupled:  # a copied span's token has no q
            q.setdefault(tok, math.exp(tree.logps[c]))
    drawn = int(rec.target_argmax[node])
    p.setdefault(drawn, s["choice_prob"][node])
    kept = s["residual_top"][node] if "residual_top" in s else None  # None: nothing was rejected here
    res = dict(zip(*kept)) if kept else {}
    tokens = sorted(set(p) | set(q) | set(child_of), key=lambda t: (-(p.get(t) or 0.0), -(q.get(t) or 0.0), t))
    return [TokenRow(t, namer(t), p.get(t), q.get(t), child_of.get(t), res.get(t) if res else None)
            for t in tokens]


def first_threshold(panel: SamplingPanel) -> float | None:
    """min(1, p/q) of the first candidate where the trace names it (it was accepted: it is the
    drawn token); None otherwise: what a trace written before thresholds were recorded shows."""
    if panel.verify != "rejection" or panel.accepted_rank != 0:
        return None
    row = next((r for r in panel.rows if r.token == panel.drawn), None)
    return min(1.0, row.p / row.q) if row is not None and row.p is not None and row.q else None


def _reason(panel: SamplingPanel, children: dict[int, int], tree: Any) -> str:
    """One sentence: how the token was drawn and what the walk did with it."""
    tok = f"'{style.visible_token(panel.drawn_text)}'"
    if panel.verify == "match":
        how = f"drawn from p by Gumbel-max: its log p + g = {panel.scores[0][2]:.2f} was the largest"
        if len(panel.scores) > 1:
            how += f" ('{style.visible_token(panel.scores[1][1])}' next, {panel.scores[1][2]:.2f})"
        how += _coupling(panel)
    elif panel.accepted_rank is not None and panel.accepted_rank >= 0:
        i = panel.accepted_rank
        row = next((r for r in panel.rows if r.token == panel.drawn), None)
        ratio = f"min(1, p/q) = {min(1.0, row.p / row.q):.3f}" if row and row.p and row.q else "min(1, p/q)"
        t = panel.thresholds[i] if i < len(panel.thresholds) and panel.thresholds[i] is not None else None
        against = f" = {t:.3f}" if t is not None else ""
        rejected = "candidate 1" if i == 1 else f"candidates 1-{i}"
        how = (f"candidate 1 accepted: its coin {panel.coins[i]:.3f} < {ratio}" if i == 0 else
               f"{rejected} rejected, candidate {i + 1} accepted: its coin {panel.coins[i]:.3f} was below "
               f"its min(1, p/q){against} against the residual (p - q)+ and q without the rejected tokens")
    elif panel.accepted_rank == -2:
        how = f"no candidates here: drawn from p with u = {panel.uniform:.3f}"
    else:
        how = f"every candidate rejected: drawn from the residual (p - q)+ with u = {panel.uniform:.3f}"
    if panel.followed is not None:
        return f"{tok} {how}; it is child #{panel.followed}, so the walk went on into it"
    if panel.drawn in children:
        return f"{tok} {how}; it is child #{children[panel.drawn]} (verified: the walk could have gone on)"
    return f"{tok} {how}; no child carries it, so it was committed as the bonus token"


def _lower_title(panel: SamplingPanel) -> str:
    if panel.verify == "rejection":
        return "the draw: each candidate's coin against its acceptance threshold"
    if panel.draft_scores:
        return "the draw: the largest log p + g wins; the draft ranked by log q + the same g"
    return "the draw: the largest log p + Gumbel noise wins"


def _coupling(panel: SamplingPanel) -> str:
    """Shared draft noise: whether the draft's largest log q + g was the target's draw, and why."""
    if not panel.draft_scores:
        return ""
    tok, text, score = panel.draft_scores[0]
    mine = f"; the draft, ranking by log q + the same noise, put '{style.visible_token(text)}' first ({score:.2f})"
    if tok == panel.drawn:
        return mine + ": the two perturbed argmaxes agreed"
    rank = next((i for i, (t, _, _) in enumerate(panel.draft_scores) if t == panel.drawn), None)
    where = f"its rank {rank + 1}" if rank is not None else "below the draft's recorded top"
    return mine + f": q and p differ enough that the noise picked another token (the draw was {where})"


def sampling_view(source: Trace | IterationRecord, iteration: int = 0, node: int | None = None, *,
                  namer: TokenNamer | None = None, tokenizer: Any = None, title: str | None = None,
                  width: int = 820) -> go.Figure:
    """p and q of the tokens at ``node`` side by side, min(p, q), the residual (rejection), and the
    uniform as a line in the drawn token's CDF interval; the title says what was committed and why."""
    panel = sampling_data(source, iteration, node, namer=namer, tokenizer=tokenizer)
    fig = make_subplots(rows=2, cols=1, row_heights=[0.64, 0.36], vertical_spacing=0.3,
                        subplot_titles=("p and q of the tokens the trace knows at this node",
                                        _lower_title(panel)))
    labels = [f"{style.short_label(r.text, 12)}" + (f" (node {r.child})" if r.child is not None else "")
              for r in panel.rows]
    bars = [(P_BARS, [r.p for r in panel.rows], style.ACCEPTED, ""),
            (Q_BARS, [r.q for r in panel.rows], style.OKABE_ITO["sky_blue"], "/"),
            (MIN_BARS, [r.overlap for r in panel.rows], style.OKABE_ITO["bluish_green"], "")]
    if panel.verify == "rejection":
        bars.append((RESIDUAL_BARS, [r.residual for r in panel.rows], style.REJECTED, "x"))
    for name, ys, color, pattern in bars:
        if not any(y for y in ys):  # nothing known here (a lookup-tail node has no q; no rejection, no residual)
            continue
        fig.add_trace(go.Bar(x=labels, y=[y if y else None for y in ys], name=name,
                             marker=dict(color=color, pattern=dict(shape=pattern)),
                             hovertemplate="%{x}: %{y:.3g}<extra>" + name + "</extra>"), row=1, col=1)
    known = [v for r in panel.rows for v in (r.p, r.q, r.residual) if v]
    floor = math.floor(math.log10(min(known)) - 0.5) if known else -6  # the smallest bar: half a decade tall
    # a log scale: a drawn token of p = 2.5e-5 shows beside one of 0.8
    fig.update_yaxes(type="log", range=[floor, 0.05], dtick=1, exponentformat="power", row=1, col=1)
    drawn = next(((lab, r) for lab, r in zip(labels, panel.rows) if r.token == panel.drawn), None)
    if drawn is not None:  # the arrow points at the drawn token's own bars
        top = max(drawn[1].p or 0.0, drawn[1].q or 0.0)
        fig.add_annotation(x=drawn[0], y=math.log10(top) if top > 0 else floor, text="drawn", showarrow=True,
                           arrowhead=2, row=1, col=1)
    _draw_line(fig, panel, labels)
    heading = title or f"iteration {panel.iteration}, node {panel.node} ({panel.verify}): {panel.reason}"
    fig.update_layout(barmode="group", width=width, height=640, template="plotly_white",
                      title=dict(text=wrap(heading, width // 7), font_size=12, y=0.97, yanchor="top"),
                      margin=dict(t=110, b=120), legend=dict(orientation="h", y=-0.22, yanchor="top"))
    fig.update_xaxes(tickangle=-30, automargin=True, row=1, col=1,
                     title_text="no bar: below the top entries the trace recorded (p, q), or 0 (min, residual)",
                     title_font_size=11)
    fig.update_yaxes(title_text="probability (log)", row=1, col=1)
    if panel.verify == "rejection":
        fig.update_xaxes(title_text="coin (◆) and threshold min(1, p/q) (|) on [0, 1]; a residual draw: u in the "
                                    "drawn token's CDF interval", title_font_size=11, row=2, col=1)
    return fig


def _draw_line(fig: go.Figure, panel: SamplingPanel, labels: list[str]) -> None:
    """The draw: the largest perturbed scores (match); or each candidate's coin on [0, 1] (the first
    candidate's acceptance probability min(1, p/q) beside it) and a residual draw's uniform inside the
    drawn token's CDF interval (rejection)."""
    if panel.verify == "match":
        _draw_scores(fig, panel, labels)
        return
    used = len(panel.coins) if panel.accepted_rank is None or panel.accepted_rank < 0 else panel.accepted_rank + 1
    # coins after the accepted one were never tested; a row names its threshold (text beside a mark at
    # 0 or 1 would leave the axis)
    thr = list(panel.thresholds) + [None] * used
    labels = [f"candidate {i + 1}" + (f" (min(1, p/q) = {thr[i]:.3f})" if thr[i] is not None else "")
              for i in range(used)]
    if labels:
        fig.add_trace(go.Scatter(x=panel.coins[:used], y=labels, mode="markers", name=COIN_MARKS,
                                 marker=dict(symbol="diamond", size=11, color=style.REJECTED),
                                 hovertemplate="%{y}: coin %{x:.3f}<extra></extra>"), row=2, col=1)
    shown = [(t, lab) for t, lab in zip(panel.thresholds, labels) if t is not None]
    if shown:  # each tested candidate's min(1, p_i/q_i), against the residual from the second on
        fig.add_trace(go.Scatter(x=[t for t, _ in shown], y=[lab for _, lab in shown], mode="markers",
                                 name=THRESHOLD_MARKS,
                                 marker=dict(symbol="line-ns-open", size=24, color=style.ACCEPTED,  # open marks: colour
                                             line=dict(width=3, color=style.ACCEPTED)),
                                 hovertemplate="threshold %{x:.3f}<extra></extra>"), row=2, col=1)
    if panel.accepted_rank == -1 and panel.interval is not None:  # every candidate rejected: a residual draw
        lo, hi = panel.interval
        # a thick segment with end ticks: an interval of 0.005 still shows on [0, 1]
        fig.add_trace(go.Scatter(x=[lo, hi], y=["residual draw"] * 2, mode="lines+markers", name=INTERVAL_BAR,
                                 line=dict(color=style.ACCEPTED, width=10), opacity=0.6,
                                 marker=dict(symbol="line-ns-open", size=18, color=style.ACCEPTED),
                                 hovertemplate=f"'{style.visible_token(panel.drawn_text)}': "
                                               f"[{lo:.3f}, {hi:.3f})<extra></extra>"),
                      row=2, col=1)
        fig.add_trace(go.Scatter(x=[panel.uniform], y=["residual draw"], mode="markers", name=UNIFORM_LINE,
                                 marker=dict(symbol="line-ns-open", size=22, color=style.BONUS,
                                             line=dict(width=3, color=style.BONUS))),
                      row=2, col=1)
    fig.update_xaxes(range=[0, 1], row=2, col=1)


def _draw_scores(fig: go.Figure, panel: SamplingPanel, labels: list[str]) -> None:
    """match: the target's largest log p + g (the first won); with shared draft noise the draft's
    log q + g of the same tokens beside them (the draft's own largest marked). The tokens are the
    upper panel's, in its order (a token below the recorded top scores has no bar)."""
    tokens = [r.token for r in panel.rows]
    target = {t: v for t, _, v in panel.scores}
    draft = {t: v for t, _, v in panel.draft_scores}
    # every bar rises from one floor under the lowest score: the tallest bar is the largest score (bars
    # from 0 made a runner-up of 0.09 a hairline and turned a negative score's bar upside down)
    shown = [v for v in (*(target.get(t) for t in tokens), *(draft.get(t) for t in tokens)) if v is not None]
    base = math.floor(min(shown, default=0.0)) - 0.5

    def rise(vals: list) -> dict:
        return dict(y=[None if v is None else v - base for v in vals], base=base, customdata=vals)

    for name, mine, colour in ((WINNER_BAR, True, style.BONUS), (SCORE_BARS, False, style.GHOST)):
        # two traces, so the legend names the winner's colour too
        fig.add_trace(go.Bar(x=labels, **rise([target.get(t) if (t == panel.drawn) == mine else None for t in tokens]),
                             name=name, marker_color=colour, offsetgroup="target",
                             hovertemplate="%{x}: log p + g = %{customdata:.3f}<extra></extra>"), row=2, col=1)
    if panel.draft_scores:
        first = panel.draft_scores[0][0]
        for name, mine, frame in ((DRAFT_FIRST_BAR, True, style.ACCEPTED),
                                  (DRAFT_SCORE_BARS, False, style.OKABE_ITO["sky_blue"])):
            # two traces, so the legend names the first child's frame too
            fig.add_trace(go.Bar(x=labels, **rise([draft.get(t) if (t == first) == mine else None for t in tokens]),
                                 name=name, offsetgroup="draft",
                                 marker=dict(color=style.OKABE_ITO["sky_blue"], pattern=dict(shape="/"),
                                             line=dict(color=frame, width=3)),
                                 hovertemplate="%{x}: log q + g = %{customdata:.3f}<extra></extra>"), row=2, col=1)
    fig.update_yaxes(title_text="perturbed score", row=2, col=1)
    fig.update_xaxes(title_text="the tokens above (no bar: not among the 8 largest log p + g recorded)",
                     title_font_size=11, row=2, col=1)
