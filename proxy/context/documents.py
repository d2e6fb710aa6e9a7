"""What a document in a request costs: a PDF by its pages, read from its bytes (adr/0143).

Anthropic and OpenAI both put each page of a PDF into the model's context twice, as its
extracted text and as an image of the page, so a PDF costs per page (``PDF_PAGE_TOKENS``).
A document whose bytes the request carries (base64, or a ``data:`` URL) is read here; one it
only points at (a URL, a file id) is not, and the budget holds room back for it instead.

Counting pages: every page of a PDF is a page object, a dictionary saying ``/Type /Page`` (the
page tree's inner nodes say ``/Pages``). The count is of those, in the bytes and in the
document's compressed object streams (``/Type /ObjStm``, inflated). A page an incremental
update rewrote, or one no tree reaches, counts once more: an over-count only shrinks the memory
budget. The work is bounded whatever the bytes: at most ``PDF_SCAN_CHARS`` of base64 are
decoded, at most ``PDF_INFLATE_BYTES`` (and ``PDF_INFLATE_RATIO`` times the document's size)
inflated from at most ``PDF_OBJECT_STREAMS`` streams.
Where the scan cannot vouch that it saw every page object (not a PDF, not base64, a stream it
cannot inflate, a document past the scan), the pages are estimated from the byte size, one every
``PDF_BYTES_PER_PAGE`` bytes, or as many as were found if that is more.
"""

from __future__ import annotations

import binascii
import re
import zlib
from collections.abc import Mapping, Sequence

from proxy.defaults import (
    PDF_BYTES_PER_PAGE,
    PDF_INFLATE_BYTES,
    PDF_INFLATE_RATIO,
    PDF_OBJECT_STREAMS,
    PDF_PAGE_MARKS,
    PDF_SCAN_CHARS,
)

# A billed content part holding a read document's pages (``{"type": PAGES, "pages": n}``): the
# adapters read a document once per request and the billing counts this part, however often.
PAGES = "document_pages"

# PDF whitespace, and what ends a name (whitespace or a delimiter): ``/Page`` then one of these
# is the name /Page, not /Pages or /PageLabels.
_WS = rb"[\x00\t\n\f\r ]"
_END = rb"(?=[\x00\t\n\f\r ()<>\[\]{}/%]|\Z)"
# A page object's type, or an object stream's: one pass over the bytes finds both.
TYPE = re.compile(rb"/Type" + _WS + rb"*/(Page|ObjStm)" + _END)
OBJSTM = b"ObjStm"
FILTER = re.compile(rb"/Filter" + _WS + rb"*(\[[^\]]*\]|/[^\x00\t\n\f\r ()<>\[\]{}/%]+)")
STREAM = re.compile(rb"stream(?:\r\n|\n|\r)")
FLATE = (b"/FlateDecode", b"[/FlateDecode]")
# A PDF starts with "%PDF-"; readers accept junk before it within the first KiB.
HEADER = b"%PDF-"
HEADER_SPAN = 1024
# How far before an object stream's ``/Type`` its dictionary may start (the object before it
# ends there at the latest), and after it its data.
DICT_SPAN = 4096
# Deflate never grows data by more than ~5 bytes a 16 KiB block (stored blocks): a stream that
# inflates to ``n`` bytes is at most this many bytes longer, so its input is sliced to that.
DEFLATE_SLACK = 1 / 1024
# Input fed to an inflater at a time: at the end of its stream, zlib copies out what is left of
# what it was fed (``unused_data``). Fed the whole bound at once, every small stream copied up to
# 8 MiB: 999 tiny object streams in a 12 MB body held the loop ~1.8 s.
INFLATE_PIECE = 64 * 1024
DATA_URL_HEADER = 512  # "data:<mime>;base64," is far shorter
NOT_BASE64 = bytes(
    set(range(256)) - set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
)


