"""Whether the embedded store searches with the tenant condition."""

from __future__ import annotations

from collections.abc import Callable, Collection

from proxy.memory.edge_tenants import ShardTenants


def holds(*tenants: str) -> Callable[[], Collection[str]]:
    """A lookup of a shard holding ``tenants``."""
    return lambda: tenants


def test_the_shard_is_looked_up_once_then_known() -> None:
    tenants = ShardTenants()
    asked: list[str] = []

    def look_up() -> list[str]:
        asked.append("t1")
        return ["t1"]

    assert tenants.others("t1", look_up) is False
    assert tenants.others("t1", look_up) is False
    assert asked == ["t1"]


def test_the_sole_tenants_shard_holds_others_for_another_tenant() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", holds("t1")) is False
    assert tenants.others("t2", holds("t1")) is True  # t1's memories are others to t2
    assert tenants.others("t1", holds("t1", "t2")) is False  # and t1 is still alone


def test_a_first_search_by_a_tenant_without_memories_leaves_the_sole_tenant_alone() -> None:
    tenants = ShardTenants()
    assert tenants.others("new", holds("t1")) is True
    assert tenants.others("t1", holds("t1", "new")) is False


def test_an_empty_shard_is_the_first_writers() -> None:
    tenants = ShardTenants()
    assert tenants.others("new", holds()) is False  # nothing to exclude
    tenants.note(["t1"])
    assert tenants.others("t1", holds("t1", "new")) is False
    assert tenants.others("new", holds()) is True


def test_another_tenants_write_makes_the_condition_needed() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", holds("t1")) is False
    tenants.note(["t1"])
    assert tenants.others("t1", holds("t1")) is False
    tenants.note(["t2"])
    assert tenants.others("t1", holds("t1")) is True
    assert tenants.others("t2", holds("t1")) is True


def test_two_tenants_written_before_any_lookup_need_it() -> None:
    tenants = ShardTenants()
    tenants.note(["t1", "t2"])
    assert tenants.others("t1", holds()) is True


def test_a_lookup_that_finds_two_tenants_needs_it() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", holds("t1", "t2")) is True
    assert tenants.others("t2", holds("t2")) is True  # known now: several tenants


def test_a_note_adds_to_a_lookup_that_started_before_it() -> None:
    tenants = ShardTenants()

    def look_up_racing_a_write() -> list[str]:
        tenants.note(["t2"])  # the write lands while the shard is being asked
        return ["t1"]

    assert tenants.others("t1", look_up_racing_a_write) is True


def test_the_tenants_own_write_racing_its_lookup_keeps_it_alone() -> None:
    tenants = ShardTenants()

    def look_up_racing_a_write() -> list[str]:
        tenants.note(["t1"])
        return []

    assert tenants.others("t1", look_up_racing_a_write) is False


def test_a_failed_lookup_keeps_the_condition_and_is_asked_again() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", lambda: None) is True
    assert tenants.others("t1", holds("t1")) is False


def test_another_tenants_hit_is_noted() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", holds("t1")) is False
    tenants.note_others()
    assert tenants.others("t1", holds("t1")) is True
