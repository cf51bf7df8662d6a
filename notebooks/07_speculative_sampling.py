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
# # 07 · Speculative sampling: the draft proposes, the target's distribution decides
#
# **What you will learn**
#
# * why speculative decoding can *sample* from the target exactly, not only decode greedily: Leviathan et al.'s
#   rejection rule, shown on a tiny case where the exact distribution can be enumerated;
# * the two verification rules of this toolkit: `match` (the target draws its token and the walk follows the child
#   that carries it: token for token the same output as seeded autoregressive sampling) and `rejection` (drafts
#   sampled from the draft's q, the first accepted with min(1, p/q), later siblings tested against the
#   residual: exact in distribution);
# * the Gumbel-max trick, which `match` and seeded AR use to draw from p;
# * how temperature changes what a tree buys, measured on one prompt below;
# * sharing the noise: drafts ranked by log q plus the target's own Gumbel noise, whose first proposal is the
#   target's draw far more often than the draft's most probable token, with the same output.
#
# Everything runs offline on a CPU in about two minutes. The rules and their proofs are in
# `docs/engine.md` (speculative sampling) and `dynatree_core/policy/sampling.py`.

# %% tags=["parameters"]
# Parameters (papermill -p PAIR tiny-llama runs the notebook on a tiny random pair in seconds: for development)
PAIR = "default"

# %%
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

import dynatree_viz as dv
from dynatree_core import DynaTreeConfig, LinearConfig, ModelPair, generate
from dynatree_core.pairs.tiny import noisy_copy, tiny_model
from dynatree_core.policy.sampling import SamplingConfig, recursive_rejection, warp_probs

dv.use_static_fallbacks()
pd.set_option("display.precision", 3)


def q_t(text):
    return f"'{dv.core.style.visible_token(text)}'"   # a token in quotes: a space as ␣, a newline as ↵

# %% [markdown]
# ## 1. Leviathan's theorem on a case we can enumerate
#
# The target's distribution p and the draft's q over four tokens. Speculative sampling draws a candidate x from q
# and accepts it with probability min(1, p(x)/q(x)); on a rejection it draws from the residual
# norm((p - q)+). Whatever q is, the token that comes out is distributed exactly as p. Two lines say why:
#
# * *accepted from the draft:* P(x proposed and kept) = q(x) · min(1, p(x)/q(x)) = **min(p(x), q(x))**;
# * *from the residual:* P(rejected) = 1 - Σ_y min(p(y), q(y)) = Σ_y (p(y) - q(y))+, times the residual's
#   (p(x) - q(x))+ / Σ_y (p(y) - q(y))+, gives **(p(x) - q(x))+**;
#
# and min(p, q) + (p - q)+ = p, token by token. The stacked bars below are that sum. We check it with 20,000
# draws, by the same reference function the engine's device code is tested against
# (`recursive_rejection`; with one candidate it is Leviathan's rule).

# %% tags=["nbval-ignore-output"]
p = np.array([0.50, 0.25, 0.15, 0.10])
q = np.array([0.10, 0.20, 0.30, 0.40])   # a draft that gets the order wrong
rng = np.random.default_rng(0)
draws, accepted = [], 0
for _ in range(20_000):
    x = rng.choice(4, p=q)
    token, steps, _ = recursive_rejection(p, q, [x], [rng.random()], rng.random())
    draws.append(token)
    accepted += steps[0].accepted
empirical = np.bincount(draws, minlength=4) / len(draws)
fig = go.Figure([go.Bar(x=list(range(4)), y=p, name="p (target)"), go.Bar(x=list(range(4)), y=q, name="q (draft)"),
                 go.Bar(x=list(range(4)), y=empirical, name="20,000 speculative draws")])
fig.update_layout(barmode="group", title="speculative sampling reproduces p, whatever q proposes",
                  xaxis_title="token", yaxis_title="probability", width=700, height=380)
fig.show()
overlap = np.minimum(p, q).sum()
assert np.allclose(np.minimum(p, q) + np.maximum(p - q, 0), p)   # the two-line proof, token by token
split = go.Figure([go.Bar(x=list(range(4)), y=np.minimum(p, q), name="min(p, q): the draft's token, kept",
                          marker_color="#009E73"),
                   go.Bar(x=list(range(4)), y=np.maximum(p - q, 0), name="(p - q)+: drawn from the residual",
                          marker_color="#D55E00", marker_pattern_shape="x"),
                   go.Scatter(x=list(range(4)), y=p, mode="markers", name="p (target)",   # an open mark: its colour
                              marker=dict(symbol="line-ew-open", size=40, color="#0072B2", line=dict(width=3)))])
