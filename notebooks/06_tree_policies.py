# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Tree policies side by side
#
# **What you will learn**
#
# * that every speculative decoder in this project is the same loop with a different **tree
#   policy**, and how six of them differ: linear (a chain of K), DynaTree with the paper's and the
#   CPU preset, **cost-aware DynaTree**, **EAGLE-2** (top-k expansion + rerank) and **Sequoia** (a
#   static tree from a dynamic program);
# * the two calibrations some policies need and the engine measures once per machine and pair: the
#   **verify-cost curve** c(n) (cost-aware DynaTree) and the draft's **per-rank acceptance vector**
#   (Sequoia);
# * why the measured cost curve need not be monotone, and what the cost-aware rule does about it;
# * how to read the new stop reasons (`static`, `top_k`, `rerank`, `cost`) in a tree;
# * the **oracle gap**: how far each policy's accepted length is from the best tree of its own size;
# * **reliability diagrams** of the draft's probabilities per depth, and the per-depth scale s_d the
#   cost-aware rule reads from them.
#
# Every policy below produces exactly the target's greedy tokens (checked); they differ only in
# which tokens they ask the target to verify, and so in speed.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import math
from collections import Counter

import numpy as np
import pandas as pd
from IPython.display import HTML, Markdown, display

import dynatree_viz as dv
from dynatree_core import ARConfig, DynaTreeConfig, LinearConfig, generate

# %% [markdown]
# The model pair is the one notebook 01 opens with (its first section says what the target and the
# draft are); `dv.setup_notebook(PAIR)` loads it and turns on the figures' static fallbacks.

# %% tags=["nbval-ignore-output"]
pair = dv.setup_notebook(PAIR)   # notebook 01's opening says what this pair is

# %% [markdown]
# ## 1 · Calibrate: what does verifying n tokens cost on this machine?
#
# One iteration drafts a tree level by level (one batched draft forward per level) and then verifies
# the root and all n − 1 drafted nodes in **one** target forward. The paper's DynaTree sizes its
# trees with thresholds (D0, ρ, N_max) chosen for a GPU, where that forward costs about the same for
# 2 or 60 tokens. On a CPU it does not, and *how* it grows is a fact about the machine.
# `dynatree_core.engine.calibrate.cost_model(pair)` measures it once per device, pair and dtype (seconds on
# a CPU) and caches it under `~/.cache/dynatree`: c(n), the median time of one verify forward over
# n = 1..32 tokens after a 256-token prefix (the sizes timed round-robin, so that a burst of load
# elsewhere on the machine cannot price one size high), plus the time of one draft level and the loop's own
# overhead per iteration. (`dynatree calibrate` on the command line does the same; pass
# `recalibrate=True` to measure again.)

# %% tags=["nbval-ignore-output"]
from dynatree_core.engine import calibrate

cost = calibrate.cost_model(pair)   # cached: measured the first time for this device and pair
print(calibrate.describe(cost))

# %% tags=["nbval-ignore-output"]
dv.cost_figure(cost)

# %% tags=["nbval-ignore-output"]
kernel = pair.linear_kernel                                          # "onednn" on a CPU
torch_cost = calibrate.cost_model(pair.use_linear_kernel("torch"))  # the same models on torch's kernels ...
pair.use_linear_kernel(kernel)                                      # ... and back
for name, cm in (("torch", torch_cost), (kernel, cost)):
    ratios = ", ".join(f"{cm.verify(n) / cm.verify(1):.2f}" for n in (2, 3, 4, 8, 16))
    print(f"{name:>7}: c(1) = {1e3 * cm.verify(1):.0f} ms, c(n)/c(1) for n = 2, 3, 4, 8, 16: {ratios}; "
          f"one draft level {1e3 * cm.draft_s:.1f} ms")

# %% [markdown]
# The calibration keeps whatever curve it measures, monotone or not — a kernel that is faster for 6
# rows than for 3 is a fact about the machine, not noise — and the cell below reads off what the curve
# measured here says.

# %% [markdown]
# **The curve is a fact about the machine, kernels included.** Most of a small model's verify forward
# on a CPU is its fp32 matrix products. With torch's default kernels (MKL GEMM on the plain weight)
# the library picks a different kernel by shape, so c(n) need not grow with n. The pair here runs its
# linear layers on oneDNN with weights reordered once (`pair.linear_kernel`, the default on a CPU in
# float32; `dynatree_core/runtime/model/linear_kernels.py`), which reads each weight once for all rows. The cell
# above measured the same pair on both kernels; the next one says what those numbers show on this
# machine.

