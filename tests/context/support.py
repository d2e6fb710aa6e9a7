"""The engine's tokenizer-bound values for tests, built on the process's tiktoken tokenizer."""

from __future__ import annotations

from datetime import datetime, timedelta

from proxy.context.records import Candidate, MemoryRecord
from proxy.context.render import BlockTokens
from proxy.tokenizer import count_all, tiktoken_tokenizer


def block_tokens(encoding: str, lines_kept: int = 0) -> BlockTokens:
    """The block arithmetic of ``encoding`` (no memoised lines unless asked)."""
    return BlockTokens(encoding, tiktoken_tokenizer().counter(encoding), lines_kept=lines_kept)


def candidate(
    name: str,
    content: str,
    similarity: float,
    *,
    now: datetime,
    source: str = "learnings",
    age_days: float = 1.0,
) -> Candidate:
    """A search hit of tenant ``t``, user ``u``, created ``age_days`` before ``now``."""
    record = MemoryRecord(
        id=name,
        tenant="t",
        user="u",
        source=source,
        content=content,
        created_at=now - timedelta(days=age_days),
        tokens=count_all(content),
    )
    return Candidate(record, similarity)
