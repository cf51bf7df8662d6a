"""The shared budget prices its forwards at what the run measures (:mod:`dynatree_core.policy.batch_budget`).

c(B, w) and d(B) are calibrated once per pair and device, on short random prefixes and two-token levels. A
run's context, trees and catch-ups cost more: with WikiText-2 prompts of up to 800 tokens at B = 8 a verify
ran 1.5x c(B, W) and a draft level's forward 2.6x d(B). A budget that took the calibration at its word filed
the difference under o(B), an overhead shared by every node, so the wider trees looked cheap and its probes
verified eight tokens a row. Here too: what the budget decides from those prices and its measured rates
(explorations kept out of the drafting rate, probes put off where the model prices a clear loss).
"""

from __future__ import annotations

import pytest

from dynatree_core import iterate
from dynatree_core.policy.batch_budget import MAX_SKIP, BatchBudget, BatchCost

from helpers import cached_pair

#: two rows' drafted nodes, path probabilities p(u)
PROBS = [[0.9, 0.6, 0.3, 0.1], [0.8, 0.2]]


def _cost(slope: float, verify: float = 1.0, draft: float = 1.0) -> BatchCost:
    """c(B, w) = verify · (0.05 + slope·B·w) seconds and d(B) = draft · 5 ms."""
    rows = (1, 4)
    return BatchCost(rows, tuple(tuple(verify * (0.05 + slope * b * w) for w in range(1, 40)) for b in rows),
                     tuple(draft * 0.005 for _ in rows))


def _drafting(b: BatchBudget, true: BatchCost, measured: bool, n: int = 6, rest: float = 0.005) -> BatchBudget:
    """n drafting iterations of two rows and two levels whose forwards take what ``true`` says, plus ``rest``
    seconds of bookkeeping; ``measured``: the budget is told the forwards' seconds (as a batch run tells it),
    else it takes them at the calibration's word (the old budget)."""
    for _ in range(n):
        w = b.choose(PROBS, 2).width
        forwards = true.verify(2, w) + 2 * true.draft(2)
        if measured:
            b.observe_forwards(2, w, 2, true.verify(2, w), 2 * true.draft(2))
        said = forwards if measured else b.cost.verify(2, w) + 2 * b.cost.draft(2)
        b.observe_time(2, True, 5, forwards + rest, said)
    return b


@pytest.mark.parametrize("slope", [0.004, 0.008, 0.016])
def test_measured_forwards_price_the_widths_as_the_true_costs_would(slope):
    """The forwards cost 2x the calibrated verify and 4x the calibrated level. Told what they took, the budget
    chooses the width a budget calibrated at the true costs chooses, and o(B) is the bookkeeping alone.
    The wrong variant (the old one: only the iteration's seconds, the forwards modelled from the calibration)
    files the difference under o(B) and verifies wider trees."""
    true = _cost(slope, verify=2.0, draft=4.0)
    ref = _drafting(BatchBudget(true), true, measured=True)
    got = _drafting(BatchBudget(_cost(slope)), true, measured=True)
    assert got.verify_scale[2] == pytest.approx(2.0) and got.draft_scale[2] == pytest.approx(4.0)
    assert got.overhead[2] == pytest.approx(0.005)
    assert got.choose(PROBS, 2).width == ref.choose(PROBS, 2).width
    assert got.verify_cost(2, 3) == pytest.approx(true.verify(2, 3)) and got.draft_cost(2) == pytest.approx(0.02)
    old = _drafting(BatchBudget(_cost(slope)), true, measured=False)
    assert old.overhead[2] > 0.05
    assert old.choose(PROBS, 2).width > ref.choose(PROBS, 2).width


def test_a_scale_measured_at_one_batch_size_prices_the_others_until_they_are_measured():
    """The context that makes the run's forwards dearer is the same at every B: the nearest B measured
    lends its scale (the smaller on a tie), and a B's own measurement takes over once there is one."""
    b = BatchBudget(_cost(0.004))
    assert b.verify_cost(3, 2) == pytest.approx(b.cost.verify(3, 2))  # nothing measured: the calibration
    b.observe_forwards(2, 1, 0, 1.5 * b.cost.verify(2, 1), 0.0)
    b.observe_forwards(6, 1, 0, 3.0 * b.cost.verify(6, 1), 0.0)
    assert b.draft_scale == {}  # an AR step ran no level
    assert b.verify_cost(1, 4) == pytest.approx(1.5 * b.cost.verify(1, 4))
    assert b.verify_cost(4, 4) == pytest.approx(1.5 * b.cost.verify(4, 4))  # a tie: the smaller B
    assert b.verify_cost(8, 4) == pytest.approx(3.0 * b.cost.verify(8, 4))
    b.observe_forwards(4, 2, 0, 2.0 * b.cost.verify(4, 2), 0.0)
    assert b.verify_cost(4, 4) == pytest.approx(2.0 * b.cost.verify(4, 4))


