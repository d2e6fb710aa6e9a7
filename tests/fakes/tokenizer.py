"""A tokenizer with no files behind it: one token per character (the engine's port)."""

from __future__ import annotations

from proxy.context.billing import utf8_bytes
from proxy.context.tokens import FALLBACK_ENCODING, Bytes, Count, Tokenizer

MAX_UTF8_BYTES = 4  # a character is 1 to 4 UTF-8 bytes, so the port's bounds hold


class CharTokenizer:
    """Counts characters; every model uses ``FALLBACK_ENCODING``. Notes what it counted."""

    def __init__(self) -> None:
        self.counted: list[str] = []

    def encoding_for_model(self, model: str) -> str:
        """One encoding for every model."""
        return FALLBACK_ENCODING

    def counter(self, encoding: str) -> Count:
        """Characters of a text, noting the text."""

        def count(text: str) -> int:
            self.counted.append(text)
            return len(text)

        return count

    def byte_bounds(self, encoding: str) -> Bytes:
        """A text's UTF-8 bytes: at least its characters."""
        return utf8_bytes

    def longest_token_bytes(self, encoding: str) -> int:
        """The most bytes one character takes."""
        return MAX_UTF8_BYTES


class SpyTokenizer:
    """Another tokenizer's counts, noting every text counted."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.counted: list[str] = []

    def encoding_for_model(self, model: str) -> str:
        """The inner tokenizer's encoding."""
        return self.inner.encoding_for_model(model)

    def counter(self, encoding: str) -> Count:
        """The inner count, noting the text."""
        inner = self.inner.counter(encoding)

        def count(text: str) -> int:
            self.counted.append(text)
            return inner(text)

        return count

    def byte_bounds(self, encoding: str) -> Bytes:
        """The inner tokenizer's bounds."""
        return self.inner.byte_bounds(encoding)

    def longest_token_bytes(self, encoding: str) -> int:
        """The inner tokenizer's figure."""
        return self.inner.longest_token_bytes(encoding)
