"""Flows against real servers: chains and groups run in order, a join gets its parents' results
in order, on_failure fail / continue, cancel_flow, idempotent creation, large flows written in
several calls, reads and listing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched import chain, group, step
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._scheduler.retention import Retention
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running


def etl_worker(settings: Settings, seen: list[tuple[str, Any]]) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("etl.extract")
    async def extract(job: rsched.Job) -> dict[str, Any]:
        seen.append(("extract", job.parent_results))
        return {"rows": 3}

    @worker.task("etl.part")
    async def part(job: rsched.Job) -> int:
        seen.append(("part", job.parent_results))
        i = int(job.payload["i"])
        await anyio.sleep(0.001 * (5 - i % 5))  # end out of order
        return i * i

    @worker.task("etl.merge")
    async def merge(job: rsched.Job) -> int:
        seen.append(("merge", job.parent_results))
        return sum(job.parent_results)

    @worker.task("etl.fail")
    async def fail(job: rsched.Job) -> None:
        seen.append(("fail", job.parent_results))
        raise ValueError("broken on purpose")

    @worker.task("etl.notify")
    async def notify(job: rsched.Job) -> str:
        seen.append(("notify", job.parent_results))
        return "sent"

    return worker


async def ended(client: rsched.Client, flow_id: str) -> rsched.FlowInfo | None:
    try:
        info = await client.flow(flow_id)
    except rsched.FlowNotFound:  # a schedule's flow: its starter job has not run yet
        return None
    return info if info.state != "running" else None


async def test_a_chain_with_a_fan_out_and_a_join_runs_in_order(
    redis: Redis, settings: Settings
) -> None:
    seen: list[tuple[str, Any]] = []
    client = rsched.Client(redis, settings)
    flow = chain(
        step("etl.extract", {"day": "2026-11-27"}),
        group(step("etl.part", {"i": i}) for i in range(10)),
        step("etl.merge"),
        step("etl.notify"),
    )
    run = await client.run_flow(flow)
    assert run.created
    assert run.steps == 13
    assert run.roots == 1
    async with running(etl_worker(settings, seen), redis):
        info = await eventually(lambda: ended(client, run.flow_id))
    assert info.state == "completed"
    names = [name for name, _ in seen]
    assert names[0] == "extract"
    assert names[-2:] == ["merge", "notify"]
    assert sorted(names[1:11]) == ["part"] * 10
    assert all(parents == [{"rows": 3}] for name, parents in seen if name == "part")
    merge_parents = next(p for name, p in seen if name == "merge")
    assert merge_parents == [i * i for i in range(10)]  # the group's order, not the end order
    assert next(p for name, p in seen if name == "notify") == [285]
    assert [s.state for s in info.steps] == ["completed"] * 13
    assert info.steps[-1].result == "sent"
    assert info.steps[0].result == {"rows": 3}
    assert info.done_count == info.step_count == 13
    assert info.ended_at is not None
    assert info.ended_at >= info.created_at
    job = await client.job(info.steps[1].execution_id)
    assert job.flow_id == run.flow_id
    assert job.flow_step == 2
    assert job.state == "completed"


async def test_a_group_into_a_group_goes_through_a_barrier(
    redis: Redis, settings: Settings
) -> None:
    seen: list[tuple[str, Any]] = []
    client = rsched.Client(redis, settings)
    flow = chain(
        group(step("etl.part", {"i": i}) for i in range(3)),
        group(step("etl.merge"), step("etl.merge")),
    )
    run = await client.run_flow(flow)
    assert run.steps == 6
    assert run.roots == 3
    async with running(etl_worker(settings, seen), redis):
        info = await eventually(lambda: ended(client, run.flow_id))
    assert info.state == "completed"
    assert [p for name, p in seen if name == "merge"] == [[0, 1, 4], [0, 1, 4]]
    assert [s.barrier for s in info.steps] == [False, False, False, True, False, False]


async def test_a_failed_step_fails_the_flow_and_what_follows_never_runs(
    redis: Redis, settings: Settings
) -> None:
    seen: list[tuple[str, Any]] = []
    client = rsched.Client(redis, settings)
    flow = chain(step("etl.fail", max_retries=0), step("etl.notify"))
    run = await client.run_flow(flow)
    async with running(etl_worker(settings, seen), redis):
        info = await eventually(lambda: ended(client, run.flow_id))
    assert info.state == "failed"
    assert info.failed_step == 1
    assert [s.state for s in info.steps] == ["dead", "cancelled"]
    assert [name for name, _ in seen] == ["fail"]
    [dead] = (await client.dead_letters("default")).items
    assert dead.execution_id == info.steps[0].execution_id


async def test_on_failure_continue_hands_an_error_record_on(
    redis: Redis, settings: Settings
) -> None:
    seen: list[tuple[str, Any]] = []
    client = rsched.Client(redis, settings)
    flow = chain(
        group(step("etl.fail", max_retries=0, on_failure="continue"), step("etl.part", {"i": 2})),
        step("etl.notify"),
    )
    run = await client.run_flow(flow)
    async with running(etl_worker(settings, seen), redis):
        info = await eventually(lambda: ended(client, run.flow_id))
    assert info.state == "completed"
    parents = next(p for name, p in seen if name == "notify")
    assert parents == [{"error": "ValueError", "message": "broken on purpose"}, 4]


async def test_cancel_flow_stops_what_waits_and_what_runs(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    worker = rsched.Worker(settings=fast_settings(settings))
    started = anyio.Event()

    @worker.task("slow")
    async def slow(job: rsched.Job) -> None:
        started.set()
        await anyio.sleep(60)

    @worker.task("after")
    async def after(job: rsched.Job) -> None:
        raise AssertionError("must not run")

    run = await client.run_flow(chain(step("slow"), step("after")))
    async with running(worker, redis):
        with anyio.fail_after(30):
            await started.wait()
        assert await client.cancel_flow(run.flow_id) is True
        info = await eventually(lambda: ended(client, run.flow_id))
        await eventually(
            lambda: _states(client, run.flow_id, ["cancelled", "cancelled"]),
            what="the running step's end recorded",
        )
    assert info.state == "cancelled"
    assert await client.cancel_flow(run.flow_id) is False


async def _states(client: rsched.Client, flow_id: str, want: list[str]) -> bool:
    try:
        return [s.state for s in (await client.flow(flow_id)).steps] == want
    except rsched.FlowNotFound:
        return False


async def test_a_flow_id_makes_run_flow_idempotent(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    first = await client.run_flow(step("x"), flow_id="nightly-2026-11-27")
    again = await client.run_flow(step("x"), flow_id="nightly-2026-11-27")
    assert first.created
    assert not again.created
    info = await client.flow("nightly-2026-11-27")
    assert [s.state for s in info.steps] == ["queued"]
    assert len(await any_(redis).xrange(f"{{{settings.prefix}}}:queue:default")) == 1


async def test_a_large_flow_is_written_in_several_calls_and_starts_whole(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    flow = chain(group(step("p", {"i": i}) for i in range(2500)), step("join"))
    run = await client.run_flow(flow)
    assert run.steps == 2501
    assert run.roots == 2500
    assert await redis.xlen(f"{{{settings.prefix}}}:queue:default") == 2500
    info = await client.flow(run.flow_id)
    assert info.steps[-1].parents == tuple(range(1, 2501))


async def test_flows_lists_newest_first_by_state(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    ids = [(await client.run_flow(step("x"))).flow_id for _ in range(5)]
    await client.cancel_flow(ids[0])
    page = await client.flows(limit=3)
    assert len(page) == 3
    assert page.cursor is not None
    rest = await client.flows(limit=3, cursor=page.cursor)
    assert [f.flow_id for f in (*page, *rest)] == ids[::-1]
    assert [f.flow_id for f in await client.flows(state="cancelled")] == [ids[0]]


@pytest.mark.parametrize(
    ("flow", "field"),
    [
        (chain(), "flow"),
        (group(), "flow"),
        (step("bad task"), "steps[1]"),
        (chain(step("a"), step("b", max_retries=-1)), "steps[2].max_retries"),
        (step("a", colour="red"), "steps[1].colour"),
        (step("a", on_failure="retry"), "steps[1].on_failure"),  # type: ignore[arg-type]
        ("etl.extract", "flow"),
    ],
)
async def test_a_bad_flow_is_refused_naming_the_step(
    redis: Redis, settings: Settings, flow: Any, field: str
) -> None:
    client = rsched.Client(redis, settings)
    with pytest.raises(rsched.InvalidFlow) as caught:
        await client.run_flow(flow)
    assert caught.value.field == field
    assert await client.flows() == rsched.Page([])


async def test_an_unknown_flow_is_not_found(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    with pytest.raises(rsched.FlowNotFound):
        await client.flow("nope")
    with pytest.raises(rsched.FlowNotFound):
        await client.cancel_flow("nope")


async def test_a_schedule_starts_a_flow_per_occurrence_and_skip_spans_the_whole_flow(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    worker = rsched.Worker(settings=fast_settings(settings))
    gate = anyio.Event()
    ran: list[str] = []

    @worker.task("first")
    async def first(job: rsched.Job) -> int:
        ran.append(job.execution_id)
        return 1

    @worker.task("last")
    async def last(job: rsched.Job) -> int:
        await gate.wait()
        ran.append(job.execution_id)
        return int(job.parent_results[0]) + 1

    flow = chain(step("first"), step("last"))
    await client.add(rsched.Schedule(id="etl", every="1d", flow=flow, overlap="skip"))
    stored = await client.get("etl")
    assert stored.flow == rsched.Schedule(id="x", every="1d", flow=flow).flow
    fired = await client.trigger("etl")
    flow_id = fired.execution_id
    async with running(worker, redis):
        await eventually(
            lambda: _states(client, flow_id, ["completed", "running"]), what="the flow at its end"
        )
        again = await client.trigger("etl")  # the first occurrence's flow still runs
        assert again.status == "skipped"
        gate.set()
        info = await eventually(lambda: ended(client, flow_id))
        assert info.state == "completed"
        assert info.schedule_id == "etl"
        third = await client.trigger("etl")
        assert third.status == "fired"
        await eventually(lambda: ended(client, third.execution_id))
    events = [(e.event, e.execution_id) for e in (await client.history("etl")).items]
    assert ("completed", flow_id) in events
    assert ran == [
        f"{flow_id}~1",
        f"{flow_id}~2",
        f"{third.execution_id}~1",
        f"{third.execution_id}~2",
    ]


async def test_a_failed_flow_ends_its_occurrence_dead(redis: Redis, settings: Settings) -> None:
    seen: list[tuple[str, Any]] = []
    client = rsched.Client(redis, settings)
    flow = chain(step("etl.fail", max_retries=0), step("etl.notify"))
    await client.add(rsched.Schedule(id="etl", every="1d", flow=flow))
    fired = await client.trigger("etl")
    async with running(etl_worker(settings, seen), redis):
        info = await eventually(lambda: ended(client, fired.execution_id))
        assert info.state == "failed"
        history = await eventually(
            lambda: _ended_events(client, "etl"), what="the occurrence's end in the history"
        )
    assert ("dead", fired.execution_id) in history


async def _ended_events(client: rsched.Client, schedule_id: str) -> list[tuple[str, str | None]]:
    events = (await client.history(schedule_id)).items
    return [(e.event, e.execution_id) for e in events if e.event in ("completed", "dead")]


async def test_the_sweep_fails_a_flow_whose_step_was_lost_and_drops_expired_flows(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    keys = Keys(settings.prefix)
    run = await client.run_flow(chain(step("a"), step("b")))
    [(entry_id, _)] = await any_(redis).xrange(keys.queue("default"))
    await redis.xdel(keys.queue("default"), entry_id)  # removed by hand: found nowhere
    sweep = Retention(redis, settings, lambda: True)
    assert (await sweep.sweep()).flows_repaired == 0  # it changed less than flow_stall_s ago
    await redis.hset(keys.flow(run.flow_id), "at", "1")
    assert (await sweep.sweep()).flows_repaired == 1
    info = await client.flow(run.flow_id)
    assert info.state == "failed"
    assert [s.state for s in info.steps] == ["dead", "cancelled"]
    await redis.delete(keys.flow(run.flow_id))  # expired
    assert (await sweep.sweep()).flows == 1
    assert await client.flows() == rsched.Page([])


async def test_the_sweep_releases_a_step_whose_parents_all_ended(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    keys = Keys(settings.prefix)
    run = await client.run_flow(chain(step("a"), step("b", queue="other")))
    # As if the release had been lost: step 1 ended, step 2 waits for nobody.
    await redis.hset(
        keys.flow(run.flow_id), mapping={"1.s": "c", "2.w": "0", "left": "1", "at": "1"}
    )
    await redis.delete(keys.queue("default"))
    assert (await Retention(redis, settings, lambda: True).sweep()).flows_repaired == 1
    [(_, fields)] = await any_(redis).xrange(keys.queue("other"))
    assert fields["execution_id"] == f"{run.flow_id}~2"
    assert [s.state for s in (await client.flow(run.flow_id)).steps] == ["completed", "queued"]


async def test_each_join_is_released_once_when_its_parents_end_together_on_two_workers(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    release = anyio.Event()
    joins: list[tuple[str, str]] = []

    def worker_of() -> rsched.Worker:
        worker = rsched.Worker(settings=fast_settings(settings), concurrency=50)

        @worker.task("pair")
        async def pair(job: rsched.Job) -> str:
            await release.wait()  # every part ends at the same instant, on either worker
            return job.execution_id

        @worker.task("join")
        async def join(job: rsched.Job) -> None:
            joins.append((job.execution_id, job.entry_id))

        return worker

    flow = chain(group(step("pair"), step("pair")), step("join"))
    ids = [(await client.run_flow(flow)).flow_id for _ in range(40)]
    async with running(worker_of(), redis), running(worker_of(), redis):
        await eventually(lambda: _all_running(client, ids), what="every part running")
        release.set()
        await eventually(lambda: len(joins) >= 40, what="every join run")
        for flow_id in ids:
            await eventually(lambda f=flow_id: ended(client, f))
    assert sorted(e for e, _ in joins) == sorted(f"{f}~3" for f in ids)  # once each


async def _all_running(client: rsched.Client, ids: list[str]) -> bool:
    for flow_id in ids:
        steps = (await client.flow(flow_id)).steps
        if [s.state for s in steps[:2]] != ["running", "running"]:
            return False
    return True


async def test_an_ended_flow_expires_with_the_runs_log_retention(
    redis: Redis, settings: Settings
) -> None:
    from rsched._core.settings import RetentionSettings

    kept = settings.model_copy(update={"retention": RetentionSettings(runs_max_age_s=120)})
    client = rsched.Client(redis, kept)
    run = await client.run_flow(step("x"))
    key = Keys(settings.prefix).flow(run.flow_id)
    assert await redis.pttl(key) == -1  # kept while it runs
    await client.cancel_flow(run.flow_id)
    assert 0 < await redis.pttl(key) <= 120_000
