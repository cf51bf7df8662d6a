"""Running shards: the worker that decodes them, the scheduling loop, and the in-process backend.

A :class:`ShardWorker` holds one loaded pair and turns a :class:`ShardTask` into a
:class:`ShardResult` (the rows, and the history state the shard left). :func:`execute` runs a
plan's shards on a backend: it submits every shard whose dependency is done, collects results as
they arrive, appends each to the checkpoint, retries a shard whose worker died (bounded, and
recorded), and shows a progress bar over shards. :class:`SerialBackend` runs shards in this
process, in order: that is the serial run. :mod:`.ray_backend` runs them on a Ray cluster.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from dynatree_core.bench.data import Prompt
from dynatree_core.bench.compile_ledger import compile_delta, compile_mark
from dynatree_core.bench.protocol import PromptsFor, RunPoint, finish_prompt, make_row, start_prompt, warm_key
from dynatree_core.bench.shards import Shard

#: tokens of the untimed warm-up decode a worker runs the first time it meets a method on a runtime
#: that compiles nothing (eager, static); on one that compiles, the warm-up decodes the measured
#: decode's own prompt, history and T, so it meets the shapes the timed decode will
WARM_UP_TOKENS = 8
#: the runtimes whose first calls compile (the forwards are built before the clock; the regions
#: compile on their first call: runtime/static/regions.py's COMPILING)
COMPILING = ("compiled", "graphs")


@dataclass
class ShardTask:
    """Everything a worker needs for one shard (no data files, no model: picklable and small)."""

    shard: Shard
    points: list[RunPoint]
    prompts: list[Prompt]
    l_max: int
    #: point index -> the HistoryState (as a dict) to start from
    history: dict[int, dict[str, Any]] = field(default_factory=dict)
    allow_long_context: bool = False


@dataclass
class ShardResult:
    """A finished shard: its rows (prompt by prompt, point by point), the history state each
    point ended with, the worker that ran it, how long it took and on which attempt."""

    shard: str
    rows: list[dict[str, Any]]
    history: dict[int, dict[str, Any]]
    worker: dict[str, Any]
    seconds: float
    attempt: int = 1
    #: what compiling cost while the shard ran, apart from its timed decodes
    #: (:func:`~dynatree_core.bench.compile_ledger.compile_delta`; empty in older checkpoints)
    compile: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "rows": self.rows, "history": {str(k): v for k, v in self.history.items()},
                "worker": self.worker, "seconds": self.seconds, "attempt": self.attempt, "compile": self.compile}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ShardResult":
        return cls(shard=d["shard"], rows=list(d["rows"]), history={int(k): v for k, v in d["history"].items()},
                   worker=dict(d["worker"]), seconds=float(d["seconds"]), attempt=int(d.get("attempt", 1)),
                   compile=dict(d.get("compile") or {}))


class WorkerLost(Exception):
    """The process running a shard died (killed, out of memory, node lost): the shard is retried."""


class ShardFailed(RuntimeError):
    """A shard's workers died more often than the retry bound allows."""


def worker_info(pair: Any, worker_id: str) -> dict[str, Any]:
    """Who ran a shard: the worker's name, host, process and device (with the GPU's name)."""
    import torch

    dev = pair.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return {"worker": worker_id, "host": socket.gethostname(), "pid": os.getpid(), "device": str(dev),
            "device_name": name, "threads": torch.get_num_threads()}


