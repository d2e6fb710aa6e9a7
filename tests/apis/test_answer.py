"""The answer the relay hands over, and the hook that reads it for the pipeline."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable

import pytest

from proxy.apis.answer import DECODE_INLINE_MAX_BYTES, Answer, completion_hook
from proxy.pipeline.contract import Completion


def test_header_is_found_case_insensitively_and_decoded_body_follows_it() -> None:
    answer = Answer(
        200,
        streamed=False,
        ok=True,
        chunks=[gzip.compress(b"abc")],
        headers=[(b"Content-Encoding", b"gzip")],
    )
    assert answer.header(b"content-encoding") == b"gzip"
    assert answer.header(b"content-type") is None
    assert answer.decoded() == b"abc"
    assert Answer(200, streamed=False, ok=True, chunks=[b"abc"]).decoded() == b"abc"


def read(answer: Answer) -> Completion:
    return Completion(answer.status, answer.streamed, answer.ok, answer.body.decode())


async def test_the_hook_hands_the_read_completion_on() -> None:
    got: list[Completion] = []

    async def on_complete(completion: Completion) -> None:
        got.append(completion)

    await completion_hook(read, on_complete)(Answer(201, streamed=True, ok=True, chunks=[b"hi"]))
    assert got == [Completion(201, True, True, "hi")]


def explode(answer: Answer) -> Completion:
    raise ValueError("unreadable")


@pytest.mark.parametrize("where", ["reader", "on_complete"])
async def test_a_failing_reader_or_hook_is_logged_never_raised(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def on_complete(completion: Completion) -> None:
        raise RuntimeError("hook failed")

    hook = completion_hook(explode if where == "reader" else read, on_complete)
    await hook(Answer(200, streamed=False, ok=True, chunks=[b"x"]))
    assert "on_complete hook failed" in caplog.text


STREAM = b'data: {"a": 1}\n\ndata: [DONE]\n\n'


async def test_the_hook_hands_the_reader_a_streams_events_parsed_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Parsed a slice at a time on the loop (proxy.sse.read_events), not by the reader at once.
    seen: list[Answer] = []

    def reader(answer: Answer) -> Completion:
        seen.append(answer)
        return read(answer)

    async def on_complete(completion: Completion) -> None:
        pass

    def refuse(raw: bytes) -> None:
        raise AssertionError("parsed in one go")

    monkeypatch.setattr("proxy.apis.answer.iter_events", refuse)
    await completion_hook(reader, on_complete)(Answer(200, streamed=True, ok=True, chunks=[STREAM]))
    assert seen[0].events == [{"a": 1}]
    assert seen[0].stream_events() == [{"a": 1}]


async def test_a_large_compressed_stream_is_decoded_on_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threaded: list[str] = []
    real = asyncio.to_thread

    async def spy(func: Callable[[], bytes]) -> bytes:
        threaded.append(func.__name__)
        return await real(func)

    monkeypatch.setattr("proxy.apis.answer.asyncio.to_thread", spy)
    headers = [(b"content-encoding", b"gzip")]
    small = Answer(200, streamed=True, ok=True, chunks=[gzip.compress(STREAM)], headers=headers)
    assert (await small.parsed_ahead()).events == [{"a": 1}]
    assert threaded == []
    many = STREAM.replace(b"data: [DONE]\n\n", b"") * 20_000 + b"data: [DONE]\n\n"
    big = gzip.compress(many, compresslevel=0)  # stored: larger than the inline limit
    assert len(big) > DECODE_INLINE_MAX_BYTES
    answer = Answer(200, streamed=True, ok=True, chunks=[big], headers=headers)
    assert (await answer.parsed_ahead()).events == [{"a": 1}] * 20_000
    assert threaded == ["decoded"]


def test_a_whole_answer_is_not_parsed_ahead() -> None:
    answer = Answer(200, streamed=False, ok=True, chunks=[b"{}"])
    assert asyncio.run(answer.parsed_ahead()) is answer
