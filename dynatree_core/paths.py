"""Where the project's files live (torch-free): the package's bundled data, and the one search for
local text both the benchmark (evaluation text) and distillation (training text) use."""

from __future__ import annotations

import os
from pathlib import Path

#: the repository root (the folder holding dynatree_core/)
REPO_ROOT = Path(__file__).resolve().parents[1]
#: data shipped inside the package (prompt sets, text excerpts)
PACKAGE_DATA = Path(__file__).resolve().parent / "data"
#: model weights shipped inside the package (the default pair's drafts)
PACKAGE_ASSETS = Path(__file__).resolve().parent / "assets"
#: the bundled training prompts: distillation continues them, calibrations run on them (never
#: evaluation text)
PROMPTS_FILE = PACKAGE_DATA / "distill_prompts.txt"


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
