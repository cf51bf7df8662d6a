"""Everyday prompts: the benchmark's third dataset, what users type (torch-free).

72 short prompts written for this project (``dynatree_core/data/excerpts/prompts.jsonl``; the
``SOURCES-prompts.md`` beside it says how and under which license), 12 of each kind in :data:`PROMPT_KINDS`, none
about a topic the distillation prompts, topics or held-out evaluation prompts mention (a test
checks it). Unlike the passage datasets, a prompt is used whole: it is not cut from a longer text
and it is shorter than L_max (L_max only caps it, keeping its last tokens).

A prompt is given to the target in one of :data:`PROMPT_FORMS`:

* ``chat``: the tokenizer's chat template around one user message, with the assistant header
  after it (``add_generation_prompt=True``): what an instruct model's users send;
* ``raw``: the text itself, tokenized as the passages are.

The order a run takes them in is seeded and balanced: the kinds in turn (their order shuffled),
each kind's prompts shuffled, so any N prompts cover the kinds as evenly as N allows.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, TypeVar

from dynatree_core.paths import PACKAGE_DATA

#: the kinds of prompt, each recorded per prompt
PROMPT_KINDS: tuple[str, ...] = ("instruction", "question", "story", "list", "code", "dialogue")
#: how a prompt reaches the target (``--prompt-form``); the first is the default
PROMPT_FORMS: tuple[str, ...] = ("chat", "raw")
#: the bundled file's format (a header line, then one prompt per line)
PROMPTS_FORMAT = "dynatree-prompts/1"
PROMPTS_FILE = PACKAGE_DATA / "excerpts" / "prompts.jsonl"
K = TypeVar("K")


@dataclass(frozen=True)
class EverydayPrompt:
    """One prompt: a stable ``id`` (``<kind>-NN``), its ``kind``, the ``topic`` it is about (a few
    words the text contains; the overlap test reads them) and the ``text`` a user would type."""

    id: str
    kind: str
    topic: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in PROMPT_KINDS:
            raise ValueError(f"prompt {self.id!r}: kind must be one of {', '.join(PROMPT_KINDS)}, got {self.kind!r}")
        if not self.text.strip():
            raise ValueError(f"prompt {self.id!r}: empty text")


def check_form(form: str) -> str:
    """``form`` if it is one of :data:`PROMPT_FORMS`; else a ValueError naming ``--prompt-form``."""
    if form not in PROMPT_FORMS:
        raise ValueError(f"unknown --prompt-form {form!r}; choose from {', '.join(PROMPT_FORMS)}")
    return form


def read_everyday(path: Path = PROMPTS_FILE) -> list[EverydayPrompt]:
    """The bundled prompts, in file order (validated: format, kinds, unique ids)."""
    lines = [x for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
    header = json.loads(lines[0])
    if header.get("format") != PROMPTS_FORMAT:
        raise ValueError(f"{path} is not a {PROMPTS_FORMAT} file (header {header})")
    prompts = [EverydayPrompt(**json.loads(x)) for x in lines[1:]]
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate prompt ids")
    return prompts


def balanced_order(prompts: Sequence[K], seed: int) -> list[K]:
    """Every prompt (anything with a ``kind``: an :class:`EverydayPrompt`, a corpus document) once,
    in a seeded order that takes the kinds in turn (see the module docstring)."""
    rng = random.Random(f"{seed}:prompts")
    kinds = [k for k in PROMPT_KINDS if any(p.kind == k for p in prompts)]
    rng.shuffle(kinds)
    pools = {k: rng.sample([p for p in prompts if p.kind == k], sum(p.kind == k for p in prompts)) for k in kinds}
    out: list[K] = []
    while any(pools.values()):
        for k in kinds:
            if pools[k]:
                out.append(pools[k].pop(0))
    return out


def form_ids(tokenizer: Any, text: str, form: str) -> list[int]:
    """Token ids of ``text`` in ``form``: the chat template around one user message with the
    assistant header after it, or the text as the passages are tokenized (``tokenizer(text)``)."""
    check_form(form)
    if form == "raw":
        return list(tokenizer(text)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"--prompt-form chat needs a tokenizer with a chat template; "
                         f"{type(tokenizer).__name__} has none (use --prompt-form raw)")
    out = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    if hasattr(out, "keys"):  # a BatchEncoding in newer transformers
        out = out["input_ids"]
    return [int(t) for t in out]
