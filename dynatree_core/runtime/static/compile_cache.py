"""Compilation paid once: ``runtime="compiled"``'s forwards compile through inductor with its FX graph
and AOTAutograd caches on disk, so a second process reuses the first one's kernels and graphs.

:func:`compile_forward` compiles inside :func:`compile_scope`, which sets the cache folder
(:func:`compile_cache_dir`: ``$DYNATREE_COMPILE_CACHE``, else ``inductor/torch-<version>`` under
``$DYNATREE_CACHE_DIR`` or ``~/.cache/dynatree``) and :func:`compile_options` for the compile only:
importing this module changes no global setting. On the CPU, freezing packs the linears, and
:func:`onednn_linears` puts them on oneDNN's kernel, the one eager runs (inductor's own fp32 choice is
MKL's, slower here; without freezing they lower to ``aten::mm``: docs/bench/2026-11-28-runtime-best).
Packed weights cannot be pickled, so with them the FX graph cache bypasses, and
``$DYNATREE_COMPILE_FREEZING`` (:data:`FREEZING_MODES`) trades one for the other. :func:`compile_totals`
reports the seconds and cache hits spent compiling in this process.

On CUDA a compiled forward is then captured as one CUDA graph (:func:`capture_cuda_graph`): inductor fuses
the ~1,400 kernels of a forward into fewer, and the graph launches them all at once, so the host pays
one replay per forward, not one launch per kernel nor dynamo's guard checks (why not
``mode="reduce-overhead"``: :func:`compile_forward`). ``$DYNATREE_COMPILE_CUDA_GRAPHS=0``
(:data:`CUDA_GRAPHS_ENV`) leaves the compiled forward uncaptured, to measure inductor alone.
"""

from __future__ import annotations

import contextlib
import os
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch._functorch.config
import torch._inductor.config

#: the environment variable that overrides where compiled graphs are cached
CACHE_ENV = "DYNATREE_COMPILE_CACHE"
#: how the CPU freezes (``$DYNATREE_COMPILE_FREEZING``): "prepack" (default: packed linears on oneDNN,
#: the kernel eager runs; torch 2.13's FX graph cache cannot pickle packed weights and bypasses, only
#: the kernels' C++ is cached), "mkl" (packed, on inductor's own fp32 choice, MKL: 1.9-3.6x slower
#: per linear on this project's CPU, docs/bench/2026-11-28-runtime-best), "noprepack" (frozen
#: constants, plain weights: the FX graph cache hits), "off" (no freezing)
FREEZING_ENV = "DYNATREE_COMPILE_FREEZING"
FREEZING_MODES: tuple[str, ...] = ("prepack", "mkl", "noprepack", "off")
#: "0": compiled forwards on CUDA run as inductor left them, uncaptured (default "1": captured)
CUDA_GRAPHS_ENV = "DYNATREE_COMPILE_CUDA_GRAPHS"
#: the backend ``torch.compile`` runs the forwards and the compiled regions with
#: (``$DYNATREE_COMPILE_BACKEND``): "inductor" (default: fused kernels), or dynamo's "eager" /
#: "aot_eager", which trace the very same graphs (the same guards, the same per-code-object limit)
#: without generating code: what the CPU's tests use to check a whole sweep in seconds
BACKEND_ENV = "DYNATREE_COMPILE_BACKEND"
BACKENDS: tuple[str, ...] = ("inductor", "eager", "aot_eager")
#: the cache counters dynamo keeps (``torch._dynamo.utils.counters["inductor"]``) that we report
_HIT, _MISS, _BYPASS = "fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"


@dataclass
class CompileTotals:
    """What compiling cost in this process so far: ``compile_s`` seconds over ``forwards`` compiled
    forwards (each timed through its first call), the FX graph cache's hits, misses and bypasses,
    and on CUDA ``capture_s`` seconds capturing ``graphs`` CUDA graphs of them (apart from
    ``compile_s``). ``warm`` is True when every graph came from the cache."""

    forwards: int = 0
    compile_s: float = 0.0
    graphs: int = 0
    capture_s: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_bypasses: int = 0
    cache_dir: str = ""

    @property
    def warm(self) -> bool:
        return self.cache_hits > 0 and self.cache_misses == 0 and self.cache_bypasses == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "compile_s": round(self.compile_s, 3), "capture_s": round(self.capture_s, 3),
                "warm": self.warm}


