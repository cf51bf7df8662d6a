"""Argument groups shared by the subcommands (torch-free: ``dynatree --help`` loads no model code)."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Callable, Sequence

from dynatree_core.bench.data import DATA_SOURCES, DATASETS
from dynatree_core.bench.everyday import PROMPT_FORMS
from dynatree_core.bench.methods import DYNATREE_FIELD_TYPES, DYNATREE_FIELDS, PRESETS
from dynatree_core.pairs.choices import PAIR_DRAFTS
from dynatree_core.policy.config import (EAGLE2_HELP, FIXED_TREE_HELP, PARAMETER_HELP, SEQUOIA_HELP, Eagle2Config,
                                         FixedTreeConfig, SequoiaConfig)
from dynatree_core.runtime.choices import LINEAR_KERNELS

#: the quick protocol (CPU-sized) and the paper's
QUICK = {"num_prompts": 4, "warmup": 1, "max_new_tokens": 128, "max_prompt_len": 256}
PAPER = {"num_prompts": 10, "warmup": 2, "max_new_tokens": 1500}


class CLIError(Exception):
    """Bad input detected by the CLI (message printed on stderr, exit status 2)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the problem and where to read more, not the whole usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")



# --- argument groups -----------------------------------------------------------------------
def csv_list(cast: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(s: str) -> list[Any]:
        try:
            vals = [cast(x.strip()) for x in s.split(",") if x.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {s!r} ({e})") from None
        if not vals:
            raise argparse.ArgumentTypeError(f"empty list {s!r}")
        return vals

    return parse


def tuple_list(n: int) -> Callable[[str], list[tuple[int, ...]]]:
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
                                   "--target except for AR; without --target, a feature-draft directory used "
                                   "by the embedded pair instead of its shipped feature draft")
    g.add_argument("--drafter", choices=PAIR_DRAFTS, default="auto",
                   help="which shipped draft the embedded pair uses: feature (reads the target's hidden states), "
                        "model (independent 2-layer draft, the paper's setting) or auto (the fastest in this "
                        "project's CPU benchmark; docs/drafters.md says which); lookup: model-free prompt lookup, with the "
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
    g.add_argument("--tiny-draft-noise", type=float, default=0.05, help=argparse.SUPPRESS)  # the tiny test pair's draft


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
        g.add_argument("--linear-k", dest="k", type=k_list, default=5, metavar="K",
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
                   help=f"{', '.join(DATASETS)} (everyday prompts, bundled), or several comma-separated "
                        f"(default {default_dataset})")
    g.add_argument("--prompt-form", choices=PROMPT_FORMS, default=PROMPT_FORMS[0],
                   help="how the everyday prompts (--dataset prompts) reach the target: chat (the tokenizer's chat "
                        "template, with the assistant header after the prompt: what an instruct model's users send; "
                        "default) or raw (the text alone)")
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


def add_sampling_args(p: argparse.ArgumentParser, several: bool) -> None:
    """Speculative sampling: ``several`` (bench, sweep) takes lists of temperatures and rules, one
    cell each; generate takes one of each and its own --seed."""
    g = p.add_argument_group("sampling (temperature 0: greedy decoding; docs/engine.md)")
    g.add_argument("--temperature", type=csv_list(float) if several else float, default=[0.0] if several else 0.0,
                   help="temperature T >= 0" + (", or several comma-separated (e.g. 0,0.7: one cell each, AR at the "
                                               "same T the speed reference)" if several else "") + " (default 0: greedy)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus: keep the smallest set of tokens with "
                                                            "probability >= P, in (0, 1] (default 1: off; sampling only)")
    g.add_argument("--top-k", type=int, default=0, help="keep the K most probable tokens (default 0: off; sampling only)")
    g.add_argument("--verify", type=csv_list(str) if several else str, default=None,
                   help="match (default: exactly seeded AR's tokens) or rejection (drafts sampled from q, recursive "
                        "rejection sampling: exact in distribution)" + (", or both comma-separated" if several else ""))
    g.add_argument("--draft-noise", type=csv_list(str) if several else str, default=None,
                   help="under match: shared (default: drafts ranked by log q plus the Gumbel noise the target's draw "
                        "uses, so the draft's sample is coupled to the target's) or none (the top-B of q)"
                        + (", or both comma-separated" if several else ""))
    if several:
        g.add_argument("--sampling-seed", type=int, default=None,
                       help="seed of the sampled tokens (default: --seed, which also selects the prompts)")
    else:
        g.add_argument("--seed", type=int, default=None, help="seed of the sampled tokens (default 0; sampling only)")


def add_runtime_arg(p: argparse.ArgumentParser, several: bool) -> None:
    p.add_argument("--runtime", type=csv_list(str) if several else str, default=["auto"] if several else "auto",
                   help="what runs the forwards: eager, or the fast path (static KV cache, trees padded to bucket "
                        "sizes): graphs (CUDA graphs), compiled (torch.compile), static (the fast path run eagerly); "
                        "auto: graphs on CUDA, eager elsewhere (default)" + (
                            "; several comma-separated: one cell each, side by side; best: eager and compiled "
                            "(graphs on CUDA), each method reported on its fastest" if several else ""))


def add_T_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"T, new tokens per prompt (default {QUICK['max_new_tokens']}; paper 1500)")



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
k_list = _int_list("--linear-k")
