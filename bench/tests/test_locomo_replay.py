"""Tests of the replay's candidate experiments: neighbour turns and token-table embedders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from bench.locomo_replay import TableEmbedder, Turns, with_neighbours
from proxy.context.records import Candidate, MemoryRecord

START = datetime(2026, 1, 1, tzinfo=UTC)


def record(
    rid: str, minute: float, *, user: str = "u", source: str = "conversation"
) -> MemoryRecord:
    """A memory ``minute`` minutes after ``START``."""
    return MemoryRecord(
        id=rid,
        tenant="t",
        user=user,
        source=source,
        content=rid,
        created_at=START + timedelta(minutes=minute),
    )


# One user's dialog: t0..t3 a minute apart, then t4 an hour later; another user's turn x at
# the same time as t1; a learning l written with t2.
TURNS = [record(f"t{i}", i) for i in range(4)] + [record("t4", 63)]
OTHERS = [record("x", 1, user="v"), record("l", 2, source="learnings")]
ALL = Turns.of([*TURNS, *OTHERS])


def score(turn: MemoryRecord) -> float:
    """A stand-in similarity: the turn's number over ten."""
    return int(turn.id[1:]) / 10


def ids(candidates: list[Candidate]) -> list[str]:
    return [c.record.id for c in candidates]


@pytest.mark.parametrize(
    ("hits", "seeds", "expected"),
    [
        (["t2"], 0, ["t2"]),  # no seeds: the hits as they are
        (["t2"], 1, ["t2", "t1", "t3"]),  # both sides, before first
        (["t1", "t2"], 2, ["t1", "t2", "t0", "t3"]),  # a neighbour already a hit is not added
        (["t3"], 1, ["t3", "t2"]),  # t4 is an hour away: outside the window
        (["l", "t0"], 1, ["l", "t0", "t1"]),  # a learning is no seed and takes no seat
        (["t0", "t3"], 1, ["t0", "t3", "t1"]),  # only the first seed
        (["x"], 1, ["x"]),  # the other user's turn has no neighbour in its own line
    ],
)
def test_with_neighbours_adds_adjacent_turns_of_the_first_seeds(
    hits: list[str], seeds: int, expected: list[str]
) -> None:
    """The turns just before and after each of the first ``seeds`` dialog turns, once each,
    of the seed's user, within the window, scored by the given similarity."""
    by_id = {r.id: r for r in [*TURNS, *OTHERS]}
    given = [Candidate(by_id[i], 0.9) for i in hits]
    out = with_neighbours(given, ALL, score, seeds=seeds)
    assert ids(out) == expected
    assert out[: len(given)] == given
    for added in out[len(given) :]:
        assert added.similarity == score(added.record)


def test_table_embedder_pools_token_rows_and_normalises(tmp_path: Path) -> None:
    """A text is the normalised mean (so also sum) of its tokens' rows; no tokens: the zero row."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "cat": 1, "dog": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    table = np.array([[0, 0, 0], [3, 0, 0], [0, 4, 0]], dtype=np.float16)
    save_file({"embedding.weight": table}, str(tmp_path / "weights.safetensors"))
    embedder = TableEmbedder(tmp_path / "tokenizer.json", tmp_path / "weights.safetensors")

    vectors = embedder.embed_sync(["cat dog", "dog", ""])

    assert embedder.dimensions == 3
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors[0], [0.6, 0.8, 0.0], atol=1e-6)  # (1.5, 2) normalised
    np.testing.assert_allclose(vectors[1], [0.0, 1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(vectors[2], [0.0, 0.0, 0.0])
