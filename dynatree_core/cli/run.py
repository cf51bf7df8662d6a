"""Running an experiment from the command line (``bench`` and ``sweep``): backend, checkpoint,
result file, and what is printed."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from dynatree_core.bench.protocol import RunPoint
from dynatree_core.cli.args import CLIError
from dynatree_core.cli.resolve import protocol_note, check_model_args, load_pair, pair_spec

#: the exit status of a bench or sweep whose methods' tokens differ from AR's (the result file is
#: still written: it is the evidence); 2 is bad input, 1 a failed shard
EXACTNESS_FAILED = 3


def _backend(args: argparse.Namespace) -> tuple[Any, Any]:
    """(backend, pair info): this process with the pair loaded here, or Ray workers that each
    load it (``--ray``; the driver then holds no weights, only the first worker's description)."""
    from dynatree_core.bench.execution import SerialBackend
    from dynatree_core.bench.pairs import pair_info

    if args.ray is None:
        for flag in ("ray_workers", "gpus_per_task"):
            if getattr(args, flag) is not None:
                raise CLIError(f"--{flag.replace('_', '-')} needs --ray")
        pair = load_pair(args)
        return SerialBackend(pair), pair_info(pair)
    from dynatree_core.bench.ray_backend import RayBackend, RayUnavailable, import_ray

    spec = pair_spec(args)
    try:
        import_ray()
        print(f"ray: {args.ray}: starting workers; each loads {spec.describe()} ...", file=sys.stderr)
        backend = RayBackend(spec, None if args.ray == "local" else args.ray, workers=args.ray_workers,
                             gpus_per_task=args.gpus_per_task, cpus_per_task=args.cpus_per_task)
    except RayUnavailable as e:
        raise CLIError(str(e)) from None
    return backend, backend.pair_info()




@dataclass
class _Run:
    """What :func:`execute` prepared: the output place, the data, the backend and the checkpoint."""

    out: Path
    out_dir: Path
    stem: str
    corpora: dict[str, Any]
    backend: Any
    info: Any
    prep: Any = None
    ck: Any = None


def execute_experiment(args: argparse.Namespace, exp: Any, stem: str, print_tables: Sequence[int] | None,
             figure: str | None = None) -> int:
    """The common tail of bench and sweep: checks, data, models, run (with a checkpoint), write, print."""
    from dynatree_core.bench import results as res
    from dynatree_core.bench.runner import document, run_prepared

    run = _prepare_run(args, exp, stem)
    try:
        data_lines = _announce(args, exp, run)
        try:
            result = run_prepared(run.prep, run.backend, checkpoint=run.ck, progress=not args.no_progress,
                                  max_retries=args.max_retries,
                                  execution=run.backend.describe() if hasattr(run.backend, "describe") else None)
        except BaseException:
            _write_partial(res, run.out_dir, run.stem, lambda: document(run.prep, run.ck, run.backend), run.ck)
            raise
    finally:
        if hasattr(run.backend, "close"):
            run.backend.close()
    path = res.result_path(run.out, f"{run.stem}-{result['run_id']}", args.overwrite)
    res.write_json_atomic(path, result, overwrite=args.overwrite)
    run.ck.remove()  # the result holds every shard now
    _report(exp, result, path, data_lines, print_tables, figure)
    return 0 if result["checks"]["outputs_identical_across_methods"] else EXACTNESS_FAILED


def _prepare_run(args: argparse.Namespace, exp: Any, stem: str) -> _Run:
    """Everything cheap first (options, output place, model names, data), then the backend, the
    selected prompts and the checkpoint (``--resume`` continues it)."""
    from dynatree_core.bench import results as res
    from dynatree_core.bench.checkpoint import Checkpoint, CheckpointError, checkpoint_path
    from dynatree_core.bench.runner import load_corpora, prepare

    exp.validate()
    if args.max_retries < 0:
        raise CLIError(f"--max-retries must be >= 0, got {args.max_retries}")
    out = Path(args.out)
    out_dir = res.check_writable(out)
    if out.suffix == ".json":
        res.result_path(out, stem, args.overwrite)  # refuse an existing file before running
        stem = out.stem
    need_draft = any(p.spec.method != "ar" for p in exp.points)
    check_model_args(args, need_draft)  # before the data and the weights: a bad name fails in seconds
    corpora = load_corpora(exp)
    backend, info = _backend(args)
    run = _Run(out, out_dir, stem, corpora, backend, info)
    try:
        if need_draft and not info.has_draft:
            raise CLIError("the model pair has no draft model; pass --draft or use --methods ar")
        run.prep = prepare(info, exp, corpora)
        if hasattr(backend, "scale"):
            backend.scale(len(run.prep.shards))
        try:
            run.ck = Checkpoint.open(checkpoint_path(out_dir, stem, run.prep.fingerprint), run.prep.header(),
                                     args.resume)
        except CheckpointError as e:
            raise CLIError(str(e)) from None
    except BaseException:
        if hasattr(backend, "close"):
            backend.close()
        raise
    return run


def _announce(args: argparse.Namespace, exp: Any, run: _Run) -> list[str]:
    """Print (stderr) the pair, the device and the data before the run; return the data lines."""
    info = run.info
    where = f"{len(run.backend.workers())} Ray workers at {args.ray}" if args.ray else str(info.device)
    where += f" | linear kernel: {info.linear_kernel}"
    print(f"target: {info.target_name} | draft: {info.draft_name} (drafter: {info.drafter_kind}) | {where}",
          file=sys.stderr)
    if run.ck.done:
        print(f"resuming: {len(run.ck.done)} of {len(run.prep.shards)} shards already done ({run.ck.path})",
              file=sys.stderr)
    data_lines = [f"data: {c.describe()}" for c in run.corpora.values()]
    for line in data_lines:
        print(line, file=sys.stderr)
    return data_lines


def _report(exp: Any, result: dict[str, Any], path: Path, data_lines: list[str], print_tables: Sequence[int] | None,
            figure: str | None) -> None:
    """After the run: the protocol notes, the tables with why a method was slower than AR, the
    sweep's figure, warnings, and where the result file is."""
    from dynatree_core.bench import results as res
    from dynatree_core.bench.tables import compile_note, overhead_notes, render, speed_notes

    aggs = res.recompute(result)
    note = protocol_note(exp.num_prompts, exp.warmup, max(p.max_new_tokens for p in exp.points),
                          {d: max(exp.l_max_values(d)) for d in exp.datasets})
    print(f"\n{res.EOS_NOTE}")
    if note:
        print(note)
    print("\n".join(data_lines))
    if print_tables:
        print()
        print(render(aggs, print_tables))
        if len({a.get("runtime") for a in aggs}) > 1:  # --runtime best (or several): each method's fastest
            print("\neach method on its fastest runtime (speedup vs AR on that runtime, and vs the fastest AR):")
            print(render(res.best_runtime(aggs), [1]))
        _print_notes("slower than AR on this machine, and why:", speed_notes(aggs))
        _print_notes("engine overhead (wall time - time inside model forwards) per iteration, against Hugging Face "
                     "assisted generation on the same pair, prompts and T, this run:", overhead_notes(aggs))
    if figure is not None:
        _write_sweep_figure(figure, aggs, path)
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if compile_note(result):
        print(f"\n{compile_note(result)}")
    print(f"\nresults: {path}")
    if not result["checks"]["outputs_identical_across_methods"]:
        print(exactness_banner(result["checks"]["mismatching_cells"], path), file=sys.stderr)


def exactness_banner(mismatching: Sequence[str], path: Path) -> str:
    """What the run prints last when a method's tokens differ from AR's: the engine promised
    lossless decoding, so this is a bug, not a number to read past (the exit status is then
    :data:`EXACTNESS_FAILED`)."""
    rule = "!" * 78
    return "\n".join([rule, "EXACTNESS CHECK FAILED: these methods' tokens differ from AR's on the same prompt "
                      "and settings:", *(f"  {m}" for m in mismatching),
                      f"the speeds in {path} are not comparable; please report this as a bug", rule])


def _print_notes(title: str, notes: list[str]) -> None:
    if notes:
        print(f"\n{title}")
        print("\n".join(f"  {n}" for n in notes))


def _write_sweep_figure(figure: str, aggs: list[dict[str, Any]], path: Path) -> None:
    """The sweep's HTML figure beside the result (:mod:`dynatree_viz.sweeps`; skipped without plotly)."""
    if importlib.util.find_spec("plotly") is None:
        print("\nfigure: skipped (plotly is not installed: pip install 'dynatree[viz]'; the JSON has every number)",
              file=sys.stderr)
        return
    from dynatree_viz.sweeps import sweep_figure, write_figure

    fig_path = write_figure(sweep_figure(figure, aggs), path.with_suffix(".html"), f"dynatree-sweep-{figure}")
    print(f"\nfigure: {fig_path}")

def _write_partial(res: Any, out_dir: Path, stem: str, doc: Callable[[], dict[str, Any]], ck: Any) -> None:
    """After an error or interrupt: the finished shards as a readable (partial) result file,
    next to the checkpoint that ``--resume`` continues from. Never masks the original error."""
    if not ck.done:
        return
    try:
        d = doc()
        path = res.write_json_atomic(out_dir / f"{stem}-{d['run_id']}.partial.json", d, overwrite=True)
    except Exception as e:  # the checkpoint alone still holds every finished shard
        print(f"\ndynatree: could not write the partial result ({e})", file=sys.stderr)
        path = None
    print(f"\ndynatree: stopped after {len(ck.done)} of {d['execution']['shards'] if path else '?'} shards; "
          f"partial results: {path or '-'}; continue with the same command and --resume (checkpoint: {ck.path})",
          file=sys.stderr)



def make_experiment(args: argparse.Namespace, kind: str, points: list[RunPoint], datasets: list[str],
                n: int, w: int, l_max: dict[str, int], sweep: dict[str, Any] | None = None) -> Any:
    from dynatree_core.bench.runner import Experiment

    return Experiment(kind=kind, points=points, datasets=datasets, num_prompts=n, warmup=w, max_prompt_len=l_max,
                      seed=args.seed, data_dir=args.data_dir, data_source=args.data_source,
                      paper_protocol=args.paper, sweep=sweep, allow_long_context=args.allow_long_context,
                      prompt_form=args.prompt_form, extra={"command_line": args.command_line})


