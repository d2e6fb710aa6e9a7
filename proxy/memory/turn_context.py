"""A dialog turn's context (adr/0142): the turn before it, embedded with it.

A dialog turn is a memory of source ``conversation`` (``filters.DIALOG_SOURCE``: the turns whose
neighbours share gains and are looked up, adr/0114 and adr/0122). Its context is the dialog turn
of the same user and session (``metadata["session"]``; turns without one form one session)
written just before it in the same batch, by ``created_at`` (ties: the batch's order), if at
most ``NEIGHBOUR_WINDOW_S`` earlier: the turn beside it, as the neighbour gains define it, and
not a turn further back whose successor is in another batch (an export lists memories in id
order). The batch's first dialog turn without one takes ``preceding`` (capture: the message
before the captured one in the request). Nothing is looked up in the store, so a single write
has no context. A context is cut to its last ``TURN_CONTEXT_MAX_CHARS`` characters. Pure.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from proxy.defaults import NEIGHBOUR_WINDOW_S, TURN_CONTEXT_MAX_CHARS
from proxy.memory.filters import DIALOG_SOURCE

SESSION_KEY = "session"


class Turn(Protocol):
    """What ``turn_contexts`` reads of a memory to write (``MemoryRecord`` has it)."""

    @property
    def user(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def metadata(self) -> Mapping[str, object]: ...


def clipped(text: str, limit: int = TURN_CONTEXT_MAX_CHARS) -> str:
    """The last ``limit`` characters of ``text`` (the end is what the next turn answers)."""
    return text[-limit:] if len(text) > limit else text


def turn_contexts(
    turns: Sequence[Turn],
    preceding: str = "",
    *,
    window_s: float = NEIGHBOUR_WINDOW_S,
    limit: int = TURN_CONTEXT_MAX_CHARS,
) -> list[str]:
    """For each of ``turns``, in order, its context: ``""`` unless it is a dialog turn with a
    turn before it (in the batch, or ``preceding`` for the batch's first dialog turn)."""
    contexts = [""] * len(turns)
    sessions: dict[tuple[str, str], list[int]] = {}
    for index, turn in enumerate(turns):
        if turn.source == DIALOG_SOURCE:
            # repr: a session id is any JSON value, and 1 and "1" are different sessions.
            key = (turn.user, repr(turn.metadata.get(SESSION_KEY)))
            sessions.setdefault(key, []).append(index)
    for indices in sessions.values():
        indices.sort(key=lambda i: turns[i].created_at)  # stable: ties keep the batch's order
        for before, at in itertools.pairwise(indices):
            gap = (turns[at].created_at - turns[before].created_at).total_seconds()
            if gap <= window_s:
                contexts[at] = clipped(turns[before].content, limit)
    first = next((i for i, t in enumerate(turns) if t.source == DIALOG_SOURCE), None)
    if preceding and first is not None and not contexts[first]:
        contexts[first] = clipped(preceding, limit)
    return contexts
