"""Helpers of the embedded store's queries."""

from __future__ import annotations

from uuid import UUID

import pytest

from proxy.memory.edge_query import id_of, key_of
from proxy.memory.points import point_id, point_key

PID = point_id("t1", "m1")


@pytest.mark.parametrize("given", [PID, UUID(PID), PID.upper()])
def test_key_of_gives_the_uuids_integer_for_every_spelling(given: str | UUID) -> None:
    assert key_of(given) == UUID(PID).int == point_key("t1", "m1")
    assert UUID(id_of(key_of(given))) == UUID(PID)  # the shard reads this form too


def test_key_of_refuses_what_is_not_a_uuid() -> None:
    with pytest.raises(ValueError, match="hexadecimal"):
        key_of("not-a-uuid")
