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

Reading is resumable (adr/0152): ``read_pages`` pauses after every ``step`` of work (base64
decoded, bytes scanned, bytes inflated) and ends with the same count whatever the step, so the
edge can run it a slice at a time between other requests, or stop it when time is up. Until a
document is read, its billed part holds the estimate from its size (``pending``).
"""

from __future__ import annotations

import binascii
import re
import zlib
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from proxy.defaults import (
    PDF_BYTES_PER_PAGE,
    PDF_INFLATE_BYTES,
    PDF_INFLATE_RATIO,
    PDF_OBJECT_STREAMS,
    PDF_PAGE_MARKS,
    PDF_READ_STEP,
    PDF_SCAN_CHARS,
)

T = TypeVar("T")
# Work that pauses (yields ``None``) between bounded pieces and returns its result at the end.
Steps = Generator[None, None, T]
Buffer = bytes | bytearray

# A billed content part holding a read document's pages (``{"type": PAGES, "pages": n}``): the
# adapters read a document once per request and the billing counts this part, however often.
PAGES = "document_pages"

# PDF whitespace, and what ends a name (whitespace or a delimiter): ``/Page`` then one of these
# is the name /Page, not /Pages or /PageLabels.
_WS = rb"[\x00\t\n\f\r ]"
_END = rb"(?=[\x00\t\n\f\r ()<>\[\]{}/%]|\Z)"
# A page object's type, or an object stream's: one pass over the bytes finds both.
TYPE = re.compile(rb"/Type" + _WS + rb"*/(Page|ObjStm)" + _END)
# What follows a "/Type" and its whitespace: a match of ``TYPE`` whose whitespace was seen apart.
TYPE_END = re.compile(rb"/(Page|ObjStm)" + _END)
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
ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
NOT_BASE64 = bytes(set(range(256)) - set(ALPHABET))
NOT_BASE64_OR_PAD = bytes(set(range(256)) - set(ALPHABET + b"="))
WHITESPACE = b"\x00\t\n\f\r "
NOT_WHITESPACE = re.compile(rb"[^\x00\t\n\f\r ]")
PAGE_NAME = b"/Page"
# A window's search for page and object stream types runs this far past it: a match starting in
# it ends within, but for one whose whitespace fills the span (``types``). Also the least window.
TYPE_SPAN = 64


@dataclass(frozen=True, slots=True)
class Document:
    """A document whose bytes a request carries (``data``: base64 or a ``data:`` URL), and its
    billed pages part, which holds the estimate from its size until the edge writes the pages
    read into it. (The part is the request's own copy: filling it in place costs nothing per
    message, where building the billed body anew walks every one.)"""

    data: str
    part: dict[str, object]


def pdf_pages(pdf: bytes, inflate: int = PDF_INFLATE_BYTES) -> int | None:
    """The page objects of a whole PDF's bytes; ``None`` when the scan cannot vouch it saw them
    all (not a PDF, no page found, an object stream it could not read within the bounds)."""
    pages, complete = scan(pdf, inflate)
    return pages if complete else None


def scan(pdf: Buffer, inflate: int = PDF_INFLATE_BYTES) -> tuple[int, bool]:
    """The page objects found in ``pdf``, and whether they are all there are (module notes)."""
    return finish(scanning(pdf, inflate, len(pdf) + 1))


def finish(steps: Steps[T]) -> T:
    """What resumable work returns, run to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(T, done.value)


def scanning(pdf: Buffer, inflate: int, step: int) -> Steps[tuple[int, bool]]:
    """``scan``, pausing after every ``step`` bytes or so of work."""
    if HEADER not in pdf[:HEADER_SPAN]:
        return 0, False
    marks = Marks()
    pages, streams = yield from marks.finding(pdf, step)
    if streams is None:
        return pages, False
    # Inflating costs per byte out, not in: a bound of the document's own size keeps a request
    # of many small zip bombs linear in its bytes (each inflating to the whole bound: 1,500 in a
    # 16 MB body held the loop ~96 s).
    bound = min(inflate, PDF_INFLATE_RATIO * len(pdf))
    inside, complete = yield from object_streams(pdf, streams, bound, marks, step)
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

    def find(self, data: Buffer) -> tuple[int, list[int] | None]:
        """The page objects in ``data``, and where its object streams' types are (``None``:
        more than ``PDF_OBJECT_STREAMS``, not read)."""
        return finish(self.finding(data, len(data) + 1))

    def finding(self, data: Buffer, step: int) -> Steps[tuple[int, list[int] | None]]:
        """``find``, pausing after every ``step`` bytes or so."""
        pages = 0
        streams: list[int] = []
        if self.left <= 0:
            return (yield from counted(data, 0, step)), streams
        for match in types(data, step):
            if match is None:
                yield
                continue
            if match.group(1) != OBJSTM:
                pages += 1
            elif len(streams) == PDF_OBJECT_STREAMS:
                return pages, None
            else:
                streams.append(match.end())
            self.left -= 1
            if self.left == 0:
                return pages + (yield from counted(data, match.end(), step)), streams
        return pages, streams


