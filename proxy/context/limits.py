"""Model limits: context window and max output per model, from a model map plus the seed's.

``limits_from_model_map`` builds a frozen ``ModelLimits`` table from a litellm-style model map
(``proxy/model_limits.py`` reads litellm's once at start); ``MODEL_OVERRIDES`` (the budget
seed's table) wins over it. ``ModelLimits()`` holds the overrides alone. Lookups never raise:
unknown models get ``UNKNOWN_MODEL`` (8,192 tokens, the seed's conservative fallback).
"""

from __future__ import annotations

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
# Families that litellm's map lacks under the names OpenAI-compatible gateways use (it keys them
# by provider, e.g. "anthropic.claude-..."). Matched by prefix after exact names fail, longest
# first, so dated releases ("claude-sonnet-4-20250514") and size suffixes find their family.
MODEL_FAMILIES: dict[str, tuple[int, int | None]] = {
    # Claude on Anthropic's API (its "Models overview"): litellm's map names only the newest
    # releases bare. A newer release of a family gets the family's window until litellm lists
    # it: never larger than the real one (1M-token windows behind a beta header count as 200k).
    "claude-opus-4": (200_000, 32_000),
    "claude-sonnet-4": (200_000, 64_000),
    "claude-haiku-4": (200_000, 64_000),
    "claude-3-7-sonnet": (200_000, 64_000),
    "claude-3-5-sonnet": (200_000, 8_192),
    "claude-3-5-haiku": (200_000, 8_192),
    "claude-3-opus": (200_000, 4_096),
    "claude-3-sonnet": (200_000, 4_096),
    "claude-3-haiku": (200_000, 4_096),
    "llama-3.1": (131_072, None),
    "llama3.1": (131_072, None),
    "llama-3.3": (131_072, None),
    "llama3.3": (131_072, None),
    "mistral-large": (131_072, None),
    "qwen2.5": (32_768, None),
    "gpt-oss": (131_072, 131_072),
}


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
FAMILY_LIMITS: Mapping[str, ModelLimit] = {
    prefix: ModelLimit(window, output) for prefix, (window, output) in MODEL_FAMILIES.items()
}
FAMILIES_LONGEST_FIRST: tuple[str, ...] = tuple(sorted(MODEL_FAMILIES, key=len, reverse=True))


def family_of(bare_model: str) -> str:
    """The longest ``MODEL_FAMILIES`` prefix of a lower-case model name, or ``""``."""
    return next((f for f in FAMILIES_LONGEST_FIRST if bare_model.startswith(f)), "")


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A frozen model -> limits table; ``lookup`` never raises."""

    table: Mapping[str, ModelLimit] = field(default_factory=lambda: dict(MODEL_OVERRIDES))

    def lookup(self, model: str) -> ModelLimit:
        """Exact name, lower case, without a provider prefix, then a known family; else unknown."""
        bare = model.rsplit("/", 1)[-1].lower()
        for name in (model, model.lower(), bare):
            limit = self.table.get(name)
            if limit is not None:
                return limit
        return FAMILY_LIMITS.get(family_of(bare), UNKNOWN_MODEL)


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
