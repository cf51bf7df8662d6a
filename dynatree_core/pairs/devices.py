"""Device and dtype options as users write them (``"auto"``, ``"cuda:1"``, ``"bf16"``), resolved to
torch objects with errors that name the option; :mod:`~dynatree_core.pairs.pair` and
:mod:`~dynatree_core.pairs.named` both use them."""

from __future__ import annotations

import torch

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} requested but CUDA is not available; use device='cpu'")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={str(device)!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


def check_dtype_on_device(dtype: torch.dtype, device: torch.device) -> None:
    """A clear error, naming the option, for a dtype the device cannot compute in."""
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point type (float32, float16, bfloat16), got {dtype}")
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        name = torch.cuda.get_device_name(device)
        raise ValueError(f"dtype='bfloat16' is not supported on {name} ({device}); use dtype='float16' or "
                         "'float32'")
