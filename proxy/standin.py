"""The stand-in upstream: a server with no model behind it that speaks the three APIs memproxy
serves, for trying memproxy without a provider key (``memproxy serve --stand-in``, ``memproxy
standin``; adr/0115).

It speaks the part of each API a first try needs, streamed or not, in the provider's shapes:
OpenAI's chat completions (``POST /v1/chat/completions``: SSE chunks, ``[DONE]``, the usage chunk
when ``stream_options.include_usage`` asks) and ``GET /v1/models``; OpenAI's Responses API
(``POST /v1/responses``: a response object, or its typed events on ``event:`` lines); Anthropic's
Messages API (``POST /v1/messages``: a message, or its named events; ``POST
/v1/messages/count_tokens``). Its answer is the point: it repeats what it received (``messages``;
``instructions`` and ``input``; ``system`` and ``messages``), so a newcomer sees exactly what
memproxy sent upstream, memory block included. Bad requests and unknown paths get the API's
error shape. Tokens are counted with o200k_base, for every model. It never calls anything.

This is a product feature, not a test fake: it lives in the package, imports nothing from
``tests/``, and runs on aiohttp's server, already a dependency.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from aiohttp import web

LOGGER = logging.getLogger("memproxy.standin")
MODEL = "memproxy-stand-in"
HEADER = "[memproxy stand-in: no model was called. This is what reached me:]"
DONE_EVENT = b"data: [DONE]\n\n"
START_TIMEOUT_S = 10.0
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

Body = Mapping[str, Any]
Turn = tuple[str, object]  # what the answer shows: a label (a role, a field) and its content


class Tokens(NamedTuple):
    """What a request and its answer count, in o200k_base tokens."""

    input: int
    output: int


class BadRequest(Exception):
    """A request the API would refuse (400), in the words of its error."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


# --- What every API shares: the answer and its token counts --------------------------------------


def text_of(content: object) -> str:
    """Content's text: a string, or the text parts (or blocks) of a list; else its JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return "" if content is None else orjson.dumps(content).decode()


def answer_text(turns: Sequence[Turn]) -> str:
    """The stand-in's answer: everything it received, labelled, in order."""
    lines = [HEADER]
    for label, content in turns:
        lines.append(f"--- {label} ---")
        lines.append(text_of(content))
    return "\n".join(lines)


def message_turns(messages: object, name: str = "messages") -> list[Turn]:
    """A ``messages`` list as turns, role first; ``BadRequest`` when it is no list of objects."""
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise BadRequest(f"'{name}' is a required property and must be an array of objects.", name)
    return [(str(m.get("role", "?")), m.get("content")) for m in messages]


def count(turns: Sequence[Turn], answer: str) -> Tokens:
    """The tokens of what was received and of the answer, counted as gpt-4o would."""
    from proxy.tokenizer import count_tokens  # tiktoken only once a request needs it

    return Tokens(sum(count_tokens(text_of(c)) for _, c in turns), count_tokens(answer))


def lines_of(answer: str) -> list[str]:
    """The answer's stream deltas: one per line, line ends kept."""
    return answer.splitlines(keepends=True)


def model_of(body: Body) -> str:
    """The model the request names (echoed, as providers do), or the stand-in's own."""
    model = body.get("model")
    return model if isinstance(model, str) and model else MODEL


def openai_error(status: int, error: BadRequest) -> bytes:
    """OpenAI's error shape (chat completions and the Responses API)."""
    kind, param, code = "invalid_request_error", error.param, error.code
    return orjson.dumps(
        {"error": {"message": error.message, "type": kind, "param": param, "code": code}}
    )


def anthropic_error(status: int, error: BadRequest) -> bytes:
    """Anthropic's error shape."""
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": error.message}})


def named_event(name: str, data: Mapping[str, Any]) -> bytes:
    """An SSE event on an ``event:`` line, as the Responses and Messages APIs send them."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


# --- OpenAI's chat completions ----------------------------------------------------------------


def chat_turns(body: Body) -> list[Turn]:
    """``messages``, role by role."""
    return message_turns(body.get("messages"))


def chat_usage(used: Tokens) -> dict[str, int]:
    """Usage in chat completions' shape."""
    total = used.input + used.output
    return {"prompt_tokens": used.input, "completion_tokens": used.output, "total_tokens": total}


def completion(body: Body, answer: str, used: Tokens) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_of(body),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": chat_usage(used),
    }


