"""One iteration animated phase by phase (draft level by level, verify, select, commit).

Every step is one plotly frame over the *final* tree's layout (the same tidy layout, colours,
marker shapes and legend as :func:`dynatree_viz.tree_figure`, so nothing moves between steps
and the last frame looks like the static view):

* ``draft d=k`` (k = 0 … depth): the nodes of depth ≤ k, each labelled with its token and its
  draft probability q(token | parent); d=0 is the root, the last committed token. With
  ``show_pruned=True`` the candidates τ / N_max pruned at level k appear as grey ghosts.
* ``verify``: one target forward over the whole tree: "→ x" next to every node is the target's
  greedy next token after it; accepted nodes get their ring, rejected ones their cross (the
  target chose another token at the parent), nodes under a rejection fade.
* ``select``: the longest path that matches the target's choices (thick blue edges) and the
  target's bonus token (orange star).
* ``commit``: the committed tokens appended to the text above the tree (accepted tokens in
  bold blue, the bonus underlined in orange, as in the text view).

:func:`animation_steps` gives the steps as data, :func:`animate` the figure (play/pause buttons
and a step slider), :func:`frame_figures` one static figure per frame (of any animated figure), and
:func:`dynatree_viz.views.strip.animation_strip` every step in one picture; slides and images
of the frames are written by :mod:`dynatree_viz.export.slides`.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.views import tree as tv
from dynatree_viz.core.controls import play_pause, step_slider
from dynatree_viz.core.labels import LINE_SPACING, marker_size_for_offset, text_lines
from dynatree_viz.core.scene import TreeScene
from dynatree_viz.core.tokens import TokenNamer, resolve_namer

PHASES: tuple[str, ...] = ("draft", "verify", "select", "commit")
#: trace / annotation names of the animated tree (the tree view's names plus these)
TARGET_CHOICES = "target's choice"
TEXT_PANEL = "text"
LEGEND_TARGET = "→ x: the target's greedy next token after the node (verify)"
LEGEND_Q = "label: token and q = draft probability given the parent"
_TEXT_CHARS = 70  # tail of the text shown above the tree
_TOP = 165        # top margin: title (2 lines), play/pause and slider, the text line
_CONTROLS = 75    # of which the controls take this much (given back by :func:`frame_figures`)


@dataclass
class AnimationStep:
    """One frame of :func:`animate`.

    ``nodes``: the tree nodes shown (BFS ids); ``pruned``: indices into ``tree.pruned`` shown as
    ghosts (only with ``show_pruned``); ``level``: the draft level of a draft step;
    ``committed_text``: the text appended in this step (only the commit step has one);
    ``text``: the whole text shown above the tree (context, plus the committed text at commit);
    ``short``: a few words for the step's panel in :func:`animation_strip`.
    """

    name: str
    phase: str
    level: int | None
    nodes: list[int]
    pruned: list[int]
    title: str
    text: str
    committed_text: str = ""
    short: str = ""


def _record(source: Any, iteration: int) -> tuple[IterationRecord, Trace | None]:
    if isinstance(source, (str, os.PathLike)):
        source = Trace.from_json(source)
    if isinstance(source, IterationRecord):
        return source, None
    if not isinstance(source, Trace):
        raise TypeError("animate needs a Trace, a trace JSON path or an IterationRecord; got "
                        f"{type(source).__name__}")
    if not source.iterations:
        raise ValueError("the trace has no iterations")
    n = len(source.iterations)
    if not -n <= iteration < n:
        raise ValueError(f"iteration must be a position in [0, {n - 1}], got {iteration}")
    return source.iterations[iteration], source


def _committed_texts(rec: IterationRecord, namer: TokenNamer) -> list[str]:
    texts = list(rec.committed_texts or [])
    return [texts[k] if k < len(texts) else namer(t) for k, t in enumerate(rec.committed)]


def _context(rec: IterationRecord, trace: Trace | None, namer: TokenNamer) -> str:
    """The text before this iteration: the prompt and every earlier iteration's tokens."""
    if trace is None:
        return ""
    parts = [trace.prompt_text or ""]
    for r in trace.iterations:
        if r is rec:
            break
        parts += _committed_texts(r, namer)
    return "".join(parts)


def _title(head: str, detail: str) -> str:
    return f"{head}<br><span style='font-size:12px;color:#444'>{detail}</span>"


