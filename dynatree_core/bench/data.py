"""Evaluation text and prompt selection (torch-free).

The paper's prompts are natural text from WikiText-2 (raw, test; split into articles at the
`` = Title = `` headings, a prompt is an article's start) and PG-19 (test; a passage from a paragraph
boundary past the front matter), cut to L_max tokens. Text comes from, in order of preference, a
``local`` data directory (the ``shared/data`` layout), ``hf`` (Hugging Face ``datasets``), or the
``bundled`` excerpts in ``dynatree_core/data/excerpts/`` (the passages ``--seed 0`` draws from the full
test files, in its order, written by ``scripts/build_excerpts.py``: an offline clone benchmarks on the
same prompts). Selection is seeded and each :class:`Prompt` records where it came from.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from dynatree_core.bench.everyday import PROMPTS_FILE, balanced_order, check_form, form_ids, read_everyday
from dynatree_core.paths import PACKAGE_DATA, data_dir_candidates

#: the paper's two passage datasets, then the everyday prompts (:mod:`.everyday`, always bundled)
DATASETS: tuple[str, ...] = ("wikitext2", "pg19", "prompts")
#: the datasets whose prompts are cut from longer texts (local files, HF datasets or bundled excerpts)
PASSAGE_DATASETS: tuple[str, ...] = ("wikitext2", "pg19")
#: the paper's L_max per dataset (the everyday prompts: a cap, far above their length)
PAPER_MAX_PROMPT_LEN: dict[str, int] = {"wikitext2": 800, "pg19": 1000, "prompts": 256}
DATA_SOURCES: tuple[str, ...] = ("auto", "local", "hf", "bundled")
DATASET_TITLES: dict[str, str] = {"wikitext2": "WikiText-2 (raw, test)", "pg19": "PG-19 (test)",
                                  "prompts": "everyday prompts (bundled)"}
#: the bundled excerpt manifests' format (a header line, then one passage per line)
EXCERPTS_FORMAT = "dynatree-excerpts/1"

WIKITEXT_FILE = os.path.join("wikitext-2-raw", "wiki.test.raw")
PG19_GLOB = os.path.join("pg19", "*.txt")
BUNDLED_DIR = PACKAGE_DATA / "excerpts"

_HEADING = re.compile(r"^ = (?!=)(.*?) = *$", re.MULTILINE)


class DataError(ValueError):
    """Evaluation text could not be found or loaded (the message says where we looked)."""


@dataclass
class Document:
    """One article (WikiText-2) or book (PG-19) and the offsets prompts may start at.

    ``offset`` is the document's character offset in ``source``; ``starts`` are candidate
    prompt starts relative to ``text``.
    """

    dataset: str
    source: str
    doc_index: int
    title: str
    text: str
    offset: int = 0
    starts: list[int] = field(default_factory=lambda: [0])
    kind: str | None = None  # everyday prompts: the prompt's kind


@dataclass
class Prompt:
    """A selected prompt: at most L_max token ids plus its provenance."""

    dataset: str
    index: int
    source: str
    doc_index: int
    title: str
    char_start: int
    char_end: int
    n_tokens: int
    max_prompt_len: int
    token_ids: list[int]
    preview: str
    kind: str | None = None  # everyday prompts: the prompt's kind ...
    form: str | None = None  # ... and the form it reached the target in (chat, raw)

    @property
    def sha1(self) -> str:
        return hashlib.sha1(",".join(map(str, self.token_ids)).encode()).hexdigest()

    def record(self) -> dict[str, Any]:
        """JSON provenance (token ids replaced by their count and a hash)."""
        d = asdict(self)
        d.pop("token_ids")
        d["token_sha1"] = self.sha1
        return d


@dataclass
class Corpus:
    """The documents of one dataset and where they were read from.

    ``ordered_seed`` is set for the bundled excerpts: their documents are the candidate passages
    of a full-data selection with that seed, already in its order (see :func:`select_prompts`)."""

    dataset: str
    origin: str  # "local" | "hf" | "bundled"
    location: str
    documents: list[Document]
    ordered_seed: int | None = None
    window_chars: int | None = None  # bundled: characters stored per passage
    form: str | None = None  # everyday prompts: chat or raw (:data:`.everyday.PROMPT_FORMS`)

    def describe(self) -> str:
        """One line for people: which text a run used."""
        name = DATASET_TITLES.get(self.dataset, self.dataset)
        if self.dataset == "prompts":
            return (f"{name}: {len(self.documents)} prompts written for this project "
                    f"(dynatree_core/data/excerpts/prompts.jsonl), {self.form} form")
        if self.origin == "bundled":
            return (f"{name}: bundled excerpts ({len(self.documents)} passages, the ones a --seed "
                    f"{self.ordered_seed} run draws from the full test files: same prompts as --data-dir with them)")
        if self.origin == "hf":
            return f"{name}: Hugging Face datasets, {self.location} ({len(self.documents)} documents)"
        return f"{name}: local files in {self.location} ({len(self.documents)} documents)"


def check_dataset(name: str) -> str:
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    return name


def parse_datasets(spec: str) -> list[str]:
    """``"wikitext2,pg19"`` -> ``["wikitext2", "pg19"]`` (validated, order kept, no repeats)."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise DataError(f"no dataset given; choose from {', '.join(DATASETS)}")
    out: list[str] = []
    for n in names:
        check_dataset(n)
        if n not in out:
            out.append(n)
    return out


