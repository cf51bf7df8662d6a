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
# # 01 · Quickstart: exact speculative decoding with DynaTree
#
# **What you will learn**
#
# * how to load the offline model pair and generate text with plain greedy decoding (AR) and with
#   DynaTree, in one call each;
# * that DynaTree's output is *token for token* the target model's greedy output — only the cost differs;
# * how to read the speed numbers and **L̄** (tokens committed per target forward);
# * how to open the trace of a run in the step-through viewer.
#
# Everything runs offline on a CPU in a minute or two.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import math

import pandas as pd
from IPython.display import HTML, Markdown, display

import dynatree_viz as dv
from dynatree_core import DynaTreeConfig, FixedTreeConfig, LinearConfig, ModelPair, generate

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
# PAIR "default": the embedded pair; "tiny-llama": random weights for development (nonsense text, every check holds).
# dv.setup_notebook stores figures as Plotly JSON plus a PNG (static pages show them too), pins torch's seed and
# loads ModelPair.named(PAIR) on the GPU if there is one: every notebook opens with it.
pair = dv.setup_notebook(PAIR)   # or draft="model" / "feature", drafter="feature+lookup"

# %% [markdown]
# ## Generate
#
# `generate(pair, prompt, method, config, max_new_tokens)` decodes greedily. `method` is one of
# `"ar"` (one target forward per token), `"linear"`, `"fixed_tree"` or `"dynatree"`.
# `ignore_eos=True` makes every run produce exactly `max_new_tokens` tokens, so runs compare fairly.

# %% tags=["nbval-ignore-output"]
# The paper's settings are tuned for a GPU; on a CPU the verify pass grows with the tree,
# so the CPU preset caps the drafted nodes (narrower breadth, N_max = 6) and lets prompt lookup continue
# the most probable leaf by up to 6 tokens (a *lookup tail*: no draft forward; ▷ nodes in the tree view;
# its tokens count in the tables' tree size, so a cpu tree can hold more nodes than N_max).
config = DynaTreeConfig.paper() if pair.device.type == "cuda" else DynaTreeConfig.cpu()
config

# %%
prompt = "Photosynthesis is the process by which green plants"  # one where the draft often agrees
N = 64

_ = generate(pair, prompt, "dynatree", config, max_new_tokens=8)  # warm-up: first calls pay one-off costs
ar = generate(pair, prompt, "ar", max_new_tokens=N, ignore_eos=True, trace=True)
dt = generate(pair, prompt, "dynatree", config, max_new_tokens=N, ignore_eos=True, trace=True)

# %% [markdown]
# ## The output is identical
#
# Speculative decoding never changes *what* the target says: every committed token is a token the
# target itself would pick greedily. The next cell prints `True` only if the two token lists match.

# %%
print(len(ar.tokens), len(dt.tokens))
print(dt.tokens == ar.tokens)

# %% tags=["nbval-ignore-output"]
print(prompt + dt.text)


# %% [markdown]
# ## Speed and L̄
#
# Each DynaTree *iteration* drafts a small tree of guesses with the cheap draft model and checks all of
# them with **one** forward of the target. It then commits the longest run of guesses the target
# agrees with, plus one token of the target's own (the *bonus* token). So:
#
# * **L̄** = committed tokens per iteration (per target forward); AR has L̄ = 1.
# * **ℓ̄** = accepted draft tokens per iteration (L̄ minus the bonus).
# * **acceptance** = accepted draft tokens / depth of the drafted trees.
#
# Wall-clock numbers depend on the machine (they are not checked by the tests).

# %% tags=["nbval-ignore-output"]
def summary(name, r):
    m = r.metrics
    return {"method": name, "tokens/s": m.tokens_per_s, "speedup vs AR": m.tokens_per_s / ar.metrics.tokens_per_s,
            "target forwards": m.target_forwards, "iterations": m.iterations, "L̄": m.tokens_per_iteration,
            "ℓ̄": m.mean_accepted_length, "acceptance": m.acceptance_rate, "mean tree size": m.mean_tree_size}

pd.DataFrame([summary("AR", ar), summary("DynaTree", dt)]).set_index("method")

# %% [markdown]
# Whether fewer target forwards make a faster run depends on what a forward over a tree costs on this
# machine compared with a one-token forward. The next line is computed from the two runs above (it
# says "slower" when the verify cost eats the gain, as it can on a small CPU):

# %% tags=["nbval-ignore-output"]
Markdown(dt.metrics.compare_to(ar.metrics, "DynaTree"))

