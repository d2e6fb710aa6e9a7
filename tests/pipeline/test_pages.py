"""Reading documents' pages at the edge (``proxy/pipeline/pages.py``, adr/0152): only when the
request is budgeted, a slice at a time; a request with one not read in time goes without
memories."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.context import documents
from proxy.context.documents import PAGES, Steps, estimated_pages
from proxy.pipeline.pages import read_documents
from proxy.pipeline.pipeline import PAGES_UNREAD
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.pdfs import b64, pdf
from tests.pipeline.test_pipeline import DIMS, TENANT, biscuit_store, build, degraded_by

QUESTION = "what is my dog called?"


def with_pdf(data: str) -> dict[str, Any]:
    """A chat body whose user message carries ``data`` as a file."""
    content = [
        {"type": "file", "file": {"filename": "a.pdf", "file_data": data}},
        {"type": "text", "text": QUESTION},
    ]
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}


def with_pdfs(datas: list[str]) -> dict[str, Any]:
    """A chat body whose user message carries each of ``datas`` as a file."""
    files = [{"type": "file", "file": {"filename": "a.pdf", "file_data": d}} for d in datas]
    content = [*files, {"type": "text", "text": QUESTION}]
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}


async def test_pages_are_read_into_the_billed_parts() -> None:
    conversation = OPENAI_CHAT.conversation(with_pdf(b64(pdf(50, object_streams=True))))
    [document] = conversation.documents
    assert document.part["pages"] == estimated_pages(document.data)  # until read
    assert await read_documents(conversation.documents, until=float("inf"))
    assert conversation.billed["messages"][0]["content"][0] == {"type": PAGES, "pages": 50}  # type: ignore[index]


async def test_the_loop_serves_others_between_slices() -> None:
    # Each step pauses; past a slice, the reader lets other tasks run before reading on.
    order: list[str] = []

    def reader(data: str) -> Steps[int]:
        for _ in range(3):
            order.append("step")
            yield
        return 7

    async def other() -> None:
        for _ in range(3):
            order.append("other")
            await asyncio.sleep(0)

    conversation = OPENAI_CHAT.conversation(with_pdf(b64(pdf(1))))
    done, _ = await asyncio.gather(
        read_documents(conversation.documents, float("inf"), slice_s=0.0, reader=reader), other()
    )
    assert done
    assert conversation.documents[0].part["pages"] == 7
    assert order.index("other") < order.index("step", 1)  # served before the second step


async def test_the_loop_serves_others_between_documents() -> None:
    # Documents each read within a slice share it: past it, others run before the next one
    # (each document on a clock of its own, a request of many small ones held the loop).
    order: list[str] = []

    def reader(data: str) -> Steps[int]:
        order.append("document")
        return 1
        yield  # (a generator that ends at its first step)

    async def other() -> None:
        for _ in range(3):
            order.append("other")
            await asyncio.sleep(0)

    conversation = OPENAI_CHAT.conversation(with_pdfs([b64(pdf(1))] * 3))
    done, _ = await asyncio.gather(
        read_documents(conversation.documents, float("inf"), slice_s=0.0, reader=reader), other()
    )
    assert done
    assert order.index("other") < order.index("document", 1)


async def test_the_smallest_documents_are_read_first() -> None:
    sizes: list[int] = []

    def reader(data: str) -> Steps[int]:
        sizes.append(len(data))
        return 1
        yield

    conversation = OPENAI_CHAT.conversation(with_pdfs([b64(pdf(40)), b64(pdf(1)), b64(pdf(9))]))
    assert await read_documents(conversation.documents, float("inf"), reader=reader)
    assert sizes == sorted(sizes)


async def test_past_the_time_given_a_document_keeps_its_estimate() -> None:
    closed: list[bool] = []

    def endless(data: str) -> Steps[int]:  # (not quite: it ends, so no test can hang on it)
        try:
            for _ in range(100_000):
                yield
        finally:
            closed.append(True)
        return 99

    conversation = OPENAI_CHAT.conversation(with_pdf(b64(pdf(3))))
    until = asyncio.get_running_loop().time()
    read = await read_documents(conversation.documents, until, slice_s=0.0, reader=endless)
    assert read is False
    [document] = conversation.documents
    assert document.part["pages"] == estimated_pages(document.data)
    assert closed == [True]  # the unfinished read is let go


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The base64 characters of every document read (a spy on the one decoder)."""
    seen: list[int] = []
    real = documents.decoding

    def spy(data: str, start: int, end: int, step: int) -> Steps[object]:
        seen.append(end - start)
        return real(data, start, end, step)

    monkeypatch.setattr(documents, "decoding", spy)
    return seen


