"""Model plumbing: attention masks, position ids and forwards (no tree policy here); the KV-cache
surgery (``cache_length``, ``crop``, ``keep_selected``) is :mod:`dynatree_core.runtime.cache.dynamic`'s.

Everything the engine feeds a model goes through these helpers:

* masks are 4D **float additive** ([batch=1, heads=1, new, past+new]; 0 = may attend, dtype-min =
  may not). A 4D *bool* mask silently gives wrong logits with ``eager`` attention in
  transformers 5.x, so bool masks never reach a model;
* positions follow tree **depth**, not the BFS index: rotary models (Llama, GPT-NeoX) would
  otherwise see siblings at different distances from the prefix;
* caches are ``transformers.DynamicCache`` objects edited per layer.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch
from transformers import DynamicCache

from dynatree_core.runtime.model.compat import cache_kwargs
from dynatree_core.runtime.host_syncs import to_device
from dynatree_core.policy.masks import causal_visibility, with_prefix  # noqa: F401 (part of this module's API)


def additive_mask(allowed: np.ndarray | torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Float additive mask [1, 1, q, kv] from a bool [q, kv] matrix (True = may attend).

    A device tensor stays on the device (the decode loop's masks never visit the host); a numpy
    matrix (tests, notebooks) is copied over."""
    if not isinstance(allowed, torch.Tensor):
        allowed = to_device(np.ascontiguousarray(allowed), device, torch.bool)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed.to(device), torch.finfo(dtype).min)
    return mask[None, None]


def causal_allowed(q: int, past: int, device: torch.device) -> torch.Tensor:
    """Bool [q, past + q] on ``device``: the whole cache plus a causal chain of q new tokens."""
    return torch.ones((q, past + q), dtype=torch.bool, device=device).tril(past)


class ForwardClock:
    """Time spent inside model forwards, to tell the engine's own overhead from model compute.

    On CUDA each forward is bracketed by CUDA events (no synchronisation; :meth:`seconds` reads
    them once the run is over); on a CPU by ``perf_counter``.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._cpu_s = 0.0
        self._t0 = 0.0
        self._start: Any = None
        self._events: list[tuple[Any, Any]] = []

    def start(self) -> None:
        """A forward begins (:meth:`measure` brackets a block; forward hooks call start/stop)."""
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> Any:
        """The forward ended; returns its end mark (a CUDA event, or a ``perf_counter`` value)."""
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._start, end))
            return end
        now = time.perf_counter()
        self._cpu_s += now - self._t0
        return now

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        self.start()
        yield
        self.stop()

    def seconds(self) -> float:
        """Total so far (on CUDA this waits for the recorded forwards: call it after the loop)."""
        if self._events:
            self._events[-1][1].synchronize()
            self._cpu_s += sum(s.elapsed_time(e) for s, e in self._events) / 1e3
            self._events = []
        return self._cpu_s


def timed(clock: ForwardClock | None) -> contextlib.AbstractContextManager:
    """``clock.measure()``, or nothing when no clock is given."""
    return clock.measure() if clock is not None else contextlib.nullcontext()


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model takes its inputs on.

    Its parameters' device; for a model split across devices by accelerate (``from_pretrained(...,
    device_map=...)``, which sets ``hf_device_map``) the execution device of its input embeddings,
    i.e. the first device of the split (its parameters may also sit on the meta device when
    offloaded)."""
    if getattr(model, "hf_device_map", None):
        return dispatched_input_device(model)
    return next(model.parameters()).device


def dispatched_input_device(model: torch.nn.Module) -> torch.device:
    """The execution device of an accelerate-dispatched model's input embeddings: accelerate puts
    an ``AlignDevicesHook`` (``execution_device``) on every module holding weights; without one,
    the embeddings' weight device."""
    emb = model.get_input_embeddings()
    hook = getattr(emb, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):  # SequentialHook or one hook
        dev = getattr(h, "execution_device", None)
        if dev is not None:
            return torch.device(dev)
    dev = emb.weight.device
    return dev if dev.type != "meta" else next(p.device for p in model.parameters() if p.device.type != "meta")


