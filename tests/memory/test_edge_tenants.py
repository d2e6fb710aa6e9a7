"""Whether the embedded store searches with the tenant condition."""

from __future__ import annotations

from proxy.memory.edge_tenants import ShardTenants


def test_the_shard_is_looked_up_once_then_known() -> None:
    tenants = ShardTenants()
    asked: list[str] = []

    def look_up() -> bool:
        asked.append("t1")
        return False

    assert tenants.others("t1", look_up) is False
    assert tenants.others("t1", look_up) is False
    assert asked == ["t1"]


def test_the_sole_tenants_shard_holds_others_for_another_tenant() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", lambda: False) is False
    assert tenants.others("t2", lambda: False) is True  # t1's memories are others to t2
    assert tenants.others("t1", lambda: True) is False  # and t1 is still alone


def test_another_tenants_write_makes_the_condition_needed() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", lambda: False) is False
    tenants.note(["t1"])
    assert tenants.others("t1", lambda: False) is False
    tenants.note(["t2"])
    assert tenants.others("t1", lambda: False) is True
    assert tenants.others("t2", lambda: False) is True


def test_two_tenants_written_before_any_lookup_need_it() -> None:
    tenants = ShardTenants()
    tenants.note(["t1", "t2"])
    assert tenants.others("t1", lambda: False) is True


def test_a_lookup_that_finds_another_tenant_needs_it() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", lambda: True) is True
    assert tenants.others("t2", lambda: False) is True  # known now: several tenants


def test_a_note_wins_over_a_lookup_that_started_before_it() -> None:
    tenants = ShardTenants()

    def look_up_racing_a_write() -> bool:
        tenants.note(["t2"])  # the write lands while the shard is being asked
        return False

    assert tenants.others("t1", look_up_racing_a_write) is True


def test_the_tenants_own_write_racing_its_lookup_keeps_it_alone() -> None:
    tenants = ShardTenants()

    def look_up_racing_a_write() -> bool:
        tenants.note(["t1"])
        return False

    assert tenants.others("t1", look_up_racing_a_write) is False


def test_another_tenants_hit_is_noted() -> None:
    tenants = ShardTenants()
    assert tenants.others("t1", lambda: False) is False
    tenants.note_others()
    assert tenants.others("t1", lambda: False) is True
