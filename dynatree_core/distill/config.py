"""``DistillConfig``: every option of ``dynatree distill``, its default, help and check (torch-free).

The one source of truth for the distillation's settings: :mod:`dynatree_core.distill.cli` builds its
argparse options from these fields (``--work-dir`` for ``work_dir``, type, default, choices and help
from the field), and ``__post_init__`` validates a config before any model loads, raising
``ValueError`` naming the option. The library functions read a config's attributes (an
``argparse.Namespace`` with the same attributes works too).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from dynatree_core.paths import REPO_ROOT

DEFAULT_WORK_DIR = REPO_ROOT / ".distill"


def option(default: Any, help: str | None = None, choices: tuple[str, ...] | None = None,
           negatable: bool = False) -> Any:
    """A field that is also a command-line option. ``negatable`` bools get ``--x/--no-x``; other bools
    are ``store_true`` flags."""
    return field(default=default, metadata={"option": True, "help": help, "choices": choices,
                                            "negatable": negatable})


def internal(default: Any = None) -> Any:
    """A field that is not a command-line option (set by the command or the pipeline)."""
    return field(default=default, compare=False, metadata={"option": False})


@dataclass
class DistillConfig:
    """Settings of one distillation run (``dynatree distill``); see :mod:`dynatree_core.distill`."""

    work_dir: str = option(str(DEFAULT_WORK_DIR), "sequences + checkpoints (default: .distill/)")
    data_dir: Optional[str] = option(None, "folder with wikitext-2-raw/ and gutenberg-train/")
    kind: str = option("model", "model: the independent 2-layer draft; feature: a small head on the target's hidden "
                                "states (EAGLE-style), trained unrolled (--unroll) from stored target features",
                       choices=("model", "feature"))
    out_dir: Optional[str] = option(None, "where the draft is written (default: the shipped asset folder of --kind)")
    stage: str = option("all", "export: write the draft from the last checkpoint (e.g. after an interrupted training)",
                        choices=("all", "data", "train", "export"))
    evaluate: bool = option(False, "evaluate the draft in --out-dir (after training if any)")
    eval_only: bool = option(False, "only evaluate, do not build data or train")
    eval_passages: int = option(10)
    eval_prompts: int = option(0, "evaluate on the first N held-out prompts only (0: all 48; fewer for a quick check)")
    eval_new_tokens: int = option(64, "tokens the target writes after each evaluation passage (agreement is measured "
                                      "on them)")
    eval_prompt_tokens: int = option(48, "tokens the target writes after each held-out prompt")
    eval_device: str = option("cpu", "device of the evaluation's fp32 target and draft (cpu: this project's reference; "
                                     "the decode-step cost is that device's)")
    with_lookup: bool = option(False, "--kind feature: also measure the draft with prompt lookup mixed in (LookupMix "
                                      "defaults), on the same continuations")
    seed: int = option(0)
    device: str = option("auto", "auto (CUDA if available), cpu, cuda, cuda:1, ...")
    threads: int = option(1, "torch CPU threads (default 1)")
    time_limit: float = option(0, "seconds for data + training (0 = none): generation stops after --data-share of "
                                    "it (resumable) and the cosine schedule is compressed into the rest")
    data_share: float = option(0.4)
    feature_share: float = option(0.0, "--kind feature with --time-limit: the features stage stops at (--data-share + "
                                       "this) of the limit, shards in a shuffled order (0: it runs to the end)")
    export_reserve: float = option(20.0, "seconds kept back for the export")
    # data: target continuations
    generator: str = option("target", "who writes the continuations: the target, or the --init-from draft (on-policy "
                                      "data; labels always come from the target)", choices=("target", "draft"))
    gen_dtype: str = option("bfloat16", "dtype of the target while it writes continuations (labels: --teacher-dtype)",
                            choices=("bfloat16", "float16", "float32"))
    bundled_prompts: bool = option(True, "continue the bundled prompts of data/distill_prompts.txt", negatable=True)
    self_prompts: int = option(0, "user requests for the target to write itself (sampled after the chat template's "
                                  "user header; held-out topics filtered out), each continued in chat and raw form "
                                  "like the bank")
    max_prompts: int = option(0, "use only the first N bundled prompts (0 = all)")
    samples_per_prompt: int = option(7, "sampled continuations per bundled prompt, besides the greedy one")
    gen_temperature: float = option(0.8, "temperature of the sampled continuations (--temperature before "
                                         "2026-11-28; that option now sets the loss's temperature)")
    gen_top_p: float = option(0.95, "top-p of the sampled continuations")
    gen_batch: int = option(1024, "prompts per generation batch (on a GPU: as many as memory holds; the static KV "
                                  "cache takes 2 x layers x kv-heads x head-dim x (prompt + new tokens) values a "
                                  "row, 23 kB a slot for SmolLM2-135M in bf16)")
    gen_runtime: str = option("auto", "how the data stage's decode loop runs: static (preallocated cache and masks, "
                                      "eager), compiled (its step under torch.compile, fullgraph), graphs (one CUDA "
                                      "graph per view of the cache), dynamic (the growing-cache loop before issue "
                                      "51); auto: graphs on CUDA, static elsewhere. All write the same tokens for a "
                                      "seed",
                              choices=("auto", "dynamic", "static", "compiled", "graphs"))
    gen_new_tokens: int = option(256)
    passages: int = option(16384, "training-text passages to continue with the target")
    passage_batch: int = option(0, "batch size for passages (0 = --gen-batch)")
    passage_min: int = option(32)
    passage_max: int = option(384)
    passage_new_tokens: int = option(192)
    prompt_bank: int = option(0, "generated template x topic prompts (data/distill_topics.txt) to continue")
    text_prompts: int = option(0, "generated chat questions about excerpts of the training text")
    kind_prompts: int = option(0, "generated prompts of the six everyday kinds (instruction, question, story, list, "
                                  "code, dialogue: data/distill_code_tasks.txt for code), each continued in both "
                                  "forms, chat template and raw text")
    bank_samples: int = option(1, "sampled continuations per generated prompt")
    bank_new_tokens: int = option(96)
    chunk_len: int = option(512, "natural-text chunk length")
    # training
    init_from: Optional[str] = option(
        None, "fine-tune an exported draft (its layers and head ids) instead of starting from the target; with "
              "--kind feature: warm-start the feature draft from this independent draft (its layers, norm and head; "
              "the feature input starts at zero)")
    layers: int = option(2)
    head_size: int = option(8192, "output-head ids; with --init-from, a size above the draft's grows its head")
    steps: int = option(3000)
    batch_tokens: int = option(24576)
    micro_tokens: int = option(0, "split each batch into length-sorted micro-batches of at most this many padded "
                                  "positions, gradients accumulated (0 = one batch; a few thousand on CPU)")
    max_len: int = option(576)
    lr: float = option(1e-3)
    min_lr_frac: float = option(0.05)
    warmup: int = option(100)
    weight_decay: float = option(0.0)
    teacher_dtype: str = option("float32", "dtype of the labelling target (bfloat16: much faster on CPUs with AMX, "
                                           "labels may differ at near-ties)", choices=("float32", "bfloat16"))
    alpha: float = option(0.5, "weight of the soft (teacher distribution) loss")
    temperature: float = option(1.0, "the soft loss is KL(p_T || q_T) between the teacher's and the draft's "
                                     "distributions over the head at this temperature (both logits / T, no T^2 "
                                     "factor): train a draft for sampling at T (e.g. 0.7; with --alpha 1 the loss is "
                                     "that KL alone). 1: the default loss. The greedy-token term is unchanged")
    gen_frac: float = option(0.8, "share of batches drawn from target continuations")
    val_rows: int = option(64, "continuation rows held out to report val_acc")
    train_bf16: bool = option(True, negatable=True)
    restart: bool = option(False, "ignore an existing checkpoint")
    log_every: int = option(100)
    ckpt_every: int = option(250)
    # feature draft (--kind feature)
    feature_text_tokens: int = option(400_000, "--kind feature: tokens of plain training text read by the target "
                                               "besides the continuations")
    feature_batch_tokens: int = option(8192, "--kind feature: tokens per target forward while extracting features")
    unroll: int = option(3, "--kind feature: draft steps unrolled in training (step s trains tree depth s)")
    warm_lr_frac: float = option(0.25, "--kind feature with --init-from: learning rate of the seeded layers and head "
                                       "as a fraction of --lr (the new fusion layer learns at the full --lr)")
    reg_weight: float = option(0.5, "--kind feature: weight of the SmoothL1 loss between predicted and target features")
    target_layers: str = option("", "--kind feature: the target's hidden states the draft reads besides its final one "
                                    "(the EAGLE-3 idea), comma-separated layer numbers, e.g. 4,15 (the states after "
                                    "those layers); empty: the final state only")
    part_mb: float = option(0, "--kind feature: write the draft's weights in parts of at most this many MB each "
                               "(e.g. 15, to copy them back from a remote machine; loading joins them); 0: one file")
    export_every_ckpt: bool = option(True, "also write the draft to --out-dir at every checkpoint (marked partial)",
                                     negatable=True)
    # set by the command and the pipeline, not options
    command_line: Optional[str] = internal()  # recorded in the exported draft's metadata
    start_time: Optional[float] = internal()  # time.time() when the run began (for --time-limit)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check the options before any model loads (ValueError naming the option)."""
        _check_ranges(self)
        _check_sources(self)
        _check_model(self)
        _check_choices(self)
        _check_device(self.device)
        _check_device(self.eval_device, "--eval-device")
        _need(self.gen_runtime != "graphs" or self.device.startswith("cuda") or self.device == "auto",
              f"--gen-runtime graphs captures CUDA graphs: it needs --device cuda (got {self.device!r})")

    @classmethod
    def option_fields(cls) -> list[dataclasses.Field]:
        """The fields that are command-line options, in the order ``--help`` lists them."""
        return [f for f in dataclasses.fields(cls) if f.metadata.get("option")]

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace | Any) -> "DistillConfig":
        """A validated config from parsed options (other attributes, e.g. ``func``, are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(ns).items() if k in names})


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _check_ranges(c: DistillConfig) -> None:
    _need(c.steps >= 1, f"--steps must be >= 1 (got {c.steps})")
    _need(c.batch_tokens >= 1, f"--batch-tokens must be >= 1 (got {c.batch_tokens})")
    _need(0.0 <= c.alpha <= 1.0, f"--alpha must be in [0, 1] (got {c.alpha})")
    _need(_positive_finite(c.temperature), f"--temperature must be a finite number > 0: the soft loss's temperature "
                                           f"(1: the default loss; got {c.temperature!r})")
    _need(_positive_finite(c.gen_temperature), f"--gen-temperature must be a finite number > 0 (got {c.gen_temperature!r})")
    _need(0.0 < c.gen_top_p <= 1.0, f"--gen-top-p must be in (0, 1] (got {c.gen_top_p})")
    _need(0.0 <= c.gen_frac <= 1.0, f"--gen-frac must be in [0, 1] (got {c.gen_frac})")
    _need(0.0 < c.data_share < 1.0, f"--data-share must be in (0, 1) (got {c.data_share})")
    _need(c.time_limit >= 0, f"--time-limit must be >= 0 (got {c.time_limit})")
    _need(0.0 <= c.feature_share and c.data_share + c.feature_share < 1.0,
          f"--feature-share must be >= 0 with --data-share + --feature-share < 1 (got {c.feature_share}, "
          f"{c.data_share})")
    _need(c.eval_prompts >= 0, f"--eval-prompts must be >= 0 (got {c.eval_prompts})")
    _need(c.eval_new_tokens >= 1 and c.eval_prompt_tokens >= 1, "--eval-new-tokens and --eval-prompt-tokens must be "
          f">= 1 (got {c.eval_new_tokens}, {c.eval_prompt_tokens})")
    _need(c.part_mb == 0 or c.part_mb >= 1, f"--part-mb must be 0 (one file) or >= 1 (got {c.part_mb})")
    _need(1 <= c.passage_min <= c.passage_max,
          f"need 1 <= --passage-min <= --passage-max (got {c.passage_min}, {c.passage_max})")
    _need(c.prompt_bank >= 0 and c.text_prompts >= 0 and c.bank_samples >= 0 and c.self_prompts >= 0
          and c.kind_prompts >= 0, "--prompt-bank, --text-prompts, --kind-prompts, --self-prompts and --bank-samples "
          f"must be >= 0 (got {c.prompt_bank}, {c.text_prompts}, {c.kind_prompts}, {c.self_prompts}, {c.bank_samples})")


def _positive_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check_model(c: DistillConfig) -> None:
    _need(c.layers >= 1, f"--layers must be >= 1 (got {c.layers})")
    _need(c.head_size >= 4, f"--head-size must be >= 4 (got {c.head_size})")
    _need(c.max_len >= 2, f"--max-len must be >= 2 (got {c.max_len})")
    _need(c.micro_tokens >= 0, f"--micro-tokens must be >= 0 (got {c.micro_tokens})")
    _need(c.unroll >= 1, f"--unroll must be >= 1 (got {c.unroll})")
    _need(c.reg_weight >= 0, f"--reg-weight must be >= 0 (got {c.reg_weight})")
    _need(0 < c.warm_lr_frac <= 1, f"--warm-lr-frac must be in (0, 1] (got {c.warm_lr_frac})")
    _need(c.feature_text_tokens >= 0, f"--feature-text-tokens must be >= 0 (got {c.feature_text_tokens})")
    _need(c.feature_batch_tokens >= 1, f"--feature-batch-tokens must be >= 1 (got {c.feature_batch_tokens})")
    _need(c.kind != "feature" or c.generator != "draft", "--kind feature does not support --generator draft")
    _need(c.kind == "feature" or not c.with_lookup, "--with-lookup measures a feature draft: add --kind feature")
    _need(c.kind == "feature" or not c.target_layers, "--target-layers is for a feature draft: add --kind feature")
    try:
        layers = [int(s) for s in c.target_layers.split(",") if s.strip()]
    except ValueError:
        layers = [0]
    _need(all(i >= 1 for i in layers) and layers == sorted(set(layers)),
          f"--target-layers must be increasing layer numbers >= 1, comma-separated (got {c.target_layers!r})")


def _check_choices(c: DistillConfig) -> None:
    for f in DistillConfig.option_fields():
        choices = f.metadata["choices"]
        value = getattr(c, f.name)
        _need(choices is None or value in choices,
              f"--{f.name.replace('_', '-')} must be one of {', '.join(choices or ())} (got {value!r})")


def _check_sources(c: DistillConfig) -> None:
    _need(not (c.generator == "draft" and not c.init_from),
          "--generator draft needs --init-from (the draft that writes the continuations)")
    # torch: only once a config is built
    from dynatree_core.drafters.feature_draft import FEATURE_CONFIG_FILE, is_feature_draft_dir

    feature_init = c.kind == "feature" and c.init_from and is_feature_draft_dir(c.init_from)
    _need(not c.init_from or feature_init or (Path(c.init_from) / "draft_config.json").is_file(),
          f"--init-from {c.init_from}: no exported draft there (draft_config.json missing"
          + (f", nor a feature draft's {FEATURE_CONFIG_FILE}" if c.kind == "feature" else "") + ")")


def _check_device(device: str, name: str = "--device") -> None:
    from dynatree_core.pairs.pair import resolve_device  # torch: only once a config is built, never for --help

    try:
        resolve_device(device)
    except (ValueError, RuntimeError) as e:  # torch.device("banana") raises RuntimeError
        raise ValueError(f"{name} {device!r}: {e} (use auto, cpu, cuda or cuda:N)") from None
