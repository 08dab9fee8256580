"""Flow-control limits in-process against real servers: concurrency and rate caps per key,
waiting aside, fairness between keys, overrides, release on every outcome."""

from __future__ import annotations

import time

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.rules import Priority
from rsched._core.settings import Settings
from tests.support.limits import limits_empty
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running, settled, store_for


class Peak:
    """How many handlers of each key run at once, and the most ever seen."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.starts: list[tuple[str, float]] = []

    async def run(self, key: str, seconds: float) -> None:
        self.now[key] = self.now.get(key, 0) + 1
        self.most[key] = max(self.most.get(key, 0), self.now[key])
        self.starts.append((key, time.monotonic()))
        try:
            await anyio.sleep(seconds)
        finally:
            self.now[key] -= 1


async def test_concurrency_per_key_across_the_workers_slots(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=20))
    peak = Peak()

    @worker.task("sync", limits=[rsched.Limit("customer:{c}", concurrency=2)])
    async def sync(job: rsched.Job) -> None:
        await peak.run(job.payload["c"], 0.05)

    store = store_for(redis, settings)
    async with running(worker, redis):
        for i in range(30):
            await store.enqueue("sync", {"c": f"c{i % 3}"})
        await eventually(lambda: len(peak.starts) == 30)
        await eventually(lambda: settled(redis, settings))
        await eventually(lambda: limits_empty(redis, settings))
    assert peak.most == {"c0": 2, "c1": 2, "c2": 2}


async def test_a_key_at_its_limit_does_not_block_another(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=4))
    started: list[str] = []
    gate = anyio.Event()

    @worker.task("t", limits=[rsched.Limit("k:{k}", concurrency=1)])
    async def t(job: rsched.Job) -> None:
        started.append(job.payload["k"])
        if job.payload["k"] == "busy":
            await gate.wait()

    store = store_for(redis, settings)
    async with running(worker, redis):
        for _ in range(50):
            await store.enqueue("t", {"k": "busy"})
        await eventually(lambda: started == ["busy"])
        await store.enqueue("t", {"k": "free"})
        await eventually(lambda: "free" in started)
        page = await rsched.Client(redis, settings).limits()
        by_key = {row.key: row for row in page}
        assert by_key["k:busy"].holders == 1
        assert by_key["k:busy"].waiting == 49
        assert by_key["k:busy"].concurrency == 1
        waiting = await rsched.Client(redis, settings).waiting("k:busy", limit=5)
        assert [(j.state, j.limit, j.task) for j in waiting] == [("waiting", "k:busy", "t")] * 5
        assert await rsched.Client(redis, settings).waiting("k:free") == []
        # One key's row, read without a scan, is the row the listing has.
        assert await rsched.Client(redis, settings).limit("k:busy") == by_key["k:busy"]
        # The metrics' counts, by the declared template (never the filled key).
        assert await store.limit_counts() == {"k:{k}": (1, 49)}
        gate.set()
        await eventually(lambda: started.count("busy") == 50)
        await eventually(lambda: limits_empty(redis, settings))
        assert await store.limit_counts() == {"k:{k}": (0, 0)}


async def test_rate_limit_caps_starts_in_any_window(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=10))
    starts: list[float] = []

    @worker.task("api", limits=[rsched.Limit("crm", rate="5/s")])
    async def api(job: rsched.Job) -> None:
        starts.append(time.monotonic())

    store = store_for(redis, settings)
    async with running(worker, redis):
        for _ in range(15):
            await store.enqueue("api")
        await eventually(lambda: len(starts) == 15)
    starts.sort()
    # 15 starts at 5 a second take at least two more windows; any 5 + 1 starts span about the
    # period (the handlers start some time after the grant, by Redis TIME, which a loaded
    # machine stretches: the slack).
    assert starts[-1] - starts[0] >= 1.8
    for i in range(len(starts) - 5):
        assert starts[i + 5] - starts[i] >= 0.6, starts


async def test_fair_between_keys_a_big_backlog_does_not_delay_small_keys(
    redis: Redis, settings: Settings
) -> None:
    # One key with 10,000 jobs queued ahead of 100 keys with 10 each: every small key's first
    # job starts while the big key has run only a few of its own (its backlog waits aside, it
    # does not hold the stream). Judged by order, not by the clock: bench/worker.py --fairness
    # measures how soon.
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=20))
    starts: list[str] = []

    @worker.task("t", limits=[rsched.Limit("tenant:{t}", concurrency=1)])
    async def t(job: rsched.Job) -> None:
        starts.append(job.payload["t"])
        await anyio.sleep(0.05)

    store = store_for(redis, settings)
    payloads = [{"t": "big"}] * 10_000 + [{"t": f"s{i}"} for i in range(100) for _ in range(10)]
    for start in range(0, len(payloads), 50):
        async with anyio.create_task_group() as tg:
            for p in payloads[start : start + 50]:
                tg.start_soon(store.enqueue, "t", p)
    async with running(worker, redis):
        await eventually(lambda: len(set(starts)) == 101)
        big_before = starts.index(max(set(starts) - {"big"}, key=starts.index))
    assert starts[:big_before].count("big") <= 100, starts[:big_before].count("big")


@pytest.mark.parametrize("outcome", ["fail", "retry", "cancel_none"])
async def test_holds_are_released_by_every_outcome(
    redis: Redis, settings: Settings, outcome: str
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    runs: list[int] = []

    @worker.task("t", limits=[rsched.Limit("one", concurrency=1)])
    async def t(job: rsched.Job) -> None:
        runs.append(job.attempt)
        if outcome == "fail":
            raise RuntimeError("boom")
        if outcome == "retry" and job.attempt == 1:
            raise rsched.Retry(delay_s=0.05)

    store = store_for(redis, settings)
    async with running(worker, redis):
        await store.enqueue("t", max_retries=0 if outcome == "fail" else 3)
        await store.enqueue("t", max_retries=0 if outcome == "fail" else 3)
        await eventually(lambda: len(runs) >= 2)
        await eventually(lambda: settled(redis, settings))
        await eventually(lambda: limits_empty(redis, settings))


async def test_enqueue_limits_and_set_limit_override(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=10))
    peak = Peak()

    @worker.task("t")
    async def t(job: rsched.Job) -> None:
        await peak.run("x", 0.05)

    client = rsched.Client(redis, settings)
    await client.set_limit("acct:*", concurrency=1)
    # A key not in use: the numbers in force (here a pattern's override) and nothing else.
    assert await client.limit("acct:7") == rsched.LimitInfo(
        "acct:7", "", 1, None, 0, 0, 0, {"c": 1}
    )
    async with running(worker, redis):
        for _ in range(6):
            await client.enqueue("t", {"a": 7}, limits=[rsched.Limit("acct:{a}", concurrency=5)])
        await eventually(lambda: len(peak.starts) == 6)
    assert peak.most["x"] == 1
    await client.clear_limit("acct:*")
    assert not [r for r in await client.limits() if r.override]


async def test_bad_limits_are_refused_naming_the_field(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    with pytest.raises(rsched.InvalidJob, match="customer"):
        await client.enqueue("t", {}, limits=[rsched.Limit("customer:{customer}", concurrency=1)])
    with pytest.raises(rsched.InvalidArgument, match="rate"):
        rsched.Limit("crm", rate="fast")
    with pytest.raises(rsched.InvalidArgument, match="concurrency"):
        rsched.Limit("crm")
    with pytest.raises(rsched.InvalidArgument, match="concurrency"):
        await client.set_limit("crm", concurrency=-1)
    assert not await redis.keys(f"*{settings.prefix}*:queue:*")
    assert not await redis.keys(f"*{settings.prefix}*:limits:*")


async def test_a_waiting_job_is_found_and_cancelled(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    gate = anyio.Event()
    ran: list[str] = []

    @worker.task("t", limits=[rsched.Limit("k", concurrency=1)])
    async def t(job: rsched.Job) -> None:
        ran.append(job.execution_id)
        await gate.wait()

    client = rsched.Client(redis, settings)
    async with running(worker, redis):
        await client.enqueue("t", {"n": 1})
        await eventually(lambda: len(ran) == 1)
        second = (await client.enqueue("t", {"n": 2}, priority="high")).execution_id

        async def waits() -> bool:
            try:
                return (await client.job(second)).state == "waiting"
            except rsched.JobNotFound:
                return False

        await eventually(waits)
        info = await client.job(second)
        assert (info.limit, info.task, info.priority, info.payload) == ("k", "t", "high", {"n": 2})
        assert await client.cancel(second) == "waiting"
        gate.set()
        await eventually(lambda: settled(redis, settings))
        await eventually(lambda: limits_empty(redis, settings))
    assert second not in ran
    with pytest.raises(rsched.JobNotFound):
        await client.job(second)


async def test_a_key_the_payload_cannot_fill_dead_letters_the_job(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t", limits=[rsched.Limit("customer:{customer_id}", concurrency=1)])
    async def t(job: rsched.Job) -> None:
        raise AssertionError("never runs")

    client = rsched.Client(redis, settings)
    async with running(worker, redis):
        await client.enqueue("t", {"other": 1})
        await eventually(lambda: settled(redis, settings))
    (letter,) = (await client.dead_letters()).items
    assert letter.reason == "bad_limit"
    assert "customer_id" in letter.error_message


async def test_two_tasks_sharing_keys_in_either_order_never_deadlock(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=10))
    peak = Peak()
    a, b = rsched.Limit("k1", concurrency=1), rsched.Limit("k2", concurrency=1)

    @worker.task("ab", limits=[a, b])
    async def ab(job: rsched.Job) -> None:
        await peak.run("both", 0.01)

    @worker.task("ba", limits=[b, a])
    async def ba(job: rsched.Job) -> None:
        await peak.run("both", 0.01)

    store = store_for(redis, settings)
    async with running(worker, redis):
        for i in range(40):
            await store.enqueue("ab" if i % 2 else "ba")
        await eventually(lambda: len(peak.starts) == 40)
        await eventually(lambda: limits_empty(redis, settings))
    assert peak.most["both"] == 1


async def test_waiting_jobs_start_by_priority_then_arrival(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    order: list[str] = []
    gate = anyio.Event()

    @worker.task("t", limits=[rsched.Limit("one", concurrency=1)])
    async def t(job: rsched.Job) -> None:
        order.append(job.payload["n"])
        if job.payload["n"] == "first":
            await gate.wait()

    client = rsched.Client(redis, settings)
    async with running(worker, redis):
        await client.enqueue("t", {"n": "first"})
        await eventually(lambda: order == ["first"])
        levels: list[tuple[str, Priority]] = [
            ("low", "low"), ("normal-1", "normal"), ("high", "high"), ("normal-2", "normal")
        ]  # fmt: skip
        for n, level in levels:
            await client.enqueue("t", {"n": n}, priority=level)

        async def all_wait() -> bool:
            return sum(r.waiting for r in await client.limits()) == 4

        await eventually(all_wait)
        gate.set()
        await eventually(lambda: len(order) == 5)
    assert order == ["first", "high", "normal-1", "normal-2", "low"]


async def test_a_schedule_s_limits_hold_for_its_jobs(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=10))
    peak = Peak()

    @worker.task("t")
    async def t(job: rsched.Job) -> None:
        await peak.run("s", 0.05)

    client = rsched.Client(redis, settings)
    await client.add(
        rsched.Schedule(
            id="s",
            task="t",
            every=3600,
            overlap="allow",
            payload={"r": "eu"},
            limits=[rsched.Limit("region:{r}", concurrency=1)],
        )
    )
    assert (await client.get("s")).limits == (rsched.Limit("region:{r}", concurrency=1),)
    async with running(worker, redis):
        for _ in range(5):
            await client.trigger("s")
        await eventually(lambda: len(peak.starts) == 5)
    assert peak.most["s"] == 1
    with pytest.raises(rsched.InvalidSchedule, match="r"):
        await client.add(
            rsched.Schedule(
                id="bad", task="t", every=60, limits=[rsched.Limit("region:{r}", concurrency=1)]
            )
        )


async def test_an_idle_key_keeps_nothing_in_redis(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[int] = []

    @worker.task("t", limits=[rsched.Limit("c:{n}", concurrency=1, rate="20/s")])
    async def t(job: rsched.Job) -> None:
        ran.append(job.payload["n"])

    store = store_for(redis, settings)
    async with running(worker, redis):
        for n in range(5):
            await store.enqueue("t", {"n": n})
        await eventually(lambda: len(ran) == 5)
        limits = Keys(settings.prefix).limits

        async def nothing_kept() -> bool:
            # Every limit key gone, but the per-template counts (at 0) of the metrics.
            left = [k for k in limits if await redis.exists(k)]
            return left == [limits[10]]

        await eventually(nothing_kept)
