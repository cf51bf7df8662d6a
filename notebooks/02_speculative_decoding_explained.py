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
# # 02 · Speculative decoding, explained step by step
#
# **What you will learn** (no paper needed)
#
# 1. plain greedy decoding: one target forward per token;
# 2. *linear* speculative decoding: a draft model guesses K tokens, the target checks them all in one
#    forward, and we keep the guesses up to the first mistake;
# 3. *tree* speculative decoding: check several alternatives per position at once;
# 4. DynaTree: let the draft's confidence decide how wide and how deep the tree grows;
# 5. the machinery that makes one forward check a whole tree — the **tree-attention mask** (built by
#    hand here) and **position ids that follow depth**;
# 6. how the accepted path and the **bonus token** are chosen;
# 7. how the KV cache is brought back to the committed tokens (gather vs. crop-and-rebuild).
#
# Every claim is checked by a cell that prints `True`.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import math

import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

import dynatree_viz as dv
from dynatree_core import DynaTreeConfig, FixedTreeConfig, LinearConfig, generate, iterate

# %% [markdown]
# The model pair is the one notebook 01 opens with (its first section says what the target and the
# draft are); `dv.setup_notebook(PAIR)` loads it and turns on the figures' static fallbacks.

# %% tags=["nbval-ignore-output"]
pair = dv.setup_notebook(PAIR)   # notebook 01's opening says what this pair is

# %% tags=["nbval-ignore-output"]
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.cache.dynamic import cache_length, keep_selected

tok = pair.tokenizer
prompt = "The quick brown fox jumps over the lazy dog. The quick brown"
ids = tok(prompt)["input_ids"]
print(len(ids), "prompt tokens:", [tok.decode([t]) for t in ids])

# %% [markdown]
# ## 1 · Greedy decoding (AR): one forward per token
#
# A language model reads a sequence and returns, for every position, a score (*logit*) for every
# possible next token. Greedy decoding appends the highest-scoring token and repeats, so producing
# T tokens costs T forwards of the big model. (A *KV cache* keeps the already-processed tokens'
# attention keys and values, so each forward only processes the new token.)
#
# `iterate(...)` runs the decoding loop one iteration at a time. For AR an iteration "drafts" an empty
# tree (just the *root*: the last committed token) and commits the target's choice.

# %%
from transformers import DynamicCache

with torch.inference_mode():
    logits = pl.forward(pair.target, torch.tensor([ids], device=pair.device), DynamicCache())
next_by_hand = int(logits[-1].argmax())

rec = next(iterate(pair, prompt, "ar", max_new_tokens=4, trace=True))
print("tree nodes:", len(rec.tree), "| accepted draft tokens:", rec.accepted_length,
      "| committed tokens:", len(rec.committed))
print("the engine's token is the target's argmax:", rec.committed == [next_by_hand])

# %% tags=["nbval-ignore-output"]
print(repr(prompt), "->", repr(tok.decode(rec.committed)))

# %% [markdown]
# ## 2 · Linear speculative decoding: where the chain breaks
#
# A small, much cheaper **draft** model guesses the next K tokens one after another. The target
# then reads the root and all K guesses in **one** forward, which gives its own greedy choice after
# every prefix of the chain. Walking down the chain, a guess is *accepted* while it equals the
# target's choice; at the first disagreement we stop and take the target's choice instead — the
# **bonus** token. So every iteration commits between 1 and K + 1 tokens, and they are exactly the
# tokens greedy decoding would have produced.
#
# Let's find an iteration where the chain breaks before its end.

# %% tags=["nbval-ignore-output"]
lin = list(iterate(pair, prompt, "linear", LinearConfig(k=5), max_new_tokens=40, trace=True, ignore_eos=True))
print("accepted per iteration:", [r.accepted_length for r in lin])
# the most instructive iteration: some guesses accepted, then a miss before the chain's end
rec = next((r for r in lin[:-1] if 0 < r.accepted_length < r.tree.depth),
           next((r for r in lin[:-1] if r.accepted_length < r.tree.depth), lin[0]))
print("looking at iteration", rec.index)

# %% [markdown]
# The target scores every guess in its one forward, but the walk reads them top down and stops at the first
# mismatch: the guesses below it are never reached, whatever they match (the table marks them).