split.update_layout(barmode="stack", title="p = min(p, q) + (p - q)+: where each token's probability comes from",
                    xaxis_title="token", yaxis_title="probability", width=700, height=380,
                    legend=dict(orientation="h", y=-0.25))
split.show()
display(Markdown(
    f"Largest gap between the draws and p: **{np.abs(empirical - p).max():.4f}** (20,000 draws: about "
    f"{np.sqrt(p.max() * (1 - p.max()) / 20_000):.4f} is one standard error). The draft's candidate was accepted "
    f"{accepted / 20_000:.1%} of the time: that is **α**, the acceptance probability per proposal, and theory says "
    f"α = Σ min(p, q) = **{overlap:.2f}**: the closer q is to p, the more the target keeps of what the draft proposes."))

# %% [markdown]
# The same holds for a real (tiny) model decoding with the engine: a 4-token vocabulary, so the exact distribution
# of the first two generated tokens can be enumerated from the target's own probabilities (16 pairs), against
# 3,000 seeded runs of linear speculative sampling with `verify="rejection"`. (The test suite runs 20,000 per method
# with a chi-square test, `tests/test_sampling_stats.py`.)

# %% tags=["nbval-ignore-output"]
tiny_target = tiny_model("llama", seed=3, layers=1, hidden=16, vocab_size=4, init_range=0.3)
tiny = ModelPair(target=tiny_target, draft=noisy_copy(tiny_target, 0.6, seed=4), target_name="tiny-v4", draft_name="noisy")
cfg1 = SamplingConfig(temperature=1.0)


def p_next(prefix):
    with torch.inference_mode():
        return warp_probs(tiny_target(torch.tensor([prefix])).logits[0, -1].double().numpy(), cfg1)


exact = {(a, b): p_next([2])[a] * p_next([2, a])[b] for a in range(4) for b in range(4)}
counts = {}
for seed in range(3_000):
    toks = tuple(generate(tiny, [2], "linear", LinearConfig(k=2), max_new_tokens=2, ignore_eos=True,
                          temperature=1.0, verify="rejection", seed=seed).tokens)
    counts[toks] = counts.get(toks, 0) + 1
pairs_ = sorted(exact, key=lambda k: -exact[k])
ticks = [f"{a},{b}" for a, b in pairs_]  # "(0, 0)" labels of 16 pairs ran into each other at 760 px
fig = go.Figure([go.Bar(x=ticks, y=[exact[k] for k in pairs_], name="exact p (enumerated)"),
                 go.Bar(x=ticks, y=[counts.get(k, 0) / 3_000 for k in pairs_],
                        name="3,000 runs of the engine")])
fig.update_layout(barmode="group", title="the first two tokens of a tiny model: engine against the exact distribution",
                  xaxis_title="first, second token", width=760, height=380)
fig.show()
gap = max(abs(counts.get(k, 0) / 3_000 - exact[k]) for k in exact)
display(Markdown(f"Largest gap over the 16 pairs: **{gap:.3f}**."))

# %% [markdown]
# ## 2. Gumbel-max: how `match` and seeded AR draw from p
#
# Add to every token's log-probability an independent Gumbel noise g = -log(-log U), U uniform on (0, 1), and
# take the largest: argmax_x (log p(x) + g_x) is distributed exactly as p (the Gumbel-max trick). Seeded AR and
# `match` give each position of the output its own noise vector, fixed by the seed and the position; whichever
# method asks, the target's draw at that position is the same token. That is why a speculative run under `match`
# emits seeded AR's tokens exactly: the walk only follows a drafted child when it carries the token the target's
# noise picks. Left: one draw (the noise lifts a less likely token above the most likely one or not); right:
# 20,000 draws against p.

# %% tags=["nbval-ignore-output"]
from plotly.subplots import make_subplots

g = rng.gumbel(size=(20_000, 4))
picks = np.argmax(np.log(p) + g, axis=1)
freq = np.bincount(picks, minlength=4) / len(picks)
one = np.log(p) + g[0]
fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.15,
                    subplot_titles=("one draw: log p and log p + g", "20,000 draws: argmax frequency against p"))
win = int(one.argmax())
fig.add_trace(go.Bar(x=list(range(4)), y=np.log(p), name="log p", marker_color="#56B4E9", offsetgroup="log p"),
              row=1, col=1)
