"""Auth in keys mode: refusals before any upstream call, and keys that never leak.

The 10k-request flood runs in-process (httpx.ASGITransport) for speed; the upstream is the real
fake on a socket, whose request log must stay empty.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings, load_settings
from tests.fakes.upstream import FakeServer
from tests.reliability.support import CHAT, assert_openai_error, running

MEMPROXY_KEY = "mp-acme-0123456789-secret"
OTHER_KEY = "mp-globex-9876543210-secret"
UPSTREAM_KEY = "sk-upstream-acme-abcdef-secret"
FLOOD = 10_000
FLOOD_CONCURRENCY = 100
BAD_AUTHORIZATIONS: list[str | None] = [
    None,
    "",
    "Bearer",
    "Bearer ",
    "bearer nope",
    "Basic bXA6YWNtZQ==",
    f"Bearer {MEMPROXY_KEY}x",
    f"Bearer {MEMPROXY_KEY[:-1]}",
    f"Bearer {MEMPROXY_KEY.upper()}",
    f"Token {MEMPROXY_KEY}",
    f"{MEMPROXY_KEY}",
    f"Bearer {UPSTREAM_KEY}",  # the upstream key is not a memproxy key
    "Bearer " + "k" * 8000,
]


def keys_settings(fake_url: str, tmp_path: Path, memory: bool = False) -> Settings:
    """Keys mode with two tenants; the upstream key comes from the configuration."""
    config = tmp_path / "memproxy.yaml"
    memory_conf = (
        f"memory:\n  enabled: true\n  deadline_ms: 10000\n  capture: turn\n"
        f"  stage_timeouts: {{embed_ms: 5000, search_ms: 5000, cache_ms: 1000}}\n"
        f"store:\n  data_dir: {tmp_path / 'data'}\n"
        if memory
        else "memory:\n  enabled: false\n"
    )
    config.write_text(
        f"upstream:\n  url: {fake_url}\n  api_key: env:UPSTREAM_KEY\n"
        + memory_conf
        + "auth:\n  mode: keys\n  tenants:\n"
        "    acme:\n      keys: [env:ACME_KEY]\n"
        "    globex:\n      keys: [env:GLOBEX_KEY]\n"
    )
    env = {"ACME_KEY": MEMPROXY_KEY, "GLOBEX_KEY": OTHER_KEY, "UPSTREAM_KEY": UPSTREAM_KEY}
    return load_settings(config, env=env)


def auth_headers(authorization: str | None) -> dict[str, str]:
    return {} if authorization is None else {"Authorization": authorization}


@pytest.mark.parametrize("authorization", BAD_AUTHORIZATIONS)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/memories"),
        ("POST", "/v1/memories"),
    ],
)
async def test_missing_or_invalid_key_is_401_before_the_upstream(
    fake: FakeServer, tmp_path: Path, authorization: str | None, method: str, path: str
) -> None:
    app = create_app(keys_settings(fake.url, tmp_path))
    async with running(app) as client:
        body = CHAT if method == "POST" else None
        response = await client.request(
            method, path, json=body, headers=auth_headers(authorization)
        )
        alive = await client.get("/healthz")
    assert_openai_error(response, 401, "invalid_api_key")
    assert MEMPROXY_KEY not in response.text
    assert fake.fake.requests == type(fake.fake.requests)()  # nothing reached the upstream
    assert alive.status_code == 200


async def test_ten_thousand_invalid_keys_never_reach_the_upstream(
    fake: FakeServer, tmp_path: Path
) -> None:
    app = create_app(keys_settings(fake.url, tmp_path))
    statuses: dict[int, int] = {}
    async with running(app) as client:

        async def attempt(i: int) -> None:
            headers = auth_headers(BAD_AUTHORIZATIONS[i % len(BAD_AUTHORIZATIONS)])
            if i % 3 == 0:
                headers = {"Authorization": f"Bearer mp-guess-{i}"}
            response = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        for start in range(0, FLOOD, FLOOD_CONCURRENCY):
            await asyncio.gather(*(attempt(i) for i in range(start, start + FLOOD_CONCURRENCY)))
        good = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {MEMPROXY_KEY}"}
        )
    assert statuses == {401: FLOOD}
    # Only the one valid request got through, with the configured upstream key.
    assert good.status_code == 200
    assert len(fake.fake.requests) == 1
    assert fake.fake.requests[0].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


def every_log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Formatted messages plus every attribute of every record (extras included)."""
    parts = [caplog.text]
    for record in caplog.records:
        parts.append(repr(record.__dict__))
        parts.append(record.getMessage())
    return "\n".join(parts)


