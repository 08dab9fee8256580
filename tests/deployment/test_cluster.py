"""rsched on a Redis Cluster / Valkey cluster (cluster mode, one partition): every script on
the cluster, the errors that name cluster mode, failover, and a slot migrated under load."""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from redis.asyncio.cluster import ClusterNode
from redis.exceptions import AskError, MovedError, RedisError, TryAgainError

import rsched
from rsched._cli.main import _delegate as delegate
from rsched._cli.main import _settings as cli_settings
from rsched._cli.parser import build_parser
from rsched._cli.scheduler_process import _parser as scheduler_parser
from rsched._cli.scheduler_process import load_settings as scheduler_settings
from rsched._cli.worker_process import parse_args as worker_args
from rsched._core.keys import Keys
from rsched._core.settings import SchedulerSettings, Settings
from rsched._ops.health import HealthReader
from rsched._redis import cluster as _cluster
from rsched._redis import scripts
from rsched._redis.connection import check_server, connect
from rsched._redis.scripts import ScriptCaller
from rsched._scheduler.retention import Retention
from rsched._scheduler.scheduler import Scheduler
from rsched._store.job_logs import RunNews
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from tests.support.cluster import Cluster, slot_of
from tests.support.leading import firing, leases
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import settled
from tests.support.workload import (
    calendars_tour,
    calendars_tour_end,
    deadlines_and_failures,
    engine,
    excluded,
    flows_ended,
    flows_tour,
    labelled_runs,
    labels_tour,
    limited_task,
    limits_tour,
    ok_and_failing_tasks,
    park_and_bring_back,
    paused,
    some_schedules,
    stalled_flow,
)

#: Deployment keys (docs/keys.md): with partitions they carry another tag than a partition's.
DEPLOYMENT_KEYS = (":meta", ":schedulers", ":workers", ":worker:")


def cluster_settings(url: str, prefix: str) -> Settings:
    fast = SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=200)
    return fast_settings(Settings(redis_url=url, prefix=prefix, cluster=True, scheduler=fast))


def _recording(method: Any, seen: dict[str, Sequence[str]]) -> Any:
    async def recording(self: ScriptCaller, name: str, keys: Sequence[str], *args: Any) -> Any:
        seen.setdefault(name, list(keys))
        return await method(self, name, keys, *args)

    return recording


def _is_deployment_key(key: str) -> bool:
    return any(part in key for part in DEPLOYMENT_KEYS)


