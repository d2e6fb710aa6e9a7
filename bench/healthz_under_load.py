"""``/healthz`` latency while memproxy handles one worst-case chat body (issue 11, item 1).

One client sends a single large or pathological chat body; another polls ``GET /healthz`` on
its own keep-alive connection the whole time. What the poller waits is how long the event loop
was held: before the fix, counting one 16 MB message of a single character ran tiktoken's BPE on
the loop for 8-12 s. Reported per body: ``/healthz`` p50/p99/max over the polls made while the
chat request was in flight, and the chat request's own time and ``X-Memory-Status``. The
``memory-off`` rows (the same tree, ``MEMPROXY_MEMORY_ENABLED=false``) show what parsing and
forwarding such a body costs any proxy; memory on should add little to them.

memproxy runs as ``python -m proxy serve`` with memory on and every default (50 ms memory
deadline), configured only through ``MEMPROXY_*`` variables, in front of the test suite's fake
upstream. Each request comes from a new tenant, with a new nonce in its text, so no cache can
answer for it. Prose comes from LoCoMo's dialogs (``--data``, CC BY-NC 4.0: read, never
copied), repeated to size.

``--capture turn`` sends ``X-Memory-Capture: turn`` with every chat: memproxy then stores the turn
after the answer (the user's message cut to ``memory.max_content_chars``), so the polls go on
for ``CAPTURE_TAIL_S`` after the response and count too.

Target: ``/healthz`` p99 < 50 ms during every body. The machine may be shared: compare trees
within one run (``--baseline-tree``: the same bodies against an older checkout, interleaved).

    .venv/bin/python bench/healthz_under_load.py --smoke     # seconds, for CI
    git archive <commit> | tar -x -C /tmp/memproxy-before
    .venv/bin/python bench/healthz_under_load.py --baseline-tree /tmp/memproxy-before
    .venv/bin/python bench/healthz_under_load.py --capture turn --only 16MB
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats
from bench.lib.locomo_data import turn_content
from bench.lib.servers import ROOT, ServerProcess, fake_upstream, memproxy, served_from
from tests.fakes.pdfs import b64, pdf

DEFAULT_DATA = ROOT.parent / "shared" / "bench" / "locomo" / "locomo_dev.json"
TARGET_P99_MS = 50.0
MB = 1_000_000
BODY_LIMIT = 16 * 1024 * 1024  # memproxy's default max_body_bytes
POLL_GAP_S = 0.005  # between two health checks: ~150 polls a second at most
CAPTURE_TAIL_S = 1.0  # --capture: polls after the answer that still count (the capture's time)
KEY = "sk-healthz-bench"


def prose(data: Path, size: int) -> str:
    """LoCoMo dialog turns, repeated to ``size`` characters (synthetic words without the data)."""
    turns: list[str] = []
    if data.is_file():
        for sample in json.loads(data.read_text()):
            for key, value in sample["conversation"].items():
                if key.startswith("session_") and isinstance(value, list):
                    turns += [turn_content(turn) for turn in value]
    text = "\n".join(turns) or "the quick brown fox jumps over the lazy dog"
    return (text * (size // len(text) + 1))[:size]


def chat(model: str, messages: list[dict[str, Any]]) -> bytes:
    body = json.dumps({"model": model, "messages": messages}).encode()
    assert len(body) <= BODY_LIMIT, (model, len(body))
    return body


# Every request gets its own text (the nonce is replaced per request): a count cached from the
# previous request with the same message would hide the cost being measured.
NONCE = b"nonce-" + b"0" * 26


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": NONCE.decode() + text + "\nWhat tea do I drink?"}]


def fresh(body: bytes) -> bytes:
    """``body`` with a new nonce (same length)."""
    return body.replace(NONCE, b"nonce-" + uuid.uuid4().hex[:26].encode())


def with_pdf(pages: int, image_bytes: int) -> list[dict[str, Any]]:
    """A user turn with a base64 PDF (chat ``file`` part) of ``pages`` pages, each with an
    incompressible image of ``image_bytes`` (a scan's size), read by its pages (adr/0143)."""
    data = "data:application/pdf;base64," + b64(pdf(pages, image_bytes=image_bytes))
    part = {"type": "file", "file": {"filename": "scan.pdf", "file_data": data}}
    text = {"type": "text", "text": NONCE.decode() + " Sum this up."}
    return [{"role": "user", "content": [part, text]}]


def bodies(data: Path, smoke: bool) -> dict[str, bytes]:
    """The worst cases, by name (model after the slash)."""
    big = 16 * MB
    if smoke:
        return {
            "one-char-1MB/gpt-4.1": chat("gpt-4.1", user("a" * MB)),
            "prose-1MB/gpt-4.1": chat("gpt-4.1", user(prose(data, MB))),
            "pdf-1MB/gpt-4.1": chat("gpt-4.1", with_pdf(10, 75_000)),
        }
    depth = 1000
    deep = b'{"model":"gpt-4o","messages":[{"role":"user","content":"tea?"}],"x":'
    turns = prose(data, 2 * MB).split("\n")[:10_000]
    return {
        "one-char-16MB/gpt-4o": chat("gpt-4o", user("a" * big)),
        "one-char-16MB/gpt-4.1": chat("gpt-4.1", user("a" * big)),
        "one-char-2MB/gpt-4.1": chat("gpt-4.1", user("a" * 2 * MB)),
        "prose-16MB/gpt-4.1": chat("gpt-4.1", user(prose(data, big))),
        "prose-1MB/gpt-4.1": chat("gpt-4.1", user(prose(data, MB))),
        "fences-160k/gpt-4.1": chat("gpt-4.1", user("<memories></memories>" * 160_000)),
        "messages-10k/gpt-4o": chat(
            "gpt-4o", [{"role": "user", "content": NONCE.decode() + t} for t in turns]
        ),
        "nested-1000": deep + b"[" * depth + b"]" * depth + b"}",
        "pdf-3MB/gpt-4.1": chat("gpt-4.1", with_pdf(30, 75_000)),
        "pdf-12MB/gpt-4.1": chat("gpt-4.1", with_pdf(120, 100_000)),
    }


class Poller:
    """Polls ``/healthz`` on one keep-alive connection in a thread, recording each latency."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.samples: list[tuple[float, float]] = []  # (started, seconds)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self.samples.append((started, time.perf_counter() - started))
            self.errors += not ok
            time.sleep(POLL_GAP_S)
        conn.close()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def during(self, start: float, end: float) -> list[float]:
        """Latencies of the polls started while [start, end] (one that spans the end counts)."""
        return [seconds for started, seconds in self.samples if start <= started <= end]


def memory_ms(server_timing: str) -> float:
    """The memory pipeline's own time, from ``Server-Timing`` (NaN with memory off)."""
    for part in server_timing.split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name == "memory" and duration:
            return float(duration)
    return math.nan


@dataclass
class Run:
    """One chat request with its ``/healthz`` polls."""

    status: int
    memory: str
    chat_s: float
    memory_ms: float
    polls: list[float]
    poll_errors: int


def measure(server: ServerProcess, body: bytes, capture: str = "off") -> Run:
    """One chat request with ``body`` while polling ``/healthz`` (``capture``: the request's
    ``X-Memory-Capture``; the polls then go on ``CAPTURE_TAIL_S`` after the answer)."""
    # A new tenant each time (passthrough: any key is one), as an attacker would: nothing this
    # request costs can come from a cache an earlier one filled.
    key = f"{KEY}-{uuid.uuid4().hex}"
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    tail = 0.0
    if capture != "off":
        headers["X-Memory-Capture"] = capture
        tail = CAPTURE_TAIL_S
    with httpx.Client(timeout=600) as client, Poller(server.port) as poller:
        time.sleep(0.1)  # the poller's connection is up and idle before the body goes
        start = time.perf_counter()
        response = client.post(
            f"{server.base_url}/v1/chat/completions", content=fresh(body), headers=headers
        )
        end = time.perf_counter()
        time.sleep(0.05 + tail)
    return Run(
        status=response.status_code,
        memory=response.headers.get("x-memory-status", "-"),
        chat_s=end - start,
        memory_ms=memory_ms(response.headers.get("server-timing", "")),
        polls=poller.during(start, end + tail),
        poll_errors=poller.errors,
    )


def summarize(tree: str, body: str, size: int, runs: list[Run]) -> dict[str, Any]:
    """The table row of one tree and body: polls pooled over the rounds, medians of the rest."""
    polls = [seconds for run in runs for seconds in run.polls]
    health = stats.summarize_ms(polls)
    return {
        "tree": tree,
        "body": body,
        "MB": size / MB,
        "status": "/".join(sorted({str(run.status) for run in runs})),
        "memory": "/".join(sorted({run.memory for run in runs})),
        "chat_ms": statistics.median(run.chat_s for run in runs) * 1000,
        "memory_ms": statistics.median(run.memory_ms for run in runs),
        "polls": len(polls),
        "healthz_p50_ms": health["p50"],
        "healthz_p99_ms": health["p99"],
        "healthz_max_ms": health["max"],
        "poll_errors": sum(run.poll_errors for run in runs),
    }


def warm(server: ServerProcess) -> None:
    """One small chat, so first-use costs are paid before measuring."""
    headers = {"Authorization": f"Bearer {KEY}"}
    warm = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": user("hi")},
        headers=headers,
        timeout=60,
    )
    warm.raise_for_status()