async def test_memory_off_reads_no_document(decoded: list[int]) -> None:
    data = b64(pdf(20))
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    off = await pipeline.prepare(TENANT, {"x-memory-mode": "off"}, with_pdf(data), OPENAI_CHAT)
    assert off.response_headers["X-Memory-Status"] == "off"
    no_messages = {"model": "gpt-4o", "messages": [], "x": with_pdf(data)}
    await pipeline.prepare(TENANT, {}, no_messages, OPENAI_CHAT)
    assert decoded == []  # nothing budgeted, nothing read
    on = await pipeline.prepare(TENANT, {}, with_pdf(data), OPENAI_CHAT)
    assert on.response_headers["X-Memory-Status"] == "injected"
    assert decoded == [len(data)]  # read once, when budgeted


def slow_decoding(data: str, start: int, end: int, step: int) -> Steps[object]:
    """A decoder far slower than any deadline: it never ends."""
    while True:
        time.sleep(0.001)
        yield


# 3 pages and ~1.2 MB after them: its size's estimate (~590 pages) is past the window. (Not
# random bytes: their base64 may read as a number the body could not be re-encoded with.)
SCANS = b64(pdf(3) + b"%" + b"x" * 1_200_000 + b"\n")


async def test_a_document_not_read_in_time_goes_without_memories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    read = await pipeline.prepare(TENANT, {}, with_pdf(SCANS), OPENAI_CHAT)
    assert read.response_headers["X-Memory-Status"] == "injected"  # 3 pages leave room
    monkeypatch.setattr(documents, "decoding", slow_decoding)
    request = with_pdf(SCANS)
    late = await pipeline.prepare(TENANT, {}, request, OPENAI_CHAT)
    # The request goes on as sent, without memories, and says why.
    assert late.body is request
    assert late.response_headers["X-Memory-Status"] == "degraded"
    assert late.response_headers["X-Memory-Injected"] == "0"
    assert degraded_by(pipeline, PAGES_UNREAD) == 1


async def test_a_dense_document_not_read_in_time_gets_no_memories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 42 text-light pages (126,000 tokens as read) in a few KB: its size's estimate is a few
    # pages, so a budget by it would leave room gpt-4o's 128k window does not have.
    dense = b64(pdf(42))
    assert estimated_pages(dense) < 42
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS))
    monkeypatch.setattr(documents, "decoding", slow_decoding)
    late = await pipeline.prepare(TENANT, {}, with_pdf(dense), OPENAI_CHAT)
    assert late.response_headers["X-Memory-Status"] == "degraded"
    assert late.response_headers["X-Memory-Injected"] == "0"


async def test_a_count_by_an_estimate_is_never_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[tuple[str, int, int]] = []
    pipeline = build(biscuit_store(), FakeEmbedder(DIMS), lookups=lookups)
    explain = {"x-memory-mode": "explain"}  # counts exactly, with the count cache
    await pipeline.prepare(TENANT, explain, with_pdf(b64(pdf(3))), OPENAI_CHAT)
    assert any(kind == "tokens" for kind, _, _ in lookups)
    lookups.clear()
    monkeypatch.setattr(documents, "decoding", slow_decoding)
    await pipeline.prepare(TENANT, explain, with_pdf(b64(pdf(3))), OPENAI_CHAT)
    assert not any(kind == "tokens" for kind, _, _ in lookups)
