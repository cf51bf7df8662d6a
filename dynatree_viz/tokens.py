"""Token id → text, for ids that appear in a trace without their own text.

A trace stores the text of every tree node and every committed token, but not of the target's
argmax at a rejected node or of the draft's unverified top-k. :class:`TokenNamer` collects every
(id, text) pair the trace does contain and falls back to an optional ``decode`` callable, then to
``⟨id⟩``.
"""

from __future__ import annotations

from typing import Callable, Iterable

from dynatree_core.trace import IterationRecord, Trace


class TokenNamer:
    """Callable ``namer(token_id) -> str``."""

    def __init__(self, known: dict[int, str] | None = None,
                 decode: Callable[[int], str] | None = None):
        self.known: dict[int, str] = dict(known or {})
        self.decode = decode

    def __call__(self, token: int | None) -> str:
        if token is None:
            return "?"
        t = int(token)
        if t in self.known:
            return self.known[t]
        if self.decode is not None:
            try:
                s = self.decode(t)
            except Exception:  # a tokenizer quirk must not break a plot
                s = None
            if isinstance(s, str):
                self.known[t] = s
                return s
        return f"⟨{t}⟩"  # not "#t": that is how node indices are written

    def learn(self, records: Iterable[IterationRecord]) -> "TokenNamer":
        for rec in records:
            for tok, text in zip(rec.tree.tokens, rec.token_texts or []):
                self.known.setdefault(int(tok), text)
            for tok, text in zip(rec.committed, rec.committed_texts or []):
                self.known.setdefault(int(tok), text)
        return self

    @classmethod
    def from_trace(cls, trace: Trace | IterationRecord | None,
                   decode: Callable[[int], str] | None = None) -> "TokenNamer":
        namer = cls(decode=decode)
        if isinstance(trace, Trace):
            namer.learn(trace.iterations)
        elif isinstance(trace, IterationRecord):
            namer.learn([trace])
        return namer


def node_texts(rec: IterationRecord, namer: TokenNamer) -> list[str]:
    """Text of every node of ``rec.tree`` (recorded texts first, the namer where missing)."""
    texts = list(rec.token_texts or [])
    return [texts[i] if i < len(texts) else namer(t) for i, t in enumerate(rec.tree.tokens)]
