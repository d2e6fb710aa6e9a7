"""What the assembler derives from a memory's text, once per text: ``text_profile``.

A memory is a candidate of many requests, and what matching and dedup need of it depends on
its text only: its match words (``words.split_text_words``), its dedup signature
(``dedup.word_signature`` of its dedup words) and its match bases (``words.match_bases``: the
query words it can find, so a request's matching is one set operation a candidate). They are
kept together in one memo, so a request looks a text up once.

A question brings memories no earlier one did: on a 10k-memory store of real text, ~15 of a
request's 50-70 candidates were met for the first time even after 400 requests (7,089 of
the 10,000 met by then), each costing ~20 us to profile on the request path (~12 since the
match bases are found backwards, docs/benchmarks.md). ``prepare`` profiles records ahead of
their first request; the embedded store calls it on the records it decodes while warming its
record cache, so a store that fits that cache and this memo
(``TEXT_PROFILES_MEMOISED``, smaller than the record cache: adr/0182) has every text profiled
before it is searched.
"""

from __future__ import annotations

from collections.abc import Iterable

from proxy.context.dedup import Signature, word_signature
from proxy.context.records import MemoryRecord
from proxy.context.words import TextMemo, match_bases, split_dedup_words, split_text_words

# (match words, dedup signature, match bases) of one text.
Profile = tuple[frozenset[str], Signature, frozenset[str]]


def split_profile(text: str) -> Profile:
    """``(split_text_words(text), split_signature(text), match_bases(split_text_words(text)))``;
    ``text_profile`` memoises it."""
    words = split_text_words(text)
    return words, word_signature(split_dedup_words(text, words)), match_bases(words)


text_profile = TextMemo(split_profile)


def prepare(records: Iterable[MemoryRecord]) -> int:
    """Profile the texts of ``records`` (contents and dialog contexts) not profiled yet; return
    how many were. Pure but for the memo: safe to call from a store's thread."""
    entries, add = text_profile.entries, text_profile.add
    added = 0
    for record in records:
        for text in (record.content, record.context) if record.context else (record.content,):
            if text not in entries:
                add(text)
                added += 1
    return added
