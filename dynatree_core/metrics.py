"""Per-run metrics (torch-free), computed from per-iteration counts the engine collects."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class Metrics:
    """What one ``generate`` call cost and achieved.

    ``acceptance_rate`` (a): accepted draft tokens / depth of the drafted trees, summed over
    iterations (for a chain of K this is the usual accepted/K; it lies in [0, 1]).
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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

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
              peak_memory_kind: str, stopped_by: str, speculative: bool) -> Metrics:
    """Aggregate per-iteration lists into :class:`Metrics`."""
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
    )
