"""Stage timings of one request: ``Server-Timing`` and ``X-Memory-Overhead-Ms`` headers."""

from __future__ import annotations

import time
from collections.abc import Mapping

from proxy.metrics import Metrics


class StageClock:
    """Records how long each memory stage took (milliseconds) since the previous mark."""

    __slots__ = ("_last", "stages", "started")

    def __init__(self) -> None:
        self.started = self._last = time.perf_counter()
        self.stages: dict[str, float] = {}

    def mark(self, stage: str) -> None:
        """Close ``stage``: the time since the previous mark (added up if it repeats)."""
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + (now - self._last) * 1000.0
        self._last = now

    def total_ms(self) -> float:
        """Milliseconds since the clock started."""
        return (time.perf_counter() - self.started) * 1000.0

    def server_timing(self, total_ms: float) -> str:
        """The ``Server-Timing`` value: each stage, then ``memory`` for the whole of it."""
        parts = [f"{name};dur={ms:.3f}" for name, ms in self.stages.items()]
        parts.append(f"memory;dur={total_ms:.3f}")
        return ", ".join(parts)

    def observe(self, metrics: Metrics, total_ms: float) -> None:
        """Feed the stage histogram (``Metrics.memory_stage``)."""
        observe_stages(metrics, self.stages, total_ms)


def observe_stages(metrics: Metrics, stages: Mapping[str, float], total_ms: float) -> None:
    """Feed the stage histogram with ``stages`` (milliseconds) and the ``total``."""
    for name, ms in stages.items():
        metrics.observe_memory_stage(name, ms / 1000.0)
    metrics.observe_memory_stage("total", total_ms / 1000.0)
