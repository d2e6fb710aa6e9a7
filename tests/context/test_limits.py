"""Tests for the pure model limits table."""

from __future__ import annotations

from proxy.context import limits
from proxy.context.limits import ModelLimit, limits_from_model_map


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