def test_ar_is_priced_by_its_measured_steps():
    """Whether a width pays is against AR's measured rate once an AR step ran at that B: before it, against
    c(B, 1) + o(B)."""
    b = BatchBudget(_cost(0.004))
    assert b.choose(PROBS, 2).ar_rate == pytest.approx(2 / b.cost.verify(2, 1))
    b.observe_time(2, False, 2, 0.25)
    assert b.choose(PROBS, 2).ar_rate == pytest.approx(2 / 0.25)


class _Recording(BatchBudget):
    """A budget that drafts every other iteration and records what the batch tells it of its phases."""

    def __init__(self, cost: BatchCost):
        super().__init__(cost)
        self.calls: list[tuple[int, int, int, float, float]] = []
        self.turn = 0

    def drafts(self, rows):
        self.turn += 1
        return self.turn % 2 == 1

    def observe_forwards(self, rows, width, levels, verify_s, draft_s):
        self.calls.append((rows, width, levels, verify_s, draft_s))
        super().observe_forwards(rows, width, levels, verify_s, draft_s)


@pytest.mark.parametrize("runtime", ["eager", "static"])
def test_a_batch_tells_the_budget_each_iteration_s_padded_width_levels_and_seconds(runtime):
    """Every iteration reports its verify's padded width (a bucket on the static runtime), the draft
    levels it ran (0 where it sat out) and the seconds in both phases' forwards; the scales are set from them."""
    budget = _Recording(_cost(0.001))
    run = iterate(cached_pair("llama", "sdpa", 0.1), [[5, 9, 2, 33], [1, 2], [40, 41, 42]], "dynatree",
                  max_new_tokens=10, ignore_eos=True, budget=budget, runtime=runtime)
    its = list(run)
    assert [(c[0], c[1], c[2]) for c in budget.calls] == [(len(i.records), i.padded_width, i.draft_forwards)
                                                           for i in its]
    assert all(c[3] > 0 for c in budget.calls)
    # the seconds are the forwards' alone: an iteration that sat out spent none in the draft
    assert all((c[4] > 0) == (c[2] > 0) for c in budget.calls)
    assert any(c[2] == 0 for c in budget.calls) and any(c[2] > 0 for c in budget.calls)
    assert set(budget.verify_scale) == {len(i.records) for i in its}
    assert set(budget.draft_scale) == {len(i.records) for i in its if i.draft_forwards}


def test_an_exploring_iteration_does_not_enter_the_drafting_rate():
    """The first MIN_SAMPLES drafting iterations at a B, and every EXPLORE_DEPTH-th, grow as deep as the rules
    allow to measure the deep levels: slow by design. Counted in the drafting rate they would make AR look
    faster and sit speculation out (the bench saw B = 1 on the prompts sit out 60 of 64 iterations after them)."""
    from dynatree_core.policy.batch_budget import MIN_SAMPLES

    b = BatchBudget(_cost(0.004))
    for _ in range(MIN_SAMPLES):
        assert b.levels(1, 8) == 8  # exploring
        b.observe_depths(8, [1], [[1, 1, 2, 2, 3]])
        b.observe_time(1, True, 1, 1.0)  # one token in a second: far slower than the AR steps below
        b.observe_time(1, False, 1, 0.1)
    assert b.rate(1, True) is None and b.rate(1, False) == pytest.approx(10.0)
    assert b.levels(1, 8) < 8  # measured: the policy's depth
    b.observe_time(1, True, 3, 0.2)
    assert b.rate(1, True) == pytest.approx(15.0)
    assert b.levels(1, 8) < 8
    b.observe_time(1, True, 1, 1.0)  # a capped iteration counts, however slow
    assert b.rate(1, True) < 15.0


