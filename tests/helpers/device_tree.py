"""The device tree against the reference: a deterministic fake drafter, every growth rule, target choices."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st
from dynatree_core.policy.config import GrowthRule
from dynatree_core.drafters import Proposal
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.policy.tree import DraftTree


VOCAB = 12


MOD = 1_000_003


def _dist(key: int, k: int, ties: bool) -> tuple[list[int], np.ndarray]:
    """The fake draft's top-k after a node with path key ``key``: sorted ids and float32 log-probs."""
    rs = np.random.RandomState(key % (2 ** 31))
    logits = rs.randn(VOCAB) * rs.choice([0.3, 1.5, 4.0])
    if ties:  # equal log-probs exercise the budget's tie-breaking (parent, then rank)
        logits = np.round(logits * 2) / 2
    lp = (logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()).astype(np.float32)
    order = np.argsort(-lp, kind="stable")[:k]
    return order.tolist(), lp[order]


class FakeDrafter:
    """Answers both protocols: ``host_propose`` for grow_tree, ``propose`` for DeviceTree.grow."""

    def __init__(self, k: int, ties: bool):
        self.k, self.ties, self.top_k = k, ties, k
        self.keys: torch.Tensor | None = None

    def host_propose(self, tree: DraftTree, ids: list[int]):
        out = []
        for i in ids:
            key = 0
            for t in tree.token_path(i):
                key = (key * 31 + t) % MOD
            toks, lps = _dist(key, self.k, self.ties)
            out.append((toks, [float(x) for x in lps]))
        return out

    def lend_level(self, tree: DeviceTree, level: int):
        return None  # a host-side fake: every level is proposed

    def propose(self, tree: DeviceTree, ids: torch.Tensor, level: int):
        if level == 0:
            self.keys = torch.zeros(tree.capacity, dtype=torch.long)
            self.keys[0] = tree.tokens[0] % MOD
        else:
            self.keys[ids] = (self.keys[tree.parents[ids]] * 31 + tree.tokens[ids]) % MOD
        rows = [_dist(int(key), self.k, self.ties) for key in self.keys[ids].tolist()]
        return Proposal(torch.tensor([r[0] for r in rows], dtype=torch.long),
                        torch.tensor(np.stack([r[1] for r in rows]), dtype=torch.float32))


rules = st.builds(
    lambda d0, extra, b, th, tl, rs, rd, tau, n: GrowthRule(
        d0=d0, d_max=d0 + extra, b_min=b[0], b_mid=b[1], b_max=b[2], tau_h=max(th, tl + 0.01), tau_l=tl,
        rho_stop=rs, rho_deep=rd, tau=tau, n_max=n),
    d0=st.integers(0, 4), extra=st.integers(0, 3),
    b=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    th=st.floats(0.05, 0.95), tl=st.floats(0.01, 0.8),
    rs=st.sampled_from([0.0, 0.001, 0.05, 0.2]), rd=st.sampled_from([0.0, 0.01, 0.1, 0.5]),
    tau=st.sampled_from([0.0, 0.001, 0.02, 0.1]), n=st.integers(0, 24))


#: Sequoia's static shapes (branching by BFS index), possibly shorter than the tree they allow
shape_rules = st.builds(
    lambda shape, d_max, tau, n: GrowthRule(
        d0=d_max, d_max=d_max, b_min=1, b_mid=1, b_max=1, tau_h=0.5, tau_l=0.5, rho_stop=0.0, rho_deep=0.0,
        tau=tau, n_max=n, shape=tuple(shape)),
    shape=st.lists(st.integers(0, 3), min_size=1, max_size=14), d_max=st.integers(1, 5),
    tau=st.sampled_from([0.0, 0.02]), n=st.integers(0, 24))


#: EAGLE-2: top-k expansion by global path probability, then a rerank to the top-N nodes
eagle_rules = st.builds(
    lambda k, depth, keep, tau: GrowthRule(
        d0=depth, d_max=depth, b_min=k, b_mid=k, b_max=k, tau_h=0.5, tau_l=0.5, rho_stop=0.0, rho_deep=0.0,
        tau=tau, n_max=k + (depth - 1) * k * k, expand_top=k, rerank=keep),
    k=st.integers(1, 4), depth=st.integers(1, 4), keep=st.integers(0, 20), tau=st.sampled_from([0.0, 0.01]))


#: cost-aware: a measured curve (flat stretches and noise included), a draft level cost, s_d
cost_rules = st.builds(
    lambda curve, draft, scale, b, th, tl, d_max, tau: GrowthRule(
        d0=d_max, d_max=d_max, b_min=b[0], b_mid=b[1], b_max=b[2], tau_h=max(th, tl + 0.01), tau_l=tl,
        rho_stop=0.0, rho_deep=0.0, tau=tau, n_max=len(curve) - 1, verify_cost=tuple(curve), draft_cost=draft,
        depth_scale=tuple(scale)),
    # steps down too: a measured curve need not be monotone (planning then uses its suffix minimum
    # and the final fill pays the real one)
    curve=st.lists(st.sampled_from([-0.02, -0.003, 0.0, 0.0, 0.001, 0.003, 0.014, 0.05]), min_size=1, max_size=20)
    .map(lambda steps: [max(0.005, 0.047 + sum(steps[:i + 1])) for i in range(len(steps))]),
    draft=st.sampled_from([0.0, 0.001, 0.004, 0.03]),
    scale=st.lists(st.floats(0.2, 8.0), min_size=0, max_size=5),
    b=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    th=st.floats(0.05, 0.95), tl=st.floats(0.01, 0.8), d_max=st.integers(1, 6),
    tau=st.sampled_from([0.0, 0.001, 0.05]))


#: the baselines' rules (one breadth everywhere): with τ = 0 their level sizes are static, with
#: τ > 0 they take the general path
uniform_rules = st.one_of(
    st.builds(GrowthRule.chain, st.integers(1, 6)),
    st.builds(lambda d, b, tau, n: GrowthRule.full(d, b, tau, n), st.integers(1, 4), st.integers(1, 4),
              st.sampled_from([0.0, 0.0, 0.02]), st.integers(0, 24)))


all_rules = st.one_of(rules, shape_rules, eagle_rules, cost_rules, uniform_rules)


def draw_target_choices(ref: DraftTree, data) -> list[int]:
    """The target's choice after each node of ``ref``: mostly a child's token (long accepted
    paths), sometimes anything."""
    argmax = []
    for i in range(len(ref)):
        kids = ref.children(i)
        pick = data.draw(st.sampled_from([ref.tokens[j] for j in kids])) if kids and data.draw(st.booleans()) \
            else data.draw(st.integers(0, VOCAB - 1))
        argmax.append(pick)
    return argmax