def types(data: Buffer, step: int) -> Generator[re.Match[bytes] | None, None, None]:
    """The matches of ``TYPE.finditer(data)``, window by window (``None`` after each one).

    A window's matches are those starting in it: the search runs ``TYPE_SPAN`` past it and
    takes a match that ended there with the byte after it seen, so it is the match a search of
    the whole would make. Only a match whose whitespace fills the span could end further
    (hostile: real PDFs put a space or two): it is matched once the whitespace is seen to end.
    """
    size, at, step = len(data), 0, max(step, TYPE_SPAN)
    while at < size:
        end = min(size, at + step)
        stop = min(size, end + TYPE_SPAN)
        last = at
        for match in TYPE.finditer(data, at, stop):
            if match.start() >= end or (match.end() >= stop and stop < size):
                break
            yield match
            last = match.end()
        at = max(end, last)
        # The last "/Type" starting in the window, which may run past its end ("/T|ype").
        start = data.rfind(b"/Type", last, end + len(b"/Type") - 1)
        blank = max(end, start + len(b"/Type"))
        if stop < size and not data[blank : stop - 8].translate(None, WHITESPACE):
            # No match starts in whitespace: the search goes on where it ends, and a "/Type"
            # followed by whitespace up to there is matched on its own, by what follows the
            # run (matched from the "/Type", the run would be scanned again in one go).
            run = yield from whitespace_end(data, blank, step)
            if start >= 0 and not data[start + 5 : blank].translate(None, WHITESPACE):
                across = TYPE_END.match(data, run, min(size, run + 8))
                if across is not None:
                    yield across
                    run = max(run, across.end())
            at = max(at, run)
        yield None


def whitespace_end(data: Buffer, at: int, step: int) -> Steps[int]:
    """Where the whitespace from ``at`` ends, searched a window at a time."""
    size = len(data)
    while at < size:
        found = NOT_WHITESPACE.search(data, at, min(size, at + step))
        if found is not None:
            return found.start()
        at += step
        yield
    return size


def counted(data: Buffer, at: int, step: int) -> Steps[int]:
    """``data.count(PAGE_NAME, at)``, a window at a time (windows overlap by a name less a
    byte, so a name across two is counted once, in the second)."""
    total, size, step = 0, len(data), max(step, TYPE_SPAN)
    while True:
        end = min(size, at + step)
        total += data.count(PAGE_NAME, at, end)
        if end == size:
            return total
        at = end - len(PAGE_NAME) + 1
        yield


def object_streams(
    pdf: Buffer, streams: list[int], inflate: int, marks: Marks, step: int
) -> Steps[tuple[int, bool]]:
    """Page objects inside the compressed object streams whose types end at ``streams``, and
    whether every one was read (one that could not be, within the bounds, leaves the pages
    unknown). Inflates at most ``step`` bytes between pauses."""
    pages = 0
    done = 0  # where the last stream read ended: every dictionary and stream is read once
    left = inflate
    view = memoryview(pdf)  # pieces are sliced, not copied
    for at in streams:
        if at < done:
            continue  # a second /Type inside one dictionary, or inside the stream read last
        yield
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
        if bytes(filters.group(1)).replace(b" ", b"") not in FLATE:
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
                # At most ``step`` out of a call (what is not read stays in its tail, read
                # again from ``done``): a piece of a bomb inflates to the bound in one.
                parts.append(inflater.decompress(piece, min(left, step)))
                left -= len(parts[-1])
                done += len(piece) - len(inflater.unconsumed_tail)
                yield
        except zlib.error:
            return pages, False
        if not inflater.eof:
            return pages, False  # cut short by the bound, or by the end of the bytes
        done -= len(inflater.unused_data)
        # (No object stream is ever inside one.)
        pages += (yield from marks.finding(b"".join(parts), step))[0]
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


def decoding(data: str, start: int, end: int, step: int) -> Steps[Buffer | None]:
    """The bytes of the base64 in ``data[start:end]``, ignoring what is not base64 (``None``:
    none are), ``step`` characters at a time."""
    if data.isascii() or (yield from ascii_only(data, start, end, step)):
        whole = yield from padded(data, start, end, step)
        if whole is not None:
            return whole
    # Non-ASCII, or a cut in the middle left a partial group: the alphabet only, and whole
    # groups of it.
    return (yield from alphabet_only(data, start, end, step))


def ascii_only(data: str, start: int, end: int, step: int) -> Steps[bool]:
    """Whether ``data[start:end]`` is ASCII (``data`` is not: it may be elsewhere)."""
    for at in range(start, end, step):
        if not data[at : min(end, at + step)].isascii():
            return False
        yield
    return True


