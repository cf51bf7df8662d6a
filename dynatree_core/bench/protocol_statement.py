"""The paper's benchmark protocol in words: the one statement the notebooks print (04, 05) and a
test holds them to (``tests/test_notebooks_protocol.py``), so that no two places say it differently.

The numbers are the paper's settings (:data:`PAPER_SETTINGS`, the CLI's ``--paper``); the history
rule is what :mod:`dynatree_core.bench.protocol` does with DynaTree's adapter between prompts (the
result files record the same words under ``protocol.history``).
"""

from __future__ import annotations

from dynatree_core.bench.data import PAPER_MAX_PROMPT_LEN

__all__ = ["HISTORY_RULE", "PAPER_SETTINGS", "protocol_statement"]

#: the paper's N, W and T (``dynatree bench --paper``); L_max per dataset is PAPER_MAX_PROMPT_LEN
PAPER_SETTINGS: dict[str, int] = {"num_prompts": 10, "warmup": 2, "max_new_tokens": 1500}

#: how DynaTree's history state (D0, τ_h and the acceptance window) passes between the prompts of one
#: method: the words a result file records as ``protocol.history``
HISTORY_RULE = "carried through the W warmup prompts; every measured prompt starts from the state they left"


def protocol_statement() -> str:
    """The protocol as one Markdown paragraph, its numbers formatted from the settings above."""
    s, lm = PAPER_SETTINGS, PAPER_MAX_PROMPT_LEN
    return (
        "**The paper's protocol.** Prompts are natural text from **WikiText-2** (raw, test) and **PG-19** "
        f"(test), truncated to **L_max** tokens ({lm['wikitext2']} and {lm['pg19']} in the paper). Each method "
        f"greedily generates **T** new tokens ({s['max_new_tokens']}) with EOS ignored, so every run has the same "
        f"length. **N** prompts ({s['num_prompts']}) are decoded in order; the first **W** ({s['warmup']}) are "
        "warmup and left out of the means and standard deviations. Speedup is always throughput / AR's "
        "throughput from the same run. DynaTree's history state (D0, τ_h and the acceptance window) is "
        f"{HISTORY_RULE}: the warmup is where the adapter learns, and the measured prompts are independent "
        "samples of the warmed-up decoder (`dynatree_core.bench.protocol`).")
