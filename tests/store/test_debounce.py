"""Debounced enqueue (lua/debounce.lua): a burst of calls with one debounce key makes one job,
with the last call's fields, due a debounce after the last call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.codes import Code
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from tests.support.waiting import eventually
from tests.support.worker_app import any_


@pytest.fixture
def store(redis: Redis, settings: Settings) -> QueueStore:
    return QueueStore(redis, Keys(settings.prefix), max_payload_bytes=1000)


async def delayed(store: QueueStore, queue: str = "default") -> list[tuple[dict[str, str], int]]:
    """The queue's delayed jobs (fields, due ms), earliest first."""
    key = store.keys.delayed_queue(queue)
    members = await any_(store.redis).zrange(key, 0, -1, withscores=True)
    out = []
    for member, score in members:
        flat = orjson.loads(member)
        out.append((dict(zip(flat[::2], flat[1::2], strict=True)), int(score)))
    return out


async def promoted(store: QueueStore, queue: str = "default") -> int:
    """Wait until the promoter moved the queue's due delayed jobs to its streams; how many."""

    async def moved() -> int:
        return (await store.promote([queue]))[0]

    return int(await eventually(moved))


async def keys_of(redis: Redis, prefix: str) -> list[str]:
    return sorted(str(k) for k in await any_(redis).keys(f"*{prefix}*"))


@pytest.mark.cluster
async def test_a_burst_makes_one_job_with_the_last_call_due_after_it(store: QueueStore) -> None:
    made = [
        await store.enqueue("t.index", {"n": n}, debounce_key="reindex:42", debounce="2s")
        for n in range(5)
    ]
    assert [m.created for m in made] == [True, False, False, False, False]
    assert len({m.execution_id for m in made}) == 1
    before = await store.time_ms()
    last = await store.enqueue(
        "t.index", {"n": "last"}, debounce_key="reindex:42", debounce=2, priority="high",
        max_retries=7,
    )  # fmt: skip
    after = await store.time_ms()
    assert last == rsched.Enqueued(made[0].execution_id, created=False)
    [(fields, due)] = await delayed(store)
    assert fields["execution_id"] == last.execution_id
    assert orjson.loads(fields["payload"]) == {"n": "last"}
    assert fields["priority"] == "high"
    assert orjson.loads(fields["opts"]) == {"max_retries": 7}
    # Due 2 s after the last call, by the server's clock.
    assert before + 2000 <= due <= after + 2000
    assert int(fields["scheduled_at"]) == due
    assert before <= int(fields["fired_at"]) <= after
    assert "default" in await store.queue_names()
    # The window key names the job's member, and outlives its due time a little.
    window = store.keys.debounce("default", "reindex:42")
    assert orjson.loads(await any_(store.redis).get(window))[1] == last.execution_id
    assert 2000 < await store.redis.pttl(window) <= 2000 + 300_000


@pytest.mark.cluster
async def test_the_window_closes_when_the_job_leaves_the_delayed_set(
    store: QueueStore, redis: Redis
) -> None:
    first = await store.enqueue("t", {"n": 1}, debounce_key="k", debounce=0.05)
    assert first.created
    # Promoted (the promoter moved it to the stream): the window is closed.
    k = store.keys
    assert await promoted(store) == 1  # due in 50 ms by the server's clock
    [(_, job)] = await any_(redis).xrange(k.queue("default"))
    assert job["execution_id"] == first.execution_id
    assert orjson.loads(job["payload"]) == {"n": 1}
    second = await store.enqueue("t", {"n": 2}, debounce_key="k", debounce="1m")
    assert second.created
    assert second.execution_id != first.execution_id
    # Cancelled: closed as well.
    member = await any_(redis).get(k.debounce("default", "k"))
    assert await redis.zrem(k.delayed_queue("default"), member)
    third = await store.enqueue("t", {"n": 3}, debounce_key="k", debounce="1m")
    assert third.created
    assert third.execution_id not in (first.execution_id, second.execution_id)


