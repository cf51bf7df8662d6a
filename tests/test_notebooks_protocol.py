"""The notebooks state the paper's benchmark protocol one way: the statement of
:mod:`dynatree_core.bench.protocol_statement`, printed, never retold in other words.

A sentence a reader sees (markdown, or a cell's output) that speaks of the protocol, the paper or
the benchmark *and* of how DynaTree's history / adapter state passes between prompts must be a
sentence of that statement; 04 and 05 print it whole. (04 once said "the paper resets the adapter
for every prompt" while 05 said the protocol carries it from one prompt to the next.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dynatree_core.bench.protocol_statement import HISTORY_RULE, protocol_statement

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
#: the notebooks that print the statement
PRINTERS = ("04_history_adaptation.ipynb", "05_reproduce_the_paper.ipynb")

_ABOUT_PROTOCOL = re.compile(r"\b(paper|protocol|bench(mark)?)", re.I)
_ABOUT_STATE = re.compile(r"\b(history|adapter)", re.I)
_ABOUT_PROMPTS = re.compile(r"\bprompts?\b", re.I)
_HANDOVER = re.compile(r"\b(carr(y|ies|ied|ying)|reset(s|ting)?|restart(s|ed|ing)?|kept|keeps?|fresh|starts?)\b", re.I)


def _plain(text: str) -> str:
    """Markdown to comparable words: no emphasis, code ticks or line breaks."""
    return re.sub(r"\s+", " ", re.sub(r"[*`_]", "", text)).strip()


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", _plain(text)) if s]


def blocks(text: str) -> list[str]:
    """Paragraphs, with every list item a block of its own (an item of a list that names the paper
    elsewhere is not about the paper)."""
    return [b for para in re.split(r"\n\s*\n", text) for b in re.split(r"\n\s*(?:[*-]|\d+\.)\s+", para) if b.strip()]


def protocol_claims(text: str) -> list[str]:
    """The sentences of ``text`` that say how the protocol treats DynaTree's state between prompts:
    in a paragraph (or list item) that speaks of the paper, the protocol or the benchmark, a sentence
    about the history / adapter state, prompts and how the state is handed on (carried, reset, kept, ...)."""
    return [s for block in blocks(text) if _ABOUT_PROTOCOL.search(block)
            for s in sentences(block) if _ABOUT_STATE.search(s) and _ABOUT_PROMPTS.search(s) and _HANDOVER.search(s)]


def stray_claims(text: str) -> list[str]:
    """Such sentences that are not sentences of the one statement."""
    ours = set(sentences(protocol_statement()))
    return [s for s in protocol_claims(text) if s not in ours]


def seen_text(path: Path) -> str:
    """What a reader of the executed notebook sees: markdown cells and every text output."""
    nb = json.loads(path.read_text())
    parts = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            parts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append("".join(out["text"]))
            for kind in ("text/markdown", "text/plain"):
                if kind in out.get("data", {}):
                    parts.append("".join(out["data"][kind]))
    return "\n\n".join(parts)


def test_the_statement_says_the_history_rule_the_results_record():
    claims = protocol_claims(protocol_statement())
    assert len(claims) == 1 and _plain(HISTORY_RULE) in claims[0]
    assert stray_claims(protocol_statement()) == []


@pytest.mark.parametrize("wrong", [
    "The paper resets the adapter for every prompt.",  # 04, before
    "**The protocol.** Prompts are natural text. DynaTree's history state is carried from one prompt to the "
    "next within a method.",  # 05, before (the paragraph names the protocol, the sentence does not)
    "The benchmark starts every prompt with a fresh adapter.",
])
def test_a_protocol_stated_in_other_words_is_caught(wrong):
    assert stray_claims(wrong), wrong


def test_other_talk_of_carrying_the_state_is_not_a_protocol_claim():
    assert protocol_claims("Here the final state of one generation can seed the next prompt (history=).") == []
    listed = "* switching adaptation off (the paper's ablation);\n* how to carry the adapter's state to the next prompt."
    assert protocol_claims(listed) == []
    assert protocol_claims(listed.replace("how to", "how the paper's protocol resets")) != []


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb")))
def test_no_notebook_states_the_protocol_in_its_own_words(name):
    assert stray_claims(seen_text(NOTEBOOKS / name)) == []


@pytest.mark.parametrize("name", PRINTERS)
def test_04_and_05_print_the_one_statement(name):
    assert _plain(protocol_statement()) in _plain(seen_text(NOTEBOOKS / name))
