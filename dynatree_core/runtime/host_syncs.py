"""Device -> host reads and host -> device copies: the only ways the decode loop crosses between them.

Every device -> host read goes through :meth:`HostSyncs.fetch`, which packs its tensors into one
buffer and counts the transfer (on a CPU, where there is nothing to transfer, it reads the arrays
where they are); host -> device copies go through :func:`to_device`, which never waits for the
device (pinned memory, ``non_blocking``). The engine reports the count per iteration (at most one
per draft level plus one per verification, see :mod:`dynatree_core.runtime.tree.tree`), and
``tests/test_device_tree.py``'s sync lint checks that nothing else reads the device.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


class HostSyncs:
    """Counts device -> host transfers; :meth:`fetch` is the only way the loop reads the device."""

    def __init__(self, pack: bool | None = None) -> None:
        self.count = 0
        #: pack tensors into one transfer: None = unless they are on the CPU already (True: always,
        #: what tests use to run the GPU's path on a CPU)
        self.pack = pack

    def shared(self) -> None:
        """Count a read another counter's :meth:`fetch` made for this reader too (a batch reads every row's
        AR-step token in one transfer; each row's iteration still waited for it)."""
        self.count += 1

    def fetch(self, **tensors: torch.Tensor) -> dict[str, np.ndarray]:
        """Copy several device tensors to the host in ONE transfer (one synchronisation).

        They are flattened into one int64 buffer (floats travel as float64 bit patterns, so
        nothing is rounded) and split again on the host.
        """
        self.count += 1
        if not self.pack and all(t.device.type == "cpu" for t in tensors.values()):
            # the device is the host: nothing to transfer, each array is read where it is (same
            # dtypes as the packed path: floats as float64, integers as int64, bools as bool)
            return {name: _host_array(t) for name, t in tensors.items()}
        if all(t.dim() == 0 and not t.is_floating_point() for t in tensors.values()):
            # the per-level case (two counts): one stack and one read, no packing
            values = torch.stack([t.to(torch.int64) for t in tensors.values()]).tolist()
            return {name: np.int64(v) for name, v in zip(tensors, values)}
        parts, meta = [], []
        for name, t in tensors.items():
            flat = t.reshape(-1)
            if flat.is_floating_point():
                parts.append(flat.to(torch.float64).view(torch.int64))
                meta.append((name, t.shape, np.float64))
            else:
                parts.append(flat.to(torch.int64))
                meta.append((name, t.shape, t.dtype))
        buf = torch.cat(parts).cpu().numpy() if parts else np.zeros(0, np.int64)
        out, at = {}, 0
        for (name, shape, kind), p in zip(meta, parts):
            chunk = buf[at:at + p.numel()]
            at += p.numel()
            if kind is np.float64:
                arr = chunk.view(np.float64)
            elif kind == torch.bool:
                arr = chunk.astype(bool)
            else:
                arr = chunk
            out[name] = arr.reshape(tuple(shape))
        return out


def _host_array(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as the numpy array :meth:`HostSyncs.fetch` returns (a copy, so later in-place
    writes to the tensor's buffer do not show through)."""
    a = t.numpy()
    if t.is_floating_point():
        return a.astype(np.float64)
    return a.copy() if a.dtype == np.bool_ else a.astype(np.int64)


def to_device(values: Sequence[int] | np.ndarray, device: torch.device, dtype: torch.dtype = torch.long
              ) -> torch.Tensor:
    """Host values -> a device tensor without waiting for the device.

    A plain ``torch.tensor(..., device="cuda")`` copies from pageable memory and synchronises
    the stream; a pinned buffer copied with ``non_blocking`` just queues the copy (the caching
    host allocator keeps the buffer alive until it has run).
    """
    t = torch.as_tensor(np.asarray(values), dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class Peek:
    """A device flag the host looks at only once the device has written it: never a wait.

    :meth:`post` queues a copy of a bool to (pinned) host memory and records an event; :meth:`false`
    is True only if that copy has landed (``Event.query``, which does not block) and the flag was
    False. On a CPU the copy lands at once. The device-resident draft phase posts "the next frontier
    has a node to expand" after each level and stops launching levels once a posted flag says none:
    on a launch-bound GPU the device has usually finished a level before the host has issued the
    next, so the padding levels past the tree's depth mostly never run; when the flag is late, the
    levels run as the no-ops they are (the tree is the same either way; only the count of draft
    forwards can differ from run to run)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.buf = torch.zeros(1, dtype=torch.bool, pin_memory=self.cuda)
        self._host = self.buf.numpy()  # the same memory, read without an op
        self.event = torch.cuda.Event() if self.cuda else None
        self.posted = False

    def post(self, flag: torch.Tensor) -> None:
        """Queue the copy of ``flag`` ([1] or [] bool)."""
        self.buf.copy_(flag if flag.dim() else flag.view(1), non_blocking=self.cuda)
        if self.event is not None:
            self.event.record()
        self.posted = True

    def false(self) -> bool:
        if not self.posted or (self.event is not None and not self.event.query()):
            return False  # not written yet: unknown, so not known to be False
        return not self._host[0]  # host memory the copy has filled: no device read


def read_counts(syncs: HostSyncs, counts: dict[str, torch.Tensor | int]) -> dict[str, int]:
    """A level's counts as host ints: those still on the device travel in one read, and there is
    no read at all when the host knows every one (static counts)."""
    on_device = {name: v for name, v in counts.items() if isinstance(v, torch.Tensor)}
    got = syncs.fetch(**on_device) if on_device else {}
    return {name: int(got[name]) if name in got else v for name, v in counts.items()}

