"""One context, many trees: draft and verify a single iteration repeatedly (for explorers).

:class:`TreeSession` prefills both models on a prompt once, then :meth:`TreeSession.regrow`
drafts a tree under any :class:`~dynatree_core.policy.config.GrowthRule` and verifies it with the
target (the decode loop's eager backend and drafters), each time from copies of the prefilled caches,
so moving a slider never re-reads the prompt. ``dynatree_viz.explore`` uses it as its live backend.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dynatree_core.drafters import DraftContext
from dynatree_core.policy.config import GrowthRule
from dynatree_core.runtime.backend import EagerTarget
from dynatree_core.runtime.tree.tree import DeviceTree
from dynatree_core.runtime.host_syncs import HostSyncs, to_device
from dynatree_core.runtime.tree.to_host import host_tree
from dynatree_core.drafters import make_drafter
from dynatree_core.engine.loop import tail_lookup
from dynatree_core.engine.run_checks import encode_prompt
from dynatree_core.pairs.pair import ModelPair
from dynatree_core.policy.sampling import GREEDY, SamplingConfig
from dynatree_core.policy.tree import DraftTree
from dynatree_core.runtime.sampling import draft_candidates, make_samplers


class Regrown(tuple):
    """What :meth:`TreeSession.regrow` returns: the pair ``(tree, choices)`` (unpacks as before), with
    ``target_prob``, the target's p of each node's token given its parent (None for the root; the
    warped p under sampling): what the live explorer colours by."""

    target_prob: list[float | None]

    def __new__(cls, tree: DraftTree, choices: list[int], target_prob: list[float | None]) -> "Regrown":
        out = super().__new__(cls, (tree, choices))
        out.target_prob = target_prob
        return out


class TreeSession:
    """Draft + verify one tree for a fixed prompt, as often as needed.

    Args:
        pair: a ModelPair with a draft model.
        prompt: text or token ids; its last token is the tree's root.
        top_k: draft candidates recorded per expanded node (>= any B_max you will try).
    """

    def __init__(self, pair: ModelPair, prompt: str | Sequence[int] | torch.Tensor, top_k: int = 8):
        if pair.draft is None:
            raise ValueError("TreeSession needs a ModelPair with a draft model")
        self.pair = pair
        self.prompt = encode_prompt(pair, prompt)
        self.top_k = top_k
        self.root = self.prompt[-1]
        self._target = EagerTarget(pair.target)  # the decode loop's eager backend; every tree verifies on a copy
        self._drafter = make_drafter(pair.draft, pair.lookup)
        hidden = None
        if len(self.prompt) > 1:
            hidden = self._target.prefill(to_device(self.prompt[:-1], pair.device)[None],
                                          self._drafter.needs_target_hidden, None)
        self._drafter.start(self.prompt, DraftContext(top_k), hidden)
        self._drafter.prefill()  # every regrown tree starts from the warm cache

    @property
    def drafter_kind(self) -> str:
        """Which drafter grows the trees (the explorer shows it)."""
        return self._drafter.kind

    @torch.inference_mode()
    def regrow(self, rule: GrowthRule, sampling: SamplingConfig | None = None) -> Regrown:
        """Draft a tree under ``rule`` and verify it: returns (tree, the target's token per node: its
        argmax, or under ``sampling`` the token drawn there, as the decode loop's first iteration
        would; a fixed seed draws with the same randomness every time, so moving a slider changes
        only what it should), with the target's p of every drafted token (:class:`Regrown`)."""
        sampling = sampling if sampling is not None else GREEDY
        # the candidates are draws under rejection: as many as the rule's breadth
        top_k = rule.max_breadth if sampling.rule == "rejection" else max(self.top_k, rule.max_breadth)
        both = make_samplers(sampling, self.pair.device, int(self.pair.target.config.vocab_size))
        draft_sampler, chooser = both if both is not None else (None, None)
        drafter = self._drafter.fork(DraftContext(max(1, top_k), sampler=draft_sampler))
        grown = DeviceTree(self.root, rule, drafter.ctx.top_k, self.pair.device,
                           position=len(self.prompt) - 1).grow(drafter, HostSyncs())
        if rule.lookup_tail:  # the prompt-lookup tail reads the prompt as the committed text
            tail, own = tail_lookup(drafter)
            if own:
                tail.start(self.prompt, drafter.ctx)
            grown.add_tail(tail.committed_on(grown.device), tail.source, HostSyncs(), rule.d_max + rule.lookup_tail)
        v = self._target.fork().verify(grown, False, None)
        arrays = grown.fetch(HostSyncs())
        n = grown.n
        if chooser is None:
            choices, p = v.argmax, torch.softmax(v.logits.float(), dim=-1)
        else:
            deepest = grown.depth + (rule.lookup_tail if grown.tail_nodes else 0)
            draft = draft_candidates(grown, draft_sampler) if sampling.rule == "rejection" else None
            choice = chooser.choose(v.logits, grown.depths[:n], deepest, v.prefix_len, draft)
            choices, p = choice.tokens, choice.p
        drafted = p[grown.parents[1:n], grown.tokens[1:n]].tolist()
        return Regrown(host_tree(arrays, grown.draft_calls), choices.tolist(), [None] + drafted)

    __call__ = regrow

    def token_text(self, token: int) -> str:
        tok = self.pair.tokenizer
        return tok.decode([token]) if tok is not None else str(token)