def pdf_pages(pdf: bytes, inflate: int = PDF_INFLATE_BYTES) -> int | None:
    """The page objects of a whole PDF's bytes; ``None`` when the scan cannot vouch it saw them
    all (not a PDF, no page found, an object stream it could not read within the bounds)."""
    pages, complete = scan(pdf, inflate)
    return pages if complete else None


def scan(pdf: bytes, inflate: int = PDF_INFLATE_BYTES) -> tuple[int, bool]:
    """The page objects found in ``pdf``, and whether they are all there are (module notes)."""
    if HEADER not in pdf[:HEADER_SPAN]:
        return 0, False
    marks = Marks()
    pages, streams = marks.find(pdf)
    if streams is None:
        return pages, False
    # Inflating costs per byte out, not in: a bound of the document's own size keeps a request
    # of many small zip bombs linear in its bytes (each inflating to the whole bound: 1,500 in a
    # 16 MB body held the loop ~96 s).
    bound = min(inflate, PDF_INFLATE_RATIO * len(pdf))
    inside, complete = object_streams(pdf, streams, bound, marks)
    pages += inside
    return pages, complete and pages > 0


class Marks:
    """Finds page objects and object streams, at most ``PDF_PAGE_MARKS`` in all; past that,
    every "/Page" left counts as a page without matching (an over-count for the cost of
    ``bytes.count``). No document a provider takes comes close: Anthropic reads at most 600
    pages, OpenAI 32 MB a request."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = PDF_PAGE_MARKS

    def find(self, data: bytes) -> tuple[int, list[int] | None]:
        """The page objects in ``data``, and where its object streams' types are (``None``:
        more than ``PDF_OBJECT_STREAMS``, not read)."""
        pages = 0
        streams: list[int] = []
        if self.left <= 0:
            return data.count(b"/Page"), streams
        for match in TYPE.finditer(data):
            if match.group(1) != OBJSTM:
                pages += 1
            elif len(streams) == PDF_OBJECT_STREAMS:
                return pages, None
            else:
                streams.append(match.end())
            self.left -= 1
            if self.left == 0:
                return pages + data.count(b"/Page", match.end()), streams
        return pages, streams


def object_streams(pdf: bytes, streams: list[int], inflate: int, marks: Marks) -> tuple[int, bool]:
    """Page objects inside the compressed object streams whose types end at ``streams``, and
    whether every one was read (one that could not be, within the bounds, leaves the pages
    unknown)."""
    pages = 0
    done = 0  # where the last stream read ended: every dictionary and stream is read once
    left = inflate
    view = memoryview(pdf)  # pieces are sliced, not copied
    for at in streams:
        if at < done:
            continue  # a second /Type inside one dictionary, or inside the stream read last
        found = STREAM.search(pdf, at, at + DICT_SPAN)
        if found is None:
            return pages, False
        # The dictionary is the object's own: from the end of the object before it, whose
        # filter and parameters (a linearized file's xref stream, an image) are not its own.
        start = max(done, at - DICT_SPAN)
        before = pdf.rfind(b"endobj", start, at)
        dictionary = pdf[start if before < 0 else before + len(b"endobj") : found.start()]
        done = found.end()
        key = dictionary.find(b"/Filter")
        if key < 0:
            continue  # not compressed: its page objects are in the bytes, counted already
        # Matched where the key is, once: searched, a dictionary of "/Filter[" with no "]"
        # cost a scan to its end from each of them (quadratic; ~20 s for a 10 MB body).
        filters = FILTER.match(dictionary, key)
        if filters is None or b"/DecodeParms" in dictionary:
            return pages, False  # a filter that does not read, or a predictor: not read here
        if filters.group(1).replace(b" ", b"") not in FLATE:
            return pages, False  # another filter: not read here
        if left <= 0:
            return pages, False
        # A stream that inflates within ``left`` is never longer than ``end - done``.
        end = min(len(pdf), done + left + int(left * DEFLATE_SLACK) + 64)
        inflater = zlib.decompressobj()
        parts: list[bytes] = []
        try:
            while not inflater.eof and done < end and left > 0:
                piece = view[done : min(end, done + INFLATE_PIECE)]
                parts.append(inflater.decompress(piece, left))
                left -= len(parts[-1])
                done += len(piece) - len(inflater.unconsumed_tail)
        except zlib.error:
            return pages, False
        if not inflater.eof:
            return pages, False  # cut short by the bound, or by the end of the bytes
        done -= len(inflater.unused_data)
        pages += marks.find(b"".join(parts))[0]  # (no object stream is ever inside one)
    return pages, True


def base64_payload(data: str) -> tuple[int, bool]:
    """Where the base64 of ``data`` starts (after a ``data:...;base64,`` header), and whether
    it is base64 at all (a ``data:`` URL may carry its bytes percent-encoded)."""
    if not data.startswith("data:"):
        return 0, True
    comma = data.find(",", 0, DATA_URL_HEADER)
    if comma < 0:
        return 0, False
    return comma + 1, data[:comma].endswith(";base64")


def decode(text: str) -> bytes | None:
    """The bytes of base64 ``text``, ignoring what is not base64; ``None`` when none are."""
    try:
        return binascii.a2b_base64(text)
    except (binascii.Error, ValueError):
        pass
    # Whitespace, junk or a cut in the middle left a partial group: keep the alphabet only,
    # and whole groups of it.
    kept = text.encode("ascii", "ignore").translate(None, NOT_BASE64)
    kept = kept[: len(kept) - len(kept) % 4]
    try:
        return binascii.a2b_base64(kept)
    except binascii.Error:
        return None


def fallback_pages(size: int) -> int:
    """Pages estimated from a document's byte size: one every ``PDF_BYTES_PER_PAGE``."""
    return max(1, -(-size // PDF_BYTES_PER_PAGE))


def document_pages(data: str) -> int:
    """The pages to bill for a document sent as base64 or a ``data:`` URL (module notes)."""
    start, is_base64 = base64_payload(data)
    chars = len(data) - start
    size = chars * 3 // 4  # its bytes, about: padding and line breaks aside
    if not is_base64:
        return fallback_pages(chars)
    scanned = min(chars, PDF_SCAN_CHARS)
    # (Sliced only when it must be: a copy of 16 MB costs as much as scanning it.)
    pdf = decode(data if start == 0 and scanned == chars else data[start : start + scanned])
    pages, complete = scan(pdf) if pdf else (0, False)
    if scanned < chars:  # past the bound: the pages found so far, as dense over the rest
        pages = -(-pages * chars // scanned)
    elif complete:
        return pages
    return max(pages, fallback_pages(size))


def pages_part(data: str) -> dict[str, object]:
    """The billed part of a document sent as ``data`` (base64 or a ``data:`` URL)."""
    return {"type": PAGES, "pages": document_pages(data)}


def read_files(
    messages: Sequence[Mapping[str, object]],
) -> tuple[Sequence[Mapping[str, object]], bool]:
    """Chat ``messages`` with every ``file`` part that carries its bytes (``file_data``) as its
    pages part (``messages`` itself when none does), and whether a ``file`` part is left that
    only points at a file (a file id): the budget holds room back for that one."""
    out: list[Mapping[str, object]] | None = None
    unseen = False
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        parts: list[object] | None = None
        for at, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "file":
                continue
            file = part.get("file")
            data = file.get("file_data") if isinstance(file, Mapping) else None
            if not isinstance(data, str):
                unseen = True
                continue
            if parts is None:
                parts = list(content)
            parts[at] = pages_part(data)
        if parts is not None:
            if out is None:
                out = list(messages)
            out[index] = {**message, "content": parts}
    return (messages if out is None else out), unseen


def unseen_files(messages: Sequence[Mapping[str, object]]) -> bool:
    """Whether billed ``messages`` hold a ``file`` part, one memproxy could not read (a URL or
    a file id): the budget holds room back for it."""
    return any(
        isinstance(part, Mapping) and part.get("type") == "file"
        for message in messages
        for part in _parts(message.get("content"))
    )


def _parts(content: object) -> list[object]:
    return content if isinstance(content, list) else []
