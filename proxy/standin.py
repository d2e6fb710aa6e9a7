"""The stand-in upstream: an OpenAI-compatible server with no model behind it, for trying
memproxy without a provider key (``memproxy serve --stand-in``, ``memproxy standin``).

It speaks the part of OpenAI's API a first try needs: ``GET /v1/models`` and ``POST
/v1/chat/completions``, streamed (SSE chunks, ``[DONE]``, the usage chunk when
``stream_options.include_usage`` asks) or not. Its answer is the point: it repeats the messages
it received, so a newcomer sees exactly what memproxy sent upstream, memory block included.
Other paths answer 404 in OpenAI's error shape, like the provider. It never calls anything.

This is a product feature (adr/0101), not a test fake: it lives in the package, imports nothing
from ``tests/``, and runs on aiohttp's server, already a dependency.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web

LOGGER = logging.getLogger("memproxy.standin")
MODEL = "memproxy-stand-in"
HEADER = "[memproxy stand-in: no model was called. These are the messages that reached me:]"
DONE_EVENT = b"data: [DONE]\n\n"
START_TIMEOUT_S = 10.0


def text_of(content: object) -> str:
    """A message's text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return "" if content is None else orjson.dumps(content).decode()


def answer_text(messages: Sequence[object]) -> str:
    """The stand-in's answer: every message it received, role first, in order."""
    lines = [HEADER]
    for message in messages:
        if isinstance(message, Mapping):
            lines.append(f"--- {message.get('role', '?')} ---")
            lines.append(text_of(message.get("content")))
    return "\n".join(lines)


def usage(messages: Sequence[object], answer: str) -> dict[str, int]:
    """Token usage in OpenAI's shape, counted with o200k_base as gpt-4o would."""
    from proxy.tokenizer import count_tokens  # tiktoken only once a request needs it

    prompt = sum(
        count_tokens(text_of(m.get("content"))) for m in messages if isinstance(m, Mapping)
    )
    completion = count_tokens(answer)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def error_body(message: str, kind: str, code: str, param: str | None = None) -> bytes:
    """OpenAI's error shape."""
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def completion(model: str, answer: str, used: dict[str, int]) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": used,
    }


def stream_events(model: str, answer: str, used: dict[str, int] | None) -> Iterator[bytes]:
    """The SSE events of a streamed answer: role, one chunk per line, finish, usage, [DONE]."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def event(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        chunk = {**base, "choices": [choice], **extra}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    yield event({"role": "assistant", "content": ""}, None)
    for line in answer.splitlines(keepends=True):
        yield event({"content": line}, None)
    yield event({}, "stop")
    if used is not None:
        chunk = {**base, "choices": [], "usage": used}
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    yield DONE_EVENT


def json_response(body: bytes, status: int = 200) -> web.Response:
    """A JSON answer."""
    return web.Response(body=body, status=status, content_type="application/json")


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the one model it pretends to be."""
    data = [{"id": MODEL, "object": "model", "created": 0, "owned_by": "memproxy"}]
    return json_response(orjson.dumps({"object": "list", "data": data}))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``: answer with the messages received."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return json_response(
            error_body("The body is not valid JSON.", "invalid_request_error", "invalid_json"), 400
        )
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        message = "'messages' is a required property and must be an array."
        return json_response(
            error_body(message, "invalid_request_error", "invalid_value", "messages"), 400
        )
    model = body.get("model") if isinstance(body.get("model"), str) else MODEL
    answer = answer_text(messages)
    used = usage(messages, answer)
    if not body.get("stream"):
        return json_response(orjson.dumps(completion(model, answer, used)))
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    for chunk in stream_events(model, answer, used if include_usage else None):
        await response.write(chunk)
    await response.write_eof()
    return response


async def not_found(request: web.Request) -> web.Response:
    """Anything else: 404 in OpenAI's shape."""
    message = f"The stand-in upstream has no {request.method} {request.path}."
    return json_response(error_body(message, "invalid_request_error", "unknown_url"), 404)


def create_app() -> web.Application:
    """The stand-in's aiohttp application."""
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


class StandIn:
    """The stand-in served on its own thread and event loop, for ``memproxy serve --stand-in``.

    A thread, not the proxy's loop: the server (``proxy/server.py``) owns that loop and its
    worker processes; the stand-in only has to outlive them, in the process that started them.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Its OpenAI base URL (``.../v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> StandIn:
        """Listen (``port`` 0 picks a free one) and return once it accepts connections."""
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self._listen())
            except BaseException as exc:  # reported to start(), which raises it
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="memproxy-stand-in", daemon=True)
        self._thread.start()
        if not started.wait(START_TIMEOUT_S):
            raise RuntimeError("the stand-in upstream did not start")
        if failure:
            raise failure[0]
        return self

    async def _listen(self) -> None:
        # Bound here, not by aiohttp, so that port 0 tells us the port it picked.
        sock = socket.create_server((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(create_app(), access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    def stop(self) -> None:
        """Stop serving and end the thread."""
        loop, runner = self._loop, self._runner
        if loop is None or self._thread is None:
            return
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(START_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(START_TIMEOUT_S)
        loop.close()
        self._loop = None


def run(host: str, port: int) -> int:
    """``memproxy standin``: serve in the foreground until interrupted."""
    print(f"memproxy stand-in upstream on http://{host}:{port}/v1 (no model behind it)")
    web.run_app(create_app(), host=host, port=port, print=None, access_log=None)
    return 0
