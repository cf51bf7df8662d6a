"""The setup every notebook opens with, in one place so that the openings cannot drift apart: figures
stored as Plotly JSON plus a PNG (:func:`~dynatree_viz.widgets.static.use_static_fallbacks`), pandas'
display precision, torch's seed, and the named model pair, loaded and described in three lines.
Notebook 01 says what the pair is; the others call :func:`setup_notebook` and point to it.

torch and the pair are imported inside the function, never at the package's import: dynatree_viz renders
saved traces without torch, and only a notebook that loads models calls this.
"""

from __future__ import annotations

from typing import Any

from dynatree_viz.widgets.static import use_static_fallbacks


def setup_notebook(pair: str = "default", *, seed: int = 0, precision: int = 3, **options: Any) -> Any:
    """Static fallbacks on, pandas to ``precision`` decimals, ``torch.manual_seed(seed)`` (decoding is greedy
    and deterministic; the seed only pins anything random a notebook adds), and
    ``ModelPair.named(pair, device=..., **options)`` on the GPU where there is one, else the CPU. Prints the
    target, the draft (and its drafter), the device and the linear kernel; returns the pair.

    ``pair``: ``"default"`` (the embedded offline pair) or a tiny random one such as ``"tiny-llama"`` (for
    development: nonsense text, every check still holds); ``options`` go to ``ModelPair.named``
    (``draft="model"`` / ``"feature"``, ``drafter=...``)."""
    import pandas as pd
    import torch

    from dynatree_core.pairs.pair import ModelPair

    use_static_fallbacks()
    torch.manual_seed(seed)
    pd.set_option("display.precision", precision)
    loaded = ModelPair.named(pair, device="cuda" if torch.cuda.is_available() else "cpu", **options)
    print(f"target: {loaded.target_name}\ndraft:  {loaded.draft_name} ({loaded.drafter_kind} drafter)\n"
          f"device: {loaded.device} (linear kernel: {loaded.linear_kernel})")
    return loaded
