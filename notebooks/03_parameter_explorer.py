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
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import math

import numpy as np
import pandas as pd
import torch
from IPython.display import HTML, Markdown, display

import dynatree_viz as dv
from dynatree_viz.widgets.explorer import SLIDERS
from dynatree_core import (ARConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, ModelPair,
                           generate, iterate)

# Figures as Plotly JSON (interactive in JupyterLab, VS Code, Colab) plus a PNG where kaleido and
# Chromium are installed, so static pages (nbconvert HTML, nbviewer, GitHub) show them too.
dv.use_static_fallbacks()
torch.manual_seed(0)  # decoding is greedy (deterministic); this only pins anything random we add
pd.set_option("display.precision", 3)
SYMBOL = {name: spec[4] for name, spec in SLIDERS.items()}  # tau_h -> τ_h: the paper's symbols, for the reader

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
# PAIR "default": the embedded pair; "tiny-llama": random weights for development (nonsense text, every check holds)
device = "cuda" if torch.cuda.is_available() else "cpu"
pair = ModelPair.named(PAIR, device=device)   # or drafter="model" / "feature" / "feature+lookup"
print(f"target: {pair.target_name}\ndraft:  {pair.draft_name} ({pair.drafter_kind} drafter)\n"
      f"device: {pair.device} (linear kernel: {pair.linear_kernel})")

# %% [markdown]
# ## Choosing a state where the knobs matter
#
# A knob can only teach where it changes what the target accepts. On many iterations it does not: if the
# target's next token is none of the draft's candidates, ℓ = 0 under every setting. So we record a few
# prompts under a generous rule (every knob at the end of its range that grows the tree), replay each
# recorded iteration under every value the tour below tries (no model needed: the trace keeps the draft's
# top-k at every node), and let `dv.knob_example` pick the iteration where ℓ moves with the most knobs.
# The explorer and the tour then re-draft that very state live. Two depth gates act only past D0, so
# their sweeps hold D0 (and, for D_max, ρ_deep) low enough for them to bind on a short path.

# %% tags=["nbval-ignore-output"]
base = DynaTreeConfig.paper()
KNOBS = {"tau_h": [0.5, 0.7, 0.9, 0.99], "tau_l": [0.05, 0.2, 0.4, 0.6], "d0": [1, 2, 3, 5],
         "d_max": [2, 3, 4, 8], "rho_stop": [0.3, 0.2, 0.1, 0.02], "rho_deep": [0.9, 0.7, 0.5, 0.2],
         "tau": [0.2, 0.1, 0.05, 0.02, 0.01], "n_max": [2, 4, 8, 16, 64]}
FIXED = {"d_max": {"d0": 1, "rho_deep": 0.15}, "rho_deep": {"d0": 2}}  # so the gate past D0 acts
wide = base.replace(tau_h=0.99, tau_l=0.6, d0=7, d_max=12, rho_stop=0.02, rho_deep=0.2, tau=0.01, n_max=64)
candidates = ["Water boils at 100 degrees Celsius at sea level, but at higher altitudes it boils at",
              *dv.EXAMPLE_PROMPTS]
recorded = [generate(pair, p, "dynatree", wide, max_new_tokens=48, trace=True, ignore_eos=True).trace
            for p in candidates]
example = dv.knob_example(recorded, base, KNOBS, FIXED)
res = next(t for t in recorded if example.record in t.iterations)   # the trace it came from
state = dv.state_tokens(res, example.record)                           # prompt + text up to its root
assert len(example.moving) >= 5, example.moving  # the tour below must show a trade-off
display(Markdown(f"Chosen: iteration {example.record.index} of *{res.prompt_text}*; ℓ moves with "
                 f"{len(example.moving)} of {len(KNOBS)} knobs ({', '.join(SYMBOL[k] for k in example.moving)}). The state "
                 f"the explorer re-drafts ends in: …*{pair.tokenizer.decode(state[-12:])}*"))

