"""Tests of the benchmark helpers (run with the product's suite: ``testpaths`` in pyproject)."""

from __future__ import annotations

import hypothesis

# The machine is shared and small: Hypothesis's timing checks would fail on load, not on bugs.
hypothesis.settings.register_profile(
    "bench",
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
    print_blob=True,
)
hypothesis.settings.load_profile("bench")