def animation_steps(source: Trace | IterationRecord | str, iteration: int = 0, *,
                    show_pruned: bool = False, namer: TokenNamer | None = None,
                    tokenizer: Any = None) -> list[AnimationStep]:
    """The steps :func:`animate` draws (same arguments), as data."""
    rec, trace = _record(source, iteration)
    namer = resolve_namer(trace or rec, namer, tokenizer)
    context = _context(rec, trace, namer)
    steps = _draft_steps(rec, namer, show_pruned, context)
    return steps + _outcome_steps(rec, namer, list(steps[-1].pruned), context)


def _draft_steps(rec: IterationRecord, namer: TokenNamer, show_pruned: bool,
                 context: str) -> list[AnimationStep]:
    """One step per draft level: the nodes of depth ≤ k (and the ghosts pruned up to k)."""
    tree = rec.tree
    depth = tree.depth
    pruned_depth = [tree.depths[p.parent] + 1 for p in tree.pruned]
    all_pruned = list(range(len(tree.pruned))) if show_pruned else []
    root_text = namer(tree.tokens[0]) if not rec.token_texts else rec.token_texts[0]
    steps: list[AnimationStep] = []
    for k in range(depth + 1):
        nodes = [i for i in range(len(tree)) if tree.depths[i] <= k]
        pruned = [j for j in all_pruned if pruned_depth[j] <= k]
        new = sum(1 for i in nodes if tree.depths[i] == k)
        if k == 0:
            title = _title(f"Draft · the root '{style.hover_escape(root_text)}' = the last "
                           "committed token",
                           f"the draft grows the tree level by level, {depth} level(s) here"
                           if depth else "nothing is drafted: one plain target step")
            short = "the root: the last committed token"
        else:
            gone = [p.reason for p in tree.pruned if tree.depths[p.parent] + 1 == k]
            why = ", ".join(f"{gone.count(r)} by {'τ' if r == 'tau' else 'N_max'}"
                            for r in dict.fromkeys(gone))
            title = _title(f"Draft · level {k} of {depth}: {new} new node(s) from one batched "
                           "draft forward",
                           "label = token and q = draft probability given the parent"
                           + (f"; candidates pruned: {why}" + (" (grey)" if show_pruned else "")
                              if gone else ""))
            short = f"{new} new node(s)" + (f", {len(gone)} pruned" if gone else "")
        steps.append(AnimationStep(f"draft d={k}", "draft", k, nodes, pruned, title, context,
                                   short=short))
    return steps


def _outcome_steps(rec: IterationRecord, namer: TokenNamer, pruned: list[int],
                   context: str) -> list[AnimationStep]:
    """Verify, select and commit: every node shown, the target's verdict added step by step."""
    n = len(rec.tree)
    nodes = list(range(n))
    n_rej = sum(1 for s in TreeScene.from_record(rec, namer).statuses() if s == "rejected")
    ell = rec.accepted_length
    bonus = (f" + ★ bonus '{style.hover_escape(namer(rec.bonus))}'"
             if rec.bonus is not None else " (no bonus: the run stopped here)")
    committed = _committed_texts(rec, namer)
    text = "".join(committed)
    shown = style.visible_token(text).replace("␣", " ")
    return [
        AnimationStep("verify", "verify", None, nodes, pruned, _title(
            f"Verify · one target forward over all {n} node(s) at once",
            f"→ x = the target's greedy next token after each node; ring = accepted "
            f"({ell}), ✗ = rejected: the target chose another token ({n_rej})"), context,
            short=f"{ell} ✓ accepted, {n_rej} ✗ rejected"),
        AnimationStep("select", "select", None, nodes, pruned, _title(
            f"Select · ℓ = {ell} accepted{bonus}",
            "the longest path from the root whose every token is the target's own choice, "
            "then the target's choice after its end"), context,
            short=f"ℓ = {ell}" + (" + ★ bonus" if rec.bonus is not None else "")),
        AnimationStep("commit", "commit", None, nodes, pruned, _title(
            f"Commit · {len(committed)} token(s) appended to the text",
            f"{ell} accepted (blue)" + (", the bonus underlined" if rec.bonus is not None else "")
            + f"; {len(committed)} token(s) for {rec.target_forwards} target forward(s)"),
            context + text, committed_text=text,
            short=f"+ '{shown if len(shown) <= 24 else shown[:23] + '…'}'"),
    ]


# --- drawing ------------------------------------------------------------------------------

def _take(trace: go.Scatter, idx: Sequence[int], n: int) -> go.Scatter:
    """A copy of a per-node trace (arrays of length ``n``) restricted to the nodes ``idx``."""
    def sub(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: sub(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)) and len(v) == n:
            return [v[i] for i in idx]
        return v
    return go.Scatter(sub(trace.to_plotly_json()))


