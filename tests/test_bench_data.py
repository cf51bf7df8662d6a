"""Evaluation text loading and seeded prompt selection."""

from __future__ import annotations

import pytest

from helpers.bench import make_data_dir, wikitext_text
from dynatree_core.bench.data import (BUNDLED_DIR, DataError, hf_tokenize, load_corpus, parse_datasets,
                                      select_prompts, wikitext_documents)
from dynatree_core.pairs.tiny import char_tokenizer


@pytest.fixture(scope="module")
def tok():
    return hf_tokenize(char_tokenizer())


@pytest.fixture
def data_dir(tmp_path):
    return make_data_dir(tmp_path / "data")


def test_wikitext_splits_at_top_level_headings_and_skips_tiny_articles():
    text = wikitext_text(n_articles=4, tiny=2)
    docs = wikitext_documents(text, "wiki.test.raw", min_chars=500)
    assert [d.title for d in docs] == [f"Article {i}" for i in range(4)]  # sections stay inside, stubs dropped
    assert all(" = = Section" in d.text for d in docs)
    for d in docs:
        assert text[d.offset:d.offset + len(d.text)] == d.text


def test_prompt_selection_is_deterministic_for_a_seed_and_changes_with_it(data_dir, tok):
    corpus = load_corpus("pg19", data_dir)
    a, _ = select_prompts(corpus, tok, 4, 64, seed=3)
    b, _ = select_prompts(load_corpus("pg19", data_dir), tok, 4, 64, seed=3)
    c, _ = select_prompts(corpus, tok, 4, 64, seed=4)
    assert [p.record() for p in a] == [p.record() for p in b]
    assert [p.char_start for p in a] != [p.char_start for p in c]


def test_prompts_are_L_max_tokens_and_their_offsets_point_at_the_source_text(data_dir, tok):
    for ds in ("wikitext2", "pg19"):
        corpus = load_corpus(ds, data_dir)
        prompts, warnings = select_prompts(corpus, tok, 3, 50, seed=0)
        assert not warnings
        assert [p.index for p in prompts] == [0, 1, 2]
        for p in prompts:
            assert p.n_tokens == len(p.token_ids) == 50
            src = (data_dir / p.source).read_text(encoding="utf-8")
            assert tok(src[p.char_start:p.char_end])[0] == p.token_ids
            assert set(p.record()) >= {"dataset", "source", "doc_index", "char_start", "char_end", "n_tokens",
                                       "token_sha1"}


def test_pg19_prompts_spread_over_books(data_dir, tok):
    prompts, _ = select_prompts(load_corpus("pg19", data_dir), tok, 4, 32, seed=0)
    assert {p.source for p in prompts} == {"pg19/book_a.txt", "pg19/book_b.txt"}


def test_short_passages_fill_up_with_a_warning(data_dir, tok):
    prompts, warnings = select_prompts(load_corpus("wikitext2", data_dir), tok, 3, 100_000, seed=0)
    assert len(prompts) == 3 and all(p.n_tokens < 100_000 for p in prompts)
    assert warnings and "L_max=100000" in warnings[0]


