"""Labels on schedules: their rules, the label index kept by every write, finding schedules by
label, task and queue (Client.select, Client.list) and the bulk actions (docs/labels.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from redis.asyncio import Redis

from rsched import (
    BulkResult,
    Client,
    InvalidArgument,
    InvalidJob,
    InvalidSchedule,
    InvalidSchedules,
    Job,
    Schedule,
    Settings,
    StateError,
    SyncClient,
    Worker,
)
from rsched._client.schedules_file import sync_file
from rsched._core.keys import Keys
from rsched._store.schedules import ScheduleStore
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings


@pytest.fixture
async def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings)


def spec(sid: str, **over: Any) -> dict[str, Any]:
    return {"id": sid, "task": "reports.run", "every": 3600, **over}


async def members(redis: Redis, prefix: str, pair: str) -> set[str]:
    return {str(m) for m in await redis.smembers(Keys(prefix).label(pair))}


async def test_labels_are_stored_and_read_back(client: Client, redis: Redis, prefix: str) -> None:
    added = await client.add(spec("a", labels={"team": "billing", "order": 42}))
    assert added.labels == {"order": "42", "team": "billing"}
    stored = await redis.hget(Keys(prefix).schedule("a"), "labels")
    assert stored == "order=42,team=billing"
    assert (await client.get("a")).labels == added.labels
    assert await members(redis, prefix, "team=billing") == {"a"}
    assert await members(redis, prefix, "order=42") == {"a"}
    # Without labels: no field, no index key.
    await client.add(spec("plain"))
    assert await redis.hget(Keys(prefix).schedule("plain"), "labels") is None
    assert await redis.keys(f"{{{prefix}}}:label:*") != []
    assert (await client.get("plain")).labels == {}


@pytest.mark.parametrize(
    ("labels", "wrong"),
    [
        ({"Team": "x"}, "is not a label key"),
        ({"team": "a b"}, "is not a label value"),
        ({"team": "a=b"}, "is not a label value"),
        ({"team": ""}, "is not a label value"),
        ({"team": "x" * 65}, "is not a label value"),
        ({"t{x}": "y"}, "is not a label key"),
        ({f"k{i}": "v" for i in range(17)}, "over the limit of 16"),
        ("team", "write it key=value"),
    ],
)
async def test_a_bad_label_is_refused_and_nothing_written(
    client: Client, redis: Redis, prefix: str, labels: Any, wrong: str
) -> None:
    with pytest.raises(InvalidSchedule, match=wrong) as caught:
        await client.add(spec("a", labels=labels))
    assert caught.value.errors[0][0] == "labels"
    assert await redis.keys(f"{{{prefix}}}:*") == []


async def test_changed_labels_move_in_the_index(client: Client, redis: Redis, prefix: str) -> None:
    await client.add(spec("a", labels={"team": "billing", "env": "prod"}))
    await client.update("a", labels={"team": "sales", "env": "prod"})
    assert await members(redis, prefix, "team=billing") == set()
    assert await members(redis, prefix, "team=sales") == {"a"}
    assert await members(redis, prefix, "env=prod") == {"a"}
    await client.upsert(spec("a"))  # the whole spec replaced: no labels left
    assert await redis.keys(f"{{{prefix}}}:label:*") == []
    await client.upsert(spec("a", labels={"team": "ops"}))
    assert await members(redis, prefix, "team=ops") == {"a"}
    await client.remove("a")
    assert await redis.keys(f"{{{prefix}}}:label:*") == []


async def test_bulk_writes_and_sync_keep_the_index(
    client: Client, redis: Redis, prefix: str, settings: Settings, tmp_path: Path
) -> None:
    result = await client.add_many(
        [spec(f"s-{i}", labels={"team": "billing", "n": str(i)}) for i in range(5)]
        + [Schedule(id="s-9", task="t", every=60, labels={"team": "billing"})]
    )
    assert result.count("created") == 6
    assert await members(redis, prefix, "team=billing") == {f"s-{i}" for i in (0, 1, 2, 3, 4, 9)}
    result = await client.upsert_many(
        [spec(f"s-{i}", labels={"team": "sales"}) for i in range(3)]
        + [spec(f"s-{i}", labels={"team": "billing", "n": str(i)}) for i in (3, 4)]
    )
    assert result.outcomes == {"s-0": "replaced", "s-1": "replaced", "s-2": "replaced",
                               "s-3": "unchanged", "s-4": "unchanged"}  # fmt: skip
    assert await members(redis, prefix, "team=sales") == {"s-0", "s-1", "s-2"}
    assert await members(redis, prefix, "team=billing") == {"s-3", "s-4", "s-9"}
    assert await members(redis, prefix, "n=0") == set()
    path = tmp_path / "schedules.toml"
    path.write_text(
        '[[schedule]]\nid = "f"\ntask = "t"\nevery = 60\nlabels = { team = "billing" }\n'
    )
    await sync_file(redis, settings, path)
    assert "f" in await members(redis, prefix, "team=billing")
    path.write_text('[[schedule]]\nid = "f"\ntask = "t"\nevery = 60\nlabels = { team = "ops" }\n')
    await sync_file(redis, settings, path)
    assert "f" not in await members(redis, prefix, "team=billing")
    assert await members(redis, prefix, "team=ops") == {"f"}
    path.write_text('[[schedule]]\nid = "g"\ntask = "t"\nevery = 60\n')
    await sync_file(redis, settings, path)  # f leaves the file: removed
    assert await members(redis, prefix, "team=ops") == set()


async def test_a_write_that_raced_a_label_change_reads_them_again(
    client: Client, redis: Redis, prefix: str, settings: Settings
) -> None:
    await client.add(spec("a", labels={"team": "billing"}))
    store = ScheduleStore.from_settings(redis, settings)
    # The caller read no labels (another writer added them since): the script refuses, the
    # store reads them again, and the old pair still leaves the index.
    new = Schedule(id="a", task="reports.run", every=3600, labels={"team": "ops"})
    now = await store.time_ms()
    await store.write(new, mode="upsert", expect_gen=None, next_ms=now + 60_000, created_ms=now)
    assert await members(redis, prefix, "team=billing") == set()
    assert await members(redis, prefix, "team=ops") == {"a"}
    # The same write twice (a re-sent call): the index is as after one.
    await store.write(new, mode="upsert", expect_gen=None, next_ms=now + 60_000, created_ms=now,
                      labels="team=ops")  # fmt: skip
    assert await members(redis, prefix, "team=ops") == {"a"}


async def test_an_index_key_of_another_type_writes_nothing(
    client: Client, redis: Redis, prefix: str
) -> None:
    await redis.set(Keys(prefix).label("team=billing"), "not a set")
    with pytest.raises(StateError):
        await client.add(spec("a", labels={"team": "billing"}))
    assert await redis.exists(Keys(prefix).schedule("a")) == 0
    with pytest.raises(InvalidSchedules):
        await client.add_many([spec("a"), spec("a")])
    assert await redis.exists(Keys(prefix).schedule("a")) == 0


async def test_select_by_labels_task_and_queue(client: Client) -> None:
    await client.add_many(
        [
            spec("a", labels={"team": "billing", "env": "prod"}),
            spec("b", labels={"team": "billing", "env": "dev"}, queue="slow"),
            spec("c", labels={"team": "sales"}, task="other.task"),
            spec("d", queue="slow"),
        ]
    )
    assert await client.select(labels={"team": "billing"}) == ["a", "b"]
    assert await client.select(labels={"team": "billing", "env": "prod"}) == ["a"]
    assert await client.select(labels=["team=billing", "env=dev"]) == ["b"]
    assert await client.select(labels={"team": "nobody"}) == []
    assert await client.select(queue="slow") == ["b", "d"]
    assert await client.select(task="other.task") == ["c"]
    assert await client.select(labels={"team": "billing"}, queue="slow") == ["b"]
    with pytest.raises(InvalidArgument, match="give a filter"):
        await client.select()
    with pytest.raises(InvalidArgument, match="labels"):
        await client.select(labels={"team": "a b"})
    with pytest.raises(InvalidArgument, match="task"):
        await client.select(task="no spaces allowed")


async def test_list_by_labels_pages_in_id_order(client: Client) -> None:
    await client.add_many(
        [spec(f"s-{i:02}", labels={"team": "billing"}) for i in range(7)]
        + [spec("x", labels={"team": "sales"})]
    )
    await client.pause("s-03")
    first = await client.list(labels={"team": "billing"}, limit=3)
    assert [s.id for s in first.items] == ["s-00", "s-01", "s-02"]
    assert first.cursor == "s-02"
    rest = await client.list(labels={"team": "billing"}, limit=10, cursor=first.cursor)
    assert [s.id for s in rest.items] == ["s-03", "s-04", "s-05", "s-06"]
    assert rest.cursor is None
    assert rest.items[1].next_run is not None
    paused = await client.list(labels={"team": "billing"}, paused=True)
    assert [s.id for s in paused.items] == ["s-03"]
    every = [s.id async for s in client.iter_schedules(labels={"team": "billing"}, page_size=2)]
    assert every == [f"s-{i:02}" for i in range(7)]


async def test_bulk_actions_say_what_they_did_per_id(
    client: Client, redis: Redis, prefix: str
) -> None:
    await client.add_many([spec(f"s-{i}", labels={"team": "billing"}) for i in range(3)])
    ids = await client.select(labels={"team": "billing"})
    paused = await client.pause_many([*ids, "gone"], note="maintenance")
    assert paused == BulkResult({"s-0": "paused", "s-1": "paused", "s-2": "paused",
                                 "gone": "not_found"})  # fmt: skip
    assert paused.summary() == "3 paused, 1 not_found"
    assert all(s.paused for s in (await client.list(labels={"team": "billing"})).items)
    assert (await client.resume_many(ids)).count("resumed") == 3
    fired = await client.trigger_many(["s-0", "s-0", "gone"])
    assert fired.outcomes == {"s-0": "fired", "gone": "not_found"}
    removed = await client.remove_many(ids)
    assert removed.count("removed") == 3
    assert await redis.keys(f"{{{prefix}}}:label:*") == []
    assert (await client.cancel_many(["nope@1"])).outcomes == {"nope@1": "not_found"}
    with pytest.raises(InvalidArgument, match="not a single one"):
        await client.pause_many("s-0")
    with pytest.raises(InvalidArgument, match="ids"):
        await client.remove_many(["bad id"])


def test_sync_client_selects_and_acts(redis_url: str, prefix: str, topology: str) -> None:
    with SyncClient.from_url(redis_url, prefix, cluster=topology == "cluster") as sync:
        sync.add(spec("a", labels={"team": "billing"}))
        assert sync.select(labels={"team": "billing"}) == ["a"]
        assert [s.id for s in sync.list(labels={"team": "billing"}).items] == ["a"]
        assert sync.pause_many(["a"]).outcomes == {"a": "paused"}
        assert sync.resume_many(["a"]).outcomes == {"a": "resumed"}
        assert sync.trigger_many(["a"]).outcomes == {"a": "fired"}
        assert sync.cancel_many(["a@0"]).outcomes == {"a@0": "not_found"}
        assert sync.remove_many(["a"]).outcomes == {"a": "removed"}


@pytest.mark.cluster
async def test_partitions_are_gathered(redis: Redis, settings: Settings, prefix: str) -> None:
    client = Client(redis, settings.model_copy(update={"partitions": 4}))
    ids = [f"s-{i:02}" for i in range(20)]
    await client.add_many([spec(sid, labels={"team": "billing"}) for sid in ids])
    await client.add(spec("other", labels={"team": "sales"}, queue="q2"))
    assert await client.select(labels={"team": "billing"}) == ids
    assert await client.select(queue="q2") == ["other"]
    page = await client.list(labels={"team": "billing"}, limit=15)
    assert [s.id for s in page.items] == ids[:15]
    assert (await client.remove_many(ids)).count("removed") == 20
    assert await client.select(labels={"team": "billing"}) == []


async def test_enqueued_jobs_carry_labels(client: Client, redis: Redis, prefix: str) -> None:
    await client.enqueue("mail.send", execution_id="m-1", labels={"order": 42, "team": "a"})
    await client.enqueue("mail.send", execution_id="m-2", labels=["team=a"], delay=3600)
    await client.enqueue("mail.send", execution_id="m-3")
    entries: Any = await redis.xrange(Keys(prefix).queue("default"))
    labelled, plain = (fields for _, fields in entries)
    assert labelled["labels"] == "order=42,team=a"
    assert "labels" not in plain  # no labels: no field
    job = await client.job("m-1")
    assert job.labels == {"order": "42", "team": "a"}
    assert job.as_dict()["labels"] == {"order": "42", "team": "a"}
    assert (await client.job("m-2")).labels == {"team": "a"}
    assert (await client.job("m-3")).labels == {}
    page = await client.jobs(labels={"team": "a"}, limit=1)
    assert [j.execution_id for j in page.items] == ["m-1"]
    rest = await client.jobs(labels={"team": "a"}, cursor=page.cursor)
    assert [j.execution_id for j in rest.items] == ["m-2"]
    assert rest.cursor is None
    assert await client.select_jobs(labels={"team": "a", "order": "42"}) == ["m-1"]
    assert await client.select_jobs(labels=["team=a"], task="other.task") == []
    assert sorted(await client.select_jobs(task="mail.send")) == ["m-1", "m-2", "m-3"]
    cancelled = await client.cancel_many(await client.select_jobs(labels={"team": "a"}))
    assert cancelled.summary() == "2 cancelled"
    with pytest.raises(InvalidJob, match="labels") as caught:
        await client.enqueue("mail.send", execution_id="m-4", labels={"Bad": "x"})
    assert caught.value.field == "labels"
    assert await client.select_jobs(task="mail.send") == ["m-3"]
    with pytest.raises(InvalidArgument, match="give a filter"):
        await client.select_jobs()


async def test_a_labels_field_written_by_hand_is_refused_by_name(
    client: Client, redis: Redis, prefix: str
) -> None:
    await client.add(spec("a", labels={"team": "billing"}))
    await redis.hset(Keys(prefix).schedule("a"), "labels", "team=bill ing,*=x")
    with pytest.raises(StateError, match="labels field rsched did not write"):
        await client.remove("a")
    with pytest.raises(StateError, match="labels field rsched did not write"):
        await client.upsert(spec("a"))
    assert await redis.exists(Keys(prefix).schedule("a")) == 1
    assert await members(redis, prefix, "team=billing") == {"a"}


async def test_runs_of_labelled_jobs_carry_their_labels(
    client: Client, redis: Redis, prefix: str, settings: Settings
) -> None:
    worker = Worker(queues=["default"], settings=fast_settings(settings))
    ran: list[str] = []

    @worker.task("mail.send")
    async def send(job: Job) -> None:
        ran.append(job.execution_id)

    await client.enqueue("mail.send", execution_id="m-1", labels={"order": "42"})
    await client.enqueue("mail.send", execution_id="m-2")
    await client.enqueue("mail.send", execution_id="m-3", labels={"order": "42"}, delay=3600)
    await client.cancel("m-3")  # the client's own record (jobs.py)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)
        await eventually(lambda: len(ran) == 2)
        worker.stop()
    entries: Any = await redis.xrange(Keys(prefix).runs)
    by_exec = {orjson.loads(fields["r"])[0]: fields for _, fields in entries}
    assert by_exec["m-1"]["l"] == "order=42"
    assert "l" not in by_exec["m-2"]  # no labels: stored as before
    await eventually(lambda: _runs_of(client, {"order": "42"}, {"m-1", "m-3"}))
    page = await client.runs(labels={"order": "42"}, status="completed")
    assert [(r.execution_id, r.labels) for r in page.items] == [("m-1", {"order": "42"})]
    assert page.items[0].as_dict()["labels"] == {"order": "42"}
    done = {r.execution_id: r for r in (await client.runs(status="completed")).items}
    assert "labels" not in done["m-2"].as_dict()


async def _runs_of(client: Client, labels: dict[str, str], want: set[str]) -> bool:
    return {r.execution_id for r in (await client.runs(labels=labels)).items} == want