# %% tags=["nbval-ignore-output"]
def curve_facts(name, cm):
    """What cm's measured sizes say about monotonicity: every pair n < m of measured sizes compared."""
    dips = cm.undercut_sizes()
    return (f"**{name}**: c(1) = {1e3 * cm.verify(1):.0f} ms, c(16) = {cm.verify(16) / cm.verify(1):.2f} × c(1); "
            + (f"{len(dips)} of its {len(cm.sizes)} measured sizes (n = {ranges(dips)}) cost more than some "
               f"larger measured size (a dip)" if dips else
               f"c(n) grows with n over all {len(cm.sizes)} measured sizes (no dip)"))


def ranges(ns):
    """[2, 3, 9, 10, 11] -> '2-3, 9-11'."""
    out, start = [], None
    for k, n in enumerate(ns):
        if start is None:
            start = n
        if k + 1 == len(ns) or ns[k + 1] != n + 1:
            out.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


lower = kernel if cost.verify(1) < torch_cost.verify(1) else "torch"
flatter = kernel if cost.verify(16) / cost.verify(1) < torch_cost.verify(16) / torch_cost.verify(1) else "torch"
display(Markdown(f"{curve_facts('torch', torch_cost)}. {curve_facts(kernel, cost)}. Here {lower} is the "
                 f"cheaper kernel for one token and {flatter} the flatter curve (c(16) / c(1))."))

# %% [markdown]
# **What the cost-aware rule does with it** (`GrowthRule` in `dynatree_core/policy/growth_rule.py`,
# `grow_tree` and `_fill` in `dynatree_core/policy/growth.py`). With v(u) = min(1, s_d · p(u)) the calibrated
# chance that node u is accepted, an iteration is expected to commit E = 1 + Σ v(u) tokens in
# T = (draft levels) · t_draft + c(n) seconds, and the rule grows the tree for the largest E / T:
#
# 1. *Growing*, level by level, it keeps the prefix of a level's candidates (most probable first)
#    that maximises E / T, and expands a node only if a child as likely as itself could still raise
#    E / T. While growing it prices a size n with the curve's **suffix minimum**
#    ĉ(n) = min over n' ≥ n of c(n'): a size that costs more than some larger tree is planned at
#    that larger tree's price, since later levels can still get there.
# 2. *Filling*: once growth stops, leftover budget is spent without any draft forward: candidates
#    the draft already proposed but the tree left out (cut by the cost or by τ, or ranks beyond the
#    node's breadth B(u)) are added as leaves, most valuable first, while that raises E / T on the
#    **real** curve c. Where c dips, this fills the tree up to the cheaper, larger size.

# %% tags=["nbval-ignore-output"]
cost_rule = DynaTreeConfig(cost_aware=True, cost=cost).growth_rule()
c = np.array(cost.iteration_curve())        # c(n) + per-iteration overhead: what the rule is given
c_hat = np.array(cost_rule.planning_cost())  # ĉ(n): the suffix minimum growth plans with
sizes = np.arange(1, len(c) + 1)
overpriced = [int(n) for n in sizes if c[n - 1] > c_hat[n - 1] + 1e-12]


if not overpriced:
    print(f"Here c(n) never falls as n grows (n = 1..{len(c)}): ĉ = c, and the fill only adds leaves worth their cost.")
else:
    worst = max(overpriced, key=lambda n: c[n - 1] - c_hat[n - 1])
    cheaper = int(next(m for m in sizes[worst:] if c[m - 1] <= c_hat[worst - 1] + 1e-12))
    print(f"Here c(n) is not monotone: {len(overpriced)} sizes (n = {ranges(overpriced)}) cost more than a larger tree.")
    v_worst, v_cheaper = cost.verify(worst), cost.verify(cheaper)   # the figure's c(n): the verify forward alone
    print(f"Largest difference: verifying n = {worst} tokens costs c({worst}) = {1e3 * v_worst:.1f} ms, "
          f"n = {cheaper} costs c({cheaper}) = {1e3 * v_cheaper:.1f} ms "
          f"({100 * (v_worst / v_cheaper - 1):.0f}% more for {cheaper - worst} fewer tokens).")
    print(f"The rule adds the loop's own {1e3 * cost.iteration_s:.1f} ms per iteration to every size "
          f"({1e3 * c[worst - 1]:.1f} and {1e3 * c[cheaper - 1]:.1f} ms): the same for every n, so it changes no comparison.")
    print(f"Growth plans those sizes at ĉ(n); the fill can then add up to {cheaper - worst} drafted leaves for free or less.")