# %% tags=["nbval-ignore-output"]
# In a chain, node d sits at depth d and its parent is node d - 1.
# target_argmax[i] is the target's greedy next token after node i.
first_miss = next((d for d in range(1, len(rec.tree)) if rec.tree.tokens[d] != rec.target_argmax[d - 1]),
                  len(rec.tree))


def outcome(d):
    return "accepted" if d < first_miss else "✗ rejected: first mismatch" if d == first_miss else "not reached"


pd.DataFrame([{"depth": d, "draft guessed": rec.token_texts[d], "target wanted": tok.decode([rec.target_argmax[d - 1]]),
               "match": rec.tree.tokens[d] == rec.target_argmax[d - 1] if d <= first_miss else "not reached",
               "outcome": outcome(d)} for d in range(1, len(rec.tree))])

# %%
print("accepted = the guesses before the first mismatch:", rec.accepted_length == first_miss - 1)
print("bonus = the target's own token at the break:", rec.bonus == rec.target_argmax[first_miss - 1])
print("committed = accepted guesses + bonus:",
      rec.committed == [rec.tree.tokens[i] for i in rec.accepted_path] + [rec.bonus])

# %% [markdown]
# The picture: the root (top), the drafted chain, accepted nodes in blue with a ring, the first rejected
# guess marked with a vermillion ✗, and the bonus token the target supplied (the legend names every mark).
# A node's fill is the target's probability of the guessed token, p(token) (the target's greedy choice is
# the token it gives the most). The draft's confidence c(u), the fill of the tree pictures further on,
# decides nothing in a chain.

# %% tags=["nbval-ignore-output"]
dv.tree_figure(rec, color_by="target_p", title=f"linear K=5, iteration {rec.index}: colour = p(token)")

# %% [markdown]
# *Why* did the chain break there? The panel below puts the draft's top candidates at the node where
# the path ended next to the target's choice (and says when the target's token was pruned). A chain
# drafts one guess per position, B(u) = 1 by construction: the draft's confidence c(u) decides nothing here.

# %% tags=["nbval-ignore-output"]
dv.why(rec, method="linear")  # linear: B(u) = 1 by construction, whatever c(u) says

# %% [markdown]
# ## 3 · A fixed tree: more than one guess per position
#
# The chain is lost at its first wrong guess, even when the draft's *second* choice was right. A tree
# keeps the top-B guesses at every node, to depth D, and the target still checks **all** of them in
# one forward. A full binary tree of depth 3 has 2 + 4 + 8 = 14 drafted nodes.
# The example is an iteration where the draft's second choice, clearly less probable than its first
# (`dv.branching_example` skips near ties), was the one the target accepted; where our prompt's 40 tokens
# have none, the cell tries the story openings of `dv.EXAMPLE_PROMPTS`.

# %% tags=["nbval-ignore-output"]
# an iteration where a clearly second choice won (not a near tie): our prompt first, then story openings
for ft_prompt in [prompt, *dv.EXAMPLE_PROMPTS]:
    ft = list(iterate(pair, ft_prompt, "fixed_tree", FixedTreeConfig(d=3, b=2, tau=0.0), max_new_tokens=40,
                      trace=True, ignore_eos=True))
    rec_ft = dv.branching_example(ft, min_nodes=1)
    if rec_ft is not None:
        break
else:
    rec_ft = ft[0]
print("prompt:", repr(ft_prompt))
print("drafted nodes:", rec_ft.num_nodes, "| a full binary tree of depth 3:", rec_ft.num_nodes == 2 + 4 + 8)
won = dv.off_top1(rec_ft)
assert won, "the figure below must show a second choice accepted"
print(f"Iteration {rec_ft.index}: the draft's choice number {won[0].rank} at node {won[0].parent} "
                 f"('{pair.tokenizer.decode([rec_ft.tree.tokens[won[0].node]])}', q = {won[0].q:.2f}) was accepted, "
                 f"where a chain would have followed its first choice "
                 f"('{pair.tokenizer.decode([won[0].top1_token])}', q = {won[0].top1_q:.2f}) and stopped.")


# %% tags=["nbval-ignore-output"]
def off_top1(r):  # accepted nodes that were NOT the draft's first choice: a chain would have missed them
    t = r.tree
    return sum(t.tokens[i] != t.topk_tokens[t.parents[i]][0] for i in r.accepted_path)

