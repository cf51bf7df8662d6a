"""The data stage's decode loop at static shapes (issue 51): the target writes a batch of continuations
with every buffer allocated once, so a step is a fixed sequence of kernels that ``torch.compile``
(``fullgraph=True``) or one CUDA graph can hold.

A batch of B prompts (left-padded to P) and ``max_new`` tokens lives in L = P + max_new rounded up to
:data:`SLOT_STEP` slots: the prompt at slots [0, P) (its pads masked), token i at slot P + i. What a
step reads and writes is preallocated:

* the KV cache (a :class:`~dynatree_core.runtime.cache.slots.SlotCache`, written in place at a slot
  held in a device tensor);
* the additive attention mask ``[B, 1, 1, L]`` (a slot is unmasked once written; no ``cat`` per step),
  the positions (each row's prompt length + i) and the step counter i, all on the device;
* the tokens written ``[B, max_new]`` and the rows that have written a stop token (``done [B]``).

A step attends over a prefix of the slots (:class:`PrefixSlotCache`, :meth:`StaticWriter.view_slots`), not
all L: eagerly over exactly the slots written so far, compiled or captured over them rounded up to
:data:`SLOT_STEP` (a few shapes a batch, each compiled or captured once). The bytes the attention reads
are most of a step's at a large batch, and reading all L slots made the step slower than the dynamic loop's.

One step feeds token i - 1, writes its KV entry, and draws token i with :func:`pick`: greedy argmax, or
the exponential race that ``torch.multinomial`` runs for one sample (argmax p / E, E ~ Exp(1)), so a
seed writes exactly the text the loop before it wrote (:func:`~dynatree_core.distill.decode._decode_batch`).
The stop check reads the device every :data:`STOP_CHECK_EVERY` steps, not every step; the rows past
their stop token are cut by the caller, as before.

Runtimes (``--gen-runtime``): ``static`` runs the step eagerly, ``compiled`` through
``torch.compile(fullgraph=True)`` (the noise drawn outside it, so inductor's own random numbers never
replace torch's), ``graphs`` captures it as one CUDA graph per view of a batch (noise included: graph-safe RNG
replays the same stream), ``dynamic`` is the growing-cache loop it replaced (kept to measure against).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from dynatree_core.runtime.model.compat import cache_kwargs
from dynatree_core.runtime.cache.slots import SlotCache, SlotLayer

#: the data stage's writers; "auto": graphs on CUDA, the eager static loop elsewhere (on a CPU it runs as fast as
#: the dynamic loop since it reads only the slots written: docs/bench/2026-11-28-teacher-data)
GEN_RUNTIMES: tuple[str, ...] = ("auto", "dynamic", "static", "compiled", "graphs")
#: steps between two reads of ``done`` (the only host syncs of the loop besides the final copy)
STOP_CHECK_EVERY = 16
#: slot counts are rounded up to this (a multiple of 8 keeps fused attention kernels aligned)
SLOT_STEP = 64


def resolve_gen_runtime(runtime: str, device: torch.device) -> str:
    """``runtime`` checked against the device (graphs need CUDA), ``auto`` resolved."""
    if runtime not in GEN_RUNTIMES:
        raise ValueError(f"--gen-runtime must be one of {', '.join(GEN_RUNTIMES)} (got {runtime!r})")
    if runtime == "graphs" and device.type != "cuda":
        raise ValueError(f"--gen-runtime graphs captures CUDA graphs and needs a CUDA device, not {device}")
    if runtime == "auto":
        return "graphs" if device.type == "cuda" else "static"
    return runtime


def pick(logits: torch.Tensor, noise: torch.Tensor | None, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row of ``logits [B, V]``: the argmax (``noise`` None), else a draw from
    softmax(logits / T) cut to its top-p nucleus, as the exponential race over ``noise [B, V]`` ~ Exp(1):
    argmax_x p_x / E_x is x with probability p_x / sum(p). It is what ``torch.multinomial(p, 1)`` computes
    (the same noise in the same order), without its validity checks' host reads; under top-p the race
    runs over the sorted, cut probabilities, as ``multinomial`` of them did."""
    if noise is None:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    if top_p < 1.0:
        sp, si = nucleus(probs, top_p)
        return si.gather(-1, (sp / noise).argmax(-1, keepdim=True)).squeeze(-1)
    return (probs / noise).argmax(-1)


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``probs [B, V]`` sorted (descending) with the mass past the top-p nucleus zeroed, and the order:
    the smallest prefix whose mass reaches ``top_p`` is kept."""
    sp, si = probs.sort(dim=-1, descending=True)
    return sp.masked_fill((sp.cumsum(-1) - sp) > top_p, 0.0), si


def slot_count(prompt_len: int, max_new: int) -> int:
    """Slots a batch needs: the prompt and the new tokens, rounded up to :data:`SLOT_STEP`."""
    return SLOT_STEP * math.ceil((prompt_len + max_new) / SLOT_STEP)


def kv_bytes(model: torch.nn.Module, rows: int, slots: int, dtype: torch.dtype) -> int:
    """Bytes of the static KV cache of ``rows`` x ``slots`` (what bounds the batch on a GPU)."""
    c = model.config
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * rows * slots * torch.finfo(dtype).bits // 8


class _PrefixLayer(SlotLayer):
    """A :class:`SlotLayer` whose forward attends over its first ``owner.view`` slots only."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        return keys[:, :, :self.owner.view], values[:, :, :self.owner.view]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.view, 0


