"""The ``dynatree distill`` command line: options, their checks, the subparser (torch-free).

Kept apart from :mod:`dynatree_core.distill` (which imports torch) so that ``dynatree --help`` and
``dynatree distill --help`` start without loading torch; the command imports the pipeline when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .paths import REPO_ROOT

DEFAULT_WORK_DIR = REPO_ROOT / ".distill"

DESCRIPTION = """Build teacher data, train and export a draft for the SmolLM2-135M-Instruct target.

Stages (--stage): data (target continuations of the bundled prompts and of training-text passages,
plus plain training text; never the evaluation text), train (online distillation, resumable
checkpoints), export (fp16 weights into the package's assets). --evaluate measures agreement with
the target's greedy tokens on held-out prompts and passages.

--kind model trains the independent 2-layer draft; --kind feature trains the feature draft that
reads the target's hidden states (bash scripts/distill_feature.sh: the shipped one, under 90 minutes
on a 2-core CPU). See the module dynatree_core.distill for the full description.
"""


def add_distill_args(p: argparse.ArgumentParser) -> None:
    """The ``distill`` options (shared by ``dynatree distill`` and ``python -m dynatree_core.distill``)."""
    p.add_argument("--work-dir", default=str(DEFAULT_WORK_DIR), help="sequences + checkpoints (default: .distill/)")
    p.add_argument("--data-dir", default=None, help="folder with wikitext-2-raw/ and gutenberg-train/")
    p.add_argument("--kind", choices=["model", "feature"], default="model",
                   help="model: the independent 2-layer draft; feature: a small head on the target's hidden "
                        "states (EAGLE-style), trained unrolled (--unroll) from stored target features")
    p.add_argument("--out-dir", default=None,
                   help="where the draft is written (default: the shipped asset folder of --kind)")
    p.add_argument("--stage", choices=["all", "data", "train", "export"], default="all",
                   help="export: write the draft from the last checkpoint (e.g. after an interrupted training)")
    p.add_argument("--evaluate", action="store_true", help="evaluate the draft in --out-dir (after training if any)")
    p.add_argument("--eval-only", action="store_true", help="only evaluate, do not build data or train")
    p.add_argument("--eval-passages", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, ...")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--time-limit", type=float, default=0,
                   help="seconds for data + training (0 = none): generation stops after --data-share of it "
                        "(resumable) and the cosine schedule is compressed into the rest")
    p.add_argument("--data-share", type=float, default=0.4)
    p.add_argument("--export-reserve", type=float, default=20.0, help="seconds kept back for the export")
    # data: target continuations
    p.add_argument("--generator", choices=["target", "draft"], default="target",
                   help="who writes the continuations: the target, or the --init-from draft (on-policy data; "
                        "labels always come from the target)")
    p.add_argument("--gen-dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16",
                   help="dtype of the target while it writes continuations (labels: --teacher-dtype)")
    p.add_argument("--bundled-prompts", action=argparse.BooleanOptionalAction, default=True,
                   help="continue the bundled prompts of data/distill_prompts.txt")
    p.add_argument("--self-prompts", type=int, default=0,
                   help="user requests for the target to write itself (sampled after the chat template's user "
                        "header; held-out topics filtered out), each continued in chat and raw form like the bank")
    p.add_argument("--max-prompts", type=int, default=0, help="use only the first N bundled prompts (0 = all)")
    p.add_argument("--samples-per-prompt", type=int, default=7,
                   help="sampled continuations per bundled prompt, besides the greedy one")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--gen-batch", type=int, default=1024)
    p.add_argument("--gen-new-tokens", type=int, default=256)
    p.add_argument("--passages", type=int, default=16384, help="training-text passages to continue with the target")
    p.add_argument("--passage-batch", type=int, default=0, help="batch size for passages (0 = --gen-batch)")
    p.add_argument("--passage-min", type=int, default=32)
    p.add_argument("--passage-max", type=int, default=384)
    p.add_argument("--passage-new-tokens", type=int, default=192)
    p.add_argument("--prompt-bank", type=int, default=0,
                   help="generated template x topic prompts (data/distill_topics.txt) to continue")
    p.add_argument("--text-prompts", type=int, default=0,
                   help="generated chat questions about excerpts of the training text")
    p.add_argument("--bank-samples", type=int, default=1, help="sampled continuations per generated prompt")
    p.add_argument("--bank-new-tokens", type=int, default=96)
    p.add_argument("--chunk-len", type=int, default=512, help="natural-text chunk length")
    # training
    p.add_argument("--init-from", default=None,
                   help="fine-tune an exported draft (its layers and head ids) instead of starting from the target; "
                        "with --kind feature: warm-start the feature draft from this independent draft (its layers, "
                        "norm and head; the feature input starts at zero)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--head-size", type=int, default=8192,
                   help="output-head ids; with --init-from, a size above the draft's grows its head")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-tokens", type=int, default=24576)
    p.add_argument("--micro-tokens", type=int, default=0,
                   help="split each batch into length-sorted micro-batches of at most this many padded "
                        "positions, gradients accumulated (0 = one batch; a few thousand on CPU)")
    p.add_argument("--max-len", type=int, default=576)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--teacher-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="dtype of the labelling target (bfloat16: much faster on CPUs with AMX, labels may "
                        "differ at near-ties)")
    p.add_argument("--alpha", type=float, default=0.5, help="weight of the soft (teacher distribution) loss")
    p.add_argument("--gen-frac", type=float, default=0.8, help="share of batches drawn from target continuations")
    p.add_argument("--val-rows", type=int, default=64, help="continuation rows held out to report val_acc")
    p.add_argument("--train-bf16", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--restart", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--ckpt-every", type=int, default=250)
    # feature draft (--kind feature)
    p.add_argument("--feature-text-tokens", type=int, default=400_000,
                   help="--kind feature: tokens of plain training text read by the target besides the continuations")
    p.add_argument("--feature-batch-tokens", type=int, default=8192,
                   help="--kind feature: tokens per target forward while extracting features")
    p.add_argument("--unroll", type=int, default=3,
                   help="--kind feature: draft steps unrolled in training (step s trains tree depth s)")
    p.add_argument("--warm-lr-frac", type=float, default=0.25,
                   help="--kind feature with --init-from: learning rate of the seeded layers and head as a fraction "
                        "of --lr (the new fusion layer learns at the full --lr)")
    p.add_argument("--reg-weight", type=float, default=0.5,
                   help="--kind feature: weight of the SmoothL1 loss between predicted and target features")
    p.add_argument("--export-every-ckpt", action=argparse.BooleanOptionalAction, default=True,
                   help="also write the draft to --out-dir at every checkpoint (marked partial)")


def check_distill_args(args: argparse.Namespace) -> None:
    """Validate the options before any model loads (ValueError naming the option)."""
    def need(ok, msg):
        if not ok:
            raise ValueError(msg)

    need(args.steps >= 1, f"--steps must be >= 1 (got {args.steps})")
    need(args.batch_tokens >= 1, f"--batch-tokens must be >= 1 (got {args.batch_tokens})")
    need(0.0 <= args.alpha <= 1.0, f"--alpha must be in [0, 1] (got {args.alpha})")
    need(0.0 <= args.gen_frac <= 1.0, f"--gen-frac must be in [0, 1] (got {args.gen_frac})")
    need(0.0 < args.data_share < 1.0, f"--data-share must be in (0, 1) (got {args.data_share})")
    need(args.time_limit >= 0, f"--time-limit must be >= 0 (got {args.time_limit})")
    need(1 <= args.passage_min <= args.passage_max,
         f"need 1 <= --passage-min <= --passage-max (got {args.passage_min}, {args.passage_max})")
    need(args.prompt_bank >= 0 and args.text_prompts >= 0 and args.bank_samples >= 0 and args.self_prompts >= 0,
         "--prompt-bank, --text-prompts, --self-prompts and --bank-samples must be >= 0")
    if args.generator == "draft" and not args.init_from:
        raise ValueError("--generator draft needs --init-from (the draft that writes the continuations)")
    if args.init_from and not (Path(args.init_from) / "draft_config.json").is_file():
        raise ValueError(f"--init-from {args.init_from}: no exported draft there (draft_config.json missing)")
    need(args.layers >= 1, f"--layers must be >= 1 (got {args.layers})")
    need(args.head_size >= 4, f"--head-size must be >= 4 (got {args.head_size})")
    need(args.max_len >= 2, f"--max-len must be >= 2 (got {args.max_len})")
    need(args.micro_tokens >= 0, f"--micro-tokens must be >= 0 (got {args.micro_tokens})")
    need(args.unroll >= 1, f"--unroll must be >= 1 (got {args.unroll})")
    need(args.reg_weight >= 0, f"--reg-weight must be >= 0 (got {args.reg_weight})")
    need(0 < args.warm_lr_frac <= 1, f"--warm-lr-frac must be in (0, 1] (got {args.warm_lr_frac})")
    need(args.feature_text_tokens >= 0, f"--feature-text-tokens must be >= 0 (got {args.feature_text_tokens})")
    need(args.feature_batch_tokens >= 1, f"--feature-batch-tokens must be >= 1 (got {args.feature_batch_tokens})")
    if args.kind == "feature":
        need(args.generator != "draft", "--kind feature does not support --generator draft")
    from .models import resolve_device  # torch: only once the command runs, not for --help

    try:
        resolve_device(args.device)
    except (ValueError, RuntimeError) as e:  # torch.device("banana") raises RuntimeError
        raise ValueError(f"--device {args.device!r}: {e} (use auto, cpu, cuda or cuda:N)") from None


def add_distill_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``distill`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser("distill", help="build teacher data, train and export a draft",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              allow_abbrev=False)
    add_distill_args(p)
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace, **models) -> int:
    from .distill import run_distill  # torch and transformers load here, not at --help

    return run_distill(args, **models)
