"""A realistic synthetic trace, built without any model (for notebooks, docs and tests).

The "target" greedily continues a fixed passage; the "draft" usually ranks the target's next
word first, sometimes second or third, sometimes not at all, with a confidence that varies from
node to node. Trees are grown by the real :func:`dynatree_core.policy.growth.grow_tree` under the real
growth rule and history adapter, so the resulting :class:`~dynatree_core.records.trace.Trace` has
exactly the shape the engine records (including pruned candidates and every stop reason).
Everything is seeded: the same arguments always give the same trace.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from dynatree_core.policy.config import DecoderConfig, DynaTreeConfig
from dynatree_core.policy.history import HistoryAdapter
from dynatree_core.records.metrics import summarize
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import DraftTree
from dynatree_core.policy.growth import grow_tree

PASSAGE = (
    "Speculative decoding lets a small draft model propose several tokens that a large target "
    "model then verifies in a single forward pass. A tree of drafts covers more than one guess "
    "per position, and the target accepts the longest path that matches its own greedy choice. "
    "When the draft is confident the tree grows deep and narrow; when it hesitates the tree "
    "grows wide and shallow, so every verified node has a fair chance of being accepted.\n"
    "The output is exactly what the target alone would have written, only faster."
)
FILLER = ("the", "a", "of", "model", "token", "tree", "draft", "is", "and", "to", "in", "it",
          "that", "fast", "slow", "path", "one", "more", "verify", "can")
EOS_TEXT = "<|endoftext|>"


class _World:
    """Vocabulary, the target's greedy text and the fake draft distribution."""

    def __init__(self, seed: int, top_k: int):
        words = [("\n" if w == "" else w) for w in PASSAGE.replace("\n", " \n ").split(" ")]
        pieces: list[str] = []
        for i, w in enumerate(words):
            if w == "\n":
                pieces.append("\n")
            else:
                pieces.append(w if (i == 0 or words[i - 1] == "\n") else " " + w)
        vocab: list[str] = [EOS_TEXT]
        for p in pieces + [" " + f for f in FILLER]:
            if p not in vocab:
                vocab.append(p)
        self.vocab = vocab
        self.ids = {t: i for i, t in enumerate(vocab)}
        self.text_ids = [self.ids[p] for p in pieces] + [0]  # the target ends with EOS
        self.seed = seed
        self.top_k = top_k

    def _rng(self, *key: Any) -> np.random.Generator:
        h = hashlib.blake2b(repr((self.seed,) + key).encode(), digest_size=8).digest()
        return np.random.default_rng(int.from_bytes(h, "little"))

    def target_next(self, context: tuple[int, ...]) -> int:
        """The target's greedy next token after ``context`` (output tokens so far)."""
        m = len(context)
        if m < len(self.text_ids) and list(context) == self.text_ids[:m]:
            return self.text_ids[m]
        return int(self._rng("target", context).integers(1, len(self.vocab)))

    def draft_topk(self, context: tuple[int, ...]) -> tuple[list[int], list[float]]:
        """Draft top-k (ids, log-probs, descending) after ``context``."""
        rng = self._rng("draft", context)
        k = self.top_k
        # A confidence profile that mixes confident, medium and hesitant nodes.
        alpha = rng.choice([0.08, 0.5, 2.0], p=[0.55, 0.3, 0.15])
        probs = np.sort(rng.dirichlet([alpha] * (k + 4)))[::-1][:k]
        truth = self.target_next(context)
        rank = int(rng.choice([0, 1, 2, k], p=[0.74, 0.13, 0.05, 0.08]))
        others = [int(t) for t in rng.permutation(np.arange(1, len(self.vocab))) if t != truth]
        toks = others[: k]
        if rank < k:
            toks.insert(rank, truth)
            toks = toks[:k]
        lps = [math.log(max(float(p), 1e-12)) for p in probs]
        return toks, lps


