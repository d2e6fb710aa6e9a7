"""Where one request's memory blocks go: the position rule applied, earlier blocks recalled.

With position ``turn`` (``proxy/context/position.py``, adr/0111) the pipeline recalls the blocks
earlier turns of this conversation carried (``proxy/cache/blocks.py``) and puts them back at
their slots, so the previous upstream prompt stays a byte-identical prefix of this one. The
recall (one cache round trip) runs alongside the search, which does not depend on it; a recall
that fails is a miss and marks the request degraded, never failing it. Rules:

- Re-inserted blocks are prompt tokens like the conversation's own: they count against the
  context window (``available_tokens``), earliest kept first while they fit (``fitting``). The
  cap (``memory.max_tokens``, ``X-Memory-Max-Tokens``) bounds what this turn adds: the new block
  gets ``min(memory_tokens, available_tokens - re-inserted tokens)``.
- The turn's memories are chosen as with position ``system`` (the same candidates, room and
  packing); those a re-inserted block already shows are visible to the model, so the new block
  carries only the others (``unseen``). The model sees the same memories for the turn, the
  ones it has seen are not repeated, and the new block shrinks as a conversation stays on topic.
- When the latest turn's own block is remembered (a tool-call round trip, a retried request),
  it is reused as it was, not retrieved again, while it fits the room: the prompt up to the
  latest tool result stays cacheable too.
- Without a slot (no user message that takes text), the block goes to the system prompt as
  with position ``system``, unless that would put it in front of a cache breakpoint: then
  nothing is injected. Position ``system`` obeys the same rule: where the system prompt would
  sit in front of a breakpoint, the block takes the turn's slot instead (nothing is put back).
  The API adapter writes the blocks into its own body (``ApiAdapter.inject``); slots index the
  adapter's turns (``Conversation.turns``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from proxy.apis.adapter import Blocks, Injected
from proxy.cache.blocks import Remembered
from proxy.context.assembler import Assembly
from proxy.context.position import Slot, fitting
from proxy.context.records import Candidate
from proxy.defaults import Position


@dataclass(frozen=True, slots=True)
class Placement:
    """One request's blocks: the new block's slot and key, earlier blocks to put back."""

    position: Position
    slot: Slot | None = None
    key: str | None = None  # where this turn's block is remembered
    earlier: tuple[tuple[Slot, Remembered], ...] = ()
    reused: Remembered | None = None  # this turn's block, remembered from an earlier request
    left_out: int = 0  # earlier blocks found but past the context window's room
    already: tuple[str, ...] = ()  # ids chosen for this turn that an earlier block shows
    stamp: int = 0  # the tenant's forget stamp the recall saw (``proxy/cache/blocks.py``)

    @property
    def earlier_tokens(self) -> int:
        """Tokens of the re-inserted blocks."""
        return sum(block.tokens for _, block in self.earlier)

    @property
    def visible(self) -> frozenset[str]:
        """Ids of the memories the re-inserted blocks already show."""
        return frozenset(i for _, block in self.earlier for i in block.ids)

    def showing(self, already: tuple[str, ...]) -> Placement:
        """This placement, noting the turn's memories an earlier block already shows."""
        return replace(self, already=already)

    def unkept(self) -> Placement:
        """This placement, its turn's block not to be remembered."""
        return replace(self, key=None)

    def reusable(self, room: int) -> Placement:
        """This placement, without its reused block if that no longer fits ``room`` (a lower
        cap, a longer conversation): the turn's block is then chosen anew."""
        if self.reused is None or self.reused.tokens <= room:
            return self
        return replace(self, reused=None)

    def room(self, memory_tokens: int, available_tokens: int) -> int:
        """Tokens the new block may use once the re-inserted blocks have theirs."""
        return max(0, min(memory_tokens, available_tokens - self.earlier_tokens))


def recalled(
    placement: Placement,
    indices: Sequence[int],
    keys: Sequence[str | None],
    found: Sequence[Remembered | None],
    available_tokens: int,
    stamp: int | None = 0,
) -> Placement:
    """``placement`` with the blocks ``found`` under ``keys`` (those of messages ``indices``).

    The slot's own block, if found, is reused; earlier ones go back while they fit in
    ``available_tokens``. ``stamp``: the tenant's forget stamp the recall read, kept with this
    turn's block (``None``: unknown, so the block is not kept).
    """
    if placement.slot is None:
        return placement
    here = placement.slot.index
    reused = None
    earlier: list[tuple[Slot, Remembered]] = []
    for index, block in zip(indices, found, strict=True):
        if block is None:
            continue
        if index == here:
            reused = block
        else:
            earlier.append((Slot(index, block.after), block))
    kept = fitting([block.tokens for _, block in earlier], available_tokens)
    key = dict(zip(indices, keys, strict=True)).get(here) if stamp is not None else None
    return Placement(
        placement.position,
        placement.slot,
        key,
        tuple(earlier[:kept]),
        # Reused only at the same slot: a breakpoint added since may now pin what it preceded.
        reused if reused is not None and reused.after == placement.slot.after else None,
        len(earlier) - kept,
        stamp=stamp or 0,
    )


def unseen(
    assembly: Assembly, hits: Sequence[Candidate], visible: frozenset[str]
) -> tuple[list[Candidate], tuple[str, ...]] | None:
    """The chosen candidates an earlier block does not show yet, and the ids of those it does;
    ``None`` when it shows none of them (the assembly stands as it is)."""
    chosen = set(assembly.packed_ids)
    already = tuple(sorted(chosen & visible))
    if not already:
        return None
    return [hit for hit in hits if hit.record.id in chosen - visible], already


def remembered(placement: Placement, assembly: Assembly) -> Remembered:
    """This turn's block as it is kept for the turns after it."""
    after = placement.slot.after if placement.slot is not None else 0
    ids = assembly.packed_ids
    return Remembered(assembly.block, after, assembly.rendered_tokens, ids, placement.stamp)


def shown(placement: Placement | None, assembly: Assembly | None) -> tuple[int, int]:
    """How many memories this turn's block shows, and its tokens (re-inserted ones aside)."""
    if placement is not None and placement.reused is not None:
        return len(placement.reused.ids), placement.reused.tokens
    if assembly is not None and assembly.block:
        return len(assembly.packed_ids), assembly.rendered_tokens
    return 0, 0


def blocks(placement: Placement, block: str) -> Blocks:
    """What the API adapter writes: this turn's block (the remembered one when reused) at the
    slot, and the earlier turns' blocks at theirs."""
    if placement.reused is not None:
        block = placement.reused.block
    earlier = tuple((at, kept.block) for at, kept in placement.earlier)
    return Blocks(block, placement.position, placement.slot, earlier)


def describe(
    placement: Placement | None, position: Position, injected: Injected
) -> dict[str, object]:
    """Explain's ``placement``: where this turn's block went (``message``: its index in the
    API's turns, ``None`` when nowhere or outside them) and what was put back."""
    placement = placement or Placement(position)
    where = placement.slot
    held = injected.message if injected.held else None
    part = where.after if where is not None and held == where.index else None
    return {
        "position": placement.position,
        "message": held,
        "part": part,
        "reused": placement.reused is not None,
        "reinserted": [
            {"message": at.index, "part": at.after, "tokens": block.tokens}
            for at, block in placement.earlier
        ],
        "reinserted_tokens": placement.earlier_tokens,
        "left_out": placement.left_out,
        "shown_earlier": list(placement.already),
    }
