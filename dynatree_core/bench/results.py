"""Benchmark result files: aggregation, provenance and safe JSON writing (torch-free).

A result file holds the per-prompt rows; aggregates (mean and std over the N − W measured
prompts) and speedups are always recomputed from those rows by :func:`aggregate`, so a stored
file can be re-rendered and checked. Speedup = mean TPS / mean TPS of AR from the same run,
dataset, T and L_max; it is None when the run has no AR row for that cell. Likewise, when the run
has an ``hf_assisted`` row (Hugging Face's assisted generation on the same pair), every aggregate
gets ``hf_overhead_ms`` and ``overhead_ratio_vs_hf`` = engine overhead per iteration / HF's, same
cell. Files written before these metrics existed load and aggregate (the new fields are None).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterable, Sequence

#: "major.minor": a reader takes every file of its major version. 1.1 added ``compile`` (what compiling
#: cost, forwards and compiled regions apart, and the compiles inside timed decodes: 0 when every row
#: was warm), the rows' ``compiles`` and the host enqueue columns ``draft_host_s`` / ``verify_host_s``;
#: files of schema 1 (an int) still load
SCHEMA_VERSION = "1.1"

#: per-prompt metrics that are averaged (mean and ``<name>_std``)
AGG_METRICS: tuple[str, ...] = (
    "tokens_per_s", "wall_time_s", "ttft_s", "tpot_s", "acceptance_rate", "tokens_per_iteration",
    "mean_accepted_length", "iterations", "mean_tree_size", "target_forwards_per_token",
    "draft_forwards_per_token", "draft_forwards_per_iteration", "peak_memory_bytes", "new_tokens",
    "prompt_tokens", "prefill_time_s", "draft_time_s", "verify_time_s",
    "forward_time_s", "engine_overhead_ms", "host_syncs_per_iteration", "draft_host_s", "verify_host_s",
    "compiles", "confidence_mean", "confidence_observed", "confidence_ece",
)
#: the label of Hugging Face's assisted generation (:mod:`.hf_assisted`), the overhead reference
HF_ASSISTED = "hf_assisted"
#: row fields that identify a cell (sweep parameters are added to these); the sampling settings
#: are None in files written before sampling existed
CELL_KEYS: tuple[str, ...] = ("run_id", "dataset", "max_new_tokens", "max_prompt_len", "temperature", "top_p",
                              "top_k", "runtime", "label", "verify", "draft_noise")
#: what a cell's baseline shares with it: everything but the method, the verification rule and the
#: drafts' noise (AR at the same temperature is the speed reference of every sampled row)
_BASELINE_KEYS = tuple(k for k in CELL_KEYS if k not in ("label", "verify", "draft_noise"))


def baseline_key(a: dict[str, Any]) -> tuple:
    """The cell without its method: rows with the same key are compared with each other (speedup
    over the AR row, the ablation's delta over the fixed backbone)."""
    return tuple(a.get(k) for k in _BASELINE_KEYS)
EOS_NOTE = ("EOS is ignored: every run generates exactly T new tokens (greedy decoding), "
            "as in the paper's protocol.")


class ResultError(ValueError):
    """A result file is missing, unreadable or of an unknown schema."""


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1; 0.0 for one value); None if no values."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def aggregate(rows: Iterable[dict[str, Any]], run_id: str | None = None,
              param_keys: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Aggregate per-prompt rows into one row per cell, excluding warmup rows.

    Cells are keyed by run, dataset, T, L_max, label (and ``param_keys``); each aggregate has
    ``n`` (measured prompts), ``n_warmup``, ``<metric>`` means, ``<metric>_std`` and ``speedup``.
    """
    cells: dict[tuple, list[dict[str, Any]]] = {}
    meta: dict[tuple, dict[str, Any]] = {}
    keys = CELL_KEYS + tuple(param_keys)
    for r in rows:
        r = dict(r)
        if run_id is not None:
            r.setdefault("run_id", run_id)
        key = tuple(_hashable(r.get(k)) for k in keys)
        cells.setdefault(key, [])
        meta.setdefault(key, {k: r.get(k) for k in keys} | {"method": r.get("method"),
                                                            "peak_memory_kind": r.get("peak_memory_kind")})
        cells[key].append(r)
    out: list[dict[str, Any]] = []
    for key, rs in cells.items():
        measured = [r for r in rs if not r.get("warmup")]
        agg = dict(meta[key])
        agg["n"] = len(measured)
        agg["n_warmup"] = len(rs) - len(measured)
        for name in AGG_METRICS:
            agg[name], agg[f"{name}_std"] = mean_std([r.get(name) for r in measured])
        agg.update(oracle_aggregate(measured))
        agg["_tps_by_worker"] = _by_worker(measured)
        out.append(agg)
    _add_speedup(out, param_keys)
    _add_speedup_vs_best_ar(out)
    _add_overhead_ratio(out)
    return out


def oracle_aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The gap to the best possible tree, pooled over the rows' iterations (:mod:`..oracle`).

    ``oracle_n`` is the method's own mean tree size (rounded), ``oracle_mean`` the mean accepted
    length the best tree of that size reaches, ``oracle_gap`` = oracle_mean − ℓ̄, and
    ``oracle_gap_own`` the same with every iteration at its own size. None without evidence
    (hf_assisted, files written before the oracle existed)."""
    from dynatree_core.records.oracle import OracleIteration, summarize_oracle

    its = [OracleIteration(index=i, accepted=a, nodes=n, reach=r, truncated=False, top_k=row["oracle"]["top_k"])
           for row in rows if row.get("oracle")
           for i, (a, n, r) in enumerate(zip(row["oracle"]["accepted"], row["oracle"]["nodes"], row["oracle"]["reach"]))]
    if not its:
        return dict.fromkeys(("oracle_n", "oracle_mean", "oracle_gap", "oracle_gap_own",
                              "oracle_truncated_fraction"))
    summary = summarize_oracle(its)
    truncated = sum(row["oracle"].get("truncated", 0) for row in rows if row.get("oracle"))
    return {"oracle_n": summary.n, "oracle_mean": summary.mean_oracle, "oracle_gap": summary.gap,
            "oracle_gap_own": summary.gap_own, "oracle_truncated_fraction": truncated / len(its)}


