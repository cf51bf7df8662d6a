"""The paper's measurement protocol, shared by ``bench`` and every sweep.

For each dataset and each :class:`RunPoint` (a method config at T new tokens and prompt length
L_max), the N selected prompts are decoded greedily (prompt-major: all points on prompt i, then
prompt i+1) with EOS ignored, so every run
produces exactly T tokens. The first W prompts of each point are warmup: they are run (and
recorded, flagged ``warmup``) but left out of the aggregates. DynaTree's history state is
carried through the W warmup prompts of a point, in order, and every measured prompt starts from
the state they left: measured prompts are independent samples of the warmed-up decoder, so the
protocol can be cut into shards that run anywhere (:mod:`.shards`, :mod:`.execution`). Timing and GPU
synchronization happen inside the engine. The ``hf_assisted`` method runs Hugging Face's assisted
generation instead of the engine (:mod:`.hf_assisted`), in the same order and with the same row,
plus the assistant settings it used (``row["hf_assisted"]``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dynatree_core.bench.data import Prompt
from dynatree_core.bench.methods import MethodSpec
from dynatree_core.policy.sampling import GREEDY, SamplingConfig

PromptsFor = Callable[[str, int], list[Prompt]]


@dataclass(frozen=True)
class RunPoint:
    """One cell: ``spec`` decoded for T = ``max_new_tokens`` tokens on prompts of L_max =
    ``max_prompt_len`` tokens (None: the dataset's default). ``params`` are the sweep values
    that distinguish this cell (empty for a plain benchmark)."""

    spec: MethodSpec
    max_new_tokens: int
    max_prompt_len: int | None = None
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    #: how the target's tokens are chosen in this cell: greedy (the paper's protocol) or sampled
    sampling: SamplingConfig = GREEDY
    #: what runs the forwards (:data:`~dynatree_core.runtime.static.fast_path.RUNTIMES`; the row records the
    #: resolved one)
    runtime: str = "auto"
    #: record the oracle's evidence (Table 6: the gap to the best tree): the engine keeps the draft's
    #: chain view and top-:data:`ORACLE_TOP_K` candidates (``record_top_k``), which costs work inside the
    #: timed loop (by issue 49's count about 1 ms per iteration on the H200 of docs/gpu/2026-11-28-h200),
    #: so a run whose tables do not read it (the device check, a sweep) passes False: it times decoding alone
    oracle: bool = True

    @property
    def record_top_k(self) -> int | None:
        """What the engine is asked to keep for the oracle (None: nothing beyond what decoding needs)."""
        return ORACLE_TOP_K if self.oracle else None

    def sampling_fields(self) -> dict[str, Any]:
        """The row fields that say how this cell sampled (temperature 0: greedy, verify None)."""
        s = self.sampling
        noise = s.noise if self.spec.method != "ar" else None  # AR drafts nothing: no draft noise
        return {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "verify": s.rule,
                "draft_noise": noise}

    def l_max(self, dataset: str, defaults: dict[str, int]) -> int:
        return self.max_prompt_len if self.max_prompt_len is not None else defaults[dataset]


class LengthError(ValueError):
    """L_max + T does not fit the model's context window."""


def check_lengths(pair: Any, points: Sequence[RunPoint], datasets: Sequence[str],
                  defaults: dict[str, int], allow_long_context: bool = False) -> None:
    """Raise :class:`LengthError` if any L_max + T exceeds the target's (or draft's) context
    window (unless ``allow_long_context``): called before any prompt is decoded. ``pair``: a
    loaded pair or its :class:`~.pairs.PairInfo`."""
    from dynatree_core.bench.pairs import PairInfo

    if not isinstance(pair, PairInfo):
        from dynatree_core.pairs.pair import context_window

        windows = {"target": context_window(pair.target),
                   "draft": context_window(pair.draft) if pair.draft is not None else None}
    else:
        windows = pair.windows
    for p in points:
        if p.max_new_tokens < 1:
            raise LengthError(f"max_new_tokens (T) must be >= 1, got {p.max_new_tokens}")
        if allow_long_context:
            continue
        roles = ["target"] + (["draft"] if p.spec.method != "ar" else [])
        for ds in datasets:
            total = p.l_max(ds, defaults) + p.max_new_tokens
            for role in roles:
                win = windows.get(role)
                if win is not None and total > win:
                    raise LengthError(
                        f"{ds}: L_max ({p.l_max(ds, defaults)}) + T ({p.max_new_tokens}) = {total} exceeds the "
                        f"{role}'s context window of {win} positions; lower --max-prompt-len or --max-new-tokens, "
                        f"or pass --allow-long-context to decode past it (the paper's Pythia runs need it)")


def _digest(tokens: Sequence[int]) -> str:
    return hashlib.sha1(",".join(map(str, tokens)).encode()).hexdigest()[:16]


def make_row(dataset: str, point: RunPoint, prompt: Prompt, metrics: dict[str, Any], tokens: Sequence[int],
             warmup: bool, l_max: int) -> dict[str, Any]:
    """One per-prompt row: identification, the engine's :class:`Metrics` and cost counters."""
    new = metrics["new_tokens"]
    row: dict[str, Any] = {
        "dataset": dataset, "label": point.spec.label, "method": point.spec.method,
        "max_new_tokens": point.max_new_tokens, "max_prompt_len": l_max, **point.params, **point.sampling_fields(),
        "prompt_index": prompt.index, "prompt_tokens": prompt.n_tokens, "warmup": warmup,
        **metrics,
        "draft_forwards_per_token": metrics["draft_forwards"] / new if new else None,
        "output_sha1": _digest(tokens),
    }
    return row


#: draft candidates per fed node every benchmarked method records for the oracle: the best tree
#: is searched over the same top-k for all methods (linear K alone would record only its top-1)
ORACLE_TOP_K = 4


def oracle_record(records: Sequence[Any]) -> dict[str, Any]:
    """A row's compact oracle evidence: per iteration the accepted length, the tree size and the
    reach (the best tree of n nodes accepts min(n, reach), :mod:`dynatree_core.records.oracle`)."""
    from dynatree_core.records.oracle import oracle_iterations

    rows = oracle_iterations(records, top_k=ORACLE_TOP_K)
    return {"top_k": ORACLE_TOP_K, "accepted": [r.accepted for r in rows], "nodes": [r.nodes for r in rows],
            "reach": [r.reach for r in rows], "truncated": sum(r.truncated for r in rows)}


def calibration_record(records: Sequence[Any]) -> dict[str, Any]:
    """A row's draft calibration (:mod:`dynatree_core.records.reliability`, kind ``confidence``): over the
    nodes the draft was fed, its mean confidence c(u), how often its top-1 was the target's token,
    and the expected calibration error (None where nothing was drafted)."""
    from dynatree_core.records.reliability import calibration

    overall = calibration(list(records), kind="confidence").overall
    return {"confidence_mean": overall.mean_predicted, "confidence_observed": overall.observed_rate,
            "confidence_ece": overall.ece}


def check_assistant(info: Any, points: Sequence[RunPoint]) -> None:
    """``hf_assisted`` needs a draft Hugging Face can use as ``assistant_model`` (a feature draft
    cannot be one): say so before anything runs. ``info``: the pair's :class:`~.pairs.PairInfo`."""
    from dynatree_core.bench.hf_assisted import METHOD as HF_METHOD

    if info.assistant_error and any(p.spec.method == HF_METHOD for p in points):
        raise ValueError(info.assistant_error)
    if any(p.spec.method == HF_METHOD and not p.sampling.greedy for p in points):
        raise ValueError("hf_assisted runs Hugging Face's assisted generation greedily here; drop it from "
                         "--methods or keep --temperature 0")


def start_prompt(pair: Any, point: RunPoint, prompt: Prompt, history: Any, allow_long_context: bool,
                 max_new_tokens: int | None = None) -> Any:
    """One prompt's decode with one point's method, built but not run: its config calibrated, its
    fast path chosen and its forwards built (compiled, captured), so :func:`warm_key` can read
    what it will run on. None for ``hf_assisted`` (Hugging Face's own loop: nothing to build).
    ``history`` is a :class:`~dynatree_core.policy.history.HistoryState` to continue from (or None)."""
    from dynatree_core.engine.api import iterate
    from dynatree_core.bench.hf_assisted import METHOD as HF_METHOD

    if point.spec.method == HF_METHOD:
        return None
    t = point.max_new_tokens if max_new_tokens is None else max_new_tokens
    return iterate(pair, prompt.token_ids, point.spec.method, point.spec.config, t, ignore_eos=True,
                   history=history, allow_long_context=allow_long_context, record_top_k=point.record_top_k,
                   sampling=point.sampling, runtime=point.runtime)


def warm_key(point: RunPoint, run: Any) -> tuple[str, str, int | None]:
    """What a decode's compiled code depends on: the method (the label), the runtime it resolved to
    and its path (the static cache's slots, which size the fast path's buffers; None: eager)."""
    if run is None:
        return point.spec.label, "eager", None
    return point.spec.label, run.runtime, getattr(run.target, "capacity", None)


def finish_prompt(pair: Any, point: RunPoint, prompt: Prompt, run: Any, max_new_tokens: int | None = None
                  ) -> tuple[Any, dict[str, Any]]:
    """Run a decode made by :func:`start_prompt`: (the engine's result, the row's extra fields)."""
    from dynatree_core.runtime.static.compile_cache import compile_totals
    from dynatree_core.bench.hf_assisted import assistant_settings, generate_hf_assisted

    if run is None:  # HF's own loop, measured the same way (greedy: check_assistant)
        t = point.max_new_tokens if max_new_tokens is None else max_new_tokens
        res = generate_hf_assisted(pair, prompt.token_ids, t, point.spec.config, ignore_eos=True)
        return res, {"hf_assisted": assistant_settings(pair.draft, point.spec.config), "runtime": "eager"}
    records = list(run)
    # after the timed run: the best-tree replay reads the records (no model)
    fast = {"capture_s": run.target.capture_s} if run.target.capture_s is not None else {}
    if run.runtime == "compiled":  # this process's compiles so far: seconds, cache hits (warm) or misses
        fast["compile"] = compile_totals().as_dict()
    oracle = {"oracle": oracle_record(records)} if point.oracle else {}
    return run.result, {**oracle, "record_top_k": point.record_top_k, **calibration_record(records),
                        "runtime": run.runtime, **fast}


def run_prompt(pair: Any, point: RunPoint, prompt: Prompt, history: Any, allow_long_context: bool,
               max_new_tokens: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Decode one prompt with one point's method: (the engine's result, the row's extra fields).
    ``history`` is a :class:`~dynatree_core.policy.history.HistoryState` to continue from (or None)."""
    run = start_prompt(pair, point, prompt, history, allow_long_context, max_new_tokens)
    return finish_prompt(pair, point, prompt, run, max_new_tokens)
