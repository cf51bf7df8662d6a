"""The fast path's compiled regions: pure tensor functions the draft phase runs once per level.

A draft level on a launch-bound GPU costs the ops it issues from Python, not its FLOPs. So each
piece of a level around the draft's forward is written as one function of static buffers and
device scalars (no host read, no data-dependent shape, no Python branch on a tensor): the
forward's inputs (``static_draft.level_inputs``), the head's top-k, prompt lookup with the
mixture, and the growth rule's step (``level_step``). :func:`region` marks such a function;
:func:`compiled` gives it as a runtime runs it: compiled whole (``torch.compile(fullgraph=True)``,
inductor: a few fused kernels) on ``compiled`` and ``graphs``, as written elsewhere (``static``
runs the very same code eagerly, op by op, which is what the CPU's tests and op counts read).
"""

from __future__ import annotations

from types import CodeType
from typing import Callable, TypeVar

import torch

from dynatree_core.runtime.compile_cache import compile_backend

F = TypeVar("F", bound=Callable)

#: the code objects of the functions marked by :func:`region` (``scripts/count_ops.py`` charges
#: the ops issued inside them to the compiled regions, not to the engine)
REGIONS: set[CodeType] = set()

#: the runtimes that compile the regions
COMPILING = ("compiled", "graphs")

_COMPILED: dict[tuple[str, str, str], Callable] = {}


def region(fn: F) -> F:
    """Mark ``fn`` as a compiled region (it must trace with ``fullgraph=True``: tests check each)."""
    REGIONS.add(fn.__code__)
    return fn


def compiled(fn: F, runtime: str, device: torch.device) -> F:
    """``fn`` as ``runtime`` runs it: one ``torch.compile(fullgraph=True, dynamic=False)`` per
    function, runtime and device type, made once (its shapes are fixed per run: a first call
    compiles, the benchmark's warm-up prompt); ``fn`` itself on the other runtimes. Not CUDA-graphed
    (``reduce-overhead``): a level's outputs are the next one's inputs and the tree's buffers are
    written in place, which cudagraph trees copy or skip."""
    if runtime not in COMPILING:
        return fn
    key = (f"{fn.__module__}.{fn.__qualname__}", runtime, device.type)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(fn, fullgraph=True, dynamic=False, backend=compile_backend())
    return _COMPILED[key]  # type: ignore[return-value]
