"""What a decode returns (torch-free): the tokens, the text, the metrics, the trace."""

from __future__ import annotations

from dataclasses import dataclass

from dynatree_core.policy.history import HistoryState
from dynatree_core.records.metrics import Metrics
from dynatree_core.records.trace import Trace


@dataclass
class GenerationResult:
    """What :func:`~dynatree_core.engine.api.generate` returns."""

    tokens: list[int]
    text: str | None
    metrics: Metrics
    trace: Trace | None
    prompt_tokens: list[int]
    #: the history adapter's final state (DynaTree); pass it as ``history=`` to carry on
    history_state: HistoryState | None = None
