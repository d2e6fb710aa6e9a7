"""A PDF near the model's window, end to end with the official SDKs (adr/0143).

The provider reads a PDF page by page (its text and an image of each page, up to
``PDF_PAGE_TOKENS`` a page), so a request whose PDF leaves ``SLACK`` tokens of the window
passes with memory off. With memory on it must still pass: the block, if any, fits in the
slack. Counted as the old flat 1,000-token guess, the PDF looked small and a full block went
in past the window. A small PDF far from the window still gets its memories.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.context import documents
from proxy.context.billing import FILE_PART_TOKENS
from proxy.context.documents import Steps
from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from proxy.defaults import PDF_PAGE_TOKENS
from proxy.tokenizer import count_tokens
from tests.e2e.conftest import API_KEY, MemoryProxy
from tests.e2e.test_messages_memory import raw_tokens
from tests.fakes.pdfs import b64, pdf

FACTS = [
    "The user's dog is called Biscuit and is a beagle.",
    "The user lives in Lisbon and works as a marine biologist.",
    "The user is allergic to peanuts and carries an epinephrine pen.",
    "The user prefers answers in metric units and short sentences.",
]
QUESTION = "What is my dog called, and where do I live?"
MAX_TOKENS = 256
SLACK = 20  # tokens of the window the request leaves: less than any block
CLAUDE, CLAUDE_WINDOW = "claude-sonnet-4-5", 200_000
GPT, GPT_WINDOW = "gpt-4o-mini", 128_000

# The SDKs warn about model names they deprecate; not what is tested.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def filler(tokens: int) -> str:
    """A text of ``tokens`` tokens in o200k and in Claude's encoding alike (" a" is one)."""
    return " a" * tokens


def texts(value: object) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [text for item in items for text in texts(item)]


def block_tokens(body: dict[str, Any], count: Callable[[str], int]) -> int:
    """The tokens of the block the upstream got (0 without one)."""
    for text in texts(body):
        if BLOCK_OPEN in text:
            start = text.index(BLOCK_OPEN)
            return count(text[start : text.index(BLOCK_CLOSE, start) + len(BLOCK_CLOSE)])
    return 0


def forwarded(proxy: MemoryProxy) -> dict[str, Any]:
    body: dict[str, Any] = proxy.fake.fake.requests[-1].json()
    return body


def o200k(text: str) -> int:
    return count_tokens(text, "o200k_base")


def messages_request(pages: int, near: bool) -> dict[str, Any]:
    """A Messages API request with a PDF of ``pages``; ``near``: it leaves ``SLACK`` tokens."""
    source = {"type": "base64", "media_type": "application/pdf", "data": b64(pdf(pages))}
    room = CLAUDE_WINDOW - MAX_TOKENS - pages * PDF_PAGE_TOKENS - raw_tokens(QUESTION) - SLACK
    content = [{"type": "document", "source": source}, {"type": "text", "text": QUESTION}]
    return {
        "model": CLAUDE,
        "max_tokens": MAX_TOKENS,
        "system": filler(room) if near else "You are terse.",
        "messages": [{"role": "user", "content": content}],
    }


@pytest.mark.parametrize(("pages", "near"), [(50, True), (3, False)], ids=["near", "far"])
def test_messages_api_pdf(memproxy: MemoryProxy, pages: int, near: bool) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    sdk = anthropic.Anthropic(base_url=memproxy.server.root, api_key=API_KEY, max_retries=0)
    raw = sdk.messages.with_raw_response.create(**messages_request(pages, near))
    block = block_tokens(forwarded(memproxy), raw_tokens)
    if near:
        assert block <= SLACK
        assert raw.headers["x-memory-status"] in ("injected", "empty")
    else:
        assert raw.headers["x-memory-status"] == "injected"
        assert "Biscuit" in str(forwarded(memproxy)["messages"])


def gpt_room(pages: int) -> int:
    return GPT_WINDOW - MAX_TOKENS - pages * PDF_PAGE_TOKENS - o200k(QUESTION) - SLACK


@pytest.mark.parametrize(("pages", "near"), [(30, True), (3, False)], ids=["near", "far"])
def test_responses_api_pdf(memproxy: MemoryProxy, pages: int, near: bool) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    sdk = openai.OpenAI(base_url=memproxy.url, api_key=API_KEY, max_retries=0)
    data = "data:application/pdf;base64," + b64(pdf(pages, object_streams=True))
    content: list[Any] = [
        {"type": "input_file", "filename": "report.pdf", "file_data": data},
        {"type": "input_text", "text": QUESTION},
    ]
    raw = sdk.responses.with_raw_response.create(
        model=GPT,
        max_output_tokens=MAX_TOKENS,
        instructions=filler(gpt_room(pages)) if near else "You are terse.",
        input=[{"role": "user", "content": content}],
    )
    block = block_tokens(forwarded(memproxy), o200k)
    if near:
        assert block <= SLACK
    else:
        assert raw.headers["x-memory-status"] == "injected"
        assert "Biscuit" in str(forwarded(memproxy)["input"])


