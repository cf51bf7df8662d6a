"""The sync lint: the calls of ``dynatree_core`` that read the device outside the one counted read
(:class:`SyncLint`), shared by the loop's tests (tests/test_device_tree.py) and the test that shows it
catch a planted read (tests/test_checks_fail.py)."""

from __future__ import annotations

import sys

import pytest
import torch

from dynatree_core import iterate


class SyncLint:
    """Catches, on any device, the calls of this package that read the device or wait for it
    outside :meth:`HostSyncs.fetch` (the one counted read): on a GPU each is an uncounted
    synchronisation, on a CPU nothing at all, so only a lint like this finds them here.

    * ``torch.tensor(data, device=...)``: a copy from pageable host memory (waits for the device);
    * ``t[index_tensor] = scalar``: the host scalar is copied to the device first (waits);
    * ``t[bool_mask]``: the result's size is data on the device (a read);
    * ``.item()``, ``.tolist()``, ``int(t)``, ``float(t)``, ``bool(t)``: reads.

    Only calls made directly from ``dynatree_core`` count (the models' own code is not ours), and
    none from inside ``HostSyncs.fetch``. CUDA's sync debug mode (``sync_audit``) is the ground
    truth on a GPU; its run of 2026-11-27 found the cases this lint now covers (a breadth table
    rebuilt with ``torch.tensor`` when the history adapter moved tau_h, scalar writes in the
    cost-aware fill, boolean masks in EAGLE-2's rerank)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[str] = []
        self.active = False
        t = torch.Tensor
        for name in ("item", "tolist", "__int__", "__float__", "__bool__"):
            monkeypatch.setattr(t, name, self._wrap(getattr(t, name), f".{name}()", lambda *a, **k: True))
        monkeypatch.setattr(t, "__getitem__", self._wrap(t.__getitem__, "t[bool mask]", self._bool_index))
        monkeypatch.setattr(t, "__setitem__", self._wrap(t.__setitem__, "t[index] = scalar", self._scalar_write))
        monkeypatch.setattr(torch, "tensor", self._wrap(torch.tensor, "torch.tensor(device=...)",
                                                        lambda *a, **k: k.get("device") is not None))

    @staticmethod
    def _indices(index) -> tuple:
        return index if isinstance(index, tuple) else (index,)

    def _bool_index(self, _t, index, *rest) -> bool:
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in self._indices(index))

    def _scalar_write(self, _t, index, value, *rest) -> bool:
        return (not isinstance(value, torch.Tensor)
                and any(isinstance(i, torch.Tensor) for i in self._indices(index)))

    def _wrap(self, real, what: str, flagged):
        def spy(*args, **kwargs):
            if self.active:
                caller = sys._getframe(1)
                code = caller.f_code
                if ("dynatree_core" in code.co_filename and code.co_name not in ("fetch", "_host_array")
                        and flagged(*args, **kwargs)):
                    self.calls.append(f"{what} at {code.co_filename.rsplit('/', 1)[-1]}:{caller.f_lineno} "
                                      f"in {code.co_name}")
            return real(*args, **kwargs)

        return spy

    def steady_calls(self, pair, prompt, method: str, config, runtime: str = "eager") -> list[str]:
        """The flagged calls of a loop's iterations after its first (which may build cached
        constants), sorted and without repeats; fails if there was no such iteration."""
        run = iterate(pair, prompt, method, config, max_new_tokens=24, ignore_eos=True, runtime=runtime)
        next(run)
        self.active = True
        try:
            recs = list(run)
        finally:
            self.active = False
        assert recs, "no iteration after the first"
        return sorted(set(self.calls))