# %% [markdown]
# ## The live explorer
#
# Move a slider: the tree for the chosen state's next iteration is re-drafted under the new rule and
# verified by the target. Accepted nodes get a blue ring and a thick blue edge, rejected ones a vermillion
# ✗, the target's bonus token an orange ★. The panel reports the nodes verified, the accepted length ℓ, and
# a cost-model estimate: one draft forward per level the draft ran on (level 0, the root, also feeds in the
# same forward the committed tokens the draft has not read yet) plus a verify forward c(n) over the n tokens
# of the tree, here the core's `CostModel` fitted to the recorded run's timings (c(n) = a + b·n by least squares), so
# the cost is in milliseconds; a tree larger than any recorded is past the fitted curve and gets no estimate
# (without timings, the explorer prices trees with an illustrative default and says so). The widget needs a
# running kernel; a static page shows a snapshot of its starting state.

# %% tags=["nbval-ignore-output"]
# per recorded iteration: the tokens verified (the root included), the draft levels, the seconds per phase
cost_model = dv.CostModel.fit((len(r.tree), r.tree.draft_calls, r.timings) for r in res.iterations)
explorer = dv.explore(pair, state, config=base, cost_model=cost_model)
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
replay = dv.explore(res, iteration=example.record.index, config=base)   # the same iteration, recorded
replay

# %% [markdown]
# ## Sliders without a kernel: the explorer page
#
# The widgets above need a running kernel. `generate(..., trace="replay")` makes a recording made for
# replay: each iteration the draft grows the *envelope* — every node that any setting inside the page's
# slider ranges can grow (the widest gates, no budget: N_max is spent level by level by path probability,
# so a narrow setting with a small budget reaches depths the widest budgeted tree never pays for) — and
# the target verifies all of it in the same forward, while the run commits DynaTree's own accepted path,
# so the output is still exactly the target's. `dv.explorer_page(trace, "page.html")` then writes one HTML
# file where every slider regrows the tree in the browser by the same rule as `replay_tree`, with no
# Python anywhere. Below is the page for the chosen prompt, embedded (click a node for its *why*).

# %% tags=["nbval-ignore-output"]
from dynatree_viz.export.page import explorer_page_html, srcdoc_iframe

page_run = generate(pair, res.prompt_text, "dynatree", base, max_new_tokens=24, trace="replay", ignore_eos=True)
assert page_run.tokens == res.tokens[:24]  # the recording commits the target's own greedy tokens
page_html = explorer_page_html(page_run.trace, tokenizer=pair.tokenizer, title="DynaTree explorer (notebook 03)",
                               plotly_js=False)  # the tree as SVG: a light file, and embeddable
with open("03_explorer_page.html", "w", encoding="utf-8") as f:
    f.write(page_html)
envelope = page_run.trace.replay["nodes"]
display(Markdown(f"Recorded {len(envelope)} iterations; the envelope held {sum(envelope) / len(envelope):.1f} nodes "
                 f"per iteration on average (at most {max(envelope)}), DynaTree's own trees "
                 f"{sum(len(r.accepted_path) for r in page_run.trace.iterations) / len(envelope):.1f} accepted tokens "
                 f"per iteration; the page is {len(page_html.encode()) / 1e3:.0f} kB, saved as "
                 "[03_explorer_page.html](03_explorer_page.html)."))
display(HTML(srcdoc_iframe(page_html, height=1150)))

# %% [markdown]
# ## A guided tour, from code
#
# `TreeSession(pair, prompt)` prefills both models once; `session.regrow(rule)` drafts and verifies one
# tree under any `GrowthRule` and returns `(tree, target_argmax)`. For each knob we grow the tree at a
# few values and tabulate the verified nodes, depth, draft forwards and the accepted length ℓ. A draft
# forward is spent per level the draft *ran on*: that is the tree's depth, or one more when the draft also
# ran on the deepest nodes and pruning (τ or N_max) dropped every child it proposed there.
#
# A useful fact to check: every knob except N_max only *adds* nodes in one direction (a wider
# breadth adds children, a later depth stop adds levels, a lower τ keeps more candidates), so the
# trees are **nested** — and a nested tree can only accept as much or more.

