"""View 7: one iteration animated phase by phase (draft level by level, verify, select, commit).

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
and a step slider), :func:`frame_figures` one static figure per frame (of any animated figure),
:func:`export_slides` one offline HTML file with one slide per step (plotly.js inlined, arrow
keys / buttons to navigate) and :func:`export_frames` one image per frame (kaleido + Chrome).
"""

from __future__ import annotations

import copy
import dataclasses
import html
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import plotly.graph_objects as go

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz import style
from dynatree_viz import tree_view as tv
from dynatree_viz.export import ImageExportUnavailable, figure_html, require_image_export, save_image
from dynatree_viz.scene import TreeScene
from dynatree_viz.tokens import TokenNamer, resolve_namer

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
    ``text``: the whole text shown above the tree (context, plus the committed text at commit).
    """

    name: str
    phase: str
    level: int | None
    nodes: list[int]
    pruned: list[int]
    title: str
    text: str
    committed_text: str = ""


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
    tree = rec.tree
    n = len(tree)
    depth = tree.depth
    all_nodes = list(range(n))
    pruned_depth = [tree.depths[p.parent] + 1 for p in tree.pruned]
    all_pruned = list(range(len(tree.pruned))) if show_pruned else []
    context = _context(rec, trace, namer)
    committed = _committed_texts(rec, namer)
    root_text = namer(tree.tokens[0]) if not rec.token_texts else rec.token_texts[0]
    steps: list[AnimationStep] = []
    for k in range(depth + 1):
        nodes = [i for i in all_nodes if tree.depths[i] <= k]
        pruned = [j for j in all_pruned if pruned_depth[j] <= k]
        if k == 0:
            title = _title(f"Draft · the root '{style.hover_escape(root_text)}' = the last "
                           "committed token",
                           f"the draft grows the tree level by level, {depth} level(s) here"
                           if depth else "nothing is drafted: one plain target step")
        else:
            new = sum(1 for i in all_nodes if tree.depths[i] == k)
            gone = [p.reason for p in tree.pruned if tree.depths[p.parent] + 1 == k]
            why = ", ".join(f"{gone.count(r)} by {'τ' if r == 'tau' else 'N_max'}"
                            for r in dict.fromkeys(gone))
            title = _title(f"Draft · level {k} of {depth}: {new} new node(s) from one batched "
                           "draft forward",
                           "label = token and q = draft probability given the parent"
                           + (f"; candidates pruned: {why}" + (" (grey)" if show_pruned else "")
                              if gone else ""))
        steps.append(AnimationStep(f"draft d={k}", "draft", k, nodes, pruned, title, context))
    n_rej = sum(1 for s in TreeScene.from_record(rec, namer).statuses() if s == "rejected")
    steps.append(AnimationStep(
        "verify", "verify", None, all_nodes, all_pruned,
        _title(f"Verify · one target forward over all {n} node(s) at once",
               f"→ x = the target's greedy next token after each node; ring = accepted "
               f"({rec.accepted_length}), ✗ = rejected: the target chose another token ({n_rej})"),
        context))
    bonus = (f" + ★ bonus '{style.hover_escape(namer(rec.bonus))}'"
             if rec.bonus is not None else " (no bonus: the run stopped here)")
    steps.append(AnimationStep(
        "select", "select", None, all_nodes, all_pruned,
        _title(f"Select · ℓ = {rec.accepted_length} accepted{bonus}",
               "the longest path from the root whose every token is the target's own choice, "
               "then the target's choice after its end"), context))
    text = "".join(committed)
    steps.append(AnimationStep(
        "commit", "commit", None, all_nodes, all_pruned,
        _title(f"Commit · {len(committed)} token(s) appended to the text",
               f"{rec.accepted_length} accepted (blue)"
               + (", the bonus underlined" if rec.bonus is not None else "")
               + f"; {len(committed)} token(s) for {rec.target_forwards} target forward(s)"),
        context + text, committed_text=text))
    return steps


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
    head = ("…" if len(before) > budget else "") + html.escape(shown)
    tail = ""
    if step.phase == "commit":
        texts = _committed_texts(rec, namer)
        for k, t in enumerate(texts):
            t = html.escape(style.visible_token(t).replace("␣", " "))
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


def _target_trace(scene: TreeScene, pos: dict, ids: Sequence[int], chars: int) -> go.Scatter:
    # transparent markers as wide as the accepted ring push the text clear of it; no hover
    # here (the node's own hover names the target's choice), so the node keeps its hover
    return go.Scatter(
        x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers+text",
        marker=dict(size=28, color="rgba(0,0,0,0)"), hoverinfo="skip",
        name=TARGET_CHOICES, customdata=list(ids), showlegend=False, legendgroup="target",
        text=["→" + style.short_label(scene.namer(scene.target_argmax[i]), chars) for i in ids],
        textposition="middle right",
        textfont=dict(size=10, color="#444444", shadow=style.LABEL_HALO))


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
    ``committed_text``).
    """
    rec, trace = _record(source, iteration)
    namer = resolve_namer(trace or rec, namer, tokenizer)
    steps = animation_steps(rec if trace is None else trace, iteration, show_pruned=show_pruned,
                            namer=namer)
    scene = TreeScene.from_record(rec, namer)
    tree = scene.tree
    n = len(tree)
    status = scene.statuses()
    lay = tv._layout(scene, show_pruned)
    pos = lay.pos
    dense = lay.n_leaves > 40
    chars = 6 if dense else 10
    font_size = 9 if dense else 11
    text_font = dict(size=font_size, shadow=style.LABEL_HALO)
    drafted = ["root"] + ["drafted"] * (n - 1)  # no verification outcome yet
    no_target = dataclasses.replace(scene, target_prob=[])

    # Full-tree traces from the tree view, cut down to each step's nodes.
    nodes_draft = tv._node_trace(scene, drafted, pos, color_by, None, dense, chars, text_font)
    nodes_draft.hovertext = [tv._hover(no_target, i, "drafted") for i in range(n)]
    if not dense:  # label = token and q(token | parent)
        nodes_draft.text = [t if i == 0 else f"{t}<br>q={math.exp(tree.logps[i]):.2f}"
                            for i, t in enumerate(nodes_draft.text)]
    nodes_done = tv._node_trace(scene, status, pos, color_by, None, dense, chars, text_font)
    nodes_done.text = nodes_draft.text
    nodes_done.hovertext = [f"{h}<br>→ the target's next token after it: "
                            f"'{style.hover_escape(namer(scene.target_argmax[i]))}'"
                            for i, h in enumerate(nodes_done.hovertext)]
    pruned_full = (tv._pruned_trace(scene, lay.pruned, pos, n, chars, font_size)
                   if lay.pruned else None)
    ids = {s: [i for i in range(n) if status[i] == s] for s in ("accepted", "rejected")}
    target_ids = list(range(n)) if not dense else [0] + list(scene.accepted)
    path_edges = list(zip([0] + scene.accepted[:-1], scene.accepted))
    if lay.bonus_node is not None:
        path_edges.append((lay.bonus_parent, lay.bonus_node))
    acc = set(scene.accepted)

    def frame_traces(step: AnimationStep) -> list[go.Scatter]:
        shown = set(step.nodes)
        verified = step.phase != "draft"
        selected = step.phase in ("select", "commit")
        edges = [(tree.parents[i], i) for i in step.nodes
                 if i > 0 and not (selected and i in acc)]
        out = [tv._lines(edges, pos, tv.EDGES, color=style.EDGE, width=1)]
        if lay.pruned:
            out.append(tv._lines([(lay.pruned[j].parent, n + j) for j in step.pruned], pos,
                                 tv.PRUNED_EDGES, color=style.GHOST, width=1, dash="dot"))
        out.append(tv._lines(path_edges if selected else [], pos, tv.ACCEPTED_EDGES,
                             color=style.ACCEPTED, width=3.5))
        out[-1].legendgroup = "accepted"
        out.append(tv._marks(ids["accepted"] if verified else [], pos, tv.ACCEPTED_MARKS,
                             style.ACCEPTED_MARK, style.ACCEPTED, "accepted"))
        out.append(tv._marks(ids["rejected"] if verified else [], pos, tv.REJECTED_MARKS,
                             style.REJECTED_MARK, style.REJECTED, "rejected"))
        if pruned_full is not None:
            out.append(_take(pruned_full, step.pruned, len(lay.pruned)))
        out.append(_take(nodes_done if verified else nodes_draft,
                         [i for i in range(n) if i in shown], n))
        out.append(_target_trace(scene, pos, target_ids if verified else [], chars))
        if lay.bonus_node is not None:  # the same trace, empty before select
            star = tv._bonus_trace(scene, pos[lay.bonus_node], lay.bonus_parent, chars,
                                   font_size)
            if not selected:
                star.update(x=[], y=[], text=[], hovertext=[])
            out.append(star)
        else:
            out.append(go.Scatter(x=[], y=[], mode="markers", name=tv.BONUS, showlegend=False,
                                  hoverinfo="skip"))
        return out

    first = frame_traces(steps[0])
    n_dynamic = len(first)
    legend = tv._legend_keys(scene, status, color_by, bool(lay.pruned), None)
    legend.insert(0, tv._legend_key(LEGEND_Q, "q", mode="text", text=["q"]))
    legend.insert(1, tv._legend_key(LEGEND_TARGET, "target", mode="text", text=["→x"]))
    colorbar = go.Scatter(
        x=[None], y=[None], mode="markers", name=tv.COLORBAR, showlegend=False, hoverinfo="skip",
        marker=dict(color=[0.0, 1.0], cmin=0, cmax=1, colorscale=style.COLORSCALE,
                    showscale=True, colorbar=dict(
                        title=dict(text=style.COLOR_BY_CAPTIONS[color_by]), thickness=12,
                        len=0.6, x=1.02, y=0.5)))
    fig = go.Figure(data=first + legend + [colorbar])
    head = f"Iteration {rec.index} · " if title is None else (title + " · " if title else "")

    def meta(step: AnimationStep) -> dict:
        return {"phase": step.phase, "level": step.level, "nodes": list(step.nodes),
                "pruned": list(step.pruned), "committed_text": step.committed_text,
                "text": step.text}

    fig.frames = [go.Frame(
        name=s.name, data=frame_traces(s), traces=list(range(n_dynamic)),
        layout=dict(title=dict(text=head + s.title), annotations=[_text_panel(s, rec, namer)],
                    meta=meta(s)))
        for s in steps]
    play = dict(frame=dict(duration=frame_ms, redraw=True), fromcurrent=True,
                transition=dict(duration=0), mode="immediate")
    jump = dict(frame=dict(duration=0, redraw=True), transition=dict(duration=0),
                mode="immediate")
    labels = ["root" if s.level == 0 else f"d={s.level}" if s.phase == "draft" else s.phase
              for s in steps]
    depth = max(p[1] for p in pos.values())
    fig_height = height if height is not None else int(340 + 95 * (depth + 1))
    fig.update_layout(
        title=dict(text=head + steps[0].title, x=0.01, y=1.0 - 18 / fig_height,
                   yref="container", yanchor="top", font=dict(size=14)),
        annotations=[_text_panel(steps[0], rec, namer)], meta=meta(steps[0]),
        template="plotly_white",
        width=width if width is not None else int(min(max(420 + 60 * lay.n_leaves, 900), 7000)),
        height=fig_height,
        margin=dict(l=50, r=40, t=_TOP, b=40),
        xaxis=dict(visible=False, range=[-1, max(lay.n_leaves, 2) + 0.3]),
        yaxis=dict(range=[depth + 0.75, -0.5], tickmode="array", tickvals=list(range(depth + 1)),
                   ticktext=[f"d={d}" for d in range(depth + 1)], zeroline=False,
                   showgrid=False),
        legend=dict(orientation="h", yanchor="top", y=-0.02, xanchor="left", x=0.0,
                    font=dict(size=10)),
        hovermode="closest", dragmode="pan",
        # the controls sit between the title and the text (the legend is under the tree, as in
        # the static view, and its height is not known here)
        updatemenus=[dict(type="buttons", direction="left", x=0.0, y=1.0, xanchor="left",
                          yanchor="bottom", pad=dict(b=38, r=10), showactive=False, buttons=[
                              dict(label="▶ play", method="animate", args=[None, play]),
                              dict(label="❚❚ pause", method="animate",
                                   args=[[None], dict(jump, frame=dict(duration=0,
                                                                       redraw=False))])])],
        sliders=[dict(active=0, x=0.22, len=0.78, y=1.0, yanchor="bottom", pad=dict(b=30, t=0),
                      currentvalue=dict(prefix="step: ", font=dict(size=12)),
                      steps=[dict(label=lab, method="animate", args=[[s.name], jump])
                             for lab, s in zip(labels, steps)])],
    )
    return fig


