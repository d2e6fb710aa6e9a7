"""Tests of the replay's token-table embedder (another static model beside the shipped one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.locomo_replay import TableEmbedder


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


def test_context_spec_reads_where_turns_and_weight() -> None:
    """``WHERE:BEFORE[+AFTER][*WEIGHT]``; ``none`` is the plain index; labels round-trip."""
    import pytest

    from bench.locomo_replay import Context, context_spec

    cases = {
        "none": Context(),
        "both:1": Context("both", 1, 0, 1.0),
        "dense:2+1": Context("dense", 2, 1, 1.0),
        "bm25:1*0.5": Context("bm25", 1, 0, 0.5),
        "score:1+1": Context("score", 1, 1, 1.0),
    }
    for text, context in cases.items():
        assert context_spec(text) == context
        assert context.label == text
    for bad in ("words:1", "both", "both:"):
        with pytest.raises(SystemExit):
            context_spec(bad)


def test_turn_contexts_stay_in_the_session_and_skip_other_sources() -> None:
    """A turn's context is the turns before/after it in its own session, in time order;
    learnings and summaries get none."""
    from datetime import UTC, datetime, timedelta

    from bench.locomo_replay import Context, joined, turn_contexts
    from proxy.context.records import MemoryRecord

    start = datetime(2026, 1, 1, tzinfo=UTC)

    def record(i: int, source: str, session: int, minute: int) -> MemoryRecord:
        return MemoryRecord(
            id=str(i),
            tenant="t",
            user="u",
            source=source,
            content=f"m{i}",
            created_at=start + timedelta(minutes=minute),
            metadata={"session": session},
        )

    records = [
        record(0, "conversation", 1, 0),
        record(1, "learnings", 1, 0),
        record(2, "conversation", 1, 2),  # stored before turn 3, said after it
        record(3, "conversation", 1, 1),
        record(4, "conversation", 2, 60),
    ]
    assert turn_contexts(records, Context("both", 1)) == [[], [], ["m3"], ["m0"], []]
    assert turn_contexts(records, Context("both", 2, 1)) == [
        ["m3"],
        [],
        ["m0", "m3"],
        ["m0", "m2"],
        [],
    ]
    assert joined("m2", ["m0", "m3"]) == "m0\nm3\nm2"


def test_scored_as_counts_the_block_of_the_turns_own_text() -> None:
    """The probe's block tokens are those ``assemble`` renders for the same memories' own text,
    and a turn scored by its context text can be packed where its own text is not."""
    from datetime import UTC, datetime

    from bench.locomo_replay import ENCODING, assemble_scored_as
    from bench.store import NOW
    from proxy.context.assembler import AssemblerConfig, assemble
    from proxy.context.records import Candidate, MemoryRecord
    from proxy.context.render import BlockTokens
    from proxy.defaults import MEMORY_MAX_TOKENS
    from proxy.memory.store import with_tokens
    from proxy.tokenizer import tiktoken_tokenizer

    def hit(i: str, text: str, day: int, similarity: float) -> Candidate:
        # Days apart: no neighbour gain (adr/0114) passes between them.
        record = MemoryRecord(
            id=i,
            tenant="t",
            user="u",
            source="conversation",
            content=text,
            created_at=datetime(2026, 1, day, tzinfo=UTC),
        )
        return Candidate(with_tokens(record), similarity)

    tokens = BlockTokens(ENCODING, tiktoken_tokenizer().counter(ENCODING))
    config = AssemblerConfig()
    question = "What do Melanie's kids like?"
    pool = [
        hit("a", "Melanie: my kids love the museum trips", 1, 0.5),
        hit("b", "They were stoked for the dinosaur exhibit!", 2, 0.0),
    ]
    plain = assemble(pool, question, MEMORY_MAX_TOKENS, now=NOW, tokens=tokens, config=config)
    same, size = assemble_scored_as(pool, question, config, tokens, {})
    assert plain.packed_ids == same.packed_ids == ("a",)
    assert size == plain.rendered_tokens
    context = {"b": "Caroline: What do your kids like?\n" + pool[1].record.content}
    probe, probe_size = assemble_scored_as(pool, question, config, tokens, context)
    assert "b" in probe.packed_ids
    both = assemble_scored_as(pool, question, AssemblerConfig(token_price=0.0), tokens, {})
    assert probe_size == both[0].rendered_tokens
