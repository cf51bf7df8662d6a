"""Boolean visibility masks (torch-free): which cached and new tokens each new token may attend to.

:mod:`dynatree_core.runtime.model.forwards` turns them into the float additive masks models take; traces use
them to rebuild a verification mask without torch (so viewers can draw it).
"""

from __future__ import annotations

import numpy as np


def with_prefix(visible: np.ndarray, past_len: int) -> np.ndarray:
    """[q, past_len + q] visibility: the whole cache plus ``visible`` among the new tokens."""
    q = visible.shape[0]
    return np.concatenate([np.ones((q, past_len), dtype=bool), visible], axis=1)


def causal_visibility(q: int) -> np.ndarray:
    """Plain causal visibility for a chain of q new tokens."""
    return np.tril(np.ones((q, q), dtype=bool))
