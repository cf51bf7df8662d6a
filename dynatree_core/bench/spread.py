"""A method's speed read against batched AR's own run-to-run spread (the batch benchmark's A/A control).

Each round of the batch benchmark can run batched AR twice at a B: ``ar``, the reference every ratio is taken
to, and its control ``ar#2``. The control's ratio to ``ar`` is what a method exactly as fast as AR reads in
that run. :func:`against_control` sets a method's ratios against the control's with Welch's t interval on
their logs. Then "not slower than batched AR" is a statement at a confidence level, not a reading of two
min–max ranges. Torch-free.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

#: Student's t at 0.975 for 1 .. 30 degrees of freedom (two-sided 95%); past 30, the normal's 1.96
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
#: what a verdict says: the interval of (method / AR) over (control / AR) lies above 1, below 1, or holds 1
VERDICTS = ("faster", "slower", "within")


def t975(df: float) -> float:
    """Student's t quantile at 0.975 for ``df`` degrees of freedom, rounded down (the wider interval)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    whole = int(math.floor(df))
    return _T975[whole - 1] if whole <= len(_T975) else 1.96


def against_control(ratios: Sequence[float], control: Sequence[float]) -> dict[str, Any] | None:
    """A method's ratios to batched AR (one per round) against the control's (AR's second run, same rounds).

    Returns the estimated speed relative to AR, ``ratio`` = exp(mean log r - mean log c), with its Welch 95%
    interval [``low``, ``high``], the interval's degrees of freedom and the verdict (:data:`VERDICTS`); None
    with fewer than two rounds on either side (no spread to read)."""
    if len(ratios) < 2 or len(control) < 2:
        return None
    if min(ratios) <= 0 or min(control) <= 0:
        raise ValueError("ratios must be > 0")
    lr, lc = [math.log(x) for x in ratios], [math.log(x) for x in control]
    d = statistics.mean(lr) - statistics.mean(lc)
    vr, vc = statistics.variance(lr) / len(lr), statistics.variance(lc) / len(lc)
    se = math.sqrt(vr + vc)
    # Welch-Satterthwaite; where both sides are constant, the pooled count (the interval is a point anyway)
    df = (vr + vc) ** 2 / (vr ** 2 / (len(lr) - 1) + vc ** 2 / (len(lc) - 1)) if se > 0 \
        else float(len(lr) + len(lc) - 2)
    half = t975(max(1.0, df)) * se
    verdict = "faster" if d - half > 0 else "slower" if d + half < 0 else "within"
    return {"ratio": math.exp(d), "low": math.exp(d - half), "high": math.exp(d + half), "df": round(df, 2),
            "verdict": verdict}
