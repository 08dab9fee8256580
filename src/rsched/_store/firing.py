"""Redis access for the scheduler's tick: due entries, the fields a plan needs, fires, and the
release of what lost runs held back.

Only the leading scheduler calls these (each fire and release checks its lease in the script);
the schedules themselves are written and read through rsched._store.schedules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from redis.asyncio import Redis

from rsched._core import tracing
from rsched._core.codes import Code, check
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.rules import PRIORITIES, Priority
from rsched._core.settings import DEFAULT_HISTORY_LIMIT, Settings
from rsched._redis import scripts
from rsched._redis.durability import Durability
from rsched._store.runs_log import label_index_keys
from rsched._store.schedules import state_fields, unpack_fields

# The codes fire.lua returns alone, about the whole call; never the code of an item.
WHOLE_CALL_CODES = frozenset({Code.NOT_LEADER, Code.BAD_ARGS, Code.BAD_INDEX})


class FiringStore(scripts.ScriptCaller):
    """The scheduler's script calls and reads for one partition's schedules."""

    def __init__(
        self, redis: Redis, keys: Keys, *, history_limit: int = DEFAULT_HISTORY_LIMIT
    ) -> None:
        super().__init__(redis)
        self.keys = keys
        self.history_limit = history_limit
        # fire.lua names every item's keys where a slot can migrate (lua/fire.lua): on a single
        # server the names would cost a herd's fires more than noise.
        self.declare_keys = self._cluster
        # What fire calls took inside the server, in total (see fire): the scheduler sizes its
        # batches by it.
        self.fire_server_us = 0
        self.fire_timed_items = 0
        # Whether the scheduler traces its fires (rsched._core.tracing.decide, at its start).
        self.traced = False

    @classmethod
    def from_settings(
        cls, redis: Redis, settings: Settings, keys: Keys | None = None
    ) -> FiringStore:
        """The store for one deployment's limits and one partition's keys (the only partition
        when ``keys`` is not given)."""
        store = cls(redis, keys or Keys(settings.prefix), history_limit=settings.history_limit)
        store.durability = Durability.from_settings(settings)
        store.traced = tracing.decide(settings.tracing)
        return store

    async def due(
        self, limit: int, *, reader: bool = False
    ) -> tuple[int, list[tuple[str, int]], int | None]:
        """(Redis now ms, due (id, score) pairs oldest first, next future score or None).
        ``reader``: called for a reader (health), as EVALSHA_RO, which a read-only user may
        run (ScriptCaller.call_read)."""
        call = self.call_read if reader else self.call
        now, runs, nxt = await call("due", [self.keys.schedules], [limit])
        pairs: list[tuple[str, int]] = []
        for run in runs:
            text, *ids = run.split(" ")
            try:
                score = int(text)
            except ValueError:  # a score rsched did not write: fractional, or -inf
                value = float(text)
                if not math.isfinite(value):
                    continue
                score = math.floor(value)
            pairs += ((sid, score) for sid in ids)
        return int(now), pairs, int(float(nxt)) if nxt else None

    async def upcoming(
        self, after_ms: int, until_ms: int, limit: int, offset: int = 0
    ) -> list[str]:
        """Ids due in (after_ms, until_ms], earliest first: ``limit`` of them from ``offset``.

        By rank: ZRANGEBYSCORE's LIMIT steps over ``offset`` entries one at a time, which deep
        into a herd's 100k entries held the server for tens of ms a page."""
        key = self.keys.schedules
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcount(key, "-inf", after_ms)
            pipe.zcount(key, "-inf", until_ms)
            before, through = await pipe.execute()
        first, last = int(before) + offset, min(int(through), int(before) + offset + limit) - 1
        if last < first:
            return []
        return [str(sid) for sid in await self.redis.zrange(key, first, last)]

    async def plan_fields(
        self, schedule_ids: Sequence[str], names: Sequence[str]
    ) -> list[dict[str, str] | None]:
        """The named fields of each hash ({} when it does not exist, None when the key holds
        another type), as one JSON document for the batch: far cheaper to parse than HGETALL
        or a reply element per schedule."""
        if not schedule_ids:
            return []
        raw = await self.call_packed(
            "plan_fields", [self.keys.schedule(sid) for sid in schedule_ids], list(names)
        )
        return [f if f is None else state_fields(f) for f in unpack_fields(raw, names)]

    async def fire(
        self, lease: str, items: Sequence[FireItem], parents: Sequence[str] | None = None
    ) -> list[int] | None:
        """Fire a batch of items; returns a code per item, None when not leader. ``parents``
        (a traced fire): the W3C traceparent each item's job carries ('' for none).

        Adds the µs each call took inside the server (by its clock) and its items to
        ``fire_server_us`` and ``fire_timed_items``; a server whose TIME stands still inside a
        script (Valkey) reports no time, and the call counts in neither."""
        k = self.keys
        keys = [k.leader, k.schedules, k.backlogs, k.runs, k.activity]
        args = [
            lease, str(self.history_limit), k.cancel,
            k.schedule(""), k.history(""), k.pending(""), k.queue(""), k.delayed_queue(""),
        ]  # fmt: skip
        # Each distinct spec once, and a header only where it differs from the item before:
        # a batch's items mostly share their times and spec.
        positions: dict[FireSpec, int] = {}
        groups: list[tuple[str, list[str]]] = []
        header, spec, position = "", None, 0
        group: list[str] = []
        for item in items:
            if item.spec is not spec:  # mostly the same (shared) instance as the last
                spec = item.spec
                position = positions.setdefault(spec, len(positions) + 1)
            item_header = item.header(position)
            if item_header != header:
                header, group = item_header, []
                groups.append((header, group))
            group += (item.schedule_id, item.version)
        if parents is not None:  # a third arg per item: regroup (traced fires only)
            flat = iter(parents)
            groups = [
                (h, [a for pair in zip(g[::2], g[1::2], flat, strict=False) for a in pair])
                for h, g in groups
            ]
        args.append(str(len(positions)) if parents is None else f"{len(positions)} traced")
        args.extend(spec.arg() for spec in positions)
        per_item = 2 if parents is None else 3
        for header, group in groups:
            args.append(f"{len(group) // per_item} {header}")
            args.extend(group)
        if self.declare_keys:
            # Every key declared, so that a migration of the slot holds the call back whole.
            keys += (k.queue(spec.queue, spec.priority) for spec in positions)
            keys += (k.delayed_queue(spec.queue) for spec in positions if spec.debounce_ms)
            for item in items:
                sid = item.schedule_id
                keys += (k.schedule(sid), k.history(sid), k.pending(sid))
        # Where a labelled plan's skipped occurrences are indexed (on a single server too; none
        # without labels).
        keys += label_index_keys(k, *(spec.labels for spec in positions))
        reply, _, took = str(await self.call_packed("fire", keys, args)).partition(";")
        codes = [int(c) for c in reply.split(",")] if reply else []
        # Per-item codes are never NOT_LEADER, BAD_ARGS or BAD_INDEX: a lone one of those is
        # about the whole call (and comes without a time).
        if len(codes) == 1 and codes[0] in WHOLE_CALL_CODES:
            check(codes[0], script="fire")  # raises unless NOT_LEADER
            return None
        if took and took != "0":
            self.fire_server_us += int(took)
            self.fire_timed_items += len(codes)
        return codes

    async def release_lost(self, lease: str, limit: int = 100) -> int | None:
        """Release the next pending occurrence of each schedule (at most ``limit``) whose
        unfinished run's marker expired (lua/release_lost.lua); returns how many were released, None
        when not leader (0, unchecked, when none is due).

        The due ids and each one's queue and priority are read first, so that the script
        declares every key it touches (its stream included); it checks again what it relies on.
        """
        k = self.keys
        now = await self.time_ms()
        ids = [
            str(sid)
            for sid in await self.redis.zrange(
                k.backlogs, "-inf", now, byscore=True, offset=0, num=limit
            )
        ]
        if not ids:
            return 0
        async with self.redis.pipeline(transaction=False) as pipe:
            for sid in ids:
                pipe.hmget(k.schedule(sid), ["queue", "priority"])
            specs = await pipe.execute(raise_on_error=False)
        keys = [k.leader, k.backlogs]
        for sid, spec in zip(ids, specs, strict=True):
            queue, priority = spec if isinstance(spec, list) else (None, None)
            level: Priority = priority if priority in PRIORITIES else "normal"
            stream = k.queue(str(queue or "default"), level)
            keys += (k.schedule(sid), k.history(sid), k.pending(sid), stream)
        res = int(await self.call("release_lost", keys, [lease, self.history_limit, *ids]))
        if res == Code.NOT_LEADER:
            return None
        if res < 0:
            check(res, script="release_lost")
        return res