def synthetic_trace(n_iterations: int = 12, *, seed: int = 0,
               config: DecoderConfig | None = None, max_new_tokens: int = 200,
               prompt: str = "Explain speculative decoding.") -> Trace:
    """A deterministic synthetic :class:`Trace` (default: DynaTree with history adaptation).

    ``config`` may be any decoder config (``DynaTreeConfig``, ``FixedTreeConfig``,
    ``LinearConfig``); e.g. ``FixedTreeConfig(d=5, b=4, tau=0.0, n_max=256)`` gives 256-node
    trees for stress-testing the views.
    """
    cfg = config if config is not None else DynaTreeConfig()
    world = _World(seed, top_k=max(cfg.trace_top_k, getattr(cfg, "b_max", 1), getattr(cfg, "b", 1)))
    adapter = HistoryAdapter(cfg) if isinstance(cfg, DynaTreeConfig) else None
    prompt_ids = [world.ids.setdefault(w, len(world.vocab)) for w in prompt.split(" ")]
    for w in prompt.split(" "):
        if w not in world.vocab:
            world.vocab.append(w)
    output: list[int] = []
    records: list[IterationRecord] = []
    root = prompt_ids[-1]
    for r in range(n_iterations):
        if len(output) >= max_new_tokens or (output and output[-1] == 0):
            break
        rec = _demo_iteration(world, cfg, adapter, r, root, output, len(prompt_ids) - 1 + len(output),
                              max_new_tokens)
        records.append(rec)
        output.extend(rec.committed)
        root = rec.committed[-1]
    return Trace(method=cfg.method, config=cfg.to_dict(), target_name="demo-target",
                 draft_name="demo-draft", prompt_tokens=prompt_ids, prompt_text=prompt,
                 eos_token_id=0, max_new_tokens=max_new_tokens, iterations=records,
                 tokens=output, text="".join(world.vocab[t] for t in output),
                 metrics=_demo_metrics(records, output).to_dict(), versions={"dynatree_viz": "demo"})


#: the rows' prompts in :func:`synthetic_batch_traces` (cycled): rows differ in prompt length too
BATCH_PROMPTS = ("Explain speculative decoding.", "What is a draft tree?",
                 "Why verify many drafts at once in a single forward?")


def synthetic_batch_traces(batch_size: int = 3, n_iterations: int = 6, seed: int = 0) -> list[Trace]:
    """The traces of a synthetic batched run, one per row, as ``generate(pair, prompts)`` records them.

    Row b is :func:`synthetic_trace` with seed ``seed + b`` (so rows differ in tree sizes and accepted
    lengths), and the last row finishes early: its ``max_new_tokens`` is what it committed in its first
    ``n_iterations // 2`` iterations. The batch fields are then written as the engine writes them:
    ``Trace.batch = {"size": B, "row": b}`` and per record ``iteration``, ``active`` (the rows with a
    record of that iteration), ``nodes`` (n_b = 1 + its drafted nodes) and ``padded_width``
    (W = max n_b over the active rows). Timings stay each row's own (a real batch shares its verify).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an int >= 2 (a batch of 1 has no batch fields), got {batch_size!r}")
    if isinstance(n_iterations, bool) or not isinstance(n_iterations, int) or n_iterations < 2:
        raise ValueError(f"n_iterations must be an int >= 2 (the last row finishes before the others), "
                         f"got {n_iterations!r}")
    prompts = [BATCH_PROMPTS[b % len(BATCH_PROMPTS)] for b in range(batch_size)]
    rows = [synthetic_trace(n_iterations, seed=seed + b, prompt=prompts[b]) for b in range(batch_size)]
    last = batch_size - 1
    early = n_iterations // 2
    if len(rows[last]) > early:  # the same trees up to there: max_new_tokens only cuts the output
        budget = sum(len(r.committed) for r in rows[last].iterations[:early])
        rows[last] = synthetic_trace(n_iterations, seed=seed + last, prompt=prompts[last],
                                     max_new_tokens=budget)
    for i in range(max(len(t) for t in rows)):
        active = [b for b, t in enumerate(rows) if i < len(t)]
        width = max(len(rows[b][i].tree) for b in active)
        for b in active:
            rows[b][i].batch = {"iteration": i, "padded_width": width, "active": list(active),
                                "nodes": len(rows[b][i].tree)}
    for b, t in enumerate(rows):
        t.batch = {"size": batch_size, "row": b}
    return rows


def _demo_iteration(world: _World, cfg: DecoderConfig, adapter: HistoryAdapter | None, r: int,
                    root: int, output: list[int], prefix_len: int,
                    max_new_tokens: int) -> IterationRecord:
    """Iteration ``r``: grow a tree with the demo draft, verify it with the demo target."""
    before = adapter.state.to_dict() if adapter else None
    rule = adapter.rule() if adapter else cfg.growth_rule()
    out_so_far = tuple(output)

    def ctx(tree: DraftTree, i: int) -> tuple[int, ...]:
        return out_so_far + tuple(tree.tokens[j] for j in tree.path_to(i))

    def propose(tree: DraftTree, ids: list[int]):
        return [world.draft_topk(ctx(tree, i)) for i in ids]

    tree = grow_tree(root, rule, propose)
    argmax = [world.target_next(ctx(tree, i)) for i in range(len(tree))]
    path, bonus = tree.greedy_path(argmax)
    committed = [tree.tokens[i] for i in path] + [bonus]
    if 0 in committed:
        committed = committed[: committed.index(0) + 1]
    committed = committed[: max_new_tokens - len(output)]
    after = adapter.update(len(path) / tree.depth if tree.depth else None).to_dict() if adapter else None
    rng = world._rng("timing", r)
    timings = {"draft": round(0.0042 * tree.draft_calls * (1 + 0.1 * rng.random()), 6),
               "verify": round((0.021 + 0.00035 * (tree.num_drafted + 1)) * (1 + 0.1 * rng.random()), 6),
               "commit": round(0.0008 * (1 + 0.1 * rng.random()), 6)}
    prob = [None] + [0.9 if argmax[tree.parents[i]] == tree.tokens[i] else 0.03
                     for i in range(1, len(tree))]
    return IterationRecord(
        index=r, prefix_len=prefix_len, tree=tree, target_argmax=argmax,
        accepted_path=path, committed=committed,
        bonus=bonus if len(committed) == len(path) + 1 else None,
        position_ids=[prefix_len + d for d in tree.depths], target_prob_drafted=prob,
        token_texts=[world.vocab[t] for t in tree.tokens],
        committed_texts=[world.vocab[t] for t in committed],
        history_before=before, history_after=after, timings=timings,
        draft_forwards=tree.draft_calls, target_forwards=1)


def _demo_metrics(records: list[IterationRecord], output: list[int]) -> Any:
    """The run's metrics from its records (a 0.05 s prefill)."""
    return summarize(
        new_tokens=len(output), wall_time_s=sum(sum(r.timings.values()) for r in records) + 0.05,
        ttft_s=0.05 + sum(records[0].timings.values()) if records else None,
        iterations=len(records), accepted=[r.accepted_length for r in records],
        committed=[len(r.committed) for r in records], depths=[r.tree.depth for r in records],
        tree_sizes=[r.num_nodes for r in records],
        target_forwards=1 + len(records), draft_forwards=sum(r.draft_forwards for r in records),
        prefill_time_s=0.05, draft_time_s=sum(r.timings["draft"] for r in records),
        verify_time_s=sum(r.timings["verify"] for r in records),
        commit_time_s=sum(r.timings["commit"] for r in records), peak_memory_bytes=None,
        peak_memory_kind="none", stopped_by="eos" if output and output[-1] == 0 else "max_new_tokens",
        speculative=True)


