"""Small valid PDFs written from scratch, for the page-count tests (no PDF library needed).

``pdf(pages)`` writes a PDF 1.4 file: catalog, a page tree (``fanout`` kids a node, so large
documents get inner ``/Pages`` nodes), one page and one content stream a page, a classic xref
table. ``object_streams=True`` writes PDF 1.5 instead, the way pdfTeX and Word save: every
dictionary object (catalog, tree nodes, pages) inside Flate-compressed object streams of
``per_stream`` objects, found through a compressed cross-reference stream; no ``/Type /Page``
is then readable in the file's bytes. Its ``first_page_xref`` starts the body with a
cross-reference stream with a predictor (as a linearized file's first-page section does), and
``compress_objects=False`` leaves the object streams uncompressed (as ``qpdf --qdf`` writes).
"""

from __future__ import annotations

import base64
import random
import struct
import zlib
from collections.abc import Iterable, Iterator

from proxy.context.documents import Document, document_pages


def pdf(
    pages: int,
    *,
    object_streams: bool = False,
    fanout: int = 10,
    per_stream: int = 100,
    spelling: bytes = b"/Type /Page",
    image_bytes: int = 0,
    first_page_xref: bool = False,
    compress_objects: bool = True,
) -> bytes:
    """A valid PDF of ``pages`` pages (module notes); ``spelling`` writes the page's type;
    ``image_bytes`` gives each page an image of that many incompressible bytes (a scan's size)."""
    noise = random.Random(pages)
    dictionaries: dict[int, bytes] = {}  # object number -> dictionary text
    streams: dict[int, bytes] = {}  # object number -> content stream data
    number = iter(range(1, 10**9))
    catalog, root = next(number), next(number)
    leaves: list[int] = []
    for index in range(pages):
        page, content = next(number), next(number)
        leaves.append(page)
        streams[content] = b"BT /F1 12 Tf 72 720 Td (Page %d) Tj ET" % (index + 1)
        dictionaries[page] = (
            spelling + b" /Parent %%PARENT%% /MediaBox [0 0 612 792] /Contents %d 0 R" % content
        )
        if image_bytes:
            image = next(number)
            streams[image] = noise.randbytes(image_bytes)
            dictionaries[page] += b" /Resources << /XObject << /Im0 %d 0 R >> >>" % image
    tree(dictionaries, root, leaves, fanout, number)
    dictionaries[catalog] = b"/Type /Catalog /Pages %d 0 R" % root
    if object_streams:
        return packed(
            dictionaries,
            streams,
            catalog,
            per_stream,
            number,
            first_page_xref=first_page_xref,
            compress_objects=compress_objects,
        )
    return classic(dictionaries, streams, catalog)


def tree(
    dictionaries: dict[int, bytes],
    root: int,
    leaves: list[int],
    fanout: int,
    number: Iterator[int],
) -> None:
    """The page tree over ``leaves``: inner nodes of at most ``fanout`` kids, under ``root``."""
    level = [(leaf, 1) for leaf in leaves]
    while len(level) > fanout:
        groups = [level[i : i + fanout] for i in range(0, len(level), fanout)]
        level = []
        for group in groups:
            node = next(number)
            node_page_count = sum(count for _, count in group)
            kids = b" ".join(b"%d 0 R" % kid for kid, _ in group)
            dictionaries[node] = b"/Type /Pages /Parent %%PARENT%% /Kids [%s] /Count %d" % (
                kids,
                node_page_count,
            )
            for kid, _ in group:
                dictionaries[kid] = dictionaries[kid].replace(b"%PARENT%", b"%d 0 R" % node)
            level.append((node, node_page_count))
    kids = b" ".join(b"%d 0 R" % kid for kid, _ in level)
    dictionaries[root] = b"/Type /Pages /Kids [%s] /Count %d" % (kids, len(leaves))
    for kid, _ in level:
        dictionaries[kid] = dictionaries[kid].replace(b"%PARENT%", b"%d 0 R" % root)


def stream_object(number: int, dictionary: bytes, data: bytes) -> bytes:
    """An indirect stream object."""
    head = b"%d 0 obj\n<< %s /Length %d >>\nstream\n" % (number, dictionary, len(data))
    return head + data + b"\nendstream\nendobj\n"


def classic(dictionaries: dict[int, bytes], streams: dict[int, bytes], catalog: int) -> bytes:
    """PDF 1.4: every object in the open, a classic xref table."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}
    for number in sorted({*dictionaries, *streams}):
        offsets[number] = len(out)
        if number in streams:
            out += stream_object(number, b"", streams[number])
        else:
            out += b"%d 0 obj\n<< %s >>\nendobj\n" % (number, dictionaries[number])
    size = max(offsets) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        size,
        catalog,
        xref,
    )
    return bytes(out)


def packed(
    dictionaries: dict[int, bytes],
    streams: dict[int, bytes],
    catalog: int,
    per_stream: int,
    number: Iterator[int],
    *,
    first_page_xref: bool = False,
    compress_objects: bool = True,
) -> bytes:
    """PDF 1.5: dictionaries in compressed object streams, a compressed xref stream."""
    out = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    entries: dict[int, tuple[int, int, int]] = {}  # number -> (type, field 2, field 3)
    if first_page_xref:  # its filter and predictor are its own, not the next objects'
        head = next(number)
        entries[head] = (1, len(out), 0)
        parms = b"/Type /XRef /Size 1 /W [1 4 2] /Filter /FlateDecode"
        parms += b" /DecodeParms << /Columns 7 /Predictor 12 >>"
        out += stream_object(head, parms, zlib.compress(bytes(8 * 4)))
    for content in sorted(streams):
        entries[content] = (1, len(out), 0)
        out += stream_object(content, b"/Filter /FlateDecode", zlib.compress(streams[content]))
    packed_numbers = sorted(dictionaries)
    for start in range(0, len(packed_numbers), per_stream):
        group = packed_numbers[start : start + per_stream]
        holder = next(number)
        bodies = [b"<< %s >>" % dictionaries[n] for n in group]
        header = b""
        offset = 0
        for index, (n, body) in enumerate(zip(group, bodies, strict=True)):
            header += b"%d %d " % (n, offset)
            offset += len(body) + 1
            entries[n] = (2, holder, index)
        data = header + b"\n" + b" ".join(bodies)
        first = len(header) + 1
        entries[holder] = (1, len(out), 0)
        dictionary = b"/Type /ObjStm /N %d /First %d" % (len(group), first)
        if compress_objects:
            dictionary += b" /Filter /FlateDecode"
            data = zlib.compress(data)
        out += stream_object(holder, dictionary, data)
    xref_number = next(number)
    entries[xref_number] = (1, len(out), 0)
    size = xref_number + 1
    rows = b"".join(
        struct.pack(">BIH", *entries.get(n, (0, 0, 65535 if n == 0 else 0))) for n in range(size)
    )
    dictionary = b"/Type /XRef /Size %d /W [1 4 2] /Root %d 0 R /Filter /FlateDecode" % (
        size,
        catalog,
    )
    xref = len(out)
    out += stream_object(xref_number, dictionary, zlib.compress(rows))
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def b64(data: bytes) -> str:
    """``data`` as base64 text (what the APIs carry)."""
    return base64.b64encode(data).decode()


def read_now(documents: Iterable[Document]) -> None:
    """Write each pending document's pages into its billed part at once (what the pipeline
    does a slice at a time, ``proxy/pipeline/pages.py``)."""
    for document in documents:
        document.part["pages"] = document_pages(document.data)
