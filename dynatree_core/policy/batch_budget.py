"""A node budget shared by a batch: how wide the batch's verify is, and whether it drafts at all.

Speculation and batching spend the same spare compute: a verify forward over B rows padded to W
tokens costs c(B, W) (:class:`BatchCost`, measured), and it grows with B·W, while AR's cost per
token falls with B. So per batch iteration :class:`BatchBudget` picks the padded width

    W* = argmax_W  (B + s · Σ_b Σ_{u ∈ top_{W-1}(b)} p(u)) / (c(B, W) + L · d(B) + o(B))

(on the static runtime W ranges over its buckets: the padding costs what a node does, so the rows fill it)
where row b keeps its W - 1 most probable nodes (p(u): the draft's path probability; the most
probable nodes of a tree include every ancestor of each, so the kept set is a tree), s scales p(u)
to the acceptance measured so far in the run, L is the draft levels that ran and d(B) the cost of
one, and o(B) what an iteration costs besides its forwards (selection, bookkeeping, per row), measured in
the run as the drafting iterations' wall time less their forwards. c and d are the calibration's
(:class:`BatchCost`: short random prefixes, two-token levels) times the ratio the run measures at that B
(its context, trees and catch-ups; the nearest B's until it has its own). W* = 1 is AR, priced by its
measured steps once one ran.

Whether an iteration drafts at all is decided by what the run measured: the committed tokens per
second of its drafting iterations and of its AR steps at the same B (every overhead included, which
c and d leave out), once each side has :data:`MIN_SAMPLES` iterations (until then a drafting
iteration is followed by an AR step: one iteration's rate swings with its acceptance). When AR steps
are faster the batch sits out (an AR step for every row, no draft forward) and probes speculation
with one drafting iteration after 1, 2, 4, ... iterations, or after as many as keep the probes' loss
within :data:`PROBE_SHARE` of the batch's time where that is more (:data:`MAX_SKIP` at most; a probe
faster than AR's rate starts the back-off over). A probe that falls due is put off where the model prices the
best drafting iteration at under :data:`PROBE_GATE` of AR's measured rate, at most :data:`GATED_PROBES` times in
a row; before both are measured, the model's rate against AR's decides. Each B waits and backs off on its own:
when rows leave (a fixed batch's tail), the wait decided for the old B ends and the new B resumes its back-off.

How deep a drafting iteration grows is chosen before its levels run (they cost d(B) each whatever W
wins): L* = argmax_L (B + B · Σ_{j ≤ L} a_j) / (c(B, W_L) + L · d(B) + o(B)), where a_j is the measured
share of rows whose accepted path reached depth j when level j ran, and W_L the padded width of the
trees verified, counting their nodes down to depth L. Until :data:`MIN_SAMPLES` drafting iterations
are measured at a B, and on every :data:`EXPLORE_DEPTH`-th, the rows grow as deep as their rules
allow (the deeper levels' a_j are measured there); an exploring iteration's rate is not the policy's, so it
does not enter the drafting rate that decides whether to draft.

What a row's token is worth depends on what the batch is for (:attr:`BatchBudget.objective`). A fixed batch
(nothing refills a finished row) runs until its last row is done, and an AR step of B rows costs c(B, 1) = f + B·r:
a share f paid once per iteration and a share r per row (from the calibrated c(1, 1) and c(B, 1)). A token brings
its row's finish an iteration's worth closer: that saves the row's own r in every later iteration, and the batch's
f if the row is the one that finishes last. So under ``"finish"`` (the default; :meth:`BatchBudget.weights`)

    w_b ∝ r + f · q_b,   normalised to Σ_b w_b = B,

where q_b is the chance that row b finishes last: with g_b = R_max - R_b the tokens row b is ahead of the row
with the most left, q_b ∝ erfc(g_b / (2 σ √N)), the chance that the rows' progress over the N = R_max / ℓ̄
iterations left puts row b behind that row again (ℓ̄ and σ: the mean and spread of a row's committed tokens per
iteration, measured in the run; two rows' progress over N iterations differs by about σ√(2N)). Every sum over the
rows above weighs row b by w_b: its nodes' p(u) in W*, its committed tokens in the measured rates, its reach in
a_j. With the rows level every w_b is 1 and a token is a token; where the rows drift apart and f dominates (this
CPU: f ≈ 45 ms, r ≈ 2.4 ms), W, L and whether to draft at all are chosen for the rows that decide when the batch
is done (the rows ahead still fill the padded width W). ``"rate"`` counts every token alike: what a server that
refills finished rows wants. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: the most AR iterations between two probes of speculation (a probe at a B where speculation loses
#: costs about one AR step: every 64 iterations, about 1.5%)
MAX_SKIP = 64
#: the share of a batch's time its probes may lose where speculation is measured to lose: a probe loses
#: t_d · (1 - r_spec / r_AR) against AR steps for the same tokens (t_d: a drafting iteration's seconds),
#: so the next probe waits at least that over PROBE_SHARE · t_AR iterations (at B = 8 on the CPU a
#: probe costs about two AR steps more, and doubling from 1 spent six of them in the first 64 iterations)
PROBE_SHARE = 0.03
#: iterations each side (drafting, AR) needs at a B before their measured rates decide
MIN_SAMPLES = 4
#: a probe that falls due is put off where the model's best drafting rate (:meth:`BatchBudget.levels`'s, from the
#: depths measured at that B and the run's own forward costs) is below this share of AR's measured rate: a clear
#: loss (at B = 16 on WikiText-2 one probe cost a run 5-20%) ...
PROBE_GATE = 0.8
#: ... at most this many times in a row: acceptance moves with the text, and only a probe measures it
GATED_PROBES = 3
#: the weight a side's earlier iterations keep at each new one: the sums forget slowly (acceptance
#: changes with the text and the rows), about the last ten iterations of each side
FORGET = 0.9
#: s's prior, in predicted tokens at s = 1: one unlucky iteration (nothing accepted) moves s, it
#: does not zero it (a zero s makes no width pay, and the budget would verify the root alone)
SCALE_PRIOR = 4.0
#: every this many drafting iterations at a B one grows as deep as the rows' rules allow: the levels a
#: depth cap leaves out are measured again (acceptance moves with the text)
EXPLORE_DEPTH = 8
#: what a budget serves: the time until every row of a fixed batch is done, or committed tokens per second
OBJECTIVES = ("finish", "rate")


def check_objective(objective: str) -> None:
    """``objective`` is one of :data:`OBJECTIVES` (else a ValueError naming it)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


