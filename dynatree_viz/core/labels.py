"""Where a tree picture's labels go, so that none sits under a marker or an edge.

Every label hangs *below* its point, in a block that starts clear of the biggest mark drawn at a
node (the accepted ring, the rejected cross) and, where neighbours' labels would overlap, drops to
a second row. Every edge then starts below the lowest label of its parent's level (it is drawn
from that point towards the child, on the straight line parent → child), so no edge crosses a
label either. The picture's scale follows: one x unit (one leaf of the tidy layout) is wide enough
for two rows of the widest label, one depth level tall enough for its labels and a visible edge.

Sizes are in screen pixels. Plotly places a ``bottom center`` text ``r / 0.8 + 1`` px below a
point whose marker has radius ``r`` (plotly.js ``textPointPosition``), so a label trace pushes its
text down with transparent markers of :func:`marker_size_for_offset`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Hashable, Sequence

#: plotly.js's line pitch of multi-line text, in font sizes
LINE_SPACING = 1.3
#: px between neighbouring labels, and between a label and the mark above it
GAP = 4.0
#: the biggest mark drawn at a node: the accepted ring / rejected cross (size 26, line 3)
MARK_RADIUS = 26 / 2 + 3 / 2
#: an edge keeps at least this many px between its parent's labels and its child's mark
MIN_EDGE_PX = 24.0
_TAG = re.compile(r"<[^>]+>")


def _char_width(c: str) -> float:
    """A generous estimate of one character's advance, in font sizes (sans-serif)."""
    if unicodedata.east_asian_width(c) in ("W", "F"):
        return 1.05
    if c in "il.,:;'|!`ɪ":
        return 0.34
    if c.isupper() or c in "mwMW@%…→␣↵⇥":
        return 0.86
    return 0.62


def text_lines(text: str) -> list[str]:
    """The lines of a plotly text (``<br>`` breaks, tags dropped)."""
    return [_TAG.sub("", line) for line in re.split(r"<br\s*/?>", text or "")]


def text_width(text: str, size: float) -> float:
    """Estimated px width of a plotly text at font ``size`` (its widest line)."""
    return max(sum(_char_width(c) for c in line) for line in text_lines(text)) * size


def text_height(text: str, size: float) -> float:
    """px height of a plotly text: the first line's glyphs, then one pitch per further line."""
    return size * (1.05 + LINE_SPACING * (len(text_lines(text)) - 1))


def marker_size_for_offset(offset_px: float) -> float:
    """The (transparent) marker size that puts a ``bottom center`` text's top ``offset_px`` below
    its point: plotly offsets the baseline by ``0.75 * font + r / 0.8 + 1`` (``r`` = radius)."""
    return max(2 * 0.8 * (offset_px - 1), 0.0)


@dataclass
class Label:
    """One label: ``key`` names its point, ``x`` in layout units, ``level`` its depth row."""

    key: Hashable
    x: float
    level: int
    width: float
    height: float


@dataclass
class LabelPlan:
    """Where the labels hang: ``offset[key]`` px from the point down to the label's top;
    ``bottom[level]`` px from the level's centre to the bottom of its lowest label (every edge
    out of that level starts below it); ``unit_px`` / ``level_px`` the scale it needs."""

    offset: dict
    bottom: dict
    unit_px: float
    level_px: float


def unit_for(labels: Sequence[Label], minimum: float = 26.0) -> float:
    """px per x unit so that neighbours alternate between two rows without touching: nodes of a
    level are at least one unit apart, so labels two apart are two units apart."""
    widest = max((lb.width for lb in labels), default=0.0)
    return max(minimum, math.ceil((widest + GAP) / 2))


def plan_labels(labels: Sequence[Label], unit_px: float, clear_px: float = MARK_RADIUS + GAP / 2,
                min_level_px: float = 95.0) -> LabelPlan:
    """Rows per level, greedily left to right: a label takes the first row where it clears the
    previous label by :data:`GAP` (a third row only where the unit is too narrow for two)."""
    by_level: dict[int, list[Label]] = {}
    for lb in labels:
        by_level.setdefault(lb.level, []).append(lb)
    offset: dict = {}
    bottom: dict = {}
    for level, group in by_level.items():
        pitch = max(lb.height for lb in group) + GAP
        ends: list[float] = []  # per row: the right end of its last label (px)
        for lb in sorted(group, key=lambda v: v.x):
            left = lb.x * unit_px - lb.width / 2
            row = next((k for k, end in enumerate(ends) if end + GAP <= left), len(ends))
            if row == len(ends):
                ends.append(0.0)
            ends[row] = left + lb.width
            offset[lb.key] = clear_px + row * pitch
        bottom[level] = clear_px + len(ends) * pitch
    deepest = max(bottom.values(), default=0.0)
    return LabelPlan(offset, bottom, unit_px, max(min_level_px, deepest + MIN_EDGE_PX + MARK_RADIUS))


def clipped_edges(pairs: Sequence[tuple[Hashable, Hashable]], pos: dict, start: dict) -> tuple[list, list]:
    """x / y arrays (``None`` between segments) of edges parent → child that start ``start[level]``
    levels below the parent (on the straight line to the child) and end at the child."""
    xs: list = []
    ys: list = []
    for a, b in pairs:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        t = min(start.get(ya, 0.0), 1.0) if yb > ya else 0.0
        xs += [xa + (xb - xa) * t, xb, None]
        ys += [ya + (yb - ya) * t, yb, None]
    return xs, ys


__all__ = ["GAP", "LINE_SPACING", "Label", "LabelPlan", "MARK_RADIUS", "clipped_edges",
           "marker_size_for_offset", "plan_labels", "text_height", "text_lines", "text_width",
           "unit_for"]