print(f"One draft level costs {1e3 * cost.draft_s:.1f} ms = {cost.draft_s / cost.verify(1):.2f} x c(1): "
      "a deeper tree pays that per level, a wider one only the curve's slope.")

# %%
print("ĉ never exceeds c:", bool(np.all(c_hat <= c + 1e-15)))
print("ĉ is monotone (a larger tree is never planned cheaper):", bool(np.all(np.diff(c_hat) >= 0)))
print("ĉ agrees with c at the curve's end:", bool(c_hat[-1] == c[-1]))
print("the cost-aware node budget is the curve's largest tree:", cost_rule.n_max == min(DynaTreeConfig().n_max, cost.n_max))

# %% [markdown]
# ## 2 · The acceptance vector and Sequoia's static tree
#
# Sequoia builds **one** tree offline and uses it in every iteration. It assumes that the chance that
# the target's next token is the draft's rank-r candidate is a fixed a_r, whatever the context or
# depth (the *positional acceptance assumption*); `calibrate.acceptance_vector(pair)` measures
# a_0..a_7 on a short run over training prompts (cached like the curve). A node reached through
# ranks r_1, r_2, ... is then accepted with probability a_{r_1} · a_{r_2} · ..., and Sequoia's dynamic
# program (`dynatree_core.policy.sequoia.sequoia_shape`) finds the tree of n nodes with the largest expected
# accepted length E[ℓ] = Σ_u Π a_rank (`expected_accepted`). The shape is a branching list in BFS
# order: node i gets the draft's ranks 0..shape[i]−1 as children.

# %% tags=["nbval-ignore-output"]
from dynatree_core.policy.sequoia import expected_accepted, sequoia_shape, shape_tree

acc = calibrate.acceptance_vector(pair)
N_SEQ = 8
shape = sequoia_shape(acc, N_SEQ, d_max=8)
parents, ranks, depths = shape_tree(shape)
chain = (1,) * N_SEQ + (0,)  # the chain of 8 (linear K = 8) as a static tree
print("acceptance a_r, r = 0..7:", ", ".join(f"{a:.3f}" for a in acc), f"(sum {sum(acc):.3f})")
print(f"Sequoia's tree of {N_SEQ} nodes: branching {shape}, depth {max(depths)}, "
      f"{sum(1 for b in shape if b > 1)} nodes with more than one child")
print(f"expected accepted length E[ℓ]: Sequoia {expected_accepted(shape, acc):.3f}, "
      f"chain of {N_SEQ} {expected_accepted(chain, acc):.3f}, "
      f"one node {expected_accepted((1, 0), acc):.3f}")


def reach_prob(u):
    """P(node u is accepted) = Π a_rank along its path."""
    p = 1.0
    while u > 0:
        p *= acc[ranks[u]]
        u = parents[u]
    return p


pd.DataFrame({"parent": parents[1:], "rank": ranks[1:], "depth": depths[1:],
              "P(accepted)": [reach_prob(u) for u in range(1, len(parents))]},
             index=pd.Index(range(1, len(parents)), name="node"))

# %%
from dynatree_core.policy.config import Eagle2Config, SequoiaConfig

print("the shape is a tree of N nodes:", len(shape) == N_SEQ + 1 and sum(shape) == N_SEQ)
print("E[ℓ] is the sum of the nodes' acceptance probabilities:",
      math.isclose(expected_accepted(shape, acc), math.fsum(reach_prob(u) for u in range(1, len(shape)))))
print("it beats the chain of N nodes (one of the trees the program searched):",
      expected_accepted(shape, acc) >= expected_accepted(chain, acc) - 1e-12)
print("SequoiaConfig builds the same tree:", SequoiaConfig(n_max=N_SEQ, acceptance=acc).shape() == shape)

# %% [markdown]
# ## 3 · Six policies on one WikiText-2 prompt
#
# The prompt is the first WikiText-2 passage the benchmark selects (the excerpts bundled with the
# package, cut at 256 tokens: the prefix length the cost curve was measured at). Each method greedily
# generates T = 64 tokens with EOS ignored:
#
# | label | config | the tree policy |
# |---|---|---|
# | `ar` | `ARConfig()` | no tree: one token per target forward |
# | `linear` | `LinearConfig(k=3)` | a chain of 3 draft tokens |
# | `dynatree:paper` | `DynaTreeConfig.paper()` | breadth 1/2/3 by confidence, depth gate D0 = 5 / D_max = 8, N_max = 256 (GPU settings) |
# | `dynatree:cpu` | `DynaTreeConfig.cpu()` | the same rule with the CPU preset: N_max = 6, breadth 1/2/2, and a prompt-lookup tail of up to 6 tokens below the most probable leaf (no draft forward) |
# | `dynatree:cost` | `DynaTreeConfig(cost_aware=True)` | the paper's breadth rule; size and depth from the cost curve |
# | `eagle2` | `Eagle2Config(k=4, depth=4, n_total=8)` | expand the 4 most probable nodes per level with 4 children each, 4 levels, verify the 8 most probable |
# | `sequoia` | `SequoiaConfig(n_max=8)` | the static tree of section 2, every iteration |
#
# EAGLE-2's defaults (k = 10, depth 6, 60 verified tokens) are GPU-sized; on a CPU every verified
# token costs, so it is sized like Sequoia here (8 verified nodes).