print("accepted per iteration:", [r.accepted_length for r in ft])
print("accepted tokens that were the draft's 2nd choice:", sum(off_top1(r) for r in ft))
dv.tree_figure(rec_ft, title=f"fixed tree D=3, B=2, iteration {rec_ft.index}: a second choice accepted")

# %% [markdown]
# ## 4 · DynaTree: breadth from confidence, depth from probability
#
# A fixed tree spends as many nodes on easy positions as on hard ones. DynaTree decides per node u:
#
# * **breadth** from the draft's confidence c(u) = its top probability after u:
#   B(u) = B_min if c(u) ≥ τ_h (sure: the fewest guesses), B_max if c(u) < τ_l (unsure: hedge),
#   else B_mid;
# * **depth** from the path probability p(u) = product of the draft probabilities along the path:
#   u is expanded only if d(u) < D_max and p(u) ≥ ρ_stop, and beyond the base depth D0 only if
#   p(u) ≥ ρ_deep (likely paths go deeper);
# * **pruning**: a child with p < τ is dropped; at most N_max nodes are verified.
#
# The worked example uses the `gpu` preset (`DynaTreeConfig.gpu()`), whose trees are wider than with
# the paper's settings (more children per node), and is picked from the runs themselves: an iteration that
# shows what a tree buys, with at least 15 drafted nodes and an accepted node that was *not* the draft's
# first choice at its parent — where a chain of first choices would have stopped. On our repeated sentence
# the draft is too sure of itself for that (its trees stay small), so the cell tries it first, then
# story openings (`dv.EXAMPLE_PROMPTS`), and keeps the first run that has such an iteration. The next
# cells check that its tree obeys exactly the rules above.

# %% tags=["nbval-ignore-output"]
from dynatree_core import HistoryState

paper, gpu = DynaTreeConfig.paper(), DynaTreeConfig.gpu()


def runs_with_room(text, n=100):
    """The run's iterations, less the last ones, whose depth is capped by the few tokens left."""
    room, left = [], n
    for r in iterate(pair, text, "dynatree", gpu, max_new_tokens=n, trace=True, ignore_eos=True):
        if left > gpu.d_max:
            room.append(r)
        left -= len(r.committed)
    return room


for example_prompt in [prompt, *dv.EXAMPLE_PROMPTS]:
    room = runs_with_room(example_prompt)
    rec_dt = dv.branching_example(room, min_nodes=15)  # >= 15 drafted nodes, an accepted non-top-1 node
    if rec_dt is not None:
        break
else:  # no run branched like that: show the biggest tree (the checks below then say False)
    rec_dt = max(room, key=lambda r: (r.accepted_length > 0, r.num_nodes))
print("prompt:", repr(example_prompt))
# the rule this iteration ran under: the history adapter had moved D0 and tau_h (see 04)
h = HistoryState.from_dict(rec_dt.history_before)
tree, rule = rec_dt.tree, gpu.growth_rule(d0=h.d0_effective, tau_h=h.tau_h)
print(f"iteration {rec_dt.index}: {rec_dt.num_nodes} drafted nodes, depth {tree.depth}, "
      f"{rec_dt.accepted_length} accepted, {len(tree.pruned)} candidates pruned")
# tokens as the figures write them (␣ a space, ↵ a newline), not "\n"
pd.DataFrame([{"node": n.index, "token": dv.core.style.visible_token(rec_dt.token_texts[n.index]),
               "depth": n.depth, "parent": n.parent,
               "p(u)": n.cum_prob, "c(u)": n.confidence, "B(u)": n.branching, "stop reason": n.stop_reason}
              for n in tree.nodes()]).set_index("node")

# %%
expanded = [i for i in range(len(tree)) if tree.confidences[i] is not None]
gated = [i for i in range(len(tree)) if tree.stop_reasons[i] in ("d_max", "rho_stop", "depth_gate")]
print("B(u) follows c(u):", all(tree.branching[i] == rule.branching(tree.confidences[i]) for i in expanded))
print("every depth stop follows d(u) and p(u):",
      all(rule.stop_reason(tree.depths[i], math.exp(tree.cum_logps[i])) == tree.stop_reasons[i] for i in gated))
print("no verified node has p(u) < tau:", all(lp >= math.log(rule.tau) for lp in tree.cum_logps))
print("at most N_max nodes:", tree.num_drafted <= rule.n_max)
branch = dv.off_top1(rec_dt)  # accepted nodes that were not the draft's first choice at their parent
print("the example has at least 15 drafted nodes:", rec_dt.num_nodes >= 15)
print("an accepted node was not its parent's top-1 draft choice:", bool(branch))
print("a chain of first choices would have accepted fewer tokens:",
      bool(branch) and tree.depths[branch[0].parent] < rec_dt.accepted_length)

