"""scripts/count_ops.py: the dispatched-op counts behind the GPU section's diagnosis."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dynatree_core.testing import tiny_pair

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "count_ops.py"


def _module():
    spec = importlib.util.spec_from_file_location("count_ops", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ops_are_charged_to_the_models_or_to_the_engine_and_trees_cost_more_per_level():
    mod = _module()
    pair = tiny_pair("llama", noise=0.05)
    prompt = [5, 9, 14, 3, 7, 5, 9, 14]
    ar = mod.count(pair, prompt, "ar", None, 16, 4)
    assert ar["levels_per_iteration"] == 0 and ar["model_ops_per_iteration"] > 0 < ar["engine_ops_per_iteration"]
    from dynatree_core.config import DynaTreeConfig, LinearConfig

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
