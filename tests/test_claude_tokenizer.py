"""Claude's tokenizer as a tiktoken encoding: the same counts as the published tokenizer file,
the margin, and the byte bounds the budget relies on."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.bundled_data import claude_tokenizer_file
from proxy.claude_tokenizer import CLAUDE, NFKC_SHRINK, load_claude_encoding, normalized
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
@given(st.text(max_size=400))
def test_counts_stay_within_the_byte_bounds(text: str) -> None:
    tokenizer = tiktoken_tokenizer()
    count = tokenizer.counter(CLAUDE)(text)
    size = len(text.encode("utf-8", "surrogatepass"))
    assert -(-size // tokenizer.longest_token_bytes(CLAUDE)) <= count <= size


def test_longest_token_allows_for_nfkc(path: Path) -> None:
    longest = max(len(token) for token in load_claude_encoding(path).token_byte_values())
    assert tiktoken_tokenizer().longest_token_bytes(CLAUDE) == longest * NFKC_SHRINK
