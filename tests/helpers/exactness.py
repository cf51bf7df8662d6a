"""Shared by the exactness properties of every runtime and drafter: architectures, attention kernels, edge
configs, method configs and prompt strategies."""

from __future__ import annotations

from hypothesis import strategies as st
from dynatree_core.policy.config import (ARConfig, DynaTreeConfig, Eagle2Config, FixedTreeConfig, HistoryConfig,
                                  LinearConfig, SequoiaConfig)
from dynatree_core.policy.cost_model import CostModel
from dynatree_core.pairs.tiny import VOCAB_SIZE


ARCHS = ("llama", "gpt_neox")


ATTNS = ("eager", "sdpa")


KV = st.sampled_from(["gather", "recompute"])


prompts = st.lists(st.integers(2, VOCAB_SIZE - 1), min_size=1, max_size=12).map(tuple)


@st.composite
def dynatree_configs(draw):
    d_max = draw(st.integers(2, 8))
    b = sorted(draw(st.lists(st.integers(1, 4), min_size=3, max_size=3)))
    tau_l = draw(st.floats(0.02, 0.9))
    tau_h = draw(st.floats(tau_l + 0.01, 0.99))
    rho_stop = draw(st.floats(0.001, 0.5))
    rho_deep = draw(st.floats(rho_stop + 0.01, 0.99))
    return DynaTreeConfig(
        d0=draw(st.integers(1, d_max - 1)), d_max=d_max, b_min=b[0], b_mid=b[1], b_max=b[2],
        tau_h=tau_h, tau_l=tau_l, rho_stop=rho_stop, rho_deep=rho_deep,
        tau=draw(st.sampled_from([0.0, 0.001, 0.05, 0.3])), n_max=draw(st.integers(1, 64)),
        dynamic_breadth=draw(st.booleans()), dynamic_depth=draw(st.booleans()),
        history=HistoryConfig(enabled=draw(st.booleans()), window=draw(st.integers(1, 10)),
                              target_acceptance=draw(st.floats(0.05, 0.95)),
                              eta_d=draw(st.floats(0, 1)), eta_h=draw(st.floats(0, 1))),
        kv_mode=draw(KV))


@st.composite
def cost_aware_configs(draw):
    """Cost-aware DynaTree with a random measured-looking curve (flat stretches, steps)."""
    steps = draw(st.lists(st.sampled_from([0.0, 0.001, 0.004, 0.02]), min_size=1, max_size=24))
    curve = [0.047 + sum(steps[:i + 1]) for i in range(len(steps))]
    cfg = draw(dynatree_configs())
    return cfg.replace(cost_aware=True, cost=CostModel(verify_s=tuple(curve),
                                                       draft_s=draw(st.sampled_from([0.0, 0.002, 0.01]))))


@st.composite
def eagle2_configs(draw):
    k, depth = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    drafted = k + (depth - 1) * k * k
    return Eagle2Config(k=k, depth=depth, n_total=draw(st.integers(1, drafted)), kv_mode=draw(KV))


@st.composite
def sequoia_configs(draw):
    raw = draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4))
    total = max(1.0, sum(raw) / draw(st.floats(0.3, 1.0)))
    return SequoiaConfig(n_max=draw(st.integers(1, 24)), d_max=draw(st.integers(1, 8)),
                         acceptance=tuple(a / total for a in raw), kv_mode=draw(KV))


method_configs = st.one_of(
    st.builds(ARConfig, kv_mode=KV).map(lambda c: ("ar", c)),
    st.builds(LinearConfig, k=st.integers(1, 8), kv_mode=KV).map(lambda c: ("linear", c)),
    st.builds(FixedTreeConfig, d=st.integers(1, 6), b=st.integers(1, 4),
              tau=st.sampled_from([0.0, 0.01, 0.1]), n_max=st.integers(1, 48),
              kv_mode=KV).map(lambda c: ("fixed_tree", c)),
    dynatree_configs().map(lambda c: ("dynatree", c)),
    cost_aware_configs().map(lambda c: ("dynatree", c)),
    eagle2_configs().map(lambda c: ("eagle2", c)),
    sequoia_configs().map(lambda c: ("sequoia", c)),
)


#: the draft noise (cached_pair) at which each tiny target's draft differs from it enough that every edge
#: config below has drafted tokens rejected, and little enough that it has some accepted (the tiny GPT-NeoX
#: accepts a 0.02 draft almost always)
DIFFERING_NOISE = {"llama": 0.02, "gpt_neox": 0.05}


#: budgets of 1, depth 1, the shallowest DynaTree, a wide recompute tree (shared with other drafters' tests)
EDGE_CONFIGS = [
    ("linear", LinearConfig(k=1)),
    ("fixed_tree", FixedTreeConfig(d=1, b=3, n_max=1)),
    ("fixed_tree", FixedTreeConfig(d=6, b=3, tau=0.0, n_max=1)),
    ("dynatree", DynaTreeConfig(n_max=1)),
    ("dynatree", DynaTreeConfig(d0=1, d_max=2, b_min=3, b_mid=3, b_max=3, rho_stop=0.001, rho_deep=0.002)),
    ("dynatree", DynaTreeConfig(kv_mode="recompute", tau=0.0, n_max=200, b_min=2, b_mid=3, b_max=4)),
    # cost-aware with a flat curve (big trees pay), a budget of 1, EAGLE-2's rerank down to 1 and 3 nodes,
    # Sequoia with a certain rank 0 (a chain) and a spread vector
    ("dynatree", DynaTreeConfig(cost_aware=True, cost=CostModel(verify_s=(0.05,) * 24, draft_s=0.0),
                                b_min=2, b_mid=3, b_max=4)),
    ("dynatree", DynaTreeConfig(cost_aware=True, cost=CostModel(verify_s=(0.05, 0.05), draft_s=0.0))),
    ("eagle2", Eagle2Config(k=3, depth=4, n_total=1)),
    ("eagle2", Eagle2Config(k=4, depth=3, n_total=3, kv_mode="recompute")),
    ("sequoia", SequoiaConfig(n_max=6, d_max=6, acceptance=(1.0,))),
    ("sequoia", SequoiaConfig(n_max=12, d_max=4, acceptance=(0.5, 0.2, 0.1))),
]
