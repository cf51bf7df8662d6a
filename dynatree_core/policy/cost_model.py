"""What an iteration costs on the machine at hand: the verify-cost curve c(n) (torch-free).

A cost-aware tree policy needs what one more verified node costs, which depends on the hardware and
the runtime, so the curve is measured, never assumed (nor assumed monotone: see the CPU curves in
docs/bench/2026-11-26-cpu-policies and docs/bench/2026-11-27-linear-kernels). :class:`CostModel`
holds it (seconds of one target forward over n tokens, the root included, after ``prefix_len``
tokens) with the cost of one draft level and what it was measured on;
:mod:`dynatree_core.engine.calibrate` measures and caches one, :meth:`CostModel.fit` fits one to a
trace's timings. Torch-free because traces record it and :mod:`dynatree_viz` draws it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

#: version of the on-disk cost cache format (:mod:`dynatree_core.engine.calibrate`)
COST_SCHEMA_VERSION = "2"  # 2: draft_s priced by a cost-aware run (calibrate.price_cost_aware_levels)


@dataclass(frozen=True)
class CostModel:
    """Measured costs of one iteration's forwards on one device for one model pair.

    ``verify_s[n - 1]`` is c(n): seconds of one target forward over n tokens (the root and n - 1
    drafted nodes) under a tree mask; the largest tree the curve covers is therefore
    ``len(verify_s) - 1`` drafted nodes (:attr:`n_max`). ``draft_s`` is the seconds of one draft
    level as the cost-aware rule builds it: the batched draft forward (its width barely matters
    next to the target's), the top-k and the rule's own bookkeeping
    (:func:`~dynatree_core.engine.calibrate.price_cost_aware_levels`).
    ``sizes`` are the token counts actually timed (the others are interpolated linearly).
    ``iteration_s`` is what every iteration costs besides its model forwards (selection, cache
    commit, bookkeeping: the engine's overhead per AR step); a tree policy adds it to c(n).
    """

    verify_s: tuple[float, ...]
    draft_s: float
    iteration_s: float = 0.0
    device: str = ""
    target: str = ""
    draft: str = ""
    dtype: str = ""
    #: the linear kernel the curve was measured on (:mod:`~dynatree_core.runtime.model.linear_kernels`)
    linear_kernel: str = ""
    #: the runtime whose target forwards the curve times (eager, or a fast path: static, compiled,
    #: graphs, where a tree is padded to its bucket)
    runtime: str = "eager"
    prefix_len: int = 0
    sizes: tuple[int, ...] = ()
    created: str = ""
    #: anything else worth keeping about the measurement (torch version, threads, repeats)
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        v = tuple(float(x) for x in self.verify_s)
        if not v:
            raise ValueError("verify_s must hold c(1), c(2), ...: at least one positive time in seconds")
        if any(not math.isfinite(x) or x <= 0 for x in v):
            raise ValueError(f"verify_s must be positive finite seconds, got {list(v)[:8]}")
        if not (isinstance(self.draft_s, (int, float)) and math.isfinite(self.draft_s) and self.draft_s >= 0):
            raise ValueError(f"draft_s must be finite seconds >= 0, got {self.draft_s}")
        if not (isinstance(self.iteration_s, (int, float)) and math.isfinite(self.iteration_s)
                and self.iteration_s >= 0):
            raise ValueError(f"iteration_s must be finite seconds >= 0, got {self.iteration_s}")
        object.__setattr__(self, "verify_s", v)
        object.__setattr__(self, "draft_s", float(self.draft_s))
        object.__setattr__(self, "iteration_s", float(self.iteration_s))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))

    @property
    def n_max(self) -> int:
        """The largest tree (drafted nodes, root excluded) the curve covers."""
        return len(self.verify_s) - 1

    def verify(self, n: int) -> float:
        """c(n): seconds of verifying n tokens (root included); inf past the measured range."""
        return self.verify_s[n - 1] if 1 <= n <= len(self.verify_s) else math.inf

    def undercut_sizes(self) -> list[int]:
        """The measured sizes n (``sizes``; every n where none are named) that cost more than some
        larger measured size m: c(n) > c(m) for an m > n. Every pair n < m is compared, so a dip
        anywhere on the curve counts; empty means c(n) never falls as n grows."""
        ns = [n for n in (self.sizes or range(1, len(self.verify_s) + 1)) if 1 <= n <= len(self.verify_s)]
        return [n for i, n in enumerate(ns) if any(self.verify(n) > self.verify(m) for m in ns[i + 1:])]

    def iteration_cost(self, n: int, draft_levels: int) -> float:
        """Seconds of one iteration that verifies n tokens (root included) after ``draft_levels``
        draft levels: draft + c(n) + the fixed per-iteration cost; inf past the measured range."""
        return self.draft_s * draft_levels + self.verify(n) + self.iteration_s

    def iteration_curve(self) -> tuple[float, ...]:
        """c(n) + the fixed per-iteration cost, n = 1, 2, ...: what a tree of n - 1 nodes adds to
        an iteration besides its draft levels (what the cost-aware rule is given)."""
        return tuple(c + self.iteration_s for c in self.verify_s)

    def matches(self, device: str, target: str, draft: str, dtype: str, linear_kernel: str = "",
                runtime: str = "eager") -> bool:
        """Whether this curve was measured for this device, pair, dtype, linear kernel and runtime
        (else recalibrate)."""
        return ((self.device, self.target, self.draft, self.dtype, self.linear_kernel, self.runtime)
                == (device, target, draft, dtype, linear_kernel, runtime))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verify_s"], d["sizes"] = list(self.verify_s), list(self.sizes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CostModel":
        known = {k: d[k] for k in ("verify_s", "draft_s", "iteration_s", "device", "target", "draft", "dtype",
                                   "linear_kernel", "runtime", "prefix_len", "sizes", "created", "meta") if k in d}
        return cls(**known)

    @classmethod
    def from_points(cls, points: dict[int, float], draft_s: float, n_tokens: int | None = None,
                    **info: Any) -> "CostModel":
        """A curve over 1..``n_tokens`` tokens from timings at some sizes (linear in between).

        ``points`` maps a token count (root included) to seconds; sizes below the smallest take
        its time, sizes between two points are interpolated, none past the largest is made up."""
        if not points:
            raise ValueError("points: give at least one (tokens, seconds) measurement")
        xs = sorted(points)
        if xs[0] < 1:
            raise ValueError(f"points: token counts must be >= 1, got {xs[0]}")
        top = xs[-1] if n_tokens is None else min(int(n_tokens), xs[-1])
        curve = []
        for n in range(1, top + 1):
            if n <= xs[0]:
                curve.append(points[xs[0]])
                continue
            hi = next(x for x in xs if x >= n)
            lo = max(x for x in xs if x <= n)
            t = points[lo] if hi == lo else points[lo] + (points[hi] - points[lo]) * (n - lo) / (hi - lo)
            curve.append(t)
        return cls(verify_s=tuple(curve), draft_s=draft_s, sizes=tuple(xs), **info)

    @classmethod
    def fit(cls, samples: Iterable[tuple[int, int, Mapping[str, float]]], n_tokens: int | None = None,
            **info: Any) -> "CostModel":
        """A curve fitted to recorded iterations: c(n) = a + b n by least squares (a, b >= 0).

        ``samples`` are ``(tokens, draft_levels, timings)`` per iteration: the tokens verified
        (the root included), the draft levels run and the seconds per phase as a trace records
        them (``"draft"``, ``"verify"``, the rest: ``"commit"`` ...). ``draft_s`` is the draft
        seconds per level, ``iteration_s`` the mean of the other phases; the curve covers
        1..``n_tokens`` tokens (default: the largest tree seen). Iterations without both a draft
        and a verify time are skipped."""
        rows = [(int(n), int(k), t) for n, k, t in samples if "draft" in t and "verify" in t]
        if not rows:
            raise ValueError("samples: no iteration with both a 'draft' and a 'verify' time to fit")
        a, b = _line([n for n, _, _ in rows], [t["verify"] for _, _, t in rows])
        if a + b <= 0:
            raise ValueError("samples: the verify times are all zero; c(n) must be positive seconds")
        levels = sum(max(k, 0) for _, k, _ in rows)
        draft_s = sum(t["draft"] for _, _, t in rows) / levels if levels else 0.0
        rest = [sum(v for k, v in t.items() if k not in ("draft", "verify")) for _, _, t in rows]
        top = max(n for n, _, _ in rows) if n_tokens is None else int(n_tokens)
        if top < 1:
            raise ValueError(f"n_tokens must be >= 1, got {top}")
        info.setdefault("sizes", tuple(sorted({n for n, _, _ in rows if n <= top})))
        info.setdefault("meta", {"source": f"fitted to {len(rows)} recorded iterations: "
                                           f"c(n) = {a * 1e3:.3g} + {b * 1e3:.3g} n ms"})
        return cls(verify_s=tuple(a + b * n for n in range(1, top + 1)), draft_s=draft_s,
                   iteration_s=sum(rest) / len(rest), **info)


def _line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares a + b x with a, b >= 0: a flat mean when b would be negative (or x never
    varies), a line through the origin when a would be."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    if b <= 0:
        return my, 0.0
    if my - b * mx < 0:
        return 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return my - b * mx, b
