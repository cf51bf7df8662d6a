"""The teaching choosers: the explorer's state where the accepted length moves with the knobs."""

from __future__ import annotations

from dynatree_core.policy.config import DynaTreeConfig
import math

import pytest

from dynatree_viz.examples.branching import TIE_MARGIN, branching_example, off_top1
from dynatree_viz.examples.knobs import knob_example, knob_sweeps, replayed, state_tokens

from helpers.viz import record, tiny_trace

BASE = DynaTreeConfig(d0=3, d_max=6, trace_top_k=3, tau=0.05)
KNOBS = {"n_max": [1, 2, 8], "d0": [1, 2, 3], "tau": [0.5, 0.05]}


def test_replay_of_the_recorded_rule_gives_the_recorded_nodes_and_accepted_length():
    rec = record()
    assert replayed(rec, BASE) == (rec.tree.num_drafted, rec.accepted_length)


def test_sweeps_show_nodes_paid_against_accepted_length_gained():
    ex = knob_sweeps(record(), BASE, KNOBS)
    nodes = [n for _, n, _ in ex.sweeps["n_max"]]
    ells = [l for *_, l in ex.sweeps["n_max"]]
    assert nodes == sorted(nodes) and ells[0] < ells[-1]  # a bigger budget buys a longer path here
    assert "n_max" in ex.moving and ex.spread > 0


def test_the_chooser_prefers_the_iteration_where_the_knobs_move_the_accepted_length():
    dull = record(index=0, target={(1,): 7})   # the target's token is never drafted: ℓ = 0 always
    live = record(index=1)
    ex = knob_example([dull, live], BASE, KNOBS)
    assert ex.record is live and set(ex.moving) == {"n_max", "tau"}
    assert knob_sweeps(dull, BASE, KNOBS).moving == []
    assert knob_example([], BASE, KNOBS) is None


def test_fixed_settings_apply_to_their_knob_only():
    ex = knob_sweeps(record(), BASE, {"tau": [0.05]}, fixed={"tau": {"n_max": 1}, "d0": {"n_max": 2}})
    assert ex.sweeps["tau"][0][1] == 1  # the budget of one node held for this knob's sweep


def test_state_tokens_end_at_the_iterations_root():
    trace = tiny_trace(3)
    rec = trace.iterations[1]
    ids = state_tokens(trace, rec)
    assert len(ids) == rec.prefix_len + 1
    assert ids[:len(trace.prompt_tokens)] == trace.prompt_tokens


def test_a_second_choice_counts_only_when_clearly_less_probable_than_the_first():
    rec = record(target={(1,): 3, (1, 3): 4})  # " dog" (q 0.30 vs 0.55), then " sat" (0.33 vs 0.35)
    dog, sat = rec.accepted_path
    assert [o.node for o in off_top1(rec, margin=0.0)] == [dog, sat]
    (clear,) = off_top1(rec)  # 0.35 - 0.33 < TIE_MARGIN: " sat" is a near tie, not a choice
    assert clear.node == dog and clear.rank == 2 and clear.top1_q - clear.q >= TIE_MARGIN
    with pytest.raises(ValueError, match="margin"):
        off_top1(rec, margin=1.5)


def test_the_branching_chooser_never_picks_a_tie():
    tie = record(index=0, target={(1,): 3})
    tie.tree.topk_logps[0] = [math.log(0.4), math.log(0.4), math.log(0.1)]  # " cat" and " dog" tie
    tie.tree.logps[tie.accepted_path[0]] = math.log(0.4)
    clear = record(index=1, target={(1,): 3})  # " dog" 0.30 against " cat" 0.55
    assert off_top1(tie, margin=0.0) and not off_top1(tie)
    assert branching_example([tie, clear], min_nodes=1) is clear
    assert branching_example([tie], min_nodes=1) is None
    assert branching_example([tie], min_nodes=1, margin=0.0) is tie  # what it picked before
