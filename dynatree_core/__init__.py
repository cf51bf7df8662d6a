"""dynatree_core: exact, fully traced tree speculative decoding (DynaTree and baselines).

Heavy names (``ModelPair``, ``generate``, ...) are imported lazily so that the torch-free parts
(``dynatree_core.config``, ``.tree``, ``.trace``, ``.history``) load without torch: that is what
lets :mod:`dynatree_viz` render saved traces on a machine without it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ModelPair": "dynatree_core.models",
    "generate": "dynatree_core.engine",
    "iterate": "dynatree_core.engine",
    "GenerationResult": "dynatree_core.engine",
    "ARConfig": "dynatree_core.config",
    "LinearConfig": "dynatree_core.config",
    "FixedTreeConfig": "dynatree_core.config",
    "DynaTreeConfig": "dynatree_core.config",
    "HistoryConfig": "dynatree_core.config",
    "GrowthRule": "dynatree_core.config",
    "METHODS": "dynatree_core.config",
    "DraftTree": "dynatree_core.tree",
    "grow_tree": "dynatree_core.tree",
    "replay_tree": "dynatree_core.tree",
    "Trace": "dynatree_core.trace",
    "IterationRecord": "dynatree_core.trace",
    "HistoryState": "dynatree_core.history",
    "HistoryAdapter": "dynatree_core.history",
    "Metrics": "dynatree_core.metrics",
    "PromptLookup": "dynatree_core.drafters",
    "LookupMix": "dynatree_core.drafters",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dynatree_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
