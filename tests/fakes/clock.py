"""A clock the test moves by hand, for anything that takes ``clock: Callable[[], float]``."""

from __future__ import annotations


class FakeClock:
    """Returns ``now``; a test moves time with ``clock.now += seconds``."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
