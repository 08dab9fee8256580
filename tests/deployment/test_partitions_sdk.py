"""The SDK over a deployment of 16 partitions: routing by schedule and execution id, and the
reads merged over every partition in the order of one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched import Client, Schedule, Settings
from rsched._client.schedules_file import sync_file
from rsched._core.keys import Keys
from rsched._core.partitions import job_partition, partition_of
from rsched._store.queues import QueueStore
from rsched._store.runs_log import run_record

N = 16


@pytest.fixture
def psettings(settings: Settings) -> Settings:
    return settings.model_copy(update={"partitions": N})


@pytest.fixture
async def pclient(psettings: Settings, redis: Redis, prefix: str) -> AsyncIterator[Client]:
    async with Client.from_settings(psettings) as client:
        yield client
    # Partition keys carry {prefix:k...}: the redis fixture deletes only {prefix}:*.
    found = [k async for k in redis.scan_iter(match=f"{{{prefix}:*", count=1000)]
    for start in range(0, len(found), 1000):
        await redis.delete(*found[start : start + 1000])


def keys_of(prefix: str, partition: int) -> Keys:
    return Keys(prefix, N, partition)


@pytest.mark.cluster
async def test_schedules_live_in_their_partition(
    pclient: Client, redis: Redis, prefix: str
) -> None:
    ids = [f"s{i:03d}" for i in range(40)]
    for sid in ids:
        await pclient.add(Schedule(id=sid, task="t", every=60 + int(sid[1:])))
    used = {partition_of(sid, N) for sid in ids}
    assert len(used) > 8
    for sid in ids:
        k = keys_of(prefix, partition_of(sid, N))
        assert await redis.exists(k.schedule(sid))
        assert await redis.zscore(k.schedules, sid) is not None
    assert await redis.hget(Keys(prefix).meta, "partitions") == str(N)
    s = await pclient.update("s007", every=600)
    assert s.every == 600
    await pclient.pause("s007", note="why")
    assert (await pclient.get("s007")).paused
    await pclient.resume("s007")
    fired = await pclient.trigger("s007")
    assert fired.status == "fired"
    home = keys_of(prefix, partition_of("s007", N))
    assert await redis.xlen(home.queue("default")) == 1
    assert (await pclient.history("s007")).items
    await pclient.remove("s007")
    with pytest.raises(rsched.ScheduleNotFound):
        await pclient.get("s007")


@pytest.mark.cluster
async def test_list_pages_through_every_partition_in_order(pclient: Client) -> None:
    specs = [
        Schedule(id=f"p{i:03d}", task="t" if i % 3 else "three", every=60 + i % 37)
        for i in range(300)
    ]
    result = await pclient.add_many(specs)
    assert result.count("created") == 300
    await pclient.pause("p005")
    expected = sorted(
        (s.next_run.timestamp() if s.next_run else float("inf"), s.id)
        for s in [await pclient.get(spec.id) for spec in specs]
    )
    seen: list[str] = []
    cursor = None
    while True:
        page = await pclient.list(limit=37, cursor=cursor)
        assert len(page.items) <= 37
        seen += [s.id for s in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [sid for _, sid in expected]
    assert seen[-1] == "p005"
    three = [s.id async for s in pclient.iter_schedules(task="three", page_size=7)]
    assert three == [sid for _, sid in expected if int(sid[1:]) % 3 == 0]


@pytest.mark.cluster
async def test_bulk_writes_check_every_partition_first(pclient: Client) -> None:
    specs = [{"id": f"b{i:03d}", "task": "t", "cron": "0 * * * *"} for i in range(200)]
    await pclient.add(Schedule(id="b150", task="t", every=60))
    with pytest.raises(rsched.InvalidSchedules) as err:
        await pclient.add_many(specs)
    assert "[150] b150: id: already exists" in str(err.value)
    assert (await pclient.stats()).schedules["total"] == 1  # nothing written anywhere
    result = await pclient.upsert_many(specs)
    assert result.count("created") == 199
    assert result.count("replaced") == 1
    assert list(result.outcomes) == [s["id"] for s in specs]
    again = await pclient.upsert_many(specs)
    assert again.count("unchanged") == 200


@pytest.mark.cluster
async def test_enqueue_job_cancel_result_by_execution_id(
    pclient: Client, redis: Redis, prefix: str
) -> None:
    made = await pclient.enqueue("t", {"n": 1}, queue="q")
    k = keys_of(prefix, job_partition(made.execution_id, N))
    assert await redis.xlen(k.queue("q")) == 1
    assert (await pclient.job(made.execution_id)).state == "queued"
    own = await pclient.enqueue("t", queue="q", execution_id="order-42")
    again = await pclient.enqueue("t", queue="q", execution_id="order-42")
    assert own.created
    assert not again.created
    home = keys_of(prefix, partition_of("order-42", N))
    assert await redis.exists(home.dedup("order-42"))
    later = await pclient.enqueue("t", queue="q", delay="1h", execution_id="later-1")
    assert (await pclient.job(later.execution_id)).state == "delayed"
    assert await pclient.cancel("later-1") == "delayed"
    assert await pclient.cancel(made.execution_id) == "queued"
    with pytest.raises(rsched.JobNotFound):
        await pclient.cancel(made.execution_id)
    store = QueueStore(redis, home)
    await store.store_results([("order-42", orjson.dumps({"ok": True}))], ttl_ms=60_000)
    assert await pclient.result("order-42") == {"ok": True}
    jobs = await pclient.jobs(queue="q")
    assert [j.execution_id for j in jobs.items] == ["order-42"]
    stats = await pclient.stats()
    assert stats.partitions == N
    assert len(stats.leaders) == N
    assert stats.queues["q"]["length"] == 1
    # A fired occurrence is in its schedule's partition.
    await pclient.add(Schedule(id="nightly", task="t", every=3600))
    fired = await pclient.trigger("nightly")
    assert job_partition(fired.execution_id, N) == partition_of("nightly", N)
    assert (await pclient.job(fired.execution_id)).state == "queued"


@pytest.mark.cluster
async def test_calls_with_one_debounce_key_land_in_its_partition(
    pclient: Client, redis: Redis, prefix: str
) -> None:
    keys = [f"reindex:{n}" for n in range(12)]
    assert len({partition_of(key, N) for key in keys}) > 4
    for key in keys:
        made = [
            await pclient.enqueue("t", {"n": n}, queue="q", debounce_key=key, debounce="1h")
            for n in range(3)
        ]
        assert [m.created for m in made] == [True, False, False]
        execution_id = made[0].execution_id
        assert {m.execution_id for m in made} == {execution_id}
        # The window's job, its key and the job's execution id: all in the key's partition.
        home = keys_of(prefix, partition_of(key, N))
        assert job_partition(execution_id, N) == partition_of(key, N)
        member = await redis.get(home.debounce("q", key))
        assert member is not None
        assert await redis.zscore(home.delayed_queue("q"), member) is not None
        job = await pclient.job(execution_id)
        assert (job.state, job.payload) == ("delayed", {"n": 2})
    assert (await pclient.stats()).queues["q"]["delayed"] == len(keys)
    # Cancelled, the window is closed: the next call opens another, in the same partition.
    first = (
        await pclient.enqueue("t", queue="q", debounce_key=keys[0], debounce="1h")
    ).execution_id
    assert await pclient.cancel(first) == "delayed"
    reopened = await pclient.enqueue("t", queue="q", debounce_key=keys[0], debounce="1h")
    assert reopened.created
    assert reopened.execution_id != first
    assert job_partition(reopened.execution_id, N) == partition_of(keys[0], N)
    with pytest.raises(rsched.InvalidJob, match="debounce_key"):
        await pclient.enqueue("t", debounce_key=42, debounce="1s")  # type: ignore[arg-type]


@pytest.mark.cluster
async def test_dead_letters_merge_newest_first(pclient: Client, redis: Redis, prefix: str) -> None:
    # Entries of the same id in several partitions: ordered by partition, none lost.
    written = []
    for n in range(30):
        k = n % 5 * 3
        entry = f"{1_000 + n // 3}-0"
        job = orjson.dumps(["execution_id", f"x{n}", "task", "t", "attempt", "3"]).decode()
        fields: dict[Any, Any] = {"execution_id": f"x{n}", "task": "t", "job": job}
        await redis.xadd(keys_of(prefix, k).dead("q"), fields, id=entry)
        written.append((1_000 + n // 3, k, f"x{n}"))
    expected = [x for _, _, x in sorted(written, reverse=True)]
    seen, cursor = [], None
    while True:
        page = await pclient.dead_letters("q", limit=4, cursor=cursor)
        seen += [d.execution_id for d in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == expected
    first = (await pclient.dead_letters("q", limit=2)).items
    letter = await pclient.dead_letter("q", first[1].entry_id)
    assert letter.execution_id == first[1].execution_id
    with pytest.raises(rsched.InvalidArgument, match="cursor"):
        await pclient.dead_letters("q", cursor="nope")
    assert await pclient.requeue("q", [first[0].entry_id]) == 1
    assert await pclient.purge("q") == 29
    assert (await pclient.stats()).dead_letters == 0


@pytest.mark.cluster
async def test_runs_merge_newest_first(pclient: Client, redis: Redis, prefix: str) -> None:
    written = []
    for n in range(40):
        k = n * 7 % N
        fields = {"execution_id": f"job-{n}", "task": "t", "attempt": "1"}
        record = run_record(fields, queue="q", status="completed" if n % 4 else "dead")
        entry = f"{2_000 + n // 4}-{n % 2}"
        await redis.xadd(keys_of(prefix, k).runs, {"r": record}, id=entry)
        written.append(((2_000 + n // 4, n % 2, k), f"job-{n}", n % 4 == 0))
    written.sort(reverse=True)
    pages = []
    cursor = None
    while True:
        page = await pclient.runs(limit=6, cursor=cursor)
        pages.append(page.items)
        cursor = page.cursor
        if cursor is None:
            break
    assert [r.execution_id for p in pages for r in p] == [x for _, x, _ in written]
    dead = [r.execution_id async for r in pclient.iter_runs(status="dead", page_size=3)]
    assert dead == [x for _, x, d in written if d]


async def test_health_names_the_partitions_without_a_leader(
    pclient: Client, redis: Redis, prefix: str
) -> None:
    for k in range(N):
        if k not in (3, 11):
            await redis.set(keys_of(prefix, k).leader, f"1:host-{k}", px=60_000)
    health = await pclient.health()
    assert [p.message for p in health.problems if p.check == "no_leader"] == [
        f"no scheduler holds the lease of partition(s) 3, 11 (of {N})"
    ]
    assert health.leaders[3] is None
    assert health.leaders[0] == "host-0"
    stats = await pclient.stats()
    assert stats.leaders[11] is None
    assert stats.leader is not None


async def test_sync_keeps_each_partitions_source_index(
    pclient: Client, psettings: Settings, redis: Redis, prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.toml"
    body = "".join(
        f'[[schedule]]\nid = "f{i:02d}"\ntask = "t"\nevery = "1h"\n\n' for i in range(30)
    )
    path.write_text(body)
    plan = await sync_file(redis, psettings, path)
    assert len(plan.changes) == 30
    for i in range(30):
        sid = f"f{i:02d}"
        assert await redis.sismember(keys_of(prefix, partition_of(sid, N)).source("file:jobs"), sid)
    path.write_text(body.split("[[schedule]]", 2)[1].join(["[[schedule]]", ""]))
    plan = await sync_file(redis, psettings, path)
    assert sorted(c.action for c in plan.changes) == ["remove"] * 29
    assert [s.id for s in (await pclient.list()).items] == ["f00"]
    assert await redis.hget(Keys(prefix).source_paths, "file:jobs") == str(path.resolve())


async def test_a_client_configured_for_another_number_refuses(
    pclient: Client, redis_url: str, prefix: str
) -> None:
    await pclient.add(Schedule(id="a", task="t", every=60))
    async with Client.from_url(redis_url, prefix=prefix, partitions=4) as other:
        with pytest.raises(rsched.PartitionMismatch):
            await other.get("a")
    async with Client.from_url(redis_url, prefix=prefix) as unset:
        assert (await unset.get("a")).id == "a"


def test_web_api_lists_and_counts_every_partition(psettings: Settings, prefix: str) -> None:
    pytest.importorskip("uvicorn", reason="the web extra is not installed")
    from tests.support.web import serve

    with rsched.SyncClient(psettings.url, prefix=prefix, partitions=N) as c:
        c.add_many([{"id": f"w{i:02d}", "task": "t", "every": 60 + i} for i in range(45)])
        assert c.partitions() == N
        assert c.init(N) is False
        with serve(psettings) as base:
            seen, cursor = [], None
            while True:
                params = {"limit": 10, **({"cursor": cursor} if cursor else {})}
                body = httpx.get(base + "/api/v1/schedules", params=params).json()
                seen += [s["id"] for s in body["items"]]
                cursor = body["cursor"]
                if not cursor:
                    break
            assert seen == [f"w{i:02d}" for i in range(45)]
            stats = httpx.get(base + "/api/v1/stats").json()
            assert stats["schedules"]["total"] == 45
            assert stats["partitions"] == N
            overview = httpx.get(base + "/_live/overview")
            assert overview.status_code == 200
            assert f"0 of {N}" in overview.text
        for i in range(45):
            c.remove(f"w{i:02d}")


def test_cli_init_where_and_stats(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rsched._cli.main import main

    def cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--redis-url", redis_url, "--prefix", prefix, *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    assert cli("init", "--partitions", str(N)) == (
        0,
        f"deployment {prefix!r}: stored {N} partition(s)\n",
        "",
    )
    code, out, _ = cli("init", "--partitions", str(N))
    assert code == 0
    assert "already: nothing to do" in out
    code, _, err = cli("init", "--partitions", "4")
    assert code == 1
    assert f"has {N} partition(s) but this process is configured for 4" in err
    code, out, _ = cli("where", "nightly", "--json")
    where = orjson.loads(out)
    k = partition_of("nightly", N)
    assert where["schedule"]["partition"] == k
    assert where["schedule"]["hash"] == keys_of(prefix, k).schedule("nightly")
    code, out, _ = cli("where", "nightly@1767229200000")
    assert f"as an execution id: partition {k} of {N}" in out
    assert "as a schedule id" not in out
    code, out, _ = cli("stats")
    assert code == 0
    assert f"partitions: {N}" in out
    assert "leader:    none (no scheduler is running)" in out
    stats = orjson.loads(cli("stats", "--json")[1])
    assert stats["partitions"] == N
    assert stats["leaders"] == [None] * N


async def test_a_rare_filter_pages_on_where_each_partition_stopped(
    pclient: Client, redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rsched._store.partitions.SCAN_MAX", 0)
    monkeypatch.setattr("rsched._store.partitions.SCAN_MIN", 3)  # each partition looks at 3 a read
    written = []
    for n in range(120):
        k = n * 5 % N
        status = "dead" if n % 7 == 0 else "completed"
        fields = {"execution_id": f"job-{n}", "task": "t", "attempt": "1"}
        entry = f"{5_000 + n // 3}-{n % 3}"
        await redis.xadd(
            keys_of(prefix, k).runs, {"r": run_record(fields, queue="q", status=status)}, id=entry
        )
        written.append(((5_000 + n // 3, n % 3, k), f"job-{n}", status))
    written.sort(reverse=True)
    seen, cursor = [], None
    while True:
        page = await pclient.runs(status="dead", limit=2, cursor=cursor)
        assert len(page.items) <= 2
        seen += [r.execution_id for r in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [x for _, x, status in written if status == "dead"]


@pytest.mark.cluster
async def test_flows_live_in_one_partition_each_and_list_across_them(
    pclient: Client, psettings: Settings, redis: Redis, prefix: str
) -> None:
    from tests.support.waiting import eventually
    from tests.support.worker_app import fast_settings
    from tests.support.workers import running

    worker = rsched.Worker(settings=fast_settings(psettings))

    @worker.task("p.part")
    async def part(job: rsched.Job) -> int:
        return int(job.payload["i"])

    @worker.task("p.join")
    async def join(job: rsched.Job) -> int:
        return sum(job.parent_results)

    flow = rsched.chain(
        rsched.group(rsched.step("p.part", {"i": i}) for i in range(3)), rsched.step("p.join")
    )
    ids = [(await pclient.run_flow(flow)).flow_id for _ in range(8)]
    await pclient.add(Schedule(id="pf", every="1d", flow=flow))
    started = (await pclient.trigger("pf")).execution_id
    limited = await pclient.run_flow(
        rsched.step("p.join", limits=[rsched.Limit("flow-lim", concurrency=1)])
    )
    assert job_partition(limited.flow_id, N) == 0  # where every limit lives
    for flow_id in ids:
        assert await redis.exists(keys_of(prefix, job_partition(flow_id, N)).flow(flow_id))

    async def all_completed() -> bool:
        page = await pclient.flows(state="completed", limit=100)
        return len(page.items) == 10

    async with running(worker, None):
        await eventually(all_completed, what="every flow completed")
    home = partition_of("pf", N)  # a schedule's flow lives in its schedule's partition
    assert await redis.exists(keys_of(prefix, home).flow(started))
    listed = (await pclient.flows(limit=100)).items
    assert {f.flow_id for f in listed} == {*ids, started, limited.flow_id}
    # Newest first, merged over the partitions (flows of one millisecond in two partitions
    # may come in either order).
    assert [f.created_at for f in listed] == sorted((f.created_at for f in listed), reverse=True)
    assert (await pclient.flow(ids[0])).steps[-1].result == 3
