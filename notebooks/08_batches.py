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
# # 08 · Several prompts at once
#
# **What you will learn**
#
# * how several prompts decode **together**: every row grows its own tree, and the rows share ONE
#   target forward per iteration and ONE draft forward per tree level, each row padded to the widest;
# * that every row is still exactly its own decode (checked against one prompt at a time);
# * what one **batch iteration** looks like: the rows' trees side by side, what each row verified (n_b),
#   what the padding cost (W − n_b) and what each accepted (ℓ_b);
# * **where speculation stops paying** on this machine: batching and speculation spend the same spare
#   compute, so DynaTree's gain over AR shrinks as the batch grows;
# * what the **shared node budget** does about it: it sizes the batch's verify from the measured cost
#   c(B, W), and sits speculation out when AR steps are measured faster.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import time

import plotly.graph_objects as go
from IPython.display import Markdown, display

import dynatree_viz as dv
from dynatree_core import DynaTreeConfig, generate, iterate

# %% [markdown]
# A batch drafts with the pair's draft for every row at once: here the default pair's **feature draft**
# with prompt lookup mixed in (notebook 01 says what the target and the drafts are). Each draft level runs
# as one forward for all rows, and the draft reads the target's hidden states from the batch's own
# forwards, row by row.

# %% tags=["nbval-ignore-output"]
pair = dv.setup_notebook(PAIR)

# %% [markdown]
# ## 1 · Four prompts, one loop
#
# `generate(pair, [prompt, ...])` takes a list of prompts and returns one result per prompt. Each row
# keeps its own rule (its history, its tokens left); the models run once per step for all rows.

# %%
prompts = ["The capital of France is", "Photosynthesis is the process by which green plants",
           "Write a short poem about the sea:", "def fibonacci(n):"]
T = [16, 28, 22, 24]   # tokens per row: rows finish at different iterations and leave the batch
config = DynaTreeConfig.cpu()
run = iterate(pair, prompts, "dynatree", config, max_new_tokens=T, trace=True, ignore_eos=True)
batch_iterations = list(run)
rows = run.finish()
alone = [generate(pair, p, "dynatree", config, max_new_tokens=t, ignore_eos=True) for p, t in zip(prompts, T)]
ar = [generate(pair, p, "ar", max_new_tokens=t, ignore_eos=True) for p, t in zip(prompts, T)]
print("every row equals its prompt decoded alone:", [r.tokens for r in rows] == [a.tokens for a in alone])
print("and AR's tokens (greedy, exact):", [r.tokens for r in rows] == [a.tokens for a in ar])
one_at_a_time = sum(a.metrics.iterations for a in alone)
print("target forwards: one per batch iteration plus the prefill:", run.target_forwards == len(batch_iterations) + 1)
print("fewer target forwards than one prompt at a time:", run.target_forwards < one_at_a_time + len(prompts))

# %% tags=["nbval-ignore-output"]
for p, r in zip(prompts, rows):
    print(f"{p!r} →{r.text!r}  ({r.metrics.iterations} iterations)")
display(Markdown(
    f"The batch ran **{len(batch_iterations)}** iterations: {run.target_forwards} target forwards in all (the "
    f"prefill included) and {run.draft_forwards} draft forwards, where the four prompts one at a time take "
    f"{one_at_a_time} iterations and as many verify forwards. A row that finished left the batch: its last "
    f"iteration was {max(len(r.trace) for r in rows) - min(len(r.trace) for r in rows)} iterations before the "
    "slowest row's."))

# %% [markdown]
# ## 2 · One batch iteration
#
# Every active row's tree is verified in the same target forward. Its tokens go in as one row of a
# rectangle W wide: the root and the row's n_b − 1 drafted nodes, then W − n_b padding slots that see
# only themselves (computed, and thrown away). Each row's positions are its own (the row's committed
# length plus the node's depth), never its column in the rectangle. The figure picks the iteration
# whose padding costs the most slots, where rows differ most.

# %%
traces = [r.trace for r in rows]
summary = dv.batch_summary(traces)
wasted = [s["W"] * len(s["active"]) - s["sum_n_b"] for s in summary]
shown = max(range(len(summary)), key=lambda i: (wasted[i], -i))
s = summary[shown]
print("every row is padded to the widest row's n_b:", all(x["W"] == max(x["n_b"].values()) for x in summary))
print("this iteration pads some row:", wasted[shown] > 0)

