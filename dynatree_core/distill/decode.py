"""Sampling loops: continuing prompts with the target (or a draft), greedy or sampled, and the
target's self-written user requests."""

from __future__ import annotations

import torch

from dynatree_core.runtime.model.compat import cache_kwargs
from dynatree_core.pairs.pair import eos_token_ids
from dynatree_core.distill.prompts import mentions_held_out_topic, user_turn_prefix
from dynatree_core.distill.static_decode import STOP_CHECK_EVERY, StaticWriter, nucleus


def eos_ids(model, tok) -> set[int]:
    """The ids a continuation stops at: the same as the decoders' (:func:`dynatree_core.pairs.pair.eos_token_ids`)."""
    return set(eos_token_ids(model, tok))


def _first_eos_cut(g: list[int], eos: set[int]) -> int:
    for t, x in enumerate(g):
        if x in eos:
            return t + 1  # keep the EOS itself: the draft must learn to predict it
    return len(g)


def _sample_next(logits: torch.Tensor, sample: bool, temperature: float, top_p: float) -> torch.Tensor:
    """Greedy or temperature + nucleus sampling from last-position logits ``[B, V]`` (the dynamic loop's:
    ``torch.multinomial``, which reads the device to check its input)."""
    if not sample:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    if top_p < 1.0:
        sp, si = nucleus(probs, top_p)
        return si.gather(-1, torch.multinomial(sp, 1)).squeeze(-1)
    return torch.multinomial(probs, 1).squeeze(-1)


def _decode_equal_length(model, batch: list[list[int]], max_new: int, stop: set[int], sample: bool,
                         temperature: float, top_p: float, runtime: str = "dynamic") -> list[list[int]]:
    """:func:`decode` of prompts that all have the same length (no padding)."""
    if len({len(p) for p in batch}) > 1:
        raise ValueError("_decode_equal_length needs prompts of one length; _decode_batch pads")
    return decode(model, batch, max_new, stop, sample, temperature, top_p, runtime=runtime)


def decode(model, batch: list[list[int]], max_new: int, stop: set[int], sample: bool, temperature: float,
           top_p: float, pad: int = 0, runtime: str = "static", stop_every: int = STOP_CHECK_EVERY
           ) -> list[list[int]]:
    """Continue ``batch`` (rows of ``max_new`` tokens at most, each cut by the caller at its first stop
    token): ``runtime="dynamic"`` by :func:`_decode_batch`, else by the static-shape
    :class:`~dynatree_core.distill.static_decode.StaticWriter` (``static``, ``compiled``, ``graphs``),
    which writes the same tokens for a seed."""
    if runtime == "dynamic":
        return _decode_batch(model, batch, max_new, stop, sample, temperature, top_p, pad)
    return StaticWriter(model, batch, max_new, stop, sample, temperature, top_p, runtime, pad).run(stop_every)


