"""Bulk memory files: reading imports (JSONL or a JSON array) and writing exports.

An import file holds memory objects as accepted by ``POST /v1/memories``, one per line (JSONL)
or in one JSON array; the format is told by the first non-blank character (``[`` = array).
Exported memory objects import back unchanged: the fields only an export carries (``object``,
``tokens``, derived at write; ``similarity``) are ignored, and ``retrieval_count`` is kept
(``ImportedMemory``: the API's memory plus that count, validated by the same model).
Records with their own ``id`` are upserts, so importing a file twice stores it once.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson

from proxy.context.records import MemoryRecord
from proxy.errors import RequestError
from proxy.memory.inputs import InputLimits, MemoryInput
from proxy.memory.parsing import parse_imported
from proxy.memory.service import memory_object

# Derived fields of an exported memory object, recomputed on import.
EXPORT_ONLY_FIELDS = ("object", "tokens", "similarity")


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record the import refused: where it is (line or array index) and why."""

    where: str
    message: str


def detect_array(stream: IO[bytes]) -> bool:
    """True if the (seekable or peekable) stream holds a JSON array rather than JSONL."""
    peek = stream.peek(64) if isinstance(stream, io.BufferedReader) else b""
    if not peek and stream.seekable():
        position = stream.tell()
        peek = stream.read(64)
        stream.seek(position)
    return peek.lstrip()[:1] == b"["


def raw_records(stream: IO[bytes]) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, decoded JSON value)`` for each record; undecodable ones as ``BadRecord``."""
    if detect_array(stream):
        try:
            items = orjson.loads(stream.read())
        except orjson.JSONDecodeError as exc:
            yield "file", BadRecord("file", f"not valid JSON: {exc}")
            return
        if not isinstance(items, list):
            yield "file", BadRecord("file", "a JSON file must hold an array of memories")
            return
        for index, item in enumerate(items):
            yield f"item {index}", item
        return
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            yield where, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            yield where, BadRecord(where, f"not valid JSON: {exc}")


def to_input(value: Any, *, max_content_chars: int) -> MemoryInput:
    """Validate one decoded record (an exported memory object is accepted as is)."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in EXPORT_ONLY_FIELDS}
    return parse_imported(value, InputLimits(max_content_chars))


def read_inputs(
    stream: IO[bytes], *, max_content_chars: int
) -> Iterator[tuple[str, MemoryInput | BadRecord]]:
    """Yield each record of an import file, validated, or the reason it was refused."""
    for where, value in raw_records(stream):
        if isinstance(value, BadRecord):
            yield where, value
            continue
        try:
            yield where, to_input(value, max_content_chars=max_content_chars)
        except RequestError as exc:
            yield where, BadRecord(where, exc.message)


def batches(items: Iterable[MemoryInput], size: int) -> Iterator[list[MemoryInput]]:
    """Group inputs into lists of at most ``size``; an id repeated in the file starts a new
    batch, so the later record wins, as it would one request at a time."""
    batch: list[MemoryInput] = []
    ids: set[str] = set()
    for item in items:
        if len(batch) >= size or (item.id is not None and item.id in ids):
            yield batch
            batch, ids = [], set()
        batch.append(item)
        if item.id is not None:
            ids.add(item.id)
    if batch:
        yield batch


def export_line(record: MemoryRecord) -> bytes:
    """One exported memory: the API's memory object, as a JSON line."""
    return orjson.dumps(memory_object(record)) + b"\n"
