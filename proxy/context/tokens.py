"""The tokenizer port: what the engine asks of a tokenizer, and the encodings memories keep.

The engine counts tokens exactly (the budget is model-aware) but never loads a tokenizer: the
caller hands it a ``Tokenizer`` (``proxy/tokenizer.py`` adapts tiktoken, whose encodings load
from files). A ``Count`` gives the exact tokens of one text in one encoding, with special-token
text counted as plain text (a user can type ``<|endoftext|>``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

O200K = "o200k_base"
CL100K = "cl100k_base"
# Every stored memory carries its token count in each of these, computed once at write time.
STORED_ENCODINGS: tuple[str, ...] = (O200K, CL100K)
FALLBACK_ENCODING = CL100K  # the encoding of a model the tokenizer does not know

Count = Callable[[str], int]  # exact tokens of one text in one encoding
# At least and at most how many bytes one text stands for, from its length (billing.utf8_bytes)
Bytes = Callable[[str], tuple[int, int]]


class Tokenizer(Protocol):
    """Exact token counts in named BPE encodings."""

    def encoding_for_model(self, model: str) -> str:
        """The encoding ``model`` uses (provider prefixes stripped); ``FALLBACK_ENCODING`` for
        models it does not know."""
        ...

    def counter(self, encoding: str) -> Count:
        """The exact count of ``encoding`` (the same function for every call with one name)."""
        ...

    def byte_bounds(self, encoding: str) -> Bytes:
        """Bounds on a text's count in ``encoding`` without encoding it: at least and at most
        how many bytes it stands for, its tokens ``ceil(least / longest_token_bytes)`` to
        ``most``. Its UTF-8 bytes for an encoding that reads text as sent; one that normalises
        it first (Claude's NFKC writes U+FDFA's 3 bytes as 33) raises the most to match. An
        ASCII text's bounds are its length in every encoding (callers may skip the call)."""
        ...

    def longest_token_bytes(self, encoding: str) -> int:
        """The most UTF-8 bytes one token of ``encoding`` stands for: a text of n bytes is at
        least ``ceil(n / longest)`` tokens."""
        ...
