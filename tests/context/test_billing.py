"""Table tests for request token counting (billing)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.context import billing
from proxy.context.billing import message_key
from proxy.context.budget import TokenBudgetCalculator
from proxy.context.tokens import count_tokens


def test_message_overhead_matches_openai_cookbook() -> None:
    calc = TokenBudgetCalculator()
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "name": "ann", "content": "Hello world"},
    ]
    enc = "o200k_base"
    expected = 3 + (3 + 1 + count_tokens("You are helpful.", enc))
    expected += 3 + 1 + count_tokens("Hello world", enc) + 1 + count_tokens("ann", enc)
    assert calc.count_messages_tokens(messages, "gpt-4o") == expected


TEXT = "Describe this picture of the harbour at dawn."


@pytest.mark.parametrize(
    ("content", "expected_extra"),
    [
        ([{"type": "text", "text": TEXT}], 0),
        ([{"type": "text", "text": TEXT}, {"type": "image_url", "image_url": {"url": "x"}}], 765),
        (
            [
                {"type": "text", "text": TEXT},
                {"type": "image_url", "image_url": {"url": "x", "detail": "low"}},
            ],
            85,
        ),
        (
            [
                {"type": "text", "text": TEXT},
                {"type": "image_url", "image_url": {"url": "x", "detail": "high"}},
            ],
            765,
        ),
    ],
)
def test_array_content_and_images(content: list[dict[str, Any]], expected_extra: int) -> None:
    calc = TokenBudgetCalculator()
    as_array = calc.count_messages_tokens([{"role": "user", "content": content}], "gpt-4o")
    as_text = calc.count_messages_tokens([{"role": "user", "content": TEXT}], "gpt-4o")
    assert as_array - as_text == expected_extra


def test_tool_calls_tools_and_response_format_are_counted() -> None:
    calc = TokenBudgetCalculator()
    base = {"model": "gpt-4o", "messages": [{"role": "user", "content": "weather in Paris?"}]}
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    with_tools = {**base, "tools": [tool]}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    reply = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}
    with_calls = {**with_tools, "messages": [*base["messages"], call, reply]}
    schema = {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}
    with_format = {**with_calls, "response_format": schema}

    plain = calc.calculate_request(base)
    tools = calc.calculate_request(with_tools)
    calls = calc.calculate_request(with_calls)
    formatted = calc.calculate_request(with_format)
    assert tools.tools_tokens > billing.TOOLS_BASE
    assert calls.messages_tokens > plain.messages_tokens + 2 * billing.TOKENS_PER_MESSAGE
    assert formatted.tools_tokens > calls.tools_tokens
    assert formatted.available_tokens < calls.available_tokens < tools.available_tokens
    assert calc.calculate_request({**base, "response_format": {"type": "text"}}).tools_tokens == 0


def test_message_key_depends_on_content_and_encoding() -> None:
    one = {"role": "user", "content": "a"}
    assert message_key(one, "o200k_base") == message_key(dict(reversed(one.items())), "o200k_base")
    assert message_key(one, "o200k_base") != message_key(one, "cl100k_base")
    assert message_key(one, "o200k_base") != message_key({**one, "content": "b"}, "o200k_base")
