"""Short calibrations of a model pair on the machine at hand, cached on disk.

Two tree policies need facts about the pair and the device that no config can know:

* cost-aware DynaTree needs the verify-cost curve c(n) and the cost of one draft level
  (:func:`cost_model`, a :class:`~dynatree_core.policy.cost_model.CostModel`);
* Sequoia needs the draft's per-rank acceptance vector: acceptance[r] = P(the target's greedy
  token is the draft's rank-r token) (:func:`acceptance_vector`).

Both are measured once (seconds on a CPU) and cached under :func:`cache_dir` in a JSON file keyed
by the device, the models, the dtype and the runtime (a fast path's curve is its buckets' replayed
forwards, :func:`fast_verify_curve`); a cached result for another device or pair is never used
(it is measured again, and a warning says so). :func:`prepare_config` fills them into a config
before decoding, so the trace records the numbers that shaped every tree. Measurements use the
bundled *training* prompts, never the benchmark's evaluation text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import statistics
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import torch
from transformers import DynamicCache

from dynatree_core.runtime.cache.dynamic import crop
from dynatree_core.runtime.model import forwards as pl
from dynatree_core.runtime.static.fast_path import FastPath, bucket, fast_path, resolve_runtime
from dynatree_core.policy.config import DecoderConfig, DynaTreeConfig, FixedTreeConfig, SequoiaConfig
from dynatree_core.policy.cost_model import COST_SCHEMA_VERSION, CostModel
from dynatree_core.engine.loop import DecodingRun
from dynatree_core.paths import PROMPTS_FILE
from dynatree_core.runtime.host_syncs import to_device

#: token counts (root included) whose verify forward is timed; the curve interpolates between them.
#: Every size up to 16 is timed: the curve need not be monotone (on this project's 2-core CPU, MKL's
#: fp32 small-batch matmul made 2-3 tokens slower than 6-8), and a cost-aware tree should see that.
DEFAULT_SIZES: tuple[int, ...] = tuple(range(1, 17)) + (20, 24, 32)
#: the larger curve on a GPU, where verification stays nearly flat in n for far longer
GPU_SIZES: tuple[int, ...] = DEFAULT_SIZES + (48, 64, 96, 128)
#: draft ranks whose acceptance Sequoia's vector holds
DEFAULT_RANKS = 8
#: the node budget a cost-aware config falls back to when no curve can be measured (the
#: ``cpu`` / ``paper`` presets' N_max)
FALLBACK_N_MAX = {"cpu": DynaTreeConfig.cpu().n_max, "cuda": DynaTreeConfig.paper().n_max}


class CalibrationError(RuntimeError):
    """A calibration could not run (e.g. too little memory for the smallest trees)."""


def cache_dir() -> Path:
    """Where calibrations are cached: ``$DYNATREE_CACHE_DIR``, else ``~/.cache/dynatree``."""
    return Path(os.environ.get("DYNATREE_CACHE_DIR") or Path.home() / ".cache" / "dynatree")


def device_label(device: torch.device) -> str:
    """The device as a cost curve depends on it: the GPU's name, or the CPU and its threads."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or platform.machine()
    return f"cpu:{cpu}:{torch.get_num_threads()}threads"


def pair_key(pair: Any, runtime: str = "eager") -> dict[str, str]:
    """What a calibration is valid for: device, models (and the drafter kind: a draft level with
    prompt lookup mixed in costs more than without), dtype, the linear kernel (it changes the
    shape of the verify cost curve, not only its scale) and the runtime (a fast path pads a tree to
    its bucket and replays captured forwards: another curve)."""
    device = device_label(pair.device)
    split = getattr(pair.target, "hf_device_map", None)
    if split:  # a target split across devices (device_map) costs what its split costs
        device += f" split over {','.join(sorted({str(d) for d in split.values()}))}"
    return {"device": device, "target": str(pair.target_name),
            "draft": f"{pair.draft_name}[{pair.drafter_kind}]",
            "dtype": str(pair.dtype).replace("torch.", ""), "linear_kernel": pair.linear_kernel,
            "runtime": resolve_runtime(runtime, pair.device)}


