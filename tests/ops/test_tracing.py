"""OpenTelemetry tracing across real processes (docs/tracing.md): producer spans in this process
(enqueue, trigger, a scheduler's fires), consumer spans in a child worker that configures the
SDK itself and hands its spans back as JSON lines; and nothing at all without a provider."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import rsched
from rsched._core import tracing
from rsched._core.codes import Code
from rsched._core.errors import InvalidSchedule, StateError
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.settings import SchedulerSettings, Settings
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.schedules import ScheduleStore
from tests.support.processes import Proc
from tests.support.schedulers import running as scheduling
from tests.support.tracing_app import read_spans
from tests.support.waiting import eventually
from tests.support.worker_app import fast_env

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

Spawn = Callable[..., Proc]
Record = dict[str, Any]


class Traced:
    """This process's provider (given to rsched alone) and what it exported."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


@pytest.fixture
def traced() -> Iterator[Traced]:
    found = Traced()
    tracing.set_provider(found.provider)
    try:
        yield found
    finally:
        tracing.set_provider(None)


def _worker(spawn: Spawn, settings: Settings, path: Path) -> Proc:
    return spawn(
        "rsched._cli.worker_process",
        "tests.support.tracing_app:worker",
        env=fast_env(settings, RSCHED_TEST_SPANS=str(path)),
    )


async def _span(path: Path, match: Callable[[Record], bool], what: str) -> Record:
    found: list[Record] = []

    def seen() -> bool:
        found[:] = [s for s in read_spans(path) if match(s)]
        return bool(found)

    await eventually(seen, what=lambda: f"{what} among {read_spans(path)}")
    return found[0]


def _consumer_of(execution_id: str) -> Callable[[Record], bool]:
    return lambda s: (
        s["kind"] == "CONSUMER" and s["attributes"].get("rsched.execution_id") == execution_id
    )


def _named(name: str) -> Callable[[Record], bool]:
    return lambda s: s["name"] == name


def _hex(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _quick(settings: Settings) -> Settings:
    """Short lease and idle periods: an in-process scheduler fires within a second."""
    fast = SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=500)
    return settings.model_copy(update={"scheduler": fast})


async def _fields(redis: Redis, settings: Settings, queue: str = "default") -> list[Any]:
    entries: Any = await redis.xrange(Keys(settings.prefix).queue(queue))
    return [fields for _, fields in entries]


@pytest.mark.slow
async def test_an_enqueued_job_runs_in_the_trace_of_its_caller(
    redis: Redis, settings: Settings, spawn: Spawn, traced: Traced, tmp_path: Path
) -> None:
    client = rsched.Client(redis, settings)
    with traced.provider.get_tracer("test").start_as_current_span("caller") as caller:
        first = await client.enqueue("trace.async", {"n": 1})
        second = await client.enqueue("trace.sync", {"n": 2}, queue="default")
    jobs = await _fields(redis, settings)
    assert all(tracing.PARENT in f for f in jobs), jobs
    producers = traced.named("enqueue default")
    assert len(producers) == 2
    trace_id = f"{caller.get_span_context().trace_id:032x}"
    caller_id = _hex(traced.named("caller")[0])[1]
    for producer in producers:
        assert _hex(producer)[0] == trace_id
        assert producer.parent is not None
        assert f"{producer.parent.span_id:016x}" == caller_id
        attrs = producer.attributes or {}
        assert attrs["messaging.system"] == "rsched"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.operation.name"] == "enqueue"
        assert attrs["messaging.destination.name"] == "default"
        assert attrs["messaging.message.id"] in (first.execution_id, second.execution_id)
        assert attrs["rsched.created"] is True
    by_exec = {(p.attributes or {})["rsched.execution_id"]: _hex(p)[1] for p in producers}

    path = tmp_path / "spans.jsonl"
    _worker(spawn, settings, path)
    for done, handler in ((first, "handler.async"), (second, "handler.sync")):
        consumer = await _span(
            path, _consumer_of(done.execution_id), f"the consumer span of {done.execution_id}"
        )
        assert consumer["name"] == "process default"
        assert consumer["trace_id"] == trace_id
        assert consumer["parent_id"] == by_exec[done.execution_id]
        attrs = consumer["attributes"]
        assert attrs["messaging.system"] == "rsched"
        assert attrs["messaging.operation.type"] == "process"
        assert attrs["messaging.operation.name"] == "process"
        assert attrs["messaging.destination.name"] == "default"
        assert attrs["messaging.message.id"] == done.execution_id
        assert attrs["messaging.consumer.group.name"] == "rsched"
        assert attrs["rsched.attempt"] == 1
        assert attrs["rsched.outcome"] == "completed"
        assert attrs["rsched.task"] in ("trace.async", "trace.sync")
        assert attrs["rsched.start_lag_ms"] >= 0
        assert consumer["status"] == "UNSET"
        # The handler's own span (async in the loop, sync in a worker thread) nests under it.
        mine = await _span(path, _named(handler), handler)
        assert mine["trace_id"] == trace_id
        assert mine["parent_id"] == consumer["span_id"]