class PrefixSlotCache(SlotCache):
    """A :class:`SlotCache` read through a prefix of ``view`` slots (a Python int, set before each
    forward): the attention reads the slots written so far, rounded up to a bucket, not all of them.
    The buffers stay whole and in place; a view is a slice of them, so its address never changes."""

    def __init__(self, layers: int, capacity: int, max_write: int, device: torch.device):
        super().__init__(layers, capacity, max_write, device)
        self.layers = [_PrefixLayer(self.capacity, self) for _ in range(layers)]
        self.view = self.capacity


class StaticWriter:
    """One batch's buffers and step (see the module): ``run()`` returns the rows' tokens.

    Args:
        model: a Hugging Face causal LM (``model.model`` the decoder, ``model.lm_head`` the head).
        batch: the prompts' token ids (any lengths; left-padded with ``pad``).
        max_new: tokens to write per row (at most).
        stop: ids a row stops at; the batch stops once every row has written one.
        sample, temperature, top_p: greedy when ``sample`` is False, else :func:`pick`'s draw.
        runtime: ``static``, ``compiled`` or ``graphs`` (:func:`resolve_gen_runtime`).
        views: ``exact`` (attend over the slots written so far), ``bucketed`` (rounded up to
            :data:`SLOT_STEP`) or ``auto`` (exact when eager, bucketed when compiled or captured); an eager
            writer with bucketed views runs the kernels a captured one does (``check_graphs_writer``).
    """

    def __init__(self, model: torch.nn.Module, batch: list[list[int]], max_new: int, stop: set[int], sample: bool,
                 temperature: float, top_p: float, runtime: str = "static", pad: int = 0, views: str = "auto"):
        if views not in ("auto", "exact", "bucketed"):
            raise ValueError(f"views must be auto, exact or bucketed (got {views!r})")
        if max_new < 1:
            raise ValueError(f"max_new must be >= 1 (got {max_new})")
        self.model, self.max_new, self.runtime = model, int(max_new), runtime
        self.exact_views = views == "exact" or (views == "auto" and runtime == "static")
        self.sample, self.temperature, self.top_p = sample, float(temperature), float(top_p)
        dev = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        self.P = max(len(p) for p in batch)
        B, L = len(batch), slot_count(self.P, self.max_new)
        x = torch.full((B, self.P), pad, dtype=torch.long)
        key_ok = torch.zeros((B, L), dtype=torch.bool)  # [B, L]: the slots a row's tokens may attend to
        lens = torch.tensor([len(p) for p in batch], dtype=torch.long)
        for j, p in enumerate(batch):
            x[j, self.P - len(p):] = torch.tensor(p, dtype=torch.long)
            key_ok[j, self.P - len(p):self.P] = True
        self.x, self.key_ok = x.to(dev), key_ok.to(dev)
        self.L = L
        self.cache = PrefixSlotCache(int(model.config.num_hidden_layers), L, self.P, dev)
        self.mask = torch.zeros((B, 1, 1, L), dtype=dtype, device=dev)  # [B, 1, 1, L] additive
        self.mask.masked_fill_(~self.key_ok[:, None, None, :], torch.finfo(dtype).min)
        self.base = (lens - 1).to(dev)[:, None]  # [B, 1]: the position of each row's last prompt token
        self.i = torch.ones(1, dtype=torch.long, device=dev)  # the index of the token the next step writes
        self.slot0 = torch.full((1,), self.P - 1, dtype=torch.long, device=dev)  # token i - 1 sits at slot P - 1 + i
        self.out = torch.zeros((B, self.max_new), dtype=torch.long, device=dev)
        self.done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.stop = torch.tensor(sorted(stop), dtype=torch.long, device=dev)
        vocab = int(model.lm_head.out_features) if hasattr(model.lm_head, "out_features") else None
        self.noise = torch.empty((B, vocab or 1), dtype=torch.float32, device=dev) if sample else None
        self._kw = cache_kwargs(model.model, self.cache)
        self.steps = 0  # steps run (the last batch's, for the log)

    def _record(self, logits: torch.Tensor, at: torch.Tensor) -> None:
        """Token ``at`` of every row from ``logits [B, V]`` (the noise already drawn)."""
        t = pick(logits, self.noise, self.temperature, self.top_p)
        self.out.index_copy_(1, at, t[:, None])
        self.done |= (t[:, None] == self.stop).any(-1)

    def prefill(self) -> None:
        """Every prompt into the cache (slots [0, P)) and the first token drawn."""
        causal = torch.ones((self.P, self.P), dtype=torch.bool, device=self.x.device).tril()
        # [B, P, P]; a pad sees itself, so no row is all masked (its output is never read, but must not be NaN)
        allowed = (self.key_ok[:, None, :self.P] & causal) | torch.eye(self.P, dtype=torch.bool, device=self.x.device)
        mask = torch.full((len(self.x), 1, self.P, self.P), torch.finfo(self.mask.dtype).min,
                          dtype=self.mask.dtype, device=self.x.device)
        mask[:, 0].masked_fill_(allowed, 0.0)
        pos = (self.key_ok[:, :self.P].long().cumsum(-1) - 1).clamp(min=0)  # [B, P]: each row from 0
        self.cache.write_at(0, self.P)
        self.cache.view = self.P  # the prompt attends over the prompt's slots alone
        h = self.model.model(input_ids=self.x, attention_mask=mask, position_ids=pos, use_cache=True,
                             **self._kw).last_hidden_state[:, -1]
        self._draw()
        self._record(self.model.lm_head(h), self.i - 1)

    def _draw(self) -> None:
        if self.noise is not None:
            self.noise.exponential_()

    def view_slots(self, n: int) -> int:
        """Slots step ``n`` attends over. Token n - 1 goes to slot P - 1 + n, so P + n slots are live: the
        eager ``static`` runtime reads exactly those (as the dynamic loop's cache holds them); ``compiled``
        and ``graphs`` (and ``views="bucketed"``) round up to :data:`SLOT_STEP`, so a batch has a few
        shapes, each compiled or captured once (at batch 8,192 on a GPU the bytes the attention reads are
        most of a step's, and reading all L slots reads about twice the live ones)."""
        live = self.P + n
        if self.exact_views:
            return min(self.L, live)
        return min(self.L, SLOT_STEP * math.ceil(live / SLOT_STEP))

    def step(self, view: int | None = None) -> None:
        """The static step: token i - 1 in at its slot and position, token i out, i += 1 (no host read),
        attending over the first ``view`` slots (all L when None; :meth:`view_slots` says how many)."""
        self.cache.view = self.L if view is None else view
        slot = self.slot0 + self.i  # [1]
        self.cache.slots[:1].copy_(slot)
        self.mask.index_fill_(-1, slot, 0.0)
        h = self.model.model(input_ids=self.out.index_select(1, self.i - 1),
                             attention_mask=self.mask[..., :self.cache.view], position_ids=self.base + self.i,
                             use_cache=True, **self._kw).last_hidden_state[:, -1]
        self._record(self.model.lm_head(h), self.i)
        self.i.add_(1)

    def _advance_fn(self) -> Callable[[int], None]:
        """One step over ``view`` slots as this runtime runs it (noise first: the same RNG stream as the
        eager loop); compiled, each view is its own graph (the int is a constant of the trace)."""
        if self.runtime == "compiled":
            step = torch.compile(self.step, fullgraph=True, dynamic=False)
        elif self.runtime in ("static", "graphs"):
            step = self.step
        else:
            raise ValueError(f"StaticWriter runs static, compiled or graphs (got {self.runtime!r})")

        def advance(view: int) -> None:
            self._draw()
            step(view)

        return advance

    @torch.no_grad()
    def run(self, stop_every: int = STOP_CHECK_EVERY) -> list[list[int]]:
        """Prefill, then steps until every row stopped (checked every ``stop_every`` steps) or ``max_new``."""
        self.prefill()
        advance = self._advance_fn()
        graphs: dict[int, Callable[[], None]] = {}  # view -> the captured step ("graphs")
        pool = torch.cuda.graph_pool_handle() if self.runtime == "graphs" else None
        n = 1
        while n < self.max_new:
            view = self.view_slots(n)
            if view in graphs:
                graphs[view]()
            elif n >= 2 and self.runtime == "graphs":  # step 1 ran eagerly (the CUDA libraries' warm-up)
                graphs[view] = _capture(lambda v=view: advance(v), pool)  # runs step n, then replays the view's
            else:
                advance(view)
            n += 1
            if n % stop_every == 0 and bool(self.done.all()):
                break
        self.steps = n
        return self.out[:, :n].tolist()


def _capture(advance: Callable[[], None], pool=None) -> Callable[[], None]:
    """``advance`` as one CUDA graph: one real step on a side stream (the warm-up capture needs), then
    the capture, which records without running; each replay is the next step. A batch's graphs (one per
    view) share ``pool``: they replay one at a time."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        advance()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        advance()
    return graph.replay
