"""Reconciliation: add, no-op, supersede; nothing the model says deletes a memory (adr/0112)."""

from __future__ import annotations

from datetime import UTC, datetime

from proxy.memory.extraction import Fact, handles
from proxy.memory.inputs import MemoryInput
from proxy.memory.reconcile import Add, Known, Outcome, Supersede, apply, plan
from proxy.memory.retriever import Retrieval
from proxy.memory.service import MemoryService
from tests.fakes.cache import FakeCache
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.store import FakeStore
from tests.memory.support import record

NOW = datetime(2026, 11, 23, tzinfo=UTC)
PORTO = record("porto", content="The user lives in Porto.")
TEA = record("tea", content="The user likes green tea.")
SHOWN = handles([PORTO, TEA])  # m1 = porto, m2 = tea


def test_plan_rules() -> None:
    facts = [
        Fact("the user lives in porto"),  # a shown memory says it: known
        Fact("The user lives in Berlin.", replaces="m1"),  # updates m1
        Fact("The user moved to Berlin in 2026.", replaces="m1"),  # m1 already replaced
        Fact("The user has a cat.", replaces="m9"),  # no such handle: added
        Fact("The user has a cat!"),  # said twice in one answer
        Fact("The user likes coffee.", replaces=None),
    ]
    assert plan(facts, SHOWN) == [
        Known(facts[0]),
        Supersede(facts[1], PORTO),
        Add(facts[2]),
        Add(facts[3]),
        Known(facts[4]),
        Add(facts[5]),
    ]


def service() -> tuple[MemoryService, FakeStore]:
    store = FakeStore(dimensions=4)
    return MemoryService(store, FakeEmbedder(4), FakeCache(), clock=lambda: NOW), store


async def test_apply_adds_and_supersedes_keeping_the_old_memory() -> None:
    svc, store = service()
    (old,) = await svc.write("t1", [MemoryInput(content="The user lives in Porto.", user="u")])
    shown = handles([old])
    facts = [Fact("The user lives in Berlin.", replaces="m1"), Fact("The user has a cat.")]
    outcome = await apply(svc, "t1", "u", plan(facts, shown), {"session": "s1"})
    assert outcome == Outcome(added=1, superseded=1, skipped=0)
    kept = await svc.get("t1", old.id)  # the old memory is still there, marked and linked
    assert kept.superseded_by is not None
    new = await svc.get("t1", kept.superseded_by)
    assert (new.content, new.supersedes, new.source) == (
        "The user lives in Berlin.",
        old.id,
        "learnings",
    )
    assert new.metadata == {"session": "s1", "capture": "facts"}
    assert [r.id for r in await svc.history("t1", new)] == [old.id]
    found = await svc.retriever.retrieve("t1", Retrieval("where does the user live", "u", 10))
    assert old.id not in {hit.record.id for hit in found}  # out of retrieval
    assert await store.count("t1") == 3


async def test_a_fact_repeating_an_unshown_memory_is_skipped() -> None:
    svc, store = service()
    await svc.write("t1", [MemoryInput(content="The user has a cat.", user="u")])
    outcome = await apply(svc, "t1", "u", plan([Fact("the user has a cat")], {}), {})
    assert outcome == Outcome(skipped=1)
    assert await store.count("t1") == 1


async def test_known_facts_write_nothing() -> None:
    svc, store = service()
    outcome = await apply(svc, "t1", "u", [Known(Fact("x"))], {})
    assert outcome == Outcome(skipped=1)
    assert store.adds == []


async def test_an_old_memory_is_superseded_once() -> None:
    svc, _ = service()
    (old,) = await svc.write("t1", [MemoryInput(content="Lives in Porto", user="u")])
    await apply(svc, "t1", "u", [Supersede(Fact("Lives in Berlin"), old)], {})
    first = (await svc.get("t1", old.id)).superseded_by
    # A later answer that still names the old memory adds its fact but does not relink it.
    outcome = await apply(svc, "t1", "u", [Supersede(Fact("Lives in Rome"), old)], {})
    assert outcome == Outcome(added=1)
    assert (await svc.get("t1", old.id)).superseded_by == first
    rome = [r for r in (await svc.list("t1")).records if r.content == "Lives in Rome"]
    assert rome[0].supersedes is None
