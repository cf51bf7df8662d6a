"""dynatree_core: exact, fully traced tree speculative decoding (DynaTree and baselines).

Packages, bottom to top (each imports only the ones below it; ``docs/architecture.md`` draws them,
and ``pyproject.toml``'s import-linter contracts enforce it):

* :mod:`~dynatree_core.policy`   torch-free: configs, the growth rule and the tree it grows, the
  history adapter, the cost model, Sequoia's DP, prompt lookup's settings;
* :mod:`~dynatree_core.records`  torch-free: traces, metrics, the oracle replay, reliability;
* :mod:`~dynatree_core.runtime`  tensors on the model's device: forwards, masks, KV caches, the
  device tree, n-gram matching, linear kernels, host syncs;
* :mod:`~dynatree_core.drafters` where draft distributions come from (model, feature, lookup, mix)
  and the draft networks;
* :mod:`~dynatree_core.pairs`    the target/draft :class:`ModelPair`, loading, the embedded default
  pair, tiny random pairs;
* :mod:`~dynatree_core.engine`   the decode loop (draft, verify, select, commit), its collector,
  live sessions, calibrations;
* :mod:`~dynatree_core.bench` and :mod:`~dynatree_core.distill` (independent of each other), then
  :mod:`dynatree_viz`, then :mod:`~dynatree_core.cli` on top.

Public names are imported lazily (``from dynatree_core import generate`` loads the engine only
then), so the torch-free packages load without torch: that is what lets :mod:`dynatree_viz` render
saved traces on a machine without it.
"""

from __future__ import annotations

import importlib
from typing import Any

from dynatree_core.version import __version__

_LAZY = {
    "ModelPair": "dynatree_core.pairs.pair",
    "generate": "dynatree_core.engine.api",
    "iterate": "dynatree_core.engine.api",
    "GenerationResult": "dynatree_core.records.result",
    "ARConfig": "dynatree_core.policy.configs",
    "LinearConfig": "dynatree_core.policy.configs",
    "FixedTreeConfig": "dynatree_core.policy.configs",
    "Eagle2Config": "dynatree_core.policy.configs",
    "SequoiaConfig": "dynatree_core.policy.configs",
    "DynaTreeConfig": "dynatree_core.policy.dynatree_config",
    "HistoryConfig": "dynatree_core.policy.dynatree_config",
    "GrowthRule": "dynatree_core.policy.growth_rule",
    "METHODS": "dynatree_core.policy.config",
    "DraftTree": "dynatree_core.policy.tree",
    "grow_tree": "dynatree_core.policy.growth",
    "replay_tree": "dynatree_core.policy.replay",
    "Trace": "dynatree_core.records.trace",
    "IterationRecord": "dynatree_core.records.trace",
    "HistoryState": "dynatree_core.policy.history",
    "HistoryAdapter": "dynatree_core.policy.history",
    "Metrics": "dynatree_core.records.metrics",
    "PromptLookup": "dynatree_core.policy.lookup",
    "LookupMix": "dynatree_core.drafters.mix",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dynatree_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__

