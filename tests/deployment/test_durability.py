"""durability="replicated" / "replicated_fsync": writes confirmed by a replica, shortfalls raised
by the client and counted by the scheduler and worker, and what a failover does without them
(docs/durability.md)."""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

import rsched
from rsched._cli import main as _cli
from rsched._cli import scheduler_process as _scheduler_main
from rsched._cli import worker_process as _worker_main
from rsched._core.keys import Keys
from rsched._core.metrics import METRICS
from rsched._core.partitions import partition_of
from rsched._core.settings import SchedulerSettings, Settings
from rsched._redis.connection import check_server, connect
from rsched._redis.durability import CONFIRMED, Durability
from rsched._redis.scripts import ScriptCaller, names
from tests.support.cluster import Cluster, slot_of
from tests.support.schedulers import running
from tests.support.servers import Server
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workload import engine

TIMEOUT_MS = 200


@asynccontextmanager
async def replicating(primary: Server, replica: Server) -> AsyncIterator[Any]:
    """``replica`` follows ``primary`` (link up); yields a client of the replica (typed Any:
    redis-py's stubs make each reply a union)."""
    client: Any = Redis.from_url(replica.url, decode_responses=True)
    source: Any = Redis.from_url(primary.url, decode_responses=True)
    try:
        await client.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))

        async def linked() -> bool:
            # The replica sees its link up before the primary streams to it (after a diskless
            # sync, from the replica's first acknowledgement, up to a second later): only a
            # write it confirms shows that it follows. A WAIT with no write of its own before
            # it confirms nothing (the offset it waits for is 0).
            info = await client.info("replication")
            if info.get("master_link_status") != "up":
                return False
            await source.incr("replication-check")
            return int(await source.execute_command("WAIT", 1, 100)) >= 1

        await eventually(linked)
        yield client
    finally:
        await client.aclose()
        await source.aclose()


@dataclass
class Pair:
    """A primary with a replica that follows it, and rsched's settings for the primary."""

    primary: Server
    replica: Server
    copy: Any  # a client of the replica
    settings: Settings  # durability="replicated", TIMEOUT_MS


@pytest.fixture
async def pair(make_server: Callable[..., Server], prefix: str) -> AsyncIterator[Pair]:
    primary, replica = make_server(), make_server()
    async with replicating(primary, replica) as copy:
        try:
            yield Pair(primary, replica, copy, replicated(primary, prefix))
        finally:
            replica.resume()  # a test that failed while it was paused must not hang clean-up


def replicated(server: Server, prefix: str) -> Settings:
    return Settings(
        redis_url=server.url,
        prefix=prefix,
        durability="replicated",
        durability_timeout_ms=TIMEOUT_MS,
        scheduler=SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=300),
    )


def counted(op: str) -> float:
    value = METRICS.registry.get_sample_value("rsched_writes_unreplicated_total", {"op": op})
    return value or 0.0


async def test_writes_wait_for_the_replica(pair: Pair, prefix: str) -> None:
    async with rsched.Client.from_settings(pair.settings) as client:
        await client.add({"id": "one", "task": "t", "every": "1h"})
        await client.add_many([{"id": f"bulk-{n}", "task": "t", "every": "1h"} for n in range(50)])
        job = await client.enqueue("t", {"n": 1})
        await client.pause("one")
    # Confirmed by the replica before the calls returned: there at once, no polling.
    keys, copy = Keys(prefix), pair.copy
    assert await copy.hget(keys.schedule("one"), "status") == "paused"
    assert await copy.exists(*(keys.schedule(f"bulk-{n}") for n in range(50))) == 50
    entries = await copy.xrange(keys.queue("default"))
    assert [f["execution_id"] for _, f in entries] == [job.execution_id]
    async with Redis.from_url(pair.primary.url, decode_responses=True) as direct:
        assert (await direct.info("commandstats"))["cmdstat_wait"]["calls"] >= 4


async def test_a_single_connection_client_waits_on_its_connection(pair: Pair) -> None:
    url = pair.primary.url
    async with Redis.from_url(url, decode_responses=True, single_connection_client=True) as one:
        client = rsched.Client(one, pair.settings)
        await client.enqueue("t")
        pair.replica.pause()
        with pytest.raises(rsched.WriteNotReplicated):
            await client.enqueue("t")


