"""Argument checks shared by the torch-free analysis modules (oracle, sequoia, reliability) and the
prompt-lookup drafter's settings."""

from __future__ import annotations

from numbers import Integral


def int_at_least(name: str, value: object, lo: int) -> int:
    """``value`` as an int >= ``lo`` (numpy integers too; bools are not ints here), or a
    TypeError / ValueError naming ``name`` and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int >= {lo}, got {type(value).__name__}")
    if value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value}")
    return int(value)
