"""View 4: the generated text, each token coloured by the iteration that committed it.

Background colour = the iteration (cycling palette), a gold underline = the target's bonus token
(plain background = a drafted token the target accepted). Hovering a token shows the rejected
alternatives at its position: the other verified children of the same parent in the tree (for
a bonus token: every verified child of the last accepted node), and candidates pruned there.
The output is plain HTML: put it in ``ipywidgets.HTML`` or save it (``standalone=True``).
"""

from __future__ import annotations

import html
import math

from dynatree_core.trace import IterationRecord, Trace

from . import style
from .tokens import TokenNamer, node_texts

CSS = f"""
.dt-text {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 14px;
  line-height: 1.9; white-space: pre-wrap; word-break: break-word; max-width: 1100px; }}
.dt-text .dt-prompt {{ color: #777; }}
.dt-text .dt-tok {{ border-radius: 3px; padding: 1px 0; }}
.dt-text .dt-bonus {{ border-bottom: 3px solid {style.BONUS}; }}
.dt-text .dt-current {{ outline: 2px solid {style.HIGHLIGHT}; }}
.dt-legend {{ font-family: sans-serif; font-size: 12px; color: #444; margin: 4px 0 8px 0; }}
.dt-legend span {{ margin-right: 14px; }}
"""


def alternatives(rec: IterationRecord, k: int, namer: TokenNamer) -> list[str]:
    """Human-readable rejected alternatives at the position of committed token ``k``."""
    tree = rec.tree
    texts = node_texts(rec, namer)
    is_bonus = k >= rec.accepted_length
    node = None if is_bonus else rec.accepted_path[k]
    parent = (rec.accepted_path[k - 1] if k > 0 else 0) if not is_bonus else (
        rec.accepted_path[-1] if rec.accepted_path else 0)
    out = []
    for j in tree.children(parent):
        if j != node:
            out.append(f"✗ {style.visible_token(texts[j])!r} (draft q={math.exp(tree.logps[j]):.2f})")
    chosen = rec.committed[k] if k < len(rec.committed) else None
    for p in tree.pruned:
        if p.parent == parent:
            note = " ← the target's choice" if p.token == chosen else ""
            out.append(f"· {style.visible_token(namer(p.token))!r} pruned by {p.reason} "
                       f"(q={math.exp(p.logp):.2f}){note}")
    return out


def _token_title(rec: IterationRecord, k: int, text: str, namer: TokenNamer) -> str:
    is_bonus = k >= rec.accepted_length
    kind = "bonus (target's own choice)" if is_bonus else f"drafted, accepted at depth {k + 1}"
    lines = [f"{style.visible_token(text)!r} · iteration {rec.index} · {kind}"]
    alts = alternatives(rec, k, namer)
    lines += (["rejected alternatives:"] + alts) if alts else ["no alternatives were drafted here"]
    return "\n".join(lines)


def text_html(trace: Trace, *, upto: int | None = None, current: int | None = None,
              namer: TokenNamer | None = None, show_prompt: bool = True,
              standalone: bool = False, title: str | None = None) -> str:
    """HTML of the output, optionally only up to iteration position ``upto`` (inclusive), with
    iteration position ``current`` outlined. Every token is a ``<span class="dt-tok">`` with
    ``data-iter`` (iteration index), ``data-kind`` (``drafted`` / ``bonus``) and a ``title``
    tooltip. ``standalone=True`` returns a whole HTML document."""
    namer = namer or TokenNamer.from_trace(trace)
    its = trace.iterations if upto is None else trace.iterations[: upto + 1]
    parts = [f"<style>{CSS}</style>", "<div class='dt-legend'>",
             f"<span><span class='dt-tok' style='background:{style.iteration_color(0)}'>token</span>"
             " drafted &amp; accepted (background = iteration)</span>",
             f"<span><span class='dt-tok dt-bonus' style='background:{style.iteration_color(1)}'>"
             "token</span> bonus from the target</span>",
             "<span>hover a token for the rejected alternatives</span></div>",
             "<div class='dt-text'>"]
    if show_prompt and trace.prompt_text:
        parts.append(f"<span class='dt-prompt'>{html.escape(trace.prompt_text)}</span>")
    for pos, rec in enumerate(its):
        texts = list(rec.committed_texts or [])
        for k, tok in enumerate(rec.committed):
            text = texts[k] if k < len(texts) else namer(tok)
            classes = ["dt-tok"]
            kind = "bonus" if k >= rec.accepted_length else "drafted"
            if kind == "bonus":
                classes.append("dt-bonus")
            if current is not None and pos == current:
                classes.append("dt-current")
            parts.append(
                f"<span class='{' '.join(classes)}' data-iter='{rec.index}' data-kind='{kind}' "
                f"style='background:{style.iteration_color(rec.index)}' "
                f"title='{html.escape(_token_title(rec, k, text, namer), quote=True)}'>"
                f"{html.escape(text)}</span>")
    parts.append("</div>")
    body = "".join(parts)
    if not standalone:
        return body
    head = html.escape(title or f"{trace.method} output")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{head}</title></head>"
            f"<body><h3 style='font-family:sans-serif'>{head}</h3>{body}</body></html>\n")
