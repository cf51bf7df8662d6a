"""From parsed options to what runs: method specs, the pair's recipe and the loaded pair, the
protocol's numbers. Checks here run before any model loads."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from dynatree_core.bench.data import PAPER_MAX_PROMPT_LEN, corpus_tokenize, load_corpus, select_prompts
from dynatree_core.bench.methods import DYNATREE_FIELDS, MethodSpec, auto_preset, method_specs
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.bench.results import HF_ASSISTED
from dynatree_core.cli.args import PAPER, QUICK, CLIError
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.pairs.choices import TINY_TARGETS
from dynatree_core.policy.config import EAGLE2_HELP, SEQUOIA_HELP

# --- shared helpers ------------------------------------------------------------------------
def resolve_preset(args: argparse.Namespace, device: str) -> str:
    if args.preset != "auto":
        return args.preset
    if getattr(args, "paper", False):
        return "paper"
    return auto_preset(device)


def device_name(args: argparse.Namespace) -> str:
    """The resolved device (validates --device and --dtype before anything is loaded)."""
    from dynatree_core.pairs.pair import check_dtype_on_device, resolve_device, resolve_dtype

    dtype = resolve_dtype(args.dtype)
    device = resolve_device(args.device)
    check_dtype_on_device(dtype, device)
    return str(device)



def dynatree_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {f: getattr(args, f"dt_{f}") for f in DYNATREE_FIELDS if getattr(args, f"dt_{f}", None) is not None}


def build_specs(args: argparse.Namespace, names: list[str], device: str) -> list[MethodSpec]:
    """Method configs from the flags (validated by the config classes)."""
    return method_specs(names, preset=resolve_preset(args, device), k=getattr(args, "k", 5), d=getattr(args, "d", 5),
                        b=getattr(args, "b", 2), tau=getattr(args, "tau", 0.05), n_max=getattr(args, "n_max", 256),
                        kv_mode=args.kv_mode, history=not args.no_history,
                        dynatree_overrides=dynatree_overrides(args),
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
            check_embedded_feature_draft(args.draft, drafter)
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


def check_embedded_feature_draft(draft: str, drafter: str) -> None:
    """``--draft DIR`` without ``--target``: a feature-draft directory for the embedded target (a
    candidate in place of the shipped feature draft), with a feature drafter."""
    from dynatree_core.drafters.feature_draft import is_feature_draft_dir
    from dynatree_core.pairs.default_pair import resolve_draft_kind

    if not is_feature_draft_dir(draft):
        raise CLIError(f"--draft needs --target, unless it is a feature-draft directory for the embedded target "
                       f"({draft} has no feature_draft_config.json); without both, the embedded default pair is used")
    if resolve_draft_kind(drafter).partition("+")[0] != "feature":
        raise CLIError(f"--draft {draft} is a feature draft: use --drafter feature or feature+lookup with it "
                       f"(got --drafter {drafter})")


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
                    device=args.device, dtype=args.dtype, draft_noise=getattr(args, "tiny_draft_noise", 0.05),
                    device_map=device_map, linear_kernel=getattr(args, "linear_kernel", "auto"))


def load_pair(args: argparse.Namespace) -> Any:
    """The model pair named by --target/--draft (default: the embedded offline pair), loaded
    behind one status line. Callers run :func:`check_model_args` first, before reading any data."""
    from dynatree_core.pairs.named import PairUnavailable
    from dynatree_core.pairs.loading import announce

    spec = pair_spec(args)
    if spec.target in TINY_TARGETS:  # built in milliseconds: no status line
        return spec.load()
    try:
        with announce(spec.describe()):
            return spec.load()
    except PairUnavailable as e:
        raise CLIError(f"{e}; pass --target and --draft") from e


def protocol_numbers(args: argparse.Namespace, datasets: list[str]) -> tuple[int, int, int | None, dict[str, int]]:
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


def bench_prompts(args: argparse.Namespace, pair: Any, dataset: str, n: int, max_len: int) -> list[list[int]]:
    """The first ``n`` prompts the bench selects from ``dataset`` (at most ``max_len`` tokens each; ``args``: the
    parsed bench command's data options and seed), as token ids of ``pair``'s tokenizer."""
    corpus = load_corpus(dataset, args.data_dir, args.data_source, form=args.prompt_form)
    chosen, _ = select_prompts(corpus, corpus_tokenize(corpus, pair.tokenizer), n, max_len, seed=args.seed)
    return [list(p.token_ids) for p in chosen]


def protocol_note(n: int, w: int, t: int, l_max: dict[str, int]) -> str | None:
    paper = n == 10 and w == 2 and t == 1500 and all(l_max[d] == PAPER_MAX_PROMPT_LEN[d] for d in l_max)
    if paper:
        return None
    got = ", ".join(f"{d}={v}" for d, v in l_max.items())
    return (f"note: protocol N={n}, W={w}, T={t}, L_max ({got}) differs from the paper's "
            f"(N=10, W=2, T=1500, L_max 800 WikiText-2 / 1000 PG-19); pass --paper for the paper's protocol.")


def sampled_points(points: list[RunPoint], args: argparse.Namespace) -> list[RunPoint]:
    """Every point at every ``--temperature`` (and, when sampling, every ``--verify`` rule; AR, the
    speed reference of each temperature, always draws with the positions' Gumbel noise: ``match``)."""
    temps, rules, noises = args.temperature, args.verify or ["match"], args.draft_noise or [None]
    sampling = [t for t in temps if t != 0]
    for flag, given in (("--top-p", args.top_p != 1.0), ("--top-k", args.top_k != 0), ("--verify", args.verify),
                        ("--draft-noise", args.draft_noise)):
        if given and not sampling:
            raise CLIError(f"{flag} applies only when sampling: add a --temperature > 0")
    if args.draft_noise and "match" not in rules:
        raise CLIError("--draft-noise applies only under --verify match (rejection samples its drafts from q)")
    seed = args.sampling_seed if args.sampling_seed is not None else args.seed
    out = []
    for t in temps:
        for p in points:
            if t == 0:
                out.append(p)
                continue
            if p.spec.method == HF_ASSISTED:
                raise CLIError("hf_assisted runs Hugging Face's assisted generation greedily here; drop it from "
                               "--methods or keep --temperature 0")
            for rule in (["match"] if p.spec.method == "ar" else rules):
                # AR drafts nothing: one reference cell per temperature, whatever the drafts' noise
                for noise in ([None] if p.spec.method == "ar" or rule != "match" else noises):
                    cfg = SamplingConfig(temperature=t, top_p=args.top_p, top_k=args.top_k, seed=seed, verify=rule,
                                         draft_noise=noise)
                    out.append(dataclasses.replace(p, sampling=cfg))
    return out


def generate_sampling(args: argparse.Namespace) -> SamplingConfig:
    """``dynatree generate``'s sampling settings (checked before any model loads: a setting that
    applies only when sampling, given at temperature 0, is refused)."""
    return SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                          verify=args.verify, draft_noise=args.draft_noise)


def runtime_points(points: list[RunPoint], args: argparse.Namespace, device: str) -> list[RunPoint]:
    """Every point on every ``--runtime`` (checked against the device before any model loads)."""
    import torch

    from dynatree_core.runtime.static.fast_path import resolve_runtime

    runtimes = list(args.runtime)
    if runtimes == ["best"]:  # each method on every candidate runtime; the report keeps its fastest
        runtimes = ["eager", "graphs"] if torch.device(device).type == "cuda" else ["eager", "compiled"]
    for r in runtimes:
        resolve_runtime(r, torch.device(device))
    return [dataclasses.replace(p, runtime=r) for r in runtimes for p in points]
