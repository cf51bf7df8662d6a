"""Which pair a benchmark runs, as a recipe a remote worker can follow, and what the driver needs
to know about a pair without holding its weights.

:class:`PairSpec` names a pair the way the command line does (the embedded default, a tiny test
pair, or Hugging Face names/paths, with device, dtype and device map) and loads it with
:meth:`~dynatree_core.pairs.pair.ModelPair.named`:
the serial run loads it once in this process, a Ray run once per worker. :class:`PairInfo` is
what the protocol needs outside decoding: the tokenizer (prompt selection), the context windows
(length checks) and the description written into the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any



@dataclass(frozen=True)
class PairSpec:
    """A model pair by name. ``target`` None: the embedded SmolLM2-135M pair with ``drafter``
    (one of :data:`PAIR_DRAFTS`; a ``draft`` then names a feature-draft directory used instead of
    the shipped feature draft); ``drafter="lookup"``: the embedded or the named target with
    model-free prompt lookup; ``"model+lookup"`` / ``"feature+lookup"`` with a named target: its
    ``draft`` (of that kind) with prompt lookup mixed in. ``device_map`` (e.g. ``"auto"``)
    splits a large target across the GPUs of one machine
    (:meth:`~dynatree_core.pairs.pair.ModelPair.from_pretrained`). ``linear_kernel`` puts the loaded
    pair's linear layers on a kernel (:meth:`~dynatree_core.pairs.pair.ModelPair.use_linear_kernel`)."""

    target: str | None = None
    draft: str | None = None
    drafter: str = "auto"
    device: str = "auto"
    dtype: str | None = None
    draft_noise: float = 0.05
    device_map: str | None = None
    linear_kernel: str = "auto"

    def describe(self) -> str:
        if self.target is None:
            draft = f", feature draft {self.draft}" if self.draft else ""
            return f"the embedded pair (SmolLM2-135M-Instruct{draft}, drafter {self.drafter})"
        if self.drafter == "lookup":
            return f"{self.target} + prompt lookup"
        mixed = " with prompt lookup" if self.drafter.endswith("+lookup") else ""
        return self.target + (f" + {self.draft}" if self.draft else "") + mixed

    def load(self) -> Any:
        from dynatree_core.pairs.pair import ModelPair

        return ModelPair.named(self.target or "default", draft=self.draft, drafter=self.drafter, device=self.device,
                               dtype=self.dtype, draft_noise=self.draft_noise, device_map=self.device_map,
                               linear_kernel=self.linear_kernel)


@dataclass
class PairInfo:
    """A loaded pair's description (picklable: a Ray worker sends it to the driver)."""

    target_name: str
    draft_name: str | None
    drafter_kind: str | None
    #: the drafter's kind and settings, as every result records them
    drafter: dict[str, Any] | None
    target_params: int
    draft_params: int | None
    device: str
    dtype: str
    #: what the linear layers run on: "onednn" (prepacked) or "torch" (ModelPair.linear_kernel)
    linear_kernel: str
    #: role -> context window (None: the config states none)
    windows: dict[str, int | None]
    tokenizer: Any = field(default=None, repr=False)
    #: why the draft cannot be Hugging Face's assistant model (None: it can)
    assistant_error: str | None = None

    @property
    def has_draft(self) -> bool:
        return self.draft_params is not None

    def models(self) -> dict[str, Any]:
        """The result's ``models`` block."""
        return {"target": self.target_name, "draft": self.draft_name, "drafter": self.drafter,
                "target_params": self.target_params, "draft_params": self.draft_params,
                "linear_kernel": self.linear_kernel}


def pair_info(pair: Any) -> PairInfo:
    from dynatree_core.pairs.pair import context_window
    from dynatree_core.bench.hf_assisted import check_draft

    try:
        check_draft(pair)
        assistant_error = None
    except ValueError as e:
        assistant_error = str(e)

    windows = {"target": context_window(pair.target)}
    if pair.draft is not None:
        windows["draft"] = context_window(pair.draft)
    return PairInfo(target_name=pair.target_name, draft_name=pair.draft_name, drafter_kind=pair.drafter_kind,
                    drafter=_drafter_settings(pair), target_params=sum(p.numel() for p in pair.target.parameters()),
                    draft_params=_draft_params(pair.draft),
                    device=str(pair.device), dtype=str(pair.dtype).replace("torch.", ""),
                    linear_kernel=pair.linear_kernel, windows=windows,
                    tokenizer=pair.tokenizer, assistant_error=assistant_error)


def _draft_params(draft: Any) -> int | None:
    """The draft's parameter count: None without a draft, 0 for a model-free one (prompt lookup)."""
    if draft is None:
        return None
    return sum(p.numel() for p in draft.parameters()) if hasattr(draft, "parameters") else 0


def _drafter_settings(pair: Any) -> dict[str, Any] | None:
    """Which drafter the pair's draft gives (kind and settings), as recorded in every result."""
    if pair.draft is None:
        return None
    from dynatree_core.drafters import make_drafter

    d = make_drafter(pair.draft, pair.lookup).settings()
    d.pop("top_k", None)  # set per method by the engine
    return d
