"""A method's speed read against batched AR's own spread (:mod:`dynatree_core.bench.spread`).

The batch benchmark runs batched AR twice per round. A method exactly as fast as AR must read "within" AR's spread
95% of the time. Here it is checked on simulated rounds where the truth is known: each round has its own speed (the
VM's, shared by its runs) and each run its own noise. A wrong variant, the normal's 1.96 in place of Student's t at
a few rounds, is shown to fail the same check.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from dynatree_core.bench import spread
from dynatree_core.bench.spread import against_control, t975


def _verdicts(n: int, shift: float = 0.0, sigma: float = 0.04, trials: int = 4000, seed: int = 0) -> dict[str, float]:
    """The share of each verdict over simulated benchmarks of ``n`` rounds: round i's runs share a speed
    N(0, 0.08) (in logs); AR's two runs and the method add their own N(0, sigma) noise, the method ``shift`` more."""
    rng = random.Random(seed)
    got = dict.fromkeys(spread.VERDICTS, 0)
    for _ in range(trials):
        ratios, control = [], []
        for _ in range(n):
            day = rng.gauss(0.0, 0.08)
            a, c, m = (day + rng.gauss(0.0, sigma) for _ in range(3))
            ratios.append(math.exp(m + shift - a))
            control.append(math.exp(c - a))
        got[against_control(ratios, control)["verdict"]] += 1
    return {k: v / trials for k, v in got.items()}


def test_students_t_at_the_degrees_of_freedom_rounded_down():
    assert t975(1) == pytest.approx(12.706) and t975(4) == pytest.approx(2.776) and t975(10) == pytest.approx(2.228)
    assert t975(4.9) == t975(4)  # rounded down: the wider interval
    assert t975(30) == pytest.approx(2.042) and t975(31) == 1.96
    with pytest.raises(ValueError, match="df must be >= 1"):
        t975(0.5)


@pytest.mark.parametrize("n", [3, 4, 6])
def test_a_method_as_fast_as_ar_reads_within_its_spread_95_percent_of_the_time(n):
    assert _verdicts(n)["within"] == pytest.approx(0.95, abs=0.015)  # 4000 trials: a binomial sd of 0.0034


@pytest.mark.parametrize("n", [3, 4])
def test_the_normal_quantile_at_a_few_rounds_calls_an_ar_fast_method_slower_or_faster_too_often(n, monkeypatch):
    monkeypatch.setattr(spread, "t975", lambda df: 1.96)  # the wrong variant: no small-sample correction
    assert _verdicts(n)["within"] < 0.92


def test_a_clearly_slower_or_faster_method_is_called_so():
    assert _verdicts(6, shift=-0.10)["slower"] > 0.9
    assert _verdicts(6, shift=+0.10)["faster"] > 0.9
    # with three rounds a 5% loss is often not resolved: the interval says so, it does not guess
    assert _verdicts(3, shift=-0.05)["slower"] < 0.5


def test_the_reading_itself():
    ratios, control = [0.9, 0.92, 0.88], [1.01, 0.99, 1.0]
    got = against_control(ratios, control)
    assert got["verdict"] == "slower" and got["low"] < got["ratio"] < got["high"] < 1 and got["rounds"] == 3
    d = [math.log(r) - math.log(c) / 2 for r, c in zip(ratios, control)]  # against the mean of AR's two runs
    assert got["ratio"] == pytest.approx(math.exp(statistics.mean(d)))
    assert got["high"] == pytest.approx(math.exp(statistics.mean(d) + t975(2) * statistics.stdev(d) / math.sqrt(3)))
    assert against_control([1.0], [1.0]) is None
    with pytest.raises(ValueError, match="pair by round"):
        against_control([1.0, 1.0], [1.0])
    flat = against_control([1.0, 1.0], [1.0, 1.0])  # no spread: a point, within
    assert flat["verdict"] == "within" and flat["low"] == flat["high"] == 1.0
    with pytest.raises(ValueError, match="ratios must be > 0"):
        against_control([0.0, 1.0], [1.0, 1.0])
