"""Table and property tests for word normalisation, matching and IDF weights."""

from __future__ import annotations

import re
import sys
import threading
from collections import OrderedDict

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from proxy.context import words
from proxy.context.words import (
    PUNCTUATION_TO_SPACE,
    STOPWORDS,
    WORD,
    dedup_words,
    idf_weights,
    keyword_overlap,
    normalise_words,
    overlap_matcher,
    query_matcher,
    weighted_overlap,
    word_runs,
)
from proxy.defaults import TEXT_PROFILES_MEMOISED


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("networking?", {"networking"}),
        ("Docker, NETWORKING!", {"docker", "networking"}),
        ("snake_case and dash-word", {"snake", "case", "and", "dash", "word"}),
        ("  ", set()),
    ],
)
def test_words_are_normalised(text: str, words: set[str]) -> None:
    assert normalise_words(text) == words


def test_stopwords_and_stems_are_optional() -> None:
    words = normalise_words("How do I fix the networks?", stopwords=STOPWORDS, stemmed=True)
    assert words == {"fix", "network"}
    assert keyword_overlap(words, normalise_words("networking fixes", stemmed=True)) == 1.0


plain_words = st.sampled_from(
    ["docker", "networking", "network", "networks", "port", "fixed", "fix", "yaml", "the", "a"]
)


@given(st.lists(plain_words, max_size=8), st.lists(plain_words, max_size=20))
def test_overlap_matcher_equals_word_set_overlap(query: list[str], content: list[str]) -> None:
    for stemmed in (False, True):
        query_words = normalise_words(" ".join(query), stopwords=STOPWORDS, stemmed=stemmed)
        text = ", ".join(content).upper() + "?"
        expected = keyword_overlap(query_words, normalise_words(text, stemmed=stemmed))
        assert overlap_matcher(query_words, stemmed=stemmed)(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [("Hello, World!", {"hello", "world"}), ("it\u2019s—fine", {"it", "s", "fine"})],
)
def test_dedup_words(text: str, words: set[str]) -> None:
    assert dedup_words(text) == words


def test_idf_weights_favour_rare_words() -> None:
    matches = [{"caroline", "lgbtq"}, {"caroline"}, {"caroline"}, {"caroline"}, set()]
    weights = idf_weights(matches)
    assert set(weights) == {"caroline", "lgbtq"}
    assert weights["lgbtq"] > weights["caroline"] > 0
    assert weighted_overlap({"caroline", "lgbtq"}, weights) == pytest.approx(1.0)
    assert weighted_overlap({"lgbtq"}, weights) > 0.5 > weighted_overlap({"caroline"}, weights)
    assert weighted_overlap(set(), {}) == 0.0


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_dedup_words_ascii_fast_path_equals_the_unicode_path(text: str) -> None:
    expected = frozenset(text.casefold().translate(PUNCTUATION_TO_SPACE).split())
    assert dedup_words(text) == expected


ASCII_PIECES = ["go", "goes", "bus", "bu", "ses", "ing", "ed", "s", "X", "_", "-", " ", "9", "é"]


@given(
    st.lists(st.sampled_from(ASCII_PIECES), max_size=20).map("".join),
    st.frozensets(st.sampled_from(["go", "goes", "bus", "bu", "b", "x9", "é"]), max_size=4),
    st.booleans(),
)
@example("it goes", frozenset({"go", "goes"}), True)  # two query words fit: the longer wins
def test_query_matcher_ascii_lookup_equals_the_regex(
    text: str, query_words: frozenset[str], stemmed: bool
) -> None:
    # Reference: the regex scan the matcher uses for non-ASCII text.
    alternatives = "|".join(sorted(map(re.escape, query_words), key=len, reverse=True))
    suffix = "(?:ing|ed|es|s)?" if stemmed else ""
    pattern = re.compile(rf"(?<![^\W_])({alternatives}){suffix}(?![^\W_])")
    expected = set(pattern.findall(text.casefold())) if query_words else set()
    assert query_matcher(query_words, stemmed=stemmed)(text) == expected


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
def test_word_runs_ascii_table_equals_the_word_regex(text: str) -> None:
    assert word_runs(text) == WORD.findall(text.casefold())


