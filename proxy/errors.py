"""The one error hierarchy of memproxy.

Every error the proxy raises on purpose derives from ``MemproxyError``. Each carries what
OpenAI's error shape needs (``message``, ``type``, ``param``, ``code``) and the HTTP status,
so any of them becomes a response (``proxy/error_responses.py``; ``to_body()`` is OpenAI's
shape):

- ``InternalError`` (500)  a bug; the answer to an unexpected exception.
- ``ConfigError``          bad configuration; raised at start, never while serving.
- ``RequestError`` (400)   the client's request is malformed or out of range.
  - ``PayloadTooLarge`` (413), ``NotFound`` (404), ``MethodNotAllowed`` (405),
    ``Unprocessable`` (422 semantics, sent as 400)
  - ``HeadTooLarge`` (431), ``RequestTimeout`` (408): the HTTP server's refusals of a request
    head, or of a stalled body (``proxy/server.py``)
  - ``ClientDisconnected`` (499): the client left before its body was read; its answer is
    never sent, the status only names the outcome in metrics and the access log.
- ``AuthError`` (401)      missing or unknown memproxy key.
- ``UpstreamError`` (502)  the upstream could not be reached or broke the protocol.
  - ``UpstreamTimeout`` (504)
- ``BackendError``         a memory backend (store, embedder, cache) failed. These never reach a
  chat client: the chat route forwards without memories and reports ``degraded``. The memories
  API, whose whole job is the backend, answers them with 503.
  - ``StoreError``, ``EmbedderError``, ``CacheError``

Upstream 4xx/5xx responses are not errors of ours: they pass through untouched.
"""

from __future__ import annotations

from typing import Any


class MemproxyError(Exception):
    """Base of every error memproxy raises on purpose."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def to_body(self) -> dict[str, Any]:
        """Return the error in OpenAI's shape: ``{"error": {message, type, param, code}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InternalError(MemproxyError):
    """A bug in memproxy: answered 500 without details (the traceback goes to the log)."""

    def __init__(self, message: str = "Internal error in memproxy.") -> None:
        super().__init__(message)


class ConfigError(MemproxyError):
    """The configuration file or environment is invalid; names the key and the file."""

    type = "config_error"


class RequestError(MemproxyError):
    """The client's request is malformed or out of range."""

    status = 400
    type = "invalid_request_error"


class PayloadTooLarge(RequestError):
    """The request body is over the configured limit."""

    status = 413
    code = "payload_too_large"


class HeadTooLarge(RequestError):
    """The request line and headers are over ``server.http.max_head_bytes`` or ``max_headers``."""

    status = 431
    code = "request_header_fields_too_large"


class RequestTimeout(RequestError):
    """The request head (or the next bytes of its body) did not arrive in time."""

    status = 408
    code = "request_timeout"


class ClientDisconnected(RequestError):
    """The client closed the connection before sending its whole body: not a failure of ours."""

    status = 499  # nginx's "client closed request"
    code = "client_disconnected"


class NotFound(RequestError):
    """The addressed object does not exist (or belongs to another tenant)."""

    status = 404
    code = "not_found"


class MethodNotAllowed(RequestError):
    """The path exists but not with this HTTP method (memproxy's own endpoints)."""

    status = 405
    code = "method_not_allowed"


class AuthError(MemproxyError):
    """Missing or unknown memproxy key (keys mode)."""

    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class UpstreamError(MemproxyError):
    """The upstream could not be reached or broke the protocol."""

    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer in time."""

    status = 504
    code = "upstream_timeout"


class BackendError(MemproxyError):
    """A memory backend failed; chat requests degrade instead of failing."""

    status = 503
    type = "memory_backend_error"
    code = "memory_backend_unavailable"


class StoreError(BackendError):
    """The memory store failed or timed out."""


class EmbedderError(BackendError):
    """The embedder failed or timed out."""


class CacheError(BackendError):
    """The cache failed or timed out."""
