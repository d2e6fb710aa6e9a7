"""The adaptive budget (adr/0110): every block token has a price in the packer's value units.

Invariants stated in ``priced_values`` and checked here: price 0 keeps every item at its own
value; a kept item's net value is positive and never above its value; a higher price never keeps
an item a lower one dropped. And in ``assemble``: every packed memory pays for its line at the
price, the block never exceeds the budget, and an unrelated candidate costs nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.assembler import (
    AssemblerConfig,
    MemoryExplanation,
    assemble,
    priced_values,
)
from proxy.context.ranking import OVERLAP_WEIGHT, WEIGHT_RELEVANCE
from proxy.context.records import Candidate
from proxy.defaults import PRICE_UNIT_TOKENS
from proxy.tokenizer import count_tokens
from tests.context.support import block_tokens, candidate

NOW = datetime(2026, 1, 15, tzinfo=UTC)
TOKENS = block_tokens("o200k_base")


def cand(name: str, content: str, similarity: float) -> Candidate:
    return candidate(name, content, similarity, now=NOW)


@pytest.mark.parametrize(
    ("values", "priors", "costs", "price", "kept"),
    [
        ([1.0, 0.5, 0.1], [0.0, 0.0, 0.0], [10, 10, 10], 0.0, [0, 1, 2]),  # no price: fill
        ([1.0, 0.5, 0.1], [0.9, 0.5, 0.1], [10, 10, 10], 0.0, [0, 1, 2]),  # priors unused too
        # 0.5 / 100 = 0.005 per token: 0.1 - 0.05 > 0, 0.1 - 0.1 is not
        ([1.0, 0.5, 0.1], [0.0, 0.0, 0.0], [10, 10, 20], 0.5, [0, 1]),
        ([1.0, 0.5, 0.1], [0.0, 0.0, 0.0], [10, 10, 10], 0.5, [0, 1, 2]),
        ([1.0, 0.5, 0.1], [0.0, 0.0, 0.0], [10, 100, 10], 2.0, [0]),  # a long, weaker line
        # What the query adds is what pays: a high value that is all prior buys nothing.
        ([0.6, 0.3], [0.6, 0.0], [10, 10], 0.1, [1]),
        ([0.02, 0.01], [0.0, 0.0], [20, 20], 0.1, []),  # weak everywhere: nothing is injected
        ([1.0], [0.0], [1_000], 0.1, []),  # even the best must pay for its own line
        ([], [], [], 0.3, []),
    ],
)
def test_priced_values_table(
    values: list[float], priors: list[float], costs: list[int], price: float, kept: list[int]
) -> None:
    net, paying = priced_values(values, priors, costs, list(range(len(values))), price)
    assert paying == kept
    per_token = price / PRICE_UNIT_TOKENS
    for i in paying:
        expected = values[i] - priors[i] - per_token * costs[i] if price else values[i]
        assert net[i] == pytest.approx(expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(1, 400)), max_size=40),
    st.floats(min_value=0, max_value=5),
    st.floats(min_value=0, max_value=5),
)
def test_priced_values_invariants(
    items: list[tuple[float, float, int]], low: float, high: float
) -> None:
    values = [max(a, b) for a, b, _ in items]
    priors = [min(a, b) for a, b, _ in items]  # a prior never exceeds its value
    costs = [cost for *_, cost in items]
    low, high = min(low, high), max(low, high)
    everything = list(range(len(items)))
    free, kept_free = priced_values(values, priors, costs, everything, 0.0)
    assert kept_free == everything
    assert all(free[i] == values[i] for i in everything)
    net_low, kept_low = priced_values(values, priors, costs, everything, low)
    net_high, kept_high = priced_values(values, priors, costs, everything, high)
    assert set(kept_high) <= set(kept_low)  # a higher price never keeps more
    for price, net, kept in ((low, net_low, kept_low), (high, net_high, kept_high)):
        assert kept == sorted(kept)  # the input order is kept
        if price > 0:
            assert all(0 < net[i] <= values[i] - priors[i] for i in kept)
    if low > 0:
        gains = [values[i] - priors[i] for i in everything]
        assert set(kept_low) == {i for i in everything if gains[i] > low / 100 * costs[i]}
        assert not {i for i in everything if gains[i] == 0} & set(kept_low)


QUERY = "Which dog breed did Anna adopt from the shelter?"
RELATED = [
    cand("dog", "Anna adopted a beagle from the shelter in May.", 0.8),
    cand("walk", "Anna walks the beagle every morning before work.", 0.6),
]
UNRELATED = [
    cand(f"u{n}", text, 0.1)
    for n, text in enumerate(
        [
            "The quarterly budget review moved to Thursday afternoon.",
            "Prefers tabs over spaces in every Python project.",
            "Flew to Lisbon for a conference on compilers last spring.",
            "Keeps a sourdough starter named Gerald on the kitchen shelf.",
            "Runs the integration tests before every release candidate.",
            "Learned to play the cello as an adult, mostly Bach suites.",
        ]
    )
]


def test_unrelated_memories_are_not_injected_and_say_why() -> None:
    adaptive = assemble(RELATED + UNRELATED, QUERY, 2_000, now=NOW, tokens=TOKENS)
    assert adaptive.packed[0].id == "dog"
    assert {m.id for m in adaptive.packed} <= {"dog", "walk"}
    assert set(adaptive.dropped["floor"]) == {m.record.id for m in UNRELATED}
    fill = assemble(
        RELATED + UNRELATED,
        QUERY,
        2_000,
        now=NOW,
        tokens=TOKENS,
        config=AssemblerConfig(token_price=0.0),
    )
    assert len(fill.packed) == len(RELATED + UNRELATED)  # the old rule fills the budget
    assert adaptive.rendered_tokens < fill.rendered_tokens


words = st.lists(
    st.sampled_from(["anna", "dog", "beagle", "shelter", "budget", "review", "the", "walks"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(words, st.floats(0, 1)), max_size=25),
    st.integers(0, 600),
    st.floats(0, 3),
)
def test_packed_memories_pay_for_their_lines(
    items: list[tuple[list[str], float]], budget: int, price: float
) -> None:
    candidates = [cand(str(n), " ".join(ws), sim) for n, (ws, sim) in enumerate(items)]
    config = AssemblerConfig(token_price=price)
    result = assemble(candidates, "anna dog shelter", budget, now=NOW, tokens=TOKENS, config=config)
    assert result.rendered_tokens == count_tokens(result.block, "o200k_base") <= budget
    if not result.candidates:
        return
    per_token = price / PRICE_UNIT_TOKENS

    def gain(memory: MemoryExplanation) -> float:  # the value the query adds (module notes)
        query_part = 0.2 * WEIGHT_RELEVANCE * memory.scored.relevance_score
        query_part += 0.8 * OVERLAP_WEIGHT * memory.overlap
        return memory.value - max(0.0, memory.final_score - query_part) ** 4

    floored = set(result.dropped["floor"])
    for memory in result.candidates:
        pays = gain(memory) - per_token * memory.line_tokens > 1e-12
        if memory.status == "packed" and price > 0:
            assert pays
        if memory.id in floored:
            assert not gain(memory) - per_token * memory.line_tokens > 1e-9
