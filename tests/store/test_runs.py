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
from rsched._store import runs_log
from rsched._store.queues import QueueStore
from rsched._store.runs_log import RunFilter, record_of, run_record
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


async def test_a_filtered_read_looks_a_few_records_a_call(
    redis: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs_log, "_CHUNK", 4)  # lua/runs_scan.lua's calls: 4 records each
    keys = Keys(settings.prefix)
    fields = {"task": "t", "attempt": "1"}
    for i in range(30):
        status = "dead" if i % 5 == 0 else "completed"
        record = run_record({**fields, "execution_id": f"e{i}"}, queue="default", status=status)
        await redis.xadd(keys.runs, {"r": record})
    client = rsched.Client(redis, settings)
    assert [r.execution_id for r in await client.runs(status="dead")] == [
        "e25", "e20", "e15", "e10", "e5", "e0",
    ]  # fmt: skip
    first = await client.runs(status="dead", limit=4)
    assert first.cursor is not None
    rest = await client.runs(status="dead", limit=4, cursor=first.cursor)
    assert [r.execution_id for r in rest] == ["e5", "e0"]
    assert (await client.runs(status="dead", task="other")).items == []
    await redis.delete(keys.runs)
    await redis.set(keys.runs, "someone else's")  # not a stream: nothing to read
    assert (await client.runs(status="dead")).items == []


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
    assert all(r.attempt is None and r.fired_at is None for r in skipped)
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
    assert (cancelled.queue, cancelled.attempt) == ("default", 1)
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
    # Schedule and scheduled time named by the execution id, fired 3 ms after it, the first
    # attempt, the default queue and no error: left out.
    assert record == '["nightly@1767229200000","completed","t","w",47,3]'
    read = record_of("1767229200051-0", {"r": record})
    assert read is not None
    assert read.schedule_id == "nightly"
    assert read.scheduled_at == datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert read.fired_at == datetime(2026, 1, 1, 1, 0, 0, 3000, tzinfo=UTC)
    assert (read.attempt, read.queue, read.worker) == (1, "default", "w")
    older = orjson.dumps(["nightly@1767229200000", "nightly", "t", "default", "completed",
                          1767229200000, 1767229200003, 1, "w", 47, None, None])  # fmt: skip
    assert record_of("1767229200051-0", {"r": older.decode()}) == read
    job = run_record({"execution_id": "job-1", "task": "t"}, queue="q", status="completed")
    assert job == '["job-1","completed","t",null,null,null,0,"q"]'
    enqueued = record_of("1767229200051-0", {"r": job})
    assert enqueued is not None
    assert (enqueued.schedule_id, enqueued.scheduled_at, enqueued.attempt) == (None, None, None)


