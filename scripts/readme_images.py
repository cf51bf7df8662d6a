"""The README's pictures, from a real trace of the default pair:

* ``docs/img/tree.png``: a branching DynaTree iteration as the tree view draws it;
* ``docs/img/iteration.gif``: that iteration animated phase by phase (draft levels, verify,
  select, commit), made by ``dv.export_gif``.

The iteration is picked as notebook 02 picks its worked example (``dv.branching_example``: at
least 15 drafted nodes and an accepted node that was not its parent's top-1 draft choice), with
the ``gpu`` preset, on the first of 02's prompts that has one. Needs kaleido with a Chrome/Chromium and Pillow
(``pip install -e '.[viz]'``); prints each file and its size (both must stay under 1.5 MB).

    flock /tmp/cpu.lock python scripts/readme_images.py
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import dynatree_viz as dv  # noqa: E402
from dynatree_core import DynaTreeConfig, ModelPair, generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"  # notebook 02's prompt
MAX_BYTES = 1_500_000


def main() -> None:
    pair = ModelPair.named("default", device="cpu")
    cfg = DynaTreeConfig.gpu()
    for prompt in (PROMPT, *dv.EXAMPLE_PROMPTS):  # as notebook 02 tries them
        trace = generate(pair, prompt, "dynatree", cfg, max_new_tokens=100, trace=True,
                         ignore_eos=True).trace
        rec = dv.branching_example(trace, min_nodes=15)
        if rec is not None:
            break
    else:
        raise SystemExit("no run has an iteration with >= 15 drafted nodes and an accepted "
                         "non-top-1 node: add a prompt to dv.EXAMPLE_PROMPTS")
    print(f"prompt {prompt!r}, iteration {rec.index}")
    position = trace.iterations.index(rec)
    branch = dv.off_top1(rec)[0]
    out = ROOT / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    tree = dv.tree_figure(rec, tokenizer=pair.tokenizer, drafter=trace.drafter_kind,
                          color_buttons=False,
                          title=f"DynaTree (gpu preset) on the default pair, iteration {rec.index}:<br>"
                                f"{rec.num_nodes} drafted nodes, ℓ = {rec.accepted_length} accepted, "
                                f"one of them the draft's choice no. {branch.rank} at its parent")
    paths = [dv.save_image(tree, out / "tree.png"),
             dv.export_gif(trace, out / "iteration.gif", iteration=position,
                           tokenizer=pair.tokenizer)]
    for p in paths:
        size = p.stat().st_size
        print(f"{p.relative_to(ROOT)}: {size / 1e6:.2f} MB")
        if size >= MAX_BYTES:
            raise SystemExit(f"{p} is {size} bytes: keep README images under {MAX_BYTES}")


if __name__ == "__main__":
    main()
