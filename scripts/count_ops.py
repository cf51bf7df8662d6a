"""Count the tensor ops each decoding loop dispatches per iteration and per draft level.

Where every op costs its dispatch (a launch-bound GPU host: ~14 us per op on the H100 of
docs/gpu/2026-11-27-h100, where a 135M target forward of ~1,700 ops took ~25 ms), the number of ops
is the cost, whatever the device does with them. Counting needs no GPU: the same code dispatches
the same ops on a CPU. Each op is charged to the model (the target's or the draft's forward:
transformers, torch.nn modules, the draft modules) or to the engine function of this package that
issued it (the tree bookkeeping, the cache restore, the lookup).

On ``--runtime compiled`` a compiled call is one dispatch whatever it runs: each compiled region's
call and each compiled forward's call (a replay on CUDA) counts as one, and the eager ops between them
one each; what the host dispatches per draft level is then the number the launch-bound GPU pays.

  python scripts/count_ops.py                                  # the embedded pair, five loops
  python scripts/count_ops.py --target tiny-llama --methods ar,linear,dynatree --tokens 32
  python scripts/count_ops.py --target tiny-llama --methods ar,dynatree:gpu --runtime compiled
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: files whose ops are a model's forward (anything else under dynatree_core is the engine's)
MODEL_FILES = ("/transformers/", "/torch/nn/modules/", "feature_draft.py", "draft_model.py", "linear_kernels.py")


def classify(frame) -> tuple[str, str | None]:
    """("model", None), ("step", "file.py:function") for an op issued inside a compiled region of the
    fast path (``runtime/static/regions.py``: the level's inputs, the head's top-k, lookup and the mixture, the
    level step, which the compiled and graphs runtimes run as one compiled graph each) or ("engine",
    "file.py:function") for the Python frame that dispatched an op."""
    from dynatree_core.runtime.static.regions import REGIONS

    where = None
    while frame is not None:
        name = frame.f_code.co_filename
        if any(m in name for m in MODEL_FILES):
            return "model", None
        if frame.f_code in REGIONS:
            return "step", f"{name.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
        if where is None and "dynatree_core" in name:
            where = f"{name.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "engine", where


class OpCounter:
    """Counts every tensor op dispatched while active (a ``TorchDispatchMode``), charged to the
    model or to the engine function that issued it (:func:`classify`)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kind, where = classify(sys._getframe(1))
                counter.kinds[kind] += 1
                if where:
                    counter.where[where] += 1
                return func(*args, **(kwargs or {}))

        self.kinds: collections.Counter = collections.Counter()
        self.where: collections.Counter = collections.Counter()
        self._mode = _Mode()

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def __enter__(self) -> "OpCounter":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)


class CompiledCalls:
    """While active, counts the calls of compiled code as one dispatch each: a compiled region's
    (:class:`~dynatree_core.runtime.static.regions.Region`) and a compiled forward's (``compile_forward``'s
    result), with the op counter suspended inside them (what they run is one call from the host)."""

    active: "CompiledCalls | None" = None

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()

    def __enter__(self) -> "CompiledCalls":
        CompiledCalls.active = self
        return self

    def __exit__(self, *exc) -> None:
        CompiledCalls.active = None

    @staticmethod
    def wrap(fn, kind: str):
        from torch.utils._python_dispatch import _disable_current_modes

        def call(*args, **kwargs):
            counter = CompiledCalls.active
            if counter is None:
                return fn(*args, **kwargs)
            counter.calls[kind] += 1
            with _disable_current_modes():
                return fn(*args, **kwargs)

        return call

    @staticmethod
    def install(set_attr=setattr) -> None:
        """Count every compiled region's and compiled forward's call from now on (before any path is
        built); ``set_attr``: how to patch (a test passes ``monkeypatch.setattr``, which undoes it)."""
        from dynatree_core.runtime.static import fast_path, regions

        compile_forward = fast_path.compile_forward
        set_attr(fast_path, "compile_forward",
                 lambda fn, device="cpu": CompiledCalls.wrap(compile_forward(fn, device), "forward"))
        set_attr(regions.Region, "__call__", CompiledCalls.wrap(regions.Region.__call__, "region"))


