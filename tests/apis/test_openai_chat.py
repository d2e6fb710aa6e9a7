"""The chat completions adapter: writing blocks (position ``turn`` and ``system``, never in front
of a cache breakpoint) and reading answers (as the relay hands them over) into a ``Completion``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.apis.adapter import Blocks, Injected
from proxy.apis.answer import Answer
from proxy.apis.openai_chat import OPENAI_CHAT, assistant_text, read_completion
from proxy.context.documents import PAGES, estimated_pages
from proxy.context.position import Slot, slot
from proxy.defaults import Position
from tests.fakes.pdfs import b64, pdf, read_now
from tests.fakes.upstream import StackedEncoder, completion, stream_events

TEXT = "Hello from the fake upstream"
SYSTEM = {"role": "system", "content": "Be terse."}


@pytest.mark.parametrize("chunks", [1, 3, 8])
def test_stream_text_is_the_concatenated_deltas_of_choice_zero(chunks: int) -> None:
    raw = b"".join(stream_events("m", 2, chunks, tools=False, usage=True))
    expected = completion("m", 1, chunks, tools=False)["choices"][0]["message"]["content"]
    assert assistant_text(raw, streamed=True, body=None) == expected


def test_whole_body_text_and_tool_calls() -> None:
    body = completion("m", 1, 5, tools=False)
    assert assistant_text(b"", streamed=False, body=body) == "Hello from the fake upstream"
    assert assistant_text(b"", streamed=False, body=completion("m", 1, 4, tools=True)) == ""
    assert assistant_text(b"", streamed=False, body=None) == ""


def test_a_file_part_is_billed_by_its_pages_and_forwarded_as_sent() -> None:
    data = "data:application/pdf;base64," + b64(pdf(50, object_streams=True))
    part = {"type": "file", "file": {"filename": "r.pdf", "file_data": data}}
    messages = [SYSTEM, {"role": "user", "content": [part, {"type": "text", "text": "Sum up."}]}]
    body = {"model": "gpt-4o", "messages": messages}
    read = OPENAI_CHAT.conversation(body)
    billed = read.billed["messages"]
    assert isinstance(billed, list)
    assert billed[1]["content"][0] == {"type": PAGES, "pages": estimated_pages(data)}
    read_now(read.documents)  # when the request is budgeted
    assert billed[1]["content"][0] == {"type": PAGES, "pages": 50}
    assert read.messages == messages  # the turns a block goes into keep the file as sent
    assert read.turns == messages
    assert not read.unseen_history
    plain = {"model": "gpt-4o", "messages": [SYSTEM]}
    assert OPENAI_CHAT.conversation(plain).billed is plain  # no file: the body, no copy
    by_id = {"type": "file", "file": {"file_id": "file-1"}}
    pointed = OPENAI_CHAT.conversation({"model": "gpt-4o", "messages": [user_with(by_id)]})
    assert pointed.unseen_history


def user_with(part: dict[str, object]) -> dict[str, object]:
    return {"role": "user", "content": [part]}


WHOLE = orjson.dumps(completion("m", 1, 5, tools=False))
EVENTS = stream_events("m", 1, 5, tools=False, usage=True)
STREAM = b"".join(EVENTS)


@pytest.mark.parametrize(
    ("answer", "text", "has_body"),
    [
        (Answer(200, streamed=False, ok=True, chunks=[WHOLE]), TEXT, True),
        (Answer(200, streamed=True, ok=True, chunks=[STREAM]), TEXT, False),
        # A broken stream still hands over the text relayed before the break.
        (Answer(200, streamed=True, ok=False, chunks=EVENTS[:3]), "Hello from ", False),
        # A non-2xx answer (an upstream error body) is no completion: no body, no text.
        (Answer(400, streamed=False, ok=False, chunks=[b'{"error": {}}']), "", False),
        (Answer(200, streamed=False, ok=True, chunks=[b"[1, 2]"]), "", False),
        (Answer(200, streamed=False, ok=True, chunks=[b"not json"]), "", False),
        (Answer(502, streamed=False, ok=False, chunks=[]), "", False),
    ],
)
def test_read_completion(answer: Answer, text: str, has_body: bool) -> None:
    done = read_completion(answer)
    assert (done.status, done.streamed, done.ok) == (answer.status, answer.streamed, answer.ok)
    assert done.text == text
    assert (done.body is not None) == has_body


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("coding", ["gzip", "br, zstd"])
def test_a_compressed_answer_is_read_decoded(streamed: bool, coding: str) -> None:
    coder = StackedEncoder([c.strip() for c in coding.split(",")])
    body = coder.whole(STREAM if streamed else WHOLE)
    headers = [(b"Content-Encoding", coding.encode())]
    answer = Answer(200, streamed=streamed, ok=True, chunks=[body], headers=headers)
    assert read_completion(answer).text == TEXT


def test_an_undecodable_answer_reads_as_no_text() -> None:
    headers = [(b"content-encoding", b"gzip")]
    done = read_completion(Answer(200, streamed=False, ok=True, chunks=[WHOLE], headers=headers))
    assert (done.text, done.body) == ("", None)


@pytest.mark.parametrize(
    ("position", "messages", "expected"),
    [
        # turn: in front of the latest user message's text; the messages before it untouched.
        (
            "turn",
            [SYSTEM, {"role": "user", "content": "a"}],
            [SYSTEM, {"role": "user", "content": "B\n\na"}],
        ),
        (
            "turn",
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "r"},
                {"role": "user", "content": [{"type": "text", "text": "q"}]},
            ],
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "r"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "B"}, {"type": "text", "text": "q"}],
                },
            ],
        ),
        # system: appended to the system message.
        (
            "system",
            [SYSTEM, {"role": "user", "content": "a"}],
            [{**SYSTEM, "content": "Be terse.\n\nB"}, {"role": "user", "content": "a"}],
        ),
    ],
)
def test_blocks_in_the_messages(
    position: Position, messages: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    body: dict[str, object] = {"model": "gpt-4o", "messages": messages}
    conversation = OPENAI_CHAT.conversation(body)
    assert conversation.turns == messages
    at = slot(conversation.turns) if position == "turn" else None
    injected = OPENAI_CHAT.inject(body, conversation, Blocks("B", position, at))
    assert injected.body == {**body, "messages": expected}
    assert injected.held
    assert body["messages"] is messages  # the client's body untouched


def test_earlier_blocks_go_back_at_their_slots() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "r"},
        {"role": "user", "content": "q"},
    ]
    body: dict[str, object] = {"model": "gpt-4o", "messages": messages}
    blocks = Blocks("NEW", "turn", Slot(2, 0), earlier=((Slot(0, 0), "OLD"),))
    injected = OPENAI_CHAT.inject(body, OPENAI_CHAT.conversation(body), blocks)
    assert injected == Injected(
        {
            **body,
            "messages": [
                {"role": "user", "content": "OLD\n\na"},
                messages[1],
                {"role": "user", "content": "NEW\n\nq"},
            ],
        },
        held=True,
        message=2,
    )


CC = {"type": "ephemeral"}
CACHED_SYSTEM = {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": CC}]}
MARKED_USER = {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": CC}]}


@pytest.mark.parametrize(
    ("position", "messages", "where"),
    [
        ("turn", [SYSTEM], 0),  # no user turn: the system prompt, as position system
        ("turn", [{"role": "user", "content": 7}], 0),  # no user turn that takes text
        ("turn", [CACHED_SYSTEM], 0),  # behind the system prompt's own breakpoint: allowed
        (
            "turn",
            [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "r", "cache_control": CC}],
                },
            ],
            None,
        ),
        ("system", [SYSTEM, {"role": "user", "content": "a"}], 0),
        ("system", [CACHED_SYSTEM, {"role": "user", "content": "a"}], 0),
        # The system prompt would sit in front of a breakpoint: the turn's slot instead.
        ("system", [SYSTEM, MARKED_USER], 1),
        ("system", [{**SYSTEM, "cache_control": CC}, {"role": "user", "content": "a"}], 1),
        ("system", [{"role": "user", "content": 7}, MARKED_USER], 1),
    ],
)
def test_the_block_never_sits_in_front_of_a_breakpoint(
    position: Position, messages: list[dict[str, Any]], where: int | None
) -> None:
    body: dict[str, object] = {"model": "gpt-4o", "messages": messages}
    conversation = OPENAI_CHAT.conversation(body)
    at = slot(conversation.turns) if position == "turn" else None  # as the pipeline finds it
    injected = OPENAI_CHAT.inject(body, conversation, Blocks("BLOCK", position, at))
    result = injected.body["messages"]
    assert (injected.message if injected.held else None) == where
    assert ("BLOCK" in orjson.dumps(result).decode()) == (where is not None)
    if where is not None:
        assert "BLOCK" in orjson.dumps(result[where]).decode()
