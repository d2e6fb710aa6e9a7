"""Which upstream HTTP client should memproxy use? (ADR-0002, ADR-0085)

Runs the same minimal Starlette proxy once per client (plain httpx, httpx with the
``httpx-aiohttp`` transport, aiohttp directly, and pyreqwest when installed), each under uvicorn
(uvloop + httptools), in front of the fake upstream, and loads it at 50 concurrent keep-alive
connections, interleaved with the direct baseline. Non-streaming and streaming. The whole-proxy
comparison of the clients memproxy can use is ``bench/overhead.py --client``.

    .venv/bin/python bench/http_clients.py            # ~1 minute
    .venv/bin/python bench/http_clients.py --smoke    # seconds, for CI

(``--serve CLIENT --port N`` is the proxy process itself, started by the benchmark.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import loadgen, stats
from bench.lib.servers import ServerProcess, fake_upstream, free_port, python_env

# pyreqwest is measured when installed (``uv pip install pyreqwest``); it is no dependency.
CLIENTS = ("httpx", "httpx-aiohttp", "aiohttp", "pyreqwest")


def available() -> list[str]:
    """The clients importable here."""
    return [c for c in CLIENTS if c != "pyreqwest" or importlib.util.find_spec("pyreqwest")]


POOL = 512


def build_proxy(client_name: str, upstream: str) -> Any:
    """A minimal Starlette proxy for chat completions using ``client_name`` upstream."""
    import aiohttp
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    state: dict[str, Any] = {}
    url = upstream.rstrip("/") + "/chat/completions"
    headers = {"content-type": "application/json"}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL)
        if client_name == "httpx":
            state["client"] = httpx.AsyncClient(limits=limits, timeout=60)
        elif client_name == "pyreqwest":
            from pyreqwest.client import ClientBuilder

            builder = ClientBuilder().gzip(False).brotli(False).zstd(False).deflate(False)
            state["client"] = builder.max_connections(POOL).build()
        elif client_name == "httpx-aiohttp":
            from httpx_aiohttp import HttpxAiohttpClient

            state["client"] = HttpxAiohttpClient(limits=limits, timeout=60)
        else:
            connector = aiohttp.TCPConnector(limit=POOL)
            state["client"] = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        yield
        client = state["client"]
        closing = client_name in ("aiohttp", "pyreqwest")
        await (client.close() if closing else client.aclose())

    async def chat(request: Request) -> Response:
        body = await request.body()
        client = state["client"]
        if client_name == "pyreqwest":
            return await relay_pyreqwest(client, body)
        if client_name == "aiohttp":
            resp = await client.post(url, data=body, headers=headers)
            if resp.content_type == "text/event-stream":

                async def relay_aiohttp() -> AsyncIterator[bytes]:
                    try:
                        async for chunk in resp.content.iter_any():
                            yield chunk
                    finally:
                        resp.close()

                return StreamingResponse(relay_aiohttp(), media_type="text/event-stream")
            data = await resp.read()
            return Response(data, status_code=resp.status, media_type="application/json")
        req = client.build_request("POST", url, content=body, headers=headers)
        resp = await client.send(req, stream=True)
        if resp.headers.get("content-type", "").startswith("text/event-stream"):

            async def relay_httpx() -> AsyncIterator[bytes]:
                try:
                    async for chunk in resp.aiter_raw():
                        yield chunk
                finally:
                    await resp.aclose()

            return StreamingResponse(relay_httpx(), media_type="text/event-stream")
        data = await resp.aread()
        await resp.aclose()
        return Response(data, status_code=resp.status_code, media_type="application/json")

    async def relay_pyreqwest(client: Any, body: bytes) -> Response:
        # A read buffer limit of 1: with the default (64 KiB) the head waits for that much body.
        request = (
            client.request("POST", url)
            .headers(headers)
            .body_bytes(body)
            .streamed_read_buffer_limit(1)
            .build_streamed()
        )
        resp = await request.__aenter__()
        if (resp.get_header("content-type") or "").startswith("text/event-stream"):

            async def relay_rust() -> AsyncIterator[bytes]:
                try:
                    while (chunk := await resp.body_reader.read_chunk()) is not None:
                        yield bytes(chunk)
                finally:
                    await request.__aexit__(None, None, None)

            return StreamingResponse(relay_rust(), media_type="text/event-stream")
        data = bytes(await resp.body_reader.bytes())
        await request.__aexit__(None, None, None)
        return Response(data, status_code=resp.status, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response("ok")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/healthz", health),
        ],
        lifespan=lifespan,
    )


def serve(client_name: str, upstream: str, port: int) -> None:
    """Run one proxy variant (the subprocess side)."""
    import uvicorn

    uvicorn.run(
        build_proxy(client_name, upstream),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


def proxy_process(client_name: str, upstream: str) -> ServerProcess:
    """One proxy variant as a subprocess."""
    port = free_port()
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", client_name]
    argv += ["--upstream", upstream, "--port", str(port)]
    return ServerProcess(
        f"proxy-{client_name}", argv, port=port, ready_path="/healthz", env=python_env()
    )


def main() -> None:
    """Run the comparison and print a table (and JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.upstream, args.port)
        return
    seconds, rounds = (0.5, 1) if args.smoke else (args.seconds, args.rounds)
    with fake_upstream(chunks=5, compress=True, name="fake") as fake:
        upstream = fake.base_url + "/v1"
        proxies = [proxy_process(name, upstream) for name in available()]
        try:
            for proc in proxies:
                proc.start()
            targets = [loadgen.Target("direct", fake.base_url)]
            targets += [loadgen.Target(p.name, p.base_url) for p in proxies]
            results = loadgen.run_interleaved(
                targets,
                concurrencies=[args.concurrency],
                seconds=seconds,
                rounds=rounds,
                streams=(False, True),
            )
        finally:
            for proc in proxies:
                proc.stop()
    rows = loadgen.result_rows(results, baseline="direct")
    columns = ["target", "c", "stream", "requests", "errors", "rps", "p50_ms", "p99_ms"]
    print(stats.format_table(rows, columns))
    if args.json:
        print(json.dumps(rows, indent=2))
    failed = [r for r in rows if r["errors"] or not r["requests"]]
    if failed:
        raise SystemExit(f"errors in {len(failed)} cells")


if __name__ == "__main__":
    main()
