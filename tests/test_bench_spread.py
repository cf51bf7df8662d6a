"""A method's speed read against batched AR's own spread (:mod:`dynatree_core.bench.spread`).

The batch benchmark runs batched AR twice per round. A method exactly as fast as AR must read "within" AR's spread
about 95% of the time. Here it is checked on simulated rounds with log-normal noise, where the truth is known. Two
wrong variants are shown to fail the same check: the normal's 1.96 in place of Student's t at a few rounds, and an
interval that leaves the control's own variance out.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from dynatree_core.bench import spread
from dynatree_core.bench.spread import against_control, t975


def _verdicts(n: int, shift: float = 0.0, sigma: float = 0.05, trials: int = 4000, seed: int = 0) -> dict[str, float]:
    """The share of each verdict over simulated benchmarks of ``n`` rounds: the method's log ratio to AR is
    N(shift, sigma), the control's N(0, sigma)."""
    rng = random.Random(seed)
    got = dict.fromkeys(spread.VERDICTS, 0)
    for _ in range(trials):
        r = [math.exp(rng.gauss(shift, sigma)) for _ in range(n)]
        c = [math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]
        got[against_control(r, c)["verdict"]] += 1
    return {k: v / trials for k, v in got.items()}


def test_students_t_at_the_degrees_of_freedom_rounded_down():
    assert t975(1) == pytest.approx(12.706) and t975(4) == pytest.approx(2.776) and t975(10) == pytest.approx(2.228)
    assert t975(4.9) == t975(4)  # rounded down: the wider interval
    assert t975(30) == pytest.approx(2.042) and t975(31) == 1.96
    with pytest.raises(ValueError, match="df must be >= 1"):
        t975(0.5)


@pytest.mark.parametrize("n", [3, 6])
def test_a_method_as_fast_as_ar_reads_within_its_spread_at_least_95_percent_of_the_time(n):
    assert _verdicts(n)["within"] >= 0.95


def test_the_normal_quantile_at_three_rounds_calls_an_ar_fast_method_slower_or_faster_too_often(monkeypatch):
    monkeypatch.setattr(spread, "t975", lambda df: 1.96)  # the wrong variant: no small-sample correction
    assert _verdicts(3)["within"] < 0.93


def test_leaving_the_controls_variance_out_fails_the_same_check(monkeypatch):
    def method_only(ratios, control):  # the wrong variant: the control's mean taken as exact
        lr = [math.log(x) for x in ratios]
        d = statistics.mean(lr) - statistics.mean(math.log(x) for x in control)
        half = t975(len(lr) - 1) * statistics.stdev(lr) / math.sqrt(len(lr))
        return {"verdict": "faster" if d - half > 0 else "slower" if d + half < 0 else "within"}

    monkeypatch.setattr(spread, "against_control", method_only)
    rng = random.Random(1)
    within = sum(spread.against_control([math.exp(rng.gauss(0, 0.05)) for _ in range(3)],
                                        [math.exp(rng.gauss(0, 0.05)) for _ in range(3)])["verdict"] == "within"
                 for _ in range(4000)) / 4000
    assert within < 0.93


def test_a_clearly_slower_or_faster_method_is_called_so():
    assert _verdicts(6, shift=-0.15)["slower"] > 0.95
    assert _verdicts(6, shift=+0.15)["faster"] > 0.95
    # with three rounds and 5% noise a 10% loss is often not resolved: the interval says so, it does not guess
    assert _verdicts(3, shift=-0.10)["slower"] < 0.5


def test_the_reading_itself():
    got = against_control([0.9, 0.92, 0.88], [1.01, 0.99, 1.0])
    assert got["verdict"] == "slower" and got["low"] < got["ratio"] < got["high"] < 1
    assert got["ratio"] == pytest.approx(math.exp(statistics.mean(map(math.log, [0.9, 0.92, 0.88]))
                                                  - statistics.mean(map(math.log, [1.01, 0.99, 1.0]))))
    assert against_control([1.0], [1.0, 1.0]) is None and against_control([1.0, 1.0], [1.0]) is None
    flat = against_control([1.0, 1.0], [1.0, 1.0])  # no spread on either side: a point, within
    assert flat["verdict"] == "within" and flat["low"] == flat["high"] == 1.0
    with pytest.raises(ValueError, match="ratios must be > 0"):
        against_control([0.0, 1.0], [1.0, 1.0])