def test_word_sets_of_a_memory_are_computed_once() -> None:
    # A memory is a candidate of many requests: its word sets come from the memo the second time.
    text = "Caroline: I went to the LGBTQ support group yesterday, it was so powerful."
    matcher = query_matcher(frozenset({"support", "group"}), stemmed=True)
    hits = (words.text_words.cache_info().hits, words.dedup_words.cache_info().hits)
    assert matcher(text) == matcher(text) == {"support", "group"}
    assert dedup_words(text) is dedup_words(text)
    after = (words.text_words.cache_info().hits, words.dedup_words.cache_info().hits)
    assert after[0] > hits[0]
    assert after[1] > hits[1]


@pytest.mark.parametrize(
    ("text", "shared"),
    [
        ("Caroline: I went to the LGBTQ support group, it was so powerful!", True),
        ("tabs\tand\nnew lines", True),
        ("a bell\x07inside a word", False),  # dedup keeps the control character in the word
        ("café", False),  # not ASCII
    ],
)
def test_dedup_words_takes_the_match_set_of_ascii_text_without_control_characters(
    text: str, shared: bool
) -> None:
    assert (dedup_words(text) is words.text_words(text)) is shared
    assert dedup_words(text) == frozenset(text.casefold().translate(PUNCTUATION_TO_SPACE).split())


def test_the_characters_only_dedup_keeps_in_a_word_are_never_printable() -> None:
    # ``split_dedup_words`` takes a printable ASCII text's match set without searching for them.
    assert words.ASCII_DEDUP_ONLY_CHARS
    assert not any(c.isprintable() for c in words.ASCII_DEDUP_ONLY_CHARS)


def test_memoised_word_sets_have_room_for_a_10k_memory_store() -> None:
    # adr/0127: a 10k-memory user's texts no longer cycle through 8,192 entries; adr/0182 keeps
    # the memo at 20k when the record cache grew.
    assert words.text_words.cache_info().maxsize == TEXT_PROFILES_MEMOISED == 20_000


def test_a_text_longer_than_the_memo_bound_is_not_kept() -> None:
    # A text of distinct words keeps ~12 bytes a character: long ones would fill GBs.
    long_text = " ".join(f"w{i}" for i in range(words.MEMO_TEXT_CHARS))
    size = words.text_words.cache_info().currsize
    assert words.text_words(long_text) == frozenset(long_text.split())
    assert dedup_words(long_text) == frozenset(long_text.split())
    assert words.text_words.cache_info().currsize == size
    short = "a short memory text kept in the memo"
    words.text_words(short)
    assert words.text_words.cache_info().currsize in (size + 1, words.TEXTS_MEMOISED)


def test_a_long_summary_is_kept_within_the_character_bound() -> None:
    # adr/0149: real stores' summaries run to ~2,600 characters; splitting one again cost
    # ~0.1 ms a request. The bound is on all kept characters, not on each text.
    summary = " ".join(f"event{i}" for i in range(400))  # ~3,500 characters
    assert len(summary) > 2_000
    memo = words.TextMemo(words.split_text_words)
    first = memo(summary)
    assert memo(summary) is first
    assert memo.each([summary, summary]) == [first, first]
    assert memo.cache_info()[:2] == (3, 1)


def test_the_oldest_texts_leave_when_the_characters_run_out() -> None:
    memo = words.TextMemo(words.split_text_words, maxsize=10, max_chars=20, text_chars=12)
    memo.each(["aaaaaaaaaa", "bbbbbbbbbb"])  # 20 characters: both kept
    assert memo.cache_info().currsize == 2
    memo("cccccccccc")  # the oldest goes
    assert list(memo.entries) == ["bbbbbbbbbb", "cccccccccc"]
    assert memo("d" * 13) == frozenset({"d" * 13})  # over ``text_chars``: computed, not kept
    assert list(memo.entries) == ["bbbbbbbbbb", "cccccccccc"]
    memo = words.TextMemo(words.split_text_words, maxsize=1)
    memo.each(["one", "two"])
    assert list(memo.entries) == ["two"]


def test_the_oldest_text_leaves_in_one_step() -> None:
    # A plain dict's first entry is found by scanning past every entry removed before it: ~8-15
    # us an add once the memo is full, as it is at 100k memories for each text a request meets
    # first. An ``OrderedDict`` hands its oldest entry out at once (``popitem(last=False)``).
    memo = words.TextMemo(words.split_text_words, maxsize=2)
    assert isinstance(memo.entries, OrderedDict)
    memo.each(["one", "two", "three", "two", "four"])
    assert list(memo.entries) == ["three", "four"]
    assert memo.chars == len("three") + len("four")


