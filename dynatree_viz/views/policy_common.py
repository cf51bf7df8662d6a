"""What the policy views share (views/cost.py, reliability.py, oracle_gap.py, policy_table.py): one colour and
marker per method label, the way every input may arrive (an instance or the dict its ``to_dict`` wrote), a trace's
method label as ``dynatree bench`` writes it, and number formatting. Torch-free: the views read saved data."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from dynatree_core.records.trace import Trace

from dynatree_viz.core import style

_OI = style.OKABE_ITO
CURVE_COLOR = "#4d4d4d"
#: marker symbols cycled over the methods of one figure, so two methods that pick the same n
#: (same point on the curve) or share a colour family stay apart
METHOD_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up", "star",
                                   "hexagon", "triangle-down", "pentagon", "cross", "x")
MISSING = "–"
#: the label of cost-aware DynaTree (``dynatree_core.bench.methods.COST_LABEL``)
COST_LABEL = "dynatree:cost"

#: colours for labels that are not known methods (EAGLE-2, Sequoia, ...), in order of preference:
#: first those of the ablation variants (rarely in the same figure as new policies), then the
#: base methods', yellow last (faint on white)
_NEW_METHOD_COLORS: tuple[str, ...] = tuple(_OI[k] for k in (
    "bluish_green", "reddish_purple", "vermillion", "orange", "sky_blue", "black", "blue", "yellow"))


def method_styles(labels: Sequence[str]) -> dict[str, style.MethodStyle]:
    """{label: MethodStyle}: known methods keep their fixed colour (:func:`style.method_style`);
    any other label (``eagle2``, ``sequoia``) gets a colour that no known method in this figure
    uses, so that no two families of one figure look alike."""
    out: dict[str, style.MethodStyle] = {}
    for lab in labels:
        st = style.method_style(lab)
        if st is not None:
            out[lab] = st
    used = {st.color for st in out.values()}
    free = [c for c in _NEW_METHOD_COLORS if c not in used] or list(_NEW_METHOD_COLORS)
    for k, lab in enumerate(sorted((lab for lab in labels if lab not in out), key=str)):
        out[lab] = style.MethodStyle(free[k % len(free)])
    return out


def method_symbols(labels: Sequence[str]) -> dict[str, str]:
    return {lab: METHOD_SYMBOLS[k % len(METHOD_SYMBOLS)] for k, lab in enumerate(labels)}


def fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING
    return f"{float(v):.{digits}f}"


def check_labels(mapping: Any, name: str) -> None:
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{name} must be a mapping label -> value, got {type(mapping).__name__}")
    if not mapping:
        raise ValueError(f"{name} is empty: give at least one method")


def coerce(value: Any, cls: type, where: str) -> Any:
    """``value`` as a ``cls`` (an instance, or the dict its ``to_dict`` wrote), else a ValueError
    naming ``where``; the cost curve, the calibration and the oracle summaries all arrive so."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        try:
            return cls.from_dict(dict(value))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: not a {cls.__name__} dict ({e!r})") from e
    raise ValueError(f"{where} must be a {cls.__module__}.{cls.__name__} or its to_dict(), got "
                     f"{type(value).__name__}")


def trace_label(trace: Trace) -> str:
    """A trace's method label, as ``dynatree bench`` labels its rows: ``dynatree:cost`` for a
    cost-aware DynaTree run (same method, another policy), else the method plus ``:<preset>``
    when its config names a preset (``dynatree:cpu``)."""
    cfg = trace.config or {}
    if trace.method == "dynatree" and cfg.get("cost_aware"):
        return COST_LABEL
    preset = cfg.get("preset")
    return f"{trace.method}:{preset}" if preset else str(trace.method)
