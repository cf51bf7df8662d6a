"""Synthetic traces for the dynatree_viz tests (no model, no torch).

``tiny_trace()`` is hand-specified: a draft whose top-k after each token path is a fixed table,
so every node, pruned candidate and stop reason below is known exactly. ``synthetic_trace`` (from
dynatree_viz.synthetic) gives longer, realistic traces. ``assert_labels_clear`` checks that a figure's node labels do not
cover each other or the edges (the views' and the notebooks' tests).
"""

from __future__ import annotations

import math

from dynatree_core.policy.config import DynaTreeConfig, GrowthRule
from dynatree_core.policy.history import HistoryAdapter
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import DraftTree
from dynatree_core.policy.growth import grow_tree
import plotly.graph_objects as go

VOCAB = {0: "<eos>", 1: " the", 2: " cat", 3: " dog", 4: " sat", 5: " ran", 6: " on", 7: " mat",
         8: " a", 9: "\n", 10: " fast"}

#: draft top-3 (token, prob) after each root-to-node token path; the root token is 1 (" the")
DRAFT = {
    (1,): [(2, 0.55), (3, 0.30), (8, 0.10)],        # c = 0.55 -> B_mid = 2 children
    (1, 2): [(4, 0.95), (5, 0.03), (6, 0.02)],      # c = 0.95 -> B_min = 1
    (1, 3): [(5, 0.35), (4, 0.33), (10, 0.32)],     # c = 0.35 -> B_max = 3 (some pruned by tau)
    (1, 2, 4): [(6, 0.9), (9, 0.05), (7, 0.05)],
    (1, 2, 4, 6): [(1, 0.8), (8, 0.15), (7, 0.05)],
}
#: the target's greedy next token after each path (anything else: 7)
TARGET = {(1,): 2, (1, 2): 4, (1, 2, 4): 6, (1, 2, 4, 6): 8, (1, 3): 5}


class FakeTokenizer:
    """Tokenizer-like: ``decode(list[int]) -> str`` (and callable, like a Hugging Face tokenizer,
    where calling encodes: the views must not call it)."""

    def decode(self, ids: list[int]) -> str:
        return "".join(VOCAB[i] for i in ids)

    def __call__(self, text: str):
        raise AssertionError("a view called the tokenizer (encode) instead of .decode")


def rule(**kw) -> GrowthRule:
    base = dict(d0=3, d_max=6, b_min=1, b_mid=2, b_max=3, tau_h=0.9, tau_l=0.4, tau=0.05,
                n_max=64, rho_stop=0.1, rho_deep=0.5, trace_top_k=3)
    base.update(kw)
    return DynaTreeConfig(**base).growth_rule()


def propose(tree: DraftTree, ids: list[int]):
    out = []
    for i in ids:
        table = DRAFT.get(tree.token_path(i), [(7, 0.5), (9, 0.3), (10, 0.2)])
        out.append(([t for t, _ in table], [math.log(p) for _, p in table]))
    return out


def record(index: int = 0, growth: GrowthRule | None = None, prefix_len: int = 4,
           target: dict[tuple[int, ...], int] | None = None) -> IterationRecord:
    """The hand-specified iteration; ``target`` overrides entries of :data:`TARGET`."""
    tree = grow_tree(1, growth or rule(), propose)
    table = {**TARGET, **(target or {})}
    argmax = [table.get(tree.token_path(i), 7) for i in range(len(tree))]
    path, bonus = tree.greedy_path(argmax)
    committed = [tree.tokens[i] for i in path] + [bonus]
    return IterationRecord(
        index=index, prefix_len=prefix_len, tree=tree, target_argmax=argmax,
        accepted_path=path, committed=committed, bonus=bonus,
        position_ids=[prefix_len + d for d in tree.depths],
        target_prob_drafted=[None] + [0.5] * (len(tree) - 1),
        token_texts=[VOCAB[t] for t in tree.tokens], committed_texts=[VOCAB[t] for t in committed],
        history_before={"d0": 3.0, "tau_h": 0.9, "window": [], "window_mean": None,
                        "d0_effective": 3},
        history_after={"d0": 3.1, "tau_h": 0.89, "window": [0.75], "window_mean": 0.75,
                       "d0_effective": 3},
        timings={"draft": 0.01 * (index + 1), "verify": 0.03, "commit": 0.001},
        draft_forwards=tree.draft_calls, target_forwards=1)


def tiny_trace(n: int = 3) -> Trace:
    """``n`` copies of the hand-specified iteration (indices 0..n-1), as one trace."""
    cfg = DynaTreeConfig(d0=3, d_max=6, trace_top_k=3)
    recs = [record(i, prefix_len=4 + 5 * i) for i in range(n)]
    toks = [t for r in recs for t in r.committed]
    return Trace(method="dynatree", config=cfg.to_dict(), target_name="t", draft_name="d",
                 prompt_tokens=[8, 2, 6, 1], prompt_text="a cat on the", eos_token_id=0,
                 max_new_tokens=50, iterations=recs, tokens=toks,
                 text="".join(VOCAB[t] for t in toks))


def adapter_for(cfg: DynaTreeConfig) -> HistoryAdapter:
    return HistoryAdapter(cfg)


def segments(trace) -> list[tuple]:
    """(x0, y0, x1, y1) per None-separated line segment of a lines trace."""
    xs, ys = list(trace.x or []), list(trace.y or [])
    return [(xs[k], ys[k], xs[k + 1], ys[k + 1]) for k in range(0, len(xs), 3)]