def _left_padded(batch: list[list[int]], pad: int, max_new: int, dev) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prompts ``[B, P]`` (left-padded with ``pad``) and the attention mask ``[B, P + max_new]`` over
    them and the tokens to come (None when every prompt has the same length: nothing to mask)."""
    P = max(len(p) for p in batch)
    if all(len(p) == P for p in batch):
        return torch.tensor(batch, device=dev), None
    x = torch.full((len(batch), P), pad, dtype=torch.long)
    att = torch.ones((len(batch), P + max_new), dtype=torch.long)
    for j, p in enumerate(batch):
        x[j, P - len(p):] = torch.tensor(p, dtype=torch.long)
        att[j, :P - len(p)] = 0
    return x.to(dev), att.to(dev)


@torch.no_grad()
def _decode_batch(model, batch: list[list[int]], max_new: int, stop: set[int], sample: bool,
                  temperature: float, top_p: float, pad: int = 0) -> list[list[int]]:
    """KV-cached decoding of a batch of prompts, logits only at the last position. Prompts of one
    length run without padding or mask; others are left-padded with ``pad`` under an attention mask,
    each row at its own positions. On a CPU both run several times faster than ``generate`` with
    left padding (which computes the prefill's logits at every position and pays its per-step
    overhead). Stops when every row has written a token of ``stop`` or after ``max_new``."""
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    x, att = _left_padded(batch, pad, max_new, dev)
    B, P = x.shape
    pos = None if att is None else (att[:, :P].cumsum(-1) - 1).clamp(min=0)  # [B, P]: each row from 0
    masked = {} if att is None else {"attention_mask": att[:, :P], "position_ids": pos}
    cache = DynamicCache(config=model.config)
    h = model.model(input_ids=x, **cache_kwargs(model.model, cache), use_cache=True,
                    **masked).last_hidden_state[:, -1]
    out = torch.zeros((B, max_new), dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    stop_t = torch.tensor(sorted(stop), dtype=torch.long, device=dev)
    n = 0
    for i in range(max_new):
        t = _sample_next(model.lm_head(h), sample, temperature, top_p)
        out[:, i] = t
        n = i + 1
        done |= torch.isin(t, stop_t)
        if bool(done.all()) or i + 1 == max_new:
            break
        step = {"position_ids": torch.full((B, 1), P + i, device=dev)} if att is None else \
            {"position_ids": pos[:, -1:] + i + 1, "attention_mask": att[:, :P + i + 1]}
        h = model.model(input_ids=t[:, None], **cache_kwargs(model.model, cache), use_cache=True,
                        **step).last_hidden_state[:, -1]
    return out[:, :n].tolist()


@torch.no_grad()
def _continue(model, pad: int, batch: list[list[int]], max_new: int, eos: set[int],
              sample: bool, temperature: float, top_p: float, writer: str = "static") -> list[tuple[list[int], int]]:
    """Continue a batch of prompts with the target; ``(tokens, continuation_start)`` rows.
    ``writer``: a runtime of :func:`decode` (``static``, ``compiled``, ``graphs``; ``dynamic``: the
    growing-cache loop :func:`_decode_batch`), or ``"generate"``: equal lengths by the dynamic loop,
    others Hugging Face's ``generate`` with left padding (the writer until 2026-11-27, kept to measure
    against)."""
    dev = next(model.parameters()).device
    P = max(len(p) for p in batch)
    if writer != "generate":
        gen = decode(model, batch, max_new, eos, sample, temperature, top_p, pad, runtime=writer)
    elif all(len(p) == P for p in batch):
        gen = _decode_batch(model, batch, max_new, eos, sample, temperature, top_p, pad)
    else:
        ids = torch.full((len(batch), P), pad, dtype=torch.long)
        att = torch.zeros((len(batch), P), dtype=torch.long)
        for j, p in enumerate(batch):
            ids[j, P - len(p):] = torch.tensor(p)
            att[j, P - len(p):] = 1
        kw = ({"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if sample else
              {"do_sample": False, "temperature": None, "top_p": None, "top_k": None})
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), max_new_tokens=max_new,
                             pad_token_id=pad, **kw)
        gen = out[:, P:].tolist()
    rows = []
    for p, g in zip(batch, gen):
        n = _first_eos_cut(g, eos)
        if n:
            rows.append((list(p) + g[:n], len(p)))
    return rows


def self_prompts(model, tok, n: int, seed: int, batch: int = 256, max_len: int = 80,
                 temperature: float = 1.0, top_p: float = 1.0, runtime: str = "static") -> list[str]:
    """``n`` user requests written by the target itself (sampled after the chat template's user
    header, the "Magpie" recipe): an instruct model's own idea of what users ask, far more varied
    than a topic list.  Unfinished requests, duplicates and any mention of a held-out evaluation
    topic are dropped, so the result may be shorter than ``n``.  Deterministic for a seed."""
    from tqdm import tqdm

    head = user_turn_prefix(tok)
    end = eos_ids(model, tok)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        end.add(im_end)
    out, seen = [], set()
    for b in tqdm(range(0, n, batch), desc="self-written prompts", mininterval=10):
        torch.manual_seed(seed * 7_919 + b)
        rows = _decode_equal_length(model, [head] * min(batch, n - b), max_len, end, True, temperature, top_p,
                                    runtime)
        for g in rows:
            cut = _first_eos_cut(g, end)
            if not cut or g[cut - 1] not in end:
                continue  # ran out of tokens mid-request
            text = tok.decode(g[:cut - 1], skip_special_tokens=True).strip()
            if len(text) < 12 or text in seen or mentions_held_out_topic(text):
                continue
            seen.add(text)
            out.append(text)
    return out