# %%
from dynatree_core.engine.session import TreeSession

session = TreeSession(pair, state)

def grow(**changes):
    cfg = base.replace(**changes)
    tree, argmax = session.regrow(cfg.growth_rule())
    path, bonus = tree.greedy_path(argmax)
    return tree, {**changes, "nodes": tree.num_drafted, "depth": tree.depth, "draft forwards": tree.draft_calls,
                  "accepted ℓ": len(path)}

def paths(tree):
    return {tuple(tree.tokens[j] for j in tree.path_to(i)) for i in range(1, len(tree))}

def tour(name, values):
    """Grow one tree per value (with FIXED's settings for this knob); return the table and whether
    consecutive trees are nested."""
    trees, rows = zip(*(grow(**{**FIXED.get(name, {}), name: v}) for v in values))
    rows = [{k: r[k] for k in (name, "nodes", "depth", "draft forwards", "accepted ℓ")} for r in rows]
    nested = all(paths(a) <= paths(b) or paths(b) <= paths(a) for a, b in zip(trees, trees[1:]))
    grows = all(paths(a) <= paths(b) for a, b in zip(trees, trees[1:]))
    effects[name] = effect(name, values, trees)
    return pd.DataFrame(rows).set_index(name), grows, nested

def effect(name, values, trees):
    """One sentence, computed from the trees: where the parameter changed the tree, or why it did not."""
    changes = [f"{a:g}→{b:g}" for a, b, ta, tb in zip(values, values[1:], trees, trees[1:]) if paths(ta) != paths(tb)]
    if changes:
        return f"**{SYMBOL[name]}** changed the tree at {', '.join(changes)}."
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
    return f"**{SYMBOL[name]}** did not change this tree over {values}: {why}."

tables, effects = {}, {}

# %% [markdown]
# ### Breadth: τ_h and τ_l
#
# Raising τ_h makes fewer nodes count as *sure*, so more get B_mid instead of B_min; raising τ_l makes
# more nodes count as *unsure* (B_max). Both widen the tree.

# %%
tables["tau_h"], grows_h, _ = tour("tau_h", KNOBS["tau_h"])
tables["tau_l"], grows_l, _ = tour("tau_l", KNOBS["tau_l"])
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
# continue, up to D_max. Raising D0 or D_max deepens; raising ρ_stop or ρ_deep cuts. (The D_max sweep
# holds D0 = 1 and ρ_deep = 0.15, the ρ_deep sweep D0 = 2: past D0 is where those two act.)

# %%
tables["d0"], grows_d0, _ = tour("d0", KNOBS["d0"])
tables["d_max"], grows_dm, _ = tour("d_max", KNOBS["d_max"])
tables["rho_stop"], grows_rs, _ = tour("rho_stop", KNOBS["rho_stop"])
tables["rho_deep"], grows_rd, _ = tour("rho_deep", KNOBS["rho_deep"])
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
tables["tau"], grows_tau, _ = tour("tau", KNOBS["tau"])
tables["n_max"], _, _ = tour("n_max", KNOBS["n_max"])
print("lowering tau only adds nodes:", grows_tau)
print("never more than N_max nodes:", all(row["nodes"] <= n for n, row in tables["n_max"].iterrows()))

# %% tags=["nbval-ignore-output"]
display(tables["tau"], tables["n_max"])

# %% tags=["nbval-ignore-output"]
Markdown("\n\n".join(effects[k] for k in ("tau", "n_max")))

# %%
rows = [(k, v, r) for k, df in tables.items() for v, r in df.iterrows()]
print("draft forwards = depth, or depth + 1, in every row:",
      all(r["draft forwards"] in (r["depth"], r["depth"] + 1) for _, _, r in rows))

