"""Reproducible distillation of the default drafts from the SmolLM2-135M-Instruct target
(``dynatree distill`` / ``python -m dynatree_core.distill``; docs/drafters.md, "Distillation").

Stages, each resumable under ``--work-dir``: **data** (token sequences: target continuations of
bundled, generated and self-written prompts and of training-text passages, plus chunks of the
training text; never the evaluation text), **train** (online: every batch labelled by the target as
it is drawn), **export** (fp16 weights into ``dynatree_core/assets/``) and **evaluate** (agreement
with the fp32 target's greedy tokens on held-out prompts and passages, and the step cost).
``--kind feature`` trains the feature draft instead (:mod:`.feature`). Every option, its default and
check is a field of :class:`DistillConfig`.

Modules: ``config`` and ``cli`` (torch-free), ``prompts``, ``decode`` (sampling loops), ``static_decode`` (the
data stage's static-shape decode loop), ``data``, ``report`` (the data mix and plan vs actual of a run),
``training`` (the independent draft), ``evaluation``, ``feature``, ``pipeline``
(:func:`run_distill`), ``divergence`` (TV and coupled agreement under sampling), ``lookup_fit`` (the
lookup mix's pseudo-counts), ``runtime`` (shared torch helpers). Names are re-exported lazily, so
``dynatree_core.distill.cli`` and ``.config`` load without torch. Imports the engine, pairs,
drafters, runtime and policy; independent of :mod:`dynatree_core.bench`.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "config": ("DEFAULT_WORK_DIR", "DistillConfig", "REPO_ROOT"),
    "cli": ("DESCRIPTION", "add_distill_args", "add_distill_parser", "check_distill_args", "main"),
    "prompts": ("CHAT_TEMPLATES", "CODE_TASKS_FILE", "EVAL_PROMPTS", "HELD_OUT_TOPIC_WORDS", "KIND_TEMPLATES",
                "N_EVAL_PROMPTS_V1", "PROMPTS_FILE", "RAW_TEMPLATES", "TEXT_TEMPLATES", "TOPICS_FILE", "chat_ids",
                "kind_bank", "mentions_held_out_topic", "prompt_bank", "raw_ids", "read_code_tasks", "read_prompts",
                "read_topics", "user_turn_prefix"),
    "decode": ("decode", "eos_ids", "self_prompts", "_continue", "_decode_equal_length"),
    "static_decode": ("GEN_RUNTIMES", "StaticWriter", "kv_bytes", "pick", "resolve_gen_runtime"),
    "report": ("data_mix", "plan_vs_actual", "stage_plan"),
    "data": ("FORBIDDEN_TRAIN_NAMES", "SeqPools", "build_data", "find_data_dir", "seq_rows", "training_text_files",
             "_length_batches", "_save_seqs"),
    "training": ("cosine_lr", "export_checkpoint", "loss_temperature", "tempered_kl", "train", "_backward_batch",
                 "_micro_batches", "_teacher_targets"),
    "evaluation": ("EVAL_SCHEMA_VERSION", "bootstrap_ci", "evaluate_draft", "pooled_rate", "_greedy_continue",
                   "_step_cost"),
    "feature": ("FeatureRows", "build_features", "evaluate_feature_draft", "train_feature", "unrolled_forward"),
    "pipeline": ("run_distill",),
    "divergence": ("PairScores", "continuations", "coupled_agreement_rows", "measure", "pair_scores", "position_stats"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = sorted(n for n in _WHERE if not n.startswith("_"))


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{mod}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
