"""The decode loop: one loop, four phases (draft, verify, select, commit) plus history.

Every method runs through :class:`DecodingRun`; methods differ only in the
:class:`~dynatree_core.policy.config.GrowthRule` their config lowers to (AR drafts an empty tree).
The target's forwards come from one backend chosen when the run starts (eager or the fast path,
:mod:`dynatree_core.runtime.backend`); the drafter gets what the run gives it once, at start
(:class:`~dynatree_core.drafters.DraftContext`).

Cache invariant between iterations: the target cache holds every committed token except the
last one, the *root*. Each iteration verifies ``[root] + tree`` in one target forward; the
root's logits give the first next token, so there is no separate "prefix logits" state.
After selection the cache keeps root + accepted path (``gather``: moved in place, no extra
forward; ``recompute``: the paper's crop + re-run) and the bonus token becomes the next root.

The draft keeps its own cache the same way: ``pending`` lists committed tokens it has not
consumed yet; the first tree level feeds them (the root last) and later levels feed one tree
level per forward under a tree mask. Accepted nodes the draft already consumed are kept.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from dynatree_core.drafters import DraftContext, Drafter, LookupDrafter, LookupMix, MixDrafter, make_drafter
from dynatree_core.engine.collector import RunCollector, new_trace
from dynatree_core.engine.replay_recording import ReplayRecording
from dynatree_core.engine.run_checks import check_run, check_window, encode_prompt, eos_set, widest_tree
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.config import DecoderConfig, DynaTreeConfig, GrowthRule, resolve_config
from dynatree_core.policy.history import HistoryAdapter, HistoryState, check_history
from dynatree_core.policy.sampling import GREEDY, SamplingConfig
from dynatree_core.policy.tree import LOOKUP_TAIL, STOP_REASONS
from dynatree_core.records.result import GenerationResult
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.backend import TargetBackend, target_backend
from dynatree_core.runtime.tree.tree import DeviceTree, Selection, resident_shape
from dynatree_core.runtime.static.fast_path import resolve_runtime
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.runtime.tree.phase import DraftPhase
from dynatree_core.runtime.sampling import DraftSampler, TargetSampler, draft_candidates, make_samplers

_TAIL_CODE = STOP_REASONS.index(LOOKUP_TAIL)


def tail_lookup(drafter: Drafter) -> tuple[LookupDrafter, bool]:
    """The prompt lookup a lookup tail reads, and whether the loop must keep it up to date itself:
    the drafter's own (prompt lookup, or the lookup of a mixture), else a new one."""
    if isinstance(drafter, LookupDrafter):
        return drafter, False
    if isinstance(drafter, MixDrafter):
        return drafter.lookup, False
    return LookupDrafter(LookupMix().lookup), True


def rule_for(adapter: HistoryAdapter | None, config: DecoderConfig, remaining: int) -> GrowthRule:
    """This iteration's growth rule: the history's (or the config's), never deeper than the tokens
    still wanted (the bonus supplies one of them)."""
    rule = adapter.rule() if adapter is not None else config.growth_rule()
    return dataclasses.replace(rule, d_max=min(rule.d_max, remaining - 1))


def cut_committed(new: list[int], remaining: int, eos: set[int]) -> tuple[list[int], str | None]:
    """Stop after the first EOS (even inside the accepted path) and at the token budget."""
    stop = None
    for j, t in enumerate(new):
        if t in eos:
            new, stop = new[: j + 1], "eos"
            break
    if len(new) >= remaining:
        new, stop = new[:remaining], stop or "max_new_tokens"
    return new, stop


