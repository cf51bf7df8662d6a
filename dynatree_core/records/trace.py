"""Traces: everything one decoding run did, as plain data (torch-free).

This module is the contract between :mod:`dynatree_core` and :mod:`dynatree_viz`. It imports
only the standard library and numpy, so a saved trace can be loaded and rendered on a machine
without torch. ``Trace.to_json`` / ``Trace.from_json`` round-trip without loss.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

import numpy as np

from dynatree_core.policy.masks import with_prefix
from dynatree_core.policy.tree import DraftTree

SCHEMA_VERSION = "1.1"  # 1.1: the optional batch fields (absent at batch size 1)


@dataclass
class IterationRecord:
    """One draft → verify → select → commit round.

    ``prefix_len`` is the number of tokens in the target's KV cache before the root, so the root
    sits at position ``prefix_len`` and node u at ``prefix_len + d(u)`` (``position_ids``).
    ``target_argmax[i]`` is the target's token after node i: its greedy choice, or under sampling
    the token drawn there from p (what the selection compares the children with);
    ``target_prob_drafted[i]`` the target's probability of node i's own token given its parent
    (None for the root; under sampling p is the warped distribution). ``committed`` are the tokens this round appended to the output
    (accepted path tokens, then the bonus, cut at EOS or at ``max_new_tokens``).
    """

    index: int
    prefix_len: int
    tree: DraftTree
    target_argmax: list[int]
    accepted_path: list[int]
    committed: list[int]
    bonus: int | None
    position_ids: list[int] = field(default_factory=list)
    target_prob_drafted: list[float | None] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)
    committed_texts: list[str] = field(default_factory=list)
    history_before: dict | None = None
    history_after: dict | None = None
    timings: dict[str, float] = field(default_factory=dict)
    draft_forwards: int = 0
    target_forwards: int = 0
    #: device -> host synchronisations this round (at most draft levels + 1, see ``runtime.tree``)
    host_syncs: int = 0
    #: the draft's top-k ``[tokens, log-probs]`` after each committed token the draft read before
    #: this round's root (the last round's accepted leaves it never expanded): with the trees'
    #: own top-k, the draft's view of the whole committed sequence (:mod:`dynatree_core.records.oracle`)
    chain_topk: list | None = None
    #: under sampling (``Trace.sampling``), per node: ``choice_prob`` (p of the drawn token) and
    #: ``p_top`` ([tokens, probs] of p's largest entries); under ``match`` ``gumbel`` (the position's
    #: Gumbel noise at the drawn token) and ``score_top`` ([tokens, log p + g] of the largest perturbed
    #: scores: the first is the drawn token); under ``rejection`` ``coins`` (one per candidate, in draw
    #: order), ``accepted_rank`` (-1: drawn from the residual, -2: no candidates), ``uniform`` and
    #: ``interval`` (a residual draw's uniform and the drawn token's CDF interval it fell in),
    #: ``residual_top`` (the last residual norm((p - q)+) after the node's rejections; None where none was
    #: rejected), ``q_top`` and ``thresholds`` (each tested candidate's min(1, p_i / q_i) against
    #: the residual at its turn; None where not tested), ``rejection_steps`` (None where nothing was
    #: rejected, else [tokens, p_i, q_i]: p_i and q_i on those tokens before each tested candidate up to
    #: the last rejection, and after it); with shared draft noise ``draft_score_top`` per expanded node
    #: ([tokens, log q + g, log q] of the draft's largest perturbed scores at the position its children
    #: fill: the draft's side of the coupling; None for nodes not expanded). None for greedy runs.
    sampling: dict | None = None
    #: in a batched run (``Trace.batch``): ``iteration`` (the batch iteration this record belongs to:
    #: one verify forward for every active row), ``padded_width`` (the verified width W every row was
    #: padded to: root + the largest row's nodes), ``active`` (the rows in that forward) and ``nodes``
    #: (this row's verified width n_b = 1 + its nodes). None: a batch-1 run
    batch: dict | None = None
    #: the recording pair's tokenizer (``.decode(list[int])``), in memory only: set by the run
    #: that recorded it, never serialized (a loaded trace has None), so views can name every
    #: token as text, not only those whose text the record stores
    tokenizer: ClassVar[Any] = None

    @property
    def accepted_length(self) -> int:
        """ℓ: drafted tokens accepted this round (bonus excluded)."""
        return len(self.accepted_path)

    @property
    def acceptance(self) -> float | None:
        """a_r = ℓ / depth of the drafted tree (None when nothing was drafted)."""
        d = self.tree.depth
        return self.accepted_length / d if d > 0 else None

    @property
    def num_nodes(self) -> int:
        """Drafted (verified) nodes, the root excluded."""
        return self.tree.num_drafted

    def attention_mask(self, include_prefix: bool = True) -> np.ndarray:
        """The boolean verification mask: [n, prefix_len + n] (or [n, n] without the prefix).

        True = may attend. Every row sees the whole prefix plus its own ancestors and itself.
        The engine feeds the target the float additive version (0 where True, dtype-min where
        False).
        """
        tree_part = self.tree.ancestor_mask()
        return with_prefix(tree_part, self.prefix_len) if include_prefix else tree_part

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in _RECORD_FIELDS}
        d["tree"] = self.tree.to_dict()
        for extra in ("sampling", "batch"):  # absent where unused: records stay as they were written before
            if getattr(self, extra) is not None:
                d[extra] = getattr(self, extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "IterationRecord":
        kw = {k: d[k] for k in (*_RECORD_FIELDS, "sampling", "batch") if k in d}
        return cls(tree=DraftTree.from_dict(d["tree"]), **kw)


_RECORD_FIELDS = ("index", "prefix_len", "target_argmax", "accepted_path", "committed", "bonus",
                  "position_ids", "target_prob_drafted", "token_texts", "committed_texts",
                  "history_before", "history_after", "timings", "draft_forwards",
                  "target_forwards", "host_syncs", "chain_topk")


@dataclass
class Trace:
    """A whole run: settings, prompt, every iteration, the output and its metrics."""

    method: str
    config: dict[str, Any]
    target_name: str
    draft_name: str | None
    prompt_tokens: list[int]
    prompt_text: str | None = None
    eos_token_id: int | None = None
    max_new_tokens: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    iterations: list[IterationRecord] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    text: str | None = None
    metrics: dict[str, Any] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    #: which drafter produced the trees: ``{"kind": "model" | "feature", ...settings}`` (None for AR)
    drafter: dict[str, Any] | None = None
    #: what the models' linear layers ran on (``"onednn"``/``"torch"``; None in older traces):
    #: it shapes the timings, never the tokens' exactness
    linear_kernel: str | None = None
    #: the sampling settings (:class:`~dynatree_core.policy.sampling.SamplingConfig` as a dict:
    #: temperature, top_p, top_k, seed, verify); None: greedy decoding
    sampling: dict[str, Any] | None = None
    #: what ran the target's forwards when not eager (``"static"``, ``"compiled"``, ``"graphs"``;
    #: :mod:`dynatree_core.runtime.static.fast_path`); None: eager
    runtime: str | None = None
    #: a recording made for replay (``generate(..., trace="replay")``): ``ranges`` (each knob's
    #: page range the recording covers), ``d_max_cap`` (each iteration's D_max cap: the tokens still
    #: wanted, less the bonus) and ``nodes`` (each iteration's envelope size); None: an ordinary trace
    replay: dict[str, Any] | None = None
    #: a row of a batched run (``generate(pair, [prompt, ...])``): ``size`` (the batch size B) and
    #: ``row`` (this prompt's index); None: a batch-1 run
    batch: dict[str, Any] | None = None
    #: the recording pair's tokenizer, in memory only (never serialized; see IterationRecord)
    tokenizer: ClassVar[Any] = None

    @property
    def drafter_kind(self) -> str | None:
        """``"model"``, ``"feature"`` (or another drafter's kind); None for AR or old traces."""
        return (self.drafter or {}).get("kind")

    def __len__(self) -> int:
        return len(self.iterations)

    def __iter__(self) -> Iterator[IterationRecord]:
        return iter(self.iterations)

    def __getitem__(self, i: int) -> IterationRecord:
        return self.iterations[i]

    def committed_tokens(self) -> list[int]:
        """Concatenation of every iteration's committed tokens (equals ``tokens``)."""
        return [t for rec in self.iterations for t in rec.committed]

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in _TRACE_FIELDS}
        for extra in ("sampling", "runtime", "replay", "batch"):  # absent from greedy eager traces, as before
            if getattr(self, extra) is not None:
                d[extra] = getattr(self, extra)
        d["iterations"] = [r.to_dict() for r in self.iterations]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trace":
        version = d.get("schema_version")
        if version is None or str(version).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"unsupported trace schema_version {version!r}; this library reads {SCHEMA_VERSION}")
        kw = {k: d[k] for k in (*_TRACE_FIELDS, "sampling", "runtime", "replay", "batch") if k in d}
        return cls(iterations=[IterationRecord.from_dict(r) for r in d["iterations"]], **kw)

    def to_json(self, path: str | os.PathLike | None = None, indent: int | None = None) -> str:
        """Serialise (and write to ``path`` if given, atomically). Returns the JSON text."""
        text = json.dumps(_jsonable(self.to_dict()), indent=indent, allow_nan=False)
        if path is not None:
            path = Path(path)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        return text

    @classmethod
    def from_json(cls, path_or_text: str | os.PathLike) -> "Trace":
        """Load from a file path (or from a JSON string starting with ``{``)."""
        s = str(path_or_text)
        text = s if s.lstrip().startswith("{") else Path(s).read_text(encoding="utf-8")
        return cls.from_dict(_unjsonable(json.loads(text)))


_TRACE_FIELDS = ("schema_version", "method", "config", "target_name", "draft_name",
                 "prompt_tokens", "prompt_text", "eos_token_id", "max_new_tokens", "device",
                 "dtype", "tokens", "text", "metrics", "versions", "drafter", "linear_kernel")

# JSON has no -inf/inf/nan: log-probs can be -inf, so they are written as tagged strings.
_SPECIAL = {"-inf": -math.inf, "inf": math.inf, "nan": math.nan}


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return {"__float__": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x


def _unjsonable(x: Any) -> Any:
    if isinstance(x, dict):
        if set(x) == {"__float__"}:
            return _SPECIAL[x["__float__"]]
        return {k: _unjsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_unjsonable(v) for v in x]
    return x
