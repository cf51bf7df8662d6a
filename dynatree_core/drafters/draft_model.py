"""The draft ("student") architecture of the default model pair.

The draft is a real Hugging Face causal LM, a :class:`~transformers.LlamaForCausalLM`
with only two decoder layers, so the engine can drive it exactly like the target
(``input_ids``, 4D float additive ``attention_mask``, explicit ``position_ids``,
``cache=DynamicCache(...)``).  Two things differ from a plain Llama:

* the input embedding is *borrowed* from the target at load time (the very same
  ``nn.Embedding`` module, so the same tensor, frozen); it is never shipped;
* ``lm_head`` is a :class:`SparseLMHead`: it holds output rows only for the ``H``
  most frequent target token ids (``vocab_ids``) and scatters their logits into a
  full-vocabulary tensor filled with ``torch.finfo(dtype).min`` (not ``-inf``, so a
  softmax never produces NaN).  ``config.vocab_size`` equals the target's.

Weights on disk (:func:`save_draft`): ``model.safetensors`` with the two layers,
the final norm, the head rows and ``vocab_ids``; ``draft_config.json`` with the
Llama config and a little metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dynatree_core.runtime.model.linear_kernels import WeightPack, linear

__all__ = [
    "SparseLMHead",
    "build_draft_from_target",
    "save_draft",
    "load_draft",
    "draft_config_from_target",
    "DRAFT_WEIGHTS_FILE",
    "DRAFT_CONFIG_FILE",
]

DRAFT_WEIGHTS_FILE = "model.safetensors"
DRAFT_CONFIG_FILE = "draft_config.json"


class SparseLMHead(nn.Module):
    """An output layer over a subset of the vocabulary that returns full-vocab logits.

    ``weight`` is ``[H, hidden]``; ``vocab_ids`` (buffer, int64) holds the
    full-vocabulary id of each row.  :meth:`forward` returns ``[..., vocab_size]``
    logits where ids outside the head are ``torch.finfo(dtype).min``.
    """

    def __init__(self, hidden_size: int, vocab_ids: torch.Tensor, vocab_size: int,
                 weight: torch.Tensor | None = None):
        super().__init__()
        vocab_ids = torch.as_tensor(vocab_ids, dtype=torch.long).flatten()
        if vocab_ids.numel() == 0:
            raise ValueError("SparseLMHead needs at least one vocabulary id")
        if int(vocab_ids.max()) >= vocab_size or int(vocab_ids.min()) < 0:
            raise ValueError("vocab_ids out of range for vocab_size")
        if torch.unique(vocab_ids).numel() != vocab_ids.numel():
            raise ValueError("vocab_ids must be unique")
        self.hidden_size = int(hidden_size)
        self.vocab_size = int(vocab_size)
        self.register_buffer("vocab_ids", vocab_ids.clone(), persistent=True)
        if weight is None:
            weight = torch.zeros(vocab_ids.numel(), hidden_size)
        self.weight = nn.Parameter(weight.detach().clone())
        self.pack: WeightPack | None = None  # oneDNN's packed copy of weight (linear_kernels)

    @property
    def linear_kernel(self) -> str:
        return "torch" if self.pack is None else "onednn"

    def use_linear_kernel(self, kernel: str) -> bool:
        """Compute the head on ``kernel`` (``"onednn"`` or ``"torch"``); whether that changed it."""
        if kernel == self.linear_kernel:
            return False
        self.pack = WeightPack() if kernel == "onednn" else None
        return True

    @property
    def num_head_ids(self) -> int:
        return int(self.vocab_ids.numel())

    def forward_compact(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits over the head ids only: ``[..., H]``."""
        return linear(hidden_states, self.weight, None, self.pack)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        compact = self.forward_compact(hidden_states)
        out = compact.new_full((*compact.shape[:-1], self.vocab_size), torch.finfo(compact.dtype).min)
        out.index_copy_(-1, self.vocab_ids, compact)
        return out

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, head_ids={self.num_head_ids}, vocab_size={self.vocab_size}"


