"""Where the project's local data lives (torch-free): the one search both the benchmark
(evaluation text) and distillation (training text) use."""

from __future__ import annotations

import os
from pathlib import Path

#: the repository root (the folder holding dynatree_core/)
REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir_candidates(cwd: str | os.PathLike | None = None) -> list[Path]:
    """``shared/data`` folders to try, in order, without duplicates: inside and beside the
    repository (this project's layout: ``../shared/data``), then inside and beside the working
    directory."""
    here = Path(cwd or os.getcwd())
    out: list[Path] = []
    for c in (REPO_ROOT / "shared" / "data", REPO_ROOT.parent / "shared" / "data",
              here / "shared" / "data", here.parent / "shared" / "data"):
        c = c.resolve()
        if c not in out:
            out.append(c)
    return out