async def test_every_script_runs_on_the_cluster(
    cluster: Cluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through the real code paths, once each at least: a script whose keys span two slots is
    # refused by the cluster client (CROSSSLOT) or the server, so this proves one slot each.
    seen: dict[str, Sequence[str]] = {}
    for method in ("call", "call_packed", "call_read"):
        monkeypatch.setattr(ScriptCaller, method, _recording(getattr(ScriptCaller, method), seen))
    settings = cluster_settings(cluster.url, prefix)
    worker = rsched.Worker(settings=settings)
    ran: list[str] = []
    ok_and_failing_tasks(worker, ran)
    limited: list[str] = []
    limited_task(worker, limited)

    async with rsched.Client.from_settings(settings) as client:
        await some_schedules(client)
        await deadlines_and_failures(client)
        await calendars_tour(client)
        await labels_tour(client)
        flows = await flows_tour(client)
        await client.trigger("m1")
        await client.enqueue("t.fail", max_retries=1)
        for _ in range(3):  # one at a time: two wait aside, then resume
            await client.enqueue("t.limited", {"n": 1})
        await client.enqueue("t.ok", delay=0.2)
        for _ in range(2):  # a debounce window opened, then joined
            await client.enqueue("t.ok", debounce_key="burst", debounce=0.05)
        await client.add({"id": "deb", "task": "t.ok", "every": 3600, "debounce": 0.05})
        await client.trigger("deb")  # its job in the delayed set: the same slot
        await client.trigger("deb")
        queued = await client.enqueue("t.ok", queue="idle")
        await client.cancel(queued.execution_id)
        async with engine(settings, worker):
            await eventually(lambda: _has_dead(client))
            await eventually(lambda: len(ran) >= 6)
            await eventually(lambda: len(limited) == 3)
            await eventually(lambda: "fire" in seen)  # not only jobs of the client's
            await eventually(lambda: "expire" in seen)
            await eventually(lambda: paused(client, "pf"))
            await eventually(lambda: excluded(client))
            await eventually(lambda: labelled_runs(client))
            await eventually(lambda: flows_ended(client, flows))
        await client.job(ran[0])
        await client.job_logs(ran[0], attempt=1)  # a pipeline of reads in the job's slot
        first = await client.list(limit=1)
        await client.list(limit=1, cursor=first.cursor)
        await client.requeue(task="t.fail")
        await client.remove("a")
        await calendars_tour_end(client)
    redis = connect(settings)
    keys = Keys(prefix)
    schedules, queues = ScheduleStore(redis, keys), QueueStore(redis, keys)
    lease, _ = await leases(schedules).acquire("test", 10_000)
    assert lease is not None
    assert await leases(schedules).renew(lease, 10_000)
    await park_and_bring_back(schedules, lease)
    await redis.zadd(keys.backlogs, {"a": 1})  # a backlog the sweep finds gone
    await firing(schedules).release_lost(lease)
    async with rsched.Client.from_settings(settings) as client:
        await stalled_flow(client, redis, keys)
    assert (await Retention(redis, settings, lambda: True).sweep()).flows_repaired == 1
    await queues.reclaim([(("default", "normal"), "0-0")], "nobody", 0, 10)
    await queues.hand_back("default", "nobody", ["0-1"], 0)
    await queues.heartbeat("default", "nobody", ["0-1"])
    await queues.write_news([RunNews("j", 1, "t", (0.5, "", 1), [b'[1,"info","m"]'])], 60_000)
    async with rsched.Client.from_settings(settings) as client:
        await limits_tour(client, queues)
    await redis.aclose()
    for name, used in seen.items():
        assert len({slot_of(k) for k in used}) <= 1, (name, used)
    # With several partitions such a script would span two slots.
    mixed = {n for n, used in seen.items() if len({_is_deployment_key(k) for k in used}) > 1}
    assert not mixed, "scripts touching deployment and partition keys together"
    assert set(scripts.names()) - set(seen) == set(), "scripts this test never ran"


async def _has_dead(client: rsched.Client) -> bool:
    return bool((await client.dead_letters()).items)


# --- what a user pointing rsched at the wrong kind of server is told ----------------------------


async def test_plain_mode_on_a_cluster_names_cluster_mode(cluster: Cluster, prefix: str) -> None:
    keys = Keys(prefix)
    other = next(n for n in cluster.primaries() if n is not cluster.owner_of_key(keys.leader))
    settings = Settings(redis_url=other.url, prefix=prefix)
    redis = connect(settings)
    try:
        with pytest.raises(rsched.WrongNode, match=r"--cluster or RSCHED_CLUSTER=true"):
            await check_server(redis, settings, keys.leader)
    finally:
        await redis.aclose()


async def test_cluster_mode_on_a_single_server_is_refused(redis_url: str, prefix: str) -> None:
    settings = Settings(redis_url=redis_url, prefix=prefix, cluster=True)
    redis = connect(settings)
    try:
        with pytest.raises(rsched.RedisUrlMismatch, match=r"not a Redis Cluster node.*--cluster"):
            await check_server(redis, settings, Keys(prefix).leader)
    finally:
        await redis.aclose()


async def test_a_script_the_primary_forgot_is_loaded_again(cluster: Cluster, prefix: str) -> None:
    settings = cluster_settings(cluster.url, prefix)
    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "a", "task": "t", "every": 60})
        for node in cluster.primaries():  # as on a new primary, or after a restart
            cluster.command(node, "SCRIPT FLUSH")
        await client.pause("a")
        assert (await client.get("a")).paused


# --- faults -----------------------------------------------------------------------------------


async def _jobs(redis: Any, keys: Keys) -> list[dict[str, str]]:
    return [fields for _, fields in await redis.xrange(keys.queue("default"))]


