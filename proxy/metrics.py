"""Prometheus metrics, owned by the app (no global registry).

With one worker, each app has its own ``CollectorRegistry``. With several workers the CLI sets
``PROMETHEUS_MULTIPROC_DIR`` before any import (prometheus_client reads it at import time) and
``server.metrics_dir``; values then live in per-process files and ``/metrics`` on any worker
aggregates all of them (gauges summed over live processes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
# Memory stages take microseconds to tens of milliseconds.
STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5)


class Metrics:
    """The proxy's metrics: requests, latencies, in-flight requests and streams, connections."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry()
        # In multiprocess mode values go to files; registering would duplicate them.
        reg = None if multiprocess_dir else self.registry
        self.requests = Counter(
            "memproxy_requests",
            "HTTP requests by route, method and status.",
            ["route", "method", "status"],
            registry=reg,
        )
        self.latency = Histogram(
            "memproxy_request_duration_seconds",
            "Time from request start to the last byte sent, by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.upstream_latency = Histogram(
            "memproxy_upstream_response_seconds",
            "Time from sending upstream to its response headers, by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.first_chunk = Histogram(
            "memproxy_time_to_first_chunk_seconds",
            "Time from request start to the first streamed chunk sent to the client.",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self._upstream_children: dict[str, Any] = {}
        self.upstream_errors = Counter(
            "memproxy_upstream_errors",
            "Upstream failures by kind (connect, timeout, midstream, disconnect).",
            ["kind"],
            registry=reg,
        )
        self.in_flight = Gauge(
            "memproxy_requests_in_flight",
            "Requests being served.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.streams = Gauge(
            "memproxy_streams_in_flight",
            "Streaming responses being relayed.",
            registry=reg,
            multiprocess_mode="livesum",
        )

        self.memory_requests = Counter(
            "memproxy_memory_requests",
            "Chat requests by X-Memory-Status (injected, empty, off, degraded, explain).",
            ["status"],
            registry=reg,
        )
        self.memory_degraded = Counter(
            "memproxy_memory_degraded",
            "Chat requests served without (all of) their memories, by reason.",
            ["reason"],
            registry=reg,
        )
        self.memory_stage = Histogram(
            "memproxy_memory_stage_seconds",
            "Time per memory pipeline stage (budget, embed, search, assemble, inject, total).",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=reg,
        )
        self.cache_lookups = Counter(
            "memproxy_cache_lookups",
            "Cache lookups by kind (embedding, tokens, retrieval) and result (hit, miss); "
            "hit ratio = hit / (hit + miss).",
            ["kind", "result"],
            registry=reg,
        )
        self.memory_writes = Counter(
            "memproxy_memory_background",
            "After-response memory work by kind (capture, retrievals) and result (ok, error).",
            ["kind", "result"],
            registry=reg,
        )
        # Memory lifecycle and fact extraction (adr/0112, adr/0113).
        self.memories_purged = Counter(
            "memproxy_memories_purged",
            "Expired memories deleted by the periodic purge.",
            registry=reg,
        )
        self.extraction_calls = Counter(
            "memproxy_extraction_calls",
            "Fact-extraction calls to the upstream by result (ok, error).",
            ["result"],
            registry=reg,
        )
        self.extraction_tokens = Counter(
            "memproxy_extraction_tokens",
            "Tokens fact extraction spent, from the upstream's usage, by kind (prompt, "
            "completion).",
            ["kind"],
            registry=reg,
        )
        self.facts = Counter(
            "memproxy_facts",
            "Extracted facts by outcome: added, superseded (added, replacing a memory), "
            "skipped (already known).",
            ["outcome"],
            registry=reg,
        )
        self.extraction_failures = Counter(
            "memproxy_extraction_failures",
            "Turns whose extraction stored nothing by reason: dropped (queue_full, "
            "tenant_rate), the call failed (timeout, rate_limited, upstream_status, transport), "
            "the answer was broken (not_json, wrong_schema, refusal), or writing failed (store, "
            "internal).",
            ["reason"],
            registry=reg,
        )
        # The HTTP server's own events (proxy/server.py): per connection, not per request.
        self.connections = Gauge(
            "memproxy_connections_open",
            "Client connections open.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.refused = Counter(
            "memproxy_requests_refused",
            "Requests the HTTP server refused by reason: head_too_large and too_many_headers "
            "(431), head_timeout (408, or closed when nothing was sent), body_timeout (408), "
            "malformed (400).",
            ["reason"],
            registry=reg,
        )
        # Backends (store, embedder, cache; /readyz and proxy/memory/reopening.py): 1 up, 0
        # down. With several workers the lowest of the live processes, so one worker whose
        # store is down shows.
        self.backend_up = Gauge(
            "memproxy_backend_up",
            "Whether a memory backend is up (1) or down (0), as last seen by an attempt to open "
            "it or by /readyz.",
            ["backend"],
            registry=reg,
            multiprocess_mode="livemin",
        )
        self.backend_retries = Counter(
            "memproxy_backend_retries",
            "Failed attempts to open a backend that was down at start (retried with backoff).",
            ["backend"],
            registry=reg,
        )
        self._children: dict[tuple[str, ...], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: ``labels`` costs microseconds per call."""
        key = (metric._name, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def count_cache_lookup(self, kind: str, hits: int, misses: int) -> None:
        """``RequestCache``'s lookup hook: hit and miss counts per kind."""
        if hits:
            self.child(self.cache_lookups, kind, "hit").inc(hits)
        if misses:
            self.child(self.cache_lookups, kind, "miss").inc(misses)

    def count_memory_request(self, status: str, reasons: Sequence[str] = ()) -> None:
        """One chat request through the memory pipeline: its status, why it was degraded."""
        self.child(self.memory_requests, status).inc()
        for reason in reasons:
            self.child(self.memory_degraded, reason).inc()

    def observe_memory_stage(self, stage: str, seconds: float) -> None:
        """The time one memory stage (or ``total``) took."""
        self.child(self.memory_stage, stage).observe(seconds)

    def count_memory_work(self, kind: str, ok: bool) -> None:
        """After-response memory work (``capture``, ``retrievals``) and whether it succeeded."""
        self.child(self.memory_writes, kind, "ok" if ok else "error").inc()

    def set_backend_up(self, backend: str, up: bool) -> None:
        """``memproxy_backend_up{backend}``: 1 when up, 0 when down."""
        self.child(self.backend_up, backend).set(1 if up else 0)
        self.child(self.backend_retries, backend)  # its retries show from 0, not from the first

    def count_backend_retry(self, backend: str) -> None:
        """One more failed attempt to open ``backend``."""
        self.child(self.backend_retries, backend).inc()

    def count_purged(self, purged: int) -> None:
        """Expired memories one purge deleted."""
        if purged:
            self.memories_purged.inc(purged)

    def count_extraction(
        self, ok: bool, prompt_tokens: int = 0, completion_tokens: int = 0
    ) -> None:
        """One extraction call and the tokens its usage reported."""
        self.child(self.extraction_calls, "ok" if ok else "error").inc()
        if prompt_tokens:
            self.child(self.extraction_tokens, "prompt").inc(prompt_tokens)
        if completion_tokens:
            self.child(self.extraction_tokens, "completion").inc(completion_tokens)

    def count_facts(self, outcome: str, count: int = 1) -> None:
        """Extracted facts by outcome (added, superseded, skipped)."""
        if count:
            self.child(self.facts, outcome).inc(count)

    def count_extraction_failure(self, reason: str) -> None:
        """A turn whose extraction stored nothing, and why."""
        self.child(self.extraction_failures, reason).inc()

    def upstream_latency_for(self, route: str) -> Any:
        """The upstream latency histogram of ``route`` (children cached: ``labels`` is slow)."""
        child = self._upstream_children.get(route)
        if child is None:
            child = self._upstream_children[route] = self.upstream_latency.labels(route)
        return child

    def render(self) -> tuple[bytes, str]:
        """Return the exposition text and its content type."""
        if self.multiprocess_dir:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        """Drop this process's live gauges from the shared files (multiprocess mode)."""
        if self.multiprocess_dir:
            multiprocess.mark_process_dead(os.getpid(), self.multiprocess_dir)  # type: ignore[no-untyped-call]
