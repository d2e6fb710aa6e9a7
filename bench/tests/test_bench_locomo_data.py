"""Tests of the LoCoMo data preparation and scoring helpers (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.lib import locomo_data as ld

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Look!", "blip_caption": "a red bike"},
        ],
        "session_2_date_time": "10:04 am on 19 June, 2023",
        "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "The cat is called Tom."}],
        "session_3_date_time": "9:00 am on 1 July, 2023",
        "session_3": [],
    },
    "observation": {
        "session_1_observation": {"Ann": [["Ann adopted a cat.", "D1:1"]]},
        "session_2_observation": {"Ann": [["Ann's cat is Tom.", ["D2:1", "D1:1"]]]},
    },
    "session_summary": {"session_1_summary": "Ann and Bob talked about a cat and a bike."},
    "qa": [
        {"question": "What pet?", "answer": "cat", "evidence": ["D1:1"], "category": 4},
        {"question": "Name?", "answer": "Tom", "evidence": ["D2:1; D1:1"], "category": 1},
        {"question": "Ally?", "answer": "yes", "evidence": [], "category": 3},
        {"question": "Trick", "adversarial_answer": "x", "evidence": ["D1:2"], "category": 5},
    ],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9, tzinfo=UTC)),
        ("10:04 am on 19 June,2023", datetime(2023, 6, 19, 10, 4, tzinfo=UTC)),
    ],
)
def test_parse_session_date(text: str, expected: datetime) -> None:
    assert ld.parse_session_date(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("D1:3", ("D1:3",)),
        ("D8:6; D9:17", ("D8:6", "D9:17")),
        (["D15:3", "D15:5"], ("D15:3", "D15:5")),
        ([["D1:1"], "D2:2"], ("D1:1", "D2:2")),
        ("no id here", ()),
        (None, ()),
        ({"dia_id": "D1:1"}, ()),
    ],
)
def test_dia_ids(value: object, expected: tuple[str, ...]) -> None:
    assert ld.dia_ids(value) == expected


DATES = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2030, 1, 1))


@given(st.lists(DATES.map(lambda d: d.replace(tzinfo=UTC)), min_size=1, max_size=20))
def test_shift_to_makes_latest_now_and_keeps_gaps(times: list[datetime]) -> None:
    shifted = ld.shift_to(times, NOW)
    assert max(shifted) == NOW
    for a, b, sa, sb in zip(times, times[1:], shifted, shifted[1:], strict=False):
        assert sb - sa == b - a


def test_shift_to_empty() -> None:
    assert ld.shift_to([], NOW) == []


def test_build_memories_sources_metadata_and_dates() -> None:
    items = ld.build_memories(SAMPLE, "u1", NOW)
    by_source: dict[str, list[dict[str, object]]] = {}
    for item in items:
        by_source.setdefault(str(item["source"]), []).append(item)
    assert [m["metadata"] for m in by_source["learnings"]] == [
        {"dia_id": "D1:1"},
        {"dia_id": ["D2:1", "D1:1"]},
    ]
    assert [m["metadata"]["dia_id"] for m in by_source["conversation"]] == ["D1:1", "D1:2", "D2:1"]
    assert by_source["conversation"][1]["content"] == "Bob: Look! [shares a photo: a red bike]"
    assert len(by_source["summaries"]) == 1
    assert {item["user"] for item in items} == {"u1"}
    created = [datetime.fromisoformat(str(item["created_at"])) for item in items]
    assert max(created) == NOW
    # The session 2 turn keeps its real distance from the session 1 start.
    first = created[items.index(by_source["conversation"][0])]
    last = created[items.index(by_source["conversation"][2])]
    assert last - first == datetime(2023, 6, 19, 10, 4) - datetime(2023, 5, 8, 13, 56)
    assert all(c.tzinfo is not None for c in created)


def test_questions_keep_categories_1_to_4_with_evidence() -> None:
    found = ld.questions(SAMPLE)
    assert [(q.category, q.evidence) for q in found] == [(4, ("D1:1",)), (1, ("D2:1", "D1:1"))]


@pytest.mark.parametrize(
    ("evidence", "memories", "expected"),
    [
        (["D1:1"], [{"metadata": {"dia_id": "D1:1"}}], 1.0),
        (["D1:1", "D2:1"], [{"metadata": {"dia_id": "D1:1"}}], 0.5),
        (["D1:1", "D2:1"], [{"metadata": {"dia_id": ["D2:1", "D1:1"]}}], 1.0),
        (["D1:1"], [{"metadata": {"session": 1}}, {"metadata": None}, {}], 0.0),
        (["D1:1", "D1:1"], [{"metadata": {"dia_id": "D1:1"}}], 1.0),
    ],
)
def test_evidence_recall(
    evidence: list[str], memories: list[dict[str, object]], expected: float
) -> None:
    assert ld.evidence_recall(evidence, memories) == expected


def test_evidence_recall_rejects_no_evidence() -> None:
    with pytest.raises(ValueError, match="no recall"):
        ld.evidence_recall([], [])


def test_fill_budget_keeps_order_and_skips_too_big() -> None:
    hits = [{"content": "a" * n} for n in (4, 10, 3, 5)]
    chosen = ld.fill_budget(hits, 12, len)
    assert [len(str(h["content"])) for h in chosen] == [4, 3, 5]


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=30), st.integers(0, 200))
def test_fill_budget_never_exceeds_budget(sizes: list[int], budget: int) -> None:
    hits = [{"content": "x" * n} for n in sizes]
    chosen = ld.fill_budget(hits, budget, len)
    assert sum(len(str(h["content"])) for h in chosen) <= budget


def test_mean_by_category() -> None:
    means = ld.mean_by_category([(1, 1.0), (1, 0.0), (4, 1.0)])
    assert means == {"multi-hop": 0.5, "single-hop": 1.0, "overall": pytest.approx(2 / 3)}


def test_turn_spacing_orders_turns() -> None:
    assert timedelta(0) < ld.TURN_SPACING


def test_locomo_summarize_and_rows() -> None:
    from bench import locomo

    rows = [
        {
            "category": 1,
            "memproxy@default": 1.0,
            "memproxy_block@default": 300,
            "latency@default": 0.01,
            "status@default": "injected",
            "memproxy@500": 1.0,
            "memproxy_block@500": 400,
            "topk@500": 0.0,
            "latency@500": 0.01,
            "status@500": "injected",
            "topk_short@500": False,
        },
        {
            "category": 4,
            "memproxy@default": 0.0,
            "memproxy_block@default": 0,
            "latency@default": 0.02,
            "status@default": "injected",
            "memproxy@500": 0.5,
            "memproxy_block@500": 0,
            "topk@500": 0.5,
            "latency@500": 0.03,
            "status@500": "degraded",
            "topk_short@500": True,
        },
    ]
    summary = locomo.summarize(rows, [500])
    assert summary["recall"]["memproxy"]["500"]["overall"] == pytest.approx(0.75)
    assert summary["recall"]["memproxy"]["default"]["overall"] == pytest.approx(0.5)
    assert "default" not in summary["recall"]["topk"]  # a baseline always has a budget
    assert summary["recall"]["topk"]["500"]["multi-hop"] == 0.0
    assert summary["diagnostics"]["500"]["degraded"] == 1
    assert summary["diagnostics"]["500"]["topk_short"] == 1
    assert summary["block_tokens"]["memproxy"]["default"]["median"] == 150.0
    assert summary["block_tokens"]["memproxy"]["500"]["max"] == 400.0
    printed = locomo.recall_rows(summary, [500])
    assert printed[0] == {
        "budget": "default",
        "method": "memproxy",
        "multi-hop": 100.0,
        "single-hop": 0.0,
        "overall": 50.0,
        "median_tokens": 150.0,
        "p90_tokens": 300.0,
        "mean_tokens": 150,
    }
    assert printed[2]["method"] == "topk"
    assert printed[2]["median_tokens"] == printed[2]["mean_tokens"] == ""
    lines = locomo.verdicts({**summary, "questions": 2}, [500])
    assert lines[0].startswith("default settings: recall 50.0 % in a median 150 block tokens")
    assert lines[1].startswith("memproxy - topk at 500 tokens, overall: +50.0 points")


def test_locomo_split_argument() -> None:
    from bench import locomo

    assert locomo.parse_args([]).data == locomo.DEFAULT_DATA
    assert locomo.parse_args(["other.json"]).data == Path("other.json")
    assert locomo.parse_args(["--data", "x.json"]).data == Path("x.json")
    with pytest.raises(SystemExit):
        locomo.parse_args(["a.json", "--data", "b.json"])


def test_locomo_smoke_arguments() -> None:
    from bench import locomo

    args = locomo.parse_args(["--smoke"])
    assert (args.conversations, args.questions, args.out) == (
        1,
        locomo.SMOKE_QUESTIONS,
        "locomo-smoke",
    )
    assert args.budgets == list(locomo.SMOKE_BUDGETS)


def test_locomo_top_k_configures_the_server() -> None:
    """``--top-k`` goes into the started server's ``memory.top_k``: X-Memory-Top-K can only
    lower the tenant's top_k, so sending it measured the default."""
    from bench import locomo

    timeouts = locomo.RELAXED_TIMEOUTS
    config = locomo.measured_config(timeouts, 100)
    assert config["memory"]["top_k"] == 100
    assert config["memory"]["deadline_ms"] == timeouts["memory"]["deadline_ms"]
    assert locomo.measured_config(timeouts, None) == timeouts
    assert locomo.measured_config({}, 20) == {"memory": {"top_k": 20}}
    started = locomo.parse_args(["--top-k", "100"])
    assert locomo.header_top_k(started) is None  # the config carries it
    running = locomo.parse_args(["--top-k", "100", "--url", "http://x"])
    assert locomo.header_top_k(running) == 100  # all a running server can be told


