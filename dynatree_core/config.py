"""Decoder configurations (torch-free).

Every speculative decoder in this package is the *same* loop with a different tree policy.
The configs below therefore all lower to one :class:`GrowthRule` (see :meth:`growth_rule`),
which the torch-free tree builder in :mod:`dynatree_core.tree` executes:

* ``ar``          -> an empty tree (the target verifies only the root: plain greedy decoding)
* ``linear``      -> a chain of K nodes (breadth 1, depth K)
* ``fixed_tree``  -> breadth B everywhere, depth D, pruning tau, budget N_max
* ``dynatree``    -> confidence-dependent breadth, probability-gated depth, pruning, budget,
                     plus the sliding-window history adapter.

Validation lives in ``__post_init__`` and every error names the parameter and its allowed range.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union

from .cost_model import CostModel

KVMode = Literal["gather", "recompute"]
KV_MODES: tuple[str, ...] = ("gather", "recompute")


def _check_open_unit(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number in (0, 1), got {type(value).__name__}")
    if not (0.0 < float(value) < 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {value}")


def _check_unit_closed_open(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number in [0, 1), got {type(value).__name__}")
    if not (0.0 <= float(value) < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {rng}, got {value}")


def _check_kv_mode(kv_mode: str) -> None:
    if kv_mode not in KV_MODES:
        raise ValueError(f"kv_mode must be one of {KV_MODES}, got {kv_mode!r}")


@dataclass(frozen=True)
class GrowthRule:
    """The tree policy every decoder lowers to (torch-free, replayable).

    A node ``u`` with depth ``d(u)`` and cumulative draft probability ``p(u)`` is *expanded*
    (fed to the draft to get its children) iff::

        d(u) < d_max  and  p(u) >= rho_stop  and  (d(u) < d0  or  p(u) >= rho_deep)

    It then gets ``B(u)`` children, the top-B(u) tokens of the draft distribution q(.|u):
    ``b_min`` if c(u) >= tau_h, ``b_max`` if c(u) < tau_l, else ``b_mid`` (c(u) = max q(.|u)).
    A child whose p falls below ``tau`` is pruned (never verified), and at most ``n_max``
    nodes are verified (the root, the last committed token, is not counted).

    Other published policies are the same loop with one more field set (all off by default):

    * ``shape`` (Sequoia): a static tree. Node i of the BFS order gets ``shape[i]`` children, the
      draft's top ranks 0..shape[i]-1, whatever the draft's confidence; a node past the shape or
      with 0 is not expanded (stop reason ``"static"``).
    * ``expand_top`` (EAGLE-2): of each level's nodes that may be expanded, only the
      ``expand_top`` most probable by p(u) are (ties: BFS order; the others stop with ``"top_k"``).
    * ``rerank`` (EAGLE-2): once grown, only the ``rerank`` most probable drafted nodes are
      verified (ties: BFS order; a parent always outranks its children, so the kept set is a tree).
    * ``lookup_tail`` (this toolkit's extension, any drafting method; off in every paper
      setting): once the draft has grown the tree, prompt lookup continues its leaves, most
      probable first, with the ``lookup_tail`` tokens that followed the latest earlier occurrence
      (in the committed text) of the longest n-gram of at least two tokens ending the leaf's
      context, until ``tail_n_max`` such nodes are placed. A span token scores log(C / (C + 1))
      for an n-gram seen C times. Tail nodes cost no draft forward, only verified tokens, and
      stop with ``"lookup_tail"``; D_max, ρ, τ and N_max bound the drafted tree only. A small
      target's greedy output repeats itself, and the tail follows it past the draft's depth.
    * ``verify_cost`` (cost-aware DynaTree): c(n), the seconds an iteration spends verifying n
      tokens (root included; the fixed per-iteration cost folded in), with ``draft_cost`` the
      seconds of one draft level and ``depth_scale[d]`` the calibration s_d of p(u) at depth d
      (index past the end: the last value; empty: 1). With v(u) = min(1, s_d(u) p(u)) the
      expected committed tokens are E = 1 + Σ v(u) and the iteration's time
      T = (draft levels) draft_cost + ĉ(n + 1), where ĉ(m) = min over m' >= m of c(m') (a
      measured curve need not be monotone: while growing, a size that costs more than a larger
      one is planned at the larger one's cost, which later levels can reach). Each level keeps
      the prefix of its candidates (most probable first) that maximises E / T, and a node is
      expanded only if a child as likely as itself could still raise E / T (stop reason
      ``"cost"``); the depth gate (D0, ρ_stop, ρ_deep) is then unused, breadth still follows
      confidence, and N_max is at most the curve's last size.
    """

    d0: int
    d_max: int
    b_min: int
    b_mid: int
    b_max: int
    tau_h: float
    tau_l: float
    rho_stop: float
    rho_deep: float
    tau: float
    n_max: int
    expand_top: int = 0
    rerank: int = 0
    shape: tuple[int, ...] = ()
    verify_cost: tuple[float, ...] = ()
    draft_cost: float = 0.0
    depth_scale: tuple[float, ...] = ()
    lookup_tail: int = 0
    tail_n_max: int = 0

    @property
    def cost_aware(self) -> bool:
        return bool(self.verify_cost)

    @property
    def static_counts(self) -> bool:
        """Whether the rule fixes every level's size: one breadth everywhere, no τ pruning, no
        ρ_stop or depth gate, no cost rule (linear, a fixed tree with τ = 0, EAGLE-2 with τ = 0).
        Which candidates the budget keeps may still depend on the draft; how many never does, so
        the device tree's growth needs no device read per level."""
        return (not self.cost_aware and not self.shape and self.b_min == self.b_mid == self.b_max
                and self.tau == 0 and self.rho_stop == 0 and (self.rho_deep == 0 or self.d0 >= self.d_max))

    def scale(self, depth: int) -> float:
        """s_d, the calibration of p(u) at depth ``depth`` (1 without calibration)."""
        if not self.depth_scale:
            return 1.0
        return self.depth_scale[min(depth, len(self.depth_scale) - 1)]

    def cost(self, n: int) -> float:
        """c(n): seconds of verifying n tokens, root included (inf past the curve)."""
        return self.verify_cost[n - 1] if 1 <= n <= len(self.verify_cost) else math.inf

    def planning_cost(self) -> tuple[float, ...]:
        """ĉ(n) = min over n' >= n of c(n'), n = 1, 2, ...: the cost growth plans with."""
        out, low = [], math.inf
        for c in reversed(self.verify_cost):
            low = min(low, c)
            out.append(low)
        return tuple(reversed(out))

    def branching(self, confidence: float, node: int | None = None) -> int:
        """B(u) from draft confidence c(u) (paper: Dynamic Tree Breadth), or the static shape's
        branching of BFS node ``node`` (Sequoia)."""
        if self.shape:
            return self.shape[node] if node is not None and node < len(self.shape) else 0
        if confidence >= self.tau_h:
            return self.b_min
        if confidence < self.tau_l:
            return self.b_max
        return self.b_mid

    def stop_reason(self, depth: int, cum_prob: float) -> str | None:
        """Why a node is *not* expanded, or None if it is (paper: Dynamic Tree Depth).

        Reasons: ``"d_max"`` (hard depth limit), ``"rho_stop"`` (early stopping),
        ``"depth_gate"`` (past D0 without p(u) >= rho_deep).
        """
        if depth >= self.d_max:
            return "d_max"
        if self.cost_aware:  # the cost criterion replaces the depth gate (it needs the tree: grow_tree)
            return None
        if cum_prob < self.rho_stop:
            return "rho_stop"
        if depth >= self.d0 and cum_prob < self.rho_deep:
            return "depth_gate"
        return None

    @property
    def max_breadth(self) -> int:
        if self.shape:
            return max(max(self.shape), 1)
        return max(self.b_min, self.b_mid, self.b_max)

    # --- the baselines' rules, by name (their breadth never depends on confidence, so the
    # thresholds are set to a placeholder that no comparison can make matter) ------------------
    @classmethod
    def empty(cls) -> "GrowthRule":
        """No drafted node: the target verifies only the root (AR, one greedy step)."""
        return cls(d0=1, d_max=0, b_min=1, b_mid=1, b_max=1, tau_h=_UNUSED, tau_l=_UNUSED,
                   rho_stop=0.0, rho_deep=0.0, tau=0.0, n_max=0)

    @classmethod
    def chain(cls, k: int) -> "GrowthRule":
        """A chain of ``k`` draft tokens (linear speculative decoding, paper: K)."""
        return cls(d0=k, d_max=k, b_min=1, b_mid=1, b_max=1, tau_h=_UNUSED, tau_l=_UNUSED,
                   rho_stop=0.0, rho_deep=0.0, tau=0.0, n_max=k)

    @classmethod
    def full(cls, d: int, b: int, tau: float, n_max: int) -> "GrowthRule":
        """Breadth ``b`` everywhere to depth ``d``, pruned by ``tau``, at most ``n_max`` nodes (fixed tree)."""
        return cls(d0=d, d_max=d, b_min=b, b_mid=b, b_max=b, tau_h=_UNUSED, tau_l=_UNUSED,
                   rho_stop=0.0, rho_deep=0.0, tau=tau, n_max=n_max)


#: the confidence thresholds of rules with one breadth everywhere (never decisive there)
_UNUSED = 0.5
#: draft candidates recorded per expanded node unless a config asks otherwise (at least B_max)
DEFAULT_TRACE_TOP_K = 8


#: each GrowthRule field with its paper symbol and meaning: the one source for CLI help and docs
PARAMETER_HELP: dict[str, str] = {
    "d0": "D0, base depth: past it a node is expanded only if p(u) >= rho_deep",
    "d_max": "D_max, hard depth limit",
    "b_min": "B_min, children of a confident node (c(u) >= tau_h)",
    "b_mid": "B_mid, children of a node with tau_l <= c(u) < tau_h",
    "b_max": "B_max, children of an unsure node (c(u) < tau_l)",
    "tau_h": "tau_h (τ_h), high-confidence threshold, in (tau_l, 1)",
    "tau_l": "tau_l (τ_ℓ), low-confidence threshold, in (0, tau_h)",
    "rho_stop": "rho_stop (ρ_stop), no expansion below this path probability",
    "rho_deep": "rho_deep (ρ_deep), path probability needed to go past D0",
    "tau": "tau (τ), children below this path probability are pruned",
    "n_max": "N_max, node budget (verified nodes per iteration, root excluded)",
    "lookup_tail": "prompt-lookup tail: tokens lookup copies below a drafted leaf (0: off; not in the paper)",
    "tail_n_max": "most prompt-lookup tail nodes per iteration, most probable leaves first",
}


@dataclass(frozen=True)
class DecoderConfig:
    """Fields shared by every decoder."""

    method: ClassVar[str] = ""
    #: how the target KV cache is brought back to the committed prefix:
    #: ``"gather"`` keeps the accepted path's entries (no extra forward), ``"recompute"`` is the
    #: paper's crop-to-prefix-then-re-run (one extra target forward per iteration).
    kv_mode: KVMode = "gather"
    #: how many draft candidates per expanded node are recorded in traces (k >= B_max); None (the
    #: default) means max(DEFAULT_TRACE_TOP_K, the rule's largest breadth), kept up to date by replace()
    trace_top_k: int | None = None
    #: prompt-lookup tail (not in the paper; off by default): up to ``lookup_tail`` tokens that
    #: prompt lookup copies below the drafted tree's most probable leaves, ``tail_n_max`` in all
    #: (see :class:`GrowthRule`); verified with the tree, they cost no draft forward
    lookup_tail: int = 0
    tail_n_max: int = 6

    def growth_rule(self) -> GrowthRule:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def adaptive(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["method"] = self.method
        return d

    def replace(self, **changes: Any) -> "DecoderConfig":
        if "trace_top_k" not in changes and getattr(self, "_auto_top_k", False):
            changes["trace_top_k"] = None  # re-derive it for the new breadth
        return dataclasses.replace(self, **changes)

    def _validate_common(self) -> None:
        _check_kv_mode(self.kv_mode)
        _check_int("lookup_tail", self.lookup_tail, 0)
        _check_int("tail_n_max", self.tail_n_max, 1)
        if self.lookup_tail and self.method == "ar":
            raise ValueError("lookup_tail must be 0 for method 'ar' (it drafts nothing to put a tail under)")

    def _with_tail(self, rule: GrowthRule) -> GrowthRule:
        """``rule`` with this config's lookup tail (none: ``rule`` itself): every ``growth_rule``
        returns through it, so whoever builds a tree from a config gets the tail."""
        if not self.lookup_tail:
            return rule
        return dataclasses.replace(rule, lookup_tail=self.lookup_tail, tail_n_max=self.tail_n_max)

    def _resolve_top_k(self, breadth: int) -> None:
        """Fill in the default ``trace_top_k``, or check an explicit one covers ``breadth``."""
        object.__setattr__(self, "_auto_top_k", self.trace_top_k is None)
        if self.trace_top_k is None:
            object.__setattr__(self, "trace_top_k", max(DEFAULT_TRACE_TOP_K, breadth))
            return
        _check_int("trace_top_k", self.trace_top_k, 1)
        if self.trace_top_k < breadth:
            raise ValueError(f"trace_top_k must be >= the largest breadth ({breadth}), got {self.trace_top_k}")


@dataclass(frozen=True)
class ARConfig(DecoderConfig):
    """Autoregressive greedy decoding with a KV cache (the baseline)."""

    method: ClassVar[str] = "ar"

    def __post_init__(self) -> None:
        self._validate_common()
        self._resolve_top_k(1)

    def growth_rule(self) -> GrowthRule:
        return GrowthRule.empty()


@dataclass(frozen=True)
class LinearConfig(DecoderConfig):
    """Linear speculative decoding: draft a chain of ``k`` tokens (paper: K)."""

    method: ClassVar[str] = "linear"
    k: int = 5

    def __post_init__(self) -> None:
        self._validate_common()
        _check_int("k", self.k, 1)
        self._resolve_top_k(1)

    def growth_rule(self) -> GrowthRule:
        return self._with_tail(GrowthRule.chain(self.k))


@dataclass(frozen=True)
class FixedTreeConfig(DecoderConfig):
    """Static tree: depth ``d`` (D), branching ``b`` (B), pruning ``tau`` (τ), budget ``n_max`` (N_max)."""

    method: ClassVar[str] = "fixed_tree"
    d: int = 5
    b: int = 2
    tau: float = 0.05
    n_max: int = 256

    def __post_init__(self) -> None:
        self._validate_common()
        _check_int("d", self.d, 1)
        _check_int("b", self.b, 1)
        _check_unit_closed_open("tau", self.tau)
        _check_int("n_max", self.n_max, 1)
        self._resolve_top_k(self.b)

    def growth_rule(self) -> GrowthRule:
        return self._with_tail(GrowthRule.full(self.d, self.b, self.tau, self.n_max))


#: each FixedTreeConfig field with its paper symbol (CLI help)
FIXED_TREE_HELP: dict[str, str] = {"d": "depth D", "b": "branching B (children of every node)",
                                   "tau": "pruning threshold tau (τ)", "n_max": "node budget N_max"}


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
        _check_int("window", self.window, 1)
        _check_open_unit("target_acceptance", self.target_acceptance)
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
    #: the :class:`~dynatree_core.cost_model.CostModel` the cost-aware rule uses; None: the engine
    #: measures it for the pair and device (cached on disk, :mod:`dynatree_core.calibrate`)
    cost: CostModel | None = None

    def __post_init__(self) -> None:
        self._validate_common()
        _check_int("d_max", self.d_max, 2)
        _check_int("d0", self.d0, 1)
        if self.d0 >= self.d_max:
            raise ValueError(f"d0 (D0) must be in [1, d_max - 1] = [1, {self.d_max - 1}], got {self.d0}")
        for name in ("b_min", "b_mid", "b_max"):
            _check_int(name, getattr(self, name), 1)
        if not (self.b_min <= self.b_mid <= self.b_max):
            raise ValueError(
                "branching bounds must satisfy 1 <= b_min <= b_mid <= b_max, got "
                f"b_min={self.b_min}, b_mid={self.b_mid}, b_max={self.b_max}")
        _check_open_unit("tau_h", self.tau_h)
        _check_open_unit("tau_l", self.tau_l)
        if self.tau_l >= self.tau_h:
            raise ValueError(f"tau_l must be < tau_h (0 < tau_l < tau_h < 1), got tau_l={self.tau_l}, tau_h={self.tau_h}")
        _check_open_unit("rho_stop", self.rho_stop)
        _check_open_unit("rho_deep", self.rho_deep)
        if self.rho_stop >= self.rho_deep:
            raise ValueError(
                f"rho_stop must be < rho_deep (0 < rho_stop < rho_deep < 1), got rho_stop={self.rho_stop}, rho_deep={self.rho_deep}")
        _check_unit_closed_open("tau", self.tau)
        _check_int("n_max", self.n_max, 1)
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
                                 "one for the pair, or call dynatree_core.calibrate.cost_model(pair)")
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


@dataclass(frozen=True)
class Eagle2Config(DecoderConfig):
    """EAGLE-2's dynamic tree (Li et al. 2024), on any drafter.

    Each level expands the ``k`` most probable nodes (by global path probability p(u)) with their
    top-``k`` draft tokens, for ``depth`` levels; then only the ``n_total`` most probable drafted
    nodes are verified (the reranking step). Defaults are EAGLE-2's (top_k 10, depth 6, 60 tokens).
    """

    method: ClassVar[str] = "eagle2"
    k: int = 10
    depth: int = 6
    n_total: int = 60

    def __post_init__(self) -> None:
        self._validate_common()
        _check_int("k", self.k, 1)
        _check_int("depth", self.depth, 1)
        _check_int("n_total", self.n_total, 1, self.drafted_nodes)
        self._resolve_top_k(self.k)

    @property
    def drafted_nodes(self) -> int:
        """Nodes drafted before the rerank: k at depth 1, then k * k per level."""
        return self.k + (self.depth - 1) * self.k * self.k

    def growth_rule(self) -> GrowthRule:
        k = self.k
        return self._with_tail(GrowthRule(
            d0=self.depth, d_max=self.depth, b_min=k, b_mid=k, b_max=k, tau_h=_UNUSED, tau_l=_UNUSED, rho_stop=0.0,
            rho_deep=0.0, tau=0.0, n_max=self.drafted_nodes, expand_top=k, rerank=self.n_total))


#: each Eagle2Config field with its meaning (CLI help)
EAGLE2_HELP: dict[str, str] = {"k": "top-k: nodes expanded per level and children per node",
                               "depth": "draft levels", "n_total": "nodes verified after the rerank"}


@dataclass(frozen=True)
class SequoiaConfig(DecoderConfig):
    """Sequoia's static tree (Chen et al. 2024): the tree of ``n_max`` nodes and depth at most
    ``d_max`` that maximises the expected accepted length under the draft's per-rank acceptance
    vector ``acceptance`` (acceptance[r] = P(the target's token is the draft's rank-r token)),
    built by Sequoia's dynamic program (:mod:`dynatree_core.sequoia`). ``acceptance=None``: the
    engine measures it for the pair (:func:`dynatree_core.calibrate.acceptance_vector`)."""

    method: ClassVar[str] = "sequoia"
    n_max: int = 16
    d_max: int = 8
    acceptance: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        self._validate_common()
        _check_int("n_max", self.n_max, 1)
        _check_int("d_max", self.d_max, 1)
        if self.acceptance is not None:
            acc = tuple(float(a) for a in self.acceptance)
            if not acc or any(not (0.0 <= a <= 1.0) for a in acc) or sum(acc) > 1.0 + 1e-9:
                raise ValueError("acceptance must be a non-empty list of probabilities in [0, 1] summing to "
                                 f"at most 1 (the draft's ranks are disjoint events), got {list(acc)}")
            object.__setattr__(self, "acceptance", acc)
        self._resolve_top_k(len(self.acceptance) if self.acceptance else 1)

    def shape(self) -> tuple[int, ...]:
        if self.acceptance is None:
            raise ValueError("SequoiaConfig.acceptance is None: generate() measures it for the pair, or call "
                             "dynatree_core.calibrate.acceptance_vector(pair)")
        from .sequoia import max_nodes, sequoia_shape  # torch-free

        # a short vector and a shallow limit can hold fewer than n_max nodes: the largest tree that fits
        return sequoia_shape(self.acceptance, min(self.n_max, max_nodes(len(self.acceptance), self.d_max)),
                             self.d_max)

    def growth_rule(self) -> GrowthRule:
        shape = self.shape()
        return self._with_tail(GrowthRule(
            d0=self.d_max, d_max=self.d_max, b_min=1, b_mid=1, b_max=1, tau_h=_UNUSED, tau_l=_UNUSED, rho_stop=0.0,
            rho_deep=0.0, tau=0.0, n_max=self.n_max, shape=shape))


#: each SequoiaConfig field set from the CLI (the acceptance vector is measured for the pair)
SEQUOIA_HELP: dict[str, str] = {"n_max": "node budget of the static tree", "d_max": "its depth limit"}

AnyConfig = Union[ARConfig, LinearConfig, FixedTreeConfig, DynaTreeConfig, Eagle2Config, SequoiaConfig]

CONFIG_CLASSES: dict[str, type[DecoderConfig]] = {
    "ar": ARConfig,
    "linear": LinearConfig,
    "fixed_tree": FixedTreeConfig,
    "dynatree": DynaTreeConfig,
    "eagle2": Eagle2Config,
    "sequoia": SequoiaConfig,
}
METHODS: tuple[str, ...] = tuple(CONFIG_CLASSES)


def check_method(method: str) -> str:
    if method not in CONFIG_CLASSES:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


def default_config(method: str) -> DecoderConfig:
    return CONFIG_CLASSES[check_method(method)]()


def config_from_dict(d: dict[str, Any]) -> DecoderConfig:
    """Inverse of :meth:`DecoderConfig.to_dict` (used by trace and benchmark JSON)."""
    d = dict(d)
    method = check_method(d.pop("method"))
    if method == "dynatree" and isinstance(d.get("history"), dict):
        d["history"] = HistoryConfig(**d["history"])
    if method == "sequoia" and d.get("acceptance") is not None:
        d["acceptance"] = tuple(d["acceptance"])
    return CONFIG_CLASSES[method](**d)


def resolve_config(method: str, config: DecoderConfig | None) -> DecoderConfig:
    """The config to run ``method`` with; a mismatching config type is an error."""
    check_method(method)
    if config is None:
        return default_config(method)
    expected = CONFIG_CLASSES[method]
    if not isinstance(config, expected):
        raise TypeError(f"config for method={method!r} must be a {expected.__name__}, got {type(config).__name__}")
    return config

