"""A resident tree's verify runs at the bucket of its real nodes where reading their count pays
(:mod:`dynatree_core.runtime.static.size_read`): on a CPU always (the read is free), on a GPU where the
bucket it saves costs more than the read. Exact either way, and the trees are the eager path's."""

from __future__ import annotations

import dataclasses

import pytest

from dynatree_core import iterate
from dynatree_core.drafters import LookupMix
from dynatree_core.policy.config import DynaTreeConfig, Eagle2Config, FixedTreeConfig
from dynatree_core.runtime import backend
from dynatree_core.runtime.static.fast_path import FastPath, bucket
from dynatree_core.runtime.static.size_read import SizeRead
from dynatree_core.runtime.tree.tree import DeviceTree, resident_shape

from helpers import cached_pair, reference_greedy

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384)
PROMPT = [5, 9, 14, 3, 22, 7, 31, 12, 5, 9, 14, 3]


def test_a_free_read_is_made_wherever_a_smaller_bucket_exists():
    cpu = SizeRead(BUCKETS)  # untimed, read_s 0: a CPU
    assert cpu.read(33) and cpu.read(13) and not cpu.read(1)  # a root alone has no smaller bucket
    assert (cpu.reads, cpu.asked) == (2, 3)
    assert not SizeRead(BUCKETS, read_s=1e-5).read(33)  # untimed but not free: no read


def test_a_priced_read_is_made_where_the_bucket_it_saves_costs_more():
    """A GPU's flat curve up to 64 (the launches, not the FLOPs, cost) and a steep one past it: DynaTree
    ``gpu``'s 48 slots read nothing, a fixed tree's 384 reads while its trees stay small, and stops once
    the selections show trees that fill the big buckets anyway."""
    curve = {b: 1e-3 if b <= 64 else 1e-3 * b / 64 for b in BUCKETS}
    gpu = SizeRead(BUCKETS, curve, read_s=5e-5)
    assert not gpu.read(33)  # 48 costs what 1 costs: the read would only wait
    assert gpu.read(257)  # 384 slots: 6 ms against 1 ms
    gpu.observe(9)
    assert gpu.read(257) and gpu.expected == pytest.approx(1e-3)
    for _ in range(40):
        gpu.observe(300)  # the trees fill 384: a read saves nothing
    assert not gpu.read(257)


def test_a_verify_runs_at_the_cheapest_timed_bucket_that_holds_it():
    """The H200's graphs curve of 2026-11-28 (docs/gpu.md, fp32 ms by bucket) does not rise with the size:
    16 entries run cheaper in bucket 24, and 33 in 48 (64 costs a little more). Untimed, bucket(n)."""
    h200 = {1: 4.38, 2: 5.38, 4: 5.28, 8: 8.40, 16: 8.81, 24: 5.95, 32: 5.98, 48: 6.45, 64: 6.52}
    buckets = tuple(h200)
    size = SizeRead(buckets, {b: ms / 1e3 for b, ms in h200.items()}, read_s=5e-5)
    assert [size.padded(n) for n in (1, 2, 3, 9, 16, 25, 33)] == [1, 4, 4, 24, 24, 32, 48]
    assert [SizeRead(buckets).padded(n) for n in (3, 9, 33)] == [4, 16, 48]
    size.observe(9)  # E = c(24): 5.95 ms, against c(48) = 6.45 for every slot: 0.5 ms saved, dearer than the read
    assert size.read(33)
    dear = SizeRead(buckets, size.bucket_s, read_s=1e-3)
    dear.observe(9)
    assert not dear.read(33)  # a read dearer than what it saves


def _verified(monkeypatch, target) -> list[int]:
    """The bucket of every forward a static run makes on ``target``'s path (the draft's has its own)."""
    seen: list[int] = []
    entry = FastPath.entry

    def spy(self, b, hidden):
        if self.model is target:
            seen.append(b)
        return entry(self, b, hidden)

    monkeypatch.setattr(FastPath, "entry", spy)
    return seen


CONFIGS = [("dynatree", DynaTreeConfig.cpu()), ("dynatree", DynaTreeConfig.gpu()),
           ("fixed_tree", FixedTreeConfig(d=3, b=3, n_max=30)), ("eagle2", Eagle2Config(k=3, depth=4, n_total=10))]


