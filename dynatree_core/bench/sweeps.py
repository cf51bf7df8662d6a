"""Sweeps as lists of run points (the runner is shared); :mod:`dynatree_viz.sweeps` draws one figure per sweep.

* ``fixed_tree``: the (D, B, τ) grid of the static tree;
* ``sensitivity``: DynaTree's (τ_h × τ_l) thresholds, breadth bounds (B_min, B_mid, B_max) and
  depth ranges (D0, D_max), one group each, around a base config;
* ``length``: T, the number of generated tokens;
* ``prompt_length``: L_max, the prompt length.

Every sweep includes AR at each (T, L_max) so speedup is recomputed from the same run. A sweep reports
Table 1 and its figure, neither of which reads the oracle, so its points time decoding alone
(``RunPoint.oracle`` False: no chain view in the timed loop).
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

from dynatree_core.policy.config import DynaTreeConfig, FixedTreeConfig
from dynatree_core.bench.methods import MethodSpec, method_specs
from dynatree_core.bench.protocol import RunPoint

SWEEPS: tuple[str, ...] = ("fixed_tree", "sensitivity", "length", "prompt_length")
SENSITIVITY_KEYS: tuple[str, ...] = ("group", "tau_h", "tau_l", "b_min", "b_mid", "b_max", "d0", "d_max")


def _point(spec: MethodSpec, max_new_tokens: int, **kw: Any) -> RunPoint:
    """A sweep's run point: no oracle (see the module docstring)."""
    return RunPoint(spec, max_new_tokens, oracle=False, **kw)


def _ar(kv_mode: str) -> MethodSpec:
    return method_specs(["ar"], kv_mode=kv_mode)[0]


def fixed_tree_points(ds: Sequence[int], bs: Sequence[int], taus: Sequence[float], *, n_max: int,
                      max_new_tokens: int, kv_mode: str = "gather") -> tuple[list[RunPoint], dict[str, Any]]:
    """AR plus one fixed tree per (D, B, τ)."""
    points = [_point(_ar(kv_mode), max_new_tokens, params={"d": None, "b": None, "tau": None})]
    for d, b, tau in itertools.product(ds, bs, taus):
        cfg = FixedTreeConfig(d=d, b=b, tau=tau, n_max=n_max, kv_mode=kv_mode)
        spec = MethodSpec(f"fixed_tree(d={d},b={b},tau={tau:g})", "fixed_tree", cfg)
        points.append(_point(spec, max_new_tokens, params={"d": d, "b": b, "tau": tau}))
    meta = {"name": "fixed_tree", "param_keys": ["d", "b", "tau"],
            "grid": {"d": list(ds), "b": list(bs), "tau": list(taus), "n_max": n_max}}
    return points, meta


def _dt_params(group: str, cfg: DynaTreeConfig) -> dict[str, Any]:
    return {"group": group, **{k: getattr(cfg, k) for k in SENSITIVITY_KEYS[1:]}}


def sensitivity_points(base: DynaTreeConfig, *, thresholds: Sequence[tuple[float, float]] = (),
                       breadths: Sequence[tuple[int, int, int]] = (), depths: Sequence[tuple[int, int]] = (),
                       max_new_tokens: int) -> tuple[list[RunPoint], dict[str, Any], list[str]]:
    """AR, the base config, and one DynaTree per (τ_h, τ_l), (B_min, B_mid, B_max) and
    (D0, D_max) value; invalid combinations (e.g. τ_l ≥ τ_h) are skipped and reported."""
    points = [_point(_ar(base.kv_mode), max_new_tokens, params={k: None for k in SENSITIVITY_KEYS}),
              _point(MethodSpec("dynatree(base)", "dynatree", base), max_new_tokens,
                       params=_dt_params("base", base))]
    skipped: list[str] = []
    variants: list[tuple[str, str, dict[str, Any]]] = []
    variants += [("thresholds", f"tau_h={h:g},tau_l={lo:g}", {"tau_h": h, "tau_l": lo}) for h, lo in thresholds]
    variants += [("breadth", f"B={a}/{b}/{c}", {"b_min": a, "b_mid": b, "b_max": c}) for a, b, c in breadths]
    variants += [("depth", f"D0={d0},D_max={dm}", {"d0": d0, "d_max": dm}) for d0, dm in depths]
    for group, name, changes in variants:
        try:
            cfg = base.replace(**changes)
        except (ValueError, TypeError) as e:
            skipped.append(f"sensitivity {group} {name}: skipped ({e})")
            continue
        points.append(_point(MethodSpec(f"dynatree({name})", "dynatree", cfg), max_new_tokens,
                               params=_dt_params(group, cfg)))
    meta = {"name": "sensitivity", "param_keys": list(SENSITIVITY_KEYS),
            "grid": {"thresholds": [list(t) for t in thresholds], "breadth": [list(b) for b in breadths],
                     "depth": [list(d) for d in depths]}, "base": base.to_dict()}
    return points, meta, skipped


def length_points(specs: Sequence[MethodSpec], lengths: Sequence[int]) -> tuple[list[RunPoint], dict[str, Any]]:
    """Every method (AR added) at each T in ``lengths``."""
    specs = _with_ar(specs)
    points = [_point(s, t) for t in lengths for s in specs]
    return points, {"name": "length", "param_keys": [], "grid": {"max_new_tokens": list(lengths)}}


def prompt_length_points(specs: Sequence[MethodSpec], prompt_lengths: Sequence[int],
                         max_new_tokens: int) -> tuple[list[RunPoint], dict[str, Any]]:
    """Every method (AR added) at each L_max in ``prompt_lengths``."""
    specs = _with_ar(specs)
    points = [_point(s, max_new_tokens, max_prompt_len=n) for n in prompt_lengths for s in specs]
    return points, {"name": "prompt_length", "param_keys": [], "grid": {"max_prompt_len": list(prompt_lengths)}}


def _with_ar(specs: Sequence[MethodSpec]) -> list[MethodSpec]:
    specs = list(specs)
    if not any(s.method == "ar" for s in specs):
        kv = getattr(specs[0].config, "kv_mode", "gather") if specs else "gather"  # hf_assisted has none
        specs.insert(0, _ar(kv))
    return specs