# --- parsing -------------------------------------------------------------------------------
def wikitext_documents(text: str, source: str, min_chars: int = 1000) -> list[Document]:
    """Split raw WikiText into articles at `` = Title = `` headings; skip articles under
    ``min_chars`` characters."""
    heads = list(_HEADING.finditer(text))
    docs: list[Document] = []
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[h.start():end]
        if len(body.strip()) >= min_chars:
            docs.append(Document("wikitext2", source, i, h.group(1).strip(), body, offset=h.start()))
    return docs


def paragraph_starts(text: str, skip_frac: float = 0.05, min_chars: int = 500) -> list[int]:
    """Offsets of paragraph starts (after a blank line) past the first ``skip_frac`` of a book
    and at least ``min_chars`` before its end."""
    lo, hi = int(len(text) * skip_frac), len(text) - min_chars
    starts = [m.end() for m in re.finditer(r"\n[ \t]*\n+(?=\S)", text)]
    return [s for s in starts if lo <= s <= hi]


def book_document(text: str, source: str, doc_index: int, title: str) -> Document | None:
    starts = paragraph_starts(text)
    if not starts:
        return None
    return Document("pg19", source, doc_index, title, text, offset=0, starts=starts)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


# --- sources -------------------------------------------------------------------------------
def default_data_dirs(cwd: str | None = None) -> list[Path]:
    """Where ``local`` looks when no ``--data-dir`` is given (:func:`dynatree_core.paths.data_dir_candidates`:
    ``shared/data`` inside or beside the repository, then inside or beside the working directory)."""
    return data_dir_candidates(cwd)


def _local_files(dataset: str, root: Path) -> list[str]:
    if dataset == "wikitext2":
        p = root / WIKITEXT_FILE
        return [str(p)] if p.is_file() else []
    return sorted(glob.glob(str(root / PG19_GLOB)))


def _from_dir(dataset: str, root: Path, origin: str) -> Corpus | None:
    files = _local_files(dataset, root)
    if not files:
        return None
    docs: list[Document] = []
    if dataset == "wikitext2":
        rel = os.path.relpath(files[0], root)
        docs = wikitext_documents(_read(files[0]), rel)
    else:
        for i, f in enumerate(files):
            d = book_document(_read(f), os.path.relpath(f, root), i, Path(f).stem)
            if d is not None:
                docs.append(d)
    if not docs:
        return None
    return Corpus(dataset, origin, str(root), docs)


