"""The contract between the routes with memory and the memory pipeline: its one plug-in point.

A route with memory (``proxy/routes/with_memory.py``) calls ``MemoryPipeline.prepare`` exactly
once per request, before forwarding, with the ``ApiAdapter`` of its API (``proxy/apis/``): the
one pipeline reads any API's body through it. Work of the request that needs no answer (cache
writes: the turn's block, search results, token counts) comes as ``on_sent``: the route starts
it once the request is on its way upstream, so it runs while the upstream answers instead of
delaying the next request on the connection (adr/0128). If the returned ``Prepared`` has an
``on_complete`` hook, the route calls it once after the response has gone to the client (for a
stream: after the last event, with the assembled answer text, read by the same adapter). Both
run as background work, never before the client's request is sent; neither may raise. Work that
needs only the answer's status (retrieval counts, the stage histograms) comes as
``on_status``: called in the request's own task once the response is out (also when the relay
failed), with no task started and the answer not read (adr/0134).

``prepare`` must never fail the chat request for a backend problem: it degrades instead
(``X-Memory-Status: degraded``). It may raise a ``proxy.errors.RequestError`` for a bad
``X-Memory-*`` header, or short-circuit with ``reply`` (``X-Memory-Mode: explain``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from starlette.responses import Response

from proxy.background import Job
from proxy.tenancy import Tenant

if TYPE_CHECKING:  # the adapters read answers into a ``Completion``: imported both ways
    from proxy.apis.adapter import ApiAdapter


@dataclass(frozen=True, slots=True)
class Completion:
    """What the client received, handed to ``Prepared.on_complete``.

    ``text`` is the assistant's answer text (chat: choice 0; for a stream, the concatenated
    deltas);
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
    # Work that needs no answer, started once the request body has been written upstream
    # (never when the connection or the write failed; a failure after it, at end of body or
    # in the answer, does not undo it: the writes are cache fills); called at most once.
    on_sent: Callable[[], Job] | None = None
    # Work that needs only the answer's status (the upstream's, or the error memproxy answered
    # with; 0 if the client left before any, which says nothing of the upstream): called once
    # after the response has gone to the client (or the relay failed), in the request's task,
    # so it must be cheap (no I/O). A failure is logged.
    on_status: Callable[[int], None] | None = None
    reply: Response | None = None  # answer without calling the upstream (explain mode)
    encoded: bytes | None = None  # ``body`` already encoded, when the pipeline had to check it


class MemoryPipeline(Protocol):
    """Turns a request of ``api`` into the request to forward (memories injected)."""

    async def prepare(
        self,
        tenant: Tenant,
        headers: Mapping[str, str],
        body: dict[str, object],
        api: ApiAdapter,
    ) -> Prepared:
        """Return the body to forward, headers to add, and an optional completion hook."""
        ...


class NoopPipeline:
    """Forwards the body unchanged: the proxy without memory."""

    async def prepare(
        self,
        tenant: Tenant,
        headers: Mapping[str, str],
        body: dict[str, object],
        api: ApiAdapter,
    ) -> Prepared:
        """Return the body as is."""
        return Prepared(body=body)
