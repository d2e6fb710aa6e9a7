"""Candidate-generation and query variants the LoCoMo replay measures (issue 16, item 3).

Each variant changes which candidates reach the packer or what the packer's overlap counts as
the question's words; none is in the product (adr/0129 says why). Pure functions over texts and
candidates, so the replay (``bench/locomo_replay.py --variants``) and its tests share them:

- ``feedback_text``: the question followed by its best hits' texts, the text of a second search
  (pseudo-relevance feedback; the static embedder averages token rows, so embedding it moves
  the query vector towards the hits, and BM25 gets their words).
- ``rare_words``: the words of the best-ranked candidates rarest among all candidates, to be
  added to the question the packer's overlap is computed for.
- ``similar_words``: candidate words whose static vector is close to a question word's
  (``destress`` / ``de-stress``), a soft overlap through the same expansion.
- ``fused_seeds``: the dialog hits whose neighbour turns join (adr/0122) taken in the store's
  fused order instead of by similarity.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from proxy.context.records import Candidate
from proxy.context.words import STOPWORDS, word_runs

DIALOG = "conversation"  # the source of dialog turns
MIN_LETTERS = 3  # shorter runs ("im", "ok") carry no topic


def content_words(text: str) -> list[str]:
    """``text``'s case-folded word runs without stopwords, digits and runs under 3 letters, in
    order, each once."""
    seen: dict[str, None] = {}
    for word in word_runs(text):
        if len(word) >= MIN_LETTERS and word not in STOPWORDS and not word.isdigit():
            seen.setdefault(word)
    return list(seen)


def feedback_text(question: str, hits: Sequence[Candidate], top: int) -> str:
    """The question and the texts of its first ``top`` hits, one text for a second search."""
    return " ".join([question, *(hit.record.content for hit in hits[:top])])


def rare_words(
    question: str, ranked: Sequence[Candidate], pool: Sequence[Candidate], top: int, count: int
) -> list[str]:
    """At most ``count`` words of the first ``top`` of ``ranked`` that the question lacks, the
    rarest among ``pool``'s texts first (ties in first-seen order)."""
    if count <= 0:
        return []
    asked = set(content_words(question))
    frequency = Counter(word for hit in pool for word in set(content_words(hit.record.content)))
    size = max(1, len(pool))
    rarity: dict[str, float] = {}
    for hit in ranked[:top]:
        for word in content_words(hit.record.content):
            if word not in asked:
                rarity[word] = math.log(size / max(1, frequency[word]))
    ordered = sorted(rarity, key=lambda word: -rarity[word])  # stable: ties keep first-seen
    return ordered[:count]


def similar_words(
    question: str,
    pool: Sequence[Candidate],
    vectors: Callable[[Sequence[str]], np.ndarray],
    threshold: float,
) -> list[str]:
    """The words of ``pool``'s texts that the question lacks and whose vector (``vectors``:
    L2-normalised rows, one per word) has a cosine of at least ``threshold`` with some question
    word's; sorted."""
    asked = content_words(question)
    seen = set(asked)
    offered = sorted({w for hit in pool for w in content_words(hit.record.content)} - seen)
    if not asked or not offered:
        return []
    best = (vectors(asked) @ vectors(offered).T).max(axis=0)
    return [word for word, cosine in zip(offered, best, strict=True) if cosine >= threshold]


def fused_seeds(found: Iterable[Candidate], user: str, count: int) -> list[Candidate]:
    """The first ``count`` dialog turns of ``user`` in ``found``'s own order (the store's
    fused ranks), not re-sorted by similarity."""
    seeds: list[Candidate] = []
    for hit in found:
        if len(seeds) >= count:
            break
        if hit.record.source == DIALOG and hit.record.user == user:
            seeds.append(hit)
    return seeds