class DecodingRun:
    """An in-progress decode: iterate it to get one :class:`IterationRecord` per round.

    ``for rec in run: ...`` steps through decoding; afterwards (or via :meth:`finish`)
    ``run.result`` holds the :class:`GenerationResult`.
    """

    def __init__(self, pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor, method: str = "dynatree",
                 config: DecoderConfig | None = None, max_new_tokens: int = 128, trace: bool | str = False,
                 eos_token_id: int | Sequence[int] | None = None, ignore_eos: bool = False,
                 history: HistoryState | None = None, allow_long_context: bool = False,
                 record_top_k: int | None = None,
                 prepare: Callable[..., DecoderConfig] | None = None,
                 sampling: SamplingConfig | None = None, runtime: str = "auto",
                 buckets: tuple[int, ...] | None = None, static_len: int | None = None):
        #: draft candidates per fed node kept in untraced records too (the benchmark's oracle reads
        #: them); None: only what the growth rule needs
        self.record_top_k = record_top_k
        #: how the target's token is chosen: greedy, or sampled (verify "match" / "rejection")
        self.sampling = sampling if sampling is not None else GREEDY
        config = resolve_config(method, config)  # from here on the config says what to do, not the name
        check_run(pair, config, max_new_tokens, self.sampling)
        label = None if self.sampling.greedy else self.sampling.label()
        check_history(history, label)  # before any calibration runs
        #: what runs the target's forwards: "eager" (dynamic caches) or a fast path (static caches,
        #: bucketed trees; compiled or CUDA graphs), see :mod:`dynatree_core.runtime.backend`
        self.runtime = resolve_runtime("eager" if trace == "replay" else runtime, pair.device)
        self.pair = pair
        # what a policy measures about the pair (cost curve, per-rank acceptance) is filled in here
        # by ``prepare`` (the API passes calibrate.prepare_config: cached on disk, measured on the run's
        # runtime), after the cheap checks and before the run, so the config the trace records is the one that ran
        self.config = prepare(config, pair, runtime=self.runtime) if prepare is not None and config.drafts else config
        self.method = self.config.method
        self.prompt = encode_prompt(pair, prompt)
        check_window(pair, config.drafts, len(self.prompt), max_new_tokens, allow_long_context)
        self.max_new_tokens = max_new_tokens
        self.eos = eos_set(pair, eos_token_id, ignore_eos)
        self.tracing = bool(trace)
        #: trace="replay": draft the page's envelope, commit the own path (:mod:`.replay_recording`)
        self.replay = ReplayRecording(self.config, self.sampling, runtime) if trace == "replay" else None
        self.adapter = (HistoryAdapter(self.config, history, label)
                        if isinstance(self.config, DynaTreeConfig) and self.config.adaptive else None)
        # the drafter (not started: it gets the run's context at prefill) says whether the target's
        # forwards must hand it hidden states, so it is made before the backend is chosen
        self.drafter = make_drafter(pair.draft, pair.lookup) if self.config.drafts else None
        self.target = self._backend(buckets, static_len)
        self.result: GenerationResult | None = None
        self._steps = self._run()

    def __iter__(self) -> Iterator[IterationRecord]:
        return self

    def __next__(self) -> IterationRecord:
        return next(self._steps)

    def finish(self) -> GenerationResult:
        """Run the remaining iterations and return the result."""
        for _ in self._steps:
            pass
        assert self.result is not None
        return self.result

    # --- the loop ----------------------------------------------------------------------------
    def _shape_rule(self) -> GrowthRule:
        """The rule a resident tree's static shape is sized for: one that bounds every iteration's
        (the history adapter moves D0, and with a fixed depth D_max with it)."""
        return self.adapter.envelope() if self.adapter is not None else self.config.growth_rule()

    def _rule(self, remaining: int) -> GrowthRule:
        return rule_for(self.adapter, self.config, remaining)

    @torch.inference_mode()
    def _run(self) -> Iterator[IterationRecord]:
        """The algorithm: prefill, then draft -> verify -> select -> commit until done.

        The tree lives on the model's device (:mod:`dynatree_core.runtime.tree.tree`): the loop reads
        the device once per draft level and once per verification, nowhere else."""
        drafter = self.drafter
        fast = self._draft_forwards(drafter)  # built (captured, compiled) before the clock starts
        samplers = make_samplers(self.sampling, self.pair.device, int(self.pair.target.config.vocab_size),
                                 self.tracing)
        draft_sampler, chooser = samplers if samplers is not None else (None, None)
        top_k = self._draft_top_k()
        col = RunCollector(self.pair.device, self.pair.tokenizer, self.prompt, self._trace(drafter, top_k),
                           draft_sampler)
        ctx = DraftContext(top_k, col.clock, draft_sampler, fast, keep_chain=self.tracing or bool(self.record_top_k),
                           seq_capacity=self.target.capacity, seq_device=str(self.pair.device), runtime=self.runtime)
        tail, own_tail = tail_lookup(drafter) if drafter is not None and self.config.lookup_tail else (None, False)
        need_hidden = drafter is not None and drafter.needs_target_hidden  # a feature drafter reads them
        out, root = [], self.prompt[-1]
        resident, shape_rule = self._resident(), self._shape_rule()
        phase = DraftPhase(self.runtime, self.pair.device, max(1, shape_rule.d_max)) if resident else None
        self._prefill(drafter, ctx, need_hidden, col)
        if own_tail:
            tail.start(self.prompt, ctx)  # a lookup of the loop's own: it follows the committed tokens
        while len(out) < self.max_new_tokens:
            remaining = self.max_new_tokens - len(out)
            rule, before = self._rule(remaining), self._history_state()
            grown = rule if self.replay is None else self.replay.envelope(remaining)
            # 1. draft: grow the tree, one batched draft forward per level (AR: the root alone)
            tree = DeviceTree(root, grown, ctx.top_k, self.pair.device, position=len(self.prompt) + len(out) - 1,
                              resident=resident, phase=phase, shape_rule=grown if self.replay else shape_rule,
                              early_exit=self.sampling.rule != "rejection")
            if drafter is not None:
                tree.grow(drafter, col.syncs)
                if tail is not None:
                    tree.add_tail(tail.committed_on(tree.device), tail.source, col.syncs, remaining - 1)
            col.lap("draft")
            # 2. verify and 3. select
            v, sel = self._verify(tree, need_hidden, chooser, draft_sampler, col)
            depth = tree.depth
            if self.replay is not None:  # the envelope was verified: commit the configured rule's own path
                sel, depth = self.replay.select(sel, tree.draft_calls, rule)
            col.lap("verify")
            path = sel.path
            # 4. commit: cut at EOS / the budget, bring the caches back to the committed prefix
            new, stop = self._cut(sel.arrays["tokens"][path].tolist() + [sel.bonus], remaining)
            out.extend(new)
            forwards = 1
            if stop is None:
                forwards += self._commit(v, root, sel, new, drafter, tail if own_tail else None, col)
                root = new[-1]
            # the history reads the draft's acceptance: lookup-tail nodes on the path do not count
            after = self._adapt(drafted_on_path(sel, tree), depth, sel.arrays)
            col.lap("commit")
            yield col.iteration(tree, sel, v.prefix_len, new, (before, after), forwards)
            if stop == "eos":
                col.stopped_by = "eos"
                break
        self.result = col.result(out, self.adapter.state if self.adapter is not None else None,
                                 drafter.forwards if drafter is not None else 0, self.config.drafts)

    def _verify(self, tree: DeviceTree, need_hidden: bool, chooser: TargetSampler | None,
                draft_sampler: DraftSampler | None, col: RunCollector) -> tuple[pl.DeviceVerified, Selection]:
        """2. verify: root + every node in ONE target forward under the tree mask. 3. select: the
        longest path whose every node carries the target's token after its parent (greedy: the
        argmax; sampling: the token drawn there from p), plus that token after its last node (the
        bonus)."""
        size = self.target.size_read if tree.resident else None
        if size is not None and size.read(tree.n):
            tree.read_size(col.syncs)  # the verify runs at its nodes' bucket, not its shape's
        v = self.target.verify(tree, need_hidden, col.clock)
        choice = None
        if chooser is not None:
            deepest = tree.deepest()  # a tail reaches below the drafted levels
            # under rejection: each node's candidates in draw order and its q row
            draft = draft_candidates(tree, draft_sampler) if self.sampling.rule == "rejection" else None
            choice = chooser.choose(v.logits, tree.depths[:tree.n], deepest, v.prefix_len, draft)
        target = v.argmax if choice is None else choice.tokens
        sel = tree.select(target, col.syncs, col.verify_extras(tree, v, choice))
        if size is not None:
            size.observe(tree.n)  # the selection read the real size anyway
        return v, sel

    def _commit(self, v: pl.DeviceVerified, root: int, sel: Selection, new: list[int], drafter: Drafter | None,
                own_tail: LookupDrafter | None, col: RunCollector) -> int:
        """Bring the caches back to the committed prefix; returns the extra target forwards."""
        path = sel.path
        forwards = self._restore(v.start, root, path, new, col)
        if drafter is not None:
            hidden = v.hidden[to_device([0] + path, self.pair.device)] if v.hidden is not None else None
            # the drafter's cache slots refer to the tree as grown (an EAGLE-2 rerank compacts it)
            grown = sel.arrays["orig"][path].tolist() if "orig" in sel.arrays else path
            drafter.commit(grown, new, hidden, fed=int(sel.arrays["fed"][path].sum()))
            if own_tail is not None:
                own_tail.commit(path, new)
        return forwards

    def _resident(self) -> bool:
        """Whether the draft phase stays on the device (no host read until the verification): on a
        fast path, for every policy but the cost-aware one (its E / T rule reads each level's size)."""
        return self.runtime != "eager" and self.config.drafts and not getattr(self.config, "cost_aware", False)

    # --- the phases' details -------------------------------------------------------------------
    def _draft_top_k(self) -> int:
        return draft_top_k(self.config, self.sampling, self.tracing, self.record_top_k)

    def _draft_forwards(self, drafter: Drafter | None) -> object | None:
        """The draft model's level forwards on the target's runtime (None: it drafts eagerly)."""
        model = drafter.fast_model if drafter is not None else None
        if model is None:
            return None
        levels = resident_shape(self._shape_rule(), self._draft_top_k())[:2] if self._resident() else None
        return self.target.draft_forwards(model, len(self.prompt) + self.max_new_tokens, levels)

    def _trace(self, drafter: Drafter | None, top_k: int) -> Trace | None:
        """A new trace for this run (None when not tracing); the drafter's settings with the top-k
        the run gives it."""
        if not self.tracing:
            return None
        trace = new_trace(self.pair, self.config, self.prompt, self.eos, self.max_new_tokens,
                          {**drafter.settings(), "top_k": top_k} if drafter is not None else None,
                          None if self.sampling.greedy else self.sampling.to_dict(), self.runtime)
        trace.replay = self.replay.info if self.replay is not None else None  # filled as the run goes
        return trace

    def _backend(self, buckets: tuple[int, ...] | None, static_len: int | None) -> TargetBackend:
        """The target's forwards: eager, or the fast path kept for the target (its forwards built
        now, before the run is timed)."""
        max_tree = widest_tree(self.config)
        hidden = self.drafter is not None and self.drafter.needs_target_hidden  # a feature drafter reads them
        return target_backend(self.pair.target, self.runtime, len(self.prompt) + self.max_new_tokens, max_tree,
                              hidden, buckets, static_len)

    def _prefill(self, drafter: Drafter | None, ctx: DraftContext, need_hidden: bool, col: RunCollector) -> None:
        """Both models read the prompt; the last prompt token stays out of the caches: it is the
        first iteration's root."""
        hidden = None
        if len(self.prompt) > 1 and self.max_new_tokens > 0:
            hidden = self.target.prefill(to_device(self.prompt[:-1], self.pair.device)[None], need_hidden, col.clock)
            col.target_forwards += 1
        if drafter is not None and self.max_new_tokens > 0:
            drafter.start(self.prompt, ctx, hidden)
        col.lap("prefill")

    def _cut(self, new: list[int], remaining: int) -> tuple[list[int], str | None]:
        return cut_committed(new, remaining, self.eos)

    def _restore(self, start: int, root: int, path: list[int], new: list[int], col: RunCollector) -> int:
        """Bring the target cache back to root + accepted path; returns the extra target forwards."""
        if self.config.kv_mode == "gather":  # keep the verified entries of root + path where they are
            self.target.keep(start, [0] + path)
            return 0
        # the paper's mode: crop to the prefix and re-run the committed tokens
        self.target.rerun(to_device([root] + new[:-1], self.pair.device)[None], col.clock)
        return 1

    def _history_state(self) -> dict | None:
        return self.adapter.state.to_dict() if self.adapter is not None else None

    def _adapt(self, accepted: int, depth: int, arrays: dict[str, np.ndarray]) -> dict | None:
        return adapt(self.adapter, self.config, accepted, depth, arrays)


