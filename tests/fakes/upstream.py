"""A fake OpenAI upstream for tests and benchmarks (test code; never in the request path).

Built on aiohttp's server: it is fast, and it can drop a connection mid-stream for real.

Behaviour is set per server (``FakeConfig``) and may be overridden per request with headers
(which memproxy forwards untouched):

| header | effect |
|---|---|
| ``X-Fake-Status: 429`` | answer with that status and an OpenAI-shaped error body |
| ``X-Fake-Retry-After: 7`` | add ``Retry-After`` to an error answer |
| ``X-Fake-Latency-Ms: 50`` | wait before the response headers |
| ``X-Fake-Chunks: 5`` / ``X-Fake-Interval-Ms: 20`` | content chunks of a stream, gap between them |
| ``X-Fake-Reset-After: 2`` | drop the connection after that many content chunks |
| ``X-Fake-Reset-Rst: 1`` | with ``Reset-After``: abort with a TCP RST instead of a FIN |
| ``X-Fake-First-Byte-Ms: 500`` | stream: send the headers, then wait before the first event |
| ``X-Fake-No-Finish: 1`` | stream: leave out the ``finish_reason`` chunk (and the usage chunk) |
| ``X-Fake-No-Done: 1`` | stream: leave out ``data: [DONE]``; the body still ends cleanly |
| ``X-Fake-Encoding: br`` | ``br``, ``zstd``, ``deflate``, ``gzip``, or a stack (``gzip, br``) |

Like api.openai.com, answers (JSON, errors and SSE) are compressed when the request's
``Accept-Encoding`` allows it: ``gzip`` by default, with ``Content-Encoding`` and
``Vary: Accept-Encoding``. ``X-Fake-Encoding`` picks other codings, applied in order, each only
if ``Accept-Encoding`` allows it (else the answer goes uncompressed). A stream is compressed
event by event, each flushed as it is sent, so it still arrives as it is produced.
``FakeConfig.compress=False`` (``--no-compress``) turns this off.

``POST /v1/responses`` answers as the Responses API does: a response object (echoing the
request's ``instructions``, ``tools``, ...), or with ``stream`` its typed events (an ``event:``
line each, ``sequence_number`` in order, ``response.completed`` last, no ``[DONE]``);
``X-Fake-No-Finish`` leaves out ``response.completed``. ``POST /v1/messages`` answers as
Anthropic's Messages API does: a message object, or with ``stream`` its named events
(``message_start``, ``content_block_start``, ``ping``, ``content_block_delta``,
``content_block_stop``, ``message_delta``, ``message_stop``), a ``request-id`` header, errors
in Anthropic's shape; ``X-Fake-Stream-Error: overloaded_error`` ends a stream with that error
event after the first delta; ``POST /v1/messages/count_tokens`` answers ``input_tokens``.
A chat request with ``tools`` answers with a tool call; ``n`` gives that many choices;
``stream_options.include_usage`` adds the usage chunk. Every request is recorded
(``FakeUpstream.requests``, or ``GET /_fake/requests`` for a subprocess), including whether the
client went away before a stream ended (or, for a delayed non-streamed answer, before it was
sent).

Run standalone: ``python -m tests.fakes.upstream --port 9000 [--latency-ms 0] [--chunks 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import brotli
import orjson
import zstandard
from aiohttp import web

MODEL = "fake-model"
RECORD_LIMIT = 10_000
LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
DONE_EVENT = b"data: [DONE]\n\n"
DEFAULT_ENCODING = "gzip"
WORDS = ("Hello", "from", "the", "fake", "upstream", "model", "of", "memproxy")


@dataclass(frozen=True)
class FakeConfig:
    """Server-wide behaviour; headers override it per request."""

    latency_ms: float = 0.0
    chunks: int = 5
    interval_ms: float = 0.0
    record: bool = True
    compress: bool = True  # as the real upstream: when Accept-Encoding allows


class Encoder(Protocol):
    """One content coding, fed piece by piece; every piece comes out flushed."""

    def compress(self, data: bytes) -> bytes:
        """The coded bytes of ``data``, flushed so the client can decode them now."""

    def finish(self) -> bytes:
        """The end of the coded stream."""


class ZlibEncoder:
    """``gzip`` (``wbits`` 31) or ``deflate`` (15: zlib-wrapped, as RFC 9110 says)."""

    def __init__(self, wbits: int) -> None:
        self._coder = zlib.compressobj(wbits=wbits)

    def compress(self, data: bytes) -> bytes:
        return self._coder.compress(data) + self._coder.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self._coder.flush(zlib.Z_FINISH)


class BrotliEncoder:
    """``br``."""

    def __init__(self) -> None:
        self._coder = brotli.Compressor()

    def compress(self, data: bytes) -> bytes:
        out: bytes = self._coder.process(data) + self._coder.flush()
        return out

    def finish(self) -> bytes:
        out: bytes = self._coder.finish()
        return out


class ZstdEncoder:
    """``zstd``."""

    def __init__(self) -> None:
        self._coder = zstandard.ZstdCompressor().compressobj()

    def compress(self, data: bytes) -> bytes:
        flush = zstandard.COMPRESSOBJ_FLUSH_BLOCK
        return self._coder.compress(data) + self._coder.flush(flush)

    def finish(self) -> bytes:
        return self._coder.flush()


ENCODERS = {
    "gzip": lambda: ZlibEncoder(16 + zlib.MAX_WBITS),
    "deflate": lambda: ZlibEncoder(zlib.MAX_WBITS),
    "br": BrotliEncoder,
    "zstd": ZstdEncoder,
}


class StackedEncoder:
    """Codings applied in ``Content-Encoding`` order: the first one's output feeds the next."""

    def __init__(self, codings: Sequence[str]) -> None:
        self._coders: list[Encoder] = [ENCODERS[coding]() for coding in codings]

    def compress(self, data: bytes) -> bytes:
        for coder in self._coders:
            data = coder.compress(data)
        return data

    def finish(self) -> bytes:
        tail = b""
        for coder in self._coders:
            tail = (coder.compress(tail) if tail else b"") + coder.finish()
        return tail

    def whole(self, data: bytes) -> bytes:
        """A complete body, coded."""
        return self.compress(data) + self.finish()


