"""scripts/count_ops.py: the dispatched-op counts behind the GPU section's diagnosis."""

from __future__ import annotations

from dynatree_core.pairs.tiny import tiny_pair

from helpers.scripts import load_script


def _module():
    return load_script("count_ops")


def test_ops_are_charged_to_the_models_or_to_the_engine_and_trees_cost_more_per_level():
    mod = _module()
    pair = tiny_pair("llama", noise=0.05)
    prompt = [5, 9, 14, 3, 7, 5, 9, 14]
    ar = mod.count(pair, prompt, "ar", None, 16, 4)
    assert ar["levels_per_iteration"] == 0 and ar["model_ops_per_iteration"] > 0 < ar["engine_ops_per_iteration"]
    from dynatree_core.policy.config import DynaTreeConfig, LinearConfig

    lin = mod.count(pair, prompt, "linear", LinearConfig(k=3), 24, 4)
    dyn = mod.count(pair, prompt, "dynatree", DynaTreeConfig(), 24, 4)
    assert lin["levels_per_iteration"] > 0 and dyn["levels_per_iteration"] > 0
    # AR's forward is the target's alone; a draft level adds the draft's forward and bookkeeping
    assert lin["model_ops_per_iteration"] > ar["model_ops_per_iteration"]
    per_level = {name: (r["engine_ops_per_iteration"] - ar["engine_ops_per_iteration"]) / r["levels_per_iteration"]
                 for name, r in (("linear", lin), ("dynatree", dyn))}
    assert per_level["dynatree"] > per_level["linear"] > 0  # confidence-driven levels do more bookkeeping
    assert all(":" in where and n > 0 for where, n in dyn["top_engine"])


def test_the_command_line_prints_one_row_per_method(capsys):
    assert _module().main(["--target", "tiny-llama", "--methods", "ar,linear,dynatree", "--tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[0] for ln in out.splitlines() if ln.startswith(("ar ", "linear", "dynatree"))] == [
        "ar", "linear", "dynatree"]


def test_op_counter_counts_only_inside_its_block():
    import torch

    counter = _module().OpCounter()
    x = torch.ones(3)
    x + 1  # before: not counted
    with counter:
        y = x * 2
        y.sum()
    x - 1  # after: not counted
    assert counter.total == 2 == counter.kinds["engine"]  # issued from this test file, not a model


def test_gpu_profile_writes_its_rows_on_a_cpu(tmp_path):
    import json

    prof = load_script("gpu_profile")
    assert prof.main(["--target", "tiny-llama", "--device", "cpu", "--tokens", "8", "--methods",
                      "ar,linear:k=2,dynatree:gpu", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "gpu_profile" and doc["device"] == "cpu"
    rows = {r["label"]: r for r in doc["rows"]}
    assert list(rows) == ["ar", "linear:k=2", "dynatree:gpu"]
    assert all(r["tokens"] == 8 and r["aten_ops"] > 0 and r["wall_s"] > 0 for r in rows.values())
    assert all(r["kernel_s"] is None and r["launches"] is None for r in rows.values())  # no CUDA here
    assert rows["ar"]["tokens_per_iteration"] == 1.0 and rows["linear:k=2"]["draft_forwards_per_iteration"] > 0


def test_tune_gpu_preset_grid_overrides_the_paper_preset():
    import argparse

    from dynatree_core import DynaTreeConfig

    tune = load_script("tune_gpu_preset")
    cells = tune.cells(argparse.Namespace(grid="b_min=2,b_mid=3,b_max=4,n_max=32,tau=0.02;d0=4"))
    methods = [m for m, _ in cells]
    assert methods[0] == "ar" and methods.count("linear") == 4 and methods[-2:] == ["dynatree", "dynatree"]
    wide, shallow = cells[-2][1], cells[-1][1]
    assert wide == DynaTreeConfig.paper(b_min=2, b_mid=3, b_max=4, n_max=32, tau=0.02) == DynaTreeConfig.gpu()
    assert isinstance(wide.tau, float) and isinstance(wide.n_max, int) and shallow.d0 == 4
    assert len(tune.cells(argparse.Namespace(grid=tune.DEFAULT_GRID))) == 10 + len(tune.DEFAULT_GRID.split(";"))