# %%
from dynatree_core.bench.data import bundled_corpus, hf_tokenize, select_prompts

L_PROMPT, T = 256, 64
corpus = bundled_corpus("wikitext2")
(prompt,), _ = select_prompts(corpus, hf_tokenize(pair.tokenizer), 1, L_PROMPT)
print(f"WikiText-2 (bundled excerpts): '{prompt.title}', {prompt.n_tokens} tokens")

CONFIGS = {
    "ar": ("ar", ARConfig()),
    "linear": ("linear", LinearConfig(k=3)),
    "dynatree:paper": ("dynatree", DynaTreeConfig.paper()),
    "dynatree:cpu": ("dynatree", DynaTreeConfig.cpu()),
    "dynatree:cost": ("dynatree", DynaTreeConfig(cost_aware=True)),
    "eagle2": ("eagle2", Eagle2Config(k=4, depth=4, n_total=8)),
    "sequoia": ("sequoia", SequoiaConfig(n_max=N_SEQ)),
}
runs = {label: generate(pair, prompt.token_ids, method, cfg, max_new_tokens=T, trace=True, ignore_eos=True)
        for label, (method, cfg) in CONFIGS.items()}
traces = {label: r.trace for label, r in runs.items()}
for label, r in runs.items():
    print(f"{label:15s} same tokens as AR: {r.tokens == runs['ar'].tokens}")
print("the cost-aware run used the curve above:",
      calibrate.CostModel.from_dict(traces["dynatree:cost"].config["cost"]) == cost)
print("Sequoia ran the tree of section 2:", tuple(traces["sequoia"].config["acceptance"]) == tuple(acc))

# %% tags=["nbval-ignore-output"]
print(pair.tokenizer.decode(prompt.token_ids[-40:]), "‖", runs["ar"].text)


# %% tags=["nbval-ignore-output"]
def metrics_row(label, r):
    m = r.metrics
    return {"method": label, "tokens/s": m.tokens_per_s, "speedup vs AR": m.tokens_per_s / runs["ar"].metrics.tokens_per_s,
            "L̄ (tokens/iteration)": m.tokens_per_iteration, "ℓ̄ (accepted)": m.mean_accepted_length,
            "mean tree size": m.mean_tree_size, "draft forwards/iteration": m.draft_forwards_per_iteration,
            "iterations": m.iterations, "target forwards": m.target_forwards}


table = pd.DataFrame([metrics_row(k, r) for k, r in runs.items()]).set_index("method")
table

# %% [markdown]
# What the table says, in sentences computed from it (one prompt and T = 64 on a shared CPU: the
# speeds are noisy; L̄ and the tree sizes are exact and repeatable):

# %% tags=["nbval-ignore-output"]
spec = table.drop(index="ar")
fastest, slowest = spec["tokens/s"].idxmax(), spec["tokens/s"].idxmin()
most_tokens = spec["L̄ (tokens/iteration)"].idxmax()
lines = [
    f"* Fastest here: **{fastest}**, {spec.loc[fastest, 'tokens/s']:.1f} tokens/s "
    f"({spec.loc[fastest, 'speedup vs AR']:.2f}× AR's {table.loc['ar', 'tokens/s']:.1f}); slowest: "
    f"**{slowest}** ({spec.loc[slowest, 'speedup vs AR']:.2f}×).",
    f"* Most tokens per iteration: **{most_tokens}** (L̄ = {spec.loc[most_tokens, 'L̄ (tokens/iteration)']:.2f}, "
    f"with trees of {spec.loc[most_tokens, 'mean tree size']:.1f} nodes on average)"
    + (", yet it is not the fastest: a tree's tokens are paid for with its verify and draft costs."
       if most_tokens != fastest else ", and it is also the fastest."),
    f"* The paper preset verifies {spec.loc['dynatree:paper', 'mean tree size']:.1f} nodes per iteration, the CPU preset "
    f"{spec.loc['dynatree:cpu', 'mean tree size']:.1f} and the cost-aware rule "
    f"{spec.loc['dynatree:cost', 'mean tree size']:.1f} (drafting {spec.loc['dynatree:cost', 'draft forwards/iteration']:.1f} "
    f"levels per iteration against the paper preset's {spec.loc['dynatree:paper', 'draft forwards/iteration']:.1f}).",
    f"* Sequoia's tree promised E[ℓ] = {expected_accepted(shape, acc):.2f} accepted tokens per iteration under the "
    f"positional acceptance assumption (section 2); on this prompt it accepted ℓ̄ = {spec.loc['sequoia', 'ℓ̄ (accepted)']:.2f}.",
]
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## 4 · Where each policy operates on the cost curve
#
# The curve again and, under it on the same n axis, one lane per policy: a marker at each verify size
# n = (tree size + 1) it chose (area by how often) and a bar at its mean n̄. Read a policy's cost
# straight up from its lane.

