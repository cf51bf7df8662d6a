"""The best possible tree, replayed from a run's records (torch-free): how much more could any tree of
the same size have accepted? Per iteration, the oracle's *reach* is how far the target's own
continuation stays inside the draft's top-K or what a prompt-lookup tail proposed (:func:`oracle_iterations`), best(n) = min(n, reach);
:func:`summarize_oracle` gives the gap between what the trees accepted and that bound.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Mapping, Sequence

from dynatree_core.policy.checks import int_at_least
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import LOOKUP_TAIL

__all__ = ["OracleIteration", "OracleSummary", "oracle_iterations", "oracle_trace", "summarize_oracle"]


@dataclass
class OracleIteration:
    """One iteration's oracle evidence.

    ``accepted``: ℓ_r, the policy's accepted length (capped at the room for a bonus, like the
    reach, so that a final iteration cut at EOS or ``max_new_tokens`` is measured on the same
    tokens); ``nodes``: n_r, its verified nodes (root excluded); ``reach``: the longest continuation any tree could
    hold (a lower bound if ``truncated``); ``top_k``: the K the reach was searched with (0: no
    draft distribution was recorded, or unknown). ``accepted`` and ``nodes`` are the run's own: a
    prompt-lookup tail's nodes count in both (they are verified and accepted like drafted ones),
    so ℓ̄ and the mean tree size agree with the run's :class:`~dynatree_core.records.metrics.Metrics`;
    ``tail_accepted`` and ``tail_nodes`` say how many of them came from the tail.
    """

    index: int
    accepted: int
    nodes: int
    reach: int
    truncated: bool
    top_k: int = 0
    tail_accepted: int = 0
    tail_nodes: int = 0

    def best(self, n: int) -> int:
        """best_r(n) = min(n, reach_r): the most tokens a tree of ``n`` nodes accepts."""
        return min(int_at_least("n", n, 0), self.reach)


# --- the replay ---------------------------------------------------------------------------
def oracle_trace(trace: Trace, top_k: int | None = None) -> list[OracleIteration]:
    """:func:`oracle_iterations` of a whole :class:`~dynatree_core.records.trace.Trace`."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a dynatree_core.records.trace.Trace, got {type(trace).__name__}")
    return oracle_iterations(trace.iterations, top_k=top_k)


def oracle_iterations(records: Sequence[IterationRecord] | Trace,
                      top_k: int | None = None) -> list[OracleIteration]:
    """Per iteration of one run: accepted length, tree size and the oracle's reach.

    The committed sequence is S = [root of iteration 0] + committed_0 + committed_1 + ..., iteration
    r's root sits at P_r (P_{r+1} = P_r + |committed_r|), and D_i is the draft's top-K after S[..i].
    Under greedy verification a tree accepts exactly the path spelling S[P_r + 1], S[P_r + 2], ..., so
    iteration r's **reach** is the largest j with S[P_r + i] a candidate after S[..P_r + i - 1] for
    i = 1..j and P_r + j + 1 <= |S| - 1 (room for the bonus); a tree of n nodes accepts at most
    min(n, reach_r). The candidates after S[..i] are D_i[:K] (where D_i is known) and the token a
    prompt-lookup tail node of some iteration proposed there and the target accepted (the tail's
    proposals are read from the trees, so that a run with a tail never beats its own oracle). A walk
    that stops where neither is known is flagged ``truncated`` (a lower bound).

    ``records`` must be consecutive iterations of one run (each root is the token the previous
    iteration committed last; ValueError otherwise). ``top_k``: K, the candidates per
    distribution a tree may use (int >= 1); None: the shortest recorded top-k length, so methods
    recorded with different widths are searched over the same candidates.
    """
    if isinstance(records, Trace):
        records = records.iterations
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Sequence):
        raise TypeError(f"records must be a sequence of IterationRecord or a Trace, got {type(records).__name__}")
    if top_k is not None:
        top_k = int_at_least("top_k", top_k, 1)
    records = list(records)
    if not records:
        return []
    S, P = _committed_sequence(records)
    D = _distributions(records, S, P)
    tail_hits = _tail_hits(records, P)
    K = top_k if top_k is not None else _shortest_top_k(records)
    # run[i]: how many consecutive steps i, i+1, ... the candidates hold the continuation
    # (S[i+1] in D_i[:K] or proposed by an accepted tail node, and so on): one backward pass, so
    # that a long run with long reaches stays linear in |S| instead of walking every reach anew
    run = [0] * len(S)
    for i in range(len(S) - 2, -1, -1):
        cands = D.get(i)
        if i in tail_hits or (cands is not None and S[i + 1] in cands[:K]):
            run[i] = run[i + 1] + 1
    out = []
    for r, rec in enumerate(records):
        # j accepted tokens need S[P_r + j + 1] (the bonus) to exist: j <= room
        room = max(len(S) - 2 - P[r], 0)
        reach = min(run[P[r]], room)
        # the walk stopped at an unknown distribution (not at a miss, not at the room limit)
        truncated = reach < room and (P[r] + reach) not in D
        tail = _tail_nodes(rec)
        out.append(OracleIteration(index=int(rec.index), accepted=min(len(rec.accepted_path), room),
                                   nodes=int(rec.tree.num_drafted), reach=reach, truncated=truncated, top_k=K,
                                   tail_accepted=sum(1 for u in rec.accepted_path if u in tail),
                                   tail_nodes=len(tail)))
    return out


