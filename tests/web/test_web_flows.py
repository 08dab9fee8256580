"""Flows in the HTTP API (``/api/v1/flows``) and the dashboard (the Flows page, a flow's graph,
its cancel button, links from a step's job page and its schedule's page)."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from redis.asyncio import Redis

pytest.importorskip("fastapi", reason="the web extra is not installed")

import anyio.lowlevel

import rsched
from rsched import FlowStep, Settings, chain, group, step
from rsched._client import flows as flow_calls
from rsched._core.flows import plan
from rsched.web import _flow_graph as flow_graph
from tests.support.waiting import eventually
from tests.support.web import api_error
from tests.support.worker_app import fast_settings
from tests.support.workers import running

Web = Callable[..., str]
ETL = chain(
    step("etl.extract"),
    group(step("etl.part", {"i": i}) for i in range(3)),
    step("etl.merge"),
)


async def test_the_api_lists_reads_and_cancels_flows(web: Web, client: rsched.Client) -> None:
    await client.run_flow(ETL, flow_id="etl-1", labels={"team": "data"})
    await client.run_flow(step("etl.extract"), flow_id="one")
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        listed = (await http.get("/flows")).json()
        assert [f["flow_id"] for f in listed["items"]] == ["one", "etl-1"]
        assert listed["cursor"] is None
        first = (await http.get("/flows", params={"limit": 1})).json()
        assert [f["flow_id"] for f in first["items"]] == ["one"]
        rest = (await http.get("/flows", params={"limit": 1, "cursor": first["cursor"]})).json()
        assert [f["flow_id"] for f in rest["items"]] == ["etl-1"]
        assert listed["items"][1]["steps"] == []
        assert listed["items"][1]["step_count"] == 5
        one = (await http.get("/flows/etl-1")).json()
        assert (one["state"], one["labels"], one["schedule_id"]) == (
            "running",
            {"team": "data"},
            None,
        )
        assert [s["state"] for s in one["steps"]] == ["queued"] + ["waiting"] * 4
        assert one["steps"][4]["parents"] == [2, 3, 4]
        # A step's execution id holds '~': the job routes take it.
        job = (await http.get("/jobs/" + one["steps"][0]["execution_id"])).json()
        assert (job["execution_id"], job["flow_id"], job["flow_step"]) == ("etl-1~1", "etl-1", 1)
        assert (await http.get("/jobs/etl-1~1/logs")).json()["items"] == []
        api_error(await http.get("/flows/nope"), 404, "FlowNotFound", "flow_id")
        api_error(await http.post("/flows/nope/cancel"), 404, "FlowNotFound", "flow_id")
        r = await http.get("/flows", params={"state": "done"})
        assert r.status_code == 400
        assert "state" in r.text
        api_error(await http.get("/flows", params={"cursor": "x"}), 422, "InvalidFlow", "cursor")
        assert (await http.post("/flows/etl-1/cancel")).json() == {
            "flow_id": "etl-1",
            "cancelled": True,
        }
        assert (await http.post("/flows/etl-1/cancel")).json()["cancelled"] is False
        cancelled = (await http.get("/flows", params={"state": "cancelled"})).json()
        assert [f["flow_id"] for f in cancelled["items"]] == ["etl-1"]
        r = await http.post("/flows/one/cancel", headers={"Origin": "http://evil.example"})
        api_error(r, 403, "CrossSite")


async def test_the_flow_page_draws_its_steps_and_cancels_it(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    await client.run_flow(ETL, flow_id="etl-2")
    base = web()
    async with httpx.AsyncClient(base_url=base) as browser:
        listing = await browser.get("/flows")
        assert listing.status_code == 200
        assert 'href="/flows/etl-2"' in listing.text
        assert "0/5" in listing.text
        assert "Flows</a>" in listing.text
        page = await browser.get("/flows/etl-2")
        assert page.status_code == 200
        assert '<svg class="flow-graph"' in page.text
        steps = re.findall(r'<a class="step f-(\w+)" href="([^"]+)" data-step="(\d+)"', page.text)
        assert steps == [
            ("queued", "/jobs/etl-2~1", "1"),
            ("waiting", "/jobs/etl-2~2", "2"),
            ("waiting", "/jobs/etl-2~3", "3"),
            ("waiting", "/jobs/etl-2~4", "4"),
            ("waiting", "/jobs/etl-2~5", "5"),
        ]
        assert page.text.count('class="edge"') == 6
        assert "Cancel flow" in page.text
        job = await browser.get("/jobs/etl-2~1")
        assert job.status_code == 200
        assert 'href="/flows/etl-2"' in job.text
        assert (await browser.get("/flows/nope")).status_code == 404
        assert (await browser.get("/flows?state=done")).status_code == 200
        token = browser.cookies["rsched_csrf"]
        assert (await browser.post("/flows/etl-2/cancel", data={"x": "1"})).status_code == 403
        r = await browser.post("/flows/etl-2/cancel", data={"csrf_token": token})
        assert r.status_code == 303
        assert "cancelled flow etl-2" in bytes.fromhex(r.cookies["rsched_flash"]).decode()
        after = await browser.get("/flows/etl-2")
        assert "Cancel flow" not in after.text
        assert (await client.flow("etl-2")).state == "cancelled"
        r = await browser.post("/flows/etl-2/cancel", data={"csrf_token": token})
        assert "had ended" in bytes.fromhex(r.cookies["rsched_flash"]).decode()
        assert "f-cancelled" in (await browser.get("/_live/flows/etl-2")).text


async def test_a_finished_flow_links_its_schedule_and_read_only_refuses_cancel(
    web: Web, client: rsched.Client, settings: Settings, redis: Redis
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("etl.extract")
    async def extract(job: rsched.Job) -> int:
        return 1

    await client.add(rsched.Schedule(id="nightly", task="etl.extract", cron="0 2 * * *"))
    parts = await client._partitions()
    planned = plan(step("etl.extract"), queue="default")
    await flow_calls.store_of(parts, "from-nightly").create_flow(
        "from-nightly", planned, schedule_id="nightly"
    )
    await client.run_flow(step("etl.extract"), flow_id="other")

    async def ended() -> bool:
        return all([(await client.flow(f)).state == "completed" for f in ("from-nightly", "other")])

    async with running(worker, redis):
        await eventually(ended)
    base = web(read_only=True)
    async with httpx.AsyncClient(base_url=base) as browser:
        page = (await browser.get("/schedules/nightly")).text
        assert 'href="/flows/from-nightly"' in page
        assert 'href="/flows/other"' not in page
        flow = (await browser.get("/flows/from-nightly")).text
        assert 'href="/schedules/nightly"' in flow
        assert "Cancel flow" not in flow
        assert 'class="step f-completed"' in flow
        token = browser.cookies["rsched_csrf"]
        r = await browser.post("/flows/other/cancel", data={"csrf_token": token})
        assert r.status_code == 403
        api_error(await browser.post("/api/v1/flows/other/cancel"), 403, "ReadOnly")
    await anyio.lowlevel.checkpoint()


def _step(n: int, parents: tuple[int, ...], children: tuple[int, ...], **kw: object) -> FlowStep:
    fields: dict[str, object] = {"task": "t", "state": "completed", "queue": "default"}
    fields.update(kw)
    return FlowStep(n, execution_id=f"f~{n}", parents=parents, children=children, **fields)  # type: ignore[arg-type]


def test_depth_is_the_longest_path_from_a_root() -> None:
    # 1 -> 2 -> 3 -> 4 and 1 -> 4: step 4 is in the fourth column, not the second.
    steps = [
        _step(1, (), (2, 4)),
        _step(2, (1,), (3,)),
        _step(3, (2,), (4,)),
        _step(4, (1, 3), ()),
        _step(5, (), ()),
    ]
    assert flow_graph.depths(steps) == {1: 0, 2: 1, 3: 2, 4: 3, 5: 0}
    drawn = flow_graph.draw(steps, "/base")
    assert (drawn.columns, drawn.collapsed) == (4, 0)
    assert drawn.svg.count('class="edge"') == 4
    assert 'href="/base/jobs/f~1"' in drawn.svg


def test_a_large_flow_counts_its_wide_columns_and_long_chains() -> None:
    wide = 300
    parts = tuple(range(2, wide + 2))
    steps = [_step(1, (), parts)]
    steps += [
        _step(n, (1,), (wide + 2,), state="running" if n < 12 else "completed") for n in parts
    ]
    steps.append(_step(wide + 2, parts, (), state="waiting"))
    drawn = flow_graph.draw(steps)
    assert (drawn.columns, drawn.collapsed) == (3, 1)
    assert drawn.svg.count('class="step ') == 2
    assert "300 steps" in drawn.svg
    assert "10 running" in drawn.svg
    assert "290 completed" in drawn.svg
    assert drawn.svg.count('class="edge"') == 2
    n = 500
    chain_steps = [
        _step(i, (i - 1,) if i > 1 else (), (i + 1,) if i < n else ()) for i in range(1, n + 1)
    ]
    drawn = flow_graph.draw(chain_steps)
    assert (drawn.columns, drawn.collapsed) == (flow_graph.MAX_COLUMNS + 1, 1)
    assert drawn.svg.count('class="step ') == flow_graph.MAX_COLUMNS
    assert f"{n - flow_graph.MAX_COLUMNS} steps" in drawn.svg
    assert len(drawn.svg) < 100_000
    assert "⋈" not in drawn.svg
    barrier = [
        _step(1, (), (3,)),
        _step(2, (), (3,)),
        _step(3, (1, 2), (4,), barrier=True, task=""),
        _step(4, (3,), ()),
    ]
    drawn = flow_graph.draw(barrier)
    assert '<g class="join f-completed" data-step="3">' in drawn.svg
    assert 'href="/jobs/f~3"' not in drawn.svg
