"""The answer the relay hands over, and the hook that reads it for the pipeline."""

from __future__ import annotations

import gzip

import pytest

from proxy.apis.answer import Answer, completion_hook
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
