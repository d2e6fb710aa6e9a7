"""CPU per request of the HTTP server protocol alone: uvicorn's, memproxy's, uvicorn's h11.

Each protocol serves the same keep-alive connection in process: a fake transport (writes
counted, nothing sent), an ASGI app that reads the body and answers 2 bytes, and a chat request
with the 14 headers the OpenAI Python SDK sends. Rounds interleave the protocols so that other
work on the machine falls on all of them alike; the table gives the median over rounds of the
process CPU microseconds per request. This isolates what ``LimitedHttpProtocol``
(``proxy/server.py``, ADR-0083) adds to uvicorn's httptools protocol; ``bench/overhead.py``
measures the whole proxy.

    .venv/bin/python bench/server_protocol.py            # ~20 s
    .venv/bin/python bench/server_protocol.py --smoke    # a second, for CI
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from bench.lib import stats
from proxy.server import LimitedHttpProtocol, server_config
from proxy.settings import ServerSettings

BODY = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
HEADERS = [
    ("Host", "127.0.0.1:8080"),
    ("Accept-Encoding", "gzip, deflate"),
    ("Accept", "application/json"),
    ("Connection", "keep-alive"),
    ("User-Agent", "OpenAI/Python 1.50.0"),
    ("X-Stainless-Lang", "python"),
    ("X-Stainless-Package-Version", "1.50.0"),
    ("X-Stainless-OS", "Linux"),
    ("X-Stainless-Arch", "x64"),
    ("X-Stainless-Runtime", "CPython"),
    ("X-Stainless-Runtime-Version", "3.11.7"),
    ("Authorization", "Bearer sk-" + "x" * 48),
    ("Content-Type", "application/json"),
    ("Content-Length", str(len(BODY))),
]
REQUEST = (
    "POST /v1/chat/completions HTTP/1.1\r\n"
    + "".join(f"{name}: {value}\r\n" for name, value in HEADERS)
    + "\r\n"
).encode() + BODY
PROTOCOLS: dict[str, Any] = {
    "uvicorn-httptools": HttpToolsProtocol,
    "memproxy": LimitedHttpProtocol,
    "uvicorn-h11": H11Protocol,
}


async def answer(scope: Any, receive: Any, send: Any) -> None:
    """Read the body, answer ``{}``."""
    await receive()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


class FakeTransport:
    """What the protocols call on a transport; writes are counted and dropped."""

    def __init__(self) -> None:
        self.writes = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass


async def cpu_us_per_request(protocol_class: Any, requests: int) -> float:
    """Serve ``requests`` on one connection; process CPU microseconds per request."""
    config = server_config(answer, ServerSettings())
    config.load()
    state = ServerState()
    protocol = protocol_class(config=config, server_state=state, app_state={})
    transport = FakeTransport()
    protocol.connection_made(transport)
    started = time.process_time()
    for _ in range(requests):
        protocol.data_received(REQUEST)
        for task in list(state.tasks):  # the request's ASGI task
            await task
    elapsed = time.process_time() - started
    protocol.connection_lost(None)
    assert transport.writes >= requests, "the protocol did not answer"
    return elapsed / requests * 1e6


async def measure(rounds: int, requests: int) -> dict[str, list[float]]:
    """Interleaved rounds: every protocol once per round."""
    samples: dict[str, list[float]] = {name: [] for name in PROTOCOLS}
    for _ in range(rounds):
        for name, protocol_class in PROTOCOLS.items():
            samples[name].append(await cpu_us_per_request(protocol_class, requests))
    return samples


def main() -> None:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a second, for CI")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=10_000, help="per protocol and round")
    args = parser.parse_args()
    rounds, requests = (1, 200) if args.smoke else (args.rounds, args.requests)
    samples = uvloop.run(measure(rounds, requests))
    base = statistics.median(samples["uvicorn-httptools"])
    rows = [
        {
            "protocol": name,
            "cpu_us_per_request": statistics.median(values),
            "vs_uvicorn_httptools": stats.ratio(statistics.median(values), base),
        }
        for name, values in samples.items()
    ]
    print(stats.format_table(rows))


if __name__ == "__main__":
    main()