# %% tags=["nbval-ignore-output"]
tree_runs = {k: v for k, v in traces.items() if k != "ar"}
sizes_fig = dv.cost_figure(cost, sizes=tree_runs, title="verify cost c(n) and the sizes each policy verified")
sizes_fig

# %% tags=["nbval-ignore-output"]
from dynatree_viz.views.cost import mean_verify_size, tree_sizes

drafted = tree_sizes(tree_runs)  # per iteration drafted nodes: the figure's own numbers


def on_the_curve(vals):
    """Share of iterations whose verify size n is not 'overpriced' (no larger tree is cheaper)."""
    ns = [v + 1 for v in vals]
    return sum(n > len(c) or n not in overpriced for n in ns) / max(len(ns), 1), ns


rows = []
for label, vals in drafted.items():
    share, ns = on_the_curve(vals)
    rows.append({"method": label, "mean n̄": round(mean_verify_size(vals), 1),  # as the legend rounds it
                 "most frequent n": Counter(ns).most_common(1)[0][0],
                 "share of iterations at a size no larger tree undercuts": share,
                 "mean c(n) ms": 1e3 * np.mean([cost.verify(n) for n in ns if n <= len(c)])})
sizes_df = pd.DataFrame(rows).set_index("method")
fill = [rec for rec in traces["dynatree:cost"] if rec.num_nodes > 0]
beyond = sum(1 for rec in fill for u in range(1, len(rec.tree))
             if rec.tree.topk_tokens[rec.tree.parents[u]].index(rec.tree.tokens[u]) >= rec.tree.branching[rec.tree.parents[u]])
display(sizes_df)
display(Markdown(
    f"The cost-aware rule verified a size that no larger tree undercuts in "
    f"{100 * sizes_df.loc['dynatree:cost', 'share of iterations at a size no larger tree undercuts']:.0f}% of its "
    f"iterations (the paper preset: {100 * sizes_df.loc['dynatree:paper', 'share of iterations at a size no larger tree undercuts']:.0f}%, "
    f"linear K=3: {100 * sizes_df.loc['linear', 'share of iterations at a size no larger tree undercuts']:.0f}%). "
    f"Its final fill added {beyond} leaves of a rank beyond their parent's breadth B(u) over "
    f"{len(fill)} iterations (candidates the draft had proposed anyway: no extra draft forward)."))

# %%
legend = {t.legendgroup: t.name for t in sizes_fig.data if t.legendgroup and t.showlegend is not False}
print("the table's n̄ is the figure legend's, for every method:",
      all(f"n̄ = {sizes_df.loc[k, 'mean n̄']:.1f}," in legend[k] for k in sizes_df.index))

# %% [markdown]
# ## 5 · One tree per policy, and the new stop reasons
#
# Every policy's **first** iteration starts from the same context (the prompt), so these trees are
# directly comparable: same root, same draft distributions. The accepted path is drawn with blue rings
# and thick blue edges, the target's bonus token as an orange ★. A node's marker shape is its stop reason
# (the legend names each; in a live notebook the hover text says it too): why it did not grow children.
# Besides DynaTree's `depth_gate`, `rho_stop`, `d_max`, `tau` and `n_max`:
#
# * `static` (Sequoia): the static shape gives this node no children;
# * `top_k` (EAGLE-2): the node could be expanded, but it was not among the level's k most probable
#   (such nodes are less probable than the ones expanded, so the final rerank often drops them: the
#   table below counts the survivors);
# * `rerank` (EAGLE-2): the node was expanded, but the final rerank (keep the `n_total` most probable
#   drafted nodes) dropped all its children;
# * `cost` (cost-aware DynaTree): no child could raise the expected tokens per second E / T (the node
#   is a leaf by the cost rule: also the reason of the leaves added by the final fill).

