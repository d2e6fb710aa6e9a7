"""Who a caller is (adr/0086): a key in any of its three headers, never a shared keyless tenant.

Callers without a key, with Azure's ``api-key`` or with another ``Authorization`` scheme used to
land in one ``anonymous`` tenant and read each other's memories. Now a key is a key in
``Authorization: Bearer``, ``x-api-key`` or ``api-key`` (one tenant for the same key), other
schemes name their own tenants, and keyless callers have no memory unless the operator turns on
the shared anonymous tenant.
"""

from __future__ import annotations

import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from proxy.app import create_app
from proxy.cli import main
from proxy.settings import AuthSettings, Secret, Settings, TenantSettings, replace
from proxy.tenancy import ANONYMOUS_TENANT
from tests.fakes.upstream import FakeServer
from tests.reliability.support import CHAT, assert_openai_error, memory_settings, running

KEY = "sk-tenant-key-0123456789"
HEADER_FORMS = ("bearer", "x-api-key", "api-key")


def key_headers(form: str, key: str) -> dict[str, str]:
    """``key`` the way one kind of client sends it."""
    return {"Authorization": f"Bearer {key}"} if form == "bearer" else {form: key}


# Every kind of caller that used to share the "anonymous" tenant, plus keyed ones: each must see
# only its own memories.
CALLERS: dict[str, dict[str, str]] = {
    "bearer-a": {"Authorization": "Bearer key-a"},
    "x-api-key-b": {"x-api-key": "key-b"},
    "azure-api-key-c": {"api-key": "key-c"},
    "azure-api-key-d": {"api-key": "key-d"},
    "basic-1": {"Authorization": "Basic dXNlcjE6cHcx"},
    "basic-2": {"Authorization": "Basic dXNlcjI6cHcy"},
    "token-a": {"Authorization": "Token key-a"},  # same text as bearer-a's key, other scheme
    "token-e": {"Authorization": "Token key-e"},
    "bare-a": {"Authorization": "key-a"},
}
KEYLESS: list[dict[str, str]] = [
    {},
    {"Authorization": ""},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer   "},
    {"x-api-key": ""},
    {"api-key": " "},
]


def settings_for(fake: FakeServer, tmp_path: Path, **auth: Any) -> Settings:
    settings = memory_settings(fake.url, tmp_path / "data")
    return replace(settings, auth=replace(settings.auth, **auth))


async def test_callers_with_different_credentials_never_share_memories(
    fake: FakeServer, tmp_path: Path
) -> None:
    app = create_app(settings_for(fake, tmp_path))
    async with running(app) as client:
        for name, headers in CALLERS.items():
            response = await client.post(
                "/v1/memories", json={"content": f"secret of {name}"}, headers=headers
            )
            assert response.status_code == 201, (name, response.text)
        for name, headers in CALLERS.items():
            listed = await client.get("/v1/memories", headers=headers)
            assert listed.status_code == 200, listed.text
            assert [m["content"] for m in listed.json()["data"]] == [f"secret of {name}"], name
            found = await client.post(
                "/v1/memories/search", json={"query": "secret of"}, headers=headers
            )
            assert {m["content"] for m in found.json()["data"]} == {f"secret of {name}"}, name


@pytest.mark.parametrize("written_with", HEADER_FORMS)
async def test_the_three_key_headers_name_the_same_tenant(
    fake: FakeServer, tmp_path: Path, written_with: str
) -> None:
    key = f"{KEY}-{uuid.uuid4().hex}"
    app = create_app(settings_for(fake, tmp_path))
    async with running(app) as client:
        created = await client.post(
            "/v1/memories",
            json={"content": "likes green tea"},
            headers=key_headers(written_with, key),
        )
        assert created.status_code == 201, created.text
        memory_id = created.json()["data"][0]["id"]
        for form in HEADER_FORMS:
            got = await client.get(f"/v1/memories/{memory_id}", headers=key_headers(form, key))
            assert got.status_code == 200, (form, got.text)
            assert got.json()["content"] == "likes green tea"
        # The same key in the chat route finds the same memory (explain: no upstream call).
        explained = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "green tea?"}]},
            headers={"x-api-key": key, "X-Memory-Mode": "explain"},
        )
        assert [m["id"] for m in explained.json()["memories"]] == [memory_id]


