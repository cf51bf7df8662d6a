"""Backends for the parameter explorer: re-grow a tree under a new :class:`GrowthRule`.

Callable protocol (what ``explore`` accepts for live mode)::

    regrow(rule: GrowthRule[, sampling: SamplingConfig])
        -> (tree: DraftTree, target_argmax: Sequence[int])
         | (tree, target_argmax, token_texts: Sequence[str])

``tree`` is grown from the same root and context under ``rule`` (the engine does this with the
real draft, e.g. ``grow_tree(root, rule, propose)``), ``target_argmax[i]`` is the target's greedy
token after node i of that tree (one verification forward), ``token_texts[i]`` the text of
node i (optional). A callable that also takes ``sampling`` (a
:class:`~dynatree_core.policy.sampling.SamplingConfig`) grows the tree from the draft's warped
distribution and returns the target's *draws* in place of its argmax, with the config's fixed
seed, so the same settings give the same tree every time; the explorer then shows sampling
sliders. One that takes only ``rule`` is called with the rule alone. The callable may carry a ``decode(token_id) -> str`` attribute for naming
tokens (else every token shows as ``⟨id⟩``). An object with a ``.regrow`` method following the
same protocol is accepted too, with ``decode`` or ``token_text`` for naming:
``dynatree_core.engine.session.TreeSession`` is one.

Replay mode needs no model: :class:`ReplayBackend` re-grows a recorded iteration's tree from
the draft top-k lists the trace saved, and reads the target's choices (its draws, under
sampling) and its p(token) from the recording; it cannot draw anew, so it shows the recorded
temperature only.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dynatree_core.policy.config import GrowthRule
from dynatree_core.policy.sampling import SamplingConfig
from dynatree_core.records.trace import IterationRecord
from dynatree_core.policy.tree import DraftTree
from dynatree_core.policy.replay import replay_partial

from dynatree_viz.core.scene import TreeScene
from dynatree_viz.core.tokens import TokenNamer, node_texts

Regrow = Callable[[GrowthRule], tuple]


@dataclass
class RegrowResult:
    """A re-grown tree with what is known about its verification."""

    scene: TreeScene
    #: node ids of the new tree where replay had to stop (draft never ran there when recorded)
    stopped: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tree(self) -> DraftTree:
        return self.scene.tree


#: tokens from the root down to node i (the key that matches nodes across trees)
token_path = DraftTree.token_path


class ReplayBackend:
    """Re-grow one recorded iteration under new rules, with no model."""

    mode = "replay"

    def __init__(self, rec: IterationRecord, namer: TokenNamer | None = None, drafter_kind: str | None = None,
                 sampling: dict | None = None):
        self.rec = rec
        #: who drafted the recorded tree (``Trace.drafter_kind``), shown by the explorer
        self.drafter_kind = drafter_kind
        #: the recorded sampling settings (``Trace.sampling``; None: greedy or not known)
        self.sampling = sampling
        self.namer = namer or TokenNamer.from_trace(rec)
        texts = node_texts(rec, self.namer)
        self._by_path = {rec.tree.token_path(i): i for i in range(len(rec.tree))}
        self._texts = texts

    def __call__(self, rule: GrowthRule) -> RegrowResult:
        tree, stopped = replay_partial(self.rec.tree, rule)
        rec, probs = self.rec, list(self.rec.target_prob_drafted or [])
        argmax: list[int | None] = []
        texts: list[str] = []
        target_prob: list[float | None] = []
        for i in range(len(tree)):
            j = self._by_path.get(tree.token_path(i))
            argmax.append(int(rec.target_argmax[j]) if j is not None else None)
            texts.append(self._texts[j] if j is not None else self.namer(tree.tokens[i]))
            target_prob.append(probs[j] if j is not None and j < len(probs) else None)
        scene = TreeScene.from_partial(tree, argmax, self.namer, texts, target_prob,
                                       sampled=rec.sampling is not None)
        scene.index = rec.index
        notes = []
        if stopped:
            notes.append(f"growth stopped at {len(stopped)} node(s) the recording never expanded "
                         f"(#{', #'.join(map(str, stopped[:8]))}{', …' if len(stopped) > 8 else ''}): "
                         "replay only knows the draft where it ran; use live mode for more")
        unverified = sum(1 for a in argmax if a is None)
        if unverified:
            notes.append(f"{unverified} node(s) were not verified in the recording; the target's "
                         "choice there is unknown")
        if not scene.complete:
            notes.append("accepted length is a lower bound (the accepted path reaches a node the "
                         "target never saw)")
        return RegrowResult(scene=scene, stopped=stopped, notes=notes)


class LiveBackend:
    """Re-grow with a model through a ``regrow(rule[, sampling])`` callable (see the module
    docstring); ``takes_sampling`` says whether it accepts a SamplingConfig."""

    mode = "live"

    def __init__(self, regrow: Regrow | Any, namer: TokenNamer | None = None):
        fn = regrow.regrow if hasattr(regrow, "regrow") else regrow
        if not callable(fn):
            raise TypeError(f"live mode needs a callable regrow(rule) or an object with .regrow, "
                            f"got {type(regrow).__name__}")
        self.regrow = fn
        self.takes_sampling = takes_sampling(fn)
        #: ``"model"`` / ``"feature"`` when the source says (a TreeSession does)
        self.drafter_kind = getattr(regrow, "drafter_kind", None)
        decode = (getattr(regrow, "decode", None) or getattr(fn, "decode", None)
                  or getattr(regrow, "token_text", None))
        self.namer = namer or TokenNamer(decode=decode)

    def __call__(self, rule: GrowthRule, sampling: SamplingConfig | None = None) -> RegrowResult:
        if sampling is None:  # a one-argument regrow(rule) keeps working
            out = self.regrow(rule)
        elif not self.takes_sampling:
            raise TypeError("this regrow callable takes no sampling argument: regrow(rule) only")
        else:
            out = self.regrow(rule, sampling)
        if not isinstance(out, tuple) or len(out) not in (2, 3):
            raise TypeError("regrow(rule) must return (DraftTree, target_argmax) or "
                            f"(DraftTree, target_argmax, token_texts), got {type(out).__name__}")
        tree, argmax = out[0], [int(a) for a in out[1]]
        if len(argmax) != len(tree):
            raise ValueError(f"target_argmax has {len(argmax)} entries for a {len(tree)}-node tree")
        texts: Sequence[str] | None = list(out[2]) if len(out) == 3 else None
        if texts is not None:
            for tok, t in zip(tree.tokens, texts):
                self.namer.known.setdefault(int(tok), t)
        sampled = sampling is not None and not sampling.greedy
        # a TreeSession's result also carries the target's p of every drafted token: the colour under sampling
        target_prob = list(getattr(out, "target_prob", None) or [])
        return RegrowResult(scene=TreeScene.from_partial(tree, argmax, self.namer, texts, target_prob,
                                                         sampled=sampled))


def takes_sampling(fn: Callable) -> bool:
    """Whether ``fn`` can be called as ``fn(rule, sampling)``: a second positional parameter or
    ``*args`` (a ``sampling`` keyword alone is not enough: it is passed positionally)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a signature: assume not
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
