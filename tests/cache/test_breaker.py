"""CircuitBreaker: state transitions on an injected clock, one probe, one log line per change."""

from __future__ import annotations

import logging

import pytest

from proxy.cache.breaker import CircuitBreaker


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(clock: FakeClock, threshold: int = 3, cooldown: float = 5.0) -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=threshold, cooldown_s=cooldown, clock=clock)


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


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1.0), (1, -1.0)])
def test_rejects_invalid_settings(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker(failure_threshold=threshold, cooldown_s=cooldown)
