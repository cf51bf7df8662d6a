"""History Adaptation: a sliding window over per-iteration acceptance (torch-free).

The adapter owns the two parameters the paper adapts online, D0 and τ_h, and produces the
:class:`~dynatree_core.config.GrowthRule` for the next iteration. Its state is plain data so it
can be recorded in traces, and carried from one prompt to the next (the paper resets it per
prompt, throwing away what it learned about the draft/target pair).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .config import DynaTreeConfig, GrowthRule


@dataclass
class HistoryState:
    """Adapter state: real-valued D0, τ_h and the window of recent acceptances."""

    d0: float
    tau_h: float
    window: list[float] = field(default_factory=list)

    @property
    def window_mean(self) -> float | None:
        """ā, the mean acceptance over the window (None before the first iteration)."""
        return sum(self.window) / len(self.window) if self.window else None

    @property
    def d0_effective(self) -> int:
        """The integer D0 the depth gate uses."""
        return int(round(self.d0))

    def to_dict(self) -> dict:
        return {"d0": self.d0, "tau_h": self.tau_h, "window": list(self.window),
                "window_mean": self.window_mean, "d0_effective": self.d0_effective}

    @classmethod
    def from_dict(cls, d: dict) -> "HistoryState":
        return cls(d0=float(d["d0"]), tau_h=float(d["tau_h"]), window=list(d.get("window", [])))


class HistoryAdapter:
    """Proportional controller of D0 and τ_h around a target acceptance a* (see HistoryConfig)."""

    def __init__(self, config: DynaTreeConfig, state: HistoryState | None = None):
        self.config = config
        h = config.history
        self.state = state if state is not None else HistoryState(float(config.d0), float(config.tau_h))
        self._window: deque[float] = deque(self.state.window, maxlen=h.window)

    def rule(self) -> GrowthRule:
        """The growth rule for the next iteration (the current D0 and τ_h)."""
        if not self.config.history.enabled:
            return self.config.growth_rule()
        return self.config.growth_rule(d0=self.state.d0_effective, tau_h=self.state.tau_h)

    def update(self, acceptance: float | None) -> HistoryState:
        """Fold one iteration's acceptance a_r into the window and adapt D0 / τ_h.

        ``acceptance`` is None for an iteration that drafted nothing (no evidence): the state
        is left unchanged. Returns the new state.
        """
        if acceptance is None or not self.config.history.enabled:
            return self.state
        h, c = self.config.history, self.config
        self._window.append(float(acceptance))
        mean = sum(self._window) / len(self._window)
        err = mean - h.target_acceptance
        d0 = min(max(self.state.d0 + h.eta_d * err * c.d_max, 1.0), float(c.d_max - 1))
        tau_h = min(max(self.state.tau_h - h.eta_h * err, c.tau_l + 0.01), 0.99)
        self.state = HistoryState(d0=d0, tau_h=tau_h, window=list(self._window))
        return self.state
