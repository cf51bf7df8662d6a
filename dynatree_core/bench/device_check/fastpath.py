"""The device check's fastpath section: per runtime the verify-cost curve c(n) over the buckets as the
captured forwards replay them (:func:`~dynatree_core.engine.calibrate.fast_verify_curve`, the curve a
cost-aware DynaTree on that runtime is priced with), the build time (capture; for ``compiled`` the
compile seconds apart, and on CUDA its graphs' capture), and the target's bytes of
weights against the measured device bandwidth (the tokens/s a step that only reads the weights reaches)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from dynatree_core.bench.device_check.loading import load_pair


def measure_bandwidth(device: Any, mib: int = 512) -> float | None:
    """Bytes per second of one device-to-device copy of ``mib`` MiB (read + write counted)."""
    import torch

    from dynatree_core.runtime.model import forwards as pl

    if torch.device(device).type != "cuda":
        return None
    x = torch.empty(mib * 2 ** 20 // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    pl.synchronize(torch.device(device))
    t = time.perf_counter()
    for _ in range(5):
        y.copy_(x)
    pl.synchronize(torch.device(device))
    return 2 * 5 * x.numel() * 4 / (time.perf_counter() - t)


def section_fastpath(sec: dict[str, Any], deadline: float, args: argparse.Namespace, pairs: dict[str, Any],
                     bench: dict[str, Any]) -> None:
    """Per fast runtime of ``args.runtimes``: c(n) over the buckets and the capture time; the weights'
    bandwidth bound, and what AR reached in the bench per runtime against it."""
    from dynatree_core.bench.compile_ledger import compile_delta, compile_mark
    from dynatree_core.engine.calibrate import fast_verify_curve

    pair = pairs.get(args.bench_dtype) or load_pair(args, args.bench_dtype)
    weights = sum(p.numel() * p.element_size() for p in pair.target.parameters())
    bandwidth = measure_bandwidth(pair.device)
    sec.update(weights_bytes=weights, bandwidth_bytes_s=bandwidth,
               weights_bound_tok_s=bandwidth / weights if bandwidth else None, runtimes={})
    reps = 5 if args.quick else 20
    for rt in args.runtimes:
        if rt == "eager" or time.monotonic() > deadline:
            continue
        before = compile_mark()
        path, curve = fast_verify_curve(pair, rt, args.bench_prompt_len + args.bench_tokens, 64, reps)
        sec["runtimes"][rt] = {"capture_s": round(path.capture_s, 3), "buckets": list(path.buckets),
                               "verify_s": curve, "ar_step_bound_tok_s": 1.0 / curve[1]}
        if rt == "compiled":  # compile seconds apart (zero when the bench's path, compiled there, is reused)
            sec["runtimes"][rt]["compile"] = compile_delta(before, compile_mark())
    sec["ar_tok_s"] = {f"{r['dataset']}/{r['runtime']}": r["tokens_per_s"]
                       for r in bench.get("table") or [] if r["label"] == "ar"}
