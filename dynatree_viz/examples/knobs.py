"""Picking the state that makes the parameter explorer teach: an iteration where the accepted
length ℓ moves with as many knobs as possible, so a sweep shows nodes paid against ℓ gained.

Notebook 03 records a few prompts under a generous rule (every knob at the end of its range that
grows the tree), replays each recorded iteration under every knob value with no model
(:func:`~dynatree_core.policy.replay.replay_partial`), and opens its explorer and tour on the
iteration this module picks, so the figures stay a trade-off when the pair or the draft changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from dynatree_core.policy.config import DynaTreeConfig
from dynatree_core.policy.replay import replay_partial
from dynatree_core.records.trace import IterationRecord, Trace


@dataclass
class KnobExample:
    """The chosen iteration with, per knob, the (verified nodes, accepted ℓ) of each value."""

    record: IterationRecord
    #: knob -> [(value, nodes, ℓ)] in the order the values were given
    sweeps: dict[str, list[tuple[Any, int, int]]] = field(default_factory=dict)

    @property
    def moving(self) -> list[str]:
        """The knobs whose values change ℓ here."""
        return [k for k, rows in self.sweeps.items() if len({l for _, _, l in rows}) > 1]

    @property
    def spread(self) -> int:
        """Σ over knobs of (max ℓ - min ℓ): how much ℓ moves in all."""
        return sum(max(l for *_, l in rows) - min(l for *_, l in rows) for rows in self.sweeps.values())


def replayed(rec: IterationRecord, config: DynaTreeConfig) -> tuple[int, int]:
    """(verified nodes, accepted ℓ) of ``rec``'s tree replayed under ``config``'s rule; ℓ is a
    lower bound where the walk reaches a node the recording never verified."""
    tree, _ = replay_partial(rec.tree, config.growth_rule())
    target = {rec.tree.token_path(i): rec.target_argmax[i] for i in range(len(rec.tree))}
    choices = [target.get(tree.token_path(i)) for i in range(len(tree))]
    path, _, _ = tree.greedy_walk(choices)
    return tree.num_drafted, len(path)


def knob_sweeps(rec: IterationRecord, base: DynaTreeConfig, knobs: Mapping[str, Sequence[Any]],
                fixed: Mapping[str, Mapping[str, Any]] | None = None) -> KnobExample:
    """Replay ``rec`` under ``base`` with one knob changed at a time; ``fixed[name]`` holds other
    settings for that knob's sweep (e.g. a small D0 so that ρ_deep, which acts past D0, acts)."""
    fixed = fixed or {}
    return KnobExample(rec, {name: [(v, *replayed(rec, base.replace(**{**fixed.get(name, {}), name: v})))
                                    for v in values] for name, values in knobs.items()})


def knob_example(sources: Iterable[Trace | IterationRecord], base: DynaTreeConfig,
                 knobs: Mapping[str, Sequence[Any]],
                 fixed: Mapping[str, Mapping[str, Any]] | None = None) -> KnobExample | None:
    """The recorded iteration (from traces or records) where ℓ moves with the most knobs, then
    moves the most in all, then the earliest; None when there is no iteration at all
    (``fixed`` as :func:`knob_sweeps`).

    Record the sources under a rule at least as wide as every value tried (replay cannot grow
    where the draft never ran), e.g. ``base.replace(tau_h=max(...), d0=max(...), tau=min(...))``.
    """
    records = [r for s in sources for r in (s.iterations if isinstance(s, Trace) else [s])]
    best, best_key = None, None
    for order, rec in enumerate(records):
        ex = knob_sweeps(rec, base, knobs, fixed)
        key = (len(ex.moving), ex.spread, -order)
        if best_key is None or key > best_key:
            best, best_key = ex, key
    return best


def state_tokens(trace: Trace, rec: IterationRecord) -> list[int]:
    """The token ids up to and including ``rec``'s root (prompt + what was committed before it):
    a ``TreeSession`` on them re-drafts this very iteration live."""
    return (list(trace.prompt_tokens) + list(trace.tokens))[:rec.prefix_len + 1]


__all__ = ["KnobExample", "knob_example", "knob_sweeps", "replayed", "state_tokens"]
