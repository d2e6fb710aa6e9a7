"""tiktoken behind the engine's ``Tokenizer`` port (``proxy/context/tokens.py``).

Loading an encoding reads its BPE file (~0.3 s the first time), so the engine never does it: the
composition root builds the process's tokenizer once (``tiktoken_tokenizer``, which first points
tiktoken at litellm's bundled files, ``proxy/bundled_data.py``) and hands it to the engine.
Counts use ``encode_ordinary``: text that looks like a special token counts as plain text.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

import tiktoken
import tiktoken.model

from proxy.bundled_data import use_bundled_data
from proxy.context.tokens import FALLBACK_ENCODING, O200K, STORED_ENCODINGS, Count


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
    """The engine's ``Tokenizer`` over tiktoken; each encoding loads once, on first use."""

    def __init__(self) -> None:
        self._counters: dict[str, Count] = {}
        self._longest: dict[str, int] = {}

    def encoding(self, name: str) -> tiktoken.Encoding:
        """The tiktoken encoding ``name`` (tiktoken keeps one per process)."""
        return tiktoken.get_encoding(name)

    def encoding_for_model(self, model: str) -> str:
        """The encoding ``model`` uses; cl100k_base for models tiktoken does not know."""
        return encoding_name_for_model(model)

    def counter(self, encoding: str) -> Count:
        """Exact tokens of a text in ``encoding`` (one function per encoding)."""
        count = self._counters.get(encoding)
        if count is None:
            encode = self.encoding(encoding).encode_ordinary
            count = self._counters[encoding] = lambda text: len(encode(text))
        return count

    def longest_token_bytes(self, encoding: str) -> int:
        """The most bytes one token of ``encoding`` stands for (128 for o200k and cl100k)."""
        longest = self._longest.get(encoding)
        if longest is None:
            longest = self._longest[encoding] = longest_token(self.encoding(encoding))
        return longest

    def warm(self, encodings: Iterable[str] = STORED_ENCODINGS) -> None:
        """Pay first-use costs now (file reads, tables), not in a request."""
        for name in encodings:
            self.counter(name)("warm up")
            self.longest_token_bytes(name)


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
    return TiktokenTokenizer()


def count_tokens(text: str, encoding: str = O200K) -> int:
    """Exact tokens of ``text`` in ``encoding`` with the process's tokenizer."""
    return tiktoken_tokenizer().counter(encoding)(text)


def count_all(text: str) -> dict[str, int]:
    """``text`` counted in every stored encoding (what a memory keeps from write time)."""
    return {name: count_tokens(text, name) for name in STORED_ENCODINGS}
