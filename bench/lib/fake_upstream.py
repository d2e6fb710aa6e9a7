"""A lean fake OpenAI upstream for benchmarks: fixed answers, optional delay, SSE streaming.

It is built on aiohttp's server because on a 2-core machine every CPU cycle the fake spends is
taken from the proxy under test; the answers are encoded once per model and shape, then reused.
Events are deterministic (fixed ``id`` and ``created``), so a stream asked of the fake directly
and through memproxy must arrive as the same bytes.

Per request, ``X-Fake-Chunks`` (content pieces) and ``X-Fake-Interval-Ms`` (pause between
events) override the command line. With ``--compress`` an answer is gzipped when the request's
``Accept-Encoding`` allows it, as OpenAI does; a stream is then flushed event by event. With
``--echo`` every answer differs, as a model's do (memory capture stores each, no repeat): it
starts with the last line of the last user message, then the fixed words, one word an event.

Run: ``python bench/lib/fake_upstream.py --port 9000 [--delay-ms 0] [--chunks 8]
[--interval-ms 0] [--compress] [--echo]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import zlib
from dataclasses import dataclass

from aiohttp import web

MODEL = "fake-model"
ANSWER_WORDS = ("memproxy", "benchmark", "answer", "from", "the", "fake", "upstream", "model")
CREATED = 1_700_000_000
GZIP_WBITS = 16 + zlib.MAX_WBITS
MAX_BODY_BYTES = 32 * 1024 * 1024


def answer_text(chunks: int) -> str:
    """The assistant text of an answer of ``chunks`` pieces."""
    return " ".join(ANSWER_WORDS[i % len(ANSWER_WORDS)] for i in range(chunks))


def completion_body(model: str, text: str) -> bytes:
    """Return a non-streaming chat.completion JSON body."""
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
        }
    ).encode()


def chunk_event(model: str, delta: dict[str, str], finish: str | None) -> bytes:
    """Return one SSE ``data:`` event of a chat.completion.chunk."""
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def echoed_text(payload: dict[str, object], chunks: int) -> str:
    """``--echo``'s answer: the last line of the last user message, then
    ``answer_text(chunks)``. A proxy may put text before the user's own (memproxy's block goes
    first, on lines of its own): the answer stays the same length with and without it."""
    said = ""
    messages = payload.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            said = content.rsplit("\n", 1)[-1] if isinstance(content, str) else ""
            break
    return f"{said} {answer_text(chunks)}".strip()


def stream_events(model: str, chunks: int, text: str | None = None) -> list[bytes]:
    """Return the SSE events of a streamed answer of ``chunks`` content pieces (``text``:
    these words instead, one an event)."""
    if text is None:
        words = [ANSWER_WORDS[i % len(ANSWER_WORDS)] + " " for i in range(chunks)]
    else:
        words = [word + " " for word in text.split()]
    events = [chunk_event(model, {"role": "assistant", "content": ""}, None)]
    events += [chunk_event(model, {"content": word}, None) for word in words]
    events.append(chunk_event(model, {}, "stop"))
    events.append(b"data: [DONE]\n\n")
    return events


def gzipped(pieces: list[bytes]) -> list[bytes]:
    """``pieces`` as one gzip stream, each flushed so a client can decode it on arrival."""
    coder = zlib.compressobj(wbits=GZIP_WBITS)
    out = [coder.compress(piece) + coder.flush(zlib.Z_SYNC_FLUSH) for piece in pieces]
    out.append(coder.flush(zlib.Z_FINISH))
    return out


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value allows gzip (``q=0`` refuses it)."""
    for part in (accept_encoding or "").split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "").lower() not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


@dataclass(frozen=True)
class FakeConfig:
    """Server-wide behaviour; ``X-Fake-*`` headers override chunks and interval per request."""

    delay_ms: float = 0.0
    chunks: int = 8
    interval_ms: float = 0.0
    compress: bool = False
    echo: bool = False


def build_app(config: FakeConfig) -> web.Application:
    """Return the aiohttp app answering chat completions, models and health."""
    delay = config.delay_ms / 1000.0
    bodies: dict[tuple[str, int, bool], bytes] = {}
    streams: dict[tuple[str, int, bool], list[bytes]] = {}

    async def chat(request: web.Request) -> web.StreamResponse:
        payload = json.loads(await request.read())
        model = str(payload.get("model") or MODEL)
        chunks = int(request.headers.get("X-Fake-Chunks", config.chunks))
        interval = float(request.headers.get("X-Fake-Interval-Ms", config.interval_ms)) / 1000
        gzip = config.compress and accepts_gzip(request.headers.get("Accept-Encoding"))
        headers = {"Content-Encoding": "gzip"} if gzip else {}
        if config.compress:
            headers["Vary"] = "Accept-Encoding"
        key = (model, chunks, gzip)
        if delay:
            await asyncio.sleep(delay)
        if config.echo:
            text = echoed_text(payload, chunks)
            if not payload.get("stream"):
                body = completion_body(model, text)
                body = b"".join(gzipped([body])) if gzip else body
                return web.Response(body=body, content_type="application/json", headers=headers)
            plain = stream_events(model, chunks, text)
            return await streamed(request, gzipped(plain) if gzip else plain, headers, interval)
        if not payload.get("stream"):
            body = bodies.get(key)
            if body is None:
                body = completion_body(model, answer_text(chunks))
                body = bodies[key] = b"".join(gzipped([body])) if gzip else body
            return web.Response(body=body, content_type="application/json", headers=headers)
        events = streams.get(key)
        if events is None:
            plain = stream_events(model, chunks)
            events = streams[key] = gzipped(plain) if gzip else plain
        return await streamed(request, events, headers, interval)

    async def streamed(
        request: web.Request, events: list[bytes], headers: dict[str, str], interval: float
    ) -> web.StreamResponse:
        gzip = "Content-Encoding" in headers
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        for i, event in enumerate(events):
            if interval and 0 < i < len(events) - (1 if gzip else 0):
                await asyncio.sleep(interval)
            await response.write(event)
        await response.write_eof()
        return response

    async def models(_: web.Request) -> web.Response:
        data = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}
        return web.json_response(data)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    # memproxy forwards bodies up to its 16 MiB limit; aiohttp refuses over 1 MiB by default, and
    # a refused answer is one memproxy captures nothing of.
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/healthz", health)
    return app


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--interval-ms", type=float, default=0.0)
    parser.add_argument("--compress", action="store_true", help="gzip when the client accepts it")
    parser.add_argument("--echo", action="store_true", help="answers start with the question")
    args = parser.parse_args()
    config = FakeConfig(args.delay_ms, args.chunks, args.interval_ms, args.compress, args.echo)
    web.run_app(build_app(config), host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
