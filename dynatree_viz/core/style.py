"""Shared visual vocabulary: colours, marker symbols and token-text formatting.

Every view draws from here so that a stop reason or "accepted" looks the same in the tree, the
mask, the text view and the report.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass

from dynatree_viz.core.labels import text_lines

#: marker symbol per stop reason (why a node did not grow children); "unrecorded" is the
#: explorer's own reason for a replayed node whose draft distribution was never computed.
STOP_SYMBOLS: dict[str, str] = {
    "expanded": "circle",
    "tau": "triangle-down",
    "rho_stop": "square",
    "depth_gate": "diamond",
    "d_max": "hexagon",
    # a filled plus: the budget is full. An octagon (a stop sign) read as the expanded circle at legend
    # size, and an "x" as a second rejection cross
    "n_max": "cross",
    "static": "pentagon",
    "top_k": "star-triangle-down",
    "cost": "bowtie",
    "rerank": "hourglass",
    "lookup_tail": "triangle-right",
    "batch": "square-x",
    "unrecorded": "circle-open-dot",
}

STOP_DESCRIPTIONS: dict[str, str] = {
    "expanded": "expanded (has children)",
    "tau": "children pruned by τ",
    "rho_stop": "early stop: p(u) < ρ_stop",
    "depth_gate": "depth gate: d ≥ D0 and p(u) < ρ_deep",
    "d_max": "hard depth limit D_max",
    "n_max": "node budget N_max exhausted",
    "static": "Sequoia: the static tree has no children here",
    "top_k": "EAGLE-2: not among the level's top-k by p(u)",
    "cost": "cost-aware: a child could not raise expected tokens/s",
    "rerank": "EAGLE-2: children dropped by the final top-N rerank",
    "lookup_tail": "prompt-lookup tail: copied below a drafted leaf, no draft forward",
    "batch": "batch budget: children dropped to fit the batch's shared verify width",
    "unrecorded": "replay: draft never ran here",
}


def stop_label(reason: str) -> str:
    """``reason (description)``, the reason said once ("expanded (has children)", not
    "expanded (expanded (has children))"): legend entries and hover text share it."""
    desc = STOP_DESCRIPTIONS.get(reason, "")
    if not desc or desc == reason:
        return reason
    return desc if desc.startswith(reason) else f"{reason} ({desc})"

#: The Okabe-Ito palette (Okabe & Ito 2008): eight colours that stay distinct under the common
#: colour-vision deficiencies. Every categorical colour below is taken from it.
OKABE_ITO: dict[str, str] = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}

# Accepted vs rejected is blue vs vermillion (the pair that survives deuteranopia and protanopia,
# unlike green vs red), and the tree view also marks them with different shapes (ring vs cross),
# so the distinction never rests on colour alone.
ACCEPTED = OKABE_ITO["blue"]          # accepted path: nodes' outline, ring and edges
REJECTED = OKABE_ITO["vermillion"]    # verified child the target disagreed with
BONUS = OKABE_ITO["orange"]           # the target's bonus token (a star; underlined in text)
#: one colour per quantity that a per-iteration chart draws (views/timeline.py, and 04's history chart
#: through it), so a quantity wears the same colour in every panel and every notebook; draft time and
#: drafted nodes (a time and a count) differ
QUANTITY_COLORS: dict[str, str] = {
    "a_r": "#4d4d4d", "ā": OKABE_ITO["bluish_green"], "D0": OKABE_ITO["reddish_purple"], "τ_h": OKABE_ITO["orange"],
    "drafted nodes": OKABE_ITO["sky_blue"], "depth": OKABE_ITO["black"],
    "draft time": OKABE_ITO["yellow"], "verify time": OKABE_ITO["vermillion"], "commit time": "#999999",
}
EDGE = "#b0b0b0"
GHOST = "#a8a8a8"      # pruned candidates (never verified)
PREFIX = "#6a6a6a"
HIGHLIGHT = OKABE_ITO["reddish_purple"]  # node picked by the user (linked tree -> mask highlight)

#: marker symbols that mark the verification outcome on top of the stop-reason symbol
ACCEPTED_MARK = "circle-open"     # a ring around the node
REJECTED_MARK = "x-thin-open"     # a cross through the node

#: one colour per benchmarked method / ablation label, used by every comparison figure so that
#: "dynatree" is the same blue in every panel and every notebook
METHOD_COLORS: dict[str, str] = {
    "ar": OKABE_ITO["black"],
    "linear": OKABE_ITO["sky_blue"],
    "fixed_tree": OKABE_ITO["orange"],
    "dynatree": OKABE_ITO["blue"],
    "dynatree:fixed_backbone": OKABE_ITO["reddish_purple"],
    "dynatree:breadth_depth": OKABE_ITO["bluish_green"],
    "dynatree:full": OKABE_ITO["vermillion"],
    # the tree policies compared in one run (``dynatree bench --methods policies``): each its own
    # colour within that set (the ablation variants are never in it)
    "dynatree:paper": OKABE_ITO["blue"],
    "dynatree:cpu": OKABE_ITO["bluish_green"],
    "dynatree:gpu": OKABE_ITO["bluish_green"],  # drawn with the GPU's set, where dynatree:cpu is not
    "dynatree:cost": OKABE_ITO["vermillion"],
    "eagle2": OKABE_ITO["reddish_purple"],
    "sequoia": OKABE_ITO["yellow"],
}
#: the label sets drawn together (a bench with the ablation; a bench of the tree policies): the
#: eight Okabe-Ito colours cannot give thirteen labels their own, but every set gets distinct ones
COLOR_GROUPS: tuple[tuple[str, ...], ...] = (
    ("ar", "linear", "fixed_tree", "dynatree", "dynatree:fixed_backbone", "dynatree:breadth_depth",
     "dynatree:full"),
    ("ar", "linear", "fixed_tree", "dynatree:paper", "dynatree:cpu", "dynatree:cost", "eagle2", "sequoia"),
    ("ar", "linear", "fixed_tree", "dynatree:paper", "dynatree:gpu", "dynatree:cost", "eagle2", "sequoia"),
)
#: line dashes / bar patterns that tell apart variants of one method family (``linear:k=3``)
VARIANT_DASHES: tuple[str, ...] = ("dash", "dot", "dashdot", "longdash", "longdashdot")
VARIANT_PATTERNS: tuple[str, ...] = ("/", "x", ".", "\\", "+")
#: colours for groups that are not methods (e.g. sweep series), assigned in sorted order
SERIES_COLORS: tuple[str, ...] = tuple(OKABE_ITO[k] for k in (
    "blue", "orange", "bluish_green", "vermillion", "reddish_purple", "sky_blue", "black",
    "yellow"))

#: continuous colour scale for c(u) / p(u): both live in [0, 1]
COLORSCALE = "Viridis"

#: pale backgrounds cycled per iteration in the text view (readable under black text)
ITERATION_COLORS: tuple[str, ...] = (
    "#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc", "#fff2cc",
    "#d0e0e3", "#f4cccc", "#d9d2e9", "#e6f4c7", "#f9e0c7",
)

#: what a tree's fill colour can show (:func:`dynatree_viz.tree_figure`'s ``color_by``); ``"auto"``
#: (:data:`COLOR_BY_AUTO`) picks ``"target_p"`` for a tree decoded under sampling, else ``"confidence"``
COLOR_BY_CHOICES: tuple[str, ...] = ("confidence", "cum_prob", "target_p")
COLOR_BY_AUTO = "auto"
COLOR_BY_TITLES: dict[str, str] = {"confidence": "c(u)", "cum_prob": "p(u)", "target_p": "p(token)"}
#: colour-bar captions: what the fill colour means
COLOR_BY_CAPTIONS: dict[str, str] = {
    "confidence": "fill = c(u)<br>draft confidence",
    "cum_prob": "fill = p(u)<br>path probability",
    # under sampling the target's p is the warped one: that is what verification compares against
    "target_p": "fill = p(token)<br>target's p of the<br>node's token at<br>its parent (warped<br>"
                "by T, top-k, top-p<br>under sampling)",
}

#: a white halo behind label text (CSS text-shadow), so that a label stays readable where an edge
#: or a neighbour's marker runs under it
LABEL_HALO = "0 0 2px #fff, 0 0 3px #fff, 0 0 4px #fff"


def visible_token(text: str) -> str:
    """Exact token text with every whitespace character made visible (for hover text)."""
    return (text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍"))


def is_punctuation(text: str) -> bool:
    """Whether a token is punctuation or symbols only ("," or '."'): a glyph too small to find
    on a plot unless it is bracketed."""
    s = text.strip()
    return bool(s) and all(unicodedata.category(c)[0] in "PS" for c in s)


def short_label(text: str, max_chars: int = 8) -> str:
    """A compact node label: the leading space of word tokens dropped (it is on almost every
    token and only adds noise), whitespace-only tokens made visible, punctuation and a bare space
    bracketed (‹,› and ‹␣›: a lone comma or ␣, a low thin glyph, is invisible at plot size), long
    tokens truncated."""
    s = text.strip(" ") or text
    bracket = is_punctuation(s) or (s != "" and set(s) == {" "})
    s = visible_token(s) if s.strip() == "" or "\n" in s or "\t" in s else s
    if bracket:
        s = f"‹{s}›"
    return s if len(s) <= max_chars else s[: max_chars - 1] + "…"


#: px added to the font of a bracketed punctuation label: ‹,› or ‹."› at a tree's 11 px was a smudge
PUNCTUATION_BOOST = 4


def label_font_size(label: str, size: float) -> float:
    """The font size of a node label made by :func:`short_label`: ``size``, or for a bracketed
    punctuation label (its first line ‹…›) :data:`PUNCTUATION_BOOST` px more."""
    first = text_lines(label)[0]
    return size + PUNCTUATION_BOOST if len(first) > 2 and first[0] == "‹" and first[-1] in "›…" else size


def plot_symbol(symbol: str) -> str:
    """'τ_h' -> 'τ<sub>h</sub>': the paper's subscripts as plot text, not a code-like underscore."""
    return re.sub(r"_(\w+)", r"<sub>\1</sub>", symbol)