def _from_hf(dataset: str, max_books: int = 10) -> Corpus | None:
    """Load via Hugging Face ``datasets`` if it is installed and reachable; None otherwise."""
    try:
        import datasets as hfd  # optional extra
    except ImportError:
        return None
    try:
        if dataset == "wikitext2":
            ds = hfd.load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split="test")
            text = "".join(ds["text"])
            docs = wikitext_documents(text, "hf:Salesforce/wikitext/wikitext-2-raw-v1/test")
            return Corpus(dataset, "hf", "Salesforce/wikitext (wikitext-2-raw-v1, test)", docs)
        ds = hfd.load_dataset("deepmind/pg19", split="test", streaming=True)
        docs = []
        for i, row in enumerate(ds):
            if i >= max_books:
                break
            d = book_document(row["text"], f"hf:deepmind/pg19/test/{row.get('short_book_title', i)}", i,
                              str(row.get("short_book_title", i)))
            if d is not None:
                docs.append(d)
        return Corpus(dataset, "hf", "deepmind/pg19 (test)", docs) if docs else None
    except Exception:  # offline, hub error, schema change: fall through to the next source
        return None


def missing_data_message(dataset: str, looked: Sequence[Path]) -> str:
    want = WIKITEXT_FILE if dataset == "wikitext2" else PG19_GLOB
    where = "\n".join(f"  - {p / want}" for p in looked)
    return (f"no {dataset} text found. Looked for:\n{where}\n"
            f"Provide it with --data-dir DIR (DIR/{want}), install the optional extra "
            f"(pip install 'dynatree[datasets]') and use --data-source hf, or use --data-source bundled "
            f"for the small excerpts shipped with the package.")


def load_corpus(dataset: str, data_dir: str | os.PathLike | None = None, source: str = "auto",
                form: str = "chat") -> Corpus:
    """The documents of ``dataset`` from ``source`` (see the module docstring).

    An explicit ``data_dir`` must hold the data (no silent fallback); ``auto`` tries the default
    local directories, then Hugging Face, then the bundled excerpts. The everyday prompts exist
    only bundled (``data_dir`` and ``source`` do not apply to them); ``form`` is theirs.
    """
    check_dataset(dataset)
    if source not in DATA_SOURCES:
        raise DataError(f"unknown data source {source!r}; choose from {', '.join(DATA_SOURCES)}")
    if dataset == "prompts":
        return everyday_corpus(form)
    if data_dir is not None:
        if source not in ("auto", "local"):
            raise DataError(f"--data-dir cannot be combined with --data-source {source}")
        root = Path(data_dir).resolve()
        c = _from_dir(dataset, root, "local")
        if c is None:
            raise DataError(missing_data_message(dataset, [root]))
        return c
    if source in ("auto", "local"):
        dirs = default_data_dirs()
        for root in dirs:
            c = _from_dir(dataset, root, "local")
            if c is not None:
                return c
        if source == "local":
            raise DataError(missing_data_message(dataset, dirs))
    if source in ("auto", "hf"):
        c = _from_hf(dataset)
        if c is not None:
            return c
        if source == "hf":
            raise DataError(f"could not load {dataset} through Hugging Face datasets (not installed, "
                            f"or offline); use --data-dir or --data-source bundled")
    return bundled_corpus(dataset)


def bundled_corpus(dataset: str, root: Path = BUNDLED_DIR) -> Corpus:
    """The shipped excerpts of ``dataset``: one document per stored candidate passage, in the
    order a full-data selection with the recorded seed visits them; provenance (source file,
    document index, title, character offset) is the full file's."""
    path = root / f"{dataset}.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0])
        rows = [json.loads(x) for x in lines[1:] if x.strip()]
    except (OSError, IndexError, json.JSONDecodeError) as e:  # pragma: no cover - a broken install
        raise DataError(f"the bundled {dataset} excerpts ({path}) are missing or unreadable ({e})") from e
    if header.get("format") != EXCERPTS_FORMAT or header.get("dataset") != dataset:
        raise DataError(f"{path} is not a {EXCERPTS_FORMAT} manifest for {dataset}")
    docs = [Document(dataset, r["source"], int(r["doc_index"]), r["title"], r["text"], offset=int(r["char_start"]),
                     starts=[0]) for r in rows]
    return Corpus(dataset, "bundled", str(path), docs, ordered_seed=int(header["seed"]),
                  window_chars=int(header["window_chars"]))