def _hashable(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v


def _by_worker(rows: Sequence[dict[str, Any]]) -> dict[Any, list[float]]:
    """Tokens/s per worker (rows without one, e.g. files from before Ray runs: one group)."""
    out: dict[Any, list[float]] = {}
    for r in rows:
        if r.get("tokens_per_s") is not None:
            out.setdefault(r.get("worker"), []).append(float(r["tokens_per_s"]))
    return out


def _add_speedup(aggs: list[dict[str, Any]], param_keys: Sequence[str]) -> None:
    """speedup = TPS / TPS_AR within the same run, dataset, T and L_max, and worker.

    A speedup only means something on one device, so each worker's rows are compared with AR on
    that worker (mean TPS / mean TPS of AR there), and the cell's speedup is those ratios
    weighted by the method's measured prompts on each worker; ``speedup_by_worker`` keeps them.
    With one worker (a serial run) this is mean TPS / mean TPS of AR."""
    per_worker = [a.pop("_tps_by_worker") for a in aggs]
    ar = {baseline_key(a): (a, tps) for a, tps in zip(aggs, per_worker) if a.get("method") == "ar"}
    for a, own in zip(aggs, per_worker):
        ref, theirs = ar.get(baseline_key(a), (None, {}))
        a["tps_ar"] = ref["tokens_per_s"] if ref is not None else None
        a["speedup"] = a["speedup_by_worker"] = None
        ratios = {w: _mean(xs) / _mean(theirs[w]) for w, xs in own.items() if theirs.get(w) and _mean(theirs[w]) > 0}
        if ref is None or not ratios:
            continue
        n = {w: len(own[w]) for w in ratios}
        a["speedup"] = sum(ratios[w] * n[w] for w in ratios) / sum(n.values())
        if set(own) != {None}:  # rows that name their worker
            a["speedup_by_worker"] = {str(w): v for w, v in ratios.items()}


def _runtime_free_key(a: dict[str, Any]) -> tuple:
    """The baseline key without the runtime: the cell compared across runtimes."""
    return tuple(a.get(k) for k in _BASELINE_KEYS if k != "runtime")


def _add_speedup_vs_best_ar(aggs: list[dict[str, Any]]) -> None:
    """``speedup_best_ar`` = TPS / TPS of the fastest AR over every runtime of the same cell (the
    honest headline: against AR on its best runtime), beside ``speedup`` (AR on the row's own
    runtime); ``runtime_best_ar`` names that AR's runtime. None without an AR row."""
    best: dict[tuple, dict[str, Any]] = {}
    for a in aggs:
        if a.get("method") == "ar" and a.get("tokens_per_s"):
            k = _runtime_free_key(a)
            if k not in best or a["tokens_per_s"] > best[k]["tokens_per_s"]:
                best[k] = a
    for a in aggs:
        ref = best.get(_runtime_free_key(a))
        ok = ref is not None and a.get("tokens_per_s") is not None
        a["speedup_best_ar"] = a["tokens_per_s"] / ref["tokens_per_s"] if ok else None
        a["runtime_best_ar"] = ref.get("runtime") if ref is not None else None


def best_runtime(aggs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each method on its fastest runtime (``--runtime best``): of the cells that differ only in
    their runtime, the one with the highest mean TPS (the row keeps its ``runtime``)."""
    best: dict[tuple, dict[str, Any]] = {}
    for a in aggs:
        k = (*_runtime_free_key(a), a.get("label"), a.get("verify"), a.get("draft_noise"))
        if k not in best or (a.get("tokens_per_s") or 0.0) > (best[k].get("tokens_per_s") or 0.0):
            best[k] = a
    return [a for a in aggs if any(a is b for b in best.values())]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _add_overhead_ratio(aggs: list[dict[str, Any]]) -> None:
    """overhead_ratio_vs_hf = engine overhead per iteration / HF assisted's, same cell (None
    without an hf_assisted row or where either was not measured)."""
    hf = {baseline_key(a): a.get("engine_overhead_ms") for a in aggs if a.get("method") == HF_ASSISTED}
    for a in aggs:
        ref, own = hf.get(baseline_key(a)), a.get("engine_overhead_ms")
        a["hf_overhead_ms"] = ref
        a["overhead_ratio_vs_hf"] = own / ref if own is not None and ref else None


# --- provenance ----------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "processor": platform.processor() or None,
                            "machine": platform.machine(), "cpu_count": os.cpu_count(),
                            "python": sys.version.split()[0]}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["cuda_device"] = torch.cuda.get_device_name(0)
            info["cuda_version"] = torch.version.cuda
    except ImportError:  # pragma: no cover
        pass
    return info


def versions() -> dict[str, str | None]:
    from importlib import metadata

    from dynatree_core.version import __version__

    out: dict[str, str | None] = {"dynatree": __version__, "python": sys.version.split()[0]}
    for pkg in ("torch", "transformers", "numpy", "pandas", "datasets"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def output_checks(rows: Sequence[dict[str, Any]], param_keys: Sequence[str] = ()) -> dict[str, Any]:
    """Exactness check: within a cell's (dataset, T, L_max, sampling settings, prompt) every method
    must produce the same tokens as AR (greedy, or seeded AR under ``verify="match"``: the engine is
    lossless); lists the mismatching methods (those whose tokens differ from AR's; every method of a
    disagreeing cell that has no AR row). Rows under ``verify="rejection"`` are exact in distribution,
    not token for token: they are left out (``tests/test_sampling_stats.py`` tests them).
    ``tests/test_checks_fail.py`` shows it fail on a planted row."""
    groups: dict[tuple, dict[str, str]] = {}
    ar_of: dict[tuple, str] = {}
    for r in rows:
        if r.get("verify") == "rejection":
            continue
        key = (r.get("dataset"), r.get("max_new_tokens"), r.get("max_prompt_len"), r.get("temperature"),
               r.get("top_p"), r.get("top_k"), r.get("prompt_index"))
        method = {k: r.get(k) for k in (*param_keys, "draft_noise")}  # shared and independent drafts apart
        label = r["label"] + json.dumps(method, default=str)
        groups.setdefault(key, {})[label] = r.get("output_sha1")
        if r.get("method") == "ar":
            ar_of[key] = label
    bad: set[str] = set()
    for key, g in groups.items():
        if len(set(g.values())) > 1:
            ref = g.get(ar_of.get(key, ""))
            bad |= {lab for lab, sha in g.items() if ref is None or sha != ref}
    return {"outputs_identical_across_methods": not bad, "mismatching_cells": sorted(bad)}


def build_result(*, kind: str, run_id: str, protocol: dict[str, Any], methods: list[dict[str, Any]],
                 models: dict[str, Any], device: str, dtype: str, data: dict[str, Any],
                 prompts: list[dict[str, Any]], rows: list[dict[str, Any]], warnings: list[str],
                 sweep: dict[str, Any] | None = None, execution: dict[str, Any] | None = None,
                 compile: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assemble the JSON document (see ``schema_version``)."""
    param_keys = tuple((sweep or {}).get("param_keys", ()))
    for r in rows:
        r["run_id"] = run_id
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "run_id": run_id,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "notes": [EOS_NOTE, "Aggregates exclude the first W (warmup) prompts of every cell; std is "
                            "the sample standard deviation over the N - W measured prompts.",
                  "speedup = mean TPS / mean TPS of AR from the same run and dataset (and T, L_max), on the "
                  "same worker: with several workers, the per-worker ratios weighted by measured prompts."],
        "protocol": protocol,
        "sweep": sweep,
        "methods": methods,
        "models": models,
        "device": device,
        "dtype": dtype,
        "versions": versions(),
        "machine": machine_info(),
        "execution": execution,
        "compile": compile,
        "data": data,
        "prompts": prompts,
        "rows": rows,
        "aggregates": aggregate(rows, param_keys=param_keys),
        "checks": output_checks(rows, param_keys),
        "warnings": warnings,
    }


