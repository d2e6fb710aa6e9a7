r"""Words of a text as the context engine compares them: normalised, stemmed, matched, weighted.

A text's words are its case-folded maximal letter/digit runs (``[^\W_]+``, so punctuation and
``_`` split words): ``word_runs``, optionally without English stopwords and with light stemming
(one of -ing, -ed, -es, -s removed, keeping 3+ letters, never -ss). ``query_matcher`` finds a
query's words in many texts by looking each run up among the query's word forms;
``idf_weights``/``weighted_overlap`` weight query words by their rarity among the candidates.
Dedup compares other sets (``dedup_words``: split at whitespace and punctuation only).

ASCII text, the common case, is split with one byte-table translation in C instead of the
regex; each table is derived from the general rule it stands for, so the two cannot drift apart,
and property tests compare them on arbitrary text. Pure functions but for the memos
(``TextMemo``), which the engine's threads share: a store takes the memo's lock, a lookup
none (adr/0183).
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from threading import Lock
from typing import Generic, NamedTuple, TypeVar

from proxy.defaults import TEXT_MEMO_CHARS as MEMO_CHARS
from proxy.defaults import TEXT_MEMO_TEXT_CHARS as MEMO_TEXT_CHARS
from proxy.defaults import TEXT_PROFILES_MEMOISED as TEXTS_MEMOISED

R = TypeVar("R")


class MemoInfo(NamedTuple):
    """A ``TextMemo``'s counters, shaped like ``functools.lru_cache``'s ``cache_info()``."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


class TextMemo(Generic[R]):
    """``func`` of a text (never ``None``), memoised: the texts met last, at most ``maxsize``
    of them and ``max_chars`` characters in all; a text over ``text_chars`` is computed each
    time.

    A dict, not ``functools.lru_cache``: ``each`` looks a request's texts up with one ``map`` of
    ``dict.get`` in C (0.55x the ``lru_cache`` calls on 70 real texts). Entries go oldest first
    (insertion order): hits do not reorder them, which only matters once the texts in use
    outgrow the memo, where a least-recently-used one cycles as well. An ``OrderedDict`` (its
    lookups are the dict's): its oldest entry leaves in one step, where a plain dict's is found
    by scanning past every entry removed before it (~8-15 us an add once the memo is full, as it
    is at 100k memories for every text a request meets first; 0.8 us this way). Bounding the
    characters rather than each text lets the long summaries of real stores (2,000-2,600
    characters, ~0.1 ms each to split) be kept within the old worst case (adr/0149).
    """

    def __init__(
        self,
        func: Callable[[str], R],
        *,
        maxsize: int | None = None,
        max_chars: int | None = None,
        text_chars: int | None = None,
    ) -> None:
        self.func = func
        self.maxsize = TEXTS_MEMOISED if maxsize is None else maxsize
        self.max_chars = MEMO_CHARS if max_chars is None else max_chars
        self.text_chars = MEMO_TEXT_CHARS if text_chars is None else text_chars
        self.entries: OrderedDict[str, R] = OrderedDict()
        self._lock = Lock()
        self.chars = 0
        self.hits = 0
        self.misses = 0

    def __call__(self, text: str) -> R:
        found = self.entries.get(text)
        if found is None:
            return self.add(text)
        self.hits += 1
        return found

    def add(self, text: str) -> R:
        """``func(text)``, kept if the bounds allow (the oldest entries leave to make room)."""
        value = self.func(text)
        size = len(text)
        self.misses += 1
        if size > self.text_chars:
            return value
        # The event loop, the offloaded engine (``Offloader``) and the record cache's warm-up
        # thread share the memo. Lookups take no lock (one dict read each); a store does, with
        # the count and the evictions it makes (adr/0183): unlocked, ``chars += size`` is a read,
        # an add and a write, and another thread's update falling between them is lost. The
        # oldest entry leaves in one step (``popitem``): a plain dict's first key was found by
        # scanning past every slot emptied since its last resize, ~8-15 us an add once full.
        with self._lock:
            entries = self.entries
            if text in entries:
                return value  # stored by another thread meanwhile
            entries[text] = value
            self.chars += size
            while len(entries) > self.maxsize or self.chars > self.max_chars:
                oldest, _ = entries.popitem(last=False)
                self.chars -= len(oldest)
        return value

    def each(self, texts: Sequence[str]) -> list[R]:
        """``[self(text) for text in texts]``, the lookups in C (50-100 texts a request)."""
        found = list(map(self.entries.get, texts))
        if None in found:
            add = self.add
            for at, value in enumerate(found):
                if value is None:
                    found[at] = add(texts[at])
                    self.hits -= 1
        self.hits += len(found)
        return found  # type: ignore[return-value]  # every None was replaced

    def cache_info(self) -> MemoInfo:
        """Hits, misses, the entry bound and the entries now."""
        return MemoInfo(self.hits, self.misses, self.maxsize, len(self.entries))

    def cache_clear(self) -> None:
        """Forget every entry and the counters."""
        with self._lock:
            self.entries.clear()
            self.chars = self.hits = self.misses = 0


