"""``X-Memory-*`` headers: parsed, bounded by the tenant's limits, 400 on bad values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.defaults import CAPTURES
from proxy.errors import RequestError
from proxy.pipeline.options import parse_options
from proxy.settings import MemorySettings, TenantMemory, replace

LIMITS = replace(MemorySettings(), max_tokens=1000, top_k=40, sources=("learnings", "playbook"))


def headers(**values: str) -> dict[str, str]:
    return {f"x-memory-{k.replace('_', '-')}": v for k, v in values.items()}


@pytest.mark.parametrize(
    ("given_headers", "field", "expected"),
    [
        ({}, "mode", "inject"),
        (headers(mode="EXPLAIN"), "mode", "explain"),
        (headers(mode=" off "), "mode", "off"),
        ({}, "max_tokens", 1000),
        (headers(max_tokens="300"), "max_tokens", 300),
        (headers(max_tokens="0"), "max_tokens", 0),
        (headers(max_tokens="999999"), "max_tokens", 1000),
        (headers(top_k="5"), "top_k", 5),
        (headers(top_k="500"), "top_k", 40),
        ({}, "sources", ("learnings", "playbook")),
        (headers(sources="playbook"), "sources", ("playbook",)),
        (headers(sources="conversation"), "sources", ()),
        (headers(sources=" Playbook , learnings"), "sources", ("learnings", "playbook")),
        ({}, "capture", "off"),
        (headers(capture="turn"), "capture", "turn"),
        (headers(user="alice"), "user", "alice"),
        (headers(session="s1"), "session", "s1"),
        ({}, "position", "turn"),
        (headers(position=" System "), "position", "system"),
        (headers(position="turn"), "position", "turn"),
        ({}, "budget_rule", "adaptive"),
        (headers(budget_rule="FILL"), "budget_rule", "fill"),
        (headers(budget_rule=" adaptive "), "budget_rule", "adaptive"),
    ],
)
def test_header_values(given_headers: dict[str, str], field: str, expected: Any) -> None:
    assert getattr(parse_options(LIMITS, given_headers, {}), field) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("mode", "loud"),
        ("max_tokens", "-1"),
        ("max_tokens", "1.5"),
        ("max_tokens", ""),
        ("max_tokens", "1" * 20),
        ("top_k", "0"),
        ("top_k", "ten"),
        ("top_k", "\u00b3"),  # str.isdigit() says yes, int() says no
        ("top_k", "\u0663"),  # Arabic-Indic three: int() would read it
        ("max_tokens", "\uff15"),  # fullwidth five
        ("max_tokens", "1\u00b9"),
        ("sources", "secrets"),
        ("sources", ","),
        ("capture", "all"),
        ("position", "front"),
        ("position", ""),
        ("budget_rule", "greedy"),
        ("budget_rule", ""),
        ("user", "x" * 300),
        ("session", "bad\nid"),
    ],
)
def test_bad_values_are_400_naming_the_header(name: str, value: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_options(LIMITS, headers(**{name: value}), {})
    header = f"x-memory-{name.replace('_', '-')}"
    assert caught.value.param == header
    assert caught.value.status == 400


def test_user_falls_back_to_the_body() -> None:
    assert parse_options(LIMITS, {}, {"user": "bob"}).user == "bob"
    assert parse_options(LIMITS, headers(user="alice"), {"user": "bob"}).user == "alice"
    assert parse_options(LIMITS, {}, {"user": 42}).user == ""


@given(st.integers(min_value=0, max_value=10**8), st.integers(min_value=1, max_value=10**8))
def test_headers_never_exceed_the_tenants_caps(max_tokens: int, top_k: int) -> None:
    options = parse_options(LIMITS, headers(max_tokens=str(max_tokens), top_k=str(top_k)), {})
    assert options.max_tokens == min(max_tokens, LIMITS.max_tokens)
    assert options.top_k == min(top_k, LIMITS.top_k)


@given(
    st.lists(st.sampled_from(["learnings", "playbook", "conversation", "summaries"]), min_size=1)
)
def test_sources_stay_within_the_tenants(names: list[str]) -> None:
    options = parse_options(LIMITS, headers(sources=",".join(names)), {})
    assert set(options.sources) <= set(LIMITS.sources)
    assert set(options.sources) == set(names) & set(LIMITS.sources)


@pytest.mark.parametrize(
    "given_headers",
    [{}, headers(mode="explain"), headers(mode="inject", capture="turn"), headers(capture="user")],
)
def test_a_caller_without_memory_gets_mode_and_capture_off(given_headers: dict[str, str]) -> None:
    """A keyless caller (adr/0086): whatever it asks, nothing is read, explained or stored."""
    limits = replace(LIMITS, enabled=False, capture="turn")
    options = parse_options(limits, given_headers, {})
    assert (options.mode, options.capture) == ("off", "off")


def test_a_caller_without_memory_still_gets_400_for_a_bad_header() -> None:
    with pytest.raises(RequestError):
        parse_options(replace(LIMITS, enabled=False), headers(top_k="-1"), {})


@pytest.mark.parametrize(
    ("max_capture", "asked", "expected"),
    [
        ("user", "turn", "user"),  # off < user < turn
        ("user", "user", "user"),
        ("user", "off", "off"),
        ("off", "user", "off"),
        ("turn", "user", "user"),
        ("turn", "facts", "turn"),  # ... < turn < facts
        ("facts", "facts", "facts"),
        ("facts", "turn", "turn"),
    ],
)
def test_capture_header_is_clamped_to_max_capture(
    max_capture: str, asked: str, expected: str
) -> None:
    options = parse_options(replace(LIMITS, max_capture=max_capture), headers(capture=asked), {})
    assert options.capture == expected


@pytest.mark.parametrize("asked", CAPTURES)
def test_a_tenant_configured_with_capture_off_captures_nothing(asked: str) -> None:
    """``auth.tenants.NAME.memory.capture: "off"`` bounds the header too (issue 13)."""
    tenant = MemorySettings().for_tenant(TenantMemory(capture="off"))
    assert parse_options(tenant, headers(capture=asked), {}).capture == "off"


def test_the_tenants_position_is_the_default() -> None:
    limits = MemorySettings().for_tenant(TenantMemory(position="system"))
    assert parse_options(limits, {}, {}).position == "system"
    assert parse_options(limits, headers(position="turn"), {}).position == "turn"


def test_budget_rule_defaults_to_the_tenants() -> None:
    """``memory.budget_rule`` (or a tenant's) is what a request without the header gets."""
    tenant = MemorySettings().for_tenant(TenantMemory(budget_rule="fill"))
    assert parse_options(tenant, {}, {}).budget_rule == "fill"
    assert parse_options(tenant, headers(budget_rule="adaptive"), {}).budget_rule == "adaptive"