@pytest.mark.slow
async def test_a_job_whose_producer_was_not_sampled_is_traced_nowhere(
    redis: Redis, settings: Settings, spawn: Spawn, traced: Traced, tmp_path: Path
) -> None:
    # The caller's trace was not sampled (its flags 00): the producer follows it, and so does
    # the worker (the SDK's default sampler), handler's span included; the trace id carries on.
    trace_id = 0x0AF7651916CD43DD8448EB211C80319C
    caller = trace.NonRecordingSpan(trace.SpanContext(trace_id, 0xB7AD6B7169203331, False))
    client = rsched.Client(redis, settings)
    with trace.use_span(caller):
        done = await client.enqueue("trace.async", {"n": 1})
    (fields,) = await _fields(redis, settings)
    assert fields[tracing.PARENT].startswith(f"00-{trace_id:032x}-")
    assert fields[tracing.PARENT].endswith("-00")
    assert traced.exporter.get_finished_spans() == ()

    path = tmp_path / "spans.jsonl"
    _worker(spawn, settings, path)

    async def completed() -> bool:
        return (await client.job(done.execution_id)).state == "completed"

    await eventually(completed, what=f"{done.execution_id} completed")
    assert [s for s in read_spans(path) if s["trace_id"] == f"{trace_id:032x}"] == []


@pytest.mark.slow
async def test_a_trigger_and_its_retry_are_one_trace_linked_attempt_to_attempt(
    redis: Redis, settings: Settings, spawn: Spawn, traced: Traced, tmp_path: Path
) -> None:
    client = rsched.Client(redis, settings)
    await client.add(
        rsched.Schedule(
            id="tr", task="trace.fail_once", every="1d", retry_base_s=0.1, retry_jitter=0
        )
    )
    fired = await client.trigger("tr")
    (producer,) = traced.named("trigger default")
    attrs = producer.attributes or {}
    assert attrs["messaging.operation.name"] == "trigger"
    assert attrs["messaging.destination.name"] == "default"
    assert attrs["messaging.message.id"] == fired.execution_id
    assert attrs["rsched.schedule_id"] == "tr"
    trace_id, producer_id = _hex(producer)

    path = tmp_path / "spans.jsonl"
    _worker(spawn, settings, path)

    def attempt(n: int) -> Callable[[Record], bool]:
        return lambda s: s["kind"] == "CONSUMER" and s["attributes"].get("rsched.attempt") == n

    first = await _span(path, attempt(1), "the first attempt")
    second = await _span(path, attempt(2), "the second attempt")
    for span in (first, second):
        assert span["trace_id"] == trace_id
        assert span["parent_id"] == producer_id
        assert span["attributes"]["rsched.schedule_id"] == "tr"
        assert span["attributes"]["rsched.execution_id"] == fired.execution_id
    assert first["attributes"]["rsched.outcome"] == "failed"
    assert first["attributes"]["error.type"] == "RuntimeError"
    assert first["status"] == "ERROR"
    assert "exception" in first["events"]
    assert first["links"] == []
    assert second["attributes"]["rsched.outcome"] == "completed"
    assert second["links"] == [{"trace_id": trace_id, "span_id": first["span_id"]}]