class ShardWorker:
    """One loaded pair that decodes shards. No timed decode pays a cold start: before a row's first
    decode on a (method, runtime, path) key (:func:`~.protocol.warm_key`) the worker decodes it
    untimed (the allocator, kernels, a cost-aware config's calibration, the compiled regions' first
    calls), and a timed decode that still compiled something (a shape its warm-up did not meet;
    ``Metrics.compiles``) is decoded again from the same state and the warm one is kept, the row
    saying so (``recompiled``). What compiling cost is counted per shard (``ShardResult.compile``)."""

    def __init__(self, pair: Any, worker_id: str = "local"):
        self.pair = pair
        self.info = worker_info(pair, worker_id)
        self._warm: set[tuple[str, str, int | None]] = set()

    def run(self, task: ShardTask) -> ShardResult:
        from dynatree_core.policy.history import HistoryState

        start, before = time.perf_counter(), compile_mark()
        history = {j: HistoryState.from_dict(d) for j, d in task.history.items()}
        ident = {k: self.info[k] for k in ("host", "device", "worker")}
        rows: list[dict[str, Any]] = []
        for prompt in task.prompts:
            for j, point in zip(task.shard.points, task.points):
                res, extra = self._timed(point, prompt, history.get(j), task.allow_long_context)
                if res.history_state is not None:
                    history[j] = res.history_state  # carried to this point's next prompt in the shard
                m = res.metrics.to_dict()
                if m["new_tokens"] != point.max_new_tokens:  # EOS is ignored: this is a bug
                    raise RuntimeError(f"{point.spec.label}: produced {m['new_tokens']} tokens, "
                                       f"expected T={point.max_new_tokens}")
                rows.append({**make_row(task.shard.dataset, point, prompt, m, res.tokens, task.shard.warmup,
                                        task.l_max), **extra, **ident})
        return ShardResult(task.shard.id, rows, {j: h.to_dict() for j, h in history.items()}, self.info,
                           time.perf_counter() - start, compile=compile_delta(before, compile_mark()))

    def _timed(self, point: RunPoint, prompt: Prompt, history: Any, allow_long_context: bool
               ) -> tuple[Any, dict[str, Any]]:
        """One row's decode, warmed first (see the class docstring); each decode starts from its own
        copy of ``history``, so a warm-up or a second decode continues from the same state."""
        run = start_prompt(self.pair, point, prompt, _copy(history), allow_long_context)
        key = warm_key(point, run)
        if key not in self._warm:
            compiles = key[1] in COMPILING
            t = point.max_new_tokens if compiles else min(WARM_UP_TOKENS, point.max_new_tokens)
            # compiled: also a decode of one token, whose only iteration verifies the root alone (D_max = 0
            # with one token left), as a decode's last iteration does when its acceptance ends it there: the
            # verify's smallest bucket at the tree's capacity, which the full warm-up may never meet
            for tokens in (t, 1) if compiles and t > 1 else (t,):
                warm = start_prompt(self.pair, point, prompt, _copy(history), allow_long_context, max_new_tokens=tokens)
                finish_prompt(self.pair, point, prompt, warm, max_new_tokens=tokens)
            self._warm.add(key)
            run = start_prompt(self.pair, point, prompt, _copy(history), allow_long_context)  # the path is its again
        res, extra = finish_prompt(self.pair, point, prompt, run)
        first = getattr(res.metrics, "compiles", 0)
        if first:  # compiled inside the timing: decode it again, now warm, and keep that one
            run = start_prompt(self.pair, point, prompt, _copy(history), allow_long_context)
            res, extra = finish_prompt(self.pair, point, prompt, run)
            extra["recompiled"] = first
        return res, extra


def _copy(history: Any) -> Any:
    """A fresh copy of a :class:`~dynatree_core.policy.history.HistoryState` (None stays None)."""
    return type(history).from_dict(history.to_dict()) if history is not None else None


class Backend(Protocol):
    """Where shards run. ``wait`` returns a finished shard and its result, or a
    :class:`WorkerLost` for a shard whose worker died; any other error is raised."""

    def capacity(self) -> int: ...

    def submit(self, shard: Shard, task: ShardTask) -> None: ...

    def wait(self) -> tuple[Shard, ShardResult | WorkerLost]: ...

    def workers(self) -> list[dict[str, Any]]: ...


class SerialBackend:
    """This process, one shard at a time, in submission order: the serial run."""

    name = "serial"

    def __init__(self, pair: Any, worker_id: str = "local"):
        self.worker = ShardWorker(pair, worker_id)
        self._next: tuple[Shard, ShardTask] | None = None

    def capacity(self) -> int:
        return 0 if self._next is not None else 1

    def submit(self, shard: Shard, task: ShardTask) -> None:
        self._next = (shard, task)

    def wait(self) -> tuple[Shard, ShardResult | WorkerLost]:
        assert self._next is not None
        (shard, task), self._next = self._next, None
        return shard, self.worker.run(task)

    def workers(self) -> list[dict[str, Any]]:
        return [self.worker.info]


