# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Exploring DynaTree's parameters
#
# **What you will learn**
#
# * how to use the interactive explorer: live (re-drafts and re-verifies with the models as you move
#   a slider) and replay (re-grows a recorded iteration, no model needed);
# * what each knob does to the tree and to the accepted length:
#   τ_h / τ_l (breadth), D0 / D_max (depth), ρ_stop / ρ_deep (depth gates), τ (pruning), N_max (budget);
# * how to drive the same experiment from code (`TreeSession.regrow(rule)`) and plot a small sweep.
#
# Recap (see **02**): a node u with confidence c(u) gets B_min children if c(u) ≥ τ_h, B_max if
# c(u) < τ_l, else B_mid; it is expanded only if d(u) < D_max, p(u) ≥ ρ_stop, and (d(u) < D0 or
# p(u) ≥ ρ_deep); children with p < τ are pruned; at most N_max nodes are verified.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import math

import numpy as np
import pandas as pd
import torch
from IPython.display import HTML, Markdown, display

import dynatree_viz as dv
from dynatree_core import (ARConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, ModelPair,
                           generate, iterate)

# Figures as Plotly JSON (interactive in JupyterLab, VS Code, Colab) plus a PNG where kaleido and
# Chromium are installed, so static pages (nbconvert HTML, nbviewer, GitHub) show them too.
dv.use_static_fallbacks()
torch.manual_seed(0)  # decoding is greedy (deterministic); this only pins anything random we add
pd.set_option("display.precision", 3)

# %% [markdown]
# Load the model pair. `ModelPair.default()` is the embedded offline pair: SmolLM2-135M-Instruct
# as the **target** (the model whose output we want) and a small **draft** distilled for it that
# shares its vocabulary. Two drafts ship, and every method runs with either: `draft="model"` (an
# independent 2-layer model, the paper's setting) and `draft="feature"` (a small head that also reads
# the target's own hidden states, the EAGLE idea). Either can have *prompt lookup* mixed in
# (`"feature+lookup"`): where the text so far repeats an earlier n-gram, the tokens that followed it gain
# probability. `ModelPair.default()` takes the fastest in this project's CPU benchmark, the feature draft
# with prompt lookup (the README gives the numbers). Nothing is downloaded.

# %% tags=["nbval-ignore-output"]
if PAIR == "tiny":  # development only: random weights, nonsense text, every check still holds
    from dynatree_core.pairs.tiny import tiny_pair
    pair = tiny_pair("llama")
else:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    pair = ModelPair.default(device=device)   # or draft="model" / "feature" / "feature+lookup"
print(f"target: {pair.target_name}\ndraft:  {pair.draft_name} ({pair.drafter_kind} drafter)\n"
      f"device: {pair.device} (linear kernel: {pair.linear_kernel})")

# %%
prompt = "Water boils at 100 degrees Celsius at sea level, but at higher altitudes it boils at"
base = DynaTreeConfig.paper()

# %% [markdown]
# ## The live explorer
#
# Move a slider: the tree for the prompt's next iteration is re-drafted under the new rule and verified
# by the target; green nodes are accepted. The panel reports the nodes verified, the accepted length
# ℓ, and a cost-model estimate of tokens per second. (The widget needs a running kernel.)

# %% tags=["nbval-ignore-output"]
explorer = dv.explore(pair, prompt, config=base)
explorer

# %% [markdown]
# Widgets can be driven from code too — handy for tests and for reproducible tours:

# %%
explorer.sliders["tau"].value = 0.2        # what a user dragging the τ slider does
print("the tree was re-grown with tau = 0.2:", explorer.rule.tau == 0.2 and explorer.error is None)
explorer.reset()
print("reset restores the starting rule:", explorer.rule == base.growth_rule())

# %% [markdown]
# ## Replay mode
#
# A trace stores the draft's top-k candidates at every expanded node, so a recorded iteration can be
# re-grown under any rule that stays inside what was recorded — without the models.

# %% tags=["nbval-ignore-output"]
res = generate(pair, prompt, "dynatree", base, max_new_tokens=24, trace=True, ignore_eos=True)
replay = dv.explore(res.trace, iteration=1)
replay

# %% [markdown]
# ## A guided tour, from code
#
# `TreeSession(pair, prompt)` prefills both models once; `session.regrow(rule)` drafts and verifies one
# tree under any `GrowthRule` and returns `(tree, target_argmax)`. For each knob we grow the tree at a
# few values and tabulate the verified nodes, depth, draft forwards (one per tree level) and the
# accepted length ℓ.
#
# A useful fact to check: every knob except N_max only *adds* nodes in one direction (a wider
# breadth adds children, a later depth stop adds levels, a lower τ keeps more candidates), so the
# trees are **nested** — and a nested tree can only accept as much or more.

