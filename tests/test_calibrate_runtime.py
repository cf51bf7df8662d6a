"""The verify-cost curve c(n) is measured on the runtime a run uses: a fast path's curve is its buckets'
replayed forwards, cached apart from the eager one, and ``prepare_config(..., runtime=...)`` prices
cost-aware DynaTree with its own runtime's curve."""

from __future__ import annotations

import pytest

from dynatree_core.engine import calibrate
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.runtime.static.fast_path import bucket


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_CACHE_DIR", str(tmp_path / "cache"))
    return ModelPair.named("tiny-llama")


def test_the_runtime_is_part_of_the_cost_curve_cache_key(pair):
    eager, static = calibrate.pair_key(pair), calibrate.pair_key(pair, "static")
    assert eager["runtime"] == "eager" and static["runtime"] == "static"
    assert calibrate.pair_key(pair, "auto") == eager  # auto on a CPU is eager
    assert calibrate._cache_path(eager) != calibrate._cache_path(static)
    curve = CostModel(verify_s=(0.01, 0.012), draft_s=0.001, sizes=(1, 2), **eager)
    assert curve.matches(**eager) and not curve.matches(**static)
    assert CostModel.from_dict(curve.to_dict()) == curve
    old = {k: v for k, v in curve.to_dict().items() if k != "runtime"}  # a curve cached before runtimes
    assert CostModel.from_dict(old).runtime == "eager"


def test_a_fast_path_curve_is_its_buckets_replayed_forwards(pair):
    path, curve = calibrate.fast_verify_curve(pair, "static", 16, 8, repeats=1)
    assert set(curve) == set(path.buckets) and path.buckets[0] == 1 and path.buckets[-1] >= 8
    assert all(s > 0 for s in curve.values())
    model = calibrate.cost_model(pair, sizes=(1, 2, 3, 5, 8), runtime="static")
    assert model.runtime == "static" and model.sizes == (1, 2, 4, 8) and model.n_max == 7
    for n in range(1, 9):  # a tree of n nodes costs the bucket it is padded to: a step, not a slope
        assert model.verify(n) == model.verify(bucket(n, path.buckets))
    assert calibrate.cost_model(pair, runtime="static") == model  # cached, under its own key


def test_prepare_config_prices_cost_aware_dynatree_on_the_runs_runtime(pair):
    eager = calibrate.cost_model(pair, sizes=(1, 2, 4))
    static = calibrate.cost_model(pair, sizes=(1, 2, 4), runtime="static")
    assert (eager.runtime, static.runtime) == ("eager", "static")
    config = DynaTreeConfig(cost_aware=True)
    assert calibrate.prepare_config(config, pair).cost == eager
    assert calibrate.prepare_config(config, pair, runtime="static").cost == static
    assert "static runtime" in calibrate.describe(static) and "runtime" not in calibrate.describe(eager)