# %% [markdown]
# What happened in this iteration, in the trace's own numbers:

# %% tags=["nbval-ignore-output"]
def say(tok):  # a token as the reader sees it, spaces made visible
    return "`" + dv.core.style.visible_token(tok) + "`"

text_of = lambda i: rec_dt.token_texts[i]
path_words = " → ".join(say(text_of(i)) for i in rec_dt.accepted_path)
first = branch[0] if branch else None
story = (f"**Iteration {rec_dt.index}.** The draft grew **{rec_dt.num_nodes} nodes** to depth {tree.depth}, "
         f"with up to {max(tree.branching)} children per node, and the target checked them all in one forward. "
         f"It accepted **{rec_dt.accepted_length}** of them ({path_words}) and added its bonus token "
         f"{say(tok.decode([rec_dt.bonus])) if rec_dt.bonus is not None else '(none)'}: "
         f"**{len(rec_dt.committed)} tokens** for one target forward.")
if first is not None:
    story += (f"\n\nAfter {say(text_of(first.parent))} (depth {tree.depths[first.parent]}) the draft's first choice was "
              f"{say(tok.decode([first.top1_token]))} (q = {first.top1_q:.2f}), but the target wanted "
              f"{say(text_of(first.node))}, the draft's choice number {first.rank} (q = {first.q:.2f}). "
              f"A chain of first choices would have stopped there with {tree.depths[first.parent]} accepted token(s); "
              f"the tree had kept {say(text_of(first.node))} as a sibling and went on to accept "
              f"{rec_dt.accepted_length - tree.depths[first.parent]} more.")
display(Markdown(story))

# %% tags=["nbval-ignore-output"]
dv.tree_figure(rec_dt, show_pruned=True, title=f"DynaTree (gpu preset), iteration {rec_dt.index}: colour = c(u)")

# %% tags=["nbval-ignore-output"]
dv.tree_figure(rec_dt, color_by="cum_prob", title="the same tree, colour = p(u)")

# %% [markdown]
# The same iteration as it happens, phase by phase: the draft grows the tree one level per draft
# forward, the target verifies every node in one forward, the greedy path and the bonus are selected,
# and the committed tokens join the text. Press play or step with the slider (a page read without a
# kernel shows every step side by side); `dv.export_slides(rec_dt, path="slides.html")` writes the
# phases as an offline slide deck for a lecture, `dv.export_gif(rec_dt, "iteration.gif")` as one GIF.

# %% tags=["nbval-ignore-output"]
dv.animate(rec_dt, show_pruned=True)

# %%
steps = dv.animation_steps(rec_dt)
print("one draft frame per level, then verify, select, commit:",
      [s.phase for s in steps][-3:] == ["verify", "select", "commit"]
      and sum(s.phase == "draft" for s in steps) == rec_dt.tree.depth + 1)

# %% [markdown]
# ## 5 · One forward for a whole tree: the tree-attention mask
#
# The verification forward feeds the tree's nodes as one flat sequence (in breadth-first order).
# With the usual *causal* mask every node would see all earlier nodes — including its siblings and
# cousins, which are *alternatives*, not context. Instead, node i may attend to the committed prefix,
# its ancestors, and itself. Let's grow a tiny 5-node tree (root + 2 children + the 2 most likely
# grandchildren) and build that mask by hand.

# %%
from dynatree_core import IterationRecord
from dynatree_core.policy.config import GrowthRule
from dynatree_core.engine.session import TreeSession

session = TreeSession(pair, prompt)  # prefills both models on the prompt once
small = GrowthRule(d0=2, d_max=2, b_min=2, b_mid=2, b_max=2, tau_h=0.5, tau_l=0.4,
                   rho_stop=0.0, rho_deep=0.0, tau=0.0, n_max=4)
tree5, argmax5 = session.regrow(small)  # draft the tree, verify it with the target
n = len(tree5)
print("nodes (root included):", n)

# %% tags=["nbval-ignore-output"]
print("tokens: ", [session.token_text(t) for t in tree5.tokens])
print("parents:", tree5.parents, " depths:", tree5.depths)

