"""Several prompts decoded together: the same four phases, every row in ONE forward per phase step.

:class:`BatchRun` keeps one draft tree per row, grown by the row's own rule (its history, its
sampler, its tokens left), and runs the models for all rows at once:

* **draft**: each row's :meth:`~dynatree_core.runtime.tree.tree.DeviceTree.growth` yields the
  level it needs; every row that drafts at level l is answered by ONE draft forward
  (:class:`~dynatree_core.drafters.batch_model.BatchModelDraft`, or the feature draft's
  :class:`~dynatree_core.drafters.batch_feature.BatchFeatureDraft` reading the target's hidden states
  from the same verify), rows done growing feed padding;
* **verify**: every active row's ``[root] + tree`` padded to the widest, W, in ONE target forward,
  each row under its own 4D mask at its own logical positions (:class:`~dynatree_core.runtime.cache.rows.RowsCache`);
* **select / commit**: per row, exactly as at batch 1; a row's kept entries become live where they
  were written, the rest are dead in its mask; a finished row leaves the batch.

An iteration where no row drafts (batched AR, or one a shared budget sits out) is an **AR step** for the batch
(greedy): the roots in ONE forward, every row's token in ONE read, each selection built on the host and one
commit for all rows, so its tensor ops do not grow with B (a tree, a select and a read per row had cost about
900 ops per iteration at B = 8).

Row b's tokens are its prompt's batch-1 tokens: greedy, ``match`` with its seed, and ``rejection``
with its own random stream (its draws never depend on its neighbours). Runs on the eager runtime or
the static one (the target's cache in static buffers,
:class:`~dynatree_core.runtime.cache.rows_static.SlotKV`, each verify padded to a bucket); a single
prompt runs :class:`~dynatree_core.engine.loop.DecodingRun`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from dynatree_core.drafters import DraftContext, Drafter, LookupDrafter, MixDrafter
from dynatree_core.drafters.batch_feature import BatchFeatureDraft
from dynatree_core.drafters.batch_model import BatchModelDraft
from dynatree_core.engine.batch_calibrate import batch_cost
from dynatree_core.engine.collector import RunCollector, new_trace
from dynatree_core.engine.loop import adapt, cut_committed, draft_top_k, drafted_on_path, rule_for, tail_lookup
from dynatree_core.engine.run_checks import check_run, check_window, encode_prompt, eos_set, widest_tree
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.config import DecoderConfig, DynaTreeConfig, resolve_config
from dynatree_core.policy.batch_budget import BatchBudget, BatchChoice, BatchCost, check_objective
from dynatree_core.policy.history import HistoryAdapter, HistoryState, check_history
from dynatree_core.policy.sampling import GREEDY, SamplingConfig
from dynatree_core.records.result import GenerationResult
from dynatree_core.records.trace import IterationRecord
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.cache.rows import RowsCache
from dynatree_core.runtime.tree.codes import CODE
from dynatree_core.runtime.tree.tree import DeviceTree, Selection, root_selection
from dynatree_core.runtime.cache.rows_static import SlotKV
from dynatree_core.runtime.static.fast_path import bucket, buckets_for, resolve_runtime, static_capacity
from dynatree_core.runtime.host_syncs import HostSyncs, to_device
from dynatree_core.runtime.sampling import draft_candidates, make_samplers

#: the runtimes a batch runs on: the dynamic caches, or static buffers with bucketed verify widths
BATCH_RUNTIMES = ("eager", "static")
#: the drafters a batch runs: one batched draft model or feature draft (prompt lookup mixed in or
#: not), or prompt lookup per row (no forward)
BATCH_DRAFTERS = ("model", "feature", "lookup", "model+lookup", "feature+lookup")


@dataclass
class BatchIteration:
    """One batch iteration: every active row's record, the padded width W and the forwards it ran."""

    index: int
    records: dict[int, IterationRecord]  # prompt index -> its record
    padded_width: int
    draft_forwards: int
    target_forwards: int = 1


