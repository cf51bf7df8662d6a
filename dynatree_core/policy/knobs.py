"""The knob table (torch-free): one row per DynaTree parameter with its paper symbol, its words,
its slider range and step, its help line and its range on the offline explorer page.

Every front end reads this one table: the CLI's help (:data:`PARAMETER_HELP`), the live
explorer's sliders and the order they keep (:data:`ORDERED_PAIRS`), the sweep figures' axis
titles and the offline page, which gets it as JSON (:func:`knobs_json`). A knob added here is a
slider in the explorer and on the page with no second edit.

The ``page`` range is narrower than the live slider's where the live range would make a replay
recording unbounded (:func:`page_envelope`): a recording made for replay drafts, each iteration,
every node that some setting inside the page ranges can grow.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    """One parameter of the growth rule, as every front end shows it."""

    name: str  #: the config field (``tau_h``)
    symbol: str  #: the paper's symbol (``τ_h``)
    words: str  #: what it is, in words ("high-confidence threshold"; may be empty)
    kind: str  #: ``"int"`` or ``"float"``
    lo: float  #: the live slider's range and step
    hi: float
    step: float
    help: str  #: the CLI's help line
    #: (lo, hi) on the offline page; None: the knob has no slider (on neither front end)
    page: tuple[float, float] | None = None

    @property
    def slider(self) -> bool:
        return self.page is not None

    @property
    def title(self) -> str:
        """Axis title: words then symbol ("base depth D0")."""
        return f"{self.words} {self.symbol}".strip()


KNOBS: tuple[Knob, ...] = (
    Knob("tau_h", "τ_h", "high-confidence threshold", "float", 0.01, 0.99, 0.01,
         "tau_h (τ_h), high-confidence threshold, in (tau_l, 1)", (0.01, 0.99)),
    Knob("tau_l", "τ_l", "low-confidence threshold", "float", 0.01, 0.99, 0.01,
         "tau_l (τ_ℓ), low-confidence threshold, in (0, tau_h)", (0.01, 0.99)),
    Knob("b_min", "B_min", "", "int", 1, 8, 1, "B_min, children of a confident node (c(u) >= tau_h)", (1, 6)),
    Knob("b_mid", "B_mid", "", "int", 1, 8, 1, "B_mid, children of a node with tau_l <= c(u) < tau_h", (1, 6)),
    Knob("b_max", "B_max", "", "int", 1, 8, 1, "B_max, children of an unsure node (c(u) < tau_l)", (1, 6)),
    Knob("d0", "D0", "base depth", "int", 1, 15, 1,
         "D0, base depth: past it a node is expanded only if p(u) >= rho_deep", (1, 11)),
    Knob("d_max", "D_max", "depth limit", "int", 2, 16, 1, "D_max, hard depth limit", (2, 12)),
    Knob("rho_stop", "ρ_stop", "early-stop threshold", "float", 0.01, 0.99, 0.01,
         "rho_stop (ρ_stop), no expansion below this path probability", (0.02, 0.98)),
    Knob("rho_deep", "ρ_deep", "deep-expansion threshold", "float", 0.01, 0.99, 0.01,
         "rho_deep (ρ_deep), path probability needed to go past D0", (0.03, 0.99)),
    Knob("tau", "τ", "pruning threshold", "float", 0.0, 0.5, 0.005,
         "tau (τ), children below this path probability are pruned", (0.0, 0.5)),
    Knob("n_max", "N_max", "node budget", "int", 1, 512, 1,
         "N_max, node budget (verified nodes per iteration, root excluded)", (1, 512)),
    Knob("lookup_tail", "L_tail", "prompt-lookup tail", "int", 0, 16, 1,
         "prompt-lookup tail: tokens lookup copies below a drafted leaf (0: off; not in the paper)"),
    Knob("tail_n_max", "N_tail", "prompt-lookup tail budget", "int", 1, 64, 1,
         "most prompt-lookup tail nodes per iteration, most probable leaves first"),
)

#: (lower, upper, strict) knob pairs that DynaTreeConfig requires in order: ``lower < upper``
#: when strict, else ``lower <= upper``. Sliders narrow their range to what the others allow.
ORDERED_PAIRS: tuple[tuple[str, str, bool], ...] = (
    ("d0", "d_max", True),
    ("tau_l", "tau_h", True),
    ("rho_stop", "rho_deep", True),
    ("b_min", "b_mid", False),
    ("b_mid", "b_max", False),
)


def knob(name: str) -> Knob:
    """The row of ``name`` (KeyError naming the known knobs)."""
    for k in KNOBS:
        if k.name == name:
            return k
    raise KeyError(f"no knob {name!r}; the knobs are {[k.name for k in KNOBS]}")


def slider_knobs() -> tuple[Knob, ...]:
    """The knobs with a slider, in table order (read at call time: a row added is a slider)."""
    return tuple(k for k in KNOBS if k.slider)


def parameter_help() -> dict[str, str]:
    """Each knob's help line by name (the CLI's ``--tau-h`` help and the docs)."""
    return {k.name: k.help for k in KNOBS}


def slider_bounds(values: dict[str, float], base: dict[str, tuple[float, float]]
                  ) -> dict[str, tuple[float, float]]:
    """{knob: (min, max)} given every slider's current value: the ``base`` range narrowed by
    :data:`ORDERED_PAIRS` (e.g. D0's max = D_max - 1, τ_h's min = τ_l + one step)."""
    bounds = dict(base)
    for lo, hi, strict in ORDERED_PAIRS:
        if lo not in bounds or hi not in bounds:
            continue
        gap = knob(lo).step if strict else 0
        lo_min, lo_max = bounds[lo]
        hi_min, hi_max = bounds[hi]
        bounds[lo] = (lo_min, min(lo_max, snap(values[hi] - gap)))
        bounds[hi] = (max(hi_min, snap(values[lo] + gap)), hi_max)
    return bounds


def snap(x: float) -> float:
    """A bound back on the decimal grid (0.9 - 0.01 is 0.8900000000000001 in floats)."""
    return round(x, 9)


def page_ranges() -> dict[str, tuple[float, float]]:
    """Each slider's range on the offline page."""
    return {k.name: tuple(k.page) for k in slider_knobs()}  # type: ignore[misc]


