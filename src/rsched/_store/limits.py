"""Redis access for flow-control limits (docs/limits.md): the worker's acquire, resume, renew
and release calls, and the operator's reads and overrides.

Every limit's state lives in partition 0 (``Keys.limits``); a job holding limits runs from
partition 0's streams, so one script sees both. The class is a part of QueueStore
(rsched._store.queues).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from rsched._core.audit import current_author
from rsched._core.codes import Code, check
from rsched._core.keys import GROUP
from rsched._core.limits import JobLimit, LimitInfo, Rate, check_key
from rsched._core.page import Page
from rsched._core.rules import Priority
from rsched._redis import scripts

#: How long partition 0 remembers that a job was forwarded to it (ms): longer than any worker
#: takes to acknowledge the entry it forwarded, or to have it reclaimed and forwarded again.
FORWARD_MARKER_MS = 3_600_000
#: One job for ``acquire``: (entry id, execution id, waiting order or '', its limits).
Acquire = tuple[str, str, str, Sequence[JobLimit]]


class Limits(scripts.ScriptCaller):
    """The limits' script calls and reads (partition 0's keys, whatever the store's partition)."""

    #: The audit trail's cap (MAXLEN ~) for limit_set.lua's records (QueueStore sets it).
    audit_cap = 100_000

    async def acquire(
        self, stream: str, items: Sequence[Acquire], hold_ms: int
    ) -> list[tuple[Code, str]]:
        """Jobs read from ``stream`` take their limits or wait aside: per item (OK, '') run it,
        (LIMITED, key) it waits on key, (NOT_PENDING, '') do not run it."""
        doc = [[1, entry_id, exec_id, order, [h.wire() for h in held]]
               for entry_id, exec_id, order, held in items]  # fmt: skip
        res = await self.call(
            "limit_acquire", [*self.keys.limits, stream], [GROUP, hold_ms, orjson.dumps(doc)]
        )
        if isinstance(res, list):
            check(int(res[0]), script="limit_acquire")
        out = [(Code.OK, "")] * len(items)
        for index, code, key in orjson.loads(res):
            out[int(index) - 1] = (Code(int(code)), str(key))
        return out

    async def resume(
        self, queues: Sequence[str], hold_ms: int, most: int = 500
    ) -> tuple[int, int | None]:
        """Put the jobs waiting on ready keys back on the streams of ``queues`` (partition 0),
        holding their keys: (moved, ms until the next key is ready or None)."""
        streams = [s for q in queues for s in self.keys.for_partition(0).streams(q)]
        res = await self.call("limit_resume", [*self.keys.limits, *streams], [hold_ms, most])
        if int(res[0]) < 0:
            check(int(res[0]), script="limit_resume")
        wait = int(res[1])
        return int(res[0]), (wait if wait >= 0 else None)

    async def forward(
        self,
        source: Limits,
        queue: str,
        level: Priority,
        jobs: Sequence[tuple[str, str, int, dict[str, str]]],
    ) -> None:
        """Write jobs read from ``source`` (another partition's store) to this deployment's
        partition 0 stream of their queue and level, then acknowledge them there: jobs (entry
        id, execution id, attempt, fields)."""
        k = self.keys.for_partition(0)
        keys = [
            k.queue(queue, level),
            *(k.forwarded(exec_id, attempt) for _, exec_id, attempt, _ in jobs),
        ]
        bodies = [orjson.dumps([v for pair in fields.items() for v in pair]) for *_, fields in jobs]
        res = await self.call("forward", keys, [FORWARD_MARKER_MS, *bodies])
        if isinstance(res, list):
            check(int(res[0]), script="forward", queue=queue)
        await source.call(
            "forwarded", [source.keys.queue(queue, level)], [GROUP, *(j[0] for j in jobs)]
        )

    async def renew(self, holds: Sequence[tuple[str, Sequence[str]]], hold_ms: int) -> int:
        """Keep the holds of running jobs ((execution id, keys)); returns how many had lapsed."""
        members = [f"{key}\0{exec_id}" for exec_id, keys in holds for key in keys]
        if not members:
            return 0
        res = await self.call("limit_renew", self.keys.limits, [hold_ms, *members])
        if isinstance(res, list):
            check(int(res[0]), script="limit_renew")
        return int(res)

    async def release(self, holds: Sequence[tuple[str, Sequence[str]]]) -> int:
        """Let jobs that will not run go of their holds ((execution id, keys))."""
        if not holds:
            return 0
        res = await self.call(
            "limit_free", self.keys.limits, [orjson.dumps([list(h) for h in holds])]
        )
        if isinstance(res, list):
            check(int(res[0]), script="limit_free")
        return int(res)

    async def set_limit(self, key: str, override: dict[str, Any] | None) -> int:
        """Set (``override``) or clear (None) an operator's numbers for a key or a pattern
        ('*'); the keys it concerns that have waiting jobs become ready. Returns how many."""
        pattern = "*" in key
        check_key(key, pattern=pattern)
        body = "" if override is None else orjson.dumps(override).decode()
        audit = current_author().arg(None, self.audit_cap, 0)
        res = await self.call(
            "limit_set",
            [*self.keys.limits, self.keys.for_partition(0).audit],
            [key, body, audit],
        )
        if isinstance(res, list):
            check(int(res[0]), script="limit_set")
        return int(res)

    async def limit_rows(
        self, cursor: str | None, count: int, match: str | None
    ) -> Page[LimitInfo]:
        """A page of the active limit keys (held, waiting or started in their window) and of the
        operator's overrides: the numbers in force, holders, waiting jobs, starts."""
        res = await self.call_read(
            "limits_read", self.keys.limits, [cursor or "0", count, match or "", ""]
        )
        nxt, rows = orjson.loads(res)
        items = [_limit_info(r) for r in (rows if isinstance(rows, list) else [])]
        return Page(items, None if str(nxt) == "0" else str(nxt))

    async def limit_row(self, key: str) -> LimitInfo:
        """One limit key as limit_rows reads it, in use or not (one read, no scan)."""
        res = await self.call_read("limits_read", self.keys.limits, ["0", 1, "", key])
        _, (row,) = orjson.loads(res)
        return _limit_info(row)

    async def limit_counts(self) -> dict[str, tuple[int, int]]:
        """Per declared template: (holders, waiting jobs) of its keys (the metrics' series)."""
        raw = await self.redis.hgetall(self.keys.limits[10])
        out: dict[str, list[int]] = {}
        for name, value in raw.items():
            kind, _, template = str(name).partition(":")
            if kind in ("h", "w"):
                out.setdefault(template, [0, 0])[kind == "w"] = max(0, int(value))
        return {t: (h, w) for t, (h, w) in out.items()}

    async def waiting_job(self, execution_id: str) -> dict[str, Any] | None:
        """A job waiting on a limit: its record (k: the key, s: its stream, f: its fields, t:
        since when, ms), or None."""
        raw = await self.redis.hget(self.keys.limits[5], execution_id)
        if raw is None:
            return None
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return rec if isinstance(rec, dict) else None

    async def waiting_on(self, key: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """The first ``limit`` jobs waiting on a limit key, in the order they will start:
        (execution id, record as waiting_job reads it)."""
        lk = self.keys.limits
        members = await self.redis.zrangebylex(lk[4], f"[{key}\0", f"({key}\1", 0, limit)
        ids = [str(m).rsplit("\0", 1)[-1] for m in members]
        if not ids:
            return []
        out = []
        for exec_id, raw in zip(ids, await self.redis.hmget(lk[5], ids), strict=True):
            try:
                rec = orjson.loads(raw) if raw is not None else None
            except orjson.JSONDecodeError:
                rec = None
            if isinstance(rec, dict):
                out.append((exec_id, rec))
        return out

    async def cancel_limited(self, execution_id: str) -> bool:
        """Drop a job that waits on a limit (it never runs); False when it does not wait."""
        res = await self.call("limit_cancel", self.keys.limits, [execution_id])
        if isinstance(res, list):
            check(int(res[0]), script="limit_cancel")
        return int(res) == Code.OK


def _limit_info(r: list[Any]) -> LimitInfo:
    """A row of lua/limits_read.lua."""
    return LimitInfo(
        key=str(r[0]),
        template=str(r[1]),
        concurrency=r[2] if isinstance(r[2], int) else None,
        rate=Rate(r[3], r[4] / 1000) if r[3] and r[4] else None,
        holders=int(r[5]),
        waiting=int(r[6]),
        starts=int(r[7]),
        override=r[8] if isinstance(r[8], dict) else None,
    )
