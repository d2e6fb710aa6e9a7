"""``reencode``: the changed body as JSON only when it says what the client sent."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.pipeline.reencode import (
    MAX_EXPONENT_CHECKS,
    MAX_VALUES_CHECKED,
    has_lossy_number,
    holds_lossy_number,
    reencode,
)

BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def parsed(raw: bytes) -> Any:
    return orjson.loads(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
        b'{"seed":18446744073709551615,"x":-9223372036854775808}',  # 64-bit: kept exactly
        b'{"t":1E2,"p":0.10,"z":-0.0,"tiny":1e-400,"big":1e16,"small":-1.5e17}',
        b'{"text":"grade e+19, or E+20"}',  # no digit before it: not a number's exponent
        b'{"x":' + b"[" * 253 + b"]" * 253 + b"}",  # 254 levels: orjson's most
        b'{"text":"1e+19"}',  # text shaped like an exponent: the body has no such number
        # base64 of an image or PDF: exponent-shaped text everywhere, past the scan's bound
        b'{"url":"data:image/png;base64,' + b"QU7e+19Zk9e+200/" * (MAX_EXPONENT_CHECKS + 8) + b'"}',
        b'{"t":9.2e18,"u":-9.2e18}',  # doubles just under 2**63
    ],
)
def test_bodies_that_round_trip(raw: bytes) -> None:
    encoded = reencode(parsed(raw))
    assert encoded is not None
    assert orjson.loads(encoded) == parsed(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"x":' + b"[" * 254 + b"]" * 254 + b"}",  # 255 levels: orjson reads, cannot write
        b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"seed":18446744073709551616}',  # read as the double 1.8446744073709552e+19
        b'{"x":-9223372036854775809}',
        b'{"max_tokens":123456789012345678901234567890}',
        b'{"x":[1,2,{"y":99999999999999999999}]}',
        b'{"t":1e19}',  # a double that large: a false alarm, harmless (no memories)
        b'{"max":1.7976931348623157e308}',
        b'{"text":"7e+19","seed":18446744073709551616}',  # text and a number alike
    ],
)
def test_bodies_that_do_not(raw: bytes) -> None:
    assert reencode(parsed(raw)) is None


def test_the_exponent_scan_is_bounded() -> None:
    harmless = b'"' + b"e+1 " * (MAX_EXPONENT_CHECKS + 1) + b'"'
    assert has_lossy_number(harmless)  # too many to check: assume the worst
    assert not has_lossy_number(b'"' + b"e+1 " * (MAX_EXPONENT_CHECKS - 1) + b'"')


def test_the_body_check_is_bounded() -> None:
    many: list[object] = [0] * MAX_VALUES_CHECKED  # with the list itself, one value too many
    assert holds_lossy_number(many)  # too many values to check: assume the worst
    assert not holds_lossy_number(many[:-1])
    assert reencode({"text": "1e+19", "x": many}) is None
    assert reencode({"text": "1e+19", "x": many[:-3]}) is not None  # dict, text, list: 3


@given(st.lists(st.text(alphabet=BASE64, min_size=1, max_size=400), max_size=30))
def test_base64_text_always_round_trips(parts: list[str]) -> None:
    body = {"messages": [{"role": "user", "content": part} for part in parts]}
    encoded = reencode(body)
    assert encoded is not None
    assert orjson.loads(encoded) == body


@given(st.integers(min_value=2**64, max_value=2**200) | st.integers(max_value=-(2**63) - 1))
def test_an_integer_beyond_64_bits_never_round_trips(value: int) -> None:
    assert reencode(parsed(b'{"x":[1,{"y":' + str(value).encode() + b"}]}")) is None