for name, mine, colour in (("log p + g", False, "#a8a8a8"), ("the largest log p + g: the draw", True, "#E69F00")):
    ys = [v if (i == win) == mine else None for i, v in enumerate(one)]
    fig.add_trace(go.Bar(x=list(range(4)), y=ys, name=name, marker_color=colour, offsetgroup="perturbed",
                         text=[f"{v:.2f}" if v is not None else "" for v in ys], textposition="outside"),
                  row=1, col=1)
fig.add_trace(go.Bar(x=list(range(4)), y=p, name="p", marker_color="#0072B2"), row=1, col=2)
fig.add_trace(go.Bar(x=list(range(4)), y=freq, name="Gumbel-max frequency", marker_color="#009E73"), row=1, col=2)
fig.update_xaxes(title_text="token")
fig.update_yaxes(title_text="score", col=1)
fig.update_yaxes(title_text="probability", col=2)
fig.update_yaxes(range=[min(one.min(), np.log(p).min()) - 0.6, max(one.max(), 0) + 0.6], col=1)
fig.update_layout(barmode="group", width=900, height=420, legend=dict(orientation="h", y=-0.25))
fig.show()
assert np.abs(freq - p).max() < 0.02
display(Markdown(f"Largest gap between the Gumbel-max frequencies and p: **{np.abs(freq - p).max():.4f}**; in the "
                 f"single draw token {one.argmax()} won (log p + g = {one.max():.2f})."))

# %% [markdown]
# ## 3. Temperature and what a tree buys
#
# Now the real pair. We decode one prompt at temperature 0 (greedy), 0.3, 0.7 and 1.0 with AR, linear speculative
# decoding (K = 4) and DynaTree, all with `seed=0` and the default `verify="match"`. At every temperature the three
# outputs are the same tokens: under `match` the target draws the token at each position with that position's
# Gumbel noise, whichever method asked, so a speculative run is seeded AR token for token. What changes with the
# temperature is how often the draft's children hold the token the target draws. These are **one prompt and one
# seed** (48 tokens): a single sample, so neighbouring temperatures can swap places; the benchmark's Table 7
# (`docs/benchmarks.md`) averages over prompts. **Acceptance**, here and below, is defined as in 01 and 04:
# accepted draft tokens ÷ depth of the drafted trees, summed over the run (`Metrics.acceptance_rate`).

# %% tags=["nbval-ignore-output"]
pair = ModelPair.named(PAIR)   # "default", or "tiny-llama" for development
print(f"target: {pair.target_name}\ndraft:  {pair.draft_name} ({pair.drafter_kind} drafter)")

# %% tags=["nbval-ignore-output"]
prompt = ("The river flows through the old town, past the mill and the church. In the spring the water rises "
          "and the river") if not PAIR.startswith("tiny") else [5, 9, 14, 3, 22, 7]
rows, same = [], []
for temp in (0.0, 0.3, 0.7, 1.0):
    runs = {m: generate(pair, prompt, m, c, max_new_tokens=48, ignore_eos=True, temperature=temp,
                        seed=0 if temp > 0 else None)   # a seed only where something is drawn
            for m, c in (("ar", None), ("linear", LinearConfig(k=4)), ("dynatree", DynaTreeConfig.cpu()))}
    same.append(runs["linear"].tokens == runs["ar"].tokens == runs["dynatree"].tokens)
    for m in ("linear", "dynatree"):
        rows.append({"temperature": temp, "method": m, "acceptance": runs[m].metrics.acceptance_rate,
                     "L̄ (tokens per target forward)": runs[m].metrics.tokens_per_iteration})
table = pd.DataFrame(rows)
display(table)
assert all(same), "under match every method emits seeded AR's tokens"
dt = table[table.method == "dynatree"].set_index("temperature")["L̄ (tokens per target forward)"]
trend = "fell" if dt.iloc[-1] < dt.iloc[0] else "rose" if dt.iloc[-1] > dt.iloc[0] else "stayed"
steps = ", ".join(f"{t:g}: {v:.2f}" for t, v in dt.items())
display(Markdown(
    f"All {len(same)} temperatures: linear, DynaTree and AR produced the same tokens. On this prompt DynaTree's L̄ "
    f"{trend} from **{dt.iloc[0]:.2f}** greedy to **{dt.iloc[-1]:.2f}** at temperature 1.0 ({steps})"
    + (": a flatter p spreads the target's draw over more tokens than the draft's top children hold."
       if trend == "fell" else ".")))

# %% tags=["nbval-ignore-output"]
fig = go.Figure()
for m, sub in table.groupby("method"):
    fig.add_trace(go.Scatter(x=sub.temperature, y=sub["L̄ (tokens per target forward)"], mode="lines+markers", name=m))