def on_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` on ``device``: a no-op (no copy, no sync) when it is there already, as always on one
    device; a target split across devices (``device_map``) returns its last layers' outputs on
    its last device."""
    return x if x.device == device else x.to(device)


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so timings are honest (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_seconds(fn: Callable[[], object], device: torch.device, repeats: int = 3) -> float:
    """The median seconds ``fn``'s work takes on ``device`` (a :class:`ForwardClock` each: CUDA events on
    a GPU, the device's time rather than the host's enqueue), after one warm call."""
    fn()
    times = []
    for _ in range(repeats):
        clock = ForwardClock(device)
        with clock.measure():
            fn()
        times.append(clock.seconds())
    return statistics.median(times)


#: a visibility matrix or position ids: a device tensor (the decode loop) or host values
Index = np.ndarray | torch.Tensor


@torch.inference_mode()
def forward(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
            allowed: Index | None = None, position_ids: Index | None = None,
            clock: ForwardClock | None = None) -> torch.Tensor:
    """One cached forward of new tokens ``input_ids`` [1, q]; returns logits [q, vocab].

    ``allowed`` (bool [q, past + q], or the float additive mask [1, 1, q, past + q] itself) says
    which cache entries and new tokens each new token may attend to; ``position_ids`` (int [q])
    are absolute positions. Both default to a causal chain continuing the cache. ``clock`` times
    the forward.
    """
    inputs = _inputs(model, input_ids, cache, allowed, position_ids)
    with timed(clock):
        out = model(**inputs)
    return on_device(out.logits[0], input_ids.device)


@torch.inference_mode()
def forward_with_hidden(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
                        allowed: Index | None = None, position_ids: Index | None = None,
                        clock: ForwardClock | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`forward`, also returning the final (post-norm) hidden states [q, hidden].

    Runs the base model and the LM head separately - the very ops ``ForCausalLM.forward`` runs,
    so the logits are the same - to hand the hidden states to a feature drafter for free.
    """
    inputs = _inputs(model, input_ids, cache, allowed, position_ids)
    dev = input_ids.device
    with timed(clock):
        logits, hidden = run_with_hidden(model, inputs)
        # with a device_map both come out on the last device: the engine reads them on the first
        logits, hidden = on_device(logits[0], dev), on_device(hidden[0], dev)
    return logits, hidden


def run_with_hidden(model: torch.nn.Module, inputs: dict, logits: bool = True
                    ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The ops ``ForCausalLM.forward`` runs, split: the base model, then the LM head (skipped
    without ``logits``). Returns ([1, q, V] or None, the states a feature drafter reads [1, q, H]):
    the one place the engine takes them from, on the eager path and the fast path alike."""
    hidden = model.base_model(**inputs).last_hidden_state
    return (model.get_output_embeddings()(hidden) if logits else None), hidden


@dataclass
class DeviceVerified:
    """One verification forward over ``[root] + tree`` of a :class:`~dynatree_core.runtime.tree.tree.DeviceTree`
    (a target backend's ``verify``), still on the device: nothing here has been read back to the host."""

    logits: torch.Tensor  # [n, vocab]
    hidden: torch.Tensor | None  # [n, hidden] final hidden states, or None
    prefix_len: int  # committed tokens before the root (the root's position)
    argmax: torch.Tensor  # [n] the target's greedy choice after every node
    start: int  # the cache slot the root's entry landed in (entries [start, start + n) are the tree's)


@torch.inference_mode()
def prefill(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
            want_hidden: bool, clock: ForwardClock | None = None) -> torch.Tensor | None:
    """Extend the cache by the causal chain ``input_ids`` [1, q] (a prompt prefix). With
    ``want_hidden`` (a feature drafter needs them) return the final hidden states [q, hidden]
    from the base model alone - no logits are needed for the prompt - else None."""
    if want_hidden:
        inputs = _inputs(model, input_ids, cache, None, None)
        with timed(clock):
            return on_device(run_with_hidden(model, inputs, logits=False)[1][0], input_ids.device)
    forward(model, input_ids, cache, clock=clock)
    return None


def _inputs(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache,
            allowed: Index | None, position_ids: Index | None) -> dict:
    q = input_ids.shape[1]
    past = cache.get_seq_length()
    device = input_ids.device
    if allowed is None:
        allowed = causal_allowed(q, past, device)
    if position_ids is None:
        pos = torch.arange(past, past + q, device=device)[None]
    elif isinstance(position_ids, torch.Tensor):
        pos = position_ids.to(device).reshape(1, q)
    else:
        pos = to_device(np.asarray(position_ids, dtype=np.int64), device)[None]
    if isinstance(allowed, torch.Tensor) and allowed.is_floating_point():  # already the additive [1, 1, q, kv]
        assert tuple(allowed.shape) == (1, 1, q, past + q), (tuple(allowed.shape), q, past)
        mask = allowed
    else:
        assert tuple(allowed.shape) == (q, past + q), (tuple(allowed.shape), q, past)
        mask = additive_mask(allowed, model_dtype(model), device)
    return dict(input_ids=input_ids, attention_mask=mask, position_ids=pos, **cache_kwargs(model, cache), use_cache=True)
