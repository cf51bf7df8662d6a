"""What compiling cost a benchmark, counted apart from its timed decodes.

On ``compiled`` and ``graphs`` two kinds of code go through dynamo: the forwards
(:func:`~dynatree_core.runtime.static.compile_cache.compile_forward`, built before any clock starts) and the
fast path's compiled regions (:mod:`dynatree_core.runtime.static.regions`, compiled on their first call, which
the benchmark's warm-up makes). :class:`CompileLedger` times every dynamo compile of this process
through dynamo's compile callbacks and charges it to the forwards when ``compile_forward`` is on the
stack, to the regions otherwise; :func:`compile_report` puts that beside
:func:`~dynatree_core.runtime.static.compile_cache.compile_totals` (the forwards' own seconds, cache hits and
CUDA graph captures) in the result file.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

#: what a compile is charged to
FORWARD, REGION = "forwards", "regions"


@dataclass
class CompileCounts:
    """Dynamo compiles so far, and their seconds, by kind (see the module docstring)."""

    forwards: int = 0
    forward_s: float = 0.0
    regions: int = 0
    region_s: float = 0.0

    def minus(self, before: "CompileCounts") -> "CompileCounts":
        return CompileCounts(self.forwards - before.forwards, self.forward_s - before.forward_s,
                             self.regions - before.regions, self.region_s - before.region_s)


class CompileLedger:
    """Dynamo's compile callbacks, installed once per process (:func:`ledger`)."""

    def __init__(self) -> None:
        self.counts = CompileCounts()
        self._open: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def install(self) -> None:
        import torch._dynamo

        torch._dynamo.callback_handler.register_start_callback(self._start)
        torch._dynamo.callback_handler.register_end_callback(self._end)

    def _start(self, args: Any) -> None:
        self._open[str(args.compile_id)] = (time.perf_counter(), FORWARD if _in_compile_forward() else REGION)

    def _end(self, args: Any) -> None:
        t0, kind = self._open.pop(str(args.compile_id), (None, REGION))
        if t0 is None:
            return
        dt = time.perf_counter() - t0
        with self._lock:
            if kind == FORWARD:
                self.counts.forwards += 1
                self.counts.forward_s += dt
            else:
                self.counts.regions += 1
                self.counts.region_s += dt

    def snapshot(self) -> CompileCounts:
        with self._lock:
            return CompileCounts(**asdict(self.counts))


def _in_compile_forward() -> bool:
    """Whether this compile was started by ``compile_forward`` (its frame is on the stack)."""
    from dynatree_core.runtime.static.compile_cache import compile_forward

    code = compile_forward.__code__
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is code:
            return True
        f = f.f_back
    return False


_LEDGER: CompileLedger | None = None


def ledger() -> CompileLedger:
    """This process's ledger, its callbacks installed on first use."""
    global _LEDGER
    if _LEDGER is None:
        _LEDGER = CompileLedger()
        _LEDGER.install()
    return _LEDGER


def compile_mark() -> dict[str, Any]:
    """Where compiling stands now: the ledger's counts and the forwards' own totals."""
    from dynatree_core.runtime.static.compile_cache import compile_totals

    return {"ledger": ledger().snapshot(), "totals": compile_totals()}


def compile_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What compiling cost between two :func:`compile_mark` s: the forwards (``compile_forward``'s
    count and seconds, cache hits and misses, CUDA graphs captured and their seconds) and the
    compiled regions (graphs and seconds), apart; every dynamo compile is one of the two."""
    led = after["ledger"].minus(before["ledger"])
    a, b = after["totals"], before["totals"]
    return {"forwards": a.forwards - b.forwards, "compile_s": round(a.compile_s - b.compile_s, 3),
            "graphs": a.graphs - b.graphs, "capture_s": round(a.capture_s - b.capture_s, 3),
            "cache_hits": a.cache_hits - b.cache_hits, "cache_misses": a.cache_misses - b.cache_misses,
            "forward_graphs": led.forwards, "forward_dynamo_s": round(led.forward_s, 3),
            "regions": led.regions, "region_s": round(led.region_s, 3)}


def sum_compiles(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several :func:`compile_delta` s (one per shard) added up."""
    out: dict[str, Any] = {}
    for p in parts:
        for k, v in p.items():
            out[k] = round(out.get(k, 0) + v, 3) if isinstance(v, float) else out.get(k, 0) + v
    return out
