"""The seam between the one memory pipeline and the APIs it serves: ``ApiAdapter``.

The pipeline (``proxy/pipeline/pipeline.py``) knows one conversation shape, the chat
completions one: it budgets a chat body, builds the query from user messages and captures the
latest one. Each API memproxy serves is an adapter that translates its own body into that shape
(``Conversation``), writes the memory block back into its own shape, and reads its own answers
(JSON or stream) into a ``Completion``. Nothing else differs per API, so there is no second
pipeline and no second route: ``proxy/routes/with_memory.py`` forwards for any adapter.

Where the block goes is a parameter (``Position``): ``system`` puts it into the app's own system
prompt or instructions, after the app's text; ``turn`` puts it just before the latest user input,
which keeps everything before that turn a stable prompt-cache prefix (adr/0111). An adapter says
which positions it has (``positions``); the pipeline falls back to ``system``, which every API
has. For ``turn`` an adapter exposes its own turn list (``Conversation.turns``) and the
parameters of the position rule for its shapes (``TurnRule``): the pipeline finds the slot and
recalls earlier blocks over those turns (``proxy/context/position.py``, ``proxy/cache/blocks.py``),
and the adapter writes every block back (``inject`` with ``Blocks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.apis.answer import Answer
from proxy.context.documents import Document
from proxy.context.position import (
    BEHIND_BREAKPOINT_ROLES,
    USER_ROLES,
    PartPredicate,
    Slot,
    TextPart,
    chat_text_part,
    has_breakpoint,
)
from proxy.context.position import place as place_blocks
from proxy.context.position import slot as slot_of
from proxy.defaults import Position
from proxy.error_responses import ErrorShape
from proxy.pipeline.contract import Completion

SYSTEM: Position = "system"
TURN: Position = "turn"


@dataclass(frozen=True, slots=True)
class Conversation:
    """One request as the pipeline sees it, whatever API it came in.

    ``messages`` are chat-shaped (``role`` and ``content``: a string or ``text`` parts): the
    query is built from their user messages and the latest user text is what capture stores.
    ``billed`` is a chat completions body that costs what the request costs (``model``, these
    ``messages``, ``tools``, ``response_format``, ``max_completion_tokens``): the budget counts
    it. Empty ``messages`` mean nothing to retrieve for (a malformed body goes upstream as is).
    ``unseen_history`` says the request continues a context the proxy cannot see (e.g. the
    Responses API's ``previous_response_id``, a PDF by URL or file id): the budget then holds
    room back for it.
    ``turns`` are the API's own turn list, where position ``turn`` puts blocks (``Slot``
    indices count in it); ``preamble`` is what comes before them in the prompt and is not in
    them (instructions, a stored context's id), as text: it is part of the blocks' keys, so a
    block is only put back into the conversation it was shown in (``None``: no text for it, so
    no block is kept or put back).
    ``documents`` are the documents whose pages are still to be read into ``billed`` (each
    billed by the estimate from its size meanwhile): only a request that is budgeted reads them.
    """

    model: str
    messages: Sequence[Mapping[str, object]]
    billed: Mapping[str, object]
    unseen_history: bool = False
    turns: Sequence[Mapping[str, Any]] = ()
    preamble: str | None = ""
    documents: tuple[Document, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnRule:
    """The position rule's parameters for one API's turns (``proxy/context/position.py``)."""

    anchor_roles: tuple[str, ...] = USER_ROLES
    behind_roles: tuple[str, ...] = BEHIND_BREAKPOINT_ROLES
    pinned: PartPredicate = has_breakpoint
    text_part: TextPart = chat_text_part

    def slot(self, turns: Sequence[Mapping[str, Any]]) -> Slot | None:
        """Where a new block goes in ``turns`` under this rule (``position.slot``)."""
        return slot_of(
            turns,
            anchor_roles=self.anchor_roles,
            behind_roles=self.behind_roles,
            pinned=self.pinned,
        )


@dataclass(frozen=True, slots=True)
class Blocks:
    """What one body gets: this turn's ``block`` at ``position`` (with ``turn``, at ``slot``;
    ``None``: the API's system place) and earlier turns' blocks put back at theirs."""

    block: str
    position: Position = SYSTEM
    slot: Slot | None = None
    earlier: tuple[tuple[Slot, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Injected:
    """A body with its blocks; ``held``: this turn's block went in, at turn ``message`` (its
    index in ``Conversation.turns``; ``None`` when outside them, e.g. in instructions)."""

    body: dict[str, object]
    held: bool = False
    message: int | None = None


class ApiAdapter(Protocol):
    """One API's body and answer shapes, for the memory pipeline and the forwarding route."""

    @property
    def route(self) -> str:
        """The route's name in metrics and logs (``chat``, ``responses``, ...)."""
        ...

    @property
    def errors(self) -> ErrorShape:
        """How this API writes errors (our own, before or during a relay)."""
        ...

    @property
    def openai_credentials(self) -> bool:
        """Whether this API's credentials are for the OpenAI-compatible upstream, the one fact
        extraction calls (its chat completions, with the request's own credentials)."""
        ...

    @property
    def positions(self) -> frozenset[Position]:
        """The block positions this API has a place for (always ``system``)."""
        ...

    def conversation(self, body: Mapping[str, object]) -> Conversation:
        """Read the request body into the pipeline's terms (never raises on odd shapes)."""
        ...

    @property
    def rule(self) -> TurnRule:
        """Where position ``turn`` may put a block in this API's turns."""
        ...

    def inject(
        self, body: Mapping[str, object], conversation: Conversation, blocks: Blocks
    ) -> Injected:
        """A new body with ``blocks`` in place (``body`` untouched)."""
        ...

    def shown(self, body: Mapping[str, object]) -> dict[str, object]:
        """The fields of a (forwarded) body that explain mode shows, e.g. ``messages``."""
        ...

    def read_completion(self, answer: Answer) -> Completion:
        """The answer's text (and parsed body, when whole) for the completion hook."""
        ...


