"""A scripted extractor upstream: the fake OpenAI upstream, answering fact-extraction calls
from a script.

A chat-completions request whose ``response_format`` is memproxy's facts schema is an
extraction call; every other request is the ordinary fake's. Each extraction call takes the next
step of ``script`` (when it is empty: no facts), answered in OpenAI's shapes: a structured
output in ``choices[0].message.content``, a ``refusal`` with null content, an error object with
its status (and ``Retry-After``), a slow answer. ``calls`` keeps each extraction request's body.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from proxy.memory.extraction import SCHEMA_NAME
from tests.fakes.upstream import FakeServer, FakeUpstream


@dataclass(frozen=True)
class Step:
    """One scripted answer: ``kind`` is ``facts``, ``raw`` (content as is), ``refusal``,
    ``status`` or ``body`` (a non-JSON body); ``delay_s`` before answering."""

    kind: str
    facts: list[dict[str, Any]] = field(default_factory=list)
    raw: str = ""
    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0


def facts(*items: str | dict[str, Any], delay_s: float = 0.0) -> Step:
    """A valid answer: each item a fact text, or a whole fact object."""
    full = [
        {"content": item, "expires_at": None, "replaces": None} if isinstance(item, str) else item
        for item in items
    ]
    return Step("facts", facts=full, delay_s=delay_s)


def raw(content: str) -> Step:
    """An answer whose message content is ``content`` as is (invalid JSON, wrong shape)."""
    return Step("raw", raw=content)


REFUSAL = Step("refusal")
NOT_JSON_BODY = Step("body")


def status(code: int, retry_after: str | None = None) -> Step:
    """An error answer in OpenAI's shape."""
    return Step("status", status=code, retry_after=retry_after)


def is_extraction(payload: Any) -> bool:
    """Whether a chat request body is memproxy's extraction call."""
    if not isinstance(payload, dict):
        return False
    schema = (payload.get("response_format") or {}).get("json_schema") or {}
    return isinstance(schema, dict) and schema.get("name") == SCHEMA_NAME


@dataclass
class ExtractorUpstream(FakeUpstream):
    """``FakeUpstream`` with scripted extraction answers."""

    script: deque[Step] = field(default_factory=deque)
    calls: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            payload = None
        if not is_extraction(payload):
            return await super()._chat(request)
        self.calls.append(payload)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        step = self.script.popleft() if self.script else facts()
        if step.delay_s:
            await asyncio.sleep(step.delay_s)
        self.answered_at.append(time.monotonic())
        if step.kind == "status":
            headers = {"Retry-After": step.retry_after} if step.retry_after else {}
            error = {
                "error": {
                    "message": f"scripted error {step.status}",
                    "type": "rate_limit_error" if step.status == 429 else "server_error",
                    "param": None,
                    "code": None,
                }
            }
            return web.json_response(error, status=step.status, headers=headers)
        if step.kind == "body":
            return web.Response(body=b"<html>bad gateway</html>", content_type="text/html")
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        if step.kind == "refusal":
            message["refusal"] = "I'm sorry, I can't help with that."
        elif step.kind == "raw":
            message["content"] = step.raw
        else:
            message["content"] = orjson.dumps({"facts": step.facts}).decode()
        body = {
            "id": "chatcmpl-extract",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": payload.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        }
        return web.json_response(body)


def extractor_server(*steps: Step) -> FakeServer:
    """A ``FakeServer`` (not started) over an ``ExtractorUpstream`` with ``steps`` queued."""
    return FakeServer(ExtractorUpstream(script=deque(steps)))
