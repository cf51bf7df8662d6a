"""Check the loop's counted host syncs against what CUDA itself reports (GPU only).

The engine counts every device -> host read it makes (:class:`~dynatree_core.runtime.tree.tree.HostSyncs`).
A hidden synchronisation - a ``.item()``, a boolean-mask index, a pageable host -> device copy
inside our code or the model's - would not be counted. PyTorch's sync debug mode warns on every
synchronising CUDA call; this module runs decoding under it and sets, per iteration, the counted
figure beside the observed one (``scripts/gpu_check.py`` reports both).
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import torch

from dynatree_core.policy.config import DecoderConfig
from dynatree_core.engine.api import iterate
from dynatree_core.pairs.pair import ModelPair


def audit_host_syncs(pair: ModelPair, prompt: str | Sequence[int], method: str = "dynatree",
                     config: DecoderConfig | None = None, max_new_tokens: int = 32) -> list[dict[str, Any]]:
    """Per iteration (after the first, which warms caches and allocators): ``counted`` host syncs,
    ``observed`` synchronising CUDA calls, and the draft levels. Needs a CUDA pair."""
    if pair.device.type != "cuda":
        raise ValueError(f"audit_host_syncs needs a pair on a CUDA device, got {pair.device}")
    run = iterate(pair, prompt, method, config, max_new_tokens=max_new_tokens, ignore_eos=True)
    rows = []
    old = torch.cuda.get_sync_debug_mode()
    try:
        first = True
        while True:
            torch.cuda.set_sync_debug_mode(0 if first else 1)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    rec = next(run)
                except StopIteration:
                    break
            if not first:
                seen = [w for w in caught if "synchroniz" in str(w.message)]
                rows.append({"iteration": rec.index, "counted": rec.host_syncs, "observed": len(seen),
                             "draft_levels": rec.draft_forwards,
                             "sources": sorted({f"{w.filename.rsplit('/', 2)[-1]}:{w.lineno}" for w in seen})})
            first = False
    finally:
        torch.cuda.set_sync_debug_mode(old)
    return rows