@pytest.mark.parametrize("memory", [False, True], ids=["memory-off", "memory-on"])
async def test_keys_never_appear_in_logs_errors_metrics_or_explain(
    fake: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, memory: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    app = create_app(keys_settings(fake.url, tmp_path, memory))
    good = {"Authorization": f"Bearer {MEMPROXY_KEY}"}
    bodies: list[str] = []
    async with running(app) as client:
        calls = [
            ("POST", "/v1/chat/completions", CHAT, good),
            ("POST", "/v1/chat/completions", {**CHAT, "stream": True}, good),
            ("POST", "/v1/chat/completions", CHAT, {**good, "X-Fake-Status": "401"}),
            ("POST", "/v1/chat/completions", CHAT, {**good, "X-Fake-Status": "500"}),
            (
                "POST",
                "/v1/chat/completions",
                {**CHAT, "stream": True},
                {**good, "X-Fake-Reset-After": "1", "X-Fake-Chunks": "4"},
            ),
            ("POST", "/v1/memories", {"content": f"my key is {UPSTREAM_KEY[:3]}"}, good),
            ("POST", "/v1/chat/completions", CHAT, {**good, "X-Memory-Mode": "explain"}),
            ("POST", "/v1/chat/completions", CHAT, {**good, "X-Memory-Capture": "turn"}),
            ("POST", "/v1/memories/search", {"query": "hi key"}, good),
            ("POST", "/v1/chat/completions", CHAT, {**good, "X-Memory-Max-Tokens": "-5"}),
            ("POST", "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {MEMPROXY_KEY}z"}),
            ("POST", "/v1/chat/completions", b"{broken", good),
            ("GET", "/v1/models", None, good),
            ("GET", "/v1/memories", None, good),
            ("POST", "/v1/memories", {"content": "likes tea"}, good),
            ("GET", "/readyz", None, {}),
            ("GET", "/metrics", None, {}),
        ]
        for method, path, body, headers in calls:
            kwargs: dict[str, object] = {"headers": headers}
            if isinstance(body, bytes):
                kwargs["content"] = body
            elif body is not None:
                kwargs["json"] = body
            try:
                response = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
                bodies.append(response.text)
                bodies.append(repr(dict(response.headers)))
            except (httpx.RemoteProtocolError, AssertionError):
                # The broken stream ends without its final message, which ASGITransport
                # asserts on; its logs are what this test is after.
                pass
        metrics = (await client.get("/metrics")).text
        if memory:
            explained = await client.post(
                "/v1/chat/completions", json=CHAT, headers={**good, "X-Memory-Mode": "explain"}
            )
            assert explained.json()["object"] == "memory.explain"
            bodies.append(explained.text)
    # The test can fail: the upstream key really was used.
    assert any(
        r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}" for r in fake.fake.requests
    )
    logs = every_log_text(caplog)
    assert caplog.records  # debug logging was on and captured something
    for secret in (MEMPROXY_KEY, UPSTREAM_KEY, MEMPROXY_KEY[:12], UPSTREAM_KEY[:14]):
        assert secret not in logs
        assert secret not in metrics
        for text in bodies:
            assert secret not in text
