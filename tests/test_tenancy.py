"""Tenancy: credentials from headers, passthrough hashing, keys mode lookup, upstream auth."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import AuthError, ConfigError
from proxy.settings import load_settings, replace
from proxy.tenancy import (
    ANONYMOUS_TENANT,
    BILLING_HEADERS,
    CREDENTIAL_HEADERS,
    Credential,
    TenantResolver,
    UpstreamAuth,
    bearer_auth,
    client_credential,
    tenant_id,
    x_api_key_auth,
)


def raw(**headers: str) -> list[tuple[bytes, bytes]]:
    """ASGI-style headers (``x_api_key`` -> ``x-api-key``)."""
    return [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]


@pytest.mark.parametrize(
    ("headers", "credential"),
    [
        (raw(authorization="Bearer sk-1"), Credential("sk-1")),
        (raw(authorization="bearer  sk-2 "), Credential("sk-2")),
        (raw(authorization="BEARER sk-3"), Credential("sk-3")),
        (raw(x_api_key="sk-4"), Credential("sk-4")),
        (raw(api_key=" sk-5 "), Credential("sk-5")),
        (raw(authorization="Basic abc"), Credential("abc", "basic")),
        (raw(authorization="Token  sk-6"), Credential("sk-6", "token")),
        (raw(authorization="sk-7"), Credential("sk-7", "")),
        # A key wins over another scheme, whatever the header order.
        (raw(authorization="Basic abc", api_key="sk-8"), Credential("sk-8")),
        (raw(api_key="sk-9", authorization="Basic abc"), Credential("sk-9")),
        # Among keys: Bearer, then x-api-key, then api-key.
        (raw(api_key="c", x_api_key="b", authorization="Bearer a"), Credential("a")),
        (raw(api_key="c", x_api_key="b"), Credential("b")),
        (raw(authorization="Bearer ", x_api_key="b"), Credential("b")),
        # The first of a repeated header counts.
        ([(b"x-api-key", b"first"), (b"x-api-key", b"second")], Credential("first")),
        # No credential at all.
        ([], None),
        (raw(authorization=""), None),
        (raw(authorization="Bearer"), None),
        (raw(authorization="  Bearer   "), None),
        (raw(x_api_key="", api_key="  "), None),
        (raw(content_type="application/json", proxy_authorization="Bearer x"), None),
    ],
)
def test_client_credential(
    headers: list[tuple[bytes, bytes]], credential: Credential | None
) -> None:
    assert client_credential(headers) == credential


def test_credential_headers_are_the_three_key_headers() -> None:
    assert {b"authorization", b"x-api-key", b"api-key"} == CREDENTIAL_HEADERS


def test_tenant_ids_keep_keys_together_and_schemes_apart() -> None:
    ids = {
        "key": tenant_id(Credential("sk-a")),
        "basic": tenant_id(Credential("sk-a", "basic")),
        "token": tenant_id(Credential("sk-a", "token")),
        "bare": tenant_id(Credential("sk-a", "")),
        # A key that spells out another scheme's credential is still a different tenant.
        "spelled": tenant_id(Credential("basic sk-a")),
    }
    assert len(set(ids.values())) == len(ids)
    # Pinned: stored memories are filed under it, so it must not change between releases.
    assert ids["key"] == "t-a4a6d307ad00fa67"
    assert all(len(i) == 2 + 16 and "sk-a" not in i for i in ids.values())


def test_passthrough_tenant_is_a_stable_hash_and_credentials_go_upstream() -> None:
    resolver = TenantResolver(load_settings(env={}))
    a1 = resolver.resolve(raw(authorization="Bearer sk-a"))
    a2 = resolver.resolve(raw(x_api_key="sk-a"))
    a3 = resolver.resolve(raw(api_key="sk-a"))
    b = resolver.resolve(raw(authorization="Bearer sk-b"))
    assert a1.id == a2.id == a3.id == resolver.for_key("sk-a").id == tenant_id(Credential("sk-a"))
    assert a1.id != b.id
    assert "sk-a" not in a1.id
    assert a1.forwards_credentials
    assert bearer_auth(a1).withhold == frozenset()
    assert bearer_auth(a1).add == ()
    assert x_api_key_auth(a1) == bearer_auth(a1)  # passthrough: the client's headers, as sent


def test_keyless_caller_has_no_memory_unless_anonymous_is_on() -> None:
    settings = load_settings(env={})
    keyless = TenantResolver(settings).resolve([])
    assert keyless.keyless
    assert not keyless.memory.enabled
    with pytest.raises(AuthError) as refused:
        TenantResolver(settings).resolve_owner(raw(authorization="Bearer "))
    assert refused.value.code == "missing_api_key"
    assert "auth.anonymous" in refused.value.message
    anonymous_on = replace(settings, auth=replace(settings.auth, anonymous=True))
    anonymous = TenantResolver(anonymous_on).resolve_owner([])
    assert anonymous.id == ANONYMOUS_TENANT
    assert anonymous.memory.enabled
    assert not anonymous.keyless


def test_anonymous_setting(tmp_path: Path) -> None:
    assert load_settings(env={}).auth.anonymous is False
    assert load_settings(env={"MEMPROXY_AUTH_ANONYMOUS": "true"}).auth.anonymous is True
    config = tmp_path / "c.yaml"
    config.write_text(
        "auth:\n  mode: keys\n  anonymous: true\n  tenants:\n    a: {keys: [env:K]}\n"
    )
    with pytest.raises(ConfigError, match=r"auth\.anonymous"):
        load_settings(config, env={"K": "k"})


def test_keys_mode(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "upstream:\n  api_key: env:SHARED\n"
        "memory:\n  top_k: 40\n"
        "auth:\n  mode: keys\n  tenants:\n"
        "    acme:\n      keys: [env:ACME]\n      memory: {max_tokens: 900}\n"
        "    beta:\n      keys: [env:BETA]\n      upstream_api_key: env:BETA_UP\n"
    )
    env = {"SHARED": "sk-shared", "ACME": "mp-a", "BETA": "mp-b", "BETA_UP": "sk-beta"}
    resolver = TenantResolver(load_settings(config, env=env))
    acme = resolver.resolve(raw(authorization="Bearer mp-a"))
    assert acme.id == "acme"
    assert resolver.resolve(raw(x_api_key="mp-a")) is acme
    assert resolver.resolve(raw(api_key="mp-a")) is acme
    assert bearer_auth(acme).add == ((b"authorization", b"Bearer sk-shared"),)
    assert bearer_auth(acme).withhold == CREDENTIAL_HEADERS | BILLING_HEADERS
    assert (acme.memory.max_tokens, acme.memory.top_k) == (900, 40)
    beta = resolver.for_key("mp-b")
    assert bearer_auth(beta).add == ((b"authorization", b"Bearer sk-beta"),)
    assert beta.memory.max_tokens == 4500
    for bad in (
        raw(authorization="Bearer sk-shared"),
        raw(authorization="Bearer nope"),
        raw(authorization="Basic mp-a"),  # a memproxy key only counts as a key
        raw(authorization="mp-a"),
        raw(x_api_key="nope", api_key="mp-a"),  # the first-ranked key decides
        [],
    ):
        with pytest.raises(AuthError):
            resolver.resolve(bad)


def test_keys_mode_sends_the_anthropic_key_as_x_api_key(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "upstream:\n  api_key: env:SHARED\n  anthropic: {api_key: env:ANT_SHARED}\n"
        "auth:\n  mode: keys\n  tenants:\n"
        "    acme:\n      keys: [env:ACME]\n"
        "    beta:\n      keys: [env:BETA]\n      anthropic_api_key: env:BETA_ANT\n"
    )
    env = {"SHARED": "sk-s", "ANT_SHARED": "ant-s", "ACME": "mp-a", "BETA": "mp-b"}
    resolver = TenantResolver(load_settings(config, env={**env, "BETA_ANT": "ant-b"}))
    acme, beta = resolver.for_key("mp-a"), resolver.for_key("mp-b")
    assert x_api_key_auth(acme).add == ((b"x-api-key", b"ant-s"),)
    assert x_api_key_auth(beta).add == ((b"x-api-key", b"ant-b"),)
    assert x_api_key_auth(acme).withhold == CREDENTIAL_HEADERS | BILLING_HEADERS
    assert bearer_auth(beta).add == ((b"authorization", b"Bearer sk-s"),)  # OpenAI's untouched
    # Without an Anthropic key configured, the client's key is still withheld: the tenant's
    # memproxy key never reaches Anthropic.
    config.write_text("auth:\n  mode: keys\n  tenants:\n    acme: {keys: [env:ACME]}\n")
    keyless = TenantResolver(load_settings(config, env=env)).for_key("mp-a")
    assert x_api_key_auth(keyless) == UpstreamAuth(CREDENTIAL_HEADERS | BILLING_HEADERS, ())