_TOTALS = CompileTotals()


def compile_cache_dir() -> Path:
    """Where compiled graphs are cached: ``$DYNATREE_COMPILE_CACHE``, else
    ``<$DYNATREE_CACHE_DIR or ~/.cache/dynatree>/inductor/torch-<version>``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("DYNATREE_CACHE_DIR") or Path.home() / ".cache" / "dynatree")
    return base / "inductor" / f"torch-{torch.__version__.replace('+', '-')}"


def compile_options(device: torch.device | str, freezing: bool = True) -> dict[str, Any]:
    """Inductor settings for an inference forward on ``device``: the local FX graph and AOTAutograd
    cache on, and freezing on the CPU (parameters as constants, oneDNN-packed linears) unless
    ``freezing`` is False; the AOTAutograd cache is ``torch._functorch.config.enable_autograd_cache``,
    set by :func:`compile_scope`."""
    options: dict[str, Any] = {"fx_graph_cache": True, "freezing": False}
    mode = freezing_mode()
    if torch.device(device).type == "cpu" and mode != "off" and freezing:
        options["freezing"] = True
        options["cpp.weight_prepack"] = mode in ("prepack", "mkl")
    return options


def compile_backend() -> str:
    """The ``torch.compile`` backend of this process (:data:`BACKEND_ENV`, default "inductor")."""
    backend = os.environ.get(BACKEND_ENV, "inductor")
    if backend not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={backend!r}: expected one of {BACKENDS}")
    return backend


def freezing_mode() -> str:
    mode = os.environ.get(FREEZING_ENV, "prepack")
    if mode not in FREEZING_MODES:
        raise ValueError(f"{FREEZING_ENV}={mode!r}: expected one of {FREEZING_MODES}")
    return mode


@contextlib.contextmanager
def onednn_linears() -> Iterator[None]:
    """While inductor freezes, pack fp32 linears for oneDNN (``mkldnn::_linear_pointwise``, what eager's
    prepacked linears run) instead of MKL (``mkl::_mkl_linear``, its x86 fp32 choice). Inductor picks
    oneDNN for bf16/fp16 weights; the flag it reads says only which op to emit, so the arithmetic
    stays fp32. Private API: if torch moves it, inductor's own choice stands."""
    from torch._inductor.fx_passes import mkldnn_fusion

    cpu_op = getattr(mkldnn_fusion, "CpuMkldnnDeviceOp", None)
    if cpu_op is None or not hasattr(cpu_op, "pack_linear") or not hasattr(cpu_op, "pack_linear_weight"):
        yield
        return
    pack_weight, pack = cpu_op.pack_linear_weight, cpu_op.pack_linear

    def pack_linear_weight(self, graph, is_lp_weight, transpose_weight_node, batch_size):
        return pack_weight(self, graph, True, transpose_weight_node, batch_size)

    def pack_linear(self, graph, is_lp_weight, batch_size, input, packed_weight_node, bias):
        return pack(self, graph, True, batch_size, input, packed_weight_node, bias)

    cpu_op.pack_linear_weight, cpu_op.pack_linear = pack_linear_weight, pack_linear
    try:
        yield
    finally:
        cpu_op.pack_linear_weight, cpu_op.pack_linear = pack_weight, pack


