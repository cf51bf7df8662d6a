"""Shared visual vocabulary: colours, marker symbols and token-text formatting.

Every view draws from here so that a stop reason or "accepted" looks the same in the tree, the
mask, the text view and the report.
"""

from __future__ import annotations

import html

#: marker symbol per stop reason (why a node did not grow children); "unrecorded" is the
#: explorer's own reason for a replayed node whose draft distribution was never computed.
STOP_SYMBOLS: dict[str, str] = {
    "expanded": "circle",
    "tau": "triangle-down",
    "rho_stop": "square",
    "depth_gate": "diamond",
    "d_max": "hexagon",
    "n_max": "x",
    "unrecorded": "circle-open-dot",
}

STOP_DESCRIPTIONS: dict[str, str] = {
    "expanded": "expanded (has children)",
    "tau": "children pruned by τ",
    "rho_stop": "early stop: p(u) < ρ_stop",
    "depth_gate": "depth gate: d ≥ D0 and p(u) < ρ_deep",
    "d_max": "hard depth limit D_max",
    "n_max": "node budget N_max exhausted",
    "unrecorded": "replay: draft never ran here",
}

ACCEPTED = "#1a9850"   # accepted path: nodes' outline and edges
REJECTED = "#d73027"   # verified child the target disagreed with
BONUS = "#f1a340"      # the target's bonus token
EDGE = "#b0b0b0"
GHOST = "#c8c8c8"      # pruned candidates (never verified)
PREFIX = "#6a6a6a"
HIGHLIGHT = "#7b3294"  # row picked by the user (linked tree → mask highlight)

#: continuous colour scale for c(u) / p(u): both live in [0, 1]
COLORSCALE = "Viridis"

#: pale backgrounds cycled per iteration in the text view (readable under black text)
ITERATION_COLORS: tuple[str, ...] = (
    "#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc", "#fff2cc",
    "#d0e0e3", "#f4cccc", "#d9d2e9", "#e6f4c7", "#f9e0c7",
)

COLOR_BY_CHOICES: tuple[str, ...] = ("confidence", "cum_prob")
COLOR_BY_TITLES: dict[str, str] = {"confidence": "c(u)", "cum_prob": "p(u)"}


def visible_token(text: str) -> str:
    """Exact token text with every whitespace character made visible (for hover text)."""
    return (text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍"))


def short_label(text: str, max_chars: int = 8) -> str:
    """A compact node label: the leading space of word tokens dropped (it is on almost every
    token and only adds noise), whitespace-only tokens made visible, long tokens truncated."""
    s = text.strip(" ") or text
    s = visible_token(s) if s.strip() == "" or "\n" in s or "\t" in s else s
    return s if len(s) <= max_chars else s[: max_chars - 1] + "…"


def hover_escape(text: str) -> str:
    """Escape a token for plotly hover text (which interprets a subset of HTML)."""
    return html.escape(visible_token(text), quote=False)


def iteration_color(index: int) -> str:
    return ITERATION_COLORS[index % len(ITERATION_COLORS)]