# --- files ---------------------------------------------------------------------------------
def check_writable(out: str | os.PathLike) -> Path:
    """Create ``out`` (a directory) if needed and prove we can write there; raise OSError with a
    clear message otherwise. Called before any decoding."""
    d = Path(out)
    if d.suffix == ".json":
        d = d.parent
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".dynatree-write-test-", dir=d)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OSError(f"cannot write results to {str(out)!r}: {e.strerror or e}") from e
    return d


def result_path(out: str | os.PathLike, stem: str, overwrite: bool = False) -> Path:
    """The file to write: ``out`` itself if it ends in ``.json`` (refused if it exists, unless
    ``overwrite``), else a new unique ``<stem>-<n>.json`` inside the directory ``out``."""
    out = Path(out)
    if out.suffix == ".json":
        if out.exists() and not overwrite:
            raise FileExistsError(f"{out} exists; pass --overwrite to replace it or choose another name")
        return out
    p = out / f"{stem}.json"
    n = 1
    while p.exists():
        p = out / f"{stem}-{n}.json"
        n += 1
    return p


def write_json_atomic(path: str | os.PathLike, obj: Any, overwrite: bool = False) -> Path:
    """Serialize ``obj`` completely, then move it into place (no partial file on failure)."""
    text = json.dumps(obj, indent=1, allow_nan=False, default=json_default)
    return write_text_atomic(path, text, overwrite)