# %%
from dynatree_core.engine.session import TreeSession

session = TreeSession(pair, prompt)

def grow(**changes):
    cfg = base.replace(**changes)
    tree, argmax = session.regrow(cfg.growth_rule())
    path, bonus = tree.greedy_path(argmax)
    return tree, {**changes, "nodes": tree.num_drafted, "depth": tree.depth, "draft forwards": tree.draft_calls,
                  "accepted ℓ": len(path)}

def paths(tree):
    return {tuple(tree.tokens[j] for j in tree.path_to(i)) for i in range(1, len(tree))}

def tour(name, values):
    """Grow one tree per value; return the table and whether consecutive trees are nested."""
    trees, rows = zip(*(grow(**{name: v}) for v in values))
    nested = all(paths(a) <= paths(b) or paths(b) <= paths(a) for a, b in zip(trees, trees[1:]))
    grows = all(paths(a) <= paths(b) for a, b in zip(trees, trees[1:]))
    effects[name] = effect(name, values, trees)
    return pd.DataFrame(rows).set_index(name), grows, nested

def effect(name, values, trees):
    """One sentence, computed from the trees: where the parameter changed the tree, or why it did not."""
    changes = [f"{a:g}→{b:g}" for a, b, ta, tb in zip(values, values[1:], trees, trees[1:]) if paths(ta) != paths(tb)]
    if changes:
        return f"**{name}** changed the tree at {', '.join(changes)}."
    t = trees[0]
    conf = [c for c in t.confidences[:len(t)] if c is not None]
    probs = [math.exp(x) for x in t.cum_logps[1:]]
    stops = pd.Series(t.stop_reasons[1:]).value_counts().to_dict()
    moved = [c for c in conf if min(values) <= c < max(values)]
    in_conf = (f"no expanded node's confidence c(u) lies in [{min(values):g}, {max(values):g}) "
               f"(c(u) here: {', '.join(f'{c:.2f}' for c in conf)})" if not moved else
               f"the nodes it moves to another breadth class (c(u) = {', '.join(f'{c:.2f}' for c in moved)}) "
               f"would get extra children, but every extra candidate's path probability is below "
               f"τ = {base.tau:g} (pruned) or beyond the budget N_max = {base.n_max}")
    why = {"tau_h": in_conf, "tau_l": in_conf,
           "d0": f"no path gets past depth {t.depth}: the stop reasons are {stops}",
           "d_max": f"the deepest path stops at depth {t.depth}, below every D_max tried ({stops})",
           "rho_deep": f"no path goes past D0 (depth {t.depth}; stop reasons {stops})",
           "n_max": f"the tree has {t.num_drafted} nodes, within every budget tried"}.get(
               name, f"no node's probability falls between the values tried (path p(u): "
                     f"{', '.join(f'{p:.2f}' for p in probs)}; stop reasons {stops})")
    return f"**{name}** did not change this tree over {values}: {why}."

tables, effects = {}, {}

# %% [markdown]
# ### Breadth: τ_h and τ_l
#
# Raising τ_h makes fewer nodes count as *sure*, so more get B_mid instead of B_min; raising τ_l makes
# more nodes count as *unsure* (B_max). Both widen the tree.

# %%
tables["tau_h"], grows_h, _ = tour("tau_h", [0.5, 0.7, 0.9, 0.99])
tables["tau_l"], grows_l, _ = tour("tau_l", [0.05, 0.2, 0.4, 0.6])
print("raising tau_h only adds nodes:", grows_h)
print("raising tau_l only adds nodes:", grows_l)

# %% tags=["nbval-ignore-output"]
display(tables["tau_h"], tables["tau_l"])

# %% tags=["nbval-ignore-output"]
Markdown("\n\n".join(effects[k] for k in ("tau_h", "tau_l")))

# %% [markdown]
# ### Depth: D0, D_max, ρ_stop, ρ_deep
#
# D0 is the depth every path with p(u) ≥ ρ_stop reaches; beyond it only paths with p(u) ≥ ρ_deep
# continue, up to D_max. Raising D0 or D_max deepens; raising ρ_stop or ρ_deep cuts.

