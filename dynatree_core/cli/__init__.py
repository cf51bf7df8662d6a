"""dynatree command line: generate, bench, table, sweep, distill.

Examples:
  dynatree generate --prompt "The history of" --method dynatree --max-new-tokens 64
  dynatree bench                                  the quick CPU protocol on the embedded pair
  dynatree bench --linear-k 2,5 --methods ar,linear,dynatree
  dynatree bench --paper --dataset wikitext2,pg19 --target EleutherAI/pythia-2.8b \\
      --draft EleutherAI/pythia-70m --device cuda --dtype float16
  dynatree table results/*.json
  dynatree sweep fixed_tree --d-values 3,4,5 --b-values 1,2,3 --tau-values 0.05,0.1
  dynatree bench --ray                            the same run on a local Ray instance (one worker per CPU)
  dynatree bench --ray HEAD:6379 --gpus-per-task 1 --resume   on a cluster, continuing an interrupted run

Without --target the embedded offline pair (SmolLM2-135M-Instruct + a distilled draft) runs on
the CPU. The defaults are small (N=4 prompts, W=1 warmup, T=128 new tokens, L_max=256 prompt
tokens) so a run finishes in minutes; --paper selects the paper's protocol (N=10, W=2, T=1500,
L_max 800 for WikiText-2 and 1000 for PG-19). Method options are grouped per method
(--linear-*, --fixed-*, --dynatree-*). Bad input exits with status 2 and a one-line message on
stderr before any model loads; nothing is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import shlex
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Sequence

from dynatree_core.bench.data import DATA_SOURCES, DATASETS, PAPER_MAX_PROMPT_LEN, DataError, parse_datasets
from dynatree_core.bench.methods import (ABLATION_LABELS, DYNATREE_FIELD_TYPES, DYNATREE_FIELDS, METHOD_NAMES, PRESETS, MethodSpec, auto_preset,
                            method_specs, parse_methods)
from dynatree_core.policy.config import (EAGLE2_HELP, FIXED_TREE_HELP, PARAMETER_HELP, SEQUOIA_HELP, Eagle2Config, FixedTreeConfig,
                     SequoiaConfig)
from dynatree_core.bench.execution import ShardFailed
from dynatree_core.pairs.choices import PAIR_DRAFTS, TINY_TARGETS
from dynatree_core.runtime.choices import LINEAR_KERNELS
from dynatree_core.bench.protocol import LengthError, RunPoint
from dynatree_core.bench.results import ResultError

#: the quick protocol (CPU-sized) and the paper's
QUICK = {"num_prompts": 4, "warmup": 1, "max_new_tokens": 128, "max_prompt_len": 256}
PAPER = {"num_prompts": 10, "warmup": 2, "max_new_tokens": 1500}


class CLIError(Exception):
    """Bad input detected by the CLI (message printed on stderr, exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the problem and where to read more, not the whole usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --- argument groups -----------------------------------------------------------------------
def _csv(cast: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(s: str) -> list[Any]:
        try:
            vals = [cast(x.strip()) for x in s.split(",") if x.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {s!r} ({e})") from None
        if not vals:
            raise argparse.ArgumentTypeError(f"empty list {s!r}")
        return vals

    return parse


def _tuples(n: int) -> Callable[[str], list[tuple[int, ...]]]:
    def parse(s: str) -> list[tuple[int, ...]]:
        out = []
        for item in (x.strip() for x in s.split(",") if x.strip()):
            parts = item.split(":")
            if len(parts) != n:
                raise argparse.ArgumentTypeError(f"expected {n} colon-separated integers per item, got {item!r}")
            try:
                out.append(tuple(int(p) for p in parts))
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected integers in {item!r}") from None
        if not out:
            raise argparse.ArgumentTypeError(f"empty list {s!r}")
        return out

    return parse


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", help="target model (HF name or path); default: the embedded SmolLM2-135M pair")
    g.add_argument("--draft", help="draft model (HF name or path, or a feature-draft directory); required with "
                                   "--target except for AR")
    g.add_argument("--drafter", choices=PAIR_DRAFTS, default="auto",
                   help="which shipped draft the embedded pair uses: feature (reads the target's hidden states), "
                        "model (independent 2-layer draft, the paper's setting) or auto (the fastest in this "
                        "project's CPU benchmark; the README says which); lookup: model-free prompt lookup, with the "
                        "embedded target or any --target (no --draft); feature+lookup / model+lookup: that draft with "
                        "prompt lookup mixed into its distributions (with --target: mixed into --draft)")
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    g.add_argument("--dtype", default=None, help="float32 (default), float16 or bfloat16")
    g.add_argument("--device-map", default=None, metavar="MAP",
                   help="split a large --target across this machine's GPUs with accelerate (auto, balanced, "
                        "balanced_low_0, sequential; leave --device at auto); the draft sits on the first device")
    g.add_argument("--linear-kernel", choices=LINEAR_KERNELS, default="auto",
                   help="what the models' linear layers run on: onednn (weights prepacked once; on a CPU in float32 "
                        "a verify forward of 2-16 tokens then costs about what one token does), torch (its default "
                        "kernels) or auto (onednn where it applies, default)")
    g.add_argument("--draft-noise", type=float, default=0.05, help=argparse.SUPPRESS)  # tiny test pair


def _fields(cls: type, names: dict[str, str]) -> dict[str, tuple[type, Any]]:
    """(type, default) of the dataclass fields in ``names``, read from the class itself."""
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(cls) if f.name in names}


class _Renamed(argparse.Action):
    """An option of an older release: fail with the new name instead of a bare 'unrecognized'."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "", **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} was renamed: use {self.new}")


#: pre-0.2 method options -> their names now (one scheme: --linear-*, --fixed-*, --dynatree-*)
RENAMED_OPTIONS: dict[str, str] = {
    "--k": "--linear-k", "--d": "--fixed-d", "--b": "--fixed-b", "--tau": "--fixed-tau (or --dynatree-tau)",
    "--n-max": "--fixed-n-max (or --dynatree-n-max)", "--dt-tau": "--dynatree-tau", "--dt-n-max": "--dynatree-n-max",
    "--preset": "--dynatree-preset", "--no-history": "--dynatree-no-history",
    **{"--" + f.replace("_", "-"): "--dynatree-" + f.replace("_", "-")
       for f in DYNATREE_FIELDS if f not in ("tau", "n_max")},
}


def add_method_args(p: argparse.ArgumentParser, linear: bool = True, fixed: bool = True) -> None:
    """Method options, one group per method, each option prefixed with its method's name."""
    p.add_argument("--kv-mode", choices=("gather", "recompute"), default="gather",
                   help="KV cache restore, all methods: gather (default) or recompute (the paper's crop + re-run)")
    if linear:
        g = p.add_argument_group("linear speculative decoding")
        g.add_argument("--linear-k", dest="k", type=_k_list, default=5, metavar="K",
                       help="draft length K, or several comma-separated (e.g. 2,3,5: one row per K, labelled "
                            "linear:k=K, to find linear's best K in the same run; default 5)")
    if fixed:  # the FixedTreeConfig fields: names, types and defaults from the dataclass
        g = p.add_argument_group("fixed tree")
        for f, (kind, default) in _fields(FixedTreeConfig, FIXED_TREE_HELP).items():
            grid = f in ("d", "b")  # a grid of D x B finds the fixed tree's best shape in the same run
            g.add_argument("--fixed-" + f.replace("_", "-"), dest=f, type=_int_list(f"--fixed-{f}") if grid else kind,
                           default=default, metavar=f.upper(),
                           help=f"{FIXED_TREE_HELP[f]} (default {default})"
                           + ("; several comma-separated give one row per (D, B), labelled fixed_tree:d=D,b=B"
                              if grid else ""))
    g = p.add_argument_group("DynaTree")
    g.add_argument("--dynatree-preset", dest="preset", choices=("auto",) + PRESETS, default="auto",
                   help="paper, cpu (a smaller node budget), gpu (wider, shallower: for a launch-bound GPU host) or auto (default: cpu on CPU, gpu on GPU, paper with --paper)")
    for f in DYNATREE_FIELDS:
        g.add_argument("--dynatree-" + f.replace("_", "-"), dest=f"dt_{f}", type=DYNATREE_FIELD_TYPES[f],
                       default=None, metavar=f.upper(), help=f"{PARAMETER_HELP[f]} (default: from the preset)")
    g.add_argument("--dynatree-no-history", dest="no_history", action="store_true",
                   help="DynaTree without history adaptation")
    g = p.add_argument_group("EAGLE-2 (eagle2) and Sequoia (sequoia)")
    for f, (kind, default) in _fields(Eagle2Config, EAGLE2_HELP).items():
        g.add_argument("--eagle2-" + f.replace("_", "-"), dest=f"eagle2_{f}", type=kind, default=None,
                       metavar=f.upper(), help=f"{EAGLE2_HELP[f]} (default {default})")
    for f, (kind, default) in _fields(SequoiaConfig, SEQUOIA_HELP).items():
        g.add_argument("--sequoia-" + f.replace("_", "-"), dest=f"sequoia_{f}", type=kind, default=None,
                       metavar=f.upper(), help=f"{SEQUOIA_HELP[f]} (default {default})")
    taken = {s for a in p._actions for s in a.option_strings}
    for old, new in RENAMED_OPTIONS.items():
        if old not in taken:
            p.add_argument(old, action=_Renamed, new=new)


def add_protocol_args(p: argparse.ArgumentParser, default_dataset: str = "wikitext2") -> None:
    g = p.add_argument_group("protocol")
    g.add_argument("--dataset", default=default_dataset,
                   help=f"{' or '.join(DATASETS)}, or both comma-separated (default {default_dataset})")
    g.add_argument("--paper", action="store_true",
                   help="the paper's protocol: N=10, W=2, T=1500, L_max 800 (WikiText-2) / 1000 (PG-19), preset paper")
    g.add_argument("--allow-long-context", action="store_true",
                   help="decode past the models' context window (Pythia's is 2048 < the paper's L_max + T)")
    g.add_argument("--num-prompts", type=int, default=None, help=f"N (default {QUICK['num_prompts']}; paper 10)")
    g.add_argument("--warmup", type=int, default=None, help=f"W, discarded first prompts (default {QUICK['warmup']}; paper 2)")
    g.add_argument("--max-prompt-len", type=int, default=None,
                   help=f"L_max in tokens (default {QUICK['max_prompt_len']}; paper 800 WikiText-2, 1000 PG-19)")
    g.add_argument("--seed", type=int, default=0, help="prompt selection seed (default 0)")
    g.add_argument("--data-dir", default=None,
                   help="directory with wikitext-2-raw/wiki.test.raw and pg19/*.txt (default: shared/data if found)")
    g.add_argument("--data-source", choices=DATA_SOURCES, default="auto",
                   help="auto (local, then HF datasets, then bundled excerpts), local, hf or bundled")
    g.add_argument("--out", default="results", help="output directory or .json file (default results/)")
    g.add_argument("--overwrite", action="store_true", help="replace an existing --out .json file")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--resume", action="store_true",
                   help="continue the interrupted run of this experiment from its checkpoint in --out "
                        "(finished shards are not run again)")
    g = p.add_argument_group("execution on a Ray cluster (pip install 'dynatree[ray]')")
    g.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the shards (dataset x T/L_max x prompt) as Ray tasks on the cluster at ADDRESS "
                        "(HOST:PORT, ray://HOST:PORT or auto), or on a local Ray instance without ADDRESS")
    g.add_argument("--ray-workers", type=int, default=None, metavar="N",
                   help="actors, each loading the pair once (default: as many as the cluster's GPUs, or CPUs, allow)")
    g.add_argument("--gpus-per-task", type=float, default=None, metavar="G",
                   help="GPUs per worker (default 1 if the cluster has GPUs and --device is not cpu, else 0)")
    g.add_argument("--cpus-per-task", type=float, default=1, metavar="C", help="CPUs per worker (default 1)")
    g.add_argument("--max-retries", type=int, default=2, metavar="R",
                   help="times a shard is run again after its worker died (default 2)")


