"""Prompts: the bundled training prompts, the generated prompt bank, the held-out evaluation prompts
and the token forms (raw text, chat template) a prompt is continued in (torch-free)."""

from __future__ import annotations

import random
from pathlib import Path

from dynatree_core.paths import PACKAGE_DATA as DATA
from dynatree_core.paths import PROMPTS_FILE

TOPICS_FILE = DATA / "distill_topics.txt"

# Held-out evaluation prompts: topics deliberately absent from distill_prompts.txt.
EVAL_PROMPTS = [
    "Write a short paragraph about volcanoes.",
    "Explain the rules of chess to a beginner.",
    "What are three interesting facts about beekeeping?",
    "Describe how to fold a paper crane in origami.",
    "Give a brief history of submarines.",
    "Why is jazz music important to American culture?",
    "How do glaciers shape mountain valleys?",
    "Explain public-key cryptography in simple terms.",
    "Tell me a short story about a lighthouse keeper.",
    "Describe the Japanese tea ceremony.",
    "What was the Silk Road and why did it matter?",
    "Why are coral reefs in danger?",
    "What should a beginner know about marathon running?",
    "How did the printing press change Europe?",
    "Explain black holes to a ten-year-old.",
    "How do you bake sourdough bread at home?",
    "The history of windmills",
    "Many people are surprised to learn that penguins",
    "An introduction to Roman aqueducts:",
    "What makes a good video game design?",
    "Describe the sound of a violin.",
    "How do tornadoes form?",
    "How do vaccines train the immune system?",
    "Chapter 1. The bonsai gardener",
    # a second set of 24 topics (added when 24 prompts gave a +-2-point interval: too coarse to rank drafts)
    "Write a short paragraph about hedgehogs.",
    "Explain how a trampoline works.",
    "What are three interesting facts about the saxophone?",
    "Describe how to build an igloo.",
    "Give a brief history of parachutes.",
    "Why do kangaroos hop instead of walking?",
    "How do cacti survive in the desert?",
    "Explain the rules of volleyball to a beginner.",
    "Tell me a short story about a young girl learning falconry.",
    "Describe the history of stained glass windows.",
    "Why do fireflies glow?",
    "What should a beginner know about paddling a kayak?",
    "How did medieval armies use the catapult?",
    "Explain how a geyser erupts to a ten-year-old.",
    "How do you make a patchwork quilt at home?",
    "What makes a good crossword puzzle?",
    "The history of the accordion",
    "Many people are surprised to learn that flamingos",
    "An introduction to the gondolas of Venice:",
    "Chapter 1. The tattoo artist",
    "Before clocks were common, the sundial",
    "Jellyfish are",
    "In the spring, the tulip fields of",
    "Every snowflake",
]


# The first 24 entries: the set every draft before 2026-11-26 10:00 UTC was measured on.
N_EVAL_PROMPTS_V1 = 24


# One word (stem) per held-out topic: every EVAL_PROMPTS entry mentions one (a test checks it).
# No training prompt may contain any of them - bundled, template x topic, or self-written ones.
HELD_OUT_TOPIC_WORDS = (
    "volcano", "chess", "beekeep", "origami", "submarine", "jazz", "glacier", "cryptograph", "lighthouse",
    "tea ceremony", "silk road", "coral", "marathon", "printing press", "black hole", "sourdough", "windmill",
    "penguin", "aqueduct", "video game", "violin", "tornado", "vaccin", "bonsai",
    "hedgehog", "trampoline", "saxophone", "igloo", "parachute", "kangaroo", "cact", "volleyball", "falconry",
    "stained glass", "firefl", "kayak", "catapult", "geyser", "quilt", "crossword", "accordion", "flamingo",
    "gondola", "tattoo", "sundial", "jellyfish", "tulip", "snowflake",
)


def mentions_held_out_topic(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in HELD_OUT_TOPIC_WORDS)


def read_prompts(path: Path = PROMPTS_FILE) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def read_topics(path: Path = TOPICS_FILE) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


# Templates for the generated prompt bank: instruction-style ones go through the chat template,
# raw ones are continued as plain text (both forms occur in real use and in the evaluation).
CHAT_TEMPLATES = [
    "Write a short paragraph about {t}.", "Explain {t} in simple terms.", "Give a brief history of {t}.",
    "What are three interesting facts about {t}?", "Tell me a short story about {t}.", "Describe {t}.",
    "Why is {t} important?", "How does {t} work?", "What should a beginner know about {t}?",
    "Explain {t} to a ten-year-old.", "What are the advantages and disadvantages of {t}?",
    "Write a poem about {t}.", "List five facts about {t}.", "How has {t} changed over time?",
    "Write an encyclopedia-style introduction to {t}.", "What is the most surprising thing about {t}?",
    "Compare {t} with something similar.", "Give me some tips about {t}.", "What do people get wrong about {t}?",
    "Write a short dialogue between two friends about {t}.",
]


RAW_TEMPLATES = [
    "The history of {t}", "An introduction to {t}:", "Many people are surprised to learn that {t}",
    "Chapter 1. {T}", "In this article we discuss {t}.", "{T} is", "Here are some facts about {t}:",
    "Q: What is {t}?\nA:",
]