def test_missing_data_dir_names_where_it_looked(tmp_path):
    with pytest.raises(DataError) as e:
        load_corpus("wikitext2", tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(e.value) and "--data-dir" in str(e.value)


def test_bundled_excerpts_load_for_both_datasets(tok):
    for ds in ("wikitext2", "pg19"):
        c = load_corpus(ds, source="bundled")
        assert c.origin == "bundled" and c.documents and c.ordered_seed == 0
        prompts, warnings = select_prompts(c, tok, 3, 64, seed=0)
        assert len(prompts) == 3 and not warnings
        assert "bundled excerpts" in c.describe()
    assert (BUNDLED_DIR / "SOURCES.md").is_file()


def _full_data_dir():
    from dynatree_core.bench.data import WIKITEXT_FILE, default_data_dirs

    return next((d for d in default_data_dirs() if (d / WIKITEXT_FILE).is_file()), None)


@pytest.mark.parametrize("ds", ["wikitext2", "pg19"])
@pytest.mark.parametrize("n, l_max", [(4, 256), (10, None)])  # the CLI's quick protocol, and the paper's
def test_bundled_excerpts_give_the_full_files_prompts_for_seed_0(tok, ds, n, l_max):
    """The point of the excerpts: a fresh clone selects exactly what --data-dir with the full files does."""
    import hashlib

    from dynatree_core.bench.data import PAPER_MAX_PROMPT_LEN, bundled_corpus

    full_dir = _full_data_dir()
    if full_dir is None:
        pytest.skip("the full test files (shared/data) are not beside this checkout")
    l_max = l_max or PAPER_MAX_PROMPT_LEN[ds]
    bundled = bundled_corpus(ds)
    import json

    header = json.loads((BUNDLED_DIR / f"{ds}.jsonl").read_text().splitlines()[0])
    for src, sha in header["source_sha1"].items():  # built from these very files
        assert hashlib.sha1((full_dir / src).read_bytes()).hexdigest() == sha
    a, wa = select_prompts(load_corpus(ds, full_dir), tok, n, l_max, seed=0)
    b, wb = select_prompts(bundled, tok, n, l_max, seed=0)
    assert not wa and not wb
    assert [p.record() for p in a] == [p.record() for p in b]
    assert [p.token_ids for p in a] == [p.token_ids for p in b]


def test_bundled_excerpts_with_another_seed_say_they_differ(tok):
    prompts, warnings = select_prompts(load_corpus("pg19", source="bundled"), tok, 3, 64, seed=5)
    assert len(prompts) == 3 and any("--seed 5" in w and "differ" in w for w in warnings)


def test_unknown_dataset_is_rejected():
    assert parse_datasets("wikitext2, pg19,wikitext2") == ["wikitext2", "pg19"]
    with pytest.raises(DataError, match="unknown dataset 'c4'"):
        parse_datasets("wikitext2,c4")


class _FakeHF:
    """Stands in for the optional ``datasets`` package (no network in tests)."""

    def __init__(self, wiki: str, books: list[str]):
        self.wiki, self.books, self.calls = wiki, books, []

    def load_dataset(self, path, name=None, split=None, streaming=False):
        self.calls.append((path, name, split, streaming))
        if path == "Salesforce/wikitext":
            return {"text": self.wiki.splitlines(keepends=True)}
        return iter({"text": b, "short_book_title": f"book{i}"} for i, b in enumerate(self.books))


def test_hf_source_reads_test_splits_through_datasets(monkeypatch, tok):
    from helpers.bench import pg19_book

    fake = _FakeHF(wikitext_text(), [pg19_book(0), pg19_book(1)])
    monkeypatch.setitem(__import__("sys").modules, "datasets", fake)
    wiki = load_corpus("wikitext2", source="hf")
    assert wiki.origin == "hf" and [d.title for d in wiki.documents][:2] == ["Article 0", "Article 1"]
    books = load_corpus("pg19", source="hf")
    assert [d.title for d in books.documents] == ["book0", "book1"]
    assert ("deepmind/pg19", None, "test", True) in fake.calls
    assert ("Salesforce/wikitext", "wikitext-2-raw-v1", "test", False) in fake.calls


def test_auto_falls_back_to_bundled_without_local_data_or_datasets(monkeypatch, tmp_path):
    import dynatree_core.bench.data as data

    monkeypatch.setattr(data, "default_data_dirs", lambda cwd=None: [tmp_path / "none"])
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # import fails
    assert load_corpus("pg19").origin == "bundled"
    with pytest.raises(DataError, match=str(tmp_path / "none")):
        load_corpus("pg19", source="local")
    with pytest.raises(DataError, match="Hugging Face"):
        load_corpus("pg19", source="hf")