def check_in_page_ranges(values: dict[str, float], ranges: dict[str, tuple[float, float]] | None = None) -> None:
    """Raise ValueError naming the first knob outside its page range."""
    ranges = ranges or page_ranges()
    for name, (lo, hi) in ranges.items():
        v = values.get(name)
        if v is not None and not (lo - 1e-12 <= v <= hi + 1e-12):
            raise ValueError(f"{name} must be in the page's range [{lo:g}, {hi:g}] for a replay recording, got {v}")


def page_envelope(ranges: dict[str, tuple[float, float]] | None = None) -> dict[str, float]:
    """The settings whose tree, grown with no budget, holds the tree of every setting inside
    ``ranges`` (the page's by default): the largest breadth, depth limit and base depth, the
    smallest ρ_stop, ρ_deep and τ. A node another setting expands passes each of these gates, and
    each child it keeps is among the envelope's top B children above its τ; N_max only cuts."""
    r = ranges or page_ranges()
    return dict(b=int(max(r["b_min"][1], r["b_mid"][1], r["b_max"][1])), d_max=int(r["d_max"][1]),
                d0=int(r["d0"][1]), rho_stop=float(r["rho_stop"][0]), rho_deep=float(r["rho_deep"][0]),
                tau=float(r["tau"][0]))


def knobs_json() -> str:
    """The table and its order constraints as JSON (what the offline page reads)."""
    rows: list[dict[str, Any]] = [dict(asdict(k), title=k.title, slider=k.slider) for k in KNOBS]
    return json.dumps({"knobs": rows, "ordered_pairs": [list(p) for p in ORDERED_PAIRS]}, ensure_ascii=False)


#: each knob's help by name (the CLI's help): derived from :data:`KNOBS`
PARAMETER_HELP: dict[str, str] = parameter_help()