def _text_panel(step: AnimationStep, rec: IterationRecord, namer: TokenNamer) -> dict:
    """The annotation above the tree: the text so far (the committed tokens marked at commit)."""
    before = step.text[: len(step.text) - len(step.committed_text)]
    budget = max(_TEXT_CHARS - len(step.committed_text), 12)
    shown = style.visible_token(before[-budget:]).replace("␣", " ")
    head = ("…" if len(before) > budget else "") + html.escape(shown, quote=False)  # plotly
    # decodes &amp; &lt; &gt; and numeric entities, not &quot;
    tail = ""
    if step.phase == "commit":
        texts = _committed_texts(rec, namer)
        for k, t in enumerate(texts):
            t = html.escape(style.visible_token(t).replace("␣", " "), quote=False)
            if k >= rec.accepted_length:  # the bonus: underlined, as in the text view
                tail += f"<b><u><span style='color:#7a4a00'>{t}</span></u></b>"
            else:
                tail += f"<b><span style='color:{style.ACCEPTED}'>{t}</span></b>"
    else:
        tail = "<span style='color:#999'>▌</span>"
    return dict(name=TEXT_PANEL, text=f"<span style='color:#555'>text:</span> {head}{tail}",
                xref="paper", yref="paper", x=0.0, y=1.0, xanchor="left", yanchor="bottom",
                showarrow=False, align="left", yshift=6,
                font=dict(family="Menlo, Consolas, monospace", size=13, color="#222"))


def _target_text(scene: TreeScene, i: int, chars: int) -> str:
    return "→" + style.short_label(scene.namer(scene.target_argmax[i]), chars)


@dataclass
class _Parts:
    """What every frame of :func:`animate` is cut from: the tree view's traces for the whole
    tree, its labels (token and q) and the nodes whose "→ x" is shown once verified."""

    rec: IterationRecord
    scene: TreeScene
    lay: tv._Layout
    look: tv._Look
    geo: tv._Geometry
    legend: list
    nodes_draft: go.Scatter
    nodes_done: go.Scatter
    texts: dict
    targets: list[int]


def _parts(rec: IterationRecord, namer: TokenNamer, color_by: str, show_pruned: bool,
           width: int | None, height: int | None) -> _Parts:
    scene = TreeScene.from_record(rec, namer)
    tree, n = scene.tree, len(scene.tree)
    status = scene.statuses()
    lay = tv._layout(scene, show_pruned)
    look = tv._look(lay)
    texts = tv.label_texts(scene, lay, look.chars)
    if not look.dense:  # label = token and q(token | parent)
        texts.update({i: f"{texts[i]}<br>q={math.exp(tree.logps[i]):.2f}" for i in range(1, n)})
    targets = list(range(n)) if not look.dense else [0] + list(scene.accepted)
    legend = tv._legend_keys(scene, status, color_by, bool(lay.pruned), None)
    legend[:0] = [tv._legend_key(LEGEND_Q, "q", mode="text", text=["q"]),
                  tv._legend_key(LEGEND_TARGET, "target", mode="text", text=["→x"])]
    blocks = dict(texts)
    blocks.update({i: f"{texts[i]}<br>{_target_text(scene, i, look.chars)}" for i in targets})
    geo = tv._geometry(lay, blocks, look.font_size, [k.name for k in legend], width=width,
                       height=height, top=_TOP, min_width=900)
    nodes_draft = tv._node_trace(scene, ["root"] + ["drafted"] * (n - 1), lay.pos, color_by,
                                 None, look)  # no verification outcome yet
    no_target = dataclasses.replace(scene, target_prob=[])
    nodes_draft.hovertext = [tv._hover(no_target, i, "drafted") for i in range(n)]
    nodes_done = tv._node_trace(scene, status, lay.pos, color_by, None, look)
    nodes_draft.text = nodes_done.text = [texts[i] for i in range(n)]
    nodes_done.hovertext = [f"{h}<br>→ the target's next token after it: "
                            f"'{style.hover_escape(namer(scene.target_argmax[i]))}'"
                            for i, h in enumerate(nodes_done.hovertext)]
    return _Parts(rec, scene, lay, look, geo, legend, nodes_draft, nodes_done, texts, targets)


