"""Counting a PDF's pages from its bytes (``proxy/context/documents.py``, adr/0143): valid
documents of every layout count exactly, anything else falls back to its size, and hostile bytes
neither raise nor cost more than the bounds allow."""

from __future__ import annotations

import base64
import zlib
from types import SimpleNamespace

import pytest

from proxy.context import documents
from proxy.context.documents import (
    PAGES,
    Document,
    document_pages,
    fallback_pages,
    pdf_pages,
    pending,
    read_files,
    unseen_files,
)
from proxy.defaults import PDF_BYTES_PER_PAGE, PDF_INFLATE_BYTES, PDF_INFLATE_RATIO
from tests.fakes.pdfs import b64, pdf

SPELLINGS = [b"/Type /Page", b"/Type/Page", b"/Type\n/Page", b"/Type\r\n  /Page"]


@pytest.mark.parametrize("pages", [1, 3, 50])
@pytest.mark.parametrize("object_streams", [False, True], ids=["classic", "object streams"])
@pytest.mark.parametrize("spelling", SPELLINGS, ids=repr)
def test_a_valid_pdf_counts_its_pages(pages: int, object_streams: bool, spelling: bytes) -> None:
    data = pdf(pages, object_streams=object_streams, spelling=spelling)
    assert pdf_pages(data) == pages
    assert document_pages(b64(data)) == pages
    assert document_pages("data:application/pdf;base64," + b64(data)) == pages


@pytest.mark.parametrize(
    ("pages", "fanout", "per_stream"),
    [(50, 3, 7), (137, 2, 1), (600, 10, 100), (1_000, 25, 200)],
)
def test_deep_trees_and_many_object_streams(pages: int, fanout: int, per_stream: int) -> None:
    # Inner /Pages nodes are no pages; one object stream a dictionary is still every page.
    for object_streams in (False, True):
        data = pdf(pages, object_streams=object_streams, fanout=fanout, per_stream=per_stream)
        assert document_pages(b64(data)) == pages


def test_base64_with_line_breaks_counts_the_same() -> None:
    data = pdf(12, object_streams=True)
    assert document_pages(base64.encodebytes(data).decode()) == 12  # 76 a line, MIME style
    assert document_pages(b64(data).replace("A", "A \n", 40)) == 12


def test_an_object_stream_past_the_inflate_bound_is_unknown() -> None:
    data = pdf(50, object_streams=True, per_stream=1_000)
    assert pdf_pages(data) == 50
    assert pdf_pages(data, inflate=100) is None