def hover_escape(text: str) -> str:
    """Escape a token for plotly hover text (which interprets a subset of HTML)."""
    return html.escape(visible_token(text), quote=False)


def iteration_color(index: int) -> str:
    return ITERATION_COLORS[index % len(ITERATION_COLORS)]


@dataclass(frozen=True)
class MethodStyle:
    """How one method/configuration label is drawn: colour, plus a dash / bar pattern that sets
    apart variants of a family (``""`` = solid)."""

    color: str
    dash: str = "solid"
    pattern: str = ""


#: what a legend calls a method (the bench's ids, ``fixed_tree``, are for the command line)
METHOD_TITLES: dict[str, str] = {"ar": "AR", "linear": "linear", "fixed_tree": "fixed tree", "dynatree": "DynaTree",
                                 "eagle2": "EAGLE-2", "sequoia": "Sequoia"}


def method_title(label: str) -> str:
    """A method label in words: ``"fixed_tree"`` -> ``"fixed tree"``, ``"dynatree:fixed_backbone"`` ->
    ``"DynaTree (fixed backbone)"``, ``"linear:k=3"`` -> ``"linear (k=3)"``; any other label as it is."""
    label = str(label)
    family, sep, suffix = label.partition(":")
    if family not in METHOD_TITLES:
        return label
    return METHOD_TITLES[family] + (f" ({suffix.replace('_', ' ')})" if sep else "")