@pytest.mark.parametrize("headers", KEYLESS, ids=lambda h: repr(h) if h else "none")
async def test_keyless_memories_api_is_refused_with_how_to_enable(
    fake: FakeServer, tmp_path: Path, headers: dict[str, str]
) -> None:
    app = create_app(settings_for(fake, tmp_path))
    async with running(app) as client:
        responses = [
            await client.post("/v1/memories", json={"content": "x"}, headers=headers),
            await client.get("/v1/memories", headers=headers),
            await client.post("/v1/memories/search", json={"query": "x"}, headers=headers),
            await client.delete("/v1/memories", params={"user": "u"}, headers=headers),
        ]
    for response in responses:
        assert_openai_error(response, 401, "missing_api_key")
        message = response.json()["error"]["message"]
        assert "auth.anonymous" in message
        assert "x-api-key" in message
    assert not fake.fake.requests


async def test_keyless_chat_passes_through_with_memory_off(
    fake: FakeServer, tmp_path: Path
) -> None:
    app = create_app(settings_for(fake, tmp_path))
    keyed = {"Authorization": "Bearer sk-owner"}
    async with running(app) as client:
        # A keyed caller's memory that a keyless caller must never get injected.
        created = await client.post("/v1/memories", json={"content": "hi there"}, headers=keyed)
        assert created.status_code == 201
        asks = [
            {"X-Memory-Capture": "turn"},
            {"X-Memory-Mode": "explain"},  # nothing to explain: forwarded like any chat
            {"X-Memory-Mode": "inject", "X-Memory-Capture": "user"},
        ]
        for ask in asks:
            response = await client.post("/v1/chat/completions", json=CHAT, headers=ask)
            assert response.status_code == 200, response.text
            assert response.json()["object"] == "chat.completion"
            assert response.headers["x-memory-status"] == "off"
        # A bad memory header is the same 400 with or without a key.
        bad = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Memory-Top-K": "-1"})
        assert_openai_error(bad, 400, "invalid_memory_header")
        services = app.state.services
        await services.drain(30)  # capture runs after the response, if it runs at all
        # Nothing was captured anywhere: the keyed tenant still has only its own memory, and
        # the old shared tenant got none (the keyless id "" is one no store accepts).
        shared = await services.memories.store.count(ANONYMOUS_TENANT)
        owner = await client.get("/v1/memories", headers=keyed)
    assert len(fake.fake.requests) == len(asks)
    for request in fake.fake.requests:
        assert request.json()["messages"] == CHAT["messages"]  # untouched: nothing injected
        assert "authorization" not in request.headers
    assert [m["content"] for m in owner.json()["data"]] == ["hi there"]
    assert shared == 0


