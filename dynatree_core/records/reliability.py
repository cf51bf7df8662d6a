"""How well the draft's probabilities predict acceptance, per tree depth, from saved records (torch-free).

Every tree policy treats a draft probability as a chance of acceptance (DynaTree's c(u) against
τ_h / τ_l, EAGLE-2's path probability p(u), cost-aware DynaTree's s_d p(u)); :func:`calibration`
measures one kind of them (:data:`KINDS`) against what the target did: reliability bins, the
expected calibration error and the per-depth scale s_d.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Iterable, Mapping, Sequence

from dynatree_core.policy.checks import int_at_least
from dynatree_core.records.trace import IterationRecord, Trace

__all__ = ["KINDS", "ReliabilityBin", "DepthCalibration", "Calibration", "calibration"]

#: the predictions :func:`calibration` can measure:
#:
#: * ``"confidence"``: every node u fed to the draft (``topk_tokens`` not None); predicted
#:   c(u) = exp(topk_logps[u][0]), observed: topk_tokens[u][0] == target_argmax[u]; depth d(u), 0 at the root;
#: * ``"conditional"``: every drafted node u >= 1; predicted q_D(z_u | π(u)) = exp(logps[u]),
#:   observed: z_u == target_argmax[π(u)];
#: * ``"path"``: every drafted node u >= 1; predicted p(u) = exp(cum_logps[u]), observed: u is on the
#:   accepted path. Per depth, s_d = Σ observed / Σ predicted makes s_d p(u) an unbiased estimate of
#:   acceptance there (what the cost-aware rule reads).
#:
#: Per group (a depth, or all), ECE = Σ_bins (count_b / count) |mean predicted_b − observed rate_b|; a node
#: whose target choice is unknown (``target_argmax`` shorter than the tree, or None there) is skipped.
KINDS: tuple[str, ...] = ("confidence", "conditional", "path")


@dataclass
class ReliabilityBin:
    """Predictions whose value falls in [lo, hi) (the last bin includes 1): their count, mean
    predicted probability and observed acceptance rate (None when the bin is empty)."""

    lo: float
    hi: float
    count: int
    mean_predicted: float | None
    observed_rate: float | None


@dataclass
class DepthCalibration:
    """Calibration of the predictions at one depth (``depth`` = -1: all depths pooled).

    ``scale`` s_d = Σ observed / Σ predicted (None if Σ predicted = 0); ``ece`` and the means are
    None for an empty group.
    """

    depth: int
    count: int
    mean_predicted: float | None
    observed_rate: float | None
    ece: float | None
    scale: float | None
    bins: list[ReliabilityBin] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DepthCalibration":
        _check_mapping("depth calibration", d)
        bins = [ReliabilityBin(lo=_float("lo", b["lo"]), hi=_float("hi", b["hi"]),
                               count=int_at_least("count", b["count"], 0),
                               mean_predicted=_opt_float("mean_predicted", b["mean_predicted"]),
                               observed_rate=_opt_float("observed_rate", b["observed_rate"]))
                for b in d["bins"]]
        return cls(depth=int_at_least("depth", d["depth"], -1), count=int_at_least("count", d["count"], 0),
                   mean_predicted=_opt_float("mean_predicted", d["mean_predicted"]),
                   observed_rate=_opt_float("observed_rate", d["observed_rate"]),
                   ece=_opt_float("ece", d["ece"]), scale=_opt_float("scale", d["scale"]), bins=bins)


@dataclass
class Calibration:
    """A reliability diagram per depth, plus all depths pooled (``overall``, depth -1).

    ``depths`` lists only the depths that hold predictions, in increasing order.
    """

    kind: str
    n_bins: int
    depths: list[DepthCalibration]
    overall: DepthCalibration

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Calibration":
        """Inverse of :meth:`to_dict` (KeyError for a missing field, TypeError/ValueError for a bad one)."""
        _check_mapping("d", d)
        kind = d["kind"]
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return cls(kind=kind, n_bins=int_at_least("n_bins", d["n_bins"], 1),
                   depths=[DepthCalibration.from_dict(x) for x in d["depths"]],
                   overall=DepthCalibration.from_dict(d["overall"]))

    def depth(self, depth: int) -> DepthCalibration | None:
        """The calibration at ``depth`` (None if no prediction sits there)."""
        return next((dc for dc in self.depths if dc.depth == depth), None)


# --- measuring ----------------------------------------------------------------------------
def calibration(source: Any, kind: str = "confidence", bins: int = 10,
                max_depth: int | None = None) -> Calibration:
    """Reliability of the draft's ``kind`` predictions in ``source``, per depth.

    ``source``: a Trace, an IterationRecord, or a list (possibly nested) of either.
    ``kind``: one of :data:`KINDS`. ``bins``: equal-width bins of [0, 1] (int >= 1).
    ``max_depth``: deeper predictions are merged into this depth (int >= 0; None: no merging).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n_bins = int_at_least("bins", bins, 1)
    if max_depth is not None:
        max_depth = int_at_least("max_depth", max_depth, 0)
    by_depth: dict[int, list[tuple[float, bool]]] = {}
    for r, rec in enumerate(_records(source)):
        for depth, pred, obs in _predictions(rec, kind, r):
            if max_depth is not None:
                depth = min(depth, max_depth)
            by_depth.setdefault(depth, []).append((pred, obs))
    pooled = [x for d in sorted(by_depth) for x in by_depth[d]]
    return Calibration(kind=kind, n_bins=n_bins,
                       depths=[_group(d, by_depth[d], n_bins) for d in sorted(by_depth)],
                       overall=_group(-1, pooled, n_bins))