# %%
tables["d0"], grows_d0, _ = tour("d0", [1, 3, 5, 7])
tables["d_max"], grows_dm, _ = tour("d_max", [6, 8, 10, 12])
tables["rho_stop"], grows_rs, _ = tour("rho_stop", [0.3, 0.2, 0.1, 0.02])
tables["rho_deep"], grows_rd, _ = tour("rho_deep", [0.9, 0.7, 0.5, 0.2])
print("raising D0 only adds nodes:", grows_d0)
print("raising D_max only adds nodes:", grows_dm)
print("lowering rho_stop only adds nodes:", grows_rs)
print("lowering rho_deep only adds nodes:", grows_rd)

# %% tags=["nbval-ignore-output"]
display(tables["d0"], tables["d_max"], tables["rho_stop"], tables["rho_deep"])

# %% tags=["nbval-ignore-output"]
Markdown("\n\n".join(effects[k] for k in ("d0", "d_max", "rho_stop", "rho_deep")))

# %% [markdown]
# ### Pruning τ and the budget N_max
#
# τ removes unlikely candidates everywhere. N_max caps the verified nodes: when a level offers more
# children than the remaining budget, the most probable ones are kept. N_max is the one knob that
# does not nest — a larger budget spent on one level can change which nodes the next level keeps.

# %%
tables["tau"], grows_tau, _ = tour("tau", [0.2, 0.1, 0.05, 0.02, 0.01])
tables["n_max"], _, _ = tour("n_max", [2, 4, 8, 16, 64])
print("lowering tau only adds nodes:", grows_tau)
print("never more than N_max nodes:", all(row["nodes"] <= n for n, row in tables["n_max"].iterrows()))

# %% tags=["nbval-ignore-output"]
display(tables["tau"], tables["n_max"])

# %% tags=["nbval-ignore-output"]
Markdown("\n\n".join(effects[k] for k in ("tau", "n_max")))

# %% [markdown]
# ## A small sweep, plotted
#
# Every point is one re-grown tree: verified nodes (what the target pays for) against accepted length
# (what it gains), for each knob of the tour. Good settings sit top-left. Remember this is *one*
# iteration of *one* prompt — **05** measures averages over many.

# %% tags=["nbval-ignore-output"]
import plotly.graph_objects as go

fig = go.Figure()
for name, df in tables.items():
    fig.add_trace(go.Scatter(x=df["nodes"], y=df["accepted ℓ"], mode="lines+markers+text", name=name,
                             text=[f"{v:g}" for v in df.index], textposition="top center"))
fig.update_layout(template="plotly_white", height=500, title="nodes verified vs accepted length, one iteration",
                  xaxis_title="verified nodes", yaxis_title="accepted ℓ")
fig

# %% [markdown]
# And a 2-D sweep of the two parameters the history adapter tunes online (**04**): D0 and τ_h.

# %% tags=["nbval-ignore-output"]
from plotly.subplots import make_subplots

d0s, tau_hs = [2, 3, 4, 5, 6], [0.6, 0.75, 0.9, 0.97]
grid = [[grow(d0=d, tau_h=h)[1] for d in d0s] for h in tau_hs]
fig = make_subplots(rows=1, cols=2, subplot_titles=("verified nodes", "accepted ℓ"))
for k, key in enumerate(["nodes", "accepted ℓ"]):
    fig.add_trace(go.Heatmap(z=[[c[key] for c in row] for row in grid], x=[str(d) for d in d0s],
                             y=[str(h) for h in tau_hs], coloraxis=f"coloraxis{k + 1}", texttemplate="%{z}"),
                  row=1, col=k + 1)
fig.update_layout(template="plotly_white", height=380, coloraxis=dict(colorscale="Blues", showscale=False),
                  coloraxis2=dict(colorscale="Greens", showscale=False))
fig.update_xaxes(title_text="D0")
fig.update_yaxes(title_text="τ_h", col=1)
fig

# %%
print("sweep cells:", sum(len(row) for row in grid))
print("within each row, a larger D0 never shrinks the tree:",
      all(a["nodes"] <= b["nodes"] for row in grid for a, b in zip(row, row[1:])))

# %% [markdown]
# ## What to try next
#
# * A harder prompt (e.g. a list of random numbers): watch the confidence fall and the tree widen.
# * Toggle *dynamic breadth* / *dynamic depth* in the explorer: with both off you get the paper's
#   fixed backbone.
# * `DynaTreeConfig.cpu()` as `base`: the CPU preset's trees, and why small budgets win on a CPU.
# * Replay other iterations: `dv.explore(res.trace, iteration=k)`.
