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
# * the effect of switching adaptation off (the paper's ablation), compared by the work each run did;
# * how to carry the adapter's state from one prompt to the next, and what that did here.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import math

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

import dynatree_viz as dv
from dynatree_core import DynaTreeConfig, generate

# %% [markdown]
# The model pair is the one notebook 01 opens with (its first section says what the target and the
# draft are); `dv.setup_notebook(PAIR)` loads it and turns on the figures' static fallbacks.

# %% tags=["nbval-ignore-output"]
pair = dv.setup_notebook(PAIR)   # notebook 01's opening says what this pair is

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

from dynatree_viz.views.timeline import A_R, TAU_H, add_acceptance_panel, add_adapter_panel, round_ticks

recs = list(full.trace)
fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, specs=[[{}], [{"secondary_y": True}]],
                    subplot_titles=(f"acceptance {A_R} and window mean ā", f"D0 and {TAU_H} (before each iteration)"))
add_acceptance_panel(fig, full.trace, 1)   # the timeline's own panels: one quantity, one colour, everywhere
add_adapter_panel(fig, full.trace, 2)
taus = [r.history_before["tau_h"] for r in recs]
fig.update_layout(template="plotly_white", height=640, legend=dict(orientation="h", y=-0.15))
fig.update_xaxes(title_text="iteration", row=2, col=1)
fig.update_yaxes(title_text="acceptance", range=[-0.05, 1.05], row=1, col=1)
fig.update_yaxes(title_text="D0 (depth)", dtick=1, row=2, col=1, secondary_y=False)
# round ticks (0.90, 0.95, ...) that bracket the run, not Plotly's odd ones rounded by the format
fig.update_yaxes(title_text=TAU_H, showgrid=False, row=2, col=1, secondary_y=True, **round_ticks(taus))
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
# **The time panel measures this machine as much as the decoder.** A notebook's timings are taken
# while whatever else runs on the computer competes for its cores. To tell the two apart, price every
# iteration with the pair's *cost curve* (`calibrate.cost_model`, measured once per machine with each size
# timed round-robin, so that a burst of load elsewhere cannot price one size high; notebook 06 shows it):
# one draft level costs `draft_s`, verifying n tokens c(n). An iteration that took many times its price
# did no more work than its price says; the rest of its time the decoder spent waiting for a core.

# %% tags=["nbval-ignore-output"]
import os

from dynatree_core.engine import calibrate

cost = calibrate.cost_model(pair)   # cached after the first time on this machine


def priced_s(rec):
    """What one iteration's work costs on the curve: its draft levels and one verify of its tree."""
    n = min(rec.num_nodes + 1, len(cost.verify_s))  # past the curve: priced at its last size (a lower bound)
    return cost.iteration_cost(n, rec.draft_forwards)


def measured_s(rec):
    return sum(rec.timings.values())


ratio = [measured_s(r) / priced_s(r) for r in recs]
slow = [r for r, q in zip(recs, ratio) if q > 3]
worst = max(recs, key=lambda r: measured_s(r) - priced_s(r))
load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
busy = load > (os.cpu_count() or 1)
display(Markdown(
    f"Median iteration: **{1e3 * np.median([measured_s(r) for r in recs]):.0f} ms** measured, "
    f"{1e3 * np.median([priced_s(r) for r in recs]):.0f} ms priced. **{len(slow)} of {len(recs)}** iterations took "
    f"more than 3× their price; the worst, iteration {worst.index} ({worst.num_nodes} nodes, {worst.draft_forwards} draft "
    f"levels), took {1e3 * measured_s(worst):.0f} ms for {1e3 * priced_s(worst):.0f} ms of work. "
    f"When this cell ran, the machine's load average was {load:.1f} on {os.cpu_count()} cores"
    + (": more processes wanted a core than there were cores, and the spikes are the time the decoder waited for one, "
       "not work it did. " if busy and slow else ". ")
    + "So below, the runs are compared by what they *did* (tokens per iteration, forwards) and by that work priced "
    "on the curve, not by their wall-clock speed."))


# %% [markdown]
# ## Adaptation on vs off
#
# Same tokens either way; the difference is in the trees: how deep and how large they grew, how many
# tokens each iteration committed, and how many draft and target forwards that took. "priced ms/token"
# is that work priced on the cost curve above (AR: one verify of one token per token).