@dataclass(frozen=True)
class BatchCost:
    """c(B, w) and d(B), measured on one device for one pair (:mod:`dynatree_core.engine.batch_calibrate`).

    ``rows[i]`` is a measured batch size B_i; ``verify_s[i][w - 1]`` the seconds of one target
    forward over B_i rows of w tokens each (after a prefix); ``draft_s[i]`` one draft level over
    B_i rows. Batch sizes between the measured ones interpolate linearly; widths past the measured
    ones extrapolate from the last two."""

    rows: tuple[int, ...]
    verify_s: tuple[tuple[float, ...], ...]
    draft_s: tuple[float, ...]
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if not self.rows or list(self.rows) != sorted(set(self.rows)) or self.rows[0] < 1:
            raise ValueError(f"rows must be increasing batch sizes >= 1, got {list(self.rows)}")
        if len(self.verify_s) != len(self.rows) or len(self.draft_s) != len(self.rows):
            raise ValueError("verify_s and draft_s need one entry per measured batch size")
        for curve in self.verify_s:
            if not curve or any(not math.isfinite(x) or x <= 0 for x in curve):
                raise ValueError(f"verify_s must hold positive seconds per width, got {list(curve)[:8]}")
        if any(not math.isfinite(x) or x < 0 for x in self.draft_s):
            raise ValueError(f"draft_s must be seconds >= 0, got {list(self.draft_s)}")

    def verify(self, rows: int, width: int) -> float:
        """c(B, w): one target forward over ``rows`` rows padded to ``width`` tokens."""
        return self._by_rows(rows, lambda i: _at(self.verify_s[i], width))

    def draft(self, rows: int) -> float:
        """d(B): one draft level over ``rows`` rows."""
        return self._by_rows(rows, lambda i: self.draft_s[i])

    def _by_rows(self, rows: int, value: Any) -> float:
        rs = self.rows
        if rows <= rs[0]:
            return value(0)
        for i in range(1, len(rs)):
            if rows <= rs[i]:
                f = (rows - rs[i - 1]) / (rs[i] - rs[i - 1])
                return (1 - f) * value(i - 1) + f * value(i)
        if len(rs) == 1:
            return value(0) * rows / rs[0]
        slope = (value(len(rs) - 1) - value(len(rs) - 2)) / (rs[-1] - rs[-2])
        return value(len(rs) - 1) + slope * (rows - rs[-1])

    def to_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows), "verify_s": [list(v) for v in self.verify_s],
                "draft_s": list(self.draft_s), "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BatchCost":
        return cls(tuple(d["rows"]), tuple(tuple(v) for v in d["verify_s"]), tuple(d["draft_s"]),
                   dict(d.get("meta", {})))


