"""View 4: the generated text, each token coloured by the iteration that committed it.

Background colour = the iteration (cycling palette), an orange underline = the target's bonus
token (no underline = a drafted token the target accepted). Hovering a token shows the rejected
alternatives at its position: the other verified children of the same parent in the tree (for
a bonus token: every verified child of the last accepted node), and candidates pruned there.
The output is plain HTML: put it in ``ipywidgets.HTML`` or save it (``standalone=True``).
Every visual property is also an inline ``style`` attribute, so the view keeps its look where a
front end strips ``<style>`` blocks (an untrusted notebook in JupyterLab).
"""

from __future__ import annotations

import html
import math
from typing import Any

from dynatree_core.records.trace import IterationRecord, Trace

from dynatree_viz.core import style
from dynatree_viz.core.tokens import TokenNamer, node_texts, resolve_namer

#: inline styles (see the module docstring): the bonus underline, the current-iteration outline
BONUS_STYLE = f"border-bottom: 3px solid {style.BONUS};"
CURRENT_STYLE = f"outline: 2px solid {style.HIGHLIGHT};"
#: the bonus legend sample's background: neutral, never one of the iteration colours
LEGEND_SAMPLE_BACKGROUND = "#ffffff"

CSS = f"""
.dt-text {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 14px;
  line-height: 1.9; white-space: pre-wrap; word-break: break-word; max-width: 1100px; }}
.dt-text .dt-prompt {{ color: #777; }}
.dt-text .dt-tok {{ border-radius: 3px; padding: 1px 0; }}
.dt-bonus {{ {BONUS_STYLE} }}
.dt-current {{ {CURRENT_STYLE} }}
.dt-legend {{ font-family: sans-serif; font-size: 12px; color: #444; margin: 4px 0 8px 0; }}
.dt-legend > span {{ margin-right: 14px; }}
"""


#: a pruned candidate's reason as the paper writes the rule
PRUNE_RULES = {"tau": "τ", "n_max": "N_max", "cost": "the cost model"}


def _p_text(cum_logp: float) -> str:
    """p(u) with enough digits to compare with a τ of 0.05 or 0.02 (4 decimals, else 2 significant)."""
    p = math.exp(cum_logp)
    return f"{p:.4f}" if p >= 1e-3 else f"{p:.2g}"


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
            # the rules compare the path probability p(u), not q, with τ: show the value compared
            out.append(f"· {style.visible_token(namer(p.token))!r} pruned by "
                       f"{PRUNE_RULES.get(p.reason, p.reason)} (p(u)={_p_text(p.cum_logp)}, "
                       f"draft q={math.exp(p.logp):.2f}){note}")
    return out


def _token_title(rec: IterationRecord, k: int, text: str, namer: TokenNamer) -> str:
    is_bonus = k >= rec.accepted_length
    kind = "bonus (target's own choice)" if is_bonus else f"drafted, accepted at depth {k + 1}"
    lines = [f"{style.visible_token(text)!r} · iteration {rec.index} · {kind}"]
    alts = alternatives(rec, k, namer)
    lines += (["rejected alternatives:"] + alts) if alts else ["no alternatives were drafted here"]
    return "\n".join(lines)


def legend_html() -> str:
    """The key: background = iteration (a few samples of the cycle), underline = bonus (on a
    neutral background, so the sample is not mistaken for an iteration colour)."""
    swatches = "".join(
        f"<span class='dt-tok' style='background:{style.iteration_color(k)};padding:1px 3px'>"
        f"{k}</span>" for k in range(4))
    return ("<div class='dt-legend' style='font-family:sans-serif;font-size:12px;color:#444'>"
            f"<span style='margin-right:14px'>background = iteration: {swatches} …</span>"
            f"<span style='margin-right:14px'><span class='dt-tok dt-bonus' data-legend='bonus' "
            f"style='background:{LEGEND_SAMPLE_BACKGROUND};{BONUS_STYLE}'>token</span>"
            " underlined = bonus from the target (not drafted)</span>"
            f"<span style='margin-right:14px'><span data-legend='current' "
            f"style='{CURRENT_STYLE}'>token</span> outlined = the current iteration</span>"
            "<span>hover a token for the rejected alternatives</span></div>")


def _token_style(rec_index: int, bonus: bool, current: bool) -> str:
    return (f"background:{style.iteration_color(rec_index)};border-radius:3px;"
            + (BONUS_STYLE if bonus else "") + (CURRENT_STYLE if current else ""))


def text_html(trace: Trace, *, upto: int | None = None, current: int | None = None,
              namer: TokenNamer | None = None, show_prompt: bool = True,
              standalone: bool = False, title: str | None = None,
              tokenizer: Any = None) -> str:
    """HTML of the output, optionally only up to iteration position ``upto`` (inclusive), with
    iteration position ``current`` outlined. Every token is a ``<span class="dt-tok">`` with
    ``data-iter`` (iteration index), ``data-kind`` (``drafted`` / ``bonus``) and a ``title``
    tooltip. ``standalone=True`` returns a whole HTML document; ``tokenizer`` names tokens the
    trace has no text for (rejected alternatives, pruned candidates)."""
    namer = resolve_namer(trace, namer, tokenizer)
    its = trace.iterations if upto is None else trace.iterations[: upto + 1]
    parts = [f"<style>{CSS}</style>", legend_html(),
             "<div class='dt-text' style='font-family:ui-monospace,Menlo,Consolas,monospace;"
             "font-size:14px;line-height:1.9;white-space:pre-wrap;word-break:break-word'>"]
    if show_prompt and trace.prompt_text:
        parts.append(f"<span class='dt-prompt' style='color:#777'>"
                     f"{html.escape(trace.prompt_text)}</span>")
    for pos, rec in enumerate(its):
        texts = list(rec.committed_texts or [])
        is_current = current is not None and pos == current
        for k, tok in enumerate(rec.committed):
            text = texts[k] if k < len(texts) else namer(tok)
            kind = "bonus" if k >= rec.accepted_length else "drafted"
            classes = ["dt-tok"] + (["dt-bonus"] if kind == "bonus" else []) + (
                ["dt-current"] if is_current else [])
            parts.append(
                f"<span class='{' '.join(classes)}' data-iter='{rec.index}' data-kind='{kind}' "
                f"style='{_token_style(rec.index, kind == 'bonus', is_current)}' "
                f"title='{html.escape(_token_title(rec, k, text, namer), quote=True)}'>"
                f"{html.escape(text)}</span>")
    parts.append("</div>")
    body = "".join(parts)
    if not standalone:
        return body
    head = html.escape(title or f"{trace.method} output")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{head}</title></head>"
            f"<body><h3 style='font-family:sans-serif'>{head}</h3>{body}</body></html>\n")
