"""The fast path (static caches, bucketed trees, captured forwards) decodes exactly as the eager path.

``runtime="static"`` runs the fast path's caches, buckets and padding eagerly: on a CPU it is what
the captured runtimes replay, so the property tests run it for every method and drafter. The
``graphs`` runtime itself is checked on a GPU (``DYNATREE_TEST_DEVICE=cuda``, scripts/gpu_check.sh).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynatree_core import generate, iterate
from dynatree_core.drafters import LookupMix, PromptLookup
from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.runtime.static import fast_path as fp
from dynatree_core.runtime.cache.slots import SlotCache, StaticTargetCache

from helpers import DEVICE, assert_one_read_and_the_size, cached_pair, reference_greedy
from helpers.exactness import ARCHS, ATTNS, EDGE_CONFIGS, method_configs, prompts
from helpers.features import feature_pair

STATIC = "graphs" if DEVICE.type == "cuda" else "static"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(ARCHS), attn=st.sampled_from(ATTNS), noise=st.sampled_from([0.0, 0.02, 1.0]),
       mc=method_configs, prompt=prompts, n=st.integers(0, 24))
def test_every_decoder_on_the_fast_path_equals_target_greedy(arch, attn, noise, mc, prompt, n):
    method, config = mc
    res = generate(cached_pair(arch, attn, noise), list(prompt), method, config, max_new_tokens=n, ignore_eos=True,
                   runtime=STATIC)
    assert res.tokens == reference_greedy(arch, attn, prompt, n)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method,config", EDGE_CONFIGS)
def test_edge_configs_on_the_fast_path_are_exact(arch, method, config):
    prompt = (5, 9, 2, 33, 7)
    res = generate(cached_pair(arch, "sdpa", 0.02), list(prompt), method, config, max_new_tokens=30, ignore_eos=True,
                   runtime=STATIC)
    assert res.tokens == reference_greedy(arch, "sdpa", prompt, 30)


@pytest.mark.parametrize("kind", ["lookup", "model+lookup", "feature", "feature+lookup"])
def test_every_drafter_on_the_fast_path_is_exact(kind):
    base = cached_pair("llama", "sdpa", 0.05)
    feature = feature_pair("sdpa", 1, 0)
    pair = {"lookup": dataclasses.replace(base, draft=PromptLookup()),
            "model+lookup": dataclasses.replace(base, lookup=LookupMix()),
            "feature": feature, "feature+lookup": dataclasses.replace(feature, lookup=LookupMix())}[kind]
    prompt = [5, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14, 3]
    for method, config in [("linear", LinearConfig(k=3)), ("dynatree", DynaTreeConfig.cpu()), ("eagle2", None)]:
        eager_run = iterate(pair, prompt, method, config, max_new_tokens=30, ignore_eos=True, runtime="eager")
        fast_run = iterate(pair, prompt, method, config, max_new_tokens=30, ignore_eos=True, runtime=STATIC)
        eager, fast = list(eager_run), list(fast_run)
        assert [r.committed for r in fast] == [r.committed for r in eager]
        # the same levels expanded nodes; the resident draft phase reads once per iteration (and once more
        # where it reads its real size first) and, its early exit's flag landing at once on a CPU, runs the same
        # draft forwards
        assert [r.draft_forwards for r in fast] == [r.draft_forwards for r in eager]
        assert_one_read_and_the_size(fast, fast_run)
        assert fast_run.drafter.forwards == eager_run.drafter.forwards
    if kind != "lookup":  # a model draft's levels run on the fast path too, the feature draft's included
        path = fp._PATHS[pair.draft][f"draft:{STATIC}"]
        assert path.entries and (path.spec.feature_width > 0) == kind.startswith("feature")


def test_the_feature_pairs_noise_is_seeded_on_the_cpu_and_added_on_the_parameters_device():
    """The noise that makes a feature pair's head non-trivial lands on each parameter's device: under a
    fake CUDA device (FakeTensorMode checks devices, no GPU needed) the helper adds it where a CPU tensor
    added to a CUDA parameter fails, as the naive add does here (it failed on the H200, 2026-11-28); on the
    CPU it is the seeded generator's numbers, so every device tests the same drafts."""
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError, FakeTensorMode

    from helpers.features import perturb_

    with FakeTensorMode(allow_non_fake_inputs=True):
        head = torch.nn.Module()
        head.w = torch.nn.Parameter(torch.zeros(3, 4, device="cuda"))
        head.embed = torch.nn.Parameter(torch.zeros(2, device="cuda"))
        with pytest.raises(FakeTensorDeviceMismatchError), torch.no_grad():
            head.w.add_(torch.randn(head.w.shape, generator=torch.Generator().manual_seed(1)))  # the old helper
        perturb_(head, 1, 0.05, skip=("embed",))
        assert head.w.device.type == "cuda"
    cpu = torch.nn.Module()
    cpu.w, cpu.embed = torch.nn.Parameter(torch.zeros(3, 4)), torch.nn.Parameter(torch.zeros(2))
    perturb_(cpu, 1, 0.05, skip=("embed",))
    assert torch.equal(cpu.w.detach(), 0.05 * torch.randn(3, 4, generator=torch.Generator().manual_seed(1)))
    assert not cpu.embed.detach().any()  # skipped by name