def chat_events(body: Body, answer: str, used: Tokens) -> Iterator[bytes]:
    """The SSE events of a streamed answer: role, one chunk per line, finish, usage (when
    ``stream_options.include_usage`` asks), ``[DONE]``."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model_of(body),
    }

    def event(delta: dict[str, Any], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n"

    yield event({"role": "assistant", "content": ""}, None)
    for line in lines_of(answer):
        yield event({"content": line}, None)
    yield event({}, "stop")
    options = body.get("stream_options")
    if isinstance(options, Mapping) and options.get("include_usage") is True:
        chunk = {**base, "choices": [], "usage": chat_usage(used)}
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    yield DONE_EVENT


# --- OpenAI's Responses API -------------------------------------------------------------------


def responses_turns(body: Body) -> list[Turn]:
    """``instructions`` (where memproxy puts the block), then ``input``: a string is one user
    message; items without a role (tool calls, their outputs) show by type."""
    instructions, given = body.get("instructions"), body.get("input")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string.", "instructions", "invalid_type")
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    if not isinstance(given, list) or not all(isinstance(i, Mapping) for i in given):
        raise BadRequest("'input' must be a string or an array of objects.", "input")
    turns: list[Turn] = [("instructions", instructions)] if instructions else []
    for item in given:
        label = item.get("role") or item.get("type", "?")
        turns.append((str(label), item["content"] if "content" in item else dict(item)))
    return turns


def response_object(
    body: Body, answer: str | None, used: Tokens, response_id: str, item_id: str
) -> dict[str, Any]:
    """A ``response``: ``completed`` with the answer as its one message, or (``answer``
    ``None``) ``in_progress`` with no output yet. It echoes the request's ``instructions``."""
    output, usage = [], None
    if answer is not None:
        output = [output_message(item_id, answer)]
        usage = {
            "input_tokens": used.input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": used.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": used.input + used.output,
        }
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress" if answer is None else "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model_of(body),
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": 1.0,
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": body.get("metadata") or {},
    }


def output_message(item_id: str, text: str | None) -> dict[str, Any]:
    """The output message: done with ``text``, or (``None``) just added, with no content."""
    content = [] if text is None else [output_text(text)]
    status = "in_progress" if text is None else "completed"
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def output_text(text: str) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def new_ids() -> tuple[str, str]:
    """A response's id and its message's."""
    return f"resp_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"


def response(body: Body, answer: str, used: Tokens) -> dict[str, Any]:
    """A non-streamed response."""
    return response_object(body, answer, used, *new_ids())


def response_events(body: Body, answer: str, used: Tokens) -> Iterator[bytes]:
    """The typed events of a streamed response, numbered, ``response.completed`` last (no
    ``[DONE]``: the Responses API ends with the body)."""
    ids = new_ids()
    at = {"output_index": 0}
    part = {"item_id": ids[1], **at, "content_index": 0}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response_object(body, None, used, *ids)}),
        ("response.in_progress", {"response": response_object(body, None, used, *ids)}),
        ("response.output_item.added", {**at, "item": output_message(ids[1], None)}),
        ("response.content_part.added", {**part, "part": output_text("")}),
        *(
            ("response.output_text.delta", {**part, "delta": line, "logprobs": []})
            for line in lines_of(answer)
        ),
        ("response.output_text.done", {**part, "text": answer, "logprobs": []}),
        ("response.content_part.done", {**part, "part": output_text(answer)}),
        ("response.output_item.done", {**at, "item": output_message(ids[1], answer)}),
        ("response.completed", {"response": response_object(body, answer, used, *ids)}),
    ]
    for number, (kind, fields) in enumerate(steps):
        yield named_event(kind, {"type": kind, "sequence_number": number, **fields})


# --- Anthropic's Messages API -----------------------------------------------------------------


def anthropic_turns(body: Body) -> list[Turn]:
    """``system`` (a string or text blocks), then ``messages``, role by role."""
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise BadRequest("system: Input should be a valid string or list of text blocks.")
    turns = message_turns(body.get("messages"))
    return [("system", system), *turns] if system else turns


def messages_turns(body: Body) -> list[Turn]:
    """What ``POST /v1/messages`` takes; ``max_tokens`` is required there, as at Anthropic."""
    if not isinstance(body.get("max_tokens"), int):
        raise BadRequest("max_tokens: Field required")
    return anthropic_turns(body)


