"""Decoding compressed upstream bodies for what memproxy reads itself, within a size bound."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.content_encoding import MAX_DECODED_BYTES, DecodeError, decode_body
from tests.fakes.upstream import ENCODERS, StackedEncoder, stream_events

MIB = 1024 * 1024
ANSWER = b'{"choices": [{"index": 0, "message": {"content": "Hello from the fake"}}]}'


def encoded(codings: list[str], data: bytes) -> bytes:
    return StackedEncoder(codings).whole(data)


@pytest.mark.parametrize(
    ("header", "codings"),
    [
        ("gzip", ["gzip"]),
        ("x-gzip", ["gzip"]),
        ("GZip", ["gzip"]),
        ("deflate", ["deflate"]),
        ("br", ["br"]),
        ("zstd", ["zstd"]),
        ("gzip, br", ["gzip", "br"]),  # gzipped, then brotli'd
        ("br,zstd", ["br", "zstd"]),
        (" deflate ,gzip ", ["deflate", "gzip"]),
        ("identity", []),
        ("gzip, identity", ["gzip"]),
        ("", []),
    ],
)
def test_each_coding_and_stacks_decode(header: str, codings: list[str]) -> None:
    assert decode_body(encoded(codings, ANSWER), header) == ANSWER
    assert decode_body(encoded(codings, ANSWER), header.encode()) == ANSWER


def test_no_header_leaves_the_body_alone() -> None:
    assert decode_body(ANSWER, None) == ANSWER


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_a_stream_flushed_event_by_event_decodes_whole(coding: str) -> None:
    """What the relay collects from a compressed SSE answer: flushed pieces, concatenated."""
    events = stream_events("m", 1, 6, tools=False, usage=True)
    coder = StackedEncoder([coding])
    raw = b"".join(coder.compress(event) for event in events) + coder.finish()
    assert decode_body(raw, coding) == b"".join(events)


def test_gzip_members_and_raw_deflate() -> None:
    assert decode_body(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip") == b"abcd"
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decode_body(raw.compress(ANSWER) + raw.flush(), "deflate") == ANSWER


def test_a_cut_off_gzip_body_decodes_as_far_as_it_goes() -> None:
    data = bytes(range(256)) * 64
    body = gzip.compress(data)
    partial = decode_body(body[: len(body) // 2], "gzip")
    assert data.startswith(partial)


@pytest.mark.parametrize(
    ("header", "body"),
    [
        ("compress", ANSWER),  # a real coding nobody sends any more
        ("snappy", ANSWER),
        ("gzip", ANSWER),  # not gzip at all
        ("br", b"\xff" * 64),
        ("zstd", b"\x28\xb5\x2f\xfd" + b"\xff" * 32),
        ("deflate", b"\xff" * 64),
        ("gzip, br", encoded(["br", "gzip"], ANSWER)),  # the stack in the wrong order
    ],
)
def test_unknown_or_corrupt_bodies_are_a_decode_error(header: str, body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_body(body, header)


def bomb(codings: list[str], size: int) -> bytes:
    """``size`` zero bytes, coded piece by piece (the test itself never holds them)."""
    coder = StackedEncoder(codings)
    piece = bytes(MIB)
    return b"".join(coder.compress(piece) for _ in range(size // MIB)) + coder.finish()


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """64 MiB of zeros in each coding (a few hundred bytes to 64 KiB each)."""
    return {coding: bomb([coding], 64 * MIB) for coding in sorted(ENCODERS)}


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_a_decompression_bomb_stops_at_the_bound(bombs: dict[str, bytes], coding: str) -> None:
    limit = MIB
    body = bombs[coding]
    assert len(body) < limit  # small on the wire
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="larger than"):
            decode_body(body, coding, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The decoded 64 MiB never existed: Python-side memory stayed near the 1 MiB bound.
    assert peak < 4 * limit
    # Just under the bound decodes whole.
    small = bomb([coding], limit)
    assert decode_body(small, coding, limit) == bytes(limit)


def test_a_stacked_bomb_stops_at_the_bound() -> None:
    with pytest.raises(DecodeError, match="larger than"):
        decode_body(bomb(["gzip", "br"], 16 * MIB), "gzip, br", MIB)


def test_the_default_bound_holds_a_long_answer() -> None:
    events = stream_events("gpt-4o", 1, 16_000, tools=False, usage=True)  # ~16k tokens
    raw = b"".join(events)
    assert len(raw) < MAX_DECODED_BYTES
    assert decode_body(encoded(["gzip"], raw), "gzip") == raw


@given(
    data=st.binary(max_size=4096),
    codings=st.lists(st.sampled_from(sorted(ENCODERS)), max_size=3),
)
def test_decoding_undoes_any_stack_of_codings(data: bytes, codings: list[str]) -> None:
    assert decode_body(encoded(codings, data), ", ".join(codings)) == data
