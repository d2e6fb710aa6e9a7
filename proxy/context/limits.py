"""Model limits: context window and max output per model, from litellm's map plus the seed's.

``load_model_limits()`` imports litellm (seconds) and builds a frozen ``ModelLimits`` table from
``litellm.model_cost``; ``MODEL_OVERRIDES`` (the budget seed's table) wins over it. Call it once in
the app lifespan; without it ``ModelLimits()`` holds the overrides alone. Lookups never raise:
unknown models get ``UNKNOWN_MODEL`` (8,192 tokens, the seed's conservative fallback).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The seed's table; these values hold even where litellm's map says otherwise.
MODEL_CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-3.5-turbo-16k": 16_385,
}
MODEL_MAX_OUTPUT: dict[str, int] = {
    "gpt-4o": 16_384,
    "gpt-4o-mini": 16_384,
    "gpt-4-turbo": 4_096,
    "gpt-4": 4_096,
    "gpt-3.5-turbo": 4_096,
    "gpt-3.5-turbo-16k": 4_096,
}
DEFAULT_CONTEXT_WINDOW = 8_192  # conservative fallback for unknown models


@dataclass(frozen=True, slots=True)
class ModelLimit:
    """A model's context window and, when known, its maximum output tokens."""

    context_window: int
    max_output_tokens: int | None = None


UNKNOWN_MODEL = ModelLimit(DEFAULT_CONTEXT_WINDOW, None)


def override_limits() -> dict[str, ModelLimit]:
    """The seed's table as ``ModelLimit`` values."""
    return {
        name: ModelLimit(window, MODEL_MAX_OUTPUT.get(name))
        for name, window in MODEL_CONTEXT_WINDOWS.items()
    }


MODEL_OVERRIDES: Mapping[str, ModelLimit] = override_limits()


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A frozen model -> limits table; ``lookup`` never raises."""

    table: Mapping[str, ModelLimit] = field(default_factory=lambda: dict(MODEL_OVERRIDES))

    def lookup(self, model: str) -> ModelLimit:
        """Exact name, then lower case, then without a provider prefix; else ``UNKNOWN_MODEL``."""
        for name in (model, model.lower(), model.rsplit("/", 1)[-1].lower()):
            limit = self.table.get(name)
            if limit is not None:
                return limit
        return UNKNOWN_MODEL


def limits_from_model_map(model_map: Mapping[str, Mapping[str, Any]]) -> ModelLimits:
    """Build a table from a litellm-style model map, with ``MODEL_OVERRIDES`` winning."""
    table: dict[str, ModelLimit] = {}
    for name, info in model_map.items():
        window = info.get("max_input_tokens") or info.get("max_tokens")
        if not isinstance(window, int) or window <= 0:
            continue
        output = info.get("max_output_tokens")
        table[name] = ModelLimit(window, output if isinstance(output, int) and output > 0 else None)
    table.update(MODEL_OVERRIDES)
    return ModelLimits(table)


def load_model_limits() -> ModelLimits:
    """Import litellm once (about 4 s) and return its limits; call at startup, not per request."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # deliberately lazy: the import takes seconds

    return limits_from_model_map(litellm.model_cost)
