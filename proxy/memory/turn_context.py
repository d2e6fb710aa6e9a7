"""A dialog turn's context (adr/0142): the turn before it, embedded with it.

A dialog turn is a memory of source ``conversation`` (``filters.DIALOG_SOURCE``: the turns whose
neighbours share gains and are looked up, adr/0114 and adr/0122). Its context is the dialog turn
of the same user and session (``metadata["session"]``; turns without one form one session)
written just before it in the same batch, by ``created_at`` (ties: the batch's order), if at
most ``NEIGHBOUR_WINDOW_S`` earlier: the turn beside it, as the neighbour gains define it, and
not a turn further back whose successor is in another batch (an export lists memories in id
order). The batch's first dialog turn without one takes ``preceding`` (capture: the message
before the captured one in the request). Nothing is looked up in the store, so a single write
has no context. A context is cut to its last ``TURN_CONTEXT_MAX_CHARS`` characters.

A context is a copy of another memory's text, so it must not outlive it (adr/0144): a turn takes
no context from a turn of its batch that expires before it does (then the copy would stay in its
vector after the original was purged); forgetting a memory's text on a delete or a replacement
is the write path's (``MemoryService.forget_copies``), found by ``context_key``. Pure.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from proxy.defaults import NEIGHBOUR_WINDOW_S, TURN_CONTEXT_MAX_CHARS
from proxy.memory.duplicates import words_key
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
    @property
    def expires_at(self) -> datetime | None: ...


def clipped(text: str, limit: int = TURN_CONTEXT_MAX_CHARS) -> str:
    """The last ``limit`` characters of ``text`` (the end is what the next turn answers)."""
    # Not ``text[-limit:]``: at ``limit`` 0 that is the whole text.
    return text[len(text) - limit :] if len(text) > limit else text


def context_key(source: str) -> str:
    """The key a context is stored under: the words key of the whole text it was cut from,
    the key that text's own memory is stored under (``duplicates.words_key``), so forgetting
    that memory finds the copies (adr/0144)."""
    return words_key(source)


def outlives(source: Turn, turn: Turn) -> bool:
    """Whether ``source`` expires no earlier than ``turn``: only then may it be its context."""
    if source.expires_at is None:
        return True
    return turn.expires_at is not None and turn.expires_at <= source.expires_at


def turn_sources(
    turns: Sequence[Turn], preceding: str = "", *, window_s: float = NEIGHBOUR_WINDOW_S
) -> list[str]:
    """For each of ``turns``, in order, the whole text its context is cut from: ``""`` unless
    it is a dialog turn with a turn before it (in the batch and outliving it, or ``preceding``
    for the batch's first dialog turn)."""
    sources = [""] * len(turns)
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
            if gap <= window_s and outlives(turns[before], turns[at]):
                sources[at] = turns[before].content
    first = next((i for i, t in enumerate(turns) if t.source == DIALOG_SOURCE), None)
    if preceding and first is not None and not sources[first]:
        sources[first] = preceding
    return sources


def turn_contexts(
    turns: Sequence[Turn],
    preceding: str = "",
    *,
    window_s: float = NEIGHBOUR_WINDOW_S,
    limit: int = TURN_CONTEXT_MAX_CHARS,
) -> list[str]:
    """For each of ``turns``, in order, its context: ``turn_sources`` cut to ``limit``."""
    return [clipped(source, limit) for source in turn_sources(turns, preceding, window_s=window_s)]
