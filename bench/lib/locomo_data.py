"""LoCoMo as memproxy memories and scored questions: pure functions, no I/O.

A LoCoMo sample is one long conversation between two speakers over many dated sessions, with
per-session observations (each citing the dialog turn it came from as ``D<session>:<turn>``),
per-session summaries and question/answer pairs whose ``evidence`` lists the turns that hold the
answer. The benchmark stores all three kinds of text for one user and asks how many of a
question's evidence turns the injected memories carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

DIA_ID = re.compile(r"D\d+:\d+")
SESSION_KEY = re.compile(r"session_(\d+)")
SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Turns of one session are spaced this far apart so their created_at keeps the dialog order.
TURN_SPACING = timedelta(minutes=1)


@dataclass(frozen=True)
class Question:
    """A LoCoMo question with the dialog turns that hold its answer."""

    sample_id: str
    category: int
    text: str
    evidence: tuple[str, ...]


def parse_session_date(text: str) -> datetime:
    """Parse LoCoMo's ``'1:56 pm on 8 May, 2023'`` as a UTC datetime."""
    cleaned = " ".join(text.replace(",", ", ").split()).replace(" ,", ",")
    return datetime.strptime(cleaned, SESSION_DATE_FORMAT).replace(tzinfo=UTC)


def dia_ids(value: Any) -> tuple[str, ...]:
    """Return every ``D<s>:<t>`` id in ``value``: a string (``'D8:6; D9:17'``), list or nesting."""
    if isinstance(value, str):
        return tuple(DIA_ID.findall(value))
    if isinstance(value, Iterable) and not isinstance(value, bytes | Mapping):
        return tuple(found for item in value for found in dia_ids(item))
    return ()


def session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    """Return the numbers of the sessions that have a date and at least one turn, in order."""
    numbers = []
    for key, turns in conversation.items():
        match = SESSION_KEY.fullmatch(key)
        if match and turns and f"{key}_date_time" in conversation:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def shift_to(times: Sequence[datetime], now: datetime) -> list[datetime]:
    """Shift all ``times`` by one offset so that the latest becomes ``now`` (order is kept)."""
    if not times:
        return []
    offset = now - max(times)
    return [t + offset for t in times]


def turn_content(turn: Mapping[str, Any]) -> str:
    """Render a dialog turn as ``'Speaker: text'``, describing a shared photo when there is one."""
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def build_memories(sample: Mapping[str, Any], user: str, now: datetime) -> list[dict[str, Any]]:
    """Return the ``POST /v1/memories`` items of one sample: learnings, summaries, conversation.

    ``created_at`` comes from the session dates, turns spaced a minute apart, all shifted so the
    latest memory is ``now``.
    """
    conversation = sample["conversation"]
    observations = sample.get("observation", {})
    summaries = sample.get("session_summary", {})
    items: list[dict[str, Any]] = []
    times: list[datetime] = []
    for number in session_numbers(conversation):
        started = parse_session_date(conversation[f"session_{number}_date_time"])
        for facts in observations.get(f"session_{number}_observation", {}).values():
            for fact in facts:
                text, source_ids = fact[0], dia_ids(fact[1:])
                metadata = {"dia_id": source_ids[0] if len(source_ids) == 1 else list(source_ids)}
                items.append({"source": "learnings", "content": text, "metadata": metadata})
                times.append(started)
        turns = conversation[f"session_{number}"]
        for index, turn in enumerate(turns):
            metadata = {"dia_id": turn["dia_id"], "session": number, "speaker": turn["speaker"]}
            content = turn_content(turn)
            items.append({"source": "conversation", "content": content, "metadata": metadata})
            times.append(started + index * TURN_SPACING)
        summary = summaries.get(f"session_{number}_summary")
        if summary:
            items.append(
                {"source": "summaries", "content": summary, "metadata": {"session": number}}
            )
            times.append(started + len(turns) * TURN_SPACING)
    for item, created in zip(items, shift_to(times, now), strict=True):
        item["user"] = user
        item["created_at"] = created.isoformat()
    return items


def questions(
    sample: Mapping[str, Any], categories: Iterable[int] = tuple(CATEGORIES)
) -> list[Question]:
    """Return the sample's questions of ``categories`` that cite at least one evidence turn."""
    wanted = set(categories)
    found = []
    for qa in sample.get("qa", []):
        evidence = dia_ids(qa.get("evidence", []))
        if qa.get("category") in wanted and evidence:
            found.append(
                Question(sample["sample_id"], int(qa["category"]), qa["question"], evidence)
            )
    return found


def carried_dia_ids(memories: Iterable[Mapping[str, Any]]) -> set[str]:
    """Return the dialog-turn ids that the memories' metadata carries."""
    return {d for memory in memories for d in dia_ids((memory.get("metadata") or {}).get("dia_id"))}


def evidence_recall(evidence: Sequence[str], memories: Iterable[Mapping[str, Any]]) -> float:
    """Return the share of ``evidence`` ids carried by ``memories`` (0..1)."""
    wanted = set(evidence)
    if not wanted:
        raise ValueError("a question without evidence has no recall")
    return len(wanted & carried_dia_ids(memories)) / len(wanted)


def fill_budget(
    hits: Sequence[Mapping[str, Any]], budget: int, count: Callable[[str], int]
) -> list[Mapping[str, Any]]:
    """Take hits in rank order while they fit ``budget`` tokens; one too big is skipped, not a stop.

    This is the top-k baseline: no scoring, no dedup, just similarity order and the same budget.
    """
    chosen: list[Mapping[str, Any]] = []
    used = 0
    for hit in hits:
        tokens = count(str(hit["content"]))
        if used + tokens <= budget:
            chosen.append(hit)
            used += tokens
    return chosen


def mean_by_category(recalls: Iterable[tuple[int, float]]) -> dict[str, float]:
    """Average (category, recall) pairs per category name and ``overall`` (mean over questions)."""
    sums: dict[str, list[float]] = {}
    for category, recall in recalls:
        sums.setdefault(CATEGORIES.get(category, str(category)), []).append(recall)
        sums.setdefault("overall", []).append(recall)
    return {name: sum(values) / len(values) for name, values in sums.items()}