def message(body: Body, answer: str | None, used: Tokens, message_id: str) -> dict[str, Any]:
    """A message: the answer as one text block, or (``answer`` ``None``) as ``message_start``
    carries it, with no content and no stop reason yet."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model_of(body),
        "content": [] if answer is None else [{"type": "text", "text": answer}],
        "stop_reason": None if answer is None else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": used.input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1 if answer is None else used.output,
        },
    }


def message_id() -> str:
    """A new message id."""
    return f"msg_{uuid.uuid4().hex}"


def anthropic_message(body: Body, answer: str, used: Tokens) -> dict[str, Any]:
    """A non-streamed message."""
    return message(body, answer, used, message_id())


def message_events(body: Body, answer: str, used: Tokens) -> Iterator[bytes]:
    """The named events of a streamed message, in Anthropic's order."""
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": message(body, None, used, message_id())}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {}),
        *(
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": line}})
            for line in lines_of(answer)
        ),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": stop, "usage": {"output_tokens": used.output}}),
        ("message_stop", {}),
    ]
    for kind, fields in steps:
        yield named_event(kind, {"type": kind, **fields})


# --- The server ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Api:
    """One API the stand-in speaks: how it reads a request, answers it, and refuses it."""

    turns: Callable[[Body], list[Turn]]  # raises BadRequest
    whole: Callable[[Body, str, Tokens], dict[str, Any]]
    events: Callable[[Body, str, Tokens], Iterator[bytes]]
    error: Callable[[int, BadRequest], bytes]


CHAT = Api(chat_turns, completion, chat_events, openai_error)
RESPONSES = Api(responses_turns, response, response_events, openai_error)
MESSAGES = Api(messages_turns, anthropic_message, message_events, anthropic_error)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(body: bytes, status: int = 200) -> web.Response:
    """A JSON answer."""
    return web.Response(body=body, status=status, content_type="application/json")


async def read_body(request: web.Request) -> Body:
    """The request's JSON object; ``BadRequest`` when it is none."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise BadRequest("The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.", code="invalid_json")
    return body


def serving(api: Api) -> Handler:
    """The handler that answers ``api``'s requests with what they carried."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request)
            turns = api.turns(body)
        except BadRequest as exc:
            return json_response(api.error(400, exc), 400)
        answer = answer_text(turns)
        used = count(turns, answer)
        if not body.get("stream"):
            return json_response(orjson.dumps(api.whole(body, answer, used)))
        stream = web.StreamResponse(headers=SSE_HEADERS)
        await stream.prepare(request)
        for event in api.events(body, answer, used):
            await stream.write(event)
        await stream.write_eof()
        return stream

    return handle


async def count_message_tokens(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: what the message would count as input."""
    try:
        turns = anthropic_turns(await read_body(request))
    except BadRequest as exc:
        return json_response(anthropic_error(400, exc), 400)
    return json_response(orjson.dumps({"input_tokens": count(turns, "").input}))


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the one model it pretends to be."""
    data = [{"id": MODEL, "object": "model", "created": 0, "owned_by": "memproxy"}]
    return json_response(orjson.dumps({"object": "list", "data": data}))


async def not_found(request: web.Request) -> web.Response:
    """Anything else: 404, in Anthropic's shape under ``/v1/messages``, else in OpenAI's."""
    message = f"The stand-in upstream has no {request.method} {request.path}."
    missing = BadRequest(message, code="unknown_url")
    error = anthropic_error if request.path.startswith("/v1/messages") else openai_error
    return json_response(error(404, missing), 404)


def create_app() -> web.Application:
    """The stand-in's aiohttp application."""
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", serving(CHAT))
    app.router.add_post("/v1/responses", serving(RESPONSES))
    app.router.add_post("/v1/messages", serving(MESSAGES))
    app.router.add_post("/v1/messages/count_tokens", count_message_tokens)
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
    def root(self) -> str:
        """Its Anthropic base URL (no ``/v1``, as ``ANTHROPIC_BASE_URL`` takes it)."""
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """Its OpenAI base URL (``.../v1``)."""
        return f"{self.root}/v1"

    def environment(self) -> dict[str, str]:
        """The variables that point memproxy's upstreams, OpenAI's and Anthropic's, at it."""
        return {"MEMPROXY_UPSTREAM_URL": self.url, "MEMPROXY_ANTHROPIC_URL": self.root}

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
    print(
        f"memproxy stand-in upstream on http://{host}:{port}/v1 (OpenAI) and "
        f"http://{host}:{port} (Anthropic); no model behind it",
        flush=True,
    )
    web.run_app(create_app(), host=host, port=port, print=None, access_log=None)
    return 0
