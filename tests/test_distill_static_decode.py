"""The data stage's static-shape decode loop (issue 51): it writes the tokens the dynamic loop wrote for
a seed (greedy and sampled, left-padded batches), stops early without reading the device every step,
its step compiles as one graph (``fullgraph=True``), and its sampler is ``torch.multinomial``'s draw."""

from __future__ import annotations

import pytest
import torch

from dynatree_core.distill.config import DistillConfig
from dynatree_core.distill.decode import _decode_batch, _sample_next, decode
from dynatree_core.distill.static_decode import StaticWriter, kv_bytes, pick, resolve_gen_runtime, slot_count
from dynatree_core.pairs.tiny import tiny_model

PROMPTS = [[5, 9, 2], [7, 3, 9, 12, 30, 4, 4], [11], [8, 8, 21, 6, 2]]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", layers=2)


def _seeded(fn, seed: int = 3):
    torch.manual_seed(seed)
    return fn()


@pytest.mark.parametrize("sample,top_p", [(False, 1.0), (True, 1.0), (True, 0.9)])
def test_the_static_loop_writes_what_the_dynamic_loop_wrote_for_a_seed(model, sample, top_p):
    old = _seeded(lambda: _decode_batch(model, PROMPTS, 24, set(), sample, 0.8, top_p))
    new = _seeded(lambda: decode(model, PROMPTS, 24, set(), sample, 0.8, top_p, runtime="static"))
    assert new == old
    other = _seeded(lambda: decode(model, PROMPTS, 24, set(), sample, 0.8, top_p, runtime="static"), seed=4)
    assert (other != old) == sample  # the seed matters only when sampling


def test_the_loop_stops_once_every_row_has_stopped_checking_every_k_steps(model):
    free = _decode_batch(model, PROMPTS, 40, set(), False, 1.0, 1.0)
    stop = {row[2] for row in free}  # every row writes a stop token by its third token
    old = _decode_batch(model, PROMPTS, 40, stop, False, 1.0, 1.0)
    w = StaticWriter(model, PROMPTS, 40, stop, False, 1.0, 1.0)
    new = w.run(stop_every=4)
    assert w.steps == 4 and len(old[0]) <= 3  # stopped at the first check after every row stopped
    assert [r[:len(o)] for r, o in zip(new, old)] == old  # the same tokens; the rest is cut at the stop token
    assert len(StaticWriter(model, PROMPTS, 40, set(), False, 1.0, 1.0).run(stop_every=4)[0]) == 40


def test_the_step_compiles_as_one_graph_and_writes_the_same_tokens(model):
    """``fullgraph=True`` fails on any graph break: a host read (``.item()``, ``bool(t)``), a Python branch
    on a tensor or a shape that changes per step. aot_eager: the same tracing as inductor, no codegen
    (seconds on a CPU; the data stage's ``--gen-runtime compiled`` uses inductor)."""
    torch._dynamo.reset()
    eager = _seeded(lambda: decode(model, PROMPTS, 12, {7}, True, 0.8, 0.9, runtime="static"))
    w = StaticWriter(model, PROMPTS, 12, {7}, True, 0.8, 0.9)
    step = torch.compile(w.step, fullgraph=True, dynamic=False, backend="aot_eager")
    torch.manual_seed(3)
    with torch.no_grad():
        w.prefill()
        for _ in range(11):
            w.noise.exponential_()  # drawn outside the graph, as StaticWriter does for "compiled"
            step()
    assert w.out.tolist() == eager
    assert int(w.i) == 12 and bool(w.done.any()) == any(7 in r for r in eager)


def _poisoned_run(model, n_new: int, exact: bool) -> list[list[int]]:
    """The eager loop with every slot past the prompt filled with NaN after the prefill: a step that reads a
    slot before writing it turns its rows' logits to NaN (a masked slot still multiplies its value by 0)."""
    w = StaticWriter(model, PROMPTS, n_new, set(), False, 1.0, 1.0)
    with torch.no_grad():
        w.prefill()
        for layer in w.cache.layers:
            layer.keys[:, :, w.P:] = float("nan")
            layer.values[:, :, w.P:] = float("nan")
        for n in range(1, n_new):
            w.step(w.view_slots(n) if exact else None)
    return w.out.tolist()