def everyday_corpus(form: str = "chat", path: Path = PROMPTS_FILE) -> Corpus:
    """The everyday prompts (:mod:`.everyday`) as a corpus: one document per prompt, in file order."""
    try:
        check_form(form)
        prompts = read_everyday(path)
    except (OSError, ValueError, TypeError) as e:
        raise DataError(str(e)) from e
    docs = [Document("prompts", path.name, i, p.id, p.text, kind=p.kind) for i, p in enumerate(prompts)]
    return Corpus("prompts", "bundled", str(path), docs, form=form)


# --- prompt selection ----------------------------------------------------------------------
Tokenize = Callable[[str], tuple[list[int], list[tuple[int, int]] | None]]


def corpus_tokenize(corpus: Corpus, tokenizer: Any) -> Tokenize:
    """How ``corpus``'s text reaches ``tokenizer``'s model: :func:`hf_tokenize`, or for everyday
    prompts in chat form the chat template around each one (no character offsets)."""
    if corpus.form != "chat":
        return hf_tokenize(tokenizer)
    return lambda text: (form_ids(tokenizer, text, "chat"), None)


def hf_tokenize(tokenizer: Any) -> Tokenize:
    """Wrap a Hugging Face tokenizer: text -> (ids, char offsets or None)."""

    def tok(text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
        try:
            enc = tokenizer(text, return_offsets_mapping=True)
            return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        except (NotImplementedError, TypeError, ValueError, KeyError):
            return list(tokenizer(text)["input_ids"]), None

    return tok


def _candidates(docs: Sequence[Document], rng: random.Random) -> list[tuple[Document, int]]:
    """Seeded order of (document, start): documents shuffled, then round-robin over them with a
    random unused start each round, so prompts spread over documents (books)."""
    order = list(docs)
    rng.shuffle(order)
    pools = {id(d): rng.sample(d.starts, len(d.starts)) for d in order}
    out: list[tuple[Document, int]] = []
    while any(pools.values()):
        for d in order:
            if pools[id(d)]:
                out.append((d, pools[id(d)].pop()))
    return out


def candidate_window(max_prompt_len: int, chars_per_token: int = 8) -> int:
    """Characters of text read per candidate passage for prompts of ``max_prompt_len`` tokens."""
    return max(2000, max_prompt_len * chars_per_token)


def candidate_passages(corpus: Corpus, seed: int, limit: int) -> list[tuple[Document, int]]:
    """The first ``limit`` (document, start) candidates :func:`select_prompts` visits with ``seed``
    (what ``scripts/build_excerpts.py`` stores)."""
    return _candidates(corpus.documents, random.Random(f"{seed}:{corpus.dataset}"))[:limit]


def select_prompts(corpus: Corpus, tokenize: Tokenize, num_prompts: int, max_prompt_len: int,
                   seed: int = 0, chars_per_token: int = 8, max_tries: int = 2000) -> tuple[list[Prompt], list[str]]:
    """Pick N prompts of exactly L_max tokens (seeded, deterministic); returns (prompts, warnings).

    Candidates shorter than L_max tokens are skipped; if there are not enough long ones the
    longest short ones fill up and a warning says so.
    """
    if num_prompts < 1:
        raise ValueError(f"num_prompts (N) must be >= 1, got {num_prompts}")
    if max_prompt_len < 1:
        raise ValueError(f"max_prompt_len (L_max) must be >= 1, got {max_prompt_len}")
    if corpus.dataset == "prompts":
        return select_everyday(corpus, tokenize, num_prompts, max_prompt_len, seed)
    rng = random.Random(f"{seed}:{corpus.dataset}")
    window = candidate_window(max_prompt_len, chars_per_token)
    warnings: list[str] = []
    if corpus.ordered_seed is not None and seed == corpus.ordered_seed:
        # the excerpts are this seed's candidates, already in order: the same walk as on the full files
        candidates = [(d, 0) for d in corpus.documents]
    else:
        candidates = _candidates(corpus.documents, rng)
        if corpus.ordered_seed is not None:
            warnings.append(f"{corpus.dataset}: the bundled excerpts hold the passages of --seed {corpus.ordered_seed}; "
                            f"--seed {seed} draws from those {len(corpus.documents)} passages only, so its prompts "
                            f"differ from a run on the full files")
    if corpus.window_chars is not None and window > corpus.window_chars:
        warnings.append(f"{corpus.dataset}: L_max={max_prompt_len} reads up to {window} characters per passage but the "
                        f"bundled excerpts keep {corpus.window_chars}; prompts may be shorter than on the full files")
    chosen: list[Prompt] = []
    short: list[Prompt] = []
    for d, start in candidates[:max_tries]:
        piece = d.text[start:start + window]
        ids, offsets = tokenize(piece)
        ids = ids[:max_prompt_len]
        if not ids:
            continue
        if offsets is not None and len(offsets) >= len(ids):
            end = int(offsets[len(ids) - 1][1])
        else:
            end = len(piece) if len(ids) < max_prompt_len else min(len(piece), len(ids) * chars_per_token)
        p = Prompt(dataset=corpus.dataset, index=-1, source=d.source, doc_index=d.doc_index, title=d.title,
                   char_start=d.offset + start, char_end=d.offset + start + end, n_tokens=len(ids),
                   max_prompt_len=max_prompt_len, token_ids=ids, preview=piece[:80])
        (chosen if len(ids) == max_prompt_len else short).append(p)
        if len(chosen) == num_prompts:
            break
    if len(chosen) < num_prompts:
        short.sort(key=lambda p: -p.n_tokens)
        fill = short[: num_prompts - len(chosen)]
        if fill:
            warnings.append(f"{corpus.dataset}: only {len(chosen)} passages reach L_max={max_prompt_len} tokens "
                            f"in {corpus.origin} data; {len(fill)} shorter prompts used "
                            f"({', '.join(str(p.n_tokens) for p in fill)} tokens)")
        chosen += fill
    if len(chosen) < num_prompts:
        raise DataError(f"{corpus.dataset} ({corpus.origin}, {corpus.location}) has only {len(chosen)} usable "
                        f"passages; asked for N={num_prompts} prompts")
    for i, p in enumerate(chosen):
        p.index = i
    return chosen, warnings


def select_everyday(corpus: Corpus, tokenize: Tokenize, num_prompts: int, max_prompt_len: int,
                    seed: int = 0) -> tuple[list[Prompt], list[str]]:
    """The first N everyday prompts in the seeded, kind-balanced order (:func:`.everyday.balanced_order`),
    each whole; one longer than L_max keeps its last L_max tokens (a warning says how many)."""
    docs = balanced_order(corpus.documents, seed)
    if len(docs) < num_prompts:
        raise DataError(f"the everyday prompts are {len(docs)}; asked for N={num_prompts}")
    chosen: list[Prompt] = []
    cut: list[int] = []
    for i, d in enumerate(docs[:num_prompts]):
        ids, _ = tokenize(d.text)
        if len(ids) > max_prompt_len:
            cut.append(len(ids))
            ids = ids[-max_prompt_len:]
        chosen.append(Prompt(dataset="prompts", index=i, source=d.source, doc_index=d.doc_index, title=d.title,
                             char_start=0, char_end=len(d.text), n_tokens=len(ids), max_prompt_len=max_prompt_len,
                             token_ids=ids, preview=d.text[:80], kind=d.kind, form=corpus.form))
    warnings = [f"prompts: {len(cut)} prompts are longer than L_max={max_prompt_len} tokens in {corpus.form} form "
                f"({', '.join(map(str, cut))}); each keeps its last {max_prompt_len}"] if cut else []
    return chosen, warnings
