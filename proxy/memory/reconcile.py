"""Reconciliation: what each extracted fact does to the user's memories (adr/0112).

A fact is compared with the user's closest live memories (the ones the extraction prompt showed,
by handle) and becomes one of:

- ``Known`` (a no-op): it says what a shown memory says (``duplicates.same_memory``), or what
  an earlier fact of the same answer said;
- ``Supersede``: the model named a shown memory it ``replaces``; the fact is written and the old
  memory is marked ``superseded_by`` it. The old memory stays: visible in the API and exports,
  out of retrieval. Each shown memory is replaced at most once per answer;
- ``Add``: anything else (also a fact naming a handle that was not shown).

The model's judgment can only add memories and mark old ones superseded: nothing it says deletes
or rewrites a memory. Writing goes through ``MemoryService`` (``apply``), whose duplicate check
still turns a fact that repeats an unshown memory into a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from proxy.context.records import MemoryRecord
from proxy.memory.duplicates import normal_form, same_memory
from proxy.memory.extraction import Fact
from proxy.memory.inputs import FactInput
from proxy.memory.service import MemoryService

FACT_SOURCE = "learnings"  # durable knowledge about the user, as the engine's sources go
CAPTURE_TAG = "facts"  # metadata.capture of an extracted fact


@dataclass(frozen=True, slots=True)
class Add:
    """Store the fact as a new memory."""

    fact: Fact


@dataclass(frozen=True, slots=True)
class Supersede:
    """Store the fact and mark ``old`` superseded by it."""

    fact: Fact
    old: MemoryRecord


@dataclass(frozen=True, slots=True)
class Known:
    """Nothing to store: the fact is already known."""

    fact: Fact


Action = Add | Supersede | Known


@dataclass(frozen=True, slots=True)
class Outcome:
    """What applying a plan did: facts added (new memories that replaced none), superseded
    (new memories that replaced one), skipped (already known)."""

    added: int = 0
    superseded: int = 0
    skipped: int = 0


def plan(facts: Sequence[Fact], shown: Mapping[str, MemoryRecord]) -> list[Action]:
    """Decide each fact's action (pure; rules in the module docstring)."""
    actions: list[Action] = []
    said: set[str] = set()
    replaced: set[str] = set()
    for fact in facts:
        key = normal_form(fact.content)
        if key in said or any(same_memory(fact.content, m.content) for m in shown.values()):
            actions.append(Known(fact))
            continue
        said.add(key)
        old = shown.get(fact.replaces) if fact.replaces is not None else None
        if old is not None and old.id not in replaced:
            replaced.add(old.id)
            actions.append(Supersede(fact, old))
        else:
            actions.append(Add(fact))
    return actions


async def apply(
    service: MemoryService,
    tenant: str,
    user: str,
    actions: Sequence[Action],
    metadata: Mapping[str, object],
) -> Outcome:
    """Write the plan's facts as one batch, then mark what they supersede."""
    writes = [await _current(service, tenant, a) for a in actions if not isinstance(a, Known)]
    skipped = len(actions) - len(writes)
    if not writes:
        return Outcome(skipped=skipped)
    inputs = [
        FactInput(
            content=action.fact.content,
            user=user,
            source=FACT_SOURCE,
            expires_at=action.fact.expires_at,
            metadata={**metadata, "capture": CAPTURE_TAG},
            replaced=action.old.id if isinstance(action, Supersede) else None,
        )
        for action in writes
    ]
    added = superseded = 0
    for action, (record, stored) in zip(
        writes, await service.write_unique(tenant, inputs), strict=True
    ):
        # A fact that repeats a memory it was not shown is still known: the write path said so.
        if not stored and not isinstance(action, Supersede):
            skipped += 1
            continue
        # Written first, marked second: a failure in between leaves both memories live, and loses
        # nothing.
        if (
            isinstance(action, Supersede)
            and await service.supersede(tenant, action.old.id, record.id) is not None
        ):
            superseded += 1
            continue
        if stored:
            added += 1
        else:
            skipped += 1
    return Outcome(added, superseded, skipped)


async def _current(service: MemoryService, tenant: str, action: Add | Supersede) -> Add | Supersede:
    """A supersession of a memory that is gone or was replaced since it was shown is an add:
    the first replacement stands, and the new fact links to nothing."""
    if isinstance(action, Add):
        return action
    current = await service.store.get(tenant, action.old.id)
    if current is None or current.superseded_by is not None:
        return Add(action.fact)
    return action
