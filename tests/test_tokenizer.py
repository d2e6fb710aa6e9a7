"""Tests for the tiktoken adapter behind the engine's tokenizer port."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.claude_tokenizer import CLAUDE, normalized, with_margin
from proxy.context.tokens import STORED_ENCODINGS, Tokenizer
from proxy.tokenizer import (
    TiktokenTokenizer,
    count_all,
    count_tokens,
    encoding_name_for_model,
    tiktoken_tokenizer,
)


def test_it_is_the_engines_tokenizer() -> None:
    tokenizer: Tokenizer = tiktoken_tokenizer()
    assert tokenizer is tiktoken_tokenizer()  # one per process
    assert tokenizer.counter("o200k_base") is tokenizer.counter("o200k_base")


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("azure/gpt-3.5-turbo", "cl100k_base"),
        ("my-local-llama", "cl100k_base"),
        ("", "cl100k_base"),
    ],
)
def test_encoding_for_model(model: str, encoding: str) -> None:
    assert encoding_name_for_model(model) == encoding
    assert tiktoken_tokenizer().encoding_for_model(model) == encoding


@pytest.mark.parametrize("encoding", STORED_ENCODINGS)
def test_counts_are_tiktokens_with_special_tokens_as_text(encoding: str) -> None:
    text = "Hello world <|endoftext|> and more"
    expected = len(tiktoken.get_encoding(encoding).encode(text, disallowed_special=()))
    assert count_tokens(text, encoding) == expected
    assert count_all(text)[encoding] == expected
    assert count_tokens("Hello world", encoding) == 2


@pytest.mark.parametrize("encoding", STORED_ENCODINGS)
def test_longest_token_bytes(encoding: str) -> None:
    assert TiktokenTokenizer().longest_token_bytes(encoding) == 128


def test_the_process_tokenizer_loads_offline_from_litellms_files() -> None:
    # A fresh interpreter without TIKTOKEN_CACHE_DIR: no download, the bundled files instead.
    code = (
        "import os; from proxy.tokenizer import count_tokens; "
        "assert 'TIKTOKEN_CACHE_DIR' not in os.environ; "
        "assert count_tokens('Hello world') == 2; "
        "assert 'litellm' in os.environ['TIKTOKEN_CACHE_DIR']"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env=env)


# Unicode that NFKC changes (ligatures, full-width, math letters, U+337F that it lengthens),
# plain prose, and anything else.
CLAUDE_TEXTS = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="ﬁﬂＡｂ１𝐀𝐁㍿ é\u0301 abc.,!?\n", max_size=60),
    st.sampled_from(["", "The user lives in Porto.", "㍿" * 9, "a" * 300]),
)


@settings(max_examples=300, deadline=None)
@given(CLAUDE_TEXTS)
def test_a_memory_keeps_its_claude_count_exactly_as_a_request_counts_it(text: str) -> None:
    """The invariant of what a memory keeps: the margin over the raw count of the NFKC text,
    capped at its UTF-8 bytes as sent or as normalised (whichever is more), is the stored
    figure itself, for every text."""
    tokenizer = tiktoken_tokenizer()
    kept = count_all(text)
    assert set(kept) == {*STORED_ENCODINGS, CLAUDE}
    raw = len(tokenizer.encoding(CLAUDE).encode_ordinary(normalized(text)))
    size = max(len(s.encode("utf-8", "surrogatepass")) for s in (text, normalized(text)))
    assert kept[CLAUDE] == with_margin(raw, size) == tokenizer.counter(CLAUDE)(text)


def test_without_the_claude_file_memories_keep_the_stored_encodings_only() -> None:
    assert TiktokenTokenizer().kept_encodings() == STORED_ENCODINGS
