"""Fact extraction's pure part: the turn, the request, and reading answers (adr/0112)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from proxy.memory.extraction import (
    FACTS_SCHEMA,
    MAX_FACTS,
    NOT_JSON,
    REFUSAL,
    SCHEMA_NAME,
    WRONG_SCHEMA,
    BrokenAnswer,
    Fact,
    handles,
    read_answer,
    request_body,
    turn_of,
    usage_of,
)
from tests.memory.support import record

AT = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
BLOCK = f"{BLOCK_OPEN}\n- The user lives in Porto.\n{BLOCK_CLOSE}"


def answer(content: Any = None, *, refusal: str | None = None) -> dict[str, Any]:
    text = content if isinstance(content, str) or content is None else orjson.dumps(content)
    if isinstance(text, bytes):
        text = text.decode()
    message = {"role": "assistant", "content": text, "refusal": refusal}
    return {"choices": [{"index": 0, "message": message}], "usage": {"prompt_tokens": 7}}


def fact(
    content: str, expires_at: str | None = None, replaces: str | None = None
) -> dict[str, Any]:
    return {"content": content, "expires_at": expires_at, "replaces": replaces}


def test_the_turn_is_the_clients_words_without_system_or_block() -> None:
    messages = [
        {"role": "system", "content": f"You are helpful.\n{BLOCK}"},
        {"role": "user", "content": "My sister is Ana."},
        {"role": "assistant", "content": "Nice!"},
        {"role": "user", "content": [{"type": "text", "text": f"She moved to Rome. {BLOCK}"}]},
    ]
    turn = turn_of(messages, f"Good for her. {BLOCK}", AT, 100)
    assert turn is not None
    assert turn.said == "She moved to Rome."
    assert turn.context == (("user", "My sister is Ana."), ("assistant", "Nice!"))
    assert turn.answer == "Good for her."
    everything = str(request_body("m", turn, {}, 50))
    assert "Porto" not in everything
    assert "You are helpful" not in everything


def test_no_turn_without_a_last_user_message() -> None:
    assert turn_of([{"role": "system", "content": "x"}], "a", AT, 10) is None
    assert (
        turn_of(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "", AT, 10
        )
        is None
    )
    assert turn_of([{"role": "user", "content": f"  {BLOCK} "}], "a", AT, 10) is None


def test_texts_are_cut_to_the_limit() -> None:
    turn = turn_of([{"role": "user", "content": "x" * 50}], "y" * 50, AT, 10)
    assert turn is not None
    assert (turn.said, turn.answer) == ("x" * 10, "y" * 10)


def test_the_request_asks_for_strict_structured_output_and_shows_memories() -> None:
    turn = turn_of([{"role": "user", "content": "I moved to Berlin."}], "", AT, 100)
    assert turn is not None
    shown = handles([record("a", content="The user lives in Porto."), record("b")])
    body = request_body("gpt-4o-mini", turn, shown, 256)
    assert body["model"] == "gpt-4o-mini"
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"] == {"name": SCHEMA_NAME, "strict": True, "schema": FACTS_SCHEMA}
    prompt = body["messages"][1]["content"]
    assert "m1: The user lives in Porto." in prompt
    assert "Turn time: 2026-11-23T10:00:00+00:00 (Monday)" in prompt
    assert prompt.rstrip().endswith("I moved to Berlin.")
    assert set(shown) == {"m1", "m2"}


def test_strict_schema_rules_hold_at_every_level() -> None:
    # OpenAI's strict mode: every property required, no additional properties.
    item = FACTS_SCHEMA["properties"]["facts"]["items"]
    for schema in (FACTS_SCHEMA, item):
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) == set(schema["properties"])


def test_a_valid_answer() -> None:
    later = (AT + timedelta(days=6)).isoformat()
    body = answer(
        {
            "facts": [
                fact(" The user lives in Berlin. ", replaces="m1"),
                fact("The user is in Lisbon until 2026-11-29.", later),
            ]
        }
    )
    assert read_answer(body, AT) == [
        Fact("The user lives in Berlin.", None, "m1"),
        Fact("The user is in Lisbon until 2026-11-29.", AT + timedelta(days=6), None),
    ]
    assert read_answer(answer({"facts": []}), AT) == []


def test_a_fact_already_expired_at_the_turn_is_dropped() -> None:
    body = answer(
        {
            "facts": [
                fact("Was in Paris yesterday.", (AT - timedelta(hours=1)).isoformat()),
                fact("Likes tea."),
            ]
        }
    )
    assert read_answer(body, AT) == [Fact("Likes tea.")]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (answer("The user lives in Berlin."), NOT_JSON),
        (answer('{"facts": ['), NOT_JSON),
        (answer(None), NOT_JSON),
        (answer(None, refusal="I can't help with that."), REFUSAL),
        (answer({"facts": "none"}), WRONG_SCHEMA),
        (answer({"memories": []}), WRONG_SCHEMA),
        (answer({"facts": [{"content": "x"}]}), WRONG_SCHEMA),
        (answer({"facts": [{**fact("x"), "confidence": 1}]}), WRONG_SCHEMA),
        (answer({"facts": [fact("   ")]}), WRONG_SCHEMA),
        (answer({"facts": [fact("x", "next week")]}), WRONG_SCHEMA),
        (answer({"facts": [fact(f"f{i}") for i in range(MAX_FACTS + 1)]}), WRONG_SCHEMA),
        (answer([1, 2]), WRONG_SCHEMA),
        ({"choices": []}, WRONG_SCHEMA),
        ({"error": {"message": "x"}}, WRONG_SCHEMA),
    ],
)
def test_a_broken_answer_stores_nothing(body: dict[str, Any], reason: str) -> None:
    result = read_answer(body, AT)
    assert isinstance(result, BrokenAnswer)
    assert result.reason == reason


def test_usage() -> None:
    assert usage_of({"usage": {"prompt_tokens": 12, "completion_tokens": 5}}) == (12, 5)
    assert usage_of({"usage": {"prompt_tokens": True, "completion_tokens": -1}}) == (0, 0)
    assert usage_of({}) == (0, 0)
