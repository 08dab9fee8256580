"""Runs of labelled schedules: fired, triggered and backfilled jobs carry their schedule's
labels, and their runs are found by them (docs/labels.md), skipped occurrences and superseded
jobs included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import orjson
import pytest
from redis.asyncio import Redis

from rsched import Client, InvalidArgument, Job, Settings, Worker
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import GROUP, Keys
from rsched._store.queues import QueueStore
from rsched._store.runs_log import record_of, run_record, trim_runs
from rsched._store.schedules import ScheduleStore
from rsched._store.worker_calls import Done
from tests.support.leading import firing, leases
from tests.support.schedulers import jobs, scheduling
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings


async def _queued(redis: Redis, prefix: str) -> dict[str, dict[str, str]]:
    entries: Any = await redis.xrange(Keys(prefix).queue("default"))
    return {fields["execution_id"]: fields for _, fields in entries}


async def test_fired_jobs_carry_their_schedules_labels(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    client = Client(redis, settings)
    await client.add({"id": "plain", "task": "t", "every": 3600})
    labels = {"team": "a", "env": "prod"}
    async with scheduling(redis, settings, every=3600, overlap="allow", labels=labels) as store:
        await eventually(lambda: _fired(store))
    fired = (await jobs(store))[0]
    assert fired["schedule_id"] == "s1"
    assert fired["labels"] == "env=prod,team=a"
    await client.trigger("plain")
    await client.trigger("s1")
    now = datetime.now(UTC)
    await client.backfill("s1", now - timedelta(hours=3), now - timedelta(minutes=1))
    queued = await _queued(redis, prefix)
    plain = [f for f in queued.values() if f["schedule_id"] == "plain"]
    assert len(plain) == 1
    assert "labels" not in plain[0]  # no labels: no field
    labelled = [f for f in queued.values() if f["schedule_id"] == "s1"]
    assert len(labelled) >= 3  # fired, triggered, backfilled
    assert {f["origin"] for f in labelled} >= {"schedule", "manual", "backfill"}
    assert all(f["labels"] == "env=prod,team=a" for f in labelled)

    ran: list[str] = []
    worker = _recording(settings, ran)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)
        await eventually(lambda: len(ran) == len(queued))
        worker.stop()
    want = {f["execution_id"] for f in labelled}
    await eventually(lambda: _ran_by_label(client, want))
    page = await client.runs(labels={"team": "a"}, status="completed")
    assert all(r.labels == {"env": "prod", "team": "a"} for r in page.items)
    assert all(r.schedule_id == "s1" for r in page.items)


def _recording(settings: Settings, ran: list[str]) -> Worker:
    """A worker of the queue ``default`` whose task ``t`` records each execution id it runs."""
    worker = Worker(queues=["default"], settings=fast_settings(settings))

    @worker.task("t")
    async def handle(job: Job) -> None:
        ran.append(job.execution_id)

    return worker


async def _fired(store: Any) -> bool:
    return len(await jobs(store)) >= 1


async def _ran_by_label(client: Client, want: set[str]) -> bool:
    page = await client.runs(labels={"team": "a"}, status="completed", limit=100)
    return {r.execution_id for r in page.items} == want


async def _index(redis: Redis, prefix: str, pair: str) -> set[str]:
    entries: Any = await redis.xrange(Keys(prefix).run_label(pair))
    return {entry_id for entry_id, _ in entries}


async def test_every_record_of_a_labelled_job_is_indexed(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    client = Client(redis, settings)
    worker = Worker(queues=["default"], settings=fast_settings(settings))
    seen: list[str] = []

    @worker.task("t.ok")
    async def ok(job: Job) -> None:
        seen.append(job.execution_id)

    @worker.task("t.retry")
    async def again(job: Job) -> None:
        seen.append(job.execution_id)
        if job.attempt == 1:
            raise ValueError("once")

    @worker.task("t.fail")
    async def fail(job: Job) -> None:
        seen.append(job.execution_id)
        raise ValueError("boom")

    team = {"team": "a"}
    await client.enqueue("t.ok", execution_id="ok-1", labels=team)
    await client.enqueue("t.ok", execution_id="plain-1")
    await QueueStore(redis, Keys(prefix)).enqueue(
        "t.retry", {}, execution_id="re-1", labels=team, retry_base_s=0.05
    )
    await client.enqueue("t.fail", execution_id="dead-1", labels=team, max_retries=0)
    await client.enqueue("t.ok", execution_id="late-1", labels=team, start_deadline="100ms")
    await client.enqueue("t.ok", execution_id="gone-1", labels=team, delay=3600)
    await client.cancel("gone-1")
    until = await client.server_time() + timedelta(milliseconds=200)
    await eventually(lambda: _after(client, until))
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)
        await eventually(lambda: _statuses_are(redis, prefix, 6))
        worker.stop()
    by_status: dict[str, set[str]] = {}
    for entry_id in await _index(redis, prefix, "team=a"):
        entries: Any = await redis.xrange(Keys(prefix).runs, entry_id, entry_id)
        record = record_of(entry_id, entries[0][1])
        assert record is not None
        by_status.setdefault(record.status, set()).add(record.execution_id)
    assert by_status == {
        "completed": {"ok-1", "re-1"}, "failed": {"re-1"}, "dead": {"dead-1"},
        "expired": {"late-1"}, "cancelled": {"gone-1"},
    }  # fmt: skip
    assert await redis.smembers(Keys(prefix).run_labels) == {"team=a"}
    page = await client.runs(labels=team, status="completed")
    assert sorted(r.execution_id for r in page.items) == ["ok-1", "re-1"]
    assert all(r.labels == team for r in page.items)


async def _after(client: Client, until: datetime) -> bool:
    return await client.server_time() > until


async def _statuses_are(redis: Redis, prefix: str, count: int) -> bool:
    return len(await _index(redis, prefix, "team=a")) >= count


async def test_retention_trims_the_index_with_the_log(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    keys = Keys(prefix)
    runs = keys.runs
    record = orjson.dumps(["e", None, "t", "q", "completed"] + [None] * 7).decode()
    old = [f"{1000 + i}-0" for i in range(5)]
    new_ms = await Client(redis, settings).server_time()
    now = int(new_ms.timestamp() * 1000)
    recent = [f"{now - 10 + i}-0" for i in range(5)]
    await redis.xadd(runs, {"r": record, "l": "env=x"}, id="999-0")
    await redis.xadd(keys.run_label("env=x"), {"i": "1"}, id="999-0")
    for entry_id in old + recent:
        await redis.xadd(runs, {"r": record, "l": "team=a"}, id=entry_id)
        await redis.xadd(keys.run_label("team=a"), {"i": "1"}, id=entry_id)
    await redis.sadd(keys.run_labels, "team=a", "env=x")
    # By age: the old records and their entries go, and an index left empty with them.
    assert await trim_runs(redis, keys, before_ms=now - 60_000, max_entries=1000) == 6
    assert await _index(redis, prefix, "team=a") == set(recent)
    assert await redis.exists(keys.run_label("env=x")) == 0
    assert await redis.smembers(keys.run_labels) == {"team=a"}
    # By size: what the log keeps, the index keeps.
    await redis.xtrim(runs, maxlen=2, approximate=False)
    await trim_runs(redis, keys, before_ms=0, max_entries=1000)
    assert await _index(redis, prefix, "team=a") == set(recent[-2:])
    await redis.delete(runs)
    await trim_runs(redis, keys, before_ms=0, max_entries=1000)
    assert await redis.exists(keys.run_label("team=a"), keys.run_labels) == 0


async def test_runs_by_label_page_through_the_index(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    client = Client(redis, settings)
    await _write_runs(redis, prefix, 25)
    pages, cursor = [], None
    while True:
        page = await client.runs(labels={"team": "a"}, status="completed", limit=4, cursor=cursor)
        pages.append([r.execution_id for r in page.items])
        cursor = page.cursor
        if cursor is None:
            break
    got = [e for p in pages for e in p]
    assert got == [f"j-{i}" for i in range(24, -1, -1) if i % 2 == 0]
    both = await client.runs(labels={"team": "a", "n": "4"}, status="completed")
    assert [r.execution_id for r in both.items] == ["j-4"]
    none = await client.runs(labels={"team": "zz"}, status="completed")
    assert none.items == []
    with pytest.raises(InvalidArgument, match="labels"):
        await client.runs(labels={"Team": "a"})


async def _write_runs(redis: Redis, prefix: str, count: int) -> None:
    """Records of ``count`` jobs j-<i> (every other one labelled team=a and n=<i>), through the
    worker's own script call (complete.lua), several in one ms."""
    keys = Keys(prefix)
    store = QueueStore(redis, keys)
    await store.create_groups(["default"])
    for i in range(count):
        labels = {"team": "a", "n": str(i)} if i % 2 == 0 else None
        await store.enqueue("t", {}, execution_id=f"j-{i}", labels=labels)
    entries: Any = await redis.xreadgroup(GROUP, "w", {keys.queue("default"): ">"}, count=count)
    done = []
    for entry_id, fields in entries[0][1]:
        run = run_record(fields, queue="default", status="completed", worker="w")
        done.append(Done(entry_id, fields["execution_id"], None, 1, "completed", "", run=run))
    await store.complete("default", done[: count // 2])
    await store.complete("default", done[count // 2 :])


@pytest.mark.cluster
async def test_runs_by_label_are_gathered_across_partitions(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    client = Client(redis, settings.model_copy(update={"partitions": 4}))
    base = Keys(prefix, 4)
    want = []
    for k in range(4):
        keys = base.for_partition(k)
        for i in range(5):
            ms = 1_000_000 + 10 * i + k  # the partitions' records interleave in time
            exec_id = f"p{k}-{i}"
            row = [exec_id, None, "t", "default", "completed", None, None, 1, "w", 1, None, None]
            await redis.xadd(
                keys.runs, {"r": orjson.dumps(row).decode(), "l": "team=a"}, id=f"{ms}-0"
            )
            await redis.xadd(keys.run_label("team=a"), {"i": "1"}, id=f"{ms}-0")
            want.append((ms, exec_id))
    got, cursor = [], None
    while True:
        page = await client.runs(labels={"team": "a"}, status="completed", limit=3, cursor=cursor)
        got += [r.execution_id for r in page.items]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert got == [e for _, e in sorted(want, reverse=True)]


async def _skip_item(store: ScheduleStore, sid: str, action: str, calendar: str = "") -> FireItem:
    """An occurrence of ``sid`` due 10 ms ago (the index moved to it), to fire as ``action``."""
    now = await store.time_ms()
    await store.redis.zadd(store.keys.schedules, {sid: now - 10})
    (fields,) = await store.fields([sid])
    spec = FireSpec.from_hash(fields)
    return FireItem(
        sid, fields["version"], now - 10, now - 10, now + 3_600_000, action, 1, spec, calendar
    )


@pytest.mark.cluster
async def test_skipped_occurrences_are_found_by_their_schedules_labels(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    """Every way an occurrence is skipped (overlap on a trigger and on a fire, misfire=skip,
    an exclusion calendar) logs a record that carries the schedule's labels and is in the runs
    index; a schedule without labels beside it in the same fire call stays out of it."""
    client = Client(redis, settings)
    team = {"team": "a", "env": "prod"}
    await client.add({"id": "lab", "task": "t", "every": 3600, "labels": team})  # overlap=skip
    await client.add({"id": "plain", "task": "t", "every": 3600})
    for sid in ("lab", "plain"):
        assert (await client.trigger(sid)).status == "fired"  # its run stays unfinished
    await anyio.sleep(0.003)  # a manual run's execution id is its ms: one each
    for sid in ("lab", "plain"):
        assert (await client.trigger(sid)).status == "skipped"  # trigger.lua
    store = ScheduleStore(redis, Keys(prefix))
    fires = firing(store)
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    for action, code in (("fire", Code.SKIPPED), ("skip", Code.MISFIRE_SKIPPED)):
        await anyio.sleep(0.003)
        batch = [await _skip_item(store, sid, action) for sid in ("lab", "plain")]
        assert await fires.fire(lease, batch) == [code, code]
    await anyio.sleep(0.003)
    batch = [await _skip_item(store, sid, "exclude", "hols") for sid in ("lab", "plain")]
    assert await fires.fire(lease, batch) == [Code.EXCLUDED, Code.EXCLUDED]

    page = await client.runs(labels={"team": "a"}, status="skipped", limit=50)
    reasons = sorted(r.reason or "" for r in page.items)
    assert reasons == ["excluded", "misfire", "overlap", "overlap"]
    assert all(r.schedule_id == "lab" and r.labels == team for r in page.items)
    (excluded,) = [r for r in page.items if r.reason == "excluded"]
    assert excluded.error == "calendar hols"
    both = await client.runs(labels=team, status="skipped", limit=50)
    assert [r.execution_id for r in both.items] == [r.execution_id for r in page.items]
    plain = (await client.runs(schedule_id="plain", status="skipped", limit=50)).items
    assert len(plain) == 4
    assert all(r.labels == {} for r in plain)
    assert await redis.smembers(Keys(prefix).run_labels) == {"env=prod", "team=a"}


async def test_a_scheduler_fire_skipped_by_overlap_is_found_by_label(
    redis: Redis, settings: Settings
) -> None:
    """A labelled schedule whose run never ends (no worker): the scheduler's next fires are
    skipped by overlap, and found by its labels."""
    client = Client(redis, settings)
    async with scheduling(redis, settings, every=0.2, labels={"team": "a"}):
        await eventually(lambda: _skipped_by_label(client))
    (skipped, *_) = (await client.runs(labels={"team": "a"}, status="skipped")).items
    assert (skipped.schedule_id, skipped.reason, skipped.labels) == ("s1", "overlap", {"team": "a"})


async def _skipped_by_label(client: Client) -> bool:
    return bool((await client.runs(labels={"team": "a"}, status="skipped")).items)


@pytest.mark.cluster
async def test_a_superseded_job_is_found_by_its_labels(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    """A labelled cancel_previous schedule triggered twice before a worker reads its jobs: the
    first is superseded (start.lua), and its record carries the labels the job carried."""
    client = Client(redis, settings)
    ran: list[str] = []
    worker = _recording(settings, ran)
    spec = {"task": "t", "every": 3600, "overlap": "cancel_previous"}
    await client.add({"id": "lab", **spec, "labels": {"team": "a"}})
    await client.add({"id": "plain", **spec})
    first = {}
    for sid in ("lab", "plain"):
        first[sid] = (await client.trigger(sid)).execution_id
        await anyio.sleep(0.003)
        await client.trigger(sid)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)
        await eventually(lambda: len(ran) == 2)
        await eventually(lambda: _superseded(client, 2))
        worker.stop()
    assert first["lab"] not in ran
    (gone,) = (await client.runs(labels={"team": "a"}, status="cancelled")).items
    assert (gone.execution_id, gone.reason) == (first["lab"], "superseded")
    assert gone.labels == {"team": "a"}
    # The run that replaced it, and nothing of the schedule without labels.
    labelled = (await client.runs(labels={"team": "a"})).items
    assert sorted(r.status for r in labelled) == ["cancelled", "completed"]
    assert len(await _index(redis, prefix, "team=a")) == 2
    plain = await client.runs(schedule_id="plain", status="cancelled")
    assert [(r.execution_id, r.reason, r.labels) for r in plain] == [
        (first["plain"], "superseded", {})
    ]


async def _superseded(client: Client, count: int) -> bool:
    page = await client.runs(status="cancelled", limit=50)
    return sum(r.reason == "superseded" for r in page.items) == count
