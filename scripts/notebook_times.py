"""Each notebook's run time as its stored outputs record it: from the first cell's start to the last cell's
reply, read from the cell metadata nbconvert writes (``metadata.execution``). notebooks/README.md quotes
these numbers, and tests/test_notebooks_meta.py fails when the README drifts more than 15% from them.

    python scripts/notebook_times.py [NOTEBOOK.ipynb ...]   # default: notebooks/0*.ipynb
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def stored_run_time(path: Path) -> float | None:
    """Seconds from the first executed cell's input to the last cell's reply; None if no cell carries
    nbconvert's timing metadata (a notebook never executed by nbconvert)."""
    spans = [c["metadata"]["execution"] for c in json.loads(Path(path).read_text())["cells"]
             if "execution" in c.get("metadata", {})]
    starts = [_when(e["iopub.execute_input"]) for e in spans if "iopub.execute_input" in e]
    ends = [_when(e["shell.execute_reply"]) for e in spans if "shell.execute_reply" in e]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else None


def main(paths: list[str]) -> None:
    files = [Path(p) for p in paths] or sorted(NOTEBOOKS.glob("0*.ipynb"))
    times = {f.name[:2]: stored_run_time(f) for f in files}
    print(", ".join(f"{k}: {v:.0f} s" if v is not None else f"{k}: not timed" for k, v in times.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
