"""tiktoken behind the engine's ``Tokenizer`` port (``proxy/context/tokens.py``).

Loading an encoding reads its BPE file (~0.3 s the first time), so the engine never does it: the
composition root builds the process's tokenizer once (``tiktoken_tokenizer``, which first points
tiktoken at litellm's bundled files, ``proxy/bundled_data.py``) and hands it to the engine.
Counts use ``encode_ordinary``: text that looks like a special token counts as plain text.

Claude models (a bare name starting ``claude``) are counted in the ``claude`` encoding: the
tokenizer Anthropic published, loaded from litellm's copy as a tiktoken encoding, with a safety
margin (``proxy/claude_tokenizer.py``). Without that file they fall back to cl100k_base.

What a memory keeps (``count_all``, at write time): its count in every stored encoding, and in
``claude`` when that tokenizer is there, so no request counts a memory again, whatever API or
model it comes for. Invariant: ``tokens[name] == counter(name)(content)`` for every name a
record holds; for ``claude`` that is the margin applied to the raw count of the NFKC text,
capped at the text's UTF-8 bytes as sent or as normalised, whichever is more (``claude_count``,
adr/0137): the very function a request would call, so the stored figure is exact, not an
approximation of it. A change of the margin (ADR 0109) must rename the ``claude`` encoding, or
counts kept under the old margin would be read as new ones. (Counts kept before adr/0137 are
lower for text NFKC lengthens; a Claude count only steers packing, the block's lines are
counted again as rendered, so they cost no overrun, only a worse pick.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import tiktoken
import tiktoken.model

from proxy.bundled_data import claude_tokenizer_file, use_bundled_data
from proxy.claude_tokenizer import (
    CLAUDE,
    NFKC_SHRINK,
    load_claude_encoding,
    normalized,
    read_bytes,
    with_margin,
)
from proxy.context.billing import utf8_bytes
from proxy.context.tokens import FALLBACK_ENCODING, O200K, STORED_ENCODINGS, Bytes, Count

CLAUDE_PREFIX = "claude"


@functools.lru_cache(maxsize=1024)
def encoding_name_for_model(model: str) -> str:
    """The encoding name for ``model``; unknown models fall back to cl100k_base.

    Provider prefixes (``openai/gpt-4o``, ``azure/gpt-4o``) are stripped first. A table lookup
    in tiktoken's code: no file is read.
    """
    name = model.rsplit("/", 1)[-1]
    try:
        return str(tiktoken.model.encoding_name_for_model(name))
    except KeyError:
        return FALLBACK_ENCODING


class TiktokenTokenizer:
    """The engine's ``Tokenizer`` over tiktoken; each encoding loads once, on first use.

    ``claude_file``: the Claude tokenizer to count Claude models with (``None``: they are
    counted in cl100k_base).
    """

    def __init__(self, claude_file: Path | None = None) -> None:
        self._counters: dict[str, Count] = {}
        self._longest: dict[str, int] = {}
        self._claude_file = claude_file
        self._claude: tiktoken.Encoding | None = None

    def encoding(self, name: str) -> tiktoken.Encoding:
        """The tiktoken encoding ``name`` (tiktoken keeps one per process; this, Claude's)."""
        if name != CLAUDE:
            return tiktoken.get_encoding(name)
        if self._claude is None:
            if self._claude_file is None:
                raise ValueError("no Claude tokenizer file")
            self._claude = load_claude_encoding(self._claude_file)
        return self._claude

    def encoding_for_model(self, model: str) -> str:
        """The encoding ``model`` uses; cl100k_base for models neither tiktoken nor the Claude
        tokenizer knows."""
        if self._claude_file is not None and is_claude(model):
            return CLAUDE
        return encoding_name_for_model(model)

    def counter(self, encoding: str) -> Count:
        """Tokens of a text in ``encoding`` (one function per encoding): exact, or for
        ``claude`` the estimate with its margin."""
        count = self._counters.get(encoding)
        if count is None:
            encode = self.encoding(encoding).encode_ordinary
            if encoding == CLAUDE:
                count = self._counters[encoding] = claude_count(encode)
            else:
                count = self._counters[encoding] = lambda text: len(encode(text))
        return count

    def byte_bounds(self, encoding: str) -> Bytes:
        """A text's bytes at least and at most: for ``claude`` the most is raised to the bytes
        NFKC writes it as, where that is more (``read_bytes``)."""
        return read_bytes if encoding == CLAUDE else utf8_bytes

    def longest_token_bytes(self, encoding: str) -> int:
        """The most bytes one token of ``encoding`` stands for (128 for o200k and cl100k).

        For ``claude``, in the text as sent: its longest token times ``NFKC_SHRINK``.
        """
        longest = self._longest.get(encoding)
        if longest is None:
            longest = longest_token(self.encoding(encoding))
            if encoding == CLAUDE:
                longest *= NFKC_SHRINK
            self._longest[encoding] = longest
        return longest

    def kept_encodings(self) -> tuple[str, ...]:
        """The encodings a memory's count is kept in: the stored ones, and ``claude`` when its
        tokenizer file is there."""
        return (*STORED_ENCODINGS, CLAUDE) if self._claude_file is not None else STORED_ENCODINGS

    def warm(self, encodings: Iterable[str] | None = None) -> None:
        """Pay first-use costs now (file reads, tables), not in a request; by default for the
        stored encodings and Claude's."""
        if encodings is None:
            encodings = self.kept_encodings()
        for name in encodings:
            self.counter(name)("warm up")
            self.longest_token_bytes(name)


@functools.lru_cache(maxsize=1024)
def is_claude(model: str) -> bool:
    """Whether ``model`` (provider prefixes stripped) is a Claude model."""
    return model.rsplit("/", 1)[-1].lower().startswith(CLAUDE_PREFIX)


def claude_count(encode: Callable[[str], list[int]]) -> Count:
    """The ``claude`` count over its encoding: NFKC first, then the margin."""

    def count(text: str) -> int:
        if text.isascii():
            return with_margin(len(encode(text)), len(text))
        seen = normalized(text)
        size = len(text.encode("utf-8", "surrogatepass"))
        if seen is not text:  # NFKC changed it: it may read longer than it was sent
            size = max(size, len(seen.encode("utf-8", "surrogatepass")))
        return with_margin(len(encode(seen)), size)

    return count


def longest_token(encoding: tiktoken.Encoding) -> int:
    """The longest token of ``encoding`` in bytes."""
    ranks = getattr(encoding, "_mergeable_ranks", None)  # ~5 ms; the public walk takes ~100 ms
    if isinstance(ranks, dict) and ranks:
        return max(len(token) for token in ranks)
    longest = 1
    for rank in range(encoding.n_vocab):
        try:
            longest = max(longest, len(encoding.decode_single_token_bytes(rank)))
        except KeyError:  # a gap in the ranks
            continue
    return longest


@functools.cache
def tiktoken_tokenizer() -> TiktokenTokenizer:
    """The process's tokenizer, with tiktoken pointed at litellm's BPE files (no download)."""
    use_bundled_data(os.environ)
    return TiktokenTokenizer(claude_tokenizer_file())


def count_tokens(text: str, encoding: str = O200K) -> int:
    """Exact tokens of ``text`` in ``encoding`` with the process's tokenizer."""
    return tiktoken_tokenizer().counter(encoding)(text)


def count_all(text: str) -> dict[str, int]:
    """``text`` counted in every encoding a memory keeps from write time (module notes)."""
    tokenizer = tiktoken_tokenizer()
    return {name: tokenizer.counter(name)(text) for name in tokenizer.kept_encodings()}


def kept_encodings() -> tuple[str, ...]:
    """The encodings ``count_all`` counts in, with the process's tokenizer."""
    return tiktoken_tokenizer().kept_encodings()