def place(api: ApiAdapter, wanted: Position) -> Position:
    """``wanted`` when ``api`` has that place for the block, else ``system``."""
    return wanted if wanted in api.positions else SYSTEM


def in_turns(
    turns: Sequence[Mapping[str, Any]], blocks: Blocks, rule: TurnRule
) -> tuple[list[dict[str, Any]], int | None]:
    """``turns`` with the earlier blocks and this turn's (at ``blocks.slot``) in place, and the
    index of the turn holding this turn's block (``None``: it went nowhere)."""
    where = blocks.slot
    new = [(where, blocks.block)] if where is not None and blocks.block else []
    result, filled = place_blocks(turns, [*blocks.earlier, *new], text_part=rule.text_part)
    return result, where.index if where is not None and new and where in filled else None


def instead_of_system(
    turns: Sequence[Mapping[str, Any]], blocks: Blocks, rule: TurnRule
) -> Blocks | None:
    """The blocks to write into ``turns`` when the API's system place would sit in front of a
    cache breakpoint: position ``system`` takes the turn's slot (the shared rule), position
    ``turn`` (which had no slot) goes nowhere; ``None``: nothing is injected."""
    where = rule.slot(turns) if blocks.position == SYSTEM else None
    return None if where is None else Blocks(blocks.block, TURN, where)


def chat_messages(value: object) -> list[Mapping[str, object]]:
    """A chat ``messages`` value as a list of dict messages; empty when it is anything else.

    One non-dict message makes the whole list malformed: the upstream answers it, memproxy
    forwards it untouched.
    """
    if not isinstance(value, list):
        return []
    messages: list[Mapping[str, object]] = [m for m in value if isinstance(m, dict)]
    return messages if len(messages) == len(value) else []