def synthetic_results(kind: str = "methods") -> list[dict[str, Any]]:
    """Synthetic benchmark rows in the shape :func:`dynatree_viz.compare_figure` expects:
    ``kind="methods"`` (one row per method and dataset) or ``"sweep"`` (a ``d0`` sweep)."""
    if kind not in ("methods", "sweep"):
        raise ValueError(f"kind must be 'methods' or 'sweep', got {kind!r}")
    rows: list[dict[str, Any]] = []
    base = {"wikitext": 21.0, "pg19": 19.5}
    methods = {"ar": (1.0, 1.0, None), "linear": (1.55, 2.4, 0.58),
               "fixed_tree": (1.72, 2.9, 0.55), "dynatree": (1.94, 3.3, 0.66)}
    for ds, tps in (base.items() if kind == "methods" else ()):
        for m, (sp, lbar, acc) in methods.items():
            rows.append({"method": m, "label": m, "dataset": ds, "tokens_per_s": tps * sp,
                         "speedup": sp, "tokens_per_iteration": lbar, "acceptance_rate": acc})
    for d0 in (range(2, 8) if kind == "sweep" else ()):
        for m, gain in (("fixed_tree", 0.0), ("dynatree", 0.2)):
            sp = 1.2 + gain + 0.5 * math.exp(-((d0 - 5) ** 2) / 6)
            rows.append({"method": m, "label": m, "dataset": "wikitext", "d0": d0,
                         "tokens_per_s": 21.0 * sp, "speedup": sp,
                         "tokens_per_iteration": 1.6 + 0.3 * d0 - 0.02 * d0 * d0 + gain,
                         "acceptance_rate": 0.85 - 0.05 * d0 + gain / 4})
    return rows