# --- static frames, slides, images ---------------------------------------------------------

def frame_figures(fig: go.Figure) -> list[go.Figure]:
    """One static figure per frame of an animated figure: the frame's data over the figure's
    data (by the frame's ``traces`` indices) and its layout over the figure's layout, without
    the play buttons and the slider. A figure without frames gives ``[fig]``."""
    if not fig.frames:
        return [go.Figure(fig)]
    base = fig.to_plotly_json()
    base_layout = dict(base["layout"])
    controls = base_layout.pop("sliders", []) + base_layout.pop("updatemenus", [])
    margin = base_layout.get("margin") or {}
    if any((c.get("y") or 0) >= 1 for c in controls) and margin.get("t", 0) > _CONTROLS:
        # the controls sat between the title and the plot: close the gap they leave
        base_layout["margin"] = dict(margin, t=margin["t"] - _CONTROLS)
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


def _merge(base: dict, update: dict) -> dict:
    """What plotly.js does with a frame: objects merge key by key, anything else (arrays
    included) is replaced."""
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


_SLIDES_CSS = """
body { font-family: sans-serif; margin: 0; color: #222; }
.dt-bar { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd;
  padding: 8px 16px; display: flex; gap: 12px; align-items: center; z-index: 10; }
.dt-bar button { font-size: 15px; padding: 4px 14px; }
.dt-slide { display: none; padding: 8px 16px; }
.dt-slide.dt-current { display: block; }
.dt-slide h2 { font-size: 18px; margin: 6px 0; }
.dt-hint { color: #777; font-size: 12px; }
"""

