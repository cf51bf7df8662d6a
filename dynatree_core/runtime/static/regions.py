"""The fast path's compiled regions: pure tensor functions the draft phase runs once per level.

A draft level on a launch-bound GPU costs the ops it issues from Python, not its FLOPs. So each
piece of a level around the draft's forward is written as one function of static buffers and
device scalars (no host read, no data-dependent shape, no Python branch on a tensor): the
forward's inputs (``draft_forwards.level_inputs``), the head's top-k, prompt lookup with the
mixture, and the growth rule's step (``level_step``). :func:`region` marks such a function;
:func:`compiled` gives it as a runtime runs it: compiled whole (``torch.compile(fullgraph=True)``:
a few fused kernels) on ``compiled`` and ``graphs``, as written elsewhere (``static`` runs the very
same code eagerly, op by op, which is what the CPU's tests and op counts read).

One graph per code object. Dynamo keeps at most ``recompile_limit`` (8) graphs per code object and,
under ``fullgraph=True``, the next one is a hard error; a region's graph depends on its arguments'
shapes and on the policy's static fields, which differ between methods, buckets and cache sizes. So
:class:`Region` keys every call by its arguments' :func:`signature` and gives each key a code object
of its own (:func:`~dynatree_core.runtime.static.compile_cache.own_code`): any number of methods, buckets
and capacities in one process, each compiled once, none evicting another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from types import CodeType
from typing import Any, Callable, ContextManager, Hashable, TypeVar

import torch

from dynatree_core.runtime.static.compile_cache import compile_backend, own_code

F = TypeVar("F", bound=Callable)

#: the code objects of the functions marked by :func:`region` (``scripts/count_ops.py`` charges
#: the ops issued inside them to the compiled regions, not to the engine)
REGIONS: set[CodeType] = set()

#: the runtimes that compile the regions
COMPILING = ("compiled", "graphs")


def region(fn: F) -> F:
    """Mark ``fn`` as a compiled region (it must trace with ``fullgraph=True``: tests check each)."""
    REGIONS.add(fn.__code__)
    return fn


@dataclasses.dataclass
class RegionStats:
    """What compiling the regions cost in this process: ``graphs`` made (one per region and
    signature) in ``compile_s`` seconds (each timed through its first call), and the keys by region."""

    graphs: int = 0
    compile_s: float = 0.0
    keys: dict[str, int] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"graphs": self.graphs, "compile_s": round(self.compile_s, 3), "keys": dict(self.keys)}


_STATS = RegionStats()


def region_stats() -> RegionStats:
    """A copy of this process's region compile totals."""
    return RegionStats(_STATS.graphs, _STATS.compile_s, dict(_STATS.keys))


class Region:
    """``fn`` compiled whole, one graph per :func:`signature` of its arguments, each in a code object
    of its own (so no two keys share dynamo's per-code-object limit). Made once per function,
    runtime and device type (:func:`compiled`)."""

    def __init__(self, fn: Callable, backend: str, scope: Callable[[], ContextManager] | None = None):
        #: ``scope``: a context the compiling (first) call of each key runs in (a whole level that
        #: holds the draft's forward compiles under the forwards' settings: ``compile_scope``)
        self.fn, self.backend, self.scope = fn, backend, scope
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self.graphs: dict[Hashable, Callable] = {}

    def __call__(self, *args: Any) -> Any:
        key = signature(args)
        graph = self.graphs.get(key)
        if graph is not None:
            return graph(*args)
        graph = torch.compile(own_code(self.fn), fullgraph=True, dynamic=False, backend=self.backend)
        self.graphs[key] = graph
        t0 = time.perf_counter()
        with (self.scope() if self.scope is not None else contextlib.nullcontext()):
            out = graph(*args)  # the first call compiles
        _STATS.compile_s += time.perf_counter() - t0
        _STATS.graphs += 1
        _STATS.keys[self.name] = len(self.graphs)
        return out


_REGIONS: dict[tuple[str, str, str, str], Region] = {}


def compiled(fn: F, runtime: str, device: torch.device) -> F:
    """``fn`` as ``runtime`` runs it: a :class:`Region` (compiled whole, per argument signature) on
    ``compiled`` and ``graphs``, made once per function, runtime, device type and compile backend;
    ``fn`` itself on the other runtimes. Not CUDA-graphed (``reduce-overhead``): a level's outputs are
    the next one's inputs and the tree's buffers are written in place, which cudagraph trees copy or skip."""
    if runtime not in COMPILING:
        return fn
    backend = compile_backend()
    key = (f"{fn.__module__}.{fn.__qualname__}", runtime, device.type, backend)
    if key not in _REGIONS:
        _REGIONS[key] = Region(fn, backend)
    return _REGIONS[key]  # type: ignore[return-value]


#: field names by dataclass type (``dataclasses.fields`` costs microseconds a call)
_FIELDS: dict[type, tuple[str, ...]] = {}


def signature(args: Any) -> Hashable:
    """What a compiled graph of a region is specialised on, as a hashable key: every tensor's dtype,
    device, shape, strides and which earlier argument's storage it shares (dynamo guards on aliasing
    between inputs: a level whose frontier is a view of the tree's arange traces apart), every Python
    scalar's value, None where a tensor may be, recursively through tuples, lists, dicts and
    dataclasses (a region's arguments are only these: anything else is refused, since dynamo would
    guard on attributes this key cannot see)."""
    return _signature(args, {})


def _signature(x: Any, storages: dict[int, int]) -> Hashable:
    if isinstance(x, torch.Tensor):
        ptr = x.untyped_storage().data_ptr()
        owner = storages.setdefault(ptr, len(storages))
        return (x.dtype, x.device, x.shape, x.stride(), owner)
    if x is None or isinstance(x, (bool, int, float, str)):
        return (type(x), x)
    if isinstance(x, (tuple, list)):
        return (type(x), tuple(_signature(v, storages) for v in x))
    if isinstance(x, dict):
        return (dict, tuple((k, _signature(v, storages)) for k, v in x.items()))
    cls = type(x)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(x):
            raise TypeError(f"a compiled region's argument must be a tensor, a Python scalar, None, a tuple, list, "
                            f"dict or dataclass of them; got {cls.__qualname__}")
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(x))
    return (cls, tuple(_signature(getattr(x, n), storages) for n in names))
