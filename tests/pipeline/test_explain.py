"""Explain's drop reasons: every candidate that is not injected says why (issue 16)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from proxy.context.allocation import TokenBudget
from proxy.context.assembler import AssemblerConfig, assemble
from proxy.context.bundle import BundleConfig
from proxy.context.records import Candidate
from proxy.pipeline.explain import DROP_REASONS, drop_reason, dropped_entries, explain_body
from tests.context.support import block_tokens, candidate

NOW = datetime(2026, 1, 15, tzinfo=UTC)
TOKENS = block_tokens("o200k_base")
QUERY = "Which dog breed did Anna adopt from the shelter?"


def cand(name: str, content: str, similarity: float) -> Candidate:
    return candidate(name, content, similarity, now=NOW)


CANDIDATES = [
    cand("dog", "Anna adopted a beagle from the shelter in May.", 0.8),
    cand("dog-again", "Anna adopted a beagle from the shelter in May!", 0.8),  # duplicate
    cand("shelter", "Anna volunteers at the dog shelter on Saturdays with her beagle.", 0.7),
    cand("breed", "Anna read about every dog breed before she chose the beagle.", 0.7),
    cand("cello", "Learned to play the cello as an adult, mostly Bach suites.", 0.05),
    cand("tabs", "Prefers tabs over spaces in every Python project.", 0.05),
]


def budget(memory_tokens: int, cap: int | None) -> TokenBudget:
    return TokenBudget(
        model="gpt-4o",
        context_window=128_000,
        messages_tokens=20,
        directive_tokens=0,
        response_reserve=4_096,
        safety_buffer=100,
        memory_tokens=memory_tokens,
        is_constrained=memory_tokens < 1000,
        memory_cap=cap,
    )


@pytest.mark.parametrize(
    ("status", "memory_tokens", "cap", "reason"),
    [
        ("packed", 500, None, None),
        ("duplicate", 500, None, "duplicate"),
        ("floor", 500, None, "floor"),
        ("bundle", 500, None, "shortlist"),
        ("packer", 500, 500, "cap"),  # the cap set the budget
        ("trimmed", 500, 500, "cap"),
        ("packer", 300, 500, "budget"),  # the context window left less than the cap
        ("packer", 500, None, "budget"),
    ],
)
def test_drop_reason_table(status: str, memory_tokens: int, cap: int | None, reason: str) -> None:
    assert drop_reason(status, budget(memory_tokens, cap)) == reason


def test_every_candidate_left_out_says_why() -> None:
    config = AssemblerConfig(bundle=BundleConfig(max_items=5, min_salience_threshold=0.0))
    assembly = assemble(CANDIDATES, QUERY, 60, now=NOW, tokens=TOKENS, config=config)
    entries = dropped_entries(assembly, budget(60, 60))
    reasons = {entry["id"]: entry["reason"] for entry in entries}
    injected = {m.id for m in assembly.packed}
    assert injected
    assert set(reasons) | injected == {c.record.id for c in CANDIDATES}
    assert not set(reasons) & injected
    assert reasons["dog-again"] == "duplicate"
    assert "shortlist" in reasons.values()  # the sixth candidate is past the shortlist of 5
    assert "floor" in reasons.values()  # an unrelated memory does not pay for its tokens
    assert "cap" in reasons.values()  # 60 tokens hold the best, not all that pay
    assert set(reasons.values()) <= set(DROP_REASONS)
    scores = [entry["score"] for entry in entries]
    assert scores == sorted(scores, reverse=True)  # best first, like the ranking
    # The same packing under a window that leaves less than the cap: "budget", not "cap".
    window = {e["id"]: e["reason"] for e in dropped_entries(assembly, budget(60, 4_500))}
    assert "budget" in window.values()
    assert "cap" not in window.values()


def test_explain_body_carries_the_reasons() -> None:
    assembly = assemble(CANDIDATES, QUERY, 2_000, now=NOW, tokens=TOKENS)
    body = explain_body("gpt-4o", budget(2_000, 4_500), assembly, [])
    dropped = body["dropped"]
    assert isinstance(dropped, list)
    assert {entry["id"]: entry["reason"] for entry in dropped} == {
        "dog-again": "duplicate",
        "cello": "floor",
        "tabs": "floor",
    }
    assert set(dropped[0]) == {"id", "reason", "score", "tokens"}
    assert explain_body("gpt-4o", None, None, [])["dropped"] == []
