"""A schedule's DST rule over HTTP: the API's body and schema, the next runs it previews, and the
dashboard's schedule page and edit form (a select for each field)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched

Web = Callable[..., str]


def spec(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "task": "t", "cron": "30 1 * * *", "timezone": "America/New_York", **extra}


def flash(r: httpx.Response) -> Any:
    assert r.status_code == 303, r.text
    return orjson.loads(bytes.fromhex(r.cookies["rsched_flash"]))


async def test_the_api_takes_shows_and_refuses(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        schemas = (await http.get("/openapi.json")).json()["components"]["schemas"]
        fields = schemas["Schedule"]["properties"]
        enums = {
            name: [choice for option in fields[name]["anyOf"] for choice in option.get("enum", [])]
            for name in ("dst_gap", "dst_fold")
        }
        assert enums == {"dst_gap": ["shift", "skip"], "dst_fold": ["first", "last", "both"]}
        r = await http.post("/schedules", json=spec("a", dst_gap="skip", dst_fold="both"))
        assert r.status_code == 201, r.text
        got = (await http.get("/schedules/a")).json()
        assert (got["dst_gap"], got["dst_fold"]) == ("skip", "both")
        r = await http.patch("/schedules/a", json={"dst_fold": None})
        assert r.status_code == 200, r.text
        assert r.json()["dst_fold"] is None
        r = await http.post("/schedules", json=spec("b", dst_fold="second"))
        assert r.status_code == 422, r.text
        body = r.json()
        assert (body["error"], body["field"]) == ("InvalidSchedule", "dst_fold")
        assert '"dst_fold": "first", "dst_fold": "last" or "dst_fold": "both"' in body["message"]


async def test_the_schedule_page_shows_the_rule(web: Web, client: rsched.Client) -> None:
    await client.add(spec("last", cron="*/20 * * * *", dst_fold="last"))
    await client.add(spec("plain", every=60, cron=None))
    async with httpx.AsyncClient(base_url=web()) as http:
        page = (await http.get("/schedules/last")).text
        assert "DST gap skip (cron&#39;s rule), fold last" in page
        assert "DST gap" not in (await http.get("/schedules/plain")).text  # no wall times
        r = await http.get("/api/v1/schedules/last/next", params={"n": 3})
        assert len(r.json()["items"]) == 3


async def test_the_edit_form_has_a_select_for_each(web: Web, client: rsched.Client) -> None:
    await client.add(spec("a", dst_gap="skip"))
    base = web()
    async with httpx.AsyncClient(base_url=base) as browser:
        form = (await browser.get("/schedules/a/edit")).text
        assert '<select id="dst_gap" name="dst_gap">' in form
        assert '<option value="skip" selected>skip</option>' in form
        assert '<option value="" selected>cron&#39;s rule: first for fixed times' in form
        assert "&#34;dst_gap&#34;" not in form  # in the select, not the JSON
        token = browser.cookies["rsched_csrf"]
        text = '{"task": "t", "cron": "30 1 * * *", "timezone": "America/New_York"}'
        data = {"csrf_token": token, "spec": text, "dst_gap": "", "dst_fold": "both"}
        assert flash(await browser.post("/schedules/a/edit", data=data)) == {
            "ok": True,
            "text": "saved a",
        }
        saved = await client.get("a")
        assert (saved.dst_gap, saved.dst_fold) == (None, "both")

        # The JSON may still give a field; a select that says otherwise is refused.
        text = '{"task": "t", "cron": "30 1 * * *", "dst_fold": "last"}'
        data = {"csrf_token": token, "spec": text, "dst_gap": "", "dst_fold": "first"}
        r = await browser.post("/schedules/a/edit", data=data)
        assert r.status_code == 400
        assert "dst_fold: the JSON says &#39;last&#39; and the select &#39;first&#39;" in r.text
        assert '<option value="first" selected>first</option>' in r.text  # kept as posted
        data["dst_fold"] = ""
        assert flash(await browser.post("/schedules/a/edit", data=data)) == {
            "ok": True,
            "text": "saved a",
        }
        assert (await client.get("a")).dst_fold == "last"

        new = (await browser.get("/new-schedule")).text
        assert '<select id="dst_fold" name="dst_fold">' in new
        text = '{"id": "n", "task": "t", "cron": "30 2 * * *"}'
        data = {"csrf_token": token, "spec": text, "dst_gap": "skip", "dst_fold": ""}
        assert flash(await browser.post("/new-schedule", data=data)) == {
            "ok": True,
            "text": "added n",
        }
        assert (await client.get("n")).dst_gap == "skip"
