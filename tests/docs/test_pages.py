"""The Python of the concept and how-to pages that stands on its own (a few awaited client
calls, with the client named ``c`` or ``client``) runs as written against a real server, and
does what the page says."""

from __future__ import annotations

import re
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import rsched

DOCS = Path(__file__).parents[2] / "docs"


async def run_page(page: str, client: rsched.Client) -> None:
    """Every ```python block of ``page``, in order, as the body of one coroutine."""
    blocks = re.findall(r"^```python\n(.*?)^```$", (DOCS / page).read_text(), flags=re.M | re.S)
    assert blocks, page
    source = "async def page(c, client):\n" + textwrap.indent("\n".join(blocks), "    ")
    namespace: dict[str, Any] = {"rsched": rsched}
    exec(compile(source, f"docs/{page}", "exec"), namespace)
    await namespace["page"](client, client)


async def test_dst_rules(redis_url: str, prefix: str) -> None:
    async with rsched.Client.from_url(redis_url, prefix) as c:
        await run_page("dst.md", c)
        ny = ZoneInfo("America/New_York")
        # "02:30 runs on every day that has a 02:30, and not at all on the day clocks skip it."
        nightly = await c.get("nightly")
        days = rsched.next_fire_times(nightly, after=datetime(2026, 3, 7, 12, tzinfo=ny), n=2)
        assert [d.astimezone(ny).day for d in days] == [9, 10]
        # "01:30 runs twice on 2026-11-01: at 01:30 EDT and again at 01:30 EST."
        meter = await c.get("meter")
        runs = rsched.next_fire_times(meter, after=datetime(2026, 10, 31, 12, tzinfo=ny), n=2)
        assert [(r.astimezone(ny).strftime("%d %H:%M %Z")) for r in runs] == [
            "01 01:30 EDT", "01 01:30 EST",
        ]  # fmt: skip


async def test_start_deadlines(redis_url: str, prefix: str) -> None:
    async with rsched.Client.from_url(redis_url, prefix) as c:
        await run_page("deadlines.md", c)
        assert (await c.get("morning")).start_deadline == 600
        assert [j.task for j in await c.jobs()] == ["prices.refresh"]


async def test_pausing_after_failures(redis_url: str, prefix: str) -> None:
    async with rsched.Client.from_url(redis_url, prefix) as c:
        await run_page("failure-pause.md", c)
        assert (await c.get("sync")).pause_after_failures == 3


async def test_calendars(redis_url: str, prefix: str) -> None:
    async with rsched.Client.from_url(redis_url, prefix) as c:
        await run_page("calendars.md", c)
        invoices = await c.get("invoices")
        assert invoices.exclude == ("holidays-it", "weekends")
        # 2026-12-25 is a holiday and the 26th-27th a weekend: the next run is on the 28th.
        rome = ZoneInfo("Europe/Rome")
        after = datetime(2026, 12, 24, 10, tzinfo=rome)
        cals = [await c.calendar(name) for name in invoices.exclude]
        first = rsched.next_fire_times(invoices, after=after, n=1, calendars=cals)
        assert first == [datetime(2026, 12, 28, 9, tzinfo=rome)]