def test_the_eager_step_reads_only_the_slots_written_so_far(model):
    """On a CPU the step attends over the live slots alone (P + n at step n), as the dynamic loop's cache
    holds them; reading all L slots (the deliberately wrong variant: view None) reads the poisoned ones."""
    old = _decode_batch(model, PROMPTS, 20, set(), False, 1.0, 1.0)
    assert _poisoned_run(model, 20, exact=True) == old
    assert _poisoned_run(model, 20, exact=False) != old


def test_each_bucketed_view_compiles_as_one_graph_and_writes_the_same_tokens(model):
    """``compiled`` and ``graphs`` attend over the live slots rounded up to SLOT_STEP: a batch of 7-token
    prompts and 70 new tokens (L = 128) runs at views 64 and 128, one graph each, and writes the eager
    loop's tokens."""
    torch._dynamo.reset()
    eager = _seeded(lambda: decode(model, PROMPTS, 70, set(), True, 0.8, 1.0, runtime="static"))
    w = StaticWriter(model, PROMPTS, 70, set(), True, 0.8, 1.0, runtime="compiled")
    step = torch.compile(w.step, fullgraph=True, dynamic=False, backend="aot_eager")
    views = [w.view_slots(n) for n in range(1, 70)]
    assert sorted(set(views)) == [64, 128] and views == sorted(views)
    torch.manual_seed(3)
    with torch.no_grad():
        w.prefill()
        for v in views:
            w.noise.exponential_()
            step(v)
    assert w.out.tolist() == eager


def test_the_race_sampler_is_multinomials_draw_token_for_token():
    """pick's exponential race over the same noise stream is ``torch.multinomial(p, 1)`` (top-p: of the
    sorted, cut probabilities); drawing the race's noise in vocabulary order under top-p is not."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=g) * 2
    for top_p in (1.0, 0.9, 0.5):
        ref = [_seeded(lambda: _sample_next(logits, True, 0.7, top_p), seed=s) for s in range(20)]
        new = [_seeded(lambda: pick(logits, torch.empty(64, 50).exponential_(), 0.7, top_p), seed=s)
               for s in range(20)]
        assert all(torch.equal(a, b) for a, b in zip(ref, new)), top_p
    probs = torch.softmax(logits / 0.7, -1)
    wrong = [_seeded(lambda: _vocabulary_order_race(probs, 0.5), seed=s) for s in range(20)]
    ref = [_seeded(lambda: _sample_next(logits, True, 0.7, 0.5), seed=s) for s in range(20)]
    assert not all(torch.equal(a, b) for a, b in zip(ref, wrong))


def _vocabulary_order_race(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sp, si = probs.sort(dim=-1, descending=True)
    kept = torch.zeros_like(probs).scatter(-1, si, sp.masked_fill((sp.cumsum(-1) - sp) > top_p, 0.0))
    return (kept / torch.empty_like(probs).exponential_()).argmax(-1)


def test_the_race_draws_each_token_with_its_probability_and_uniform_noise_does_not():
    p = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    logits = p.log().expand(20_000, 5)
    torch.manual_seed(0)
    freq = torch.bincount(pick(logits, torch.empty(20_000, 5).exponential_(), 1.0, 1.0), minlength=5) / 20_000
    assert (freq - p).abs().max() < 0.012  # 3.4 standard errors of the largest cell
    torch.manual_seed(0)
    wrong = torch.bincount(pick(logits, torch.rand(20_000, 5), 1.0, 1.0), minlength=5) / 20_000
    assert (wrong - p).abs().max() > 0.05


def test_the_static_cache_takes_the_bytes_kv_bytes_says(model):
    w = StaticWriter(model, PROMPTS, 10, set(), False, 1.0, 1.0)
    w.run()
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in w.cache.layers)
    assert held == kv_bytes(model, len(PROMPTS), slot_count(7, 10), torch.float32) and slot_count(7, 10) == 64


def test_gen_runtime_is_checked_before_any_model_work():
    assert resolve_gen_runtime("auto", torch.device("cpu")) == "static"
    assert resolve_gen_runtime("auto", torch.device("cuda")) == "graphs"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_gen_runtime("graphs", torch.device("cpu"))
    with pytest.raises(ValueError, match="--gen-runtime must be one of"):
        resolve_gen_runtime("fast", torch.device("cpu"))
    with pytest.raises(ValueError, match="--gen-runtime graphs captures CUDA graphs: it needs --device cuda"):
        DistillConfig(device="cpu", gen_runtime="graphs")
    with pytest.raises(ValueError, match="--gen-runtime must be one of"):
        DistillConfig(gen_runtime="fast")
