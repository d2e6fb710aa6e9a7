"""The extraction call: one chat-completions request to the upstream, with retries.

It goes through the lifespan-owned ``UpstreamClient`` (the same transport, pool, TLS and proxy
settings as the chat path), authenticated as the tenant's own requests are: the client's
credential headers in passthrough mode, the tenant's upstream key in keys mode
(``FactJob.auth``). Each attempt has ``extraction.timeout_s``; a 429, a 5xx or a transport
failure is retried up to ``max_attempts`` with exponential backoff (``backoff_s`` doubled,
at most ``max_backoff_s``, longer when the upstream's ``Retry-After`` asks for it, up to that
cap). Any other status is final. The answer is read by ``proxy.memory.extraction``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.content_encoding import DecodeError, decode_body
from proxy.context.records import MemoryRecord
from proxy.errors import UpstreamError
from proxy.memory.extraction import (
    NOT_JSON,
    BrokenAnswer,
    Fact,
    Turn,
    read_answer,
    request_body,
    usage_of,
)
from proxy.metrics import Metrics
from proxy.settings import ExtractionSettings
from proxy.upstream import UpstreamClient

LOGGER = logging.getLogger("memproxy.extraction")
# Failure reasons (memproxy_extraction_failures_total{reason}) besides the answer's own.
TIMEOUT, RATE_LIMITED, UPSTREAM_STATUS, TRANSPORT = (
    "timeout",
    "rate_limited",
    "upstream_status",
    "transport",
)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_ANSWER_BYTES = 1024 * 1024  # an extraction answer is a few KB; more is not one
PATH = "/chat/completions"

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Failed:
    """A call that got no usable answer, and why."""

    reason: str


def retry_after(raw: bytes | None) -> float | None:
    """The seconds of a ``Retry-After`` value (the date form is not used by providers)."""
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try: its status (``None``: no response), the JSON object of a 200, and for a
    retryable refusal how long the upstream asked to wait."""

    status: int | None
    body: dict[str, Any] | None = None
    wait: float | None = None
    reason: str = TRANSPORT  # what it failed of, when it did


class ExtractionCall:
    """Calls the upstream for one turn's facts."""

    def __init__(
        self,
        upstream: UpstreamClient,
        settings: ExtractionSettings,
        metrics: Metrics,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.upstream = upstream
        self.settings = settings
        self.metrics = metrics
        self.sleep = sleep

    async def facts(
        self,
        turn: Turn,
        shown: Mapping[str, MemoryRecord],
        model: str,
        auth: tuple[tuple[bytes, bytes], ...],
    ) -> list[Fact] | BrokenAnswer | Failed:
        """The facts of ``turn``, a broken answer, or the failure that left none."""
        conf = self.settings
        body = orjson.dumps(request_body(model, turn, shown, conf.max_tokens))
        headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            (b"accept-encoding", b"identity"),
            *auth,
        ]
        url = self.upstream.join(PATH)
        last = Attempt(None)
        for number in range(conf.max_attempts):
            if number:
                delay = conf.backoff_s * 2 ** (number - 1)
                await self.sleep(min(max(delay, last.wait or 0.0), conf.max_backoff_s))
            last = await self._attempt(url, headers, body)
            if last.status == 200:
                if last.body is None:
                    self.metrics.count_extraction(False)
                    return BrokenAnswer(NOT_JSON, "the answer body is not a JSON object")
                prompt, completion = usage_of(last.body)
                self.metrics.count_extraction(True, prompt, completion)
                return read_answer(last.body, turn.at)
            self.metrics.count_extraction(False)
            if last.status is not None and last.status not in RETRY_STATUSES:
                break
        return Failed(last.reason)

    async def _attempt(self, url: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Attempt:
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                response = await self.upstream.send("POST", url, headers, body)
                try:
                    raw = await response.read()
                finally:
                    response.close()
        except TimeoutError:
            return Attempt(None, reason=TIMEOUT)
        except UpstreamError as exc:  # also UpstreamTimeout (the upstream settings' timeouts)
            LOGGER.info("extraction call failed: %s", type(exc).__name__)
            return Attempt(None, reason=TRANSPORT)
        status = response.status
        if status != 200:
            reason = RATE_LIMITED if status == 429 else UPSTREAM_STATUS
            return Attempt(
                status, wait=retry_after(response.raw_headers_get(b"retry-after")), reason=reason
            )
        try:
            encoding = response.raw_headers_get(b"content-encoding")
            parsed = orjson.loads(decode_body(raw, encoding, MAX_ANSWER_BYTES))
        except (DecodeError, orjson.JSONDecodeError):
            return Attempt(200)
        return Attempt(200, parsed if isinstance(parsed, dict) else None)
