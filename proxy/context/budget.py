"""Model-aware token budget for memory injection (seed milestone 3.5.2, extended).

Integration contract (stable):

- ``load_model_limits()`` reads litellm's shipped model map (no import of litellm) and returns a
  frozen ``ModelLimits`` table (context window, max output) for every model litellm knows, with
  ``MODEL_OVERRIDES`` on top and ``MODEL_FAMILIES`` for common models it lacks.
  Call it once in the app lifespan and hand the table to ``TokenBudgetCalculator(limits)``;
  without it the calculator uses the overrides alone. Nothing here imports litellm per request.
- ``TokenBudgetCalculator.calculate_request(body, ...)`` counts an OpenAI chat request body as
  providers bill it (messages, ``tools``, ``functions``, ``response_format``) and honours
  ``max_tokens``/``max_completion_tokens``. ``calculate(model, messages, directive)`` is the
  seed's entry point.
- Per-message counts can come from the caller's cache: pass ``cached_counts`` aligned with the
  messages (``None`` where unknown; key them with ``message_key``). The returned budget carries
  ``message_counts`` so the caller can store the ones it lacked. The cache itself stays outside.

Reserves (seed rules, exact): response = 15% of the window, clamped to [500, 4096], unless the
request sets an output limit (then that limit, clamped to the model's max output); safety = 5% of
the window; the directive is reserved in full. Memory = min(cap, window - everything), floor 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.billing import (
    REPLY_PRIMING,
    RESPONSE_FORMAT_BASE,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL,
    TOOLS_BASE,
    as_message,
    count_content,
    count_message,
    json_text,
    message_key,
)
from proxy.context.limits import (
    DEFAULT_CONTEXT_WINDOW,
    MODEL_CONTEXT_WINDOWS,
    MODEL_MAX_OUTPUT,
    MODEL_OVERRIDES,
    UNKNOWN_MODEL,
    ModelLimit,
    ModelLimits,
    limits_from_model_map,
    load_model_limits,
)
from proxy.context.tokens import encoding_name_for_model, get_encoding

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MEMORY_CAP",
    "MODEL_CONTEXT_WINDOWS",
    "MODEL_MAX_OUTPUT",
    "MODEL_OVERRIDES",
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOOLS_BASE",
    "UNKNOWN_MODEL",
    "ModelLimit",
    "ModelLimits",
    "TokenBudget",
    "TokenBudgetCalculator",
    "count_content",
    "count_message",
    "limits_from_model_map",
    "load_model_limits",
    "message_key",
]

RESPONSE_RESERVE_RATIO = 0.15
RESPONSE_RESERVE_MIN = 500
RESPONSE_RESERVE_MAX = 4_096
SAFETY_BUFFER_RATIO = 0.05
CONSTRAINED_BELOW = 1_000
DEFAULT_MEMORY_CAP = 4_500  # from the synthesizer seed


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """The memory budget for one request and every figure that produced it."""

    model: str
    context_window: int
    messages_tokens: int  # messages, including per-message overhead and reply priming
    directive_tokens: int
    response_reserve: int
    safety_buffer: int
    memory_tokens: int  # what the memory block may use: min(cap, what is left)
    is_constrained: bool  # memory_tokens < 1000
    encoding: str = ""
    tools_tokens: int = 0  # tools, functions and response_format definitions
    available_tokens: int = 0  # what is left before the cap
    memory_cap: int | None = None
    message_counts: tuple[int, ...] = ()


class TokenBudgetCalculator:
    """Counts requests with tiktoken and computes the memory budget; pure and reusable."""

    def __init__(
        self, limits: ModelLimits | None = None, *, memory_cap: int | None = DEFAULT_MEMORY_CAP
    ) -> None:
        self._limits = limits if limits is not None else ModelLimits()
        self._memory_cap = memory_cap

    @property
    def limits(self) -> ModelLimits:
        """The model limits table in use."""
        return self._limits

    def count_tokens(self, text: str, model: str) -> int:
        """Tokens of ``text`` with ``model``'s encoding (cl100k_base for unknown models)."""
        return len(get_encoding(encoding_name_for_model(model)).encode_ordinary(text))

    def count_messages_tokens(
        self,
        messages: Sequence[Any],
        model: str,
        *,
        cached_counts: Sequence[int | None] | None = None,
    ) -> int:
        """Tokens of a messages array, with per-message overhead and reply priming."""
        return REPLY_PRIMING + sum(
            self.message_counts(messages, encoding_name_for_model(model), cached_counts)
        )

    def message_counts(
        self,
        messages: Sequence[Any],
        encoding: str,
        cached_counts: Sequence[int | None] | None = None,
    ) -> tuple[int, ...]:
        """Per-message token counts, taking the cached ones where given."""
        enc = get_encoding(encoding)
        counts: list[int] = []
        for index, message in enumerate(messages):
            cached = cached_counts[index] if cached_counts is not None else None
            counts.append(cached if cached is not None else count_message(as_message(message), enc))
        return tuple(counts)

    def definitions_tokens(self, body: Mapping[str, Any], encoding: str) -> int:
        """Tokens of ``tools``, ``functions`` and a ``response_format`` schema."""
        enc = get_encoding(encoding)
        total = 0
        for key in ("tools", "functions"):
            entries = body.get(key) or ()
            if entries:
                total += TOOLS_BASE
                total += sum(
                    TOKENS_PER_TOOL + len(enc.encode_ordinary(json_text(e))) for e in entries
                )
        response_format = body.get("response_format")
        if isinstance(response_format, Mapping) and response_format.get("type") != "text":
            schema = response_format.get("json_schema", response_format)
            total += RESPONSE_FORMAT_BASE + len(enc.encode_ordinary(json_text(schema)))
        return total

    def calculate(
        self,
        model: str,
        messages: Sequence[Any],
        directive: str = "",
        *,
        memory_cap: int | None = None,
        cached_counts: Sequence[int | None] | None = None,
    ) -> TokenBudget:
        """The seed's entry point: a budget for ``messages`` (dicts or role/content objects)."""
        return self.calculate_request(
            {"model": model, "messages": messages},
            directive,
            memory_cap=memory_cap,
            cached_counts=cached_counts,
        )

    def calculate_request(
        self,
        body: Mapping[str, Any],
        directive: str = "",
        *,
        memory_cap: int | None = None,
        cached_counts: Sequence[int | None] | None = None,
    ) -> TokenBudget:
        """The budget for a whole chat request body; ``memory_cap`` never raises the own cap."""
        model = str(body.get("model") or "")
        encoding = encoding_name_for_model(model)
        limit = self._limits.lookup(model)
        window = limit.context_window
        counts = self.message_counts(body.get("messages") or (), encoding, cached_counts)
        messages_tokens = REPLY_PRIMING + sum(counts)
        tools_tokens = self.definitions_tokens(body, encoding)
        enc = get_encoding(encoding)
        directive_tokens = len(enc.encode_ordinary(directive)) if directive else 0
        response_reserve = reserve_for(body, limit)
        safety_buffer = int(window * SAFETY_BUFFER_RATIO)
        consumed = (
            messages_tokens + tools_tokens + directive_tokens + response_reserve + safety_buffer
        )
        available = max(0, window - consumed)
        cap = effective_cap(self._memory_cap, memory_cap)
        memory_tokens = available if cap is None else min(cap, available)
        return TokenBudget(
            model=model,
            context_window=window,
            messages_tokens=messages_tokens,
            directive_tokens=directive_tokens,
            response_reserve=response_reserve,
            safety_buffer=safety_buffer,
            memory_tokens=memory_tokens,
            is_constrained=memory_tokens < CONSTRAINED_BELOW,
            encoding=encoding,
            tools_tokens=tools_tokens,
            available_tokens=available,
            memory_cap=cap,
            message_counts=counts,
        )


def effective_cap(own: int | None, requested: int | None) -> int | None:
    """The smaller of the calculator's cap and the request's; negative caps count as 0."""
    caps = [max(0, c) for c in (own, requested) if c is not None]
    return min(caps) if caps else None


def reserve_for(body: Mapping[str, Any], limit: ModelLimit) -> int:
    """Response reserve: the request's output limit if set (clamped), else the seed's rule."""
    window = limit.context_window
    requested = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(requested, int) and not isinstance(requested, bool) and requested >= 0:
        ceiling = limit.max_output_tokens if limit.max_output_tokens is not None else window
        return min(requested, ceiling, window)
    return max(
        RESPONSE_RESERVE_MIN, min(RESPONSE_RESERVE_MAX, int(window * RESPONSE_RESERVE_RATIO))
    )
