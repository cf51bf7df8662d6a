"""Phase times: on CUDA the draft and verify phases are the device's time between marks on the stream, the
host's enqueue time apart; on a CPU both are the host clock. The CUDA logic runs here with fake events
(a device clock the test moves), through the real decode loop; the collector counts the graphs dynamo
compiles during a run (a benchmark's timed decode must show none)."""

from __future__ import annotations

import time

import pytest
import torch

from dynatree_core import generate
from dynatree_core.engine import collector as col
from dynatree_core.engine.phase_clock import CUDA_EVENTS, HOST, PhaseClock
from dynatree_core.policy.config import LinearConfig

from helpers import cached_pair


class FakeDevice:
    """A device clock (seconds) and events that read it when recorded, as CUDA events read the stream."""

    def __init__(self, step_s: float = 0.0):
        self.now, self.step_s, self.synced = 0.0, step_s, 0

    def event(self) -> "FakeEvent":
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, device: FakeDevice):
        self.device, self.t = device, None

    def record(self) -> None:
        self.device.now += self.device.step_s  # each mark: the device has run step_s since the last
        self.t = self.device.now

    def synchronize(self) -> None:
        self.device.synced += 1

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.t is not None and end.t is not None, "elapsed_time on an event never recorded"
        return (end.t - self.t) * 1e3


def test_device_time_is_read_between_marks_and_host_time_is_kept_apart():
    dev = FakeDevice()
    clock = PhaseClock(dev.event)
    clock.start()
    for draft, verify in ((0.030, 0.004), (0.020, 0.005)):  # the device runs longer than the host takes
        dev.now += draft
        clock.lap("draft")
        dev.now += verify
        clock.lap("verify")
    device = clock.device_totals()
    assert clock.kind == CUDA_EVENTS and dev.synced == 1  # one wait, after the run
    assert device["draft"] == pytest.approx(0.050) and device["verify"] == pytest.approx(0.009)
    assert 0 <= clock.host["draft"] < 0.01 and 0 <= clock.host["verify"] < 0.01  # the host only enqueued
    assert set(clock.last_lap) == {"draft", "verify"}


def test_without_events_device_time_is_the_host_clock():
    clock = PhaseClock()
    clock.start()
    time.sleep(0.002)
    clock.lap("draft")
    assert clock.kind == HOST and clock.device_totals() == clock.host and clock.host["draft"] >= 0.002


def test_a_cpu_decode_reports_host_phase_times_in_both_columns(llama_pair):
    m = generate(llama_pair, [3, 4, 5, 6], "linear", LinearConfig(k=3), max_new_tokens=12, ignore_eos=True).metrics
    assert m.phase_clock == HOST
    assert m.draft_time_s == m.draft_host_s > 0 and m.verify_time_s == m.verify_host_s > 0


def test_the_decode_loop_takes_its_phase_times_from_the_events_when_there_are_some(monkeypatch):
    """The collector's CUDA path on a CPU: every lap records a fake event that finds the device 1 ms
    further, so each phase's device time is 1 ms per iteration, whatever the host took."""
    dev = FakeDevice(step_s=0.001)
    monkeypatch.setattr(col.PhaseClock, "for_device", classmethod(lambda cls, device: cls(dev.event)))
    pair = cached_pair("llama", "sdpa", 0.02)
    m = generate(pair, [3, 4, 5, 6], "linear", LinearConfig(k=2), max_new_tokens=10, ignore_eos=True).metrics
    assert m.phase_clock == CUDA_EVENTS and dev.synced == 1
    for phase in ("draft", "verify", "commit"):
        assert getattr(m, f"{phase}_time_s") == pytest.approx(0.001 * m.iterations)
    assert m.draft_host_s is not None and m.draft_host_s != pytest.approx(m.draft_time_s, abs=1e-9)


def test_the_collector_counts_what_dynamo_compiles_during_a_run():
    def run(compile_something: bool) -> int:
        c = col.RunCollector(torch.device("cpu"), None, [1], None)
        if compile_something:
            def fresh(x):  # a new code object: one graph
                return x * 2 + 1
            torch.compile(fresh, backend="eager", fullgraph=True)(torch.ones(3))
        return c.result([], None, 0, False).metrics.compiles

    assert run(False) == 0
    assert run(True) == 1