# %% tags=["nbval-ignore-output"]
mask = np.zeros((n, n), dtype=bool)
for i in range(n):
    j = i
    while j != -1:          # walk up: i, parent(i), ..., root
        mask[i, j] = True
        j = tree5.parents[j]
print(mask.astype(int))

# %%
print("hand-built mask == DraftTree.ancestor_mask():", np.array_equal(mask, tree5.ancestor_mask()))

# %% [markdown]
# The full mask adds the committed prefix (everything in the KV cache) as visible to every node.
# `IterationRecord.attention_mask()` returns it; the engine hands the model the *additive* float
# form (0 where allowed, the most negative float where not), because boolean 4-D masks are not
# handled the same way by every attention implementation.

# %%
prefix_len = len(session.prompt) - 1          # the root (last prompt token) is not in the cache yet
path5, bonus5 = tree5.greedy_path(argmax5)
rec5 = IterationRecord(index=0, prefix_len=prefix_len, tree=tree5, target_argmax=argmax5,
                       accepted_path=path5, committed=[tree5.tokens[i] for i in path5] + [bonus5], bonus=bonus5,
                       position_ids=(prefix_len + tree5.position_offsets()).tolist(),
                       token_texts=[session.token_text(t) for t in tree5.tokens],
                       committed_texts=[session.token_text(t) for t in [tree5.tokens[i] for i in path5] + [bonus5]])
full = np.concatenate([np.ones((n, prefix_len), dtype=bool), mask], axis=1)
additive = pl.additive_mask(rec5.attention_mask(), torch.float32, torch.device("cpu"))[0, 0]
print("attention_mask() == prefix + hand-built mask:", np.array_equal(rec5.attention_mask(), full))
print("additive form is 0 exactly where allowed:", torch.equal(additive == 0, torch.from_numpy(full)))

# %% tags=["nbval-ignore-output"]
dv.mask_figure(rec5, title="tree-attention mask of the 5-node tree")

# %% tags=["nbval-ignore-output"]
dv.tree_figure(rec5, title="the 5-node tree")

# %% [markdown]
# ## 6 · Position ids follow depth, not the order in the batch
#
# Models with rotary position embeddings (Llama, GPT-NeoX, …) encode *where* a token sits. A node at
# depth d is the d-th token after the root on its own path, so its position is
# `prefix_len + d(u)` — siblings share a position. Numbering the flattened nodes 0, 1, 2, … (their
# BFS index) would place the last node at +4 instead of +2, and the target would score a sequence
# that never exists. We check the last node's logits against a plain sequential forward of its path.

# %%
import copy

with torch.inference_mode():
    base = DynamicCache()
    pl.forward(pair.target, torch.tensor([session.prompt[:-1]], device=pair.device), base)  # the prefix
    tokens5 = torch.tensor([tree5.tokens], device=pair.device)
    depth_pos = prefix_len + tree5.position_offsets()
    bfs_pos = prefix_len + np.arange(n)
    logits_depth = pl.forward(pair.target, tokens5, copy.deepcopy(base), rec5.attention_mask(), depth_pos)
    logits_bfs = pl.forward(pair.target, tokens5, copy.deepcopy(base), rec5.attention_mask(), bfs_pos)
    last = n - 1
    chain = session.prompt + [tree5.tokens[i] for i in tree5.path_to(last)]
    logits_seq = pl.forward(pair.target, torch.tensor([chain], device=pair.device), DynamicCache())[-1]
print("positions by depth:", (depth_pos - prefix_len).tolist(), "| by BFS index:", (bfs_pos - prefix_len).tolist())
print("depth positions reproduce the sequential logits:", torch.allclose(logits_depth[last], logits_seq, atol=1e-3))
print("BFS positions give different (wrong) logits:    ", not torch.allclose(logits_bfs[last], logits_seq, atol=1e-3))

# %% tags=["nbval-ignore-output"]
print("max |logit difference| vs sequential: depth positions",
      float((logits_depth[last] - logits_seq).abs().max()), "| BFS positions", float((logits_bfs[last] - logits_seq).abs().max()))

# %% [markdown]
# ## 7 · Selecting the path: longest greedy match, then the bonus token
#
# After the one verification forward we know `target_argmax[i]`, the target's greedy next token after
# every node i. Start at the root; if one of its children carries exactly the target's choice, step
# to it and repeat. When no child matches, stop: the target's choice there is the **bonus** token.
# At most one child can match (siblings are distinct tokens), so the walk is unique — and the
# committed tokens are precisely what greedy decoding produces.

