"""Token counts of a chat request as providers bill it (OpenAI's chat format, tiktoken).

3 tokens a message + role + content, +1 and the name for ``name``, +3 reply priming (OpenAI
cookbook). Array content: text parts counted, images by a documented estimate per detail level,
audio by a documented guess, a PDF by its pages (``documents``: a ``file`` part carrying its
bytes, or the part an adapter made of it) and a file the request only points at by a guess.
Tool calls: name + JSON arguments + 3. Tool and schema definitions: compact JSON plus framing,
an upper estimate of the provider's private rendering.
``message_key`` is the content hash a caller can cache per-message counts under.

Every text is measured by a ``Measure``: the exact one is the tokenizer's count; ``upper_bound``
and ``lower_bound`` measure from the UTF-8 length alone, in constant time for a long text and
with no BPE (whose cost is superlinear on a long run of one character). The rules around the
measure are the same, so a request's bounds enclose its exact count: a token is 1 to
``longest_token_bytes`` bytes of the text, counted as the tokenizer's ``byte_bounds`` say (an
encoding that normalises text first reads more bytes than were sent where NFKC lengthens it).
Any JSON shape is counted, never refused: a value in
an unexpected place (a number for a role, a string for ``tool_calls``) counts as its compact
JSON text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from proxy.context.documents import PAGES, document_pages
from proxy.context.tokens import Bytes, Tokenizer
from proxy.defaults import PDF_PAGE_TOKENS

# OpenAI's chat format: <|start|>{role}<|message|>{content}<|end|> costs 3 tokens a message,
# a name 1 more, and every reply is primed with 3 (OpenAI cookbook, "How to count tokens").
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 3
# Tool and schema definitions are rendered by the provider in a private format; we count the
# compact JSON (an upper estimate: quotes and braces cost more than the rendering) plus framing.
TOOLS_BASE = 12
TOKENS_PER_TOOL = 8
RESPONSE_FORMAT_BASE = 8
# Images cost 85 tokens at low detail; high/auto depend on the size we do not know: we assume a
# 1024x1024 image (4 tiles x 170 + 85).
IMAGE_TOKENS: dict[str, int] = {"low": 85, "high": 765, "auto": 765}
AUDIO_PART_TOKENS = 200  # a documented guess; audio input is billed separately by duration
# A file the request only points at (a file id, a URL): its bytes are not here to count; the
# pipeline also holds room back for it (proxy/pipeline/unseen.py, adr/0143).
FILE_PART_TOKENS = 1_000

# How a count was made: exactly, or bounded from the UTF-8 length without encoding.
EXACT, UPPER_BOUND, LOWER_BOUND = "exact", "upper_bound", "lower_bound"
COUNTINGS: tuple[str, ...] = (EXACT, UPPER_BOUND, LOWER_BOUND)

Measure = Callable[[str], int]  # the tokens of one text (or a bound on them)
# Longer non-ASCII texts are bounded from their length, not encoded (see ``utf8_bytes``).
MEASURED_CHARS = 64 * 1024
MAX_UTF8_BYTES_PER_CHAR = 4


def utf8_bytes(text: str) -> tuple[int, int]:
    """At least and at most how many UTF-8 bytes ``text`` is (equal unless it is long).

    ASCII costs nothing (``isascii`` is O(1)). A long non-ASCII text is bounded from its length
    instead of encoded (16 MB took 30-50 ms): every character is 1 to 4 bytes.
    """
    if text.isascii():
        return len(text), len(text)
    if len(text) <= MEASURED_CHARS:
        size = len(text.encode("utf-8", "surrogatepass"))
        return size, size
    return len(text), MAX_UTF8_BYTES_PER_CHAR * len(text)


def upper_bound(text: str) -> int:
    """At least the tokens of ``text`` in any BPE encoding: every token is at least one byte."""
    return utf8_bytes(text)[1]


def measure(tokenizer: Tokenizer, encoding: str, counting: str = EXACT) -> Measure:
    """The measure of ``counting`` for ``encoding``: exact tokens, or a bound from the bytes."""
    if counting == UPPER_BOUND:
        bounds = tokenizer.byte_bounds(encoding)
        return upper_bound if bounds is utf8_bytes else lambda text: bounds(text)[1]
    if counting == LOWER_BOUND:
        longest, bounds = tokenizer.longest_token_bytes(encoding), tokenizer.byte_bounds(encoding)
        return lambda text: -(-bounds(text)[0] // longest)  # ceil: at most `longest` a token
    if counting != EXACT:
        raise ValueError(f"unknown counting {counting!r}; expected one of {COUNTINGS}")
    return tokenizer.counter(encoding)


class ByteTally:
    """The upper-bound measure, also adding up the bytes it saw at least and at most: one walk
    over a request then gives both bounds (``lower_of``). ``bounds``: the tokenizer's
    ``byte_bounds`` of the encoding (by default a text's UTF-8 bytes)."""

    __slots__ = ("bounds", "least", "most")

    def __init__(self, bounds: Bytes = utf8_bytes) -> None:
        self.bounds = bounds
        self.least = self.most = 0

    def __call__(self, text: str) -> int:
        if text.isascii():  # most texts: ASCII is its own length in every encoding (tokens.py)
            size = len(text)
            self.least += size
            self.most += size
            return size
        least, most = self.bounds(text)
        self.least += least
        self.most += most
        return most

    def lower_of(self, upper: int, longest: int) -> int:
        """The lower bound of what was measured as ``upper`` since the last ``reset``: the same
        fixed costs, and the texts as ``ceil(least / longest)`` tokens."""
        return upper - self.most + -(-self.least // longest)

    def reset(self) -> None:
        """Start a new item."""
        self.least = self.most = 0


def walk_size(body: Mapping[str, Any]) -> int:
    """How many items counting ``body`` visits one by one (messages, content parts, tool calls,
    tools); everything below them is encoded in one call. O(messages)."""
    messages = body.get("messages")
    size = 0
    if isinstance(messages, list):
        size += len(messages)
        for message in messages:
            if isinstance(message, Mapping):
                for key in ("content", "tool_calls"):
                    value = message.get(key)
                    if isinstance(value, list):
                        size += len(value)
    for key in ("tools", "functions"):
        value = body.get(key)
        if isinstance(value, list):
            size += len(value)
    return size


# Salts the key of a message with a file part: such messages were counted as a flat guess before
# PDFs were counted by their pages (adr/0143), and a cached count outlives a release; the page
# price is part of it so that a changed price never reads a count made at the old one.
FILE_KEY_SALT = b"\x00pdf-pages-%d" % PDF_PAGE_TOKENS


def message_key(message: Mapping[str, Any], encoding: str) -> str:
    """A stable content hash of one message for ``encoding`` (for the caller's count cache)."""
    raw = orjson.dumps(message, option=orjson.OPT_SORT_KEYS) + encoding.encode()
    if b'"type":"file"' in raw:
        raw += FILE_KEY_SALT
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def as_message(message: Any) -> Mapping[str, Any]:
    """Accept dict messages and objects with ``role``/``content`` attributes (the seed's)."""
    if isinstance(message, Mapping):
        return message
    return {"role": getattr(message, "role", ""), "content": getattr(message, "content", "")}


def json_text(value: Any) -> str:
    """Compact JSON of ``value`` (what tool and schema definitions are counted as)."""
    return orjson.dumps(value).decode()


def text_of(value: Any) -> str:
    """A field's text: a string as is, ``None`` as nothing, anything else as its JSON."""
    if isinstance(value, str):
        return value
    return "" if value is None else json_text(value)


def count_message(message: Mapping[str, Any], size: Measure) -> int:
    """Tokens of one chat message as billed: overhead, role, content, name, tool calls."""
    role, content = message.get("role"), message.get("content")
    if len(message) == 2 and type(role) is str and type(content) is str:  # most messages
        return TOKENS_PER_MESSAGE + size(role) + size(content)
    total = TOKENS_PER_MESSAGE + size(text_of(role))
    total += count_content(content, size)
    name = message.get("name")
    if name:
        total += TOKENS_PER_NAME + size(text_of(name))
    tool_call_id = message.get("tool_call_id")
    if tool_call_id:
        total += size(text_of(tool_call_id))
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        for call in tool_calls:
            function = call.get("function") if isinstance(call, Mapping) else call
            total += TOKENS_PER_TOOL_CALL + count_function_call(function, size)
    elif tool_calls:
        total += TOKENS_PER_TOOL_CALL + size(json_text(tool_calls))
    function_call = message.get("function_call")
    if function_call:
        total += TOKENS_PER_TOOL_CALL + count_function_call(function_call, size)
    return total


def count_function_call(call: Any, size: Measure) -> int:
    """Tokens of a function name and its JSON arguments (any other shape: its JSON)."""
    if not isinstance(call, Mapping):
        return size(text_of(call))
    return size(text_of(call.get("name"))) + size(text_of(call.get("arguments")))


def count_content(content: Any, size: Measure) -> int:
    """Tokens of string or array content; images and other parts by documented estimates."""
    if content is None:
        return 0
    if isinstance(content, str):
        return size(content)
    if not isinstance(content, Sequence):
        return size(json_text(content))
    total = 0
    for part in content:
        if isinstance(part, str):
            total += size(part)
            continue
        if not isinstance(part, Mapping):  # malformed, refused upstream: counted as its JSON
            total += size(json_text(part))
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "refusal"):
            total += size(str(part.get(kind if kind == "refusal" else "text")))
        elif kind == "image_url":
            image = part.get("image_url")
            detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
            total += IMAGE_TOKENS.get(str(detail), IMAGE_TOKENS["auto"])
        elif kind == "input_audio":
            total += AUDIO_PART_TOKENS
        elif kind == PAGES:
            total += PDF_PAGE_TOKENS * pages_of(part.get("pages"))
        elif kind == "file":
            total += file_tokens(part.get("file"))
        else:
            total += size(json_text(part))
    return total


def pages_of(value: object) -> int:
    """A billed pages part's count (an adapter wrote it; anything else counts as one page)."""
    return value if type(value) is int and value > 0 else 1


def file_tokens(file: object) -> int:
    """A chat ``file`` part's tokens: a document carried as ``file_data`` by its pages, one
    only pointed at (``file_id``) by the guess."""
    data = file.get("file_data") if isinstance(file, Mapping) else None
    if isinstance(data, str):
        return PDF_PAGE_TOKENS * document_pages(data)
    return FILE_PART_TOKENS


def count_definitions(body: Mapping[str, Any], size: Measure) -> int:
    """Tokens of ``tools``, ``functions`` and a ``response_format`` schema."""
    total = 0
    for key in ("tools", "functions"):
        entries = body.get(key)
        if isinstance(entries, list):
            if entries:
                total += TOOLS_BASE + sum(TOKENS_PER_TOOL + size(json_text(e)) for e in entries)
        elif entries:  # not a list: the upstream refuses it, but it still costs its text
            total += TOOLS_BASE + TOKENS_PER_TOOL + size(json_text(entries))
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping):
        if response_format.get("type") != "text":
            schema = response_format.get("json_schema", response_format)
            total += RESPONSE_FORMAT_BASE + size(json_text(schema))
    elif response_format is not None:
        total += RESPONSE_FORMAT_BASE + size(json_text(response_format))
    return total
