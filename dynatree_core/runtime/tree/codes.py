"""The device tree's status codes and the small constant tensors its growth reads every level.

Stop reasons are stored on the device as codes (their index in
:data:`~dynatree_core.policy.tree.STOP_REASONS`; 0 = "expanded") and every draft candidate of an
expanded node carries a status (kept, beyond B(u), or pruned and why), from which the trace's list
of pruned candidates is rebuilt on the host (:mod:`dynatree_core.runtime.tree.to_host`). The tables are
made once per device and cached.
"""

from __future__ import annotations

import functools

import torch

from dynatree_core.policy.tree import STOP_REASONS
from dynatree_core.runtime.host_syncs import to_device

#: stop reasons by code, as stored on the device (code 0 = "expanded")
CODE = {r: i for i, r in enumerate(STOP_REASONS)}
#: draft candidate status per (expanded node, rank), for rebuilding the trace's pruned list
BEYOND_B, KEPT, PRUNED_TAU, PRUNED_NMAX, PRUNED_COST, PRUNED_RERANK, PRUNED_BATCH = 0, 1, 2, 3, 4, 5, 6
PRUNE_REASON = {PRUNED_TAU: "tau", PRUNED_NMAX: "n_max", PRUNED_COST: "cost", PRUNED_RERANK: "rerank",
                PRUNED_BATCH: "batch"}


# Small constant tensors the growth reads every level, made once per device (under inference mode
# they would be inference tensors, which tests that grow trees outside it could not index with).
@functools.lru_cache(maxsize=64)
def arange_on(device: torch.device, n: int) -> torch.Tensor:
    with torch.inference_mode(False):
        return torch.arange(n, device=device)


@functools.lru_cache(maxsize=16)
def true_on(device: torch.device) -> torch.Tensor:
    """[1] True: the root's validity as the first level's frontier."""
    with torch.inference_mode(False):
        return torch.ones(1, dtype=torch.bool, device=device)


@functools.lru_cache(maxsize=64)
def breadth_table(device: torch.device, b_min: int, b_mid: int, b_max: int, k: int) -> torch.Tensor:
    """B(u) by the confidence's bucket (c < τ_ℓ, τ_ℓ <= c < τ_h, c >= τ_h): b_max, b_mid, b_min (at most k).
    The thresholds themselves travel with the run's parameters
    (:class:`~dynatree_core.runtime.tree.level_step.StepRule`): the history adapter moves τ_h every iteration."""
    with torch.inference_mode(False):
        return to_device([min(b, k) for b in (b_max, b_mid, b_min)], device)


@functools.lru_cache(maxsize=16)
def stop_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The stop code of an expanded node from its candidates' statuses: each status gets a weight
    (kept 4 > cut by the cost 3 > by the budget 2 > by tau 1 > beyond B(u) 0), and the row's
    strongest weight names the code (kept: 0, still expanded; else "cost", "n_max" or "tau")."""
    with torch.inference_mode(False):
        rank = {BEYOND_B: 0, PRUNED_TAU: 1, PRUNED_NMAX: 2, PRUNED_COST: 3, KEPT: 4}
        weight = to_device([rank[s] for s in range(len(rank))], device)  # by status
        code = to_device([CODE["tau"], CODE["tau"], CODE["n_max"], CODE["cost"], 0], device, torch.int8)  # by weight
    return weight, code