@dataclass
class Execution:
    """What :func:`execute` did: every finished shard's result (resumed ones included), the
    shards taken from the checkpoint, and every retry (shard, attempt, worker, error)."""

    done: dict[str, ShardResult]
    resumed: list[str]
    retries: list[dict[str, Any]]
    max_retries: int


def make_task(shard: Shard, points: Sequence[RunPoint], prompts_for: PromptsFor, defaults: dict[str, int],
              done: dict[str, ShardResult], allow_long_context: bool) -> ShardTask:
    l_max = points[shard.points[0]].l_max(shard.dataset, defaults)
    selected = prompts_for(shard.dataset, l_max)
    history = dict(done[shard.needs].history) if shard.needs is not None else {}
    return ShardTask(shard, [points[j] for j in shard.points], [selected[i] for i in shard.prompts], l_max,
                     history, allow_long_context)


def execute(shards: Sequence[Shard], points: Sequence[RunPoint], prompts_for: PromptsFor, backend: Backend, *,
            defaults: dict[str, int], allow_long_context: bool = False, progress: bool = True,
            checkpoint: Any = None, max_retries: int = 2,
            on_result: Callable[[ShardResult], None] | None = None) -> Execution:
    """Run every shard not already in ``checkpoint`` on ``backend`` (see the module docstring).

    Shards are submitted in plan order as their dependency finishes and a worker is free. A shard
    whose worker died goes back to the front of the queue, at most ``max_retries`` times
    (:class:`ShardFailed` after that). Each result is appended to ``checkpoint`` before
    ``on_result`` sees it, so an interrupt loses no finished shard."""
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    done: dict[str, ShardResult] = dict(checkpoint.done) if checkpoint is not None else {}
    known = {s.id for s in shards}
    resumed = [s for s in done if s in known]
    queue = [s for s in shards if s.id not in done]
    attempts: dict[str, int] = {}
    retries: list[dict[str, Any]] = list(checkpoint.retries) if checkpoint is not None else []
    running = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(shards), initial=len(shards) - len(queue), unit="shard", dynamic_ncols=True)
    try:
        while queue or running:
            for s in list(queue):
                if backend.capacity() <= 0:
                    break
                if s.needs is not None and s.needs not in done:
                    continue
                queue.remove(s)
                backend.submit(s, make_task(s, points, prompts_for, defaults, done, allow_long_context))
                running += 1
            if not running:  # only possible if a dependency is missing from the plan
                raise RuntimeError(f"shards wait for shards that are not planned: {[s.id for s in queue]}")
            shard, outcome = backend.wait()
            running -= 1
            if isinstance(outcome, WorkerLost):
                _retry(shard, outcome, attempts, retries, checkpoint, max_retries)
                queue.insert(0, shard)
                continue
            outcome.attempt = attempts.get(shard.id, 0) + 1
            done[shard.id] = outcome
            if checkpoint is not None:
                checkpoint.add(outcome)
            if bar is not None:
                bar.set_description(shard.id)
                bar.update(1)
            if on_result is not None:
                on_result(outcome)
    finally:
        if bar is not None:
            bar.close()
    return Execution(done, resumed, retries, max_retries)


def _retry(shard: Shard, lost: WorkerLost, attempts: dict[str, int], retries: list[dict[str, Any]], checkpoint: Any,
           max_retries: int) -> None:
    """Record that ``shard``'s worker died (in ``checkpoint`` too); :class:`ShardFailed` once it has
    died more than ``max_retries`` times."""
    attempts[shard.id] = attempts.get(shard.id, 0) + 1
    record = {"shard": shard.id, "attempt": attempts[shard.id], "error": str(lost)}
    retries.append(record)
    if checkpoint is not None:
        checkpoint.add_retry(record)
    if attempts[shard.id] > max_retries:
        raise ShardFailed(f"shard {shard.id}: its worker died {attempts[shard.id]} times "
                          f"(--max-retries {max_retries}); last: {lost}")
