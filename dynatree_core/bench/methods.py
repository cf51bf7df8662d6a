"""Benchmark method specs: a label, an engine method and its config (torch-free).

Names accepted by :func:`method_specs`: ``ar``, ``linear`` (K), ``fixed_tree`` (D, B, τ),
``dynatree`` and the Table 4 ablation variants ``dynatree:fixed_backbone``,
``dynatree:breadth_depth``, ``dynatree:full`` (``ablation`` expands to all three), and
``hf_assisted``: Hugging Face's assisted generation on the same pair, for comparison
(:mod:`.hf_assisted`; not an engine method).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Any, Sequence

from ..config import (ABLATION_VARIANTS, ARConfig, DecoderConfig, DynaTreeConfig, FixedTreeConfig, GrowthRule,
                      HistoryConfig, LinearConfig)
from .hf_assisted import HFAssistedConfig

PRESETS: tuple[str, ...] = ("paper", "cpu")
ABLATION_LABELS: tuple[str, ...] = tuple(f"dynatree:{v}" for v in ABLATION_VARIANTS)
METHOD_NAMES: tuple[str, ...] = ("ar", "linear", "fixed_tree", "dynatree", *ABLATION_LABELS, "ablation",
                                  "hf_assisted")
#: DynaTreeConfig fields settable from the command line: exactly the GrowthRule's (the tree policy)
DYNATREE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GrowthRule))
#: their Python types (int or float), read from the dataclass so the CLI never guesses from names
DYNATREE_FIELD_TYPES: dict[str, type] = {f: typing.get_type_hints(GrowthRule)[f] for f in DYNATREE_FIELDS}


@dataclass(frozen=True)
class MethodSpec:
    """One benchmarked decoder: ``label`` names the row, ``method`` and ``config`` run it
    (``hf_assisted``: an :class:`~.hf_assisted.HFAssistedConfig`, run by HF's ``generate``)."""

    label: str
    method: str
    config: DecoderConfig | HFAssistedConfig

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "method": self.method, "config": self.config.to_dict()}


def parse_methods(spec: str) -> list[str]:
    """``"ar,linear,ablation"`` -> validated labels (``ablation`` expanded, repeats dropped)."""
    out: list[str] = []
    for name in (s.strip() for s in spec.split(",")):
        if not name:
            continue
        if name not in METHOD_NAMES:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHOD_NAMES)}")
        for n in (ABLATION_LABELS if name == "ablation" else (name,)):
            if n not in out:
                out.append(n)
    if not out:
        raise ValueError(f"no method given; choose from {', '.join(METHOD_NAMES)}")
    return out


def auto_preset(device: str) -> str:
    """The preset ``auto`` picks: ``paper`` on a GPU, ``cpu`` on a CPU (where a verify forward grows
    with the tree, so the paper's large trees lose)."""
    return "paper" if str(device).startswith("cuda") else "cpu"


def dynatree_config(preset: str = "paper", history: bool = True, **overrides: Any) -> DynaTreeConfig:
    """The DynaTree config of ``preset`` (``paper`` or ``cpu``) with field overrides."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
    make = DynaTreeConfig.paper if preset == "paper" else DynaTreeConfig.cpu
    cfg = make(**overrides)
    if not history:
        cfg = cfg.replace(history=HistoryConfig(enabled=False))
    return cfg


def method_specs(names: list[str], *, preset: str = "paper", k: int | Sequence[int] = 5, d: int = 5, b: int = 2,
                 tau: float = 0.05, n_max: int = 256, kv_mode: str = "gather", history: bool = True,
                 dynatree_overrides: dict[str, Any] | None = None) -> list[MethodSpec]:
    """Configs for ``names`` (see :func:`parse_methods`); invalid parameters raise ValueError.

    ``k`` may list several draft lengths: ``linear`` then expands to one row per K, labelled
    ``linear:k=K``, so linear's best K is found in the same run as the other methods."""
    ks = [int(k)] if isinstance(k, int) else [int(x) for x in k]
    if not ks:
        raise ValueError("k: give at least one linear draft length K >= 1")
    dt = dict(dynatree_overrides or {})
    base = dynatree_config(preset, history=history, kv_mode=kv_mode, **dt)
    specs: list[MethodSpec] = []
    for name in names:
        if name == "ar":
            cfg: DecoderConfig = ARConfig(kv_mode=kv_mode)
        elif name == "linear":
            for kk in ks:
                lab = "linear" if len(ks) == 1 else f"linear:k={kk}"
                specs.append(MethodSpec(lab, "linear", LinearConfig(k=kk, kv_mode=kv_mode)))
            continue
        elif name == "fixed_tree":
            cfg = FixedTreeConfig(d=d, b=b, tau=tau, n_max=n_max, kv_mode=kv_mode)
        elif name == "dynatree":
            cfg = base
        elif name == "hf_assisted":
            specs.append(MethodSpec(name, name, HFAssistedConfig()))
            continue
        elif name in ABLATION_LABELS:
            fields = {f: getattr(base, f) for f in DYNATREE_FIELDS}
            cfg = DynaTreeConfig.ablation(name.split(":", 1)[1], kv_mode=kv_mode, history=base.history, **fields)
        else:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHOD_NAMES)}")
        specs.append(MethodSpec(name, cfg.method, cfg))
    return specs
