"""Small torch helpers the distillation stages share: CPU threads, bf16 autocast, the head lookup."""

from __future__ import annotations

import contextlib

import torch


def set_threads(n: int) -> None:
    torch.set_num_threads(max(1, int(n)))


def autocast(dev: torch.device, enabled: bool):
    """bf16 autocast on ``dev`` when ``enabled`` (``--train-bf16``), else nothing."""
    return torch.autocast(dev.type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def head_lut(head_ids: torch.Tensor, vocab: int, dev) -> torch.Tensor:
    """Full-vocabulary id -> row of the draft's head (-1 outside it)."""
    lut = torch.full((vocab,), -1, dtype=torch.long, device=dev)
    lut[head_ids.to(dev)] = torch.arange(len(head_ids), device=dev)
    return lut


def dir_size(path) -> int:
    """Bytes of the files directly in ``path`` (an exported draft)."""
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def device_name(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
