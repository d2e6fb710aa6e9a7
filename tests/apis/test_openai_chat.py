"""Reading OpenAI chat answers (as the relay hands them over) into a ``Completion``."""

from __future__ import annotations

import orjson
import pytest

from proxy.apis.answer import Answer
from proxy.apis.openai_chat import assistant_text, read_completion
from tests.fakes.upstream import StackedEncoder, completion, stream_events

TEXT = "Hello from the fake upstream"


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
