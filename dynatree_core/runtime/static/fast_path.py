"""The fast path: static caches, bucketed tree sizes and captured forwards.

On a GPU host where every op costs its launch, a target forward of a small model costs the ~2,000
ops it dispatches, not the FLOPs (docs/gpu.md). The fast path removes that overhead the way
serving engines do: the target's KV cache is a :class:`~dynatree_core.runtime.cache.slots.SlotCache`
(preallocated, written in place at explicit slots), every verify forward is padded to the next
*bucket* size with masked dummy nodes, so its shapes and addresses are static, and each (bucket,
hidden or not) forward is captured once and replayed:

* ``runtime="graphs"`` (CUDA): one ``torch.cuda.CUDAGraph`` per bucket, captured on a side stream
  after a warm-up call, all graphs in one memory pool; a replay is one launch;
* ``runtime="compiled"``: ``torch.compile`` per bucket (inductor, static shapes; CPU or GPU);
* ``runtime="static"``: the same caches, buckets and padding run eagerly (what the CPU tests
  check the other two against; the graphs runtime's bookkeeping without a GPU);
* ``runtime="eager"``: the dynamic caches of :mod:`dynatree_core.runtime.cache.dynamic`, no padding
  (:class:`~dynatree_core.runtime.backend.EagerTarget`; :class:`~dynatree_core.runtime.backend.StaticTarget`
  runs the decode loop's forwards on a :class:`FastPath`).

Captures happen when a :class:`FastPath` is built for a target (all buckets at once, timed apart:
:attr:`FastPath.capture_s`), and the path is kept for that target and reused by every later run that
fits it, so no capture ever lands inside a measured decode. A dummy node writes its KV entry past
the tree's real ones, sees only itself, and is dropped with the rejected suffix: the real nodes'
logits are those of the unpadded forward (equal within float tolerance: another kernel shape).
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.model.compat import cache_kwargs
from dynatree_core.runtime.static.compile_cache import compile_forward
from dynatree_core.runtime.cache.slots import SlotCache, StaticTargetCache

#: the runtimes a decode can run on ("auto": graphs on CUDA, eager elsewhere)
RUNTIMES: tuple[str, ...] = ("auto", "eager", "static", "compiled", "graphs")
#: tree sizes (root included) the captured verify forwards take; a tree is padded to the next
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
#: static cache lengths are rounded up to this, so prompts of nearby lengths share one fast path
STATIC_LEN_STEP = 256


def resolve_runtime(runtime: str, device: torch.device) -> str:
    """``runtime`` checked against the device (graphs need CUDA), ``auto`` resolved."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    if runtime == "graphs" and device.type != "cuda":
        raise ValueError(f"runtime='graphs' captures CUDA graphs and needs a CUDA device; the pair is on {device} "
                         "(use 'compiled', 'static' or 'eager', or 'auto': graphs on CUDA, eager elsewhere)")
    if runtime == "auto":
        return "graphs" if device.type == "cuda" else "eager"
    return runtime