# %% tags=["nbval-ignore-output"]
over = [(k, v, r) for k, v, r in rows if r["draft forwards"] == r["depth"] + 1]
if over:
    k, v, r = over[0]
    t, _ = grow(**{**FIXED.get(k, {}), k: v})
    deepest = [i for i in range(len(t)) if t.depths[i] == t.depth]
    ran = [i for i in deepest if t.confidences[i] is not None]   # c(u) is known only where the draft ran
    cut = pd.Series([p.reason for p in t.pruned if p.parent in ran]).value_counts().to_dict()
    assert ran and cut and not any(t.parents[i] in ran for i in range(len(t)))  # ran there, kept nothing
    display(Markdown(
        f"One draft forward per level the draft ran on: at {SYMBOL[k]} = {v:g} the tree has depth {r['depth']} "
        f"but took {r['draft forwards']} forwards. The last one ran on "
        + (f"the one node at depth {t.depth}" if len(deepest) == 1 else
           f"{len(ran)} of the {len(deepest)} nodes at depth {t.depth}")
        + f" (c(u) = {', '.join(f'{t.confidences[i]:.2f}' for i in ran)}), and every child it "
        f"proposed there was pruned ({', '.join(f'{n} by {SYMBOL.get(w, w)}' for w, n in cut.items())}), so "
        "the tree gained no level for it."))

# %% [markdown]
# ## The trade-off, plotted
#
# Every point is one re-grown tree: verified nodes (what the target pays for) against accepted length
# (what it gains), one panel per knob, each point labelled with the knob's value. Good settings sit
# top-left: the ℓ a knob buys, at the fewest nodes. Remember this is *one* iteration of *one* prompt —
# **05** measures averages over many.

# %% tags=["nbval-ignore-output"]
live_moving = [k for k, df in tables.items() if df["accepted ℓ"].nunique() > 1]
gain = {k: (int(df["accepted ℓ"].min()), int(df["accepted ℓ"].max()), int(df["nodes"].min()), int(df["nodes"].max()))
        for k, df in tables.items()}
assert len(live_moving) >= 5, live_moving  # the panels below show a trade-off, not a flat line
display(Markdown("ℓ moved with " + ", ".join(
    f"**{SYMBOL[k]}** ({gain[k][0]} → {gain[k][1]} over {gain[k][2]}–{gain[k][3]} nodes)" for k in live_moving)
    + "; it stayed at " + ", ".join(f"**{SYMBOL[k]}**: ℓ = {gain[k][1]}" for k in tables if k not in live_moving)
    + " (the sentences under each table say why)."))

# %% tags=["nbval-ignore-output"]
import plotly.graph_objects as go

from dynatree_viz.core.style import plot_symbol
from dynatree_viz.views.knob_sweep import knob_sweep_figure


def sweep_points(name):
    """(nodes, ℓ, label) per distinct tree: values that grew the same tree share one point and one
    label "0.7, 0.9, 0.99", not three overprinted."""
    df = tables[name].reset_index()
    groups = df.groupby(["nodes", "accepted ℓ"], sort=False)[name].apply(lambda v: ", ".join(f"{x:g}" for x in v))
    return [(int(n), int(ell), label) for (n, ell), label in groups.items()]


knob_fig = knob_sweep_figure({SYMBOL[k]: sweep_points(k) for k in tables},
                             title="nodes paid (x) against ℓ gained (y), one knob per panel; "
                                   "each label (on a line to its point): the knob's values that grew that tree")
knob_fig

# %% [markdown]
# And a 2-D sweep of the two parameters the history adapter tunes online (**04**): D0 and τ_h.

# %% tags=["nbval-ignore-output"]
from plotly.subplots import make_subplots

d0s, tau_hs = [1, 2, 3, 4, 5], [0.5, 0.7, 0.9, 0.99]
grid = [[grow(d0=d, tau_h=h)[1] for d in d0s] for h in tau_hs]
fig = make_subplots(rows=1, cols=2, subplot_titles=("drafted nodes verified (paid; root not counted)", "accepted ℓ (gained)"))
for k, key in enumerate(["nodes", "accepted ℓ"]):
    fig.add_trace(go.Heatmap(z=[[c[key] for c in row] for row in grid], x=[str(d) for d in d0s],
                             y=[str(h) for h in tau_hs], coloraxis=f"coloraxis{k + 1}", texttemplate="%{z}"),
                  row=1, col=k + 1)
