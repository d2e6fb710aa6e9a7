"""Room held back for unseen context: less available, memory within it, bounds still bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.allocation import CONSTRAINED_BELOW, TokenBudget
from proxy.context.billing import EXACT, LOWER_BOUND, UPPER_BOUND
from proxy.pipeline.unseen import UNSEEN_SHARE, hold_back, note

WINDOW = 128_000


def budget(available: int, cap: int | None, counting: str = EXACT) -> TokenBudget:
    memory = available if cap is None else min(cap, available)
    return TokenBudget(
        model="gpt-4o",
        context_window=WINDOW,
        messages_tokens=100,
        directive_tokens=0,
        response_reserve=4_096,
        safety_buffer=6_400,
        memory_tokens=memory,
        is_constrained=memory < CONSTRAINED_BELOW,
        available_tokens=available,
        memory_cap=cap,
        message_counts=(97,),
        counting=counting,
    )


@pytest.mark.parametrize(
    ("available", "cap", "left", "memory"),
    [
        (117_000, 4_500, 53_000, 4_500),  # a short conversation keeps the whole cap
        (66_000, 4_500, 2_000, 2_000),  # a long one gets what is left after the held room
        (60_000, 4_500, 0, 0),  # longer still: nothing
        (117_000, None, 53_000, 53_000),
    ],
)
def test_hold_back(available: int, cap: int | None, left: int, memory: int) -> None:
    held = hold_back(budget(available, cap))
    assert (held.available_tokens, held.memory_tokens) == (left, memory)
    assert held.is_constrained is (memory < CONSTRAINED_BELOW)
    assert held.message_counts == (97,)  # still what the count cache stores


@given(
    st.integers(0, WINDOW),
    st.integers(0, WINDOW),
    st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_bounds_stay_bounds(exact: int, slack: int, cap: int | None) -> None:
    """An upper-bound budget (available under-counted) held back never exceeds the exact one
    held back, a lower-bound one never falls below it; settled stays exact."""
    truth = hold_back(budget(exact, cap))
    upper = hold_back(budget(max(0, exact - slack), cap, UPPER_BOUND))
    lower = hold_back(budget(exact + slack, cap, LOWER_BOUND))
    assert upper.memory_tokens <= truth.memory_tokens <= lower.memory_tokens
    if upper.settled:
        assert upper.memory_tokens == truth.memory_tokens
    if lower.settled:
        assert lower.memory_tokens == truth.memory_tokens


def test_note_names_the_tokens_held() -> None:
    assert str(int(WINDOW * UNSEEN_SHARE)) in note(budget(1, None))
