"""A/B on this CPU: a feature draft reading the target's final state only, against one that also reads
a low and a middle layer (the EAGLE-3 idea), warm start and cold start (issue 34).

Every arm trains on the same data (one data stage and one feature store, holding the extra layers;
the last-only arms read its final-state block), for the same steps, batch and seed; both arms of a
start begin from the same weights (``fc_layers`` starts at zero), so the curves differ only by what
the extra layers teach. Held-out agreement (``--val-rows`` held-out rows, depth 1/2/3) is logged
every ``--log-every`` steps; the curves go to ``ab.json`` and are drawn as ``ab.svg`` / ``ab.html``.

    flock /tmp/cpu.lock python docs/bench/2026-11-27-h100-draft/feature_layers_ab.py --layers 3,15 --work-dir .distill/ab \\
        --out docs/bench/2026-11-27-h100-draft/layers-ab
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dynatree_core.distill.config import DistillConfig
from dynatree_core.distill.pipeline import run_distill

WARM_FROM = "dynatree_core/assets/smollm2-135m-draft"
COLOURS = {"warm, final only": "#1f77b4", "warm, +layers": "#ff7f0e", "cold, final only": "#2ca02c",
           "cold, +layers": "#d62728"}


def arms(layers: str) -> list[tuple[str, dict]]:
    return [("warm, +layers", {"init_from": WARM_FROM, "target_layers": layers}),
            ("warm, final only", {"init_from": WARM_FROM, "target_layers": ""}),
            ("cold, +layers", {"init_from": None, "target_layers": layers, "lr": 1.5e-3}),
            ("cold, final only", {"init_from": None, "target_layers": "", "lr": 1.5e-3})]


def base_config(a: argparse.Namespace) -> dict:
    return dict(kind="feature", work_dir=a.work_dir, data_dir=a.data_dir, device="cpu", threads=2, seed=0, teacher_dtype="bfloat16",
                samples_per_prompt=0, gen_new_tokens=64, gen_batch=128, prompt_bank=0, text_prompts=0,
                passages=a.passages, passage_new_tokens=64, passage_min=32, passage_max=192,
                feature_text_tokens=a.text_tokens, max_len=256, batch_tokens=a.batch_tokens,
                micro_tokens=a.batch_tokens, steps=a.steps, warmup=5, lr=5e-4, warm_lr_frac=0.25,
                reg_weight=0.1, unroll=3, val_rows=64, log_every=a.log_every, layers=1,
                command_line="docs/bench/2026-11-27-h100-draft/feature_layers_ab.py")


def svg(curves: dict[str, list], title: str, w: int = 640, h: int = 360) -> str:
    """A line chart of depth-1 held-out agreement against training positions (no plotting library)."""
    pts = [(p, acc[0]) for c in curves.values() for _, p, acc in c]
    x1 = max(p for p, _ in pts) or 1
    y0, y1 = min(a for _, a in pts) - 0.01, max(a for _, a in pts) + 0.01
    X = lambda p: 60 + (w - 200) * p / x1  # noqa: E731
    Y = lambda a: h - 40 - (h - 80) * (a - y0) / (y1 - y0)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
           f'<line x1="60" y1="{h - 40}" x2="{w - 140}" y2="{h - 40}" stroke="black"/>',
           f'<line x1="60" y1="40" x2="60" y2="{h - 40}" stroke="black"/>',
           f'<text x="{(w - 80) / 2}" y="{h - 8}" text-anchor="middle">training positions</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">'
           f'held-out agreement (depth 1)</text>']
    for i in range(5):
        a, p = y0 + (y1 - y0) * i / 4, x1 * i / 4
        out.append(f'<text x="55" y="{Y(a) + 4:.1f}" text-anchor="end">{a:.3f}</text>')
        out.append(f'<text x="{X(p):.1f}" y="{h - 26}" text-anchor="middle">{int(p):,}</text>')
    for k, (name, c) in enumerate(curves.items()):
        col = COLOURS.get(name, "black")
        line = " ".join(f"{X(p):.1f},{Y(acc[0]):.1f}" for _, p, acc in c)
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{line}"/>')
        out.append(f'<text x="{w - 130}" y="{50 + 16 * k}" fill="{col}">{name}</text>')
    return "\n".join(out + ["</svg>"])


def write_outputs(out: Path, res: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab.json").write_text(json.dumps(res, indent=1))
    curves = {name: r["val_curve"] for name, r in res["arms"].items() if r.get("val_curve")}
    pic = svg(curves, f"final state only vs + target layers {res['layers']} ({res['steps']} steps, seed 0)")
    (out / "ab.svg").write_text(pic)
    rows = "".join(f"<tr><td>{n}</td><td>{r['val_curve'][0][2]}</td><td>{r['val_curve'][-1][2]}</td>"
                   f"<td>{r['train_seconds']}</td></tr>" for n, r in res["arms"].items())
    (out / "ab.html").write_text(f"<!doctype html><meta charset='utf-8'><title>feature layers A/B</title>{pic}"
                                 f"<table border=1><tr><th>arm</th><th>held-out agreement by depth, start</th>"
                                 f"<th>end</th><th>training s</th></tr>{rows}</table>")


def main() -> None:
    from dynatree_core.pairs.default_pair import load_target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="3,15")
    ap.add_argument("--work-dir", default=".distill/ab")
    ap.add_argument("--out", default="docs/bench/2026-11-27-h100-draft/layers-ab")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--passages", type=int, default=256)
    ap.add_argument("--text-tokens", type=int, default=100_000)
    ap.add_argument("--data-dir", default=None, help="training text (default: shared/data if found)")
    ap.add_argument("--only", default=None, help="comma-separated arm names to run (default: all four)")
    a = ap.parse_args()
    torch.set_num_threads(2)
    target, tok = load_target(dtype=torch.float32)
    out = Path(a.out)
    res = {"layers": a.layers, "steps": a.steps, "batch_tokens": a.batch_tokens, "arms": {}}
    if (out / "ab.json").is_file():  # arms run before (--only) stay
        res["arms"] = json.loads((out / "ab.json").read_text())["arms"]
    t0 = time.time()
    cfg = DistillConfig(**base_config(a), stage="data")
    run_distill(cfg, target, tok)
    res["data_seconds"] = round(time.time() - t0, 1)
    for name, extra in arms(a.layers):
        if a.only and name not in a.only.split(","):
            continue
        draft_dir = Path(a.work_dir) / "arms" / name.replace(", ", "-").replace("+", "plus-").replace(" ", "-")
        cfg = DistillConfig(**{**base_config(a), **extra}, stage="train", out_dir=str(draft_dir))
        run_distill(cfg, target, tok)
        meta = json.loads((draft_dir / "feature_draft_config.json").read_text())["metadata"]
        res["arms"][name] = {k: meta.get(k) for k in ("val_curve", "train_seconds", "steps_done", "lr",
                                                         "init_from", "data")}
        res["arms"][name]["draft_dir"] = str(draft_dir)
        res["arms"][name]["target_layers"] = extra["target_layers"]
        write_outputs(out, res)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_outputs(out, res)
    print(json.dumps({n: r["val_curve"][-1] for n, r in res["arms"].items()}, indent=1))


if __name__ == "__main__":
    main()
