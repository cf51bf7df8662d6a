"""The parts of the tiny test pairs: random GPT-NeoX / Llama models, noisy-copy drafts, a character
tokenizer, and the pairs built from them for any pair class (:mod:`dynatree_core.pairs.tiny` builds
``ModelPair`` s; ``ModelPair.named("tiny-llama")`` comes here too). Imports no pair module."""

from __future__ import annotations

import copy
import string
from typing import Any

import torch


#: characters of the tiny tokenizer; id 0 is <pad>, 1 is <eos>
CHARS = string.ascii_lowercase + string.digits + " .,;:!?'-\n" + string.ascii_uppercase
#: the tiny tokenizer's chat template (an instruct model's shape: a user turn, then the assistant's header)
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def char_tokenizer():
    """A character-level PreTrainedTokenizerFast (vocab: <pad>, <eos>, then CHARS) with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1}
    for c in CHARS:
        vocab[c] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


VOCAB_SIZE = 2 + len(CHARS)


def tiny_model(arch: str = "llama", *, seed: int = 0, layers: int = 2, hidden: int = 32,
               vocab_size: int = VOCAB_SIZE, attn: str = "sdpa", eos_token_id: int = 1,
               max_positions: int = 1024, init_range: float = 0.2) -> torch.nn.Module:
    """A small random causal LM ("llama" or "gpt_neox") in fp32, eval mode."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4, max_position_embeddings=max_positions,
                  eos_token_id=eos_token_id, pad_token_id=0, initializer_range=init_range,
                  attn_implementation=attn)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, bos_token_id=0, **common))
    elif arch == "gpt_neox":
        model = GPTNeoXForCausalLM(GPTNeoXConfig(rotary_pct=0.5, **common))
    else:
        raise ValueError(f"arch must be 'llama' or 'gpt_neox', got {arch!r}")
    return model.eval()


def noisy_copy(model: torch.nn.Module, noise: float, seed: int = 1) -> torch.nn.Module:
    """A draft that agrees with ``model`` more often the smaller ``noise`` is."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn(p.shape, generator=g))
    return draft.eval()


def tiny_pair_of(cls: Any, arch: str = "llama", *, noise: float = 0.05, seed: int = 0, attn: str = "sdpa",
                 **kwargs: Any) -> Any:
    """A tiny target, its noisy-copy draft and the character tokenizer, as a ``cls`` (a ModelPair)."""
    target = tiny_model(arch, seed=seed, attn=attn, **kwargs)
    return cls(target=target, draft=noisy_copy(target, noise, seed + 1), tokenizer=char_tokenizer(),
               target_name=f"tiny-{arch}-target", draft_name=f"tiny-{arch}-draft(noise={noise})")


def tiny_feature_pair_of(cls: Any, *, seed: int = 0, attn: str = "sdpa", head_seed: int = 1, **kwargs: Any) -> Any:
    """A tiny Llama target with a random (untrained) feature draft and the character tokenizer, as a ``cls``."""
    from dynatree_core.drafters.feature_draft import build_feature_draft

    target = tiny_model("llama", seed=seed, attn=attn, **kwargs)
    draft = build_feature_draft(target, torch.arange(target.config.vocab_size), seed=head_seed)
    return cls(target=target, draft=draft, tokenizer=char_tokenizer(), target_name="tiny-llama-target",
               draft_name=f"tiny-llama-feature-draft(seed={head_seed})")
