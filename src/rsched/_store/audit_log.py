"""The audit trail in Redis: reading it across its streams, and trimming it (docs/audit.md).

Each partition's changes are on its own stream ``{p}:audit`` (limit overrides on partition 0's),
the exclusion calendars' on the deployment's ``{prefix}:audit`` (the same stream with one
partition). A read walks every stream newest first (XREVRANGE), filters, and merges them by entry
id; it looks at most SCAN_MAX records per stream per call, so a rare filter answers with fewer
records than asked and a cursor to go on from: ``<entry id>`` with one stream, ``<entry
id>.<stream number>`` with several.
"""

from __future__ import annotations

import re

from redis.asyncio import Redis

from rsched._core.audit import AuditFilter, AuditRecord, audit_record
from rsched._core.keys import Keys
from rsched._core.page import Page
from rsched._core.partitions import partition_of
from rsched._store.runs_log import scan_newest

#: Records one read looks at per stream, at most.
SCAN_MAX = 10_000
_CURSOR = re.compile(r"^(\d{1,20})-(\d{1,20})(?:\.(\d{1,3}))?$")

#: A place in the merged order: (entry ms, entry sequence, stream number).
Position = tuple[int, int, int]


def audit_streams(keys: Keys, name: str | None = None) -> list[str]:
    """The deployment's audit streams: each partition's, then the calendars' when it is
    another key. With ``name`` only those its records can be on: its partition's if it is a
    schedule id, partition 0's if a limit key, the calendars' if a calendar's name."""
    every = keys.every_partition()
    wanted = {0, partition_of(name, len(every))} if name is not None else set(range(len(every)))
    streams = [k.audit for n, k in enumerate(every) if n in wanted]
    if keys.deployment_audit not in streams:
        streams.append(keys.deployment_audit)
    return streams


def check_cursor(cursor: str) -> None:
    """Raises ValueError unless ``cursor`` looks like one a page of the audit trail returned."""
    if not _CURSOR.match(cursor):
        raise ValueError(f"{cursor!r} is not a cursor; pass the cursor a previous page returned")


def _decode(cursor: str, count: int) -> Position:
    found = _CURSOR.match(cursor)
    k = int(found.group(3)) if found and found.group(3) is not None else count - 1
    if found is None or k >= count:
        raise ValueError(f"{cursor!r} is not a cursor; pass the cursor a previous page returned")
    return int(found.group(1)), int(found.group(2)), k


def _encode(position: Position, count: int) -> str:
    ms, seq, k = position
    return f"{ms}-{seq}" if count == 1 else f"{ms}-{seq}.{k}"


def _position(entry_id: str, k: int) -> Position:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0), k


async def _scan(
    redis: Redis, stream: str, want: AuditFilter, *, limit: int, start: str, scan_max: int
) -> tuple[list[tuple[str, AuditRecord]], str | None]:
    """The records ``want`` keeps, newest first from ``start``, at most ``limit``, looking at
    most ``scan_max``; and the id of the last record looked at when more may follow."""
    low = "-" if want.since_ms is None else str(want.since_ms)
    return await scan_newest(
        redis, stream, audit_record, want.keeps, low=low, limit=limit, start=start,
        scan_max=scan_max,
    )  # fmt: skip


async def read_audit(
    redis: Redis,
    streams: list[str],
    want: AuditFilter,
    *,
    limit: int,
    cursor: str | None = None,
    scan_max: int = SCAN_MAX,
) -> Page[AuditRecord]:
    """One page of the audit trail across ``streams``, newest first. Raises ValueError for a bad
    cursor."""
    count = len(streams)
    at = None if cursor is None else _decode(cursor, count)
    parts: list[tuple[list[tuple[Position, AuditRecord]], Position | None]] = []
    for k, stream in enumerate(streams):
        if at is None:
            start = "+"
        else:
            ms, seq, last = at
            start = f"{ms}-{seq}" if k < last else f"({ms}-{seq}"
        found, stop = await _scan(redis, stream, want, limit=limit, start=start, scan_max=scan_max)
        items = [(_position(eid, k), record) for eid, record in found]
        parts.append((items, None if stop is None else _position(stop, k)))
    # Items older than where some stream stopped wait for the next page: that stream has not
    # looked there yet.
    stops = [stop for _, stop in parts if stop is not None]
    floor = max(stops) if stops else None
    merged = sorted(
        (item for items, _ in parts for item in items if floor is None or item[0] >= floor),
        key=lambda item: item[0],
        reverse=True,
    )
    if len(merged) > limit:
        return Page([r for _, r in merged[:limit]], _encode(merged[limit - 1][0], count))
    nxt = None if floor is None else _encode(floor, count)
    return Page([r for _, r in merged], nxt)


async def trim_audit(redis: Redis, stream: str, *, before_ms: int, max_entries: int) -> int:
    """Drop the records written before ``before_ms`` and those past about ``max_entries``;
    returns how many were dropped."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xtrim(stream, minid=str(before_ms), approximate=False)
        pipe.xtrim(stream, maxlen=max_entries, approximate=True)
        trimmed = await pipe.execute(raise_on_error=False)
    return sum(n for n in trimmed if isinstance(n, int))
