"""Random knob settings inside the offline page's ranges (the replay and page tests' inputs)."""

from __future__ import annotations

import random

from dynatree_core.policy.knobs import knob, page_ranges


def _grid(rng: random.Random, name: str, lo: float, hi: float) -> float:
    k = knob(name)
    steps = int(round((hi - lo) / k.step))
    v = lo + k.step * rng.randint(0, max(steps, 0))
    return int(round(v)) if k.kind == "int" else round(v, 9)


def random_setting(rng: random.Random) -> dict[str, float]:
    """A valid DynaTree setting on the sliders' grid inside the page ranges. One in four draws is
    an edge case the budget makes interesting: a small N_max, narrow B and a deep D_max."""
    r = page_ranges()
    v: dict[str, float] = {}
    v["d_max"] = _grid(rng, "d_max", *r["d_max"])
    v["d0"] = _grid(rng, "d0", r["d0"][0], min(r["d0"][1], v["d_max"] - 1))
    v["tau_l"] = _grid(rng, "tau_l", r["tau_l"][0], r["tau_l"][1] - 0.01)
    v["tau_h"] = _grid(rng, "tau_h", round(v["tau_l"] + 0.01, 9), r["tau_h"][1])
    v["rho_stop"] = _grid(rng, "rho_stop", *r["rho_stop"])
    v["rho_deep"] = _grid(rng, "rho_deep", max(r["rho_deep"][0], round(v["rho_stop"] + 0.01, 9)), r["rho_deep"][1])
    bs = sorted(_grid(rng, "b_mid", *r["b_mid"]) for _ in range(3))
    v["b_min"], v["b_mid"], v["b_max"] = bs
    v["tau"] = _grid(rng, "tau", r["tau"][0], 0.2) if rng.random() < 0.8 else _grid(rng, "tau", *r["tau"])
    v["n_max"] = _grid(rng, "n_max", 1, 24) if rng.random() < 0.6 else _grid(rng, "n_max", *r["n_max"])
    if rng.random() < 0.25:  # small budget, narrow breadth, deep limit: depth the widest tree never pays for
        v.update(b_min=1, b_mid=1, b_max=rng.randint(1, 2), n_max=rng.randint(1, 6), d_max=r["d_max"][1],
                 rho_stop=r["rho_stop"][0], rho_deep=round(r["rho_stop"][0] + 0.01, 9), d0=rng.randint(1, 4))
    return v
