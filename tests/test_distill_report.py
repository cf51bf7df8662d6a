"""What a distillation run reports against its plan (dynatree_core.distill.report): the data mix's token shares
by source, and per stage the seconds planned and used with what it produced; and the features stage's time share."""

from __future__ import annotations

import json
import re
import time
from argparse import Namespace

import pytest

from dynatree_core.distill.config import DistillConfig
from dynatree_core.distill.data import _save_seqs
from dynatree_core.distill.report import data_mix, plan_vs_actual, report, stage_plan


def _shards(sdir):
    sdir.mkdir(parents=True)
    _save_seqs(sdir / "k00_00000.pt", [([1] * 10, 4), ([2] * 6, 2)], "prompt")  # 16 tokens, 10 written
    _save_seqs(sdir / "s01_00000.pt", [([3] * 8, 5)], "prompt")  # 8 tokens, 3 written
    _save_seqs(sdir / "x_00000.pt", [([4] * 16, 8)], "passage")  # 16 tokens, 8 written
    _save_seqs(sdir / "text_00000.pt", [([5] * 32, 0)], "text")  # plain text: counted apart


def test_the_data_mix_counts_each_sources_tokens_and_share(tmp_path):
    _shards(tmp_path / "seqs")
    mix = data_mix(tmp_path / "seqs")
    assert mix["k"] == {"rows": 2, "tokens": 16, "new_tokens": 10, "share": 0.4}
    assert mix["s"]["share"] == 0.2 and mix["x"]["share"] == 0.4 and mix["x"]["new_tokens"] == 8
    assert mix["text"] == {"rows": 1, "tokens": 32, "new_tokens": 0, "share": None}


def test_the_report_sets_each_stage_against_its_plan(tmp_path):
    _shards(tmp_path / "seqs")
    (tmp_path / "data_meta.json").write_text(json.dumps({"seconds_last_run": 80.5, "new_tokens_last_run": 21,
                                                         "decode_seconds_last_run": 7.0, "gen_runtime": "graphs",
                                                         "jobs": 4, "jobs_done": 3}))
    (tmp_path / "train_meta.json").write_text(json.dumps({"train_seconds": 150.0, "steps_done": 12,
                                                          "positions_trained": 9000, "data": {"tokens": 700}}))
    plan = stage_plan(330, 0.25, 0.15, 15)
    assert plan == pytest.approx({"data": 82.5, "features": 49.5, "training": 183.0})
    assert "planned no limit, used   80.5 s" in report(tmp_path, stage_plan(0, 0.25, 0.15, 15))
    rows = plan_vs_actual(tmp_path, plan)
    assert rows[0][:3] == ("data", 82.5, 80.5) and "21 tokens generated (3/s decoding, graphs); jobs 3/4" in rows[0][3]
    assert rows[1][2] == 0.0  # no features metadata: nothing claimed
    assert "12 steps, 9000 positions trained" in rows[2][3]
    text = report(tmp_path, plan)
    assert re.search(r"everyday kinds \(chat \+ raw\) +40\.0% +16 tokens \(10 written", text)
    assert re.search(r"passages +40\.0% +16 tokens", text) and re.search(r"self-written prompts +20\.0%", text)


def test_the_features_stage_stops_at_its_time_share(tmp_path):
    from dynatree_core.distill.feature import build_features
    from dynatree_core.pairs.tiny import tiny_model

    _save_seqs((tmp_path / "work" / "seqs").mkdir(parents=True) or tmp_path / "work" / "seqs" / "k00_00000.pt",
               [([7] * 12, 3)] * 4, "prompt")
    args = Namespace(work_dir=str(tmp_path / "work"), max_len=64, feature_text_tokens=0, seed=0,
                     feature_batch_tokens=2048, teacher_dtype="float32", time_limit=100, data_share=0.3,
                     feature_share=0.1, start_time=time.time() - 41)  # 41 s in: past 30 + 10
    build_features(args, tiny_model("llama"))
    meta = json.loads((tmp_path / "work" / "features_meta.json").read_text())
    assert meta["shards"] == 1 and meta["shards_done"] == 0
    build_features(Namespace(**{**vars(args), "start_time": time.time()}), tiny_model("llama"))
    assert json.loads((tmp_path / "work" / "features_meta.json").read_text())["tokens_last_run"] == 48
    with pytest.raises(ValueError, match="--feature-share must be >= 0 with --data-share"):
        DistillConfig(data_share=0.6, feature_share=0.4)