# %% [markdown]
# ### The race
#
# The same prompt, both runs side by side: tokens committed so far against the target forwards spent
# (press play, or drag the slider; a page read without a kernel shows the finish). `x="time"` races them
# over the recorded wall-clock time instead.

# %% tags=["nbval-ignore-output"]
dv.race({"AR": ar.trace, "DynaTree": dt.trace}, x="forwards")

# %%
lanes = dv.race_data({"AR": ar.trace, "DynaTree": dt.trace}, x="forwards").lanes
print("both lanes end with all N tokens:", all(lane.tokens[-1] == N for lane in lanes))

# %%
m = dt.metrics
print("DynaTree needed fewer target forwards than AR:", m.target_forwards < ar.metrics.target_forwards)
print("L̄ = new tokens / iterations:", math.isclose(m.tokens_per_iteration, m.new_tokens / m.iterations))
print("AR commits exactly one token per iteration:", ar.metrics.tokens_per_iteration == 1.0)

# %% [markdown]
# ## The other methods are exact too
#
# The baselines of the paper: a *linear* draft of K tokens, and a *fixed tree* of depth D and
# breadth B. Same tokens, different cost.

# %%
others = {
    "linear (K=5)": generate(pair, prompt, "linear", LinearConfig(k=5), max_new_tokens=N, ignore_eos=True),
    "fixed tree (D=4, B=2)": generate(pair, prompt, "fixed_tree", FixedTreeConfig(d=4, b=2), max_new_tokens=N,
                                      ignore_eos=True),
}
print(all(r.tokens == ar.tokens for r in others.values()))

# %% tags=["nbval-ignore-output"]
pd.DataFrame([summary("AR", ar)] + [summary(k, r) for k, r in others.items()]
             + [summary("DynaTree", dt)]).set_index("method")

# %% [markdown]
# A draft need not be a model. `PromptLookup()` proposes the tokens that followed earlier occurrences of
# the context's last n-gram (prompt lookup): no weights, no draft forward, and every method runs with it.
# It pays where the output repeats its context, as a small model's greedy text often does over long
# continuations. Where nothing repeats it proposes nothing (probability 0), and DynaTree's ρ_stop ends the
# branch. The default pair *mixes* it into the feature draft (`pair.lookup`, a `LookupMix`): a node's
# distribution is λ·(the lookup's shares) + (1 − λ)·(the draft's), with λ growing with the length of the
# matched n-gram and how often it was seen, so a long repeat makes a confident, deep branch. Below: the
# default pair, the same draft without the lookup, and prompt lookup alone, on the same prompt; the sentence
# under the table says, from its numbers, what the lookup added here. On the benchmark's long passages the
# mixture adds 0.3-1 token per iteration (the README has the table).

# %%
import dataclasses

from dynatree_core import PromptLookup

draft_alone = dataclasses.replace(pair, lookup=None)
lookup_alone = ModelPair(target=pair.target, draft=PromptLookup(), tokenizer=pair.tokenizer,
                         target_name=pair.target_name, draft_name="prompt-lookup")
runs = {f"DynaTree, {other.drafter_kind}": generate(other, prompt, "dynatree", config, max_new_tokens=N,
                                                   ignore_eos=True)
        for other in (draft_alone, lookup_alone)}
print("same tokens:", all(r.tokens == ar.tokens for r in runs.values()))
print("drafters:", pair.drafter_kind, "/", draft_alone.drafter_kind, "/", lookup_alone.drafter_kind)
print("draft model forwards with prompt lookup alone:", runs["DynaTree, lookup"].metrics.draft_forwards)

# %% tags=["nbval-ignore-output"]
pd.DataFrame([summary(f"DynaTree, {pair.drafter_kind} (the default)", dt)]
             + [summary(k, r) for k, r in runs.items()]).set_index("method")

# %% tags=["nbval-ignore-output"]
mix, alone, look = dt.metrics, runs[f"DynaTree, {draft_alone.drafter_kind}"].metrics, runs["DynaTree, lookup"].metrics
tail = sum(r.tree.stop_reasons.count("lookup_tail") for r in dt.trace.iterations)
drafted = sum(r.num_nodes for r in dt.trace.iterations)
longest = max((r.tree.stop_reasons.count("lookup_tail") for r in dt.trace.iterations), default=0)
Markdown(
    f"On this prompt the mixture's trees held {mix.mean_tree_size:.2f} nodes on average against "
    f"{alone.mean_tree_size:.2f} for the draft alone: {tail} of its {drafted} drafted nodes are "
    f"lookup-tail tokens copied from the context (▷ in the tree view; at most {longest} in one tree), where "
    f"the text so far repeated an n-gram. "
    + (f"Yet both commit L̄ = {mix.tokens_per_iteration:.2f} tokens per target forward: here the copied tails "
       "were accepted no further than the draft alone got." if f"{mix.tokens_per_iteration:.2f}" ==
       f"{alone.tokens_per_iteration:.2f}" else
       f"L̄ = {mix.tokens_per_iteration:.2f} committed tokens per target forward with the lookup, "
       f"{alone.tokens_per_iteration:.2f} without it.")
    + f" Prompt lookup alone drafted {look.mean_tree_size:.2f} nodes per tree, of which the target accepted "
    f"{look.mean_accepted_length:.2f} per iteration (L̄ = {look.tokens_per_iteration:.2f}): it can only copy "
    f"what the {N}-token continuation of a one-line prompt repeats.")

