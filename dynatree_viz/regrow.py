"""Backends for the parameter explorer: re-grow a tree under a new :class:`GrowthRule`.

Callable protocol (what ``explore`` accepts for live mode)::

    regrow(rule: GrowthRule) -> (tree: DraftTree, target_argmax: Sequence[int])
                              | (tree, target_argmax, token_texts: Sequence[str])

``tree`` is grown from the same root and context under ``rule`` (the engine does this with the
real draft, e.g. ``grow_tree(root, rule, propose)``), ``target_argmax[i]`` is the target's greedy
token after node i of that tree (one verification forward), ``token_texts[i]`` the text of
node i (optional). The callable may carry a ``decode(token_id) -> str`` attribute for naming
tokens (else every token shows as ``⟨id⟩``). An object with a ``.regrow`` method following the
same protocol is accepted too, with ``decode`` or ``token_text`` for naming:
``dynatree_core.engine.session.TreeSession`` is one.

Replay mode needs no model: :class:`ReplayBackend` re-grows a recorded iteration's tree from
the draft top-k lists the trace saved, and reads the target's choices from the recording.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dynatree_core.policy.config import GrowthRule
from dynatree_core.records.trace import IterationRecord
from dynatree_core.policy.tree import DraftTree
from dynatree_core.policy.replay import replay_partial

from dynatree_viz.scene import TreeScene
from dynatree_viz.tokens import TokenNamer, node_texts

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

    def __init__(self, rec: IterationRecord, namer: TokenNamer | None = None, drafter_kind: str | None = None):
        self.rec = rec
        #: who drafted the recorded tree (``Trace.drafter_kind``), shown by the explorer
        self.drafter_kind = drafter_kind
        self.namer = namer or TokenNamer.from_trace(rec)
        texts = node_texts(rec, self.namer)
        self._by_path = {rec.tree.token_path(i): i for i in range(len(rec.tree))}
        self._texts = texts

    def __call__(self, rule: GrowthRule) -> RegrowResult:
        tree, stopped = replay_partial(self.rec.tree, rule)
        argmax: list[int | None] = []
        texts: list[str] = []
        for i in range(len(tree)):
            j = self._by_path.get(tree.token_path(i))
            argmax.append(int(self.rec.target_argmax[j]) if j is not None else None)
            texts.append(self._texts[j] if j is not None else self.namer(tree.tokens[i]))
        scene = TreeScene.from_partial(tree, argmax, self.namer, texts)
        scene.index = self.rec.index
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
    """Re-grow with a model through a ``regrow(rule)`` callable (see the module docstring)."""

    mode = "live"

    def __init__(self, regrow: Regrow | Any, namer: TokenNamer | None = None):
        fn = regrow.regrow if hasattr(regrow, "regrow") else regrow
        if not callable(fn):
            raise TypeError(f"live mode needs a callable regrow(rule) or an object with .regrow, "
                            f"got {type(regrow).__name__}")
        self.regrow = fn
        #: ``"model"`` / ``"feature"`` when the source says (a TreeSession does)
        self.drafter_kind = getattr(regrow, "drafter_kind", None)
        decode = (getattr(regrow, "decode", None) or getattr(fn, "decode", None)
                  or getattr(regrow, "token_text", None))
        self.namer = namer or TokenNamer(decode=decode)

    def __call__(self, rule: GrowthRule) -> RegrowResult:
        out = self.regrow(rule)
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
        return RegrowResult(scene=TreeScene.from_partial(tree, argmax, self.namer, texts))
