"""The Responses API adapter: reading requests into the pipeline's terms, writing the block,
reading answers (as the relay hands them over)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.apis.adapter import SYSTEM, TURN, Blocks, Injected
from proxy.apis.answer import Answer
from proxy.apis.openai_responses import RESPONSES
from proxy.context.billing import IMAGE_TOKENS, count_content
from proxy.context.documents import PAGES, estimated_pages
from proxy.context.position import SEPARATOR, Slot, slot
from proxy.defaults import PDF_PAGE_TOKENS
from proxy.pipeline.query import last_user_texts, query_text
from tests.fakes.pdfs import b64, pdf, read_now
from tests.fakes.upstream import StackedEncoder, response_events, response_object

BLOCK = "<memories>\nthe dog is Biscuit\n</memories>"
TEXT = "Hello from the fake upstream"
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}


def conversation(body: dict[str, Any]) -> Any:
    return RESPONSES.conversation({"model": "gpt-4o", **body})


@pytest.mark.parametrize(
    ("body", "messages"),
    [
        ({"input": "hi"}, [{"role": "user", "content": "hi"}]),
        (
            {"instructions": "Be brief.", "input": "hi"},
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]},
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        ),
        (
            {"input": [CALL, OUTPUT]},
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": 1}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
        ),
        # Reasoning and built-in tool items: their JSON, never dropped from the count.
        (
            {"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]},
            [{"role": "reasoning", "content": '{"type":"reasoning","id":"rs_1","summary":[]}'}],
        ),
        # Shapes this cannot read: nothing to retrieve for, forwarded as sent.
        ({"input": 7}, []),
        ({"input": ["hi"]}, []),
        ({"instructions": ["no"], "input": "hi"}, []),
        ({}, []),
    ],
)
def test_conversation_messages(body: dict[str, Any], messages: list[Any]) -> None:
    assert list(conversation(body).messages) == messages


def test_query_and_capture_read_the_latest_user_input_only() -> None:
    items = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "answer"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second"}]},
        OUTPUT,
    ]
    messages = conversation({"instructions": "system text", "input": items}).messages
    assert last_user_texts(messages, 1) == ["second"]
    assert query_text(messages, 5) == "second\nfirst"


def test_billed_body_counts_tools_format_and_output_limit() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {}}]
    schema = {"type": "json_schema", "name": "s", "schema": {"type": "object"}}
    body = {"input": "hi", "tools": tools, "text": {"format": schema}, "max_output_tokens": 99}
    billed = conversation(body).billed
    assert billed["model"] == "gpt-4o"
    assert billed["messages"] == [{"role": "user", "content": "hi"}]
    assert billed["tools"] == tools
    assert billed["response_format"] == schema
    assert billed["max_completion_tokens"] == 99
    assert set(conversation({"input": "hi"}).billed) == {"model", "messages"}


def test_media_parts_cost_what_chat_parts_cost() -> None:
    parts = [
        {
            "type": "input_image",
            "image_url": "data:image/png;base64," + "A" * 10_000,
            "detail": "low",
        },
        {"type": "input_text", "text": "what is this?"},
    ]
    (message,) = conversation({"input": [{"role": "user", "content": parts}]}).messages

    def size(text: str) -> int:
        return len(text)

    assert count_content(message["content"], size) == IMAGE_TOKENS["low"] + len("what is this?")


def test_a_chat_file_part_is_read_when_budgeted_not_by_the_billing() -> None:
    # Not a Responses part (refused upstream), but billed as sent the billing would read its
    # bytes whole, on the loop, whatever the deadline.
    part = {"type": "file", "file": {"file_data": b64(pdf(5))}}
    read = conversation({"input": [{"role": "user", "content": [part]}]})
    [document] = read.documents
    assert read.messages[0]["content"] == [document.part]
    read_now(read.documents)
    assert document.part == {"type": PAGES, "pages": 5}


def test_a_file_sent_as_data_counts_its_pages() -> None:
    data = "data:application/pdf;base64," + b64(pdf(50))
    parts = [
        {"type": "input_file", "filename": "report.pdf", "file_data": data},
        {"type": "input_text", "text": "Sum up."},
    ]
    read = conversation({"input": [{"role": "user", "content": parts}]})
    (message,) = read.messages
    assert message["content"][0] == {"type": PAGES, "pages": estimated_pages(data)}
    read_now(read.documents)  # when the request is budgeted
    assert message["content"][0] == {"type": PAGES, "pages": 50}
    assert count_content(message["content"], len) == 50 * PDF_PAGE_TOKENS + len("Sum up.")
    assert not read.unseen_history


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_file", "file_id": "file-1"},
        {"type": "input_file", "file_url": "https://x/y.pdf"},
    ],
    ids=["file_id", "file_url"],
)
def test_a_file_it_only_points_at_holds_room_back(part: dict[str, object]) -> None:
    read = conversation({"input": [{"role": "user", "content": [part]}]})
    assert read.messages[0]["content"] == [{"type": "file"}]
    assert read.unseen_history


@pytest.mark.parametrize(
    ("body", "unseen"),
    [
        ({"input": "hi"}, False),
        ({"input": "hi", "previous_response_id": "resp_1"}, True),
        ({"input": "hi", "conversation": "conv_1"}, True),
        ({"input": "hi", "prompt": {"id": "pmpt_1"}}, True),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, True),
        ({"input": "hi", "previous_response_id": None}, False),
    ],
)
def test_unseen_history(body: dict[str, Any], unseen: bool) -> None:
    assert conversation(body).unseen_history is unseen


@pytest.mark.parametrize(
    ("instructions", "expected"),
    [("Be brief.", "Be brief." + SEPARATOR + BLOCK), (None, BLOCK), ("", BLOCK)],
)
def test_block_goes_after_the_apps_instructions(instructions: str | None, expected: str) -> None:
    body: dict[str, Any] = {"model": "gpt-4o", "input": "hi"}
    if instructions is not None:
        body["instructions"] = instructions
    sent = RESPONSES.inject(body, RESPONSES.conversation(body), Blocks(BLOCK, SYSTEM))
    assert sent == Injected({**body, "instructions": expected}, held=True)
    assert body.get("instructions") == instructions  # the client's body untouched
    unchanged = RESPONSES.inject(body, RESPONSES.conversation(body), Blocks("", SYSTEM))
    assert unchanged == Injected(body)
    assert unchanged.body is not body


def user(content: object) -> dict[str, Any]:
    return {"role": "user", "content": content}


def text(value: str) -> dict[str, Any]:
    return {"type": "input_text", "text": value}


REPLY = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Biscuit."}],
}


@pytest.mark.parametrize(
    ("given", "expected", "message"),
    [
        # A string input stays a string: the block and a blank line in front of the text.
        ("hi", BLOCK + SEPARATOR + "hi", 0),
        ([user("hi")], [user(BLOCK + SEPARATOR + "hi")], 0),
        # Content parts: an input_text part first, the user's parts after it.
        ([user([text("hi")])], [user([text(BLOCK), text("hi")])], 0),
        # The latest user message; the items before it untouched.
        (
            [user("dog?"), REPLY, {"type": "message", **user([text("tea?")])}],
            [user("dog?"), REPLY, {"type": "message", **user([text(BLOCK), text("tea?")])}],
            2,
        ),
        # A tool output sent back: the latest user message is the one before the call.
        ([user("dog?"), CALL, OUTPUT], [user(BLOCK + SEPARATOR + "dog?"), CALL, OUTPUT], 0),
    ],
)
def test_position_turn_puts_the_block_before_the_latest_user_input(
    given: object, expected: object, message: int
) -> None:
    body: dict[str, Any] = {"model": "gpt-4o", "instructions": "Be brief.", "input": given}
    seen = RESPONSES.conversation(body)
    at = slot(seen.turns)
    assert at is not None
    sent = RESPONSES.inject(body, seen, Blocks(BLOCK, TURN, at))
    assert sent == Injected({**body, "input": expected}, held=True, message=message)
    assert body["input"] == given  # the client's body untouched


def test_position_turn_puts_earlier_blocks_back_where_they_were() -> None:
    body = {"model": "gpt-4o", "input": [user("dog?"), REPLY, user([text("tea?")])]}
    seen = RESPONSES.conversation(body)
    blocks = Blocks("NEW", TURN, Slot(2, 0), earlier=((Slot(0, 0), "OLD"),))
    sent = RESPONSES.inject(body, seen, blocks)
    assert sent.body["input"] == [
        user("OLD" + SEPARATOR + "dog?"),
        REPLY,
        user([text("NEW"), text("tea?")]),
    ]


def test_position_turn_without_a_user_message_goes_after_the_instructions() -> None:
    body = {"model": "gpt-4o", "instructions": "Be brief.", "input": [OUTPUT]}
    seen = RESPONSES.conversation(body)
    assert slot(seen.turns) is None
    sent = RESPONSES.inject(body, seen, Blocks(BLOCK, TURN, None))
    assert sent == Injected({**body, "instructions": "Be brief." + SEPARATOR + BLOCK}, held=True)


def test_the_preamble_names_the_instructions_and_the_context_pointed_at() -> None:
    one = conversation({"instructions": "a", "input": "hi", "previous_response_id": "resp_1"})
    two = conversation({"instructions": "a", "input": "hi", "previous_response_id": "resp_2"})
    other = conversation({"instructions": "b", "input": "hi", "previous_response_id": "resp_1"})
    assert len({one.preamble, two.preamble, other.preamble}) == 3
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    assert conversation({"input": "hi", "prompt": {"variables": deep}}).preamble is None


def test_shown_is_instructions_and_input() -> None:
    body = {"model": "m", "instructions": "x", "input": "hi", "tools": []}
    assert RESPONSES.shown(body) == {"instructions": "x", "input": "hi"}


WHOLE = orjson.dumps(response_object({"model": "m"}, 5))
EVENTS = response_events({"model": "m"}, 5)
STREAM = b"".join(EVENTS)
FAILED = orjson.dumps({**response_object({"model": "m"}, 5), "status": "failed"})
ERROR_EVENT = b'event: error\ndata: {"type":"error","error":{"message":"x"}}\n\n'


@pytest.mark.parametrize(
    ("answer", "text", "ok"),
    [
        (Answer(200, streamed=False, ok=True, chunks=[WHOLE]), TEXT, True),
        (Answer(200, streamed=True, ok=True, chunks=[STREAM]), TEXT, True),
        # Without response.completed: the deltas relayed so far.
        (Answer(200, streamed=True, ok=True, chunks=EVENTS[:-1]), TEXT, True),
        (Answer(200, streamed=True, ok=False, chunks=EVENTS[:6]), "Hello from ", False),
        (Answer(200, streamed=True, ok=True, chunks=[*EVENTS[:5], ERROR_EVENT]), "Hello ", False),
        (Answer(200, streamed=False, ok=True, chunks=[FAILED]), TEXT, False),
        (Answer(400, streamed=False, ok=False, chunks=[b'{"error": {}}']), "", False),
        (Answer(200, streamed=False, ok=True, chunks=[b"not json"]), "", True),
    ],
)
def test_read_completion(answer: Answer, text: str, ok: bool) -> None:
    done = RESPONSES.read_completion(answer)
    assert (done.status, done.streamed) == (answer.status, answer.streamed)
    assert (done.text, done.ok) == (text, ok)


def test_the_completed_event_wins_over_the_deltas() -> None:
    completed = orjson.loads(EVENTS[-1].split(b"data: ", 1)[1])
    completed["response"]["output"][0]["content"][0]["text"] = "whole text"
    event = b"event: response.completed\ndata: " + orjson.dumps(completed) + b"\n\n"
    answer = Answer(200, streamed=True, ok=True, chunks=[*EVENTS[:-1], event])
    assert RESPONSES.read_completion(answer).text == "whole text"


def test_a_function_call_answer_has_no_text() -> None:
    payload = {"model": "m", "tools": [{"type": "function", "name": "f"}]}
    for chunks, streamed in (
        ([orjson.dumps(response_object(payload, 3))], False),
        (response_events(payload, 3), True),
    ):
        done = RESPONSES.read_completion(Answer(200, streamed=streamed, ok=True, chunks=chunks))
        assert (done.text, done.ok) == ("", True)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_compressed_answer_is_read_decoded(streamed: bool) -> None:
    body = StackedEncoder(["gzip"]).whole(STREAM if streamed else WHOLE)
    headers = [(b"Content-Encoding", b"gzip")]
    answer = Answer(200, streamed=streamed, ok=True, chunks=[body], headers=headers)
    assert RESPONSES.read_completion(answer).text == TEXT