fig.update_layout(title="L̄ against temperature (verify='match')", xaxis_title="temperature",
                  yaxis_title="L̄ (tokens per target forward)", width=640, height=360)
fig.show()

# %% [markdown]
# ## 4. `match` against `rejection` on one prompt
#
# The same DynaTree run at temperature 0.7 as section 3's (its prompt and `seed=0`), verified both ways. Under `match` the children are the draft's top-B
# by log q plus the target's own Gumbel noise (section 5 says why) and the walk goes on only if the target's draw
# is one of them. Under
# `rejection` the children are *sampled* from q without replacement and tested in turn (recursive rejection
# sampling): the first candidate x₁ is accepted with min(1, p(x₁)/q(x₁)); if it is rejected, p is replaced by the
# residual norm((p - q)+) and q by q with x₁ removed (renormalised), and the second candidate is accepted with
# min(1, p'(x₂)/q'(x₂)) under those; and so on; if every candidate is rejected the token is drawn from the last
# residual. Each step keeps the output distributed as p (the proof above, applied to p' and q'), so the rule is
# exact in distribution.

# %% tags=["nbval-ignore-output"]
cfg = DynaTreeConfig.cpu()
match = generate(pair, prompt, "dynatree", cfg, max_new_tokens=48, ignore_eos=True, trace=True, temperature=0.7,
                 seed=0)
rejection = generate(pair, prompt, "dynatree", cfg, max_new_tokens=48, ignore_eos=True, trace=True,
                     temperature=0.7, seed=0, verify="rejection")
lm, lr = match.metrics.tokens_per_iteration, rejection.metrics.tokens_per_iteration
in_table = table[(table.method == "dynatree") & (table.temperature == 0.7)]["L̄ (tokens per target forward)"].item()
assert lm == in_table, "under match this is section 3's DynaTree run at 0.7, token for token"
am, ar_ = match.metrics.acceptance_rate, rejection.metrics.acceptance_rate
verdict = ("rejection accepted more" if lr > lm + 0.05 else "match accepted more" if lm > lr + 0.05
           else "the two are within 0.05 of each other")
display(Markdown(
    f"Over 48 tokens of one prompt and seed (section 3's: under match L̄ is the table's {in_table:.2f} at 0.7): "
    f"L̄ **{lm:.2f}** under match, **{lr:.2f}** under rejection (acceptance "
    f"{am:.2f} against {ar_:.2f}): {verdict}. One run of 48 tokens is a small sample; Table 7 in "
    f"`docs/benchmarks.md` compares the rules over prompts."))

# %% [markdown]
# One iteration's tree under `match`, coloured by **p(token)**: the target's (warped) probability of each
# node's token at its parent; the iteration is the one where the run rejected its likeliest draft. Under sampling the tree view colours by it by default; the accepted path is where
# the target's draw landed on a drafted child.

# %% tags=["nbval-ignore-output"]
from dynatree_viz.core.scene import TreeScene
from dynatree_viz.core.tokens import resolve_namer

namer = resolve_namer(match.trace)


def judged(rec):
    """(scene, statuses, p(token), the drafted nodes the target judged: accepted or rejected, with a known p)."""
    scene = TreeScene.from_record(rec, namer)
    status, p_tok = scene.statuses(), scene.target_prob
    return scene, status, p_tok, [u for u, st in enumerate(status) if st in ("accepted", "rejected") and p_tok[u] is not None]


def likeliest_rejected(rec):
    """The largest p(token) of a drafted node the target's draw rejected (0 if none)."""
    _, status, p_tok, nodes = judged(rec)
    return max((p_tok[u] for u in nodes if status[u] == "rejected"), default=0.0)


# the iteration to draw: the one where the likeliest draft was rejected (a case where sampling, not the draft, decides)
shown_it = max(range(len(match.trace.iterations)), key=lambda i: likeliest_rejected(match.trace.iterations[i]))
rec0 = match.trace.iterations[shown_it]
dv.tree_figure(rec0, title=f"DynaTree at temperature 0.7 (match), iteration {shown_it}: colour = p(token)").show()
scene, status, p_tok, nodes = judged(rec0)
likely = max((u for u in nodes if status[u] == "rejected"), key=lambda u: p_tok[u], default=None)
unlikely = min((u for u in nodes if status[u] == "accepted"), key=lambda u: p_tok[u], default=None)
said = []
if likely is not None:
    parent = rec0.tree.parents[likely]
    said.append(f"Iteration {shown_it}, the run's likeliest draft that was rejected: **{q_t(scene.texts[likely])}** had "
                f"p = {p_tok[likely]:.3f} at its parent and is still marked rejected: under sampling the target draws "
                f"its own token (here {q_t(namer(scene.target_argmax[parent]))}, with p = "
                f"{rec0.sampling['choice_prob'][parent]:.2g}), so even a likely draft loses whenever the draw lands "
                f"elsewhere, with probability 1 − p = {1 - p_tok[likely]:.3f} here.")
