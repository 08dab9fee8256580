"""The events stream ``{p}:events``: state changes an operator or an alert wants to hear of.

Kinds (the ``kind`` field of every entry):
- ``schedule_late``, ``schedule_failing``, ``schedule_stuck``: a schedule turned unhealthy,
  with ``schedule_id`` and ``reason``; ``schedule_recovered``: it is healthy again (``was``
  names the state it left). Written by the leading scheduler's health watch.
- ``dead_letter``: a job was dead-lettered (``queue``, ``entry_id``, ``execution_id``,
  ``task``, ``schedule_id``, ``reason``). Written by the worker after the dead-letter script.
- ``schedule_paused``: a schedule paused itself after ``failures`` runs in a row ended
  dead-lettered (its ``pause_after_failures``), with ``schedule_id`` and ``error`` (the last
  run's). Written by the worker after the script that recorded that run.
- ``leader_changed``: a scheduler acquired the lease (``owner``, ``token``).

Each entry's fields are flat strings; ``at`` is the stream id's time (Redis time). The stream
is capped with ``MAXLEN ~`` (setting ``health.events_max_len``), so it never grows unbounded.
Writing an event is best effort: it never fails the operation it reports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._redis.scripts import entry_id

log = get_logger("rsched.events")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_MAX_LEN = 10_000
_Entries = list[tuple[str, dict[str, str]]]
KINDS = (
    "schedule_late",
    "schedule_failing",
    "schedule_stuck",
    "schedule_recovered",
    "dead_letter",
    "schedule_paused",
    "leader_changed",
)


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """One entry of the events stream (see :meth:`rsched.Client.events`).

    ``id`` is the stream entry id (pass it as ``after`` to read on from there), ``kind`` one of
    schedule_late, schedule_failing, schedule_stuck, schedule_recovered, dead_letter,
    schedule_paused, leader_changed; ``at`` when it was recorded (Redis time, aware UTC);
    ``schedule_id`` the schedule concerned, if any; ``fields`` every stored field but ``kind``
    and ``schedule_id``.
    """

    id: str
    kind: str
    at: datetime
    schedule_id: str | None = None
    fields: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``at`` as ISO 8601, the fields inline."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "at": self.at.isoformat()}
        if self.schedule_id:
            out["schedule_id"] = self.schedule_id
        return {**self.fields, **out}

    @classmethod
    def from_entry(cls, entry_id: str, raw: Mapping[str, str]) -> HealthEvent:
        fields = {str(k): str(v) for k, v in raw.items()}
        kind = fields.pop("kind", "")
        sid = fields.pop("schedule_id", "") or None
        ms = entry_id.split("-")[0]
        at = _EPOCH + timedelta(milliseconds=int(ms) if ms.isdigit() else 0)
        return cls(id=entry_id, kind=kind, at=at, schedule_id=sid, fields=fields)


class EventLog:
    """Writes and reads the events stream of one prefix."""

    def __init__(self, redis: Redis, keys: Keys, *, max_len: int = DEFAULT_MAX_LEN) -> None:
        self.redis = redis
        self.keys = keys
        self.max_len = max_len

    async def publish(self, kind: str, **fields: object) -> str | None:
        """Append one event; returns its id, or None when Redis refused (logged, not raised:
        the change it reports has happened either way)."""
        flat: dict[Any, Any] = {"kind": kind}
        flat.update({k: str(v) for k, v in fields.items() if v is not None and v != ""})
        try:
            eid = await self.redis.xadd(
                self.keys.events,
                flat,
                id=await entry_id(self.redis),
                maxlen=self.max_len,
                approximate=True,
            )
        except (RedisError, OSError) as exc:
            log.warning("event.not_recorded", kind=kind, error=str(exc))
            return None
        return str(eid)

    async def read(self, *, after: str | None = None, limit: int = 100) -> list[HealthEvent]:
        """Up to ``limit`` events after the id ``after`` (oldest first); the newest ``limit``
        when ``after`` is None."""
        if after is None:
            raw = cast(_Entries, await self.redis.xrevrange(self.keys.events, count=limit))
            return [HealthEvent.from_entry(str(i), f) for i, f in reversed(raw)]
        raw = cast(
            _Entries, await self.redis.xrange(self.keys.events, min=f"({after}", count=limit)
        )
        return [HealthEvent.from_entry(str(i), f) for i, f in raw]

    async def wait(self, after: str, *, block_ms: int, limit: int = 100) -> list[HealthEvent]:
        """Events after ``after`` (``$``: from now on), waiting up to ``block_ms`` for one."""
        res: Any = await self.redis.xread({self.keys.events: after}, count=limit, block=block_ms)
        if not res:
            return []
        if isinstance(res, dict):  # RESP3
            value = next(iter(res.values()))
            entries: Sequence[Any] = value[0] if value and isinstance(value[0], list) else value
        else:
            entries = res[0][1]
        return [HealthEvent.from_entry(str(i), f) for i, f in entries]

    async def last_id(self) -> str:
        """The newest event's id, ``0-0`` when there is none."""
        with contextlib.suppress(RedisError):
            newest = await self.redis.xrevrange(self.keys.events, count=1)
            if newest:
                return str(newest[0][0])
        return "0-0"
