"""Hugging Face assisted generation as the ``hf_assisted`` benchmark method: exact tokens, forward
counts, engine overhead per iteration, the table columns and the overhead lines (no timed asserts)."""

from __future__ import annotations

import json
import math

import pytest

from helpers.bench import make_data_dir
from dynatree_core.bench.hf_assisted import HFAssistedConfig, assistant_settings, generate_hf_assisted
from dynatree_core.bench.methods import METHOD_NAMES, method_specs, parse_methods
from dynatree_core.bench.protocol import RunPoint
from dynatree_core.bench.results import aggregate, recompute
from dynatree_core.bench.runner import Experiment, load_corpora, run_experiment
from dynatree_core.bench.tables import make_tables, overhead_notes, render
from dynatree_core.cli import main
from dynatree_core.engine.api import generate
from dynatree_core.pairs.tiny import tiny_feature_pair, tiny_pair
from helpers.bench import row

#: a prompt on which the tiny Llama target's greedy output contains EOS (id 1) at position 15 of 40
EOS_PROMPT = [47, 53, 40, 59, 11, 21, 8, 48, 6, 59, 56, 45, 23, 32, 37, 8, 24, 29, 22, 41]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama")


class _Count:
    """Counts a module's forwards independently of the code under test."""

    def __init__(self, module):
        self.n = 0
        self.h = module.register_forward_pre_hook(lambda *a: setattr(self, "n", self.n + 1))

    def close(self):
        self.h.remove()


def test_ignore_eos_gives_the_ar_greedy_tokens_through_an_eos(pair):
    ar = generate(pair, EOS_PROMPT, "ar", None, 40, ignore_eos=True)
    assert 1 in ar.tokens[:-1]  # the target's greedy output has EOS inside: HF must not stop or mask it
    res = generate_hf_assisted(pair, EOS_PROMPT, 40, ignore_eos=True)
    assert res.tokens == ar.tokens and res.metrics.new_tokens == 40
    assert res.metrics.stopped_by == "max_new_tokens"


def test_without_ignore_eos_it_stops_where_ar_stops(pair):
    ar = generate(pair, EOS_PROMPT, "ar", None, 40)
    res = generate_hf_assisted(pair, EOS_PROMPT, 40)
    assert res.tokens == ar.tokens and res.tokens[-1] == 1 and res.metrics.stopped_by == "eos"


@pytest.mark.parametrize("prompt", ["the river ran past a quiet town", "in winter the water froze"])
def test_counts_forwards_and_gives_a_finite_overhead(pair, prompt):
    ar = generate(pair, prompt, "ar", None, 24, ignore_eos=True)
    t, d = _Count(pair.target), _Count(pair.draft)
    try:
        res = generate_hf_assisted(pair, prompt, 24, ignore_eos=True)
    finally:
        t.close()
        d.close()
    m = res.metrics
    assert res.tokens == ar.tokens
    assert m.target_forwards == m.iterations == t.n >= 1  # HF's first forward (the prompt) is an iteration
    assert m.draft_forwards == d.n >= 1
    assert m.tokens_per_iteration * m.iterations == pytest.approx(m.new_tokens)
    assert m.mean_accepted_length == pytest.approx((m.new_tokens - m.iterations) / m.iterations)
    assert 0 <= m.acceptance_rate <= 1 and m.mean_tree_size >= 0
    assert 0 < m.forward_time_s <= m.wall_time_s
    assert m.verify_time_s + m.draft_time_s == pytest.approx(m.forward_time_s)
    assert math.isfinite(m.engine_overhead_ms) and m.engine_overhead_ms >= 0
    assert m.engine_overhead_ms == pytest.approx(1e3 * (m.wall_time_s - m.forward_time_s) / m.iterations)
    assert m.host_syncs_per_iteration is None  # not counted in HF's loop
    assert 0 < m.ttft_s <= m.wall_time_s
    assert not pair.target._forward_pre_hooks and not pair.target._forward_hooks  # hooks removed
    assert not pair.draft._forward_pre_hooks and not pair.draft._forward_hooks