if unlikely is not None:
    said.append(f"The other way round, {q_t(scene.texts[unlikely])} was accepted with p = {p_tok[unlikely]:.3f}: "
                f"a 1-in-{1 / p_tok[unlikely]:.0f} draw, followed because the draft had drafted that very token.")
display(Markdown(" ".join(said)))

# %% [markdown]
# `dv.sampling_view` shows one node's draw: p and q side by side for the tokens the trace knows there, their
# overlap min(p, q) (what is kept from the draft), and below it the draw itself. Under `match`: the perturbed
# scores log p + g, the largest wins (the drawn token in orange). `dv.match_example` picks a node of the run where
# the draft ran (q is known) and the drawn token's p can be seen, preferring a draw that is not p's most probable
# token: sampling, not an argmax.

# %% tags=["nbval-ignore-output"]
shown = dv.match_example(match.trace, min_p=0.05)
assert shown is not None, "no match node with a visible draw in this run"
drawn_row = next(r for r in shown.rows if r.token == shown.drawn)
top_row = max(shown.rows, key=lambda r: r.p or 0.0)
dv.sampling_view(match.trace, shown.iteration, node=shown.node).show()
tok = dv.core.style.visible_token
how = (f", not p's most probable '{tok(top_row.text)}' (p = {top_row.p:.3f}): the noise g decided"
       if top_row.token != shown.drawn else ", p's most probable token")
walk = (". The draft had drafted it, so the walk went on into it." if shown.followed is not None
        else ". No drafted child carries it: it was committed as the bonus token.")
display(Markdown(f"Iteration {shown.iteration}, node {shown.node}: the target drew **'{tok(drawn_row.text)}'** "
                 f"with p = {drawn_row.p:.3f} (q = {drawn_row.q:.3f}){how}{walk}"))

# %% [markdown]
# Under `rejection` a node's candidates are tested in turn, each against the distributions the rejections
# before it left. One coin is one draw, so we do not show an arbitrary node (a node accepted at once shows no
# rule at all, and a coin a hair from its threshold is luck): `dv.rejection_example` picks, from this run, a node
# where a candidate was **rejected and the next sibling was tested against the residual**, and one where **every
# candidate was rejected and the token was drawn from the last residual**, each with every coin at least 0.05
# from its threshold. Each figure draws p_i, q_i, min(p_i, q_i) and the residual at every step, on a log scale
# (a bar of 10⁻⁴ shows beside one of 0.9), on the tokens that matter plus one bar, "all other tokens", for
# the mass on the rest; a bar is absent where the value is 0 (the residual is 0 wherever q_i ≥ p_i, and q_i
# is 0 at a rejected candidate). A draw from the last residual is drawn on a linear scale, with the residual's
# cumulative distribution as a strip and the uniform u marked on it.

# %% tags=["nbval-ignore-output"]
from dynatree_viz.views.rejection import OTHER, rejection_steps_data, rejection_steps_view

counts = dv.rejection_counts(rejection.trace)
cases = {case: dv.rejection_example(rejection.trace, margin=0.05, case=case) for case in ("sibling", "residual")}
assert all(cases.values()), f"this run has no clear case of {[c for c, v in cases.items() if v is None]}"
steps = {case: rejection_steps_data(rejection.trace, ex.iteration, ex.node) for case, ex in cases.items()}
display(Markdown(
    f"Over the {counts.nodes} nodes of the rejection run that had candidates, the first candidate was accepted at "
    f"**{counts.first}** ({counts.first_rate:.0%}), a later sibling (tested against the residual) at "
    f"**{counts.sibling}**, and the residual supplied the token at **{counts.residual}**."))