_SLIDES_JS = """
(function () {
  var slides = document.querySelectorAll('.dt-slide');
  var counter = document.getElementById('dt-counter');
  var cur = 0;
  function show(k) {
    cur = Math.max(0, Math.min(slides.length - 1, k));
    for (var i = 0; i < slides.length; i++) {
      slides[i].classList.toggle('dt-current', i === cur);
    }
    counter.textContent = (cur + 1) + ' / ' + slides.length;
    var div = slides[cur].querySelector('.plotly-graph-div');
    if (div && window.Plotly) { window.Plotly.Plots.resize(div); }
    if (location.hash !== '#' + slides[cur].id) { history.replaceState(null, '', '#' + slides[cur].id); }
  }
  document.getElementById('dt-prev').onclick = function () { show(cur - 1); };
  document.getElementById('dt-next').onclick = function () { show(cur + 1); };
  document.getElementById('dt-first').onclick = function () { show(0); };
  document.addEventListener('keydown', function (e) {
    if (['ArrowRight', 'PageDown', ' ', 'Enter'].indexOf(e.key) >= 0) { show(cur + 1); e.preventDefault(); }
    else if (['ArrowLeft', 'PageUp', 'Backspace'].indexOf(e.key) >= 0) { show(cur - 1); e.preventDefault(); }
    else if (e.key === 'Home') { show(0); } else if (e.key === 'End') { show(slides.length - 1); }
  });
  var start = 0;
  for (var i = 0; i < slides.length; i++) { if ('#' + slides[i].id === location.hash) { start = i; } }
  show(start);
})();
"""


