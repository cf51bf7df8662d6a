"""The growth rule: the one tree policy every decoder lowers to (torch-free).

:class:`GrowthRule` holds the paper's parameters (D0, D_max, B_min/B_mid/B_max, τ_h, τ_ℓ,
ρ_stop, ρ_deep, τ, N_max) and the fields that give the other published policies (Sequoia's
static shape, EAGLE-2's expand-top-k and rerank, the cost-aware rule, the prompt-lookup tail).
:func:`dynatree_core.policy.growth.grow_tree` executes it (the reference) and
:class:`dynatree_core.runtime.tree.tree.DeviceTree` executes the same rule on tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynatree_core.policy.knobs import parameter_help

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
        return cls(d0=1, d_max=0, b_min=1, b_mid=1, b_max=1, tau_h=UNUSED, tau_l=UNUSED,
                   rho_stop=0.0, rho_deep=0.0, tau=0.0, n_max=0)

    @classmethod
    def chain(cls, k: int) -> "GrowthRule":
        """A chain of ``k`` draft tokens (linear speculative decoding, paper: K)."""
        return cls(d0=k, d_max=k, b_min=1, b_mid=1, b_max=1, tau_h=UNUSED, tau_l=UNUSED,
                   rho_stop=0.0, rho_deep=0.0, tau=0.0, n_max=k)

    @classmethod
    def full(cls, d: int, b: int, tau: float, n_max: int) -> "GrowthRule":
        """Breadth ``b`` everywhere to depth ``d``, pruned by ``tau``, at most ``n_max`` nodes (fixed tree)."""
        return cls(d0=d, d_max=d, b_min=b, b_mid=b, b_max=b, tau_h=UNUSED, tau_l=UNUSED,
                   rho_stop=0.0, rho_deep=0.0, tau=tau, n_max=n_max)


#: the confidence thresholds of rules with one breadth everywhere (never decisive there)
UNUSED = 0.5
#: draft candidates recorded per expanded node unless a config asks otherwise (at least B_max)
DEFAULT_TRACE_TOP_K = 8


#: each GrowthRule field with its paper symbol and meaning: the knob table's help (the one source for
#: CLI help, docs, the explorer and the offline page)
PARAMETER_HELP: dict[str, str] = parameter_help()