m = rejection.metrics
accepted_tokens = round(m.mean_accepted_length * m.iterations)   # Σ accepted draft tokens over the run
depth_total = round(accepted_tokens / m.acceptance_rate) if m.acceptance_rate else 0   # Σ depth of the trees
assert depth_total == 0 or abs(accepted_tokens / depth_total - m.acceptance_rate) < 1e-9
display(Markdown(
    f"Three numbers on this page say \"accepted\", and they count different things. **α**, the acceptance "
    f"probability per proposal (Σ min(p, q): {overlap:.2f} for section 1's p and q, {accepted / 20_000:.1%} of its "
    f"draws), is the chance that one drafted candidate passes its coin. **Nodes accepting a drafted token**: of the "
    f"{counts.nodes} nodes where this run's walk tested candidates, {counts.first + counts.sibling} "
    f"({(counts.first + counts.sibling) / counts.nodes:.0%}) accepted one (first or sibling) and the walk went on; "
    f"at the other {counts.residual} the residual supplied the token and the walk stopped. **Acceptance** (as in "
    f"section 3: accepted draft tokens ÷ depth of the drafted trees): {accepted_tokens} accepted tokens over the "
    f"{depth_total} levels its {m.iterations} trees drafted = **{m.acceptance_rate:.2f}**. It is the smallest of the "
    f"three because a walk stops at its first rejection: the levels below it count in the depth, but no candidate "
    f"there is ever tested."))



def at(data, values, token):
    return values[data.tokens.index(token)]


# %% tags=["nbval-ignore-output"]
d = steps["sibling"]
one, two = d.steps[0], d.steps[-1]
gain = max(d.tokens, key=lambda t: at(d, one.residual, t) - at(d, one.p, t))  # where the residual added most
assert not one.accepted and two.accepted and one.coin > one.threshold and two.coin < two.threshold
display(Markdown(
    f"**A rejection, then a sibling** (iteration {d.iteration}, node {d.node}). The first candidate {q_t(one.text)} "
    f"has p = {at(d, one.p, one.candidate):.3g} and q = {at(d, one.q, one.candidate):.3g}: min(1, p/q) = "
    f"**{one.threshold:.3f}**, and its coin {one.coin:.3f} lies above it, so it is rejected. The residual "
    f"norm((p − q)+) keeps only what the target wanted beyond the draft: {q_t(d.texts[d.tokens.index(gain)])} goes "
    f"from p = {at(d, one.p, gain):.3g} to {at(d, one.residual, gain):.3g}, and {q_t(one.text)} drops to "
    f"{at(d, one.residual, one.candidate):.3g}. "
    + (f"{len(d.steps) - 2} more candidate(s) are rejected the same way; then " if len(d.steps) > 2 else "")
    + ("t" if len(d.steps) > 2 else "T") + f"he sibling {q_t(two.text)} is tested against that residual and q without the rejected candidates: p_i = "
    f"{at(d, two.p, two.candidate):.3g}, q_i = {at(d, two.q, two.candidate):.3g}, min(1, p_i/q_i) = "
    f"**{two.threshold:.3f}**, coin {two.coin:.3f}: accepted, and {q_t(d.drawn_text)} is the token. The "
    f"{len(d.tokens)} tokens drawn hold {sum(one.p):.1%} of p and {sum(one.residual):.1%} of step 1's residual; the "
    f"bar **{OTHER}** holds the rest ({1 - sum(one.p):.1%} and {1 - sum(one.residual):.1%}), so each distribution's "
    f"bars sum to 1."))
rejection_steps_view(rejection.trace, d.iteration, d.node).show()

# %% tags=["nbval-ignore-output"]
d = steps["residual"]
lo, hi = d.interval
rejected = ", ".join(f"{q_t(s.text)} (coin {s.coin:.3f} ≥ {s.threshold:.3f})" for s in d.steps)
assert d.residual_draw and lo <= d.uniform < hi
display(Markdown(
    f"**Every candidate rejected** (iteration {d.iteration}, node {d.node}): {rejected}. The token is drawn from "
    f"the last residual with one uniform u = **{d.uniform:.3f}**: it falls in [{lo:.3f}, {hi:.3f}), the interval of "
    f"{q_t(d.drawn_text)} in that residual's cumulative distribution (tokens in id order), so {q_t(d.drawn_text)} "
    f"is the token. The last residual gives it {at(d, d.last_residual, d.drawn):.3g}, where p gave it "
    f"{at(d, d.steps[0].p, d.drawn):.3g}: the mass the draft's candidates did not cover, renormalised. The "
    f"{len(d.tokens)} tokens drawn hold {sum(d.last_residual):.1%} of that residual; the other "
    f"{1 - sum(d.last_residual):.1%} lies on tokens not drawn (the bar **{OTHER}**), and the strip below the last "
    f"panel lays the residual out in id order with u marked."
    + "".join(f" At step {i + 1}, {q_t(s.text)} had p_i = 0: the draft already covered all the target wanted of it, "
              f"so min(1, p_i/q_i) = 0 and no coin could accept it." for i, s in enumerate(d.steps)
              if at(d, s.p, s.candidate) == 0)))