def _records(source: Any) -> Iterable[IterationRecord]:
    """Every record in ``source`` (Trace / IterationRecord / nested lists of them), in order."""
    if isinstance(source, IterationRecord):
        yield source
    elif isinstance(source, Trace):
        yield from source.iterations
    elif isinstance(source, (list, tuple)):
        for item in source:
            yield from _records(item)
    else:
        raise TypeError("source must be a Trace, an IterationRecord or a list of them, got "
                        f"{type(source).__name__}")


def _predictions(rec: IterationRecord, kind: str, r: int) -> Iterable[tuple[int, float, bool]]:
    """(depth, predicted probability, observed) for every prediction of ``kind`` in one record."""
    tree, argmax = rec.tree, rec.target_argmax

    def target(i: int) -> int | None:  # the target's greedy token after node i, if known
        return argmax[i] if 0 <= i < len(argmax) else None

    if kind == "confidence":
        for u in range(len(tree)):
            tk = tree.topk_tokens[u]
            choice = target(u)
            if tk is None or not tk or choice is None:
                continue
            yield tree.depths[u], _prob(tree.topk_logps[u][0], r, u), int(tk[0]) == int(choice)
    elif kind == "conditional":
        for u in range(1, len(tree)):
            choice = target(tree.parents[u])
            if choice is None:
                continue
            yield tree.depths[u], _prob(tree.logps[u], r, u), int(tree.tokens[u]) == int(choice)
    else:  # "path": acceptance is read off the record itself, so no node is ever skipped
        accepted = set(rec.accepted_path)
        for u in range(1, len(tree)):
            yield tree.depths[u], _prob(tree.cum_logps[u], r, u), u in accepted


def _prob(logp: float, r: int, u: int) -> float:
    lp = float(logp)
    if math.isnan(lp) or lp > 1e-6:  # a log-prob above 0 (beyond float rounding) is corrupt data
        raise ValueError(f"source: record {r}, node {u} has log-prob {logp!r}; log-probs must be <= 0")
    return min(math.exp(lp), 1.0)


def _group(depth: int, preds: Sequence[tuple[float, bool]], n_bins: int) -> DepthCalibration:
    """Bins, means, ECE and scale of one group of (predicted, observed) pairs."""
    # per bin: predicted values and observed count; math.fsum makes every mean exactly rounded,
    # so the numbers do not depend on the order of the records (or on how depths were merged)
    predicted: list[list[float]] = [[] for _ in range(n_bins)]
    observed = [0] * n_bins
    for p, obs in preds:
        k = min(int(p * n_bins), n_bins - 1)  # p = 1 goes to the last bin
        predicted[k].append(p)
        observed[k] += int(obs)
    bins = [ReliabilityBin(lo=k / n_bins, hi=(k + 1) / n_bins, count=len(ps),
                           mean_predicted=math.fsum(ps) / len(ps) if ps else None,
                           observed_rate=observed[k] / len(ps) if ps else None)
            for k, ps in enumerate(predicted)]
    count = len(preds)
    if not count:
        return DepthCalibration(depth=depth, count=0, mean_predicted=None, observed_rate=None, ece=None,
                                scale=None, bins=bins)
    total_pred = math.fsum(p for p, _ in preds)
    total_obs = sum(int(o) for _, o in preds)
    ece = math.fsum(b.count / count * abs(b.mean_predicted - b.observed_rate) for b in bins if b.count)
    return DepthCalibration(depth=depth, count=count, mean_predicted=total_pred / count,
                            observed_rate=total_obs / count, ece=ece,
                            scale=total_obs / total_pred if total_pred > 0 else None, bins=bins)


# --- validation helpers -------------------------------------------------------------------
def _opt_float(name: str, value: object) -> float | None:
    return None if value is None else _float(name, value)


def _float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _check_mapping(name: str, d: object) -> None:
    if not isinstance(d, Mapping):
        raise TypeError(f"{name} must be a mapping (Calibration.to_dict()), got {type(d).__name__}")