WORD = re.compile(r"[^\W_]+")
# A stem of 3+ letters, then one suffix, at the end of a space-separated word.
STEM = re.compile(r"\b([^\W_]{3,}?)(?:ing|ed|es|(?<!s)s)\b")
# Function words carry no topic; dropping them keeps "how do I ..." from matching everything.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "after",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "been",
        "before",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "just",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "out",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "up",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)
NO_WORDS: frozenset[str] = frozenset()
PUNCTUATION_TO_SPACE = str.maketrans(
    dict.fromkeys(
        string.punctuation + "\u2018\u2019\u201c\u201d\u2026\u2013\u2014\u00ab\u00bb\u00bf\u00a1",
        " ",
    )
)


def ascii_table(rule: Callable[[str], str]) -> bytes:
    """A byte translation table applying ``rule`` (one character to one ASCII character) to each
    ASCII byte; bytes above 127 never occur in ASCII text and map to themselves."""
    table = bytes(ord(rule(chr(byte))) for byte in range(128))
    return table + bytes(range(128, 256))


# ``word_runs`` for ASCII: a letter or digit case-folded, anything else a space.
ASCII_WORD_FOLD = ascii_table(lambda c: c.casefold() if WORD.fullmatch(c) else " ")
# ``dedup_words`` for ASCII: case-folded, punctuation a space.
ASCII_FOLD = ascii_table(lambda c: c.casefold().translate(PUNCTUATION_TO_SPACE))
# ASCII characters ``dedup_words`` keeps inside a word but ``word_runs`` splits at (control
# characters other than whitespace): in an ASCII text without any, the two give the same set.
ASCII_DEDUP_ONLY_CHARS = "".join(
    c
    for c in map(chr, range(128))
    if not (c.isspace() or c in string.punctuation or WORD.fullmatch(c))
)
ASCII_DEDUP_ONLY = re.compile(f"[{re.escape(ASCII_DEDUP_ONLY_CHARS)}]")
MATCH_SUFFIXES = ("", "ing", "ed", "es", "s")


def stem(word: str) -> str:
    """Strip one common English suffix (-ing, -ed, -es, -s but not -ss), keeping 3+ letters."""
    return STEM.sub(r"\1", word)


def word_runs(text: str) -> list[str]:
    """The case-folded maximal letter/digit runs of ``text``: ``WORD.findall(text.casefold())``.

    ASCII text takes a byte-table translation and a split in C, several times faster.
    """
    if text.isascii():
        return text.encode().translate(ASCII_WORD_FOLD).decode().split()
    return WORD.findall(text.casefold())


def split_text_words(text: str) -> frozenset[str]:
    """The set of ``word_runs(text)``; ``text_words`` memoises it: a memory is a candidate of
    many requests.

    Its words are not shared between texts: a shared copy (1.2 KB less a real text) cost ~2.5 us
    more a text met for the first time, in a vocabulary-sized dict.
    """
    return frozenset(word_runs(text))


text_words = TextMemo(split_text_words)


def normalise_words(
    text: str, *, stopwords: frozenset[str] = NO_WORDS, stemmed: bool = False
) -> frozenset[str]:
    """Case-folded words without punctuation, optionally without stopwords and stemmed."""
    words = frozenset(word_runs(text))
    if stopwords:
        words = words - stopwords
    if stemmed:
        # One regex pass over the unique words is several times faster than a Python loop.
        return frozenset(STEM.sub(r"\1", " ".join(words)).split())
    return words


def split_dedup_words(text: str, match_words: frozenset[str] | None = None) -> frozenset[str]:
    """Case-folded words split at whitespace and punctuation: the sets dedup compares.

    ``str.translate`` plus ``split`` run in C, several times faster than the word regex; they
    split at ASCII and common typographic punctuation only. ASCII text takes a byte table that
    folds case in the same pass, about twice as fast; most ASCII texts split the same way for
    matching, and take that memoised set (``text_words``). Not memoised itself: a caller that
    keeps what it derives from the set (``dedup.text_signature``) would only fill a second memo.
    ``match_words``: the text's ``split_text_words``, if the caller has it.
    """
    if text.isascii():
        # Those characters are controls: a printable text (most) has none, known in one C pass.
        if text.isprintable() or ASCII_DEDUP_ONLY.search(text) is None:
            return text_words(text) if match_words is None else match_words
        return frozenset(text.encode().translate(ASCII_FOLD).decode().split())
    return frozenset(text.casefold().translate(PUNCTUATION_TO_SPACE).split())


# ``split_dedup_words`` memoised: a memory is a candidate of many requests.
dedup_words = TextMemo(split_dedup_words)


def keyword_overlap(query_words: frozenset[str], content_words: frozenset[str]) -> float:
    """Fraction of the query's words present in the content; 0 for an empty query."""
    if not query_words:
        return 0.0
    return len(query_words & content_words) / len(query_words)


