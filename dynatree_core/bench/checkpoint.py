"""The checkpoint of a running experiment: finished shards, appended as they arrive (torch-free).

One JSON Lines file in the output directory, ``<stem>-<fingerprint>.checkpoint.jsonl``: a header
(schema, the experiment's fingerprint, which covers the selected prompts, and the run id), then one line
per finished shard (:class:`~.execution.ShardResult`) or retry. Every line is flushed and fsynced
before the run goes on, so killing the driver loses at most the shards still running; a torn last
line (killed mid-write) is ignored on reading. ``--resume`` reopens the file, checks that it
describes the same experiment and skips its shards; a finished run deletes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dynatree_core.bench.execution import ShardResult
from dynatree_core.bench.results import json_default

CHECKPOINT_SCHEMA = 1
SUFFIX = ".checkpoint.jsonl"


class CheckpointError(ValueError):
    """A checkpoint is missing (with ``--resume``), in the way (without it) or of another run."""


def checkpoint_path(out_dir: str | os.PathLike, stem: str, fingerprint: str) -> Path:
    return Path(out_dir) / f"{stem}-{fingerprint}{SUFFIX}"


class Checkpoint:
    """Finished shards of one experiment, kept in memory and (with a ``path``) on disk."""

    def __init__(self, path: str | os.PathLike | None = None, header: dict[str, Any] | None = None):
        self.path = Path(path) if path is not None else None
        self.header: dict[str, Any] = dict(header or {})
        self.done: dict[str, ShardResult] = {}
        self.retries: list[dict[str, Any]] = []

    @classmethod
    def open(cls, path: str | os.PathLike, header: dict[str, Any], resume: bool) -> "Checkpoint":
        """A new checkpoint at ``path`` (refused if one is there and not ``resume``), or, with
        ``resume``, the one there (refused if absent or if it belongs to another experiment)."""
        path = Path(path)
        if not resume:
            if path.exists():
                raise CheckpointError(f"{path} holds an interrupted run of this experiment: pass --resume to "
                                      f"continue it, or delete the file to start again")
            ck = cls(path, {"checkpoint_schema": CHECKPOINT_SCHEMA, **header})
            ck._append(ck.header, mode="x")
            return ck
        if not path.exists():
            raise CheckpointError(f"--resume: no checkpoint of this experiment at {path} (same command line, "
                                  f"models, data and --out as the interrupted run?)")
        ck = cls.read(path)
        if ck.header.get("fingerprint") != header.get("fingerprint"):  # it covers the selected prompts too
            raise CheckpointError(f"--resume: {path} belongs to another experiment (fingerprint differs)")
        ck.header = {**header, **ck.header}  # the interrupted run's id and creation time win
        return ck

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Checkpoint":
        """Load a checkpoint file (a torn last line is skipped)."""
        path = Path(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        records = []
        for n, line in enumerate(lines):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if n == len(lines) - 1:  # the driver died mid-write: that shard is simply run again
                    break
                raise CheckpointError(f"{path}: line {n + 1} is not JSON") from None
        if not records or records[0].get("checkpoint_schema") != CHECKPOINT_SCHEMA:
            raise CheckpointError(f"{path}: not a dynatree checkpoint of schema {CHECKPOINT_SCHEMA}")
        ck = cls(path, records[0])
        for r in records[1:]:
            if "retry" in r:
                ck.retries.append(r["retry"])
            else:
                res = ShardResult.from_dict(r)
                ck.done[res.shard] = res
        return ck

    def add(self, result: ShardResult) -> None:
        self.done[result.shard] = result
        self._append(result.to_dict())

    def add_retry(self, record: dict[str, Any]) -> None:
        self.retries.append(record)
        self._append({"retry": record})

    def remove(self) -> None:
        if self.path is not None and self.path.exists():
            self.path.unlink()

    def _append(self, obj: dict[str, Any], mode: str = "a") -> None:
        if self.path is None:
            return
        with open(self.path, mode, encoding="utf-8") as f:
            f.write(json.dumps(obj, allow_nan=False, default=json_default) + "\n")
            f.flush()
            os.fsync(f.fileno())

