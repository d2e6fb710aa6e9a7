"""Table and property tests for the token budget calculator (seed milestone 3.5.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context import budget
from proxy.context.budget import (
    ModelLimit,
    ModelLimits,
    TokenBudgetCalculator,
)
from proxy.tokenizer import count_tokens


def test_hello_world_is_two_tokens() -> None:
    assert TokenBudgetCalculator().count_tokens("Hello world", "gpt-4o") == 2


@pytest.mark.parametrize("model", ["my-local-llama", "", "acme/unknown-7b"])
def test_unknown_model_falls_back_without_raising(model: str) -> None:
    calc = TokenBudgetCalculator()
    assert calc.count_tokens("Hello world", model) == count_tokens("Hello world", "cl100k_base")
    result = calc.calculate(model, [{"role": "user", "content": "hi"}])
    assert result.encoding == "cl100k_base"
    assert result.context_window == budget.DEFAULT_CONTEXT_WINDOW


def test_memory_is_zero_when_messages_fill_the_window() -> None:
    filler = "word " * 9_000  # over gpt-4's 8,192 window
    result = TokenBudgetCalculator().calculate("gpt-4", [{"role": "user", "content": filler}])
    assert result.memory_tokens == 0
    assert result.available_tokens == 0
    assert result.is_constrained


@pytest.mark.parametrize(
    ("cap", "constrained"), [(999, True), (1_000, False), (4_500, False), (0, True)]
)
def test_is_constrained_below_1000(cap: int, constrained: bool) -> None:
    result = TokenBudgetCalculator(memory_cap=cap).calculate(
        "gpt-4o", [{"role": "user", "content": "hi"}]
    )
    assert result.memory_tokens == cap
    assert result.is_constrained is constrained


@pytest.mark.parametrize(
    ("model", "window", "reserve", "safety"),
    [
        ("gpt-4o", 128_000, 4_096, 6_400),
        ("gpt-4o-mini", 128_000, 4_096, 6_400),
        ("gpt-4-turbo", 128_000, 4_096, 6_400),
        ("gpt-4", 8_192, 1_228, 409),
        ("gpt-3.5-turbo", 16_385, 2_457, 819),
        ("gpt-3.5-turbo-16k", 16_385, 2_457, 819),
        ("unknown-model", 8_192, 1_228, 409),
    ],
)
def test_seed_reserve_rules(model: str, window: int, reserve: int, safety: int) -> None:
    messages = [{"role": "user", "content": "hi"}]
    result = TokenBudgetCalculator(memory_cap=None).calculate(model, messages, "Be brief.")
    assert (result.context_window, result.response_reserve, result.safety_buffer) == (
        window,
        reserve,
        safety,
    )
    consumed = result.messages_tokens + result.directive_tokens + reserve + safety
    assert result.memory_tokens == window - consumed
    assert result.directive_tokens == count_tokens("Be brief.", result.encoding)


def test_response_reserve_min_500_for_small_windows() -> None:
    limits = ModelLimits({"tiny": ModelLimit(2_000, None)})
    result = TokenBudgetCalculator(limits).calculate("tiny", [])
    assert result.response_reserve == 500


@pytest.mark.parametrize(
    ("body_extra", "expected"),
    [
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 250}, 250),
        ({"max_completion_tokens": 250, "max_tokens": 9}, 250),
        ({"max_tokens": 100_000}, 16_384),  # clamped to gpt-4o's output limit
        ({"max_tokens": 0}, 0),
        ({"max_tokens": None}, 4_096),
        ({"max_tokens": True}, 4_096),
    ],
)
def test_request_output_limit_sets_the_reserve(body_extra: dict[str, Any], expected: int) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **body_extra}
    assert TokenBudgetCalculator().calculate_request(body).response_reserve == expected


@dataclass
class ProtoMessage:
    role: str
    content: str


def test_accepts_seed_style_message_objects() -> None:
    calc = TokenBudgetCalculator()
    objects = [ProtoMessage("user", "Hello world")]
    dicts = [{"role": "user", "content": "Hello world"}]
    assert calc.calculate("gpt-4o", objects) == calc.calculate("gpt-4o", dicts)


def test_cached_counts_are_used_and_reported() -> None:
    calc = TokenBudgetCalculator()
    messages = [{"role": "user", "content": "Hello world"}, {"role": "user", "content": "again"}]
    fresh = calc.calculate("gpt-4o", messages)
    cached = calc.calculate("gpt-4o", messages, cached_counts=[1_000, None])
    assert cached.message_counts == (1_000, fresh.message_counts[1])
    assert cached.messages_tokens == fresh.messages_tokens - fresh.message_counts[0] + 1_000


@pytest.mark.parametrize(("own", "requested", "expected"), [(4500, 100, 100), (4500, 9000, 4500)])
def test_request_cap_never_raises_the_own_cap(own: int, requested: int, expected: int) -> None:
    calc = TokenBudgetCalculator(memory_cap=own)
    assert calc.calculate("gpt-4o", [], memory_cap=requested).memory_tokens == expected


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.text(max_size=200), max_size=20),
    st.integers(min_value=0, max_value=100_000) | st.none(),
)
def test_budget_never_exceeds_window_or_cap(texts: list[str], cap: int | None) -> None:
    messages = [{"role": "user", "content": t} for t in texts]
    result = TokenBudgetCalculator(memory_cap=cap).calculate("gpt-4o", messages)
    assert 0 <= result.memory_tokens <= result.context_window
    if cap is not None:
        assert result.memory_tokens <= cap
    used = result.messages_tokens + result.response_reserve + result.safety_buffer
    assert result.memory_tokens + used <= result.context_window or result.memory_tokens == 0


@pytest.mark.parametrize(
    ("counting", "memory_tokens", "cap", "settled"),
    [
        (budget.EXACT, 100, 4500, True),
        (budget.UPPER_BOUND, 4500, 4500, True),  # more tokens than the truth leave the cap
        (budget.UPPER_BOUND, 4499, 4500, False),
        (budget.UPPER_BOUND, 0, 0, True),  # a cap of 0 is always reached
        (budget.UPPER_BOUND, 4500, None, False),  # no cap: only the exact count tells
        (budget.LOWER_BOUND, 0, 4500, True),  # fewer tokens than the truth leave nothing
        (budget.LOWER_BOUND, 1, 4500, False),
    ],
)
def test_when_a_bounded_budget_is_settled(
    counting: str, memory_tokens: int, cap: int | None, settled: bool
) -> None:
    result = budget.TokenBudget(
        model="m",
        context_window=8000,
        messages_tokens=0,
        directive_tokens=0,
        response_reserve=0,
        safety_buffer=0,
        memory_tokens=memory_tokens,
        is_constrained=False,
        memory_cap=cap,
        counting=counting,
    )
    assert result.settled is settled


@pytest.mark.parametrize(
    ("model", "content", "counting"),
    [
        ("gpt-4o", "short question", budget.UPPER_BOUND),  # the common case: no tokenizer
        ("gpt-4o", "a" * 16_000_000, budget.LOWER_BOUND),  # 16 MB cannot fit 128k tokens
        ("gpt-4", "word " * 1_000, None),  # near an 8k window: only counting decides
    ],
)
def test_byte_bounds_settle_most_budgets(model: str, content: str, counting: str | None) -> None:
    calc = TokenBudgetCalculator(memory_cap=4500)
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    upper = calc.calculate_request(body, counting=budget.UPPER_BOUND)
    lower = calc.calculate_request(body, counting=budget.LOWER_BOUND)
    settled = [b.counting for b in (upper, lower) if b.settled]
    assert settled[:1] == ([counting] if counting else [])
