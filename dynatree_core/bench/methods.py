"""Benchmark method specs: a label, an engine method and its config (torch-free).

Names accepted by :func:`method_specs`: ``ar``, ``linear`` (K), ``fixed_tree`` (D, B, τ),
``dynatree`` (the chosen preset) and the Table 4 ablation variants ``dynatree:fixed_backbone``,
``dynatree:breadth_depth``, ``dynatree:full`` (``ablation`` expands to all three), and
``hf_assisted``: Hugging Face's assisted generation on the same pair, for comparison
(:mod:`.hf_assisted`; not an engine method). The tree policies side by side:
``dynatree:paper``, ``dynatree:cpu`` and ``dynatree:gpu`` (the presets side by side), ``dynatree:cost`` (cost-aware
DynaTree: the paper preset's breadth rule, its size from the measured cost curve, no hand-set
N_max), ``eagle2`` (EAGLE-2's dynamic tree) and ``sequoia`` (Sequoia's static tree);
``policies`` expands to linear, the fixed tree and all five.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Sequence

from dynatree_core.policy.config import (ABLATION_VARIANTS, PARAMETER_HELP, ARConfig, DecoderConfig, DynaTreeConfig, Eagle2Config,
                      FixedTreeConfig, GrowthRule, HistoryConfig, LinearConfig, SequoiaConfig)
from dynatree_core.bench.hf_assisted import HFAssistedConfig

PRESETS: tuple[str, ...] = ("paper", "cpu", "gpu")
ABLATION_LABELS: tuple[str, ...] = tuple(f"dynatree:{v}" for v in ABLATION_VARIANTS)
PRESET_LABELS: tuple[str, ...] = ("dynatree:paper", "dynatree:cpu", "dynatree:gpu")
COST_LABEL = "dynatree:cost"
#: the tree policies compared in one run (``policies``)
POLICY_LABELS: tuple[str, ...] = ("linear", "fixed_tree", "dynatree:paper", "dynatree:cpu", COST_LABEL, "eagle2",
                                   "sequoia")
METHOD_NAMES: tuple[str, ...] = ("ar", "linear", "fixed_tree", "dynatree", *ABLATION_LABELS, "ablation",
                                  *PRESET_LABELS, COST_LABEL, "eagle2", "sequoia", "policies", "hf_assisted")
#: group names and what they expand to
GROUPS: dict[str, tuple[str, ...]] = {"ablation": ABLATION_LABELS, "policies": POLICY_LABELS}
#: DynaTreeConfig fields settable from the command line: the GrowthRule's scalar policy fields
DYNATREE_FIELDS: tuple[str, ...] = tuple(PARAMETER_HELP)
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
        for n in GROUPS.get(name, (name,)):
            if n not in out:
                out.append(n)
    if not out:
        raise ValueError(f"no method given; choose from {', '.join(METHOD_NAMES)}")
    return out


def auto_preset(device: str) -> str:
    """The preset ``auto`` picks: ``gpu`` on a GPU (launch-bound: width is nearly free, depth
    costs), ``cpu`` on a CPU (where a verify forward grows with the tree, so large trees lose)."""
    return "gpu" if str(device).startswith("cuda") else "cpu"


def dynatree_config(preset: str = "paper", history: bool = True, **overrides: Any) -> DynaTreeConfig:
    """The DynaTree config of ``preset`` (``paper``, ``cpu`` or ``gpu``) with field overrides."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
    make = {"paper": DynaTreeConfig.paper, "cpu": DynaTreeConfig.cpu, "gpu": DynaTreeConfig.gpu}[preset]
    cfg = make(**overrides)
    if not history:
        cfg = cfg.replace(history=HistoryConfig(enabled=False))
    return cfg


def _ints(name: str, v: int | Sequence[int]) -> list[int]:
    out = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    if not out:
        raise ValueError(f"{name}: give at least one value")
    return list(dict.fromkeys(out))


def method_specs(names: list[str], *, preset: str = "paper", k: int | Sequence[int] = 5, d: int | Sequence[int] = 5,
                 b: int | Sequence[int] = 2, tau: float = 0.05, n_max: int = 256, kv_mode: str = "gather",
                 history: bool = True, dynatree_overrides: dict[str, Any] | None = None,
                 eagle2: dict[str, Any] | None = None, sequoia: dict[str, Any] | None = None) -> list[MethodSpec]:
    """Configs for ``names`` (see :func:`parse_methods`); invalid parameters raise ValueError.

    ``k`` may list several draft lengths: ``linear`` then expands to one row per K, labelled
    ``linear:k=K``, so linear's best K is found in the same run as the other methods. ``d`` and
    ``b`` may list several depths and breadths: ``fixed_tree`` then expands to their grid, labelled
    ``fixed_tree:d=D,b=B``. ``eagle2`` / ``sequoia``: :class:`Eagle2Config` / :class:`SequoiaConfig`
    fields (e.g. ``{"k": 4}``)."""
    ks, ds, bs = _ints("k (linear draft length K)", k), _ints("d (fixed tree depth D)", d), _ints("b (fixed tree breadth B)", b)
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
            grid = [(dd, bb) for dd in ds for bb in bs]
            for dd, bb in grid:
                lab = "fixed_tree" if len(grid) == 1 else f"fixed_tree:d={dd},b={bb}"
                specs.append(MethodSpec(lab, "fixed_tree", FixedTreeConfig(d=dd, b=bb, tau=tau, n_max=n_max,
                                                                           kv_mode=kv_mode)))
            continue
        elif name == "dynatree":
            cfg = base
        elif name in PRESET_LABELS:
            cfg = dynatree_config(name.split(":", 1)[1], history=history, kv_mode=kv_mode, **dt)
        elif name == COST_LABEL:
            # the paper's breadth rule; the node budget comes from the cost curve, not from a preset
            cost_dt = {f: v for f, v in dt.items() if f != "n_max"}
            cfg = dynatree_config("paper", history=history, kv_mode=kv_mode, cost_aware=True, **cost_dt)
        elif name == "eagle2":
            cfg = Eagle2Config(kv_mode=kv_mode, **(eagle2 or {}))
        elif name == "sequoia":
            cfg = SequoiaConfig(kv_mode=kv_mode, **(sequoia or {}))
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
