"""The public decoding API: :func:`generate` and :func:`iterate`.

Both run :class:`~dynatree_core.engine.loop.DecodingRun` with the config's calibrations filled in
(:func:`~dynatree_core.engine.calibrate.prepare_config`: a cost-aware DynaTree's cost curve,
Sequoia's acceptance vector, measured once per pair and device and cached on disk). The loop itself
runs whatever complete config it is given, which is how the calibrations can run it too.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from dynatree_core.engine.batch import BatchRun, is_batch, with_seeds
from dynatree_core.engine.calibrate import prepare_config
from dynatree_core.engine.loop import DecodingRun
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.config import DecoderConfig
from dynatree_core.policy.history import HistoryState
from dynatree_core.policy.sampling import SamplingConfig, sampling_config
from dynatree_core.records.result import GenerationResult

#: one prompt: text, token ids, or a [1, L] tensor
Prompt = str | Sequence[int] | torch.Tensor


def iterate(pair: ModelPair, prompt: Prompt | Sequence[Prompt], method: str = "dynatree",
            config: DecoderConfig | None = None, max_new_tokens: int | Sequence[int] = 128,
            trace: bool | str = False, *,
            temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
            seed: int | Sequence[int] | None = None, verify: str | None = None, draft_noise: str | None = None,
            sampling: SamplingConfig | None = None, **kwargs: Any) -> DecodingRun | BatchRun:
    """Step through decoding: ``for rec in iterate(...)`` yields one IterationRecord per round
    (keyword arguments as :func:`generate`'s, plus ``record_top_k``); afterwards ``run.result`` holds
    the :class:`GenerationResult`. Several prompts: a :class:`BatchRun` yields one
    :class:`~dynatree_core.engine.batch.BatchIteration` per batch iteration (every active row's
    record); afterwards ``run.results`` holds one result per prompt."""
    if is_batch(prompt):
        return BatchRun(pair, prompt, method, config, max_new_tokens, trace, prepare=prepare_config,
                        sampling=_row_samplings(len(prompt), sampling, temperature=temperature, top_p=top_p,
                                                top_k=top_k, seed=seed, verify=verify, draft_noise=draft_noise),
                        **kwargs)
    cfg = sampling_config(sampling, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, verify=verify,
                          draft_noise=draft_noise)
    return DecodingRun(pair, prompt, method, config, max_new_tokens, trace, prepare=prepare_config, sampling=cfg,
                       **kwargs)


def _row_samplings(rows: int, sampling: SamplingConfig | None, seed: int | Sequence[int] | None,
                   **settings: Any) -> list[SamplingConfig]:
    """Each row's sampling settings: the same for every row, with ``seed`` one for all or one per row."""
    if isinstance(seed, (list, tuple)):
        if len(seed) != rows:
            raise ValueError(f"seed is a list of {len(seed)} entries; pass one per prompt ({rows}) or one seed")
        base = sampling_config(sampling, seed=seed[0], **settings)  # the checks (a seed needs temperature > 0)
        return with_seeds(base, seed)
    return [sampling_config(sampling, seed=seed, **settings)] * rows


def generate(pair: ModelPair, prompt: Prompt | Sequence[Prompt], method: str = "dynatree",
             config: DecoderConfig | None = None, max_new_tokens: int | Sequence[int] = 128, trace: bool | str = False,
             eos_token_id: int | Sequence[int] | None = None, ignore_eos: bool = False,
             history: HistoryState | Sequence[HistoryState | None] | None = None, allow_long_context: bool = False,
             *, temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
             seed: int | Sequence[int] | None = None, verify: str | None = None, draft_noise: str | None = None,
             sampling: SamplingConfig | None = None, runtime: str = "auto", buckets: tuple[int, ...] | None = None,
             static_len: int | None = None, budget: Any = None) -> GenerationResult | list[GenerationResult]:
    """Decode ``max_new_tokens`` tokens with ``method``: exactly the target's greedy output, or under
    sampling exactly its distribution (``docs/engine.md``, :mod:`dynatree_core.policy.sampling`).

    Args:
        pair: the target/draft :class:`ModelPair`.
        prompt: text (needs ``pair.tokenizer``) or token ids ([L] or [1, L]); or a list of them, decoded
            together (:mod:`~dynatree_core.engine.batch`), where ``max_new_tokens``, ``seed`` and
            ``history`` take one value for all rows or one per row, and ``budget=True`` (or a
            :class:`~dynatree_core.policy.batch_budget.BatchBudget`) shares one node budget across the rows.
        method: ``"ar"``, ``"linear"``, ``"fixed_tree"``, ``"dynatree"``, ``"eagle2"`` or ``"sequoia"``.
        config: the method's config (ARConfig, LinearConfig, FixedTreeConfig, DynaTreeConfig, ...);
            defaults to the paper's settings.
        max_new_tokens: exact cap on new tokens (never overshot).
        trace: record every iteration (``result.trace``); ``"replay"``: a recording that drafts every node
            the offline page's knob ranges can grow and commits DynaTree's own path
            (:mod:`~dynatree_core.engine.replay_recording`, :func:`dynatree_viz.explorer_page`).
        eos_token_id: stop after this token (default: the model's / tokenizer's EOS).
        ignore_eos: never stop early (benchmarks).
        history: a previous run's ``history_state`` to continue DynaTree's adaptation from.
        allow_long_context: decode past the models' stated context window (rotary models compute any
            position; the paper's Pythia runs need it). Exactness is unaffected; quality is the model's.
        temperature: 0 (default) decodes greedily, bit for bit as before; T > 0 samples from the
            target's distribution warped by temperature, then ``top_k`` (0: off), then ``top_p``
            (1: off), as Hugging Face's ``generate(do_sample=True)`` orders them.
        seed: the sampling seed (default 0 when sampling; refused at temperature 0, where nothing is
            drawn): seeded AR draws the token at each position by Gumbel-max with that position's
            noise, and ``verify="match"`` emits exactly seeded AR's tokens.
        verify: ``"match"`` (default when sampling: token for token equal to seeded AR) or
            ``"rejection"`` (drafts sampled from q, recursive rejection sampling: exact in
            distribution, the acceptance the papers report).
        draft_noise: under ``match``, ``"shared"`` (default: every drafter ranks its candidates by its
            warped log q plus the Gumbel noise the target's draw uses at that position, so the draft's
            first child is coupled to the target's draw) or ``"none"`` (the top-B of q); the output is the
            same either way.
        sampling: the same settings as one :class:`SamplingConfig` (instead of the keywords).
        runtime: what runs the target's forwards: ``"eager"``, or the fast path (static KV cache,
            trees padded to ``buckets``): ``"graphs"`` (CUDA graphs), ``"compiled"``
            (``torch.compile``), ``"static"`` (the fast path run eagerly); ``"auto"`` (default): graphs
            on CUDA, eager elsewhere (several prompts: ``"eager"`` or ``"static"``). ``static_len``: the
            static cache's slots (default: the prompt, the new tokens and the largest tree, rounded up).
    Returns:
        :class:`GenerationResult` with ``tokens``, ``text``, ``metrics``, ``trace`` (a list: one per prompt).
    """
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, verify=verify, draft_noise=draft_noise)
    common = dict(sampling=sampling, settings=given, eos_token_id=eos_token_id, ignore_eos=ignore_eos,
                  history=history, allow_long_context=allow_long_context, prepare=prepare_config, runtime=runtime)
    if is_batch(prompt):
        return _generate_batch(pair, prompt, method, config, max_new_tokens, trace, buckets, static_len,
                               budget=budget, **common)
    if budget is not None:
        raise ValueError("budget= shares a node budget across a batch's rows: pass a list of prompts")
    return _generate_one(pair, prompt, method, config, max_new_tokens, trace, buckets, static_len, **common)


def _generate_one(pair: ModelPair, prompt: Prompt, method: str, config: DecoderConfig | None,
                  max_new_tokens: int, trace: bool | str, buckets: tuple[int, ...] | None, static_len: int | None,
                  sampling: SamplingConfig | None, settings: dict[str, Any], **common: Any) -> GenerationResult:
    """:func:`generate` for one prompt: one :class:`DecodingRun`."""
    cfg = sampling_config(sampling, **settings)
    return DecodingRun(pair, prompt, method, config, max_new_tokens, trace, sampling=cfg, buckets=buckets,
                       static_len=static_len, **common).finish()


def _generate_batch(pair: ModelPair, prompts: Sequence[Any], method: str, config: DecoderConfig | None,
                    max_new_tokens: int | Sequence[int], trace: bool | str, buckets: tuple[int, ...] | None,
                    static_len: int | None, sampling: SamplingConfig | None, settings: dict[str, Any],
                    **common: Any) -> list[GenerationResult]:
    """:func:`generate` for several prompts: one :class:`BatchRun`."""
    return BatchRun(pair, prompts, method, config, max_new_tokens, trace, buckets=buckets, static_len=static_len,
                    sampling=_row_samplings(len(prompts), sampling, **settings), **common).finish()
