"""Which tenants the embedded store searches with the liveness condition."""

from __future__ import annotations

from proxy.memory.edge_lifecycle import LifecycleTenants


def test_a_tenant_is_looked_up_once_then_known() -> None:
    tenants = LifecycleTenants()
    asked: list[str] = []

    def look_up() -> bool:
        asked.append("t1")
        return False

    assert tenants.may_hold("t1", look_up) is False
    assert tenants.may_hold("t1", look_up) is False
    assert asked == ["t1"]


def test_a_note_wins_over_a_lookup_that_started_before_it() -> None:
    tenants = LifecycleTenants()

    def look_up_racing_a_write() -> bool:
        tenants.note(["t1"])  # the write lands while the shard is being asked
        return False

    assert tenants.may_hold("t1", look_up_racing_a_write) is True
    assert tenants.may_hold("t1", lambda: False) is True


def test_past_the_bound_every_tenant_is_looked_up_again() -> None:
    tenants = LifecycleTenants(max_tenants=2)
    tenants.note(["a"])
    assert tenants.may_hold("b", lambda: False) is False
    assert tenants.may_hold("c", lambda: True) is True  # full: forgets a and b first
    assert tenants.may_hold("a", lambda: False) is False
    assert tenants.may_hold("c", lambda: False) is True
