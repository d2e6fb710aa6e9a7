"""A circuit breaker, so that a dead cache costs one comparison per call instead of a timeout.

closed --(N consecutive failures over >= min span)--> open --(cool-down elapsed)--> half_open
half_open --(the one probe succeeds)--> closed; --(the probe fails)--> open again.

The span matters because timeouts come in bursts that say nothing about the backend: one
30 ms stall of the event loop times out every call in flight at once (ADR 0032 measures it),
and opening on that would turn a busy moment into seconds without a cache. A dead backend, by
contrast, keeps failing; requiring the failures to span ``min_failure_span_s`` tells them apart.

While open, calls are refused without any I/O. In half-open exactly one call is let through as
a probe; the others keep being refused until it settles. Each state change is logged once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

from proxy.defaults import CACHE_BREAKER_COOLDOWN_S as DEFAULT_COOLDOWN_S
from proxy.defaults import CACHE_BREAKER_FAILURES as DEFAULT_FAILURE_THRESHOLD
from proxy.defaults import CACHE_BREAKER_MIN_FAILURE_SPAN_S as DEFAULT_MIN_FAILURE_SPAN_S

State = Literal["closed", "open", "half_open"]

log = logging.getLogger("memproxy.cache")


class CircuitBreaker:
    """Counts consecutive failures of one backend and decides whether to call it at all."""

    def __init__(
        self,
        *,
        name: str = "redis",
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        min_failure_span_s: float = DEFAULT_MIN_FAILURE_SPAN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1 or cooldown_s < 0 or min_failure_span_s < 0:
            raise ValueError(
                "failure_threshold must be >= 1, cooldown_s and min_failure_span_s >= 0"
            )
        self.name = name
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.min_failure_span_s = min_failure_span_s
        self._clock = clock
        self._state: State = "closed"
        self._failures = 0
        self._first_failure_at = 0.0
        self._opened_at = 0.0
        self._probing = False
        self.opened_count = 0

    @property
    def state(self) -> State:
        """The current state; an open breaker whose cool-down is over reads as ``half_open``."""
        if self._state == "open" and self._clock() - self._opened_at >= self.cooldown_s:
            self._transition("half_open", "cool-down over, probing", level=logging.DEBUG)
        return self._state

    def allow(self) -> bool:
        """Return whether the backend may be called now; in half-open, this claims the probe."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._probing = True
            return True
        return False

    def record_success(self) -> None:
        """Note a successful call: closes the breaker."""
        self._failures = 0
        self._probing = False
        if self._state != "closed":
            self._transition("closed", "backend answers again")

    def record_failure(self, detail: str = "") -> None:
        """Note a failed call: opens the breaker after the threshold, or at once when probing."""
        if self._failures == 0:
            self._first_failure_at = self._clock()
        self._failures += 1
        was_probe = self._probing
        self._probing = False
        if self._state == "half_open" and was_probe:
            self._open(f"probe failed: {detail}", level=logging.DEBUG)
        elif (
            self._state == "closed"
            and self._failures >= self.failure_threshold
            and self._clock() - self._first_failure_at >= self.min_failure_span_s
        ):
            self._open(f"{self._failures} consecutive failures, last: {detail}")

    def release_probe(self) -> None:
        """Give back an unfinished probe (the caller was cancelled) so the next call probes."""
        self._probing = False

    def _open(self, reason: str, *, level: int = logging.WARNING) -> None:
        self._opened_at = self._clock()
        self.opened_count += 1
        self._transition("open", f"{reason}; skipping it for {self.cooldown_s:g}s", level=level)

    def _transition(self, state: State, reason: str, *, level: int = logging.INFO) -> None:
        if state == self._state:
            return
        log.log(level, "cache %s: %s -> %s (%s)", self.name, self._state, state, reason)
        self._state = state
