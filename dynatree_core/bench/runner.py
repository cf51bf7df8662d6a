"""One runner for ``bench`` and every sweep: data -> prompts -> shards -> result document.

An :class:`Experiment` is a list of :class:`~dynatree_core.bench.protocol.RunPoint` plus the
protocol settings (datasets, N prompts, W warmup, default L_max per dataset, seed). Everything
cheap is validated first (:func:`load_corpora`, :func:`~.protocol.check_lengths`); then
:func:`prepare` selects the prompts and cuts the work into shards (:mod:`.shards`), and
:func:`run_prepared` runs them on a backend (this process, or Ray workers: :mod:`.ray_backend`)
with a checkpoint and returns the JSON document. The document is the same whichever backend ran
the shards: rows in the serial order, each naming the host, device and worker that produced it.
:func:`run_experiment` is the serial run in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dynatree_core.bench.checkpoint import Checkpoint
from dynatree_core.bench.compile_ledger import sum_compiles
from dynatree_core.bench.data import Corpus, Prompt, corpus_tokenize, load_corpus, select_prompts
from dynatree_core.bench.everyday import PROMPT_FORMS, check_form
from dynatree_core.bench.execution import Backend, Execution, SerialBackend, ShardResult, execute
from dynatree_core.bench.pairs import PairInfo, pair_info
from dynatree_core.bench.hf_assisted import METHOD as HF_METHOD
from dynatree_core.bench.protocol import ORACLE_TOP_K, PromptsFor, RunPoint, check_assistant, check_lengths
from dynatree_core.bench.results import EOS_NOTE, build_result, new_run_id
from dynatree_core.bench.shards import Shard, fingerprint, merge_rows, plan_shards


@dataclass
class Experiment:
    """What to run. ``max_prompt_len`` maps each dataset to its default L_max."""

    kind: str
    points: list[RunPoint]
    datasets: list[str]
    num_prompts: int
    warmup: int
    max_prompt_len: dict[str, int]
    seed: int = 0
    data_dir: str | None = None
    data_source: str = "auto"
    paper_protocol: bool = False
    #: decode past the models' stated context window (see ``generate(allow_long_context=)``)
    allow_long_context: bool = False
    sweep: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: how the everyday prompts (dataset ``prompts``) reach the target: chat or raw
    prompt_form: str = PROMPT_FORMS[0]

    def validate(self) -> None:
        """Check the protocol numbers (N, W, T, L_max) and the prompt form before anything is loaded."""
        check_form(self.prompt_form)
        if self.num_prompts < 1:
            raise ValueError(f"--num-prompts (N) must be >= 1, got {self.num_prompts}")
        if not 0 <= self.warmup < self.num_prompts:
            raise ValueError(f"--warmup (W) must be in [0, N - 1] = [0, {self.num_prompts - 1}], got {self.warmup}")
        for p in self.points:
            if p.max_new_tokens < 1:
                raise ValueError(f"--max-new-tokens (T) must be >= 1, got {p.max_new_tokens}")
            for ds in self.datasets:
                if p.l_max(ds, self.max_prompt_len) < 1:
                    raise ValueError(f"--max-prompt-len (L_max) must be >= 1, got {p.l_max(ds, self.max_prompt_len)}")

    def l_max_values(self, dataset: str) -> list[int]:
        return sorted({p.l_max(dataset, self.max_prompt_len) for p in self.points})


def load_corpora(exp: Experiment) -> dict[str, Corpus]:
    """Read every dataset's text (raises DataError naming where it looked)."""
    return {ds: load_corpus(ds, exp.data_dir, exp.data_source, form=exp.prompt_form) for ds in exp.datasets}


@dataclass
class Prepared:
    """An experiment ready to run: its pair's description, the selected prompts (per dataset
    and L_max), the shards, selection warnings and the fingerprint ``--resume`` checks."""

    exp: Experiment
    info: PairInfo
    corpora: dict[str, Corpus]
    prompts: dict[tuple[str, int], list[Prompt]]
    shards: list[Shard]
    warnings: list[str]
    fingerprint: str

    def prompts_for(self, ds: str, l_max: int) -> list[Prompt]:
        return self.prompts[ds, l_max]

    def header(self) -> dict[str, Any]:
        """What a checkpoint records to recognise its experiment (and the run id it continues)."""
        return {"fingerprint": self.fingerprint, "run_id": new_run_id(), "kind": self.exp.kind,
                "shards": len(self.shards)}


