"""``reencode``: the changed body as JSON only when it says what the client sent."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.pipeline.reencode import MAX_EXPONENT_CHECKS, has_lossy_number, reencode


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
        b'{"text":"1e+19"}',  # a false alarm from text shaped like an exponent
    ],
)
def test_bodies_that_do_not(raw: bytes) -> None:
    assert reencode(parsed(raw)) is None


def test_the_exponent_scan_is_bounded() -> None:
    harmless = b'"' + b"e+1 " * (MAX_EXPONENT_CHECKS + 1) + b'"'
    assert has_lossy_number(harmless)  # too many to check: assume the worst
    assert not has_lossy_number(b'"' + b"e+1 " * (MAX_EXPONENT_CHECKS - 1) + b'"')
