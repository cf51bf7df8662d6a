"""Reproducible distillation of the default draft from the SmolLM2-135M-Instruct target.

Pipeline (``dynatree distill`` / ``python -m dynatree_core.distill``):

1. **data** - token sequences, written to ``<work-dir>/seqs`` (resumable, one shard per job):

   * *prompts*: continuations of the bundled prompt set
     (``dynatree_core/data/distill_prompts.txt``), as raw text and in the chat template;
     one greedy continuation plus ``--samples-per-prompt`` sampled ones each;
   * *bank*: template x topic prompts (``--prompt-bank``) and questions about training-text
     excerpts (``--text-prompts``);
   * *self-written prompts* (``--self-prompts N``): user requests the target writes itself when
     sampled right after the chat template's user header, held-out evaluation topics filtered
     out; continued in chat form and as raw text, in equal-length (padding-free) batches;
   * *passages*: greedy continuations of random windows of the training text;
   * with ``--generator draft --init-from DIR`` the continuations are written by an existing
     draft instead (on-policy data: the contexts the draft's own proposals lead into);
   * *text*: fixed-length chunks of the training text itself
     (``wikitext-2-raw/wiki.valid.raw`` and ``gutenberg-train/*.txt``; never
     ``wiki.test.raw`` or ``pg19/``, which are evaluation text).
2. **train** - *online* distillation: every batch is labelled by the target (fp32 unless
   ``--teacher-dtype bfloat16``) as it is drawn (its greedy token over the full vocabulary and
   its distribution over the head ids), so no labels are stored and every position of every sequence is a training position.
   The 2-layer student starts from the target (layers 0-1, final norm, head rows of the H
   most frequent target tokens) and minimises
   ``alpha * KL(teacher head distribution || draft) + (1-alpha) * CE(greedy token)`` with AdamW and a
   cosine schedule (``--temperature T``: the KL between both distributions at T, to train a draft
   for sampling at T; 1 by default); seeded; checkpoints under ``<work-dir>/ckpt`` (resumable).  With
   ``--time-limit`` the schedule is compressed to fit (the export records the steps done).
   ``--init-from DIR`` fine-tunes an exported draft instead; a ``--head-size`` above its head's
   grows the head by the ids the training data uses most that it lacks.
3. **export** - fp16 weights to ``dynatree_core/assets/smollm2-135m-draft/``.
4. **evaluate** (``--evaluate``) - on CPU in fp32: agreement with the target's greedy tokens
   on 48 held-out prompts (one topic each, never in any training prompt; a bootstrap interval
   over prompts) and on continuations of ``wiki.test.raw`` / ``pg19`` passages,
   decode-step cost ratio, shipped size and pair load time.

``--kind feature`` trains the *feature* draft instead (:mod:`dynatree_core.distill.feature`): the
same data stage, then the target's hidden states are stored once and a small head learns to read
them (``bash scripts/distill_gpu.sh``: the shipped one's recipe, 9 minutes on one GPU, the draft written
in parts of at most 15 MB; ``bash scripts/distill_feature.sh``: 90 minutes on a 2-core CPU).
``--target-layers`` has the draft read a few lower target layers besides the last (EAGLE-3).

Modules: ``config`` (:class:`DistillConfig`: every option, its default, help and check; torch-free),
``cli`` (the command line generated from it; torch-free), ``prompts`` (prompt banks, held-out
evaluation prompts), ``decode`` (sampling loops), ``data`` (the data stage, shards, training pools),
``training`` (train + export of the independent draft), ``evaluation`` (agreement, bootstrap, step
cost), ``feature`` (the feature draft's stages and evaluation), ``pipeline`` (:func:`run_distill`),
``divergence`` (TV and coupled agreement of a draft with the target under sampling).
The names below are re-exported lazily, so importing ``dynatree_core.distill.cli`` or ``.config``
does not load torch. Imports the engine, pairs, drafters, runtime and policy; independent of
:mod:`dynatree_core.bench`.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "config": ("DEFAULT_WORK_DIR", "DistillConfig", "REPO_ROOT"),
    "cli": ("DESCRIPTION", "add_distill_args", "add_distill_parser", "check_distill_args", "main"),
    "prompts": ("CHAT_TEMPLATES", "EVAL_PROMPTS", "HELD_OUT_TOPIC_WORDS", "N_EVAL_PROMPTS_V1", "PROMPTS_FILE",
                "RAW_TEMPLATES", "TEXT_TEMPLATES", "TOPICS_FILE", "chat_ids", "mentions_held_out_topic",
                "prompt_bank", "raw_ids", "read_prompts", "read_topics", "user_turn_prefix"),
    "decode": ("eos_ids", "self_prompts", "_continue", "_decode_equal_length"),
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
