"""Which kernel a model's linear layers run on: torch's default, or oneDNN with prepacked weights.

A verify forward's cost c(n) over n tokens decides what a tree may spend. On a CPU in float32,
torch's default linear (MKL GEMM on the plain weight) changes kernel with the row count, so a few
rows can cost more than more rows; oneDNN's inner product on a weight reordered once reads it once
for all rows, which flattens c(n) over the sizes a tree needs and makes each row's output the same
whatever the other rows are (docs/bench/2026-11-27-linear-kernels has the curves).
:func:`set_linear_kernel` swaps ``nn.Linear`` for :class:`PackedLinear`, which keeps the original
parameters (state dicts and tied heads unchanged), repacks when a weight changes in place, and falls
back to ``F.linear`` under autograd, off the CPU and inside ``torch.compile``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from dynatree_core.runtime.choices import LINEAR_KERNELS


def onednn_unavailable(device: torch.device | str, dtype: torch.dtype, dispatched: bool = False) -> str | None:
    """Why prepacked oneDNN linears cannot serve a model on ``device`` in ``dtype`` (None: they can)."""
    device = torch.device(device)
    if device.type != "cpu":
        return f"they run on the CPU only (the model is on {device})"
    if dtype != torch.float32:
        return f"they are used for float32 only (the model is {str(dtype).replace('torch.', '')})"
    if dispatched:
        return "the model is split across devices by accelerate (device_map), whose hooks own its layers"
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return "this torch build has no oneDNN (mkldnn) linear kernels"
    return None


def resolve_linear_kernel(kernel: str, device: torch.device | str, dtype: torch.dtype,
                          dispatched: bool = False) -> str:
    """``"onednn"`` or ``"torch"`` for the requested ``kernel`` (one of :data:`LINEAR_KERNELS`),
    or a ValueError naming ``linear_kernel`` when it cannot be honoured."""
    if kernel not in LINEAR_KERNELS:
        raise ValueError(f"linear_kernel must be one of {LINEAR_KERNELS}, got {kernel!r}")
    why = onednn_unavailable(device, dtype, dispatched)
    if kernel == "auto":
        return "torch" if why else "onednn"
    if kernel == "onednn" and why:
        raise ValueError(f"linear_kernel='onednn' cannot be used: {why}; use linear_kernel='torch' or 'auto'")
    return kernel


class WeightPack:
    """A weight's copy reordered for oneDNN, rebuilt when the weight changes in place (an
    optimizer step, ``load_state_dict``): its ``_version`` says so, at no cost."""

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.version = -1

    def of(self, weight: torch.Tensor) -> torch.Tensor:
        # an inference tensor (made under inference_mode) has no version counter: packed once
        version = -2 if weight.is_inference() else weight._version
        if self.tensor is None or version != self.version:
            with torch.no_grad():
                self.tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
            self.version = version
        return self.tensor

    def __getstate__(self) -> dict[str, Any]:
        # the packed tensor is opaque (it has no storage): copies and pickles repack on first use
        return {"tensor": None, "version": -1}


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pack: WeightPack | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, on oneDNN's packed weight when ``pack`` is given and it
    applies: the oneDNN op has no autograd formula, and its packed weight lives on the host, so
    training and non-CPU inputs take ``F.linear``. Under ``torch.compile`` (the ``compiled``
    runtime) the graph gets ``F.linear`` too: the packed weight is an opaque tensor dynamo cannot
    trace, and inductor chooses its own GEMM."""
    if pack is None or torch.compiler.is_compiling() or not x.is_cpu or x.dtype != torch.float32 or (torch.is_grad_enabled() and (
            x.requires_grad or weight.requires_grad)):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, pack.of(weight), None if bias is None else bias.detach(),
                                              "none", [], "")


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` computed by oneDNN on a weight reordered once into its blocked layout."""

    linear_kernel = "onednn"

    def __init__(self, lin: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        # the original parameters, shared (a tied output head stays tied; nothing is copied)
        self.weight = lin.weight
        self.bias = lin.bias
        self.pack = WeightPack()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.pack)

    def unpacked(self) -> torch.nn.Linear:
        """An ``nn.Linear`` with the same (shared) parameters."""
        lin = torch.nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        lin.weight, lin.bias = self.weight, self.bias
        return lin

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, kernel=onednn")


def set_linear_kernel(model: torch.nn.Module, kernel: str) -> int:
    """Put every ``nn.Linear`` of ``model`` on ``kernel`` (``"onednn"`` or ``"torch"``, already
    resolved), in place, and every module defining ``use_linear_kernel(kernel) -> bool``
    (one computing its own linear, e.g. :class:`~dynatree_core.drafters.draft_model.SparseLMHead`).
    Returns how many layers changed."""
    if kernel not in ("onednn", "torch"):
        raise ValueError(f"kernel must be 'onednn' or 'torch' (resolve 'auto' first), got {kernel!r}")
    changed = 0
    for module in list(model.modules()):
        # a module computing its own linear (a sparse LM head) takes the kernel itself
        if hasattr(module, "use_linear_kernel"):
            changed += bool(module.use_linear_kernel(kernel))
        for name, child in list(module.named_children()):
            if kernel == "onednn" and type(child) is torch.nn.Linear:
                setattr(module, name, PackedLinear(child))
            elif kernel == "torch" and isinstance(child, PackedLinear):
                setattr(module, name, child.unpacked())
            else:
                continue
            changed += 1
    return changed


def linear_kernel_of(model: Any) -> str | None:
    """``"onednn"`` if any of ``model``'s linear layers is packed, ``"torch"`` otherwise, None for
    something that is not a module (a model-free draft)."""
    if not isinstance(model, torch.nn.Module):
        return None
    packed = any(getattr(m, "linear_kernel", None) == "onednn" for m in model.modules())
    return "onednn" if packed else "torch"