@pytest.mark.slow
async def test_a_scheduler_fire_is_the_parent_of_its_run(
    redis: Redis, settings: Settings, spawn: Spawn, traced: Traced, tmp_path: Path
) -> None:
    client = rsched.Client(redis, settings)
    path = tmp_path / "spans.jsonl"
    _worker(spawn, settings, path)
    async with scheduling(_quick(settings)):
        await client.add(rsched.Schedule(id="every", task="trace.async", every="1s"))
        consumer = await _span(
            path,
            lambda s: s["kind"] == "CONSUMER" and s["attributes"].get("rsched.schedule_id"),
            "the run of a fire",
        )
    fires = {_hex(s)[1]: s for s in traced.named("fire default")}
    producer = fires[consumer["parent_id"]]
    assert _hex(producer)[0] == consumer["trace_id"]
    attrs = producer.attributes or {}
    assert attrs["messaging.operation.type"] == "create"
    assert attrs["messaging.operation.name"] == "fire"
    assert attrs["messaging.message.id"] == consumer["attributes"]["rsched.execution_id"]
    assert attrs["rsched.schedule_id"] == "every"
    assert attrs["rsched.outcome"] == "fired"
    assert producer.parent is None  # each fired job is a trace of its own


@pytest.mark.cluster
async def test_a_backfill_is_one_producer_span_whose_jobs_carry_its_traceparent(
    redis: Redis, settings: Settings, traced: Traced
) -> None:
    """One span per backfill call, whatever the number of occurrences: each job it writes
    carries its traceparent, those queued behind the schedule's run too; on a cluster too."""
    client = rsched.Client(redis, settings)
    await client.add(rsched.Schedule(id="bf", task="t", every="1h", queue="bq"))  # overlap=skip
    now = await client.server_time()
    with traced.provider.get_tracer("test").start_as_current_span("caller") as caller:
        done = await client.backfill("bf", now - timedelta(hours=3.5), now - timedelta(minutes=1))
    assert sorted(done.outcomes.values()) == ["buffered", "buffered", "fired"]
    (producer,) = traced.named("backfill bq")
    assert producer.parent is not None
    assert producer.parent.span_id == caller.get_span_context().span_id
    attrs = producer.attributes or {}
    assert attrs["messaging.operation.type"] == "send"
    assert attrs["messaging.operation.name"] == "backfill"
    assert attrs["messaging.destination.name"] == "bq"
    assert attrs["messaging.batch.message_count"] == 3
    assert (attrs["rsched.fired"], attrs["rsched.buffered"]) == (1, 2)
    assert attrs["rsched.schedule_id"] == "bf"
    trace_id, span_id = _hex(producer)
    (job,) = await _fields(redis, settings, "bq")
    parent = job[tracing.PARENT]
    assert parent.startswith(f"00-{trace_id}-{span_id}-")
    pending: Any = await redis.zrange(Keys(settings.prefix).pending("bf"), 0, -1)
    assert len(pending) == 2
    assert all(parent in member for member in pending)  # the job's fields, as JSON


async def test_without_a_provider_jobs_carry_no_trace(redis: Redis, settings: Settings) -> None:
    assert not tracing.decide("auto")
    client = rsched.Client(redis, settings)
    await client.enqueue("t.plain")
    await client.add(rsched.Schedule(id="s", task="t.plain", every="1d"))
    await client.trigger("s")
    await client.add(rsched.Schedule(id="b", task="t.plain", every="1h", overlap="allow"))
    now = await client.server_time()
    await client.backfill("b", now - timedelta(hours=2), now - timedelta(minutes=1))
    async with scheduling(_quick(settings)):
        await client.add(rsched.Schedule(id="f", task="t.plain", every="1s"))

        async def fired() -> bool:
            return any(f.get("schedule_id") == "f" for f in await _fields(redis, settings))

        await eventually(fired)
    jobs = await _fields(redis, settings)
    assert {f.get("schedule_id", "") for f in jobs} >= {"", "s", "b", "f"}
    assert not [f for f in jobs if tracing.PARENT in f or tracing.LINK in f]


async def test_tracing_off_ignores_a_provider(
    redis: Redis, settings: Settings, traced: Traced
) -> None:
    off = settings.model_copy(update={"tracing": "off"})
    await rsched.Client(redis, off).enqueue("t.plain")
    (fields,) = await _fields(redis, settings)
    assert tracing.PARENT not in fields
    assert traced.exporter.get_finished_spans() == ()


