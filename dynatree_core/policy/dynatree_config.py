"""DynaTree's config (torch-free): confidence-aware breadth, probability-gated depth, τ pruning,
the N_max budget and the history adapter's settings, with the named presets and the paper's ablation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dynatree_core.policy.checks import check_int, check_open_unit, check_unit_closed_open
from dynatree_core.policy.configs import DecoderConfig
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.policy.growth_rule import GrowthRule


@dataclass(frozen=True)
class HistoryConfig:
    """Sliding-window History Adaptation (paper: W, a*, η).

    After every iteration r the acceptance a_r = (accepted draft tokens) / (tree depth) enters a
    window of the last ``window`` (W) values with mean ā. With e = ā − a* the adapter updates::

        D0    <- clip(D0 + eta_d * e * D_max, 1, D_max - 1)     (deeper when accepting well)
        tau_h <- clip(tau_h - eta_h * e, tau_l + 0.01, 0.99)    (narrower when accepting well)

    D0 is kept as a real number and rounded when the depth gate is applied, so small steps
    accumulate instead of being lost. The state can be carried across prompts.
    """

    enabled: bool = True
    window: int = 10
    target_acceptance: float = 0.7
    eta_d: float = 0.05
    eta_h: float = 0.05

    def __post_init__(self) -> None:
        check_int("window", self.window, 1)
        check_open_unit("target_acceptance", self.target_acceptance)
        for name in ("eta_d", "eta_h"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0.0 <= v <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {v}")


@dataclass(frozen=True)
class DynaTreeConfig(DecoderConfig):
    """DynaTree (defaults from the paper).

    Breadth: B(u) ∈ {B_min, B_mid, B_max} = (``b_min``, ``b_mid``, ``b_max``) chosen by c(u)
    against τ_h = ``tau_h`` and τ_l = ``tau_l``. Depth: base D0 = ``d0``, hard D_max = ``d_max``,
    early stop ρ_stop = ``rho_stop``, deep expansion ρ_deep = ``rho_deep``. Pruning τ = ``tau``,
    budget N_max = ``n_max``. History adaptation: ``history`` (W, a*, η_D, η_h).

    ``dynamic_breadth=False`` uses B_mid everywhere and ``dynamic_depth=False`` expands to D0
    exactly (no early stop, no deep expansion): together they give the paper's fixed backbone.
    """

    method: ClassVar[str] = "dynatree"
    d0: int = 5
    d_max: int = 8
    b_min: int = 1
    b_mid: int = 2
    b_max: int = 3
    tau_h: float = 0.9
    tau_l: float = 0.4
    tau: float = 0.05
    n_max: int = 256
    rho_stop: float = 0.1
    rho_deep: float = 0.5
    dynamic_breadth: bool = True
    dynamic_depth: bool = True
    history: HistoryConfig = field(default_factory=HistoryConfig)
    #: cost-aware growth (off: the paper's method): breadth still follows confidence, but a
    #: level keeps nodes, and the tree grows deeper, only while the expected tokens per second of
    #: the iteration rise, from the measured verify-cost curve ``cost`` (see :class:`GrowthRule`);
    #: N_max is then at most the curve's largest size, D0 / ρ_stop / ρ_deep are unused, and the
    #: history window calibrates p(u) per depth
    cost_aware: bool = False
    #: the :class:`~dynatree_core.policy.cost_model.CostModel` the cost-aware rule uses; None: the engine
    #: measures it for the pair and device (cached on disk, :mod:`dynatree_core.engine.calibrate`)
    cost: CostModel | None = None

    def __post_init__(self) -> None:
        self._validate_common()
        check_int("d_max", self.d_max, 2)
        check_int("d0", self.d0, 1)
        if self.d0 >= self.d_max:
            raise ValueError(f"d0 (D0) must be in [1, d_max - 1] = [1, {self.d_max - 1}], got {self.d0}")
        for name in ("b_min", "b_mid", "b_max"):
            check_int(name, getattr(self, name), 1)
        if not (self.b_min <= self.b_mid <= self.b_max):
            raise ValueError(
                "branching bounds must satisfy 1 <= b_min <= b_mid <= b_max, got "
                f"b_min={self.b_min}, b_mid={self.b_mid}, b_max={self.b_max}")
        check_open_unit("tau_h", self.tau_h)
        check_open_unit("tau_l", self.tau_l)
        if self.tau_l >= self.tau_h:
            raise ValueError(f"tau_l must be < tau_h (0 < tau_l < tau_h < 1), got tau_l={self.tau_l}, tau_h={self.tau_h}")
        check_open_unit("rho_stop", self.rho_stop)
        check_open_unit("rho_deep", self.rho_deep)
        if self.rho_stop >= self.rho_deep:
            raise ValueError(
                f"rho_stop must be < rho_deep (0 < rho_stop < rho_deep < 1), got rho_stop={self.rho_stop}, rho_deep={self.rho_deep}")
        check_unit_closed_open("tau", self.tau)
        check_int("n_max", self.n_max, 1)
        self._resolve_top_k(self.b_max)
        if isinstance(self.history, dict):  # from JSON
            object.__setattr__(self, "history", HistoryConfig(**self.history))
        if not isinstance(self.history, HistoryConfig):
            raise TypeError(f"history must be a HistoryConfig, got {type(self.history).__name__}")
        if not isinstance(self.cost_aware, bool):
            raise TypeError(f"cost_aware must be True or False, got {self.cost_aware!r}")
        if isinstance(self.cost, dict):  # from JSON
            object.__setattr__(self, "cost", CostModel.from_dict(self.cost))
        if self.cost is not None and not isinstance(self.cost, CostModel):
            raise TypeError(f"cost must be a CostModel or None, got {type(self.cost).__name__}")

    @property
    def adaptive(self) -> bool:
        return self.history.enabled

    def growth_rule(self, d0: int | None = None, tau_h: float | None = None,
                    depth_scale: tuple[float, ...] = ()) -> GrowthRule:
        """The rule for one iteration; the history adapter passes its current D0 and τ_h (and,
        cost-aware, its per-depth calibration s_d of p(u))."""
        d0 = self.d0 if d0 is None else d0
        tau_h = self.tau_h if tau_h is None else tau_h
        if self.cost_aware:
            if self.cost is None:
                raise ValueError("cost_aware=True needs a cost model (cost=CostModel(...)); generate() measures "
                                 "one for the pair, or call dynatree_core.engine.calibrate.cost_model(pair)")
            b = (self.b_min, self.b_mid, self.b_max) if self.dynamic_breadth else (self.b_mid,) * 3
            return self._with_tail(GrowthRule(
                d0=self.d_max, d_max=self.d_max, b_min=b[0], b_mid=b[1], b_max=b[2], tau_h=tau_h, tau_l=self.tau_l,
                rho_stop=0.0, rho_deep=0.0, tau=self.tau, n_max=min(self.n_max, self.cost.n_max),
                verify_cost=self.cost.iteration_curve(), draft_cost=self.cost.draft_s, depth_scale=tuple(depth_scale)))
        if self.dynamic_breadth:
            b = (self.b_min, self.b_mid, self.b_max)
        else:
            b = (self.b_mid,) * 3
        if self.dynamic_depth:
            d_max, rho_stop, rho_deep = self.d_max, self.rho_stop, self.rho_deep
        else:
            # Fixed depth: expand everything above D0 (no early stop, no deep expansion).
            d_max, rho_stop, rho_deep = d0, 0.0, 1.0
        return self._with_tail(GrowthRule(d0=d0, d_max=d_max, b_min=b[0], b_mid=b[1], b_max=b[2], tau_h=tau_h,
                                          tau_l=self.tau_l, rho_stop=rho_stop, rho_deep=rho_deep, tau=self.tau,
                                          n_max=self.n_max))

    # --- named variants (configurations, not copies of code) -------------------------------
    @classmethod
    def paper(cls, **overrides: Any) -> "DynaTreeConfig":
        """The paper's defaults (Pythia-2.8B / 70M on a GPU)."""
        return cls(**overrides)

    @classmethod
    def cpu(cls, **overrides: Any) -> "DynaTreeConfig":
        """CPU-sized preset: on a 2-core CPU every extra verified node costs a visible share of a
        target forward, so a small node budget and narrower breadth pay off. Tuned with
        ``scripts/tune_cpu_preset.py`` on WikiText-2 *validation* passages with the default pair
        (2026-11-26, GPU-distilled draft: N_max 3..48 tried, 5-6 best; tau_h 0.6/0.8, d0 3/4 and
        tau_l 0.3/0.5 made no clear difference). With a prompt-lookup tail of 6 tokens below the
        most probable leaf (``lookup_tail``, not in the paper; 2026-11-27, WikiText-2 validation and
        gutenberg-train passages, docs/bench/2026-11-27-lookup-tail): L-bar 3.22 -> 4.27 and
        2.04x -> 2.36x AR; tails of 4 and 8 did as well, tails spread over more leaves worse."""
        base = dict(d0=4, d_max=8, b_min=1, b_mid=2, b_max=2, tau_h=0.8, tau_l=0.3, tau=0.05,
                    n_max=6, rho_stop=0.1, rho_deep=0.5, lookup_tail=6, tail_n_max=6)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def gpu(cls, **overrides: Any) -> "DynaTreeConfig":
        """GPU-sized preset: where the host is launch-bound (a small or mid-size target on a fast
        GPU) a verify forward and a draft level cost the ops they dispatch, whatever the tree's
        width, so wider levels are nearly free and depth is what costs. Chosen with
        ``scripts/tune_gpu_preset.py`` (ops per generated token, counted on this CPU, on WikiText-2
        validation and gutenberg-train passages with the default pair; 2026-11-27): B 2/3/4,
        tau 0.02, N_max 32 dispatched the fewest ops per token, 1.17x fewer than linear at its best
        K and 1.05x fewer than the paper's preset (docs/bench/2026-11-27-gpu-preset). On the H100
        it ran at 1.24x / 1.09x linear's best K (WikiText-2 / PG-19; docs/gpu/2026-11-27b-h100)."""
        base = dict(b_min=2, b_mid=3, b_max=4, tau=0.02, n_max=32)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def ablation(cls, variant: str, **overrides: Any) -> "DynaTreeConfig":
        """The paper's progressive ablation (Table 4).

        ``"fixed_backbone"``: B_mid everywhere, depth D0, no history;
        ``"breadth_depth"``: + Dynamic Breadth & Depth; ``"full"``: + History Adaptation.
        """
        hist = overrides.pop("history", HistoryConfig())
        if variant == "fixed_backbone":
            return cls(dynamic_breadth=False, dynamic_depth=False,
                       history=dataclasses.replace(hist, enabled=False), **overrides)
        if variant == "breadth_depth":
            return cls(history=dataclasses.replace(hist, enabled=False), **overrides)
        if variant == "full":
            return cls(history=dataclasses.replace(hist, enabled=True), **overrides)
        raise ValueError(f"variant must be one of {ABLATION_VARIANTS}, got {variant!r}")


ABLATION_VARIANTS: tuple[str, ...] = ("fixed_backbone", "breadth_depth", "full")

