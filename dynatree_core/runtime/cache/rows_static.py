"""The static runtime's store for a batch: a rows cache's keys and values in preallocated buffers.

:class:`SlotKV` is a :class:`~dynatree_core.runtime.cache.rows.RowsCache` store whose every layer holds
B rows' keys and values in ``[B, heads, capacity, dim]`` buffers (a
:class:`~dynatree_core.runtime.cache.slots.SlotCache`), allocated once. A forward of q queries writes
columns S .. S + q (S: the rows cache's width) in place and attends over all ``capacity`` columns, the
ones past S + q masked; a crop moves S back (what lies past it is written over later); a compaction
gathers each row's live entries to the front in place. So a forward's shapes depend only on B, q and
the capacity: with q padded to a bucket, what a compiled or captured forward needs. Run eagerly
(``runtime="static"``), it is the bookkeeping the CPU checks.
"""

from __future__ import annotations

from typing import Any

import torch

from dynatree_core.runtime.cache.rows import column_index, select_layer_rows
from dynatree_core.runtime.cache.slots import SlotCache
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.model.compat import cache_kwargs


class SlotKV:
    """A Hugging Face causal LM over static ``[B, heads, capacity, dim]`` buffers (see the module
    docstring); the rows cache's mask is widened to ``capacity`` columns, the unused ones masked."""

    def __init__(self, model: torch.nn.Module, capacity: int):
        self.model = model
        self.capacity = int(capacity)
        layers = int(model.config.num_hidden_layers)
        self.cache = SlotCache(layers, self.capacity, self.capacity, pl.model_device(model))
        #: columns in use (the rows cache's width): the next forward writes from here
        self.width = 0

    @property
    def layers(self) -> Any:
        return [layer for layer in self.cache.layers if layer.is_initialized]

    def crop(self, length: int) -> None:
        self.width = length

    def run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, hidden: bool,
            feats: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        rows, q = ids.shape
        seen = mask.shape[-1]  # the rows cache's columns and the new ones: width + q
        if seen != self.width + q:
            raise RuntimeError(f"the mask covers {seen} columns; the store holds {self.width} and writes {q}")
        full = torch.full((rows, 1, q, self.capacity), torch.finfo(mask.dtype).min, dtype=mask.dtype,
                          device=mask.device)
        full[..., :seen] = mask
        self.cache.write_at(self.width, q)
        inputs = dict(input_ids=ids, attention_mask=full, position_ids=positions,
                      **cache_kwargs(self.model, self.cache), use_cache=True)
        self.width = seen
        if hidden:
            return pl.run_with_hidden(self.model, inputs)
        return self.model(**inputs).logits, None

    def gather(self, order: torch.Tensor, width: int) -> None:
        """Row b's columns ``order[b]`` become its first ``width``, in place (the buffers stay put)."""
        for layer in self.layers:
            idx = column_index(order, layer.keys, width)
            for buf in (layer.keys, layer.values):
                buf[:, :, :width] = buf.gather(2, idx)
        self.width = width

    def keep_rows(self, idx: torch.Tensor) -> None:
        """Keep rows ``idx``: the buffers shrink to them (a finished row leaves; B changes, the
        capacity does not)."""
        select_layer_rows(self.layers, idx)
