"""Tenancy: passthrough hashing, keys mode lookup and per-tenant memory limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.errors import AuthError
from proxy.settings import load_settings
from proxy.tenancy import ANONYMOUS_TENANT, TenantResolver, bearer_key


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer sk-1", "sk-1"),
        ("bearer  sk-2 ", "sk-2"),
        ("Basic abc", None),
        ("Bearer ", None),
        (None, None),
        ("", None),
    ],
)
def test_bearer_key(header: str | None, key: str | None) -> None:
    assert bearer_key(header) == key


def test_passthrough_tenant_is_a_stable_hash_and_auth_goes_upstream() -> None:
    resolver = TenantResolver(load_settings(env={}))
    a1 = resolver.resolve("Bearer sk-a")
    a2 = resolver.resolve("Bearer sk-a")
    b = resolver.resolve("Bearer sk-b")
    assert a1.id == a2.id
    assert a1.id != b.id
    assert "sk-a" not in a1.id
    assert a1.upstream_authorization == "Bearer sk-a"
    assert resolver.resolve(None).id == ANONYMOUS_TENANT


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
    acme = resolver.resolve("Bearer mp-a")
    assert acme.id == "acme"
    assert acme.upstream_authorization == "Bearer sk-shared"
    assert (acme.memory.max_tokens, acme.memory.top_k) == (900, 40)
    beta = resolver.resolve("Bearer mp-b")
    assert beta.upstream_authorization == "Bearer sk-beta"
    assert beta.memory.max_tokens == 4500
    for bad in ("Bearer sk-shared", "Bearer nope", None):
        with pytest.raises(AuthError):
            resolver.resolve(bad)