def prepare(info: PairInfo, exp: Experiment, corpora: dict[str, Corpus]) -> Prepared:
    """Validate, select every prompt (data problems surface before decoding) and plan the shards."""
    exp.validate()
    check_assistant(info, exp.points)
    check_lengths(info, exp.points, exp.datasets, exp.max_prompt_len, exp.allow_long_context)
    prompts: dict[tuple[str, int], list[Prompt]] = {}
    warnings: list[str] = []
    for ds in exp.datasets:
        for l_max in exp.l_max_values(ds):
            prompts[ds, l_max], w = select_prompts(corpora[ds], corpus_tokenize(corpora[ds], info.tokenizer),
                                                   exp.num_prompts, l_max, seed=exp.seed)
            warnings.extend(w)
    shards = plan_shards(exp.points, exp.datasets, exp.max_prompt_len, {k: len(v) for k, v in prompts.items()},
                         exp.warmup)
    described = {"kind": exp.kind, "datasets": exp.datasets, "num_prompts": exp.num_prompts, "warmup": exp.warmup,
                 "max_prompt_len": exp.max_prompt_len, "seed": exp.seed, "data_source": exp.data_source,
                 "allow_long_context": exp.allow_long_context, "sweep": exp.sweep, "models": info.models(),
                 "dtype": info.dtype,
                 "points": [[p.spec.to_dict(), p.max_new_tokens, p.max_prompt_len, p.params]
                            + ([] if p.sampling.greedy else [p.sampling.to_dict()])
                            + ([] if p.oracle else [{"oracle": False}]) for p in exp.points],
                 "prompts": [p.sha1 for key in sorted(prompts) for p in prompts[key]]}
    return Prepared(exp, info, corpora, prompts, shards, warnings, fingerprint(described))