def _nearest(scales: Mapping[int, float], rows: int) -> float:
    """The scale measured at ``rows`` rows, or at the nearest B measured (the context is the run's at every B),
    or 1 before any."""
    if not scales:
        return 1.0
    return scales[min(scales, key=lambda b: (abs(b - rows), b))]


def _follow(scales: dict[int, float], rows: int, ratio: float) -> None:
    """A running mean of measured / calibrated at ``rows`` rows (the first measurement sets it)."""
    if math.isfinite(ratio) and ratio > 0:
        old = scales.get(rows)
        scales[rows] = ratio if old is None else 0.8 * old + 0.2 * ratio


def _at(curve: Sequence[float], width: int) -> float:
    if width <= len(curve):
        return curve[max(width, 1) - 1]
    if len(curve) == 1:
        return curve[0] * width
    return curve[-1] + (curve[-1] - curve[-2]) * (width - len(curve))


@dataclass
class BatchChoice:
    """One iteration's choice: the padded width W (1: AR), each row's kept node count and the
    expected committed tokens per second of W and of AR."""

    width: int
    keep: list[int]
    rate: float
    ar_rate: float
    predicted: float  # Σ of the kept nodes' scaled p(u): the accepted tokens expected
    #: Σ of the kept nodes' p(u) as the draft gave them (what s is measured against: :meth:`BatchBudget.observe`)
    mass: float = 0.0