def count(pair, prompt, method: str, config, tokens: int, top: int, runtime: str = "eager") -> dict:
    """Ops per steady-state iteration of one loop. ``levels_per_iteration``: the draft levels *run*
    (the device-resident draft phase of a fast runtime runs every level, padding included; the eager
    path only those that expand a node), ``syncs_per_iteration``: the counted host reads."""
    from dynatree_core import iterate

    run = iterate(pair, prompt, method, config, max_new_tokens=tokens, ignore_eos=True, runtime=runtime)
    next(run)  # the first iteration reads the prompt: not a steady-state iteration
    iterations = levels = syncs = 0
    drafter = run.drafter
    before = drafter.forwards if drafter is not None else 0
    with OpCounter() as c, CompiledCalls() as compiled:
        for rec in run:
            iterations += 1
            levels += rec.draft_forwards
            syncs += rec.host_syncs
    if not iterations:
        raise SystemExit(f"{method}: no iteration after the first (raise --tokens)")
    ran = (drafter.forwards - before) if drafter is not None and drafter.forwards else levels
    return {"iterations": iterations, "levels_per_iteration": ran / iterations,
            "syncs_per_iteration": syncs / iterations,
            "model_ops_per_iteration": c.kinds["model"] / iterations,
            "engine_ops_per_iteration": c.kinds["engine"] / iterations,
            "step_ops_per_iteration": c.kinds["step"] / iterations,
            "region_calls_per_iteration": compiled.calls["region"] / iterations,
            "forward_calls_per_iteration": compiled.calls["forward"] / iterations,
            "dispatches_per_iteration": (c.total + sum(compiled.calls.values())) / iterations,
            "top_engine": [(w, n / iterations) for w, n in c.where.most_common(top)]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("default", "tiny-llama", "tiny-gpt_neox"), default="default",
                   help="the pair, by ModelPair.named's name (default: the embedded pair)")
    p.add_argument("--methods", default="ar,linear,fixed_tree,dynatree,dynatree:cost",
                   help="bench method names (default: ar,linear,fixed_tree,dynatree,dynatree:cost)")
    p.add_argument("--linear-k", type=int, default=3, help="linear's K (default 3)")
    p.add_argument("--tokens", type=int, default=48, help="new tokens per loop (default 48)")
    p.add_argument("--top", type=int, default=6, help="engine functions listed per loop (default 6)")
    p.add_argument("--runtime", default="eager", choices=("eager", "static", "compiled"),
                   help="eager (the CPU's); static: the fast path's caches, buckets and device-resident draft "
                        "phase run eagerly, so every op it would launch on a GPU is dispatched and counted here; "
                        "compiled: the same compiled (a compiled region's or forward's call counts as one dispatch)")
    args = p.parse_args(argv)
    if args.runtime == "compiled":
        CompiledCalls.install()

    from dynatree_core.bench.methods import method_specs, parse_methods
    from dynatree_core.engine.calibrate import prepare_config
    from dynatree_core.pairs.pair import ModelPair

    pair = ModelPair.named(args.target)
    if args.target == "default":
        prompt = ("The history of the city begins in the twelfth century, when a small market town grew "
                  "around the bridge. The market town grew around the bridge, and")
    else:
        prompt = [5, 9, 14, 3, 7, 5, 9, 14]
    print(f"{pair.target_name} / {pair.draft_name}; T={args.tokens}; runtime {args.runtime}; "
          "ops per steady-state iteration")
    print(f"{'method':18s} {'levels/it':>9s} {'syncs/it':>8s} {'model ops/it':>12s} {'engine ops/it':>13s} "
          f"{'engine ops/level':>16s} {'region ops/level':>16s}")
    if args.runtime == "compiled":
        return _print_dispatches(pair, prompt, args)
    ar_engine = None
    for spec in method_specs(parse_methods(args.methods), k=[args.linear_k]):
        cfg = prepare_config(spec.config, pair) if spec.config is not None else None
        r = count(pair, prompt, spec.method, cfg, args.tokens, args.top, args.runtime)
        if spec.method == "ar":
            ar_engine = r["engine_ops_per_iteration"]
        per_level = ((r["engine_ops_per_iteration"] - (ar_engine or 0.0)) / r["levels_per_iteration"]
                     if r["levels_per_iteration"] else None)
        step = r["step_ops_per_iteration"] / r["levels_per_iteration"] if r["levels_per_iteration"] else None
        print(f"{spec.label:18s} {r['levels_per_iteration']:9.2f} {r['syncs_per_iteration']:8.2f} "
              f"{r['model_ops_per_iteration']:12.0f} "
              f"{r['engine_ops_per_iteration']:13.0f} {'-' if per_level is None else f'{per_level:16.0f}':>16s} "
              f"{'-' if step is None else f'{step:16.0f}':>16s}")
        print("    " + ", ".join(f"{w} {n:.0f}" for w, n in r["top_engine"]))
    if ar_engine is None:
        print("(engine ops/level counts all engine ops; include ar to subtract the per-iteration base)")
    else:
        print("(engine ops/level: the engine's ops per iteration beyond AR's, per draft level run; the ops inside "
              "the fast path's compiled regions apart: region ops/level, one compiled graph per region on the "
              "compiled and graphs runtimes)")
    return 0


def _print_dispatches(pair, prompt, args) -> int:
    """The compiled runtime's table: host dispatches per iteration (eager ops, compiled region calls,
    compiled forward calls) and, beyond AR's, per draft level run."""
    from dynatree_core.bench.methods import method_specs, parse_methods
    from dynatree_core.engine.calibrate import prepare_config

    print(f"{'method':18s} {'levels/it':>9s} {'eager ops/it':>12s} {'regions/it':>10s} {'forwards/it':>11s} "
          f"{'dispatches/it':>13s} {'dispatches/level':>16s}")
    ar = None
    for spec in method_specs(parse_methods(args.methods), k=[args.linear_k]):
        cfg = prepare_config(spec.config, pair) if spec.config is not None else None
        count(pair, prompt, spec.method, cfg, args.tokens, args.top, "compiled")  # compiles: not counted
        r = count(pair, prompt, spec.method, cfg, args.tokens, args.top, "compiled")
        if spec.method == "ar":
            ar = r["dispatches_per_iteration"]
        levels = r["levels_per_iteration"]
        per_level = (r["dispatches_per_iteration"] - ar) / levels if ar is not None and levels else None
        print(f"{spec.label:18s} {levels:9.2f} {r['engine_ops_per_iteration']:12.1f} "
              f"{r['region_calls_per_iteration']:10.2f} {r['forward_calls_per_iteration']:11.2f} "
              f"{r['dispatches_per_iteration']:13.1f} {'-' if per_level is None else f'{per_level:16.1f}':>16s}")
        print("    " + ", ".join(f"{w} {n:.1f}" for w, n in r["top_engine"]))
    print("(a compiled region's or forward's call is one dispatch; dispatches/level: beyond AR's per iteration, per "
          "draft level run" + ("" if ar is not None else "; include ar to compute it") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
