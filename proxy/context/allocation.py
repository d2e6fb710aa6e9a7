"""The memory budget of one chat request: its billed tokens, the model's limits, reserves, a cap.

``BudgetCalculator(limits, tokenizer, memory_cap=...)`` is what the pipeline calls; the seed's
``TokenBudgetCalculator`` (``budget.py``) is this class with the seed's conveniences and
defaults. It is pure: the tokenizer and the model limits come in as values.

- ``calculate_request(body, ...)`` counts an OpenAI chat request body as providers bill it
  (messages, ``tools``, ``functions``, ``response_format``; ``billing``) and honours
  ``max_tokens``/``max_completion_tokens``.
- Per-message counts can come from the caller's cache: pass ``cached_counts`` aligned with the
  messages (``None`` where unknown; key them with ``billing.message_key``). The returned budget
  carries ``message_counts`` so the caller can store the ones it lacked.
- ``counting=UPPER_BOUND`` / ``LOWER_BOUND`` bound every text from its UTF-8 length instead of
  encoding it (no BPE; see billing). Overcounting only shrinks the memory budget, so an upper
  bound that still leaves the whole cap, or a lower bound that leaves nothing, is the exact
  ``memory_tokens`` (``TokenBudget.settled``): most requests need no tokenizer at all.
  ``bounds(body, ...)`` gives both bounds from one walk over the request.

Reserves (seed rules, exact): response = 15% of the window, clamped to [500, 4096], unless the
request sets an output limit (then that limit, clamped to the model's max output); safety = 5% of
the window; the directive is reserved in full. Memory = min(cap, window - everything), floor 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.context.billing import (
    EXACT,
    LOWER_BOUND,
    REPLY_PRIMING,
    UPPER_BOUND,
    ByteTally,
    as_message,
    count_definitions,
    count_message,
    measure,
)
from proxy.context.limits import ModelLimit, ModelLimits
from proxy.context.tokens import Tokenizer

RESPONSE_RESERVE_RATIO = 0.15
RESPONSE_RESERVE_MIN = 500
RESPONSE_RESERVE_MAX = 4_096
SAFETY_BUFFER_RATIO = 0.05
CONSTRAINED_BELOW = 1_000


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
    # How the token figures were found: exactly, or as bounds from the UTF-8 length (then
    # messages/tools/directive figures are upper or lower bounds, available_tokens the opposite).
    counting: str = EXACT

    @property
    def settled(self) -> bool:
        """Whether ``memory_tokens`` is the exact budget, however the figures were counted."""
        if self.counting == UPPER_BOUND:  # more tokens than the truth still leave the whole cap
            return self.memory_cap is not None and self.memory_tokens >= self.memory_cap
        if self.counting == LOWER_BOUND:  # fewer tokens than the truth already leave nothing
            return self.memory_tokens == 0
        return True


class BudgetCalculator:
    """Counts requests with the given tokenizer and computes the memory budget; reusable."""

    def __init__(
        self, limits: ModelLimits, tokenizer: Tokenizer, *, memory_cap: int | None
    ) -> None:
        self._limits = limits
        self._tokenizer = tokenizer
        self._memory_cap = memory_cap

    @property
    def limits(self) -> ModelLimits:
        """The model limits table in use."""
        return self._limits

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer requests are counted with."""
        return self._tokenizer

    def encoding_for(self, model: str) -> str:
        """The encoding ``model``'s requests are counted in."""
        return self._tokenizer.encoding_for_model(model)

    def message_counts(
        self,
        messages: Sequence[Any],
        encoding: str,
        cached_counts: Sequence[int | None] | None = None,
        counting: str = EXACT,
    ) -> tuple[int, ...]:
        """Per-message token counts (or bounds), taking the cached ones where given."""
        size = measure(self._tokenizer, encoding, counting)
        counts: list[int] = []
        for index, message in enumerate(messages):
            cached = cached_counts[index] if cached_counts is not None else None
            counts.append(
                cached if cached is not None else count_message(as_message(message), size)
            )
        return tuple(counts)

    def definitions_tokens(
        self, body: Mapping[str, Any], encoding: str, counting: str = EXACT
    ) -> int:
        """Tokens of ``tools``, ``functions`` and a ``response_format`` schema."""
        return count_definitions(body, measure(self._tokenizer, encoding, counting))

    def calculate_request(
        self,
        body: Mapping[str, Any],
        directive: str = "",
        *,
        memory_cap: int | None = None,
        cached_counts: Sequence[int | None] | None = None,
        counting: str = EXACT,
    ) -> TokenBudget:
        """The budget for a whole chat request body; ``memory_cap`` never raises the own cap.

        ``counting`` other than ``EXACT`` bounds the figures without encoding (module notes).
        """
        encoding = self.encoding_for(str(body.get("model") or ""))
        counts = self.message_counts(messages_of(body), encoding, cached_counts, counting)
        tools = self.definitions_tokens(body, encoding, counting)
        directive_tokens = (
            measure(self._tokenizer, encoding, counting)(directive) if directive else 0
        )
        return self._budget(body, counts, tools, directive_tokens, counting, memory_cap)

    def bounds(
        self,
        body: Mapping[str, Any],
        directive: str = "",
        *,
        memory_cap: int | None = None,
        message_bounds: tuple[Sequence[int], Sequence[int]] | None = None,
    ) -> tuple[TokenBudget, TokenBudget]:
        """The upper- and lower-bound budgets of ``body`` in one walk over it.

        Pass ``message_bounds`` (from the method of that name) when the messages were walked
        already, e.g. in slices between which the caller let other work run.
        """
        encoding = self.encoding_for(str(body.get("model") or ""))
        if message_bounds is None:
            message_bounds = self.message_bounds(messages_of(body), encoding)
        uppers, lowers = message_bounds
        longest = self._tokenizer.longest_token_bytes(encoding)
        tally = ByteTally(self._tokenizer.byte_bounds(encoding))
        tools = count_definitions(body, tally)
        tools_lower = tally.lower_of(tools, longest)
        tally.reset()
        said = tally(directive) if directive else 0
        said_lower = tally.lower_of(said, longest)
        return (
            self._budget(body, tuple(uppers), tools, said, UPPER_BOUND, memory_cap),
            self._budget(body, tuple(lowers), tools_lower, said_lower, LOWER_BOUND, memory_cap),
        )

    def message_bounds(self, messages: Sequence[Any], encoding: str) -> tuple[list[int], list[int]]:
        """Each message's upper and lower bound, from one walk.

        A message's lower bound keeps its fixed costs and takes its texts together as
        ``ceil(bytes / longest token)``: never above the sum of per-text lower bounds.
        """
        longest = self._tokenizer.longest_token_bytes(encoding)
        tally = ByteTally(self._tokenizer.byte_bounds(encoding))
        uppers: list[int] = []
        lowers: list[int] = []
        for message in messages:
            tally.reset()
            upper = count_message(as_message(message), tally)
            uppers.append(upper)
            lowers.append(tally.lower_of(upper, longest))
        return uppers, lowers

    def _budget(
        self,
        body: Mapping[str, Any],
        counts: tuple[int, ...],
        tools_tokens: int,
        directive_tokens: int,
        counting: str,
        memory_cap: int | None,
    ) -> TokenBudget:
        """The budget from the request's counts: reserves, window, cap."""
        model = str(body.get("model") or "")
        limit = self._limits.lookup(model)
        window = limit.context_window
        messages_tokens = REPLY_PRIMING + sum(counts)
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
            encoding=self.encoding_for(model),
            tools_tokens=tools_tokens,
            available_tokens=available,
            memory_cap=cap,
            message_counts=counts,
            counting=counting,
        )


def messages_of(body: Mapping[str, Any]) -> Sequence[Any]:
    """The body's messages, or nothing to count when they are not a list."""
    messages = body.get("messages") or ()
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return ()  # malformed: the upstream answers it
    return messages


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