# %% tags=["nbval-ignore-output"]
dv.batch_figure(traces, shown)

# %% tags=["nbval-ignore-output"]
widest = max(s["n_b"], key=s["n_b"].get)
display(Markdown(
    f"In batch iteration {shown} the widest tree is row {widest}'s (n = {s['n_b'][widest]}), so every row is "
    f"verified {s['W']} wide: {s['sum_n_b']} of the {s['W'] * len(s['active'])} slots hold real nodes "
    f"(padding efficiency {s['efficiency']:.0%}). The rows accepted "
    + ", ".join(f"ℓ = {s['ell_b'][b]} (row {b})" for b in s["active"]) + "."))

# %% [markdown]
# Step through every batch iteration (the PNG shows the one named above):

# %% tags=["nbval-ignore-output"]
dv.batch_stepper(traces, start=shown)

# %% [markdown]
# ## 3 · Where speculation stops paying
#
# On a GPU a forward over many tokens costs about what one token costs, so a batch and a tree both ride
# for free. On this CPU the verify's cost grows with the tokens it holds, B rows times W each, while AR's
# cost per token *falls* as B grows (one forward serves B rows). Speculation and batching spend the same
# spare compute. Below, the same prompts decode as batches of B = 1, 2 and 4, with AR, DynaTree, and
# DynaTree under the batch's shared node budget (`budget=True`), all in one run: two interleaved rounds,
# each cell's faster one kept.

# %% tags=["nbval-ignore-output"]
sizes = [1, 2, 4]
methods = [("AR", "ar", None), ("DynaTree", "dynatree", None), ("DynaTree + budget", "dynatree", True)]
tokens = 32
order = [1, 2, 0, 3]  # the passage first: B = 1 decodes it alone
batch_prompts = [prompts[i] for i in order]
speed = {name: [0.0] * len(sizes) for name, _, _ in methods}
same, ar_tokens, budgets = True, {}, {}
for b in sizes:  # untimed: warm the kernels, measure c(B, W) (cached) and each B's budget's first rates
    warm = iterate(pair, batch_prompts[:b], "dynatree", config, max_new_tokens=8, ignore_eos=True, budget=True)
    warm.finish()
    budgets[b] = warm.budget  # passed on from run to run: it keeps what it measured
for rounds in range(2):  # interleaved rounds; each cell keeps its best (a burst of load elsewhere only slows)
    for j, b in enumerate(sizes):
        ref = None
        for name, method, budget in methods:
            t0 = time.perf_counter()
            got = generate(pair, batch_prompts[:b], method, config if method != "ar" else None,
                           max_new_tokens=tokens, ignore_eos=True, budget=budgets[b] if budget else None)
            speed[name][j] = max(speed[name][j], b * tokens / (time.perf_counter() - t0))
            ref = ref or [r.tokens for r in got]
            same = same and [r.tokens for r in got] == ref
        ar_tokens[b] = ref
ratio = {name: [v / a for v, a in zip(speed[name], speed["AR"])] for name in speed}
shown_ratios = [v for name in speed if name != "AR" for v in ratio[name]]
above = [a >= b for a, b in zip(ratio["DynaTree"], ratio["DynaTree + budget"])]  # the higher one's label on top
fig = go.Figure([go.Scatter(x=sizes, y=ratio[name], name=name, mode="lines+markers+text",
                            text=[f"{v:.2f}×" for v in ratio[name]],
                            textposition=["top center" if up == first else "bottom center" for up in above])
                 for name, first in (("DynaTree", True), ("DynaTree + budget", False))])
# AR is the 1.0 line every ratio is taken against; room above and below for the labels
fig.add_trace(go.Scatter(x=sizes, y=[1.0] * len(sizes), name="batched AR (same B, same run)", mode="lines",
                         line=dict(dash="dot", color="black")))
fig.update_layout(template="plotly_white", title="DynaTree's speed over batched AR as the batch grows",
                  xaxis_title="batch size B (prompts decoded together)", yaxis_title="tokens/s ÷ batched AR's",
                  xaxis=dict(tickvals=sizes, type="log"), height=380,
                  yaxis=dict(range=[min(shown_ratios + [1.0]) - 0.15, max(shown_ratios + [1.0]) + 0.15]))