# %% tags=["nbval-ignore-output"]
for label, tr in tree_runs.items():
    rec = tr[0]
    display(dv.tree_figure(rec, tokenizer=pair.tokenizer,
                           title=f"{label}: iteration 0, {rec.num_nodes} drafted nodes, {len(rec.accepted_path)} accepted"))

# %% tags=["nbval-ignore-output"]
reasons = pd.DataFrame({label: Counter(s for rec in tr for s in rec.tree.stop_reasons)
                        for label, tr in tree_runs.items()}).fillna(0).astype(int)
reasons.index.name = "stop reason (all iterations)"
reasons

# %%
seen = {label: {s for rec in tr for s in rec.tree.stop_reasons} for label, tr in tree_runs.items()}
print("'static' only in Sequoia, and there:", "static" in seen["sequoia"]
      and all("static" not in s for k, s in seen.items() if k != "sequoia"))
print("'top_k' and 'rerank' only in EAGLE-2, and its trees were reranked:", "rerank" in seen["eagle2"]
      and all(not {"top_k", "rerank"} & s for k, s in seen.items() if k != "eagle2"))
print("'cost' only in cost-aware DynaTree:", all("cost" not in s for k, s in seen.items() if k != "dynatree:cost"))
print("the cost-aware tree never uses the depth gate or rho_stop:", not {"depth_gate", "rho_stop"} & seen["dynatree:cost"])
print("EAGLE-2 never verifies more than n_total nodes:", all(rec.num_nodes <= 8 for rec in traces["eagle2"]))
done, static_ok = 0, True
for rec in traces["sequoia"]:  # near the end of the budget the engine cuts every tree at depth T - done - 1
    if T - done - 1 >= max(depths):
        static_ok &= list(rec.tree.branching) == list(shape)
    done += len(rec.committed)
print("Sequoia verified its static shape in every iteration the budget did not cut:", static_ok)

# %% [markdown]
# ## 6 · The oracle gap: how close is each policy to the best tree of its size?
#
# Under greedy verification the target accepts exactly the tree path that spells its own
# continuation. Replaying a run (`dynatree_core.records.oracle.oracle_trace`), iteration r's **reach** is how
# many of the tokens it went on to commit were each among the draft's top-K candidates after the ones
# before: a tree of n nodes can accept at most min(n, reach), and the chain along the continuation
# does. `summarize_oracle` pools that into the oracle's mean accepted length at the method's own mean
# tree size, and the **gap** = oracle − ℓ̄: how many tokens per iteration a better tree of the same
# size would have accepted. (Each method is replayed on its own run; K, the draft candidates a tree may
# use at each node, is the number recorded per node, printed below. The CPU preset's prompt-lookup tail
# is scored like the draft: its nodes count in the tree size and its accepted tokens in ℓ̄, and a token
# it proposed and the target accepted is a candidate of the reach; so every row's ℓ̄ and n are its run's.)

# %%
from dynatree_core.records.oracle import oracle_trace, summarize_oracle

oracle_rows = {label: oracle_trace(tr) for label, tr in tree_runs.items()}
summaries = {label: summarize_oracle(rows) for label, rows in oracle_rows.items()}
print("no policy ever accepts more than the oracle at its own tree size:",
      all(r.accepted <= r.best(r.nodes) for rows in oracle_rows.values() for r in rows))
print("so every gap at the own size is >= 0:", all(s.gap_own >= 0 for s in summaries.values()))
drafted_k = [s.top_k for s in summaries.values() if s.iterations and s.top_k]  # a run that drafted nothing has none
print("one K for every method that drafted:", len(set(drafted_k)) == 1, "| K =", drafted_k[0])
print("every oracle's ℓ̄ and tree size are its run's own (lookup-tail nodes included):",
      all(math.isclose(s.mean_accepted, runs[k].metrics.mean_accepted_length)
          and math.isclose(s.mean_nodes, runs[k].metrics.mean_tree_size)
          for k, s in summaries.items()))
print("the lookup tail accepted tokens only in the run that has one:",
      {k for k, s in summaries.items() if s.mean_tail_accepted > 0} <= {"dynatree:cpu"})

# %% tags=["nbval-ignore-output"]
dv.oracle_gap_figure(summaries).update_layout(width=1100)

