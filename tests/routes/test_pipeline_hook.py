"""The memory pipeline's plug-in point: prepare, response headers, reply, completion hook."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from proxy.apis.adapter import ApiAdapter
from proxy.apis.openai_chat import OpenAIChat
from proxy.app import create_app
from proxy.pipeline.contract import Completion, Prepared
from proxy.relay import Relay
from proxy.tenancy import Tenant
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

MESSAGES = [{"role": "user", "content": "hi"}]


class RecordingPipeline:
    """Injects a system message, adds headers, records completions."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.completions: list[Completion] = []
        self.completed = threading.Event()

    async def prepare(
        self, tenant: Tenant, headers: Headers, body: dict[str, Any], api: ApiAdapter
    ) -> Prepared:
        self.calls.append((tenant.id, headers.get("x-memory-user")))
        if headers.get("x-memory-mode") == "explain":
            return Prepared(body=body, reply=JSONResponse({"object": "memory.explain"}))
        injected = {"role": "system", "content": "You remember: likes tea."}
        new_body = {**body, "messages": [injected, *body["messages"]]}
        return Prepared(
            body=new_body,
            response_headers={"X-Memory-Status": "injected", "X-Memory-Injected": "1"},
            on_complete=self.on_complete,
        )

    async def on_complete(self, completion: Completion) -> None:
        await asyncio.sleep(0)
        self.completions.append(completion)
        self.completed.set()


def test_prepare_changes_the_forwarded_body_and_adds_headers(fake: FakeServer) -> None:
    pipeline = RecordingPipeline()
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-1", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES, extra_headers={"X-Memory-User": "alice"}
        )
        assert pipeline.completed.wait(5)
    assert raw.headers["x-memory-status"] == "injected"
    assert raw.headers["x-memory-injected"] == "1"
    forwarded = fake.fake.requests[0].json()["messages"]
    assert forwarded[0] == {"role": "system", "content": "You remember: likes tea."}
    assert forwarded[1:] == MESSAGES
    assert pipeline.calls[0][1] == "alice"
    assert pipeline.calls[0][0].startswith("t-")
    (done,) = pipeline.completions
    assert (done.status, done.streamed, done.ok) == (200, False, True)
    assert done.text == "Hello from the fake upstream"
    assert done.body is not None


def test_completion_hook_gets_streamed_text(fake: FakeServer) -> None:
    pipeline = RecordingPipeline()
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-1", max_retries=0)
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert pipeline.completed.wait(5)
    (done,) = pipeline.completions
    assert (done.streamed, done.ok, done.text) == (True, True, text)


def test_failed_stream_reports_not_ok(fake: FakeServer) -> None:
    pipeline = RecordingPipeline()
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(
                f"{proxy.url}/chat/completions", json=body, headers={"X-Fake-Reset-After": "1"}
            )
        assert pipeline.completed.wait(5)
    assert pipeline.completions[0].ok is False


def test_reply_short_circuits_the_upstream(fake: FakeServer) -> None:
    pipeline = RecordingPipeline()
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        response = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": MESSAGES},
            headers={"X-Memory-Mode": "explain"},
        )
    assert response.json() == {"object": "memory.explain"}
    assert fake.fake.requests == type(fake.fake.requests)()  # nothing reached the upstream


def test_noop_pipeline_forwards_the_original_bytes(proxy: ProxyServer, fake: FakeServer) -> None:
    raw = b'{"messages": [ {"role":"user","content":"hi"} ],   "model":"m"}'
    httpx.post(f"{proxy.url}/chat/completions", content=raw)
    assert fake.fake.requests[0].body == raw


UPSTREAM_LATENCY_S = 1.0


