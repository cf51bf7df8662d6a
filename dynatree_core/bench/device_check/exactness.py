"""The device check's exactness section: the exactness tests with the tiny models on the device in fp32
(``DYNATREE_TEST_DEVICE``, see tests/conftest.py), in a pytest subprocess killed at the section's limit."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from typing import Any

from dynatree_core.paths import REPO_ROOT


DEFAULT_TESTS = ("tests/test_exactness.py", "tests/test_device_tree.py", "tests/test_tree_attention.py",
                 "tests/test_target_cache.py", "tests/test_fast_path.py", "tests/test_device_map.py")  # the last: a target split across two GPUs, where there are two

#: test files that cannot run on a GPU, with the reason (none at present: test_tree_attention.py now
#: builds its inputs on the model's device; it has not been run on a GPU yet)
NOT_ON_GPU: dict[str, str] = {}

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")


_PROGRESS = re.compile(r"^([.sFExX]+)\s*(\[\s*\d+%\])?\s*$")


def parse_pytest(text: str) -> dict[str, Any]:
    """Counts from pytest -q output: the final summary line, else the progress characters
    (a run killed at its time limit has no summary)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    lines = text.strip().splitlines()
    final = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error|skipped|deselected)", ln)
                  and " in " in ln), None)
    if final is not None:
        for n, kind in _COUNT.findall(final):
            key = {"error": "errors", "errors": "errors"}.get(kind, kind)
            if key in counts:
                counts[key] = int(n)
        m = re.search(r" in ([\d.]+)s", final)
        counts["duration_s"] = float(m.group(1)) if m else None
        counts["summary_line"] = final.strip("= ")
        return counts
    chars = "".join(m.group(1) for ln in lines if (m := _PROGRESS.match(ln)))
    counts.update(passed=chars.count("."), failed=chars.count("F"), errors=chars.count("E"),
                  skipped=chars.count("s"), duration_s=None, summary_line=None)
    return counts


def run_pytest(files: list[str], test_device: str, keyword: str | None, timeout_s: float,
               proc_slot: dict[str, Any]) -> dict[str, Any]:
    """``pytest -q -x files`` in a subprocess on ``test_device``, echoed live, killed at the limit."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE", *files]
    if keyword:
        cmd += ["-k", keyword]
    env = dict(os.environ, DYNATREE_TEST_DEVICE=test_device, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc_slot["proc"] = proc
    chunks: list[bytes] = []

    def pump() -> None:
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):  # type: ignore[union-attr]
            chunks.append(chunk)
            sys.stdout.write(chunk.decode("utf-8", "replace"))
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        rc = proc.wait(timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        rc = proc.wait()
    finally:
        proc_slot.pop("proc", None)
    reader.join(timeout=5)
    text = b"".join(chunks).decode("utf-8", "replace")
    res = {"command": " ".join(shlex.quote(c) for c in cmd[1:]), "test_device": test_device, "rc": rc,
           "timed_out": timed_out, "wall_s": round(time.monotonic() - start, 2), **parse_pytest(text)}
    res["failures"] = [ln for ln in text.splitlines() if ln.startswith(("FAILED ", "ERROR "))][:20]
    res["output_tail"] = text[-3000:]
    return res


def section_exactness(sec: dict[str, Any], deadline: float, args: argparse.Namespace,
                      proc_slot: dict[str, Any]) -> None:
    files = list(args.tests)
    if args.device.startswith("cuda"):
        skipped = [f for f in files if f in NOT_ON_GPU]
        files = [f for f in files if f not in NOT_ON_GPU]
        sec["not_run"] = {f: NOT_ON_GPU[f] for f in skipped}
    sec.update(files=files, dtype="float32", test_device=args.device)
    run = run_pytest(files, args.device, args.pytest_k, deadline - time.monotonic(), proc_slot)
    sec["pytest"] = run
    for k in ("passed", "failed", "errors", "skipped", "duration_s"):
        sec[k] = run.get(k)
    if run["failed"] or run["errors"] or run["rc"] == 1:
        sec["status"] = "failed"
    elif run["timed_out"]:
        sec.update(status="timeout", reason=f"pytest killed at the section limit after {run['wall_s']:.0f} s "
                                            f"({run['passed']} passed by then; no failure seen)")
    elif run["rc"] not in (0, 5):
        sec.update(status="error", reason=f"pytest exited with {run['rc']} (collection or usage error)")
