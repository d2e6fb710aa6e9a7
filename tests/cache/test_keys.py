"""Key layout: version prefix, tenant in every key, no forgeable collisions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cache import keys

TENANT_KEYS = [
    lambda t: keys.embedding_key(t, "static-minilm", 256, "hello"),
    lambda t: keys.token_count_key(t, "o200k_base", keys.digest("hello")),
    lambda t: keys.generation_key(t),
    lambda t: keys.retrieval_key(t, 7, "alice", "hello", 8, None, ""),
]


@pytest.mark.parametrize("make_key", TENANT_KEYS)
def test_every_key_is_versioned_and_starts_with_its_tenant(make_key: Callable[[str], str]) -> None:
    assert make_key("acme").startswith("mp:v1:acme:")
    assert make_key("acme") != make_key("globex")


@settings(deadline=None)  # a shared CI machine must not turn slowness into failures
@given(a=st.text(max_size=20), b=st.text(max_size=20))
def test_tenant_prefixes_never_nest(a: str, b: str) -> None:
    # If one tenant's prefix started with another's, a scan or a forged name could cross over.
    if a != b:
        assert not keys.tenant_prefix(a).startswith(keys.tenant_prefix(b))


def test_separator_in_a_tenant_name_cannot_forge_another_tenant() -> None:
    forged = keys.generation_key("a:emb")
    assert forged != keys.generation_key("a")
    assert ":emb:" not in forged


def test_free_text_enters_keys_only_as_a_digest() -> None:
    secret = "my password is hunter2"
    assert secret not in keys.embedding_key("t", "m", 8, secret)
    assert secret not in keys.retrieval_key("t", 1, "u", secret, 8, None, "")


def test_source_order_and_repeats_do_not_change_the_retrieval_key() -> None:
    a = keys.retrieval_key("t", 1, "u", "q", 8, ["playbook", "learnings"], "")
    b = keys.retrieval_key("t", 1, "u", "q", 8, ("learnings", "playbook", "learnings"), "")
    assert a == b


BASE = {"tenant": "t", "generation": 1, "user": "u", "query": "q", "top_k": 8}
BASE_SOURCES: tuple[str, ...] | None = None


@pytest.mark.parametrize(
    ("change", "sources", "variant"),
    [
        ({"generation": 2}, BASE_SOURCES, ""),
        ({"user": "v"}, BASE_SOURCES, ""),
        ({"user": ""}, BASE_SOURCES, ""),
        ({"query": "q2"}, BASE_SOURCES, ""),
        ({"top_k": 9}, BASE_SOURCES, ""),
        ({}, ("learnings",), ""),
        ({}, (), ""),
        ({}, BASE_SOURCES, "other-embedder"),
    ],
)
def test_anything_that_changes_a_search_changes_its_key(
    change: dict[str, object], sources: tuple[str, ...] | None, variant: str
) -> None:
    base = keys.retrieval_key("t", 1, "u", "q", 8, None, "")
    args = {**BASE, **change}
    other = keys.retrieval_key(
        str(args["tenant"]),
        int(str(args["generation"])),
        str(args["user"]),
        str(args["query"]),
        int(str(args["top_k"])),
        sources,
        variant,
    )
    assert other != base


def test_user_and_query_boundaries_cannot_be_shifted() -> None:
    # ("ab", "c") and ("a", "bc") must not share a key.
    assert keys.retrieval_key("t", 1, "ab", "c", 8, None, "") != keys.retrieval_key(
        "t", 1, "a", "bc", 8, None, ""
    )


def test_digest_is_stable_and_128_bit() -> None:
    assert keys.digest("hello") == keys.digest("hello")
    assert len(keys.digest("hello")) == 32
    assert keys.digest("hello") != keys.digest("hello ")


def test_names_are_encoded_once_each() -> None:
    """A name met again is not quoted again: ``quote`` walks a name with a character to
    escape byte by byte, and the same few names (tenant, embedder model) enter every request's
    keys several times."""
    name = "minishlab/potion-base-8M:v2"
    first = keys.part(name)
    before = keys.part.cache_info()
    assert keys.part(name) is first
    after = keys.part.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    assert first == "minishlab%2Fpotion-base-8M%3Av2"  # still the separator-free encoding
