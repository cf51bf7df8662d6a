"""Per-run metrics (torch-free), computed from per-iteration counts the engine collects."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass
class Metrics:
    """What one ``generate`` call cost and achieved.

    ``acceptance_rate`` (a): accepted draft tokens / depth of the drafted trees, summed over
    iterations (for a chain of K this is the usual accepted/K; it lies in [0, 1]; a prompt-lookup
    tail's nodes count as drafted).
    ``tokens_per_iteration`` (L̄): committed tokens per verification round (bonus included).
    ``mean_accepted_length`` (ℓ̄): committed path length before the bonus token.
    """

    new_tokens: int
    wall_time_s: float
    tokens_per_s: float
    ttft_s: float | None
    tpot_s: float | None
    iterations: int
    tokens_per_iteration: float | None
    mean_accepted_length: float | None
    acceptance_rate: float | None
    target_forwards: int
    draft_forwards: int
    target_forwards_per_token: float | None
    draft_forwards_per_iteration: float | None
    mean_tree_size: float | None
    prefill_time_s: float
    draft_time_s: float
    verify_time_s: float
    commit_time_s: float
    peak_memory_bytes: int | None
    peak_memory_kind: str
    stopped_by: str
    #: time inside model forwards (target and draft, prefill included); on CUDA from CUDA events
    forward_time_s: float = 0.0
    #: engine overhead per iteration (ms): (wall time - time inside model forwards) / iterations
    engine_overhead_ms: float | None = None
    #: device -> host synchronisations in the decode loop (see :mod:`dynatree_core.runtime.tree.tree`)
    host_syncs: int = 0
    host_syncs_per_iteration: float | None = None
    #: max over iterations of host syncs - (draft levels + 1), a lookup tail's read counted as a
    #: level; <= 0 means the budget always held
    host_sync_excess: int = 0
    #: the draft and verify phases' host time: how long the host took to issue them (on a GPU the
    #: phase times above are the device's, between marks on the stream; on a CPU the two agree;
    #: None in files written before they were kept apart)
    draft_host_s: float | None = None
    verify_host_s: float | None = None
    #: what measured the phase times: "cuda_events" (device time on the stream) or "host"
    phase_clock: str = "host"
    #: graphs dynamo compiled during the run (a benchmark's timed decode must show 0: it warms first)
    compiles: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def compare_to(self, ar: "Metrics", label: str = "dynatree") -> str:
        """One line: the speed ratio against an AR run and why (see :func:`explain_speedup`)."""
        return explain_speedup(self, ar, label)

    @classmethod
    def from_dict(cls, d: dict) -> "Metrics":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def summarize(*, new_tokens: int, wall_time_s: float, ttft_s: float | None, iterations: int,
              accepted: list[int], committed: list[int], depths: list[int], tree_sizes: list[int],
              target_forwards: int, draft_forwards: int, prefill_time_s: float, draft_time_s: float,
              verify_time_s: float, commit_time_s: float, peak_memory_bytes: int | None,
              peak_memory_kind: str, stopped_by: str, speculative: bool, forward_time_s: float = 0.0,
              host_syncs: list[int] | None = None, draft_levels: list[int] | None = None,
              draft_host_s: float | None = None, verify_host_s: float | None = None, phase_clock: str = "host",
              compiles: int = 0) -> Metrics:
    """Aggregate per-iteration lists into :class:`Metrics`."""
    syncs, levels = host_syncs or [], draft_levels or []
    tpot = None
    if ttft_s is not None and new_tokens > 1:
        tpot = (wall_time_s - ttft_s) / (new_tokens - 1)
    return Metrics(
        new_tokens=new_tokens,
        wall_time_s=wall_time_s,
        tokens_per_s=new_tokens / wall_time_s if wall_time_s > 0 else 0.0,
        ttft_s=ttft_s,
        tpot_s=tpot,
        iterations=iterations,
        tokens_per_iteration=_ratio(sum(committed), iterations),
        mean_accepted_length=_ratio(sum(accepted), iterations) if speculative else None,
        acceptance_rate=_ratio(sum(accepted), sum(depths)) if speculative else None,
        target_forwards=target_forwards,
        draft_forwards=draft_forwards,
        target_forwards_per_token=_ratio(target_forwards, new_tokens),
        draft_forwards_per_iteration=_ratio(draft_forwards, iterations),
        mean_tree_size=_ratio(sum(tree_sizes), iterations) if speculative else None,
        prefill_time_s=prefill_time_s,
        draft_time_s=draft_time_s,
        verify_time_s=verify_time_s,
        commit_time_s=commit_time_s,
        peak_memory_bytes=peak_memory_bytes,
        peak_memory_kind=peak_memory_kind,
        stopped_by=stopped_by,
        forward_time_s=forward_time_s,
        engine_overhead_ms=(1e3 * (wall_time_s - forward_time_s) / iterations) if iterations else None,
        host_syncs=sum(syncs),
        host_syncs_per_iteration=_ratio(sum(syncs), iterations),
        host_sync_excess=max((s - (lv + 1) for s, lv in zip(syncs, levels)), default=0),
        draft_host_s=draft_host_s,
        verify_host_s=verify_host_s,
        phase_clock=phase_clock,
        compiles=compiles,
    )


def _get(m: Any, name: str) -> Any:
    return m.get(name) if isinstance(m, Mapping) else getattr(m, name, None)


def iteration_ms(m: Any) -> float | None:
    """Decoding time per iteration (ms): wall time without the prefill, over iterations.

    Works on a :class:`Metrics` or a benchmark aggregate (a mapping with the same names)."""
    wall, prefill, its = _get(m, "wall_time_s"), _get(m, "prefill_time_s") or 0.0, _get(m, "iterations")
    if wall is None or not its:
        return None
    return 1e3 * (wall - prefill) / its


def explain_speedup(m: Any, ar: Any, label: str) -> str:
    """Why a speculative method is as fast as it is against AR on this machine, in one line.

    A method that commits L̄ tokens per iteration, where an iteration (draft + one verify forward
    over the tree + commit) costs as much as L* AR steps, runs at about L̄ / L* of AR's speed.
    On a CPU the verify forward grows with the tree, so L* can exceed L̄: then the output says
    the method is slower and by which measured costs, instead of leaving a bare ratio under 1."""
    tps, tps_ar = _get(m, "tokens_per_s"), _get(ar, "tokens_per_s")
    t_it, t_ar = iteration_ms(m), iteration_ms(ar)
    big_l = _get(m, "tokens_per_iteration")
    if not tps or not tps_ar or not t_it or not t_ar or not big_l:
        return f"{label}: not enough measurements to compare with AR"
    ratio = tps / tps_ar
    its = _get(m, "iterations") or 1
    draft = 1e3 * (_get(m, "draft_time_s") or 0.0) / its
    verify = 1e3 * (_get(m, "verify_time_s") or 0.0) / its
    nodes = (_get(m, "mean_tree_size") or 0.0) + 1  # the root is verified too
    break_even = t_it / t_ar
    cost = (f"an iteration costs {t_it:.0f} ms (draft {draft:.0f} ms + verify over {nodes:.1f} tokens {verify:.0f} ms"
            f" + the rest) = {break_even:.2f} AR steps of {t_ar:.0f} ms")
    if ratio < 1:
        return (f"{label} is slower than AR here ({ratio:.2f}x): it commits L̄={big_l:.2f} tokens per iteration, but "
                f"{cost}; it pays once L̄ exceeds {break_even:.2f}")
    return f"{label} is {ratio:.2f}x AR: it commits L̄={big_l:.2f} tokens per iteration, and {cost}"