async def test_paused_replica_raises_write_not_replicated(pair: Pair) -> None:
    async with rsched.Client.from_settings(pair.settings) as client:
        pair.replica.pause()
        started = time.monotonic()
        with pytest.raises(rsched.WriteNotReplicated) as caught:
            await client.add({"id": "one", "task": "t", "every": "1h"})
        assert time.monotonic() - started < TIMEOUT_MS / 1000 + 2.0
        assert (caught.value.op, caught.value.confirmed, caught.value.wanted) == ("upsert", 0, 1)
        assert "applied the write" in str(caught.value)
        assert (await client.get("one")).id == "one"  # on the primary all the same
        with pytest.raises(rsched.WriteNotReplicated):
            await client.enqueue("t", execution_id="job-1")
        with pytest.raises(rsched.WriteNotReplicated):
            await client.add_many([{"id": "two", "task": "t", "every": "1h"}])
        pair.replica.resume()
        # The same id again: nothing is written twice, and now the replica confirms.
        assert not (await client.enqueue("t", execution_id="job-1")).created


async def test_a_write_sent_again_after_a_lost_reply_is_not_confirmed(
    pair: Pair, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is re-sent on a new connection (its request id makes that a no-op), where a
    WAIT would confirm nothing: reported as not confirmed, though the replica is fine."""
    real = ScriptCaller._exchange
    dropped: list[str] = []

    async def reply_lost(self: ScriptCaller, name: str, data: bytes, count: int) -> Any:
        replies = await real(self, name, data, count)
        if not dropped:
            dropped.append(name)
            raise RedisConnectionError("Connection closed by server.")
        return replies

    monkeypatch.setattr(ScriptCaller, "_exchange", reply_lost)
    async with rsched.Client.from_settings(pair.settings) as client:
        with pytest.raises(rsched.WriteNotReplicated):
            await client.enqueue("t")
    assert dropped == ["enqueue"]
    assert await pair.copy.xlen(Keys(prefix).queue("default")) == 1  # written once


async def test_scheduler_counts_unreplicated_fires_and_keeps_firing(
    pair: Pair, prefix: str
) -> None:
    url = pair.primary.url
    async with rsched.Client.from_url(url, prefix) as client:
        await client.add({"id": "tick", "task": "t", "every": "1s", "overlap": "allow"})
    pair.replica.pause()
    before = counted("fire")
    key = Keys(prefix).queue("default")
    async with running(pair.settings), Redis.from_url(url) as redis:
        await eventually(lambda: _at_least(redis.xlen(key), 3))
    assert counted("fire") - before >= 3


async def _at_least(length: Any, n: int) -> bool:
    return int(await length) >= n


async def test_worker_counts_unreplicated_acks(pair: Pair, prefix: str) -> None:
    worker = rsched.Worker(settings=pair.settings)
    done = anyio.Event()

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        done.set()

    pair.replica.pause()
    before = counted("complete")
    async with rsched.Client.from_url(pair.primary.url, prefix) as client:
        await client.enqueue("t")
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)
        await eventually(lambda: counted("complete") > before)
        worker.stop()
    assert done.is_set()


def test_settings_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().durability == "async"
    assert Durability.from_settings(Settings()) is None
    with pytest.raises(ValidationError, match="durability"):
        Settings(durability="sync")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="durability_replicas"):
        Settings(durability_replicas=0)
    with pytest.raises(ValidationError, match="RSCHED_DURABILITY_TIMEOUT_MS"):
        Settings(durability_timeout_ms=5_000, socket_timeout_s=5)
    monkeypatch.setenv("RSCHED_DURABILITY", "replicated")
    monkeypatch.setenv("RSCHED_DURABILITY_REPLICAS", "2")
    durability = Durability.from_settings(Settings())
    assert durability is not None
    assert durability.wait_args == ["WAIT", "2", "250"]


def test_every_confirmed_write_is_a_script() -> None:
    assert set(CONFIRMED) <= set(names())


def test_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = _scheduler_main._parser().parse_args(["--durability", "replicated_fsync"])
    assert _scheduler_main.load_settings(args).durability == "replicated_fsync"
    assert _worker_main.parse_args(["m:w", "--durability", "replicated"]).durability == "replicated"
    worker = rsched.Worker()
    worker.configure(durability="replicated")
    assert worker.resolve_settings().durability == "replicated"
    with pytest.raises(rsched.ConfigError, match="--durability"):
        worker.configure(durability="sometimes")  # type: ignore[arg-type]
    assert _cli._settings(argparse.Namespace(durability="replicated")).durability == "replicated"
    assert _cli.main(["--durability", "sometimes", "ls"]) == 2
    assert "--durability" in capsys.readouterr().err


async def test_replicated_fsync(
    server: Server, make_server: Callable[..., Server], prefix: str
) -> None:
    """WAITAOF where the server has it (Valkey 8+, Redis 7.2+), a clear refusal elsewhere."""
    primary, replica = make_server(appendonly=True), make_server(appendonly=True)
    # A Valkey replica confirms an fsync at its next ack (once a second) now and then: the
    # wait must outlast that (docs/durability.md).
    settings = replicated(primary, prefix).model_copy(
        update={"durability": "replicated_fsync", "durability_timeout_ms": 4_000}
    )
    async with (
        replicating(primary, replica),
        Redis.from_url(primary.url, decode_responses=True) as connection,
        rsched.Client.from_settings(settings) as client,
    ):
        direct: Any = connection
        version = (await direct.info("server"))["redis_version"]
        if tuple(int(p) for p in version.split(".")[:2]) < (7, 2):
            with pytest.raises(rsched.ServerError, match="needs WAITAOF"):
                await client.add({"id": "one", "task": "t", "every": "1h"})
            assert not await direct.exists(Keys(prefix).schedule("one"))
            return

        async def replica_fsyncs() -> bool:
            # A new replica confirms fsyncs once its first AOF rewrite is done.
            await direct.incr(f"{{{prefix}}}:probe")
            return bool((await direct.execute_command("WAITAOF", 0, 1, 100))[1] == 1)

        await eventually(replica_fsyncs)
        await client.add({"id": "one", "task": "t", "every": "1h"})
        stats = await direct.info("commandstats")
        assert stats["cmdstat_waitaof"]["calls"] >= 2
        replica.pause()
        settings.durability_timeout_ms = TIMEOUT_MS
        async with rsched.Client.from_settings(settings) as impatient:
            with pytest.raises(rsched.WriteNotReplicated, match="confirmed its fsync"):
                await impatient.enqueue("t")


async def test_replicated_fsync_refused_without_aof_or_waitaof(redis_url: str, prefix: str) -> None:
    """The shared test server has no AOF (and on Redis 7.0 no WAITAOF): refused at start and
    at the first write, before anything is written."""
    settings = Settings(redis_url=redis_url, prefix=prefix, durability="replicated_fsync")
    async with connect(settings) as redis:
        with pytest.raises(rsched.ServerError, match=r"needs (WAITAOF|the append-only file)"):
            await check_server(redis, settings, Keys(prefix).leader)
        async with rsched.Client(redis, settings) as client:
            with pytest.raises(rsched.ServerError, match=r"needs (WAITAOF|the append-only file)"):
                await client.enqueue("t")
        assert not await redis.exists(Keys(prefix).queue("default"))


@pytest.mark.slow
async def test_failover_repeats_a_fire_and_loses_an_enqueue(pair: Pair, prefix: str) -> None:
    """docs/durability.md, "What a failover does": with durability="async", a fire the old
    primary acknowledged is fired again by the promoted replica (the index score rolled back
    with the job), and an enqueue it acknowledged is gone."""
    primary, replica, copy = pair.primary, pair.replica, pair.copy
    keys = Keys(prefix)
    settings = pair.settings.model_copy(update={"durability": "async"})
    old: Any = Redis.from_url(primary.url, decode_responses=True)  # closed before the kill
    at = datetime.now(UTC) + timedelta(seconds=1.5)
    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "once", "task": "t", "at": at.isoformat()})
        await old.execute_command("WAIT", 1, 2000)  # the schedule is on the replica
        # The replica stops, and its link with it: what follows never reaches it (a paused
        # replica alone would still find it in its socket's buffer when it resumes).
        replica.pause()
        await old.client_kill_filter(_type="replica")
        async with running(settings):
            await eventually(lambda: _at_least(old.xlen(keys.queue("default")), 1))
        job = await client.enqueue("t", {"n": 1})
    (_, fired), (_, queued) = await old.xrange(keys.queue("default"))
    assert queued["execution_id"] == job.execution_id
    await old.aclose()
    primary.kill()
    replica.resume()
    await copy.execute_command("REPLICAOF", "NO", "ONE")
    promoted = settings.model_copy(update={"redis_url": replica.url})
    # Rolled back together: no job, and the index still holds the occurrence.
    assert await copy.xlen(keys.queue("default")) == 0
    assert int(float(await copy.zscore(keys.schedules, "once"))) == int(fired["scheduled_at"])
    async with running(promoted):
        await eventually(lambda: _at_least(copy.xlen(keys.queue("default")), 1))
    (_, again), *_ = await copy.xrange(keys.queue("default"))
    assert again["scheduled_at"] == fired["scheduled_at"]  # the same occurrence, repeated
    assert again["execution_id"] == fired["execution_id"]
    # The enqueue the old primary acknowledged is lost.
    async with rsched.Client.from_settings(promoted) as client:
        with pytest.raises(rsched.JobNotFound):
            await client.job(job.execution_id)


# --- on a cluster: the WAIT goes with the write to the primary serving its slot -----------------


@pytest.fixture(scope="module")
def replicated_cluster(server: Server) -> Iterator[Cluster]:
    """Three primaries of the kind of ``server``, each with a replica, for this module."""
    with Cluster(server.kind, replicas=True) as made:
        yield made


def replica_of(cluster: Cluster, primary: Server) -> Server:
    for node in cluster.alive():
        role = cluster.command(node, "ROLE")
        if role[0] == "slave" and int(role[2]) == primary.port:
            return node
    raise LookupError(f"no replica follows the primary on port {primary.port}")


async def on_replica(cluster: Cluster, primary: Server, *command: Any) -> Any:
    """``command`` answered by the replica of ``primary`` (READONLY lets it serve reads)."""
    node = replica_of(cluster, primary)
    r: Any = Redis(port=node.port, decode_responses=True, single_connection_client=True)
    async with r:
        await r.execute_command("READONLY")
        return await r.execute_command(*command)


def wait_calls(cluster: Cluster) -> dict[int, int]:
    """WAIT calls so far, by primary port."""
    calls = {}
    for node in cluster.primaries():
        stats = cluster.command(node, "INFO", "commandstats")
        calls[node.port] = int(stats.get("cmdstat_wait", {}).get("calls", 0))
    return calls


def cluster_replicated(cluster: Cluster, prefix: str, **fields: Any) -> Settings:
    return replicated(cluster.primaries()[0], prefix).model_copy(
        update={"redis_url": cluster.url, "cluster": True, **fields}
    )


async def test_cluster_writes_wait_for_the_replica_of_their_slots_primary(
    replicated_cluster: Cluster, prefix: str
) -> None:
    cluster = replicated_cluster
    settings = cluster_replicated(cluster, prefix, partitions=3)
    before = wait_calls(cluster)
    ids = [f"s{n}" for n in range(12)]
    async with rsched.Client.from_settings(settings) as client:
        await client.add_many([{"id": sid, "task": "t", "every": "1h"} for sid in ids])
        await client.pause(ids[0])
        job = await client.enqueue("t")
    # The three partitions are on the three primaries: each waited for its own replica, and
    # what it confirmed is there at once, no polling.
    after = wait_calls(cluster)
    assert all(after[port] > calls for port, calls in before.items()), (before, after)
    for sid in ids:
        key = Keys(prefix, 3, partition_of(sid, 3)).schedule(sid)
        assert await on_replica(cluster, cluster.owner_of_key(key), "EXISTS", key) == 1
    queue = Keys(prefix, 3, partition_of(job.execution_id, 3)).queue("default")
    assert await on_replica(cluster, cluster.owner_of_key(queue), "XLEN", queue) == 1


async def test_cluster_paused_replica_raises_write_not_replicated(
    replicated_cluster: Cluster, prefix: str
) -> None:
    cluster = replicated_cluster
    replica = replica_of(cluster, cluster.owner_of_key(Keys(prefix).schedules))
    async with rsched.Client.from_settings(cluster_replicated(cluster, prefix)) as client:
        await client.add({"id": "one", "task": "t", "every": "1h"})
        replica.pause()
        try:
            with pytest.raises(rsched.WriteNotReplicated) as caught:
                await client.add({"id": "two", "task": "t", "every": "1h"})
            assert (caught.value.op, caught.value.confirmed) == ("upsert", 0)
            with pytest.raises(rsched.WriteNotReplicated):
                await client.enqueue("t", execution_id="job-1")
        finally:
            replica.resume()
        assert (await client.get("two")).id == "two"  # on the primary all the same
        assert not (await client.enqueue("t", execution_id="job-1")).created


async def test_cluster_scheduler_and_worker_count_unreplicated_writes(
    replicated_cluster: Cluster, prefix: str
) -> None:
    cluster = replicated_cluster
    settings = fast_settings(cluster_replicated(cluster, prefix))
    worker = rsched.Worker(settings=settings)

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        pass

    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "tick", "task": "t", "every": "1s", "overlap": "allow"})
    replica = replica_of(cluster, cluster.owner_of_key(Keys(prefix).schedules))
    fired, completed = counted("fire"), counted("complete")
    replica.pause()
    try:
        async with engine(settings, worker):
            await eventually(lambda: _counted_more(fired, completed))
    finally:
        replica.resume()


async def _counted_more(fired: float, completed: float) -> bool:
    return counted("fire") > fired and counted("complete") > completed


async def test_cluster_a_moved_write_waits_where_it_went(
    replicated_cluster: Cluster, prefix: str
) -> None:
    """The client's slot map names the wrong primary: the write and its WAIT are sent there,
    get MOVED, and go again, together, to the slot's primary."""
    cluster = replicated_cluster
    key = Keys(prefix).schedules
    owner = cluster.owner_of_key(key)
    other = next(n for n in cluster.primaries() if n is not owner)
    settings = cluster_replicated(cluster, prefix)
    redis: Any = connect(settings)
    async with rsched.Client(redis, settings) as client:
        await client.add({"id": "one", "task": "t", "every": "1h"})
        wrong = redis.get_node(host="127.0.0.1", port=other.port)
        redis.nodes_manager.slots_cache[slot_of(key)] = [wrong]
        before = wait_calls(cluster)
        await client.pause("one")
        assert redis.get_node_from_key(key).port == owner.port  # the map was patched
    after = wait_calls(cluster)
    assert after[owner.port] == before[owner.port] + 1
    schedule = Keys(prefix).schedule("one")
    assert await on_replica(cluster, owner, "HGET", schedule, "status") == "paused"


async def test_cluster_a_write_during_a_migration_waits_where_it_went(
    replicated_cluster: Cluster, prefix: str
) -> None:
    """The write's slot is being migrated: its primary answers ASK, the importing node (sent
    ASKING, the write and its WAIT together) TRYAGAIN, as none of the write's keys is there
    yet; once the slot has moved, MOVED: the pair goes there and its replica confirms."""
    cluster = replicated_cluster
    keys = Keys(prefix)
    slot = slot_of(keys.leader)
    target = next(n for n in cluster.primaries() if n is not cluster.owner(slot))
    asking = int(
        cluster.command(target, "INFO", "commandstats").get("cmdstat_asking", {}).get("calls", 0)
    )
    async with rsched.Client.from_settings(cluster_replicated(cluster, prefix)) as client:
        await client.list()  # the deployment is known: what follows is the enqueue alone
        migrating = anyio.Event()

        async def started() -> None:
            migrating.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                functools.partial(cluster.migrate_slot, slot, target, pause_s=0.5, between=started)
            )
            await migrating.wait()
            await client.enqueue("t", execution_id="job-1")
    assert cluster.owner(slot) is target
    stats = cluster.command(target, "INFO", "commandstats")
    assert int(stats["cmdstat_asking"]["calls"]) > asking
    assert await on_replica(cluster, target, "EXISTS", keys.dedup("job-1")) == 1


async def test_cluster_a_write_sent_again_after_a_lost_reply_is_not_confirmed(
    replicated_cluster: Cluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection drops after the write and its WAIT went out: the write goes again through
    the cluster client (a no-op: its request id), and is reported as not confirmed."""
    real = ScriptCaller._exchange_on_slot
    dropped: list[str] = []

    async def reply_lost(self: ScriptCaller, name: str, *args: Any) -> Any:
        replies = await real(self, name, *args)
        if not dropped:
            dropped.append(name)
            raise RedisConnectionError("Connection closed by server.")
        return replies

    monkeypatch.setattr(ScriptCaller, "_exchange_on_slot", reply_lost)
    cluster = replicated_cluster
    async with rsched.Client.from_settings(cluster_replicated(cluster, prefix)) as client:
        with pytest.raises(rsched.WriteNotReplicated):
            await client.enqueue("t")
    assert dropped == ["enqueue"]
    queue = Keys(prefix).queue("default")
    assert await on_replica(cluster, cluster.owner_of_key(queue), "XLEN", queue) == 1