fig.update_layout(template="plotly_white", height=400, coloraxis=dict(colorscale="Blues", showscale=False),
                  coloraxis2=dict(colorscale="Greens", showscale=False), margin=dict(t=90),
                  title=dict(text=f"The chosen state's tree under D0 × {plot_symbol('τ_h')}: nodes paid (left) and ℓ gained (right)",
                             x=0.01))
fig.update_xaxes(title_text="D0")
fig.update_yaxes(title_text=plot_symbol("τ_h"), col=1)
fig

# %%
print("sweep cells:", sum(len(row) for row in grid))
ells = {c["accepted ℓ"] for row in grid for c in row}
assert len(ells) > 1, ells  # the ℓ map is not flat
print(f"ℓ over the grid: {min(ells)} to {max(ells)}; nodes: {min(c['nodes'] for row in grid for c in row)} to "
      f"{max(c['nodes'] for row in grid for c in row)}")
print("within each row, a larger D0 never shrinks the tree:",
      all(a["nodes"] <= b["nodes"] for row in grid for a, b in zip(row, row[1:])))

# %% [markdown]
# The τ_h = 0.5 row is the odd one out. The next cell finds where its accepted walk ends and says why, from
# the two trees (τ_h = 0.5 and the next value tried).

# %% tags=["nbval-ignore-output"]
def walk(tau_h):
    t, argmax = session.regrow(base.replace(tau_h=tau_h).growth_rule())
    return t, argmax, t.greedy_path(argmax)[0]


lo, hi = tau_hs[0], tau_hs[1]
t_lo, arg_lo, path_lo = walk(lo)
t_hi, arg_hi, path_hi = walk(hi)
u = path_lo[-1] if path_lo else 0                  # where the τ_h = 0.5 walk ended
u_hi = next(j for j in range(len(t_hi)) if t_hi.token_path(j) == t_lo.token_path(u))  # the same node
c, target = t_lo.confidences[u], arg_lo[u]
rank = t_lo.topk_tokens[u].index(target) + 1 if target in t_lo.topk_tokens[u] else None
assert c is not None and lo <= c < hi and t_lo.branching[u] < t_hi.branching[u_hi] and rank and rank > 1
name = lambda t, i: dv.core.style.visible_token(session.token_text(t.tokens[i]))
Markdown(
    f"**Why τ_h = {lo:g} collapses the tree.** After *{name(t_lo, u)}* (depth {t_lo.depths[u]}) the draft's "
    f"confidence is c(u) = {c:.2f}. At τ_h = {lo:g} that counts as sure (c(u) ≥ τ_h), so u gets "
    f"B_min = {t_lo.branching[u]} child, the draft's first choice "
    f"*{dv.core.style.visible_token(session.token_text(t_lo.topk_tokens[u][0]))}*; the target chose "
    f"*{dv.core.style.visible_token(session.token_text(target))}*, the draft's choice number {rank}, so the walk ends there "
    f"with ℓ = {len(path_lo)} whatever D0 says; the whole tree has {t_lo.num_drafted} drafted nodes "
    f"(stop reasons: {pd.Series(t_lo.stop_reasons[1:]).value_counts().to_dict()}). From τ_h = {hi:g}, "
    f"c(u) < τ_h gives u B(u) = {t_hi.branching[u_hi]} children, the target's token among them, and "
    f"ℓ = {len(path_hi)}.")

# %% [markdown]
# ## What to try next
#
# * A harder prompt (e.g. a list of random numbers): watch the confidence fall and the tree widen.
# * Toggle *dynamic breadth* / *dynamic depth* in the explorer: with both off you get the paper's
#   fixed backbone.
# * `DynaTreeConfig.cpu()` as `base`: the CPU preset's trees, and why small budgets win on a CPU.
# * Replay other iterations: `dv.explore(res, iteration=k)`.
