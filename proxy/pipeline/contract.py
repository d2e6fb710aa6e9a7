"""The contract between the chat route and the memory pipeline: its one plug-in point.

The chat route calls ``MemoryPipeline.prepare`` exactly once per request, before forwarding,
and, if the returned ``Prepared`` has an ``on_complete`` hook, calls it once after the response
has gone to the client (for a stream: after the last chunk, with the assembled assistant text).
The hook runs after the client has its answer, so it never adds latency; it must not raise.

``prepare`` must never fail the chat request for a backend problem: it degrades instead
(``X-Memory-Status: degraded``). It may raise a ``proxy.errors.RequestError`` for a bad
``X-Memory-*`` header, or short-circuit with ``reply`` (``X-Memory-Mode: explain``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from starlette.responses import Response

from proxy.tenancy import Tenant


@dataclass(frozen=True, slots=True)
class Completion:
    """What the client received, handed to ``Prepared.on_complete``.

    ``text`` is the assistant text of choice 0 (for a stream, the concatenated deltas);
    ``ok`` is False when the upstream failed, timed out, or the client went away.
    """

    status: int
    streamed: bool
    ok: bool
    text: str
    body: Mapping[str, object] | None = None  # the parsed non-streaming response


@dataclass(frozen=True, slots=True)
class Prepared:
    """The outcome of ``prepare``: the body to forward and extra response headers."""

    body: dict[str, object]
    response_headers: Mapping[str, str] = field(default_factory=dict)
    on_complete: Callable[[Completion], Awaitable[None]] | None = None
    reply: Response | None = None  # answer without calling the upstream (explain mode)
    encoded: bytes | None = None  # ``body`` already encoded, when the pipeline had to check it


class MemoryPipeline(Protocol):
    """Turns a chat request into the request to forward (memories injected)."""

    async def prepare(
        self, tenant: Tenant, headers: Mapping[str, str], body: dict[str, object]
    ) -> Prepared:
        """Return the body to forward, headers to add, and an optional completion hook."""
        ...


class NoopPipeline:
    """Forwards the body unchanged: the proxy without memory."""

    async def prepare(
        self, tenant: Tenant, headers: Mapping[str, str], body: dict[str, object]
    ) -> Prepared:
        """Return the body as is."""
        return Prepared(body=body)
