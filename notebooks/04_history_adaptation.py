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
# # 04 · History adaptation: tuning D0 and τ_h while decoding
#
# **What you will learn**
#
# * what DynaTree's sliding-window history adapter does: after every iteration it records the
#   acceptance a_r = (accepted tokens) / (tree depth), averages the last W values (ā), and nudges
#   two knobs towards a target acceptance a*:
#
#   D0 ← clip(D0 + η_D · (ā − a*) · D_max, 1, D_max − 1) — deeper trees when guesses are good,
#   τ_h ← clip(τ_h − η_h · (ā − a*), τ_l + 0.01, 0.99) — narrower trees when guesses are good;
# * how to read D0 and τ_h against the window acceptance over a long generation;
# * the effect of switching adaptation off (the paper's ablation);
# * how to carry the adapter's state from one prompt to the next.

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
# PAIR "default": the embedded pair; "tiny-llama": random weights for development (nonsense text, every check holds)
device = "cuda" if torch.cuda.is_available() else "cpu"
pair = ModelPair.named(PAIR, device=device)   # or drafter="model" / "feature" / "feature+lookup"
print(f"target: {pair.target_name}\ndraft:  {pair.draft_name} ({pair.drafter_kind} drafter)\n"
      f"device: {pair.device} (linear kernel: {pair.linear_kernel})")

# %%
prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle."
N = 200
full_cfg = DynaTreeConfig.ablation("full")          # paper settings, history adaptation on
off_cfg = DynaTreeConfig.ablation("breadth_depth")  # the same, adaptation off
h = full_cfg.history
print(f"W = {h.window}, a* = {h.target_acceptance}, eta_D = {h.eta_d}, eta_h = {h.eta_h}, "
      f"start: D0 = {full_cfg.d0}, tau_h = {full_cfg.tau_h}")

# %%
full = generate(pair, prompt, "dynatree", full_cfg, max_new_tokens=N, ignore_eos=True, trace=True)
off = generate(pair, prompt, "dynatree", off_cfg, max_new_tokens=N, ignore_eos=True, trace=True)
ar = generate(pair, prompt, "ar", max_new_tokens=N, ignore_eos=True)
print("all three produce the same tokens:", full.tokens == off.tokens == ar.tokens)

# %% [markdown]
# ## The adapter at work
#
# Each `IterationRecord` keeps the adapter state before and after the iteration (`history_before`,
# `history_after`: D0, its rounded value used by the depth gate, τ_h, the window and its mean).

# %% tags=["nbval-ignore-output"]
from plotly.subplots import make_subplots
import plotly.graph_objects as go

recs = list(full.trace)
x = [r.index for r in recs]
fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, specs=[[{}], [{"secondary_y": True}]],
                    subplot_titles=("acceptance a_r and window mean ā", "D0 and τ_h (before each iteration)"))
fig.add_trace(go.Scatter(x=x, y=[r.acceptance for r in recs], mode="markers", name="a_r", marker_color="#888"), row=1, col=1)
fig.add_trace(go.Scatter(x=x, y=[r.history_after["window_mean"] for r in recs], name="ā", line_color="#1b7837"), row=1, col=1)
fig.add_hline(y=h.target_acceptance, line_dash="dot", annotation_text="a*", row=1, col=1)
fig.add_trace(go.Scatter(x=x, y=[r.history_before["d0"] for r in recs], name="D0 (real)", line_color="#2166ac"), row=2, col=1)
fig.add_trace(go.Scatter(x=x, y=[r.history_before["d0_effective"] for r in recs], name="D0 used", line_shape="hv",
                         line=dict(color="#2166ac", dash="dot")), row=2, col=1)
fig.add_trace(go.Scatter(x=x, y=[r.history_before["tau_h"] for r in recs], name="τ_h", line_color="#b2182b"),
              row=2, col=1, secondary_y=True)
fig.update_layout(template="plotly_white", height=600, legend=dict(orientation="h", y=-0.15))
fig.update_xaxes(title_text="iteration", row=2, col=1)
fig.update_yaxes(title_text="acceptance", range=[-0.05, 1.05], row=1, col=1)
fig.update_yaxes(title_text="D0 (depth)", dtick=1, row=2, col=1, secondary_y=False)
fig.update_yaxes(title_text="τ_h", tickformat=".2f", nticks=5, showgrid=False, row=2, col=1, secondary_y=True)
fig

# %% [markdown]
# The update rule, re-computed by hand from the recorded states — and a check that the depth gate
# really used the adapter's D0 in every iteration:

# %%
ok, chained, gate_ok = True, True, True
for prev, r in zip([None] + recs[:-1], recs):
    b, a = r.history_before, r.history_after
    chained &= prev is None or prev.history_after == b
    if r.acceptance is None:  # nothing drafted (the last, 1-token iteration): no evidence, no update
        ok &= a == b
        continue
    window = (b["window"] + [r.acceptance])[-h.window:]
    err = sum(window) / len(window) - h.target_acceptance
    d0 = min(max(b["d0"] + h.eta_d * err * full_cfg.d_max, 1.0), full_cfg.d_max - 1.0)
    tau_h = min(max(b["tau_h"] - h.eta_h * err, full_cfg.tau_l + 0.01), 0.99)
    ok &= math.isclose(a["d0"], d0, abs_tol=1e-9) and math.isclose(a["tau_h"], tau_h, abs_tol=1e-9) and a["window"] == window
    gate_ok &= all(r.tree.depths[i] >= b["d0_effective"] for i, s in enumerate(r.tree.stop_reasons) if s == "depth_gate")
