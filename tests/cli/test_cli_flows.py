"""``rsched flows``, ``rsched flow ID`` and ``rsched flow cancel ID`` against real servers."""

from __future__ import annotations

import anyio
import orjson
from redis.asyncio import Redis

import rsched
from rsched import chain, group, step
from rsched._core.settings import Settings
from tests.support.command import Cli
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running


def etl_worker(settings: Settings) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("etl.extract")
    async def extract(job: rsched.Job) -> int:
        return 3

    @worker.task("etl.part")
    async def part(job: rsched.Job) -> int:
        return int(job.payload["i"])

    @worker.task("etl.merge")
    async def merge(job: rsched.Job) -> int:
        return sum(job.parent_results)

    return worker


async def shown(cli: Cli, flow_id: str) -> tuple[str, list[str]]:
    """``rsched flow ID``: its fields, and its tree's lines."""
    code, out, err = await anyio.to_thread.run_sync(cli, "flow", flow_id)
    assert code == 0, err
    head, tree = out.split("\n\n", 1)
    return head, tree.splitlines()


async def test_a_finished_flow_is_listed_and_drawn_as_a_tree(
    redis: Redis, settings: Settings, cli: Cli
) -> None:
    client = rsched.Client(redis, settings)
    flow = chain(
        step("etl.extract"),
        group(step("etl.part", {"i": i}) for i in range(3)),
        step("etl.merge"),
        step("etl.merge"),
    )
    run = await client.run_flow(flow, flow_id="etl-day")

    async def ended() -> bool:
        return (await client.flow(run.flow_id)).state != "running"

    async with running(etl_worker(settings), redis):
        await eventually(ended)
    code, out, err = await anyio.to_thread.run_sync(cli, "flows")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATE", "STEPS", "CREATED", "ENDED", "SCHEDULE"]
    assert row.split()[:3] == ["etl-day", "completed", "6/6"]
    head, tree = await shown(cli, "etl-day")
    assert "state     completed" in head
    assert tree == [
        "#1 etl.extract  completed  1 attempt",
        "├─ #2 etl.part  completed  1 attempt",
        "├─ #3 etl.part  completed  1 attempt",
        "└─ #4 etl.part  completed  1 attempt",
        "⋈ #5 etl.merge  completed  1 attempt  after #2, #3, #4",
        "#6 etl.merge  completed  1 attempt",
    ]
    code, out, _ = await anyio.to_thread.run_sync(cli, "--json", "flow", "etl-day")
    data = orjson.loads(out)
    assert (data["state"], data["step_count"], data["done_count"]) == ("completed", 6, 6)
    assert data["steps"][4]["result"] == 3
    assert data["steps"][4]["parents"] == [2, 3, 4]
    code, out, _ = await anyio.to_thread.run_sync(cli, "flow", "cancel", "etl-day")
    assert code == 0
    assert out.strip() == "flow etl-day had ended (completed): nothing to cancel"
    code, out, _ = await anyio.to_thread.run_sync(cli, "flows", "--state", "running")
    assert out.strip() == "no flows"


async def test_cancel_a_running_flow_and_a_join_between_groups(
    redis: Redis, settings: Settings, cli: Cli
) -> None:
    client = rsched.Client(redis, settings)
    flow = chain(
        group(step("etl.part", {"i": 1}), step("etl.part", {"i": 2})),
        group(step("etl.merge"), chain(step("etl.merge"), step("etl.merge"))),
    )
    await client.run_flow(flow, flow_id="wide", labels={"team": "data"})
    head, tree = await shown(cli, "wide")
    assert "labels    team=data" in head
    assert tree == [
        "#1 etl.part  queued  0 attempts",
        "#2 etl.part  queued  0 attempts",
        "#3 ⋈ join  waiting  after #1, #2",
        "├─ #4 etl.merge  waiting  0 attempts",
        "└─ #5 etl.merge  waiting  0 attempts",
        "   #6 etl.merge  waiting  0 attempts",
    ]
    code, out, err = await anyio.to_thread.run_sync(cli, "flow", "cancel", "wide")
    assert code == 0, err
    assert out.startswith("cancelled flow wide")
    assert (await client.flow("wide")).state == "cancelled"
    code, out, _ = await anyio.to_thread.run_sync(cli, "--json", "flow", "cancel", "wide")
    assert orjson.loads(out) == {"flow_id": "wide", "cancelled": False}
    code, out, _ = await anyio.to_thread.run_sync(cli, "--json", "flows", "--state", "cancelled")
    listed = orjson.loads(out)
    assert [f["flow_id"] for f in listed["flows"]] == ["wide"]
    assert listed["flows"][0]["steps"] == []


async def test_errors_use_the_exit_codes_of_the_command(cli: Cli) -> None:
    code, _, err = await anyio.to_thread.run_sync(cli, "flow", "nope")
    assert code == 1
    assert err.startswith("rsched: error: no flow 'nope'")
    code, _, err = await anyio.to_thread.run_sync(cli, "--json", "flow", "cancel", "nope")
    assert code == 1
    assert orjson.loads(err)["error"] == "FlowNotFound"
    code, _, err = await anyio.to_thread.run_sync(cli, "flow", "a", "b", "c")
    assert code == 2
    assert "rsched flow cancel ID" in err
    code, _, err = await anyio.to_thread.run_sync(cli, "flows", "--state", "done")
    assert code == 2
    assert "--state" in err
    code, _, err = await anyio.to_thread.run_sync(cli, "flows", "-n", "0")
    assert code != 0
    assert "-n/--limit" in err
