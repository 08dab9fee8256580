"""The keys the end of a flow step's job declares, and what a failed step hands on.

The scripts that record a step's end (complete, dead, expire, cancel, flow_start, flow_sweep)
find a flow's keys by name and write only those the caller declared (on Redis Cluster a key
must be declared): these are the names the callers declare, from the job's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from rsched._core.flows import read_step
from rsched._core.job import Lane
from rsched._core.keys import Keys


def lanes_of(flow_next: str) -> list[Lane]:
    """The lanes (queue, level) of a job's ``flow_next`` field: where its end may release jobs."""
    out: list[Lane] = []
    for name in flow_next.split(","):
        queue, _, level = name.partition("#")
        if queue:
            out.append((queue, level if level in ("high", "low") else "normal"))  # type: ignore[arg-type]
    return out


def step_keys(keys: Keys, fields: Mapping[str, str]) -> list[str]:
    """The keys the end of a flow step's job declares (its flow's hash, the streams of the steps
    it may release, and for a flow a schedule started, the keys its end writes: the schedule's
    history, hash and pending set, its starter's stream); none for a job of no flow."""
    flow_id = fields.get("flow")
    if not flow_id:
        return []
    out = [keys.flow(flow_id)]
    out += [keys.queue(q, p) for q, p in lanes_of(fields.get("flow_next", ""))]
    return out + schedule_keys(keys, fields.get("flow_sid", ""), fields.get("flow_lane", ""))


def schedule_keys(keys: Keys, schedule_id: str, lane: str) -> list[str]:
    """The keys the end of a flow a schedule started writes (flow_end.lua, flow_done)."""
    if not schedule_id:
        return []
    [(queue, level)] = lanes_of(lane) or [("default", "normal")]
    return [
        keys.history(schedule_id),
        keys.schedule(schedule_id),
        keys.pending(schedule_id),
        keys.queue(queue, level),
    ]


async def declared_step_keys(redis: Any, keys: Keys, flow_id: str, step: int) -> list[str]:
    """:func:`step_keys` of a flow step known by number (its lanes read from its flow)."""
    raw, sid, lane, queue = await redis.hmget(keys.flow(flow_id), str(step), "sid", "lane", "queue")
    lanes = read_step(step, raw, text(queue) or "default")["lanes"] if raw is not None else ""
    fields = {"flow": flow_id, "flow_next": lanes, "flow_sid": text(sid)}
    return step_keys(keys, {**fields, "flow_lane": text(lane)})


def error_record(error_type: str, message: str) -> str:
    """A failed step's place in its children's ``parent_results`` (on_failure="continue")."""
    return orjson.dumps({"error": error_type, "message": message[:2000]}).decode()


def text(value: Any) -> str:
    """A reply's value as text ('' for none): the stores read flows with either client."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
