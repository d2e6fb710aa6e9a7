"""Real-text memories and questions for benchmarks, made from LoCoMo at run time.

Synthetic template memories (``memories.py``) have a few dozen words in all; real memories have
thousands, long summaries next to two-word turns, a speaker's name in half of them, and queries
full of common words. Their costs differ (docs/benchmarks.md, "Real-text data"), so the
benchmarks store real text:

1. **Real items first**: every LoCoMo dev memory as ``locomo_data.build_memories`` makes it
   (dialog turns as ``'Speaker: text'`` with photo captions, observations, session summaries),
   in a seeded shuffle. The three conversations hold 2,198.
2. **Then generated items**, for larger stores: an order-2 word Markov chain per source
   (turns, observations and summaries each have their own), trained on the real items, words
   split at whitespace so punctuation and case stay as written. Each item picks its source with
   the real proportions and walks its chain from the start of a real item to an end of one, so
   lengths, word frequencies, speaker prefixes and phrasing follow the corpus; runs copied from
   overlapping real items give it near-duplicates at about the real rate. It cannot invent
   words: the vocabulary stops growing at the corpus's (``compare`` reports both).
3. **Questions**: the LoCoMo questions (all categories) in a seeded shuffle, then questions
   walked from an order-2 chain over them (about 15k new ones), then from an order-1 chain,
   each text used once: a benchmark asking a new question per request never hits a cache.

Everything is seeded and deterministic. The data is read in place (CC BY-NC 4.0) and never
written into the repo; ``python bench/lib/realtext.py`` prints the real-vs-generated statistics.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import itertools
import json
import random
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib import locomo_data, stats
from proxy.context.dedup import dedup_order
from proxy.context.words import dedup_words

ROOT = Path(__file__).resolve().parents[2]
LOCOMO_PATH = ROOT.parent / "shared" / "bench" / "locomo" / "locomo_dev.json"
SEED = 20261123
ORDER = 2
START, END = "\x02", "\x03"  # chain boundary markers (never in the text)
GENERATED_MAX_WORDS = 400  # a walk that never meets an end stops here (longest real item: 236)
QUESTION_TRIES = 50  # walks tried for one unseen question before the chain is called exhausted
NOW = datetime(2026, 1, 1, tzinfo=UTC)


class RealTextUnavailable(RuntimeError):
    """The LoCoMo data is not where the benchmarks read it."""


@dataclass(frozen=True)
class Corpus:
    """LoCoMo dev as memory texts and question texts."""

    items: tuple[tuple[str, str], ...]  # (source, content), conversation order
    questions: tuple[str, ...]


@functools.cache
def load_corpus(path: Path = LOCOMO_PATH) -> Corpus:
    """Read LoCoMo dev (every sample) into memory texts and questions."""
    if not path.is_file():
        raise RealTextUnavailable(f"LoCoMo data not found at {path}")
    samples = json.loads(path.read_text())
    items: list[tuple[str, str]] = []
    questions: list[str] = []
    for sample in samples:
        for item in locomo_data.build_memories(sample, "u", NOW):
            items.append((item["source"], item["content"]))
        questions += [qa["question"] for qa in sample.get("qa", []) if qa.get("question")]
    return Corpus(tuple(items), tuple(questions))


def available(path: Path = LOCOMO_PATH) -> bool:
    """True when the LoCoMo data can be read."""
    return path.is_file()


class Chain:
    """An order-``order`` word Markov chain: each state lists its observed next words."""

    def __init__(self, texts: Sequence[str], order: int = ORDER) -> None:
        if order < 1:
            raise ValueError("the chain order must be >= 1")
        self.order = order
        followers: dict[tuple[str, ...], list[str]] = {}
        for text in texts:
            words = [START] * order + text.split() + [END]
            for i in range(order, len(words)):
                followers.setdefault(tuple(words[i - order : i]), []).append(words[i])
        # Lists with repeats: a uniform choice is a draw weighted by how often a word followed.
        self.followers = {state: tuple(nexts) for state, nexts in followers.items()}

    def walk(self, rng: random.Random, max_words: int = GENERATED_MAX_WORDS) -> str:
        """One text from the start state to an end (or ``max_words``)."""
        state = (START,) * self.order
        words: list[str] = []
        followers, choice = self.followers, rng.choice
        while len(words) < max_words:
            word = choice(followers[state])
            if word == END:
                break
            words.append(word)
            state = (*state[1:], word)
        return " ".join(words)


class RealText:
    """Seeded streams of real-text memories and questions from one corpus."""

    def __init__(self, corpus: Corpus | None = None, seed: int = SEED, order: int = ORDER):
        self.corpus = corpus if corpus is not None else load_corpus()
        self.seed = seed
        by_source: dict[str, list[str]] = {}
        for source, content in self.corpus.items:
            by_source.setdefault(source, []).append(content)
        self.sources = sorted(by_source)
        self.chains = {source: Chain(by_source[source], order) for source in self.sources}
        self.cumulative = list(itertools.accumulate(len(by_source[s]) for s in self.sources))
        # Order 2 reads like the real questions but runs out after ~15k new ones; a long run
        # goes on with order-1 walks (same words and lengths, looser grammar).
        self.question_chains = [Chain(self.corpus.questions, o) for o in sorted({order, 1})[::-1]]

    def texts(self, count: int, *, start: int = 0) -> Iterator[tuple[str, str]]:
        """``count`` (source, content) pairs: the real items (shuffled), then generated ones.

        ``start`` skips that many items of the same stream (item ``i`` is the same whatever the
        slice), so large stores can be generated batch by batch.
        """
        real = list(self.corpus.items)
        random.Random(self.seed).shuffle(real)
        for index in range(start, start + count):
            if index < len(real):
                yield real[index]
            else:
                yield self.generated(index)

    def generated(self, index: int) -> tuple[str, str]:
        """Generated item ``index`` (its own seed: any item can be made without the others)."""
        rng = random.Random(self.seed * 1_000_003 + index)
        pick = rng.randrange(self.cumulative[-1])
        source = self.sources[bisect.bisect_right(self.cumulative, pick)]
        text = ""
        while not text:
            text = self.chains[source].walk(rng)
        return source, text

    def memories(self, count: int, user: str, now: datetime | None = None) -> list[dict[str, Any]]:
        """``count`` ``POST /v1/memories`` items for ``user`` (as ``synthetic_memories``)."""
        rng = random.Random(self.seed + 1)
        now = now or datetime.now(UTC)
        items = []
        for index, (source, content) in enumerate(self.texts(count)):
            created = now - timedelta(minutes=rng.randint(0, 365 * 24 * 60))
            items.append(
                {
                    "user": user,
                    "source": source,
                    "content": content,
                    "created_at": created.isoformat(),
                    "confidence": round(rng.uniform(0.5, 1.0), 2),
                    "metadata": {"bench": "realtext", "n": index},
                }
            )
        return items

    def questions(self) -> Iterator[str]:
        """Every LoCoMo question (shuffled), then new chain-walked ones; no text twice."""
        rng = random.Random(self.seed + 2)
        real = list(dict.fromkeys(self.corpus.questions))
        rng.shuffle(real)
        seen = set(real)
        yield from real
        for chain in self.question_chains:
            while True:
                for _ in range(QUESTION_TRIES):
                    text = chain.walk(rng, max_words=40)
                    if text and text not in seen:
                        break
                else:
                    break  # this chain is exhausted: the next, looser one
                seen.add(text)
                yield text
        raise RuntimeError(f"no unseen question after {len(seen)} (chains exhausted)")


class QuestionBodies:
    """Chat bodies asking the next question of ``questions`` each call.

    ``loadgen`` numbers requests per cell; the number is ignored here: cells that share one
    ``RealText.questions()`` iterator never ask a question twice in a run.
    """

    def __init__(self, questions: Iterator[str], model: str, stream: bool = False) -> None:
        self._questions = questions
        self._prefix = json.dumps(
            {
                "model": model,
                "stream": stream,
                "messages": [{"role": "system", "content": "You are a helpful assistant."}],
            }
        )[:-2]  # strip the closing "]}" to append the user message

    def next_question(self) -> str:
        """The next unused question."""
        return next(self._questions)

    def __call__(self, n: int = 0) -> bytes:
        user = json.dumps({"role": "user", "content": self.next_question()})
        return f"{self._prefix}, {user}]}}".encode()


# -- statistics: do generated texts look like the real ones? ------------------------------------


def near_duplicate_rate(texts: Sequence[str], threshold: float = 0.8) -> float:
    """Share of texts whose word set is > ``threshold`` Jaccard-similar to an earlier kept one.

    The same sets and exact walk as the assembler's dedup (``dedup_order``).
    """
    if not texts:
        return 0.0
    _, dropped = dedup_order([dedup_words(t) for t in texts], range(len(texts)), threshold)
    return len(dropped) / len(texts)


def text_stats(texts: Sequence[str]) -> dict[str, float]:
    """Word-length percentiles, vocabulary, top-word shares and near-duplicate rate of ``texts``."""
    lengths = [len(t.split()) for t in texts]
    words = Counter(w for t in texts for w in dedup_words(t))
    tokens = Counter(w for t in texts for w in t.casefold().split())
    total = sum(tokens.values())
    top = [n for _, n in tokens.most_common(100)]
    return {
        "texts": float(len(texts)),
        "words_p10": stats.percentile(lengths, 10),
        "words_p50": stats.percentile(lengths, 50),
        "words_p90": stats.percentile(lengths, 90),
        "words_p99": stats.percentile(lengths, 99),
        "vocabulary": float(len(words)),
        "top10_share": sum(top[:10]) / total if total else 0.0,
        "top100_share": sum(top) / total if total else 0.0,
        "hapax_share": sum(1 for n in words.values() if n == 1) / len(words) if words else 0.0,
        "near_dup_rate": near_duplicate_rate(texts),
    }


def compare(source: RealText, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Statistics of the first ``n`` real items against ``n`` generated ones, per size."""
    real = [content for _, content in source.corpus.items]
    random.Random(source.seed).shuffle(real)
    first = len(real)
    rows = []
    for n in sizes:
        generated = [source.generated(first + i)[1] for i in range(n)]
        if n <= len(real):
            rows.append({"set": "real", **text_stats(real[:n])})
        rows.append({"set": "generated", **text_stats(generated)})
    questions = list(itertools.islice(source.questions(), 2 * len(source.corpus.questions)))
    half = len(questions) // 2
    rows.append({"set": "questions real", **text_stats(questions[:half])})
    rows.append({"set": "questions gen", **text_stats(questions[half:])})
    return rows


def main() -> None:
    """Print real-vs-generated statistics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2198,10000,100000")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    source = RealText(seed=args.seed)
    rows = compare(source, [int(s) for s in args.sizes.split(",")])
    print(stats.format_table(rows))


if __name__ == "__main__":
    main()