@dataclass
class _Row:
    """One prompt's state in the batch (its own rule, history, samplers, drafter and collector)."""

    index: int
    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingConfig
    adapter: HistoryAdapter | None
    col: RunCollector
    drafter: Drafter | None
    draft_sampler: Any
    chooser: Any
    out: list[int] = field(default_factory=list)
    root: int = 0
    tree: DeviceTree | None = None
    #: the prompt lookup a lookup tail reads, and whether the row keeps it up to date itself
    tail: LookupDrafter | None = None
    own_tail: bool = False
    result: GenerationResult | None = None
    #: the row's root-only tree, kept for its AR steps (:meth:`BatchRun._step_trees`; None until the first)
    step_tree: DeviceTree | None = None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.out)


def _per_row(name: str, value: Any, rows: int) -> list:
    """``value`` for every row: one value for all, or a list with one entry per row."""
    if isinstance(value, (list, tuple)):
        if len(value) != rows:
            raise ValueError(f"{name} is a list of {len(value)} entries; pass one per prompt ({rows}) or one value")
        return list(value)
    return [value] * rows


def is_batch(prompt: Any) -> bool:
    """Whether ``prompt`` is several prompts (a list of texts or of token-id lists), not one."""
    return isinstance(prompt, (list, tuple)) and any(not isinstance(p, (int, np.integer)) for p in prompt)


