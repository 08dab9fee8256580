"""Schedule health (late, stuck, failing) and the deployment checks, against real servers:
``Client.health``, ``rsched monitor`` and ``rsched health``, with the scheduler killed, a task
that keeps failing and a worker frozen mid-run."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import anyio
import orjson
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

import rsched
from rsched import Scheduler
from rsched._core.health import Facts, classify, last_outcomes
from rsched._core.keys import Keys, parked_bucket
from rsched._core.settings import HealthSettings, SchedulerSettings, Settings
from rsched._redis.connection import connect
from tests.support.command import cli
from tests.support.waiting import WAIT_S, eventually
from tests.support.webhook_receiver import Receiver, receiving, verify
from tests.support.worker_app import fast_env, fast_settings


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


def quick(settings: Settings, **health: object) -> Settings:
    """Short lease and health intervals, so a test sees changes in a second."""
    return fast_settings(settings).model_copy(
        update={
            "scheduler": SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200),
            "health": HealthSettings.model_validate({"check_interval_s": 0.2, **health}),
        }
    )


@asynccontextmanager
async def scheduling(settings: Settings) -> AsyncIterator[Scheduler]:
    redis = connect(settings.url)
    scheduler = Scheduler(redis, settings)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            yield scheduler
            scheduler.stop()
    finally:
        await redis.aclose()


@asynccontextmanager
async def working(worker: rsched.Worker, redis: Redis) -> AsyncIterator[rsched.Worker]:
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, redis)
        try:
            yield worker
        finally:
            worker.stop()


# --- pure classification ---------------------------------------------------------------------


def test_classify_orders_late_before_stuck_before_failing() -> None:
    now = 1_000_000
    dead = [{"event": "dead", "execution_id": f"a@{i}", "at": now - i} for i in range(3)]
    running = {"event": "running", "execution_id": "a@9", "at": now - 20_000}
    facts = Facts(
        exists=True, score=now - 61_000, run="a@9", run_state="running", timeout_s=10,
        history=[running, *dead],
    )  # fmt: skip
    assert classify("a", facts, now, 3, 0).state == "late"
    facts.score = now + 1000
    stuck = classify("a", facts, now, 3, 0)
    assert stuck.state == "stuck"
    assert "past its timeout" in stuck.reason
    assert classify("a", facts, now, 3, 15).state == "failing"  # within the grace: not stuck
    facts.status = "paused"
    assert classify("a", facts, now, 3, 0).state == "paused"


def test_a_failed_attempt_counts_until_its_run_ends() -> None:
    history = [
        {"event": "completed", "execution_id": "a@3"},
        {"event": "failed", "execution_id": "a@3"},
        {"event": "failed", "execution_id": "a@2"},
        {"event": "dead", "execution_id": "a@1"},
    ]
    assert [ok for ok, _ in last_outcomes(history, 3)] == [True, False, False]
    assert last_outcomes(history[1:], 3)[0][0] is False


# --- against the servers ---------------------------------------------------------------------


async def test_late_without_any_scheduler(settings: Settings, redis: Redis) -> None:
    """The failure this exists for: nothing fires, and Redis alone says so."""
    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "tick", "task": "t", "every": 1, "misfire_grace_s": 0})
        await client.add({"id": "calm", "task": "t", "every": 3600})
        await client.add({"id": "held", "task": "t", "every": 1, "paused": True})

        async def late() -> bool:
            return (await client.schedule_health("tick")).state == "late"

        await eventually(late)
        health = await client.health()
        assert not health.ok
        assert [s.id for s in health.schedules] == ["tick"]
        assert "not fired" in health.schedules[0].reason
        checks = {p.check for p in health.problems}
        assert {"no_leader", "schedules"} <= checks
        assert (await client.schedule_health("calm")).state == "ok"
        assert (await client.schedule_health("held")).state == "paused"
        with pytest.raises(rsched.ScheduleNotFound):
            await client.schedule_health("nope")

    code, out, _ = await cli(settings, "monitor", "--json")
    assert code == 1
    assert [s["id"] for s in orjson.loads(out)["schedules"]] == ["tick"]
    code, out, err = await cli(settings, "health")
    assert code == 1, out
    assert "no_leader" in out
    assert "unhealthy schedules: 1 late" in out
    assert "no_leader" in err


async def test_a_herds_due_range_is_read_whole_not_a_command_a_schedule(
    settings: Settings, redis: Redis
) -> None:
    """A herd puts thousands of schedules in the due range for a moment: health reads the
    oldest max_schedules of them and their fields in a few replies (the due read's runs, one
    JSON document), and reads the next run again only of those it finds late."""
    async with rsched.Client.from_settings(settings) as client:
        await client.add_many(
            [{"id": f"h-{i:04d}", "task": "t", "every": 1} for i in range(1_200)]
            + [{"id": f"a-{i}", "task": "t", "every": 1, "misfire_grace_s": 0} for i in range(3)]
        )

        async def all_due() -> bool:
            return (await client.health()).due == 1_203

        await eventually(all_due)
        await redis.config_resetstat()
        health = await client.health()
    # The ones with no grace are late as soon as they are due; the others, due for a second
    # at most, are within their minute of grace.
    assert sorted(s.id for s in health.schedules) == ["a-0", "a-1", "a-2"]
    assert health.truncated  # 1,203 due, max_schedules 1,000 read
    # The next runs came with the due read: read again only for the three late ones (it was
    # two ZSCOREs for each of the 1,000).
    stats = await redis.info("commandstats")
    assert stats.get("cmdstat_zscore", {}).get("calls", 0) <= 2 * 3


async def test_the_late_ones_next_runs_are_read_again_in_one_command(
    settings: Settings, redis: Redis
) -> None:
    """Each late schedule's next run is read again (it may have fired since the due read): one
    ZMSCORE of the index for all of them, and a ZSCORE of its parked bucket only for one that
    is not in the index."""
    keys = Keys(settings.prefix)
    async with rsched.Client.from_settings(settings) as client:
        late = {"task": "t", "every": 1, "misfire_grace_s": 0}
        await client.add_many([{**late, "id": f"l-{i:03d}"} for i in range(300)])

        async def all_late() -> bool:
            return len((await client.health()).schedules) == 300

        await eventually(all_late)
        # One of them sits in its parked bucket instead (due, and no scheduler brought it
        # back): it is late all the same.
        score = await redis.zscore(keys.schedules, "l-007")
        assert score is not None
        await redis.zrem(keys.schedules, "l-007")
        await redis.zadd(keys.parked_of("l-007"), {"l-007": score})
        await redis.zadd(keys.parked, {str(parked_bucket("l-007")): score})  # its bucket's bound
        await redis.config_resetstat()
        health = await client.health()
    assert [s.id for s in health.schedules] == [f"l-{i:03d}" for i in range(300)]
    assert all(s.state == "late" for s in health.schedules)
    stats = await redis.info("commandstats")
    assert stats["cmdstat_zmscore"]["calls"] == 1
    assert stats["cmdstat_zscore"]["calls"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill", "stop"])
async def test_killing_the_scheduler_turns_a_schedule_late(
    settings: Settings, redis: Redis, spawn: Callable[..., object], sig: signal.Signals
) -> None:
    """Killed, or frozen (SIGSTOP: the process is there, its lease runs out)."""
    env = {"RSCHED_REDIS_URL": settings.url, "RSCHED_PREFIX": settings.prefix}
    proc: object = spawn(
        "rsched._cli.scheduler_process",
        "--lease-ttl-ms",
        "1000",
        "--lease-renew-ms",
        "200",
        env=env,
    )
    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "beat", "task": "t", "every": 1, "misfire_grace_s": 1})

        async def fired() -> bool:
            return (await client.get("beat")).runs >= 1

        await eventually(fired)
        code, out, _ = await cli(settings, "monitor")
        assert code == 0, out
        assert "all schedules healthy" in out
        proc.signal(sig)  # type: ignore[attr-defined]
        started = anyio.current_time()

        async def late() -> bool:
            return any(
                s.id == "beat" and s.state == "late" for s in (await client.health()).schedules
            )

        await eventually(late)
        assert anyio.current_time() - started < 6  # grace 1 s after the next run (1 s)
        code, out, _ = await cli(settings, "monitor")
        assert code == 1
        assert "beat" in out
        assert "LATE" in out
        code, out, _ = await cli(settings, "health")
        assert code == 1
        assert "no_leader" in out  # its lease ran out


async def test_a_failing_task_turns_its_schedule_failing_then_recovered(
    settings: Settings, redis: Redis, receiver: Receiver
) -> None:
    fast = quick(settings).model_copy(
        update={"alert_webhook_url": receiver.url, "alert_webhook_secret": SecretStr("k")}
    )
    worker = rsched.Worker(settings=fast)
    broken = True

    @worker.task("t.flaky")
    async def flaky(job: rsched.Job) -> None:
        if broken:
            raise ValueError("database is down")

    async with rsched.Client.from_settings(fast) as client:
        await client.add(
            {"id": "sync", "task": "t.flaky", "every": 1, "max_retries": 0, "misfire": "skip"}
        )

        async def states(kind: str) -> bool:
            return any(e.kind == kind for e in await client.events(limit=1000))

        async with scheduling(fast), working(worker, redis):
            await eventually(lambda: states("schedule_failing"))
            health = await client.schedule_health("sync")
            assert health.state == "failing"
            assert "database is down" in health.reason
            assert "dead_letters" in {p.check for p in (await client.health()).problems}
            broken = False
            await eventually(lambda: states("schedule_recovered"))
        events = await client.events(limit=1000)
        kinds = [e.kind for e in events]
        assert kinds.count("schedule_failing") == 1
        assert "leader_changed" in kinds
        assert "dead_letter" in kinds
        failing = next(e for e in events if e.kind == "schedule_failing")
        assert failing.schedule_id == "sync"
        assert "failed or died" in failing.fields["reason"]
        dead = next(e for e in events if e.kind == "dead_letter")
        assert dead.fields["queue"] == "default"
        assert dead.schedule_id == "sync"
        recovered = next(e for e in events if e.kind == "schedule_recovered")
        assert recovered.fields["was"] == "failing"
        assert recovered.fields["state"] == "ok"
        # Read on from an event id: nothing twice.
        after = await client.events(after=events[0].id, limit=1000)
        assert [e.id for e in after] == [e.id for e in events[1:]]
        # The leading scheduler posted them to the webhook, signed (the last may still be on
        # its way when the scheduler stopped).
        posted = [orjson.loads(body) for _, body in receiver.posts]
        assert [p["kind"] for p in posted][:3] == kinds[:3]
        assert "schedule_failing" in [p["kind"] for p in posted]
        assert all(verify("k", headers, body) for headers, body in receiver.posts)


@pytest.mark.slow
async def test_a_frozen_worker_leaves_a_stuck_run(
    settings: Settings, redis: Redis, spawn: Callable[..., object]
) -> None:
    proc: object = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:worker",
        "--queues",
        "default",
        env=fast_env(settings),
    )
    async with rsched.Client.from_settings(settings) as client:
        await client.add(
            {
                "id": "slow",
                "task": "app.sleep",
                "payload": {"s": 30},
                "every": 3600,
                "timeout_s": 1,
                "priority": "high",  # its pending entry is in the queue's high stream
            }
        )
        await client.trigger("slow")

        async def running() -> bool:
            hist = await client.history("slow")
            return any(e.event == "running" for e in hist.items)

        await eventually(running)
        proc.signal(signal.SIGSTOP)  # type: ignore[attr-defined]
        try:

            async def stuck() -> bool:
                return (await client.schedule_health("slow")).state == "stuck"

            await eventually(stuck)
            health = await client.health()
            assert [s.state for s in health.schedules] == ["stuck"]
            assert "stalled" in {p.check for p in health.problems}
            code, out, _ = await cli(settings, "health", "--json")
            assert code == 1
            assert "stalled" in {p["check"] for p in orjson.loads(out)["problems"]}
        finally:
            proc.signal(signal.SIGCONT)  # type: ignore[attr-defined]


async def test_queue_with_jobs_and_no_live_worker(settings: Settings, redis: Redis) -> None:
    async with rsched.Client.from_settings(settings) as client:
        await client.enqueue("t.any", {}, queue="mail")
        await client.enqueue("t.any", {}, queue="urgent", priority="high")
        health = await client.health(dead_letter_window_s=0)
        messages = [p.message for p in health.problems if p.check == "no_worker"]
        assert messages == [
            "queue mail holds 1 job(s) and no live worker",
            "queue urgent holds 1 job(s) and no live worker",
        ]


async def test_jobs_taken_by_a_gone_worker_are_stalled(settings: Settings, redis: Redis) -> None:
    fast = fast_settings(settings)  # visibility timeout 1 s
    async with rsched.Client.from_settings(fast) as client:
        await client.enqueue("t.any", {}, queue="mail", priority="high")
        stream = f"{{{settings.prefix}}}:queue:mail#high"
        await redis.xgroup_create(stream, "rsched", id="0", mkstream=True)
        # A worker takes the job and is gone: no heartbeat, and no other worker to reclaim it.
        await redis.xreadgroup("rsched", "gone:1:x", {stream: ">"}, count=1)
        health = await client.health(dead_letter_window_s=0)
        assert not [p for p in health.problems if p.check == "stalled"]
        await anyio.sleep(2.2)
        health = await client.health(dead_letter_window_s=0)
        stalled = [p.message for p in health.problems if p.check == "stalled"]
        assert stalled == [
            "queue mail: 1 job(s) taken by a worker and without a heartbeat for over 2s: "
            "no worker reclaims them"
        ]


async def test_a_healthy_deployment_exits_0(settings: Settings, redis: Redis) -> None:
    fast = quick(settings)
    worker = rsched.Worker(settings=fast)

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        pass

    async with rsched.Client.from_settings(fast) as client:
        await client.add({"id": "fine", "task": "t.ok", "every": 1})
        async with scheduling(fast) as scheduler, working(worker, redis):
            await eventually(lambda: _is(scheduler.is_leader))
            await eventually(lambda: _runs(client, "fine", 1))
            health = await client.health()
            assert health.ok, health.problems
            assert health.leader
            assert health.leader.startswith(scheduler.owner.split(":")[0])
            code, out, _ = await cli(settings, "health")
            assert code == 0, out
            assert out.startswith("healthy")
            code, out, _ = await cli(settings, "health", "--max-due", "0", "--json")
            assert code == 1 or orjson.loads(out)["due"] == 0  # a due one trips --max-due 0
        with rsched.SyncClient(fast.url, fast.prefix) as sync:
            assert sync.schedule_health("fine").state in ("ok", "late")


async def test_monitor_watch_refreshes(settings: Settings, redis: Redis) -> None:
    env = {**os.environ, "RSCHED_REDIS_URL": settings.url, "RSCHED_PREFIX": settings.prefix}
    async with await anyio.open_process(
        [sys.executable, "-m", "rsched._cli.main", "monitor", "--watch", "--interval", "0.2"],
        env=env,
    ) as proc:
        assert proc.stdout is not None
        seen = b""
        with anyio.fail_after(WAIT_S):
            async for chunk in proc.stdout:
                seen += chunk
                if seen.count(b"--- ") >= 2:
                    break
        proc.terminate()
    assert b"all schedules healthy" in seen


async def test_bad_limits_are_refused_naming_the_field(settings: Settings) -> None:
    async with rsched.Client.from_settings(settings) as client:
        with pytest.raises(rsched.InvalidArgument, match="max_due"):
            await client.health(max_due=-1)
        with pytest.raises(rsched.InvalidArgument, match="max_overdue_s"):
            await client.health(max_overdue_s="soon")
        health = await client.health(max_overdue_s="5m", dead_letter_window_s=0)
        assert "no_leader" in {p.check for p in health.problems}
    code, _, err = await cli(settings, "health", "--max-due", "-1")
    assert code == 2
    assert "--max-due: give a whole number ≥ 0, got '-1'" in err


async def _is(value: bool) -> bool:
    return value


async def _runs(client: rsched.Client, sid: str, n: int) -> bool:
    return (await client.get(sid)).runs >= n
