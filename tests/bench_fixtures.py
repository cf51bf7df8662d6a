"""Local fixture text for the benchmark tests: a tiny WikiText-2 / PG-19 data directory."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("the river ran past a quiet town where people sold bread and fish , and the old mill "
         "turned slowly while children played near the bridge . in winter the water froze").split()


def sentences(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(12)) + " ." for _ in range(n))


def wikitext_text(n_articles: int = 6, tiny: int = 1) -> str:
    """Raw WikiText layout: `` = Title = `` articles with `` = = Section = = `` subsections."""
    parts = [" \n"]
    for i in range(n_articles):
        parts += [f" = Article {i} = \n", " \n", f" {sentences(i, 12)} \n", " \n",
                  f" = = Section {i} = = \n", " \n", f" {sentences(100 + i, 12)} \n", " \n"]
    for j in range(tiny):
        parts += [f" = Stub {j} = \n", " \n", " too short . \n", " \n"]
    return "".join(parts)


def pg19_book(seed: int, paragraphs: int = 40) -> str:
    return "Produced by nobody\n\n\n\n" + "\n\n".join(sentences(seed * 1000 + k, 3) for k in range(paragraphs)) + "\n"


def make_data_dir(root: Path) -> Path:
    """``root/wikitext-2-raw/wiki.test.raw`` and ``root/pg19/{a,b}.txt``; returns root."""
    (root / "wikitext-2-raw").mkdir(parents=True, exist_ok=True)
    (root / "wikitext-2-raw" / "wiki.test.raw").write_text(wikitext_text(), encoding="utf-8")
    (root / "pg19").mkdir(exist_ok=True)
    for i, name in enumerate(("book_a.txt", "book_b.txt")):
        (root / "pg19" / name).write_text(pg19_book(i), encoding="utf-8")
    return root


def spy_on_history(monkeypatch) -> list:
    """Record, for every DecodingRun the protocol steps to its end, (the history state it was
    given, the history state it ended with); returns the list it appends to."""
    import dynatree_core.engine.api as api

    seen: list = []

    class Spy(api.DecodingRun):  # the protocol steps a DecodingRun (its records feed the oracle)
        def __init__(self, *args, history=None, **kwargs):
            super().__init__(*args, history=history, **kwargs)
            self.given = history

        def __next__(self):
            try:
                return super().__next__()
            except StopIteration:
                seen.append((self.given, self.result.history_state))
                raise

    monkeypatch.setattr(api, "DecodingRun", Spy)  # what iterate() constructs
    return seen