def _tail_nodes(rec: IterationRecord) -> set[int]:
    """The prompt-lookup tail's nodes of one iteration's tree."""
    return {u for u, why in enumerate(rec.tree.stop_reasons) if why == LOOKUP_TAIL}


def _tail_hits(records: list[IterationRecord], P: list[int]) -> set[int]:
    """Every index i where an accepted tail node proposed S[i + 1] (the candidate the lookup gave
    after S[..i]; the node's ancestors were accepted, so its context is S[..i]). Call after
    :func:`_distributions`, which checks that each accepted path spells S."""
    hits: set[int] = set()
    for r, rec in enumerate(records):
        tail = _tail_nodes(rec)
        for d, u in enumerate(rec.accepted_path, start=1):
            if u in tail and d <= len(rec.committed):
                hits.add(P[r] + d - 1)
    return hits


def _committed_sequence(records: list[IterationRecord]) -> tuple[list[int], list[int]]:
    """S and the root index P_r of every iteration; checks that the records chain up."""
    for r, rec in enumerate(records):
        if not isinstance(rec, IterationRecord):
            raise TypeError(f"records[{r}] must be an IterationRecord, got {type(rec).__name__}")
    S = [int(records[0].tree.tokens[0])]
    P: list[int] = []
    for r, rec in enumerate(records):
        p = len(S) - 1
        root = int(rec.tree.tokens[0])
        if S[p] != root:
            raise ValueError(f"records[{r}]: root token {root} is not the last committed token {S[p]} "
                             "(S[P_r]): records must be consecutive iterations of one run")
        P.append(p)
        S.extend(int(t) for t in rec.committed)
    return S, P


