"""The feature-conditioned draft (the EAGLE idea): a small head that reads the target's own final
hidden states.

For every committed position j the draft consumes the pair ``(f_{j-1}, x_j)``: the target's final
(post-norm) hidden state at the previous position, which the target computed anyway while
verifying, and the embedding of token ``x_j``. A fusion layer maps ``[emb(x_j); f_{j-1}]`` to the
model width, a few Llama-style decoder layers (RoPE, GQA, RMSNorm, SiLU MLP; one by default) run
over it under the draft's own KV cache, and after a final norm the output ``f̂_j`` is a *predicted
feature*: a sparse output head turns it into next-token logits, and inside a tree it is fed forward
as the "previous feature" of the node's children (the draft cannot see the target's features of
tokens the target has not verified yet).

:func:`feature_draft_from_model_draft` seeds one from an independent Llama draft (same layers, norm
and head; the fusion passes the embedding through and ignores the feature), so training starts
from that draft's agreement instead of from zero - what makes a CPU-budget training pay.

The module is plain torch (no transformers class), so its cache is a list of tensor pairs that the
drafter crops and extends directly. The input embedding is *borrowed* from the target at load
time (frozen, never saved); the head holds rows for the ``H`` most used token ids only
(:class:`~dynatree_core.drafters.draft_model.SparseLMHead`).

With ``FeatureDraftConfig.target_layers`` (the EAGLE-3 idea) the draft also reads the target's
states after a few lower layers: :meth:`FeatureDraftModel.reduce` adds a learned function of them
(zero at the start) to the final state, and :func:`target_states` takes them all from one target
forward. A tree node still reads its parent's predicted feature (width H).

On disk (:func:`save_feature_draft`): ``model.safetensors`` (fusion, layers, norm, head rows and
``head.vocab_ids``) and ``feature_draft_config.json`` (:class:`FeatureDraftConfig` plus the
target it was trained for and metadata). :func:`load_feature_draft` checks the target before it
builds anything: family, hidden size, vocabulary and, when a tokenizer is given, its fingerprint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from dynatree_core.drafters.draft_model import SparseLMHead
from dynatree_core.runtime.static.fast_path import StaticInputs, StaticSpec

FEATURE_WEIGHTS_FILE = "model.safetensors"
FEATURE_CONFIG_FILE = "feature_draft_config.json"
FEATURE_FORMAT = "dynatree-feature-draft-v1"
#: the index of a draft written in parts (``save_feature_draft(part_mb=...)``): which part holds each tensor
FEATURE_INDEX_FILE = "model.safetensors.index.json"
#: room each part keeps for its safetensors header (a few kB for these drafts)
_PART_HEADER_BYTES = 65536

#: model types whose final hidden state (``base_model(...).last_hidden_state``) feeds a plain linear
#: LM head, the contract the feature draft relies on (Llama-style decoder stacks)
LLAMA_FAMILY: tuple[str, ...] = ("llama", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class FeatureDraftConfig:
    """Shape of a feature draft; the target-dependent sizes must match the target it serves.

    ``hidden_size`` is the target's hidden size H (the width of f); ``num_heads`` /
    ``num_kv_heads`` / ``head_dim`` / ``intermediate_size`` shape each of the ``num_layers``
    decoder layers; ``rope_theta`` is their rotary base; ``vocab_size`` the target's vocabulary.
    ``target_layers`` (the EAGLE-3 idea): the target's hidden states the draft reads besides its
    final one, as ``output_hidden_states`` indices (i: after the target's i-th decoder layer), in
    increasing order; ``()`` reads the final (post-norm) state only.
    """

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    num_layers: int = 1
    target_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_layers", tuple(self.target_layers))  # a JSON list reads back as a tuple
        t = self.target_layers
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 1 for i in t) or list(t) != sorted(set(t)):
            raise ValueError(f"FeatureDraftConfig.target_layers must be increasing integers >= 1 (hidden states "
                             f"after those target layers), got {t!r}")
        for name in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
                     "num_layers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"FeatureDraftConfig.{name} must be an integer >= 1, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"FeatureDraftConfig.num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"FeatureDraftConfig.head_dim must be even (rotary), got {self.head_dim}")

    @property
    def feature_width(self) -> int:
        """Width of the target features the draft reads: ``(len(target_layers) + 1) * hidden_size``."""
        return (len(self.target_layers) + 1) * self.hidden_size

    @classmethod
    def from_target(cls, target_config: Any, intermediate_size: int | None = None,
                    num_layers: int = 1, target_layers: tuple[int, ...] = ()) -> "FeatureDraftConfig":
        """Take the layer shape from the target's own decoder layers."""
        c = target_config
        heads = int(c.num_attention_heads)
        hd = int(getattr(c, "head_dim", None) or c.hidden_size // heads)
        rp = getattr(c, "rope_parameters", None) or {}
        theta = float(rp.get("rope_theta", getattr(c, "rope_theta", 10000.0)) if isinstance(rp, dict)
                      else getattr(c, "rope_theta", 10000.0))
        return cls(hidden_size=int(c.hidden_size), num_heads=heads,
                   num_kv_heads=int(getattr(c, "num_key_value_heads", None) or heads), head_dim=hd,
                   intermediate_size=int(intermediate_size or c.intermediate_size), vocab_size=int(c.vocab_size),
                   rope_theta=theta, rms_norm_eps=float(getattr(c, "rms_norm_eps", 1e-5)), num_layers=num_layers,
                   target_layers=tuple(target_layers))


class _RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class _DecoderLayer(nn.Module):
    """A Llama decoder layer (pre-norm attention with RoPE and GQA, pre-norm SiLU MLP), named like
    Hugging Face's so that a Llama draft's layers load into it unchanged."""

    def __init__(self, c: FeatureDraftConfig):
        super().__init__()
        H, hd = c.hidden_size, c.head_dim
        self.c = c
        self.input_layernorm = _RMSNorm(H, c.rms_norm_eps)
        self.q_proj = nn.Linear(H, c.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(H, c.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(H, c.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(c.num_heads * hd, H, bias=False)
        self.post_attention_layernorm = _RMSNorm(H, c.rms_norm_eps)
        self.gate_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, H, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None,
                past: tuple[torch.Tensor, torch.Tensor] | None = None, slots: Any = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``past`` keys/values come before the new ones; ``mask`` covers [past | new]. On the fast path
        ``slots`` is the layer's static cache (a ``SlotLayer``): the new keys/values are written at its
        slots and ``mask`` covers all of its buffers."""
        c = self.c
        B, T, _ = x.shape
        cos, sin = rope
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        new_kv = (k, v)
        if slots is not None:
            K, V = slots.update(k, v)
        else:
            K, V = (k, v) if past is None else (torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2))
        rep = c.num_heads // c.num_kv_heads
        if rep > 1:
            K, V = K.repeat_interleave(rep, dim=1), V.repeat_interleave(rep, dim=1)
        if mask is None:
            if K.shape[2] != T:
                raise ValueError("a mask is needed when attending to cached keys")
            att = nn.functional.scaled_dot_product_attention(q, K, V, is_causal=True)
        else:
            att = nn.functional.scaled_dot_product_attention(q, K, V, attn_mask=mask.to(q.dtype))
        x = x + self.o_proj(att.transpose(1, 2).reshape(B, T, c.num_heads * c.head_dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h)), new_kv


#: per-layer (keys, values), each [B, kv_heads, S, head_dim]
KV = list[tuple[torch.Tensor, torch.Tensor]]


def _static_forward(model: "FeatureDraftModel", cache: Any, inputs: StaticInputs, hidden: bool = False,
                    logits: bool = True) -> Callable[[], tuple[torch.Tensor, None]]:
    """The feature draft's forward on the fast path: ``inputs`` (tokens, features, positions, the mask over
    every slot) in, the predicted features ``[b, H]`` out; the keys/values land in ``cache``'s slots."""

    def run() -> tuple[torch.Tensor, None]:
        out, _ = model.stack(model.fuse(inputs.ids, inputs.feats), inputs.pos, inputs.mask, slots=cache)
        return out[0], None

    return run


class FeatureDraftModel(nn.Module):
    """Fusion layer + ``num_layers`` decoder layers + final norm + sparse head, on target features.

    :meth:`forward` takes tokens ``[B, T]``, previous features ``[B, T, H]``, positions ``[B, T]``,
    an optional additive mask ``[B or 1, 1, T, S]`` over (cached + new) keys and an optional cache
    (one ``(k, v)`` per layer, ``[B, kv_heads, S - T, head_dim]`` each); it returns the predicted
    features ``[B, T, H]`` (after the final norm: the space of the target's own features, which
    the head reads) and the new keys/values per layer, which the caller appends to its cache.
    Logits come from :meth:`logits` (full vocabulary) or ``head.forward_compact`` (head ids only).
    """

    def __init__(self, config: FeatureDraftConfig, embed: nn.Embedding, head_ids: torch.Tensor,
                 head_weight: torch.Tensor | None = None):
        super().__init__()
        c = config
        self.config = c
        self.embed = embed  # borrowed from the target: frozen, never saved
        H, hd = c.hidden_size, c.head_dim
        # fusion fc([emb; f]) = fc_emb(emb) + fc_feat(feat_norm(f)): split so a warm start can hold
        # the embedding path still; feat_norm brings the target's large-norm features to the
        # embeddings' scale, so the feature path cannot swamp the token signal while it is learned
        self.fc_emb = nn.Linear(H, H, bias=False)
        self.feat_norm = _RMSNorm(H, c.rms_norm_eps)
        self.fc_feat = nn.Linear(H, H, bias=False)
        if c.target_layers:  # the target's lower layers: normalised, then a correction to its final state
            self.layer_norms = nn.ModuleList([_RMSNorm(H, c.rms_norm_eps) for _ in c.target_layers])
            self.fc_layers = nn.Linear(len(c.target_layers) * H, H, bias=False)
        self.layers = nn.ModuleList([_DecoderLayer(c) for _ in range(c.num_layers)])
        self.norm = _RMSNorm(H, c.rms_norm_eps)
        self.head = SparseLMHead(H, head_ids, c.vocab_size, weight=head_weight)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    # --- pieces ----------------------------------------------------------------------------
    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, head_dim] for positions [B, T] (Llama's rotate-half convention)."""
        ang = positions.to(torch.float32)[..., None] * self.inv_freq  # [B, T, hd/2]
        emb = torch.cat((ang, ang), dim=-1)[:, None]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def reduce(self, features: torch.Tensor) -> torch.Tensor:
        """The target's features ``[..., feature_width]`` (its ``target_layers`` states, then its
        final state) -> ``[..., H]``: the final state plus ``fc_layers`` of the normalised lower
        states (``fc_layers`` starts at zero: the draft then reads the final state alone). The
        draft's own predicted features are ``[..., H]`` already and skip this. Identity without
        ``target_layers``."""
        if not self.config.target_layers:
            return features
        *lower, final = features.split(self.config.hidden_size, dim=-1)
        w = self.fc_layers.weight
        extra = torch.cat([norm(h.to(w.dtype)) for norm, h in zip(self.layer_norms, lower)], dim=-1)
        return final + self.fc_layers(extra).to(final.dtype)

    def fuse(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """fc([emb(x_j); f_{j-1}]): the first layer's input."""
        e = self.embed(tokens).to(self.fc_emb.weight.dtype)
        return self.fc_emb(e) + self.fc_feat(self.feat_norm(features.to(e.dtype)))

    def stack(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
              past: KV | None = None, slots: Any = None) -> tuple[torch.Tensor, KV]:
        """The decoder layers and the final norm over fused inputs ``x`` (``slots``: a static
        ``SlotCache`` written in place instead of ``past``)."""
        rope = self.rope(positions, x.dtype)
        new: KV = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, rope, mask, None if past is None else past[i], None if slots is None else slots.layers[i])
            new.append(kv)
        return self.norm(x), new

    def static_spec(self) -> StaticSpec:
        """How the fast path runs this draft: its layers' static caches, its input features (H wide)
        beside the tokens, and :func:`_static_forward` (predicted features out)."""
        return StaticSpec(self.config.num_layers, _static_forward, self.config.hidden_size)

    # --- public ----------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None = None, past: KV | None = None) -> tuple[torch.Tensor, KV]:
        return self.stack(self.fuse(tokens, features), positions, mask, past)

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits of predicted features (ids outside the head: dtype-min)."""
        return self.head(predicted)

    @property
    def num_head_ids(self) -> int:
        return self.head.num_head_ids

    def settings(self) -> dict[str, Any]:
        return {"layers": self.config.num_layers, "head_ids": self.num_head_ids, **dataclasses.asdict(self.config)}


# --------------------------------------------------------------------------- target checks

def check_feature_target(config: FeatureDraftConfig, target: nn.Module, where: str = "feature draft") -> None:
    """Raise a clear error when ``target`` cannot serve features to a draft of ``config``."""
    tc = getattr(target, "config", None)
    mt = getattr(tc, "model_type", None)
    if mt not in LLAMA_FAMILY:
        raise ValueError(f"{where}: a feature draft needs a Llama-family target (model_type in {LLAMA_FAMILY}, "
                         f"whose final hidden state feeds a linear LM head); got model_type={mt!r}")
    if int(tc.hidden_size) != config.hidden_size:
        raise ValueError(f"{where} was built for hidden size {config.hidden_size}, but the target's hidden_size "
                         f"is {tc.hidden_size}: it belongs to another target")
    if int(tc.vocab_size) != config.vocab_size:
        raise ValueError(f"{where} was built for vocab_size {config.vocab_size}, but the target's vocab_size is "
                         f"{tc.vocab_size}: it belongs to another target")
    n = int(getattr(tc, "num_hidden_layers", 0) or 0)
    if config.target_layers and n and config.target_layers[-1] >= n:
        raise ValueError(f"{where} reads the target's hidden states after layers {list(config.target_layers)}, but "
                         f"the target has {n} layers (its final state is always read; name layers 1 to {n - 1})")


def target_states(target: nn.Module, input_ids: torch.Tensor, target_layers: tuple[int, ...] = (),
                  **kwargs: Any) -> torch.Tensor:
    """The features a feature draft reading ``target_layers`` takes from one target forward:
    ``[B, T, (len(target_layers) + 1) * H]``, the states after those layers then the final
    (post-norm) state; the final state alone without ``target_layers``. ``kwargs`` go to the
    target's base model (masks, positions, cache)."""
    if not target_layers:
        return target.base_model(input_ids=input_ids, **kwargs).last_hidden_state
    out = target.base_model(input_ids=input_ids, output_hidden_states=True, **kwargs)
    return torch.cat([out.hidden_states[i] for i in target_layers] + [out.last_hidden_state], dim=-1)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A stable hash of a tokenizer's vocabulary (token -> id), to recognise the target's tokenizer."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- build / save / load

def build_feature_draft(target: nn.Module, head_ids, intermediate_size: int | None = None, seed: int = 0,
                        num_layers: int = 1, target_layers: tuple[int, ...] = ()) -> FeatureDraftModel:
    """A fresh feature draft for ``target``: random layers (Llama init), final norm from the target's,
    head rows copied from the target's output matrix; ``fc_layers`` (with ``target_layers``) at zero,
    so a seed gives the same draft with and without them until training moves it."""
    config = FeatureDraftConfig.from_target(target.config, intermediate_size, num_layers, target_layers)
    check_feature_target(config, target)
    head_ids = torch.as_tensor(head_ids, dtype=torch.long)
    out_w = target.get_output_embeddings().weight.detach()
    head_w = out_w[head_ids.to(out_w.device)].float().cpu()
    g = torch.Generator().manual_seed(seed)
    model = FeatureDraftModel(config, target.get_input_embeddings(), head_ids, head_w)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("embed", "head", "fc_layers")) or "norm" in name:
                continue
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        if target_layers:
            model.fc_layers.weight.zero_()
        model.feat_norm.weight.fill_(float(target.get_input_embeddings().weight.detach().float().pow(2).mean().sqrt()))
        norm = getattr(target.base_model, "norm", None)
        if norm is not None and norm.weight.shape == model.norm.weight.shape:
            model.norm.weight.copy_(norm.weight.detach().float())
    model.embed.weight.requires_grad_(False)
    return model.to(out_w.device).eval()


def feature_draft_from_model_draft(draft: nn.Module, target: nn.Module,
                                   target_layers: tuple[int, ...] = ()) -> FeatureDraftModel:
    """Warm start: a feature draft that *is* an independent Llama draft (same layers, final norm and
    sparse head) whose fusion layer passes the token embedding through and ignores the feature.

    Its first predictions equal the independent draft's; training then teaches it to use the
    target's features. On a CPU budget this starts from the independent draft's agreement instead
    of from zero. With ``target_layers`` the lower states' path (``fc_layers``) starts at zero too.
    """
    dc = draft.config
    config = FeatureDraftConfig.from_target(target.config, int(dc.intermediate_size), int(dc.num_hidden_layers),
                                            target_layers)
    check_feature_target(config, target)
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
        if getattr(dc, name) != getattr(target.config, name):
            raise ValueError(f"the draft's {name} ({getattr(dc, name)}) differs from the target's "
                             f"({getattr(target.config, name)}): it cannot seed a feature draft")
    head = draft.lm_head
    model = FeatureDraftModel(config, target.get_input_embeddings(), head.vocab_ids.cpu(),
                              head.weight.detach().float().cpu())
    H = config.hidden_size
    emb = target.get_input_embeddings().weight.detach().float()
    with torch.no_grad():
        model.fc_emb.weight.copy_(torch.eye(H))  # the embedding passes through
        model.fc_feat.weight.zero_()  # the feature is ignored until training teaches its use
        if target_layers:
            model.fc_layers.weight.zero_()
        model.feat_norm.weight.fill_(float(emb.pow(2).mean().sqrt()))  # features at the embeddings' scale
        model.norm.weight.copy_(draft.model.norm.weight.detach().float())
        for mine, theirs in zip(model.layers, draft.model.layers):
            a, m = theirs.self_attn, theirs.mlp
            for dst, src in ((mine.q_proj, a.q_proj), (mine.k_proj, a.k_proj), (mine.v_proj, a.v_proj),
                             (mine.o_proj, a.o_proj), (mine.gate_proj, m.gate_proj), (mine.up_proj, m.up_proj),
                             (mine.down_proj, m.down_proj), (mine.input_layernorm, theirs.input_layernorm),
                             (mine.post_attention_layernorm, theirs.post_attention_layernorm)):
                dst.weight.copy_(src.weight.detach().float())
    model.embed.weight.requires_grad_(False)
    return model.to(target.get_input_embeddings().weight.device).eval()


def _split_parts(tensors: dict[str, torch.Tensor], part_bytes: int
                 ) -> tuple[list[dict[str, torch.Tensor]], dict[str, list[str]]]:
    """Tensors packed in order into parts of at most ``part_bytes`` bytes (header room included);
    a tensor larger than a part is cut into row blocks ``name@0``, ``name@1``, ... (the second value
    maps each cut tensor to its blocks)."""
    budget = part_bytes - _PART_HEADER_BYTES
    pieces, split = [], {}
    for k in sorted(tensors):
        t = tensors[k]
        row = t[0].numel() * t.element_size() if t.dim() else t.element_size()
        if t.numel() * t.element_size() <= budget:
            pieces.append((k, t))
            continue
        if t.dim() == 0 or row > budget:
            raise ValueError(f"part size {part_bytes} bytes is too small for one row of {k} ({row} bytes)")
        blocks = t.split(budget // row, dim=0)
        split[k] = [f"{k}@{i}" for i in range(len(blocks))]
        pieces += [(f"{k}@{i}", b.contiguous()) for i, b in enumerate(blocks)]
    parts: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for k, t in pieces:
        n = t.numel() * t.element_size()
        if parts[-1] and size + n > budget:
            parts.append({})
            size = 0
        parts[-1][k] = t
        size += n
    return parts, split


def _write_weights(tensors: dict[str, torch.Tensor], directory: Path, part_mb: float | None) -> None:
    """``model.safetensors``, or with ``part_mb`` parts ``model-0000i-of-0000n.safetensors`` of at most
    that many MB (10^6 bytes) each plus :data:`FEATURE_INDEX_FILE`; the other form's files go."""
    import os

    from safetensors.torch import save_file

    stale = list(directory.glob("model-*-of-*.safetensors"))
    if part_mb:
        parts, split = _split_parts(tensors, int(part_mb * 1e6))
        names = [f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors" for i in range(len(parts))]
        stale = [p for p in stale if p.name not in names] + [directory / FEATURE_WEIGHTS_FILE]
        for name, part in zip(names, parts):
            save_file(part, str(directory / (name + ".tmp")), metadata={"format": "pt"})
            os.replace(directory / (name + ".tmp"), directory / name)
        index = {"part_mb": part_mb, "split": split, "weight_map": {k: n for n, p in zip(names, parts) for k in p}}
        (directory / (FEATURE_INDEX_FILE + ".tmp")).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        os.replace(directory / (FEATURE_INDEX_FILE + ".tmp"), directory / FEATURE_INDEX_FILE)
    else:
        tmp = directory / (FEATURE_WEIGHTS_FILE + ".tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, directory / FEATURE_WEIGHTS_FILE)
        stale.append(directory / FEATURE_INDEX_FILE)
    for p in stale:
        p.unlink(missing_ok=True)


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The tensors of :func:`_write_weights`, from the single file or joined from its parts."""
    from safetensors.torch import load_file

    single, index = directory / FEATURE_WEIGHTS_FILE, directory / FEATURE_INDEX_FILE
    if single.is_file():
        return load_file(str(single))
    if not index.is_file():
        raise FileNotFoundError(f"feature draft weights missing: {single} (and no parts: {index.name} is missing)")
    info = json.loads(index.read_text())
    sd: dict[str, torch.Tensor] = {}
    for part in sorted(set(info["weight_map"].values())):
        sd.update(load_file(str(directory / part)))
    if set(sd) != set(info["weight_map"]):
        raise ValueError(f"the parts in {directory} do not hold the tensors {index.name} lists")
    for name, blocks in info.get("split", {}).items():
        sd[name] = torch.cat([sd.pop(b) for b in blocks])
    return sd


def has_feature_weights(directory) -> bool:
    """Whether ``directory`` holds a feature draft's weights, in one file or in parts."""
    directory = Path(directory)
    return (directory / FEATURE_WEIGHTS_FILE).is_file() or (directory / FEATURE_INDEX_FILE).is_file()


def save_feature_draft(model: FeatureDraftModel, directory, dtype=torch.float16, target_name: str | None = None,
                       tokenizer: Any = None, metadata: dict | None = None, part_mb: float | None = None) -> Path:
    """Write ``model.safetensors`` and ``feature_draft_config.json`` (atomically per file); with
    ``part_mb`` the weights go in parts of at most that many MB each (for copying back from a
    remote machine; :func:`load_feature_draft` joins them)."""
    import os

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, v in model.state_dict().items():
        if k.startswith("embed.") or k == "inv_freq":
            continue
        v = v.detach().cpu()
        tensors[k] = (v.to(dtype) if v.is_floating_point() else v).contiguous()
    _write_weights(tensors, directory, part_mb)
    info = {"format": FEATURE_FORMAT, "config": dataclasses.asdict(model.config),
            "num_head_ids": model.num_head_ids, "stored_dtype": str(dtype).replace("torch.", ""),
            "target": {"name": target_name, "hidden_size": model.config.hidden_size,
                       "vocab_size": model.config.vocab_size,
                       "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer) if tokenizer is not None else None},
            "embedding": "borrowed from the target at load time (not stored)"}
    if metadata:
        info["metadata"] = metadata
    tmp = directory / (FEATURE_CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, directory / FEATURE_CONFIG_FILE)
    return directory


def is_feature_draft_dir(path) -> bool:
    return (Path(path) / FEATURE_CONFIG_FILE).is_file()


def read_feature_draft_info(directory) -> dict:
    path = Path(directory) / FEATURE_CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no feature draft in {directory}: {FEATURE_CONFIG_FILE} is missing")
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}); the feature draft is corrupt") from None
    if info.get("format") != FEATURE_FORMAT:
        raise ValueError(f"{path}: format {info.get('format')!r} is not {FEATURE_FORMAT!r}")
    return info


def load_feature_draft(directory, target: nn.Module, tokenizer: Any = None, device=None,
                       dtype=torch.float32) -> FeatureDraftModel:
    """Load a feature draft saved by :func:`save_feature_draft` for ``target`` (one weights file, or
    the parts of one and their index).

    Raises (before any weights are read) if the target is not Llama-family, its hidden size or
    vocabulary differs from the draft's, or ``tokenizer`` is not the one the draft was trained
    with; raises if the weights are missing, unreadable or do not match the config.
    """
    from safetensors import SafetensorError

    directory = Path(directory)
    info = read_feature_draft_info(directory)
    try:
        config = FeatureDraftConfig(**info["config"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"{directory / FEATURE_CONFIG_FILE}: bad config ({e})") from None
    check_feature_target(config, target, where=f"feature draft {directory}")
    want = (info.get("target") or {}).get("tokenizer_fingerprint")
    if tokenizer is not None and want is not None and tokenizer_fingerprint(tokenizer) != want:
        raise ValueError(f"feature draft {directory} was trained with another tokenizer (fingerprint {want}, "
                         f"the target's is {tokenizer_fingerprint(tokenizer)}): it belongs to another target")
    wpath = directory / FEATURE_WEIGHTS_FILE
    if not has_feature_weights(directory):
        raise FileNotFoundError(f"feature draft weights missing: {wpath} (nor parts with {FEATURE_INDEX_FILE})")
    try:
        sd = _read_weights(directory)
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise ValueError(f"feature draft weights {wpath} are unreadable ({e}); the file is corrupt") from None
    if "head.vocab_ids" not in sd or "head.weight" not in sd:
        raise ValueError(f"feature draft weights {wpath} lack the head (head.vocab_ids / head.weight)")
    head_ids = sd.pop("head.vocab_ids").long()
    model = FeatureDraftModel(config, target.get_input_embeddings(), head_ids, sd.pop("head.weight").float())
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not k.startswith(("embed.", "head."))]
    if missing or unexpected:
        raise ValueError(f"feature draft weights {wpath} do not match its config: missing={missing} "
                         f"unexpected={unexpected}")
    if device is None:
        device = target.get_input_embeddings().weight.device
    model.to(device)
    for name, p in model.named_parameters():
        if not name.startswith("embed."):
            p.data = p.data.to(dtype)
            p.requires_grad_(False)
    return model.eval()


def unrolled_mask(T: int, step: int, device=None) -> torch.Tensor:
    """Bool [T, step * T] visibility of unrolled step ``step`` (1-based) during training.

    Step s at position j simulates a tree node at depth s - 1 whose root sits at j - s + 1: it
    sees step-1 keys (real features) at positions <= j - s + 1, then the step-t key at j - s + t
    for t = 2..s (its ancestors in the tree, computed from predicted features), itself last.
    Keys are laid out as [step 1 | step 2 | ... | step s], each block T long.
    """
    j = torch.arange(T, device=device)
    m = torch.zeros((T, step * T), dtype=torch.bool, device=device)
    m[:, :T] = j[None, :] <= (j - step + 1)[:, None]
    for t in range(2, step + 1):
        col = j - step + t
        ok = col >= 0
        m[j[ok], (t - 1) * T + col[ok]] = True
    return m


def unrolled_forward(model: FeatureDraftModel, x: torch.Tensor, f: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Predicted features of each unrolled step, each [B, T-1, H] for positions j = 1..T-1.

    Step 1 reads the real features ``f_{j-1}`` (``[B, T, feature_width]``, reduced by
    :meth:`FeatureDraftModel.reduce`); step s reads what step s-1 predicted at j-1 and
    attends (in every layer) to step-1 keys up to j-s+1 plus the keys of steps 2..s on its tree
    path. Position j's output predicts the target's greedy token after x_j (``y[:, 1:]``). Rows of
    step s at j < s are padding (never seen by valid positions, excluded by :func:`step_valid`).
    """
    B, T = x.shape
    n = T - 1
    pos = torch.arange(1, T, device=x.device)[None].expand(B, n)
    tok = x[:, 1:]
    outs: list[torch.Tensor] = []
    kvs: list[list[tuple[torch.Tensor, torch.Tensor]]] = []  # per step, per layer
    prev = model.reduce(f[:, :-1])  # the target's features [B, T-1, feature_width] -> [B, T-1, H]
    L = len(model.layers)
    for s in range(1, steps + 1):
        if s > 1:  # the feature step s-1 predicted at the previous position
            prev = torch.cat([torch.zeros_like(outs[-1][:, :1]), outs[-1][:, :-1]], dim=1)
        inp = model.fuse(tok, prev)
        vis = unrolled_mask(n, s, device=x.device)
        mask = torch.zeros(vis.shape, dtype=inp.dtype, device=x.device).masked_fill(~vis, torch.finfo(inp.dtype).min)
        past = None
        if kvs:  # [step 1 | ... | step s-1] keys of each layer, the layout unrolled_mask expects
            past = [(torch.cat([kv[i][0] for kv in kvs], dim=2), torch.cat([kv[i][1] for kv in kvs], dim=2))
                    for i in range(L)]
        out, new = model.stack(inp, pos, mask[None, None], past)
        outs.append(out)
        kvs.append(new)
    return outs
