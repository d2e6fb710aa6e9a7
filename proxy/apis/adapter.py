"""The seam between the one memory pipeline and the APIs it serves: ``ApiAdapter``.

The pipeline (``proxy/pipeline/pipeline.py``) knows one conversation shape, the chat
completions one: it budgets a chat body, builds the query from user messages and captures the
latest one. Each API memproxy serves is an adapter that translates its own body into that shape
(``Conversation``), writes the memory block back into its own shape, and reads its own answers
(JSON or stream) into a ``Completion``. Nothing else differs per API, so there is no second
pipeline and no second route: ``proxy/routes/with_memory.py`` forwards for any adapter.

Where the block goes is a parameter (``Position``): ``system`` puts it into the app's own system
prompt or instructions, after the app's text; ``turn`` puts it just before the latest user input,
which keeps everything before that turn a stable prompt-cache prefix. An adapter says which
positions it has (``positions``); the pipeline falls back to ``system``, which every API has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from proxy.apis.answer import Answer
from proxy.error_responses import ErrorShape
from proxy.pipeline.contract import Completion

Position = Literal["system", "turn"]
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
    Responses API's ``previous_response_id``): the budget then holds room back for it.
    """

    model: str
    messages: Sequence[Mapping[str, object]]
    billed: Mapping[str, object]
    unseen_history: bool = False


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
    def positions(self) -> frozenset[Position]:
        """The block positions this API has a place for (always ``system``)."""
        ...

    def conversation(self, body: Mapping[str, object]) -> Conversation:
        """Read the request body into the pipeline's terms (never raises on odd shapes)."""
        ...

    def inject(
        self,
        body: Mapping[str, object],
        conversation: Conversation,
        block: str,
        position: Position,
    ) -> dict[str, object]:
        """A new body with ``block`` at ``position`` (one of ``positions``); ``body`` untouched."""
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


def chat_messages(value: object) -> list[Mapping[str, object]]:
    """A chat ``messages`` value as a list of dict messages; empty when it is anything else.

    One non-dict message makes the whole list malformed: the upstream answers it, memproxy
    forwards it untouched.
    """
    if not isinstance(value, list):
        return []
    messages: list[Mapping[str, object]] = [m for m in value if isinstance(m, dict)]
    return messages if len(messages) == len(value) else []
