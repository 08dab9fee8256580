"""One rsched.Page for every paged read, and iterators over all pages."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

import rsched
import rsched._client.client
from rsched import Client, Page, Schedule, Settings
from rsched._core.keys import Keys


def test_a_page_is_its_items() -> None:
    page: Page[int] = Page([1, 2, 3], "c")
    assert list(page) == [1, 2, 3]
    assert len(page) == 3
    assert page.items == [1, 2, 3]
    assert page.cursor == "c"
    assert Page([1]) == Page([1], None)
    assert repr(Page([])) == "Page(items=[], cursor=None)"
    assert rsched.Page is Page


async def test_list_cursor_is_none_exactly_on_the_last_page(
    redis: Redis, settings: Settings
) -> None:
    client = Client(redis, settings)
    for i in range(6):
        await client.add(Schedule(id=f"s{i}", task="t", every=60 + i))
    first = await client.list(limit=3)
    assert [s.id for s in first] == ["s0", "s1", "s2"]
    last = await client.list(limit=3, cursor=first.cursor)
    assert ([s.id for s in last], last.cursor) == (["s3", "s4", "s5"], None)
    assert (await client.list(limit=6)).cursor is None
    assert (await client.list(limit=5)).cursor is not None


async def test_iter_schedules_with_filters(redis: Redis, settings: Settings) -> None:
    client = Client(redis, settings)
    for i in range(9):
        queue = "odd" if i % 2 else "even"
        await client.add(Schedule(id=f"s{i}", task=f"t{i % 3}", every=60 + i, queue=queue))
    await client.pause("s4")
    ids = [s.id async for s in client.iter_schedules(page_size=2)]
    assert ids == ["s0", "s1", "s2", "s3", "s5", "s6", "s7", "s8", "s4"]
    odd = [s.id async for s in client.iter_schedules(queue="odd", page_size=1)]
    assert odd == ["s1", "s3", "s5", "s7"]
    active_t1 = [s.id async for s in client.iter_schedules(task="t1", paused=False)]
    assert active_t1 == ["s1", "s7"]
    assert [s.id async for s in client.iter_schedules(paused=True)] == ["s4"]
    await client.add(Schedule(id="s10", task="t", every=3600))
    prefixed = [s.id async for s in client.iter_schedules(id_prefix="s1", page_size=1)]
    assert prefixed == ["s1", "s10"]
    # A filtered page that matched everything the index holds says it is the last.
    evens = await client.list(queue="even", limit=5)
    assert ([s.id for s in evens], evens.cursor) == (["s0", "s2", "s6", "s8", "s4"], None)


async def test_dead_letter_pages(
    redis: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(redis, settings)
    for n in range(4):
        await redis.xadd(
            Keys(settings.prefix).dead("q"),
            {"reason": "max_retries", "execution_id": f"e{n}", "task": f"t{n % 2}", "job": "[]"},
        )
    first = await client.dead_letters("q", limit=2)
    assert isinstance(first, Page)
    assert [d.execution_id for d in first] == ["e3", "e2"]
    last = await client.dead_letters("q", limit=2, cursor=first.cursor)
    assert ([d.execution_id for d in last], last.cursor) == (["e1", "e0"], None)
    assert [d.execution_id async for d in client.iter_dead_letters("q", task="t1")] == ["e3", "e1"]
    # At the largest page size the page after is looked at with one more read.
    monkeypatch.setattr(rsched._client.client, "PAGE_MAX", 2)
    assert (await client.dead_letters("q", limit=2)).cursor == first.cursor
    assert (await client.dead_letters("q", limit=2, cursor=first.cursor)).cursor is None