def check_prompts(prompts: Any) -> list:
    """A batch's prompts as a list, refused early when empty or of mixed kinds."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of prompts (texts or token-id lists); got an empty list")
    kinds = {"text" if isinstance(p, str) else "ids" if isinstance(p, (list, tuple, np.ndarray, torch.Tensor))
             else "int" if isinstance(p, (int, np.integer)) else type(p).__name__ for p in prompts}
    if len(kinds) > 1:
        raise TypeError(f"prompts mixes {sorted(kinds)}: pass a list of texts, a list of token-id lists, "
                        "or one prompt's token ids")
    return list(prompts)


class BatchRun:
    """An in-progress batched decode: iterate it to get one :class:`BatchIteration` per round;
    afterwards (or via :meth:`finish`) ``run.results`` holds one :class:`GenerationResult` per prompt."""

    def __init__(self, pair: ModelPair, prompts: Sequence[Any], method: str = "dynatree",
                 config: DecoderConfig | None = None, max_new_tokens: int | Sequence[int] = 128,
                 trace: bool = False, eos_token_id: int | Sequence[int] | None = None, ignore_eos: bool = False,
                 history: HistoryState | Sequence[HistoryState | None] | None = None,
                 allow_long_context: bool = False, record_top_k: int | None = None,
                 prepare: Callable[..., DecoderConfig] | None = None,
                 sampling: SamplingConfig | Sequence[SamplingConfig] | None = None, runtime: str = "auto",
                 budget: BatchBudget | BatchCost | bool | None = None, buckets: tuple[int, ...] | None = None,
                 static_len: int | None = None):
        prompts = check_prompts(prompts)
        rows = len(prompts)
        news = _per_row("max_new_tokens", max_new_tokens, rows)
        histories = _per_row("history", history, rows)
        samplings = _per_row("sampling", sampling if sampling is not None else GREEDY, rows)
        if trace not in (True, False):
            raise ValueError(f"a batch records plain traces (trace=True or False), got trace={trace!r}")
        if budget is not None and not isinstance(budget, (bool, BatchBudget, BatchCost)):
            raise TypeError(f"budget must be True, a BatchCost, a BatchBudget or None, got {type(budget).__name__}")
        config = resolve_config(method, config)
        for s, n, h in zip(samplings, news, histories):
            check_run(pair, config, n, s)
            check_history(h, None if s.greedy else s.label())
        if len({(s.greedy, s.rule, s.temperature, s.top_p, s.top_k, s.noise) for s in samplings}) > 1:
            raise ValueError("every row samples under the same settings (temperature, top_p, top_k, verify, "
                             "draft_noise); only the seed differs per row")
        self.runtime = resolve_runtime(runtime, pair.device)
        if self.runtime not in BATCH_RUNTIMES:
            raise ValueError(f"a batch runs on the eager or the static runtime for now (runtime='eager', 'static' or "
                             f"'auto' on a CPU), got runtime={runtime!r} -> {self.runtime!r}")
        if self.runtime != "static" and (buckets is not None or static_len is not None):
            raise ValueError("buckets= and static_len= size the static runtime's shapes: pass runtime='static'")
        kind = pair.drafter_kind if config.drafts else None
        if kind is not None and kind not in BATCH_DRAFTERS:
            raise ValueError(f"a batch drafts with {BATCH_DRAFTERS}; this pair's drafter is {kind!r}")
        self.pair, self.sampling, self.tracing, self.record_top_k = pair, samplings[0], bool(trace), record_top_k
        self.config = prepare(config, pair, runtime=self.runtime) if prepare is not None and config.drafts else config
        self.method = self.config.method
        self.prompts = [encode_prompt(pair, p) for p in prompts]
        for p, n in zip(self.prompts, news):
            check_window(pair, config.drafts, len(p), n, allow_long_context)
        self.max_new_tokens, self.samplings, self.histories = news, samplings, histories
        #: the static runtime's verify widths (a tree padded to the next) and its cache's columns
        self.buckets, self.capacity = self._static_shapes(buckets, static_len)
        self.eos = eos_set(pair, eos_token_id, ignore_eos)
        self.kind = kind
        #: the paper's KV mode: crop the tree's entries and re-run the committed tokens (a second forward)
        self.recompute = getattr(self.config, "kv_mode", "gather") == "recompute"
        self.device = pair.device  #: read once: the models stay put, and ``pair.device`` walks the parameters
        #: one forward clock for the batch: each forward serves every row
        self.clock = pl.ForwardClock(self.device)
        self.syncs = HostSyncs()  #: the batch's own reads (an AR step's: every row's token at once)
        self.results: list[GenerationResult | None] = [None] * rows
        #: forwards run for the whole batch (each serves every active row)
        self.target_forwards = self.draft_forwards = 0
        #: seconds the prompts' prefill took: the target's before the first iteration, and under a shared budget the
        #: draft's at the first drafting iteration (:meth:`_read_prompts`; without a budget the first level 0 reads it)
        self.prefill_s = 0.0
        #: the batch's shared node budget (None: every row grows its own tree, as at batch 1)
        self.budget = self._budget(budget, rows)
        self._steps = self._run()

    def __iter__(self) -> Iterator[BatchIteration]:
        return self

    def __next__(self) -> BatchIteration:
        return next(self._steps)

    def finish(self) -> list[GenerationResult]:
        """Run the remaining iterations; one result per prompt, in order."""
        for _ in self._steps:
            pass
        return [r for r in self.results if r is not None]

    # --- the loop ----------------------------------------------------------------------------
    @torch.inference_mode()
    def _run(self) -> Iterator[BatchIteration]:
        rows = [self._row(b) for b in range(len(self.prompts))]
        for r in rows:
            if r.max_new_tokens == 0:
                self._finish(r)
        rows = [r for r in rows if r.result is None]
        if not rows:
            return
        clock, began = self.clock, time.perf_counter()
        kv = None if self.capacity is None else SlotKV(self.pair.target, self.capacity)
        target = RowsCache(self.pair.target, len(rows), self.device, kv=kv)
        hidden = self._prefill(rows, target, clock)
        draft = self._batch_draft(rows, hidden)
        self._start_drafters(rows, draft)
        unread = draft is not None and self.budget is not None  # read at the first drafting iteration
        for r in rows:
            r.col.lap("prefill")
        self.prefill_s = time.perf_counter() - began
        it = 0
        while rows:
            # 1. draft: every row's tree; one draft forward per level for the rows that draft there
            before = [self._history(r) for r in rows]
            t0, f0 = time.perf_counter(), self._forward_s()
            # each row's weight in the budget's objective (in a fixed batch, its chance of finishing last)
            weights = None if self.budget is None else self.budget.weights([r.remaining for r in rows])
            drafting = self.budget is None or self.budget.drafts(len(rows))  # the budget may choose an AR step
            # every row's tree is its root alone (AR, or a sat-out iteration) and its token the target's argmax:
            # an AR step, run for the batch at once (no tree ops per row, one read of every row's token)
            step = self.sampling.greedy and not (drafting and self.config.drafts)
            if drafting and unread:
                unread, (t0, f0) = False, self._read_prompts(draft, clock, t0, f0)
            # ... and how deep the trees may grow, before their levels run
            cap = None
            if self.budget is not None and drafting:
                cap = self.budget.levels(len(rows), self.config.growth_rule().d_max)
            forwards = self._draft(rows, draft, clock, drafting, cap, step)
            choice = self._budget_cut(rows, forwards, weights) if self.budget is not None and drafting else None
            for r in rows:
                r.col.lap("draft")
            # 2. verify (ONE target forward for every row) and 3. select, per row
            f1 = self._forward_s()
            width, sels, start, states = self._verify(rows, target, clock, step)
            phases = (self._forward_s() - f1, f1 - f0)  # the seconds in the verify's and the levels' forwards
            self.target_forwards += 1
            for r in rows:
                r.col.lap("verify")
            # 4. commit: cut at EOS / the budget; keep each row's root + path where it was written
            budget = None if self.budget is None else dict(drafted=drafting, weights=weights, **(
                {} if choice is None else dict(width=choice.width, rate=choice.rate, ar_rate=choice.ar_rate,
                                               predicted=choice.predicted, levels=cap)))
            recs, stops = self._commit(rows, sels, start, target, draft, clock,
                                       dict(before=before, iteration=it, padded_width=width, budget=budget,
                                            states=states, step=step))
            if self.budget is not None:
                self._budget_observe(drafting, choice, sels, forwards, recs, time.perf_counter() - t0, width, phases,
                                     weights)
            yield BatchIteration(it, recs, width, forwards, 1 + int(self.recompute and any(s is None for s in stops)))
            it += 1
            rows = self._leave(rows, stops, target, draft)

    def _read_prompts(self, draft: BatchModelDraft, clock: pl.ForwardClock, t0: float, f0: float
                      ) -> tuple[float, float]:
        """Under a shared budget the draft reads every row's prompt, and what was committed since, as ONE
        causal chain at the batch's first drafting iteration, before its levels. That is the prompts'
        one-time cost: counted with the prefill (``prefill_s``), left out of the iteration the budget
        measures (its first level 0 then reads the root, as a later one does), and never paid by a batch
        that never drafts. Returns the iteration's start, (wall, forward seconds), moved past the read."""
        wall, fwd = time.perf_counter(), self._forward_s()
        if draft.prefill(clock):
            self.draft_forwards += 1
        fwd = self._forward_s() - fwd  # (on CUDA reading the clock waits for the read: the wall time is whole)
        wall = time.perf_counter() - wall
        self.prefill_s += wall
        return t0 + wall, f0 + fwd

    def _forward_s(self) -> float:
        """The seconds spent inside forwards so far, for the shared budget's prices; 0 without a budget (on CUDA
        reading the clock waits for the GPU: a run without a budget must not pay that sync)."""
        return self.clock.seconds() if self.budget is not None else 0.0

    def _leave(self, rows: list[_Row], stops: list[str | None], target: RowsCache, draft: BatchModelDraft | None
               ) -> list[_Row]:
        """Finish the rows that stopped this iteration and drop them from the caches; the rows that go on."""
        live = [i for i, s in enumerate(stops) if s is None]
        for i, s in enumerate(stops):
            if s is not None:
                self._finish(rows[i])
        if len(live) < len(rows) and live:
            target.keep_rows(live)
            if draft is not None:
                draft.keep_rows(live)
        return [rows[i] for i in live]

    def _commit(self, rows: list[_Row], sels: list[Selection], start: int, target: RowsCache,
                draft: BatchModelDraft | None, clock: pl.ForwardClock, at: dict[str, Any]
                ) -> tuple[dict[int, IterationRecord], list[str | None]]:
        """Every row's commit (its tokens, drafter, lookup tail, history and record), then the caches
        for all rows at once; returns the records and each row's stop (None: it goes on)."""
        recs, stops, target_cols, rerun = {}, [], [], []
        for i, (r, sel) in enumerate(zip(rows, sels)):
            path = sel.path
            new, stop = cut_committed(sel.arrays["tokens"][path].tolist() + [sel.bonus], r.remaining, self.eos)
            r.out.extend(new)
            if not at["step"]:  # (an AR step keeps column ``start`` in every row: one op below)
                target_cols.append(to_device([start] + [start + u for u in path], self.device))
            rerun.append([r.root] + new[:-1] if stop is None else [])
            if stop is None and r.drafter is not None:  # the drafter's columns refer to the tree as grown
                grown = sel.arrays["orig"][path].tolist() if "orig" in sel.arrays else path
                states = at["states"]  # a feature draft reads the target's states of the root and the path
                # (the root alone, as in a sat-out iteration: a view, no index sent to the device)
                hidden = None if states is None else states[i, :1] if not path else \
                    states[i, to_device([0] + path, self.device)]
                r.drafter.commit(grown, new, hidden, fed=int(sel.arrays["fed"][path].sum()))
            if stop is None:
                r.root = new[-1]
                if r.own_tail:
                    r.tail.commit(path, new)
            after = adapt(r.adapter, self.config, drafted_on_path(sel, r.tree), r.tree.depth, sel.arrays)
            r.col.lap("commit")
            forwards = 1 + (self.recompute and stop is None)  # the paper's mode re-runs the committed tokens
            rec = r.col.iteration(r.tree, sel, target.count[i], new, (at["before"][i], after), forwards)
            rec.batch = {"iteration": at["iteration"], "padded_width": at["padded_width"],
                         "active": [x.index for x in rows], "nodes": r.tree.n}
            if at["budget"] is not None:
                rec.batch["budget"] = at["budget"]
            recs[r.index] = rec
            if stop == "eos":
                r.col.stopped_by = "eos"
            stops.append(stop)
        if self.recompute:  # the paper's mode: drop the tree's entries, re-run the committed tokens
            target.commit([[] for _ in rows])
            self._chain(rerun, target, clock)  # (a feature draft read the verify's states, as at batch 1)
        elif at["step"]:
            target.commit_column(start)
        else:
            target.commit(target_cols)
        if draft is not None:
            draft.commit_staged()
        return recs, stops

    def _budget_observe(self, drafting: bool, choice: BatchChoice | None, sels: list[Selection], forwards: int,
                        recs: dict[int, IterationRecord], seconds: float, width: int,
                        phases: tuple[float, float], weights: list[float]) -> None:
        """What the shared budget learns from an iteration: what the kept nodes' p(u) predicted against
        what was accepted, how deep the accepted paths reached, what its verify (padded to ``width``) and
        its levels' forwards took (``phases``: seconds), and its measured rate (every overhead included;
        row b's tokens weighed by ``weights[b]``)."""
        assert self.budget is not None
        if choice is not None:
            self.budget.observe(choice.mass, sum(len(sel.path) for sel in sels))
            depths = [sel.arrays["depths"][1:].tolist() for sel in sels]
            self.budget.observe_depths(max([forwards] + [max(d, default=0) for d in depths]),
                                       [len(sel.path) for sel in sels], depths, weights)
        self.budget.observe_forwards(len(sels), width, forwards, *phases)
        self.budget.observe_time(len(sels), drafting, [len(rec.committed) for rec in recs.values()], seconds,
                                 sum(phases), weights)

    def _budget_cut(self, rows: list[_Row], levels: int, weights: list[float]) -> BatchChoice:
        """The shared budget's width W*: each row keeps its W* - 1 most probable nodes (reads each
        row's path probabilities: one host read per row; row b's weigh ``weights[b]``)."""
        assert self.budget is not None
        probs = [r.tree.cum_logps[1:r.tree.n].exp().tolist() for r in rows]
        choice = self.budget.choose(probs, levels, weights)
        for r, keep in zip(rows, choice.keep):
            if keep < r.tree.n - 1:
                r.tree.cut_to(keep)
        return choice

    def _draft(self, rows: list[_Row], draft: BatchModelDraft | None, clock: pl.ForwardClock,
               drafting: bool = True, cap: int | None = None, step: bool = False) -> int:
        """Grow every row's tree (``drafting`` False: the root alone, no draft forward; ``cap``: at most
        that many levels, the shared budget's L*; ``step``: an AR step's, :meth:`_step_trees`); returns the
        draft forwards this iteration ran."""
        if step:
            self._step_trees(rows)
            return 0
        asks: dict[int, tuple[Any, torch.Tensor, int]] = {}
        for i, r in enumerate(rows):
            rule = rule_for(r.adapter, self.config, r.remaining)
            if cap is not None and cap < rule.d_max:
                rule = dataclasses.replace(rule, d_max=cap)
            r.tree = DeviceTree(r.root, rule, self._top_k(), self.device,
                                position=len(r.prompt) + len(r.out) - 1, early_exit=r.sampling.rule != "rejection")
            if r.drafter is None or not drafting:
                if r.drafter is not None:
                    r.tree.sit_out()
                continue
            steps = r.tree.growth(r.drafter, r.col.syncs)
            try:
                ids, level = next(steps)
                asks[i] = (steps, ids, level)
            except StopIteration:
                pass
        forwards = 0
        while asks:
            level = next(iter(asks.values()))[2]
            assert all(a[2] == level for a in asks.values()), "the rows' trees grow level by level together"
            if draft is not None:  # ONE forward for the level of every row that drafts there
                logits = draft.level({i: (rows[i].tree, a[1]) for i, a in asks.items()}, level, clock)
                forwards += 1
                for i, got in logits.items():
                    draft.rows[i].give(got)
            # each row's proposal: from its logits (prompt lookup mixed in), or lookup alone (no forward)
            props = {i: rows[i].drafter.propose(rows[i].tree, a[1], level) for i, a in asks.items()}
            nxt = {}
            for i, (steps, ids, _) in asks.items():
                try:
                    ids, lv = steps.send(props[i])
                    nxt[i] = (steps, ids, lv)
                except StopIteration:
                    pass
            asks = nxt
        for r in rows:
            if r.tail is not None and drafting:
                r.tree.add_tail(r.tail.committed_on(r.tree.device), r.tail.source, r.col.syncs, r.remaining - 1)
        self.draft_forwards += forwards
        return forwards

    def _step_trees(self, rows: list[_Row]) -> None:
        """An AR step's trees: each row's root alone, a tree kept per row from its first step (a sat-out row's
        root says "batch"). Its device arrays are never touched again, so its root token stays the first step's:
        the step's verify takes the roots from the host (:meth:`_step`), and a record reads only the tree's counts
        (one node, no level, no tail)."""
        for r in rows:
            if r.step_tree is None:
                r.step_tree = DeviceTree(r.root, rule_for(r.adapter, self.config, r.remaining), self._top_k(),
                                         self.device)
                if r.drafter is not None:
                    r.step_tree.sit_out()
            r.tree = r.step_tree

    def _step(self, rows: list[_Row], target: RowsCache, clock: pl.ForwardClock
              ) -> tuple[int, list[Selection], int, torch.Tensor | None]:
        """An AR step for every row at once (greedy): ONE target forward over the roots, every row's argmax in
        ONE read, each row's selection built on the host (:func:`~dynatree_core.runtime.tree.tree.root_selection`:
        what :meth:`DeviceTree.select` returns for a root alone). Returns what :meth:`_verify` does."""
        width = 1 if self.buckets is None else bucket(1, self.buckets)
        target.room(width)
        ids, pos, allowed = target.padding(width)  # (the padding's own mask lets each root see itself)
        ids[:, 0] = to_device([r.root for r in rows], self.device)
        pos[:, 0] = to_device([target.next_position(i) for i in range(len(rows))], self.device)
        start = target.width
        logits, states = target.forward(ids, pos, allowed, clock=clock, hidden=self.needs_hidden)
        tokens = self.syncs.fetch(tokens=logits[:, 0].argmax(-1))["tokens"].tolist()
        for r in rows:
            r.col.syncs.shared()
        sels = [root_selection(r.root, t, r.tree.k_used, CODE["batch"] if r.drafter is not None else 0)
                for r, t in zip(rows, tokens)]
        return width, sels, start, states

    def _verify(self, rows: list[_Row], target: RowsCache, clock: pl.ForwardClock, step: bool = False
                ) -> tuple[int, list[Selection], int, torch.Tensor | None]:
        """ONE target forward over every row's [root] + tree, padded to the widest (W); each row's
        selection as at batch 1 (``step``: an AR step's, :meth:`_step`). Returns W, the selections, the column
        the roots landed in and, for a feature draft, the target's final hidden states [B, W, H]."""
        if step:
            return self._step(rows, target, clock)
        width = max(r.tree.n for r in rows)
        if self.buckets is not None:  # static shapes: the trees padded to the next bucket
            width = bucket(width, self.buckets)
        target.room(width)
        ids, pos, allowed = target.padding(width)
        for i, r in enumerate(rows):
            n = r.tree.n
            ids[i, :n] = r.tree.tokens[:n]
            pos[i, :n] = target.next_position(i) + r.tree.position_offsets()
            allowed[i, :n, :n] = r.tree.tree_mask()
        start = target.width
        logits, states = target.forward(ids, pos, allowed, clock=clock, hidden=self.needs_hidden)
        sels = []
        for i, r in enumerate(rows):
            tree, n = r.tree, r.tree.n
            v = pl.DeviceVerified(logits[i, :n], None, target.count[i], logits[i, :n].argmax(-1), start)
            choice = None
            if r.chooser is not None:
                draft = draft_candidates(tree, r.draft_sampler) if r.sampling.rule == "rejection" else None
                choice = r.chooser.choose(v.logits, tree.depths[:n], tree.deepest(), v.prefix_len, draft)
            chosen = v.argmax if choice is None else choice.tokens
            sels.append(tree.select(chosen, r.col.syncs, r.col.verify_extras(tree, v, choice)))
        return width, sels, start, states

    # --- the phases' details -------------------------------------------------------------------
    def _static_shapes(self, buckets: tuple[int, ...] | None, static_len: int | None
                       ) -> tuple[tuple[int, ...] | None, int | None]:
        """The static runtime's buckets and cache columns (None, None on the eager runtime)."""
        sizes = run_buckets(self.config, self.runtime, buckets)
        if sizes is None:
            return None, None
        longest = max(len(p) + n for p, n in zip(self.prompts, self.max_new_tokens))
        return sizes, static_capacity(longest, sizes[-1], static_len)

    def _budget(self, budget: BatchBudget | BatchCost | bool | None, rows: int) -> BatchBudget | None:
        """The run's shared budget: True measures c(B, w) and d(B) (cached per pair and device)."""
        if budget is None or budget is False or not self.config.drafts:
            return None
        if isinstance(budget, BatchBudget):
            return budget
        if isinstance(budget, BatchCost):
            return BatchBudget(budget, buckets=self.buckets)
        return shared_budget(self.pair, self.config, rows, buckets=self.buckets)

    def _row(self, b: int) -> _Row:
        sampling = self.samplings[b]
        label = None if sampling.greedy else sampling.label()
        adapter = (HistoryAdapter(self.config, self.histories[b], label)
                   if isinstance(self.config, DynaTreeConfig) and self.config.adaptive else None)
        samplers = make_samplers(sampling, self.device, int(self.pair.target.config.vocab_size), self.tracing)
        draft_sampler, chooser = samplers if samplers is not None else (None, None)
        trace = None
        prompt = self.prompts[b]
        if self.tracing:
            settings = ({"kind": self.kind, "top_k": self._top_k()} if self.config.drafts else None)
            trace = new_trace(self.pair, self.config, prompt, self.eos, self.max_new_tokens[b], settings,
                              None if sampling.greedy else sampling.to_dict(), self.runtime)
            trace.batch = {"size": len(self.prompts), "row": b}
        col = RunCollector(self.device, self.pair.tokenizer, prompt, trace, draft_sampler, clock=self.clock)
        return _Row(b, prompt, self.max_new_tokens[b], sampling, adapter, col, None, draft_sampler, chooser,
                    root=prompt[-1])

    def _start_drafters(self, rows: list[_Row], draft: BatchModelDraft | None) -> None:
        for i, r in enumerate(rows):
            if not self.config.drafts:
                continue
            r.drafter = LookupDrafter(self.pair.draft) if draft is None else (
                draft.rows[i] if self.pair.lookup is None else MixDrafter(draft.rows[i], self.pair.lookup))
            keep = self.tracing or bool(self.record_top_k)
            ctx = DraftContext(self._top_k(), r.col.clock, r.draft_sampler, keep_chain=keep)
            r.drafter.start(r.prompt, ctx)
            if self.config.lookup_tail:
                r.tail, r.own_tail = tail_lookup(r.drafter)
                if r.own_tail:  # a lookup of the row's own: it follows the committed tokens
                    r.tail.start(r.prompt, ctx)

    @property
    def needs_hidden(self) -> bool:
        """Whether the target's forwards hand the draft their final hidden states (a feature draft)."""
        return self.kind in ("feature", "feature+lookup")

    def _batch_draft(self, rows: list[_Row], hidden: list[torch.Tensor | None]) -> BatchModelDraft | None:
        """The batch's draft model (None: prompt lookup alone, or no drafting)."""
        if self.kind in (None, "lookup"):
            return None
        prompts = [r.prompt for r in rows]
        if self.needs_hidden:
            return BatchFeatureDraft(self.pair.draft, prompts, hidden)
        return BatchModelDraft(self.pair.draft, prompts)

    def _prefill(self, rows: list[_Row], target: RowsCache, clock: pl.ForwardClock) -> list[torch.Tensor | None]:
        """ONE target forward over every row's prompt but its last token (the first root), padded;
        returns each row's final hidden states of those tokens when a feature draft reads them."""
        tokens = [r.prompt[:-1] for r in rows]
        if not any(tokens):
            return [None] * len(rows)
        states = self._chain(tokens, target, clock, self.needs_hidden)
        for r in rows:
            r.col.target_forwards += 1
        if states is None:
            return [None] * len(rows)
        return [states[i, :len(t)] if t else None for i, t in enumerate(tokens)]

    def _chain(self, tokens: list[list[int]], target: RowsCache, clock: pl.ForwardClock, hidden: bool = False
               ) -> torch.Tensor | None:
        """ONE target forward of each row's committed ``tokens`` as a causal chain after its live
        entries (padded to the longest), all kept; the final hidden states with ``hidden``. Nothing
        runs when no row has a token."""
        if not any(tokens):
            return None
        _, start, states = target.chain(tokens, clock, hidden=hidden)
        target.commit([torch.arange(start, start + len(t), device=self.device) for t in tokens])
        self.target_forwards += 1
        return states

    def _top_k(self) -> int:
        """Draft candidates per expanded node (as at batch 1)."""
        return draft_top_k(self.config, self.sampling, self.tracing, self.record_top_k)

    def _history(self, r: _Row) -> dict | None:
        return r.adapter.state.to_dict() if r.adapter is not None else None

    def _finish(self, r: _Row) -> None:
        forwards = r.drafter.forwards if r.drafter is not None else 0
        r.result = r.col.result(r.out, r.adapter.state if r.adapter is not None else None, forwards,
                                self.config.drafts)
        self.results[r.index] = r.result


