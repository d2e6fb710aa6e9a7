"""The HTTP server: uvicorn (uvloop + httptools) configured from ``server.*``, with limits.

``server_config`` is the one place that turns settings into a server; ``memproxy serve`` and
the tests' ``ProxyServer`` both use it. uvicorn's httptools protocol has no limit on a request
head (httptools joins the pieces of a header value until it ends, so a 300 MiB header costs
300 MiB and quadratic copying) and arms no timer before the first response (a connection that
sends nothing, or a byte a second, is held forever). ``LimitedHttpProtocol`` adds, per
connection (ADR-0083):

- head limits: the bytes of the reads that carry an unfinished head are counted, and the head
  is refused with 431 once over ``max_head_bytes`` (so at most one read past the limit is ever
  buffered; a pipelined head that begins inside an earlier read can exceed it by that read);
  a finished head is measured exactly when the count cannot vouch for it; more than
  ``max_headers`` fields, 431;
- a head timeout from the connection (or from the first read that leaves a later request's
  head unfinished) to the end of the head: 408 and close, or just close when nothing was sent;
  a body timeout between two reads of a body still arriving: 408 and close (the app reading
  it sees a disconnect);
- the keep-alive idle timeout, also after a body dropped behind an early answer;
- draining: an answer sent before the whole body arrived (413) is followed by reading and
  dropping the rest of the body, bounded by bytes and time. A client that writes its whole
  body before reading (Python's urllib, ``Connection: close``) then reads the 413 instead of
  a connection reset (closing a socket with unread input makes the kernel send RST);
- metrics: open connections, and requests refused by reason.

Errors the server writes itself are rendered like the app's (``proxy/error_responses.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any, cast

import httptools
import uvicorn
from uvicorn._types import ASGI3Application
from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState
from uvicorn.supervisors import Multiprocess

from proxy.accepts import balanced_loop_factory, create_shares
from proxy.error_responses import error_bytes
from proxy.errors import HeadTooLarge, RequestError, RequestTimeout
from proxy.metrics import Metrics
from proxy.settings import HttpServerSettings, ServerSettings

LOGGER = logging.getLogger("memproxy.server")
# Per header line: ": " and CRLF around the name and value the parser hands over.
HEADER_LINE_OVERHEAD = 4


class HeadRefused(Exception):
    """Raised in a parser callback to stop parsing a head that breaks a limit."""

    def __init__(self, error: RequestError, reason: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason


class ServerConfig(Config):
    """uvicorn's ``Config`` plus ``server.http`` (plain values: workers get it pickled), and,
    with several workers, the file through which they balance their accepts (adr/0140)."""

    def __init__(self, app: Any, *, limits: HttpServerSettings, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.limits = limits
        self.accept_shares: str | None = None

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        """uvloop; in a worker of several, one whose listener balances accepts."""
        if self.accept_shares is not None:
            return balanced_loop_factory(self.accept_shares)
        return super().get_loop_factory()


class ConnectionTransport(asyncio.Transport):
    """The transport as uvicorn's protocol and request cycles see it.

    Everything goes to the socket's transport except ``close``, which the protocol turns into
    a lingering close while a request body is still arriving.
    """

    def __init__(self, raw: asyncio.Transport, protocol: LimitedHttpProtocol) -> None:
        super().__init__()
        self.raw = raw
        self.protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write to the socket."""
        self.raw.write(data)

    def close(self) -> None:
        """Close, lingering first if the client is still sending (see the protocol)."""
        self.protocol.close_connection()

    def is_closing(self) -> bool:
        """True once closing or lingering: uvicorn then writes and reads nothing more."""
        return self.protocol.lingering or self.raw.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The socket's extra info (addresses, SSL)."""
        return self.raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        """Stop reading from the socket."""
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        """Resume reading from the socket."""
        self.raw.resume_reading()

    def is_reading(self) -> bool:
        """Whether the socket is being read."""
        return self.raw.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Hand the socket to another protocol."""
        self.raw.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The socket's protocol."""
        return self.raw.get_protocol()

    def abort(self) -> None:
        """Close the socket at once."""
        self.raw.abort()


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with head limits, timeouts, draining and metrics."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = config.limits if isinstance(config, ServerConfig) else HttpServerSettings()
        # uvicorn's own keep-alive timer, with the setting's exact (sub-second in tests) value.
        self.timeout_keep_alive = self.limits.keepalive_s  # type: ignore[assignment]
        metrics = getattr(self.app, "metrics", None)
        self.metrics = metrics if isinstance(metrics, Metrics) else None
        self.raw: asyncio.Transport = None  # type: ignore[assignment]
        self.lingering = False  # closing: input is read and dropped until EOF or a bound
        self._lost = False
        self._in_head = True  # the next bytes belong to a request head
        self._message_open = False  # between the parser's message begin and complete
        self._head_bytes = 0  # bytes of the reads that carried the current head
        self._head_counted = False  # those reads include its start (else measure the head)
        self._head_timer: asyncio.TimerHandle | None = None
        self._draining = False  # answered early: the rest of the body is parsed and dropped
        self._drain_left = 0
        self._drain_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._last_read = 0.0  # loop time of the last read, while a body timer runs
        # A refused request's answer and whether to linger, sent once earlier responses are.
        self._refusal: tuple[RequestError, bool] | None = None
        self._running: RequestResponseCycle | None = None  # the cycle whose app runs
        # Set by a balanced listener (proxy/accepts.py): uncounts the connection once lost.
        self.on_lost: Callable[[], None] | None = None

    # Connection events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Wrap the transport, start the head timer, count the connection."""
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.raw = cast(asyncio.Transport, transport)
        super().connection_made(ConnectionTransport(self.raw, self))
        self._arm_head_timer()
        if self.metrics is not None:
            self.metrics.connections.inc()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the timers and uncount the connection."""
        self._lost = True
        self._head_timer = _cancel(self._head_timer)
        self._drain_timer = _cancel(self._drain_timer)
        self._body_timer = _cancel(self._body_timer)
        try:
            super().connection_lost(exc)
            if self.metrics is not None:
                self.metrics.connections.dec()
        finally:
            if self.on_lost is not None:  # whatever failed above, the balance must not drift
                self.on_lost()

    def data_received(self, data: bytes) -> None:
        """Feed the parser, counting head bytes; drop input while draining or lingering."""
        if self.lingering or self._refusal is not None:
            self._drop(len(data))
            return
        if self._draining:
            self._drain_left -= len(data)
            if self._drain_left < 0:
                self.raw.close()
                return
        self._unset_keepalive_if_required()
        if self._body_timer is not None:
            self._last_read = self.loop.time()
        if self._in_head:
            if not self._message_open:
                self._head_counted = True
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # WebSockets are off (ws="none"): the request was served as plain HTTP.
            pass
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback raised (ours, or uvicorn's URL parsing)
            if isinstance(cause, HeadRefused):
                self._refuse(cause.error, cause.reason)
            else:
                detail = exc if cause is None else "invalid request target"
                error = RequestError(
                    f"Invalid HTTP request: {detail}.", code="invalid_http_request"
                )
                self._refuse(error, "malformed")
            return
        if self._in_head:
            if self._head_bytes > self.limits.max_head_bytes:
                # Unfinished and over the limit: refused before the parser buffers more of it.
                self._refuse(self._too_large(), "head_too_large")
            elif self._head_timer is None and (self._head_bytes or self._message_open):
                # Armed only for a head left unfinished by a read: a whole head in one read
                # (the usual case) costs no timer.
                self._arm_head_timer()
        elif self._message_open and self._body_timer is None and not self._draining:
            # A body left unfinished by a read; one timer, pushed back by reads (no re-arming
            # per read).
            self._last_read = self.loop.time()
            self._body_timer = self.loop.call_later(
                self.limits.body_timeout_s, self._body_timed_out
            )

    def shutdown(self) -> None:
        """Server shutdown: close at once unless a response is being sent."""
        if self.cycle is None or self.cycle.response_complete:
            self.raw.close()
        else:
            self.cycle.keep_alive = False

    # Parser callbacks

    def on_message_begin(self) -> None:
        """A request starts."""
        super().on_message_begin()
        self._message_open = True

    def on_headers_complete(self) -> None:
        """Check the head's field count and size, then start the request."""
        limits = self.limits
        if len(self.headers) > limits.max_headers:
            # The byte limit bounds how many fields the parser can have collected by now.
            error = HeadTooLarge(f"The request has more than {limits.max_headers} header fields.")
            raise HeadRefused(error, "too_many_headers")
        if self._head_bytes > limits.max_head_bytes or not self._head_counted:
            # The reads counted also hold body bytes, or the head began inside an earlier
            # request's read: measure the head itself.
            size = len(self.url) + sum(
                len(name) + len(value) + HEADER_LINE_OVERHEAD for name, value in self.headers
            )
            if size > limits.max_head_bytes:
                raise HeadRefused(self._too_large(), "head_too_large")
        if self.parser.get_http_version() == "1.0" and any(
            name == b"transfer-encoding" for name, _ in self.headers
        ):
            # RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing (a
            # proxy in front may read its body differently: a smuggling vector).
            message = "Transfer-Encoding is not allowed in an HTTP/1.0 request."
            raise HeadRefused(RequestError(message, code="invalid_http_request"), "malformed")
        self._in_head = False
        self._head_bytes = 0
        self._head_counted = False
        self._head_timer = _cancel(self._head_timer)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The body is complete; an early answer's drain is over, the connection idles."""
        super().on_message_complete()
        self._message_open = False
        self._in_head = True  # the next head may begin inside this read: not counted
        self._body_timer = _cancel(self._body_timer)
        if self._draining:
            self._draining = False
            self._drain_timer = _cancel(self._drain_timer)
            if not self.pipeline and not self.lingering and not self.raw.is_closing():
                self._unset_keepalive_if_required()
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        """After an answer sent before the body ended (413), drop the rest within bounds."""
        super().on_response_complete()
        if self._refusal is not None:
            self._answer_refusal()
            return
        if self._message_open and not self.lingering and not self.raw.is_closing():
            self._body_timer = _cancel(self._body_timer)  # the drain bounds take over
            self._draining = True
            self._drain_left = self.limits.drain_bytes
            self._drain_timer = self.loop.call_later(self.limits.drain_s, self.raw.close)

    # Closing

    def close_connection(self) -> None:
        """uvicorn's ``transport.close()``: linger while the client is still sending a body."""
        if self._lost or self.raw.is_closing():
            return
        if self.lingering:
            return  # the drain timer, the budget or the client's EOF closes it
        if self._message_open:
            self._linger()
        else:
            self.raw.close()

    def _linger(self) -> None:
        """Send FIN after what was written, then read and drop input until EOF or a bound.

        On the client's EOF the transport closes itself (uvicorn's ``eof_received`` returns
        None): by then the client has sent everything and can read the answer.
        """
        self.lingering = True
        self._head_timer = _cancel(self._head_timer)
        self._body_timer = _cancel(self._body_timer)
        self._unset_keepalive_if_required()
        if self.raw.can_write_eof():
            self.raw.write_eof()
        self.flow.resume_reading()
        if not self._draining:
            self._drain_left = self.limits.drain_bytes
            self._drain_timer = self.loop.call_later(self.limits.drain_s, self.raw.close)

    def _drop(self, size: int) -> None:
        self._drain_left -= size
        if self._drain_left < 0:
            self.raw.close()

    # Refusals

    def _too_large(self) -> HeadTooLarge:
        limit = self.limits.max_head_bytes
        return HeadTooLarge(f"The request line and headers are larger than {limit} bytes.")

    def _refuse(self, error: RequestError, reason: str, *, linger: bool = True) -> None:
        """Answer ``error`` and close, after the responses to earlier pipelined requests.

        A request whose own body broke the rules ends here: its app sees a disconnect.
        """
        self._head_timer = _cancel(self._head_timer)
        self._body_timer = _cancel(self._body_timer)
        if self.metrics is not None:
            self.metrics.child(self.metrics.refused, reason).inc()
        LOGGER.info("refused a request from %s: %s", _address(self.client), error.message)
        self._refusal = (error, linger)
        self._drain_left = self.limits.drain_bytes  # input from now on is dropped (bounded)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and cycle.more_body:
            cycle.disconnected = True
            cycle.message_event.set()
            if self.pipeline and self.pipeline[0][0] is cycle:
                self.pipeline.popleft()  # queued behind others: never started
            elif cycle.response_started:
                self.raw.close()  # no second status line in the middle of a response
                return
        self._answer_refusal()

    def _answer_refusal(self) -> None:
        """Write the refusal once no earlier response is pending, then close."""
        running = self._running
        if self._refusal is None or self.lingering or self.raw.is_closing():
            return
        if self.pipeline or (
            running is not None and not running.response_complete and not running.disconnected
        ):
            self.flow.pause_reading()  # on_response_complete calls again
            return
        error, linger = self._refusal
        self._write_error(error)
        if linger:
            self._linger()
        else:
            self.raw.close()

    def _write_error(self, error: RequestError) -> None:
        headers = [*self.server_state.default_headers, (b"connection", b"close")]
        self.raw.write(error_bytes(error, STATUS_LINE[error.status], headers))

    # Timers

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self._message_open or self.lingering or self.raw.is_closing():
            return
        idle = self.loop.time() - self._last_read
        timeout = self.limits.body_timeout_s
        if self.flow.read_paused:  # the app is not reading: the client is not to blame
            idle = 0.0
            self._last_read = self.loop.time()
        if idle < timeout:  # bytes came since: wait for the rest of the timeout
            self._body_timer = self.loop.call_later(timeout - idle, self._body_timed_out)
            return
        error = RequestTimeout(f"The request body stalled: no bytes for {timeout:g} s.")
        self._refuse(error, "body_timeout", linger=False)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.lingering or self.raw.is_closing():
            return
        if not self._head_bytes and not self._message_open:
            # Nothing sent: no answer (a pooled client could take it for its next request's).
            if self.metrics is not None:
                self.metrics.child(self.metrics.refused, "head_timeout").inc()
            self.raw.close()
            return
        timeout = self.limits.head_timeout_s
        error = RequestTimeout(f"The request head did not arrive within {timeout:g} s.")
        # A client this slow gets its answer and the close at once, no lingering.
        self._refuse(error, "head_timeout", linger=False)


def _cancel(timer: asyncio.TimerHandle | None) -> asyncio.TimerHandle | None:
    """Cancel ``timer`` if there is one; ``None``, to assign back to its attribute."""
    if timer is not None:
        timer.cancel()
    return None


def _address(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "unknown"


def server_config(app: Any, server: ServerSettings) -> ServerConfig:
    """uvicorn's config for ``app`` (an ASGI app, or an import string of a factory)."""
    return ServerConfig(
        app,
        limits=server.http,
        factory=isinstance(app, str),
        host=server.host,
        port=server.port,
        workers=server.workers,
        loop="uvloop",
        http=LimitedHttpProtocol,
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=False,  # memproxy logs requests itself (proxy/middleware.py)
        proxy_headers=False,
        timeout_graceful_shutdown=int(server.graceful_timeout_s),
    )


def run(config: ServerConfig) -> int:
    """Serve until stopped, in ``config.workers`` processes; the exit code."""
    server = uvicorn.Server(config)
    if config.workers > 1:
        config.accept_shares = create_shares()
        try:
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        finally:
            os.unlink(config.accept_shares)
        return 0
    server.run()
    return 0 if server.started else STARTUP_FAILURE
