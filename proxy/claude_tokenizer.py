"""Claude's tokenizer as a tiktoken encoding: the one Anthropic published, read from litellm.

Anthropic published one tokenizer (the Claude 1/2 models': byte-level BPE, 65,000 tokens, NFKC
normalisation, GPT-2's pre-tokenizer pattern); litellm's wheel ships it as a Hugging Face JSON
file (``proxy/bundled_data.py``). Its token ids follow its merge order, so its vocabulary is a
tiktoken rank table as it stands: ``load_claude_encoding`` builds that encoding, which counts
exactly as the Hugging Face tokenizer does (``tests/test_claude_tokenizer.py`` checks every turn
of a conversation set and random Unicode) at tiktoken's speed (~7x faster, same as o200k).

Claude 3 and later tokenize differently and Anthropic publishes no tokenizer for them: its SDK
calls this one "a very rough approximation" for them and points to the ``count_tokens`` endpoint
and ``usage``. What is known: a published comparison on fixed prompts found Claude 3.5 Sonnet
produces ~16% (English prose), ~21% (math) and ~30% (Python code) more tokens than GPT-4o's
o200k_base; on LoCoMo's 2,198 dev memories this tokenizer counts 4.9% more than o200k_base
(``bench/claude_tokens.py``). So its raw count undercounts a real Claude model by an estimated
~11-24%. The margin scales every count by 5/4, more than that gap: overcounting only makes
the memory budget smaller, undercounting could push a request past the context window. The
budget's 5% safety buffer of the window comes on top. This is an estimate, not a measurement
against Anthropic's counts (memproxy's tests cannot call Anthropic); ADR 0109.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import tiktoken

from proxy.context.billing import MEASURED_CHARS, utf8_bytes

CLAUDE = "claude"  # the encoding name Claude models are counted in
# GPT-2's pattern: what Hugging Face's ByteLevel pre-tokenizer splits text with (use_regex).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# Every count is the raw one times MARGIN_NUMERATOR / MARGIN_DENOMINATOR (module docstring).
MARGIN_NUMERATOR, MARGIN_DENOMINATOR = 5, 4
# NFKC can shrink a character up to 4 UTF-8 bytes to 1 (U+1D400 -> "A"): a token stands for at
# most this many bytes of the text as sent, not as normalised.
NFKC_SHRINK = 4
# ... and lengthen one character to 33 bytes (U+FDFA, 3 bytes, is 18 characters and 15 tokens),
# the most of any (checked against every code point of the running Python's Unicode data): a
# long text's bytes as normalised are bounded from its length alone at this many a character.
NFKC_MOST_BYTES_PER_CHAR = 33


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character each byte is written as."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    alphabet = {chr(b): b for b in printable}
    extra = 0
    for byte in range(256):
        if byte not in printable:
            alphabet[chr(256 + extra)] = byte
            extra += 1
    return alphabet


def load_claude_encoding(path: Path) -> tiktoken.Encoding:
    """The tiktoken encoding of a byte-level BPE tokenizer file (Hugging Face JSON).

    Special tokens (``<EOT>``...) are left out: their text counts as plain text, as every
    count in memproxy does. Raises ``ValueError`` for a file of another kind.
    """
    with path.open("rb") as handle:
        data = json.load(handle)
    model = data.get("model") or {}
    if model.get("type") != "BPE" or (data.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        raise ValueError(f"{path}: not a byte-level BPE tokenizer")
    special = {token["content"] for token in data.get("added_tokens") or ()}
    alphabet = byte_level_alphabet()
    ranks: dict[bytes, int] = {}
    for token, rank in model["vocab"].items():
        if token not in special:
            ranks[bytes(alphabet[char] for char in token)] = rank
    return tiktoken.Encoding(CLAUDE, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})


def normalized(text: str) -> str:
    """``text`` as the tokenizer sees it (NFKC); ASCII is its own NFKC form."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def with_margin(tokens: int, most_bytes: int) -> int:
    """A raw count scaled by the margin, never above ``most_bytes``: the text's UTF-8 bytes as
    sent or as normalised, whichever is more (``read_bytes``), which the budget's byte bounds
    take as the most a count can be. The raw count is at most the normalised bytes (a token is
    at least a byte), so the cap never takes a count below the tokenizer's own."""
    return min(-(-tokens * MARGIN_NUMERATOR // MARGIN_DENOMINATOR), most_bytes)


def read_bytes(text: str) -> tuple[int, int]:
    """Bounds on ``text``'s count from its length (``billing.utf8_bytes``), the most raised to
    the bytes of its NFKC form where NFKC lengthens it: at least its UTF-8 bytes, at most the
    larger of those and its normalised bytes. ASCII and text already in NFKC (most) cost what
    ``utf8_bytes`` does, plus Python's quick check; a long text is bounded from its length."""
    if text.isascii():
        return len(text), len(text)
    if len(text) > MEASURED_CHARS:
        least, most = utf8_bytes(text)
        return least, max(most, NFKC_MOST_BYTES_PER_CHAR * len(text))
    size = len(text.encode("utf-8", "surrogatepass"))
    seen = unicodedata.normalize("NFKC", text)
    if seen is text:  # the quick check found it normalised already
        return size, size
    return size, max(size, len(seen.encode("utf-8", "surrogatepass")))