rejection_steps_view(rejection.trace, d.iteration, d.node).show()

# %% [markdown]
# ## 5. Sharing the noise: drafts that know the target's dice
#
# Under `match` the target's token at position t is argmax(log p + g), and g is fixed by the seed and the position
# alone: the draft can compute it too. So the drafters rank their candidates by **log q + g** with the *same* g
# (`draft_noise="shared"`, the default under `match`): the first child is the draft's own Gumbel-max sample,
# *coupled* to the target's, and where q is close to p the two perturbed argmaxes are the same token. How often,
# exactly: P(agree) = Σ_x 1 / Σ_y max(p_y / p_x, q_y / q_x), which is at least (1 - TV) / (1 + TV) and at most
# 1 - TV, the best any way of pairing a draw from q with a draw from p can do (Daliri, Musco and Suresh 2024).
# Ranked by q alone (`draft_noise="none"`) the first child is q's most probable token, accepted with probability
# p(argmax q). The output does not change either way (it is seeded AR's); only what the draft proposes does.
#
# On the four-token p and q of section 1 (a draft that gets the order wrong), 20,000 of the engine's own noise
# vectors (one per position), shared by p and q, against the closed form:

# %% tags=["nbval-ignore-output"]
from dynatree_core.policy.sampling import coupled_agreement, gumbel_noise, total_variation

G = np.stack([gumbel_noise(0, t, 4) for t in range(20_000)])       # seed 0, positions 0 .. 19,999
G_other = np.stack([gumbel_noise(1, t, 4) for t in range(20_000)])  # another seed: noise the draft does not share
target_draw = np.argmax(np.log(p) + G, axis=1)
shared_rate = np.mean(target_draw == np.argmax(np.log(q) + G, axis=1))
independent_rate = np.mean(target_draw == np.argmax(np.log(q) + G_other, axis=1))
closed, tv = coupled_agreement(p, q), total_variation(p, q)
top1 = p[np.argmax(q)]
se = np.sqrt(closed * (1 - closed) / 20_000)
assert abs(shared_rate - closed) < 5 * se and (1 - tv) / (1 + tv) <= closed <= 1 - tv
assert shared_rate > max(top1, independent_rate)
names = ["q's most probable token<br>(draft_noise='none')", "a sample from q,<br>its own noise",
         "shared noise:<br>closed form", "shared noise:<br>20,000 draws"]
values = [top1, independent_rate, closed, shared_rate]
colours = ["#a8a8a8", "#a8a8a8", "#009E73", "#009E73"]
fig = go.Figure(go.Bar(x=names, y=values, marker_color=colours, text=[f"{v:.3f}" for v in values],
                       textposition="outside", showlegend=False))
# the bounds are limits on any coupling, not rates anyone measured: lines across the bars, not bars
for bound, label in (((1 - tv) / (1 + tv), "lower bound (1 − TV) / (1 + TV)"), (1 - tv, "upper bound 1 − TV")):
    fig.add_hline(y=bound, line=dict(color="#0072B2", dash="dash", width=1.5),
                  annotation_text=f"{label} = {bound:.3f}", annotation_position="top left",
                  annotation_font=dict(color="#0072B2", size=11))
fig.update_layout(title="how often the draft's first proposal is the target's draw (p and q of section 1)",
                  yaxis_title="probability", yaxis_range=[0, 1], width=820, height=420)
fig.show()
display(Markdown(
    f"The draft's first proposal is the target's draw **{shared_rate:.1%}** of the time with shared noise (closed form "
    f"{closed:.3f}, one standard error {se:.4f}), against **{top1:.0%}** for q's most probable token and "
    f"{independent_rate:.1%} for a sample from q with noise of its own. TV(p, q) = {tv:.2f} bounds it between "
    f"{(1 - tv) / (1 + tv):.3f} and {1 - tv:.3f}."))

# %% [markdown]
# On the real pair: DynaTree and linear drafting (K = 3) at temperature 0.7 and 1.0, shared noise against ranking
# by q alone (`draft_noise="none"`, the first bar above: no noise at all), on two prompts with seed 0 (48 tokens a run); acceptance is accepted draft tokens ÷ tree depth, as in
# section 3. Every run's tokens are seeded AR's, shared noise or not (asserted).

