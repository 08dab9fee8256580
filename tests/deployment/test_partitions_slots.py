"""Every script call of the SDK touches the keys of one partition (one hash slot) with 16
partitions: the SDK's paths run against a one-node cluster, which refuses a script whose keys
hash to two slots (CROSSSLOT) and a script touching a key of another slot than its keys'."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
import redis as redis_sync
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched import Client, Schedule, Settings
from rsched._client.schedules_file import sync_file
from rsched._core.keys import Keys
from rsched._core.partitions import job_partition
from rsched._devtools.embedded import free_port
from rsched._store.queues import QueueStore
from tests.support.servers import Server, binary

N = 16


@pytest.fixture(scope="module")
def cluster_url(server: Server) -> Iterator[str]:
    """A one-node cluster of the session's server kind owning every slot."""
    path = binary(server.kind)
    assert path is not None
    port = free_port()
    while port > 55535:  # a cluster node refuses a higher one (its bus port is 10,000 higher)
        port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="rsched-cluster-"))
    proc = subprocess.Popen(
        [
            path,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(workdir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(workdir / "nodes.conf"),
            "--cluster-port",
            str(free_port()),
        ],
        stdout=(workdir / "log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        client = redis_sync.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis_sync.RedisError:
                log = (workdir / "log").read_text()
                assert time.monotonic() < deadline, f"the cluster node did not start: {log}"
                time.sleep(0.05)
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # type: ignore[no-untyped-call]
        while b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):  # type: ignore[no-untyped-call]
            assert time.monotonic() < deadline, "the cluster did not come up"
            time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(5)
        for f in workdir.iterdir():
            f.unlink()
        workdir.rmdir()


@pytest.fixture
async def node(cluster_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(cluster_url, decode_responses=True)
    yield client
    await client.aclose()


async def test_the_node_refuses_two_slots(node: Redis) -> None:
    with pytest.raises(ResponseError, match="same slot"):
        await node.eval("return redis.call('MGET', KEYS[1], KEYS[2])", 2, "{a}:x", "{b}:x")


@pytest.mark.parametrize("partitions", [1, N])
async def test_sdk_paths_touch_one_slot_a_call(
    node: Redis, cluster_url: str, prefix: str, partitions: int, tmp_path: Path
) -> None:
    settings = Settings(redis_url=cluster_url, prefix=prefix, partitions=partitions)
    async with Client(node, settings) as client:
        await client.add_many(
            [{"id": f"s{i:02d}", "task": "t", "every": 60 + i} for i in range(40)]
        )
        await client.upsert_many([{"id": f"s{i:02d}", "task": "t", "every": 90} for i in range(40)])
        await client.add(Schedule(id="one", task="t", cron="0 * * * *", overlap="buffer_one"))
        await client.upsert(Schedule(id="one", task="t", cron="0 * * * *"))
        await client.update("one", queue="other")
        await client.pause("one")
        await client.resume("one")
        await client.trigger("one")
        now = await client.server_time()
        await client.backfill("s01", now - timedelta(minutes=5), now - timedelta(seconds=1))
        assert len((await client.list(limit=7)).items) == 7
        await client.stats()
        await client.health()
        await client.schedule_health("one")
        await client.history("one")
        made = await client.enqueue("t", queue="q")
        own = await client.enqueue("t", queue="q", execution_id="order-1", delay=60)
        assert (await client.job(made.execution_id)).state == "queued"
        await client.cancel(own.execution_id)
        await client.cancel(made.execution_id)
        keys = Keys(prefix, partitions, job_partition("order-1", partitions))
        store = QueueStore(node, keys)
        await store.store_results([("order-1", orjson.dumps(1))], ttl_ms=60_000)
        assert await client.result("order-1") == 1
        job = orjson.dumps(["execution_id", "x", "task", "t", "attempt", "2"]).decode()
        await node.xadd(keys.dead("q"), {"execution_id": "x", "task": "t", "job": job})
        letters = (await client.dead_letters("q")).items
        assert await client.requeue("q", [letters[0].entry_id]) == 1
        await client.runs()
        await client.jobs()
        path = tmp_path / "f.toml"
        path.write_text('[[schedule]]\nid = "f1"\ntask = "t"\nevery = "1h"\n')
        await sync_file(node, settings, path)
        path.write_text("")
        await sync_file(node, settings, path)
        await client.remove("one")