@pytest.mark.slow
async def test_failover_of_the_deployments_primary_keeps_firing(
    make_cluster: Callable[..., Cluster], prefix: str
) -> None:
    cluster = make_cluster(replicas=True)
    settings = cluster_settings(cluster.url, prefix)
    keys = Keys(prefix)
    redis = connect(settings)
    scheduler = Scheduler(connect(settings), settings)
    try:
        async with rsched.Client.from_settings(settings) as client:
            await client.add({"id": "s", "task": "t", "every": 1, "overlap": "allow"})
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            await eventually(lambda: _count_at_least(redis, keys, 2))
            _, new = await anyio.to_thread.run_sync(cluster.fail_over, slot_of(keys.leader))
            # The new primary has no scripts yet unless replication brought them: make sure.
            cluster.command(new, "SCRIPT FLUSH")
            failed_over = time.monotonic()
            before = len(await _jobs(redis, keys))
            await eventually(lambda: _count_at_least(redis, keys, before + 3))
            resumed_s = time.monotonic() - failed_over
            scheduler.stop()
        times = Counter(int(job["scheduled_at"]) for job in await _jobs(redis, keys))
        repeated = [t for t, n in times.items() if n > 1]
        # Asynchronous replication may lose the last writes before the failover, which fires
        # that occurrence again; nothing else is repeated, and firing resumes within seconds.
        assert len(repeated) <= 1, repeated
        assert resumed_s < 10
    finally:
        await redis.aclose()
        await scheduler.redis.aclose()


async def _count_at_least(redis: Any, keys: Keys, n: int) -> bool:
    try:
        return int(await redis.xlen(keys.queue("default"))) >= n
    except (RedisError, OSError):
        return False  # the failover is under way


def _slot_and_target(cluster: Cluster, keys: Keys) -> tuple[int, Any]:
    """The slot of the deployment's keys, and a primary that does not serve it."""
    slot = slot_of(keys.leader)
    return slot, next(n for n in cluster.primaries() if n is not cluster.owner(slot))


def _recording_worker(
    settings: Settings, *, concurrency: int, run_s: float = 0.0
) -> tuple[rsched.Worker, list[tuple[str, str]]]:
    """A worker whose task ``t`` records (schedule id, scheduled time) and takes ``run_s``. No job
    is reclaimed while a loaded machine starves its heartbeat: a reclaimed job would rightly run
    again, and the tests count runs."""
    worker = rsched.Worker(
        settings=fast_settings(settings, concurrency=concurrency, visibility_timeout_s=60)
    )
    ran: list[tuple[str, str]] = []

    @worker.task("t")
    async def record(job: rsched.Job) -> None:
        assert job.scheduled_at is not None
        ran.append((str(job.schedule_id), job.scheduled_at.isoformat()))
        await anyio.sleep(run_s)

    return worker, ran


def _each_ran_once_every(ran: Sequence[tuple[str, str]], step_s: float) -> set[str]:
    """Checks that no occurrence (schedule id, scheduled time) ran twice and none was lost in
    between (each schedule's runs are ``step_s`` apart); returns the schedule ids."""
    assert max(Counter(ran).values()) == 1, "an occurrence ran twice"
    by_schedule: dict[str, list[datetime]] = {}
    for sid, at in ran:
        by_schedule.setdefault(sid, []).append(datetime.fromisoformat(at))
    for sid, times in by_schedule.items():
        times.sort()
        steps = {(b - a).total_seconds() for a, b in itertools.pairwise(times)}
        assert steps <= {step_s}, (sid, times)
    return set(by_schedule)