def test_locomo_variants_are_named_settings() -> None:
    """``--variant NAME=JSON`` (repeatable) names memory settings; a bad one is refused."""
    from bench import locomo

    args = locomo.parse_args(["--variant", 'top40={"top_k": 40}', "--variant", "same={}"])
    assert args.variant == [("top40", {"top_k": 40}), ("same", {})]
    assert locomo.parse_args([]).variant == []
    for bad in ("top40", '={"top_k": 40}', "x=[1]", "x=nope"):
        with pytest.raises(SystemExit):
            locomo.parse_args(["--variant", bad])


def test_locomo_summarize_reports_variant_methods() -> None:
    """A variant's recall and block tokens are summarized and printed after the fixed methods;
    methods not named are not."""
    from bench import locomo

    rows = [
        {
            "category": 1,
            "memproxy@default": 1.0,
            "memproxy_block@default": 100,
            "memproxy-top40@default": 0.5,
            "memproxy-top40_block@default": 80,
            "memproxy-other@default": 0.0,
        }
    ]
    summary = locomo.summarize(rows, [], ["memproxy-top40"])
    assert summary["recall"]["memproxy-top40"]["default"]["overall"] == pytest.approx(0.5)
    assert summary["block_tokens"]["memproxy-top40"]["default"]["median"] == 80.0
    assert "memproxy-other" not in summary["recall"]
    printed = locomo.recall_rows(summary, [])
    assert [r["method"] for r in printed] == ["memproxy", "memproxy-top40"]
    assert printed[1]["overall"] == 50.0


