"""Decoding ``Content-Encoding`` for the upstream bodies memproxy reads itself.

The relay passes compressed answers to the client byte for byte; only what memproxy parses
after the response (the assistant's answer for capture) is decoded, here. Supported codings:
``gzip`` (``x-gzip``), ``deflate`` (zlib-wrapped, or raw as some servers send it), ``br``,
``zstd`` and ``identity``, also stacked (``Content-Encoding: gzip, br`` was gzipped, then
brotli'd: decoded right to left).

Every decoder is driven with an output bound, so a small body that inflates to gigabytes (a
decompression bomb) costs at most ``limit`` bytes before it is refused.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable

import brotli
import zstandard

MIB = 1024 * 1024
# A streamed answer of 16k tokens is about 4 MB of SSE decoded; the bound only stops bombs.
MAX_DECODED_BYTES = 16 * MIB
# RFC 8878 section 3.1.1.1.2: HTTP zstd encoders keep the window at or below 8 MiB, so a frame
# asking for a larger one (and that much memory) is refused.
ZSTD_MAX_WINDOW = 8 * MIB
READ_SIZE = 64 * 1024


class DecodeError(ValueError):
    """The body cannot be decoded: unknown coding, corrupt data, or over the size bound."""


def _inflate(body: bytes, wbits: int, limit: int, *, members: bool) -> bytes:
    """zlib/gzip/raw deflate, at most ``limit`` bytes out; ``members``: gzip may concatenate."""
    decoder = zlib.decompressobj(wbits)
    out = bytearray()
    data = body
    while True:
        want = limit + 1 - len(out)  # never 0: zlib reads 0 as "no limit"
        chunk = decoder.decompress(data, want)
        out += chunk
        if len(out) > limit:
            raise DecodeError(f"decoded body is larger than {limit} bytes")
        if decoder.eof:
            data = decoder.unused_data
            if not (members and data):
                return bytes(out)
            decoder = zlib.decompressobj(wbits)
            continue
        data = decoder.unconsumed_tail
        if not data and len(chunk) < want:
            # Input used up before the end of the stream: a cut-off body, kept as far as it goes.
            return bytes(out)


def _gzip(body: bytes, limit: int) -> bytes:
    return _inflate(body, 16 + zlib.MAX_WBITS, limit, members=True)


def _deflate(body: bytes, limit: int) -> bytes:
    try:
        return _inflate(body, zlib.MAX_WBITS, limit, members=False)
    except zlib.error:
        # RFC 9110 says zlib-wrapped, but some servers send a raw deflate stream.
        return _inflate(body, -zlib.MAX_WBITS, limit, members=False)


def _brotli(body: bytes, limit: int) -> bytes:
    decoder = brotli.Decompressor()
    out = bytearray(decoder.process(body, output_buffer_limit=limit + 1))
    while len(out) <= limit and not decoder.is_finished() and not decoder.can_accept_more_data():
        out += decoder.process(b"", output_buffer_limit=limit + 1 - len(out))
    if len(out) > limit:
        raise DecodeError(f"decoded body is larger than {limit} bytes")
    return bytes(out)


def _zstd(body: bytes, limit: int) -> bytes:
    decoder = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    out = bytearray()
    with decoder.stream_reader(io.BytesIO(body), read_across_frames=True) as reader:
        while len(out) <= limit:
            chunk = reader.read(min(READ_SIZE, limit + 1 - len(out)))
            if not chunk:
                return bytes(out)
            out += chunk
    raise DecodeError(f"decoded body is larger than {limit} bytes")


DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def codings(content_encoding: str | bytes | None) -> list[str]:
    """The codings of a ``Content-Encoding`` value in the order they were applied."""
    if isinstance(content_encoding, bytes):
        content_encoding = content_encoding.decode("latin-1")
    names = (c.strip().lower() for c in (content_encoding or "").split(","))
    return [name for name in names if name and name != "identity"]


def is_identity(content_encoding: str | bytes | None) -> bool:
    """Whether a body with this ``Content-Encoding`` is plain bytes."""
    return not codings(content_encoding)


def decode_body(
    body: bytes, content_encoding: str | bytes | None, limit: int = MAX_DECODED_BYTES
) -> bytes:
    """``body`` with its ``Content-Encoding`` undone; raises ``DecodeError``."""
    for coding in reversed(codings(content_encoding)):
        decoder = DECODERS.get(coding)
        if decoder is None:
            raise DecodeError(f"unsupported content coding {coding!r}")
        try:
            body = decoder(body, limit)
        except (zlib.error, brotli.error, zstandard.ZstdError) as exc:
            raise DecodeError(f"corrupt {coding} body: {exc}") from exc
    return body
