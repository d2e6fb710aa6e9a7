"""The request target memproxy forwards: the client's raw path and query, checked once.

Starlette routes on the percent-decoded ``scope["path"]``; what goes upstream is the path as the
client wrote it (ASGI ``raw_path``), so ``%2F`` and ``%3F`` stay escaped instead of becoming a
real slash or a real query. Forwarding the decoded path let ``/v1/%2e%2e/%2e%2e/admin`` reach the
upstream as ``/v1/../../admin`` (issue 11). The rules, each a 400 in OpenAI's shape:

- the raw path starts with ``/v1/``: only what follows is appended to the upstream base URL, so a
  request can never leave the configured prefix (``https://host/openai/v1``);
- only RFC 3986 path characters are written raw (letters, digits, ``-._~!$&'()*+,;=:@/``) and
  every ``%`` starts a well-formed escape. Control bytes, spaces, backslashes (a WHATWG parser
  reads ``\\`` as ``/``), quotes and non-ASCII bytes are refused rather than re-encoded: what we
  forward is byte for byte what the client sent;
- no dot segments (``.``, ``..``), raw or percent-encoded in any case or depth (``%2e``,
  ``%252E``), with encoded ``/`` and ``\\`` counting as separators: an upstream or gateway that
  decodes before it resolves them would otherwise climb out of the prefix;
- no control characters percent-encoded in the path (``%00``, ``%0d%0a``);
- the query goes as is, but raw control bytes, spaces, ``#`` and non-ASCII bytes cannot be on a
  request line and are refused (escaped ones are data and pass).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote_to_bytes

from starlette.types import Scope

from proxy.errors import RequestError

V1 = b"/v1"
# The common case (letters, digits, -, _, / and no dots or escapes) needs no further checks.
PLAIN_PATH = re.compile(rb"/v1/[A-Za-z0-9_\-/]*")
PATH_CHARS = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
QUERY_CHARS = re.compile(rb"[\x21-\x22\x24-\x7e]*")  # printable ASCII except '#'
PATH_SAFE = "/-._~!$&'()*+,;=:@"
CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
SEPARATOR = re.compile(rb"[/\\]")
DOT_SEGMENTS = frozenset({b".", b".."})
# Each round of decoding shortens the text, so this only bounds pathological nesting.
MAX_DECODE_ROUNDS = 8


def invalid(message: str) -> RequestError:
    """The 400 every rule here raises."""
    return RequestError(message, code="invalid_path")


def raw_path(scope: Scope) -> bytes:
    """The path as the client sent it, without ``root_path``; the decoded path if no raw one."""
    raw: bytes | None = scope.get("raw_path")
    if raw is None:
        # uvicorn always gives raw_path; another ASGI host without it gets the path re-encoded.
        path: str = scope["path"]
        raw = quote(path, safe=PATH_SAFE).encode("ascii")
    root: str = scope.get("root_path", "")
    if root and raw.startswith(root.encode("latin-1")):
        raw = raw[len(root) :]
    return raw


def check_path(raw: bytes) -> None:
    """Raise a 400 unless ``raw`` is a path memproxy may forward (the rules above)."""
    if not raw.startswith(V1 + b"/"):
        raise invalid("The request path must start with /v1/ as written (not percent-encoded).")
    if not PLAIN_PATH.fullmatch(raw):
        check_path_text(raw)


def check_path_text(raw: bytes) -> None:
    """The rules on characters, escapes and dot segments, for any path."""
    if not PATH_CHARS.fullmatch(raw):
        raise invalid(
            "The request path has a character that may not appear unescaped in a URL path "
            "(control, space, backslash, quote or non-ASCII) or a malformed %-escape."
        )
    decoded = raw
    for _ in range(MAX_DECODE_ROUNDS):
        if CONTROL.search(decoded):
            raise invalid("The request path has a percent-encoded control character.")
        if any(segment in DOT_SEGMENTS for segment in SEPARATOR.split(decoded)):
            raise invalid("The request path has a '.' or '..' segment (raw or percent-encoded).")
        if b"%" not in decoded:
            return
        decoded = unquote_to_bytes(decoded)
    raise invalid("The request path is percent-encoded too many times over.")


def check_query(query: bytes) -> None:
    """Raise a 400 unless ``query`` can go on a request line as it is."""
    if query and not QUERY_CHARS.fullmatch(query):
        raise invalid(
            "The query string has a character that may not appear unescaped in a URL "
            "(control, space, '#' or non-ASCII)."
        )


def check_target(scope: Scope) -> None:
    """Raise the 400 a request's path or query earns, whatever its route (the prefix aside).

    For paths no route matched: a decoded ``%0d%0a`` defeats the router, and such a request
    should hear why it was refused rather than a 404.
    """
    check_path_text(raw_path(scope))
    check_query(scope.get("query_string", b""))


def forward_target(scope: Scope) -> str:
    """The checked raw target below ``/v1``: ``/chat/completions`` or ``/files?purpose=x``."""
    raw = raw_path(scope)
    check_path(raw)
    query: bytes = scope.get("query_string", b"")
    check_query(query)
    tail = raw[len(V1) :].decode("ascii")
    return f"{tail}?{query.decode('ascii')}" if query else tail
