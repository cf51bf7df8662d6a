"""What a distillation run did against its plan (``python -m dynatree_core.distill.report``), printed at the
end of ``scripts/distill_gpu.sh``: the data mix's token shares by source, and per stage the seconds
planned and used and what the stage produced (tokens generated, feature tokens, steps, positions trained).

The shards of the data stage are named by source (:func:`dynatree_core.distill.data._data_jobs`):
``p`` bundled prompts, ``b`` the topic bank and text questions, ``k`` the six everyday kinds in chat and
raw form, ``s`` the target's self-written requests, ``x`` training-text passages, ``text`` plain
training-text chunks (teacher-forced; the features stage reads ``--feature-text-tokens`` of them).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: shard-name prefix -> the source it holds
SOURCES = {"p": "bundled prompts", "b": "topic bank", "k": "everyday kinds (chat + raw)", "s": "self-written prompts",
           "x": "passages", "text": "training-text chunks"}


def _source(name: str) -> str:
    return "text" if name.startswith("text") else name[0]


def data_mix(sdir: Path) -> dict[str, dict[str, float]]:
    """Tokens by source in the shards of ``sdir``: rows, all tokens, continuation (target-written)
    tokens, and each source's share of the generated sources' tokens (``share``; text chunks are
    counted apart, the features stage takes only part of them)."""
    import torch

    mix: dict[str, dict[str, float]] = {}
    for f in sorted(Path(sdir).glob("*.pt")):
        d = torch.load(f, weights_only=True)
        m = mix.setdefault(_source(f.stem), {"rows": 0, "tokens": 0, "new_tokens": 0})
        m["rows"] += len(d["lens"])
        m["tokens"] += int(d["lens"].sum())
        m["new_tokens"] += int((d["lens"] - d["cont"]).sum()) if d["kind"] != "text" else 0
    gen = sum(m["tokens"] for k, m in mix.items() if k != "text") or 1
    for k, m in mix.items():
        m["share"] = round(m["tokens"] / gen, 4) if k != "text" else None
    return mix


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def stage_plan(time_limit: float, data_share: float, feature_share: float, export_reserve: float
               ) -> dict[str, float | None]:
    """Seconds each stage is given: data and features their shares of ``time_limit``, training the rest
    less the export reserve (the pipeline's deadlines); None for each without a limit (``time_limit`` 0)."""
    if time_limit <= 0:
        return {"data": None, "features": None, "training": None}
    return {"data": time_limit * data_share, "features": time_limit * feature_share,
            "training": time_limit * (1 - data_share - feature_share) - export_reserve}


def plan_vs_actual(work: Path, plan: dict[str, float | None]) -> list[tuple[str, float | None, float, str]]:
    """(stage, planned s, used s, what it produced) from the run's metadata files under ``work``."""
    data, feats, train = (_read(Path(work) / n) for n in ("data_meta.json", "features_meta.json", "train_meta.json"))
    new, dec = data.get("new_tokens_last_run", 0), data.get("decode_seconds_last_run", 0.0)
    return [
        ("data", plan["data"], data.get("seconds_last_run", 0.0),
         f"{new} tokens generated ({new / dec if dec else 0:.0f}/s decoding, {data.get('gen_runtime', '?')}); "
         f"jobs {data.get('jobs_done', 0)}/{data.get('jobs', 0)}"),
        ("features", plan["features"], feats.get("seconds_last_run", 0.0),
         f"{feats.get('tokens_last_run', 0)} tokens read by the {feats.get('teacher_dtype', '?')} target; shards "
         f"{feats.get('shards_done', 0)}/{feats.get('shards', 0)}"),
        ("training", plan["training"], train.get("train_seconds", 0.0),
         f"{train.get('steps_done', 0)} steps, {train.get('positions_trained', 0)} positions trained "
         f"({train.get('data', {}).get('tokens', 0)} feature tokens)"),
    ]


def report(work: Path, plan: dict[str, float | None]) -> str:
    """The text ``scripts/distill_gpu.sh`` prints at the end."""
    lines = ["[report] the data mix (tokens by source; share of the generated sources):"]
    for k, m in sorted(data_mix(Path(work) / "seqs").items()):
        share = f"{100 * m['share']:5.1f}%" if m["share"] is not None else "   - "
        lines.append(f"[report]   {SOURCES.get(k, k):30s} {share}  {m['tokens']:>11} tokens "
                     f"({m['new_tokens']} written by the target) in {m['rows']} rows")
    lines.append("[report] plan vs what happened:")
    for stage, planned, used, what in plan_vs_actual(Path(work), plan):
        given = f"{planned:6.0f} s" if planned is not None else "no limit"
        lines.append(f"[report]   {stage:9s} planned {given}, used {used:6.1f} s: {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--time-limit", type=float, required=True)
    ap.add_argument("--data-share", type=float, required=True)
    ap.add_argument("--feature-share", type=float, default=0.0)
    ap.add_argument("--export-reserve", type=float, default=0.0)
    a = ap.parse_args(argv)
    print(report(Path(a.work_dir), stage_plan(a.time_limit, a.data_share, a.feature_share, a.export_reserve)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
