"""Where a decoding loop's time goes on a GPU: host dispatch, GPU kernels, or waiting at syncs.

For each method, one warm-up run, then one run under ``torch.profiler`` (CPU and CUDA
activities). Reports per generated token and per iteration:

* ``wall_ms``: the run's wall time;
* ``kernel_ms``: the GPU's kernel time (sum of kernel durations on the device): the device's share;
* ``launches``: kernels launched (``cudaLaunchKernel`` and kin): the host's dispatch work;
* ``sync_ms``: host time inside the CUDA calls that wait for the device
  (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, ``cudaMemcpy*``):
  if it is large the host waits for the GPU, if small the loop is launch-bound (the GPU waits).

On a CPU (the tests, ``--device cpu``) only ``wall_ms`` and the op count are measured.

  python scripts/gpu_profile.py --out DIR                                 # default pair, on the GPU
  python scripts/gpu_profile.py --target tiny-llama --device cpu --out /tmp/prof
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCHEMA_VERSION = 1
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpyAsync", "cuMemcpyDtoH", "cuStreamSynchronize")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
PROMPT = ("The history of the city begins in the twelfth century, when a small market town grew around the "
          "bridge over the river. Its charter, granted in 1189, gave the burgesses the right to hold a weekly "
          "market and an annual fair, and by the end of the next century the town")


def _us(avg: Any, *names: str) -> float:
    for n in names:
        v = getattr(avg, n, None)
        if v is not None:
            return float(v)
    return 0.0


def summarize(prof: Any, cuda: bool) -> dict[str, Any]:
    """Kernel time, launches and sync waits from a finished profiler."""
    kernel_us = sync_us = 0.0
    launches = ops = 0
    for a in prof.key_averages():
        key = a.key
        if key.startswith("aten::"):
            ops += a.count
        if any(key.startswith(c) for c in LAUNCH_CALLS):
            launches += a.count
        if any(key == c or key.startswith(c + "(") for c in SYNC_CALLS):
            sync_us += _us(a, "self_cpu_time_total")
    if cuda:
        for e in prof.events():
            if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
                kernel_us += _us(e, "device_time", "cuda_time")
    return {"kernel_s": kernel_us / 1e6 if cuda else None, "sync_s": sync_us / 1e6 if cuda else None,
            "launches": launches if cuda else None, "aten_ops": ops}


def profile_method(pair: Any, method: str, config: Any, prompt: Any, tokens: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    from dynatree_core import generate
    from dynatree_core.runtime.model.forwards import synchronize

    cuda = pair.device.type == "cuda"
    generate(pair, prompt, method, config, max_new_tokens=tokens, ignore_eos=True)  # warm-up
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize(pair.device)
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        res = generate(pair, prompt, method, config, max_new_tokens=tokens, ignore_eos=True)
        synchronize(pair.device)
        wall = time.perf_counter() - t
    m = res.metrics
    out = {"wall_s": wall, "tokens": m.new_tokens, "iterations": m.iterations,
           "tokens_per_iteration": m.tokens_per_iteration, "draft_forwards_per_iteration": m.draft_forwards_per_iteration,
           "host_syncs_per_iteration": getattr(m, "host_syncs_per_iteration", None), **summarize(prof, cuda)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("default", "tiny-llama"), default="default")
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    p.add_argument("--methods", default="ar,linear:k=3,linear:k=4,fixed_tree,dynatree:gpu,dynatree:paper",
                   help="bench labels; linear:k=K picks K")
    p.add_argument("--tokens", type=int, default=32,
                   help="new tokens per run (default 32: CUDA tracing slows a launch-bound host several times "
                        "over; 96 did not fit 100 s with the default pair on the H100)")
    p.add_argument("--out", required=True, help="output directory (profile.json)")
    args = p.parse_args(argv)

    import torch

    from dynatree_core.bench.methods import method_specs, parse_methods
    from dynatree_core.engine.calibrate import prepare_config
    from dynatree_core.pairs.pair import ModelPair

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    pair = ModelPair.named(args.target, device=device, dtype="float32")
    prompt = PROMPT if args.target == "default" else [5, 9, 14, 3, 7, 5, 9, 14]
    rows = []
    for label in args.methods.split(","):
        name, _, k = label.partition(":k=")
        specs = method_specs(parse_methods(name), k=[int(k)] if k else [3])
        spec = specs[0]
        cfg = prepare_config(spec.config, pair) if spec.config is not None else None
        r = {"label": label, "method": spec.method, **profile_method(pair, spec.method, cfg, prompt, args.tokens)}
        rows.append(r)
        tok = r["tokens"]
        extra = ""
        if r["kernel_s"] is not None:
            extra = (f" kernel {1e3 * r['kernel_s'] / tok:6.2f} ms/tok  sync-wait {1e3 * r['sync_s'] / tok:6.2f} ms/tok"
                     f"  launches {r['launches'] / tok:6.0f}/tok")
        print(f"{label:18s} wall {1e3 * r['wall_s'] / tok:6.2f} ms/tok  L {r['tokens_per_iteration']:.2f}"
              f"  aten ops {r['aten_ops'] / tok:6.0f}/tok{extra}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"schema_version": SCHEMA_VERSION, "kind": "gpu_profile", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "device": str(pair.device), "device_name": torch.cuda.get_device_name(pair.device) if pair.device.type == "cuda" else "cpu",
           "pair": [pair.target_name, pair.draft_name], "settings": vars(args), "rows": rows}
    (out / "profile.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
