"""The benchmark tests' shared parts: a tiny WikiText-2 / PG-19 data directory, the CLI's bench arguments,
hand-made result rows, deterministic shard timings."""

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


def row(dataset, label, i, tps, warmup=False, method=None, **extra):
    return {"dataset": dataset, "label": label, "method": method or label.split(":")[0], "max_new_tokens": 8,
            "max_prompt_len": 16, "prompt_index": i, "warmup": warmup, "tokens_per_s": tps,
            "ttft_s": 0.1, "tpot_s": 0.01, "acceptance_rate": None if label == "ar" else 0.5,
            "tokens_per_iteration": 2.0, "mean_accepted_length": 1.0, "iterations": 4,
            "target_forwards_per_token": 0.5, "draft_forwards_per_token": 1.0, "draft_forwards_per_iteration": 2.0,
            "peak_memory_bytes": 100, "new_tokens": 8, "prompt_tokens": 16, "run_id": "r", **extra}


ROWS = ([row("wikitext2", "ar", i, t, warmup=i == 0) for i, t in enumerate([1000.0, 10.0, 12.0, 14.0])]
        + [row("wikitext2", "dynatree", i, t, warmup=i == 0) for i, t in enumerate([1.0, 20.0, 30.0, 40.0])]
        + [row("pg19", "ar", i, t, warmup=i == 0) for i, t in enumerate([5.0, 5.0, 5.0, 5.0])]
        + [row("pg19", "dynatree", i, t, warmup=i == 0) for i, t in enumerate([9.0, 10.0, 10.0, 10.0])])


TINY = ["--target", "tiny-llama", "--no-progress"]



def bench_args(data_dir, out, *extra, methods="ar,dynatree"):
    # the passages only: the main job's three datasets run once, in tests/test_bench_prompts.py
    return ["bench", *TINY, "--data-dir", str(data_dir), "--dataset", "wikitext2,pg19", "--out", str(out),
            "--num-prompts", "2", "--warmup", "1",
            "--max-new-tokens", "4", "--max-prompt-len", "16", "--methods", methods, *extra]


#: row fields that are measurements of time (or of who ran the row): everything else must match
TIMING = {"tokens_per_s", "wall_time_s", "ttft_s", "tpot_s", "prefill_time_s", "draft_time_s", "verify_time_s",
          "forward_time_s", "engine_overhead_ms", "commit_time_s", "draft_host_s", "verify_host_s",
          "peak_memory_bytes", "run_id", "host", "worker", "device"}


def is_timing(key: str) -> bool:
    """A field measured by a clock: named in TIMING or, so that a new clock column cannot make two
    identical runs differ, any name in seconds or milliseconds."""
    return key in TIMING or key.endswith(("_s", "_ms"))


def deterministic(rows):
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in rows]