def slides_html(fig: go.Figure, *, title: str | None = None) -> str:
    """One offline HTML document with one slide per frame of ``fig`` (see :func:`export_slides`)."""
    figs = frame_figures(fig)
    page_title = title or "DynaTree · step by step"
    slides = []
    for k, (f, fr) in enumerate(zip(figs, fig.frames or [None] * len(figs))):
        meta = (f.layout.meta if isinstance(f.layout.meta, dict) else {}) or {}
        phase = str(meta.get("phase", "") or (fr.name if fr is not None else ""))
        name = fr.name if fr is not None else f"slide {k + 1}"
        heading = f"{k + 1}. {name}"
        div = figure_html(f, f"dt-slide-fig-{k}", include_plotlyjs=(k == 0))
        slides.append(f"<section class='dt-slide' id='slide-{k + 1}' "
                      f"data-phase='{html.escape(phase, quote=True)}' "
                      f"data-name='{html.escape(name, quote=True)}'>"
                      f"<h2>{html.escape(heading)}</h2>{div}</section>")
    head = html.escape(page_title)
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{head}</title><style>{_SLIDES_CSS}</style></head><body>"
            "<div class='dt-bar'><button id='dt-first' title='first slide (Home)'>⏮</button>"
            "<button id='dt-prev' title='previous (←)'>◀ prev</button>"
            "<span id='dt-counter'></span>"
            "<button id='dt-next' title='next (→, space)'>next ▶</button>"
            f"<b>{head}</b><span class='dt-hint'>← / → or space to step · works offline</span>"
            "</div>" + "".join(slides) + f"<script>{_SLIDES_JS}</script></body></html>\n")


