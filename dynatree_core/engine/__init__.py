"""The engine: one decode loop (draft, verify, select, commit, plus history) for every method.

Modules: ``loop`` (:class:`DecodingRun`, the algorithm), ``collector`` (timers, counters, trace
records), ``calibrate`` (what cost-aware DynaTree and Sequoia measure about a pair), ``api``
(:func:`generate`, :func:`iterate`), ``session`` (one context, many trees: the live explorers),
``sync_audit`` (CUDA's count of host syncs against the loop's own). The public names are re-exported
here (and from :mod:`dynatree_core`).

Imports the pairs, drafters, runtime, records and policy; never the benchmark, distillation, the
views or the CLI, which build on it.
"""

from __future__ import annotations

from dynatree_core.engine.api import generate, iterate
from dynatree_core.engine.loop import DecodingRun, tail_lookup
from dynatree_core.engine.run_checks import encode_prompt
from dynatree_core.records.result import GenerationResult

__all__ = ["DecodingRun", "GenerationResult", "encode_prompt", "generate", "iterate", "tail_lookup"]
