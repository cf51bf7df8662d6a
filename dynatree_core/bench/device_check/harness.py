"""The device check's frame: one time budget, sections run inside it with their own limits (a failing
one recorded, the next one run), the JSON report rewritten after each, and a watchdog that writes what
there is when a section hangs past the budget."""

from __future__ import annotations

import datetime as dt
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from dynatree_core.bench.results import write_json_atomic, write_text_atomic
from dynatree_core.bench.device_check.summary import summary, verdict


SCHEMA_VERSION = 1


#: a section is skipped when less than this is left of the budget
MIN_SECTION_S = 20.0


class Budget:
    """The overall budget from process start and a per-section deadline inside it."""

    def __init__(self, total_s: float):
        self.t0, self.total_s = time.monotonic(), total_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def deadline(self, limit_s: float) -> float:
        """Monotonic deadline of a section starting now with ``limit_s``."""
        return min(time.monotonic() + limit_s, self.t0 + self.total_s)


def error_summary(exc: BaseException) -> dict[str, Any]:
    """Type, message and the last frames of a traceback (what the JSON keeps of a failure)."""
    tb = traceback.extract_tb(exc.__traceback__)
    return {"type": type(exc).__name__, "message": str(exc)[:2000],
            "where": [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in tb[-6:]]}


class Report:
    """The JSON document, rewritten after every section (a killed run leaves what it had)."""

    def __init__(self, out: Path, config: dict[str, Any]):
        self.out = out
        self.doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "kind": "gpu_check", "status": "running",
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "config": config, "sections": {}, "verdict": None, "summary": None}
        self.lock = threading.Lock()

    def section(self, name: str) -> dict[str, Any]:
        return self.doc["sections"].setdefault(name, {"status": "pending"})

    def write(self, text: str | None = None) -> None:
        with self.lock:
            if text is not None:
                self.doc["summary"] = text.splitlines()
                write_text_atomic(self.out / "gpu_check.txt", text + "\n", overwrite=True)
            write_json_atomic(self.out / "gpu_check.json", finite(self.doc), overwrite=True)


def finite(x: Any) -> Any:
    """A copy with NaN/inf floats as None (strict JSON; an fp16 overflow must not lose the file)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def run_section(report: Report, budget: Budget, name: str, limit_s: float,
                body: Callable[[dict[str, Any], float], None]) -> None:
    """Run ``body(section, deadline)`` with its wall time, limit and any error recorded."""
    sec = report.section(name)
    sec["limit_s"] = round(min(limit_s, max(budget.left(), 0.0)), 1)
    if budget.left() < MIN_SECTION_S:
        sec.update(status="skipped", reason=f"time budget: {budget.left():.0f} s left of {budget.total_s:.0f} s")
        report.write()
        return
    print(f"\n== {name} (limit {sec['limit_s']:.0f} s, {budget.left():.0f} s left of the budget)", flush=True)
    start = time.monotonic()
    sec["status"] = "running"
    report.doc["current_section"] = name
    try:
        body(sec, budget.deadline(limit_s))
        if sec["status"] == "running":
            sec["status"] = "ok"
    except Exception as e:  # recorded; the next section still runs
        sec["status"] = "error"
        sec["error"] = error_summary(e)
        print(f"== {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        sec["wall_s"] = round(time.monotonic() - start, 2)
        report.doc.pop("current_section", None)
        report.write()


def start_watchdog(report: Report, budget: Budget, proc_slot: dict[str, Any],
                   grace_s: float = 30.0) -> threading.Timer:
    """Past the budget + grace, write what there is and leave (a hung section cannot eat the device time)."""

    def fire() -> None:
        proc = proc_slot.get("proc")
        if proc is not None:
            proc.kill()
        report.doc["status"] = "aborted"
        report.doc["aborted"] = f"watchdog: {budget.elapsed():.0f} s, in section {report.doc.get('current_section')}"
        code = finish(report, budget)
        os._exit(code)

    t = threading.Timer(max(budget.left(), 0.0) + grace_s, fire)
    t.daemon = True
    t.start()
    return t


def finish(report: Report, budget: Budget) -> int:
    doc = report.doc
    doc["total_s"] = round(budget.elapsed(), 1)
    try:
        doc["verdict"] = verdict(doc)
        text = summary(doc)
    except Exception as e:  # the summary must never lose the JSON
        doc["verdict"] = doc.get("verdict") or {"exactness_ok": None, "exit_code": 0, "problems": [], "notes": []}
        text = f"summary failed: {type(e).__name__}: {e}"
    try:
        report.write(text)
    except Exception as e:
        print(f"could not write {report.out}: {e}", file=sys.stderr)
    print("\n" + text + f"\n\nwritten: {report.out / 'gpu_check.json'}, {report.out / 'gpu_check.txt'}", flush=True)
    return int(doc["verdict"]["exit_code"])
