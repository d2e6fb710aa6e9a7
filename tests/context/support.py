"""The engine's tokenizer-bound values for tests, built on the process's tiktoken tokenizer."""

from __future__ import annotations

from proxy.context.render import BlockTokens
from proxy.tokenizer import tiktoken_tokenizer


def block_tokens(encoding: str, lines_kept: int = 0) -> BlockTokens:
    """The block arithmetic of ``encoding`` (no memoised lines unless asked)."""
    return BlockTokens(encoding, tiktoken_tokenizer().counter(encoding), lines_kept=lines_kept)
