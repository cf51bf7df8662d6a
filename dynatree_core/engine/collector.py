"""The decode loop's bookkeeping: phase timers, counters, trace records and the result.

Kept out of :mod:`dynatree_core.engine.loop` so that the loop reads as the paper's four phases and
nothing else (gpt-fast keeps its ``speculative_decode`` the same way). The loop calls
:meth:`RunCollector.lap` after each phase, :meth:`RunCollector.iteration` once per round and
:meth:`RunCollector.result` at the end; everything measured or recorded happens here.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from typing import Any, Sequence

import numpy as np
import torch

from dynatree_core.engine.phase_clock import PhaseClock
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.tree.tree import DeviceTree, Selection
from dynatree_core.runtime.host_syncs import HostSyncs
from dynatree_core.runtime.tree.to_host import host_tree
from dynatree_core.runtime.sampling import TRACE_TOP, DraftSampler, TargetChoice
from dynatree_core.records.metrics import Metrics, summarize
from dynatree_core.records.result import GenerationResult
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import DraftTree

PHASES = ("draft", "verify", "commit")


def peak_memory(device: torch.device) -> tuple[int | None, str]:
    """Peak memory so far: CUDA max allocated on a GPU, the process's max RSS on a CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024), "process_max_rss"


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (0 if it was never imported: nothing was).
    A decode that compiles pays the compile inside its timing; the benchmark warms every shape first
    and checks this count stayed put (``Metrics.compiles``)."""
    utils = sys.modules.get("torch._dynamo.utils")
    return int(utils.counters["stats"]["unique_graphs"]) if utils is not None else 0


def versions() -> dict[str, str]:
    import transformers

    from dynatree_core.version import __version__

    return {"dynatree": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0]}


def new_trace(pair: Any, config: Any, prompt: Sequence[int], eos: set[int], max_new_tokens: int,
              drafter: dict[str, Any] | None, sampling: dict[str, Any] | None, runtime: str) -> Trace:
    """The empty :class:`Trace` of a run: what ran (config, pair, drafter settings, sampling,
    runtime, versions); the collector appends one record per iteration."""
    trace = Trace(method=config.method, config=config.to_dict(), target_name=pair.target_name,
                  draft_name=pair.draft_name if config.drafts else None, prompt_tokens=list(prompt),
                  prompt_text=pair.tokenizer.decode(prompt) if pair.tokenizer else None,
                  eos_token_id=min(eos) if eos else None, max_new_tokens=max_new_tokens, device=str(pair.device),
                  dtype=str(pair.dtype).replace("torch.", ""), versions=versions(), drafter=drafter,
                  linear_kernel=getattr(pair, "linear_kernel", None), sampling=sampling,
                  runtime=None if runtime == "eager" else runtime)
    trace.tokenizer = pair.tokenizer  # in memory only: views name tokens with it
    return trace


class RunCollector:
    """Times the phases and the model forwards, counts forwards, host synchronisations and
    accepted/committed tokens, builds :class:`IterationRecord` s and, with ``trace``, the
    :class:`Trace`; :meth:`result` turns it all into :class:`Metrics`.

    Phase laps never synchronise the device (that would add host syncs to every iteration). On a GPU
    the host runs ahead of the device (the resident draft phase reads the device once per iteration,
    at the selection), so a host lap says how long the host took to enqueue a phase, not how long the
    device took to run it: a :class:`~dynatree_core.engine.phase_clock.PhaseClock` marks every lap on
    the stream too, and the phase times are the device's (``draft_time_s``, ``verify_time_s``), the
    host's enqueue times apart (``draft_host_s``, ``verify_host_s``); on a CPU both are the host's.
    Model forwards are timed by a :class:`~dynatree_core.runtime.model.forwards.ForwardClock` (CUDA events
    on a GPU). ``compiles`` counts the graphs dynamo compiled between the start and the result."""

    def __init__(self, device: torch.device, tokenizer: Any, prompt: Sequence[int], trace: Trace | None,
                 draft_sampler: DraftSampler | None = None, clock: pl.ForwardClock | None = None) -> None:
        #: ``tokenizer`` names tokens in records; ``draft_sampler`` holds the draft's perturbed scores
        #: under shared noise (what a traced record shows next to the target's); ``clock``: the forward
        #: clock to share (a batch's rows: each forward serves them all), default a new one
        self.device, self.tokenizer, self.prompt = device, tokenizer, list(prompt)
        self.trace, self.draft_sampler = trace, draft_sampler
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.accepted: list[int] = []
        self.committed: list[int] = []
        self.depths: list[int] = []
        self.sizes: list[int] = []
        self.target_forwards = 0
        self.stopped_by = "max_new_tokens"
        self.clock = clock if clock is not None else pl.ForwardClock(self.device)
        self.syncs = HostSyncs()
        self.iteration_syncs: list[int] = []
        self.draft_levels: list[int] = []
        self._syncs_before = 0
        self.ttft: float | None = None
        self.prefill_s = 0.0
        self.phases = PhaseClock.for_device(self.device)
        self._graphs = compiled_graphs()
        pl.synchronize(self.device)
        self.t_start = self.phases.start()

    def lap(self, phase: str) -> None:
        """End ``phase`` (``"prefill"`` or one of :data:`PHASES`): its time since the last lap."""
        if phase == "prefill":  # once per run: the prefill's device work is not left to iteration 1
            pl.synchronize(self.device)
        now = self.phases.lap(phase)
        if phase == "prefill":
            self.prefill_s = now - self.t_start
        if phase == "commit" and self.ttft is None:
            self.ttft = now - self.t_start

    def verify_extras(self, tree: DeviceTree, verified: pl.DeviceVerified, choice: TargetChoice | None = None
                      ) -> dict[str, torch.Tensor]:
        """Device tensors a record needs, fetched with the selection (no extra sync): with a trace,
        the target's probability of every drafted token given its parent (and under sampling what
        drew each node's token, :meth:`_sampling_extras`); with a trace or ``record_top_k``, the
        draft's top-k along the committed tokens level 0 fed (the oracle's)."""
        out: dict[str, torch.Tensor] = {}
        chain = tree.chain
        if chain is not None and chain[0].shape[0]:
            out["chain_tokens"], out["chain_logps"] = chain
        if self.trace is None:
            return out
        if choice is not None:
            out.update(self._sampling_extras(tree, choice))
            sampler = self.draft_sampler
            if sampler is not None and sampler.score_rows is not None and tree.draft_calls:
                out.update(_draft_scores(tree, sampler.score_rows))
        if tree.n < 2:
            return out
        probs = torch.softmax(verified.logits.float(), dim=-1) if choice is None else choice.p
        out["target_prob"] = probs[tree.parents[1:tree.n], tree.tokens[1:tree.n]]
        return out

    @staticmethod
    def _sampling_extras(tree: DeviceTree, choice: TargetChoice) -> dict[str, torch.Tensor]:
        """Per node: p of the drawn token and p's largest entries; under match the Gumbel noise at the
        drawn token and the largest perturbed scores log p + g; under rejection the coins, the
        accepted rank, the uniform and CDF interval of a residual draw, the residual's and q's
        largest entries."""
        m = min(TRACE_TOP, choice.p.shape[-1])
        top = choice.p.topk(m, dim=-1)
        drawn = choice.tokens[:, None]
        out = {"choice_prob": choice.p.gather(1, drawn)[:, 0], "p_top_tokens": top.indices, "p_top_probs": top.values}
        if choice.coins is None:  # match: the largest of log p + Gumbel noise won
            score = (choice.scores - torch.logsumexp(choice.scores, -1, keepdim=True)) + choice.noise
            best = score.topk(m, dim=-1)
            out.update(gumbel=choice.noise.gather(1, drawn)[:, 0], score_top_tokens=best.indices,
                       score_top_probs=best.values)
            return out
        out.update(_rejection_extras(tree, choice, m, top.indices))
        return out

    def iteration(self, tree: DeviceTree, sel: Selection, prefix_len: int, new: list[int],
                  history: tuple[dict | None, dict | None], target_forwards: int) -> IterationRecord:
        """Count one finished round and return its record (added to the trace when tracing)."""
        path, bonus, a = sel.path, sel.bonus, sel.arrays
        syncs = self.syncs.count - self._syncs_before
        self._syncs_before = self.syncs.count
        self.iteration_syncs.append(syncs)
        self.draft_levels.append(tree.draft_calls + tree.tail_reads)  # a lookup tail's read is budgeted like a level
        self.target_forwards += target_forwards
        self.accepted.append(len(path))
        self.committed.append(len(new))
        # the verified tree's depth: a lookup tail can reach below the drafted levels, and its
        # nodes count as proposed (acceptance = accepted / depth stays in [0, 1])
        self.depths.append(int(a["depths"].max()) if tree.tail_nodes else tree.depth)
        self.sizes.append(tree.n - 1)
        calls = tree.draft_calls
        if self.trace is not None:
            host = host_tree(a, calls)
        else:  # per-node list building only if someone reads the record's tree
            host = DraftTree.deferred(lambda: host_tree(a, calls))
        rec = IterationRecord(
            index=len(self.accepted) - 1, prefix_len=prefix_len, tree=host,
            target_argmax=a["argmax"].tolist(), accepted_path=path, committed=new,
            bonus=bonus if len(new) == len(path) + 1 else None,  # cut at EOS or the budget: no bonus
            history_before=history[0], history_after=history[1], timings=self._timings(),
            draft_forwards=calls, target_forwards=target_forwards, host_syncs=syncs)
        if "chain_tokens" in a:
            rec.chain_topk = [[t, lp] for t, lp in zip(a["chain_tokens"].tolist(),
                                                        a["chain_logps"].astype(np.float32).tolist())]
        if self.trace is not None:
            rec.position_ids = (prefix_len + a["depths"]).tolist()
            rec.target_prob_drafted = [None] + (a["target_prob"].tolist() if "target_prob" in a else [])
            if "choice_prob" in a:
                rec.sampling = _sampling_record(a)
            rec.tokenizer = self.tokenizer  # in memory only (views name tokens with it)
            rec.token_texts = self._texts(host.tokens)
            rec.committed_texts = self._texts(rec.committed)
            self.trace.iterations.append(rec)
        return rec

    def _timings(self) -> dict[str, float]:
        """This iteration's host laps per phase (a record is made before the device has finished)."""
        return {p: self.phases.last_lap[p] for p in PHASES if p in self.phases.last_lap}

    def _texts(self, tokens: Sequence[int]) -> list[str]:
        tok = self.tokenizer
        return [tok.decode([t]) for t in tokens] if tok is not None else []

    def result(self, out: list[int], history_state: Any, draft_forwards: int, speculative: bool) -> GenerationResult:
        """The :class:`~dynatree_core.records.result.GenerationResult` of the run (``draft_forwards``:
        the drafter's count; ``speculative``: whether the method drafts)."""

        pl.synchronize(self.device)
        wall = time.perf_counter() - self.t_start
        compiles = compiled_graphs() - self._graphs
        forward_s = self.clock.seconds()
        device, host = self.phases.device_totals(), self.phases.host
        peak, kind = peak_memory(self.device)
        metrics: Metrics = summarize(
            new_tokens=len(out), wall_time_s=wall, ttft_s=self.ttft, iterations=len(self.accepted),
            accepted=self.accepted, committed=self.committed, depths=self.depths, tree_sizes=self.sizes,
            target_forwards=self.target_forwards,
            draft_forwards=draft_forwards,
            prefill_time_s=self.prefill_s, draft_time_s=device.get("draft", 0.0),
            verify_time_s=device.get("verify", 0.0), commit_time_s=device.get("commit", 0.0),
            draft_host_s=host.get("draft", 0.0), verify_host_s=host.get("verify", 0.0),
            phase_clock=self.phases.kind, compiles=max(compiles, 0), peak_memory_bytes=peak, peak_memory_kind=kind,
            stopped_by=self.stopped_by, speculative=speculative, forward_time_s=forward_s,
            host_syncs=self.iteration_syncs, draft_levels=self.draft_levels)
        text = self.tokenizer.decode(out) if self.tokenizer is not None else None
        if self.trace is not None:
            self.trace.tokens = list(out)
            self.trace.text = text
            self.trace.metrics = metrics.to_dict()
        return GenerationResult(tokens=out, text=text, metrics=metrics, trace=self.trace,
                                prompt_tokens=list(self.prompt), history_state=history_state)


