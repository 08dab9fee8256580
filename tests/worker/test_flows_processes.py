"""A flow under a storm of worker SIGKILLs and a leader SIGKILL, against real processes: a
100-part fan-in started by a schedule completes, its merge step is released once (every run of
its handler is a delivery of the same entry, as any job's after its worker died) with all 100
results in order, and no flow is left running."""

from __future__ import annotations

import random
import signal
from collections.abc import Callable
from datetime import timedelta

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched import chain, group, step
from rsched._core.settings import Settings
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_env, merges_key
from tests.support.workers import start_worker

pytestmark = pytest.mark.slow

SCHEDULER = "rsched._cli.scheduler_process"
FAST = ("--lease-ttl-ms", "1000", "--lease-renew-ms", "200")


async def test_a_fan_in_completes_once_under_worker_and_leader_kills(
    redis: Redis, settings: Settings, spawn: Callable[..., Proc]
) -> None:
    client = rsched.Client(redis, settings)
    flow = chain(group(step("app.part", {"i": i}) for i in range(100)), step("app.merge"))
    now = await client.server_time()
    await client.add(rsched.Schedule(id="fan", at=now + timedelta(seconds=1), flow=flow))
    env = fast_env(settings)
    schedulers = [spawn(SCHEDULER, *FAST, env=env) for _ in range(2)]
    leader = await eventually(lambda: _leader(schedulers), what="a leader")
    workers = [start_worker(spawn, settings) for _ in range(3)]
    flow_id = await eventually(lambda: _flow_id(client), what="the schedule's flow started")
    leader.signal(signal.SIGKILL)  # the other scheduler takes its partition over
    rng = random.Random(7)
    for _ in range(8):  # a storm of worker kills while the flow runs, a new worker each time
        await anyio.sleep(0.4)
        victim = workers.pop(rng.randrange(len(workers)))
        victim.signal(signal.SIGKILL)
        victim.wait()
        workers.append(start_worker(spawn, settings))
    info = await eventually(lambda: _ended(client, flow_id), what="the flow's end")
    assert info.state == "completed"
    merge = info.steps[-1]
    assert merge.task == "app.merge"
    assert merge.state == "completed"
    assert merge.result == sum(range(100))
    runs = [orjson.loads(r) for r in await redis.lrange(merges_key(settings.prefix), 0, -1)]
    assert runs, "the merge never ran"
    assert {r[0] for r in runs} == {merge.execution_id}
    assert len({r[1] for r in runs}) == 1, "the merge was released more than once"
    assert all(r[2] == list(range(100)) for r in runs)
    assert (await client.flows(state="running")).items == []
    history = [(e.event, e.execution_id) for e in (await client.history("fan")).items]
    assert ("completed", flow_id) in history


async def _leader(schedulers: list[Proc]) -> Proc | None:
    return next((p for p in schedulers if "leader.acquired" in p.output()), None)


async def _flow_id(client: rsched.Client) -> str | None:
    page = await client.flows()
    return page.items[0].flow_id if page.items else None


async def _ended(client: rsched.Client, flow_id: str) -> rsched.FlowInfo | None:
    info = await client.flow(flow_id)
    return info if info.state != "running" else None
