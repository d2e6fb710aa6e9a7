"""Helpers of the embedded store's queries."""

from __future__ import annotations

from uuid import UUID

import pytest

from proxy.memory.edge_query import uuid_of
from proxy.memory.points import point_id

PID = point_id("t1", "m1")


@pytest.mark.parametrize("given", [PID, UUID(PID), PID.upper()])
def test_uuid_of_gives_the_same_uuid_for_every_spelling(given: str | UUID) -> None:
    assert uuid_of(given) == UUID(PID)
    assert isinstance(uuid_of(given), UUID)


def test_uuid_of_refuses_what_is_not_a_uuid() -> None:
    with pytest.raises(ValueError, match="hexadecimal"):
        uuid_of("not-a-uuid")