def accepted_codings(accept_encoding: str | None) -> set[str]:
    """The codings an ``Accept-Encoding`` value allows (``q=0`` excluded); none if absent."""
    allowed = set()
    for part in (accept_encoding or "").split(","):
        coding, _, params = part.partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if coding.strip() and quality > 0:
            allowed.add(coding.strip().lower())
    return allowed


def response_codings(headers: Any, compress: bool = True) -> list[str]:
    """The codings to apply to an answer to a request with these headers (in order)."""
    if not compress:
        return []
    wanted = headers.get("X-Fake-Encoding")
    codings = [DEFAULT_ENCODING] if wanted is None else wanted.lower().replace(" ", "").split(",")
    codings = [c for c in codings if c and c != "identity"]
    unknown = [c for c in codings if c not in ENCODERS]
    if unknown:
        raise web.HTTPBadRequest(text=f"X-Fake-Encoding: unknown coding {unknown[0]!r}")
    allowed = accepted_codings(headers.get("Accept-Encoding"))
    if "*" in allowed or all(c in allowed for c in codings):
        return codings
    return []


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    query: str
    raw_path: str  # the request target as on the request line: not decoded, query included
    headers: dict[str, str]  # names lower-cased
    body: bytes
    finished: bool = False  # the whole response was written
    disconnected: bool = False  # the client went away while it was being written

    def json(self) -> Any:
        """The body parsed as JSON."""
        return orjson.loads(self.body)