def _target_trace(p: _Parts, ids: Sequence[int]) -> go.Scatter:
    """"→ x" under each node's label (one more line of its block); no hover here (the node's own
    hover names the target's choice), so the node keeps its hover."""
    fs = p.look.font_size
    below = [p.geo.plan.offset[i] + len(text_lines(p.texts[i])) * LINE_SPACING
             * style.label_font_size(p.texts[i], fs) for i in ids]
    return go.Scatter(
        x=[p.lay.pos[i][0] for i in ids], y=[p.lay.pos[i][1] for i in ids], mode="markers+text",
        marker=dict(size=[marker_size_for_offset(b) for b in below], color="rgba(0,0,0,0)"),
        hoverinfo="skip", name=TARGET_CHOICES, customdata=list(ids), showlegend=False,
        legendgroup="target", text=[_target_text(p.scene, i, p.look.chars) for i in ids],
        textposition="bottom center", cliponaxis=False,
        textfont=dict(size=fs, color="#444444", shadow=style.LABEL_HALO))


def _frame_traces(p: _Parts, step: AnimationStep) -> list[go.Scatter]:
    """One step's traces, in the tree view's order (lines, marks, markers, then labels)."""
    scene, lay, start = p.scene, p.lay, p.geo.start
    tree, pos, n = scene.tree, lay.pos, len(scene.tree)
    verified = step.phase != "draft"
    selected = step.phase in ("select", "commit")
    acc = set(scene.accepted)
    edges = [(tree.parents[i], i) for i in step.nodes if i > 0 and not (selected and i in acc)]
    out = [tv._lines(edges, pos, tv.EDGES, start, color=style.EDGE, width=1)]
    if lay.pruned:
        out.append(tv._lines([(lay.pruned[j].parent, n + j) for j in step.pruned], pos,
                             tv.PRUNED_EDGES, start, color=style.GHOST, width=1, dash="dot"))
        ghosts = tv._pruned_trace(scene, lay.pruned, pos, n, p.look.chars)
    out.append(tv._lines(tv._path_edges(scene, lay) if selected else [], pos,
                         tv.ACCEPTED_EDGES, start, color=style.ACCEPTED, width=3.5))
    out[-1].legendgroup = "accepted"
    out += tv._outcome_marks(scene.statuses() if verified else [], pos)
    if lay.pruned:
        out.append(_take(ghosts, step.pruned, len(lay.pruned)))
    shown = set(step.nodes)
    out.append(_take(p.nodes_done if verified else p.nodes_draft,
                     [i for i in range(n) if i in shown], n))
    out.append(_bonus_star(p, selected))
    out.append(_target_trace(p, p.targets if verified else []))
    keys = list(step.nodes) + [n + j for j in step.pruned]
    if selected and lay.bonus_node is not None:
        keys.append(lay.bonus_node)
    colors = tv.label_colors(scene, lay)
    if not verified:  # nothing is accepted yet
        colors = {k: c for k, c in colors.items() if k not in acc}
    out.append(tv._label_trace(keys, p.texts, p.geo.plan.offset, pos, p.look.font_size, colors))
    return out


def _bonus_star(p: _Parts, selected: bool) -> go.Scatter:
    """The bonus star once selected; before that the same trace, empty."""
    if p.lay.bonus_node is None:
        return go.Scatter(x=[], y=[], mode="markers", name=tv.BONUS, showlegend=False,
                          hoverinfo="skip")
    star = tv._bonus_trace(p.scene, p.lay.pos[p.lay.bonus_node], p.lay.bonus_parent, p.look.chars)
    if not selected:
        star.update(x=[], y=[], text=[], hovertext=[])
    return star


def _meta(p: _Parts, step: AnimationStep) -> dict:
    return {"phase": step.phase, "level": step.level, "nodes": list(step.nodes),
            "pruned": list(step.pruned), "committed_text": step.committed_text,
            "text": step.text, "short": step.short, "accepted": list(p.scene.accepted),
            "bonus_key": p.lay.bonus_node}


