"""The data stage's writer: a batch of prompts of different lengths, left-padded under a mask in the
KV-cached loop, writes exactly what each prompt alone does, and what Hugging Face's generate wrote."""

from __future__ import annotations

import pytest
import torch

from dynatree_core.distill.decode import _continue, _decode_batch, _decode_equal_length
from dynatree_core.pairs.tiny import tiny_model

PROMPTS = [[5, 9, 2], [7, 3, 9, 12, 30, 4, 4], [11], [8, 8, 21, 6, 2]]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", layers=2)


def test_a_left_padded_batch_writes_what_each_prompt_alone_writes(model):
    got = _decode_batch(model, PROMPTS, 12, set(), False, 1.0, 1.0, pad=0)
    for p, g in zip(PROMPTS, got):
        assert g == _decode_equal_length(model, [p], 12, set(), False, 1.0, 1.0)[0], p


def test_the_loop_writers_equal_the_generate_writer(model):
    gen = _continue(model, 0, PROMPTS, 10, {1}, False, 1.0, 1.0, writer="generate")
    for writer in ("dynamic", "static"):
        loop = _continue(model, 0, PROMPTS, 10, {1}, False, 1.0, 1.0, writer=writer)
        assert loop == gen and all(r[:c] == p for (r, c), p in zip(loop, PROMPTS)), writer


def test_equal_lengths_still_take_the_unmasked_path(model):
    same = [[5, 9, 2], [7, 3, 9]]
    with pytest.raises(ValueError, match="one length"):
        _decode_equal_length(model, PROMPTS, 4, set(), False, 1.0, 1.0)
    assert _decode_batch(model, same, 6, set(), False, 1.0, 1.0) == _decode_equal_length(model, same, 6, set(), False,
                                                                                          1.0, 1.0)