def _probes(b: BatchBudget, n: int = 400) -> int:
    """The drafting iterations of n at three rows where drafting commits 5 tokens/s and AR steps 15 (after
    the first 2·MIN_SAMPLES, which measure both sides)."""
    from dynatree_core.policy.batch_budget import MIN_SAMPLES

    rates, made = {True: 5.0, False: 15.0}, []
    for _ in range(n + 2 * MIN_SAMPLES):
        d = b.drafts(3)
        made.append(d)
        b.observe_time(3, d, 3, 3 / rates[d])
    return sum(made[2 * MIN_SAMPLES:])


def _priced(slope: float) -> BatchBudget:
    """A budget whose depths are measured at three rows: paths reach depth 1 half the time, depth 2 never."""
    from dynatree_core.policy.batch_budget import MIN_SAMPLES

    b = BatchBudget(_cost(slope))
    for _ in range(MIN_SAMPLES):
        b.observe_depths(2, [1, 0, 1], [[1, 1, 2], [1, 2], [1, 1]])
    return b


def test_a_probe_the_model_prices_as_a_clear_loss_is_put_off_but_not_forever(monkeypatch):
    """Where the model's best drafting iteration (the measured depths, the forwards' costs) makes well under AR's
    measured rate, a probe that falls due is put off, at most GATED_PROBES times in a row: fewer probes than
    the ungated budget (the wrong variant, PROBE_GATE = 0) but never none. Where the model sees a win, nothing
    is put off."""
    from dynatree_core.policy import batch_budget

    steep = _priced(0.1)  # c(3, 2) = 0.65 s: the model's best rate is under half AR's 15 tokens/s
    assert steep._clear_loss(3) is False  # AR not measured yet
    gated = _probes(steep)
    assert 0 < gated
    monkeypatch.setattr(batch_budget, "PROBE_GATE", 0.0)
    ungated = _probes(_priced(0.1))
    assert gated < ungated / 2
    monkeypatch.undo()
    flat = _priced(0.0)  # the model sees speculation win: its probes are not put off
    flat_probes = _probes(flat)
    monkeypatch.setattr(batch_budget, "PROBE_GATE", 0.0)
    assert flat_probes == _probes(_priced(0.0))


def _measure(b: BatchBudget, rows: int, rates: dict[bool, float], n: int = 8) -> None:
    """n iterations of each side at ``rows`` rows, each committing ``rows`` tokens at ``rates[drafted]`` tok/s."""
    for _ in range(n):
        for drafted in (True, False):
            b.observe_time(rows, drafted, rows, rows / rates[drafted])


def _backed_off(rates: dict[int, dict[bool, float]]) -> BatchBudget:
    """A budget that measured ``rates[B]`` at each B, then ran B = 4 (its decisions followed by iterations at
    those rates) until it waits more than the next iteration before probing again."""
    b = BatchBudget(_cost(0.0))
    for rows, r in rates.items():
        _measure(b, rows, r)
    for _ in range(12):
        drafted = b.drafts(4)
        b.observe_time(4, drafted, 4, 4 / rates[4][drafted])
        if b.skip > 1:
            return b
    raise AssertionError("the budget never backed off at B = 4")


def test_a_wait_decided_for_the_full_batch_ends_when_rows_leave():
    """A fixed batch's tail: at B = 4 speculation loses (the batch sits out and backs off), at B = 1 it wins.
    When rows leave, B = 1 decides from its own rates and drafts. The variant that keeps B = 4's wait (its wait
    taken as B = 1's) keeps the last row on AR steps, as the bench's tail showed before. Back at B = 4 (a kept
    budget's next batch), its back-off resumes where it was."""
    rates = {1: {True: 35.0, False: 15.0}, 4: {True: 30.0, False: 45.0}}
    b = _backed_off(rates)
    assert b.at_rows == 4
    kept = _backed_off(rates)
    kept.at_rows = 1
    assert kept.drafts(1) is False  # the full batch's wait, spent at B = 1
    backoff = b.backoff
    assert b.drafts(1) is True and b.skip == 0  # B = 1 decides: speculation is faster there
    assert b.drafts(1) is True and b.at_rows == 1 and b.backoffs[4] == backoff  # B = 4's, kept for it
    # back at the full B, the wait is decided again from its rates (it sits out), and its back-off goes on doubling
    assert b.drafts(4) is False and b.backoff == min(2 * backoff, MAX_SKIP) and b.backoffs[1] == 1
