"""A batch's AR step (:meth:`dynatree_core.engine.batch.BatchRun._step`): batched AR, and every iteration a
shared budget sits out, run for all rows at once. One forward, one read of every row's token, the selections
built on the host; no tree ops per row. Its selections are what a root-only tree's select returns, its traces
are batch 1's, its host ops do not grow with the rows (a drafting iteration's do: the counter sees per-row ops),
and a sat-out iteration dispatches what an AR step does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dynatree_core import generate, iterate
from dynatree_core.policy.batch_budget import BatchBudget, BatchCost
from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.runtime.host_syncs import HostSyncs
from dynatree_core.runtime.tree.codes import CODE
from dynatree_core.runtime.tree.tree import DeviceTree, root_selection

from helpers import cached_pair, reference_greedy
from helpers.exactness import ARCHS, DIFFERING_NOISE
from helpers.scripts import load_script

ROWS = [[5, 9, 2, 33], [1, 2], [40, 41, 42, 43, 44, 45], [7, 7, 8], [3, 4, 5, 6, 7]]


def _op_counter():
    return load_script("count_ops").OpCounter


class _Never(BatchBudget):
    """A shared budget that sits out every iteration (an AR step each time)."""

    def __init__(self, drafting: bool = False):
        super().__init__(BatchCost((1, 4), tuple(tuple(0.05 + 1e-3 * b * w for w in range(1, 40)) for b in (1, 4)),
                                   (0.005, 0.005)))
        self.drafting = drafting

    def drafts(self, rows):
        return self.drafting


@pytest.mark.parametrize("top_k", [1, 4])
@pytest.mark.parametrize("sat_out", [False, True])
@pytest.mark.parametrize("pack", [None, True])
def test_root_selection_is_what_a_root_alone_selects(top_k, sat_out, pack):
    """Same path, bonus, array names, dtypes, shapes and values as a root-only DeviceTree's select (read
    where it lies, or packed as a GPU's read is)."""
    tree = DeviceTree(7, DynaTreeConfig(n_max=8).growth_rule(), top_k, torch.device("cpu"))
    if sat_out:
        tree.sit_out()
    argmax = torch.tensor([11])
    want = tree.select(argmax, HostSyncs(pack))
    got = root_selection(7, 11, tree.k_used, CODE["batch"] if sat_out else 0)
    assert (got.path, got.bonus) == (want.path, want.bonus) == ([], 11)
    assert sorted(got.arrays) == sorted(want.arrays)
    for name, a in want.arrays.items():
        b = got.arrays[name]
        assert (b.dtype, b.shape) == (a.dtype, a.shape), name
        assert np.array_equal(a, b), name


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("runtime", ["eager", "static"])
def test_batched_ar_records_batch_one_s_trees_and_reads_once_per_step(arch, runtime):
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    prompt = [5, 9, 2, 33, 7]
    one = generate(pair, prompt, "ar", max_new_tokens=12, ignore_eos=True, trace=True).trace
    run = iterate(pair, [prompt, [1, 2, 3]], "ar", max_new_tokens=12, ignore_eos=True, trace=True, runtime=runtime)
    its = list(run)
    batch = run.finish()[0].trace
    assert batch.tokens == one.tokens == reference_greedy(arch, "sdpa", tuple(prompt), 12)
    for a, b in zip(one, batch, strict=True):
        assert a.tree.to_dict() == b.tree.to_dict()
        assert (a.accepted_path, a.committed, a.bonus, a.target_argmax, a.host_syncs) == \
            (b.accepted_path, b.committed, b.bonus, b.target_argmax, b.host_syncs) == ([], a.committed, a.bonus,
                                                                                      [a.bonus], 1)
    assert run.syncs.count == len(its)  # ONE read per step, for both rows


def _engine_ops_per_iteration(pair, rows, method, config=None, budget=None) -> float:
    OpCounter = _op_counter()
    run = iterate(pair, rows, method, config, max_new_tokens=10, ignore_eos=True, budget=budget)
    next(run)  # the first iteration may build cached constants
    with OpCounter() as c:
        its = sum(1 for _ in run)
    return c.kinds["engine"] / its


@pytest.mark.parametrize("arch", ARCHS)
def test_an_ar_step_s_host_ops_do_not_grow_with_the_rows(arch):
    """Batched AR's and a sat-out iteration's tensor ops outside the models are the same at B = 1 and B = 5
    (the rows' tokens are written, read and committed as one tensor each); a drafting iteration's grow with
    every row's tree, so the counter does see per-row ops."""
    pair = cached_pair(arch, "sdpa", DIFFERING_NOISE[arch])
    one, five = [ROWS[0]], ROWS
    ar = [_engine_ops_per_iteration(pair, r, "ar") for r in (one, five)]
    assert ar[1] == ar[0]
    sat = [_engine_ops_per_iteration(pair, r, "dynatree", DynaTreeConfig(n_max=8), _Never()) for r in (one, five)]
    drafting = [_engine_ops_per_iteration(pair, r, "dynatree", DynaTreeConfig(n_max=8), _Never(True))
                for r in (one, five)]
    assert drafting[1] - drafting[0] > 4 * 40  # each drafting row's tree: tens of ops
    assert sat == ar  # the draft model notes what it sat out on the host (a feature draft queues its states)


def test_an_ar_step_commits_only_a_column_the_cache_holds():
    from dynatree_core.runtime.cache.rows import RowsCache

    cache = RowsCache(cached_pair("llama", "sdpa", 0.0).target, 2, torch.device("cpu"))
    with pytest.raises(ValueError, match="column 0 is not among the cache's 0 columns"):
        cache.commit_column(0)