def test_sampling_on_the_fast_path_draws_what_the_eager_path_draws():
    """Under match the tokens are seeded AR's on either path. Under rejection the resident draft
    phase verifies every node slot, so its coins come from the same seeded generator in another
    order (one row per slot): the same distribution (tests/test_sampling_stats.py), other draws."""
    pair = cached_pair("gpt_neox", "sdpa", 0.1)
    for noise in ("shared", "none"):
        cfg = SamplingConfig(temperature=0.8, seed=9, verify="match", draft_noise=noise)
        eager = generate(pair, [4, 5, 6], "dynatree", DynaTreeConfig(tau=0.0), max_new_tokens=25, ignore_eos=True,
                         sampling=cfg, runtime="eager")
        fast = generate(pair, [4, 5, 6], "dynatree", DynaTreeConfig(tau=0.0), max_new_tokens=25, ignore_eos=True,
                        sampling=cfg, runtime=STATIC)
        ar = generate(pair, [4, 5, 6], "ar", max_new_tokens=25, ignore_eos=True, sampling=cfg, runtime=STATIC)
        assert fast.tokens == eager.tokens == ar.tokens


def test_fast_path_logits_equal_the_eager_verify_within_float_tolerance():
    """The padded, static-cache verify forward of one tree scores every real node as the unpadded
    forward over the dynamic cache does (another kernel shape: equal to float tolerance)."""
    pair = cached_pair("llama", "sdpa", 0.02)
    prompt, cfg = [7, 3, 9, 12, 30], DynaTreeConfig(n_max=11, tau=0.0)  # 12 nodes: padded to 16
    runs = {rt: iterate(pair, prompt, "dynatree", cfg, max_new_tokens=6, trace=True, ignore_eos=True, runtime=rt)
            for rt in ("eager", STATIC)}
    recs = {rt: list(run) for rt, run in runs.items()}
    for a, b in zip(recs["eager"], recs[STATIC]):
        assert a.tree.tokens == b.tree.tokens and a.target_argmax == b.target_argmax
        np.testing.assert_allclose(a.target_prob_drafted[1:], b.target_prob_drafted[1:], rtol=1e-5, atol=1e-6)


def test_compactions_keep_the_output_exact():
    """A static cache with little room compacts its dead entries away on the way."""
    pair = cached_pair("llama", "sdpa", 0.5)
    prompt = (3, 4, 5, 6)
    cfg = DynaTreeConfig(n_max=12, tau=0.0, b_min=2, b_mid=3, b_max=3)
    run = iterate(pair, list(prompt), "dynatree", cfg, max_new_tokens=120, ignore_eos=True, runtime="static",
                  static_len=4 + 120 + 13 + 3)
    list(run)
    assert run.result.tokens == reference_greedy("llama", "sdpa", prompt, 120)
    assert run.target.cache.compactions >= 1


def test_the_kept_fast_path_serves_later_prompts_without_building_again():
    pair = cached_pair("gpt_neox", "eager", 0.02)
    generate(pair, [3, 4, 5], "linear", LinearConfig(k=3), max_new_tokens=10, ignore_eos=True, runtime="static")
    path = fp._PATHS[pair.target]["static"]
    built, capture = dict(path.entries), path.capture_s
    res = generate(pair, [9, 8, 7, 6], "linear", LinearConfig(k=3), max_new_tokens=12, ignore_eos=True,
                   runtime="static")
    assert fp._PATHS[pair.target]["static"] is path and path.entries == built and path.capture_s == capture
    assert res.tokens == reference_greedy("gpt_neox", "eager", (9, 8, 7, 6), 12)


def test_runs_cannot_interleave_on_one_fast_path():
    pair = cached_pair("llama", "eager", 0.02)
    first = iterate(pair, [3, 4, 5], "linear", LinearConfig(k=2), max_new_tokens=10, ignore_eos=True, runtime="static")
    next(first)
    second = iterate(pair, [6, 7], "linear", LinearConfig(k=2), max_new_tokens=10, ignore_eos=True, runtime="static")
    second.finish()
    with pytest.raises(RuntimeError, match="cannot interleave"):
        next(first)


@pytest.mark.parametrize("kwargs,match", [
    (dict(runtime="graphs"), "needs a CUDA device"),
    (dict(runtime="turbo"), "runtime must be one of"),
    (dict(runtime="static", static_len=20), "static_len=20 is too short"),
    (dict(runtime="static", buckets=(1, 2, 4)), "more than the largest bucket"),
])
def test_bad_fast_path_settings_fail_before_any_model_work(kwargs, match, monkeypatch):
    if DEVICE.type == "cuda" and kwargs.get("runtime") == "graphs":
        pytest.skip("graphs are available on this device")
    pair = cached_pair("llama", "sdpa", 0.02)
    monkeypatch.setattr(type(pair.target), "forward", lambda *a, **k: pytest.fail("a model ran"))
    with pytest.raises(ValueError, match=match):
        generate(pair, [3, 4, 5], "dynatree", DynaTreeConfig(n_max=8), max_new_tokens=16, **kwargs)


