"""The decode loop's phase times: device time and host enqueue time, apart.

On a GPU the host only enqueues work; a phase that ends without a device read (the resident draft
phase: one read per iteration, at the selection) ends on the host long before its kernels finish,
and the rest would be charged to the next phase. So each phase boundary is also marked on the
device: :class:`PhaseClock` records an event on the current stream at every lap, and once the run
is over (the final sync) it reads each phase's device time as the time between its two marks on
the stream. The host's ``perf_counter`` laps are kept as their own numbers (``*_host_s``: the time
the host spent issuing the phase). On a CPU the two are the same clock.

The events come from an ``event`` factory (``torch.cuda.Event`` on CUDA): anything with
``record()``, ``synchronize()`` and ``elapsed_time(end) -> ms`` does, which is how the CUDA logic
is tested without a device.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

#: what :attr:`PhaseClock.kind` says the device times were measured with
CUDA_EVENTS, HOST = "cuda_events", "host"


def cuda_event() -> Any:
    return torch.cuda.Event(enable_timing=True)


class PhaseClock:
    """Per-phase totals of host time (``perf_counter``) and device time (events on the stream, or
    the host clock where there is no ``event`` factory). :meth:`start` marks the clock's origin,
    :meth:`lap` ends a phase; :meth:`device_totals` (after the run's final sync) reads the marks."""

    def __init__(self, event: Callable[[], Any] | None = None):
        self.event = event
        self.kind = CUDA_EVENTS if event is not None else HOST
        self.host: dict[str, float] = {}
        self.last_lap: dict[str, float] = {}
        self._mark = 0.0
        self._marks: list[tuple[str | None, Any]] = []

    @classmethod
    def for_device(cls, device: torch.device) -> "PhaseClock":
        """Events on the stream on CUDA, the host clock elsewhere."""
        return cls(cuda_event if device.type == "cuda" else None)

    def start(self) -> float:
        """The origin (after the caller's sync); returns its ``perf_counter``."""
        self._mark = time.perf_counter()
        self._marks = [(None, self._device_mark())]
        return self._mark

    def lap(self, phase: str) -> float:
        """End ``phase`` now; returns the ``perf_counter`` of the lap."""
        now = time.perf_counter()
        self.last_lap[phase] = now - self._mark
        self.host[phase] = self.host.get(phase, 0.0) + now - self._mark
        self._mark = now
        self._marks.append((phase, self._device_mark()))
        return now

    def _device_mark(self) -> Any:
        if self.event is None:
            return None
        e = self.event()
        e.record()  # on the current stream: reached when the work enqueued before it is done
        return e

    def device_totals(self) -> dict[str, float]:
        """Each phase's device seconds: the time between its marks on the stream (waits for the last
        mark; call it after the run's final sync). Without events, the host totals."""
        if self.event is None:
            return dict(self.host)
        self._marks[-1][1].synchronize()
        out: dict[str, float] = {}
        for (_, a), (phase, b) in zip(self._marks, self._marks[1:]):
            out[phase] = out.get(phase, 0.0) + a.elapsed_time(b) / 1e3
        return out