def animate(source: Trace | IterationRecord | str, iteration: int = 0, *,
            tokenizer: Any = None, namer: TokenNamer | None = None,
            color_by: str = "confidence", show_pruned: bool = False, frame_ms: int = 1400,
            title: str | None = None, width: int | None = None,
            height: int | None = None) -> go.Figure:
    """Iteration position ``iteration`` of a trace (or one :class:`IterationRecord`), animated
    step by step: draft level by level, verify, select, commit (see the module docstring).

    The figure has one plotly frame per step (named ``"draft d=0"`` …, ``"verify"``,
    ``"select"``, ``"commit"``), play/pause buttons and a step slider; it opens on the first
    step. ``color_by`` / ``show_pruned`` / ``tokenizer`` as in :func:`tree_figure`;
    ``frame_ms`` is the time per step when playing. Trace names: the tree view's, plus
    ``TARGET_CHOICES`` (the "→ x" labels); the text above the tree is the ``TEXT_PANEL``
    annotation. Each frame's ``layout.meta`` holds its step (``phase``, ``level``, ``nodes``,
    ``committed_text``, ``short``) and the accepted node ids. Its static image (where a notebook
    is read without a kernel) is :func:`dynatree_viz.views.strip.animation_strip`: every step in one picture.
    """
    rec, trace = _record(source, iteration)
    namer = resolve_namer(trace or rec, namer, tokenizer)
    steps = animation_steps(rec if trace is None else trace, iteration, show_pruned=show_pruned,
                            namer=namer)
    p = _parts(rec, namer, color_by, show_pruned, width, height)
    first = _frame_traces(p, steps[0])
    fig = go.Figure(data=first + p.legend + [tv._colorbar(color_by)])
    head = f"Iteration {rec.index} · " if title is None else (title + " · " if title else "")
    fig.frames = [go.Frame(
        name=s.name, data=_frame_traces(p, s), traces=list(range(len(first))),
        layout=dict(title=dict(text=head + s.title), annotations=[_text_panel(s, rec, namer)],
                    meta=_meta(p, s)))
        for s in steps]
    labels = ["root" if s.level == 0 else f"d={s.level}" if s.phase == "draft" else s.phase
              for s in steps]
    fig.update_layout(
        title=dict(text=head + steps[0].title, x=0.01, y=1.0 - 18 / p.geo.height,
                   yref="container", yanchor="top", font=dict(size=14)),
        annotations=[_text_panel(steps[0], rec, namer)], meta=_meta(p, steps[0]),
        template="plotly_white", hovermode="closest", dragmode="pan", **tv._axes(p.geo, p.lay.depth),
        # the controls sit between the title and the text (the legend is under the tree, as in
        # the static view, and its height is not known here)
        updatemenus=[play_pause(frame_ms, x=0.0, y=1.0, xanchor="left", yanchor="bottom",
                                pad=dict(b=38, r=10))],
        sliders=[step_slider([s.name for s in steps], labels, x=0.22, len=0.78, y=1.0,
                             yanchor="bottom", pad=dict(b=30, t=0),
                             currentvalue=dict(prefix="step: ", font=dict(size=12)))])
    return fig


# --- static frames, slides, images ---------------------------------------------------------

def frame_figures(fig: go.Figure) -> list[go.Figure]:
    """One static figure per frame of an animated figure: the frame's data over the figure's
    data (by the frame's ``traces`` indices) and its layout over the figure's layout, without
    the play buttons and the slider. A figure without frames gives ``[fig]``."""
    if not fig.frames:
        return [go.Figure(fig)]
    base = fig.to_plotly_json()
    base_layout = _without_controls(base["layout"])
    out = []
    for fr in fig.frames:
        frj = fr.to_plotly_json()
        data = copy.deepcopy(base["data"])
        idx = frj.get("traces") or list(range(len(frj.get("data", []))))
        for i, tr in zip(idx, frj.get("data", [])):
            data[i] = _merge(data[i], tr)
        out.append(go.Figure(data=data, layout=_merge(copy.deepcopy(base_layout),
                                                      frj.get("layout") or {})))
    return out


def _without_controls(layout: dict) -> dict:
    """The layout without its slider and buttons; the margin they sat in (above or below the
    plot) is given back and the height shrinks with it, so the plot area keeps its size."""
    out = dict(layout)
    controls = out.pop("sliders", []) + out.pop("updatemenus", [])
    margin = dict(out.get("margin") or {})
    for side, here in (("t", lambda c: (c.get("y") or 0) >= 1),
                       ("b", lambda c: (c.get("y") or 0) <= 0)):
        if any(here(c) for c in controls) and margin.get(side, 0) > _CONTROLS:
            margin[side] -= _CONTROLS
            if out.get("height"):
                out["height"] -= _CONTROLS
    if margin:
        out["margin"] = margin
    return out


def is_animation(fig: go.Figure) -> bool:
    """Whether ``fig`` is an :func:`animate` figure (every frame's meta names its phase)."""
    return bool(fig.frames) and all(isinstance(fr.layout.meta, dict) and "phase" in fr.layout.meta
                                    for fr in fig.frames)


def _merge(base: dict, update: dict) -> dict:
    """What plotly.js does with a frame: objects merge key by key, anything else (arrays
    included) is replaced."""
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


__all__ = ["AnimationStep", "PHASES", "TARGET_CHOICES", "TEXT_PANEL", "animate", "animation_steps",
           "frame_figures", "is_animation"]
