"""The answers the handlers build match the response models the OpenAPI document is made of."""

from __future__ import annotations

from proxy.context.records import Candidate
from proxy.memory import outputs
from proxy.memory.service import memory_object, search_hit_object
from tests.memory.support import record

RECORD = record("m", tokens={"o200k_base": 2, "cl100k_base": 2}, metadata={"a": [1]})


def test_memory_object_is_a_memory() -> None:
    shaped = memory_object(RECORD)
    assert set(shaped) == set(outputs.Memory.model_fields)
    assert outputs.Memory.model_validate(shaped, strict=True).model_dump() == shaped


def test_search_hit_is_a_search_hit() -> None:
    shaped = search_hit_object(Candidate(RECORD, 0.25))
    assert set(shaped) == set(outputs.SearchHit.model_fields)
    assert outputs.SearchHit.model_validate(shaped, strict=True).model_dump() == shaped
