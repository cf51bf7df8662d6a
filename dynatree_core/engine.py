"""The decode loop: one loop, four phases (draft, verify, select, commit) plus history.

All four methods run through :class:`DecodingRun`; they differ only in the
:class:`~dynatree_core.config.GrowthRule` their config lowers to (AR drafts an empty tree).

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
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from . import plumbing as pl
from .config import DecoderConfig, DynaTreeConfig, GrowthRule, resolve_config
from .history import HistoryAdapter, HistoryState
from .metrics import Metrics, summarize
from .drafters import make_drafter
from .models import ModelPair, context_window
from .trace import IterationRecord, Trace
from .tree import DraftTree, TopK, grow_tree


@dataclass
class GenerationResult:
    """What :func:`generate` returns."""

    tokens: list[int]
    text: str | None
    metrics: Metrics
    trace: Trace | None
    prompt_tokens: list[int]
    #: the history adapter's final state (DynaTree); pass it as ``history=`` to carry on
    history_state: HistoryState | None = None


def encode_prompt(pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor) -> list[int]:
    """Prompt text or ids -> a non-empty list of token ids."""
    if isinstance(prompt, str):
        if pair.tokenizer is None:
            raise TypeError("prompt is a string but the ModelPair has no tokenizer; pass token ids")
        ids = list(pair.tokenizer(prompt)["input_ids"])
    elif isinstance(prompt, torch.Tensor):
        if prompt.dim() == 2 and prompt.shape[0] == 1:
            prompt = prompt[0]
        if prompt.dim() != 1:
            raise ValueError(f"prompt tensor must have shape [L] or [1, L], got {tuple(prompt.shape)}")
        ids = [int(t) for t in prompt.tolist()]
    elif isinstance(prompt, (list, tuple, np.ndarray)):
        ids = [int(t) for t in prompt]
    else:
        raise TypeError(f"prompt must be a str, a list of token ids or a tensor, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("prompt must contain at least one token (got an empty prompt)")
    vocab = int(pair.target.config.vocab_size)
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token ids must be in [0, {vocab}), got {bad[:5]}")
    return ids


def _default_eos(pair: ModelPair) -> list[int]:
    """The EOS ids ``model.generate`` would stop at: generation_config's, else the tokenizer's."""
    gc = getattr(pair.target, "generation_config", None)
    eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if eos is None and pair.tokenizer is not None:
        eos = getattr(pair.tokenizer, "eos_token_id", None)
    if eos is None:
        return []
    return [int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos])]


def _peak_memory(device: torch.device) -> tuple[int | None, str]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024), "process_max_rss"


class DecodingRun:
    """An in-progress decode: iterate it to get one :class:`IterationRecord` per round.

    ``for rec in run: ...`` steps through decoding; afterwards (or via :meth:`finish`)
    ``run.result`` holds the :class:`GenerationResult`.
    """

    def __init__(self, pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor, method: str = "dynatree",
                 config: DecoderConfig | None = None, max_new_tokens: int = 128, trace: bool = False,
                 eos_token_id: int | Sequence[int] | None = None, ignore_eos: bool = False,
                 history: HistoryState | None = None, allow_long_context: bool = False):
        self.config = resolve_config(method, config)
        self.method = method
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool):
            raise TypeError(f"max_new_tokens must be an integer >= 0, got {type(max_new_tokens).__name__}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if method != "ar" and pair.draft is None:
            raise ValueError(f"method={method!r} needs a draft model; the ModelPair has draft=None")
        self.pair = pair
        self.prompt = encode_prompt(pair, prompt)
        for role, m in (("target", pair.target), ("draft", pair.draft if method != "ar" else None)):
            win = context_window(m) if m is not None else None
            if win is not None and len(self.prompt) + max_new_tokens > win and not allow_long_context:
                raise ValueError(
                    f"prompt length ({len(self.prompt)}) + max_new_tokens ({max_new_tokens}) = "
                    f"{len(self.prompt) + max_new_tokens} exceeds the {role}'s context window of {win} "
                    f"positions; shorten the prompt, lower max_new_tokens, or pass allow_long_context=True "
                    f"to decode past the trained window anyway")
        self.max_new_tokens = max_new_tokens
        if ignore_eos:
            self.eos: set[int] = set()
        elif eos_token_id is None:
            self.eos = set(_default_eos(pair))
        else:
            self.eos = {int(t) for t in ([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)}
        self.tracing = trace
        self.adapter = (HistoryAdapter(self.config, history)
                        if isinstance(self.config, DynaTreeConfig) and self.config.adaptive else None)
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
    def _rule(self, remaining: int) -> GrowthRule:
        rule = self.adapter.rule() if self.adapter is not None else self.config.growth_rule()
        # Never draft deeper than the tokens still wanted (the bonus supplies one of them).
        return dataclasses.replace(rule, d_max=min(rule.d_max, remaining - 1))

    def _text(self, tokens: Sequence[int]) -> list[str]:
        tok = self.pair.tokenizer
        return [tok.decode([t]) for t in tokens] if tok is not None else []

    @torch.inference_mode()
    def _run(self) -> Iterator[IterationRecord]:
        pair, cfg = self.pair, self.config
        target, device = pair.target, pair.device
        top_k = max(cfg.trace_top_k if self.tracing else 0, cfg.growth_rule().max_breadth)
        drafter = make_drafter(pair.draft, top_k) if pair.draft is not None and self.method != "ar" else None
        # a feature drafter reads the target's hidden states: take them from the forwards that run anyway
        need_hidden = drafter is not None and drafter.needs_target_hidden
        trace = None
        if self.tracing:
            trace = Trace(method=self.method, config=cfg.to_dict(), target_name=pair.target_name,
                          draft_name=pair.draft_name if self.method != "ar" else None,
                          prompt_tokens=list(self.prompt),
                          prompt_text=pair.tokenizer.decode(self.prompt) if pair.tokenizer else None,
                          eos_token_id=min(self.eos) if self.eos else None,
                          max_new_tokens=self.max_new_tokens, device=str(device),
                          dtype=str(pair.dtype).replace("torch.", ""), versions=_versions(),
                          drafter=drafter.settings() if drafter is not None else None)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

        out: list[int] = []
        accepted, committed_counts, depths, sizes = [], [], [], []
        target_forwards = 0
        t_draft = t_verify = t_commit = 0.0
        stopped_by = "max_new_tokens"
        pl.synchronize(device)
        t_start = time.perf_counter()
        ttft = None
        cache = DynamicCache()
        prompt_hidden = None
        if len(self.prompt) > 1 and self.max_new_tokens > 0:
            prompt_hidden = pl.prefill(target, torch.tensor([self.prompt[:-1]], device=device), cache, need_hidden)
            target_forwards += 1
        if drafter is not None and self.max_new_tokens > 0:
            drafter.start(self.prompt, prompt_hidden)
        pl.synchronize(device)
        t_prefill = time.perf_counter() - t_start
        root = self.prompt[-1]
        it = 0
        while len(out) < self.max_new_tokens:
            remaining = self.max_new_tokens - len(out)
            rule = self._rule(remaining)
            hist_before = self.adapter.state.to_dict() if self.adapter is not None else None

            # 1. draft: grow the tree, one batched draft forward per level
            t0 = time.perf_counter()
            if drafter is not None:
                tree = grow_tree(root, rule, drafter.propose)
            else:
                tree = DraftTree.with_root(root)
                tree.stop_reasons[0] = "d_max"
            pl.synchronize(device)
            t1 = time.perf_counter()

            # 2. verify: root + every node in one target forward under the tree mask
            prefix_len = pl.cache_length(cache)
            allowed = pl.with_prefix(tree.ancestor_mask(), prefix_len)
            pos = prefix_len + tree.position_offsets()
            inp = torch.tensor([tree.tokens], device=device)
            if need_hidden:
                logits, hidden = pl.forward_with_hidden(target, inp, cache, allowed, pos)
            else:
                logits = pl.forward(target, inp, cache, allowed, pos)
            target_forwards += 1
            argmax = logits.argmax(dim=-1).tolist()
            pl.synchronize(device)
            t2 = time.perf_counter()

            # 3. select: longest greedy-consistent path + bonus token
            path, bonus = tree.greedy_path(argmax)
            new = [tree.tokens[i] for i in path] + [bonus]
            # 4. commit: cut at EOS / budget, restore the caches to the committed prefix
            stop = None
            for j, t in enumerate(new):
                if t in self.eos:
                    new, stop = new[: j + 1], "eos"
                    break
            if len(new) >= remaining:
                new = new[:remaining]
                stop = stop or "max_new_tokens"
            out.extend(new)
            if stop is None:
                if cfg.kv_mode == "gather":
                    pl.keep_selected(cache, prefix_len, [0] + path)
                else:  # the paper's mode: crop to the prefix, re-run the committed tokens
                    pl.crop(cache, prefix_len)
                    pl.forward(target, torch.tensor([[root] + new[:-1]], device=device), cache)
                    target_forwards += 1
                if drafter is not None:
                    drafter.commit(path, new, hidden[[0] + path] if need_hidden else None)
                root = new[-1]
            acc = len(path) / tree.depth if tree.depth > 0 else None
            hist_after = self.adapter.update(acc).to_dict() if self.adapter is not None else None
            pl.synchronize(device)
            t3 = time.perf_counter()
            if ttft is None:
                ttft = t3 - t_start

            accepted.append(len(path))
            committed_counts.append(len(new))
            depths.append(tree.depth)
            sizes.append(tree.num_drafted)
            t_draft += t1 - t0
            t_verify += t2 - t1
            t_commit += t3 - t2
            rec = IterationRecord(
                index=it, prefix_len=prefix_len, tree=tree, target_argmax=argmax, accepted_path=path,
                committed=new, bonus=bonus if len(new) == len(path) + 1 else None,
                history_before=hist_before, history_after=hist_after,
                timings={"draft": t1 - t0, "verify": t2 - t1, "commit": t3 - t2},
                draft_forwards=tree.draft_calls,
                target_forwards=1 + (cfg.kv_mode == "recompute" and stop is None))
            if self.tracing:
                rec.position_ids = pos.tolist()
                probs = torch.softmax(logits.float(), dim=-1)
                par = torch.tensor(tree.parents[1:], dtype=torch.long, device=device)
                tok = torch.tensor(tree.tokens[1:], dtype=torch.long, device=device)
                rec.target_prob_drafted = [None] + probs[par, tok].tolist()
                rec.token_texts = self._text(tree.tokens)
                rec.committed_texts = self._text(new)
                trace.iterations.append(rec)
            it += 1
            yield rec
            if stop == "eos":
                stopped_by = "eos"
                break

        pl.synchronize(device)
        wall = time.perf_counter() - t_start
        peak, kind = _peak_memory(device)
        metrics = summarize(
            new_tokens=len(out), wall_time_s=wall, ttft_s=ttft, iterations=it, accepted=accepted,
            committed=committed_counts, depths=depths, tree_sizes=sizes, target_forwards=target_forwards,
            draft_forwards=drafter.forwards if drafter is not None else 0, prefill_time_s=t_prefill,
            draft_time_s=t_draft, verify_time_s=t_verify, commit_time_s=t_commit,
            peak_memory_bytes=peak, peak_memory_kind=kind, stopped_by=stopped_by,
            speculative=self.method != "ar")
        text = pair.tokenizer.decode(out) if pair.tokenizer is not None else None
        if trace is not None:
            trace.tokens = list(out)
            trace.text = text
            trace.metrics = metrics.to_dict()
        self.result = GenerationResult(tokens=out, text=text, metrics=metrics, trace=trace,
                                       prompt_tokens=list(self.prompt),
                                       history_state=self.adapter.state if self.adapter is not None else None)


def iterate(pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor, method: str = "dynatree",
            config: DecoderConfig | None = None, max_new_tokens: int = 128, trace: bool = False,
            **kwargs: Any) -> DecodingRun:
    """Step through decoding: ``for rec in iterate(...)`` yields one IterationRecord per round."""
    return DecodingRun(pair, prompt, method, config, max_new_tokens, trace, **kwargs)


def generate(pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor, method: str = "dynatree",
             config: DecoderConfig | None = None, max_new_tokens: int = 128, trace: bool = False,
             eos_token_id: int | Sequence[int] | None = None, ignore_eos: bool = False,
             history: HistoryState | None = None, allow_long_context: bool = False) -> GenerationResult:
    """Greedy-decode ``max_new_tokens`` tokens with ``method`` (exactly the target's greedy output).

    Args:
        pair: the target/draft :class:`ModelPair`.
        prompt: text (needs ``pair.tokenizer``) or token ids ([L] or [1, L]).
        method: ``"ar"``, ``"linear"``, ``"fixed_tree"`` or ``"dynatree"``.
        config: the method's config (ARConfig, LinearConfig, FixedTreeConfig, DynaTreeConfig);
            defaults to the paper's settings.
        max_new_tokens: exact cap on new tokens (never overshot).
        trace: record every iteration (``result.trace``).
        eos_token_id: stop after this token (default: the model's / tokenizer's EOS).
        ignore_eos: never stop early (benchmarks).
        history: a previous run's ``history_state`` to continue DynaTree's adaptation from.
        allow_long_context: decode past the models' stated context window (rotary models such
            as Pythia compute any position; the paper's Pythia runs, L_max + T = 2300-2500 >
            2048, need this). Exactness is unaffected; quality past the window is the model's.
    Returns:
        :class:`GenerationResult` with ``tokens``, ``text``, ``metrics``, ``trace``.
    """
    return DecodingRun(pair, prompt, method, config, max_new_tokens, trace, eos_token_id=eos_token_id,
                       ignore_eos=ignore_eos, history=history,
                       allow_long_context=allow_long_context).finish()


def _versions() -> dict[str, str]:
    import transformers

    from . import __version__

    return {"dynatree": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0]}
