"""``runtime="compiled"`` the way users run it: one process, dynamo's default limits, no reset between
methods, every policy and drafter, two prompt lengths on either side of a static-length step and both
cache sizes a benchmark builds (the fixed tree's n_max 256 asks for the larger one).

Dynamo keeps at most ``recompile_limit`` (8) graphs per code object; under ``fullgraph=True`` the
9th is a hard error (``FailOnRecompileLimitHit``), and a region compiled per function would take every
method's, bucket's and capacity's graphs. The regions and forwards run through dynamo's ``eager``
backend here (``DYNATREE_COMPILE_BACKEND``): the same tracing, guards and per-code-object limit as
inductor, without its code generation. Hitting the limit is made an error for the forwards too
(``fail_on_recompile_limit_hit``: they compile with ``fullgraph=False``, which would otherwise fall back
to eager without a word); the limit itself is left at its default.
"""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch
import torch._dynamo.convert_frame as convert_frame
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

from dynatree_core import generate
from dynatree_core.drafters import LookupMix
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, FixedTreeConfig, LinearConfig, SequoiaConfig
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.runtime.static import fast_path, regions

from helpers import cached_pair
from helpers.features import feature_pair

SHORT = [5, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14, 3, 22, 7]
#: a prompt whose static cache rounds up to 512 slots where SHORT's rounds to 256 (STATIC_LEN_STEP)
LONG = (SHORT * 18)[:250]
NEW = 16


def _configs() -> list[tuple[str, object]]:
    cost = CostModel(verify_s=tuple(0.05 + 0.002 * n for n in range(40)), draft_s=0.004)
    return [
        # the largest tree first, as the benchmark orders its methods: n_max 256 asks for the larger cache
        # and buckets, which every later run then keeps (a kept fast path serves any run it fits)
        ("fixed_tree", FixedTreeConfig(d=3, b=2)),
        ("ar", None),
        ("linear", LinearConfig(k=3)),
        ("dynatree", DynaTreeConfig.cpu()),
        ("dynatree", DynaTreeConfig.gpu()),
        ("dynatree", DynaTreeConfig.paper()),
        ("dynatree", DynaTreeConfig(cost_aware=True, cost=cost)),
        ("eagle2", Eagle2Config(k=3, depth=4, n_total=10)),
        ("sequoia", SequoiaConfig(n_max=8, d_max=4, acceptance=(0.6, 0.2))),
    ]


def _pairs():
    model = cached_pair("llama", "sdpa", 0.05)
    feature = feature_pair("sdpa", 1, 0)
    return {"model": model, "feature": feature, "feature+lookup": dataclasses.replace(feature, lookup=LookupMix())}


def _entries() -> dict[object, int]:
    """Dynamo's compiled graphs per code object it has seen, live ones only."""
    out: dict[object, int] = {}
    for ref in list(convert_frame.input_codes.seen):
        code = ref()
        if code is not None:
            out[code] = len(_debug_get_cache_entry_list(code))
    return out


def _graphs_per_code(before: dict[object, int]) -> dict[str, int]:
    """The graphs of each code object the sweep compiled into (by name; the most for any one name).
    A code object another test compiled on its own (``before``: e.g. test_device_tree's own copy of
    the level step) and the sweep left alone is not the sweep's."""
    out: dict[str, int] = {}
    for code, n in _entries().items():
        if before.get(code) != n:
            out[code.co_name] = max(out.get(code.co_name, 0), n)
    return out


def _sweep(pairs, references) -> None:
    for name, pair in pairs.items():
        for prompt in (LONG, SHORT):
            want = references[(name, len(prompt))]
            for method, config in _configs():
                got = generate(pair, prompt, method, config, max_new_tokens=NEW, ignore_eos=True, runtime="compiled")
                assert got.tokens == want, (name, len(prompt), method, config)


@pytest.fixture
def own_fast_paths():
    """The sweep's pairs; afterwards their kept fast paths are dropped. What this hides: nothing of the
    sweep; it keeps later tests of the same cached tiny models from inheriting forwards compiled through
    dynamo's eager backend (a kept path serves any later run it fits)."""
    pairs = _pairs()
    yield pairs
    for pair in pairs.values():
        for model in (pair.target, pair.draft):
            fast_path._PATHS.pop(model, None)


def test_every_method_on_compiled_in_one_process_never_hits_the_limit_nor_compiles_after_warm_up(
        monkeypatch, own_fast_paths):
    monkeypatch.setenv("DYNATREE_COMPILE_BACKEND", "eager")
    pairs = own_fast_paths
    references = {(name, len(p)): generate(pair, p, "ar", max_new_tokens=NEW, ignore_eos=True).tokens
                  for name, pair in pairs.items() for p in (SHORT, LONG)}
    counters, before = torch._dynamo.utils.counters, _entries()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        _sweep(pairs, references)  # the warm-up: every method, drafter, prompt length and cache size once
        warm = counters["stats"]["unique_graphs"]
        graphs = regions.region_stats().graphs
        _sweep(pairs, references)  # the measured pass
    assert regions.region_stats().graphs == graphs, (regions.region_stats().keys, graphs)
    assert counters["stats"]["unique_graphs"] == warm, "compiled after the warm-up"
    assert graphs > 0
    per_code = _graphs_per_code(before)
    del before
    assert max(per_code.values()) <= 1, {k: v for k, v in per_code.items() if v > 1}
    gc.collect()


def test_region_signature_separates_what_dynamo_specialises_on():
    """Two calls whose tensors differ in shape, dtype or stride, whose scalars differ in value, or where
    one passes None and the other a tensor, get different keys; anything but plain data is refused."""
    a = torch.zeros(3, 4)
    base = regions.signature((a, 2, None))
    assert regions.signature((torch.ones(3, 4), 2, None)) == base  # values do not matter
    for other in ((torch.zeros(4, 3), 2, None), (a.double(), 2, None), (a.t().contiguous().t(), 2, None),
                  (a, 3, None), (a, 2, torch.zeros(1))):
        assert regions.signature(other) != base
    with pytest.raises(TypeError, match="compiled region's argument"):
        regions.signature((object(),))


def test_region_signature_sees_which_arguments_share_storage():
    """Dynamo guards on aliasing between inputs: a frontier that is a view of the tree's arange (the
    root's level) and one that is not trace apart, so their keys differ."""
    ar = torch.arange(8)
    assert regions.signature((ar[:1], ar)) != regions.signature((ar[:1].clone(), ar))