def padded(data: str, start: int, end: int, step: int) -> Steps[bytearray | None]:
    """What ``binascii.a2b_base64`` makes of ASCII ``data[start:end]`` (``None``: it raises),
    a piece at a time: it skips what is not base64 and stops at padding that ends a group.

    Each piece is decoded up to its last whole group of base64 characters (the rest opens the
    next piece): there binascii's state is the same whatever follows (an "=" after a whole
    group is skipped), so the pieces decode to what the whole does. Padding that ended the data
    inside a piece shows as fewer bytes out than its groups make: nothing after is read.
    """
    out = bytearray()
    carry = b""
    for at in range(start, end, step):
        text = data[at : min(end, at + step)]
        if not carry:  # most pieces are whole groups of base64 alone: one pass decodes them
            try:
                decoded = binascii.a2b_base64(text, strict_mode=True)
            except binascii.Error:
                pass
            else:
                out += decoded
                # Padding ends the data only inside a group (whole groups make 3 bytes each):
                # "=" after a whole group is skipped, as binascii does on the whole (strict mode
                # takes "AAAA====" in Python 3.11).
                if len(decoded) % 3:
                    return out  # it ended with padding
                yield
                continue
        piece = carry + text.encode("ascii").translate(None, NOT_BASE64_OR_PAD)
        chars = len(piece) - piece.count(b"=")
        cut = len(piece)
        for _ in range(chars % 4):  # back over the characters past the last whole group
            cut = len(piece[:cut].rstrip(b"=")) - 1
        decoded = binascii.a2b_base64(piece[:cut])
        out += decoded
        if len(decoded) < (chars - chars % 4) // 4 * 3:
            return out
        carry = piece[cut:]
        if chars % 4 == 1:
            # One character of a group: binascii skips any "=" after it (padding needs two),
            # so they are dropped, not carried (a run of them grew the carry a piece a step).
            carry = carry.replace(b"=", b"")
        yield
    if carry:
        try:
            out += binascii.a2b_base64(carry)
        except binascii.Error:
            return None
    return out


def alphabet_only(data: str, start: int, end: int, step: int) -> Steps[bytearray]:
    """The base64 alphabet's characters in ``data[start:end]``, in whole groups, decoded."""
    out = bytearray()
    carry = b""
    for at in range(start, end, step):
        text = data[at : min(end, at + step)].encode("ascii", "ignore")
        piece = carry + text.translate(None, NOT_BASE64)
        cut = len(piece) - len(piece) % 4
        out += binascii.a2b_base64(piece[:cut])
        carry = piece[cut:]
        yield
    return out


def fallback_pages(size: int) -> int:
    """Pages estimated from a document's byte size: one every ``PDF_BYTES_PER_PAGE``."""
    return max(1, -(-size // PDF_BYTES_PER_PAGE))


def estimated_pages(data: str) -> int:
    """The pages of a document sent as ``data`` before it is read: from its size."""
    start, is_base64 = base64_payload(data)
    chars = len(data) - start
    return fallback_pages(chars * 3 // 4 if is_base64 else chars)


def document_pages(data: str) -> int:
    """The pages to bill for a document sent as base64 or a ``data:`` URL (module notes)."""
    return finish(read_pages(data, len(data) + 1))


def read_pages(data: str, step: int = PDF_READ_STEP) -> Steps[int]:
    """``document_pages``, pausing after every ``step`` characters or bytes of work."""
    start, is_base64 = base64_payload(data)
    chars = len(data) - start
    size = chars * 3 // 4  # its bytes, about: padding and line breaks aside
    if not is_base64:
        return fallback_pages(chars)
    scanned = min(chars, PDF_SCAN_CHARS)
    pdf = yield from decoding(data, start, start + scanned, step)
    pages, complete = (yield from scanning(pdf, PDF_INFLATE_BYTES, step)) if pdf else (0, False)
    if scanned < chars:  # past the bound: the pages found so far, as dense over the rest
        pages = -(-pages * chars // scanned)
    elif complete:
        return pages
    return max(pages, fallback_pages(size))


def pending(data: str, found: list[Document]) -> dict[str, object]:
    """The billed part of a document sent as ``data`` (base64 or a ``data:`` URL): its pages
    as estimated from its size; ``found`` gets the document, whose pages are read later."""
    part: dict[str, object] = {"type": PAGES, "pages": estimated_pages(data)}
    if base64_payload(data)[1]:  # (one that is not base64 is never read: that is its count)
        found.append(Document(data, part))
    return part


def file_part(part: Mapping[str, object], found: list[Document]) -> Mapping[str, object]:
    """A chat ``file`` part as billed: its pages part, pending, if it carries its bytes
    (``file_data``), else as it is (a file id: the billing's guess). Never read here: billed
    as sent, the part would be read whole, at once, by the billing."""
    file = part.get("file")
    data = file.get("file_data") if isinstance(file, Mapping) else None
    return pending(data, found) if isinstance(data, str) else part


def read_files(
    messages: Sequence[Mapping[str, object]], found: list[Document]
) -> tuple[Sequence[Mapping[str, object]], bool]:
    """Chat ``messages`` with every ``file`` part that carries its bytes (``file_data``) as its
    pages part, pending (``messages`` itself when none does), and whether a ``file`` part is
    left that only points at a file (a file id): the budget holds room back for that one."""
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
            billed = file_part(part, found)
            if billed is part:
                unseen = True
                continue
            if parts is None:
                parts = list(content)
            parts[at] = billed
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
