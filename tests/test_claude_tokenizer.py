"""Claude's tokenizer as a tiktoken encoding: the same counts as the published tokenizer file,
the margin, and the byte bounds the budget relies on."""

from __future__ import annotations

import itertools
import random
import string
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.bundled_data import claude_tokenizer_file
from proxy.claude_tokenizer import (
    CLAUDE,
    NFKC_MOST_BYTES_PER_CHAR,
    NFKC_SHRINK,
    load_claude_encoding,
    normalized,
)
from proxy.context.billing import MEASURED_CHARS
from proxy.tokenizer import TiktokenTokenizer, tiktoken_tokenizer

tokenizers = pytest.importorskip("tokenizers")  # litellm's dependency: the reference reader


@pytest.fixture(scope="module")
def path() -> Path:
    found = claude_tokenizer_file()
    assert found is not None, "litellm's wheel ships anthropic_tokenizer.json"
    return found


@pytest.fixture(scope="module")
def reference(path: Path) -> object:
    return tokenizers.Tokenizer.from_file(str(path))


def sample_texts() -> list[str]:
    rnd = random.Random(15)
    words = ["memory", "Caroline", "said", "the", "LGBTQ", "support", "group", "yesterday!"]
    prose = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 60))) for _ in range(200)]
    ranges = [(32, 126), (0xA0, 0x2FFF), (0x4E00, 0x9FFF), (0x1F300, 0x1F6FF), (0x1D400, 0x1D4FF)]
    unicode = [
        "".join(chr(rnd.randint(*rnd.choice(ranges))) for _ in range(rnd.randint(1, 120)))
        for _ in range(500)
    ]
    edges = ["", " ", "  hello   world\n\n\tfoo ", "\ufb01ne \u337f \u00bd", "a" * 3000, " " * 2000]
    code = ["def f(x):\n    return {'k': [x, 2.5e-3]}  # ok\n", string.printable * 3]
    return prose + unicode + edges + code


def test_the_encoding_counts_as_the_published_tokenizer(path: Path, reference: object) -> None:
    encoding = load_claude_encoding(path)
    for text in sample_texts():
        expected = len(reference.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]
        assert len(encoding.encode_ordinary(normalized(text))) == expected, repr(text[:60])


def test_claude_models_are_counted_in_claude_with_the_margin() -> None:
    tokenizer = tiktoken_tokenizer()
    assert tokenizer.encoding_for_model("claude-sonnet-4-5") == CLAUDE
    assert tokenizer.encoding_for_model("anthropic/Claude-3-haiku-20240307") == CLAUDE
    assert tokenizer.encoding_for_model("gpt-4o") == "o200k_base"
    text = "Caroline went to the LGBTQ support group yesterday and felt accepted. " * 4
    raw = len(tokenizer.encoding(CLAUDE).encode_ordinary(text))
    assert tokenizer.counter(CLAUDE)(text) == -(-raw * 5 // 4)
    assert tokenizer.counter(CLAUDE)("") == 0


def test_without_the_file_claude_models_fall_back() -> None:
    assert TiktokenTokenizer(None).encoding_for_model("claude-sonnet-4-5") == "cl100k_base"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | st.text(alphabet="\ufdfa\u00bc\ufb2c\u337fa ", max_size=100))
