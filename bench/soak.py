"""Soak: steady streaming load with memory on for minutes; memory growth, errors, open files.

Two phases, each against a fresh memproxy process in front of the fake upstream:

1. ``healthy``: ``python -m proxy serve`` with memory on, the embedded store (seeded with
   real-text memories for every user, ``bench/lib/realtext.py``; templates when the LoCoMo
   data is absent) and a real ``redis-server`` as the cache.
2. ``failing``: Redis is started, then stopped (SIGKILL) as the phase begins, and the memory
   store fails every call (half of them only after hanging past the search timeout). The app is
   the same ``create_app`` served by uvicorn, with that failing store injected (``--serve``
   below). Chat must go on: every request answered, ``X-Memory-Status: degraded``.

During each phase C clients loop over streaming (and every 5th, non-streaming) chat requests
with rotating users and LoCoMo questions (repeats hit the caches). Every 5 s the proxy's resident
memory (VmRSS, and its anonymous part RssAnon) and open file count (/proc/PID/fd) are sampled.
After the warm-up (a fifth of the phase, at least 20 s) both slopes are fitted by least
squares. The judged one is RssAnon: VmRSS also counts the embedded store's memory-mapped WAL
and segment files, which grow with every retrieval-count update (page cache the kernel can
reclaim, see docs/benchmarks.md, "Soak"); both are reported.

Pass: RssAnon growth < 5 MiB/min after warm-up (not judged by ``--smoke``: too short), no errors
(every stream 200 and ending in ``[DONE]``), open files stable (the last sample within 16 of
the first after warm-up).

    .venv/bin/python bench/soak.py                  # 10 minutes per phase
    .venv/bin/python bench/soak.py --minutes 3      # shorter
    .venv/bin/python bench/soak.py --smoke          # ~8 s per phase, for CI

Not part of the test run (minutes). The machine is shared: figures carry that noise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import realtext
from bench.lib.servers import ServerProcess, fake_upstream, free_port, memproxy, python_env

GROWTH_LIMIT_MIB_PER_MIN = 5.0
FD_SLACK = 16
SAMPLE_EVERY_S = 5.0
SMOKE_SAMPLE_EVERY_S = 1.0
SMOKE_SECONDS = 8.0
USERS = 32
QUESTIONS = 64
CONCURRENCY = 16
CHUNKS = 16
INTERVAL_MS = 5
FAILING_HANG_S = 0.2
MIB = 1024 * 1024


# --- the failing-store server (a child process) -------------------------------------------------


class FailingStore:
    """A memory store whose every call fails: half at once, half after hanging (a timeout)."""

    def __init__(self) -> None:
        self.calls = 0

    async def _fail(self) -> Any:
        from proxy.errors import StoreError

        self.calls += 1
        if self.calls % 2:
            await asyncio.sleep(FAILING_HANG_S)
        raise StoreError("soak: the store is failing on purpose")

    def __getattr__(self, name: str) -> Any:
        if name == "close":

            async def close() -> None:
                return None

            return close

        async def failing(*args: Any, **kwargs: Any) -> Any:
            return await self._fail()

        return failing


def serve_failing(port: int) -> None:
    """Serve memproxy's app (settings from ``MEMPROXY_*``) with ``FailingStore`` injected."""
    import uvicorn

    from proxy.app import create_app
    from proxy.logs import configure_logging
    from proxy.settings import load_settings

    settings = load_settings()
    configure_logging(settings.server)
    app = create_app(settings, store=FailingStore())
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_config=None)


# --- load and sampling ------------------------------------------------------------------------


