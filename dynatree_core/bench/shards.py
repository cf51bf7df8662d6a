"""The protocol cut into shards: units of work that can run anywhere, in any order their
dependencies allow, and give the rows a serial run gives (torch-free).

A **group** is the run points of one dataset that share T and L_max (they decode the same
prompts, and AR is among them in every sweep). A shard is one group on

* ``warmup``: the W warmup prompts in order. DynaTree's history adapter is carried through them,
  and the state they leave is the shard's output;
* ``p<i>``: one measured prompt i. Every point of the group decodes it, in the serial order
  (prompt-major: a slow drift of the machine hits all methods alike, and AR and each method of one
  prompt run on the same worker, so their ratio is a same-device speedup). A group with a DynaTree
  point starts every measured prompt from the state its warmup shard left, so it ``needs`` that
  shard; other groups' measured shards need nothing.

Measured prompts are therefore independent samples of the warmed-up decoder, which is what makes
the protocol shardable (and the per-prompt std a std over independent samples). Executing the
shards in :func:`serial_order` is the serial run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from dynatree_core.bench.protocol import RunPoint

WARMUP = "warmup"


@dataclass(frozen=True)
class Shard:
    """``points``: indices into the experiment's points (in order); ``prompts``: positions in the
    group's selected prompt list; ``needs``: the shard whose end-of-run history state this one
    starts from (None: fresh)."""

    id: str
    dataset: str
    group: int
    points: tuple[int, ...]
    prompts: tuple[int, ...]
    warmup: bool
    needs: str | None = None

    @property
    def order(self) -> tuple[int, int]:
        """(prompt position, group): the serial run's order within a dataset."""
        return (-1 if self.warmup else self.prompts[0], self.group)


def groups(points: Sequence[RunPoint], dataset: str, defaults: dict[str, int]) -> list[tuple[int, int, list[int]]]:
    """(T, L_max, point indices) per group, in the order the points first name them."""
    out: dict[tuple[int, int], list[int]] = {}
    for j, p in enumerate(points):
        out.setdefault((p.max_new_tokens, p.l_max(dataset, defaults)), []).append(j)
    return [(t, lm, js) for (t, lm), js in out.items()]


def carries_history(point: RunPoint) -> bool:
    """Whether the point's decoder adapts from a history state carried between prompts."""
    return point.spec.method == "dynatree"


def plan_shards(points: Sequence[RunPoint], datasets: Sequence[str], defaults: dict[str, int],
                num_prompts: dict[tuple[str, int], int], warmup: int) -> list[Shard]:
    """Every shard of an experiment, in :func:`serial_order`. ``num_prompts[(dataset, L_max)]``
    is how many prompts were selected for that dataset and prompt length."""
    shards: list[Shard] = []
    for ds in datasets:
        for g, (t, l_max, js) in enumerate(groups(points, ds, defaults)):
            n = num_prompts[ds, l_max]
            if warmup >= n:
                raise ValueError(f"warmup (W={warmup}) must be < the number of prompts (N={n})")
            base = f"{ds}/T={t},L={l_max}"
            warm = None
            if warmup:
                warm = Shard(f"{base}/{WARMUP}", ds, g, tuple(js), tuple(range(warmup)), True)
                shards.append(warm)
            needs = warm.id if warm is not None and any(carries_history(points[j]) for j in js) else None
            shards += [Shard(f"{base}/p{i}", ds, g, tuple(js), (i,), False, needs) for i in range(warmup, n)]
    return serial_order(shards, datasets)


def serial_order(shards: Sequence[Shard], datasets: Sequence[str]) -> list[Shard]:
    """Dataset by dataset; the warmup shards first, then prompt by prompt, each prompt's groups in
    order: the order the serial protocol decodes in."""
    rank = {ds: i for i, ds in enumerate(datasets)}
    return sorted(shards, key=lambda s: (rank[s.dataset], *s.order))


def merge_rows(shards: Sequence[Shard], rows: dict[str, list[dict[str, Any]]],
               datasets: Sequence[str]) -> list[dict[str, Any]]:
    """The finished shards' rows in the serial run's order (dataset, prompt, point), however
    and wherever the shards ran. A shard's rows come prompt by prompt, point by point."""
    rank = {ds: i for i, ds in enumerate(datasets)}
    keyed = []
    for s in shards:
        if s.id not in rows:
            continue
        cells = [(i, j) for i in s.prompts for j in s.points]
        if len(cells) != len(rows[s.id]):
            raise ValueError(f"shard {s.id}: {len(rows[s.id])} rows, expected {len(cells)}")
        keyed += [((rank[s.dataset], i, j), r) for (i, j), r in zip(cells, rows[s.id])]
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]


def fingerprint(description: dict[str, Any]) -> str:
    """A short stable hash of everything that defines an experiment's rows (what ``--resume``
    checks before it continues a checkpoint)."""
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]
