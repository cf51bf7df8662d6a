"""The baseline decoders' configs (torch-free): AR, linear speculative, fixed tree, EAGLE-2, Sequoia.

Every config lowers to one :class:`~dynatree_core.policy.growth_rule.GrowthRule` (:meth:`growth_rule`);
:class:`DecoderConfig` holds what all of them share (KV restore mode, recorded top-k, the
prompt-lookup tail). DynaTree's own config is :mod:`dynatree_core.policy.dynatree_config`; the
registry by method name is :mod:`dynatree_core.policy.config`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from dynatree_core.policy.checks import check_int, check_unit_closed_open
from dynatree_core.policy.growth_rule import DEFAULT_TRACE_TOP_K, UNUSED, GrowthRule

KVMode = Literal["gather", "recompute"]
KV_MODES: tuple[str, ...] = ("gather", "recompute")


def _check_kv_mode(kv_mode: str) -> None:
    if kv_mode not in KV_MODES:
        raise ValueError(f"kv_mode must be one of {KV_MODES}, got {kv_mode!r}")



@dataclass(frozen=True)
class DecoderConfig:
    """Fields shared by every decoder."""

    method: ClassVar[str] = ""
    #: whether the decoder drafts at all (AR does not: no draft model, no draft forwards); the loop
    #: reads this, never the method's name
    drafts: ClassVar[bool] = True
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
        check_int("lookup_tail", self.lookup_tail, 0)
        check_int("tail_n_max", self.tail_n_max, 1)
        if self.lookup_tail and not self.drafts:
            raise ValueError(f"lookup_tail must be 0 for method {self.method!r} (it drafts nothing to put a tail under)")

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
        check_int("trace_top_k", self.trace_top_k, 1)
        if self.trace_top_k < breadth:
            raise ValueError(f"trace_top_k must be >= the largest breadth ({breadth}), got {self.trace_top_k}")


@dataclass(frozen=True)
class ARConfig(DecoderConfig):
    """Autoregressive greedy decoding with a KV cache (the baseline)."""

    method: ClassVar[str] = "ar"
    drafts: ClassVar[bool] = False

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
        check_int("k", self.k, 1)
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
        for name in ("d", "b", "n_max"):  # D, B, N_max >= 1
            check_int(name, getattr(self, name), 1)
        check_unit_closed_open("tau", self.tau)
        self._resolve_top_k(self.b)

    def growth_rule(self) -> GrowthRule:
        return self._with_tail(GrowthRule.full(self.d, self.b, self.tau, self.n_max))


#: each FixedTreeConfig field with its paper symbol (CLI help)
FIXED_TREE_HELP: dict[str, str] = {"d": "depth D", "b": "branching B (children of every node)",
                                   "tau": "pruning threshold tau (τ)", "n_max": "node budget N_max"}



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
        check_int("k", self.k, 1)
        check_int("depth", self.depth, 1)
        check_int("n_total", self.n_total, 1, self.drafted_nodes)
        self._resolve_top_k(self.k)

    @property
    def drafted_nodes(self) -> int:
        """Nodes drafted before the rerank: k at depth 1, then k * k per level."""
        return self.k + (self.depth - 1) * self.k * self.k

    def growth_rule(self) -> GrowthRule:
        k = self.k
        return self._with_tail(GrowthRule(
            d0=self.depth, d_max=self.depth, b_min=k, b_mid=k, b_max=k, tau_h=UNUSED, tau_l=UNUSED, rho_stop=0.0,
            rho_deep=0.0, tau=0.0, n_max=self.drafted_nodes, expand_top=k, rerank=self.n_total))


#: each Eagle2Config field with its meaning (CLI help)
EAGLE2_HELP: dict[str, str] = {"k": "top-k: nodes expanded per level and children per node",
                               "depth": "draft levels", "n_total": "nodes verified after the rerank"}


@dataclass(frozen=True)
class SequoiaConfig(DecoderConfig):
    """Sequoia's static tree (Chen et al. 2024): the tree of ``n_max`` nodes and depth at most
    ``d_max`` that maximises the expected accepted length under the draft's per-rank acceptance
    vector ``acceptance`` (acceptance[r] = P(the target's token is the draft's rank-r token)),
    built by Sequoia's dynamic program (:mod:`dynatree_core.policy.sequoia`). ``acceptance=None``: the
    engine measures it for the pair (:func:`dynatree_core.engine.calibrate.acceptance_vector`)."""

    method: ClassVar[str] = "sequoia"
    n_max: int = 16
    d_max: int = 8
    acceptance: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        self._validate_common()
        check_int("n_max", self.n_max, 1)
        check_int("d_max", self.d_max, 1)
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
                             "dynatree_core.engine.calibrate.acceptance_vector(pair)")
        from dynatree_core.policy.sequoia import max_nodes, sequoia_shape  # torch-free

        # a short vector and a shallow limit can hold fewer than n_max nodes: the largest tree that fits
        return sequoia_shape(self.acceptance, min(self.n_max, max_nodes(len(self.acceptance), self.d_max)),
                             self.d_max)

    def growth_rule(self) -> GrowthRule:
        shape = self.shape()
        return self._with_tail(GrowthRule(
            d0=self.d_max, d_max=self.d_max, b_min=1, b_mid=1, b_max=1, tau_h=UNUSED, tau_l=UNUSED, rho_stop=0.0,
            rho_deep=0.0, tau=0.0, n_max=self.n_max, shape=shape))


#: each SequoiaConfig field set from the CLI (the acceptance vector is measured for the pair)
SEQUOIA_HELP: dict[str, str] = {"n_max": "node budget of the static tree", "d_max": "its depth limit"}

