"""Reading a document a step at a time (``read_pages``, adr/0152) ends with the count the
one-shot read makes, whatever the step: decoding in pieces is binascii on the whole, scanning in
windows is one search of the whole, inflating in steps is one call."""

from __future__ import annotations

import base64
import binascii
import zlib
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context import documents
from proxy.context.documents import (
    NOT_BASE64,
    PAGE_NAME,
    TYPE,
    counted,
    decoding,
    document_pages,
    finish,
    read_pages,
    types,
)
from tests.context.test_documents import HOSTILE, SPELLINGS
from tests.fakes.pdfs import b64, pdf

STEPS = [1, 3, 64, 100, 4096]


def whole_decode(text: str) -> bytes | None:
    """The one-shot decode the pieces must equal: binascii on the whole text, else the
    alphabet in whole groups."""
    try:
        return binascii.a2b_base64(text)
    except (binascii.Error, ValueError):
        pass
    kept = text.encode("ascii", "ignore").translate(None, NOT_BASE64)
    return binascii.a2b_base64(kept[: len(kept) - len(kept) % 4])


def pieces(text: str, step: int) -> bytes | None:
    out = finish(decoding(text, 0, len(text), step))
    return None if out is None else bytes(out)


WHITESPACE_RUNS = [
    b"%PDF-1.7\n" + b"<< /Type /Page >> " * 30 + b"/Type" + b" " * 300 + b"/Page ",
    b"%PDF-1.7\n/Type" + b"\n" * 200 + b"/Pages /Type" + b"\r" * 5_000 + b"/ObjStm\nstream\n",
    b"%PDF-1.7\n/Type" + b"\x00" * 57 + b"/Page",  # ends just past a window's span
    b"%PDF-1.7\n" + b" " * 1_000 + b"/Type /Page",
    # "/Type" across a window's end (at 64), then a run past the window's span.
    b"%PDF-1.7\n" + b" " * 53 + b"/Type" + b" " * 100 + b"/Page /Type /Page ",
]
DOCUMENTS = [
    *(pdf(pages, object_streams=streams) for pages in (1, 3, 50) for streams in (False, True)),
    *(pdf(5, spelling=spelling) for spelling in SPELLINGS),
    pdf(137, object_streams=True, fanout=2, per_stream=1),
    pdf(3, object_streams=True, first_page_xref=True),
    pdf(3, object_streams=True, compress_objects=False),
    pdf(40, object_streams=True)[:9_000],  # cut in its object streams
    *HOSTILE,
    *WHITESPACE_RUNS,
]
TEXTS = [
    "",
    "!!!!",
    "abc",
    "ab==cd==",
    "Q",
    "\u00e9\u00e9\u00e9\u00e9",
    "data:application/pdf;base64,",
    "data:application/pdf,%25PDF-1.4",
    "JVBERi0xLjQK" * 1_000 + "=" + b64(pdf(5)),
    "YQ=" + b64(pdf(3)),  # padding mid-group, skipped
    "YQ" + "=" * 3_000 + b64(pdf(3)),  # padding ending the data
    "YWJj=" + b64(pdf(3)),  # padding after a whole group, skipped
    b64(pdf(3)) + "\u00e9",  # not ASCII past the end of the data
    b64(pdf(3))[:-1],  # a partial group at the end
    base64.encodebytes(pdf(12, object_streams=True)).decode(),  # 76 a line
    b64(pdf(12)).replace("A", "A \n", 40),
]


@pytest.mark.parametrize("data", DOCUMENTS, ids=range(len(DOCUMENTS)))
@pytest.mark.parametrize("step", STEPS)
def test_a_document_counts_the_same_whatever_the_step(data: bytes, step: int) -> None:
    text = b64(data)
    assert finish(read_pages(text, step)) == document_pages(text)
    assert finish(read_pages("data:application/pdf;base64," + text, step)) == document_pages(text)


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
@pytest.mark.parametrize("step", STEPS)
def test_any_text_decodes_and_counts_the_same_whatever_the_step(text: str, step: int) -> None:
    assert pieces(text, step) == whole_decode(text)
    assert finish(read_pages(text, step)) == document_pages(text)