# %% tags=["nbval-ignore-output"]
def priced_per_token(r):
    its = list(r.trace) if r.trace is not None else []
    total = sum(priced_s(rec) for rec in its) if its else r.metrics.new_tokens * cost.iteration_cost(1, 0)
    return 1e3 * total / r.metrics.new_tokens


def row(name, r):
    m = r.metrics
    depth = np.mean([rec.tree.depth for rec in r.trace]) if r.trace is not None else float("nan")
    return {"run": name, "L̄": m.tokens_per_iteration, "ℓ̄": m.mean_accepted_length, "acceptance": m.acceptance_rate,
            "mean tree size": m.mean_tree_size, "mean depth": depth, "iterations": m.iterations,
            "target forwards": m.target_forwards, "draft forwards": m.draft_forwards,
            "priced ms/token": priced_per_token(r)}


compare = pd.DataFrame([row("AR", ar), row("adaptation off", off), row("adaptation on", full)]).set_index("run")
compare

# %% tags=["nbval-ignore-output"]
def more_or_fewer(a, b):
    return f"more than {int(b)}" if a > b else f"fewer than {int(b)}" if a < b else f"as many as {int(b)}"


on, of = compare.loc["adaptation on"], compare.loc["adaptation off"]
a_mean = full.metrics.acceptance_rate
d0_used = float(np.mean([r.history_before["d0_effective"] for r in full.trace]))
end = full.trace[-1].history_after
side = "below" if a_mean < h.target_acceptance else "above"
d0_word = ("lowered D0: shallower trees, since past D0 a node grows only if p(u) ≥ ρ_deep = "
           f"{full_cfg.rho_deep}" if end["d0"] < full_cfg.d0 else "raised D0: deeper trees")
tau_word = ("raised τ_h: wider trees, since fewer nodes count as confident (c(u) ≥ τ_h, "
            f"B_min = {full_cfg.b_min} child) and more get B_mid = {full_cfg.b_mid}" if end["tau_h"] > full_cfg.tau_h
            else "lowered τ_h: narrower trees")
cheaper = "cheaper" if on["priced ms/token"] < of["priced ms/token"] else "dearer"
display(Markdown(
    f"The rule steers the *acceptance* toward a* = {h.target_acceptance}, not L̄. This run's acceptance was "
    f"**{a_mean:.2f}**, {side} a*, and the adapter {d0_word} (D0 {full_cfg.d0} → {end['d0']:.2f}; the depth gate's "
    f"D0 averaged {d0_used:.1f}), and {tau_word} (τ_h {full_cfg.tau_h} → {end['tau_h']:.2f}).\n\n"
    f"What that did here: mean depth {on['mean depth']:.2f} on against {of['mean depth']:.2f} off, "
    f"{on['mean tree size']:.2f} nodes against {of['mean tree size']:.2f}, and L̄ **{on['L̄']:.2f}** against "
    f"**{of['L̄']:.2f}**: {int(on['iterations'])} iterations instead of {int(of['iterations'])}, so "
    f"{int(on['target forwards'])} target forwards ({more_or_fewer(on['target forwards'], of['target forwards'])}) "
    f"and {int(on['draft forwards'])} draft forwards ({more_or_fewer(on['draft forwards'], of['draft forwards'])}). "
    f"On this machine one target forward over a root and one node costs as much as "
    f"{cost.verify(2) / cost.draft_s:.1f} draft levels (c(2) = {1e3 * cost.verify(2):.1f} ms, one level "
    f"{1e3 * cost.draft_s:.1f} ms), and priced on the curve adaptation on "
    f"is **{cheaper}**: {on['priced ms/token']:.1f} against {of['priced ms/token']:.1f} ms per token (AR "
    f"{compare.loc['AR', 'priced ms/token']:.1f}). Its acceptance was {on['acceptance']:.2f} against "
    f"{of['acceptance']:.2f} off"
    + (": a shallow tree is accepted over a larger share of its depth, which is what the rule asks for, while "
       "each iteration commits fewer tokens." if on["acceptance"] > of["acceptance"] and on["L̄"] < of["L̄"] else ".")))

# %% [markdown]
# ## Carrying the state across prompts
#
# The adapter's final state of one run (`result.history_state`) can seed the next run (`history=`); it
# is plain data (`to_dict` / `from_dict`), so it can also be saved between sessions. The benchmark
# protocol uses exactly that, in the words stated once for notebooks 04 and 05:

# %% tags=["nbval-ignore-output"]
from dynatree_core.bench.protocol_statement import protocol_statement

display(Markdown(protocol_statement()))