# %% tags=["nbval-ignore-output"]
gaps = pd.DataFrame({label: {"mean size n̄": s.mean_nodes, "n (n̄ rounded)": s.n, "ℓ̄": s.mean_accepted, "of it, lookup tail": s.mean_tail_accepted,
                             "oracle at n": s.mean_oracle,
                             "gap": s.gap, "gap at own sizes": s.gap_own,
                             "oracle/ℓ̄": s.mean_oracle / s.mean_accepted if s.mean_accepted else float("nan")}
                     for label, s in summaries.items()}).T
gaps["n (n̄ rounded)"] = gaps["n (n̄ rounded)"].astype(int)  # a whole tree size, not a mean
closest = gaps["gap"].idxmin()
widest = gaps["gap"].idxmax()
display(gaps)
display(Markdown(
    f"The oracle needs a whole tree, so it runs at n = n̄ rounded (n̄ = {gaps.loc[widest, 'mean size n̄']:.2f} "
    f"becomes n = {gaps.loc[widest, 'n (n̄ rounded)']:.0f} for {widest}). "
    f"Smallest gap: **{closest}** ({gaps.loc[closest, 'gap']:.2f} tokens per iteration at n = "
    f"{gaps.loc[closest, 'n (n̄ rounded)']:.0f}); largest: **{widest}** ({gaps.loc[widest, 'gap']:.2f} at n = "
    f"{gaps.loc[widest, 'n (n̄ rounded)']:.0f}). The oracle curve best(i) = mean of min(i, reach_r) flattens once i "
    f"passes most iterations' reach (here it gains {summaries['linear'].curve[-1] - summaries['linear'].curve[8]:.2f} "
    f"tokens from i = 8 to i = {len(summaries['linear'].curve) - 1} on the linear run): past that, a larger tree "
    f"only helps if its nodes sit where the target goes."))

# %% [markdown]
# ## 7 · How much can the draft's probabilities be trusted?
#
# Every policy treats a draft probability as a chance of acceptance: DynaTree's breadth thresholds read
# the confidence c(u) = max q(·|u), EAGLE-2 ranks by the path probability p(u), and the cost-aware rule
# values a node at v(u) = min(1, s_d · p(u)). `dynatree_core.records.reliability.calibration` compares each kind of
# prediction with what the target did, per depth (a **reliability diagram**: points on the diagonal are
# calibrated, below it over-confident):
#
# * `"confidence"`: c(u) against "the draft's top token is the target's choice after u" — pooled over
#   every tree policy's runs (it is a property of the draft, not of the policy);
# * `"path"`: p(u) against "u is on the accepted path" — on the cost-aware run. Per depth d, the
#   **scale** s_d = Σ observed / Σ predicted is the factor that makes s_d · p(u) an unbiased estimate
#   of acceptance at that depth.
#
# Each figure's title gives the **ECE** (expected calibration error): the predictions are put in 10 bins
# by value, and ECE = Σ_bins (count in the bin / all predictions) · |mean prediction − observed rate in the
# bin|, the average distance of the points from the diagonal, weighted by how many predictions each holds.
# 0 is perfectly calibrated.

# %%
from dynatree_core.records.reliability import calibration

conf = calibration(list(tree_runs.values()), kind="confidence", bins=10)
path = calibration(traces["dynatree:cost"], kind="path", bins=10)
print("every fed node of every run is one confidence prediction:",
      conf.overall.count == sum(1 for tr in tree_runs.values() for rec in tr for u in range(len(rec.tree))
                                if rec.tree.topk_tokens[u] is not None and u < len(rec.target_argmax)))
print("every drafted node of the cost-aware run is one path prediction:",
      path.overall.count == sum(rec.num_nodes for rec in traces["dynatree:cost"]))

# %% tags=["nbval-ignore-output"]
dv.calibration_figure(conf, title=f"draft confidence c(u) vs the target's choice, all tree policies: "
                                  f"ECE {conf.overall.ece:.3f}")

# %% tags=["nbval-ignore-output"]
ece = "–" if path.overall.ece is None else f"{path.overall.ece:.3f}"  # None: the run drafted no node
dv.calibration_figure(path, title=f"path probability p(u) vs acceptance, cost-aware DynaTree: ECE {ece}")

# %% [markdown]
# **What the scale does to cost-aware growth.** The cost-aware run keeps, in its history state, the
# last 64 iterations' accepted lengths and Σ p(u) per depth, and before every iteration sets
# s_d = (iterations that accepted ≥ d tokens + 1) / (Σ p(u) at depth d + 1): the path calibration's
# scale with a +1 prior, so s_d = 1 until there is evidence. s_d < 1 (an over-confident draft at that
# depth) lowers the value of deep nodes, so the tree stops growing sooner; s_d > 1 pushes it deeper.