def run_prepared(prep: Prepared, backend: Backend, *, checkpoint: Checkpoint | None = None, progress: bool = True,
                 max_retries: int = 2, on_result: Callable[[ShardResult], None] | None = None,
                 execution: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the shards the checkpoint does not hold yet and return the result document. On any
    error or interrupt the finished shards stay in ``checkpoint`` (pass one), and
    :func:`document` turns them into a partial result."""
    ck = checkpoint if checkpoint is not None else Checkpoint(header=prep.header())
    run = execute(prep.shards, prep.exp.points, prep.prompts_for, backend, defaults=prep.exp.max_prompt_len,
                  allow_long_context=prep.exp.allow_long_context, progress=progress, checkpoint=ck,
                  max_retries=max_retries, on_result=on_result)
    return document(prep, ck, backend, run, execution)


def document(prep: Prepared, ck: Checkpoint, backend: Backend | None = None, run: Execution | None = None,
             execution: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result document from the checkpoint's finished shards; ``partial`` (with the missing
    shards listed) when some are not finished."""
    exp = prep.exp
    missing = [s.id for s in prep.shards if s.id not in ck.done]
    rows = merge_rows(prep.shards, {k: [dict(r) for r in v.rows] for k, v in ck.done.items()}, exp.datasets)
    specs: dict[str, dict[str, Any]] = {}
    for p in exp.points:
        specs.setdefault(p.spec.label, p.spec.to_dict())
    protocol = {
        "datasets": exp.datasets, "num_prompts": exp.num_prompts, "warmup": exp.warmup,
        "max_new_tokens": sorted({p.max_new_tokens for p in exp.points}),
        "max_prompt_len": {ds: exp.l_max_values(ds) for ds in exp.datasets},
        "seed": exp.seed, "greedy": all(p.sampling.greedy for p in exp.points), "ignore_eos": True,
        "eos_note": EOS_NOTE, "sampling": _sampling_settings(exp.points),
        "history": "carried through the W warmup prompts; every measured prompt starts from the state they left",
        "paper_protocol": exp.paper_protocol, "allow_long_context": exp.allow_long_context,
        "oracle": oracle_settings(exp.points),
        **({"prompt_form": exp.prompt_form} if "prompts" in exp.datasets else {}), **exp.extra,
    }
    workers = {}
    for res in ck.done.values():
        workers.setdefault(res.worker.get("worker"), res.worker)
    if backend is not None:
        for w in backend.workers():
            workers.setdefault(w.get("worker"), w)
    execution = {**(execution or {"backend": getattr(backend, "name", "serial")}),
                 "shards": len(prep.shards), "shards_done": len(prep.shards) - len(missing),
                 "resumed_shards": run.resumed if run is not None else [],
                 "retries": ck.retries, "max_retries": run.max_retries if run is not None else None,
                 "workers": sorted(workers.values(), key=lambda w: str(w.get("worker"))),
                 "checkpoint_fingerprint": prep.fingerprint}
    data = {ds: {"origin": c.origin, "location": c.location, "documents": len(c.documents), "description": c.describe()}
            for ds, c in prep.corpora.items()}
    prompts = [{**p.record()} for key in sorted(prep.prompts) for p in prep.prompts[key]]
    info = prep.info
    doc = build_result(kind=exp.kind, run_id=ck.header["run_id"], protocol=protocol, methods=list(specs.values()),
                       models=info.models(), device=info.device, dtype=info.dtype, data=data, prompts=prompts,
                       rows=rows, warnings=list(prep.warnings), sweep=exp.sweep, execution=execution,
                       compile=compile_section(list(ck.done.values()), rows))
    if missing:
        doc["partial"] = True
        doc["missing_shards"] = missing
        doc["warnings"].append(f"partial result: {len(missing)} of {len(prep.shards)} shards did not finish; "
                               f"aggregates cover the finished ones only")
    return doc


def compile_section(done: Sequence[ShardResult], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What compiling cost the run (the shards' :func:`~.compile_ledger.compile_delta` s added up:
    the forwards and the compiled regions apart), and the graphs compiled inside timed decodes
    (``timed_compiles``: 0 when every timed decode ran warm) with the rows decoded again because
    their first timed decode compiled (``recompiled_rows``)."""
    total = sum_compiles([r.compile for r in done if r.compile])
    return {**total, "timed_compiles": sum(int(r.get("compiles") or 0) for r in rows),
            "recompiled_rows": sum(1 for r in rows if r.get("recompiled"))}


def oracle_settings(points: Sequence[RunPoint]) -> dict[str, Any]:
    """Which rows carry the oracle's evidence (the labels whose points asked for it: their rows have
    ``oracle`` and ``record_top_k`` set) and that it was recorded inside the timed loop."""
    labels = list(dict.fromkeys(p.spec.label for p in points if p.oracle and p.spec.method != HF_METHOD))
    return {"record_top_k": ORACLE_TOP_K, "labels": labels,
            "note": "rows of these labels kept the draft's chain view and top-k candidates for the oracle "
                    "(Table 6), inside the timed loop; the other rows timed decoding alone"}


def _sampling_settings(points: Sequence[RunPoint]) -> list[dict[str, Any]]:
    """The distinct sampling settings of the sampled cells (empty: a greedy run)."""
    out: list[dict[str, Any]] = []
    for p in points:
        d = p.sampling.to_dict()
        if not p.sampling.greedy and d not in out:
            out.append(d)
    return out


def run_experiment(pair: Any, exp: Experiment, corpora: dict[str, Corpus], progress: bool = True) -> dict[str, Any]:
    """The serial run: select prompts, run every shard in this process, return the document."""
    return run_prepared(prepare(pair_info(pair), exp, corpora), SerialBackend(pair), progress=progress)


def run_points(pair: Any, points: Sequence[RunPoint], datasets: Sequence[str], prompts_for: PromptsFor,
               defaults: dict[str, int], warmup: int, progress: bool = True,
               allow_long_context: bool = False) -> list[dict[str, Any]]:
    """Run every point on every dataset's prompts in this process (see :mod:`.protocol`); return
    the rows in the serial order. :func:`run_experiment` does the same from an :class:`Experiment`
    (prompt selection, checkpoints, other executors)."""
    check_assistant(pair_info(pair), points)
    shards = plan_shards(points, datasets, defaults, _counts(points, datasets, prompts_for, defaults), warmup)
    run = execute(shards, points, prompts_for, SerialBackend(pair), defaults=defaults,
                  allow_long_context=allow_long_context, progress=progress)
    return merge_rows(shards, {k: v.rows for k, v in run.done.items()}, datasets)


def _counts(points: Sequence[RunPoint], datasets: Sequence[str], prompts_for: PromptsFor,
            defaults: dict[str, int]) -> dict[tuple[str, int], int]:
    return {(ds, p.l_max(ds, defaults)): len(prompts_for(ds, p.l_max(ds, defaults))) for ds in datasets for p in points}