@pytest.mark.parametrize("method,config", CONFIGS)
def test_on_a_cpu_each_verify_runs_at_its_nodes_bucket_and_grows_the_eager_trees(method, config, monkeypatch):
    """Every policy's resident tree (a lookup tail below DynaTree's leaves, EAGLE-2's rerank) verifies its
    root, drafted nodes and tail at bucket(n) (smaller than its shape's bucket in some iterations), reads the
    device twice, and grows, verifies and commits what the eager path does."""
    pair = dataclasses.replace(cached_pair("llama", "sdpa", 0.05), lookup=LookupMix())
    eager = list(iterate(pair, PROMPT, method, config, max_new_tokens=24, ignore_eos=True, runtime="eager"))
    verified = _verified(monkeypatch, pair.target)
    run = iterate(pair, PROMPT, method, config, max_new_tokens=24, ignore_eos=True, runtime="static")
    fast = list(run)
    assert [(r.tree.tokens, r.tree.parents) for r in fast] == [(r.tree.tokens, r.tree.parents) for r in eager]
    assert [r.committed for r in fast] == [r.committed for r in eager]
    buckets = run.target.path.buckets
    shape = bucket(resident_shape(config.growth_rule(), run._draft_top_k())[2], buckets)
    trees = [len(r.tree.tokens) for r in fast]
    assert verified[-len(fast):] == [bucket(n, buckets) for n in trees]
    assert any(bucket(n, buckets) < shape for n in trees)  # the read paid somewhere
    # free, so made wherever the shape's bucket is not the smallest: in every iteration that drafted (the last
    # one, one token left, may verify its root alone)
    assert all(r.host_syncs == 2 for r in fast if r.draft_forwards) and all(r.host_syncs in (1, 2) for r in fast)
    assert run.target.size_read.reads == sum(r.host_syncs - 1 for r in fast) >= len(fast) - 1


def test_priced_like_a_gpu_the_verify_runs_at_the_shapes_bucket_with_one_read(monkeypatch):
    """A read dearer than any bucket it could save (untimed, not free): no read, every slot verified."""
    monkeypatch.setattr(backend, "read_price", lambda device: 1.0)
    pair = cached_pair("llama", "sdpa", 0.05)
    config = DynaTreeConfig.gpu()
    verified = _verified(monkeypatch, pair.target)
    run = iterate(pair, PROMPT, "dynatree", config, max_new_tokens=24, ignore_eos=True, runtime="static")
    fast = list(run)
    shape = bucket(resident_shape(config.growth_rule(), run._draft_top_k())[2], run.target.path.buckets)
    assert verified[-len(fast):] == [shape] * (len(fast) - 1) + [1]
    assert all(r.host_syncs == 1 for r in fast)
    assert run.target.size_read.reads == 0
    assert [t for r in fast for t in r.committed] == reference_greedy("llama", "sdpa", tuple(PROMPT), 24)


def test_a_size_read_that_leaves_the_lookup_tail_out_is_caught(monkeypatch):
    """The wrong read (the drafted nodes' count, the tail's slots left out) still decodes exactly (the
    tail's nodes are never verified, so never accepted), but its trees are no longer the eager path's:
    the tree comparison above fails on it."""
    def drafted_only(self, syncs):
        self.n = int(syncs.fetch(n=self._n_dev - self._tail_dev)["n"])

    monkeypatch.setattr(DeviceTree, "read_size", drafted_only)
    pair = dataclasses.replace(cached_pair("llama", "sdpa", 0.05), lookup=LookupMix())
    config = DynaTreeConfig.cpu()
    eager = list(iterate(pair, PROMPT, "dynatree", config, max_new_tokens=24, ignore_eos=True, runtime="eager"))
    fast = list(iterate(pair, PROMPT, "dynatree", config, max_new_tokens=24, ignore_eos=True, runtime="static"))
    assert [t for r in fast for t in r.committed] == [t for r in eager for t in r.committed]
    assert [r.tree.tokens for r in fast] != [r.tree.tokens for r in eager]


def test_a_compiled_run_compiles_the_inputs_of_every_bucket_at_its_first_size_read(monkeypatch):
    """On a compiling runtime a size read makes the verify's inputs take shapes the tree's own bucket never
    gave them; they compile at the run's first read (in a benchmark: its untimed warm-up), not in whichever
    later iteration first verifies a tree that small. A cache length of its own (``static_len``) keeps other
    tests' compiles of the same region apart; dynamo's eager backend keeps it quick."""
    from dynatree_core.runtime.static import fast_path, regions

    monkeypatch.setenv("DYNATREE_COMPILE_BACKEND", "eager")
    pair = cached_pair("llama", "sdpa", 0.05)
    verified = _verified(monkeypatch, pair.target)
    try:
        run = iterate(pair, PROMPT, "dynatree", DynaTreeConfig.gpu(), max_new_tokens=24, ignore_eos=True,
                      runtime="compiled", static_len=320)
        first = next(run)
        region = regions._REGIONS[(f"{backend.verify_inputs.__module__}.verify_inputs", "compiled", "cpu", "eager")]
        compiled_at_first = len(region.graphs)
        rest = list(run)
        assert len(region.graphs) == compiled_at_first  # nothing compiled after the first iteration
        assert len(set(verified[-len(rest):]) - {verified[-len(rest) - 1]}) >= 2  # though the trees took new buckets
        assert [t for r in [first, *rest] for t in r.committed] == reference_greedy("llama", "sdpa", tuple(PROMPT),
                                                                                     24)
    finally:  # forwards compiled through the eager backend must not serve a later test's compiled run
        for model in (pair.target, pair.draft):
            fast_path._PATHS.pop(model, None)