def query_matcher(query_words: frozenset[str], *, stemmed: bool) -> Callable[[str], set[str]]:
    """Return a function giving the query words found in a text.

    A query word is found where a whole word of the text (``word_runs``) is that word or, with
    ``stemmed``, that word plus one of the suffixes ``stem`` strips; where two query words fit
    one text word the longer wins. Unstemmed, ``len(found) / len(query_words)`` equals
    ``keyword_overlap(query_words, normalise_words(text))``. Stemmed, it is close to comparing
    stemmed word sets but not equal: a query stem also finds a word whose own stem would be
    under 3 letters (``go`` finds ``going``, which ``stem`` leaves whole).
    """
    keys, lookup = query_forms(query_words, stemmed=stemmed)

    def found(text: str) -> set[str]:
        return set(map(lookup, keys & text_words(text)))

    return found


def query_forms(
    query_words: frozenset[str], *, stemmed: bool
) -> tuple[frozenset[str], Callable[[str], str]]:
    """The text words ``query_matcher`` looks for, and the query word each one finds: a text's
    found words are ``set(map(lookup, forms & text_words(text)))``."""
    forms: dict[str, str] = {}
    for word in sorted(query_words, key=len):  # longer words overwrite: they win a tie
        for ending in MATCH_SUFFIXES if stemmed else ("",):
            forms[word + ending] = word
    # A frozenset, not the dict's keys: ``keys & words`` walks every word of the text, two
    # sets' ``&`` walks the smaller (0.16 -> 0.08 ms over 50 real-text candidates).
    return frozenset(forms), forms.__getitem__


# A word's bases (``match_bases``): the word less one suffix ``query_forms`` adds, never empty.
# -ing, -ed and -s end a word in different letters, so a word has at most one of them, and -es
# besides when it ends in -s. The patterns read the words spelt backwards, each after a space:
# there a suffix is a literal just after a space and the base is the rest of the word, so a
# match is one pass over the word. Forwards (``\b(\S+)(?:ing|ed|s)\b``) each word was matched
# whole and given back letter by letter to look for a suffix: 10.4 us of a real text's ~18.5 us
# profile, 4.5 us backwards, for each text a request meets for the first time.
BACKWARDS_SUFFIX = re.compile(r" (?:s|de|gni)(\S+)")
BACKWARDS_ES = re.compile(r" se(\S+)")


def match_bases(words: frozenset[str]) -> frozenset[str]:
    """Every query word some text word is a form of: each of ``words`` and, stemmed matching,
    each one less one of the suffixes ``query_forms`` adds (-ing, -ed, -es, -s), when some
    letter is left. ``words`` have no whitespace (``word_runs``' have none).

    ``w in match_bases(words)`` exactly when ``w + e in words`` for an ending ``e`` of
    ``MATCH_SUFFIXES``: with query words no form of which is another's (``unambiguous``), the
    words a text finds are ``query_words & match_bases(text_words(text))``, one set operation
    in C probing the few query words instead of their forms (``profiles.py``). Without a
    suffix to strip it is ``words`` itself, not a copy.
    """
    backwards = " " + " ".join(words)[::-1]
    found = BACKWARDS_SUFFIX.findall(backwards)
    if not found:  # a word ending in -es ends in -s too
        return words
    if " se" in backwards:
        found += BACKWARDS_ES.findall(backwards)
    return words.union(" ".join(found)[::-1].split())


def unambiguous(query_words: frozenset[str], forms: frozenset[str], *, stemmed: bool) -> bool:
    """Whether each of ``forms`` (``query_forms``'s) is the form of one query word only: then a
    text finds exactly the query words among its ``match_bases`` (stemmed) or its words."""
    return len(forms) == len(query_words) * (len(MATCH_SUFFIXES) if stemmed else 1)


def overlap_matcher(query_words: frozenset[str], *, stemmed: bool) -> Callable[[str], float]:
    """A fast ``keyword_overlap(query_words, normalise_words(text, ...))`` for many texts."""
    found = query_matcher(query_words, stemmed=stemmed)
    size = max(1, len(query_words))
    return lambda text: len(found(text)) / size


def idf_weights(matches: Sequence[AbstractSet[str]]) -> dict[str, float]:
    """BM25-style IDF of each query word over the candidates: ``ln(1 + (N - df + .5)/(df + .5))``.

    Only words some candidate contains get a weight, so a query word no memory has does not
    shrink every overlap alike.
    """
    total = len(matches)
    df = Counter(itertools.chain.from_iterable(matches))
    return {word: math.log(1.0 + (total - n + 0.5) / (n + 0.5)) for word, n in df.items()}


def unseen_weight(total: int) -> float:
    """The IDF ``idf_weights`` would give a word no candidate has (df = 0) among ``total``."""
    return math.log(1.0 + (total + 0.5) / 0.5)


def weighted_overlap(found: set[str], weights: dict[str, float]) -> float:
    """Share of the query's IDF mass (over words some candidate has) found in one text.

    Both sums exact (``math.fsum``): the same figure whatever order the sets give the words in
    (a string's hash, hence a set's order, changes with each process).
    """
    mass = math.fsum(weights.values())
    return math.fsum(weights[word] for word in found) / mass if mass > 0 else 0.0