def test_overrides_apply_to_the_call_only_and_are_recorded(pair):
    gc = pair.draft.generation_config
    before = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold)
    cfg = HFAssistedConfig(num_assistant_tokens=2, assistant_confidence_threshold=0.0)
    res = generate_hf_assisted(pair, "the river ran", 16, cfg, ignore_eos=True)
    assert res.tokens == generate(pair, "the river ran", "ar", None, 16, ignore_eos=True).tokens
    assert res.metrics.mean_tree_size <= 2
    assert (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold) == before
    s = assistant_settings(pair.draft, cfg)
    assert s["num_assistant_tokens"] == 2 and s["assistant_confidence_threshold"] == 0.0
    default = assistant_settings(pair.draft)  # transformers' defaults, whatever this version's are
    assert isinstance(default["num_assistant_tokens"], int) and default["num_assistant_tokens_schedule"]


def test_config_validates_and_round_trips_as_json():
    cfg = HFAssistedConfig(num_assistant_tokens=5, num_assistant_tokens_schedule="heuristic")
    assert HFAssistedConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert HFAssistedConfig().to_dict()["method"] == "hf_assisted"
    for bad in ({"num_assistant_tokens": 0}, {"num_assistant_tokens_schedule": "fast"},
                {"assistant_confidence_threshold": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            HFAssistedConfig(**bad)
    assert "hf_assisted" in METHOD_NAMES
    (spec,) = method_specs(parse_methods("hf_assisted"))
    assert spec.method == "hf_assisted" and spec.to_dict()["config"] == HFAssistedConfig().to_dict()


def test_a_feature_draft_is_refused_naming_the_method():
    with pytest.raises(ValueError, match="hf_assisted.*Hugging Face causal LM"):
        generate_hf_assisted(tiny_feature_pair(), "the river", 8, ignore_eos=True)


def test_a_draft_with_prompt_lookup_mixed_in_is_refused_naming_the_method():
    import dataclasses

    from dynatree_core.drafters import LookupMix

    mixed = dataclasses.replace(tiny_pair("llama"), lookup=LookupMix())
    with pytest.raises(ValueError, match="hf_assisted.*mixes prompt lookup"):
        generate_hf_assisted(mixed, "the river", 8, ignore_eos=True)


@pytest.fixture(scope="module")
def result(pair, tmp_path_factory):
    data = make_data_dir(tmp_path_factory.mktemp("data"))
    specs = method_specs(parse_methods("ar,linear,dynatree,hf_assisted"), preset="cpu", k=3)
    exp = Experiment(kind="bench", points=[RunPoint(s, 8) for s in specs], datasets=["wikitext2"],
                     num_prompts=3, warmup=1, max_prompt_len={"wikitext2": 24}, data_dir=str(data))
    return run_experiment(pair, exp, load_corpora(exp), progress=False)


def test_bench_runs_it_prompt_major_with_the_exactness_check(result):
    rows = result["rows"]
    assert [r["label"] for r in rows[:4]] == ["ar", "linear", "dynatree", "hf_assisted"]
    assert [r["prompt_index"] for r in rows] == sorted(r["prompt_index"] for r in rows)  # prompt-major
    hf = [r for r in rows if r["label"] == "hf_assisted"]
    assert len(hf) == 3 and all(r["new_tokens"] == 8 for r in hf)
    assert all(r["hf_assisted"]["num_assistant_tokens"] >= 1 and r["hf_assisted"]["transformers"] for r in hf)
    assert result["checks"]["outputs_identical_across_methods"]  # HF's tokens equal AR's too
    assert {m["label"]: m["config"]["method"] for m in result["methods"]}["hf_assisted"] == "hf_assisted"
    json.dumps(result, allow_nan=False)


def test_aggregates_and_table_carry_the_overhead_and_its_ratio_to_hf(result):
    aggs = recompute(json.loads(json.dumps(result)))
    by = {a["label"]: a for a in aggs}
    hf = by["hf_assisted"]["engine_overhead_ms"]
    assert hf is not None and math.isfinite(hf)
    for label in ("ar", "linear", "dynatree"):
        a = by[label]
        assert a["hf_overhead_ms"] == hf
        if a["engine_overhead_ms"] is not None:  # measured by the engine
            assert a["overhead_ratio_vs_hf"] == pytest.approx(a["engine_overhead_ms"] / hf)
    assert by["hf_assisted"]["overhead_ratio_vs_hf"] == pytest.approx(1.0)
    t1 = make_tables(aggs, [1])[1]
    assert {"overhead_ms_iter", "syncs_iter"} <= set(t1.columns)
    assert list(t1["method"])[-1] == "hf_assisted"  # HF's row after ours
    text = render(aggs, [1])
    assert "overhead ms/iter" in text and "syncs/iter" in text
    notes = overhead_notes(aggs)
    measured = [lab for lab in ("ar", "linear", "dynatree") if by[lab]["engine_overhead_ms"] is not None]
    assert len(notes) == len(measured)
    for n in notes:
        assert n.startswith("wikitext2: ") and "engine overhead per iteration:" in n and "vs HF assisted" in n
        assert "(ratio " in n


def test_overhead_lines_need_an_hf_row_and_old_rows_still_aggregate():
    old = [row("wikitext2", "ar", i, 10.0) for i in range(2)] + [row("wikitext2", "dynatree", i, 20.0)
                                                                  for i in range(2)]
    aggs = aggregate(old)  # rows written before engine_overhead_ms existed
    assert all(a["engine_overhead_ms"] is None and a["overhead_ratio_vs_hf"] is None for a in aggs)
    assert overhead_notes(aggs) == []
    assert "| - | - |" in render(aggs, [1])  # overhead and syncs shown as "-"
    new = [row("wikitext2", lab, 0, 10.0, engine_overhead_ms=ms) for lab, ms in
           (("ar", 0.5), ("dynatree", 1.0), ("hf_assisted", 2.0))]
    (line,) = [n for n in overhead_notes(aggregate(new)) if ": dynatree:" in n]
    assert line == "wikitext2: dynatree: engine overhead per iteration: 1.00 ms vs HF assisted 2.00 ms (ratio 0.50)"


def test_cli_bench_prints_the_overhead_lines(tmp_path, capsys):
    data = make_data_dir(tmp_path / "data")
    out = tmp_path / "r.json"
    argv = ["bench", "--target", "tiny-llama", "--no-progress", "--data-dir", str(data), "--out", str(out),
            "--num-prompts", "2", "--warmup", "1", "--max-new-tokens", "6", "--max-prompt-len", "16",
            "--dataset", "wikitext2", "--methods", "ar,linear,dynatree,hf_assisted"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "overhead ms/iter" in stdout and "vs HF assisted" in stdout
    d = json.loads(out.read_text())
    assert d["checks"]["outputs_identical_across_methods"]
    assert any(a["label"] == "hf_assisted" and a["engine_overhead_ms"] is not None for a in d["aggregates"])


def test_cli_refuses_hf_assisted_with_a_feature_draft(tmp_path, capsys):
    data = make_data_dir(tmp_path / "data")
    argv = ["bench", "--target", "tiny-llama-feature", "--no-progress", "--data-dir", str(data),
            "--out", str(tmp_path / "r.json"), "--num-prompts", "2", "--warmup", "1", "--max-new-tokens", "4",
            "--max-prompt-len", "16", "--methods", "ar,hf_assisted"]
    assert main(argv) == 2
    assert "hf_assisted" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_cli_generate_runs_it(capsys):
    argv = ["generate", "--target", "tiny-llama", "--prompt", "the river", "--method", "hf_assisted",
            "--max-new-tokens", "8", "--ignore-eos"]
    assert main(argv) == 0
    assert "engine_overhead_ms" in capsys.readouterr().out
