"""A dialog turn's context (adr/0142): the turn before it, embedded with it.

A dialog turn is a memory of source ``conversation`` (``filters.DIALOG_SOURCE``: the turns whose
neighbours share gains and are looked up, adr/0114 and adr/0122). Its context is the dialog turn
written just before it in the same batch for the same user and session (``metadata["session"]``;
turns without one form one session); the batch's first dialog turn takes ``preceding`` instead
(capture: the message before the captured one in the request). Nothing is looked up in the
store, so a single write has no context. The context is cut to its last
``TURN_CONTEXT_MAX_CHARS`` characters. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from proxy.defaults import TURN_CONTEXT_MAX_CHARS
from proxy.memory.filters import DIALOG_SOURCE

SESSION_KEY = "session"


class Turn(Protocol):
    """What ``turn_contexts`` reads of a memory to write (``MemoryInput`` has it)."""

    @property
    def user(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, object]: ...


def clipped(text: str, limit: int = TURN_CONTEXT_MAX_CHARS) -> str:
    """The last ``limit`` characters of ``text`` (the end is what the next turn answers)."""
    return text[-limit:] if len(text) > limit else text


def turn_contexts(
    inputs: Sequence[Turn], preceding: str = "", limit: int = TURN_CONTEXT_MAX_CHARS
) -> list[str]:
    """For each of ``inputs``, in order, its context: ``""`` unless it is a dialog turn with a
    turn before it (in the batch, or ``preceding`` for the batch's first dialog turn)."""
    contexts: list[str] = []
    last: dict[tuple[str, str], str] = {}
    first = True
    for item in inputs:
        if item.source != DIALOG_SOURCE:
            contexts.append("")
            continue
        # repr: a session id is any JSON value, and 1 and "1" are different sessions.
        key = (item.user, repr(item.metadata.get(SESSION_KEY)))
        before = preceding if first else last.get(key, "")
        first = False
        contexts.append(clipped(before, limit))
        last[key] = item.content
    return contexts