class SendingPipeline(RecordingPipeline):
    """Hands over work for once the request has gone upstream (``on_sent``), which notes
    whether the upstream had the request by then, and when it ran."""

    def __init__(self, fake: FakeServer, fails: bool = False) -> None:
        super().__init__()
        self.fake = fake
        self.fails = fails
        self.started = time.monotonic()
        self.seen: list[tuple[bool, float]] = []  # (upstream had the request, seconds in)

    async def prepare(
        self, tenant: Tenant, headers: Headers, body: dict[str, Any], api: ApiAdapter
    ) -> Prepared:
        prepared = await super().prepare(tenant, headers, body, api)
        return Prepared(
            body=prepared.body,
            response_headers=prepared.response_headers,
            on_complete=prepared.on_complete,
            on_sent=self.on_sent,
        )

    async def on_sent(self) -> None:
        # Polls while holding the proxy's event loop: a request still waiting to be written
        # behind this work could not reach the upstream meanwhile.
        deadline = time.monotonic() + 2.0
        while not self.fake.fake.requests and time.monotonic() < deadline:
            time.sleep(0.005)  # noqa: ASYNC251 (holding the loop is the point)
        self.seen.append((bool(self.fake.fake.requests), time.monotonic() - self.started))
        if self.fails:
            raise RuntimeError("a cache write went wrong")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_work_after_sending_runs_while_the_upstream_answers(fake: FakeServer, stream: bool) -> None:
    """The cache writes of a request run once its request is upstream, before the answer:
    at concurrency 1 they then no longer hold up the client's next request."""
    pipeline = SendingPipeline(fake)
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        pipeline.started = time.monotonic()
        response = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": stream},
            headers={"X-Fake-Latency-Ms": str(UPSTREAM_LATENCY_S * 1000)},
        )
        assert pipeline.completed.wait(5)
    assert response.status_code == 200
    [(upstream_had_it, after_s)] = pipeline.seen  # once
    assert upstream_had_it  # the request went before the work
    assert after_s < UPSTREAM_LATENCY_S  # and the work did not wait for the answer


def test_failing_work_after_sending_never_fails_the_request(
    fake: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = SendingPipeline(fake, fails=True)
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-1", max_retries=0)
        reply = client.chat.completions.create(model="m", messages=MESSAGES)
        assert pipeline.completed.wait(5)
    assert reply.choices[0].message.content == "Hello from the fake upstream"
    assert [had for had, _ in pipeline.seen] == [True]
    failed = [r for r in caplog.records if r.name == "memproxy.relay" and r.exc_info]
    assert [r.getMessage() for r in failed] == ["work after sending the request failed"]


class StatusPipeline(RecordingPipeline):
    """Needs only the answer's status (``on_status``); has no ``on_complete``, so the answer
    is never read."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []
        self.reads = 0

    async def prepare(
        self, tenant: Tenant, headers: Headers, body: dict[str, Any], api: ApiAdapter
    ) -> Prepared:
        prepared = await super().prepare(tenant, headers, body, api)
        return dataclasses.replace(prepared, on_complete=None, on_status=self.on_status)

    def on_status(self, status: int) -> None:
        self.statuses.append(status)
        self.completed.set()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("status", [200, 429])
def test_status_hook_gets_the_answers_status_without_reading_it(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch, stream: bool, status: int
) -> None:
    """Retrieval counts need only the status (adr/0134): the route hands it over once the
    client has the response, in the request's task, and reads nothing of the answer."""
    pipeline = StatusPipeline()

    def read(self: Any, answer: Any) -> Completion:
        pipeline.reads += 1
        raise AssertionError("the answer was read")

    monkeypatch.setattr(OpenAIChat, "read_completion", read)
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-1", max_retries=0)
        headers = {"X-Fake-Status": str(status)}
        if status == 200:
            if stream:
                chunks = client.chat.completions.create(
                    model="m", messages=MESSAGES, stream=True, extra_headers=headers
                )
                assert "".join(c.choices[0].delta.content or "" for c in chunks)
            else:
                answer = client.chat.completions.create(
                    model="m", messages=MESSAGES, extra_headers=headers
                )
                assert answer.choices[0].message.content
        else:
            with pytest.raises(openai.RateLimitError):
                client.chat.completions.create(
                    model="m", messages=MESSAGES, stream=stream, extra_headers=headers
                )
        assert pipeline.completed.wait(5)
    assert pipeline.statuses == [status]
    assert pipeline.reads == 0


def test_status_hook_runs_when_the_relay_fails(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook also observes the request's stage histograms: it runs however the relay ends."""
    pipeline = StatusPipeline()

    async def broken(self: Relay, scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("a relay bug")

    monkeypatch.setattr(Relay, "__call__", broken)
    with ProxyServer(create_app(proxy_settings(fake.url), pipeline=pipeline)) as proxy:
        response = httpx.post(
            proxy.url + "/chat/completions",
            json={"model": "m", "messages": MESSAGES},
            headers={"Authorization": "Bearer sk-1"},
        )
        assert response.status_code == 500
        assert pipeline.completed.wait(5)
    assert pipeline.statuses == [0]