def _draft_scores(tree: DeviceTree, rows: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """Shared noise: each node's largest draft scores log q + g and their log q (the slot it was
    grown in: an EAGLE-2 rerank compacts the tree), masked where the node was not expanded."""
    n = tree.n
    slots = tree.orig[:n] if tree.orig is not None else torch.arange(n, device=tree.device)
    fed = tree.fed[:n, None]
    tokens, scores, logq = (r.index_select(0, slots) for r in rows)
    return {"draft_score_top_tokens": torch.where(fed, tokens, -1), "draft_score_top_probs": scores,
            "draft_logq_top": logq}


def _rejection_extras(tree: DeviceTree, choice: TargetChoice, m: int, p_top: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rejection: the coins, the accepted rank, the uniform and the drawn token's CDF interval of what
    the node's token is drawn from when no candidate is accepted (the last residual, or p where nothing
    was rejected), the number of rejections, the last residual's and q's largest entries, and with
    the steps kept, p_i and q_i at every step on the tokens the record names at the node."""
    drawn = choice.tokens[:, None]
    dist = choice.drawn_from
    cdf = dist.cumsum(-1)  # token-id order: the interval of the CDF that the uniform fell in
    hi = cdf.gather(1, drawn)[:, 0] / cdf[:, -1]
    out = dict(uniform=choice.noise, interval_hi=hi, interval_lo=hi - dist.gather(1, drawn)[:, 0] / cdf[:, -1],
               coins=choice.coins, accepted_rank=choice.accepted_rank, rejections=choice.rejections)
    if choice.thresholds is not None:
        out["thresholds"] = choice.thresholds
    res = choice.residual.topk(m, dim=-1)  # rows of nodes with no rejection are zeros: recorded as None
    out["residual_top_tokens"], out["residual_top_probs"] = res.indices, res.values
    if choice.q is not None:
        qt = choice.q.topk(m, dim=-1)
        out["q_top_tokens"], out["q_top_probs"] = qt.indices, qt.values
        if choice.steps:  # p_i, q_i on p's, q's and the residual's top, the candidates and the drawn token
            shown = torch.cat([p_top, qt.indices, tree.topk_tokens[:tree.n, :choice.coins.shape[1]].long(), drawn,
                               res.indices], 1)
            out["step_tokens"] = shown
            out["step_p"] = torch.stack([p_i.gather(1, shown) for p_i, _ in choice.steps], 1)
            out["step_q"] = torch.stack([q_i.gather(1, shown) for _, q_i in choice.steps], 1)
    return out


def _rejection_steps(a: dict[str, np.ndarray]) -> list:
    """Per node: None where nothing was rejected, else [tokens, p_i, q_i] with p_i and q_i (lists over
    the tokens, which appear once each) before each tested candidate up to the last rejection and after it."""
    out: list = []
    for u, r in enumerate(a["rejections"].tolist()):
        if r == 0:
            out.append(None)
            continue
        tokens, cols = [], []
        for j, t in enumerate(a["step_tokens"][u].tolist()):
            if t not in tokens:
                tokens.append(t)
                cols.append(j)
        out.append([tokens, a["step_p"][u, :r + 1][:, cols].tolist(), a["step_q"][u, :r + 1][:, cols].tolist()])
    return out


def _sampling_record(a: dict[str, np.ndarray]) -> dict[str, Any]:
    """The fetched sampling arrays as a record's ``sampling`` dict (lists per node)."""
    def pairs(name: str) -> list:
        return [[t, p] for t, p in zip(a[f"{name}_tokens"].tolist(), a[f"{name}_probs"].tolist())]

    out: dict[str, Any] = {"choice_prob": a["choice_prob"].tolist(), "p_top": pairs("p_top")}
    if "gumbel" in a:
        out.update(gumbel=a["gumbel"].tolist(), score_top=pairs("score_top"))
    if "draft_score_top_tokens" in a:  # shared noise: per expanded node [tokens, log q + g, log q]; None elsewhere
        out["draft_score_top"] = [[t, sc, lq] if t[0] >= 0 else None for t, sc, lq in zip(
            a["draft_score_top_tokens"].tolist(), a["draft_score_top_probs"].tolist(), a["draft_logq_top"].tolist())]
    if "coins" in a:
        out.update(uniform=a["uniform"].tolist(),
                   interval=[[lo, hi] for lo, hi in zip(a["interval_lo"].tolist(), a["interval_hi"].tolist())])
        # the residual exists only where a candidate was rejected: None at the other nodes
        out.update(coins=a["coins"].tolist(), accepted_rank=a["accepted_rank"].tolist(),
                   residual_top=[res if r else None for res, r in zip(pairs("residual_top"), a["rejections"].tolist())])
        if "step_tokens" in a:
            out["rejection_steps"] = _rejection_steps(a)
        if "thresholds" in a:  # each tested candidate's min(1, p_i/q_i); None where it was not tested
            out["thresholds"] = [[None if math.isnan(v) else v for v in row] for row in a["thresholds"].tolist()]
        if "q_top_tokens" in a:
            out["q_top"] = pairs("q_top")
    return out