def test_counts_stay_within_the_byte_bounds(text: str) -> None:
    tokenizer = tiktoken_tokenizer()
    count = tokenizer.counter(CLAUDE)(text)
    sent = len(text.encode("utf-8", "surrogatepass"))
    read = len(normalized(text).encode("utf-8", "surrogatepass"))
    assert tokenizer.byte_bounds(CLAUDE)(text) == (sent, max(sent, read))
    assert -(-sent // tokenizer.longest_token_bytes(CLAUDE)) <= count <= max(sent, read)


@pytest.mark.parametrize("size", [MEASURED_CHARS + 1, 3 * MEASURED_CHARS])
def test_a_long_text_is_bounded_from_its_length(size: int) -> None:
    text = ("\ufdfa" * size)[:size]
    least, most = tiktoken_tokenizer().byte_bounds(CLAUDE)(text)
    assert least <= len(text.encode())
    assert len(normalized(text).encode()) <= most


def test_no_character_lengthens_past_the_bound() -> None:
    # NFKC decomposes character by character and composing only shortens (checked below), so a
    # text's NFKC form is at most this many bytes a character of it.
    lengths = (
        len(unicodedata.normalize(form, chr(point)).encode("utf-8", "surrogatepass"))
        for point in range(sys.maxunicode + 1)
        for form in ("NFKD", "NFKC")
    )
    assert max(lengths) == NFKC_MOST_BYTES_PER_CHAR
    # Each canonical pair composes to no more bytes than it was (Hangul's algorithmic pairs
    # too: two 3-byte jamo, or a syllable and a jamo, make one 3-byte syllable).
    for point in range(sys.maxunicode + 1):
        mapping = unicodedata.decomposition(chr(point)).split()
        if len(mapping) == 2 and not mapping[0].startswith("<"):
            pair = "".join(chr(int(code, 16)) for code in mapping)
            assert len(chr(point).encode()) <= len(pair.encode()), hex(point)


def test_longest_token_allows_for_nfkc(path: Path) -> None:
    longest = max(len(token) for token in load_claude_encoding(path).token_byte_values())
    assert tiktoken_tokenizer().longest_token_bytes(CLAUDE) == longest * NFKC_SHRINK


def raw_count(text: str) -> int:
    """The published tokenizer's own count of ``text`` (NFKC first), without the margin."""
    return len(tiktoken_tokenizer().encoding(CLAUDE).encode_ordinary(normalized(text)))


def margin(tokens: int) -> int:
    return -(-tokens * 5 // 4)


# Every character NFKC writes as more UTF-8 bytes than it takes (U+FDFA: 3 -> 33 bytes, 15 raw
# tokens), and characters it writes with a space in front (U+00B4 -> " \u0301").
EXPANDING = sorted(
    chr(point)
    for point in range(0x30000)
    if not 0xD800 <= point < 0xE000
    and len(unicodedata.normalize("NFKC", chr(point)).encode()) > len(chr(point).encode())
)
HOSTILE = [
    "\ufdfa",
    "\ufdfa" * 300,
    " ".join(["\ufdfa"] * 100),
    "The user's dog is called Biscuit " + "\ufdfa" * 40,
    "\ufb2c" * 200,
    "\u337f" * 200,
    "\ufdfb" * 200,
    "\u3316\u33af\u2474\u01c4\u00bd" * 50,
    "".join(EXPANDING[::7]),
]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda text: f"{len(text)}:{ord(text[0]):04x}")
def test_a_text_nfkc_lengthens_counts_its_tokens_with_the_whole_margin(text: str) -> None:
    # Capped at the bytes as sent, U+FDFA counted 3 where the tokenizer reads 15 tokens: a
    # hostile prompt or memory then overran the budget ~6 times.
    # The margin in full, unless the text's bytes as read cap it: no byte-level tokenizer,
    # reading it as sent or as normalised, counts a token more than those.
    count = tiktoken_tokenizer().counter(CLAUDE)(text)
    read = len(normalized(text).encode())
    assert count == min(margin(raw_count(text)), read) >= raw_count(text), repr(text[:20])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(EXPANDING),
            st.sampled_from(["\u0301", "\u0308", "\u1161", "\u11a8", "\u1100", "e", "a ", "\n"]),
            st.text(max_size=8),
        ),
        max_size=80,
    ),
    st.lists(st.integers(min_value=0, max_value=80), max_size=6),
)
def test_a_text_counted_by_parts_is_never_below_its_whole_count(
    pieces: list[str], cuts: list[int]
) -> None:
    # Cut anywhere, even between a character and the mark NFKC would compose it with: each
    # part's count with its margin, summed, is at least the tokenizer's count of the whole.
    text = "".join(pieces)
    count = tiktoken_tokenizer().counter(CLAUDE)
    edges = [0, *sorted(min(cut, len(text)) for cut in cuts), len(text)]
    parts = [text[start:end] for start, end in itertools.pairwise(edges)]
    assert sum(map(count, parts)) >= raw_count(text)
    assert count(text) >= raw_count(text)
