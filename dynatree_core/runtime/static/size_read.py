"""Whether a resident tree's real size is read before its verify, so that the verify runs at its nodes' bucket.

A resident draft phase reads nothing until the selection, so the host does not know how many of the
tree's slots hold nodes, and the verify runs at the bucket of every slot its shape holds: 48 for
DynaTree's ``gpu`` preset, 384 for a fixed tree with n_max 256, even when the tree holds 8 nodes. One
more host read before the verify (the node count) lets it run at bucket(n) instead.

That read has a price only where a device runs the draft phase apart from the host: on a GPU the host
waits for the draft phase, and the GPU then waits for the verify's first launch, work that would
otherwise have been queued behind the draft phase. On a CPU the host ran the draft phase itself, so the
read waits for nothing and the smaller bucket is a pure saving. :class:`SizeRead` reads where the
verify it saves costs more than the read: c(padded(slots)) - E[c(padded(n))] > read_s, with c(b) each
bucket's forward timed when the fast path built it, padded(n) the cheapest bucket that holds n entries, and
E over the sizes the selections read (they read the count anyway, so learning it costs nothing).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from dynatree_core.runtime.static.fast_path import bucket

#: the weight a new selection's size has in E[c(padded(n))] (a running mean: trees grow and shrink with
#: the history adapter's D0 and the text)
FOLLOW = 0.2


@dataclass
class SizeRead:
    """The read-or-not choice of one run, and the bucket a verify of n entries runs at (see the module docstring).

    ``bucket_s``: c(b), each bucket's verify forward in seconds (empty where untimed: a CPU, where the read
    is free and every smaller bucket saves); ``read_s``: what the read costs (0 on a CPU)."""

    buckets: tuple[int, ...]
    bucket_s: dict[int, float] = field(default_factory=dict)
    read_s: float = 0.0
    #: E[c(padded(n))] over the sizes the selections read (None: none read yet)
    expected: float | None = None
    #: reads made and iterations asked, for the run's record
    reads: int = 0
    asked: int = 0

    def padded(self, n: int) -> int:
        """The bucket a verify of ``n`` entries runs at: the cheapest timed one that holds them, else the
        smallest. A GPU's curve need not rise with the size (an H200 ran bucket 16 in 8.8 ms, 48 in 6.5:
        cuBLAS picks its kernel per shape), so a bigger bucket can be the cheaper."""
        first = bucket(n, self.buckets)
        fits = [b for b in self.buckets if b >= first]
        if not all(b in self.bucket_s for b in fits):
            return first
        return min(fits, key=lambda b: (self.bucket_s[b], b))

    def read(self, slots: int) -> bool:
        """Whether a tree whose shape verifies ``slots`` slots reads its real size first."""
        self.asked += 1
        full = self.padded(slots)
        if full == self.buckets[0]:
            go = False  # no smaller bucket to run at
        elif full not in self.bucket_s or self.buckets[0] not in self.bucket_s:
            go = self.read_s <= 0  # untimed: read only where it is free
        else:
            # nothing read yet: assume the cheapest bucket (one read settles it, the selection's size follows)
            expected = self.bucket_s[self.padded(1)] if self.expected is None else self.expected
            go = self.bucket_s[full] - expected > self.read_s
        self.reads += go
        return go

    def observe(self, n: int) -> None:
        """The real size a selection read (root, nodes and lookup tail)."""
        c = self.bucket_s.get(self.padded(n))
        if c is None:
            return
        self.expected = c if self.expected is None else (1 - FOLLOW) * self.expected + FOLLOW * c


def read_price(device: torch.device, repeats: int = 5) -> float:
    """What reading a size before the verify costs on ``device``: 0 on a CPU; on a GPU twice the round
    trip of a posted scalar (the read itself, then the verify's first launch, which the GPU now waits for
    instead of finding it queued)."""
    if device.type != "cuda":
        return 0.0
    x = torch.zeros((), dtype=torch.long, device=device)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        int(x.add(1))
        times.append(time.perf_counter() - t0)
    return 2 * statistics.median(times[1:])
