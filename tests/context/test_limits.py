"""Tests for the model limits table (litellm loaded once per session)."""

from __future__ import annotations

import pytest

from proxy.context import limits
from proxy.context.limits import ModelLimit, ModelLimits, limits_from_model_map


@pytest.fixture(scope="session")
def litellm_limits() -> ModelLimits:
    """litellm's model map, loaded once per test session."""
    return limits.load_model_limits()


def test_seed_models_hold_over_litellm(litellm_limits: ModelLimits) -> None:
    for name, window in limits.MODEL_CONTEXT_WINDOWS.items():
        assert litellm_limits.lookup(name).context_window == window
    assert litellm_limits.lookup("gpt-4.1").context_window > 128_000
    assert litellm_limits.lookup("openai/gpt-4o-mini").context_window == 128_000
    assert len(litellm_limits.table) > 1_000


def test_limits_from_model_map_skips_bad_entries() -> None:
    table = limits_from_model_map(
        {
            "a": {"max_input_tokens": 1000, "max_output_tokens": 10},
            "b": {"max_tokens": 500},
            "c": {"max_input_tokens": None},
            "gpt-4": {"max_input_tokens": 1},
        }
    )
    assert table.lookup("a") == ModelLimit(1000, 10)
    assert table.lookup("b") == ModelLimit(500, None)
    assert table.lookup("c") == limits.UNKNOWN_MODEL
    assert table.lookup("gpt-4").context_window == 8_192