def interleaved(
    servers: dict[str, ServerProcess], cases: dict[str, bytes], rounds: int, capture: str = "off"
) -> Iterator[tuple[str, str, Callable[[], Run]]]:
    """(tree, body, run) in an order that alternates which tree goes first."""
    names = list(servers)
    for round_ in range(rounds):
        for index, (body_name, body) in enumerate(cases.items()):
            order = names if (round_ + index) % 2 == 0 else names[::-1]
            for tree in order:
                yield tree, body_name, lambda s=servers[tree], b=body: measure(s, b, capture)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="two 1 MB bodies, this tree only")
    parser.add_argument("--rounds", type=int, default=3, help="requests per tree and body")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo json (prose)")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also memproxy served from this source tree (an older commit, git archive)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", help="the bodies whose name contains this (e.g. pdf)")
    parser.add_argument(
        "--capture",
        choices=("off", "user", "turn"),
        default="off",
        help="X-Memory-Capture of every chat (polls count until CAPTURE_TAIL_S after it)",
    )
    args = parser.parse_args()
    if args.smoke and args.capture == "off":
        args.capture = "turn"  # CI covers the capture path's tail too
    cases = bodies(args.data, args.smoke)
    if args.only:
        cases = {name: body for name, body in cases.items() if args.only in name}
    with tempfile.TemporaryDirectory(prefix="memproxy-healthz-") as tmp, ExitStack() as stack:
        fake = stack.enter_context(fake_upstream(chunks=5, compress=True, name="fake"))
        upstream = fake.base_url + "/v1"
        servers = {"after": memproxy(upstream, Path(tmp, "after"))}
        if not args.smoke:  # what any proxy pays for such a body: parse and forward it
            off = {"MEMPROXY_MEMORY_ENABLED": "false"}
            servers["memory-off"] = memproxy(upstream, Path(tmp, "off"), extra_env=off)
        if args.baseline_tree and not args.smoke:
            base = memproxy(upstream, Path(tmp, "before"))
            servers = {
                "before": served_from(base, args.baseline_tree, "memproxy-before"),
                **servers,
            }
        for server in servers.values():
            stack.enter_context(server)
            warm(server)
        runs: dict[tuple[str, str], list[Run]] = {}
        rounds = 1 if args.smoke else args.rounds
        for tree, body_name, run in interleaved(servers, cases, rounds, args.capture):
            done = run()
            runs.setdefault((tree, body_name), []).append(done)
            print(f"{tree} {body_name}: {done.memory} {done.chat_s * 1000:.0f} ms", file=sys.stderr)
    rows = [
        summarize(tree, body, len(cases[body]), found)
        for (tree, body), found in sorted(
            runs.items(), key=lambda item: (list(cases).index(item[0][1]), item[0][0])
        )
    ]
    print(stats.format_table(rows))
    after = [r for r in rows if r["tree"] == "after"]
    worst = max((r["healthz_p99_ms"] for r in after if r["polls"]), default=math.nan)
    verdict = "met" if worst < TARGET_P99_MS else "NOT met"  # NaN (no polls) is not met
    print(
        f"/healthz p99 during the worst body (this tree): {worst:.1f} ms; target < "
        f"{TARGET_P99_MS:.0f} ms: {verdict}"
    )
    if args.json:
        print(json.dumps(rows, indent=2))
    if any(
        run.status >= 500 or run.poll_errors
        for (tree, _), found in runs.items()
        if tree == "after"
        for run in found
    ):
        raise SystemExit("a request failed during the benchmark")


if __name__ == "__main__":
    main()