# %% [markdown]
# Three short prompts, each decoded twice: once starting from the state the previous one left
# (carried), once from the config (fresh).

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
carry = pd.DataFrame([{"prompt": i + 1, "start D0 (carried)": c.trace[0].history_before["d0"],
                       "start τ_h (carried)": c.trace[0].history_before["tau_h"],
                       "end D0 (fresh)": f.history_state.d0,
                       "L̄ carried": c.metrics.tokens_per_iteration, "L̄ fresh": f.metrics.tokens_per_iteration,
                       "draft fwd/token carried": c.metrics.draft_forwards / c.metrics.new_tokens,
                       "draft fwd/token fresh": f.metrics.draft_forwards / f.metrics.new_tokens,
                       "priced ms/token carried": priced_per_token(c), "priced ms/token fresh": priced_per_token(f)}
                      for i, (c, f) in enumerate(zip(carried, fresh))]).set_index("prompt")
carry

# %% tags=["nbval-ignore-output"]
later = carry.iloc[1:]
step = h.eta_d * full_cfg.d_max  # D0 moves by at most η_D · |ā − a*| · D_max <= this per iteration
lower_l = bool((later["L̄ carried"] < later["L̄ fresh"]).all())
fewer_draft = bool((later["draft fwd/token carried"] < later["draft fwd/token fresh"]).all())
cheaper_c = bool((later["priced ms/token carried"] < later["priced ms/token fresh"]).all())
dearer_c = bool((later["priced ms/token carried"] > later["priced ms/token fresh"]).all())
verdict = ("cheaper per token for both" if cheaper_c else "dearer per token for both" if dearer_c
           else "cheaper for one and dearer for the other")
display(Markdown(
    (f"What is kept is what prompt 1 taught the adapter: this pair's acceptance ({carried[0].metrics.acceptance_rate:.2f}) "
     f"stays below a* = {h.target_acceptance}. " if carried[0].metrics.acceptance_rate < h.target_acceptance else "")
    + f"Prompts 2 and 3 start where the adapter had driven the knobs: D0 "
    f"{later['start D0 (carried)'].iloc[0]:.2f} and {later['start D0 (carried)'].iloc[1]:.2f} (its floor is 1), τ_h "
    f"{later['start τ_h (carried)'].iloc[0]:.2f} (its ceiling is 0.99). A fresh run starts again at D0 = {full_cfg.d0}, and "
    f"D0 moves by less than η_D · D_max = {step:.2f} per iteration; within 48 tokens the fresh runs end at "
    + " and ".join(f"D0 = {d:.2f} (prompt {p}" + (", the floor)" if d <= 1 + 1e-9 else ")")
                for p, d in later["end D0 (fresh)"].items())
    + (": fresh runs allow deeper trees than the carried ones from start to end.\n\n"
       if later["end D0 (fresh)"].min() > later["start D0 (carried)"].max() else ".\n\n")
    + ("Carrying therefore **lowered L̄** on prompts 2 and 3 "
       f"({', '.join(f'{c:.2f} against {f:.2f}' for c, f in zip(later['L̄ carried'], later['L̄ fresh']))}): "
       if lower_l else "On prompts 2 and 3, L̄ carried against fresh: "
       f"{', '.join(f'{c:.2f} against {f:.2f}' for c, f in zip(later['L̄ carried'], later['L̄ fresh']))}; ")
    + ("the shallower trees commit fewer tokens per iteration, and they also draft fewer levels per token "
       if fewer_draft else "draft forwards per token ")
    + f"({', '.join(f'{c:.2f} against {f:.2f}' for c, f in zip(later['draft fwd/token carried'], later['draft fwd/token fresh']))}). "
    f"Priced on the cost curve, carrying was {verdict} of the two prompts "
    f"({', '.join(f'{c:.1f} against {f:.1f} ms' for c, f in zip(later['priced ms/token carried'], later['priced ms/token fresh']))}). "
    "The adapter keeps what it learned; whether that helps depends on whether its target a* suits the pair and the "
    "machine, not on the carrying."))

# %% [markdown]
# ## What to try next
#
# * Change the adapter: `DynaTreeConfig.ablation("full", history=HistoryConfig(window=5, target_acceptance=0.5, eta_d=0.1))`.
# * A harder prompt (code, numbers) lowers the acceptance: watch D0 fall and τ_h rise.
# * `dv.show(full.trace)` steps through the run with the adapter panel of the timeline.
# * **05** measures the ablation (fixed backbone → + breadth & depth → + history) over many prompts.
