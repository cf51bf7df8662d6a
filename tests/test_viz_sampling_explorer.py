"""The live explorer's sampling controls: temperature, top-p and seed re-grow the tree through a
``TreeSession`` (tiny random models) with a fixed seed; replay and one-argument regrow callables
get none."""

from __future__ import annotations

import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.policy.growth import grow_tree
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_viz.widgets.regrow import LiveBackend, takes_sampling
from helpers.viz import propose

from helpers import cached_pair

PROMPT = [7, 3, 9, 12]
CONFIG = DynaTreeConfig(tau=0.0, n_max=12)


@pytest.fixture(scope="module")
def explorer():
    return dv.explore(cached_pair("llama", "sdpa", 0.3), PROMPT, config=CONFIG)


def _state(ex) -> tuple:
    """What a re-grow produced: the tree's tokens and shape, and the target's token per node."""
    assert ex.error is None, ex.error
    return tuple(ex.result.tree.tokens), tuple(ex.result.tree.parents), tuple(ex.result.scene.target_argmax)


def _set(ex, **values) -> tuple:
    for name, v in values.items():
        ex.sampling_sliders[name].value = v
    return _state(ex)


def test_a_live_session_gets_temperature_top_p_and_seed_controls(explorer):
    ex = explorer
    assert ex.backend.mode == "live" and ex.backend.takes_sampling
    assert list(ex.sampling_sliders) == ["temperature", "top_p", "seed"]
    t, p = ex.sampling_sliders["temperature"], ex.sampling_sliders["top_p"]
    assert (t.min, t.max, t.step, t.value) == (0.0, 1.5, 0.05, 0.0)
    assert (p.min, p.max, p.value) == (0.05, 1.0, 1.0) and ex.sampling_sliders["seed"].value == 0
    assert ex.sampling_sliders["temperature"] in ex.children[3].children  # shown under the rule's sliders


def test_temperature_07_regrows_and_back_to_0_gives_the_greedy_tree_again(explorer):
    ex = explorer
    _set(ex, temperature=0.0, top_p=1.0, seed=0)
    greedy = _state(ex)
    assert ex.sampling.greedy and "greedy" in ex.static_html()
    sampled = {}
    for seed in range(6):
        sampled[seed] = _set(ex, seed=seed, temperature=0.7)
        assert ex.sampling == SamplingConfig(temperature=0.7, seed=seed)
        assert "temperature 0.7" in ex.static_html()
        assert _set(ex, temperature=0.0) == greedy  # identical tokens, shape and target choices
    assert any(s != greedy for s in sampled.values())  # sampling changed the tree or the draws


def test_the_explorer_regrows_what_the_session_draws_with_the_same_seed(explorer):
    ex = explorer
    session = ex.backend.regrow.__self__
    got = _set(ex, top_p=1.0, seed=5, temperature=0.7)
    tree, draws = session.regrow(ex.rule, SamplingConfig(temperature=0.7, seed=5))
    assert got == (tuple(tree.tokens), tuple(tree.parents), tuple(draws))


def test_the_same_seed_twice_gives_identical_results_and_another_seed_can_change_the_draws(explorer):
    ex = explorer
    first = _set(ex, top_p=1.0, temperature=1.2, seed=1)
    assert ex.regrow() is not None and _state(ex) == first  # a second regrow, same randomness
    others = {_set(ex, seed=s) for s in range(2, 8)}
    assert _set(ex, seed=1) == first  # back to seed 1: the very same tree and draws
    assert len(others | {first}) > 1  # some other seed draws differently


def test_top_p_changes_reach_the_session(explorer):
    ex = explorer
    session = ex.backend.regrow.__self__
    _set(ex, temperature=1.0, seed=2, top_p=1.0)
    got = _set(ex, top_p=0.5)
    assert ex.sampling == SamplingConfig(temperature=1.0, top_p=0.5, seed=2)
    tree, draws = session.regrow(ex.rule, ex.sampling)
    assert got == (tuple(tree.tokens), tuple(tree.parents), tuple(draws))
    assert "top-p 0.5" in ex.static_html()
    _set(ex, temperature=0.0)  # top-p is moot when greedy: no validation error
    assert ex.sampling.greedy and ex.sampling_sliders["top_p"].value == 0.5


def _recording_regrow(calls: list):
    def regrow(rule, sampling=None):
        calls.append(sampling)
        tree = grow_tree(1, rule, propose)
        return tree, [2] + [7] * (len(tree) - 1)
    return regrow


def test_every_sampling_change_rebuilds_the_config_the_callable_receives():
    calls: list = []
    ex = dv.explore(_recording_regrow(calls), config=DynaTreeConfig(d0=3, d_max=6, trace_top_k=3),
                    sampling=SamplingConfig(temperature=0.5, top_k=20, seed=9, verify="rejection"))
    assert calls[-1] == SamplingConfig(temperature=0.5, top_k=20, seed=9, verify="rejection")
    ex.sampling_sliders["top_p"].value = 0.35
    assert calls[-1].top_p == 0.35 and calls[-1].top_k == 20 and calls[-1].verify == "rejection"
    ex.sampling_sliders["temperature"].value = 1.25
    assert calls[-1].temperature == 1.25 and calls[-1].seed == 9
    ex.sliders["n_max"].value = 2  # a rule slider keeps the sampling settings
    assert calls[-1].temperature == 1.25 and ex.result.tree.num_drafted == 2
    ex.reset()
    assert calls[-1] == SamplingConfig(temperature=0.5, top_k=20, seed=9, verify="rejection")
    assert ex.sampling_sliders["temperature"].value == 0.5


def test_invalid_sampling_settings_show_in_the_message_area_instead_of_raising():
    calls: list = []
    ex = dv.explore(_recording_regrow(calls))
    good, n = ex.result, len(calls)
    ex.sampling_sliders["seed"].value = -1
    assert "seed must be an integer" in ex.error and "seed must be an integer" in ex.status.value
    assert len(calls) == n and ex.result is good  # nothing re-grown, the last valid tree stays
    ex.sampling_sliders["seed"].value = 4  # valid again; at temperature 0 the draw is greedy (no seed)
    assert ex.error is None and calls[-1].greedy


def test_a_one_argument_regrow_gets_no_sampling_controls_and_keeps_working():
    calls = []

    def regrow(rule):
        calls.append(rule)
        tree = grow_tree(1, rule, propose)
        return tree, [2] + [7] * (len(tree) - 1)

    assert not takes_sampling(regrow) and takes_sampling(_recording_regrow([]))
    ex = dv.explore(regrow)
    assert ex.sampling_sliders == {} and ex.sampling is None and ex.error is None and len(calls) == 1
    backend = LiveBackend(regrow)
    assert backend(ex.rule).tree.tokens == ex.result.tree.tokens  # sampling=None: the rule alone
    with pytest.raises(TypeError, match="no sampling"):
        backend(ex.rule, SamplingConfig(temperature=0.7))


def test_a_live_session_colours_the_sampled_tree_by_the_targets_p_of_each_token(explorer):
    """TreeSession.regrow returns p(token | parent) beside the draws: the live scene carries it (what
    color_by="target_p" reads), the same numbers the session reports."""
    ex = explorer
    _set(ex, top_p=1.0, seed=3, temperature=0.9)
    got = ex.backend.regrow.__self__.regrow(ex.rule, SamplingConfig(temperature=0.9, seed=3))
    scene = ex.result.scene
    assert scene.sampled and scene.target_prob == got.target_prob
    assert scene.target_prob[0] is None and all(0.0 <= v <= 1.0 for v in scene.target_prob[1:])