# %%
from dynatree_core.policy.history import HistoryState

final = traces["dynatree:cost"].iterations[-1].history_after   # the adapter's state after the run

engine_scale = HistoryState.from_dict(final).depth_scale(DynaTreeConfig().d_max)
smoothed = [(dc.depth, (dc.observed_rate * dc.count + 1) / (dc.mean_predicted * dc.count + 1)) for dc in path.depths]
print("the engine's s_d is the path calibration's scale with a +1 prior:",
      len(traces["dynatree:cost"]) <= 64 and all(math.isclose(engine_scale[d], s, rel_tol=1e-4) for d, s in smoothed))

# %% tags=["nbval-ignore-output"]
scale_df = pd.DataFrame([{"depth d": dc.depth, "drafted nodes": dc.count, "mean p(u)": dc.mean_predicted,
                          "accepted rate": dc.observed_rate, "scale Σobs/Σpred": dc.scale,
                          "engine s_d (+1 prior)": engine_scale[dc.depth] if dc.depth < len(engine_scale) else None}
                         for dc in path.depths], columns=["depth d", "drafted nodes", "mean p(u)", "accepted rate",
                                                          "scale Σobs/Σpred", "engine s_d (+1 prior)"]).set_index("depth d")
display(scale_df)
over = [int(d) for d, s in scale_df["engine s_d (+1 prior)"].items() if s is not None and s < 1]
under = [int(d) for d, s in scale_df["engine s_d (+1 prior)"].items() if s is not None and s > 1]
moves = [f"discounted (s_d < 1) at depth {ranges(over)}" if over else "",
         f"raised (s_d > 1) at depth {ranges(under)}" if under else ""]
moves = " and ".join(m for m in moves if m) or "left at 1 (no evidence yet)"
display(Markdown(
    f"After this run the cost-aware rule's path probabilities are {moves}. The confidence predictions' overall ECE is "
    f"{conf.overall.ece:.3f}: {'the draft is over-confident on average' if conf.overall.mean_predicted > conf.overall.observed_rate else 'the draft is under-confident on average'} "
    f"(mean c(u) {conf.overall.mean_predicted:.3f} against an observed rate of {conf.overall.observed_rate:.3f})."))

# %% [markdown]
# ## 8 · The summary table
#
# `dv.policy_table` renders the rows of a benchmark result (`dynatree bench --methods ar,policies`
# writes them, with several prompts and warmup). It also takes a list of aggregate rows, so here is one
# built from this notebook's single prompt (fastest in bold; noisy on a CPU, see above).

# %% tags=["nbval-ignore-output"]
agg_rows = [{"dataset": "wikitext2 (1 prompt)", "method": CONFIGS[label][0], "label": label, "n": 1,
             "tokens_per_iteration": r.metrics.tokens_per_iteration, "mean_accepted_length": r.metrics.mean_accepted_length,
             "tokens_per_s": r.metrics.tokens_per_s, "speedup": r.metrics.tokens_per_s / runs["ar"].metrics.tokens_per_s,
             "mean_tree_size": r.metrics.mean_tree_size,
             **({"oracle_gap": summaries[label].gap, "oracle_n": summaries[label].n} if label in summaries else {})}
            for label, r in runs.items()]
display(HTML(dv.policy_table(agg_rows)))

# %% [markdown]
# ## What to try next
#
# * A real comparison: `dynatree bench --methods ar,policies` (several prompts of WikiText-2 and PG-19,
#   warmup, means and standard deviations, the oracle gap per method: Table 6), then
#   `dv.policy_table("results/….json")`.
# * Recalibrate on a quiet machine (`calibrate.cost_model(pair, recalibrate=True)`, or
#   `dynatree calibrate --recalibrate`) and watch the cost-aware trees follow the new curve.
# * On a GPU the curve stays flat for dozens of tokens: the cost-aware rule then grows much larger
#   trees, and EAGLE-2's defaults (`Eagle2Config()`: k = 10, depth 6, 60 tokens) make sense.
# * Sequoia with a larger budget (`SequoiaConfig(n_max=16)`) or a shallower tree (`d_max=3`):
#   compare `expected_accepted` with the ℓ̄ it reaches — the positional acceptance assumption is
#   only an assumption.
# * `dv.show(traces["dynatree:cost"])` steps through the cost-aware run iteration by iteration.
