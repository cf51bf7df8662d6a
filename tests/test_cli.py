"""The ``dynatree`` CLI on the tiny test pair: exit codes, messages, files."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from dynatree_core.cli import build_parser, main
from helpers.bench import TINY, bench_args


def test_bench_writes_one_json_and_prints_tables_1_to_3(data_dir, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(bench_args(data_dir, out)) == 0
    stdout = capsys.readouterr().out
    for title in ("Table 1", "Table 2", "Table 3", "EOS is ignored"):
        assert title in stdout
    assert "Table 4" not in stdout
    (f,) = out.glob("*.json")
    d = json.loads(f.read_text())
    assert d["schema_version"] == "1.1" and d["protocol"]["num_prompts"] == 2
    assert d["protocol"]["command_line"].startswith("dynatree bench")
    assert main(bench_args(data_dir, out)) == 0  # a second run gets its own file
    assert len(list(out.glob("*.json"))) == 2


def test_bench_refuses_an_existing_json_without_overwrite(data_dir, tmp_path, capsys):
    target = tmp_path / "run.json"
    target.write_text('{"keep": true}')
    assert main(bench_args(data_dir, target)) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert json.loads(target.read_text()) == {"keep": True}
    assert main(bench_args(data_dir, target, "--overwrite")) == 0
    assert json.loads(target.read_text())["schema_version"] == "1.1"


@pytest.mark.parametrize("extra, message", [
    (["--dataset", "c4"], "unknown dataset 'c4'"),
    (["--methods", "ar,medusa"], "unknown method 'medusa'"),
    (["--max-new-tokens", "1000", "--max-prompt-len", "100"], "context window"),
    (["--warmup", "2"], "--warmup"),
    (["--dynatree-b-min", "3"], "b_min"),
])
def test_bad_bench_input_exits_2_with_a_message_and_no_json(data_dir, tmp_path, capsys, extra, message):
    out = tmp_path / "res"
    assert main(bench_args(data_dir, out) + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("dynatree: error:")
    assert not out.exists() or not list(out.glob("*.json"))


def test_missing_data_dir_says_where_it_looked(tmp_path, capsys):
    missing = tmp_path / "no-data"
    assert main(bench_args(missing, tmp_path / "res")) == 2
    err = capsys.readouterr().err
    assert str(missing / "wikitext-2-raw" / "wiki.test.raw") in err and "--data-dir" in err


def test_unwritable_output_is_rejected_before_running(data_dir, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(bench_args(data_dir, blocker / "res")) == 2
    assert "cannot write results" in capsys.readouterr().err


def test_table_rerenders_saved_results_and_rejects_non_results(data_dir, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(bench_args(data_dir, out, "--methods", "ar,ablation")) == 0
    assert "Table 4" in capsys.readouterr().out  # ablation variants -> Table 4 printed
    (f,) = out.glob("*.json")
    assert main(["table", str(f), "--tables", "1,4,5"]) == 0
    stdout = capsys.readouterr().out
    assert "Table 1" in stdout and "+ History (full)" in stdout and "Table 5" in stdout and "Table 2" not in stdout
    bogus = tmp_path / "bogus.json"
    bogus.write_text("[]")
    assert main(["table", str(bogus)]) == 2
    assert "not a dynatree result file" in capsys.readouterr().err


def test_sweep_writes_json_and_html_figure(data_dir, tmp_path, capsys):
    out = tmp_path / "sw"
    args = ["sweep", "fixed_tree", *TINY, "--data-dir", str(data_dir), "--out", str(out), "--num-prompts", "2",
            "--warmup", "1", "--max-new-tokens", "4", "--max-prompt-len", "16", "--d-values", "1,2",
            "--b-values", "2"]
    assert main(args) == 0
    (f,) = out.glob("*.json")
    d = json.loads(f.read_text())
    assert d["kind"] == "sweep:fixed_tree" and d["sweep"]["grid"]["d"] == [1, 2]
    assert sorted(a["d"] for a in d["aggregates"] if a["method"] == "fixed_tree") == [1, 2]
    assert f.with_suffix(".html").read_text().count("dynatree-sweep-fixed_tree") >= 1


def test_generate_prints_text_and_metrics_and_writes_a_trace(tmp_path, capsys):
    trace = tmp_path / "t.json"
    argv = ["generate", "--target", "tiny-llama", "--prompt", "the river", "--method", "linear",
            "--max-new-tokens", "5", "--ignore-eos", "--trace", str(trace)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "new_tokens: 5" in captured.out and "tokens_per_s" in captured.out
    assert json.loads(trace.read_text())["method"] == "linear"
    assert main(argv) == 2  # the trace exists now
    assert "--overwrite" in capsys.readouterr().err


def test_distill_subcommand_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"generate", "bench", "table", "sweep", "distill"} <= set(sub.choices)


def test_bench_with_several_k_writes_one_linear_row_per_k(data_dir, tmp_path, capsys):
    out = tmp_path / "res.json"
    args = bench_args(data_dir, out, "--linear-k", "1,3", methods="ar,linear")
    assert main(args) == 0
    d = json.loads(out.read_text())
    assert [m["label"] for m in d["methods"]] == ["ar", "linear:k=1", "linear:k=3"]
    assert [m["config"]["k"] for m in d["methods"][1:]] == [1, 3]
    table = capsys.readouterr().out
    assert table.index("linear:k=1") < table.index("linear:k=3")


@pytest.mark.parametrize("k", ["0,2", "two"])
def test_bad_k_list_names_the_flag(data_dir, tmp_path, capsys, k):
    try:
        rc = main(bench_args(data_dir, tmp_path / "res", "--linear-k", k))
    except SystemExit as e:  # argparse rejects it while parsing
        rc = e.code
    assert rc == 2 and "--linear-k takes integers >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("target, kind", [("tiny-llama", "model"), ("tiny-llama-feature", "feature")])
def test_bench_json_records_the_drafter(data_dir, tmp_path, target, kind):
    out = tmp_path / "run.json"
    args = bench_args(data_dir, out)
    args[args.index("tiny-llama")] = target
    assert main(args) == 0
    d = json.loads(out.read_text())
    assert d["models"]["drafter"]["kind"] == kind
    assert d["checks"]["outputs_identical_across_methods"]


def test_drafter_flag_is_for_the_embedded_pair_only(data_dir, tmp_path, capsys):
    assert main(bench_args(data_dir, tmp_path / "r.json", "--drafter", "feature")) == 2
    assert "--drafter" in capsys.readouterr().err


def test_drafter_lookup_runs_any_target_without_a_draft_model(data_dir, tmp_path, capsys):
    out = tmp_path / "run.json"
    args = bench_args(data_dir, out, "--drafter", "lookup", methods="ar,linear,dynatree")
    assert main(args) == 0
    d = json.loads(out.read_text())
    assert d["models"]["drafter"] == {"kind": "lookup", "max_ngram": 3, "min_ngram": 1}
    assert d["models"]["draft"] == "prompt-lookup" and d["models"]["draft_params"] == 0
    assert d["checks"]["outputs_identical_across_methods"]
    printed = capsys.readouterr()
    assert "draft: prompt-lookup (drafter: lookup)" in printed.err  # the run says what drafted
    # a draft model and prompt lookup at once is a contradiction, caught before anything loads
    assert main(bench_args(data_dir, tmp_path / "r.json", "--drafter", "lookup", "--draft", "x")) == 2
    assert "drop --draft" in capsys.readouterr().err


@pytest.mark.parametrize("target, kind", [("tiny-llama", "model"), ("tiny-llama-feature", "feature")])
def test_drafter_plus_lookup_mixes_prompt_lookup_into_the_named_draft(data_dir, tmp_path, capsys, target, kind):
    out = tmp_path / "run.json"
    args = bench_args(data_dir, out, "--drafter", f"{kind}+lookup", methods="ar,linear,dynatree")
    args[args.index("tiny-llama")] = target
    assert main(args) == 0
    d = json.loads(out.read_text())
    assert d["models"]["drafter"]["kind"] == f"{kind}+lookup"
    assert d["models"]["drafter"]["lookup"]["max_ngram"] == 5 and d["models"]["draft_params"] > 0
    assert d["checks"]["outputs_identical_across_methods"]
    assert f"(drafter: {kind}+lookup)" in capsys.readouterr().err
    # the kind named must be the draft's kind
    other = "feature" if kind == "model" else "model"
    args = bench_args(data_dir, tmp_path / "r.json", "--drafter", f"{other}+lookup", methods="ar,linear")
    args[args.index("tiny-llama")] = target
    assert main(args) != 0
    assert f"use {kind}+lookup" in capsys.readouterr().err


def test_generate_refuses_zero_new_tokens_before_loading_any_model(capsys, monkeypatch):
    import dynatree_core.cli.commands as commands

    def boom(*a, **k):
        raise AssertionError("the model pair must not be loaded for a bad --max-new-tokens")

    monkeypatch.setattr(commands, "load_pair", boom)  # what cmd_generate calls
    assert main(["generate", "--prompt", "x", "--max-new-tokens", "0"]) == 2
    assert "--max-new-tokens (T) must be >= 1" in capsys.readouterr().err


# --- a newcomer's first ten minutes (issue 18) --------------------------------------------------
def test_help_starts_without_torch_and_without_markup():
    """--help must be instant: neither torch nor transformers nor pandas may load for it."""
    import subprocess
    import sys

    code = ("import sys\nfrom dynatree_core.cli import main\n"
            "for argv in (['--help'], ['bench', '--help'], ['distill', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('LOADED', sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out
    assert "``" not in out and "::" not in out  # reStructuredText markup in help text


@pytest.mark.parametrize("old, new", [("--k", "--linear-k"), ("--tau", "--fixed-tau"), ("--dt-tau", "--dynatree-tau"),
                                      ("--tau-h", "--dynatree-tau-h"), ("--preset", "--dynatree-preset")])
def test_renamed_method_options_fail_with_the_new_name_in_one_line(data_dir, tmp_path, capsys, old, new):
    with pytest.raises(SystemExit) as e:
        main(bench_args(data_dir, tmp_path / "res", old, "1"))
    err = capsys.readouterr().err
    assert e.value.code == 2 and new in err and old in err
    assert len(err.strip().splitlines()) == 1  # the problem, not the whole usage


def test_option_abbreviations_are_refused(data_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(bench_args(data_dir, tmp_path / "res", "--linear", "2"))
    assert "unrecognized arguments: --linear" in capsys.readouterr().err


def test_dynatree_options_take_their_type_from_the_config_dataclass():
    p = build_parser()
    args = p.parse_args(["bench", "--dynatree-n-max", "12", "--dynatree-tau-h", "0.8", "--linear-k", "2,5"])
    assert args.dt_n_max == 12 and isinstance(args.dt_n_max, int)
    assert args.dt_tau_h == 0.8 and args.k == [2, 5]
    with pytest.raises(SystemExit):
        p.parse_args(["bench", "--dynatree-n-max", "1.5"])


@pytest.mark.parametrize("argv, message", [
    (["generate", "--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens (T) must be >= 1"),
    (["bench", "--max-new-tokens", "0"], "--max-new-tokens (T) must be >= 1"),
    (["bench", "--target", "no/such-model", "--draft", "no/such-draft"], "no/such-model"),
    (["generate", "--prompt", "x", "--target", "./not/here", "--draft", "x"], "no such file or directory"),
    (["bench", "--draft", "x/y"], "--draft needs --target"),
])
def test_wrong_invocations_fail_before_any_model_loads(monkeypatch, capsys, tmp_path, argv, message):
    import dynatree_core.pairs.pair as models

    def no_load(*a, **k):
        raise AssertionError("a model was loaded for a wrong invocation")

    monkeypatch.setattr(models.ModelPair, "from_pretrained", no_load)
    monkeypatch.setattr(models.ModelPair, "default", no_load)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(argv + ["--out", str(tmp_path / "r")] if argv[0] == "bench" else argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_bench_says_which_data_it_used(data_dir, tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(bench_args(data_dir, out)) == 0
    captured = capsys.readouterr()
    assert f"local files in {data_dir}" in captured.out and f"local files in {data_dir}" in captured.err
    d = json.loads(out.read_text())
    assert all("description" in v and v["origin"] == "local" for v in d["data"].values())


def test_bench_on_bundled_excerpts_says_so(tmp_path, capsys):
    argv = ["bench", *TINY, "--data-source", "bundled", "--out", str(tmp_path / "run.json"), "--num-prompts", "2",
            "--warmup", "1", "--max-new-tokens", "3", "--max-prompt-len", "16", "--methods", "ar", "--dataset", "pg19"]
    assert main(argv) == 0
    assert "bundled excerpts" in capsys.readouterr().out


def test_protocol_note_is_printed_once(data_dir, tmp_path, capsys):
    assert main(bench_args(data_dir, tmp_path / "run.json")) == 0
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count("differs from the paper's") == 1


# --- distillation options: one source of truth (issue 14) ---------------------------------------
def test_distill_options_are_the_config_fields_with_their_defaults():
    import dataclasses

    from dynatree_core.distill.cli import add_distill_args, option_name
    from dynatree_core.distill.config import DistillConfig

    p = argparse.ArgumentParser()
    add_distill_args(p)
    options = [a for a in p._actions if a.dest != "help"]
    fields = DistillConfig.option_fields()
    assert [a.dest for a in options] == [f.name for f in fields]
    assert [a.option_strings[0] for a in options] == [option_name(f.name) for f in fields]
    assert {f.name for f in dataclasses.fields(DistillConfig)} - {f.name for f in fields} == {
        "command_line", "start_time"}  # set by the command, not options
    parsed = vars(p.parse_args([]))
    assert parsed == {f.name: f.default for f in fields}
    assert DistillConfig.from_namespace(p.parse_args([])) == DistillConfig()
    # help and choices come from the field
    kind = next(a for a in options if a.dest == "kind")
    assert kind.choices == ["model", "feature"] and "feature" in kind.help
    assert vars(p.parse_args(["--no-train-bf16", "--steps", "7", "--lr", "0.5"]))["train_bf16"] is False


@pytest.mark.parametrize("change, option", [({"alpha": 1.5}, "--alpha"), ({"steps": 0}, "--steps"),
                                            ({"passage_min": 500}, "--passage-min"), ({"kind": "banana"}, "--kind"),
                                            ({"generator": "draft"}, "--generator draft needs --init-from"),
                                            ({"device": "banana"}, "--device"), ({"unroll": 0}, "--unroll"),
                                            ({"kind_prompts": -1}, "--kind-prompts"),
                                            ({"kind": "feature", "init_from": "/nonexistent"}, "--init-from")])
def test_distill_config_rejects_a_bad_value_naming_the_option(change, option):
    from dynatree_core.distill.config import DistillConfig

    with pytest.raises(ValueError, match=option):
        DistillConfig(**change)
    ok = DistillConfig(steps=5)
    with pytest.raises(ValueError, match=option):  # replace() validates too
        dataclasses.replace(ok, **change)


def test_distill_command_line_modules_do_not_load_torch():
    import subprocess
    import sys

    code = ("import sys\nimport dynatree_core.distill.cli, dynatree_core.distill.config\n"
            "from dynatree_core.distill import DistillConfig, add_distill_parser\n"
            "print('LOADED', sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out
    out = subprocess.run([sys.executable, "-m", "dynatree_core.distill", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "--feature-batch-tokens" in out and "--no-export-every-ckpt" in out


def test_bench_policies_run_exactly_with_the_fixed_grid_and_report_the_oracle(data_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DYNATREE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "res.json"
    args = bench_args(data_dir, out, "--linear-k", "2", "--fixed-d", "2,3", "--fixed-b", "2", "--eagle2-k", "2",
                      "--eagle2-depth", "2", "--eagle2-n-total", "4", "--sequoia-n-max", "4", methods="ar,policies")
    assert main(args) == 0
    d = json.loads(out.read_text())
    labels = [m["label"] for m in d["methods"]]
    assert labels == ["ar", "linear", "fixed_tree:d=2,b=2", "fixed_tree:d=3,b=2", "dynatree:paper", "dynatree:cpu",
                      "dynatree:cost", "eagle2", "sequoia"]
    assert d["checks"]["outputs_identical_across_methods"]
    cost = next(m for m in d["methods"] if m["label"] == "dynatree:cost")["config"]
    assert cost["cost_aware"] and cost["cost"] is None  # measured by the engine, recorded in each trace's config
    aggs = {(a["dataset"], a["label"]): a for a in d["aggregates"]}
    assert all(a["oracle_gap"] is not None and a["oracle_gap_own"] >= 0 for a in aggs.values())
    for (ds, label), a in aggs.items():  # the draft's calibration over the nodes it was fed
        drafted = bool(a["draft_forwards_per_iteration"])  # cost-aware DynaTree may draft nothing here
        assert (a["confidence_ece"] is not None) == drafted and (a["confidence_mean"] is not None) == drafted
        assert not drafted or 0 <= a["confidence_observed"] <= 1
    assert "Table 6" in capsys.readouterr().out
    for extra, msg in ((["--eagle2-k", "1", "--eagle2-depth", "1", "--eagle2-n-total", "2"], "n_total"),
                       (["--sequoia-d-max", "0"], "d_max")):
        assert main(bench_args(data_dir, tmp_path / "bad.json", "--methods", "ar,eagle2,sequoia", *extra)) == 2
        assert msg in capsys.readouterr().err
        assert not (tmp_path / "bad.json").exists()


def test_calibrate_measures_once_then_reads_the_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DYNATREE_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["calibrate", "--target", "tiny-llama"]) == 0
    first = capsys.readouterr().out
    assert "verify c(n)" in first and "acceptance by draft rank" in first
    (f,) = (tmp_path / "cache").glob("calibration-*.json")
    stamp = f.stat().st_mtime_ns
    assert main(["calibrate", "--target", "tiny-llama"]) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == first.splitlines()[-3:] and f.stat().st_mtime_ns == stamp


def test_bench_at_several_temperatures_writes_table_7_and_checks_match_against_seeded_ar(data_dir, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(bench_args(data_dir, out, "--temperature", "0,0.8", "--verify", "match,rejection", "--top-p", "0.95",
                           "--sampling-seed", "3", "--draft-noise", "shared,none", methods="ar,linear,dynatree")) == 0
    stdout = capsys.readouterr().out
    assert "Table 7: speculative sampling by temperature" in stdout and "draft noise" in stdout
    d = json.loads(next(out.glob("*.json")).read_text())
    cells = {(r["label"], r["temperature"], r["verify"], r["draft_noise"]) for r in d["rows"]}
    # greedy cells; at 0.8 match with shared and independent drafts, and rejection; AR samples once (the
    # reference of every sampled cell, with no draft noise: it drafts nothing)
    assert cells == {("ar", 0.0, None, None), ("linear", 0.0, None, None), ("dynatree", 0.0, None, None),
                     ("ar", 0.8, "match", None), ("linear", 0.8, "match", "shared"), ("linear", 0.8, "match", "none"),
                     ("dynatree", 0.8, "match", "shared"), ("dynatree", 0.8, "match", "none"),
                     ("linear", 0.8, "rejection", None), ("dynatree", 0.8, "rejection", None)}
    assert d["protocol"]["greedy"] is False
    assert {"temperature": 0.8, "top_p": 0.95, "top_k": 0, "seed": 3, "verify": "match",
            "draft_noise": "none"} in d["protocol"]["sampling"]
    assert d["checks"]["outputs_identical_across_methods"]  # match cells: seeded AR's tokens, shared noise or not
    speed = {(a["label"], a["temperature"], a["verify"], a["draft_noise"]): a["speedup"] for a in d["aggregates"]}
    assert speed[("ar", 0.8, "match", None)] == 1.0 and speed[("dynatree", 0.8, "rejection", None)] is not None
    assert speed[("dynatree", 0.8, "match", "none")] is not None  # AR at 0.8 is its reference too


@pytest.mark.parametrize("extra, message", [
    (["--temperature", "-1"], "temperature must be a finite number >= 0"),
    (["--temperature", "0.7", "--top-p", "0"], "top_p must be in (0, 1]"),
    (["--temperature", "0.7", "--top-k", "-2"], "top_k must be an integer >= 0"),
    (["--temperature", "0.7", "--verify", "speculative"], "verify must be one of"),
    (["--top-p", "0.9"], "--top-p applies only when sampling"),
    (["--verify", "rejection"], "--verify applies only when sampling"),
    (["--draft-noise", "shared"], "--draft-noise applies only when sampling"),
    (["--temperature", "0.7", "--draft-noise", "gumbel"], "draft_noise must be one of"),
    (["--temperature", "0.7", "--verify", "rejection", "--draft-noise", "none"],
     "--draft-noise applies only under --verify match"),
    (["--temperature", "0.5", "--methods", "ar,hf_assisted"], "hf_assisted runs Hugging Face's assisted generation greedily"),
])
def test_bad_sampling_options_exit_2_before_any_model_loads(data_dir, tmp_path, capsys, monkeypatch, extra, message):
    import dynatree_core.cli.run as run

    monkeypatch.setattr(run, "load_pair", lambda *a, **k: pytest.fail("a model loaded"))
    out = tmp_path / "res"
    methods = "ar,dynatree"
    if "--methods" in extra:
        methods = extra[extra.index("--methods") + 1]
        extra = extra[:extra.index("--methods")]
    assert main(bench_args(data_dir, out, *extra, methods=methods)) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() or not list(out.glob("*.json"))


def test_generate_samples_with_a_seed_and_refuses_rejection_for_ar(tmp_path, capsys):
    argv = ["generate", "--target", "tiny-llama", "--prompt", "the river", "--method", "dynatree",
            "--max-new-tokens", "12", "--temperature", "0.9", "--seed", "4", "--trace", str(tmp_path / "t.json")]
    assert main(argv) == 0
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["sampling"] == {"temperature": 0.9, "top_p": 1.0, "top_k": 0, "seed": 4, "verify": "match",
                                 "draft_noise": "shared"}
    assert main(argv[:-2] + ["--draft-noise", "none"]) == 0
    capsys.readouterr()
    for extra, message in ((["--seed", "4"], "seed=4 applies only when sampling"),
                           (["--draft-noise", "shared"], "draft_noise='shared' applies only when sampling")):
        assert main(["generate", "--target", "tiny-llama", "--prompt", "x", *extra]) == 2  # greedy: refused
        assert message in capsys.readouterr().err
    assert main(["generate", "--target", "tiny-llama", "--prompt", "x", "--method", "ar", "--temperature", "0.9",
                 "--verify", "rejection"]) == 2
    assert "--method ar drafts none" in capsys.readouterr().err