# %%
cur, walk = 0, []
while True:
    match = [j for j in range(n) if tree5.parents[j] == cur and tree5.tokens[j] == argmax5[cur]]
    if not match:
        break
    cur = match[0]
    walk.append(cur)
print("hand walk == DraftTree.greedy_path():", walk == path5, "| bonus:", argmax5[cur] == bonus5)

ar_ref = generate(pair, prompt, "ar", max_new_tokens=len(path5) + 1, ignore_eos=True)
print("accepted + bonus == what AR produces:", ar_ref.tokens == rec5.committed)

# %% tags=["nbval-ignore-output"]
print("accepted nodes:", path5, "->", [session.token_text(tree5.tokens[i]) for i in path5],
      "| bonus:", repr(session.token_text(bonus5)))

# %% [markdown]
# ## 8 · The KV cache after verification: gather or rebuild
#
# Verification appended the keys/values of **all** tree nodes to the target's cache, but only the
# root and the accepted path belong to the text. Two ways back:
#
# * **gather** (this library's default): keep the accepted nodes' entries and drop the rest, as the
#   cell below does by moving them into place (`keep_selected`). No extra forward. It is exact
#   because each node's keys/values were computed with exactly its real context (the mask) and its
#   real position (the depth). The engine goes one step further (`dynatree_core.runtime.cache.dynamic`): it
#   leaves the accepted entries where they are and hides the rejected ones between them in every
#   later forward's mask, and moves them only once 64 have piled up: moving costs two ops per layer
#   and tensor, which a launch-bound GPU pays one by one.
# * **recompute** (the paper's description): crop the cache to the prefix and run the committed tokens
#   through the target again — one extra target forward per iteration.

# %%
with torch.inference_mode():
    verified = copy.deepcopy(base)
    pl.forward(pair.target, tokens5, verified, rec5.attention_mask(), depth_pos)   # verify
    print("tree entries in the cache after verification:", cache_length(verified) - prefix_len)
    gathered = copy.deepcopy(verified)
    keep_selected(gathered, prefix_len, [0] + path5)                              # gather
    rebuilt = copy.deepcopy(base)
    pl.forward(pair.target, torch.tensor([[tree5.tokens[i] for i in [0] + path5]], device=pair.device),
               rebuilt)                                                           # crop + rebuild
same = all(torch.allclose(a.keys, b.keys, atol=1e-4) and torch.allclose(a.values, b.values, atol=1e-4)
           for a, b in zip(gathered.layers, rebuilt.layers))
print("same length:", cache_length(gathered) == cache_length(rebuilt), "| same keys/values:", same)

# %% [markdown]
# Whole runs in both modes: identical tokens; `recompute` pays one more target forward per iteration
# (except the last, after which nothing is decoded).

# %%
g = generate(pair, prompt, "dynatree", paper.replace(kv_mode="gather"), max_new_tokens=40, ignore_eos=True)
r = generate(pair, prompt, "dynatree", paper.replace(kv_mode="recompute"), max_new_tokens=40, ignore_eos=True)
print("identical tokens:", g.tokens == r.tokens)
print("gather:    target forwards = 1 prefill + 1 per iteration:", g.metrics.target_forwards == 1 + g.metrics.iterations)
print("recompute: target forwards = 1 prefill + 2 per iteration - 1:",
      r.metrics.target_forwards == 2 * r.metrics.iterations)

# %% tags=["nbval-ignore-output"]
pd.DataFrame([{"kv_mode": k, "iterations": x.metrics.iterations, "target forwards": x.metrics.target_forwards,
               "tokens/s": x.metrics.tokens_per_s} for k, x in (("gather", g), ("recompute", r))]).set_index("kv_mode")

# %% [markdown]
# ## What to try next
#
# * Change `prompt` to something less predictable and watch the linear chain break earlier.
# * Change `small` (the 5-node rule) to `b_mid=3, n_max=6` and rebuild the mask by hand.
# * Replace `FixedTreeConfig(d=3, b=2)` by deeper/wider trees: more nodes, more accepted tokens, a
#   costlier verify forward — **03** explores that trade-off interactively.
# * `dv.show(generate(..., trace=True).trace)` steps through a whole run with these pictures.
