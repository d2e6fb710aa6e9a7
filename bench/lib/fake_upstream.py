"""A lean fake OpenAI upstream for benchmarks: fixed answers, optional delay, SSE streaming.

It is built on aiohttp's server because on a 2-core machine every CPU cycle the fake spends is
taken from the proxy under test; the answers are pre-encoded once at start-up.

Run: ``python bench/lib/fake_upstream.py --port 9000 [--delay-ms 0] [--chunks 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

MODEL = "fake-model"
ANSWER_WORDS = ("memproxy", "benchmark", "answer", "from", "the", "fake", "upstream", "model")


def completion_body(model: str, text: str) -> bytes:
    """Return a non-streaming chat.completion JSON body."""
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
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
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def stream_events(model: str, chunks: int) -> list[bytes]:
    """Return the SSE events of a streamed answer of ``chunks`` content pieces."""
    words = [ANSWER_WORDS[i % len(ANSWER_WORDS)] + " " for i in range(chunks)]
    events = [chunk_event(model, {"role": "assistant", "content": ""}, None)]
    events += [chunk_event(model, {"content": word}, None) for word in words]
    events.append(chunk_event(model, {}, "stop"))
    events.append(b"data: [DONE]\n\n")
    return events


def build_app(delay_ms: float, chunks: int) -> web.Application:
    """Return the aiohttp app answering chat completions, models and health."""
    delay = delay_ms / 1000.0
    text = " ".join(ANSWER_WORDS[i % len(ANSWER_WORDS)] for i in range(chunks))
    body_cache: dict[str, bytes] = {}
    events_cache: dict[str, list[bytes]] = {}

    async def chat(request: web.Request) -> web.StreamResponse:
        payload = json.loads(await request.read())
        model = str(payload.get("model") or MODEL)
        if delay:
            await asyncio.sleep(delay)
        if not payload.get("stream"):
            body = body_cache.get(model) or body_cache.setdefault(
                model, completion_body(model, text)
            )
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = events_cache.get(model) or events_cache.setdefault(
            model, stream_events(model, chunks)
        )
        for event in events:
            await response.write(event)
        await response.write_eof()
        return response

    async def models(_: web.Request) -> web.Response:
        data = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}
        return web.json_response(data)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
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
    args = parser.parse_args()
    web.run_app(
        build_app(args.delay_ms, args.chunks),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