def test_locomo_before_server_keeps_the_rest_of_the_config() -> None:
    from bench import locomo

    config = locomo.before_config(locomo.measured_config(locomo.RELAXED_TIMEOUTS, 100))
    assert config["memory"]["top_k"] == 100
    assert config["memory"]["token_price"] == locomo.BEFORE_CONFIG["memory"]["token_price"]
    assert config["memory"]["lexical_candidates"] is False
    assert "stage_timeouts" in config["memory"]


def test_locomo_replay_scores_what_is_packed() -> None:
    """The replay's recall is that of the packed memories, not of the candidate pool."""
    from bench import locomo_replay
    from proxy.context.assembler import AssemblerConfig
    from proxy.context.records import Candidate, MemoryRecord
    from proxy.context.render import BlockTokens
    from proxy.tokenizer import tiktoken_tokenizer

    def hit(dia: str, text: str, similarity: float) -> Candidate:
        record = MemoryRecord(
            id=dia,
            tenant="t",
            user="u",
            source="learnings",
            content=text,
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            metadata={"dia_id": dia},
        )
        return Candidate(record, similarity)

    question = ld.Question("s", 4, "Which breed did Anna adopt?", ("D1:1", "D1:2"))
    pool = [hit("D1:1", "Anna adopted a beagle.", 0.9), hit("D1:2", "The sky was grey.", 0.0)]
    tokens = BlockTokens("o200k_base", tiktoken_tokenizer().counter("o200k_base"))
    fill = locomo_replay.replay([question], [pool], AssemblerConfig(token_price=0.0), tokens)
    priced = locomo_replay.replay([question], [pool], AssemblerConfig(), tokens)
    assert fill["overall"] == 100.0  # both fit and fill takes both
    assert priced["overall"] == 50.0  # the unrelated one does not pay for its line
    assert priced["median_tokens"] < fill["median_tokens"]
    assert locomo_replay.carried(question, pool) == 1.0