def draft_fingerprint(pair: Any) -> str:
    """A short digest of the draft's weights. An acceptance vector is a property of the weights, not
    of the draft's name: a draft fine-tuned and shipped under the same name, or a candidate loaded in
    its place, must not read the old one's. Each parameter is sampled (name, shape, first and last
    64 values), which tells trained weights apart in microseconds without hashing megabytes."""
    draft = getattr(pair, "draft", None)
    if draft is None:
        return "none"
    h = hashlib.sha1()
    for name, p in sorted(draft.named_parameters(), key=lambda item: item[0]):
        flat = p.detach().reshape(-1)
        h.update(f"{name}{tuple(p.shape)}".encode())
        h.update(torch.cat([flat[:64], flat[-64:]]).float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _cache_path(key: dict[str, str]) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"calibration-{digest}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("schema_version") == COST_SCHEMA_VERSION else {}


def _write(path: Path, key: dict[str, str], field: str, value: Any) -> None:
    doc = _read(path) if path.exists() else {}
    doc.update({"schema_version": COST_SCHEMA_VERSION, "key": key, field: value})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # a read-only home still decodes; it just measures again next time
        warnings.warn(f"could not cache the calibration at {path}: {e}", stacklevel=3)


# --- the verify-cost curve -------------------------------------------------------------------
def _timed(fn, device: torch.device) -> float:
    pl.synchronize(device)
    t0 = time.perf_counter()
    fn()
    pl.synchronize(device)
    return time.perf_counter() - t0


def measure_costs(pair: Any, sizes: Sequence[int] | None = None, prefix_len: int = 256, repeats: int = 7,
                  runtime: str = "eager") -> CostModel:
    """Time one target forward over n tokens after a ``prefix_len``-token prefix for each n in
    ``sizes``, and one draft level, on ``runtime``, and return the curve.

    Eager (:func:`eager_verify_points`): the verification's forward on a dynamic cache. A fast
    path (``static``, ``compiled``, ``graphs``; :func:`fast_verify_curve`): each bucket's captured
    forward as the run replays it, so c(n) is the time of the bucket a tree of n nodes is padded to
    (a step at every bucket up to ``max(sizes)``; the model's ``sizes`` are the buckets timed).
    The draft level and the per-iteration overhead are timed in short runs on ``runtime`` too.
    """
    device = pair.device
    runtime = resolve_runtime(runtime, device)
    sizes = sorted(set(sizes or (GPU_SIZES if device.type == "cuda" else DEFAULT_SIZES)))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes must be token counts >= 1, got {list(sizes)}")
    timed: tuple[int, ...] | None = None
    if runtime == "eager":
        points = eager_verify_points(pair, sizes, prefix_len, repeats)
    else:  # a step per bucket: every n up to the largest size costs the bucket it is padded to
        path, curve = fast_verify_curve(pair, runtime, prefix_len, max(sizes), repeats)
        points = {n: curve[bucket(n, path.buckets)] for n in range(1, max(sizes) + 1)}
        timed = tuple(b for b in path.buckets if b <= max(sizes))
    meta = {"torch": torch.__version__, "repeats": repeats, "threads": torch.get_num_threads()}
    first = CostModel.from_points(points, measure_draft_level(pair, runtime=runtime),
                                  iteration_s=measure_iteration_overhead(pair, runtime=runtime),
                                  created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  prefix_len=prefix_len, meta=meta, **pair_key(pair, runtime))
    first = dataclasses.replace(first, sizes=timed) if timed else first  # the sizes timed: the buckets
    return price_cost_aware_levels(pair, first, runtime)


@torch.inference_mode()
def eager_verify_points(pair: Any, sizes: Sequence[int], prefix_len: int = 256, repeats: int = 7
                        ) -> dict[int, float]:
    """Seconds of one eager verify forward over n tokens, for each n in ``sizes`` (ascending).

    The forward is the verification's (tree mask as a 4D float mask, explicit positions); a
    chain of n tokens costs what any tree of n nodes does. The sizes are timed round-robin, one
    forward per size per round (two warm-up rounds, then ``repeats``), and each size keeps its
    median: a burst of load from elsewhere on a shared machine then lands on one round of every
    size, where the median drops it, instead of on all repeats of one size, where it would make
    that size look expensive and bend the tree policy around a spike. Sizes that run out of memory
    end the curve there; if not even 2 tokens can be verified, :class:`CalibrationError` is
    raised. The curve is kept as measured, not forced to be monotone: a kernel that is faster for
    6 rows than for 3 is a fact about the machine, not noise.
    """
    device = pair.device
    vocab = int(pair.target.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (prefix_len + max(sizes),), generator=gen)
    cache = DynamicCache()
    pl.forward(pair.target, prefix[:prefix_len].to(device)[None], cache)
    inputs = {n: to_device(prefix[prefix_len:prefix_len + n].tolist(), device)[None] for n in sizes}
    times: dict[int, list[float]] = {}

    def verify(n: int) -> None:
        pl.forward(pair.target, inputs[n], cache)
        crop(cache, prefix_len)

    for n in sizes:  # the first round (a warm-up) also finds the largest size that fits
        try:
            _timed(lambda: verify(n), device)
        except (torch.OutOfMemoryError, RuntimeError) as e:  # the largest trees do not fit: stop there
            crop(cache, prefix_len)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if len(times) < 2:
                raise CalibrationError(f"could not time a verify forward over {n} tokens: {e}") from e
            warnings.warn(f"calibration: a verify forward over {n} tokens failed ({type(e).__name__}); "
                          f"the cost curve ends at {max(times)} tokens", stacklevel=2)
            break
        times[n] = []
    for r in range(repeats + 1):  # one more warm-up round, then the measured ones
        for n in times:
            t = _timed(lambda: verify(n), device)
            if r:
                times[n].append(t)
    return {n: statistics.median(ts) for n, ts in times.items()}


def fast_verify_curve(pair: Any, runtime: str, length: int, max_tree: int, repeats: int = 7,
                      buckets: tuple[int, ...] | None = None) -> tuple[FastPath, dict[int, float]]:
    """The target's fast path on ``runtime`` (``static``, ``compiled``, ``graphs``) for ``length``
    tokens plus a ``max_tree``-node tree, every bucket's forward built (captured, compiled: the
    path's ``capture_s``), and the median seconds of each bucket's forward as the run replays it.

    Buckets are timed round-robin after one warm-up round (as :func:`eager_verify_points`); the
    forwards write into scratch slots at the cache's end (no live entry is there). A forward that
    fails (out of memory) raises :class:`CalibrationError`."""
    hidden = (pair.drafter_kind or "").startswith("feature")  # a feature draft reads the target's states
    try:
        path = fast_path(pair.target, runtime, length, max_tree, buckets)
        path.prepare(hidden)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        raise CalibrationError(f"could not build the {runtime} fast path's forwards: {e}") from e
    device = path.cache.cache.slots.device
    times: dict[int, list[float]] = {b: [] for b in path.buckets}

    def replay(b: int) -> None:
        path.cache.cache.write_at(path.capacity - b, b)
        with torch.inference_mode():  # as the engine runs it: the cache's buffers are inference tensors
            path.entry(b, hidden).run()

    for r in range(repeats + 1):
        for b in path.buckets:
            t = _timed(lambda: replay(b), device)
            if r:
                times[b].append(t)
    return path, {b: statistics.median(ts) for b, ts in times.items()}


def price_cost_aware_levels(pair: Any, first: CostModel, runtime: str = "eager") -> CostModel:
    """``first`` with its draft level priced as the cost-aware rule builds it.

    A small fixed tree's level (``first.draft_s``) is a draft forward, its top-k and one read. A
    cost-aware level also does the rule's own arithmetic (the rate of every prefix, the budget,
    the final fill), and where every dispatched op costs time that is no small part: on the H100 of
    ``docs/gpu/2026-11-27-h100`` (launch-bound, ~14 us per op) a cost-aware level took 9.5 ms where
    a fixed tree's took 4.8, so the rule, priced at 4.8, grew 20-node trees and was the slowest
    DynaTree there. So the rule runs once under ``first`` and its own levels are timed (one step
    of a fixed point: a dearer level makes shallower trees, whose levels cost about the same). If
    that run drafts nothing, ``first`` is kept. ``meta["draft_s_fixed_tree"]`` keeps the first price.
    """
    config = DynaTreeConfig.paper(cost_aware=True, cost=first)
    try:
        draft_s = measure_draft_level(pair, config=config, runtime=runtime)
    except CalibrationError:
        return first
    return dataclasses.replace(first, draft_s=draft_s,
                               meta=dict(first.meta, draft_s_fixed_tree=first.draft_s, draft_s_from="cost-aware run"))


def calibration_prompts(pair: Any, count: int = 3) -> list[Any]:
    """Short prompts for calibration runs: the bundled training prompts (never evaluation text),
    or fixed token ids for a pair without a tokenizer."""
    if pair.tokenizer is None:
        vocab = int(pair.target.config.vocab_size)
        gen = torch.Generator().manual_seed(1)
        return [torch.randint(0, vocab, (12,), generator=gen).tolist() for _ in range(count)]
    lines = [ln.strip() for ln in PROMPTS_FILE.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return lines[:count]


def _calibration_run(pair: Any, config: DecoderConfig, tokens: int, runtime: str = "eager") -> list[Any]:
    recs = []
    for prompt in calibration_prompts(pair):  # complete configs: nothing to calibrate for these runs
        recs.extend(DecodingRun(pair, prompt, config.method, config, max_new_tokens=tokens, trace=True,
                                ignore_eos=True, allow_long_context=True, runtime=runtime))
    return recs


def measure_draft_level(pair: Any, tokens: int = 32, config: DecoderConfig | None = None,
                        runtime: str = "eager") -> float:
    """Seconds per draft level as the decode loop spends them (forward, top-k, the level's
    bookkeeping and host sync): the median over iterations of a short run of ``config`` (default:
    a small fixed tree) on ``runtime`` of the draft phase's time per level."""
    recs = _calibration_run(pair, config or FixedTreeConfig(d=3, b=2, tau=0.0, n_max=6), tokens, runtime)
    levels = sum(r.draft_forwards for r in recs)
    if not levels:
        raise CalibrationError("the calibration run drafted nothing: no draft level to time")
    # the first iteration of each prompt also feeds the prompt to the draft: leave it out; the
    # median over iterations, so that a burst of load elsewhere does not price every level
    steady = [r for r in recs if r.index > 0 and r.draft_forwards] or [r for r in recs if r.draft_forwards]
    return statistics.median(r.timings.get("draft", 0.0) / r.draft_forwards for r in steady)


def measure_iteration_overhead(pair: Any, tokens: int = 32, runtime: str = "eager") -> float:
    """Seconds per iteration outside the model forwards (selection, cache commit, bookkeeping):
    the engine's own overhead per AR step on a calibration prompt, on ``runtime``."""
    m = DecodingRun(pair, calibration_prompts(pair, 1)[0], "ar", None, tokens, ignore_eos=True,
                    allow_long_context=True, runtime=runtime).finish().metrics
    return max(0.0, (m.engine_overhead_ms or 0.0) / 1e3)


def cost_model(pair: Any, recalibrate: bool = False, sizes: Sequence[int] | None = None,
               runtime: str = "eager") -> CostModel:
    """The pair's cost model on its device and ``runtime``: cached if measured before for the same
    device, models, dtype, linear kernel and runtime, else measured now (and cached)."""
    key = pair_key(pair, runtime)
    path = _cache_path(key)
    if not recalibrate and path.exists():
        cached = _read(path).get("cost")
        if cached:
            model = CostModel.from_dict(cached)
            if model.matches(**key):
                return model
            warnings.warn(f"the cached cost curve in {path} was measured for {model.device} / {model.target} "
                          f"/ {model.draft} / {model.dtype} / {model.linear_kernel or 'torch'} kernels / {model.runtime}, not "
                          "for this device, pair and runtime: recalibrating",
                          stacklevel=2)
    model = measure_costs(pair, sizes, runtime=runtime)
    _write(path, key, "cost", model.to_dict())
    return model


# --- Sequoia's acceptance vector -------------------------------------------------------------
def measure_acceptance(pair: Any, ranks: int = DEFAULT_RANKS, tokens: int = 64) -> tuple[float, ...]:
    """acceptance[r] = P(target's greedy token == the draft's rank-r token), r < ``ranks``.

    Counted at every context on the committed sequence a short traced run drafted from (each
    iteration's root and the accepted nodes the draft was fed): the target's choice there is
    known, and so is the draft's ranking."""
    cfg = FixedTreeConfig(d=2, b=2, tau=0.0, n_max=6, trace_top_k=ranks)
    hits, seen = [0] * ranks, 0
    for rec in _calibration_run(pair, cfg, tokens):
        tree = rec.tree
        for u in [0] + rec.accepted_path:
            if tree.topk_tokens[u] is None:
                continue
            seen += 1
            target = rec.target_argmax[u]
            if target in tree.topk_tokens[u][:ranks]:
                hits[tree.topk_tokens[u].index(target)] += 1
    if not seen:
        raise CalibrationError("the calibration run observed no draft distribution")
    return tuple(h / seen for h in hits)


def acceptance_vector(pair: Any, recalibrate: bool = False, ranks: int = DEFAULT_RANKS) -> tuple[float, ...]:
    """The pair's per-rank acceptance vector, cached beside its cost curve (the same file, one per
    :func:`pair_key`) under the draft's weights (:func:`draft_fingerprint`): the curve is a property
    of the architecture, the vector of the weights."""
    key = pair_key(pair)
    path = _cache_path(key)
    field = f"acceptance@{ranks}@{draft_fingerprint(pair)}"
    if not recalibrate and path.exists():
        doc = _read(path)
        if doc.get("key") == key and doc.get(field):
            return tuple(float(a) for a in doc[field])
    acc = measure_acceptance(pair, ranks)
    _write(path, key, field, list(acc))
    return acc


# --- filling a config in ---------------------------------------------------------------------
def prepare_config(config: DecoderConfig, pair: Any, runtime: str = "eager") -> DecoderConfig:
    """``config`` with what its policy measures about the pair filled in (cached calibrations):
    a cost-aware DynaTree's cost model on the run's ``runtime`` (its own verify-cost curve: a fast
    path's buckets cost what their replayed forwards cost), Sequoia's acceptance vector. Anything
    given is kept.

    A cost-aware config whose calibration cannot run falls back to the plain DynaTree rule with
    the ``cpu`` (CPU) or ``paper`` (GPU) preset's node budget, and warns."""
    if isinstance(config, DynaTreeConfig) and config.cost_aware and config.cost is None:
        try:
            return config.replace(cost=cost_model(pair, runtime=runtime))
        except CalibrationError as e:
            n_max = FALLBACK_N_MAX["cuda" if pair.device.type == "cuda" else "cpu"]
            warnings.warn(f"cost-aware DynaTree: no cost curve could be measured ({e}); falling back to the "
                          f"plain rule with N_max={n_max}", stacklevel=2)
            return config.replace(cost_aware=False, n_max=min(config.n_max, n_max))
    if isinstance(config, SequoiaConfig) and config.acceptance is None:
        ranks = max(config.trace_top_k or 1, DEFAULT_RANKS)
        return dataclasses.replace(config, acceptance=acceptance_vector(pair, ranks=ranks)[:ranks])
    return config


def describe(model: CostModel) -> str:
    """One line about a cost model (CLI and notebooks)."""
    ms = [f"{model.verify(n) * 1e3:.0f}" for n in model.sizes if math.isfinite(model.verify(n))]
    kernel = f", {model.linear_kernel} linear kernels" if model.linear_kernel else ""
    kernel += f", {model.runtime} runtime" if model.runtime != "eager" else ""
    fixed = model.meta.get("draft_s_fixed_tree")
    level = f"draft level {model.draft_s * 1e3:.1f} ms" + (
        f" (as the cost-aware rule builds it; a fixed tree's {fixed * 1e3:.1f} ms)" if fixed is not None else "")
    return (f"verify c(n) on {model.device} ({model.target}, {model.dtype}{kernel}), "
            f"n = {', '.join(map(str, model.sizes))}: "
            f"{', '.join(ms)} ms; {level}; "
            f"per iteration besides forwards {model.iteration_s * 1e3:.1f} ms")