def write_text_atomic(path: str | os.PathLike, text: str, overwrite: bool = False) -> Path:
    """Write ``text`` to a temporary file next to ``path`` and move it into place; an existing
    ``path`` is only replaced with ``overwrite`` (FileExistsError otherwise)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite to replace it")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual mode
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if path appeared meanwhile: never clobber silently
                os.unlink(tmp)
            except FileExistsError:
                raise FileExistsError(f"{path} exists; pass --overwrite to replace it") from None
            except OSError:  # no hard links on this filesystem
                if path.exists():
                    raise FileExistsError(f"{path} exists; pass --overwrite to replace it") from None
                os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def json_default(x: Any) -> Any:
    """JSON for numpy and torch scalars (their ``.item()``); result files and checkpoints."""
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """Read a result file; raise :class:`ResultError` if it is not one we understand."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ResultError(f"cannot read result file {str(path)!r}: {e}") from e
    if not isinstance(d, dict) or schema_major(d.get("schema_version")) != schema_major(SCHEMA_VERSION) \
            or "rows" not in d:
        raise ResultError(f"{path}: not a dynatree result file of schema_version {schema_major(SCHEMA_VERSION)}.x "
                          f"(found {d.get('schema_version') if isinstance(d, dict) else None!r})")
    return d


def schema_major(version: Any) -> str | None:
    """The major part of a schema version: "1" of 1 (files before 1.1) and of "1.1"."""
    return None if version is None else str(version).split(".")[0]


def recompute(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Aggregates recomputed from a result's per-prompt rows (what the tables show)."""
    keys = tuple((result.get("sweep") or {}).get("param_keys", ()))
    return aggregate(result["rows"], run_id=result.get("run_id"), param_keys=keys)


def merge_results(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result document from per-dataset (and per-runtime) runs of one experiment (the device check runs
    a runtime and a dataset at a time, inside its time limit): one run id, the rows, prompts, data and
    warnings of all, aggregates and checks recomputed over all rows, the compile sections added up. A
    ``_wall_s`` key a caller added to a document is dropped."""
    merged = {k: v for k, v in docs[0].items() if k != "_wall_s"}
    rows = [r for d in docs for r in d["rows"]]
    for r in rows:
        r["run_id"] = merged["run_id"]
    merged["rows"] = rows
    # the same dataset may come from several documents (one per runtime): each dataset, prompt and warning once
    merged["protocol"] = dict(merged["protocol"],
                              datasets=list(dict.fromkeys(ds for d in docs for ds in d["protocol"]["datasets"])),
                              max_prompt_len={k: v for d in docs for k, v in d["protocol"]["max_prompt_len"].items()})
    merged["data"] = {k: v for d in docs for k, v in d["data"].items()}
    merged["prompts"] = list({json.dumps(p, sort_keys=True, default=str): p for d in docs for p in d["prompts"]}.values())
    merged["warnings"] = list(dict.fromkeys(w for d in docs for w in d["warnings"]))
    merged["aggregates"] = aggregate(rows)
    merged["checks"] = output_checks(rows)
    parts = [d["compile"] for d in docs if d.get("compile")]
    if parts:
        from dynatree_core.bench.compile_ledger import sum_compiles

        merged["compile"] = sum_compiles(parts)
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
