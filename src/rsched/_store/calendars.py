"""The deployment's exclusion calendars in Redis: one hash of JSON documents, and a version
counter every change moves (lua/calendar_write.lua), so that schedulers read them again only
after a change (rsched._scheduler.calendar_cache)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace

from redis.asyncio import Redis

from rsched._core.audit import current_author
from rsched._core.calendars import Calendar
from rsched._core.codes import Code, check
from rsched._core.errors import CalendarNotFound
from rsched._core.keys import Keys
from rsched._core.schedule import from_ms
from rsched._redis import scripts
from rsched._redis.durability import Durability
from rsched._store import parking

# Ids read and hashes looked at per round trip when finding the schedules that use a calendar.
_IDS_PAGE = 10_000
_FIELDS_PAGE = 1_000


class CalendarStore(scripts.ScriptCaller):
    """The calendars of one deployment (their keys are the deployment's, whatever the
    partition of ``keys``)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        durability: Durability | None = None,
        *,
        audit_cap: int = 100_000,
    ) -> None:
        super().__init__(redis)
        self.keys = keys
        self.durability = durability
        self.audit_cap = audit_cap  # of the calendars' audit trail (MAXLEN ~, docs/audit.md)

    async def put(self, calendar: Calendar) -> Calendar:
        """Store ``calendar`` (replacing one of the same name), stamped with Redis time; returns
        it as stored."""
        stamped = replace(calendar, updated_at=from_ms(await self.time_ms()))
        await self._write(stamped.name, stamped.to_json())
        return stamped

    async def remove(self, name: str) -> None:
        """Remove calendar ``name``; raises CalendarNotFound."""
        await self._write(name, "")

    async def _write(self, name: str, body: str) -> int:
        k = self.keys
        audit = current_author().arg(None, self.audit_cap, 0)
        res = await self.call(
            "calendar_write",
            [k.calendars, k.calendars_version, k.deployment_audit],
            [name, body, audit],
        )
        if int(res[0]) == Code.NOT_FOUND:
            raise CalendarNotFound(name)
        check(int(res[0]), script="calendar_write")
        return int(res[1])

    async def raw(self) -> dict[str, str]:
        """Every calendar's stored JSON by name."""
        got = await self.redis.hgetall(self.keys.calendars)
        return {_text(name): _text(body) for name, body in got.items()}

    async def get(self, name: str) -> Calendar:
        """Calendar ``name``; raises CalendarNotFound, or StateError when what is stored under
        that name is not a calendar."""
        body = await self.redis.hget(self.keys.calendars, name)
        if body is None:
            raise CalendarNotFound(name)
        return Calendar.from_json(name, body)

    async def version(self) -> int:
        """The counter every change moves (0 before the first)."""
        raw = await self.redis.get(self.keys.calendars_version)
        try:
            return int(raw or 0)
        except ValueError:  # someone else's write: the next change starts the count again
            return -1

    async def missing(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` no calendar has."""
        found = await self._bodies(names)
        return [name for name, body in zip(names, found, strict=True) if body is None]

    async def some(self, names: Sequence[str]) -> list[Calendar]:
        """The calendars of ``names`` that exist, in that order (one read)."""
        found = await self._bodies(names)
        return [
            Calendar.from_json(name, body)
            for name, body in zip(names, found, strict=True)
            if body is not None
        ]

    async def _bodies(self, names: Sequence[str]) -> list[str | None]:
        if not names:
            return []
        found = await self.redis.hmget(self.keys.calendars, list(names))
        return [None if body is None else _text(body) for body in found]


async def schedules_using(redis: Redis, keys: Keys, name: str) -> list[str]:
    """The ids of the schedules of partition ``keys`` whose ``exclude`` names calendar ``name``:
    every id of the index and of the parked buckets, their ``exclude`` fields read in pipelines
    (a removal is rare; nothing on the fire path keeps an index of it)."""
    ids: list[str] = []
    start = 0
    while True:
        page = await redis.zrange(keys.schedules, start, start + _IDS_PAGE - 1)
        ids += (str(sid) for sid in page)
        if len(page) < _IDS_PAGE:
            break
        start += _IDS_PAGE
    parked, _ = await parking.bucket_ids(redis, keys, 0, sys.maxsize)
    ids += parked
    using: list[str] = []
    for first in range(0, len(ids), _FIELDS_PAGE):
        chunk = ids[first : first + _FIELDS_PAGE]
        async with redis.pipeline(transaction=False) as pipe:
            for sid in chunk:
                pipe.hget(keys.schedule(sid), "exclude")
            found = await pipe.execute(raise_on_error=False)
        using += (
            sid
            for sid, value in zip(chunk, found, strict=True)
            if isinstance(value, str | bytes) and name in _text(value).split(",")
        )
    return sorted(set(using))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
