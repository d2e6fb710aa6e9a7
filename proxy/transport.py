"""The seam between memproxy and an HTTP client library (adr/0085).

``proxy/upstream.py`` talks to the upstream only through ``Transport``; each implementation
(today ``proxy/transport_aiohttp.py``) adapts one library to it and
maps the library's failures onto ``UpstreamError`` / ``UpstreamTimeout``. What every
implementation must guarantee, checked by one contract suite (``tests/test_transport.py``):

- bytes pass through: no decompression, no re-framing, no default headers of the library's own
  where it can be avoided, no redirects, no cookies;
- nothing with a control byte goes on the wire: ``check_wire`` runs before every send;
- a response head is bounded (``MAX_HEAD_LINE`` bytes a line, ``MAX_HEADERS`` lines): a hostile
  upstream's endless head is a 502, not memory;
- ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` are honoured (``env_proxy``), and TLS trusts
  the system and certifi CAs plus ``upstream.tls.ca_file``, with an optional client certificate.

Timeouts other than ``connect`` are applied around the transport by ``proxy/upstream.py``, the
same way for every implementation.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import certifi

from proxy.errors import ConfigError, UpstreamError
from proxy.settings import UpstreamSettings, UpstreamTlsSettings

Headers = list[tuple[bytes, bytes]]
Written = Callable[[], None]  # told that a request has been handed to its connection

# Bounds on a response head: bytes a line, header lines. aiohttp's defaults, pinned here so a
# change of library default cannot unbound us: a head is at most ~1 MiB.
MAX_HEAD_LINE = 8190
MAX_HEADERS = 128

# RFC 9110 5.1 token characters: what a header name may be made of.
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 5.5: a field value has no control characters but horizontal tab.
CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
TARGET_CONTROL = re.compile(r"[\x00-\x20\x7f]")


class TransportResponse(Protocol):
    """An open response: status and headers now, the body as it arrives (no timeouts here)."""

    @property
    def status(self) -> int:
        """The upstream's status code."""

    @property
    def raw_headers(self) -> Sequence[tuple[bytes, bytes]]:
        """The upstream's response headers, as received."""

    async def chunk(self) -> bytes:
        """The next body bytes as they arrive, ``b""`` at the end; ``UpstreamError`` if broken."""

    async def read(self) -> bytes:
        """The whole (rest of the) body; ``UpstreamError`` if broken."""

    def close(self) -> None:
        """Release the connection; an unfinished body closes it instead of reusing it."""


class Transport(Protocol):
    """One pooled HTTP client for one upstream origin, owned by the app lifespan."""

    async def start(self) -> None:
        """Open the pool (inside the running event loop)."""

    async def close(self) -> None:
        """Close the pool; requests in flight fail."""

    def ready(self) -> bool:
        """Whether the pool is open."""

    async def send(
        self, method: str, url: str, headers: Headers, body: bytes, written: Written | None = None
    ) -> TransportResponse:
        """Send a request (already checked by ``check_wire``) and wait for the response head.

        ``written()`` is called once the whole request has been handed to the connection (never
        if it fails before). ``UpstreamTimeout`` when the connection is not made within
        ``timeouts.connect``, ``UpstreamError`` for any other failure before the head is complete.
        """


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """What a transport is built from: the settings, and what was resolved from them at start."""

    settings: UpstreamSettings
    proxy: str | None  # the proxy URL for the upstream (from the environment), or None


def valid_fields(headers: Headers) -> bool:
    """Every name an RFC 9110 token, no value with a control character but tab.

    One match over all names and one search over all values: a regex call per header would cost
    more than the rest of the header handling.
    """
    names = [name for name, _ in headers]
    return (
        all(names)
        and TOKEN.fullmatch(b"".join(names) or b"x") is not None
        and CONTROL.search(b"".join(value for _, value in headers)) is None
    )


def check_wire(url: str, headers: Headers) -> None:
    """Refuse a request whose target or headers would carry a control byte onto the wire.

    The routes already turn a client's bad path, query or header into a 400; this is the last
    guard for every transport, whatever the library itself would do with such bytes.
    """
    if TARGET_CONTROL.search(url):
        raise UpstreamError("Refused to send a request target with a control character or space.")
    if not valid_fields(headers):
        name = next(n for n, v in headers if not valid_fields([(n, v)]))
        raise UpstreamError(f"Refused to send header {name[:64]!r} upstream: not a valid field.")


# Never with the URL or a parser's words about it: they may quote the proxy's credentials.
INVALID_PROXY = (
    "the upstream's proxy from the environment (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY)"
    " is not a valid URL"
)


def env_proxy(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy for ``url`` from ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` and ``NO_PROXY``.

    The conventions curl and urllib share: lower-case names win over upper-case, ``ALL_PROXY``
    serves any scheme, ``NO_PROXY`` lists hosts and domains (``*`` for all). Resolved once at
    start, the upstream being one origin, and passed to the transport explicitly: aiohttp's own
    ``trust_env`` would also send ``~/.netrc`` credentials.
    """
    parts = urlsplit(url)
    proxies: dict[str, str] = {}
    for name, value in environ.items():
        lower = name.lower()
        if value and lower.endswith("_proxy"):
            scheme = lower.removesuffix("_proxy")
            if name == lower or scheme not in proxies:  # https_proxy wins over HTTPS_PROXY
                proxies[scheme] = value
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    if bypassed(parts.hostname or "", parts.port, proxies.get("no", "")):
        return None
    if not valid_proxy(proxy):  # refused at start: no request could go through it
        raise ConfigError(INVALID_PROXY) from None  # never the URL or its parser: credentials
    return proxy


def valid_proxy(proxy: str) -> bool:
    """Whether ``proxy`` names a host and, if any, a port that is a number in range."""
    try:
        parts = urlsplit(proxy)
        return bool(parts.hostname) and (parts.port is None or parts.port >= 0)
    except ValueError:  # an open bracket, a port not a number or out of range
        return False


def bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` exempts ``host``: ``*``, the host, a parent domain, or ``host:port``."""
    host = host.lower()
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry == "*":
            return True
        # name:port; a bare IPv6 address has more colons and no port.
        name, _, entry_port = entry.partition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.lstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read upstream.tls.{key} {path}: {exc.strerror}") from exc


def tls_context(tls: UpstreamTlsSettings) -> ssl.SSLContext:
    """A verifying TLS context: system CAs, certifi's, ``ca_file``; the client certificate."""
    context = ssl.create_default_context()
    # Slim containers often lack system CAs: certifi's bundle is always there.
    context.load_verify_locations(cafile=certifi.where())
    try:
        if tls.ca_file:
            context.load_verify_locations(cadata=_read(tls.ca_file, "ca_file").decode("ascii"))
        if tls.cert_file:
            _read(tls.cert_file, "cert_file")
            if tls.key_file:
                _read(tls.key_file, "key_file")
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"upstream.tls: cannot load the certificates: {exc}") from exc
    context.set_alpn_protocols(["http/1.1"])
    return context