def method_style(label: str) -> MethodStyle | None:
    """The fixed style of a method label (``"dynatree"``, ``"linear:k=3"``, ...), or None for a
    label that is not a method. A variant ``family:suffix`` of a known family keeps the family's
    colour and gets a dash/pattern chosen from the suffix (its number if it has one), so the
    choice does not depend on which other labels share the figure."""
    label = str(label)
    if label in METHOD_COLORS:
        return MethodStyle(METHOD_COLORS[label])
    family, sep, suffix = label.partition(":")
    if not sep or family not in METHOD_COLORS:
        return None
    digits = re.findall(r"\d+", suffix)
    k = int(digits[0]) if digits else sum(suffix.encode())  # stable across runs (no hash())
    return MethodStyle(METHOD_COLORS[family], VARIANT_DASHES[k % len(VARIANT_DASHES)],
                       VARIANT_PATTERNS[k % len(VARIANT_PATTERNS)])


def group_styles(groups: list) -> dict:
    """{group: MethodStyle} for a figure's groups: methods get their fixed style, any other
    group a colour from :data:`SERIES_COLORS` by its sorted position."""
    out = {g: method_style(g) for g in groups}
    others = sorted((g for g, st in out.items() if st is None), key=str)
    for k, g in enumerate(others):
        out[g] = MethodStyle(SERIES_COLORS[k % len(SERIES_COLORS)])
    return out


def wrap(text: str, chars: int) -> str:
    """``text`` broken at spaces into lines of at most ``chars`` characters, joined by ``<br>`` (plotly
    titles and annotations do not wrap by themselves: a long one is cut at the figure's edge, mid-word)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > chars:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "<br>".join(lines + [line])
