"""Structured logging: text or JSON lines, every line carrying the request id.

Keys and ``Authorization`` values are never passed to the logger; this module only formats.
"""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

import orjson

from proxy.settings import ServerSettings

NO_REQUEST = "-"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
# Attributes every LogRecord has; anything else was passed with ``extra=`` and is logged too.
# uvicorn's ``color_message`` repeats the message with ANSI colour codes: not for a JSON line.
STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "request_id",
    "color_message",
}

request_id_var: ContextVar[str] = ContextVar("request_id", default=NO_REQUEST)


class RequestIdFilter(logging.Filter):
    """Adds the current request id to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Attach ``record.request_id``; never drops a record."""
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, request_id, message and extras."""

    def format(self, record: logging.LogRecord) -> str:
        """Render the record as a JSON line."""
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", NO_REQUEST),
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in STANDARD_ATTRS:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(server: ServerSettings) -> None:
    """Install one stderr handler on the root logger, in the configured format and level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if server.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(server.log_level.upper())
    # Python's warnings (a library's UserWarning) would print raw lines to stderr: log them
    # (logger ``py.warnings``), so that with JSON logs every line is one JSON object.
    logging.captureWarnings(True)
    # uvicorn's own loggers propagate to ours; its access log is replaced by the middleware's.
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    logging.getLogger("memproxy.access").disabled = not server.access_log
