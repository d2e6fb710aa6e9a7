"""Table tests for request token counting (billing)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.claude_tokenizer import CLAUDE
from proxy.context import billing
from proxy.context.billing import message_key
from proxy.context.budget import TokenBudgetCalculator
from proxy.context.documents import PAGES
from proxy.defaults import PDF_PAGE_TOKENS
from proxy.tokenizer import count_tokens, tiktoken_tokenizer
from tests.fakes.pdfs import b64, pdf

TOKENIZER = tiktoken_tokenizer()


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


# --- bounds and odd shapes ---------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what orjson reads as integers
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool"]) | JSON_VALUES
# Text NFKC (Claude's tokenizer) writes longer than it is sent: U+FDFA is 3 bytes, 33 as read.
LENGTHENED = st.text(alphabet="\ufdfa\ufdfb\ufb2c\u337f\u00b4\u0301 a.", max_size=200)
MESSAGES = st.fixed_dictionaries(
    {"role": ROLES},
    optional={
        "content": st.text(max_size=300) | LENGTHENED | JSON_VALUES,
        "name": st.text(max_size=10) | JSON_VALUES,
        "tool_call_id": JSON_VALUES,
        "tool_calls": JSON_VALUES,
        "function_call": JSON_VALUES,
    },
)
BODIES = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["gpt-4o", "gpt-4", "unknown-model", "claude-sonnet-4-5"]),
        "messages": st.lists(MESSAGES),
    },
    optional={"tools": JSON_VALUES, "functions": JSON_VALUES, "response_format": JSON_VALUES},
)


@settings(max_examples=150, deadline=None)
@given(BODIES)
def test_bounds_enclose_the_exact_count_for_any_json_shape(body: dict[str, Any]) -> None:
    calc = TokenBudgetCalculator(memory_cap=4500)
    exact = calc.calculate_request(body)
    upper = calc.calculate_request(body, counting=billing.UPPER_BOUND)
    lower = calc.calculate_request(body, counting=billing.LOWER_BOUND)
    for name in ("messages_tokens", "tools_tokens"):
        assert getattr(lower, name) <= getattr(exact, name) <= getattr(upper, name)
    counts = zip(lower.message_counts, exact.message_counts, upper.message_counts, strict=True)
    for low, mid, high in counts:
        assert low <= mid <= high
    # More tokens leave less room: the upper bound's budget is never above the exact one.
    assert upper.memory_tokens <= exact.memory_tokens <= lower.memory_tokens
    # One walk gives both: the same upper bound, a lower bound no higher than per-text ceilings.
    walked_upper, walked_lower = calc.bounds(body)
    assert walked_upper == upper
    assert walked_lower.messages_tokens <= lower.messages_tokens
    assert walked_lower.tools_tokens <= lower.tools_tokens
    for bounded in (upper, lower, walked_lower):
        if bounded.settled:
            assert bounded.memory_tokens == exact.memory_tokens


@pytest.mark.parametrize(
    "text",
    [
        *["", "hello world", "a" * 5000, "é" * 300, "🍵" * 100, " \n\t" * 50, "x\u0301" * 40],
        *["1" * 999, "\ufdfa" * 300, "\u00bc\ufb2c" * 100],  # tiktoken reads text as sent
    ],
)
def test_utf8_bounds_of_one_text(text: str) -> None:
    for encoding in ("o200k_base", "cl100k_base"):
        exact = billing.measure(TOKENIZER, encoding)(text)
        assert billing.measure(TOKENIZER, encoding, billing.LOWER_BOUND)(text) <= exact
        assert (
            exact
            <= billing.measure(TOKENIZER, encoding, billing.UPPER_BOUND)(text)
            == len(text.encode())
        )


@pytest.mark.parametrize(
    "text",
    [
        "a" * (billing.MEASURED_CHARS + 1),
        "é" * (billing.MEASURED_CHARS + 1),
        "tea 🍵 " * 20_000,
        "\U0010ffff" * (billing.MEASURED_CHARS + 5),
    ],
)
def test_long_texts_are_bounded_without_encoding(text: str) -> None:
    least, most = billing.utf8_bytes(text)
    assert least <= len(text.encode("utf-8", "surrogatepass")) <= most
    if not text.isascii():
        assert (least, most) == (len(text), 4 * len(text))  # from the length alone


@pytest.mark.parametrize(
    "text",
    [
        "\ufdfa" * 300,
        " \ufdfa" * 300,
        "\ufb2c\u337f\ufdfb" * 100,
        "\u00b4x\u0301" * 100,
        "\ufdfa" * (billing.MEASURED_CHARS + 1),
    ],
    ids=["fdfa", "spaced", "mixed", "marks", "long"],
)
def test_claude_bounds_enclose_text_nfkc_lengthens(text: str) -> None:
    # Claude's tokenizer reads a text's NFKC form, up to 11 times its UTF-8 bytes: the bounds
    # of a text must still enclose its count, or a bound-settled budget would overrun.
    exact = billing.measure(TOKENIZER, CLAUDE)(text)
    assert billing.measure(TOKENIZER, CLAUDE, billing.LOWER_BOUND)(text) <= exact
    assert exact <= billing.measure(TOKENIZER, CLAUDE, billing.UPPER_BOUND)(text)
    calc = TokenBudgetCalculator(memory_cap=4500)
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": text}]}
    upper, lower = calc.bounds(body)
    assert lower.messages_tokens <= calc.calculate_request(body).messages_tokens
    assert calc.calculate_request(body).messages_tokens <= upper.messages_tokens


@pytest.mark.parametrize(
    ("body", "size"),
    [
        ({}, 0),
        ({"messages": "x", "tools": {"a": 1}}, 0),
        ({"messages": [{"role": "user", "content": "hi"}] * 3}, 3),
        ({"messages": [{"content": [1, 2, 3], "tool_calls": [{}, {}]}, "x"]}, 7),
        ({"messages": [], "tools": [{}] * 4, "functions": [{}]}, 5),
    ],
)
def test_walk_size_counts_what_counting_visits(body: dict[str, Any], size: int) -> None:
    assert billing.walk_size(body) == size


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": 5},
        {"tools": "get_weather"},
        {"tools": {"type": "function"}},
        {"tools": [1, "x", None, []]},
        {"functions": {"name": "f"}},
        {"response_format": "json"},
        {"response_format": 5},
        {"messages": [{"role": "assistant", "tool_calls": "call it"}]},
        {"messages": [{"role": "assistant", "tool_calls": [1, None, "x"]}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 5}}]}]},
        {"messages": [{"role": "assistant", "function_call": "f"}]},
        {"messages": [{"role": {"r": 1}, "name": [1], "tool_call_id": 5, "content": {"a": 1}}]},
        {"messages": [{"role": "user", "content": ["a", 1, None, [], {"type": "text"}]}]},
        {"messages": "not a list"},
        {"messages": {"role": "user"}},
    ],
)
def test_malformed_shapes_are_counted_as_their_json_text(extra: dict[str, Any]) -> None:
    calc = TokenBudgetCalculator()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **extra}
    plain = calc.calculate_request({"model": "gpt-4o", "messages": body["messages"]})
    counted = calc.calculate_request(body)
    assert counted.memory_tokens >= 0
    if "messages" not in extra:  # the odd definitions cost something: never undercounted
        assert counted.tools_tokens > 0
        assert counted.available_tokens < plain.available_tokens


def test_a_pdf_counts_by_its_pages_and_a_file_by_id_by_the_guess() -> None:
    # A 50-page PDF is ~150,000 tokens for the provider, not the 1,000 of a flat guess.
    size = billing.upper_bound
    data = "data:application/pdf;base64," + b64(pdf(50, object_streams=True))
    assert billing.count_content([{"type": "file", "file": {"file_data": data}}], size) == (
        50 * PDF_PAGE_TOKENS
    )
    assert billing.count_content([{"type": PAGES, "pages": 7}], size) == 7 * PDF_PAGE_TOKENS
    for odd in (0, -3, True, "7", None):  # an adapter writes an int; anything else: one page
        assert billing.count_content([{"type": PAGES, "pages": odd}], size) == PDF_PAGE_TOKENS
    by_id = [{"type": "file", "file": {"file_id": "file-1"}}]
    assert billing.count_content(by_id, size) == billing.FILE_PART_TOKENS
    assert billing.count_content([{"type": "file"}], size) == billing.FILE_PART_TOKENS


def test_a_message_with_a_file_gets_a_key_no_older_count_was_cached_under() -> None:
    # Cached counts outlive a release: a file message counted by the flat guess must not be
    # found again now that PDFs count by their pages.
    message = {"role": "user", "content": [{"type": "file", "file": {"file_data": "JVBER"}}]}
    raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS) + b"o200k_base"
    assert message_key(message, "o200k_base") != hashlib.blake2b(raw, digest_size=16).hexdigest()
    plain = {"role": "user", "content": "hi"}
    raw = orjson.dumps(plain, option=orjson.OPT_SORT_KEYS) + b"o200k_base"
    assert message_key(plain, "o200k_base") == hashlib.blake2b(raw, digest_size=16).hexdigest()


def test_a_file_message_key_changes_with_the_page_price() -> None:
    # A count cached at one page price must not be read at another (a release that re-prices
    # pages would otherwise under-count every cached PDF message).
    message = {"role": "user", "content": [{"type": "file", "file": {"file_data": "JVBER"}}]}
    raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS) + b"o200k_base"
    at_price = {
        price: hashlib.blake2b(raw + b"\x00pdf-pages-%d" % price, digest_size=16).hexdigest()
        for price in (PDF_PAGE_TOKENS, PDF_PAGE_TOKENS + 1)
    }
    assert message_key(message, "o200k_base") == at_price[PDF_PAGE_TOKENS]
    assert at_price[PDF_PAGE_TOKENS] != at_price[PDF_PAGE_TOKENS + 1]
