"""Offline tiktoken: encodings load from the BPE files litellm's wheel ships.

tiktoken downloads its BPE files on first use; this machine (and many production hosts) cannot.
litellm's wheel carries cl100k_base and o200k_base under tiktoken's cache names, so pointing
``TIKTOKEN_CACHE_DIR`` there before the first encoding loads makes tiktoken work offline. The
directory is found without importing litellm, whose import costs seconds.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

import tiktoken
import tiktoken.model

O200K = "o200k_base"
CL100K = "cl100k_base"
# Every stored memory carries its token count in each of these, computed once at write time.
STORED_ENCODINGS: tuple[str, ...] = (O200K, CL100K)
FALLBACK_ENCODING = CL100K
LITELLM_TOKENIZER_DIR = ("litellm_core_utils", "tokenizers")


def litellm_tokenizer_dir() -> Path | None:
    """Return the folder of BPE files inside the installed litellm package, if any."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*LITELLM_TOKENIZER_DIR)
    return folder if folder.is_dir() else None


def ensure_offline_cache() -> None:
    """Point ``TIKTOKEN_CACHE_DIR`` at litellm's BPE files unless the operator chose a folder."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    folder = litellm_tokenizer_dir()
    if folder is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)


@functools.cache
def get_encoding(name: str) -> Any:
    """Return the tiktoken encoding ``name``, loaded once per process."""
    ensure_offline_cache()
    return tiktoken.get_encoding(name)


@functools.cache
def longest_token_bytes(name: str) -> int:
    """The most bytes one token of encoding ``name`` stands for (128 for o200k and cl100k).

    Bounds a count from below without encoding: a text of n UTF-8 bytes is at least
    ``ceil(n / longest)`` tokens.
    """
    encoding = get_encoding(name)
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


@functools.lru_cache(maxsize=1024)
def encoding_name_for_model(model: str) -> str:
    """Return the encoding name for ``model``; unknown models fall back to cl100k_base.

    Provider prefixes (``openai/gpt-4o``, ``azure/gpt-4o``) are stripped first.
    """
    name = model.rsplit("/", 1)[-1]
    try:
        return str(tiktoken.model.encoding_name_for_model(name))
    except KeyError:
        return FALLBACK_ENCODING


def count_tokens(text: str, encoding: str = O200K) -> int:
    """Count the tokens of ``text``; special-token text in user content counts as plain text."""
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


def count_all(text: str) -> dict[str, int]:
    """Count ``text`` in every stored encoding (what a memory keeps from write time)."""
    return {name: count_tokens(text, name) for name in STORED_ENCODINGS}
