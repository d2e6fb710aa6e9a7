"""Capture: after the response, store the turn as ``conversation`` memories (off the path).

``user`` stores the last user message, ``turn`` also the assistant's answer (for a stream, the
text assembled from its deltas: ``Completion.text``). Both carry the session id and the role in
their metadata. ``facts`` stores neither: ``FactCapture`` queues the turn for extraction
(``proxy.memory.extraction``), whose facts are reconciled with the user's memories
(``proxy.memory.reconcile``), all after the response and off the request's path. Only the
client's own words are stored: anything fenced like memproxy's block is cut out, so injected
memories never come back as new ones. The message before the captured one (``preceding_text``)
is the captured turn's context, embedded with it (adr/0142), when the capture mode stores
messages of its role (``user`` mode: never the assistant's, adr/0144); the answer's is the
user's message. Writes go through ``MemoryService.write``, the one write path (validation, token
counts, embedding, store, cache generation bump), seen here as a ``MemoryWriter``. A failed or
refused upstream answer captures nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from proxy.memory.extraction import BrokenAnswer, Turn, handles, turn_of
from proxy.memory.extraction_call import ExtractionCall, Failed
from proxy.memory.extraction_queue import JOB_ERROR, ExtractionQueue
from proxy.memory.inputs import MemoryInput, is_blank
from proxy.memory.reconcile import apply, plan
from proxy.memory.retriever import Retrieval
from proxy.memory.service import MemoryService, MemoryWriter
from proxy.metrics import Metrics
from proxy.pipeline.contract import Completion
from proxy.pipeline.options import RequestOptions
from proxy.pipeline.query import USER_ROLE, content_text, last_user_texts, strip_block
from proxy.settings import ExtractionSettings
from proxy.tenancy import BILLING_HEADERS, CREDENTIAL_HEADERS, Tenant, bearer_auth

CONVERSATION = "conversation"
ASSISTANT_ROLE = "assistant"
# The roles each capture mode stores: only these may be a captured turn's context (adr/0144).
CAPTURED_ROLES: dict[str, tuple[str, ...]] = {
    "user": (USER_ROLE,),
    "turn": (USER_ROLE, ASSISTANT_ROLE),
}
LOGGER = logging.getLogger("memproxy.pipeline")


def capture_inputs(
    options: RequestOptions,
    messages: Sequence[Mapping[str, object]],
    completion: Completion,
    max_chars: int,
) -> list[MemoryInput]:
    """The memories one turn yields under ``options.capture`` (empty when nothing to keep)."""
    if options.capture in ("off", "facts") or not completion.ok or completion.status >= 400:
        return []
    meta: dict[str, object] = {"session": options.session} if options.session else {}
    inputs: list[MemoryInput] = []
    said = last_user_texts(messages, 1)
    # Blank by the memories' rule (a lone BOM is not Python whitespace): nothing to keep, and
    # MemoryInput would refuse it.
    if said and not is_blank(said[0]):
        inputs.append(
            MemoryInput(
                content=said[0][:max_chars],
                user=options.user,
                source=CONVERSATION,
                metadata={**meta, "role": "user"},
            )
        )
    if options.capture == "turn":
        answer = strip_block(completion.text).strip()
        if not is_blank(answer):
            inputs.append(
                MemoryInput(
                    content=answer[:max_chars],
                    user=options.user,
                    source=CONVERSATION,
                    metadata={**meta, "role": "assistant"},
                )
            )
    return inputs


def preceding_text(messages: Sequence[Mapping[str, object]], capture: str, max_chars: int) -> str:
    """The dialog text just before the last user message ``capture_inputs`` keeps: the message
    before it when ``capture`` stores messages of its role (``user``: a user's; ``turn``: a
    user's or the assistant's), block cut out and cut to ``max_chars`` as that capture stored
    it, else ``""`` (adr/0144: a context is a copy of a stored memory, never of text the
    capture mode promised not to keep)."""
    stored_roles = CAPTURED_ROLES.get(capture, ())
    position = len(messages) - 1
    while position >= 0:  # the last user message with text, as ``last_user_texts`` finds it
        message = messages[position]
        if (
            isinstance(message, dict)
            and message.get("role") == USER_ROLE
            and strip_block(content_text(message.get("content"))).strip()
        ):
            break
        position -= 1
    if position < 1:
        return ""
    before = messages[position - 1]
    if not isinstance(before, dict) or before.get("role") not in stored_roles:
        return ""
    return strip_block(content_text(before.get("content"))).strip()[:max_chars]


def captured(
    options: RequestOptions,
    messages: Sequence[Mapping[str, object]],
    completion: Completion,
    max_chars: int,
) -> tuple[list[MemoryInput], str]:
    """``capture_inputs`` and, when they keep something, ``preceding_text``: one pure call, so
    a large turn's reading (its block-stripping passes) can run on a thread as a whole."""
    inputs = capture_inputs(options, messages, completion, max_chars)
    return inputs, preceding_text(messages, options.capture, max_chars) if inputs else ""