def extend_head(model, extra_ids, target) -> int:
    """Grow a draft's :class:`SparseLMHead` by ``extra_ids`` (ids already in the head are skipped).

    New rows start from the target's output rows, rescaled to the mean norm of the draft's trained
    rows: a trained head drifts away from the target's scale, and rows at the wrong scale would win
    (or never win) the argmax before any training.  Returns the number of ids added."""
    head = model.lm_head
    have = set(head.vocab_ids.tolist())
    new = [int(i) for i in extra_ids if int(i) not in have]
    if len(set(new)) != len(new):
        raise ValueError("extra_ids must be unique")
    if not new:
        return 0
    dev, dt = head.weight.device, head.weight.dtype
    out_w = target.get_output_embeddings().weight.detach()
    new_t = torch.tensor(new, dtype=torch.long)
    rows = out_w[new_t.to(out_w.device)].to(device=dev, dtype=torch.float32)
    scale = head.weight.detach().float().norm(dim=-1).mean() / rows.norm(dim=-1).mean().clamp_min(1e-8)
    ids = torch.cat([head.vocab_ids.cpu(), new_t])
    weight = torch.cat([head.weight.detach().float(), rows * scale])
    order = ids.argsort()  # keep vocab_ids sorted, like a head built from scratch
    model.lm_head = SparseLMHead(head.hidden_size, ids[order], head.vocab_size,
                                 weight=weight[order.to(dev)]).to(device=dev, dtype=dt)
    return len(new)


def draft_config_from_target(target_config: Any, num_layers: int = 2, attn_implementation: str | None = None):
    """A LlamaConfig for the draft: the target's config with fewer layers, untied, no GGUF quantization."""
    from transformers import LlamaConfig

    d = target_config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "architectures",
              "transformers_version", "_attn_implementation_autoset"):
        d.pop(k, None)
    d["num_hidden_layers"] = int(num_layers)
    d["tie_word_embeddings"] = False
    d["architectures"] = ["LlamaForCausalLM"]
    d.pop("layer_types", None)
    cfg = LlamaConfig(**d)
    if attn_implementation is not None:
        cfg._attn_implementation = attn_implementation
    return cfg


def _assemble(config, target, head_ids: torch.Tensor, head_weight: torch.Tensor | None,
              trunk_state: dict[str, torch.Tensor] | None, device, dtype):
    """Build the LlamaForCausalLM on the meta device, then plug in real tensors."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    # borrowed (shared, frozen) input embedding
    emb = target.get_input_embeddings()
    if emb.weight.shape[0] != config.vocab_size:
        raise ValueError("target embedding rows != draft vocab_size")
    model.model.embed_tokens = emb
    # sparse head
    model.lm_head = SparseLMHead(config.hidden_size, head_ids, config.vocab_size, weight=head_weight)
    # trunk: layers + final norm (+ rotary buffers, re-created below)
    if trunk_state is not None:
        missing, unexpected = model.model.load_state_dict(
            {k: v for k, v in trunk_state.items()}, strict=False, assign=True)
        missing = [k for k in missing if not k.startswith("embed_tokens") and "rotary_emb" not in k]
        if missing or unexpected:
            raise RuntimeError(f"draft trunk state mismatch: missing={missing} unexpected={unexpected}")
    # rotary embedding buffers were created on meta: rebuild on CPU
    rot_cls = type(model.model.rotary_emb)
    model.model.rotary_emb = rot_cls(config=config)
    model.to(device=device)
    # cast everything except the borrowed embedding (owned by the target)
    for name, p in model.named_parameters():
        if name.startswith("model.embed_tokens"):
            continue
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    model.model.embed_tokens.weight.requires_grad_(False)
    if any(p.is_meta for p in model.parameters()) or any(b.is_meta for b in model.buffers()):
        bad = [n for n, p in list(model.named_parameters()) + list(model.named_buffers()) if p.is_meta]
        raise RuntimeError(f"draft has uninitialised tensors: {bad}")
    model.config.vocab_size = config.vocab_size
    model.eval()
    return model


def build_draft_from_target(target, head_ids, num_layers: int = 2, device=None, dtype=torch.float32,
                            attn_implementation: str | None = None):
    """Initialise a draft from the target: layers ``0..num_layers-1``, final norm, head rows
    copied from the target's output matrix (``lm_head`` or the tied embedding)."""
    head_ids = torch.as_tensor(head_ids, dtype=torch.long)
    if attn_implementation is None:
        attn_implementation = getattr(target.config, "_attn_implementation", None) or "sdpa"
    config = draft_config_from_target(target.config, num_layers, attn_implementation)
    tsd = target.model.state_dict()
    trunk = {}
    for k, v in tsd.items():
        if k.startswith("layers."):
            i = int(k.split(".")[1])
            if i < num_layers:
                trunk[k] = v.detach().clone().float()
        elif k.startswith("norm."):
            trunk[k] = v.detach().clone().float()
    out_w = target.get_output_embeddings().weight.detach()
    head_w = out_w[head_ids.to(out_w.device)].clone().float()
    if device is None:
        device = target.device
    return _assemble(config, target, head_ids, head_w, trunk, device, dtype)