fig

# %%
print("every method's rows are the same tokens at every B:", same)

# %% tags=["nbval-ignore-output"]
dt, bu = ratio["DynaTree"], ratio["DynaTree + budget"]
display(Markdown(
    f"At B = 1 DynaTree is **{dt[0]:.2f}×** AR. At B = {sizes[-1]} it is **{dt[-1]:.2f}×** batched AR: AR went "
    f"from "
    f"{speed['AR'][0]:.1f} to {speed['AR'][-1]:.1f} tokens/s by batching alone, and the trees "
    f"{'no longer pay for their verify and draft levels' if dt[-1] < 1 else 'still pay, by less'}. With the "
    f"shared budget DynaTree is {', '.join(f'{x:.2f}×' for x in bu)} batched AR at B = "
    f"{', '.join(map(str, sizes))}. Each B's budget keeps what it measured from the warm-up on (one run's "
    "`run.budget` passed to the next), so where AR steps are faster it sits speculation out and only probes it "
    "now and then" + (", and each probe where speculation loses costs a slow iteration" if min(bu) < 1 else "")
    + ". One run on a shared machine: a few percent either way is noise (docs/bench/2026-12-07-batch-priced "
    "repeats it with 64 tokens per row, three rounds, B up to 16)."))

# %% [markdown]
# ## 4 · What the shared budget chose
#
# After the rows' trees grow, the budget keeps each row's most probable nodes up to a common width W*,
# the W that maximises (B + s·Σ kept p(u)) / (c(B, W) + the draft levels' cost), with c(B, W) measured on
# this machine and scaled to what this run's forwards take (their context is not the calibration's),
# and s the acceptance measured so far. Whether an iteration drafts at all follows what the
# run measured: when its AR steps commit more tokens per second than its drafting iterations, the batch
# sits out (no draft forward at all) and probes again after 1, 2, 4, … iterations. A draft that sat out
# catches up exactly: its next level 0 reads every token committed meanwhile.
#
# A batch here waits for its last row, so a row's tokens do not all count alike: in Σ p(u) and in the
# measured rates each row weighs what its tokens save, its own share of every later iteration plus, by its
# chance of being the last to finish, the whole batch's share. Rows level weigh 1 each; a row far ahead
# weighs less (each record keeps them: `batch["budget"]["weights"]`).

# %%
b = sizes[-1]
budget_run = iterate(pair, batch_prompts[:b], "dynatree", config, max_new_tokens=tokens, ignore_eos=True,
                     budget=True, trace=True)
steps = list(budget_run)
budget_rows = budget_run.finish()
choices = [next(iter(i.records.values())).batch["budget"] for i in steps]
drafted = [c["drafted"] for c in choices]
print("the budget's rows are AR's tokens:", [r.tokens for r in budget_rows] == ar_tokens[b])
print("no draft forward in an iteration that sat out:",
      all(i.draft_forwards == 0 for i, d in zip(steps, drafted) if not d))

# %% tags=["nbval-ignore-output"]
widths = [c["width"] for c in choices if c["drafted"]]
lightest = min(min(c["weights"]) for c in choices)
level = sum(1 for c in choices if max(c["weights"]) == min(c["weights"]))
display(Markdown(
    f"At B = {b} the budget drafted in {sum(drafted)} of {len(steps)} iterations and sat out the other "
    f"{len(steps) - sum(drafted)}; where it drafted it verified W* = {', '.join(map(str, widths)) or 'none'}. "
    "Where AR steps are faster, DynaTree under the budget is AR plus a probe now and then. "
    f"The rows weighed alike in {level} of {len(steps)} iterations; the lightest weight a row had was "
    f"{lightest:.2f}."))

# %% [markdown]
# ## What to try next
#
# * `dynatree bench --batch-size 1,2,4,8 --dataset prompts,wikitext2` measures the curve
#   with repeats, every row checked against batched AR (docs/engine.md, "Several prompts at once").
# * Give the rows different seeds under sampling: `generate(pair, prompts, "dynatree", temperature=0.7,
#   seed=[0, 1, 2, 3])`: each row is seeded AR with its own seed.
# * Save a batch's traces (`r.trace.to_json(...)`) and draw them later with `dv.batch_figure`: no model needed.