def shared_budget(pair: ModelPair, config: DecoderConfig, rows: int, choose_depth: bool = True,
                  buckets: tuple[int, ...] | None = None, objective: str = "finish") -> BatchBudget:
    """A batch's shared node budget for ``config`` at up to ``rows`` rows, priced by c(B, w) and d(B) as
    measured on ``pair`` (:func:`~dynatree_core.engine.batch_calibrate.batch_cost`: cached per pair and
    device); ``choose_depth`` False: it picks widths only, the rows' rules their depth; ``buckets``: the
    widths a static run pads its verifies to (:func:`run_buckets`), which it chooses among; ``objective``:
    what it serves (:data:`~dynatree_core.policy.batch_budget.OBJECTIVES`: a fixed batch's finish, or
    tokens per second)."""
    check_objective(objective)  # before the calibration's forwards
    widest = widest_tree(config)
    return BatchBudget(batch_cost(pair, rows, widest), choose_depth=choose_depth, buckets=buckets,
                       objective=objective)


def run_buckets(config: DecoderConfig, runtime: str, buckets: tuple[int, ...] | None = None
                ) -> tuple[int, ...] | None:
    """The verify widths a batch on ``runtime`` pads to: the fast path's buckets up to ``config``'s
    widest tree on the static runtime, None (the trees' own widths) on the eager one."""
    return buckets_for(widest_tree(config), buckets) if runtime == "static" else None


def with_seeds(sampling: SamplingConfig, seeds: Sequence[int]) -> list[SamplingConfig]:
    """One sampling config per row: ``sampling`` with each row's seed."""
    return [dataclasses.replace(sampling, seed=int(s)) for s in seeds]