def draft_state_to_save(model) -> dict[str, torch.Tensor]:
    """Everything the draft owns (no input embedding), keyed like the HF model."""
    out = {}
    for k, v in model.state_dict().items():
        if k.startswith("model.embed_tokens") or "rotary_emb" in k:
            continue
        out[k] = v.detach()
    return out


def save_draft(model, directory, dtype=torch.float16, metadata: dict | None = None) -> Path:
    """Write ``model.safetensors`` (trunk + head + ``lm_head.vocab_ids``) and ``draft_config.json``."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, v in draft_state_to_save(model).items():
        v = v.detach().cpu()
        if v.is_floating_point():
            v = v.to(dtype)
        tensors[k] = v.contiguous()
    save_file(tensors, str(directory / DRAFT_WEIGHTS_FILE), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    for k in ("_name_or_path", "transformers_version", "quantization_config", "dtype", "torch_dtype"):
        cfg.pop(k, None)
    info = {
        "format": "dynatree-draft-v1",
        "llama_config": cfg,
        "num_head_ids": int(model.lm_head.num_head_ids),
        "stored_dtype": str(dtype).replace("torch.", ""),
        "embedding": "borrowed from the target at load time (not stored)",
    }
    if metadata:
        info["metadata"] = metadata
    (directory / DRAFT_CONFIG_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return directory


def load_draft(directory, target, device=None, dtype=torch.float32, attn_implementation: str | None = None):
    """Load a draft saved by :func:`save_draft`, borrowing ``target``'s input embedding."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig

    directory = Path(directory)
    wpath, cpath = directory / DRAFT_WEIGHTS_FILE, directory / DRAFT_CONFIG_FILE
    if not wpath.is_file() or not cpath.is_file():
        raise FileNotFoundError(f"no draft weights in {directory} (expected {DRAFT_WEIGHTS_FILE} and {DRAFT_CONFIG_FILE})")
    info = json.loads(cpath.read_text())
    cfg_d = dict(info["llama_config"])
    cfg_d.pop("_attn_implementation", None)
    cfg_d.pop("attn_implementation", None)
    config = LlamaConfig(**cfg_d)
    if attn_implementation is None:
        attn_implementation = getattr(target.config, "_attn_implementation", None) or "sdpa"
    config._attn_implementation = attn_implementation
    if config.vocab_size != target.config.vocab_size:
        raise ValueError(f"draft vocab_size {config.vocab_size} != target vocab_size {target.config.vocab_size}")
    sd = load_file(str(wpath))
    head_ids = sd.pop("lm_head.vocab_ids").long()
    head_w = sd.pop("lm_head.weight").float()
    trunk = {k[len("model."):]: v.float() for k, v in sd.items() if k.startswith("model.")}
    if device is None:
        device = target.device
    return _assemble(config, target, head_ids, head_w, trunk, device, dtype)