def _distributions(records: list[IterationRecord], S: list[int], P: list[int]) -> dict[int, list[int]]:
    """D_i (candidate tokens only) for every index i some record knows.

    Sources: (a) iteration r's tree: a node u on the committed sequence (the root or on
    ``accepted_path``) fed to the draft gives D_{P_r + d(u)}; (b) iteration r's ``chain_topk``: the
    draft's top-k after each committed token it read at level 0 before the root, rows j = 0..m-1
    giving D_{P_r - m + j} (indices < 0 are prompt tokens). A draft reading features (EAGLE) may give
    different D_i from different sources (a tree node sees the draft's features, a chain row the
    target's), so: a tree beats a chain row; between trees, the one whose root is nearest before i;
    between chain rows, the earliest iteration's (the first time the draft read that token).
    """
    D: dict[int, list[int]] = {}
    # (b) chain rows: latest iteration first, so that the earliest reader of a token wins
    for r in range(len(records) - 1, -1, -1):
        chain = getattr(records[r], "chain_topk", None) or []
        m = len(chain)
        for j, row in enumerate(chain):
            i = P[r] - m + j
            if i >= 0:
                D[i] = _row_tokens(row, f"records[{r}].chain_topk[{j}]")
    # (a) trees, in order: a later tree's root is nearer before i, so it overwrites
    for r, rec in enumerate(records):
        tree, path = rec.tree, list(rec.accepted_path)
        n_committed = len(rec.committed)
        for pos, u in enumerate([0] + path):
            if not (isinstance(u, Integral) and 0 <= u < len(tree)) or (pos > 0 and u == 0):
                raise ValueError(f"records[{r}].accepted_path: node {u!r} is not a drafted node "
                                 f"(ids 1..{len(tree) - 1})")
            if pos > 0 and int(tree.parents[u]) != ([0] + path)[pos - 1]:
                raise ValueError(f"records[{r}].accepted_path: node {u} is not a child of the node before it "
                                 "(the path must go root's child, grandchild, ...)")
            d = pos  # = depth(u) on a root-to-node chain
            if d > n_committed:  # cut at EOS / max_new_tokens: these tokens are not in S
                break
            if int(tree.tokens[u]) != S[P[r] + d]:
                raise ValueError(f"records[{r}]: accepted node {u} has token {tree.tokens[u]} but the run "
                                 f"committed {S[P[r] + d]} there")
            if tree.topk_tokens[u] is not None:
                D[P[r] + d] = [int(t) for t in tree.topk_tokens[u]]
    return D


def _row_tokens(row: Any, where: str) -> list[int]:
    if isinstance(row, Mapping) or not isinstance(row, Sequence) or len(row) != 2:
        raise ValueError(f"{where} must be a pair [tokens, log-probs], got {row!r}")
    return [int(t) for t in row[0]]


def _shortest_top_k(records: list[IterationRecord]) -> int:
    """The shortest top-k list recorded in the run (trees' fed nodes and chain rows); 0 if none."""
    lengths = [len(tk) for rec in records for tk in rec.tree.topk_tokens if tk is not None]
    lengths += [len(row[0]) for rec in records for row in (getattr(rec, "chain_topk", None) or [])]
    return min(lengths, default=0)