def test_buckets_pad_to_the_next_size_and_cover_the_largest_tree():
    assert fp.buckets_for(5) == (1, 2, 4, 8)
    assert fp.buckets_for(257)[-1] == 384
    assert fp.buckets_for(1000)[-1] == 1024  # past the defaults: the next power of two
    assert fp.bucket(9, (1, 4, 16)) == 16
    with pytest.raises(ValueError, match="larger than the largest bucket"):
        fp.bucket(17, (1, 4, 16))


def test_a_fast_path_holds_its_largest_forward_padded_to_its_bucket():
    """A fixed tree of N_max 256 verifies 257 nodes in a forward of 384 (its bucket): the cache holds the
    prompt, the new tokens and all 384, and a kept path with room for 257 only is not reused (it ran out of
    slots in the bench before: 129 committed entries + 384 > 512)."""
    import copy

    model = copy.deepcopy(cached_pair("llama", "sdpa", 0.0).target)
    small = fp.fast_path(model, "static", 130, 9)
    assert small.capacity == 256
    big = fp.fast_path(model, "static", 130, 257)
    assert big.buckets[-1] == 384 and big.capacity >= 130 + 384 and big is not small
    assert fp.fast_path(model, "static", 120, 257) is big  # it fits: kept


def test_static_target_cache_bookkeeping():
    cache = StaticTargetCache(SlotCache(layers=1, capacity=16, max_write=16, device=torch.device("cpu")))
    start = cache.reserve(4)
    cache.commit_written()  # a prefill of 4
    assert (start, cache.committed, cache.physical) == (0, 4, 4)
    start = cache.reserve(8)  # a tree of 8 (padded): keep root, nodes 2 and 5
    cache.keep(start, [0, 2, 5])
    assert (cache.committed, cache.physical, cache.dead) == (7, 10, 3)
    assert cache.visible(torch.device("cpu")).tolist()[:10] == [1, 1, 1, 1, 1, 0, 1, 0, 0, 1]
    start = cache.reserve(8)  # 10 + 8 > 16: the dead entries are compacted away first
    assert cache.compactions == 1 and start == 7
    with pytest.raises(RuntimeError, match="resolve the last forward"):
        cache.reserve(1)
    cache.drop_written()
    with pytest.raises(ValueError, match="static cache is full"):
        cache.reserve(10)


def test_the_drafts_device_bookkeeping_commits_in_place_and_compacts_between_trees():
    from dynatree_core.runtime.static.draft_forwards import DeviceSlotBook

    book = DeviceSlotBook(SlotCache(layers=1, capacity=16, max_write=16, device=torch.device("cpu")))
    start = book.reserve(3, room=4)  # a level-0 chain of 3 committed tokens
    book.commit_chain(start, 3)
    level = book.reserve(4)  # a tree level of 4 nodes at slots 3..6: keep nodes at slots 4 and 6
    book.commit_slots(torch.tensor([4, 6]), 2)
    assert (book.committed, book.physical) == (5, 7)
    assert book.alive.tolist()[:8] == [True, True, True, False, True, False, True, False] and level == 3
    start = book.reserve(2, room=8)  # 7 + 2 + 8 > 16: the next tree's level 0 compacts first
    assert book.compactions == 1 and start == 5 and book.alive.tolist()[:6] == [True] * 5 + [False]


def test_a_history_that_deepens_a_fixed_depth_tree_stays_in_its_resident_shape():
    """With a fixed depth, D_max is D0, and the history adapter raises D0 up to D_max - 1: the resident
    tree's static shape must be sized for the deepest rule the adapter can reach, not the first one
    (sized for D0 = 1 it had a frontier of width 1, and the level after a raise overflowed it)."""
    config = DynaTreeConfig(d0=1, d_max=3, b_min=1, b_mid=1, b_max=2, n_max=3, rho_stop=0.5, rho_deep=0.75,
                            dynamic_depth=False, history=dataclasses.replace(DynaTreeConfig().history, enabled=True,
                                                                             window=1, target_acceptance=0.5,
                                                                             eta_d=1.0, eta_h=0.0))
    runs = list(iterate(cached_pair("llama", "eager", 0.0), [2], "dynatree", config, max_new_tokens=8,
                        ignore_eos=True, runtime=STATIC, trace=True))
    # the adapter did deepen the rule: a level after the root's ran (the case is not vacuous)
    assert max(r.draft_forwards for r in runs) >= 2
    assert [t for r in runs for t in r.committed] == reference_greedy("llama", "eager", (2,), 8)