def buckets_for(max_tree: int, buckets: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The buckets a run needs: every given size up to the first that holds ``max_tree`` nodes
    (root included); an explicit list too short for the tree is an error."""
    sizes = tuple(sorted(set(DEFAULT_BUCKETS if buckets is None else buckets)))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"buckets must be sizes >= 1, got {buckets!r}")
    if sizes[-1] < max_tree:
        if buckets is not None:
            raise ValueError(f"the largest tree this config verifies has {max_tree} nodes (root, N_max, lookup "
                             f"tail), more than the largest bucket ({sizes[-1]}): add a bucket >= {max_tree}")
        sizes = sizes + (2 ** math.ceil(math.log2(max_tree)),)
    return tuple(s for s in sizes if s < max_tree) + (next(s for s in sizes if s >= max_tree),)


def static_capacity(longest: int, widest: int, static_len: int | None = None) -> int:
    """The columns a batch's static store holds: the longest row (prompt and new tokens) plus the
    widest forward, rounded up to :data:`STATIC_LEN_STEP` (nearby lengths share a shape), or
    ``static_len`` when given (refused when too short)."""
    need = longest + widest
    if static_len is not None:
        if static_len < need:
            raise ValueError(f"static_len={static_len} is too short: the longest row ({longest} tokens: prompt and "
                             f"new tokens) plus the widest forward ({widest} entries) need {need} columns")
        return int(static_len)
    return STATIC_LEN_STEP * math.ceil(need / STATIC_LEN_STEP)


def bucket(n: int, sizes: tuple[int, ...]) -> int:
    for s in sizes:
        if s >= n:
            return s
    raise ValueError(f"a tree of {n} nodes is larger than the largest bucket ({sizes[-1]})")


@dataclass
class StaticInputs:
    """A bucket's input buffers: filled in place before each forward (static addresses)."""

    ids: torch.Tensor  # [1, b]
    mask: torch.Tensor  # [1, 1, b, capacity] additive
    pos: torch.Tensor  # [1, b]
    feats: torch.Tensor | None = None  # [1, b, F]: a feature draft's input features (None: a plain LM)


@dataclass
class _Entry:
    inputs: StaticInputs
    run: Callable[[], tuple[torch.Tensor, torch.Tensor | None]]


@dataclass
class FastPath:
    """Static caches and captured forwards of one target for one runtime (kept and reused)."""

    runtime: str
    model: torch.nn.Module
    capacity: int
    buckets: tuple[int, ...]
    cache: StaticTargetCache
    #: how the model runs here: its layers, its forward over the static inputs, its feature width
    spec: "StaticSpec"
    entries: dict[tuple[int, bool], _Entry] = field(default_factory=dict)
    #: seconds spent capturing (compiling) the buckets' forwards, reported apart from any decode
    capture_s: float = 0.0
    #: the run that holds the path now: its static cache serves one decode at a time
    owner: object = None
    #: a draft's whole-level functions by (head, bucket, runtime, compiled or not), kept with its
    #: buffers (:class:`~dynatree_core.runtime.tree.phase.DraftPhase`: compiled once per process and shape)
    levels: dict[tuple[str, int, str, bool], Callable] = field(default_factory=dict)
    #: c(b) on a GPU: each bucket's forward in device seconds, timed as it is built (what
    #: :class:`~dynatree_core.runtime.static.size_read.SizeRead` weighs; empty on a CPU, where it is not needed)
    bucket_s: dict[int, float] = field(default_factory=dict)
    _pool: Any = None

    def fits(self, length: int, max_tree: int) -> bool:
        return length <= self.capacity and self.buckets[-1] >= max_tree

    def entry(self, b: int, hidden: bool) -> _Entry:
        key = (b, hidden)
        if key not in self.entries:
            t0 = time.perf_counter()
            self.entries[key] = self._build(b, hidden)
            pl.synchronize(self.cache.cache.slots.device)
            self.capture_s += time.perf_counter() - t0
        return self.entries[key]

    def prepare(self, hidden: bool) -> None:
        """Build (capture, compile) every bucket's forward now, outside any measured decode."""
        for b in self.buckets:
            self.entry(b, hidden)

    @torch.inference_mode()
    def _build(self, b: int, hidden: bool) -> _Entry:
        """Bucket ``b``'s input buffers and forward. One eager call first (into scratch slots at the
        cache's end, which no live entry can occupy while building) allocates the cache buffers, so
        compiled and captured forwards only ever write into existing memory."""
        inputs = static_inputs(b, self.capacity, self.cache.cache.slots.device, pl.model_dtype(self.model),
                               self.spec.feature_width)
        inputs.mask[0, 0, :, self.capacity - b:].diagonal().fill_(0.0)  # the scratch rows see themselves
        fn = self.spec.forward(self.model, self.cache.cache, inputs, hidden)
        written = self.cache.cache.written
        self.cache.cache.write_at(self.capacity - b, b)
        fn()
        device = self.cache.cache.slots.device
        if self.runtime == "compiled":
            fn = compile_forward(fn, device)  # scoped on-disk cache, freezing on CPU
        elif self.runtime == "graphs":
            fn = self._capture(fn)
        if device.type == "cuda":  # into the same scratch slots; milliseconds, with the capture's
            self.bucket_s[b] = min(self.bucket_s.get(b, math.inf), pl.device_seconds(fn, device))
        self.cache.cache.written = written
        return _Entry(inputs, fn)

    def _capture(self, fn: Callable) -> Callable:
        """One CUDA graph of ``fn`` over the static buffers (warm-up on a side stream first, as
        capture requires); all buckets' graphs share one memory pool."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            out = fn()

        def replay() -> tuple[torch.Tensor, torch.Tensor | None]:
            graph.replay()
            return out

        return replay


def forward_fn(model: torch.nn.Module, cache: SlotCache, inputs: StaticInputs, hidden: bool, logits: bool = True
                ) -> Callable[[], tuple[torch.Tensor | None, torch.Tensor | None]]:
    """The forward over ``inputs`` writing into ``cache``: (logits [b, V], hidden [b, H]), each None
    when not asked for (a prefill that feeds a feature draft needs the hidden states only)."""
    kw = cache_kwargs(model, cache)

    def run() -> tuple[torch.Tensor | None, torch.Tensor | None]:
        args = dict(input_ids=inputs.ids, attention_mask=inputs.mask, position_ids=inputs.pos, use_cache=True, **kw)
        if not hidden:
            return model(**args).logits[0], None
        out, h = pl.run_with_hidden(model, args, logits)
        return (out[0] if out is not None else None), h[0]

    return run


@dataclass(frozen=True)
class StaticSpec:
    """How a model runs on a fast path: its layers (one static buffer pair each), the width of the
    per-token features it reads besides the tokens (0: none) and its forward over :class:`StaticInputs`
    (``forward(model, cache, inputs, hidden) -> fn``, ``fn() -> (out [b, ...], hidden or None)``). A
    Hugging Face causal LM needs none (:func:`static_spec`); a model of one's own (the feature draft)
    offers one as ``model.static_spec()``."""

    layers: int
    forward: Callable[..., Callable[[], tuple[torch.Tensor | None, torch.Tensor | None]]] = forward_fn
    feature_width: int = 0


def static_spec(model: torch.nn.Module) -> StaticSpec:
    own = getattr(model, "static_spec", None)
    return own() if callable(own) else StaticSpec(int(model.config.num_hidden_layers))


def static_inputs(b: int, capacity: int, device: torch.device, dtype: torch.dtype, feature_width: int = 0
                  ) -> StaticInputs:
    """Input buffers for a forward of ``b`` entries over ``capacity`` slots (every slot masked)."""
    return StaticInputs(torch.zeros((1, b), dtype=torch.long, device=device),
                        torch.full((1, 1, b, capacity), torch.finfo(dtype).min, dtype=dtype, device=device),
                        torch.zeros((1, b), dtype=torch.long, device=device),
                        torch.zeros((1, b, feature_width), dtype=dtype, device=device) if feature_width else None)


#: per target model: its fast paths by runtime (dropped with the model)
_PATHS: "weakref.WeakKeyDictionary[torch.nn.Module, dict[str, FastPath]]" = weakref.WeakKeyDictionary()


def fast_path(model: torch.nn.Module, runtime: str, length: int, max_tree: int,
              buckets: tuple[int, ...] | None = None, static_len: int | None = None) -> FastPath:
    """The target's fast path for ``runtime`` that holds a sequence of ``length`` tokens plus a tree
    of ``max_tree`` nodes: the kept one if it fits, else a new one (its buffers allocated and its
    forwards built by :meth:`FastPath.prepare` when the run starts)."""
    return keep_or_make(model, runtime, runtime, length, max_tree, buckets, static_len, StaticTargetCache)


def keep_or_make(model: torch.nn.Module, key: str, runtime: str, length: int, max_write: int,
                 buckets: tuple[int, ...] | None, static_len: int | None, book: Callable[[SlotCache], Any],
                 room: int | None = None) -> FastPath:
    """The fast path kept for ``model`` under ``key`` if it holds ``length`` tokens plus ``room``
    (default: the largest forward, ``max_write`` entries padded to their bucket), its bookkeeping reset;
    else a new one with ``book`` over a new :class:`SlotCache` (the static cache length rounded up,
    so nearby lengths share it)."""
    sizes = buckets_for(max_write, buckets)
    # a forward writes its whole bucket (dummies included): a 257-node tree takes 384 slots, not 257
    need = length + (sizes[-1] if room is None else room)
    if static_len is not None and static_len < need:
        raise ValueError(f"static_len={static_len} is too short: the prompt and the new tokens ({length}) plus the "
                         f"largest forward ({max_write} entries, padded to {sizes[-1]}) need {need} slots")
    kept = _PATHS.setdefault(model, {}).get(key)
    if kept is not None and kept.fits(need, max_write) and (static_len is None or kept.capacity == static_len) \
            and kept.buckets[-1] >= sizes[-1]:
        kept.cache.reset()
        kept.owner = None
        return kept
    capacity = static_len or STATIC_LEN_STEP * math.ceil(need / STATIC_LEN_STEP)
    spec = static_spec(model)
    slots = SlotCache(spec.layers, capacity, capacity, pl.model_device(model))
    path = FastPath(runtime, model, capacity, sizes, book(slots), spec)
    _PATHS[model][key] = path
    return path


def check_owner(path: FastPath, user: object) -> None:
    """A fast path's static cache serves one decode at a time: the latest to take it."""
    if path.owner is not user:
        raise RuntimeError("another decode on the fast path of the same model started since this one: runs on "
                           "one model's static cache cannot interleave (finish one first, or use runtime='eager')")
