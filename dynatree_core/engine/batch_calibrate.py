"""Measure c(B, w) and d(B) for a batch's shared node budget (:class:`~dynatree_core.policy.batch_budget.BatchCost`).

c(B, w): one target forward over B rows of w tokens each after a prefix, on the rectangular cache a
batch runs on (:class:`~dynatree_core.runtime.cache.rows.RowsCache`); d(B): one draft forward over
B rows of two tokens (a tree level; a feature draft reads zero features beside them). Timed at
B = 1, 2, 4, ... up to the batch's size and the size itself (between them the budget interpolates),
widths 1 .. the widest tree; the median of ``repeats``. Cached on disk per pair and device like the
batch-1 calibrations.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from typing import Any

import torch

from dynatree_core.drafters.batch_feature import FeatureKV
from dynatree_core.drafters.feature_draft import FeatureDraftModel
from dynatree_core.engine.calibrate import _cache_path, _read, _write, pair_key
from dynatree_core.policy.batch_budget import BatchCost
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.cache.rows import RowsCache

#: the prefix the forwards are timed after (about a benchmark prompt)
PREFIX = 192


def batch_sizes(rows: int) -> list[int]:
    """The batch sizes timed for a batch of ``rows``: powers of two below it, and itself."""
    out, b = [], 1
    while b < rows:
        out.append(b)
        b *= 2
    return out + [rows]


@torch.inference_mode()
def _forward_s(model: torch.nn.Module, rows: int, width: int, repeats: int, device: torch.device) -> float:
    # a feature draft runs over its own store and reads a feature beside each token (zeros cost the same)
    feature = isinstance(model, FeatureDraftModel)
    cache = RowsCache(model, rows, device, kv=FeatureKV(model) if feature else None)
    gen = torch.Generator().manual_seed(0)
    vocab = min(1000, int(model.config.vocab_size))
    hidden = int(model.config.hidden_size)

    def feats(n: int) -> torch.Tensor | None:
        return torch.zeros((rows, n, hidden), dtype=cache.dtype, device=device) if feature else None

    prefix = torch.randint(0, vocab, (rows, PREFIX), generator=gen).tolist()
    _, start, _ = cache.chain(prefix, feats=None if not feature else list(feats(PREFIX)))
    cache.commit([torch.arange(start, start + PREFIX, device=device)] * rows)
    new = torch.randint(0, vocab, (rows, width), generator=gen).to(device)
    pos = (PREFIX + torch.arange(width, device=device))[None].expand(rows, width).contiguous()
    mask = torch.ones((width, width), dtype=torch.bool, device=device).tril().expand(rows, width, width).contiguous()
    times = []
    for _ in range(repeats + 1):  # the first is a warmup
        pl.synchronize(device)
        t0 = time.perf_counter()
        cache.forward(new, pos, mask, feats=feats(width))
        pl.synchronize(device)
        times.append(time.perf_counter() - t0)
        cache.commit([[]] * rows)  # nothing kept: the next forward sees the same prefix
    return statistics.median(times[1:])


def measure_batch_cost(pair: Any, rows: int, widest: int, repeats: int = 5) -> BatchCost:
    """Time c(B, w) for the batch sizes of :func:`batch_sizes` and w = 1 .. ``widest``, and d(B)."""
    if rows < 1 or widest < 1:
        raise ValueError(f"rows and widest must be >= 1, got rows={rows}, widest={widest}")
    device = pair.device
    sizes = batch_sizes(rows)
    verify = tuple(tuple(_forward_s(pair.target, b, w, repeats, device) for w in range(1, widest + 1))
                   for b in sizes)
    draft = tuple(_forward_s(pair.draft, b, 2, repeats, device) if isinstance(pair.draft, torch.nn.Module)
                  else 0.0 for b in sizes)
    meta = {"prefix_len": PREFIX, "repeats": repeats, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return BatchCost(tuple(sizes), verify, draft, meta)


def batch_cost(pair: Any, rows: int, widest: int, recalibrate: bool = False) -> BatchCost:
    """:func:`measure_batch_cost`, cached on disk per pair, device, batch size and width."""
    key = {**pair_key(pair), "batch_cost": f"{rows}x{widest}"}
    path = _cache_path(key)
    doc = _read(path) if not recalibrate and path.exists() else {}
    if "batch_cost" in doc:
        return BatchCost.from_dict(doc["batch_cost"])
    cost = measure_batch_cost(pair, rows, widest)
    _write(path, key, "batch_cost", cost.to_dict())
    return cost