def add_T_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"T, new tokens per prompt (default {QUICK['max_new_tokens']}; paper 1500)")


# --- shared helpers ------------------------------------------------------------------------
def _preset(args: argparse.Namespace, device: str) -> str:
    if args.preset != "auto":
        return args.preset
    if getattr(args, "paper", False):
        return "paper"
    return auto_preset(device)


def _device_name(args: argparse.Namespace) -> str:
    """The resolved device (validates --device and --dtype before anything is loaded)."""
    from dynatree_core.pairs.pair import check_dtype_on_device, resolve_device, resolve_dtype

    dtype = resolve_dtype(args.dtype)
    device = resolve_device(args.device)
    check_dtype_on_device(dtype, device)
    return str(device)


def _int_list(flag: str):
    """An argparse type: one integer >= 1 or several comma-separated (bad values name ``flag``)."""
    def parse(text: str) -> int | list[int]:
        try:
            vals = [int(x) for x in str(text).split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes integers >= 1, comma-separated (got {text!r})") from None
        if not vals or min(vals) < 1:
            raise argparse.ArgumentTypeError(f"{flag} takes integers >= 1, comma-separated (got {text!r})")
        vals = list(dict.fromkeys(vals))
        return vals[0] if len(vals) == 1 else vals
    return parse


#: ``--linear-k``: ``5`` or ``2,3,5`` (argparse type; bad values name the flag)
_k_list = _int_list("--linear-k")


def _dynatree_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {f: getattr(args, f"dt_{f}") for f in DYNATREE_FIELDS if getattr(args, f"dt_{f}", None) is not None}


def build_specs(args: argparse.Namespace, names: list[str], device: str) -> list[MethodSpec]:
    """Method configs from the flags (validated by the config classes)."""
    return method_specs(names, preset=_preset(args, device), k=getattr(args, "k", 5), d=getattr(args, "d", 5),
                        b=getattr(args, "b", 2), tau=getattr(args, "tau", 0.05), n_max=getattr(args, "n_max", 256),
                        kv_mode=args.kv_mode, history=not args.no_history,
                        dynatree_overrides=_dynatree_overrides(args),
                        eagle2={f: getattr(args, f"eagle2_{f}") for f in EAGLE2_HELP
                                if getattr(args, f"eagle2_{f}", None) is not None},
                        sequoia={f: getattr(args, f"sequoia_{f}") for f in SEQUOIA_HELP
                                 if getattr(args, f"sequoia_{f}", None) is not None})


def check_model_args(args: argparse.Namespace, need_draft: bool) -> None:
    """The model options, checked before data or weights load (a bad name fails in seconds)."""
    from dynatree_core.pairs.loading import ModelSourceError, check_model_source

    pair_spec(args)  # --device-map and its companions

    drafter = getattr(args, "drafter", "auto")
    lookup = drafter == "lookup"
    if lookup and args.draft is not None:
        raise CLIError("--drafter lookup drafts without a model (prompt lookup): drop --draft")
    if args.target is None:
        if args.draft is not None:
            raise CLIError("--draft needs --target (without both, the embedded default pair is used)")
        return
    if drafter not in ("auto", "lookup") and not drafter.endswith("+lookup"):
        raise CLIError("--drafter chooses between the embedded pair's drafts; with --target, name the draft "
                       "with --draft (a model or a feature-draft directory), and add prompt lookup with --drafter "
                       "model+lookup or feature+lookup")
    if drafter.endswith("+lookup") and args.draft is None and args.target not in TINY_TARGETS:
        raise CLIError(f"--drafter {drafter} mixes prompt lookup into a draft: pass --draft")
    if args.target in TINY_TARGETS:
        return
    if need_draft and args.draft is None and not lookup:
        raise CLIError("speculative methods need a draft model: pass --draft, or --drafter lookup (or use --methods "
                       "ar)")
    try:
        check_model_source(args.target, "--target")
        if args.draft is not None:
            check_model_source(args.draft, "--draft")
    except ModelSourceError as e:
        raise CLIError(str(e)) from None


def pair_spec(args: argparse.Namespace) -> Any:
    """The pair named by --target/--draft/--drafter/--device/--dtype/--device-map, as a recipe."""
    from dynatree_core.bench.pairs import PairSpec

    device_map = getattr(args, "device_map", None)
    if device_map is not None:
        if args.target is None or args.target in TINY_TARGETS:
            raise CLIError("--device-map splits a large --target across GPUs; the embedded and tiny pairs load on "
                           "one device (drop --device-map)")
        from dynatree_core.pairs.pair import DEVICE_MAP_STRATEGIES

        if args.device != "auto":
            raise CLIError(f"--device-map places the models itself: leave --device at auto (got --device {args.device})")
        if device_map not in DEVICE_MAP_STRATEGIES:
            raise CLIError(f"--device-map must be one of {', '.join(DEVICE_MAP_STRATEGIES)}, got {device_map!r}")
        if getattr(args, "ray", None) is not None and getattr(args, "gpus_per_task", None) is None:
            raise CLIError("--device-map with --ray: pass --gpus-per-task G, the GPUs each worker splits the target "
                           "across")
    return PairSpec(target=args.target, draft=args.draft, drafter=getattr(args, "drafter", "auto"),
                    device=args.device, dtype=args.dtype, draft_noise=getattr(args, "draft_noise", 0.05),
                    device_map=device_map, linear_kernel=getattr(args, "linear_kernel", "auto"))


def load_pair(args: argparse.Namespace) -> Any:
    """The model pair named by --target/--draft (default: the embedded offline pair), loaded
    behind one status line. Callers run :func:`check_model_args` first, before reading any data."""
    from dynatree_core.bench.pairs import PairUnavailable
    from dynatree_core.pairs.loading import announce

    spec = pair_spec(args)
    if spec.target in TINY_TARGETS:  # built in milliseconds: no status line
        return spec.load()
    try:
        with announce(spec.describe()):
            return spec.load()
    except PairUnavailable as e:
        raise CLIError(str(e)) from e


def _protocol_numbers(args: argparse.Namespace, datasets: list[str]) -> tuple[int, int, int | None, dict[str, int]]:
    """(N, W, T, default L_max per dataset) from --paper and the explicit flags."""
    base = PAPER if args.paper else QUICK
    n = args.num_prompts if args.num_prompts is not None else base["num_prompts"]
    w = args.warmup if args.warmup is not None else base["warmup"]
    t = getattr(args, "max_new_tokens", None)
    if t is None:
        t = base["max_new_tokens"]
    if args.max_prompt_len is not None:
        l_max = {ds: args.max_prompt_len for ds in datasets}
    elif args.paper:
        l_max = {ds: PAPER_MAX_PROMPT_LEN[ds] for ds in datasets}
    else:
        l_max = {ds: QUICK["max_prompt_len"] for ds in datasets}
    return n, w, t, l_max


def _protocol_note(n: int, w: int, t: int, l_max: dict[str, int]) -> str | None:
    paper = n == 10 and w == 2 and t == 1500 and all(l_max[d] == PAPER_MAX_PROMPT_LEN[d] for d in l_max)
    if paper:
        return None
    got = ", ".join(f"{d}={v}" for d, v in l_max.items())
    return (f"note: protocol N={n}, W={w}, T={t}, L_max ({got}) differs from the paper's "
            f"(N=10, W=2, T=1500, L_max 800 WikiText-2 / 1000 PG-19); pass --paper for the paper's protocol.")


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


def _execute(args: argparse.Namespace, exp: Any, stem: str, print_tables: Sequence[int] | None,
             figure: str | None = None) -> int:
    """The common tail of bench and sweep: checks, data, models, run (with a checkpoint), write, print."""
    from dynatree_core.bench import results as res
    from dynatree_core.bench.checkpoint import Checkpoint, CheckpointError, checkpoint_path
    from dynatree_core.bench.runner import document, load_corpora, prepare, run_prepared
    from dynatree_core.bench.tables import overhead_notes, render, speed_notes

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
    try:
        if need_draft and not info.has_draft:
            raise CLIError("the model pair has no draft model; pass --draft or use --methods ar")
        prep = prepare(info, exp, corpora)
        if hasattr(backend, "scale"):
            backend.scale(len(prep.shards))
        try:
            ck = Checkpoint.open(checkpoint_path(out_dir, stem, prep.fingerprint), prep.header(), args.resume)
        except CheckpointError as e:
            raise CLIError(str(e)) from None
        note = _protocol_note(exp.num_prompts, exp.warmup, max(p.max_new_tokens for p in exp.points),
                              {d: max(exp.l_max_values(d)) for d in exp.datasets})
        where = f"{len(backend.workers())} Ray workers at {args.ray}" if args.ray else str(info.device)
        where += f" | linear kernel: {info.linear_kernel}"
        print(f"target: {info.target_name} | draft: {info.draft_name} (drafter: {info.drafter_kind}) | {where}",
              file=sys.stderr)
        if ck.done:
            print(f"resuming: {len(ck.done)} of {len(prep.shards)} shards already done ({ck.path})", file=sys.stderr)
        data_lines = [f"data: {c.describe()}" for c in corpora.values()]
        for line in data_lines:
            print(line, file=sys.stderr)
        try:
            result = run_prepared(prep, backend, checkpoint=ck, progress=not args.no_progress,
                                  max_retries=args.max_retries,
                                  execution=backend.describe() if hasattr(backend, "describe") else None)
        except BaseException:
            _write_partial(res, out_dir, stem, lambda: document(prep, ck, backend), ck)
            raise
    finally:
        if hasattr(backend, "close"):
            backend.close()
    path = res.result_path(out, f"{stem}-{result['run_id']}", args.overwrite)
    res.write_json_atomic(path, result, overwrite=args.overwrite)
    ck.remove()  # the result holds every shard now
    aggs = res.recompute(result)
    print(f"\n{res.EOS_NOTE}")
    if note:
        print(note)
    print("\n".join(data_lines))
    if print_tables:
        print()
        print(render(aggs, print_tables))
        notes = speed_notes(aggs)
        if notes:
            print("\nslower than AR on this machine, and why:")
            print("\n".join(f"  {n}" for n in notes))
        overhead = overhead_notes(aggs)
        if overhead:
            print("\nengine overhead (wall time - time inside model forwards) per iteration, against Hugging Face "
                  "assisted generation on the same pair, prompts and T, this run:")
            print("\n".join(f"  {n}" for n in overhead))
    if figure is not None and importlib.util.find_spec("plotly") is None:
        print("\nfigure: skipped (plotly is not installed: pip install 'dynatree[viz]'; the JSON has every number)",
              file=sys.stderr)
    elif figure is not None:
        from dynatree_viz.sweeps import sweep_figure, write_figure

        fig_path = write_figure(sweep_figure(figure, aggs), path.with_suffix(".html"), f"dynatree-sweep-{figure}")
        print(f"\nfigure: {fig_path}")
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if not result["checks"]["outputs_identical_across_methods"]:
        print(f"warning: outputs differ from AR for {result['checks']['mismatching_cells']}", file=sys.stderr)
    print(f"\nresults: {path}")
    return 0


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


# --- subcommands ---------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    from dynatree_core.bench.results import write_text_atomic
    from dynatree_core.engine.api import generate

    device = _device_name(args)
    spec = build_specs(args, parse_methods(args.method), device)
    if len(spec) != 1:
        raise CLIError("generate runs one method; 'ablation' expands to three")
    spec = spec[0]
    if args.max_new_tokens is None:
        args.max_new_tokens = 64
    if args.max_new_tokens < 1:  # checked before the (slow) model load, with bench's limit
        raise CLIError(f"--max-new-tokens (T) must be >= 1, got {args.max_new_tokens}")
    check_model_args(args, spec.method != "ar")
    if args.trace and Path(args.trace).exists() and not args.overwrite:
        raise CLIError(f"{args.trace} exists; pass --overwrite to replace it")
    if args.trace:
        tdir = Path(args.trace).resolve().parent
        if not tdir.is_dir() or not os.access(tdir, os.W_OK):
            raise CLIError(f"cannot write the trace to {args.trace!r}: {tdir} is not a writable directory")
    if spec.method == "hf_assisted" and args.trace:
        raise CLIError("--trace records the engine's iterations; hf_assisted runs Hugging Face's own loop")
    pair = load_pair(args)
    if spec.method == "hf_assisted":
        from dynatree_core.bench.hf_assisted import generate_hf_assisted

        result = generate_hf_assisted(pair, args.prompt, args.max_new_tokens, spec.config, ignore_eos=args.ignore_eos)
    else:
        result = generate(pair, args.prompt, spec.method, spec.config, args.max_new_tokens,
                          trace=bool(args.trace), ignore_eos=args.ignore_eos)
    print(result.text if result.text is not None else result.tokens)
    print(f"\n--- metrics ({spec.label}, target {pair.target_name}, draft {pair.draft_name}) ---")
    for k, v in result.metrics.to_dict().items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    if args.trace:
        write_text_atomic(args.trace, result.trace.to_json(), overwrite=args.overwrite)
        print(f"trace: {args.trace}", file=sys.stderr)
    return 0


def _experiment(args: argparse.Namespace, kind: str, points: list[RunPoint], datasets: list[str],
                n: int, w: int, l_max: dict[str, int], sweep: dict[str, Any] | None = None) -> Any:
    from dynatree_core.bench.runner import Experiment

    return Experiment(kind=kind, points=points, datasets=datasets, num_prompts=n, warmup=w, max_prompt_len=l_max,
                      seed=args.seed, data_dir=args.data_dir, data_source=args.data_source,
                      paper_protocol=args.paper, sweep=sweep, allow_long_context=args.allow_long_context,
                      extra={"command_line": args.command_line})


def cmd_bench(args: argparse.Namespace) -> int:
    datasets = parse_datasets(args.dataset)
    names = parse_methods(args.methods)
    specs = build_specs(args, names, _device_name(args))
    n, w, t, l_max = _protocol_numbers(args, datasets)
    exp = _experiment(args, "bench", [RunPoint(s, t) for s in specs], datasets, n, w, l_max)
    tables = [1, 2, 3] + ([4] if any(s.label in ABLATION_LABELS for s in specs) else []) + [6]
    return _execute(args, exp, f"bench-{'+'.join(datasets)}", tables)


def cmd_sweep(args: argparse.Namespace) -> int:
    from dynatree_core.bench import sweeps
    from dynatree_core.bench.methods import dynatree_config

    datasets = parse_datasets(args.dataset)
    device = _device_name(args)
    n, w, t, l_max = _protocol_numbers(args, datasets)
    skipped: list[str] = []
    if args.sweep == "fixed_tree":
        points, meta = sweeps.fixed_tree_points(args.d_values, args.b_values, args.tau_values, n_max=args.n_max,
                                                max_new_tokens=t, kv_mode=args.kv_mode)
    elif args.sweep == "sensitivity":
        base = dynatree_config(_preset(args, device), history=not args.no_history, kv_mode=args.kv_mode,
                               **_dynatree_overrides(args))
        thresholds = [(h, lo) for h in args.tau_h_values for lo in args.tau_l_values]
        points, meta, skipped = sweeps.sensitivity_points(base, thresholds=thresholds, breadths=args.breadths,
                                                          depths=args.depths, max_new_tokens=t)
    else:
        specs = build_specs(args, parse_methods(args.methods), device)
        if args.sweep == "length":
            points, meta = sweeps.length_points(specs, args.lengths)
        else:
            points, meta = sweeps.prompt_length_points(specs, args.prompt_lengths, t)
    for s in skipped:
        print(f"warning: {s}", file=sys.stderr)
    exp = _experiment(args, f"sweep:{args.sweep}", points, datasets, n, w, l_max, sweep=meta)
    return _execute(args, exp, f"sweep-{args.sweep}-{'+'.join(datasets)}", [1], figure=args.sweep)


def cmd_table(args: argparse.Namespace) -> int:
    from dynatree_core.bench.results import load_result, recompute
    from dynatree_core.bench.tables import TABLES, TITLES, make_tables, to_markdown, worker_note

    which = args.tables
    bad = [t for t in which if t not in TABLES]
    if bad:
        raise CLIError(f"unknown table(s) {bad}; choose from {list(TABLES)}")
    aggs: list[dict[str, Any]] = []
    for f in args.files:
        result = load_result(f)
        if result.get("partial"):  # an interrupted run: say what the numbers leave out
            print(f"note: {f} is a partial result ({len(result.get('missing_shards', []))} of "
                  f"{(result.get('execution') or {}).get('shards', '?')} shards missing); continue the run with "
                  f"--resume", file=sys.stderr)
        aggs += recompute(result)
    tables = make_tables(aggs, which)
    for t, df in tables.items():
        if args.format == "csv":
            print(f"# {TITLES[t]}")
            print(df.to_csv(index=False))
        else:
            print(to_markdown(df, TITLES[t]))
            print()
    if args.format != "csv" and (note := worker_note(aggs)):
        print(note)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``dynatree`` parser: one subcommand per builder below (argparse only: no torch)."""
    parser = _Parser(prog="dynatree", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_generate, _add_bench, _add_table, _add_sweep, _add_calibrate):
        add(sub)
    from dynatree_core.distill.cli import add_distill_parser  # torch-free: the pipeline loads when the command runs

    add_distill_parser(sub)
    _no_abbreviations(parser)
    return parser


def _add_generate(sub: Any) -> None:
    g = sub.add_parser("generate", help="generate from one prompt and print text and metrics")
    g.add_argument("--prompt", required=True, help="prompt text")
    g.add_argument("--method", default="dynatree", help=f"one of {', '.join(m for m in METHOD_NAMES if m != 'ablation')}")
    g.add_argument("--max-new-tokens", type=int, default=None, help="T (default 64)")
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at EOS")
    g.add_argument("--trace", default=None, help="write the full iteration trace to this JSON file")
    g.add_argument("--overwrite", action="store_true", help="replace an existing --trace file")
    add_model_args(g)
    add_method_args(g)
    g.set_defaults(func=cmd_generate)


def _add_bench(sub: Any) -> None:
    b = sub.add_parser("bench", help="run the paper's protocol and print Tables 1-3",
                       description="Run the paper's benchmark protocol; writes one JSON per run.")
    b.add_argument("--methods", default="ar,linear,fixed_tree,dynatree",
                   help=f"comma-separated, from {', '.join(METHOD_NAMES)} (default ar,linear,fixed_tree,dynatree)")
    add_T_arg(b)
    add_protocol_args(b, default_dataset="wikitext2,pg19")  # the paper reports both
    add_model_args(b)
    add_method_args(b)
    b.set_defaults(func=cmd_bench)


def _add_table(sub: Any) -> None:
    t = sub.add_parser("table", help="re-render the paper's tables from result JSON files")
    t.add_argument("files", nargs="+", help="result JSON files")
    t.add_argument("--tables", type=_csv(int), default=[1, 2, 3, 4, 5, 6], help="which tables (default 1,2,3,4,5,6)")
    t.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    t.set_defaults(func=cmd_table)


def _add_sweep(sub: Any) -> None:
    s = sub.add_parser("sweep", help="parameter sweeps (JSON + HTML figure)")
    ss = s.add_subparsers(dest="sweep", required=True, metavar="SWEEP")
    f = ss.add_parser("fixed_tree", help="fixed-tree grid over D, B, tau")
    f.add_argument("--d-values", type=_csv(int), default=[2, 3, 4, 5], help="depths D (default 2,3,4,5)")
    f.add_argument("--b-values", type=_csv(int), default=[1, 2, 3], help="branchings B (default 1,2,3)")
    f.add_argument("--tau-values", type=_csv(float), default=[0.05], help="pruning tau (default 0.05)")
    f.add_argument("--fixed-n-max", dest="n_max", type=int, default=256, metavar="N_MAX",
                   help="node budget N_max (default 256)")
    se = ss.add_parser("sensitivity", help="DynaTree sensitivity: tau_h x tau_l, breadth bounds, depth ranges")
    se.add_argument("--tau-h-values", type=_csv(float), default=[0.7, 0.8, 0.9])
    se.add_argument("--tau-l-values", type=_csv(float), default=[0.2, 0.3, 0.4])
    se.add_argument("--breadths", type=_tuples(3), default=[(1, 1, 2), (1, 2, 2), (1, 2, 3)],
                    help="B_min:B_mid:B_max list (default 1:1:2,1:2:2,1:2:3)")
    se.add_argument("--depths", type=_tuples(2), default=[(3, 6), (4, 8), (5, 10)],
                    help="D0:D_max list (default 3:6,4:8,5:10)")
    le = ss.add_parser("length", help="sequence length scaling (T)")
    le.add_argument("--lengths", type=_csv(int), default=[32, 64, 128], help="T values (default 32,64,128)")
    pl = ss.add_parser("prompt_length", help="prompt length scaling (L_max)")
    pl.add_argument("--prompt-lengths", type=_csv(int), default=[64, 128, 256], help="L_max values (default 64,128,256)")
    for sp in (le, pl):
        sp.add_argument("--methods", default="ar,linear,fixed_tree,dynatree")
    for sp in (f, se, le, pl):
        if sp is not le:
            add_T_arg(sp)
        add_protocol_args(sp)
        add_model_args(sp)
        add_method_args(sp, linear=sp in (le, pl), fixed=sp in (le, pl))
        sp.set_defaults(func=cmd_sweep)


def _add_calibrate(sub: Any) -> None:
    c = sub.add_parser("calibrate", help="measure (or show the cached) verify-cost curve and per-rank acceptance",
                       description="What cost-aware DynaTree and Sequoia measure about a pair on this device: "
                                   "the verify-cost curve c(n), one draft level's cost, and the draft's per-rank "
                                   "acceptance. Cached (see dynatree_core.engine.calibrate.cache_dir); --recalibrate "
                                   "measures again.")
    c.add_argument("--recalibrate", action="store_true", help="measure again even if cached")
    add_model_args(c)
    c.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dynatree_core.engine import calibrate

    _device_name(args)
    check_model_args(args, True)
    pair = load_pair(args)
    if pair.draft is None:
        raise CLIError("calibration needs a draft model: pass --draft")
    cost = calibrate.cost_model(pair, recalibrate=args.recalibrate)
    acc = calibrate.acceptance_vector(pair, recalibrate=args.recalibrate)
    print(calibrate.describe(cost))
    print("acceptance by draft rank: " + ", ".join(f"{a:.3f}" for a in acc))
    print(f"cache: {calibrate.cache_dir()}")
    return 0


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Exact option names only: with per-method prefixes, '--linear' or '--fixed' would otherwise
    silently pick whichever option they abbreviate."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                _no_abbreviations(sp)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynatree`` console script; returns the exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    args.command_line = " ".join(["dynatree", *map(shlex.quote, argv)])
    try:
        return int(args.func(args) or 0)
    except (CLIError, DataError, LengthError, ResultError, FileExistsError) as e:
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 2
    except ShardFailed as e:  # the partial result and the checkpoint are already written
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # config validation and other bad input
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dynatree: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dynatree: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
