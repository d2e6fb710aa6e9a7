"""What the relay hands over once a response is done, and the hook that reads it.

``Answer`` is the upstream's answer exactly as the client got it (still compressed if it was);
an API module's reader (``CompletionReader``) turns it into a ``Completion``. Reading runs
after the client has its answer, as background work, never on the hot path; still on the event
loop, so ``completion_hook`` first parses a stream's events a slice at a time
(``proxy.sse.read_events``) and decodes a large compressed body on a worker thread: a long
streamed answer read in one go held the loop for tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.content_encoding import DecodeError, decode_body
from proxy.pipeline.contract import Completion
from proxy.sse import iter_events, read_events
from proxy.upstream import first_header

LOGGER = logging.getLogger("memproxy.relay")
CONTENT_ENCODING = b"content-encoding"
# A compressed answer larger than this is decoded on a worker thread (zlib, brotli and zstd let
# go of the GIL while they work): ~1 ms a 500 kB stream on the loop.
DECODE_INLINE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Answer:
    """One relayed exchange: status, the upstream's headers and body bytes as relayed.

    ``ok`` is False when the upstream failed, timed out, answered non-2xx, or the client left;
    ``chunks`` then hold what was relayed before that (none if the upstream never answered).
    The chunks are joined by whoever reads them (in the background, not in the request).
    """

    status: int
    streamed: bool
    ok: bool
    chunks: Sequence[bytes]
    headers: Sequence[tuple[bytes, bytes]] = ()
    # A stream's events parsed ahead (``completion_hook``); ``None``: parsed when read.
    events: Sequence[Mapping[str, Any]] | None = None

    @property
    def body(self) -> bytes:
        """The body bytes as relayed (compressed if the upstream compressed them)."""
        return b"".join(self.chunks)

    def header(self, name: bytes) -> bytes | None:
        """The first upstream header named ``name`` (lower-case), or ``None``."""
        return first_header(self.headers, name)

    def decoded(self) -> bytes:
        """The body with its ``Content-Encoding`` undone; empty if it cannot be.

        The client got the bytes untouched either way; a reader gets no text rather than
        garbage parsed as text.
        """
        try:
            return decode_body(self.body, self.header(CONTENT_ENCODING))
        except DecodeError as exc:
            LOGGER.warning("upstream answer not readable for the completion hook: %s", exc)
            return b""

    def stream_events(self) -> Sequence[Mapping[str, Any]]:
        """A stream's JSON events: those parsed ahead, else the decoded body's."""
        return self.events if self.events is not None else iter_events(self.decoded())

    async def parsed_ahead(self) -> Answer:
        """This answer with its stream's events parsed (the loop let run between slices); a
        whole answer as it is."""
        if not self.streamed or self.events is not None:
            return self
        body_bytes = sum(len(chunk) for chunk in self.chunks)
        if self.header(CONTENT_ENCODING) and body_bytes > DECODE_INLINE_MAX_BYTES:
            raw = await asyncio.to_thread(self.decoded)
        else:
            raw = self.decoded()
        return dataclasses.replace(self, events=await read_events(raw))


AnswerHook = Callable[[Answer], Coroutine[Any, Any, None]]  # run as a task (Services.spawn)
CompletionReader = Callable[[Answer], Completion]
# An API's reading of a whole answer body / of a stream's events: its text, and whether the
# answer failed although its HTTP status says success.
WholeText = Callable[[Mapping[str, Any]], tuple[str, bool]]
StreamText = Callable[[Sequence[Mapping[str, Any]]], tuple[str, bool]]


def read_answer(answer: Answer, whole: WholeText, stream: StreamText) -> Completion:
    """The ``Completion`` of a relayed answer: a whole body parsed (when the exchange went
    well) and read by ``whole``, or a stream's events read by ``stream``."""
    if not answer.streamed:
        body = parsed_body(answer.decoded()) if answer.ok else None
        text, failed = whole(body) if body is not None else ("", False)
        return Completion(answer.status, False, answer.ok and not failed, text, body)
    text, failed = stream(answer.stream_events())
    return Completion(answer.status, True, answer.ok and not failed, text)


def parsed_body(raw: bytes) -> dict[str, Any] | None:
    """A whole JSON answer as an object, or ``None`` when it is not one."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def completion_hook(
    read: CompletionReader, on_complete: Callable[[Completion], Awaitable[None]]
) -> AnswerHook:
    """An answer hook that reads the answer with ``read`` and hands it to ``on_complete``.

    Never raises: the exchange is over, a failure here is only logged.
    """

    async def hook(answer: Answer) -> None:
        try:
            await on_complete(read(await answer.parsed_ahead()))
        except Exception:
            LOGGER.exception("on_complete hook failed")

    return hook
