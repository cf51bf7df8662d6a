"""Argument checks shared by the configs, the torch-free analysis modules (oracle, sequoia,
reliability) and the prompt-lookup settings: each names the parameter and its allowed range."""

from __future__ import annotations

from numbers import Integral
from typing import Any


def int_at_least(name: str, value: object, lo: int) -> int:
    """``value`` as an int >= ``lo`` (numpy integers too; bools are not ints here), or a
    TypeError / ValueError naming ``name`` and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int >= {lo}, got {type(value).__name__}")
    if value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value}")
    return int(value)


def check_sequence(name: str, values: Any, what: str, empty: str) -> list:
    """``values`` as a non-empty list, else an error naming ``name`` (``what`` it must hold, and why
    it cannot be ``empty``); a string is not a sequence here."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of {what}, got {type(values).__name__}")
    vals = list(values)
    if not vals:
        raise ValueError(f"{name} must be non-empty ({empty})")
    return vals


def check_open_unit(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number in (0, 1), got {type(value).__name__}")
    if not (0.0 < float(value) < 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {value}")


def check_unit_closed_open(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number in [0, 1), got {type(value).__name__}")
    if not (0.0 <= float(value) < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {rng}, got {value}")

