"""The everyday-prompts dataset (issue 40): bundled, offline, balanced by kind, in chat and raw form,
about nothing the distillation saw, and exact in the benchmark on the tiny pair."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from dynatree_core.bench.data import (DATASETS, DataError, corpus_tokenize, load_corpus, parse_datasets,
                                      select_prompts)
from dynatree_core.bench.everyday import PROMPT_FORMS, PROMPT_KINDS, balanced_order, check_form, read_everyday
from dynatree_core.cli import build_parser, main
from dynatree_core.distill.prompts import EVAL_PROMPTS, HELD_OUT_TOPIC_WORDS, KIND_TEMPLATES, mentions_held_out_topic, \
    read_code_tasks, read_prompts, read_topics
from dynatree_core.pairs.tiny_models import char_tokenizer

#: words that say what kind of prompt it is, not what it is about (with English function words)
FORM_WORDS = set("""a an the of to in on for and or with about at by from into is are was were be been it its this
that these those how why what when where who which do does did can i my me you your we our they their he she his her
them as if not no more most than then there so very some any one two three five six seven eight ten each every few
many much other another after before over under up out off just only also make makes made get gets write tell give
explain describe list name suggest short story paragraph dialogue conversation between function python program code
return returns true false def str int bool while else mid lo hi xs len""".split())
#: words of distillation topics that are ordinary in any prompt (in topics only as parts of phrases:
#: "time management", "New Year celebrations", "prime numbers", "the common cold")
GENERIC = {"time", "first", "new", "number", "common"}


def content_words(text: str) -> set[str]:
    """Lower-case words of 3+ letters, function and form words dropped, plurals folded (-s, -es, -ies)."""
    out = set()
    for w in re.findall(r"[a-z]+", text.lower()):
        if len(w) < 3 or w in FORM_WORDS:
            continue
        for suffix, repl in (("ies", "y"), ("es", ""), ("s", "")):
            if w.endswith(suffix) and len(w) - len(suffix) >= 3:
                w = w[: -len(suffix)] + repl
                break
        out.add(w)
    return out


def test_seventy_two_prompts_load_offline_twelve_of_each_kind(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prompts = read_everyday()
    assert Counter(p.kind for p in prompts) == {k: 12 for k in PROMPT_KINDS}
    for source in ("auto", "local", "hf", "bundled"):  # one bundled file whatever the source
        corpus = load_corpus("prompts", source=source)
        assert corpus.origin == "bundled" and [d.text for d in corpus.documents] == [p.text for p in prompts]
    assert "prompts" in DATASETS and "72 prompts" in load_corpus("prompts", form="raw").describe()


def test_any_six_consecutive_prompts_of_the_seeded_order_cover_every_kind():
    prompts = read_everyday()
    order = balanced_order(prompts, seed=0)
    assert sorted(p.id for p in order) == sorted(p.id for p in prompts)
    for i in range(0, len(order), len(PROMPT_KINDS)):
        assert {p.kind for p in order[i:i + len(PROMPT_KINDS)]} == set(PROMPT_KINDS)
    assert balanced_order(prompts, seed=0) == order and balanced_order(prompts, seed=1) != order


def test_chat_form_wraps_the_prompt_in_the_template_and_raw_form_is_the_text():
    tok = char_tokenizer()
    chat, raw = (load_corpus("prompts", form=f) for f in PROMPT_FORMS)
    (c,), _ = select_prompts(chat, corpus_tokenize(chat, tok), 1, 1000)
    (r,), _ = select_prompts(raw, corpus_tokenize(raw, tok), 1, 1000)
    assert (c.form, r.form, c.kind) == ("chat", "raw", r.kind) and c.title == r.title
    text = next(p.text for p in read_everyday() if p.id == r.title)
    assert r.token_ids == tok(text)["input_ids"]
    assert tok.decode(c.token_ids) == f"user: {text}\nassistant:"
    assert c.record()["form"] == "chat" and c.record()["kind"] in PROMPT_KINDS


def test_a_prompt_longer_than_L_max_keeps_its_last_tokens_with_a_warning():
    tok = char_tokenizer()
    chat = load_corpus("prompts", form="chat")
    prompts, warnings = select_prompts(chat, corpus_tokenize(chat, tok), 6, 12)
    assert all(p.n_tokens == 12 and tok.decode(p.token_ids).endswith("assistant:") for p in prompts)
    assert len(warnings) == 1 and "keeps its last 12" in warnings[0]


def test_no_prompt_is_about_a_topic_of_the_distillation_prompts_topics_or_held_out_prompts():
    # the kind bank's templates (placeholders empty) and code tasks are distillation text too (issue 40, part 2)
    kind_texts = [t.format(t="", c="") for ts in KIND_TEMPLATES.values() for t in ts] + read_code_tasks()
    assert not [t for t in kind_texts if mentions_held_out_topic(t)]
    distill = read_prompts() + read_topics() + EVAL_PROMPTS + kind_texts
    seen = set().union(*(content_words(t) for t in distill))
    topics = set().union(*(content_words(t) for t in read_topics())) | set(HELD_OUT_TOPIC_WORDS)
    for p in read_everyday():
        topic = content_words(p.topic)
        assert topic and topic <= content_words(p.text), f"{p.id}: its topic {p.topic!r} is not in its text"
        assert not topic & seen, f"{p.id}: topic {p.topic!r} shares {sorted(topic & seen)} with the distillation"
        clash = (content_words(p.text) - GENERIC) & topics
        assert not clash, f"{p.id}: {sorted(clash)} is a distillation topic"
        assert not mentions_held_out_topic(p.text), p.id


def test_bad_dataset_names_and_forms_fail_naming_the_parameter_and_its_values():
    with pytest.raises(DataError, match="unknown dataset 'chats'; choose from wikitext2, pg19, prompts"):
        parse_datasets("prompts,chats")
    with pytest.raises(ValueError, match="unknown --prompt-form 'html'; choose from chat, raw"):
        check_form("html")
    with pytest.raises(DataError, match="--prompt-form"):
        load_corpus("prompts", form="html")
    assert build_parser().parse_args(["bench"]).dataset == "wikitext2,pg19,prompts"  # the main job has all three


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "wikitext2,everyday"], "unknown dataset 'everyday'; choose from wikitext2, pg19, prompts"),
    (["--prompt-form", "html"], "argument --prompt-form: invalid choice: 'html' (choose from 'chat', 'raw')"),
])
def test_bad_names_exit_2_before_any_model_loads(monkeypatch, capsys, tmp_path, argv, message):
    import dynatree_core.pairs.pair as models

    def no_load(*a, **k):
        raise AssertionError("a model was loaded for a wrong invocation")

    monkeypatch.setattr(models.ModelPair, "default", no_load)
    monkeypatch.setattr(models.ModelPair, "named", no_load)
    try:
        status = main(["bench", *argv, "--out", str(tmp_path / "r")])
    except SystemExit as e:  # argparse's own choices check
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("form", PROMPT_FORMS)
def test_tiny_bench_on_everyday_prompts_every_method_equals_ar(tmp_path, capsys, form):
    out = tmp_path / "run.json"
    argv = ["bench", "--target", "tiny-llama", "--no-progress", "--dataset", "prompts", "--prompt-form", form,
            "--out", str(out), "--num-prompts", "7", "--warmup", "1", "--max-new-tokens", "6",
            "--max-prompt-len", "48", "--methods", "ar,linear,fixed_tree,dynatree"]
    assert main(argv) == 0
    assert "everyday prompts" in capsys.readouterr().out
    d = json.loads(out.read_text())
    assert d["checks"]["outputs_identical_across_methods"]
    assert d["protocol"]["prompt_form"] == form and d["protocol"]["datasets"] == ["prompts"]
    assert {r["dataset"] for r in d["rows"]} == {"prompts"} and len(d["rows"]) == 4 * 7
    assert {p["form"] for p in d["prompts"]} == {form} and {p["kind"] for p in d["prompts"]} == set(PROMPT_KINDS)


def test_the_main_job_reports_everyday_prompts_beside_the_passages(tmp_path, capsys):
    from helpers.bench import make_data_dir

    out = tmp_path / "main.json"
    argv = ["bench", "--target", "tiny-llama", "--no-progress", "--data-dir", str(make_data_dir(tmp_path / "data")),
            "--out", str(out), "--num-prompts", "2", "--warmup", "1", "--max-new-tokens", "4",
            "--max-prompt-len", "16", "--methods", "ar,dynatree"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "local files in" in stdout and "72 prompts written for this project" in stdout
    d = json.loads(out.read_text())
    assert d["protocol"]["datasets"] == ["wikitext2", "pg19", "prompts"] and d["protocol"]["prompt_form"] == "chat"
    assert {k: v["origin"] for k, v in d["data"].items()} == {"wikitext2": "local", "pg19": "local",
                                                              "prompts": "bundled"}
    table = stdout.split("Table 1")[1].split("Table 2")[0]
    assert all(ds in table for ds in ("wikitext2", "pg19", "prompts"))
    assert d["checks"]["outputs_identical_across_methods"]