@dataclass
class FakeUpstream:
    """The fake's state and its aiohttp application."""

    config: FakeConfig = field(default_factory=FakeConfig)
    requests: deque[Recorded] = field(default_factory=lambda: deque(maxlen=RECORD_LIMIT))

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/_fake/requests", self._dump)
        app.router.add_delete("/_fake/requests", self._clear)
        app.router.add_route("*", "/{tail:.*}", self._echo)
        return app

    async def _record(self, request: web.Request) -> Recorded:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        query = request.rel_url.raw_query_string
        rec = Recorded(request.method, request.path, query, request.raw_path, headers, body)
        if self.config.record:
            self.requests.append(rec)
        return rec

    def _knob(self, request: web.Request, name: str, default: float) -> float:
        value = request.headers.get(f"X-Fake-{name}")
        return float(value) if value is not None else default

    def _codings(self, request: web.Request) -> list[str]:
        return response_codings(request.headers, self.config.compress)

    def _json(
        self,
        request: web.Request,
        body: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        """A JSON answer, compressed as the request allows."""
        data = orjson.dumps(body)
        headers = dict(headers or {})
        codings = self._codings(request)
        if codings:
            data = StackedEncoder(codings).whole(data)
            headers["Content-Encoding"] = ", ".join(codings)
        if self.config.compress:
            headers["Vary"] = "Accept-Encoding"
        return web.Response(
            body=data, status=status, headers=headers, content_type="application/json"
        )

    async def _preamble(
        self, request: web.Request, error_body: ErrorBody | None = None
    ) -> tuple[Recorded, web.Response | None]:
        rec = await self._record(request)
        latency = self._knob(request, "Latency-Ms", self.config.latency_ms)
        if latency:
            try:
                await asyncio.sleep(latency / 1000)
            except asyncio.CancelledError:
                rec.disconnected = True
                raise
            if request.transport is None or request.transport.is_closing():
                rec.disconnected = True  # the client left while we "thought"
        status = int(self._knob(request, "Status", 200))
        if status >= 400:
            headers = {}
            if "X-Fake-Retry-After" in request.headers:
                headers["Retry-After"] = request.headers["X-Fake-Retry-After"]
            body = (error_body or openai_error)(status)
            rec.finished = True
            return rec, self._json(request, body, status, headers)
        return rec, None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        rec, error = await self._preamble(request)
        if error is not None:
            return error
        payload = rec.json()
        model = str(payload.get("model") or MODEL)
        n = int(payload.get("n") or 1)
        tools = bool(payload.get("tools"))
        chunks = int(self._knob(request, "Chunks", self.config.chunks))
        if not payload.get("stream"):
            rec.finished = not rec.disconnected
            return self._json(request, completion(model, n, chunks, tools))
        return await self._stream(request, rec, payload, model, n, chunks, tools)

    async def _stream(
        self,
        request: web.Request,
        rec: Recorded,
        payload: dict[str, Any],
        model: str,
        n: int,
        chunks: int,
        tools: bool,
    ) -> web.StreamResponse:
        usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        events = stream_events(model, n, chunks, tools, usage)
        if request.headers.get("X-Fake-No-Finish"):
            events = [e for e in events if b'"finish_reason":"' not in e and b'"usage"' not in e]
        if request.headers.get("X-Fake-No-Done"):
            events = [e for e in events if e != DONE_EVENT]
        return await self._write_events(request, rec, events)

    async def _write_events(
        self,
        request: web.Request,
        rec: Recorded,
        events: Sequence[bytes],
        extra_headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        """Send SSE ``events`` with the request's knobs (encoding, pacing, resets)."""
        interval = self._knob(request, "Interval-Ms", self.config.interval_ms) / 1000
        reset_after = int(self._knob(request, "Reset-After", -1))
        first_byte = self._knob(request, "First-Byte-Ms", 0) / 1000
        headers = {"Content-Type": "text/event-stream", **(extra_headers or {})}
        codings = self._codings(request)
        coder = StackedEncoder(codings) if codings else None
        if coder is not None:
            headers["Content-Encoding"] = ", ".join(codings)
        if self.config.compress:
            headers["Vary"] = "Accept-Encoding"
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        try:
            if first_byte:
                await asyncio.sleep(first_byte)
            for i, event in enumerate(events):
                if reset_after >= 0 and i - 1 == reset_after:
                    # Simulates a crashed upstream: no terminating chunk, connection gone.
                    assert request.transport is not None
                    if request.headers.get("X-Fake-Reset-Rst"):
                        sock = request.transport.get_extra_info("socket")
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
                    request.transport.close()
                    return response
                if interval and i > 0:
                    await asyncio.sleep(interval)
                await response.write(coder.compress(event) if coder is not None else event)
            if coder is not None:
                await response.write(coder.finish())
            await response.write_eof()
            rec.finished = True
        except ConnectionError:
            rec.disconnected = True
        except asyncio.CancelledError:
            rec.disconnected = True
            raise
        return response

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses``: a response object, or its typed event stream."""
        rec, error = await self._preamble(request)
        if error is not None:
            return error
        payload = rec.json()
        chunks = int(self._knob(request, "Chunks", self.config.chunks))
        if not payload.get("stream"):
            rec.finished = not rec.disconnected
            return self._json(request, response_object(payload, chunks))
        events = response_events(payload, chunks)
        if request.headers.get("X-Fake-No-Finish"):
            events = events[:-1]  # no response.completed
        return await self._write_events(request, rec, events)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/messages``: a message object, or its event stream (Anthropic's)."""
        rec, error = await self._preamble(request, anthropic_error)
        if error is not None:
            error.headers[REQUEST_ID_HEADER] = ANTHROPIC_REQUEST_ID
            return error
        payload = rec.json()
        chunks = int(self._knob(request, "Chunks", self.config.chunks))
        headers = {REQUEST_ID_HEADER: ANTHROPIC_REQUEST_ID}
        if not payload.get("stream"):
            rec.finished = not rec.disconnected
            return self._json(request, message_object(payload, chunks), headers=headers)
        events = message_events(payload, chunks)
        failure = request.headers.get("X-Fake-Stream-Error")
        if failure:  # Anthropic's mid-stream error: an error event, then the body ends
            events = [*events[:4], anthropic_event("error", anthropic_error_body(failure))]
        return await self._write_events(request, rec, events, headers)

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``."""
        rec, error = await self._preamble(request, anthropic_error)
        if error is not None:
            return error
        rec.finished = True
        return self._json(request, {"input_tokens": fake_input_tokens(rec.json())})

    async def _models(self, request: web.Request) -> web.StreamResponse:
        rec, error = await self._preamble(request)
        if error is not None:
            return error
        rec.finished = True
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
            for m in (MODEL, "gpt-4o")
        ]
        return self._json(request, {"object": "list", "data": data})

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        rec, error = await self._preamble(request)
        if error is not None:
            return error
        payload = rec.json()
        inputs = payload.get("input")
        texts = inputs if isinstance(inputs, list) else [inputs]
        dims = int(payload.get("dimensions") or 8)
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [((len(str(t)) + k) % 7) / 7 for k in range(dims)],
            }
            for i, t in enumerate(texts)
        ]
        rec.finished = True
        body = {
            "object": "list",
            "data": data,
            "model": payload.get("model"),
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
        return self._json(request, body)

    async def _echo(self, request: web.Request) -> web.StreamResponse:
        rec, error = await self._preamble(request)
        if error is not None:
            return error
        rec.finished = True
        body = {"method": request.method, "path": request.path, "query": request.query_string}
        return self._json(request, body)

    async def _dump(self, request: web.Request) -> web.Response:
        rows = [{**asdict(r), "body": r.body.decode("utf-8", "replace")} for r in self.requests]
        return web.json_response(rows, dumps=_dumps)

    async def _clear(self, request: web.Request) -> web.Response:
        self.requests.clear()
        return web.Response(status=204)


ErrorBody = Callable[[int], dict[str, Any]]  # the error body an API answers a status with


def openai_error(status: int) -> dict[str, Any]:
    """The error body OpenAI answers ``status`` with."""
    return {
        "error": {
            "message": f"fake upstream error {status}",
            "type": "invalid_request_error" if status < 500 else "server_error",
            "param": None,
            "code": f"fake_{status}",
        }
    }


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def answer_words(chunks: int) -> list[str]:
    """The content pieces of an answer of ``chunks`` chunks."""
    return [WORDS[i % len(WORDS)] + ("" if i == chunks - 1 else " ") for i in range(chunks)]


def tool_call(i: int) -> dict[str, Any]:
    """The tool call the fake makes when the request has tools."""
    return {
        "index": 0,
        "id": f"call_fake_{i}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }


def completion(model: str, n: int, chunks: int, tools: bool) -> dict[str, Any]:
    """A non-streaming chat.completion."""
    text = "".join(answer_words(chunks))
    choices = []
    for i in range(n):
        message: dict[str, Any] = {"role": "assistant", "content": None if tools else text}
        if tools:
            call = tool_call(i)
            call.pop("index")
            message["tool_calls"] = [call]
        finish = "tool_calls" if tools else "stop"
        choices.append({"index": i, "message": message, "finish_reason": finish, "logprobs": None})
    usage = {"prompt_tokens": 10, "completion_tokens": chunks * n, "total_tokens": 10 + chunks * n}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def _event(model: str, choices: list[dict[str, Any]], usage: Any = None) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def stream_events(model: str, n: int, chunks: int, tools: bool, usage: bool) -> list[bytes]:
    """The SSE events of a streamed answer: role, content (or tool call), finish, usage, DONE."""
    events = [
        _event(
            model,
            [
                {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                for i in range(n)
            ],
        )
    ]
    for word in answer_words(chunks):
        if tools:
            delta: dict[str, Any] = {"tool_calls": [tool_call(0)]}
            events.append(
                _event(
                    model, [{"index": i, "delta": delta, "finish_reason": None} for i in range(n)]
                )
            )
            break
        events.append(
            _event(
                model,
                [{"index": i, "delta": {"content": word}, "finish_reason": None} for i in range(n)],
            )
        )
    finish = "tool_calls" if tools else "stop"
    events.append(
        _event(model, [{"index": i, "delta": {}, "finish_reason": finish} for i in range(n)])
    )
    if usage:
        events.append(
            _event(
                model,
                [],
                {
                    "prompt_tokens": 10,
                    "completion_tokens": chunks * n,
                    "total_tokens": 10 + chunks * n,
                },
            )
        )
    events.append(DONE_EVENT)
    return events


# --- The Responses API (POST /v1/responses), as api.openai.com answers it -----------------------

RESPONSE_ID = "resp_fake"
MESSAGE_ID = "msg_fake"
CALL_ITEM_ID = "fc_fake"
CREATED_AT = 1700000000


def response_object(
    payload: dict[str, Any], chunks: int, status: str = "completed"
) -> dict[str, Any]:
    """The response object: echoes the request's settings (``instructions`` included), and its
    ``output`` is a message (or, with ``tools``, a function call); in progress: no output."""
    done = status == "completed"
    output = [response_item(payload, chunks, done)] if done else []
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": chunks,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10 + chunks,
    }
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED_AT,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": payload.get("instructions"),
        "max_output_tokens": payload.get("max_output_tokens"),
        "model": str(payload.get("model") or MODEL),
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": payload.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": payload.get("store", True),
        "temperature": 1.0,
        "text": payload.get("text") or {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": payload.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage if done else None,
        "user": None,
        "metadata": payload.get("metadata") or {},
    }


def response_item(payload: dict[str, Any], chunks: int, done: bool) -> dict[str, Any]:
    """The one output item: a message, or a function call when the request has tools."""
    status = "completed" if done else "in_progress"
    if payload.get("tools"):
        arguments = '{"city": "Paris"}' if done else ""
        return {
            "id": CALL_ITEM_ID,
            "type": "function_call",
            "status": status,
            "arguments": arguments,
            "call_id": "call_fake_0",
            "name": "get_weather",
        }
    content = [output_text_part("".join(answer_words(chunks)))] if done else []
    return {
        "id": MESSAGE_ID,
        "type": "message",
        "status": status,
        "content": content,
        "role": "assistant",
    }


def output_text_part(text: str) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def typed_event(kind: str, sequence: int, fields: dict[str, Any]) -> bytes:
    """One event of a Responses stream: its type on an ``event:`` line and in its data."""
    data = {"type": kind, "sequence_number": sequence, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def response_events(payload: dict[str, Any], chunks: int) -> list[bytes]:
    """The typed events of a streamed response, numbered in order, ``response.completed`` last
    (no ``[DONE]``: the Responses API ends with the body)."""
    started = response_object(payload, chunks, status="in_progress")
    item = response_item(payload, chunks, done=False)
    final = response_item(payload, chunks, done=True)
    at = {"output_index": 0}
    on = {"item_id": item["id"], **at}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {**at, "item": item}),
    ]
    if item["type"] == "function_call":
        arguments = final["arguments"]
        steps += [
            ("response.function_call_arguments.delta", {**on, "delta": arguments}),
            ("response.function_call_arguments.done", {**on, "arguments": arguments}),
        ]
    else:
        part = {**on, "content_index": 0}
        text = "".join(answer_words(chunks))
        steps.append(("response.content_part.added", {**part, "part": output_text_part("")}))
        steps += [
            ("response.output_text.delta", {**part, "delta": word, "logprobs": []})
            for word in answer_words(chunks)
        ]
        steps += [
            ("response.output_text.done", {**part, "text": text, "logprobs": []}),
            ("response.content_part.done", {**part, "part": output_text_part(text)}),
        ]
    steps += [
        ("response.output_item.done", {**at, "item": final}),
        ("response.completed", {"response": response_object(payload, chunks)}),
    ]
    return [typed_event(kind, i, fields) for i, (kind, fields) in enumerate(steps)]


# --- Anthropic's Messages API (POST /v1/messages, /count_tokens), as api.anthropic.com ----------

ANTHROPIC_MESSAGE_ID = "msg_01FakeMessage"
TOOL_USE_ID = "toolu_01FakeToolUse"
ANTHROPIC_REQUEST_ID = "req_01FakeRequest"
REQUEST_ID_HEADER = "request-id"
# Anthropic's error types by status (its "Errors" reference).
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic_error_body(kind: str, message: str = "fake upstream error") -> dict[str, Any]:
    """An error in Anthropic's shape (also the data of its stream's ``error`` event)."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error(status: int) -> dict[str, Any]:
    """The error body Anthropic answers ``status`` with."""
    default = "api_error" if status >= 500 else "invalid_request_error"
    kind = ANTHROPIC_ERROR_TYPES.get(status, default)
    return anthropic_error_body(kind, f"fake upstream error {status}")


def anthropic_usage(output_tokens: int) -> dict[str, Any]:
    """A message's ``usage``."""
    return {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message_object(payload: dict[str, Any], chunks: int) -> dict[str, Any]:
    """The message object: the answer as one text block, or with ``tools`` one ``tool_use``."""
    if payload.get("tools"):
        content: list[dict[str, Any]] = [tool_use_block({"city": "Paris"})]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": "".join(answer_words(chunks))}]
        stop = "end_turn"
    return {
        "id": ANTHROPIC_MESSAGE_ID,
        "type": "message",
        "role": "assistant",
        "model": str(payload.get("model") or MODEL),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": anthropic_usage(chunks),
    }


def tool_use_block(arguments: dict[str, Any]) -> dict[str, Any]:
    """The ``tool_use`` block the fake answers a request with tools with."""
    return {"type": "tool_use", "id": TOOL_USE_ID, "name": "get_weather", "input": arguments}


def anthropic_event(kind: str, data: dict[str, Any]) -> bytes:
    """One event of a Messages stream: its name on an ``event:`` line, its ``type`` in data."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def message_events(payload: dict[str, Any], chunks: int) -> list[bytes]:
    """The events of a streamed message, in Anthropic's order: ``message_start`` (the message,
    no content), ``content_block_start``, a ``ping``, the deltas, ``content_block_stop``,
    ``message_delta`` (stop reason, output usage), ``message_stop``."""
    whole = message_object(payload, chunks)
    started = {**whole, "content": [], "stop_reason": None, "usage": anthropic_usage(1)}
    block = whole["content"][0]
    steps: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": started})]
    if block["type"] == "tool_use":
        arguments = orjson.dumps(block["input"]).decode()
        middle = len(arguments) // 2
        steps.append(("content_block_start", {"index": 0, "content_block": tool_use_block({})}))
        steps.append(("ping", {}))
        steps += [
            ("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", **part}})
            for part in ({"partial_json": arguments[:middle]}, {"partial_json": arguments[middle:]})
        ]
    else:
        empty = {"type": "text", "text": ""}
        steps.append(("content_block_start", {"index": 0, "content_block": empty}))
        steps.append(("ping", {}))
        steps += [
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": word}})
            for word in answer_words(chunks)
        ]
    delta = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    steps += [
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": delta, "usage": {"output_tokens": chunks}}),
        ("message_stop", {}),
    ]
    return [anthropic_event(kind, {"type": kind, **fields}) for kind, fields in steps]


def fake_input_tokens(payload: dict[str, Any]) -> int:
    """A deterministic ``count_tokens`` answer: a quarter of the request's JSON bytes."""
    counted = {key: payload.get(key) for key in ("system", "messages", "tools")}
    return len(orjson.dumps(counted)) // 4


class FakeServer:
    """Runs a ``FakeUpstream`` on a free port in a background thread (context manager)."""

    def __init__(self, fake: FakeUpstream | None = None, host: str = "127.0.0.1") -> None:
        self.fake = fake or FakeUpstream()
        self.host = host
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root(self) -> str:
        """Base URL without ``/v1``: Anthropic's, as its SDK and ``upstream.anthropic.url``
        take it."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeServer:
        """Start serving; returns when the port is bound."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.fake.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    def stop(self) -> None:
        """Stop serving and end the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description="Fake OpenAI upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--interval-ms", type=float, default=0.0)
    parser.add_argument("--no-record", action="store_true", help="do not keep received requests")
    parser.add_argument("--no-compress", action="store_true", help="never compress answers")
    args = parser.parse_args()
    config = FakeConfig(
        args.latency_ms,
        args.chunks,
        args.interval_ms,
        record=not args.no_record,
        compress=not args.no_compress,
    )
    web.run_app(
        FakeUpstream(config).app(), host=args.host, port=args.port, access_log=None, print=None
    )


if __name__ == "__main__":
    main()