@given(st.lists(st.sampled_from(["a b", "b c", "c", "d e f", "é f"]), max_size=12))
def test_each_equals_one_call_a_text(texts: list[str]) -> None:
    memo = words.TextMemo(words.split_text_words, maxsize=2, max_chars=6)
    assert memo.each(texts) == [words.split_text_words(text) for text in texts]
    info = memo.cache_info()
    assert info.hits + info.misses == len(texts)
    assert info.currsize <= 2
    assert memo.chars == sum(map(len, memo.entries)) <= 6


def test_a_text_another_thread_stored_meanwhile_is_counted_once() -> None:
    # The memo is shared by the event loop, the offloaded engine and the record cache's warm-up
    # thread, and a text is computed outside the memo's lock: a second thread may store it
    # meanwhile. Counted twice, the count drifted up and made every later add evict everything.
    def split(text: str) -> list[str]:
        if threading.current_thread().name == "first":
            second = threading.Thread(target=memo.add, args=(text,), name="second")
            second.start()
            second.join()
        return text.split()

    memo = words.TextMemo(split, maxsize=10, max_chars=100)
    first = threading.Thread(target=memo.add, args=("the same text",), name="first")
    first.start()
    first.join()
    assert list(memo.entries) == ["the same text"]
    assert memo.chars == len("the same text")


class PythonLength(str):
    """A text whose length is Python code: a point where the interpreter may switch threads in
    the middle of the memo's ``chars -= len(oldest)``. A plain ``str`` gives it none on CPython
    with the GIL (the switch comes only at calls of Python code and backward jumps, and none
    falls between that count's read and its write), a build without the GIL gives any."""

    def __len__(self) -> int:
        return str.__len__(self)


def test_threads_adding_at_once_leave_the_count_exact_and_the_bounds_kept() -> None:
    # Unlocked, a thread's ``chars += size`` or ``-=`` fell between another's read and write
    # of the count: lost, the count drifted for good (9 rounds of 10 with these texts).
    texts = [PythonLength(f"{i} " + "x" * (i * 7 % 59)) for i in range(400)]

    def calls(memo: words.TextMemo[list[str]], seed: int) -> None:
        for n in range(5_000):
            memo(texts[(n * 7919 + seed * 104_729) % len(texts)])

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for round_ in range(3):
            memo = words.TextMemo(str.split, maxsize=50, max_chars=600, text_chars=100)
            threads = [
                threading.Thread(target=calls, args=(memo, round_ * 4 + k)) for k in range(4)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert memo.chars == sum(map(len, memo.entries)) <= 600
            assert len(memo.entries) <= 50
    finally:
        sys.setswitchinterval(interval)


SAFETY_S = 60  # a bound on a wait that ends at once, never a measured time


class AnnouncedLock:
    """A lock that sets ``waiting`` when the thread named "second" comes to take it."""

    def __init__(self, waiting: threading.Event) -> None:
        self.lock = threading.Lock()
        self.waiting = waiting

    def __enter__(self) -> None:
        if threading.current_thread().name == "second":
            self.waiting.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_store_waits_for_another_threads_count_and_evictions() -> None:
    # Deterministic where the stress test above is not: the second thread's whole add runs
    # inside the first's ``chars -= len(oldest)``, after the count's read and before its write.
    # Unlocked, its update was lost (the count said 3 where "three" takes 5); locked, it comes
    # to the memo's lock, waits, and adds once the first is done.
    progressed = threading.Event()  # the second add is done, or waits for the memo's lock
    memo = words.TextMemo(str.split, maxsize=1, max_chars=100)
    memo._lock = AnnouncedLock(progressed)  # type: ignore[assignment]

    def second_add() -> None:
        memo.add("three")
        progressed.set()

    second = threading.Thread(target=second_add, name="second")

    class Evicted(str):
        def __len__(self) -> int:
            if threading.current_thread().name == "first" and second.ident is None:
                second.start()
                progressed.wait(SAFETY_S)
            return str.__len__(self)

    memo.add(Evicted("one"))
    first = threading.Thread(target=memo.add, args=("two",), name="first")
    first.start()
    first.join()
    second.join()
    assert list(memo.entries) == ["three"]
    assert memo.chars == len("three")
