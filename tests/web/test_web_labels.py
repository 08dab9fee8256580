"""The HTTP API with labels: schedules carry them, ``?label=`` filters the list, and the select
and bulk routes act on ids or a filter, with ``dry_run`` (docs/labels.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from tests.support.web import api_error

Web = Callable[..., str]


def spec(sid: str, **over: Any) -> dict[str, Any]:
    return {"id": sid, "task": "reports.run", "every": 3600, **over}


async def test_labels_through_the_api(web: Web, client: rsched.Client) -> None:
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post("/schedules", json=spec("a", labels={"team": "billing"}))
        assert r.status_code == 201, r.text
        assert r.json()["labels"] == {"team": "billing"}
        r = await http.post("/schedules", json=spec("b", labels={"Team": "x"}))
        assert api_error(r, 422, "InvalidSchedule", "labels")["message"].startswith("invalid")
        await client.add_many(
            [spec("b", labels={"team": "billing", "env": "dev"}), spec("c", queue="slow")]
        )
        r = await http.patch("/schedules/c", json={"labels": {"team": "sales"}})
        assert r.json()["labels"] == {"team": "sales"}
        r = await http.get("/schedules", params={"label": "team=billing"})
        assert [s["id"] for s in r.json()["items"]] == ["a", "b"]
        r = await http.get("/schedules", params=[("label", "team=billing"), ("label", "env=dev")])
        assert [s["id"] for s in r.json()["items"]] == ["b"]
        r = await http.get("/schedules", params={"label": "team"})
        api_error(r, 400, "InvalidArgument", "labels")

        r = await http.get("/select/schedules", params={"label": "team=billing"})
        assert r.json() == {"ids": ["a", "b"], "count": 2}
        r = await http.get("/select/schedules", params={"queue": "slow"})
        assert r.json()["ids"] == ["c"]
        api_error(await http.get("/select/schedules"), 400, "InvalidArgument", "labels")

        r = await http.post(
            "/bulk/schedules/pause", json={"labels": {"team": "billing"}, "dry_run": True}
        )
        assert r.json() == {"selected": ["a", "b"], "dry_run": True}
        assert not (await client.get("a")).paused
        r = await http.post(
            "/bulk/schedules/pause", json={"labels": ["team=billing"], "note": "db"}
        )
        assert r.json()["outcomes"] == {"a": "paused", "b": "paused"}
        assert r.json()["summary"] == "2 paused"
        assert (await client.get("a")).pause_note == "db"
        r = await http.post("/bulk/schedules/resume", json={"ids": ["a", "b", "gone"]})
        assert r.json()["outcomes"] == {"a": "resumed", "b": "resumed", "gone": "not_found"}
        r = await http.post(
            "/bulk/schedules/trigger", json={"task": "reports.run", "queue": "slow"}
        )
        assert r.json()["outcomes"] == {"c": "fired"}
        r = await http.post("/bulk/schedules/remove", json={"ids": ["a"], "labels": ["team=x"]})
        api_error(r, 400, "InvalidArgument", "ids")
        api_error(await http.post("/bulk/schedules/remove", json={}), 400, "InvalidArgument", "ids")
        r = await http.post("/bulk/schedules/explode", json={"ids": ["a"]})
        assert r.status_code in (400, 422)
        r = await http.post("/bulk/schedules/remove", json={"labels": {"team": "billing"}})
        assert r.json()["summary"] == "2 removed"

        r = await http.post(
            "/jobs", json={"task": "mail.send", "queue": "mail", "execution_id": "m-1",
                           "labels": {"order": "42"}}
        )  # fmt: skip
        assert r.status_code == 201, r.text
        r = await http.post("/jobs", json={"task": "mail.send", "labels": {"order": "4 2"}})
        api_error(r, 422, "InvalidJob", "labels")
        r = await http.get("/jobs", params={"label": "order=42"})
        assert [j["labels"] for j in r.json()["items"]] == [{"order": "42"}]
        r = await http.get("/select/jobs", params={"task": "mail.send"})
        assert r.json()["ids"] == ["m-1"]
        r = await http.get("/select/jobs", params={"label": "order=42"})
        assert r.json()["ids"] == ["m-1"]
        r = await http.post("/bulk/jobs/cancel", json={"task": "mail.send", "dry_run": True})
        assert r.json() == {"selected": ["m-1"], "dry_run": True}
        r = await http.post("/bulk/jobs/cancel", json={"queue": "mail"})
        assert r.json()["outcomes"] == {"m-1": "cancelled"}
        r = await http.get("/runs", params={"label": "order=42"})
        assert [(x["execution_id"], x["labels"]) for x in r.json()["items"]] == [
            ("m-1", {"order": "42"})
        ]


async def test_read_only_refuses_bulk_actions_but_selects(web: Web, client: rsched.Client) -> None:
    await client.add(spec("a", labels={"team": "billing"}))
    base = web(read_only=True) + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.get("/select/schedules", params={"label": "team=billing"})
        assert r.json()["ids"] == ["a"]
        r = await http.post("/bulk/schedules/pause", json={"ids": ["a"]})
        assert r.status_code == 403
    assert not (await client.get("a")).paused


def flash(r: httpx.Response) -> str:
    return bytes.fromhex(r.cookies["rsched_flash"]).decode()


async def test_dashboard_filters_by_label_and_acts_on_ticked_rows(
    web: Web, client: rsched.Client
) -> None:
    await client.add_many(
        [spec("a", labels={"team": "billing"}), spec("b", labels={"team": "billing"}), spec("c")]
    )
    async with httpx.AsyncClient(base_url=web()) as browser:
        page = (await browser.get("/schedules", params={"label": "team=billing"})).text
        assert 'name="id" value="a"' in page
        assert 'name="id" value="b"' in page
        assert 'name="id" value="c"' not in page
        assert "team=billing</a>" in page
        assert 'action="/schedules/bulk"' in page
        token = browser.cookies["rsched_csrf"]
        ticked = {"id": ["a", "b"], "action": "pause"}
        assert (await browser.post("/schedules/bulk", data=ticked)).status_code == 403
        r = await browser.post("/schedules/bulk", data={**ticked, "csrf_token": token})
        assert r.status_code == 303
        assert "pause: 2 schedule(s): 2 paused" in flash(r)
        assert (await client.get("b")).paused
        r = await browser.post(
            "/schedules/bulk", data={"id": ["b", "gone"], "action": "remove", "csrf_token": token}
        )
        assert "1 removed, 1 not_found" in flash(r)
        r = await browser.post("/schedules/bulk", data={"action": "resume", "csrf_token": token})
        assert "tick the schedules" in flash(r)
        page = (await browser.get("/schedules/a")).text
        assert 'id="labels"' in page

        await client.enqueue("mail.send", queue="mail", execution_id="m-1", delay=3600)
        await client.enqueue("mail.send", queue="mail", execution_id="m-2")
        page = (await browser.get("/queues/mail")).text
        assert 'value="m-1" form="jobs-bulk"' in page
        form = {"execution_id": ["m-1", "m-2"], "csrf_token": token}
        r = await browser.post("/queues/mail/cancel-many", data=form)
        assert "cancel: 2 job(s): 2 cancelled" in flash(r)


async def test_read_only_dashboard_has_no_action_bar(web: Web, client: rsched.Client) -> None:
    await client.add(spec("a", labels={"team": "billing"}))
    async with httpx.AsyncClient(base_url=web(read_only=True)) as browser:
        page = (await browser.get("/schedules", params={"label": "team=billing"})).text
        assert ">a</a>" in page
        assert 'name="id"' not in page
        token = browser.cookies["rsched_csrf"]
        r = await browser.post(
            "/schedules/bulk", data={"id": ["a"], "action": "pause", "csrf_token": token}
        )
        assert r.status_code == 403
    assert not (await client.get("a")).paused


async def test_dashboard_runs_by_label(web: Web, client: rsched.Client) -> None:
    await client.enqueue("mail.send", execution_id="m-1", labels={"order": "42"}, delay=3600)
    await client.enqueue("mail.send", execution_id="m-2", delay=3600)
    await client.cancel_many(["m-1", "m-2"])
    async with httpx.AsyncClient(base_url=web()) as browser:
        page = (await browser.get("/runs", params={"label": "order=42"})).text
        assert "m-1" in page
        assert "m-2" not in page
        page = (await browser.get("/runs", params={"label": "order"})).text
        assert "write it key=value" in page