def edge_of(seg, points: dict):
    """(parent, child) keys of an edge segment: it ends on the child and starts on the straight
    line from the parent (one level up) towards it, below the parent (under its labels)."""
    x0, y0, x1, y1 = seg
    child = next(k for k, (x, y) in points.items() if (x, y) == (x1, y1))
    for k, (xa, ya) in points.items():
        t = (y0 - ya) / (y1 - ya) if y1 != ya else -1
        if ya == y1 - 1 and 0 <= t < 1 and abs(xa + (x1 - xa) * t - x0) < 1e-9:
            return k, child
    raise AssertionError(f"segment {seg} starts under no point one level above its end")


CHAR = 0.6      # average advance of a sans-serif character, in font sizes


PITCH = 1.3     # plotly.js's line pitch, in font sizes


INVISIBLE = ("rgba(0,0,0,0)", "rgba(0, 0, 0, 0)")


def _per_point(v, n):
    return list(v) if isinstance(v, (list, tuple)) else [v] * n


def _to_px(fig: go.Figure, xaxis: str, yaxis: str):
    """Data → screen px for one pair of axes (plot area from the layout's size and margins)."""
    lay = fig.layout
    m = lay.margin
    pw, ph = lay.width - m.l - m.r, lay.height - m.t - m.b
    xa, ya = lay["xaxis" + xaxis[1:]], lay["yaxis" + yaxis[1:]]
    (xd0, xd1), (yd0, yd1) = xa.domain or (0, 1), ya.domain or (0, 1)
    left, right = m.l + xd0 * pw, m.l + xd1 * pw
    top, bottom = m.t + (1 - yd1) * ph, m.t + (1 - yd0) * ph
    (x0, x1), (y0, y1) = xa.range, ya.range  # y0 is drawn at the bottom, y1 at the top
    return (lambda x: left + (x - x0) / (x1 - x0) * (right - left),
            lambda y: bottom - (y - y0) / (y1 - y0) * (bottom - top))


def _shapes(fig: go.Figure):
    """(label boxes, marker discs, edge segments) in px: boxes (name, text, x0, y0, x1, y1),
    discs (x, y, r), segments (x0, y0, x1, y1, half width)."""
    boxes, discs, segs = [], [], []
    for t in fig.data:
        if t.type != "scatter" or not t.x or t.x[0] is None:  # a batch figure's strip (bars) holds no tree
            continue
        fx, fy = _to_px(fig, t.xaxis or "x", t.yaxis or "y")
        mode, n = t.mode or "", len(t.x)
        if "lines" in mode:
            for k in range(0, n - 1):
                if None not in (t.x[k], t.x[k + 1]):
                    segs.append((fx(t.x[k]), fy(t.y[k]), fx(t.x[k + 1]), fy(t.y[k + 1]),
                                 (t.line.width or 2) / 2))
        sizes = _per_point(t.marker.size if t.marker.size is not None else 6, n)
        if "markers" in mode and t.marker.color not in INVISIBLE:
            widths = _per_point(t.marker.line.width or 0, n)
            discs += [(fx(x), fy(y), s / 2 + w / 2) for x, y, s, w in zip(t.x, t.y, sizes, widths)]
        if "text" in mode and t.text:
            assert t.textposition in ("bottom center", None) or set(t.textposition) == {"bottom center"}, t.name
            fonts = _per_point(t.textfont.size, n)
            for x, y, s, fs, text in zip(t.x, t.y, sizes, fonts, t.text):
                if not text:
                    continue
                lines = text.split("<br>")
                w = max(len(line) for line in lines) * CHAR * fs
                r = s / 2 if "markers" in mode else 0
                y_top = fy(y) + (r / 0.8 + 1 if r else 0)  # plotly.js textPointPosition
                boxes.append((t.name, text, fx(x) - w / 2, y_top, fx(x) + w / 2,
                              y_top + fs * (1 + PITCH * (len(lines) - 1))))
    return boxes, discs, segs


def _disc_hits_box(d, b):
    x, y, r = d
    dx = max(b[2] - x, 0, x - b[4])
    dy = max(b[3] - y, 0, y - b[5])
    return dx * dx + dy * dy < r * r


def _segment_hits_box(sg, b):
    """Liang-Barsky: does the segment meet the box grown by the line's half width?"""
    x0, y0, x1, y1, hw = sg
    lo, hi = 0.0, 1.0
    for p, q in ((x0 - x1, x0 - (b[2] - hw)), (x1 - x0, (b[4] + hw) - x0),
                 (y0 - y1, y0 - (b[3] - hw)), (y1 - y0, (b[5] + hw) - y0)):
        if p == 0:
            if q < 0:
                return False
        else:
            t = q / p
            if p < 0:
                lo = max(lo, t)
            else:
                hi = min(hi, t)
    return lo < hi


def assert_labels_clear(fig: go.Figure, tol: float = 0.5):
    boxes, discs, segs = _shapes(fig)
    assert boxes, "no labels drawn"
    inner = [(n, t, x0 + tol, y0 + tol, x1 - tol, y1 - tol) for n, t, x0, y0, x1, y1 in boxes]
    for b in inner:
        hit = [d for d in discs if _disc_hits_box(d, b)]
        assert not hit, f"label {b[1]!r} ({b[0]}) under a marker at {hit[0]}"
        hit = [s for s in segs if _segment_hits_box(s, b)]
        assert not hit, f"label {b[1]!r} ({b[0]}) under an edge {hit[0]}"
    for i, a in enumerate(inner):
        for b in inner[i + 1:]:
            assert a[4] <= b[2] or b[4] <= a[2] or a[5] <= b[3] or b[5] <= a[3], \
                f"labels {a[1]!r} and {b[1]!r} overlap"
    return boxes