def export_slides(source: Trace | IterationRecord | str | go.Figure, iteration: int = 0,
                  path: str | os.PathLike = "dynatree_slides.html", *, tokenizer: Any = None,
                  title: str | None = None, **animate_kwargs: Any) -> Path:
    """Write ONE self-contained offline HTML file with one slide per step of :func:`animate`
    (draft levels, verify, select, commit): plotly.js is inlined (no CDN), ← / → / space or the
    buttons step through, ``#slide-k`` in the address opens slide k. ``source`` may also be an
    animated figure (e.g. :func:`dynatree_viz.race`); then ``iteration`` is ignored."""
    if isinstance(source, go.Figure):
        fig = source
    else:
        fig = animate(source, iteration, tokenizer=tokenizer, **animate_kwargs)
        if title is None:
            rec, trace = _record(source, iteration)
            title = f"Iteration {rec.index} step by step" + (
                f" · {trace.method}" if trace is not None else "")
    path = Path(path)
    path.write_text(slides_html(fig, title=title), encoding="utf-8")
    return path


def export_frames(fig: go.Figure, dir: str | os.PathLike, fmt: str = "png", *,
                  scale: float = 1.0) -> list[Path]:
    """One image per frame of an animated figure (``000_draft_d=0.png`` …) in ``dir``, via
    :func:`dynatree_viz.save_image` (kaleido >= 1 and a Chrome/Chromium). Raises
    :class:`ImageExportUnavailable` naming what is missing, before writing anything.
    GIF is not offered (it would need Pillow, which this project does not depend on): assemble
    the PNGs with e.g. ``ffmpeg -framerate 1 -i %03d_*.png out.gif`` or use the slides."""
    fmt = fmt.lower().lstrip(".")
    if fmt not in ("png", "svg", "pdf", "jpg", "jpeg", "webp"):
        raise ValueError(f"fmt must be one of png, svg, pdf, jpg, webp; got {fmt!r}"
                         + (" (GIF needs Pillow, not a dependency: export PNG frames and "
                            "assemble them with ffmpeg)" if fmt == "gif" else ""))
    require_image_export()
    out_dir = Path(dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [fr.name for fr in fig.frames] or ["figure"]
    figs = frame_figures(fig)
    paths = [out_dir / ("{:03d}_{}.{}".format(k, "".join(
        c if c.isalnum() or c in "=-." else "_" for c in str(name)), fmt))
        for k, name in enumerate(names)]
    try:  # one browser session for every frame (plotly >= 6.1), else one image at a time
        import plotly.io as pio

        write_images = getattr(pio, "write_images", None)
        if write_images is None:
            raise AttributeError("write_images")
        write_images(figs, paths, format=fmt, scale=scale,
                     width=[f.layout.width for f in figs], height=[f.layout.height for f in figs])
    except AttributeError:
        for f, p in zip(figs, paths):
            save_image(f, p, format=fmt, scale=scale)
    except Exception as e:  # kaleido reports a missing/broken browser in many ways
        raise ImageExportUnavailable(f"frame export failed: {type(e).__name__}: {e}") from e
    return paths


__all__ = ["AnimationStep", "PHASES", "TARGET_CHOICES", "TEXT_PANEL", "animate",
           "animation_steps", "export_frames", "export_slides", "frame_figures", "slides_html"]
