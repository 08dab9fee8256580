"""A schedule's history: typed records, pages with cursors, the status filter, iteration."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from rsched import (
    Client,
    HistoryEvent,
    InvalidArgument,
    Page,
    Schedule,
    ScheduleNotFound,
    Settings,
    SyncClient,
)
from rsched._core.history import page_events, parse_event
from rsched._core.keys import Keys
from rsched._core.schedule import to_ms

T0 = 1_795_386_019_836  # an epoch ms that float arithmetic would round wrongly


def fired(at: int, n: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "event": "fired",
        "scheduled_at": at - 5,
        "at": at,
        "late_ms": 5,
        "execution_id": f"s@{at - 5}",
        "origin": "schedule",
        **extra,
    }


def test_an_event_reads_as_a_typed_record() -> None:
    at, event = parse_event(fired(T0)) or (0, None)
    assert at == T0
    assert event == HistoryEvent(
        event="fired",
        at=datetime(2026, 11, 22, 22, 20, 19, 836000, tzinfo=UTC),
        execution_id=f"s@{T0 - 5}",
        scheduled_at=datetime(2026, 11, 22, 22, 20, 19, 831000, tzinfo=UTC),
        late_ms=5,
        origin="schedule",
    )
    assert event.as_dict() == {
        "event": "fired",
        "at": "2026-11-22T22:20:19.836000+00:00",
        "execution_id": f"s@{T0 - 5}",
        "scheduled_at": "2026-11-22T22:20:19.831000+00:00",
        "late_ms": 5,
        "origin": "schedule",
    }


def test_fields_it_does_not_know_are_kept_in_extra() -> None:
    """Events of a newer rsched (new kinds, new fields, new values) still read."""
    stored = {
        "event": "retry",
        "at": T0,
        "attempt": 2,
        "reason": "buffer_full",
        "error_type": "ValueError",
        "error": "boom",
        "duration_ms": 12,
        "retry_in_ms": 30000,
        "worker": "w1",
        "late_ms": "soon",  # a known field of an unexpected type goes to extra, as stored
    }
    _, event = parse_event(stored) or (0, None)
    assert event is not None
    assert (event.event, event.attempt, event.reason, event.duration_ms) == (
        "retry",
        2,
        "buffer_full",
        12.0,
    )
    assert (event.error_type, event.error, event.late_ms) == ("ValueError", "boom", None)
    assert event.extra == {"retry_in_ms": 30000, "worker": "w1", "late_ms": "soon"}
    assert event.as_dict()["retry_in_ms"] == 30000
    assert parse_event({"event": "fired"}) is None  # no time: not an event
    assert parse_event({"at": T0}) is None


def test_pages_follow_the_cursor_while_events_arrive() -> None:
    stored = [fired(T0 - i * 1000) for i in range(7)]  # newest first
    first = page_events(stored, limit=3)
    assert [e.at for e in first] == [e.at for e in first.items]
    assert len(first) == 3
    assert first.cursor == f"{T0 - 2000}-1"
    newer = [fired(T0 + 5000), fired(T0 + 4000)]  # pushed between two reads
    second = page_events(newer + stored, limit=3, cursor=first.cursor)
    assert [to_ms(e.at) for e in second] == [T0 - 3000, T0 - 4000, T0 - 5000]
    third = page_events(newer + stored[:-1], limit=3, cursor=second.cursor)  # oldest trimmed
    assert third.items == []
    assert third.cursor is None
    last = page_events(stored, limit=3, cursor=second.cursor)
    assert (len(last), last.cursor) == (1, None)  # no cursor on the last page
    exact = page_events(stored, limit=7)
    assert (len(exact), exact.cursor) == (7, None)


def test_events_in_one_millisecond_are_not_lost() -> None:
    stored = [fired(T0, event="completed"), fired(T0, event="running"), fired(T0), fired(T0 - 1)]
    seen, cursor = [], None
    while True:
        page = page_events(stored, limit=1, cursor=cursor)
        seen += [e.event for e in page]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == ["completed", "running", "fired", "fired"]


def test_status_filter_and_bad_cursors() -> None:
    stored = [fired(T0, event="dead"), fired(T0 - 1), fired(T0 - 2, event="dead"), fired(T0 - 3)]
    dead = page_events(stored, limit=1, status="dead")
    assert [e.event for e in dead] == ["dead"]
    rest = page_events(stored, limit=1, status="dead", cursor=dead.cursor)
    assert [to_ms(e.at) for e in rest] == [T0 - 2]
    assert rest.cursor is None
    for bad in ("garbage", "12", "1-x", "-"):
        with pytest.raises(ValueError, match="is not a cursor"):
            page_events(stored, limit=1, cursor=bad)


async def test_client_history_pages(redis: Redis, settings: Settings) -> None:
    client = Client(redis, settings)
    await client.add(Schedule(id="s", task="t", every=3600))
    key = Keys(settings.prefix).history("s")
    events = [fired(T0 + i * 1000, event="dead" if i % 3 == 0 else "fired") for i in range(12)]
    await redis.lpush(key, *[orjson.dumps(e) for e in events])  # newest at the head
    await redis.lpush(key, "not json", orjson.dumps([1, 2]))  # someone else's writes: left out
    page = await client.history("s", limit=5)
    assert isinstance(page, Page)
    assert all(isinstance(e, HistoryEvent) for e in page)
    seen = [e.at for e in page]
    while page.cursor is not None:
        page = await client.history("s", limit=5, cursor=page.cursor)
        seen += [e.at for e in page]
    assert seen == sorted(seen, reverse=True)
    assert len(seen) == 12
    assert [e.at for e in (await client.history("s", limit=100))] == seen
    dead = [e async for e in client.iter_history("s", status="dead", page_size=2)]
    assert [e.event for e in dead] == ["dead"] * 4
    every = [e.at async for e in client.iter_history("s", page_size=5)]
    assert every == seen


async def test_a_retry_is_filtered_as_retried_or_retry(redis: Redis, settings: Settings) -> None:
    client = Client(redis, settings)
    await client.add(Schedule(id="s", task="t", every=3600))
    event = {"event": "retried", "at": T0, "execution_id": "s@1", "attempt": 1, "retry_in_ms": 5}
    await redis.lpush(Keys(settings.prefix).history("s"), orjson.dumps(event))
    for word in ("retried", "retry"):  # the status filter takes both words
        assert [e.event for e in await client.history("s", status=word)] == ["retried"]


async def test_client_history_errors(redis: Redis, settings: Settings) -> None:
    client = Client(redis, settings)
    await client.add(Schedule(id="s", task="t", every=3600))
    assert (await client.history("s")).items == []
    with pytest.raises(InvalidArgument, match=re.escape("status: 'bogus' is not a history status")):
        await client.history("s", status="bogus")
    with pytest.raises(InvalidArgument, match=r"give one of fired, skipped, .*, retried, dead"):
        await client.history("s", status="bogus")
    with pytest.raises(InvalidArgument, match="cursor: 'x' is not a cursor"):
        await client.history("s", cursor="x")
    with pytest.raises(InvalidArgument, match="limit"):
        await client.history("s", limit=0)
    with pytest.raises(ScheduleNotFound):
        await client.history("ghost")
    with pytest.raises(ScheduleNotFound):
        [e async for e in client.iter_history("ghost")]


def test_sync_iterators(redis_url: str, prefix: str) -> None:
    with SyncClient(redis_url, prefix) as client:
        for i in range(5):
            client.add(Schedule(id=f"s{i}", task="t", every=60 + i, queue="q" if i % 2 else "p"))
        assert [s.id for s in client.iter_schedules(page_size=2)] == [f"s{i}" for i in range(5)]
        assert [s.id for s in client.iter_schedules(queue="q", page_size=1)] == ["s1", "s3"]
        client.trigger("s0")
        assert [e.event for e in client.iter_history("s0")] == ["fired"]
        assert list(client.iter_dead_letters("p")) == []
        with pytest.raises(InvalidArgument, match="status"):
            list(client.iter_history("s0", status="nope"))