def drafted_on_path(sel: Selection, tree: DeviceTree) -> int:
    """The accepted nodes the draft proposed (what the history reads): a lookup tail's are not its doing."""
    if not tree.tail_nodes:
        return len(sel.path)
    return int((sel.arrays["stop"][sel.path] != _TAIL_CODE).sum())


def draft_top_k(config: DecoderConfig, sampling: SamplingConfig, tracing: bool, record_top_k: int | None) -> int:
    """Draft candidates per expanded node: what the growth rule reads, what the trace records
    (config.trace_top_k >= the rule's breadth) and what the benchmark's oracle reads."""
    if not config.drafts:
        return 1
    breadth = config.growth_rule().max_breadth
    if sampling.rule == "rejection":  # the candidates are draws: as many as the rule grows, whoever reads
        top_k = breadth
    else:  # the benchmark's oracle reads record_top_k candidates (greedy, or ranked under match)
        top_k = max(config.trace_top_k if tracing else breadth, record_top_k or 0)
    if getattr(config, "cost_aware", False):  # the final fill draws from the candidates past B(u)
        top_k = max(top_k, config.trace_top_k)
    return max(1, top_k)


def adapt(adapter: HistoryAdapter | None, config: DecoderConfig, accepted: int, depth: int,
          arrays: dict[str, np.ndarray]) -> dict | None:
    """Feed a round's acceptance a_r = accepted / depth to the history adapter (DynaTree); a
    cost-aware config also gets Σ p(u) per depth, the evidence for its calibration."""
    if adapter is None:
        return None
    drafted = arrays["stop"][1:] != _TAIL_CODE  # a lookup tail is not the draft's doing
    mass = None
    if getattr(config, "cost_aware", False) and depth > 0:
        mass = np.bincount(arrays["depths"][1:][drafted], weights=np.exp(arrays["cum_logps"][1:][drafted]),
                           minlength=depth + 1)[1:depth + 1].tolist()
    return adapter.update(accepted / depth if depth > 0 else None, accepted, mass).to_dict()
