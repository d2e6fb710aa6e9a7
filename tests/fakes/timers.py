"""One-shot timers that never fire by themselves: a test fires them (no clock in the test)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class HandTimer:
    """One armed timer: when it was asked to fire, what it runs, whether it was cancelled."""

    after_s: float
    action: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        """Run the action as ``threading.Timer`` would: not once cancelled."""
        if not self.cancelled:
            self.action()


class HandTimers:
    """A ``start_timer`` whose timers a test fires by hand; ``armed`` in order."""

    def __init__(self) -> None:
        self.armed: list[HandTimer] = []

    def start(self, after_s: float, action: Callable[[], None]) -> HandTimer:
        timer = HandTimer(after_s, action)
        self.armed.append(timer)
        return timer

    def pending(self) -> list[HandTimer]:
        """The timers neither fired nor cancelled (a fired one is dropped from ``armed``)."""
        return [timer for timer in self.armed if not timer.cancelled]

    def fire_next(self) -> None:
        """Fire the oldest pending timer (and forget it)."""
        timer = self.pending()[0]
        self.armed.remove(timer)
        timer.fire()