@given(st.text(alphabet="AQgw/+=Ya0 \n!\u00e9", max_size=40), st.integers(1, 9))
def test_pieces_decode_as_binascii_decodes_the_whole(text: str, step: int) -> None:
    assert pieces(text, step) == whole_decode(text)


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ("AAAQ====AAAA", 8),  # whole groups then "====" end a piece: skipped, not the end
        ("AAAQ====AAAA", 4),
        ("AAAQAB==AAAA", 8),  # padding inside a group: the end
        ("A" + "=" * 30 + "BCD", 4),
    ],
)
def test_padding_after_a_whole_group_at_a_piece_end(text: str, step: int) -> None:
    assert pieces(text, step) == whole_decode(text)


def test_a_run_of_padding_is_not_carried(monkeypatch: pytest.MonkeyPatch) -> None:
    # "=" after a group's first character is skipped by binascii: kept in the carry, a run of
    # them grew it a piece a step, each step copying it (16 MB: seconds, ~100 ms a step).
    sizes: list[int] = []
    real = binascii.a2b_base64
    decoder = SimpleNamespace(
        a2b_base64=lambda data, **strict: sizes.append(len(data)) or real(data, **strict),
        Error=binascii.Error,
    )
    monkeypatch.setattr(documents, "binascii", decoder)
    text = "A" + "=" * 100_000 + "BCD"
    assert pieces(text, 4096) == whole_decode(text)
    assert max(sizes) <= 4096 + 3


@pytest.mark.parametrize("data", [*WHITESPACE_RUNS, pdf(30)], ids=range(len(WHITESPACE_RUNS) + 1))
@pytest.mark.parametrize("step", [1, 64, 65, 300])
def test_windows_match_what_one_search_matches(data: bytes, step: int) -> None:
    # (A match across a whitespace run is matched from the run's end: what it ends and is
    # of, not where it starts, is what the count reads.)
    found = [(match.end(), match[1]) for match in types(data, step) if match is not None]
    assert found == [(match.end(), match[1]) for match in TYPE.finditer(data)]
    assert finish(counted(data, 0, step)) == data.count(PAGE_NAME)


def test_a_whitespace_run_is_searched_a_window_at_a_time() -> None:
    # A "/Type" followed by 1 MB of whitespace: the run's end is found in ~16 windows, with a
    # pause after each, not by one search to its end.
    data = b"%PDF-1.7\n/Type" + b" " * (1 << 20) + b"/Page"
    pauses = sum(match is None for match in types(data, 1 << 16))
    assert pauses >= 16
    assert [m.end() for m in types(data, 1 << 16) if m] == [m.end() for m in TYPE.finditer(data)]


def test_a_bomb_inflates_a_step_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # One 64 KiB piece of a bomb inflates to ~64 MiB: asked for at most a step out, each call
    # stays a step's work.
    outs: list[int] = []
    real = zlib.decompressobj

    class Inflater:
        def __init__(self) -> None:
            self.real = real()

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self.real.decompress(data, max_length)
            outs.append(len(out))
            return out

        def __getattr__(self, name: str) -> object:
            return getattr(self.real, name)

    bomb = zlib.compress(b"/Type /Page " * 2_000_000)
    data = b"%PDF-1.7\n<< /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + bomb
    monkeypatch.setattr(
        documents, "zlib", SimpleNamespace(decompressobj=Inflater, error=zlib.error)
    )
    steps = read_pages(b64(data), 1 << 16)
    assert finish(steps) == document_pages(b64(data))
    assert outs
    assert max(outs) <= 1 << 16


def test_a_long_document_pauses_between_pieces() -> None:
    text = b64(pdf(120, image_bytes=10_000))  # ~1.6 MB of base64
    pauses = sum(1 for _ in read_pages(text, 1 << 16))
    assert pauses >= len(text) >> 16


def test_the_pieces_are_not_one_decode_of_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # binascii holds the GIL for a call: no call decodes more than a step of base64.
    sizes: list[int] = []
    real = binascii.a2b_base64
    decoder = SimpleNamespace(
        a2b_base64=lambda data, **strict: sizes.append(len(data)) or real(data, **strict),
        Error=binascii.Error,
    )
    monkeypatch.setattr(documents, "binascii", decoder)
    text = b64(pdf(50, image_bytes=5_000))
    assert finish(read_pages(text, 4096)) == 50
    assert max(sizes) <= 4096 + 3  # a step, and what was left of a group before it
