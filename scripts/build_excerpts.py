"""Write the bundled evaluation excerpts: the passages a seed-0 benchmark draws from the full files.

    python scripts/build_excerpts.py --data-dir ../shared/data

For each dataset, the benchmark's prompt selection visits candidate passages in a seeded order
and keeps the first N that reach L_max tokens. This script replays that walk on the full test
files with the embedded pair's tokenizer for the protocols people run (the quick CPU protocol and
the paper's, N up to --max-prompts), and stores every candidate the walk visits, plus a margin,
cut to the longest window a selection reads (the paper's L_max). A fresh clone without the data
directory then selects exactly the same prompts (``dynatree_core.bench.data.bundled_corpus``).

Output: ``dynatree_core/data/excerpts/<dataset>.jsonl`` (a header line, then one passage per line
with its provenance in the full file) and a table per dataset in ``SOURCES.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from dynatree_core.bench.data import (BUNDLED_DIR, EXCERPTS_FORMAT, PAPER_MAX_PROMPT_LEN, PASSAGE_DATASETS,
                                      candidate_passages, candidate_window, hf_tokenize, load_corpus, select_prompts)

QUICK_L_MAX = 256  # the CLI's default protocol


def visited(corpus, tokenize, n: int, l_max: int, seed: int, pool: list) -> int:
    """How many candidates a selection of n prompts of l_max tokens visits (index of its last pick + 1)."""
    prompts, warnings = select_prompts(corpus, tokenize, n, l_max, seed=seed)
    if warnings:
        raise SystemExit(f"{corpus.dataset}: the full files do not give {n} prompts of {l_max} tokens: {warnings}")
    where = {(d.source, d.offset + s): i for i, (d, s) in enumerate(pool)}
    return 1 + max(where[(p.source, p.char_start)] for p in prompts)


SOURCES_INTRO = """# Bundled evaluation excerpts

Shipped so that `dynatree bench` on a fresh offline clone benchmarks on **exactly the prompts the
full test files give** (`--data-dir ../shared/data`), and its numbers reproduce the README's.
They are **evaluation text, never training text**.

How: the benchmark's prompt selection walks candidate passages in a seeded order and keeps the
first N that reach L_max tokens. `scripts/build_excerpts.py --data-dir ../shared/data` replays
that walk on the full files with the embedded pair's tokenizer (seed 0; N up to 12; L_max 256,
the quick protocol, and the paper's 800 / 1000), and stores every passage it visits plus a margin
of 6, each cut to 8,000 characters (the longest window a selection reads, L_max 1000 x 8), in the
order visited. The loader (`dynatree_core.bench.data.bundled_corpus`) replays that order for
`--seed 0`, so the selected prompts, their text and their provenance (source file, character
offset in the **full** file) are identical to a run on the full files. Another seed draws from
these passages only (a warning says so); another tokenizer may skip a passage the walk did not
(then a warning names any shortfall).

Each `<dataset>.jsonl` has a header line (format, seed, window, SHA-1 of each full source file)
and one passage per line: `source`, `doc_index`, `title`, `char_start` (in the full file), `text`.
"""
ABOUT = {
    "wikitext2": ("WikiText-2 raw, test split (`wikitext-2-raw/wiki.test.raw`)",
                  'CC BY-SA 3.0 (Salesforce); Merity et al. 2016, "Pointer Sentinel Mixture Models".'),
    "pg19": ("PG-19 test books (`pg19/*.txt`; the project's Gutenberg copies, header and footer removed, LF line "
             "endings, not byte-identical PG-19 files: see `shared/data/SOURCES.md`)",
             "the books are public domain in the US; PG-19 is Apache-2.0."),
}


def write_sources(out: Path) -> None:
    """SOURCES.md: how the excerpts were made and one table row per stored passage."""
    parts = [SOURCES_INTRO]
    for ds in PASSAGE_DATASETS:
        lines = (out / f"{ds}.jsonl").read_text(encoding="utf-8").splitlines()
        header, rows = json.loads(lines[0]), [json.loads(x) for x in lines[1:]]
        title, lic = ABOUT[ds]
        parts.append(f"\n## {ds}.jsonl: {len(rows)} passages of {title}\n\nSource SHA-1: "
                     + ", ".join(f"`{s}` {v}" for s, v in header["source_sha1"].items()) + f". License: {lic}\n\n")
        parts.append("| # | source | title | char start | chars |\n|---|---|---|---|---|\n")
        for i, r in enumerate(rows):
            parts.append(f"| {i} | {r['source'].split('/')[-1]} | {r['title'][:48]} | {r['char_start']} | "
                         f"{len(r['text'])} |\n")
    (out / "SOURCES.md").write_text("".join(parts), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True, help="the full data (wikitext-2-raw/wiki.test.raw, pg19/*.txt)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-prompts", type=int, default=12, help="the largest N the excerpts must serve (default 12)")
    ap.add_argument("--margin", type=int, default=6, help="extra candidates stored past the last one visited")
    ap.add_argument("--out", default=str(BUNDLED_DIR))
    args = ap.parse_args(argv)

    from dynatree_core.pairs.default_pair import load_target

    _, tok = load_target()
    tokenize = hf_tokenize(tok)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    window = candidate_window(max(PAPER_MAX_PROMPT_LEN[ds] for ds in PASSAGE_DATASETS))
    for ds in PASSAGE_DATASETS:
        corpus = load_corpus(ds, args.data_dir)
        pool = candidate_passages(corpus, args.seed, 10_000)
        need = max(visited(corpus, tokenize, args.max_prompts, l_max, args.seed, pool)
                   for l_max in (QUICK_L_MAX, PAPER_MAX_PROMPT_LEN[ds]))
        keep = pool[:need + args.margin]
        sources = sorted({d.source for d, _ in keep})
        header = {"format": EXCERPTS_FORMAT, "dataset": ds, "seed": args.seed, "window_chars": window,
                  "max_prompts": args.max_prompts, "l_max_served": [QUICK_L_MAX, PAPER_MAX_PROMPT_LEN[ds]],
                  "source_sha1": {s: hashlib.sha1((Path(args.data_dir) / s).read_bytes()).hexdigest() for s in sources}}
        lines = [json.dumps(header, ensure_ascii=False)]
        for d, s in keep:
            lines.append(json.dumps({"source": d.source, "doc_index": d.doc_index, "title": d.title,
                                     "char_start": d.offset + s, "text": d.text[s:s + window]}, ensure_ascii=False))
        path = out / f"{ds}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{ds}: {len(keep)} passages ({need} visited by the largest selection), {path.stat().st_size:,} bytes",
              file=sys.stderr)
    write_sources(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