# %% tags=["nbval-ignore-output"]
prompts2 = [prompt, "Photosynthesis is the process by which green plants"] if not PAIR.startswith("tiny") else [prompt, [7, 1, 40, 12]]
rows2, traced = [], {}
for temp in (0.7, 1.0):
    for i, pr in enumerate(prompts2):
        for seed in (0,):
            ar = generate(pair, pr, "ar", max_new_tokens=48, ignore_eos=True, temperature=temp, seed=seed).tokens
            for m, c in (("linear", LinearConfig(k=3)), ("dynatree", DynaTreeConfig.cpu())):
                for noise in ("shared", "none"):
                    keep = (temp, i, seed, m) == (0.7, 0, 0, "dynatree")  # one tree, drawn both ways, below
                    res = generate(pair, pr, m, c, max_new_tokens=48, ignore_eos=True, temperature=temp, seed=seed,
                                   draft_noise=noise, trace=keep)
                    assert res.tokens == ar, "under match every run is seeded AR's tokens"
                    traced.update({noise: res.trace} if keep else {})
                    rows2.append({"temperature": temp, "method": m, "draft noise": noise,
                                  "acceptance": res.metrics.acceptance_rate, "L̄": res.metrics.tokens_per_iteration})
noise_table = pd.DataFrame(rows2).groupby(["temperature", "method", "draft noise"]).mean().reset_index()
display(noise_table)
fig = go.Figure()
for (m, noise), sub in noise_table.groupby(["method", "draft noise"]):
    fig.add_trace(go.Bar(x=[f"temperature {t:g}" for t in sub.temperature], y=sub.acceptance,
                         name=f"{m}, " + ("shared noise" if noise == "shared" else "ranked by q (none)"),
                         marker_color="#0072B2" if m == "dynatree" else "#E69F00",
                         marker_pattern_shape="" if noise == "shared" else "/",
                         opacity=1.0 if noise == "shared" else 0.55))
fig.update_layout(barmode="group", title="acceptance (accepted tokens ÷ tree depth): shared noise against ranking by q alone",
                  yaxis_title="acceptance", width=760, height=400)
fig.show()
wide = noise_table.pivot_table(index=["temperature", "method"], columns="draft noise", values="L̄")
gains = ", ".join(f"{m} at {t:g}: {r['none']:.2f} → {r['shared']:.2f}" for (t, m), r in wide.iterrows())
better = int((wide["shared"] > wide["none"]).sum())
display(Markdown(f"L̄ ranked by q alone → with shared noise, averaged over the 2 prompts: {gains}. Shared noise drafted "
                 f"the longer accepted paths in **{better} of {len(wide)}** settings here; the benchmark "
                 f"(`docs/benchmarks.md`, Table 7) measures it over more prompts, with speed."))

# %% [markdown]
# The same first iteration drafted both ways (temperature 0.7, seed 0, the same prompt): the target's draw at
# every position is the same in the two pictures; what differs is which children the draft put there. Below,
# the root's draw with shared noise: the target's log p + g and the draft's log q + g side by side.

# %% tags=["nbval-ignore-output"]
for noise in ("none", "shared"):
    rec = traced[noise].iterations[0]
    dv.tree_figure(rec, title=f"draft_noise='{noise}', iteration 0: {len(rec.accepted_path)} drafted token(s) "
                              "accepted").show()
dv.sampling_view(traced["shared"], 0, node=0).show()

# %% [markdown]
# **Take-aways.** Sampling costs speculative decoding nothing in exactness: `match` reproduces seeded AR token
# for token, `rejection` reproduces the target's distribution (min(p, q) + (p - q)+ = p). What it costs in
# acceptance depends on how much of the target's mass the draft's children cover at each temperature: measure
# it on your prompts (section 3 is one prompt; Table 7 averages).
#
# ## What to try next
#
# * The benchmark at several temperatures on both datasets: `dynatree bench --temperature 0,0.7,1.0 --seed 0`
#   (Table 7: acceptance, L̄ and speedup by temperature; the measured run is in `docs/benchmarks.md`), and
#   `--verify rejection` for the papers' rule.
# * `top_p=0.9` or `top_k=20` on the cells above: truncating p gives the draft's top children more of the mass.
# * `dv.explore(TreeSession(pair, prompt))` (see 03): in live mode the explorer has temperature, top-p and seed
#   controls; with a fixed seed, moving the temperature changes only the draws it should.
# * `dv.sampling_view(trace, iteration, node)` at other nodes: where the draft's q and the target's p overlap,
#   rejection accepts; where they do not, the residual decides. `rejection_steps_view(trace, iteration, node)`
#   shows the steps at any node of a traced `verify="rejection"` run where a candidate was rejected.
