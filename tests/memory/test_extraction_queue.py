"""The extraction queue: bounded, rate-limited and fair per tenant, failures contained."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from proxy.memory.extraction_queue import ExtractionQueue, TokenBucket
from proxy.metrics import Metrics
from proxy.settings import ExtractionSettings


@dataclass(frozen=True)
class Job:
    tenant: str
    name: str = ""


def dropped(metrics: Metrics, reason: str) -> float:
    sample = metrics.registry.get_sample_value(
        "memproxy_extraction_failures_total", {"reason": reason}
    )
    return sample or 0.0


class Recorder:
    """A job runner that holds each job until released and records what ran when."""

    def __init__(self) -> None:
        self.started: list[Job] = []
        self.gate = asyncio.Event()
        self.running = 0
        self.most: dict[str, int] = {}
        self.now: dict[str, int] = {}

    async def __call__(self, job: Job) -> None:
        self.started.append(job)
        self.now[job.tenant] = self.now.get(job.tenant, 0) + 1
        self.most[job.tenant] = max(self.most.get(job.tenant, 0), self.now[job.tenant])
        try:
            await self.gate.wait()
        finally:
            self.now[job.tenant] -= 1


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def settings(**changes: object) -> ExtractionSettings:
    return ExtractionSettings(**{"tenant_per_minute": 6000.0, **changes})  # type: ignore[arg-type]


async def test_a_full_queue_drops_and_counts() -> None:
    metrics = Metrics()
    queue = ExtractionQueue(Recorder(), settings(queue_size=2), metrics)  # not started
    assert queue.submit(Job("a"))
    assert queue.submit(Job("b"))
    assert not queue.submit(Job("c"))
    assert queue.size == 2
    assert dropped(metrics, "queue_full") == 1


async def test_a_tenant_over_its_rate_is_dropped_others_are_not() -> None:
    metrics = Metrics()
    now = [0.0]
    conf = settings(tenant_per_minute=6.0)  # one a 10 s; the bucket holds one (10 s of rate)
    queue = ExtractionQueue(Recorder(), conf, metrics, clock=lambda: now[0])
    assert queue.submit(Job("a"))
    assert not queue.submit(Job("a"))
    assert queue.submit(Job("b"))
    now[0] = 10.0
    assert queue.submit(Job("a"))
    assert dropped(metrics, "tenant_rate") == 1


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=1.0, capacity=2.0, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [True, True, False]
    assert bucket.take(1.0)
    assert not bucket.take(1.5)


async def test_tenant_concurrency_and_round_robin() -> None:
    run = Recorder()
    queue = ExtractionQueue(run, settings(workers=4, tenant_concurrency=2), Metrics())
    for i in range(4):
        queue.submit(Job("busy", f"b{i}"))
    queue.submit(Job("quiet", "q0"))
    queue.start()
    await settle()
    # Four workers, but the busy tenant may hold only two: the fourth waits, and the quiet
    # tenant is not starved behind the busy one's backlog.
    assert sorted(j.name for j in run.started) == ["b0", "b1", "q0"]
    run.gate.set()
    await settle()
    assert len(run.started) == 5
    assert run.most == {"busy": 2, "quiet": 1}
    await queue.close(1.0)


async def test_a_failing_job_is_counted_and_the_worker_goes_on() -> None:
    metrics = Metrics()
    done: list[str] = []

    async def run(job: Job) -> None:
        if job.name == "bad":
            raise RuntimeError("boom")
        done.append(job.name)

    queue = ExtractionQueue(run, settings(workers=1), metrics)
    queue.start()
    queue.submit(Job("t", "bad"))
    queue.submit(Job("t", "good"))
    await settle()
    assert done == ["good"]
    assert dropped(metrics, "internal") == 1
    await queue.close(1.0)


async def test_close_lets_running_jobs_finish_and_drops_waiting_ones() -> None:
    finished: list[str] = []

    async def run(job: Job) -> None:
        await asyncio.sleep(0.05)
        finished.append(job.name)

    queue = ExtractionQueue(run, settings(workers=1), Metrics())
    queue.start()
    queue.submit(Job("t", "first"))
    queue.submit(Job("t", "second"))
    await settle()
    await queue.close(5.0)
    assert finished == ["first"]
    assert queue.size == 0


async def test_close_cancels_a_job_past_the_limit() -> None:
    async def run(job: Job) -> None:
        await asyncio.sleep(30)

    queue = ExtractionQueue(run, settings(workers=1), Metrics())
    queue.start()
    queue.submit(Job("t"))
    await settle()
    await asyncio.wait_for(queue.close(0.05), timeout=5)


async def test_tenants_take_turns() -> None:
    order: list[str] = []

    async def run(job: Job) -> None:
        order.append(job.name)

    queue = ExtractionQueue(run, settings(workers=1), Metrics())
    for name in ("b0", "b1", "b2"):
        queue.submit(Job("busy", name))
    queue.submit(Job("quiet", "q0"))
    queue.start()
    await settle()
    assert order == ["b0", "q0", "b1", "b2"]  # the quiet tenant does not wait for the backlog
    await queue.close(1.0)