async def test_the_anonymous_tenant_is_an_operator_choice(fake: FakeServer, tmp_path: Path) -> None:
    app = create_app(settings_for(fake, tmp_path, anonymous=True))
    async with running(app) as client:
        created = await client.post("/v1/memories", json={"content": "keyless likes tea"})
        assert created.status_code == 201, created.text
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "tea?"}]}
        injected = await client.post("/v1/chat/completions", json=chat)
        keyed = await client.get("/v1/memories", headers={"x-api-key": "sk-someone"})
        store = app.state.services.memories.store
        assert await store.count(ANONYMOUS_TENANT) == 1
    assert injected.headers["x-memory-status"] == "injected"
    assert "keyless likes tea" in fake.fake.requests[-1].body.decode()
    assert keyed.json()["data"] == []  # a keyed caller never sees the anonymous tenant


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer sk-client"},
        {"x-api-key": "sk-client", "anthropic-version": "2023-06-01"},
        {"api-key": "sk-client"},
        {"Authorization": "Basic dXNlcjpwdw=="},
        {"Authorization": "Bearer sk-a", "x-api-key": "sk-b", "api-key": "sk-c"},
    ],
    ids=["bearer", "x-api-key", "api-key", "basic", "all-three"],
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models"])
async def test_passthrough_sends_the_clients_credentials_upstream_unchanged(
    fake: FakeServer, tmp_path: Path, headers: dict[str, str], path: str
) -> None:
    app = create_app(settings_for(fake, tmp_path))
    async with running(app) as client:
        if path.endswith("models"):
            response = await client.get(path, headers=headers)
        else:
            response = await client.post(path, json=CHAT, headers=headers)
    assert response.status_code == 200, response.text
    sent = fake.fake.requests[0].headers
    for name, value in headers.items():
        assert sent[name.lower()] == value
    assert {"authorization", "x-api-key", "api-key"} & set(sent) == {
        name.lower() for name in headers if name.lower() != "anthropic-version"
    }


def keys_mode(fake: FakeServer, tmp_path: Path) -> Settings:
    settings = memory_settings(fake.url, tmp_path / "data")
    acme = TenantSettings(
        keys=(Secret("env:ACME", "mp-acme"),),
        upstream_api_key=Secret("env:UP", "sk-upstream-acme"),
    )
    auth = AuthSettings(mode="keys", tenants=types.MappingProxyType({"acme": acme}))
    return replace(settings, auth=auth)


@pytest.mark.parametrize("form", HEADER_FORMS)
async def test_keys_mode_accepts_the_key_in_any_header_and_forwards_none(
    fake: FakeServer, tmp_path: Path, form: str
) -> None:
    app = create_app(keys_mode(fake, tmp_path))
    # Credential headers that rank below the key's carry junk the upstream must not see either.
    junk = {"Authorization": "Basic anVuaw==", "x-api-key": "junk-x", "api-key": "junk-azure"}
    lower = HEADER_FORMS[HEADER_FORMS.index(form) + 1 :]
    headers = {
        **{k: v for k, v in junk.items() if k in lower or k == "Authorization"},
        **key_headers(form, "mp-acme"),
    }
    async with running(app) as client:
        chat = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
        models = await client.get("/v1/models", headers=headers)
        created = await client.post(
            "/v1/memories", json={"content": "acme fact"}, headers=key_headers(form, "mp-acme")
        )
        listed = await client.get("/v1/memories", headers={"api-key": "mp-acme"})
    assert (chat.status_code, models.status_code, created.status_code) == (200, 200, 201)
    assert [m["content"] for m in listed.json()["data"]] == ["acme fact"]
    assert len(fake.fake.requests) == 2
    for request in fake.fake.requests:
        sent = request.headers
        assert sent["authorization"] == "Bearer sk-upstream-acme"
        assert "x-api-key" not in sent
        assert "api-key" not in sent
        assert "mp-acme" not in repr(sent)


def test_the_cli_derives_the_servers_tenant_from_a_key(
    fake: FakeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Written over HTTP with Azure's header, found by ``memproxy memories export --key``."""
    import asyncio

    data = tmp_path / "data"
    app = create_app(settings_for(fake, tmp_path))

    async def write() -> None:
        async with running(app) as client:
            response = await client.post(
                "/v1/memories", json={"content": "written by azure"}, headers={"api-key": KEY}
            )
            assert response.status_code == 201, response.text

    asyncio.run(write())
    for name in ("MEMPROXY_CONFIG", "MEMPROXY_QDRANT_URL", "MEMPROXY_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMPROXY_DATA_DIR", str(data))
    capsys.readouterr()
    assert main(["memories", "export", "--key", KEY]) == 0
    exported = capsys.readouterr().out
    assert "written by azure" in exported
    # Without a key or tenant, and no anonymous tenant, the CLI names no tenant by itself.
    assert main(["memories", "export"]) != 0
    assert "auth.anonymous" in capsys.readouterr().err