def _older(fields: dict[str, str], queue: str, status: str, **kw: object) -> str:
    """The twelve values an earlier version wrote for the same run."""
    get = fields.get

    def num(value: str | None) -> int | None:
        return int(value) if value and value.isdigit() else None

    exec_id, sid, sched = get("execution_id", ""), get("schedule_id"), get("scheduled_at")
    named = exec_id == f"{sid}@{sched}"
    return orjson.dumps([
        exec_id, None if named else sid, get("task", ""), queue,
        {"retry": "retried"}.get(status, status), None if named else num(sched),
        num(get("fired_at")), num(get("attempt")), kw.get("worker") or None,
        kw.get("duration_ms"), kw.get("error_type") or None, kw.get("error") or None,
    ]).decode()  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "queue", "status", "kw"),
    [
        ({"execution_id": "s@1767229200000", "schedule_id": "s", "task": "t",
          "scheduled_at": "1767229200000", "fired_at": "1767229200002", "attempt": "3"},
         "mail", "failed", {"worker": "h:1:a", "duration_ms": 12, "error_type": "ValueError",
                            "error": "bad"}),
        # A manual run of a schedule: its execution id does not name its scheduled time.
        ({"execution_id": "s@1767229200000~m", "schedule_id": "s", "task": "t",
          "scheduled_at": "1767229200000", "fired_at": "1767229199990", "attempt": "1"},
         "default", "retry", {"worker": "w", "duration_ms": 5}),
        # An enqueued job's own id that looks like a scheduled run's: read as it is.
        ({"execution_id": "order@42", "task": "t", "fired_at": "1767229200001"},
         "default", "dead", {"error_type": "KeyError"}),
        # A delayed enqueued job, fired (written) before its scheduled time.
        ({"execution_id": "j", "task": "t", "scheduled_at": "1767229260000",
          "fired_at": "1767229200000", "attempt": "1"}, "default", "completed", {"worker": "w"}),
        ({"execution_id": "c", "task": "t", "attempt": "2"}, "q", "cancelled",
         {"error_type": "cancelled"}),
    ],
)  # fmt: skip
def test_compact_records_read_as_the_twelve_values_did(
    fields: dict[str, str], queue: str, status: str, kw: dict[str, object]
) -> None:
    record = run_record(fields, queue=queue, status=status, **kw)  # type: ignore[arg-type]
    older = _older(fields, queue, status, **kw)
    assert len(record) < len(older)
    read = record_of("1767229200051-0", {"r": record})
    assert read is not None
    if fields["execution_id"] != "order@42":
        assert read == record_of("1767229200051-0", {"r": older})
    else:  # the earlier layout took it for a schedule's run
        assert (read.schedule_id, read.scheduled_at) == (None, None)
        assert read.fired_at == datetime(2026, 1, 1, 1, 0, 0, 1000, tzinfo=UTC)


@pytest.mark.parametrize("value", ["", "{}", "[]", '["x"' + ",null" * 12 + "]", '"text"'])
def test_entries_that_are_no_record_are_passed_over(value: str) -> None:
    assert record_of("1767229200051-0", {"r": value}) is None


def test_a_filter_passes_over_only_records_it_would_not_keep() -> None:
    """What a filtered read looks for in a record's text before reading it (RunFilter.needles):
    found in every layout of a record the filter keeps, so no record it keeps is passed over."""
    fields = {
        "execution_id": "s.1@1767229200000",
        "schedule_id": "s.1",
        "task": "t.a",
        "scheduled_at": "1767229200000",
        "fired_at": "1767229200003",
        "attempt": "2",
    }
    manual = {**fields, "execution_id": "s.1@1767229200000~m"}
    texts = [
        run_record(fields, queue="q", status="dead", worker="w", error_type="E", error='"dead"'),
        run_record(manual, queue="default", status="retry", worker="w"),
        run_record({"execution_id": "job-1", "task": "t.a"}, queue="q", status="completed"),
        _older(fields, "q", "failed", worker="w"),
        _older({**fields, "execution_id": "x"}, "q", "completed"),
        '["s.1@1767229200000","skipped","t.a",null,null,null,0,"q","overlap"]',  # run_skipped.lua
        '["s.1@1767229200000","cancelled","t.a","w",null,null,null,null,"superseded"]',
    ]
    for text in texts:
        record = record_of("1767229200051-0", {"r": text})
        assert record is not None
        sid, task = record.schedule_id, record.task
        kept = [
            RunFilter(status=record.status),
            RunFilter(execution_id=record.execution_id),
            RunFilter(schedule_id=sid),
            RunFilter(task=task),
            RunFilter(status=record.status, schedule_id=sid, task=task),
        ]
        for want in kept:
            assert want.keeps(record)
            assert all(n in text for n in want.needles()), (want, text)
        assert len(kept[0].needles()) == 1
        others = (RunFilter(status="timed_out"), RunFilter(task="t"), RunFilter(schedule_id="s"))
        assert not any(other.keeps(record) for other in others)
    # A name a JSON encoder might write escaped is left to keeps.
    assert RunFilter(execution_id="a/b", task="t").needles() == ('"t"',)