@pytest.mark.slow
@pytest.mark.parametrize("installed", [True, False], ids=["installed", "absent"])
def test_a_process_without_a_provider_never_loads_opentelemetry(
    spawn: Spawn, settings: Settings, installed: bool
) -> None:
    """A worker and a scheduler that run jobs (enqueued, triggered, fired) import nothing of
    OpenTelemetry, installed (beyond what redis-py imports for itself) or not."""
    args = [] if installed else ["--without-opentelemetry"]
    proc = spawn("tests.support.tracing_app", *args, env=fast_env(settings))
    proc.wait_for("opentelemetry modules loaded:")
    assert "opentelemetry modules loaded: []" in proc.output()


async def test_fire_and_trigger_refuse_a_malformed_traceparent(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    await client.add(rsched.Schedule(id="m", task="t", every="1d"))
    store = ScheduleStore(redis, Keys(settings.prefix))
    with pytest.raises(InvalidSchedule):
        await store.trigger("m", traced=lambda queue: "not-a-traceparent")
    schedule = await client.get("m")
    with pytest.raises(InvalidSchedule):
        await store.backfill(schedule, [await store.time_ms() - 1000], "00-zz-yy-01")
    firing = FiringStore(redis, Keys(settings.prefix))
    item = FireItem("m", "1:0", 0, 0, None, "fire")
    with pytest.raises(StateError):
        await firing.fire("lease", [item], ["00-zz-yy-01"])
    assert await _fields(redis, settings) == []
    assert Code.BAD_ARGS < 0


def test_the_sync_client_continues_the_callers_trace(settings: Settings, traced: Traced) -> None:
    """SyncClient runs the call in its own loop's thread: the caller's span still parents it."""
    with (
        rsched.SyncClient.from_settings(settings) as client,
        traced.provider.get_tracer("test").start_as_current_span("caller") as caller,
    ):
        client.enqueue("t.sync")
    (producer,) = traced.named("enqueue default")
    assert producer.parent is not None
    assert producer.parent.span_id == caller.get_span_context().span_id


@pytest.mark.cluster
async def test_a_traced_fire_call_writes_each_jobs_traceparent(
    redis: Redis, settings: Settings
) -> None:
    """The scheduler's fire call with a traceparent per item (fire.lua's traced form): each job
    carries its own, an item sent without one carries none; on a cluster too."""
    client = rsched.Client(redis, settings)
    for sid in ("a", "b"):
        await client.add(rsched.Schedule(id=sid, task="t", every=3600))
    store = FiringStore.from_settings(redis, settings)
    k = store.keys
    lease, _ = await LeaseStore(redis, k).acquire("test", 60_000)
    assert lease is not None
    sched = await store.time_ms() - 3
    await redis.zadd(k.schedules, {"a": sched, "b": sched})
    items = [
        FireItem(sid, str(await redis.hget(k.schedule(sid), "version")), sched, sched,
                 sched + 3_600_000, "fire", spec=FireSpec())
        for sid in ("a", "b")
    ]  # fmt: skip
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert await store.fire(lease, items, [parent, ""]) == [Code.FIRED, Code.FIRED]
    jobs = {f["schedule_id"]: f for f in await _fields(redis, settings)}
    assert jobs["a"][tracing.PARENT] == parent
    assert tracing.PARENT not in jobs["b"]


async def test_a_flow_s_steps_carry_the_trace_of_its_run(
    redis: Redis, settings: Settings, traced: Traced
) -> None:
    client = rsched.Client(redis, settings)
    with traced.provider.get_tracer("test").start_as_current_span("caller"):
        run = await client.run_flow(rsched.group(rsched.step("a"), rsched.step("b")))
    [producer] = traced.named("run_flow default")
    trace_id, span_id = _hex(producer)
    assert (producer.attributes or {})["messaging.message.id"] == run.flow_id
    jobs = await _fields(redis, settings)
    assert len(jobs) == 2
    for fields in jobs:  # every step, released now or later, continues the run's trace
        assert fields[tracing.PARENT].startswith(f"00-{trace_id}-{span_id}-")
