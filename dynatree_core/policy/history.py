"""History Adaptation: a sliding window over per-iteration acceptance (torch-free).

:class:`HistoryAdapter` owns the two parameters the paper adapts online, D0 and τ_h, and gives the
:class:`~dynatree_core.policy.growth_rule.GrowthRule` of the next iteration. Its state is plain
data: traces record it, and a run can start from the state the previous prompt left (what the
benchmark does with it between prompts is stated once, in :mod:`dynatree_core.bench.protocol_statement`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from dynatree_core.policy.config import DynaTreeConfig, GrowthRule


#: iterations the cost-aware calibration of p(u) looks back over (longer than the acceptance
#: window W: a per-depth ratio needs more evidence than one mean)
CALIBRATION_WINDOW = 64


@dataclass
class HistoryState:
    """Adapter state: real-valued D0, τ_h and the window of recent acceptances.

    ``calibration`` (cost-aware DynaTree only) holds, for the last :data:`CALIBRATION_WINDOW`
    iterations, ``[accepted length, Σ p(u) at depth 1, Σ p(u) at depth 2, ...]``: the evidence
    for the per-depth calibration s_d of the draft's path probabilities (:meth:`depth_scale`).
    """

    d0: float
    tau_h: float
    window: list[float] = field(default_factory=list)
    calibration: list[list[float]] = field(default_factory=list)
    #: the sampling it adapted under (:meth:`SamplingConfig.label`; None: greedy): acceptance, and so
    #: the D0 and τ_h it settles on, differ by temperature, so a state is carried per temperature
    sampling: str | None = None

    def depth_scale(self, max_depth: int) -> tuple[float, ...]:
        """s_d for d = 0..max_depth: (iterations that accepted >= d tokens + 1) / (Σ p(u) over
        depth-d nodes + 1). Σ p(u) over one depth is the draft's own chance that some node of it
        is accepted, so s_d corrects an over- or under-confident draft; the +1s keep s_d at 1
        until there is evidence. Empty without evidence."""
        if not self.calibration:
            return ()
        out = [1.0]
        for d in range(1, max_depth + 1):
            observed = sum(1.0 for row in self.calibration if row[0] >= d)
            predicted = sum(row[d] for row in self.calibration if len(row) > d)
            out.append((observed + 1.0) / (predicted + 1.0))
        return tuple(out)

    @property
    def window_mean(self) -> float | None:
        """ā, the mean acceptance over the window (None before the first iteration)."""
        return sum(self.window) / len(self.window) if self.window else None

    @property
    def d0_effective(self) -> int:
        """The integer D0 the depth gate uses."""
        return int(round(self.d0))

    def to_dict(self) -> dict:
        d = {"d0": self.d0, "tau_h": self.tau_h, "window": list(self.window),
             "window_mean": self.window_mean, "d0_effective": self.d0_effective}
        if self.calibration:
            d["calibration"] = [list(r) for r in self.calibration]
        if self.sampling is not None:  # greedy states stay as they were written
            d["sampling"] = self.sampling
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HistoryState":
        return cls(d0=float(d["d0"]), tau_h=float(d["tau_h"]), window=list(d.get("window", [])),
                   calibration=[list(r) for r in d.get("calibration", [])], sampling=d.get("sampling"))


def check_history(state: HistoryState | None, sampling: str | None) -> None:
    """Refuse a ``state`` adapted under another sampling setting than ``sampling`` (a label; None:
    greedy): acceptance, and with it D0 and τ_h, differ by temperature."""
    if state is not None and state.sampling != sampling:
        raise ValueError(f"history was adapted under {state.sampling or 'greedy decoding'} and this run uses "
                         f"{sampling or 'greedy decoding'}: acceptance differs by temperature, so carry one "
                         "history per sampling setting (or pass history=None to start afresh)")


class HistoryAdapter:
    """Proportional controller of D0 and τ_h around a target acceptance a* (see HistoryConfig)."""

    def __init__(self, config: DynaTreeConfig, state: HistoryState | None = None, sampling: str | None = None):
        """``sampling``: the label of the run's sampling (None: greedy); a ``state`` adapted under
        another one is refused (a state is carried per temperature)."""
        self.config = config
        h = config.history
        check_history(state, sampling)
        self.state = state if state is not None else HistoryState(float(config.d0), float(config.tau_h),
                                                                  sampling=sampling)
        self._window: deque[float] = deque(self.state.window, maxlen=h.window)

    def rule(self) -> GrowthRule:
        """The growth rule for the next iteration (the current D0 and τ_h)."""
        if not self.config.history.enabled:
            return self.config.growth_rule()
        scale = self.state.depth_scale(self.config.d_max) if self.config.cost_aware else ()
        return self.config.growth_rule(d0=self.state.d0_effective, tau_h=self.state.tau_h, depth_scale=scale)

    def envelope(self) -> GrowthRule:
        """A rule whose resident shape bounds every rule this adapter can return: D0 only grows the
        shape (with a fixed depth, D_max is D0), and the update keeps it at most max(D_max - 1, the
        state's own D0). τ_h and the depth scale change no bound."""
        c = self.config
        if not c.history.enabled:
            return c.growth_rule()
        return c.growth_rule(d0=max(c.d0, c.d_max - 1, self.state.d0_effective))

    def update(self, acceptance: float | None, accepted: int = 0,
               depth_mass: "list[float] | None" = None) -> HistoryState:
        """Fold one iteration's acceptance a_r into the window and adapt D0 / τ_h.

        ``acceptance`` is None for an iteration that drafted nothing (no evidence): the state
        is left unchanged. A cost-aware config also records ``accepted`` (ℓ) and ``depth_mass``
        (Σ p(u) per depth 1, 2, ...) for the per-depth calibration. Returns the new state.
        """
        if acceptance is None or not self.config.history.enabled:
            return self.state
        h, c = self.config.history, self.config
        self._window.append(float(acceptance))
        mean = sum(self._window) / len(self._window)
        err = mean - h.target_acceptance
        d0 = min(max(self.state.d0 + h.eta_d * err * c.d_max, 1.0), float(c.d_max - 1))
        tau_h = min(max(self.state.tau_h - h.eta_h * err, c.tau_l + 0.01), 0.99)
        calibration = self.state.calibration
        if c.cost_aware and depth_mass is not None:
            calibration = (calibration + [[float(accepted)] + [float(x) for x in depth_mass]])[-CALIBRATION_WINDOW:]
        self.state = HistoryState(d0=d0, tau_h=tau_h, window=list(self._window), calibration=calibration,
                                  sampling=self.state.sampling)
        return self.state