@dataclass
class BatchBudget:
    """The batch's shared node budget (see the module docstring); state carried across iterations."""

    cost: BatchCost
    #: choose the depth before the levels run (:meth:`levels`); False: the rows' rules alone decide it
    choose_depth: bool = True
    #: what the budget serves (:data:`OBJECTIVES`): ``"finish"``, the time until every row of a fixed batch is done
    #: (a row's tokens weighed by what they save: its own share of each later iteration and, by its chance of
    #: finishing last, the batch's; :meth:`weights`); ``"rate"``, every token alike
    objective: str = "finish"
    #: the verify widths the batch's runtime pads to (the static runtime's buckets; None: any width). The
    #: padding costs as much as real nodes, so W is chosen among them and the rows fill it
    buckets: tuple[int, ...] | None = None
    #: s: measured accepted tokens over predicted Σ p(u), a running ratio from a prior of 1 (take p(u)
    #: at its word) worth :data:`SCALE_PRIOR` predicted tokens
    scale: float = 1.0
    #: AR iterations to run before the next probe, and the next skip's length
    skip: int = 0
    backoff: int = 1
    #: the B the wait (``skip``, the probe after it) and the back-off belong to; when rows leave, the wait ends and
    #: the back-off is kept for that B (:attr:`backoffs`) while the new B resumes its own (:meth:`drafts`)
    at_rows: int = 0
    backoffs: dict[int, int] = field(default_factory=dict)
    #: measured (committed tokens, seconds, iterations) by (B, drafted), summed over the iterations
    #: (the older ones weighted down by :data:`FORGET`): one iteration's rate swings with its
    #: acceptance, the sums settle
    spent: dict[tuple[int, bool], tuple[float, float, int]] = field(default_factory=dict)
    #: seconds an iteration takes by (B, drafted): a running mean (what a probe costs against an AR step)
    iteration_s: dict[tuple[int, bool], float] = field(default_factory=dict)
    #: o(B): seconds an iteration of B rows costs besides c(B, W) and its levels (a running mean)
    overhead: dict[int, float] = field(default_factory=dict)
    #: by B: the run's measured forward seconds over the calibration's, of a verify (c) and of a draft level (d),
    #: running means. The calibration timed short random prefixes and two-token levels; a run's context, trees and
    #: catch-ups cost more (WikiText-2, prompts up to 800 tokens, B = 8: a verify 1.5x c(B, W), a level's forward
    #: 2.6x d(B))
    verify_scale: dict[int, float] = field(default_factory=dict)
    draft_scale: dict[int, float] = field(default_factory=dict)
    _probe: bool = False  # the back-off is over: the next iteration drafts, to measure speculation again
    _won: bool = False  # a drafting iteration beat AR's rate since the last sit-out
    _exploring: bool = False  # this drafting iteration grows as deep as the rules allow (:meth:`levels`)
    _gated: int = 0  # probes put off in a row (:data:`PROBE_GATE`)
    _predicted: float = 0.0
    _accepted: float = 0.0
    #: by B, by depth j: (rows for which level j ran, rows whose accepted path reached depth j, the padded
    #: widths of the trees verified counting nodes down to depth j, iterations), summed with :data:`FORGET`
    reach: dict[int, dict[int, tuple[float, float, float, float]]] = field(default_factory=dict)
    #: drafting iterations whose depths were measured, and depth choices made, by B
    measured: dict[int, int] = field(default_factory=dict)
    _chosen: dict[int, int] = field(default_factory=dict)
    #: a row's committed tokens per iteration: (rows, Σ tokens, Σ tokens²) over every iteration's rows, summed
    #: with :data:`FORGET` (ℓ̄ and σ of :meth:`weights`)
    progress: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        check_objective(self.objective)

    def weights(self, remaining: Sequence[int]) -> list[float]:
        """w_b for rows with ``remaining[b]`` tokens still to commit (see the module docstring), normalised to
        sum to the rows: r + f · q_b, all 1 under ``"rate"``, with the rows level, or before any progress is
        measured."""
        rows = len(remaining)
        last = self.last_chances(remaining)
        if last is None:
            return [1.0] * rows
        c1, cb = self.verify_cost(1, 1), self.verify_cost(rows, 1)
        row = max(0.0, (cb - c1) / (rows - 1))  # r: a row's share of an AR step
        w = [row + max(0.0, c1 - row) * q for q in last]  # f = c(1, 1) - r: the batch's fixed share
        return [rows * x / sum(w) for x in w]

    def last_chances(self, remaining: Sequence[int]) -> list[float] | None:
        """q_b: the chance that row b, with ``remaining[b]`` tokens to commit, finishes last (summing to 1; see the
        module docstring); None where every row's is alike (under ``"rate"``, with the rows level, or before any
        progress is measured)."""
        last = max(remaining, default=0)
        gaps = [last - r for r in remaining]
        n, total, squares = self.progress
        if self.objective == "rate" or not any(gaps) or n <= 0:
            return None
        mean = total / n
        spread = 2 * math.sqrt(max(0.0, squares / n - mean * mean) * last / max(mean, 1.0))
        behind = [1.0 if g == 0 else math.erfc(g / spread) if spread > 0 else 0.0 for g in gaps]
        return [x / sum(behind) for x in behind]

    def drafts(self, rows: int) -> bool:
        """Whether this iteration of ``rows`` rows drafts (False: an AR step for every row, no draft
        forward): the faster of the two as measured at this B, AR probed first, speculation probed
        again after each back-off (:meth:`_at`: each B waits and backs off on its own)."""
        self._at(rows)
        if self.skip > 0:
            self.skip -= 1
            return False
        if self._probe:
            self._probe = False
            if self._gated < GATED_PROBES and self._clear_loss(rows):
                self._gated += 1
                self._sit_out(rows)  # put off: the next wait doubles as if the probe had lost
                return False
            self._gated = 0
            return True
        ar, spec = self.rate(rows, False, MIN_SAMPLES), self.rate(rows, True, MIN_SAMPLES)
        if ar is not None and spec is not None and ar > spec:
            self._sit_out(rows)
            return False
        return True

    def _at(self, rows: int) -> None:
        """The batch has ``rows`` rows now. Where that is a new B (rows left), the wait decided at the old one ends:
        it priced speculation there (in a fixed batch's tail, a back-off decided for the full batch had kept the last
        rows on AR steps where speculation pays). The old B keeps its back-off, and this B resumes its own."""
        if rows == self.at_rows:
            return
        if self.at_rows:
            self.backoffs[self.at_rows] = self.backoff
        self.skip, self._probe, self._gated, self.backoff = 0, False, 0, self.backoffs.get(rows, 1)
        self.at_rows = rows

    def verify_cost(self, rows: int, width: int) -> float:
        """c(B, w) as this run measures it: the calibration's, times the verify scale measured nearest B."""
        return self.cost.verify(rows, width) * _nearest(self.verify_scale, rows)

    def draft_cost(self, rows: int) -> float:
        """d(B) as this run measures it: the calibration's, times the level scale measured nearest B."""
        return self.cost.draft(rows) * _nearest(self.draft_scale, rows)

    def observe_forwards(self, rows: int, width: int, levels: int, verify_s: float, draft_s: float) -> None:
        """One iteration's measured forwards: its verify of ``rows`` rows padded to ``width`` took ``verify_s``
        seconds, its ``levels`` draft levels (0: it sat out) ``draft_s``; the scales follow their ratio to the
        calibration's c(B, W) and L·d(B). The rest of the iteration (trees, selection, commit) is o(B)'s."""
        _follow(self.verify_scale, rows, verify_s / self.cost.verify(rows, width))
        if levels > 0 and self.cost.draft(rows) > 0:
            _follow(self.draft_scale, rows, draft_s / (levels * self.cost.draft(rows)))

    def observe_time(self, rows: int, drafted: bool, committed: float | Sequence[int], seconds: float,
                     forwards_s: float | None = None, weights: Sequence[float] | None = None) -> None:
        """One iteration's committed tokens (each row's: they enter ℓ̄ and σ, and count ``weights[b]`` each; or
        their count) and wall seconds (every overhead included); ``forwards_s``: the seconds in its forwards
        (:meth:`observe_forwards`; None: not measured, o(B) learns nothing)."""
        if not isinstance(committed, (int, float)):
            per_row = list(committed)
            n, total, squares = self.progress
            self.progress = (FORGET * n + len(per_row), FORGET * total + sum(per_row),
                             FORGET * squares + sum(c * c for c in per_row))
            committed = sum(per_row) if weights is None else sum(x * c for x, c in zip(weights, per_row))
        if seconds <= 0:
            return
        if drafted and forwards_s is not None:  # o(B): the rest of the iteration
            rest = max(0.0, seconds - forwards_s)
            old = self.overhead.get(rows)
            self.overhead[rows] = rest if old is None else 0.8 * old + 0.2 * rest
        explored, self._exploring = drafted and self._exploring, False
        if not explored:  # an exploring iteration measures the deep levels, it is not the policy's rate
            old_s = self.iteration_s.get((rows, drafted))
            self.iteration_s[(rows, drafted)] = seconds if old_s is None else 0.8 * old_s + 0.2 * seconds
            tokens, total, count = self.spent.get((rows, drafted), (0, 0.0, 0))
            self.spent[(rows, drafted)] = (FORGET * tokens + committed, FORGET * total + seconds, count + 1)
        ar = self.rate(rows, False, MIN_SAMPLES)
        if drafted and ar is not None and committed / seconds > ar:
            self.backoff = 1  # this drafting iteration beat AR: probe again soon, the sums may be stale
            self._won = True  # (so they do not price the next wait either)
        if drafted and self.spent.get((rows, False), (0, 0.0, 0))[2] < MIN_SAMPLES:
            self._at(rows)
            self.skip = max(self.skip, 1)  # measure an AR step at this B: the other side of the comparison

    def levels(self, rows: int, d_max: int) -> int:
        """L*: the draft levels a drafting iteration of ``rows`` rows may grow, at most ``d_max`` (the
        rows' rules may stop sooner); ``d_max`` itself while exploring (see the module docstring) or
        where the deepest level measured is the best (deeper ones are not known to lose)."""
        self._exploring = self.choose_depth and self._explores(rows)
        if not self.choose_depth or self._exploring or d_max <= 1:
            return d_max
        rates = self._depth_rates(rows, d_max)
        best, best_rate = d_max, -1.0
        for depth, rate in rates:
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = depth, rate
        return d_max if not rates or best == rates[-1][0] else best

    def _depth_rates(self, rows: int, d_max: int | None = None) -> list[tuple[int, float]]:
        """(L, the modelled rate of a drafting iteration of L levels) for each depth measured at ``rows`` rows
        (at most ``d_max``), shallowest first."""
        reach = self.reach.get(rows, {})
        out, gain, fixed = [], 0.0, self.overhead.get(rows, 0.0)
        for depth in sorted(j for j in reach if d_max is None or j <= d_max):
            ran, reached, widths, count = reach[depth]
            gain += rows * reached / ran
            width = max(1, round(widths / count))
            cost = self.verify_cost(rows, self._padded(width)) + depth * self.draft_cost(rows) + fixed
            out.append((depth, (rows + gain) / cost))
        return out

    def _clear_loss(self, rows: int) -> bool:
        """Whether the model's best drafting rate at ``rows`` rows is below :data:`PROBE_GATE` of AR's measured
        one (False until both are known)."""
        ar, rates = self.rate(rows, False, MIN_SAMPLES), self._depth_rates(rows)
        return ar is not None and bool(rates) and max(r for _, r in rates) < PROBE_GATE * ar

    def _explores(self, rows: int) -> bool:
        """Whether this drafting iteration grows as deep as the rules allow: too few measured, or its turn."""
        turn = self._chosen.get(rows, 0)
        self._chosen[rows] = turn + 1
        return self.measured.get(rows, 0) < MIN_SAMPLES or turn % EXPLORE_DEPTH == EXPLORE_DEPTH - 1

    def observe_depths(self, levels: int, accepted: Sequence[int], depths: Sequence[Sequence[int]],
                       weights: Sequence[float] | None = None) -> None:
        """A drafting iteration's depths: ``levels`` draft levels ran, row b's accepted path reached depth
        ``accepted[b]`` and its verified nodes (the root's excluded) sit at ``depths[b]``; row b counts
        ``weights[b]`` (:meth:`weights`, summing to the rows; None: 1)."""
        rows = len(accepted)
        w_rows = [1.0] * rows if weights is None else list(weights)
        reach = self.reach.setdefault(rows, {})
        for depth in range(1, levels + 1):
            ran, reached, widths, count = reach.get(depth, (0.0, 0.0, 0.0, 0.0))
            widest = 1 + max((sum(1 for d in ds if d <= depth) for ds in depths), default=0)
            got = sum(x for x, a in zip(w_rows, accepted) if a >= depth)
            reach[depth] = (FORGET * ran + rows, FORGET * reached + got, FORGET * widths + widest, FORGET * count + 1)
        self.measured[rows] = self.measured.get(rows, 0) + 1

    def rate(self, rows: int, drafted: bool, least: int = 1) -> float | None:
        """Measured committed tokens per second at ``rows`` rows, drafting or not (None: fewer than
        ``least`` iterations measured)."""
        got = self.spent.get((rows, drafted))
        return got[0] / got[1] if got is not None and got[2] >= least else None

    def _sit_out(self, rows: int) -> None:
        """Sit this iteration out and ``backoff`` - 1 more, then probe; the next back-off doubles. Where
        both sides are measured, the wait is at least what keeps a probe's loss within
        :data:`PROBE_SHARE` of the time between probes (:meth:`probe_wait`), unless a drafting
        iteration beat AR since the last sit-out (the sums that price the wait may be stale)."""
        self._at(rows)  # (a wait is this B's)
        wait = min(max(self.backoff, 1 if self._won else self.probe_wait(rows)), MAX_SKIP)
        self.skip, self.backoff, self._probe, self._won = wait - 1, min(2 * self.backoff, MAX_SKIP), True, False

    def probe_wait(self, rows: int) -> int:
        """The fewest iterations between probes at ``rows`` rows for their loss to stay within
        :data:`PROBE_SHARE`: t_d · (1 - r_spec / r_AR) / (PROBE_SHARE · t_AR); 1 until both sides are
        measured or where speculation does not lose."""
        ar, spec = self.rate(rows, False, MIN_SAMPLES), self.rate(rows, True, MIN_SAMPLES)
        t_ar, t_d = self.iteration_s.get((rows, False)), self.iteration_s.get((rows, True))
        if ar is None or spec is None or t_ar is None or t_d is None or spec >= ar or t_ar <= 0:
            return 1
        return max(1, math.ceil(t_d * (1 - spec / ar) / (PROBE_SHARE * t_ar)))

    def choose(self, probs: Sequence[Sequence[float]], levels: int,
               weights: Sequence[float] | None = None) -> BatchChoice:
        """W* for rows whose drafted nodes have path probabilities ``probs[b]`` (any order) after
        ``levels`` draft levels (their cost is spent whichever W wins: it prices every W alike), row b's
        nodes weighed by ``weights[b]`` (:meth:`weights`; None: 1); sets the skip before the next probe when
        no W >= 2 beats AR with those levels paid."""
        rows = len(probs)
        w_rows = [1.0] * rows if weights is None else list(weights)
        ranked = [sorted(p, reverse=True) for p in probs]
        widest = max((len(p) for p in ranked), default=0) + 1
        spent = levels * self.draft_cost(rows) + self.overhead.get(rows, 0.0)
        ar = self._ar_rate(rows)
        best = BatchChoice(1, [0] * rows, rows / (self.verify_cost(rows, 1) + spent), ar, 0.0)
        speculating = 0.0
        for w in self._widths(widest):
            keep = [min(len(p), w - 1) for p in ranked]
            mass = [sum(p[:k]) for p, k in zip(ranked, keep)]
            gain = self.scale * sum(x * m for x, m in zip(w_rows, mass))
            rate = (rows + gain) / (self.verify_cost(rows, w) + spent)
            speculating = max(speculating, rate)
            if rate > best.rate:
                best = BatchChoice(w, keep, rate, ar, self.scale * sum(mass), sum(mass))
        measured = self.rate(rows, True, MIN_SAMPLES), self.rate(rows, False, MIN_SAMPLES)
        if None in measured and speculating <= ar:  # by the model AR wins with the levels paid: sit out
            self._sit_out(rows)
            self.skip += 1
        elif None not in measured and measured[0] >= measured[1]:
            self.backoff = 1
        return best

    def _ar_rate(self, rows: int) -> float:
        """AR's tokens per second at ``rows`` rows: its steps' measured seconds, or c(B, 1) + o(B) until one ran
        (o(B) is a drafting iteration's rest; an AR step's, measured, is in its seconds)."""
        t_ar = self.iteration_s.get((rows, False))
        return rows / (t_ar if t_ar else self.verify_cost(rows, 1) + self.overhead.get(rows, 0.0))

    def _padded(self, width: int) -> int:
        """The width a verify of ``width`` tokens runs at: the next bucket (or itself)."""
        if self.buckets is None:
            return width
        return next((b for b in sorted(self.buckets) if b >= width), width)

    def _widths(self, widest: int) -> list[int]:
        """The candidate W >= 2 for trees of up to ``widest`` tokens (root included): every width, or
        the buckets up to the first that holds the widest tree (the rows fill a bucket's padding)."""
        if widest < 2:
            return []
        if self.buckets is None:
            return list(range(2, widest + 1))
        return sorted({self._padded(w) for w in range(2, widest + 1)})

    def observe(self, predicted: float, accepted: int) -> None:
        """What the kept nodes' p(u) predicted (Σ p(u) as drafted, unscaled: :attr:`BatchChoice.mass`) and what
        was accepted: s follows their ratio."""
        self._predicted += predicted
        self._accepted += accepted
        self.scale = min(4.0, max(0.05, (self._accepted + SCALE_PRIOR) / (self._predicted + SCALE_PRIOR)))
