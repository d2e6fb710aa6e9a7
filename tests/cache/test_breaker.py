"""CircuitBreaker: state transitions on an injected clock, one probe, one log line per change."""

from __future__ import annotations

import logging

import pytest

from proxy.cache.breaker import CircuitBreaker
from tests.fakes.clock import FakeClock


def make(
    clock: FakeClock, threshold: int = 3, cooldown: float = 5.0, span: float = 0.0
) -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=threshold, cooldown_s=cooldown, min_failure_span_s=span, clock=clock
    )


@pytest.mark.parametrize(("failures", "state"), [(0, "closed"), (2, "closed"), (3, "open")])
def test_opens_after_threshold_consecutive_failures(failures: int, state: str) -> None:
    breaker = make(FakeClock())
    for _ in range(failures):
        assert breaker.allow()
        breaker.record_failure("boom")
    assert breaker.state == state


def test_a_success_resets_the_failure_count() -> None:
    breaker = make(FakeClock())
    for _ in range(2):
        breaker.record_failure()
    breaker.record_success()
    for _ in range(2):
        breaker.record_failure()
    assert breaker.state == "closed"


def test_open_refuses_until_cooldown_then_lets_exactly_one_probe() -> None:
    clock = FakeClock()
    breaker = make(clock)
    for _ in range(3):
        breaker.record_failure()
    assert not breaker.allow()
    clock.now = 4.99
    assert not breaker.allow()
    clock.now = 5.0
    assert breaker.state == "half_open"
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # everyone else waits for it
    breaker.record_success()
    assert str(breaker.state) == "closed"
    assert breaker.allow()


def test_failed_probe_reopens_for_a_full_cooldown() -> None:
    clock = FakeClock()
    breaker = make(clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now = 5.0
    assert breaker.allow()
    breaker.record_failure("still down")
    assert breaker.state == "open"
    clock.now = 9.99
    assert not breaker.allow()
    clock.now = 10.0
    assert breaker.allow()
    assert breaker.opened_count == 2


def test_released_probe_lets_the_next_call_probe() -> None:
    clock = FakeClock()
    breaker = make(clock, threshold=1, cooldown=1)
    breaker.record_failure()
    clock.now = 1
    assert breaker.allow()
    breaker.release_probe()
    assert breaker.allow()


def test_logs_once_per_state_change(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    breaker = make(clock, threshold=2, cooldown=1)
    with caplog.at_level(logging.INFO, logger="memproxy.cache"):
        for _ in range(50):  # many failing requests: one warning when it opens
            if breaker.allow():
                breaker.record_failure("refused")
        clock.now = 1
        assert breaker.allow()
        breaker.record_success()
        for _ in range(50):
            assert breaker.allow()
            breaker.record_success()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0][0] == logging.WARNING
    assert "closed -> open" in messages[0][1]
    assert "-> closed" in messages[1][1]


def test_a_burst_of_simultaneous_failures_does_not_open_it() -> None:
    # One event-loop stall times out every call in flight at the same instant.
    clock = FakeClock()
    breaker = make(clock, threshold=5, span=0.5)
    for _ in range(50):
        breaker.record_failure("timed out")
    assert breaker.state == "closed"
    breaker.record_success()
    clock.now = 10.0
    for _ in range(50):
        breaker.record_failure("timed out")
    assert breaker.state == "closed"


def test_failures_that_last_the_span_open_it() -> None:
    clock = FakeClock()
    breaker = make(clock, threshold=5, span=0.5)
    for step in range(5):
        clock.now = step * 0.1  # 0.0 .. 0.4: five failures, but not yet half a second
        breaker.record_failure()
    assert breaker.state == "closed"
    clock.now = 0.5
    breaker.record_failure()
    assert str(breaker.state) == "open"


def test_a_success_restarts_the_span() -> None:
    clock = FakeClock()
    breaker = make(clock, threshold=2, span=0.5)
    breaker.record_failure()  # t=0: would open at 0.5 without the success below
    clock.now = 0.25
    breaker.record_success()
    for now in (0.5, 0.625, 0.75, 0.875):  # binary-exact times: four failures in 0.375 s
        clock.now = now
        breaker.record_failure()
    assert breaker.state == "closed"
    clock.now = 1.0
    breaker.record_failure()
    assert str(breaker.state) == "open"


@pytest.mark.parametrize(
    ("threshold", "cooldown", "span"), [(0, 1.0, 0.0), (1, -1.0, 0.0), (1, 1.0, -1.0)]
)
def test_rejects_invalid_settings(threshold: int, cooldown: float, span: float) -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker(failure_threshold=threshold, cooldown_s=cooldown, min_failure_span_s=span)