@dataclass
class Phase:
    """What one phase saw."""

    name: str
    requests: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    # (seconds, VmRSS bytes, RssAnon bytes, open files)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)

    def error(self, text: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(text)


def memory_of(pid: int) -> tuple[int, int]:
    """Resident memory of ``pid``: (VmRSS, RssAnon) in bytes.

    VmRSS includes file-backed pages: the embedded store memory-maps its WAL and segments, so
    store writes show up there as (reclaimable) page cache. RssAnon is the heap: leaks show
    there.
    """
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon"):
            values[name] = int(rest.split()[0]) * 1024
    return values.get("VmRSS", 0), values.get("RssAnon", 0)


def open_files(pid: int) -> int:
    """Open file descriptors of ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


MEMORIES_PER_USER = 20


def soak_questions() -> list[str]:
    """``QUESTIONS`` real questions, or numbered templates when the LoCoMo data is absent."""
    if realtext.available():
        return list(itertools.islice(realtext.RealText().questions(), QUESTIONS))
    return [
        f"Question {n}: what does the user drink and where did they travel?"
        for n in range(QUESTIONS)
    ]


ASKED = soak_questions()


def request_body(i: int, stream: bool) -> bytes:
    user = f"user-{i % USERS}"
    question = ASKED[i % QUESTIONS]
    return orjson.dumps(
        {
            "model": "gpt-4o-mini",
            "stream": stream,
            "user": user,
            "messages": [{"role": "user", "content": question}],
        }
    )


async def client_loop(
    session: aiohttp.ClientSession, url: str, worker: int, until: float, phase: Phase
) -> None:
    headers = {
        "Content-Type": "application/json",
        "Authorization": "Bearer sk-soak",
        "X-Fake-Chunks": str(CHUNKS),
        "X-Fake-Interval-Ms": str(INTERVAL_MS),
    }
    i = worker
    while time.monotonic() < until:
        stream = i % 5 != 0
        try:
            async with session.post(url, data=request_body(i, stream), headers=headers) as resp:
                body = await resp.read()
                status = resp.headers.get("x-memory-status", "none")
                phase.statuses[status] = phase.statuses.get(status, 0) + 1
                if resp.status != 200:
                    phase.error(f"status {resp.status}: {body[:200]!r}")
                elif stream and not body.endswith(b"data: [DONE]\n\n"):
                    phase.error(f"stream without [DONE]: {body[-120:]!r}")
                elif not stream and b'"chat.completion"' not in body:
                    phase.error(f"bad completion: {body[:200]!r}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            phase.error(f"{type(exc).__name__}: {exc}")
        phase.requests += 1
        i += CONCURRENCY


async def sampler(pid: int, until: float, every: float, phase: Phase) -> None:
    start = time.monotonic()
    while True:
        phase.samples.append((time.monotonic() - start, *memory_of(pid), open_files(pid)))
        if time.monotonic() >= until:
            return
        await asyncio.sleep(every)


async def drive(url: str, pid: int, seconds: float, every: float, phase: Phase) -> None:
    until = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(
            sampler(pid, until, every, phase),
            *(client_loop(session, url, w, until, phase) for w in range(CONCURRENCY)),
        )


def slope_mib_per_min(points: Sequence[tuple[float, int]]) -> float:
    """Least-squares slope of (seconds, bytes) points, MiB per minute."""
    if len(points) < 2:
        return 0.0
    xs = [p[0] / 60 for p in points]
    ys = [p[1] / MIB for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def verdict(phase: Phase, seconds: float, judge_growth: bool = True) -> dict[str, Any]:
    """The phase's figures and whether it passed (a smoke run is too short to judge growth)."""
    warm = max(20.0, seconds / 5) if seconds >= 60 else seconds / 3
    steady = [s for s in phase.samples if s[0] >= warm]
    growth = slope_mib_per_min([(s[0], s[2]) for s in steady])
    growth_rss = slope_mib_per_min([(s[0], s[1]) for s in steady])
    fds = [s[3] for s in steady]
    fd_stable = bool(fds) and fds[-1] - fds[0] <= FD_SLACK
    passed = phase.errors == 0 and fd_stable
    if judge_growth:
        passed = passed and growth < GROWTH_LIMIT_MIB_PER_MIN
    return {
        "phase": phase.name,
        "seconds": seconds,
        "requests": phase.requests,
        "requests_per_s": round(phase.requests / seconds, 1),
        "errors": phase.errors,
        "error_samples": phase.error_samples,
        "memory_status": phase.statuses,
        "rss_mib_start": round(phase.samples[0][1] / MIB, 1) if phase.samples else None,
        "rss_mib_after_warmup": round(steady[0][1] / MIB, 1) if steady else None,
        "rss_mib_end": round(phase.samples[-1][1] / MIB, 1) if phase.samples else None,
        "anon_mib_after_warmup": round(steady[0][2] / MIB, 1) if steady else None,
        "anon_mib_end": round(phase.samples[-1][2] / MIB, 1) if phase.samples else None,
        "growth_mib_per_min": round(growth, 2),  # RssAnon: the judged figure
        "rss_growth_mib_per_min": round(growth_rss, 2),  # VmRSS, store mmaps included
        "open_files_after_warmup": fds[0] if fds else None,
        "open_files_end": fds[-1] if fds else None,
        "open_files_max": max(fds) if fds else None,
        "passed": passed,
    }


# --- orchestration ------------------------------------------------------------------------------


def start_redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            import socket

            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def seed(base_url: str) -> None:
    import httpx

    with httpx.Client(base_url=base_url, timeout=60) as client:
        source = realtext.RealText() if realtext.available() else None
        for u in range(USERS):
            user = f"user-{u}"
            if source is not None:
                texts = source.texts(MEMORIES_PER_USER, start=u * MEMORIES_PER_USER)
                memories = [
                    {"user": user, "source": kind, "content": content} for kind, content in texts
                ]
            else:
                memories = [
                    {"user": user, "content": f"{user} drinks {d} and travelled to {p} in {y}."}
                    for d, p, y in zip(
                        ["tea", "espresso", "matcha", "cocoa"] * 5,
                        ["Lisbon", "Kyoto", "Oslo", "Quito", "Hanoi"] * 4,
                        range(2000, 2020),
                        strict=False,
                    )
                ]
            response = client.post(
                "/v1/memories",
                json={"memories": memories},
                headers={"Authorization": "Bearer sk-soak"},
            )
            if response.status_code != 201:
                raise RuntimeError(f"seeding failed: {response.status_code} {response.text[:200]}")


def run_phase(
    name: str, fake_url: str, seconds: float, every: float, tmp: Path, smoke: bool
) -> dict[str, Any]:
    """Start Redis and memproxy for the phase, drive it, stop everything."""
    redis_port = free_port()
    redis = start_redis(redis_port, tmp)
    env = {
        "MEMPROXY_MEMORY_ENABLED": "true",
        "MEMPROXY_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "MEMPROXY_ACCESS_LOG": "false",
        "MEMPROXY_LOG_LEVEL": "warning",
    }
    data = tmp / f"data-{name}"
    if name == "healthy":
        server = memproxy(fake_url, data, extra_env=env)
    else:
        port = free_port()
        server = ServerProcess(
            "memproxy-failing",
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)],
            port=port,
            ready_path="/healthz",
            env=python_env(MEMPROXY_UPSTREAM_URL=fake_url, MEMPROXY_DATA_DIR=str(data), **env),
        )
    phase = Phase(name)
    try:
        with server:
            if name == "healthy":
                seed(server.base_url)
            else:
                redis.send_signal(signal.SIGKILL)  # Redis is gone for the whole phase
                redis.wait()
            assert server.pid is not None
            url = f"{server.base_url}/v1/chat/completions"
            asyncio.run(drive(url, server.pid, seconds, every, phase))
    finally:
        if redis.poll() is None:
            redis.kill()
            redis.wait()
    result = verdict(phase, seconds, judge_growth=not smoke)
    result["log_tail"] = server.log_tail(5)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="per phase (default 10)")
    parser.add_argument("--smoke", action="store_true", help="~8 s per phase, for CI")
    parser.add_argument("--phase", choices=("healthy", "failing", "both"), default="both")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_failing(args.serve)
        return 0
    seconds = SMOKE_SECONDS if args.smoke else args.minutes * 60
    every = SMOKE_SAMPLE_EVERY_S if args.smoke else SAMPLE_EVERY_S
    phases = ("healthy", "failing") if args.phase == "both" else (args.phase,)
    fake = fake_upstream(compress=True, name="fake-soak")
    results = []
    with tempfile.TemporaryDirectory() as tmp, fake:
        for name in phases:
            results.append(
                run_phase(name, f"{fake.base_url}/v1", seconds, every, Path(tmp), args.smoke)
            )
            print(json.dumps(results[-1], indent=2), flush=True)
    ok = all(r["passed"] for r in results)
    print(json.dumps({"passed": ok, "phases": [r["phase"] for r in results]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
