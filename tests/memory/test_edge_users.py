"""Which tenants the embedded store searches with the user condition."""

from __future__ import annotations

from proxy.memory.edge_users import TenantUsers


def test_a_pair_is_looked_up_once_then_known() -> None:
    users = TenantUsers()
    asked: list[str] = []

    def look_up() -> bool:
        asked.append("t1")
        return False

    assert users.others("t1", "u1", look_up) is False
    assert users.others("t1", "u1", look_up) is False
    assert asked == ["t1"]


def test_another_users_write_makes_the_condition_needed() -> None:
    users = TenantUsers()
    assert users.others("t1", "u1", lambda: False) is False
    assert users.others("t1", "", lambda: False) is False
    users.note([("t1", "u1"), ("t1", "")])  # the user's own and shared memories exclude nothing
    assert users.others("t1", "u1", lambda: False) is False
    users.note([("t1", "u2")])
    assert users.others("t1", "u1", lambda: False) is True
    assert users.others("t1", "", lambda: False) is True  # u2's memory is not shared
    assert users.others("t2", "u1", lambda: False) is False  # another tenant


def test_a_note_wins_over_a_lookup_that_started_before_it() -> None:
    users = TenantUsers()

    def look_up_racing_a_write() -> bool:
        users.note([("t1", "u2")])  # the write lands while the shard is being asked
        return False

    assert users.others("t1", "u1", look_up_racing_a_write) is True
    assert users.others("t1", "u2", lambda: False) is False  # u2's own: nothing to exclude


def test_a_foreign_hit_is_noted() -> None:
    users = TenantUsers()
    assert users.others("t1", "u1", lambda: False) is False
    users.note_others("t1", "u1")
    assert users.others("t1", "u1", lambda: False) is True


def test_past_the_bound_every_pair_is_looked_up_again() -> None:
    users = TenantUsers(max_entries=2)
    users.note_others("a", "u1")
    assert users.others("b", "u1", lambda: False) is False
    assert users.others("c", "u1", lambda: True) is True  # full: forgets a and b first
    assert users.others("a", "u1", lambda: False) is False


def test_a_note_that_fills_the_bound_is_kept() -> None:
    users = TenantUsers(max_entries=1)
    assert users.others("t1", "u1", lambda: False) is False
    users.note([("t1", "u2")])  # full: forgets the pair above, keeps this writer
    assert users.others("t1", "u1", lambda: False) is True  # the write is not visible yet