@pytest.mark.parametrize(("pages", "near"), [(30, True), (3, False)], ids=["near", "far"])
def test_chat_completions_pdf(memproxy: MemoryProxy, pages: int, near: bool) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    sdk = openai.OpenAI(base_url=memproxy.url, api_key=API_KEY, max_retries=0)
    data = "data:application/pdf;base64," + b64(pdf(pages))
    content: list[Any] = [
        {"type": "file", "file": {"filename": "report.pdf", "file_data": data}},
        {"type": "text", "text": QUESTION},
    ]
    system = filler(gpt_room(pages)) if near else "You are terse."
    raw = sdk.chat.completions.with_raw_response.create(
        model=GPT,
        max_completion_tokens=MAX_TOKENS,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": content}],
    )
    sent = forwarded(memproxy)
    assert sent["messages"][1]["content"][-2:] == content  # the file goes as sent
    if near:
        assert block_tokens(sent, o200k) <= SLACK
    else:
        assert raw.headers["x-memory-status"] == "injected"
        assert "Biscuit" in sent["messages"][1]["content"][0]["text"]


def test_a_file_by_id_holds_half_the_window_back(memproxy: MemoryProxy) -> None:
    # Its bytes are not in the request: the budget holds room back for it, as for any context
    # memproxy cannot see (proxy/pipeline/unseen.py), and explain says so.
    def explain(part: dict[str, Any]) -> dict[str, Any]:
        content = [part, {"type": "text", "text": QUESTION}]
        body = {"model": GPT, "messages": [{"role": "user", "content": content}]}
        headers = {"Authorization": f"Bearer {API_KEY}", "X-Memory-Mode": "explain"}
        reply = httpx.post(f"{memproxy.url}/chat/completions", json=body, headers=headers)
        assert reply.status_code == 200
        document: dict[str, Any] = reply.json()
        return document

    data = "data:application/pdf;base64," + b64(pdf(1))
    sent = explain({"type": "file", "file": {"file_data": data}})
    pointed = explain({"type": "file", "file": {"file_id": "file-abc"}})
    held = pointed["budget"]["available_tokens"]
    # One page sent, or the guess for one pointed at, plus half the window held back.
    expected = sent["budget"]["available_tokens"] - GPT_WINDOW // 2
    assert held == expected + PDF_PAGE_TOKENS - FILE_PART_TOKENS
    assert any("file by id or URL" in note for note in pointed["notes"])
    assert "notes" not in sent


def slow_decoding(data: str, start: int, end: int, step: int) -> Steps[object]:
    """A decoder slower than any deadline: it never ends."""
    while True:
        time.sleep(0.001)
        yield


def test_a_pdf_is_read_when_budgeted_and_goes_without_memories_past_its_time(
    memproxy: MemoryProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # adr/0152. 3 pages and ~1.2 MB after them: read, 9,000 tokens leave room for memories;
    # not read in time, its size's estimate (~590 pages) leaves none, and the request passes.
    memproxy.backends.write(memproxy.tenant, FACTS)
    sdk = openai.OpenAI(base_url=memproxy.url, api_key=API_KEY, max_retries=0)
    data = "data:application/pdf;base64," + b64(pdf(3) + b"%" + b"x" * 1_200_000 + b"\n")
    content: list[Any] = [
        {"type": "file", "file": {"filename": "report.pdf", "file_data": data}},
        {"type": "text", "text": QUESTION},
    ]

    def ask(**headers: str) -> Any:
        return sdk.chat.completions.with_raw_response.create(
            model=GPT,
            max_completion_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": content}],
            extra_headers=headers,
        )

    decoded: list[int] = []
    real = documents.decoding

    def spy(text: str, start: int, end: int, step: int) -> Steps[object]:
        decoded.append(end - start)
        return real(text, start, end, step)

    monkeypatch.setattr(documents, "decoding", spy)
    off = ask(**{"X-Memory-Mode": "off"})
    assert off.headers["x-memory-status"] == "off"
    assert decoded == []  # memory off reads no document
    read = ask()
    assert read.headers["x-memory-status"] == "injected"
    assert len(decoded) == 1
    monkeypatch.setattr(documents, "decoding", slow_decoding)
    late = ask()
    assert late.status_code == 200
    assert late.headers["x-memory-status"] == "degraded"  # pages unread: no memories
    assert late.headers["x-memory-injected"] == "0"
    assert forwarded(memproxy)["messages"][0]["content"] == content  # as sent