def test_what_the_scan_cannot_vouch_for_is_estimated_from_its_size() -> None:
    whole = pdf(40, object_streams=True)
    cut = whole[: len(whole) // 2]  # a truncated download: its last object stream is cut
    assert pdf_pages(cut) is None
    assert document_pages(b64(cut)) == max(1, -(-len(cut) // PDF_BYTES_PER_PAGE))
    # Another filter on an object stream, or a predictor: not read, so the size decides.
    other = whole.replace(b"/ObjStm /N", b"/ObjStm /DecodeParms << /Predictor 12 >> /N", 1)
    assert pdf_pages(other) is None
    lzw = whole.replace(b"/FlateDecode", b"/LZWDecode")
    assert pdf_pages(lzw) is None
    assert document_pages(b64(lzw)) == fallback_pages(len(lzw))


def test_found_pages_win_over_a_smaller_size_estimate() -> None:
    # Tiny pages (40 in ~10 KB) and a stream that cannot be read: never fewer than were found.
    data = pdf(40) + b"9 0 obj << /Type /ObjStm /Filter /LZWDecode >>\nstream\nxx"
    assert pdf_pages(data) is None
    assert document_pages(b64(data)) == max(40, fallback_pages(len(data)))


def test_a_document_past_the_scan_is_estimated_from_its_whole_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = b64(pdf(30))
    monkeypatch.setattr(documents, "PDF_SCAN_CHARS", 4_000)
    seen: list[int] = []
    real = documents.decoding

    def decoding(text: str, start: int, end: int, step: int) -> documents.Steps[object]:
        seen.append(end - start)
        return real(text, start, end, step)

    monkeypatch.setattr(documents, "decoding", decoding)
    found = documents.scan(base64.b64decode(data[:4_000]))[0]
    assert 0 < found < 30
    # The pages found in the prefix, as dense over the rest, or the size estimate if more.
    assert document_pages(data) == max(
        -(-found * len(data) // 4_000), fallback_pages(len(data) * 3 // 4)
    )
    assert document_pages(data) >= 30
    assert seen == [4_000, 4_000]  # never more base64 decoded than the bound (two calls)


def test_page_names_past_the_bound_count_without_matching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Past the bound every "/Page" left counts as a page: an over-count with no regular
    # expression over them (the bound is lowered to keep the test small).
    monkeypatch.setattr(documents, "PDF_PAGE_MARKS", 100)
    flood = b"%PDF-1.7\n" + b"<< /Type /Page >> " * 100 + b"<< /Type /Pages >> " * 50
    assert pdf_pages(flood) == 150
    assert pdf_pages(pdf(30)) == 30  # under the bound: only page objects count


HOSTILE = [
    b"",
    b"%PDF-",
    b"%PDF-1.7\n",  # no page at all
    b"\x00" * 5_000,
    b"<<" * 100_000,  # deeply "nested", never closed
    b"%PDF-1.7\n" + b"/Type /ObjStm " * 2_000,  # more object streams than the bound
    b"%PDF-1.7\n" + b"<< /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + b"junk" * 100,
    b"%PDF-1.7\n<< /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + zlib.compress(b"\0" * 2**20),
    b"%PDF-1.7\n<< /Type /ObjStm >>\n" + b"x" * 10_000,  # no stream keyword near it
]


@pytest.mark.parametrize("data", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_bytes_never_raise_and_count_at_least_one_page(data: bytes) -> None:
    pages = pdf_pages(data)
    assert pages is None or pages >= 1
    assert document_pages(b64(data)) >= 1


def test_a_zip_bomb_inflates_no_further_than_the_bound() -> None:
    bomb = zlib.compress(b"/Type /Page " * 2_000_000)  # 24 MB of page names in ~50 KB
    data = b"%PDF-1.7\n<< /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + bomb
    assert pdf_pages(data, inflate=1 << 20) is None  # cut short at 1 MiB: unknown


@pytest.mark.parametrize(
    "text",
    [
        "",
        "!!!!",
        "abc",  # a partial group
        "ab==cd==",  # padding in the middle
        "Q",
        "\u00e9\u00e9\u00e9\u00e9",  # not ASCII
        "data:application/pdf;base64,",
        "data:application/pdf,%25PDF-1.4",  # a data URL that is not base64
        "data:" + "x" * 2_000,  # no comma where the header ends
        "JVBERi0xLjQK" * 1_000 + "=" + b64(pdf(5)),
    ],
)
def test_garbage_base64_never_raises(text: str) -> None:
    assert document_pages(text) >= 1


def test_16_mb_of_junk_is_estimated_from_its_size() -> None:
    junk = base64.b64encode(bytes(range(256)) * (16 * 4096)).decode()  # 16 MiB of bytes
    assert document_pages(junk) == fallback_pages(len(junk) * 3 // 4) >= (16 << 20) // 2048


def test_read_files_replaces_readable_files_and_keeps_the_rest() -> None:
    data = "data:application/pdf;base64," + b64(pdf(3))
    readable = {"type": "file", "file": {"file_data": data}}
    by_id = {"type": "file", "file": {"file_id": "file-1"}}
    text = {"type": "text", "text": "Sum up."}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [readable, by_id, text]},
    ]
    found: list[Document] = []
    billed, unseen = read_files(messages, found)
    assert billed[0] is messages[0]
    # Pending: the estimate from its size until the edge reads its pages into the same part.
    part = {"type": PAGES, "pages": fallback_pages(len(b64(pdf(3))) * 3 // 4)}
    assert billed[1]["content"] == [part, by_id, text]
    assert found == [Document(data, part)]
    assert found[0].part is billed[1]["content"][0]
    assert messages[1]["content"] == [readable, by_id, text]  # what is forwarded: untouched
    assert unseen
    assert unseen_files(billed)
    alone, unseen = read_files(messages[:1], [])
    assert alone is messages[:1] or alone == messages[:1]
    assert not unseen
    assert read_files([{"role": "user", "content": [readable]}], [])[1] is False


def test_a_document_that_is_not_base64_is_counted_at_once() -> None:
    found: list[Document] = []
    assert pending("data:application/pdf,%25PDF-1.4", found) == {"type": PAGES, "pages": 1}
    assert found == []  # nothing left to read: its size is its count
    assert pending(b64(pdf(3)), found)["pages"] == 1
    assert len(found) == 1


@pytest.mark.parametrize(
    "layout",
    [{"first_page_xref": True}, {"compress_objects": False}],
    ids=["linearized", "qdf"],
)
def test_an_object_streams_filter_is_read_from_its_own_dictionary(layout: dict[str, bool]) -> None:
    # The object before an object stream (a linearized file's first-page xref stream with a
    # predictor; a compressed content stream before an uncompressed object stream) has its
    # own filter: taken for the object stream's, the pages were unknown, then estimated.
    data = pdf(3, object_streams=True, **layout)
    assert pdf_pages(data) == 3
    assert document_pages(b64(data)) == 3


def test_an_object_stream_whose_filter_does_not_read_is_unknown() -> None:
    # Its first /Filter decides: one that does not read (an array never closed) leaves the
    # stream unread, not taken for uncompressed with its pages uncounted. (Matched once where
    # the key is: searched for a later match, "/Filter[" without "]" cost quadratic time.)
    hidden = zlib.compress(b"1 0 << /Type /Page >> 2 0 << /Type /Page >>")
    data = (
        pdf(1)
        + b"9 0 obj\n<< /Type /ObjStm /N 2 /First 10 /Filter [/FlateDecode"
        + b" /Filter[" * 50
        + b" >>\nstream\n"
        + hidden
        + b"\nendstream\nendobj\n"
    )
    assert pdf_pages(data) is None
    assert document_pages(b64(data)) == fallback_pages(len(data))


class FedInflater:
    """A ``zlib`` inflater that adds up the bytes it is fed (``fed``)."""

    fed = 0

    def __init__(self) -> None:
        self.real = zlib.decompressobj()

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        FedInflater.fed += len(data)
        return self.real.decompress(data, max_length)

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def test_each_object_stream_is_fed_no_further_than_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fed everything up to the inflate bound, zlib copied out the rest (the bytes after the
    # stream) for each small stream: work of streams x bound, not of the document's size.
    data = pdf(50, object_streams=True, per_stream=5) + b"%" + b"x" * (1 << 20) + b"\n"
    monkeypatch.setattr(FedInflater, "fed", 0)
    monkeypatch.setattr(
        documents, "zlib", SimpleNamespace(decompressobj=FedInflater, error=zlib.error)
    )
    assert pdf_pages(data) == 50
    assert FedInflater.fed <= len(data)


def test_a_small_document_inflates_no_more_than_its_ratio() -> None:
    # 20,000 page names inflate from ~1 KB: past PDF_INFLATE_RATIO times the document's size
    # (so a request of many small bombs inflates in proportion to its bytes), unknown.
    hidden = zlib.compress(b"<< /Type /Page >> " * 20_000, 9)
    data = (
        b"%PDF-1.7\n1 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode >>\nstream\n"
        + hidden
        + b"\nendstream\nendobj\n"
    )
    assert len(data) * PDF_INFLATE_RATIO < 18 * 20_000 < PDF_INFLATE_BYTES
    assert pdf_pages(data) is None
    assert document_pages(b64(data)) == fallback_pages(len(data))
    assert pdf_pages(pdf(600, object_streams=True)) == 600  # real ones inflate far less