# %% [markdown]
# ## Look inside: the trace
#
# With `trace=True` the run records every iteration: the draft tree (tokens, draft probabilities,
# why each branch stopped), the target's choices, the accepted path, the committed tokens and the
# history adapter's state. The text view colours each token by the iteration that produced it
# (in a live notebook, hover a token for its iteration); the stepper steps through the iterations with
# the tree, its attention mask and the per-iteration timeline side by side (run the notebook to get the
# live widget; a static page shows the iteration it opens on). It opens on an iteration chosen by
# `dv.branching_example`: a tree that branched and whose accepted path took a draft candidate that was
# not its parent's first choice, where a chain would have stopped. That node is selected (`node=`), so the
# *why?* panel under the tree shows the draft's top-k at its parent, where the draft ran, against the
# target's choice (click any node to explain it; with none selected the panel explains where the accepted
# path ended).
#
# Reading the tree before 02 teaches it: a node's fill is c(u), the draft's probability of its own first
# choice after the node; p(u) is the path's probability, the draft's probabilities multiplied from the root
# down to the node; a node's shape says why it stopped growing. Two of DynaTree's knobs name those shapes:
# ρ_stop ends a branch whose p(u) fell below it, and past the base depth D0 a branch goes on only while
# p(u) ≥ ρ_deep (notebook 02, section 4, derives each rule; 03 lets you move them).

# %%
trace = dt.trace
print("one record per iteration:", len(trace) == dt.metrics.iterations)
print("the records' committed tokens are the output:", trace.committed_tokens() == dt.tokens)

# %% tags=["nbval-ignore-output"]
HTML(dv.text_html(trace))

# %% tags=["nbval-ignore-output"]
opening = dv.branching_example(trace, min_nodes=3)
position = trace.iterations.index(opening) if opening is not None else 0
if opening is not None:
    won = dv.off_top1(opening)[0]
    display(Markdown(f"The stepper opens on iteration {opening.index}: {opening.num_nodes} drafted nodes, ℓ = "
                     f"{opening.accepted_length}, and node {won.node} was the draft's choice number {won.rank}."))

# %% tags=["nbval-ignore-output"]
dv.show(trace, start=position, node=won.node if opening is not None else None)

# %% [markdown]
# Traces are plain data: save them as JSON and render them later, even on a machine without torch.

# %%
import os
import tempfile

from dynatree_core import Trace

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "quickstart_trace.json")
    trace.to_json(path)
    again = Trace.from_json(path)
print(again.tokens == dt.tokens, len(again) == len(trace))

# %% [markdown]
# **Sliders without a kernel.** Notebook 03 writes [03_explorer_page.html](03_explorer_page.html): one
# offline HTML file in which a real run's tree regrows as you move τ_h, ρ_stop, N_max and the other knobs.
# Make one for any prompt in two lines:
# `trace = generate(pair, prompt, "dynatree", max_new_tokens=64, trace="replay").trace` and
# `dv.explorer_page(trace, "page.html")`.

# %% [markdown]
# ## What to try next
#
# * Change `prompt` and `N`, or try `DynaTreeConfig.paper()` (bigger trees) on a GPU.
# * Compare the drafters: `ModelPair.default(draft=...)` with `"model"`, `"feature"`, `"lookup"`,
#   `"model+lookup"` or `"feature+lookup"` (the default); the tokens stay the same, L̄ and the speed change
#   (`dt.trace.drafter` records which one ran).
# * `dv.report(trace, "report.html")` writes a self-contained HTML report of the run.
# * Iterate instead of generating: `for rec in iterate(pair, prompt, "dynatree", config, trace=True): ...`
#   yields one `IterationRecord` per round.
# * **02** explains every step of speculative decoding; **03** explores the tree parameters;
#   **04** the history adapter; **05** reproduces the paper's benchmark protocol.
