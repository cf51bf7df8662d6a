"""Hugging Face assisted generation as a benchmark method (``hf_assisted``), for comparison.

:func:`generate_hf_assisted` runs ``target.generate(input_ids, assistant_model=draft, do_sample=False)``
on the same pair, prompt and token count as the engine's methods and returns the same
:class:`~dynatree_core.records.result.GenerationResult`, its metrics measured as the engine measures
its own (the function says how), so HF's row sits next to ours and the exactness check compares its
tokens with AR's. Only for a draft that is a Hugging Face causal LM (:func:`check_draft`). No torch
is imported until a run starts (the CLI's ``--help`` stays torch-free).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Sequence

METHOD = "hf_assisted"
SCHEDULES: tuple[str, ...] = ("constant", "heuristic", "heuristic_transient")
#: the assistant generation_config fields an HFAssistedConfig may override (None: transformers' default)
SETTINGS: tuple[str, ...] = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


@dataclass(frozen=True)
class HFAssistedConfig:
    """The ``hf_assisted`` benchmark method: transformers' assisted generation on the pair.

    Every field None (the default) keeps transformers' own default for that setting (read from the
    assistant's ``generation_config`` and recorded with every run: :func:`assistant_settings`); a field
    set overrides it for the call only (the assistant's ``generation_config`` is restored afterwards)."""

    method: ClassVar[str] = METHOD
    num_assistant_tokens: int | None = None
    num_assistant_tokens_schedule: str | None = None
    assistant_confidence_threshold: float | None = None

    def __post_init__(self) -> None:
        n = self.num_assistant_tokens
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"num_assistant_tokens must be an integer >= 1 (or None: transformers' default), "
                             f"got {n!r}")
        s = self.num_assistant_tokens_schedule
        if s is not None and s not in SCHEDULES:
            raise ValueError(f"num_assistant_tokens_schedule must be one of {SCHEDULES} (or None), got {s!r}")
        c = self.assistant_confidence_threshold
        if c is not None and not 0.0 <= c < 1.0:
            raise ValueError(f"assistant_confidence_threshold must be in [0, 1) (0 disables it; None: transformers' "
                             f"default), got {c!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HFAssistedConfig":
        return cls(**{k: v for k, v in d.items() if k != "method"})


def check_draft(pair: Any) -> None:
    """Raise ValueError unless the pair's draft can be HF's ``assistant_model``."""
    from dynatree_core.drafters.feature_draft import FeatureDraftModel

    draft = pair.draft
    if draft is None:
        raise ValueError(f"{METHOD} needs a draft model (HF's assistant_model); the ModelPair has draft=None")
    if isinstance(draft, FeatureDraftModel) or not callable(getattr(draft, "generate", None)) \
            or getattr(draft, "generation_config", None) is None:
        raise ValueError(f"{METHOD} runs Hugging Face assisted generation, which needs a draft that is a Hugging Face "
                         f"causal LM; this pair's draft is a {type(draft).__name__} (a feature draft reads the "
                         f"target's hidden states and cannot be an assistant_model); drop {METHOD} from --methods "
                         f"or use an independent draft (--drafter model)")
    if getattr(pair, "lookup", None) is not None:
        raise ValueError(f"{METHOD} runs Hugging Face assisted generation with the draft model alone; this pair mixes "
                         f"prompt lookup into it ({pair.drafter_kind}), which HF's assistant would not do, so the rows "
                         f"would not compare like with like; drop {METHOD} from --methods or use --drafter model")


class _ForwardTimer:
    """Counts one module's forwards from hooks and times them with the engine's
    :class:`~dynatree_core.runtime.model.forwards.ForwardClock` (CUDA events on a GPU, no sync)."""

    def __init__(self, module: Any, device: Any) -> None:
        from dynatree_core.runtime.model.forwards import ForwardClock

        self.clock = ForwardClock(device)
        self.calls, self.inputs = 0, []
        self.first_end: Any = None  # perf_counter value or CUDA event at the end of the first forward
        self._handles = [module.register_forward_pre_hook(self._pre, with_kwargs=True),
                         module.register_forward_hook(self._post, with_kwargs=True)]

    def _pre(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.inputs.append(int(ids.shape[-1]) if ids is not None else 0)  # a shape: no device read
        self.calls += 1
        self.clock.start()

    def _post(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        end = self.clock.stop()
        if self.first_end is None:
            self.first_end = end

    def seconds(self) -> float:
        """Total time inside the forwards (on CUDA: after the caller's final synchronize)."""
        return self.clock.seconds()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


@contextlib.contextmanager
def _assistant_overrides(draft: Any, config: HFAssistedConfig) -> Iterator[None]:
    """Set the config's non-None settings on the assistant's generation_config for one call."""
    gc = draft.generation_config
    changes = {k: getattr(config, k) for k in SETTINGS if getattr(config, k) is not None}
    before = {k: getattr(gc, k, None) for k in changes}
    for k, v in changes.items():
        setattr(gc, k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            setattr(gc, k, v)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers warns about its own internal assistant call (generation_config passed with
    max_new_tokens); not the user's business: silenced for the call, restored after."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def assistant_settings(draft: Any, config: HFAssistedConfig | None = None) -> dict[str, Any]:
    """The assistant settings a call with ``config`` uses (transformers' defaults where the
    config says None), and whether the confidence threshold adapts (it does when scikit-learn is
    installed), with the transformers version: recorded in every benchmark row."""
    import importlib.util

    import transformers

    config = config or HFAssistedConfig()
    gc = draft.generation_config
    defaults = gc._get_default_generation_params() if hasattr(gc, "_get_default_generation_params") else {}
    out: dict[str, Any] = {}
    for k in SETTINGS:
        v = getattr(config, k)
        if v is None:
            v = getattr(gc, k, None)
        if v is None:
            v = defaults.get(k)
        out[k] = v
    out["confidence_threshold_adapts"] = bool(out["assistant_confidence_threshold"]) and \
        importlib.util.find_spec("sklearn") is not None
    out["transformers"] = transformers.__version__
    return out


def generate_hf_assisted(pair: Any, prompt: Any, max_new_tokens: int, config: HFAssistedConfig | None = None,
                         ignore_eos: bool = False, eos_token_id: int | Sequence[int] | None = None) -> Any:
    """Greedy HF assisted generation of ``max_new_tokens`` tokens; returns a
    :class:`~dynatree_core.records.result.GenerationResult` whose metrics mean what the engine's mean;
    :func:`assistant_settings` says which assistant settings it used.

    * time inside forwards (``forward_time_s``): forward hooks on the target and the assistant
      (``perf_counter`` on a CPU; on CUDA events summed after one final synchronize); wall time
      around ``generate``; ``draft_time_s`` / ``verify_time_s``: inside the assistant's / the target's
      forwards only; ``prefill_time_s`` and ``commit_time_s`` 0; host syncs not counted (None);
    * iterations = target forwards: HF has no separate prefill, its first target forward reads the
      prompt and verifies the first candidates (iteration 1; TTFT is that forward's end);
      ``engine_overhead_ms`` = (wall time - time inside forwards) / iterations, the engine's formula;
    * candidates per iteration (a chain), accepted = new tokens - iterations, draft forwards =
      assistant forwards (its prompt read included).

    EOS: with ``ignore_eos`` (the benchmark) the call gets ``eos_token_id=[]``, so HF decodes exactly
    T tokens, the target's greedy choices (not ``min_new_tokens``, which masks the EOS logit and would
    change the output where EOS is the argmax); otherwise the engine's EOS ids, cut after the first.
    """
    from dynatree_core.engine.run_checks import encode_prompt
    from dynatree_core.records.result import GenerationResult

    config = config or HFAssistedConfig()
    check_draft(pair)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise ValueError(f"{METHOD}: max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    ids = encode_prompt(pair, prompt)
    eos = _eos_list(pair, ignore_eos, eos_token_id)
    run = _timed_generate(pair, ids, config, max_new_tokens, eos)
    tokens = run.out[0, len(ids):].tolist()
    stopped_by = "max_new_tokens"
    for j, t in enumerate(tokens):
        if t in eos:
            tokens, stopped_by = tokens[: j + 1], "eos"
            break
    metrics = _metrics(pair, run, len(ids), tokens, stopped_by)
    text = pair.tokenizer.decode(tokens) if pair.tokenizer is not None else None
    return GenerationResult(tokens=tokens, text=text, metrics=metrics, trace=None, prompt_tokens=list(ids))


def _eos_list(pair: Any, ignore_eos: bool, eos_token_id: int | Sequence[int] | None) -> list[int]:
    from dynatree_core.pairs.pair import eos_token_ids

    if ignore_eos:
        return []
    if eos_token_id is None:
        return eos_token_ids(pair.target, pair.tokenizer)
    return [int(t) for t in ([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)]


@dataclasses.dataclass
class _TimedRun:
    out: Any
    wall: float
    t0: float
    start_event: Any
    target_t: _ForwardTimer
    draft_t: _ForwardTimer


def _timed_generate(pair: Any, ids: list[int], config: HFAssistedConfig, max_new_tokens: int,
                    eos: list[int]) -> _TimedRun:
    """``target.generate(..., assistant_model=draft)`` with its forwards timed (wall time from the
    host, the first target forward's end on the device's clock for TTFT)."""
    import torch

    from dynatree_core.runtime.model.forwards import synchronize

    device = pair.device
    pad = getattr(pair.target.generation_config, "pad_token_id", None)
    if pad is None and pair.tokenizer is not None:
        pad = getattr(pair.tokenizer, "pad_token_id", None)
    kwargs: dict[str, Any] = {"do_sample": False, "max_new_tokens": max_new_tokens, "eos_token_id": eos}
    if pad is not None:
        kwargs["pad_token_id"] = int(pad)
    x = torch.tensor([ids], dtype=torch.long, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    target_t, draft_t = _ForwardTimer(pair.target, device), _ForwardTimer(pair.draft, device)
    try:
        with _assistant_overrides(pair.draft, config), _quiet_transformers(), torch.inference_mode():
            synchronize(device)
            start_event = None
            if device.type == "cuda":
                start_event = torch.cuda.Event(enable_timing=True)
                start_event.record()
            t0 = time.perf_counter()
            out = pair.target.generate(x, attention_mask=torch.ones_like(x), assistant_model=pair.draft, **kwargs)
            synchronize(device)
            wall = time.perf_counter() - t0
    finally:
        target_t.remove()
        draft_t.remove()
    return _TimedRun(out, wall, t0, start_event, target_t, draft_t)


def _metrics(pair: Any, run: _TimedRun, prompt_len: int, tokens: list[int], stopped_by: str) -> Any:
    """The engine's :class:`Metrics` for HF's run (iterations = target forwards)."""
    from dynatree_core.engine.collector import peak_memory
    from dynatree_core.records.metrics import summarize

    target_t, draft_t = run.target_t, run.draft_t
    target_s, draft_s = target_t.seconds(), draft_t.seconds()
    if target_t.first_end is None:
        ttft = None
    elif run.start_event is not None:
        ttft = run.start_event.elapsed_time(target_t.first_end) / 1e3
    else:
        ttft = target_t.first_end - run.t0
    its = target_t.calls
    # candidates verified by each target forward: the first reads the prompt too, the others the
    # last committed token first
    cands = [max(n - (prompt_len if i == 0 else 1), 0) for i, n in enumerate(target_t.inputs)]
    peak, kind = peak_memory(pair.device)
    metrics = summarize(
        new_tokens=len(tokens), wall_time_s=run.wall, ttft_s=ttft, iterations=its,
        # totals as one-element lists: summarize only sums them; every round commits matches + 1
        accepted=[max(len(tokens) - its, 0)], committed=[len(tokens)], depths=cands, tree_sizes=cands,
        target_forwards=its, draft_forwards=draft_t.calls, prefill_time_s=0.0, draft_time_s=draft_s,
        verify_time_s=target_s, commit_time_s=0.0, peak_memory_bytes=peak, peak_memory_kind=kind,
        stopped_by=stopped_by, speculative=True, forward_time_s=target_s + draft_s)
    return dataclasses.replace(metrics, host_syncs_per_iteration=None)  # not counted in HF's loop
