"""Token id → text, for ids that appear in a trace without their own text.

A trace stores the text of every tree node and every committed token, but not of the target's
argmax at a rejected node or of the draft's unverified top-k (pruned candidates included).
:class:`TokenNamer` collects every (id, text) pair the trace does contain and falls back to an
optional decoder, then to ``⟨id⟩``. Every view takes ``tokenizer=``: anything with
``.decode(list[int]) -> str`` (a Hugging Face tokenizer) or a plain ``decode(id) -> str``; by
default the one a trace or record carries in memory (``Trace.tokenizer``, set by the run that
recorded it), so ``⟨id⟩`` appears only where no tokenizer is known (a trace loaded from JSON).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from dynatree_core.records.trace import IterationRecord, Trace


Decoder = Callable[[int], str]


def as_decoder(tokenizer: Any) -> Decoder | None:
    """``decode(id) -> str`` from a tokenizer-like object.

    Accepts None, an object with ``.decode(list[int])`` (checked first: Hugging Face tokenizers
    are callable too, but calling one *encodes*), or a callable taking one id.
    """
    if tokenizer is None:
        return None
    method = getattr(tokenizer, "decode", None)
    if callable(method):
        return lambda t: method([int(t)])
    if callable(tokenizer):
        return tokenizer
    raise TypeError("tokenizer must have .decode(list[int]) -> str or be a callable "
                    f"decode(id) -> str; got {type(tokenizer).__name__}")


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
                   decode: Callable[[int], str] | None = None,
                   tokenizer: Any = None) -> "TokenNamer":
        if tokenizer is None:  # the recording pair's tokenizer, kept in memory by the run
            tokenizer = getattr(trace, "tokenizer", None)
        namer = cls(decode=decode or as_decoder(tokenizer))
        if isinstance(trace, Trace):
            namer.learn(trace.iterations)
        elif isinstance(trace, IterationRecord):
            namer.learn([trace])
        return namer


def resolve_namer(source: Trace | IterationRecord | None, namer: TokenNamer | None = None,
                  tokenizer: Any = None) -> TokenNamer:
    """The namer a view uses: ``namer`` if given (a ``tokenizer`` then fills in its missing
    decoder), else one learned from ``source`` with ``tokenizer`` as the fallback."""
    if namer is None:
        return TokenNamer.from_trace(source, tokenizer=tokenizer)
    if tokenizer is None:
        tokenizer = getattr(source, "tokenizer", None)
    if namer.decode is None and tokenizer is not None:
        namer.decode = as_decoder(tokenizer)
    return namer


def node_texts(rec: IterationRecord, namer: TokenNamer) -> list[str]:
    """Text of every node of ``rec.tree`` (recorded texts first, the namer where missing)."""
    texts = list(rec.token_texts or [])
    return [texts[i] if i < len(texts) else namer(t) for i, t in enumerate(rec.tree.tokens)]