print("each state is the previous one's successor:", chained)
print("D0 and tau_h follow the update rule:", ok)
print("the depth gate used the adapter's D0:", gate_ok)
print("adaptation off records no history:", all(r.history_before is None for r in off.trace))

# %% tags=["nbval-ignore-output"]
dv.timeline_figure(full.trace, title="the whole run: tokens, tree sizes, acceptance, adapter, time")


# %% [markdown]
# ## Adaptation on vs off
#
# Same tokens either way; the difference is in the trees: how many nodes were verified per iteration
# and how many tokens each iteration committed. (On a CPU, throughput is noisy — compare L̄ and tree
# size first.)

# %% tags=["nbval-ignore-output"]
def row(name, r):
    m = r.metrics
    return {"run": name, "L̄": m.tokens_per_iteration, "ℓ̄": m.mean_accepted_length, "acceptance": m.acceptance_rate,
            "mean tree size": m.mean_tree_size, "iterations": m.iterations, "target forwards": m.target_forwards,
            "draft forwards": m.draft_forwards, "tokens/s": m.tokens_per_s}

pd.DataFrame([row("AR", ar), row("adaptation off", off), row("adaptation on", full)]).set_index("run")

# %% tags=["nbval-ignore-output"]
l_on, l_off = full.metrics.tokens_per_iteration, off.metrics.tokens_per_iteration
a_mean = float(np.mean([r.acceptance for r in full.trace]))
d0_used = float(np.mean([r.history_before["d0_effective"] for r in full.trace]))
tau_mean = float(np.mean([r.history_before["tau_h"] for r in full.trace]))
side = "below" if a_mean < h.target_acceptance else "above"
moved = ("lowered D0 (shallower trees) and raised τ_h (wider ones)" if side == "below"
         else "raised D0 (deeper trees) and lowered τ_h (narrower ones)")
display(Markdown(
    f"Here adaptation {'helped' if l_on > l_off else 'did not help'}: L̄ **{l_on:.2f}** on against **{l_off:.2f}** off. "
    f"The rule steers the *acceptance rate* toward a* = {h.target_acceptance}, not L̄: this run's mean acceptance "
    f"was {a_mean:.2f}, {side} a*, so it {moved}: D0 used averaged {d0_used:.1f} (start {full_cfg.d0}), τ_h "
    f"{tau_mean:.2f} (start {full_cfg.tau_h})."
    + (" A shallower tree wastes fewer nodes but also caps how far a good guess can run, which costs L̄ on a "
       "prompt where long paths do get accepted." if l_on <= l_off and side == "below" else "")))

# %% [markdown]
# ## Carrying the state across prompts
#
# The paper resets the adapter for every prompt. Here the final state of one generation
# (`result.history_state`) can seed the next (`history=`), so what was learned about this model pair is
# kept. The state is plain data (`to_dict` / `from_dict`), so it can be saved between sessions.

# %%
import json

from dynatree_core import HistoryState

prompts = ["The capital of France is", "Photosynthesis is the process by which plants",
           "A binary search tree is a data structure that"]
carried, state = [], None
for p in prompts:
    r = generate(pair, p, "dynatree", full_cfg, max_new_tokens=48, ignore_eos=True, trace=True, history=state)
    carried.append(r)
    state = r.history_state
fresh = [generate(pair, p, "dynatree", full_cfg, max_new_tokens=48, ignore_eos=True, trace=True) for p in prompts]

print("prompt 2 starts where prompt 1 ended:", carried[1].trace[0].history_before == carried[0].history_state.to_dict())
print("without carrying, every prompt starts from the config:",
      all(r.trace[0].history_before["d0"] == full_cfg.d0 for r in fresh))
print("carried or not, the tokens are the same:", all(a.tokens == b.tokens for a, b in zip(carried, fresh)))
print("the state survives JSON:", HistoryState.from_dict(json.loads(json.dumps(state.to_dict()))) == state)

# %% tags=["nbval-ignore-output"]
pd.DataFrame([{"prompt": i + 1, "start D0 (carried)": c.trace[0].history_before["d0"],
               "start τ_h (carried)": c.trace[0].history_before["tau_h"],
               "L̄ carried": c.metrics.tokens_per_iteration, "L̄ fresh": f.metrics.tokens_per_iteration}
              for i, (c, f) in enumerate(zip(carried, fresh))]).set_index("prompt")

# %% [markdown]
# ## What to try next
#
# * Change the adapter: `DynaTreeConfig.ablation("full", history=HistoryConfig(window=5, target_acceptance=0.5, eta_d=0.1))`.
# * A harder prompt (code, numbers) lowers the acceptance: watch D0 fall and τ_h rise.
# * `dv.show(full.trace)` steps through the run with the adapter panel of the timeline.
# * **05** measures the ablation (fixed backbone → + breadth & depth → + history) over many prompts.