async def capture_turn(
    writer: MemoryWriter,
    tenant: str,
    inputs: Sequence[MemoryInput],
    metrics: Metrics,
    preceding: str = "",
) -> None:
    """Write the captured memories (``preceding``: the text before them, ``preceding_text``);
    a failure is logged and counted, never raised."""
    if not inputs:
        return
    try:
        await writer.write(tenant, inputs, preceding=preceding)
    except Exception as exc:  # capture is best effort: the client already has its answer
        LOGGER.warning("capture failed for tenant %s: %s", tenant, type(exc).__name__)
        metrics.count_memory_work("capture", ok=False)
    else:
        metrics.count_memory_work("capture", ok=True)


# -- facts ------------------------------------------------------------------------------------

Auth = tuple[tuple[bytes, bytes], ...]
STORE_FAILED = "store"


@dataclass(frozen=True, slots=True)
class FactRequest:
    """What a chat request hands fact capture at ``prepare``: its model and the credentials
    its upstream call would carry (held in memory until the job ran, never stored)."""

    model: str
    auth: Auth


@dataclass(frozen=True, slots=True)
class FactJob:
    """One turn to extract facts from, for (tenant, user)."""

    tenant: str
    user: str
    session: str
    turn: Turn
    request: FactRequest


def fact_request(
    tenant: Tenant, headers: Mapping[str, str], body: Mapping[str, object]
) -> FactRequest:
    """The tenant's upstream credentials as its chat request sends them: the client's own
    credential (and billing) headers in passthrough mode, the tenant's key in keys mode."""
    if tenant.forwards_credentials:
        names = sorted(CREDENTIAL_HEADERS | BILLING_HEADERS)
        auth = tuple(
            (name, value.encode("latin-1"))
            for name in names
            if (value := headers.get(name.decode())) is not None
        )
    else:
        auth = bearer_auth(tenant).add
    return FactRequest(str(body.get("model") or ""), auth)


class FactCapture:
    """``X-Memory-Capture: facts``: queue the turn, extract, reconcile, count."""

    def __init__(
        self,
        service: MemoryService,
        call: ExtractionCall,
        settings: ExtractionSettings,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.service = service
        self.call = call
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.queue: ExtractionQueue[FactJob] = ExtractionQueue(self.process, settings, metrics)

    def submit(
        self,
        tenant: str,
        options: RequestOptions,
        messages: Sequence[Mapping[str, object]],
        completion: Completion,
        request: FactRequest,
    ) -> bool:
        """Queue the turn of a completed chat (never waits, never raises); ``False`` if
        nothing was queued."""
        if not completion.ok or completion.status >= 400:
            return False
        try:
            turn = turn_of(messages, completion.text, self.clock(), self.settings.max_turn_chars)
        except Exception:  # the client already has its answer: a bug here must not reach it
            LOGGER.exception("reading the turn for fact capture failed")
            self.metrics.count_extraction_failure(JOB_ERROR)
            return False
        if turn is None:
            return False
        job = FactJob(tenant, options.user, options.session, turn, request)
        return self.queue.submit(job)

    async def process(self, job: FactJob) -> None:
        """Extract the turn's facts and reconcile them with the user's memories."""
        conf = self.settings
        shown = {}
        if conf.memories_shown:
            want = Retrieval(job.turn.said, job.user, conf.memories_shown)
            hits = await self.service.retriever.retrieve(job.tenant, want)
            shown = handles([hit.record for hit in hits if hit.record.user == job.user])
        model = conf.model or job.request.model
        result = await self.call.facts(job.turn, shown, model, job.request.auth)
        if isinstance(result, Failed | BrokenAnswer):
            LOGGER.info("fact extraction stored nothing: %s", result.reason)
            self.metrics.count_extraction_failure(result.reason)
            return
        metadata: dict[str, object] = {"session": job.session} if job.session else {}
        try:
            outcome = await apply(self.service, job.tenant, job.user, plan(result, shown), metadata)
        except Exception as exc:
            LOGGER.warning("storing facts failed for tenant %s: %s", job.tenant, type(exc).__name__)
            self.metrics.count_extraction_failure(STORE_FAILED)
            return
        self.metrics.count_facts("added", outcome.added)
        self.metrics.count_facts("superseded", outcome.superseded)
        self.metrics.count_facts("skipped", outcome.skipped)
