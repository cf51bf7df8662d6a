"""The protocol end to end on a tiny pair: schema, warmup, exact T, history carry, lengths."""

from __future__ import annotations

import pytest
import torch

from helpers.bench import make_data_dir, spy_on_history
from dynatree_core.bench.methods import method_specs, parse_methods
from dynatree_core.bench.pairs import pair_info
from dynatree_core.bench.protocol import LengthError, RunPoint, _digest, check_lengths
from dynatree_core.bench.results import SCHEMA_VERSION, load_result, recompute, write_json_atomic
from dynatree_core.bench.runner import Experiment, load_corpora, prepare, run_experiment
from dynatree_core.pairs.tiny import tiny_pair

T, N, W, L = 6, 3, 1, 24
TOP_KEYS = {"schema_version", "kind", "run_id", "created", "notes", "protocol", "methods", "models", "device",
            "dtype", "versions", "machine", "data", "prompts", "rows", "aggregates", "checks", "warnings"}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", noise=0.02)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    data = make_data_dir(tmp_path_factory.mktemp("data"))
    specs = method_specs(parse_methods("ar,linear,dynatree"), preset="cpu", k=3)
    return Experiment(kind="bench", points=[RunPoint(s, T) for s in specs], datasets=["wikitext2", "pg19"],
                      num_prompts=N, warmup=W, max_prompt_len={"wikitext2": L, "pg19": L}, seed=0,
                      data_dir=str(data))


@pytest.fixture(scope="module")
def result(pair, experiment):
    return run_experiment(pair, experiment, load_corpora(experiment), progress=False)


def test_result_document_has_the_schema(result):
    assert TOP_KEYS <= set(result) and result["schema_version"] == SCHEMA_VERSION
    assert result["protocol"]["ignore_eos"] is True and "EOS is ignored" in result["protocol"]["eos_note"]
    assert {m["label"] for m in result["methods"]} == {"ar", "linear", "dynatree"}
    assert result["methods"][1]["config"]["k"] == 3
    assert {"platform", "cpu_count", "torch_threads"} <= set(result["machine"])
    assert {"torch", "transformers", "dynatree"} <= set(result["versions"])
    assert result["data"]["wikitext2"]["origin"] == "local"
    assert len(result["prompts"]) == 2 * N


def test_every_row_generates_exactly_T_tokens_and_warmup_is_flagged(result):
    rows = result["rows"]
    assert len(rows) == 2 * 3 * N
    assert all(r["new_tokens"] == T for r in rows)
    for ds in ("wikitext2", "pg19"):
        for label in {r["label"] for r in rows}:
            cell = [r for r in rows if r["dataset"] == ds and r["label"] == label]
            assert [r["warmup"] for r in cell] == [True] + [False] * (N - 1)
            assert [r["prompt_index"] for r in cell] == sorted(r["prompt_index"] for r in cell)
    assert all(r["target_forwards_per_token"] > 0 and r["draft_forwards_per_token"] is not None for r in rows)


def test_stored_aggregates_equal_recomputation_and_exclude_warmup(result, tmp_path):
    """The aggregates as written to the file equal those recomputed from the file's rows (what
    ``dynatree table`` shows); a stored aggregate that drifted from its rows would differ."""
    stored = load_result(write_json_atomic(tmp_path / "run.json", result))
    assert stored["aggregates"] == recompute(stored)
    for a in stored["aggregates"]:
        assert a["n"] == N - W and a["n_warmup"] == W
    ar = [a for a in stored["aggregates"] if a["label"] == "ar"]
    assert all(a["speedup"] == pytest.approx(1.0) for a in ar)
    stored["rows"][-1]["tokens_per_s"] *= 2  # the comparison can fail: one row changed after aggregation
    assert stored["aggregates"] != recompute(stored)


def test_all_methods_produce_the_target_greedy_output(pair, experiment, result):
    """Every row's tokens are those of the target's own ``model.generate`` (greedy, Hugging Face's
    loop, not the engine's AR) on the same prompt; and the exactness check agrees."""
    prep = prepare(pair_info(pair), experiment, load_corpora(experiment))
    want = {}
    for ds in experiment.datasets:
        for prompt in prep.prompts_for(ds, L):
            with torch.inference_mode():
                out = pair.target.generate(torch.tensor([prompt.token_ids]), do_sample=False, max_new_tokens=T,
                                           min_new_tokens=T, eos_token_id=None, pad_token_id=0)
            want[ds, prompt.index] = _digest(out[0, len(prompt.token_ids):].tolist())
    assert len(want) == 2 * N
    assert {(r["dataset"], r["prompt_index"], r["label"]): r["output_sha1"] for r in result["rows"]} == \
        {(ds, i, label): sha for (ds, i), sha in want.items() for label in ("ar", "linear", "dynatree")}
    assert result["checks"]["outputs_identical_across_methods"] is True


def test_prompt_length_plus_T_beyond_the_context_window_is_rejected(pair):
    specs = method_specs(["ar", "linear"])
    with pytest.raises(LengthError, match="context window of 1024"):
        check_lengths(pair, [RunPoint(s, 1000) for s in specs], ["wikitext2"], {"wikitext2": 100})
    check_lengths(pair, [RunPoint(s, 900) for s in specs], ["wikitext2"], {"wikitext2": 100})


def test_experiment_validates_N_and_W():
    exp = Experiment(kind="bench", points=[RunPoint(method_specs(["ar"])[0], 4)], datasets=["wikitext2"],
                     num_prompts=2, warmup=2, max_prompt_len={"wikitext2": 8})
    with pytest.raises(ValueError, match="warmup"):
        exp.validate()


def test_dynatree_history_is_carried_through_warmup_and_each_measured_prompt_starts_from_it(pair, monkeypatch):
    from dynatree_core.bench.data import Prompt
    from dynatree_core.bench.runner import run_points

    seen = spy_on_history(monkeypatch)
    prompts = [Prompt("wikitext2", i, "x", 0, "t", 0, 8, 8, 8, [5 + i] * 8, "") for i in range(3)]
    spec = method_specs(["dynatree"], preset="cpu")[0]
    rows = run_points(pair, [RunPoint(spec, 4)], ["wikitext2"], lambda ds, n: prompts, {"wikitext2": 8}, 1,
                      progress=False)
    # the worker's untimed warm-up decode, then warmup prompt 0, then the measured prompts 1 and 2
    assert len(seen) == 4 and seen[0][0] is None and seen[1][0] is None
    assert seen[2][0].to_dict() == seen[1][1].to_dict() == seen[3][0].to_dict()
    assert seen[3][0].to_dict() != seen[2][1].to_dict()  # prompt 2 does not continue from prompt 1
    assert [r["warmup"] for r in rows] == [True, False, False]
    assert all(r["oracle"]["top_k"] and len(r["oracle"]["reach"]) == r["iterations"] for r in rows)


def test_several_linear_k_give_one_row_each():
    specs = method_specs(parse_methods("ar,linear,dynatree"), preset="cpu", k=[2, 4])
    assert [s.label for s in specs] == ["ar", "linear:k=2", "linear:k=4", "dynatree"]
    assert [s.config.k for s in specs if s.method == "linear"] == [2, 4]
    assert method_specs(["linear"], k=3)[0].label == "linear"  # one K keeps the plain label
    with pytest.raises(ValueError, match="k"):
        method_specs(["linear"], k=[])
