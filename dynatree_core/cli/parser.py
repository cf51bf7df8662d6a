"""The ``dynatree`` argument parser: one subparser per command, built from the shared groups."""

from __future__ import annotations

import argparse
from typing import Any

from dynatree_core.bench.methods import METHOD_NAMES
from dynatree_core.cli.args import (Parser, add_method_args, add_model_args, add_protocol_args, add_runtime_arg,
                                    add_sampling_args, add_T_arg, csv_list, tuple_list)
from dynatree_core.cli.commands import cmd_bench, cmd_calibrate, cmd_generate, cmd_sweep, cmd_table
#: ``dynatree --help``: examples, the defaults, and where the documentation is
DESCRIPTION = """Exact, traced tree speculative decoding (DynaTree and its baselines).

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

Documentation (in the repository): README.md (start here), docs/engine.md (methods, parameters,
why it is exact), docs/benchmarks.md (bench, sweep, table and every measured run), docs/drafters.md
(drafts and distillation), docs/gpu.md, docs/limits.md, docs/architecture.md (the code's layers).
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``dynatree`` parser: one subcommand per builder below (argparse only: no torch)."""
    parser = Parser(prog="dynatree", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    add_sampling_args(g, several=False)
    add_runtime_arg(g, several=False)
    g.set_defaults(func=cmd_generate)


def _add_bench(sub: Any) -> None:
    b = sub.add_parser("bench", help="run the paper's protocol and print Tables 1-3",
                       description="Run the paper's benchmark protocol; writes one JSON per run.")
    b.add_argument("--methods", default="ar,linear,fixed_tree,dynatree",
                   help=f"comma-separated, from {', '.join(METHOD_NAMES)} (default ar,linear,fixed_tree,dynatree)")
    add_T_arg(b)
    add_protocol_args(b, default_dataset="wikitext2,pg19,prompts")  # the paper's two, and what users type
    add_model_args(b)
    add_method_args(b)
    add_sampling_args(b, several=True)
    add_runtime_arg(b, several=True)
    g = b.add_argument_group("batches (docs/engine.md#several-prompts-at-once)")
    g.add_argument("--batch-size", type=csv_list(int), default=None, metavar="B,...",
                   help="decode B prompts together at each batch size (e.g. 1,2,4,8): the batch benchmark, "
                        "every method against batched AR in the same round")
    g.add_argument("--batch-budget", default="both", metavar="MODE,...",
                   help="how each drafting method runs: off (no shared budget), on (the budget, serving the fixed "
                        "batch's finish), widths (the budget choosing widths only, not depths), rate (the budget "
                        "counting every token alike, as a server that refills finished rows would), comma-separated; "
                        "both = off,on (default)")
    g.add_argument("--repeats", type=int, default=2, help="rounds of the batch benchmark (default 2)")
    g.add_argument("--ar-control", action=argparse.BooleanOptionalAction, default=True,
                   help="run batched AR twice per round at every B (ar#2, the A/A control): each method's ratio is "
                        "also read against AR's own run-to-run spread, with a 95%% interval (default on)")
    b.set_defaults(func=cmd_bench)


def _add_table(sub: Any) -> None:
    t = sub.add_parser("table", help="re-render the paper's tables from result JSON files")
    t.add_argument("files", nargs="+", help="result JSON files")
    t.add_argument("--tables", type=csv_list(int), default=[1, 2, 3, 4, 5, 6, 7],
                   help="which tables (default 1,2,3,4,5,6,7)")
    t.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    t.set_defaults(func=cmd_table)


def _add_sweep(sub: Any) -> None:
    s = sub.add_parser("sweep", help="parameter sweeps (JSON + HTML figure)")
    ss = s.add_subparsers(dest="sweep", required=True, metavar="SWEEP")
    f = ss.add_parser("fixed_tree", help="fixed-tree grid over D, B, tau")
    f.add_argument("--d-values", type=csv_list(int), default=[2, 3, 4, 5], help="depths D (default 2,3,4,5)")
    f.add_argument("--b-values", type=csv_list(int), default=[1, 2, 3], help="branchings B (default 1,2,3)")
    f.add_argument("--tau-values", type=csv_list(float), default=[0.05], help="pruning tau (default 0.05)")
    f.add_argument("--fixed-n-max", dest="n_max", type=int, default=256, metavar="N_MAX",
                   help="node budget N_max (default 256)")
    se = ss.add_parser("sensitivity", help="DynaTree sensitivity: tau_h x tau_l, breadth bounds, depth ranges")
    se.add_argument("--tau-h-values", type=csv_list(float), default=[0.7, 0.8, 0.9])
    se.add_argument("--tau-l-values", type=csv_list(float), default=[0.2, 0.3, 0.4])
    se.add_argument("--breadths", type=tuple_list(3), default=[(1, 1, 2), (1, 2, 2), (1, 2, 3)],
                    help="B_min:B_mid:B_max list (default 1:1:2,1:2:2,1:2:3)")
    se.add_argument("--depths", type=tuple_list(2), default=[(3, 6), (4, 8), (5, 10)],
                    help="D0:D_max list (default 3:6,4:8,5:10)")
    le = ss.add_parser("length", help="sequence length scaling (T)")
    le.add_argument("--lengths", type=csv_list(int), default=[32, 64, 128], help="T values (default 32,64,128)")
    pl = ss.add_parser("prompt_length", help="prompt length scaling (L_max)")
    pl.add_argument("--prompt-lengths", type=csv_list(int), default=[64, 128, 256], help="L_max values (default 64,128,256)")
    for sp in (le, pl):
        sp.add_argument("--methods", default="ar,linear,fixed_tree,dynatree")
    for sp in (f, se, le, pl):
        if sp is not le:
            add_T_arg(sp)
        add_protocol_args(sp)
        add_model_args(sp)
        add_method_args(sp, linear=sp in (le, pl), fixed=sp in (le, pl))
        add_sampling_args(sp, several=True)
        add_runtime_arg(sp, several=True)
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



def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Exact option names only: with per-method prefixes, '--linear' or '--fixed' would otherwise
    silently pick whichever option they abbreviate."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                _no_abbreviations(sp)


