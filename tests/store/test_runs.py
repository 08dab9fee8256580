"""The runs log across schedules and enqueued jobs: records written by the worker scripts, runs in
progress read from the queue streams, filters, cursors, and the ``rsched runs`` command."""

from __future__ import annotations

import contextlib
import io
import re
from datetime import UTC, datetime, timedelta

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._cli.main import main as cli_main
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from rsched._store.runs_log import record_of, run_record
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running


def _worker(settings: Settings) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        pass

    @worker.task("t.boom")
    async def boom(job: rsched.Job) -> None:
        raise ValueError("bad input " + "x" * 500)

    @worker.task("t.again")
    async def again(job: rsched.Job) -> None:
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0.05, reason="not yet")

    return worker


async def _statuses(client: rsched.Client, **kw: object) -> list[tuple[str, str, int | None]]:
    page = await client.runs(limit=100, **kw)  # type: ignore[arg-type]
    return [(r.task, r.status, r.attempt) for r in page]


async def test_ended_runs_are_logged_with_their_outcome(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    async with running(_worker(settings), redis):
        await client.enqueue("t.ok", {"n": 1})
        store = QueueStore(redis, Keys(settings.prefix))
        await store.enqueue("t.boom", max_retries=1, retry_base_s=0.01, retry_jitter=0)
        await client.enqueue("t.again")

        async def ended() -> bool:
            page = await client.runs(limit=100)
            return sum(r.status in ("completed", "dead") for r in page) >= 3

        await eventually(ended)
    got = await _statuses(client)
    assert ("t.ok", "completed", 1) in got
    assert ("t.boom", "failed", 1) in got
    assert ("t.boom", "dead", 2) in got
    assert ("t.again", "retried", 1) in got
    assert ("t.again", "completed", 2) in got
    page = await client.runs(status="dead", task="t.boom")
    [dead] = page.items
    assert dead.error_type == "ValueError"
    assert dead.error is not None
    assert dead.error.startswith("bad input")
    assert len(dead.error) <= 200
    assert dead.schedule_id is None
    assert dead.queue == "default"
    assert dead.worker
    assert dead.started_at
    assert dead.ended_at
    assert dead.fired_at
    assert dead.started_at <= dead.ended_at
    assert dead.ended_at - datetime.now(UTC) < timedelta(seconds=5)
    [retried] = (await client.runs(status="retried")).items
    assert retried.error == "not yet"
    # Newest first.
    times = [r.ended_at or r.fired_at for r in (await client.runs(limit=100)).items]
    assert None not in times
    assert times == sorted(times, reverse=True)  # type: ignore[type-var]


async def test_records_name_the_level_of_their_job(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    await client.enqueue("t.ok", execution_id="waits", queue="idle", priority="low")
    async with running(_worker(settings), redis):
        for level in ("high", "normal", "low"):
            await client.enqueue("t.ok", execution_id=f"ok-{level}", priority=level)
            await client.enqueue("t.boom", execution_id=f"dead-{level}", priority=level,
                                 max_retries=0)  # fmt: skip

        async def ended() -> bool:
            return len((await client.runs(limit=100, status="completed")).items) >= 3

        await eventually(ended)
        await eventually(lambda: _dead_count(client, 3))
    got = {r.execution_id: r.priority for r in await client.runs(limit=100)}
    assert got == {
        "waits": "low",  # in progress: from its stream
        **{
            f"{end}-{level}": level for end in ("ok", "dead") for level in ("high", "normal", "low")
        },
    }
    assert (await client.runs(limit=1)).items[0].as_dict()["priority"] == "low"
    fields = await any_(redis).xrange(Keys(settings.prefix).runs)  # normal adds no field
    assert sorted(f.get("p", "-") for _, f in fields) == ["-", "-", "high", "high", "low", "low"]


async def _dead_count(client: rsched.Client, n: int) -> bool:
    return len((await client.runs(limit=100, status="dead")).items) >= n


async def test_runs_in_progress_come_from_the_queue_streams(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    keys = Keys(settings.prefix)
    queued = await client.enqueue("t.slow", queue="q1")
    held = await client.enqueue("t.slow", queue="q1")
    await QueueStore(redis, keys).create_groups(["q1"])
    # A worker took the first entry: it is pending in the group, hence started.
    await redis.xreadgroup(GROUP, "w-1", {keys.queue("q1"): ">"}, count=1)
    page = await client.runs()
    by_id = {r.execution_id: r for r in page}
    assert by_id[queued.execution_id].status == "started"
    assert by_id[queued.execution_id].worker == "w-1"
    assert by_id[held.execution_id].status == "fired"
    assert by_id[held.execution_id].queue == "q1"
    assert [r.execution_id for r in (await client.runs(status="fired")).items] == [
        held.execution_id
    ]
    assert page.cursor is None


async def test_filters_cursor_and_scan_bound(redis: Redis, settings: Settings) -> None:
    keys = Keys(settings.prefix)
    await redis.xadd(keys.runs, {"r": "not a record"})  # someone else's entry: passed over
    for i in range(30):
        status = "completed" if i % 5 else "failed"
        sid = "s1" if i % 2 else None
        values = [f"e{i}", sid, f"t{i % 3}", "default", status, None, None, 1, "w", 3, None, None]
        await redis.xadd(keys.runs, {"r": orjson.dumps(values)})
    client = rsched.Client(redis, settings)
    first = await client.runs(limit=10)
    assert [r.execution_id for r in first] == [f"e{i}" for i in range(29, 19, -1)]
    assert first.cursor
    rest = [r.execution_id async for r in client.iter_runs(page_size=7)]
    assert rest == [f"e{i}" for i in range(29, -1, -1)]
    failed = await client.runs(status="failed", schedule_id="s1")
    assert [r.execution_id for r in failed] == ["e25", "e15", "e5"]
    assert [r.execution_id for r in await client.runs(task="t0", limit=3)] == ["e27", "e24", "e21"]
    assert len((await client.runs(since="1h", limit=100)).items) == 30
    assert (await client.runs(since=datetime.now(UTC) + timedelta(hours=1))).items == []
    sync_ids = await anyio.to_thread.run_sync(lambda: _sync_ids(settings))
    assert sync_ids[:2] == ["e29", "e28"]

    # A rare match does not scan the whole log in one call: it answers with a cursor.
    from rsched._store.runs_log import RunFilter, read_runs

    page = await read_runs(redis, keys, RunFilter(status="failed"), limit=100, scan_max=8)
    assert [r.execution_id for r in page] == ["e25"]
    assert page.cursor is not None
    more = await read_runs(redis, keys, RunFilter(status="failed"), limit=100, cursor=page.cursor)
    assert [r.execution_id for r in more] == ["e20", "e15", "e10", "e5", "e0"]


async def test_skipped_occurrences_are_logged(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    await client.add({"id": "s", "task": "t.s", "every": 3600, "queue": "q2"})  # overlap=skip
    await client.add({"id": "b", "task": "t.b", "every": 3600, "overlap": "buffer_one"})
    for sid in ("s", "b", "s", "b", "b"):
        await anyio.sleep(0.003)  # a manual run's execution id is its ms: one each
        await client.trigger(sid)
    store = ScheduleStore(redis, Keys(settings.prefix))
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    (fields,) = await store.fields(["s"])
    now = await store.time_ms()
    await redis.zadd(store.keys.schedules, {"s": now - 7_200_000})
    item = FireItem("s", fields["version"], now - 7_200_000, now - 7_200_000, now + 3_600_000,
                    "skip", 2, FireSpec.from_hash(fields))  # fmt: skip
    assert await firing(store).fire(lease, [item]) == [Code.MISFIRE_SKIPPED]
    skipped = (await client.runs(status="skipped")).items
    got = {(r.schedule_id, r.task, r.queue, r.reason) for r in skipped}
    assert got == {
        ("s", "t.s", "q2", "overlap"),
        ("s", "t.s", "q2", "misfire"),
        ("b", "t.b", "default", "buffer_full"),
    }
    assert all(r.scheduled_at and r.ended_at and r.error_type is None for r in skipped)
    # The two runs fired are in progress (queued).
    fired = (await client.runs(status="fired")).items
    assert sorted(r.schedule_id or "" for r in fired) == ["b", "s"]


async def test_cancelled_runs_say_why(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    await client.add({"id": "c", "task": "t.ok", "every": 3600, "overlap": "cancel_previous"})
    first = await client.trigger("c")
    await anyio.sleep(0.003)
    second = await client.trigger("c")  # the first, still queued, is superseded
    async with running(_worker(settings), redis):

        async def ended() -> bool:
            page = await client.runs(schedule_id="c", limit=10)
            return sum(r.status in ("completed", "cancelled") for r in page) == 2

        await eventually(ended)
    by_id = {r.execution_id: r for r in await client.runs(schedule_id="c")}
    cancelled = by_id[first.execution_id]
    assert (cancelled.status, cancelled.reason, cancelled.task) == (
        "cancelled",
        "superseded",
        "t.ok",
    )
    assert cancelled.queue == "default"
    assert cancelled.worker
    assert cancelled.error_type is None
    assert cancelled.scheduled_at is not None
    assert by_id[second.execution_id].status == "completed"


async def test_an_operator_cancel_is_logged(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    await client.add({"id": "n", "task": "t.n", "every": 3600})
    fired = await client.trigger("n")
    await client.enqueue("t.later", execution_id="later", delay=3600)
    assert await client.cancel(fired.execution_id) == "queued"
    assert await client.cancel("later") == "delayed"
    got = {r.execution_id: r for r in await client.runs(status="cancelled")}
    assert (got[fired.execution_id].schedule_id, got[fired.execution_id].task) == ("n", "t.n")
    assert got[fired.execution_id].reason == "cancelled"
    assert got["later"].schedule_id is None
    assert got["later"].queue == "default"
    # Removed while it waits, then cancelled: logged, and no history comes back.
    again = await client.trigger("n")
    await client.remove("n")
    assert await client.cancel(again.execution_id) == "queued"
    assert not await redis.exists(Keys(settings.prefix).history("n"))
    assert again.execution_id in {r.execution_id for r in await client.runs(status="cancelled")}


def _sync_ids(settings: Settings) -> list[str]:
    with rsched.SyncClient.from_url(settings.url, prefix=settings.prefix) as client:
        return [r.execution_id for r in client.runs(limit=5)]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"status": "exploded"}, "status"),
        ({"limit": 0}, "limit"),
        ({"since": "soon"}, "since"),
        ({"since": datetime(2026, 1, 1)}, "since"),
        ({"cursor": "nope"}, "cursor"),
    ],
)
async def test_bad_arguments_name_the_field(
    redis: Redis, settings: Settings, kwargs: dict[str, object], field: str
) -> None:
    client = rsched.Client(redis, settings)
    with pytest.raises(rsched.InvalidArgument) as info:
        await client.runs(**kwargs)  # type: ignore[arg-type]
    assert field in str(info.value)


async def test_cli_runs(
    redis: Redis, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    client = rsched.Client(redis, settings)
    async with running(_worker(settings), redis):
        await client.enqueue("t.ok")
        await client.enqueue("t.boom", max_retries=0)

        async def ended() -> bool:
            page = await client.runs(limit=10)
            return sum(r.status in ("completed", "dead") for r in page) == 2

        await eventually(ended)
    env = ["--redis-url", settings.url, "--prefix", settings.prefix]
    code = await anyio.to_thread.run_sync(lambda: cli_main([*env, "runs", "--json"]))
    assert code == 0
    rows = orjson.loads(capsys.readouterr().out)
    assert {(r["task"], r["status"]) for r in rows["runs"]} == {
        ("t.ok", "completed"),
        ("t.boom", "dead"),
    }
    code = await anyio.to_thread.run_sync(
        lambda: cli_main([*env, "runs", "--status", "dead", "--since", "1h", "--task", "t.boom"])
    )
    out = capsys.readouterr().out
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:3] == ["STARTED", "ENDED", "STATUS"]  # ordered by the end
    assert re.match(r"^(now|\S+ ago) +(now|\S+ ago) +dead +- +t\.boom ", row), row
    assert "t.boom" in out
    assert "t.ok" not in out
    assert main_help_of("runs").count("then by when they ended") == 1
    code = await anyio.to_thread.run_sync(lambda: cli_main([*env, "runs", "--status", "nope"]))
    assert code != 0
    assert "status" in capsys.readouterr().err


def main_help_of(command: str) -> str:
    """``rsched COMMAND --help`` as printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli_main([command, "--help"])
    return " ".join(out.getvalue().split())


def test_a_scheduled_runs_record_names_its_schedule_by_its_execution_id() -> None:
    fields = {
        "execution_id": "nightly@1767229200000",
        "schedule_id": "nightly",
        "task": "t",
        "scheduled_at": "1767229200000",
        "fired_at": "1767229200003",
        "attempt": "1",
    }
    record = run_record(fields, queue="default", status="completed", worker="w", duration_ms=47)
    assert orjson.loads(record)[1] is None  # schedule id and scheduled ms: in the execution id
    assert orjson.loads(record)[5] is None
    read = record_of("1767229200051-0", {"r": record})
    assert read is not None
    assert read.schedule_id == "nightly"
    assert read.scheduled_at == datetime(2026, 1, 1, 1, tzinfo=UTC)
    older = orjson.dumps(["nightly@1767229200000", "nightly", "t", "default", "completed",
                          1767229200000, 1767229200003, 1, "w", 47, None, None])  # fmt: skip
    assert record_of("1767229200051-0", {"r": older.decode()}) == read
    job = run_record({"execution_id": "job-1", "task": "t"}, queue="q", status="completed")
    enqueued = record_of("1767229200051-0", {"r": job})
    assert enqueued is not None
    assert (enqueued.schedule_id, enqueued.scheduled_at) == (None, None)
