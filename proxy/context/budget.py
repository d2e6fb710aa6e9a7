"""Model-aware token budget for memory injection (seed milestone 3.5.2, extended).

Integration contract (stable):

- ``load_model_limits()`` imports litellm (seconds) and returns a frozen ``ModelLimits`` table
  (context window, max output) for every model litellm knows, with ``MODEL_OVERRIDES`` on top.
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

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.context.tokens import encoding_name_for_model, get_encoding

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

RESPONSE_RESERVE_RATIO = 0.15
RESPONSE_RESERVE_MIN = 500
RESPONSE_RESERVE_MAX = 4_096
SAFETY_BUFFER_RATIO = 0.05
CONSTRAINED_BELOW = 1_000
DEFAULT_MEMORY_CAP = 4_500  # from the synthesizer seed

# OpenAI's chat format: <|start|>{role}<|message|>{content}<|end|> costs 3 tokens a message,
# a name 1 more, and every reply is primed with 3 (OpenAI cookbook, "How to count tokens").
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 3
# Tool and schema definitions are rendered by the provider in a private format; we count the
# compact JSON (an upper estimate: quotes and braces cost more than the rendering) plus framing.
TOOLS_BASE = 12
TOKENS_PER_TOOL = 8
RESPONSE_FORMAT_BASE = 8
# Images cost 85 tokens at low detail; high/auto depend on the size we do not know: we assume a
# 1024x1024 image (4 tiles x 170 + 85).
IMAGE_TOKENS: dict[str, int] = {"low": 85, "high": 765, "auto": 765}
AUDIO_PART_TOKENS = 200  # a documented guess; audio input is billed separately by duration
FILE_PART_TOKENS = 1_000  # a documented guess for file parts we cannot read


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


def message_key(message: Mapping[str, Any], encoding: str) -> str:
    """A stable content hash of one message for ``encoding`` (for the caller's count cache)."""
    raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS) + encoding.encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def as_message(message: Any) -> Mapping[str, Any]:
    """Accept dict messages and objects with ``role``/``content`` attributes (the seed's)."""
    if isinstance(message, Mapping):
        return message
    return {"role": getattr(message, "role", ""), "content": getattr(message, "content", "")}


def json_text(value: Any) -> str:
    """Compact JSON of ``value`` (what tool and schema definitions are counted as)."""
    return orjson.dumps(value).decode()


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


def count_message(message: Mapping[str, Any], enc: Any) -> int:
    """Tokens of one chat message as billed: overhead, role, content, name, tool calls."""
    total = TOKENS_PER_MESSAGE + len(enc.encode_ordinary(str(message.get("role") or "")))
    total += count_content(message.get("content"), enc)
    name = message.get("name")
    if name:
        total += TOKENS_PER_NAME + len(enc.encode_ordinary(str(name)))
    tool_call_id = message.get("tool_call_id")
    if tool_call_id:
        total += len(enc.encode_ordinary(str(tool_call_id)))
    for call in message.get("tool_calls") or ():
        total += TOKENS_PER_TOOL_CALL + count_function_call(call.get("function") or {}, enc)
    function_call = message.get("function_call")
    if isinstance(function_call, Mapping):
        total += TOKENS_PER_TOOL_CALL + count_function_call(function_call, enc)
    return total


def count_function_call(call: Mapping[str, Any], enc: Any) -> int:
    """Tokens of a function name and its JSON arguments."""
    name = str(call.get("name") or "")
    arguments = call.get("arguments") or ""
    if not isinstance(arguments, str):
        arguments = json_text(arguments)
    return len(enc.encode_ordinary(name)) + len(enc.encode_ordinary(arguments))


def count_content(content: Any, enc: Any) -> int:
    """Tokens of string or array content; images and other parts by documented estimates."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(enc.encode_ordinary(content))
    if not isinstance(content, Sequence):
        return len(enc.encode_ordinary(json_text(content)))
    total = 0
    for part in content:
        if isinstance(part, str):
            total += len(enc.encode_ordinary(part))
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "refusal"):
            total += len(enc.encode_ordinary(str(part.get(kind if kind == "refusal" else "text"))))
        elif kind == "image_url":
            image = part.get("image_url")
            detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
            total += IMAGE_TOKENS.get(str(detail), IMAGE_TOKENS["auto"])
        elif kind == "input_audio":
            total += AUDIO_PART_TOKENS
        elif kind == "file":
            total += FILE_PART_TOKENS
        else:
            total += len(enc.encode_ordinary(json_text(part)))
    return total