# --- the summary --------------------------------------------------------------------------
@dataclass
class OracleSummary:
    """The gap between a policy and the best tree, pooled over iterations (and runs).

    ``n``: the tree size the oracle is given, a whole number of nodes (default: the policy's mean
    size, rounded); ``mean_nodes``: that mean size itself, n̄ = mean n_r (None where unknown: a
    summary written before it was kept), so that a display can show the mean and say that n rounds it;
    ``mean_accepted``: ℓ̄; ``mean_oracle``: mean best_r(n); ``gap`` = mean_oracle − ℓ̄;
    ``mean_oracle_own``: mean best_r(n_r), each iteration at the policy's own size there, with
    ``gap_own`` = mean_oracle_own − ℓ̄ (>= 0: no policy beats the oracle at its own size);
    ``truncated_fraction``: share of iterations whose reach is only a lower bound;
    ``curve[i]`` = mean best_r(i) for i = 0..n_curve; ``top_k``: K (0: unknown or mixed zeros);
    ``mean_tail_accepted``: the part of ℓ̄ a prompt-lookup tail accepted (0 without a tail).
    """

    n: int
    mean_accepted: float
    mean_oracle: float
    gap: float
    mean_oracle_own: float
    gap_own: float
    truncated_fraction: float
    curve: list[float] = field(default_factory=list)
    iterations: int = 0
    top_k: int = 0
    mean_tail_accepted: float = 0.0
    mean_nodes: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["curve"] = list(self.curve)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OracleSummary":
        """Inverse of :meth:`to_dict` (KeyError for a missing field, TypeError/ValueError for a bad one)."""
        if not isinstance(d, Mapping):
            raise TypeError(f"d must be a mapping (OracleSummary.to_dict()), got {type(d).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = set(d) - set(names)
        if unknown:
            raise ValueError(f"d has unknown OracleSummary fields {sorted(unknown)}; allowed: {names}")
        floats = {k: _real(k, d[k]) for k in ("mean_accepted", "mean_oracle", "gap", "mean_oracle_own",
                                                "gap_own", "truncated_fraction")}
        # written before the tail was scored: no tail part
        floats["mean_tail_accepted"] = _real("mean_tail_accepted", d.get("mean_tail_accepted", 0.0))
        # written before the mean size was kept: unknown, not invented from the rounded n
        mean_nodes = None if d.get("mean_nodes") is None else _real("mean_nodes", d["mean_nodes"])
        curve = d["curve"]
        if isinstance(curve, (str, bytes)) or not isinstance(curve, Sequence):
            raise TypeError(f"curve must be a list of numbers, got {type(curve).__name__}")
        return cls(n=int_at_least("n", d["n"], 0), curve=[_real(f"curve[{i}]", v) for i, v in enumerate(curve)],
                   iterations=int_at_least("iterations", d["iterations"], 0),
                   top_k=int_at_least("top_k", d["top_k"], 0), mean_nodes=mean_nodes, **floats)


def summarize_oracle(rows: Sequence[OracleIteration] | Sequence[Sequence[OracleIteration]],
                     n: int | None = None, n_curve: int = 16) -> OracleSummary:
    """Pool oracle rows (one run's, or a list of runs') into an :class:`OracleSummary`.

    ``n`` (int >= 0): the oracle's tree size; None: round(mean n_r), the policy's own mean size.
    ``n_curve`` (int >= 0): the last size of ``curve``. Iterations with no drafted node (AR)
    count like any other (ℓ = 0, best(0) = 0). Raises ValueError on empty input, and on rows
    searched with different nonzero K (their oracles are not comparable).
    """
    flat = _flatten(rows)
    if not flat:
        raise ValueError("rows must hold at least one OracleIteration, got none")
    if n is not None:
        n = int_at_least("n", n, 0)
    n_curve = int_at_least("n_curve", n_curve, 0)
    ks = {r.top_k for r in flat if r.top_k}
    if len(ks) > 1:
        raise ValueError(f"rows were searched with different top_k {sorted(ks)}: recompute them with one "
                         "oracle_iterations(..., top_k=K)")
    count = len(flat)

    def mean(xs: Sequence[float]) -> float:
        return math.fsum(xs) / count

    mean_nodes = mean([r.nodes for r in flat])
    if n is None:
        n = int(round(mean_nodes))
    mean_accepted = mean([r.accepted for r in flat])
    mean_oracle = mean([r.best(n) for r in flat])
    mean_own = mean([r.best(r.nodes) for r in flat])
    return OracleSummary(
        n=n, mean_accepted=mean_accepted, mean_oracle=mean_oracle, gap=mean_oracle - mean_accepted,
        mean_oracle_own=mean_own, gap_own=mean_own - mean_accepted,
        truncated_fraction=sum(bool(r.truncated) for r in flat) / count,
        curve=[mean([r.best(i) for r in flat]) for i in range(n_curve + 1)],
        iterations=count, top_k=next(iter(ks), 0), mean_tail_accepted=mean([r.tail_accepted for r in flat]),
        mean_nodes=mean_nodes)


def _flatten(rows: Any) -> list[OracleIteration]:
    if isinstance(rows, OracleIteration):
        raise TypeError("rows must be a sequence of OracleIteration (or of such sequences), got one OracleIteration")
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise TypeError(f"rows must be a sequence of OracleIteration (or of such sequences), got {type(rows).__name__}")
    out: list[OracleIteration] = []
    for k, item in enumerate(rows):
        if isinstance(item, OracleIteration):
            out.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, (str, bytes, Mapping)):
            for j, x in enumerate(item):
                if not isinstance(x, OracleIteration):
                    raise TypeError(f"rows[{k}][{j}] must be an OracleIteration, got {type(x).__name__}")
                out.append(x)
        else:
            raise TypeError(f"rows[{k}] must be an OracleIteration or a sequence of them, got {type(item).__name__}")
    return out


# --- validation helpers -------------------------------------------------------------------
def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)
