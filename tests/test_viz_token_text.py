"""Tokens as text: where a tokenizer is known (given, or carried in memory by the trace the run
recorded), no view labels a token ``⟨id⟩``; ids only where no tokenizer exists."""

from __future__ import annotations

import json

import dynatree_viz as dv
from dynatree_viz.core import style
from dynatree_viz.core.tokens import TokenNamer

from helpers.viz import VOCAB, FakeTokenizer, record, tiny_trace


def figure_text(fig) -> str:
    """Every string a figure draws or hovers (labels, ticks, legend, titles, annotations)."""
    return json.dumps(fig.to_plotly_json(), ensure_ascii=False)


def unknown_token_record():
    """The hand-made iteration with the stored texts removed: only a tokenizer can name tokens."""
    rec = record()
    rec.token_texts, rec.committed_texts = [], []
    return rec


def test_views_label_ids_only_without_a_tokenizer():
    rec = unknown_token_record()
    assert "⟨" in figure_text(dv.tree_figure(rec, show_pruned=True))  # the fallback, no tokenizer known


def test_a_record_carrying_its_tokenizer_is_labelled_as_text_in_every_view():
    rec = unknown_token_record()
    rec.tokenizer = FakeTokenizer()  # what the engine's collector sets on every record it keeps
    for fig in (dv.tree_figure(rec, show_pruned=True), dv.why(rec), dv.mask_figure(rec),
                dv.views.strip.static_figure(dv.animate(rec, show_pruned=True))):
        text = figure_text(fig)
        assert "⟨" not in text, "a view labelled a token by its id although a tokenizer is known"
    assert "cat" in figure_text(dv.why(rec))


def test_a_trace_carrying_its_tokenizer_names_pruned_and_bonus_tokens():
    trace = tiny_trace(2)
    for rec in trace.iterations:
        rec.token_texts, rec.committed_texts = [], []
    trace.tokenizer = FakeTokenizer()
    assert TokenNamer.from_trace(trace)(10) == VOCAB[10]
    assert "⟨" not in dv.text_html(trace)
    stepper = dv.show(trace)
    assert "⟨" not in figure_text(stepper.tree_fig) and "⟨" not in figure_text(stepper.why_fig)


def test_punctuation_labels_are_bracketed_and_spaces_visible():
    assert style.short_label(",") == "‹,›" and style.short_label('."') == '‹."›'
    assert style.short_label(" cat") == "cat" and style.short_label(" ") == "‹␣›"  # bracketed: ␣ alone was near-invisible
    assert style.short_label("\n") == "↵"


def _bonus_label(fig) -> str:
    (bonus,) = [t for t in fig.data if t.name == dv.views.tree.BONUS]
    return bonus.text[0]


def test_the_bonus_token_is_labelled_as_text():
    """The bonus is no tree node: its text comes from the committed texts or the tokenizer, never
    from the nodes' texts (a record built by hand with node texts only showed it as ⟨id⟩)."""
    rec = record()
    word = VOCAB[rec.bonus]
    assert _bonus_label(dv.tree_figure(rec)) == style.short_label(word)  # from committed_texts
    nodes_only = record()
    nodes_only.committed_texts = []  # as 02's hand-built 5-node record had it
    assert "⟨" in _bonus_label(dv.tree_figure(nodes_only))  # the fallback the notebook must avoid
    for fig in (dv.tree_figure(nodes_only, tokenizer=FakeTokenizer()),
                dv.views.strip.static_figure(dv.animate(nodes_only, tokenizer=FakeTokenizer()))):
        assert "⟨" not in figure_text(fig) and style.short_label(word) in figure_text(fig)
    fig = dv.tree_figure(nodes_only, tokenizer=FakeTokenizer())
    assert _bonus_label(fig) == style.short_label(word)
    assert f"bonus '{style.hover_escape(word)}'" in fig.layout.title.text