@pytest.mark.cluster
async def test_keys_and_queues_are_independent(store: QueueStore) -> None:
    a = await store.enqueue("t", debounce_key="a", debounce="1m")
    b = await store.enqueue("t", debounce_key="b", debounce="1m")
    a_other = await store.enqueue("t", queue="other", debounce_key="a", debounce="1m")
    assert [a.created, b.created, a_other.created] == [True] * 3
    assert len({a.execution_id, b.execution_id, a_other.execution_id}) == 3
    again = await store.enqueue("t", debounce_key="b", debounce="1m")
    assert again == rsched.Enqueued(b.execution_id, created=False)
    assert len(await delayed(store)) == 2
    assert len(await delayed(store, "other")) == 1
    # Queue "x:y" with key "z" and queue "x" with key "y:z" are two windows.
    one = await store.enqueue("t", queue="x:y", debounce_key="z", debounce="1m")
    two = await store.enqueue("t", queue="x", debounce_key="y:z", debounce="1m")
    assert [one.created, two.created] == [True, True]


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"debounce": "2s"}, "debounce_key", "give the key of the calls to collapse"),
        ({"debounce_key": "k"}, "debounce", "give how long after the last call"),
        ({"debounce_key": "a b", "debounce": 2}, "debounce_key", "not a valid debounce key"),
        ({"debounce_key": "k{x}", "debounce": 2}, "debounce_key", "not a valid debounce key"),
        ({"debounce_key": "k", "debounce": "soon"}, "debounce", "not a duration"),
        ({"debounce_key": "k", "debounce": 0}, "debounce", "zero"),
        ({"debounce_key": "k", "debounce": -1}, "debounce", "negative"),
        ({"debounce_key": "k", "debounce": "2d"}, "debounce", "longer than a day"),
        ({"debounce_key": "k", "debounce": timedelta(days=1, seconds=1)}, "debounce", "a day"),
        (
            {"debounce_key": "k", "debounce": 2, "execution_id": "mine"},
            "execution_id",
            "leave execution_id out",
        ),
        ({"debounce_key": "k", "debounce": 2, "delay_s": "5s"}, "delay_s", "leave delay_s out"),
    ],
)
async def test_bad_debounce_arguments_name_the_field_and_write_nothing(
    store: QueueStore, redis: Redis, prefix: str, kwargs: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(rsched.InvalidJob, match=message) as caught:
        await store.enqueue("t", {"n": 1}, **kwargs)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert await keys_of(redis, prefix) == []


async def test_limits_of_debounce_are_accepted(store: QueueStore) -> None:
    day = await store.enqueue("t", debounce_key="day", debounce="1d")
    ms = await store.enqueue("t", debounce_key="ms", debounce="1ms", delay_s=0)
    assert [day.created, ms.created] == [True, True]


async def test_a_resent_call_answers_the_first_result_without_writing_again(
    store: QueueStore,
) -> None:
    k = store.keys
    keys = [k.delayed_queue("q"), k.queues, *k.new_op()[:1], k.debounce("q", "key")]
    op_a, op_b = "op-a", "op-b"
    fields = ["task", "t", "payload", '{"n":1}', "attempt", "1", "origin", "enqueue", "opts", "{}"]
    first = await store.call("debounce", keys, ["q", 60_000, op_a, "job-1", *fields])
    again = await store.call("debounce", keys, ["q", 60_000, op_a, "job-1", *fields])
    assert again == first
    assert (int(first[0]), first[2]) == (Code.DELAYED, "job-1")
    assert len(await delayed(store, "q")) == 1
    # A joining call re-sent: the same answer, still one job, its due time moved once.
    later = ["task", "t", "payload", '{"n":2}', "attempt", "1", "origin", "enqueue"]
    joined = await store.call("debounce", keys, ["q", 120_000, op_b, "job-2", *later])
    [(_, due)] = await delayed(store, "q")
    resent = await store.call("debounce", keys, ["q", 120_000, op_b, "job-2", *later])
    assert resent == joined
    assert (int(joined[0]), joined[2]) == (Code.DEBOUNCED, "job-1")
    [(fields_now, due_now)] = await delayed(store, "q")
    assert due_now == due == int(joined[1])
    assert fields_now["payload"] == '{"n":2}'
    # Malformed arguments write nothing.
    bad = await store.call("debounce", keys, ["q", 0, "op-c", "job-3", *later])
    assert int(bad[0]) == Code.BAD_ARGS
    bad = await store.call("debounce", keys, ["q", 1000, "op-d", "job-3", "task"])
    assert int(bad[0]) == Code.BAD_ARGS
    assert len(await delayed(store, "q")) == 1


async def test_a_key_of_the_wrong_type_writes_nothing(store: QueueStore, redis: Redis) -> None:
    await redis.hset(store.keys.debounce("default", "k"), "x", "y")
    with pytest.raises(rsched.StateError, match="queue 'default'"):
        await store.enqueue("t", debounce_key="k", debounce=2)
    assert await delayed(store) == []
    assert await store.queue_names() == []


async def test_the_job_keeps_the_last_calls_level_when_promoted(
    store: QueueStore, redis: Redis
) -> None:
    await store.enqueue("t", {"n": 1}, debounce_key="k", debounce=0.05)
    await store.enqueue("t", {"n": 2}, debounce_key="k", debounce=0.05, priority="low")
    assert await promoted(store) == 1
    assert await redis.xlen(store.keys.queue("default")) == 0
    [(_, job)] = await any_(redis).xrange(store.keys.queue("default", "low"))
    assert orjson.loads(job["payload"]) == {"n": 2}