@contextlib.contextmanager
def compile_scope(device: torch.device | str, freezing: bool = True) -> Iterator[Path]:
    """Inductor's cache folder and :func:`compile_options` for the duration of the block only (the
    environment variable and the config are restored on exit). ``freezing=False``: a graph whose
    inputs include buffers it writes (a whole draft level: the tree's, the cache's), which freezing's
    constant folding mistakes for parameters."""
    folder = compile_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    try:
        onednn = torch.device(device).type == "cpu" and freezing_mode() == "prepack" and freezing
        with torch._inductor.config.patch(compile_options(device, freezing)), \
                torch._functorch.config.patch(enable_autograd_cache=True), \
                (onednn_linears() if onednn else contextlib.nullcontext()):
            yield folder
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def compile_forward(fn: Callable[[], Any], device: torch.device | str = "cpu") -> Callable[[], Any]:
    """``fn`` compiled (inductor, static shapes) and called once inside :func:`compile_scope`, so
    the compile happens now, against the on-disk cache; the seconds and cache counters are added to
    :func:`compile_totals`. On CUDA (unless :data:`CUDA_GRAPHS_ENV` is "0") the compiled forward is
    then captured as one CUDA graph over the same static buffers (:func:`capture_cuda_graph`), timed
    apart as ``capture_s``. Call it in inference mode: freezing needs parameters that do not
    require grad.

    Why inductor's default mode and our own capture, not ``mode="reduce-overhead"`` (inductor's
    CUDA graph trees): the trees record lazily on the first calls, which would land inside a measured
    decode, where our capture happens here, when the fast path is built; they treat the static KV
    cache, mutated in place through the forward's closure, as inputs to copy or a reason to skip the
    graph unless each buffer is marked static; and they own the outputs, invalidating the previous
    replay's, where this path hands them out as the graphs runtime does (valid until the same
    forward runs again). A replay of our graph also skips dynamo's guard checks: one launch per forward."""
    from torch._dynamo.utils import counters

    compiled = torch.compile(own_code(fn), dynamic=False, fullgraph=False, backend=compile_backend())
    seen = {k: counters["inductor"][k] for k in (_HIT, _MISS, _BYPASS)}
    t0 = time.perf_counter()
    with compile_scope(device) as folder:
        compiled()
    _TOTALS.compile_s += time.perf_counter() - t0
    _TOTALS.forwards += 1
    _TOTALS.cache_hits += counters["inductor"][_HIT] - seen[_HIT]
    _TOTALS.cache_misses += counters["inductor"][_MISS] - seen[_MISS]
    _TOTALS.cache_bypasses += counters["inductor"][_BYPASS] - seen[_BYPASS]
    _TOTALS.cache_dir = str(folder)
    if not captures_cuda_graphs(device):
        return compiled
    t0 = time.perf_counter()
    replay = capture_cuda_graph(compiled, torch.device(device))
    _TOTALS.capture_s += time.perf_counter() - t0
    _TOTALS.graphs += 1
    return replay


def captures_cuda_graphs(device: torch.device | str) -> bool:
    """Whether :func:`compile_forward` captures its compiled forwards on ``device`` (CUDA only;
    ``$DYNATREE_COMPILE_CUDA_GRAPHS`` "0" turns it off, "1" is the default)."""
    flag = os.environ.get(CUDA_GRAPHS_ENV, "1")
    if flag not in ("0", "1"):
        raise ValueError(f"{CUDA_GRAPHS_ENV}={flag!r}: expected '0' or '1'")
    return torch.device(device).type == "cuda" and flag == "1"


def capture_cuda_graph(fn: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    """One CUDA graph of ``fn`` (two warm-up calls on a side stream first, as capture requires), in
    a memory pool of its own: its outputs stay where the capture put them, overwritten only by its
    own next replay, whatever other forward runs in between. ``fn`` writes only into existing
    buffers (the fast path's static inputs and KV slots), so a replay repeats it exactly."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay() -> Any:
        graph.replay()
        return out

    return replay


def own_code(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with a code object of its own. Dynamo keeps compiled graphs per code object, at most
    ``recompile_limit`` (8) of them, and every bucket's and every model's forward is the same closure
    (``forward_fn``'s ``run``): past eight it would run the rest eagerly, and every call would check
    the guards of all the others first. A copy holds one graph, found at once."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def compile_totals() -> CompileTotals:
    """A copy of this process's compile totals (see :class:`CompileTotals`)."""
    return CompileTotals(**asdict(_TOTALS))