TEXT_TEMPLATES = [
    "Summarize the following text:\n{s}", "Explain what this passage means:\n{s}",
    "Continue this text:\n{s}", "Rewrite this in simple words:\n{s}", "What is this passage about?\n{s}",
]


CODE_TASKS_FILE = DATA / "distill_code_tasks.txt"

#: Templates for the kind bank (:func:`kind_bank`): the six kinds of the benchmark's everyday prompts
#: (``bench.everyday.PROMPT_KINDS``), so the draft learns to answer what users type. ``{t}`` is a topic of
#: ``distill_topics.txt``, ``{c}`` a task of ``distill_code_tasks.txt`` ("a function that {c}"). Each is
#: continued in both forms, the chat template and raw text (chat answers were the draft's weakest:
#: docs/bench/2026-11-28-everyday-prompts).
KIND_TEMPLATES: dict[str, tuple[str, ...]] = {
    "instruction": (
        "Write a short note to a friend recommending a book about {t}.", "Explain how to get started with {t}.",
        "Write a paragraph persuading a student to learn about {t}.", "Give step-by-step advice for studying {t}.",
        "Write an email to a colleague summarizing what you learned about {t}.",
        "Write a short speech for a school assembly about {t}.", "Describe {t} in exactly three sentences."),
    "question": (
        "What is {t}?", "Why do people find {t} interesting?", "How does {t} affect everyday life?",
        "What is the difference between {t} and something similar?", "Who first studied {t}, and what did they find?",
        "Why should anyone care about {t} today?", "What would happen if {t} suddenly disappeared?"),
    "story": (
        "Write a short story about {t}.", "Tell a bedtime story about {t}.",
        "Once upon a time, a curious child discovered {t}.", "Write a funny story involving {t}.",
        "Tell a story about an old woman who knew everything about {t}.",
        "The day our town first heard about {t}, nobody expected"),
    "list": (
        "List five facts about {t}.", "Give me a checklist for learning about {t}.",
        "Name eight things people associate with {t}.", "List the pros and cons of {t}.",
        "List seven questions a student might ask about {t}.", "Make a numbered list of the key ideas of {t}."),
    "code": (
        "Write a Python function that {c}.", "Write a Python program that {c}.",
        "Write a function, with a docstring and an example, that {c}.", "How do I write a function that {c}?",
        "Show me a short Python example of a function that {c}, and explain it.",
        "# A Python function that {c}\ndef"),
    "dialogue": (
        "Write a dialogue between a teacher and a student about {t}.",
        "Write a conversation between two friends who disagree about {t}.",
        "Write a short interview with an expert on {t}.",
        "Student: Can you tell me about {t}?\nTeacher:",
        "Write a phone call between a journalist and a scientist about {t}."),
}


def read_code_tasks(path: Path = CODE_TASKS_FILE) -> list[str]:
    return read_topics(path)


def kind_bank(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` generated prompts ``(kind, text)``, as many of each kind of :data:`KIND_TEMPLATES` as ``n``
    allows (kinds take turns), each a random template filled with a topic (a task for code).
    Deterministic for a seed; the caller continues each in both forms."""
    rng = random.Random(seed + 23)
    topics, tasks = read_topics(), read_code_tasks()
    kinds = list(KIND_TEMPLATES)
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        t = rng.choice(topics)
        out.append((kind, rng.choice(KIND_TEMPLATES[kind]).format(t=t, c=rng.choice(tasks))))
    return out


def prompt_bank(n_topic: int, n_text: int, tok, streams: list[list[int]], seed: int) -> list[tuple[str, bool]]:
    """Generated training prompts ``(text, use_chat_template)``: ``n_topic`` template x topic
    combinations (``distill_topics.txt``) and ``n_text`` questions about short excerpts of the
    training text.  Deterministic for a seed."""
    rng = random.Random(seed + 11)
    topics = read_topics()
    combos = [(tpl, t, True) for tpl in CHAT_TEMPLATES for t in topics] + \
             [(tpl, t, False) for tpl in RAW_TEMPLATES for t in topics]
    rng.shuffle(combos)
    out = []
    for tpl, t, chat in combos[:n_topic]:
        out.append((tpl.format(t=t, T=t[:1].upper() + t[1:]), chat))
    weights = [len(x) for x in streams]
    for _ in range(n_text):
        s = rng.choices(streams, weights=weights)[0]
        n = rng.randint(24, 96)
        if len(s) <= n + 1:
            continue
        st = rng.randrange(0, len(s) - n)
        excerpt = tok.decode(s[st:st + n]).strip()
        out.append((rng.choice(TEXT_TEMPLATES).format(s=excerpt), True))
    return out


def raw_ids(tok, text: str) -> list[int]:
    """``text`` as plain token ids (no BOS/special tokens): the raw-text form of a prompt."""
    return tok(text, add_special_tokens=False)["input_ids"]


def chat_ids(tok, prompt: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  tokenize=True)
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def user_turn_prefix(tok) -> list[int]:
    """Token ids of the chat template up to where the user's message begins (system turn included)."""
    marker = "<<DYNATREE-USER-MESSAGE>>"
    text = tok.apply_chat_template([{"role": "user", "content": marker}], add_generation_prompt=False,
                                   tokenize=False)
    return raw_ids(tok, text.split(marker)[0])