@pytest.mark.slow
async def test_a_slot_migrated_under_a_herd_fires_and_runs_each_occurrence_once(
    make_cluster: Callable[..., Cluster], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    redirected: Counter[str] = Counter()
    execute = ClusterNode.execute_command

    async def watching(self: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        try:
            return await execute(self, *args, **kwargs)
        except (AskError, MovedError, TryAgainError) as exc:
            redirected[type(exc).__name__] += 1
            raise

    monkeypatch.setattr(ClusterNode, "execute_command", watching)
    cluster = make_cluster(replicas=False)
    settings = cluster_settings(cluster.url, prefix)
    keys = Keys(prefix)
    slot, target = _slot_and_target(cluster, keys)
    worker, ran = _recording_worker(settings, concurrency=50)

    herd = 1000
    start = datetime.now(UTC) + timedelta(seconds=2)
    redis = connect(settings)
    async with rsched.Client.from_settings(settings) as client:
        result = await client.add_many(
            [
                {"id": f"h{i}", "task": "t", "every": 2, "start_at": start, "overlap": "allow"}
                for i in range(herd)
            ]
        )
        assert len(result.ids("created")) == herd
        async with engine(settings, worker) as scheduler:
            await eventually(lambda: len(ran) >= herd)  # the first round ran
            moved = await cluster.migrate_slot(slot, target, batch=20, pause_s=0.01)
            after = len(ran)
            await eventually(lambda: len(ran) >= after + 2 * herd)
            scheduler.stop()
            # Every job fired ran: nothing left in the stream, nothing pending.
            await eventually(lambda: settled(redis, settings))
    await redis.aclose()
    assert len(ran) >= scheduler.fired_total
    assert cluster.owner(slot) is target
    assert moved > 2 * herd
    # The clients met the slot half moved and then moved (the counts vary from run to run).
    assert redirected["MovedError"] > 0, redirected
    assert redirected["AskError"] + redirected["TryAgainError"] > 0, redirected
    assert len(_each_ran_once_every(ran, 2.0)) == herd


@pytest.mark.slow
async def test_a_script_on_half_migrated_keys_waits_for_the_migration(
    make_cluster: Callable[..., Cluster], prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The script's keys are split between two nodes for longer than redis-py's own retries
    # last (TRYAGAIN): the call backs off until the slot has moved, then succeeds.
    cluster = make_cluster(replicas=False)
    settings = cluster_settings(cluster.url, prefix)
    slot = slot_of(Keys(prefix).leader)
    target = next(n for n in cluster.primaries() if n is not cluster.owner(slot))
    caplog.set_level("DEBUG", logger="rsched.lua")
    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "a", "task": "t", "every": 60})
        first_moved = anyio.Event()

        async def mark() -> None:
            first_moved.set()

        async with anyio.create_task_group() as tg:
            # The schedule's hash moves first: pause.lua's keys are split until the end.
            schedule = Keys(prefix).schedule("a")
            tg.start_soon(
                lambda: cluster.migrate_slot(
                    slot, target, batch=1, pause_s=0.3, between=mark, first=[schedule]
                )
            )
            await first_moved.wait()
            await client.pause("a")
        assert (await client.get("a")).paused
    assert cluster.owner(slot) is target
    assert any(r.getMessage() == "script.tryagain" for r in caplog.records)


@pytest.mark.slow
async def test_a_slot_migrated_under_runs_and_pending_occurrences_runs_each_once(
    make_cluster: Callable[..., Cluster], prefix: str
) -> None:
    # Runs take longer than the period (buffer_all): while the slot moves, fires meet run
    # markers and add pending occurrences, and each run's end releases the next one.
    cluster = make_cluster(replicas=False)
    settings = cluster_settings(cluster.url, prefix)
    keys = Keys(prefix)
    slot, target = _slot_and_target(cluster, keys)
    worker, ran = _recording_worker(settings, concurrency=100, run_s=1.3)

    herd = 60
    ids = [f"b{i}" for i in range(herd)]
    start = datetime.now(UTC) + timedelta(seconds=1)
    redis = connect(settings)
    async with rsched.Client.from_settings(settings) as client:
        await client.add_many(
            [
                {"id": sid, "task": "t", "every": 1, "start_at": start, "overlap": "buffer_all"}
                for sid in ids
            ]
        )
        async with engine(settings, worker) as scheduler:
            await eventually(lambda: _any_pending(redis, keys, ids))
            moved = await cluster.migrate_slot(slot, target, batch=10, pause_s=0.1)
            after = len(ran)
            await eventually(lambda: len(ran) >= after + 2 * herd)
            scheduler.stop()
            # What was fired or pending runs to the end.
            await eventually(lambda: _drained(redis, keys, ids))
        assert moved > herd
        assert cluster.owner(slot) is target
        # No index entry was lost: every schedule still has its next run.
        scores = await redis.zmscore(keys.schedules, ids)
        assert None not in scores
    await redis.aclose()
    assert _each_ran_once_every(ran, 1.0) == set(ids)


async def _any_pending(redis: Any, keys: Keys, ids: Sequence[str]) -> bool:
    async with redis.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.exists(keys.pending(sid))
        return any(await pipe.execute())


async def _drained(redis: Any, keys: Keys, ids: Sequence[str]) -> bool:
    """Nothing pending, and every job acknowledged."""
    if await _any_pending(redis, keys, ids):
        return False
    stream = keys.queue("default")
    pending = await redis.xpending(stream, "rsched")
    return int(await redis.xlen(stream)) == 0 and int(pending["pending"]) == 0


@pytest.mark.slow
async def test_fires_held_back_past_their_retries_by_a_migration_fire_after_it(
    make_cluster: Callable[..., Cluster],
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The slot moves key by key for longer than a call retries TRYAGAIN (shortened here): the
    # scheduler backs off and tries again, sets no schedule aside, and fires once it has moved.
    monkeypatch.setattr(scripts, "TRYAGAIN_LIMIT_S", 0.3)
    cluster = make_cluster(replicas=False)
    settings = cluster_settings(cluster.url, prefix)
    keys = Keys(prefix)
    slot, target = _slot_and_target(cluster, keys)
    caplog.set_level("INFO", logger="rsched.scheduler")
    redis = connect(settings)
    scheduler = Scheduler(connect(settings), settings)
    try:
        async with rsched.Client.from_settings(settings) as client:
            for sid in ("a", "b", "c"):
                await client.add({"id": sid, "task": "t", "every": 0.2, "overlap": "allow"})
            async with anyio.create_task_group() as tg:
                await tg.start(scheduler.run)
                await eventually(lambda: _count_at_least(redis, keys, 6))
                # The schedules index moves first: every fire is split until the end.
                await cluster.migrate_slot(
                    slot, target, batch=1, pause_s=0.25, first=[keys.schedules]
                )
                moved_at = len(await _jobs(redis, keys))
                await eventually(lambda: _count_at_least(redis, keys, moved_at + 6))
                scheduler.stop()
        jobs = await _jobs(redis, keys)
    finally:
        await redis.aclose()
        await scheduler.redis.aclose()
    messages = [r.getMessage() for r in caplog.records]
    assert "redis.error" in messages  # a round gave up on the migration and was tried again
    assert "schedule.fire_failed" not in messages
    assert {job["schedule_id"] for job in jobs[moved_at:]} == {"a", "b", "c"}
    times = Counter((job["schedule_id"], job["scheduled_at"]) for job in jobs)
    assert max(times.values()) == 1


def test_rsched_web_takes_the_cluster_flag() -> None:
    pytest.importorskip("fastapi", reason="the web extra is not installed")
    from rsched.web._main import build_parser as web_parser

    assert web_parser().parse_args(["--cluster"]).cluster


def test_every_command_takes_the_cluster_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSCHED_CLUSTER", raising=False)
    cli_args = build_parser().parse_args(["--cluster", "ls"])
    assert cli_settings(cli_args).cluster
    assert not cli_settings(build_parser().parse_args(["ls"])).cluster
    assert scheduler_settings(scheduler_parser().parse_args(["--cluster"])).cluster
    assert worker_args(["app:worker", "--cluster"]).cluster
    # `rsched --cluster scheduler` hands the flag over as RSCHED_CLUSTER, and only then.
    assert delegate(["--cluster", "ls"]) is None
    assert "RSCHED_CLUSTER" not in os.environ
    monkeypatch.setenv("RSCHED_CLUSTER", "true")
    assert Settings().cluster


def test_a_database_other_than_0_is_refused_in_cluster_mode() -> None:
    with pytest.raises(rsched.ConfigError, match="'db' must be 0"):
        connect(Settings(redis_url="redis://127.0.0.1:7000/3", cluster=True))


# --- what the client sends to which node --------------------------------------------------------


def _recording_nodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """(port, command) of every command a cluster client sends to a node, from now on."""
    sent: list[tuple[int, str]] = []
    execute = ClusterNode.execute_command

    async def recording(self: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        sent.append((int(self.port), str(args[0]).upper()))
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(ClusterNode, "execute_command", recording)
    return sent


async def test_time_comes_from_the_node_of_the_partition(
    cluster: Cluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scripts compare with their own node's clock: so does every read of TIME made for a
    partition (the stores, health, queue statistics), however many primaries there are."""
    settings = cluster_settings(cluster.url, prefix).model_copy(update={"partitions": 16})
    every = Keys(prefix, 16).every_partition()
    owners = {cluster.owner_of_key(k.tag).port for k in every}
    assert len(owners) == 3
    redis = connect(settings)
    try:
        await redis.exists(Keys(prefix).meta)  # the topology is known
        sent = _recording_nodes(monkeypatch)
        for keys in every:
            owner = cluster.owner_of_key(keys.tag).port
            await ScheduleStore(redis, keys).time_ms()
            await HealthReader(redis, settings, keys).now_ms()
            await QueueStore(redis, keys).queue_stats()
            times = [port for port, command in sent if command == "TIME"]
            assert times == [owner] * 3, (keys.partition, times)
            sent.clear()
    finally:
        await redis.aclose()


async def test_every_primary_has_the_scripts_once_a_client_connects(
    cluster: Cluster, prefix: str
) -> None:
    for node in cluster.primaries():
        cluster.command(node, "SCRIPT FLUSH")
    redis = connect(cluster_settings(cluster.url, prefix))
    try:
        await redis.exists(Keys(prefix).meta)  # the first command: the client learns the nodes
    finally:
        await redis.aclose()
    shas = [ScriptCaller(redis).script(name).sha for name in scripts.names()]
    for node in cluster.primaries():
        assert all(cluster.command(node, "SCRIPT EXISTS", *shas)), node.port
    # The next process finds them there: it sends none of their sources.
    loads = _script_loads(cluster)
    again = connect(cluster_settings(cluster.url, prefix))
    try:
        await again.exists(Keys(prefix).meta)
    finally:
        await again.aclose()
    assert _script_loads(cluster) == loads


def _script_loads(cluster: Cluster) -> int:
    stats = [cluster.command(node, "INFO", "commandstats") for node in cluster.primaries()]
    return sum(int(s.get("cmdstat_script|load", {}).get("calls", 0)) for s in stats)


def _getkeys_calls(cluster: Cluster) -> int:
    stats = [cluster.command(node, "INFO", "commandstats") for node in cluster.primaries()]
    return sum(int(s.get("cmdstat_command|getkeys", {}).get("calls", 0)) for s in stats)


async def test_reads_with_movable_keys_go_to_their_slot_without_asking_for_their_keys(
    cluster: Cluster, prefix: str
) -> None:
    """XREADGROUP, XREAD and EVALSHA_RO: redis-py's table cannot place their keys and would
    ask a node (COMMAND GETKEYS) before each one; rsched reads their keys itself."""
    settings = cluster_settings(cluster.url, prefix)
    async with rsched.Client.from_settings(settings) as client:
        job = await client.enqueue("t")
        before = _getkeys_calls(cluster)
        redis = connect(settings)
        try:
            queues = QueueStore(redis, Keys(prefix))
            await queues.create_groups(["default"])
            taken = await queues.read([("default", "normal")], "reader", 10, 10)
            assert [entry for _, entries in taken for entry in entries]
            await redis.xread({Keys(prefix).events: "0-0"}, count=1)
            assert (await client.job(job.execution_id)).execution_id == job.execution_id
        finally:
            await redis.aclose()
    assert _getkeys_calls(cluster) == before


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        (("XREADGROUP", "GROUP", "g", "streams", "COUNT", 1, "STREAMS", "a", "b", ">", ">"),
         ["a", "b"]),
        (("XREADGROUP", b"GROUP", "g", "c", b"BLOCK", 0, b"NOACK", b"STREAMS", "a", "0"), ["a"]),
        (("XREAD", "COUNT", 2, "STREAMS", "k", "0-0"), ["k"]),
        (("EVALSHA_RO", "sha", 2, "k1", "k2", "arg"), ["k1", "k2"]),
        (("XREAD", "BLOCK", 5), None),
        (("GET", "k"), None),
    ],
)  # fmt: skip
def test_keys_of_commands_redis_py_cannot_place(args: tuple[Any, ...], keys: Any) -> None:
    found = _cluster._keys_of(args[0], args[1:])
    assert (None if found is None else list(found)) == keys
