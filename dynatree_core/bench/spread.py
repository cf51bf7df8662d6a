"""A method's speed read against batched AR's own run-to-run spread (the batch benchmark's A/A control).

Each round of the batch benchmark can run batched AR twice at a B: ``ar``, the reference every ratio is taken
to, and its control ``ar#2``. The control's ratio to ``ar`` is what a method exactly as fast as AR reads in
that run. :func:`against_control` reads a method against both AR runs of the same round, paired by round, with
a Student t interval. Then "not slower than batched AR" is a statement at a confidence level, not a reading of
two min–max ranges. Torch-free.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

#: Student's t at 0.975 for 1 .. 30 degrees of freedom (two-sided 95%); past 30, the normal's 1.96
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
#: what a verdict says: the interval of the method's speed over AR's lies above 1, below 1, or holds 1
VERDICTS = ("faster", "slower", "within")


def t975(df: float) -> float:
    """Student's t quantile at 0.975 for ``df`` degrees of freedom, rounded down (the wider interval)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    whole = int(math.floor(df))
    return _T975[whole - 1] if whole <= len(_T975) else 1.96


def against_control(ratios: Sequence[float], control: Sequence[float]) -> dict[str, Any] | None:
    """A method's ratios to batched AR against the control's, one of each per round, in the same order.

    Round i compares the method with both of its AR runs: d_i = log r_i - (log c_i) / 2, the method's log speed
    less the mean of AR's two (r_i = m_i / a_i and c_i = a'_i / a_i: the method's and the control's tok/s over
    AR's; a round's own speed cancels). ``ratio`` = exp(mean d) is the method's speed over AR's, with a 95%
    Student t interval [``low``, ``high``] from the rounds' spread of d (n - 1 degrees of freedom), and the
    verdict (:data:`VERDICTS`). None with fewer than two rounds (no spread to read)."""
    if len(ratios) != len(control):
        raise ValueError(f"ratios and control pair by round: got {len(ratios)} and {len(control)}")
    if len(ratios) < 2:
        return None
    if min(ratios) <= 0 or min(control) <= 0:
        raise ValueError("ratios must be > 0")
    d = [math.log(r) - math.log(c) / 2 for r, c in zip(ratios, control)]
    mean, se = statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d))
    half = t975(len(d) - 1) * se
    verdict = "faster" if mean - half > 0 else "slower" if mean + half < 0 else "within"
    return {"ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half),
            "rounds": len(d), "verdict": verdict}
