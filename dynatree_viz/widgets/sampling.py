"""The explorer's sampling controls (temperature, top-p, seed) and the one-line summary of a run's
sampling settings that the explorer and the stepper show.

Only a live backend can sample anew (:class:`dynatree_viz.widgets.regrow.LiveBackend` over a
``TreeSession`` or a ``regrow(rule, sampling)`` callable); a replay shows what was recorded.
The seed stays fixed while a slider moves, so the target draws with the same randomness every
time and a change of temperature changes only what the temperature changes.
"""

from __future__ import annotations

from typing import Any, Callable

import ipywidgets as widgets

from dynatree_core.policy.sampling import SamplingConfig

#: sampling slider specs: name -> (min, max, step); temperature 0 is greedy decoding
SAMPLING_SLIDERS: dict[str, tuple[float, float, float]] = {
    "temperature": (0.0, 1.5, 0.05),
    "top_p": (0.05, 1.0, 0.05),
}
#: room for the longest label ("temperature") in full: the default width cuts it to "temperat…"
LABEL_WIDTH = "100px"
SAMPLING_NOTE = ("temperature 0 = greedy (top-p unused); the seed fixes the target's draws, so a "
                 "slider changes only what it sets")


def sampling_summary(sampling: SamplingConfig | dict | None) -> str:
    """``"greedy (temperature 0)"`` or the settings in force, e.g. ``"temperature 0.7, top-p 0.9,
    no top-k, seed 0, verify match"`` (``top_k`` 0 is "no top-k") (from a SamplingConfig or ``Trace.sampling``'s dict)."""
    if isinstance(sampling, dict):
        sampling = SamplingConfig.from_dict(sampling)
    if sampling is None or sampling.greedy:
        return "greedy (temperature 0)"
    top_k = f"top-k {sampling.top_k}" if sampling.top_k else "no top-k"  # top_k = 0 switches it off
    return (f"temperature {sampling.temperature:g}, top-p {sampling.top_p:g}, {top_k}, "
            f"seed {sampling.seed}, verify {sampling.rule}")


def _slider(name: str, value: float) -> widgets.FloatSlider:
    """A slider over its :data:`SAMPLING_SLIDERS` range, stretched to hold the starting value."""
    lo, hi, step = SAMPLING_SLIDERS[name]
    return widgets.FloatSlider(value=value, min=min(lo, value), max=max(hi, value), step=step,
                               description=name, continuous_update=False, readout_format=".2f",
                               style={"description_width": LABEL_WIDTH},
                               layout=widgets.Layout(width="380px"))


class SamplingControls:
    """``widgets`` (name -> widget: ``temperature``, ``top_p`` sliders and a ``seed`` IntText) and
    ``box`` (them with a note); :meth:`config` reads them as a SamplingConfig. ``top_k`` and the
    ``verify`` rule have no control: they stay as in ``start``."""

    def __init__(self, start: SamplingConfig | None = None):
        self.start = start or SamplingConfig()
        self.widgets: dict[str, widgets.ValueWidget] = {
            "temperature": _slider("temperature", self.start.temperature),
            "top_p": _slider("top_p", self.start.top_p),
            "seed": widgets.IntText(value=self.start.seed if self.start.seed is not None else 0, description="seed",
                                    style={"description_width": LABEL_WIDTH},
                                    layout=widgets.Layout(width="220px")),
        }
        self.box = widgets.HBox(list(self.widgets.values()) + [widgets.HTML(f"<i>{SAMPLING_NOTE}</i>")],
                                layout=widgets.Layout(flex_flow="row wrap"))  # the note wraps below

    def observe(self, handler: Callable[[Any], None]) -> None:
        for w in self.widgets.values():
            w.observe(handler, names="value")

    def reset(self) -> None:
        """Back to ``start`` (each change fires the observers; the caller suspends them)."""
        self.widgets["temperature"].value = self.start.temperature
        self.widgets["top_p"].value = self.start.top_p
        self.widgets["seed"].value = self.start.seed if self.start.seed is not None else 0

    def config(self) -> SamplingConfig:
        """The settings in force (ValueError naming the bad one): greedy at temperature 0, whatever
        top-p says (SamplingConfig rejects a top-p at temperature 0; the slider stays where it is
        for when the temperature comes back up)."""
        t = round(float(self.widgets["temperature"].value), 9)  # float steps: 0.7000000000000001
        seed = self.widgets["seed"].value
        if t == 0:  # greedy: no seed (nothing is drawn; SamplingConfig may refuse one here) ...
            SamplingConfig(temperature=1.0, seed=seed)  # ... but a bad seed is still named now
            return SamplingConfig()
        return SamplingConfig(temperature=t, top_p=round(float(self.widgets["top_p"].value), 9),
                              top_k=self.start.top_k, seed=seed, verify=self.start.verify)
