"""Seed compatibility: the token budget calculator of seed milestone 3.5.2, over the engine.

``TokenBudgetCalculator`` is the engine's ``allocation.BudgetCalculator`` with the seed's
surface: built with no arguments (the seed's six-model table, the process's tiktoken tokenizer,
a 4,500-token cap), ``count_tokens(text, model)``, ``count_messages_tokens(messages, model)``
and ``calculate(model, messages, directive)``, where messages may be dicts or objects with
``role``/``content`` attributes as in the seed. Every figure comes from the engine
(``allocation``, ``billing``, ``limits``); the reserve rules are documented there (ADR-0039).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.context.allocation import (
    CONSTRAINED_BELOW,
    RESPONSE_RESERVE_MAX,
    RESPONSE_RESERVE_MIN,
    RESPONSE_RESERVE_RATIO,
    SAFETY_BUFFER_RATIO,
    BudgetCalculator,
    TokenBudget,
)
from proxy.context.billing import (
    EXACT,
    LOWER_BOUND,
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOOLS_BASE,
    UPPER_BOUND,
    count_content,
    count_message,
    measure,
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
)
from proxy.context.tokens import Tokenizer
from proxy.defaults import MEMORY_MAX_TOKENS as DEFAULT_MEMORY_CAP
from proxy.model_limits import load_model_limits
from proxy.tokenizer import tiktoken_tokenizer

__all__ = [
    "CONSTRAINED_BELOW",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MEMORY_CAP",
    "EXACT",
    "LOWER_BOUND",
    "MODEL_CONTEXT_WINDOWS",
    "MODEL_MAX_OUTPUT",
    "MODEL_OVERRIDES",
    "REPLY_PRIMING",
    "RESPONSE_RESERVE_MAX",
    "RESPONSE_RESERVE_MIN",
    "RESPONSE_RESERVE_RATIO",
    "SAFETY_BUFFER_RATIO",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOOLS_BASE",
    "UNKNOWN_MODEL",
    "UPPER_BOUND",
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


class TokenBudgetCalculator(BudgetCalculator):
    """The seed's calculator: the engine's, with the seed's defaults and entry points."""

    def __init__(
        self,
        limits: ModelLimits | None = None,
        *,
        memory_cap: int | None = DEFAULT_MEMORY_CAP,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__(
            limits if limits is not None else ModelLimits(),
            tokenizer if tokenizer is not None else tiktoken_tokenizer(),
            memory_cap=memory_cap,
        )

    def count_tokens(self, text: str, model: str) -> int:
        """Tokens of ``text`` with ``model``'s encoding (cl100k_base for unknown models)."""
        return measure(self.tokenizer, self.encoding_for(model))(text)

    def count_messages_tokens(
        self,
        messages: Sequence[Any],
        model: str,
        *,
        cached_counts: Sequence[int | None] | None = None,
    ) -> int:
        """Tokens of a messages array, with per-message overhead and reply priming."""
        return REPLY_PRIMING + sum(
            self.message_counts(messages, self.encoding_for(model), cached_counts)
        )

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
