"""Redis access for flows (rsched._core.flows): creating one, reading and listing them,
cancelling one, and the keys a flow step's end declares.

A flow lives in one partition, its steps' jobs too, so that every join is one script: the
script that records a step's end (complete, dead, expire, cancel, flow_start) records it in the
flow's hash and releases what follows (lua/includes/flow_end.lua).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from rsched._core.codes import Code, check
from rsched._core.errors import FlowNotFound
from rsched._core.flows import (
    ENDED_CODES,
    STATE_CODES,
    STEPS_PER_CALL,
    FlowInfo,
    FlowPlan,
    FlowRun,
    FlowState,
    FlowStep,
    StepState,
    ms_time,
    read_step,
    step_id,
)
from rsched._core.job import Lane
from rsched._core.keys import GROUP
from rsched._core.log import get_logger
from rsched._core.rules import Priority, read_labels
from rsched._store.flow_keys import lanes_of, schedule_keys, step_keys, text
from rsched._store.jobs import Jobs

#: Flows a listing looks at for one page when it filters by state.
LIST_SCAN_MAX = 10_000
#: Steps whose results one read of a flow fetches (results of bigger flows: Client.job).
RESULTS_MAX = 1_000
#: Steps one repair of a stalled flow looks up or releases (the next sweep does more).
REPAIR_MAX = 100

log = get_logger("rsched.retention")


class Flows(Jobs):
    """The flows of one partition (a part of rsched._store.queues.QueueStore; its sweep looks
    for lost steps' jobs as Client.job does)."""

    #: How long an ended flow is kept (ms): the runs log's retention.
    flow_ttl_ms: int = 7 * 86_400_000
    history_limit: int

    async def create_flow(
        self,
        flow_id: str,
        flow: FlowPlan,
        *,
        labels: str = "",
        traceparent: str = "",
        schedule_id: str = "",
        lane: str = "",
    ) -> FlowRun:
        """Write ``flow`` under ``flow_id`` and start it (lua/flow_create.lua, a call per
        STEPS_PER_CALL steps); ``created`` is False when the id was taken (nothing written).
        A flow a schedule's occurrence starts names the schedule and ``lane``, the stream name
        of its starter job: the flow's end ends that run."""
        k = self.keys
        token = uuid.uuid4().hex
        steps = flow.steps
        roots = flow.roots
        meta = {
            "n": len(steps),
            "ttl": self.flow_ttl_ms,
            "queues": sorted({s.queue for s in steps if not s.barrier}),
            "labels": labels,
            "tp": traceparent,
            "queue": flow.queue,
            "sid": schedule_id,
            "lane": lane,
            "hcap": self.history_limit if schedule_id else "",
        }
        chunks = [steps[i : i + STEPS_PER_CALL] for i in range(0, len(steps), STEPS_PER_CALL)]
        released = 0
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            keys = [k.flow(flow_id), k.flows, k.queues]
            if last:
                lanes = dict.fromkeys((steps[r - 1].queue, steps[r - 1].priority) for r in roots)
                keys += [k.queue(q, p) for q, p in lanes]
            args: list[Any] = [
                flow_id,
                token,
                "1" if index == 0 else "0",
                ",".join(map(str, roots)) if last else "",
                orjson.dumps(meta).decode() if index == 0 else "",
            ]
            for s in chunk:
                args += [s.number, s.encode(flow.queue), len(s.parents)]
            res = await self.call("flow_create", keys, args)
            if int(res[0]) == Code.EXISTS:
                return FlowRun(flow_id, len(steps), len(roots), created=False)
            if int(res[0]) == Code.NOT_FOUND:
                raise FlowNotFound(flow_id)
            check(res, script="flow_create")
            released = int(res[1])
        return FlowRun(flow_id, len(steps), released)

    async def flow_fields(self, flow_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(self.keys.flow(flow_id))
        return {text(f): text(v) for f, v in raw.items()}

    async def read_flow(self, flow_id: str, *, results: bool = True) -> FlowInfo:
        """The flow with its steps; raises FlowNotFound."""
        fields = await self.flow_fields(flow_id)
        info = _info(flow_id, fields)
        if info is None:
            raise FlowNotFound(flow_id)
        n = _int(fields.get("n"))
        steps = []
        for number in range(1, n + 1):
            raw = fields.get(str(number))
            if raw is None:
                continue
            d = read_step(number, raw, fields.get("queue") or "default")
            code = fields.get(f"{number}.s")
            state: StepState = STATE_CODES.get(code, "waiting") if code else "waiting"
            steps.append(
                FlowStep(
                    number=number,
                    task=d["task"],
                    execution_id=step_id(flow_id, number),
                    state=state,
                    queue=d["queue"],
                    parents=d["parents"],
                    children=d["children"],
                    on_failure=d["on_failure"],
                    attempts=_int(fields.get(f"{number}.a")),
                    barrier=d["barrier"],
                    result=_json(fields.get(f"{number}.r")),
                )
            )
        if results:
            steps = await self._with_results(flow_id, steps)
        return dataclasses.replace(info, steps=tuple(steps))

    async def _with_results(self, flow_id: str, steps: list[FlowStep]) -> list[FlowStep]:
        """Each completed step's kept result (those of the first RESULTS_MAX)."""
        want = [s for s in steps if s.state == "completed" and not s.barrier][:RESULTS_MAX]
        if not want:
            return steps
        got = await self.redis.mget([self.keys.result(s.execution_id) for s in want])
        found = {s.number: _json(v) for s, v in zip(want, got, strict=True) if v is not None}
        return [
            dataclasses.replace(s, result=found[s.number])
            if s.number in found else s
            for s in steps
        ]  # fmt: skip

    async def list_flows(
        self, *, state: FlowState | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[tuple[float, FlowInfo]], bool]:
        """This partition's flows, newest first, without their steps, each with its score in
        the index (creation time in ms, flows of one ms told apart), below ``cursor`` (a
        score); and whether more may follow. A page looks at LIST_SCAN_MAX flows at most."""
        top = "+inf" if cursor is None else f"({cursor}"
        out: list[tuple[float, FlowInfo]] = []
        looked = 0
        while looked < LIST_SCAN_MAX:
            batch: list[Any] = await self.redis.zrevrangebyscore(
                self.keys.flows, top, "-inf", start=0, num=limit * 2, withscores=True
            )
            if not batch:
                return out, False
            async with self.redis.pipeline(transaction=False) as pipe:
                for member, _ in batch:
                    pipe.hmget(self.keys.flow(text(member)), *_LIST_FIELDS)
                rows = await pipe.execute()
            for (member, score), row in zip(batch, rows, strict=True):
                looked += 1
                top = f"({score!r}"
                info = _info(text(member), dict(zip(_LIST_FIELDS, map(_opt, row), strict=True)))
                if info is not None and (state is None or info.state == state):
                    out.append((float(score), info))
                    if len(out) == limit:
                        return out, True
        return out, True

    async def cancel_flow(self, flow_id: str) -> list[int] | None:
        """End the flow ``cancelled`` (lua/flow_cancel.lua): returns the steps released and not
        ended, whose jobs the caller cancels; None when it had ended. Raises FlowNotFound."""
        sid, lane = await self.redis.hmget(self.keys.flow(flow_id), "sid", "lane")
        keys = [self.keys.flow(flow_id), *schedule_keys(self.keys, text(sid), text(lane))]
        res = await self.call("flow_cancel", keys, [])
        code = int(res[0])
        if code == Code.NOT_FOUND:
            raise FlowNotFound(flow_id)
        if code == Code.FLOW_OVER:
            return None
        check(res, script="flow_cancel")
        return [int(n) for n in res[1:]]

    async def start_steps(
        self,
        queue: str,
        priority: Priority,
        items: Sequence[tuple[str, Mapping[str, str]]],
    ) -> list[Code]:
        """Flow steps' jobs about to run (entry id, fields) (lua/flow_start.lua): OK per item
        to run it, FLOW_OVER or NOT_PENDING not to."""
        keys = [self.keys.queue(queue, priority)]
        args: list[Any] = [GROUP]
        for entry_id, fields in items:
            keys += step_keys(self.keys, fields)
            args += [entry_id, fields["flow"], fields.get("step", "0"), fields.get("attempt", "1")]
        res = await self.call("flow_start", list(dict.fromkeys(keys)), args)
        return [Code(int(c)) for c in res]

    async def sweep_flows(
        self, queues: Sequence[str], now_ms: int, stall_ms: int, before_ms: int
    ) -> tuple[int, int]:
        """The leader's sweep of this partition's flows: index entries of flows gone (expired
        with the runs log's retention) or created before ``before_ms`` and ended are dropped;
        a running flow that did not change for ``stall_ms`` is repaired (lua/flow_sweep.lua):
        steps whose jobs are found nowhere end dead (``lost``), steps whose parents all ended
        are released. Returns (index entries dropped, flows repaired)."""
        dropped = repaired = 0
        cursor = 0
        while True:
            cursor, batch = await self.redis.zscan(self.keys.flows, cursor, count=500)
            ids = [text(member) for member, _ in batch]
            async with self.redis.pipeline(transaction=False) as pipe:
                for flow_id in ids:
                    pipe.hmget(self.keys.flow(flow_id), "state", "at", "created")
                rows = await pipe.execute()
            gone = []
            for flow_id, (state, at, created) in zip(ids, rows, strict=True):
                if state is None or (text(state) != "running" and _int(_opt(created)) < before_ms):
                    gone.append(flow_id)
                elif (
                    text(state) == "running"
                    and at is not None
                    and _int(text(at)) < now_ms - stall_ms
                ):
                    repaired += await self._repair(flow_id, text(at), queues)
            if gone:
                dropped += int(await self.redis.zrem(self.keys.flows, *gone))
            if cursor == 0:
                return dropped, repaired

    async def _repair(self, flow_id: str, at: str, queues: Sequence[str]) -> int:
        """Repair one stalled flow (see :meth:`sweep_flows`); 1 when something changed."""
        fields = await self.flow_fields(flow_id)
        queue = fields.get("queue") or "default"
        lost: list[int] = []
        release: list[int] = []
        lanes: list[Lane] = []
        for number in range(1, _int(fields.get("n")) + 1):
            raw = fields.get(str(number))
            if raw is None:
                continue
            code = fields.get(f"{number}.s")
            d = read_step(number, raw, queue)
            if code in ("q", "r") and len(lost) < REPAIR_MAX:
                if await self.find_job(step_id(flow_id, number), queues) is None:
                    lost.append(number)
                    lanes += lanes_of(d["lanes"])
            elif (
                code is None
                and len(release) < REPAIR_MAX
                and all(fields.get(f"{p}.s") in ENDED_CODES for p in d["parents"])
            ):
                release.append(number)
                lanes.append((d["queue"], d["level"]))
        if not lost and not release and _int(fields.get("left")) > 0:
            return 0
        k = self.keys
        keys = [
            k.flow(flow_id),
            k.queue(queue),
            *(k.queue(q, p) for q, p in dict.fromkeys(lanes)),
        ]
        keys += schedule_keys(k, fields.get("sid", ""), fields.get("lane", ""))
        args = [flow_id, at, ",".join(map(str, lost)), ",".join(map(str, release))]
        res = await self.call("flow_sweep", list(dict.fromkeys(keys)), args)
        if int(res[0]) == Code.CONFLICT:
            return 0
        check(res, script="flow_sweep")
        if int(res[1]):
            log.warning("flow.repaired", flow_id=flow_id, lost=len(lost), released=len(release))
        return 1 if int(res[1]) else 0


_LIST_FIELDS = ("state", "created", "ended", "n", "left", "sid", "failed", "labels")


def _info(flow_id: str, fields: Mapping[str, str | None]) -> FlowInfo | None:
    state = fields.get("state")
    created = ms_time(fields.get("created"))
    if state not in ("running", "completed", "failed", "cancelled") or created is None:
        return None
    n = _int(fields.get("n"))
    failed = fields.get("failed")
    return FlowInfo(
        flow_id=flow_id,
        state=state,  # type: ignore[arg-type]
        created_at=created,
        ended_at=ms_time(fields.get("ended")) if fields.get("ended") else None,
        schedule_id=fields.get("sid") or None,
        step_count=n,
        done_count=n - _int(fields.get("left")),
        failed_step=int(failed) if failed and failed.isdigit() else None,
        labels=read_labels(fields.get("labels")),
    )


def _opt(value: Any) -> str | None:
    return None if value is None else text(value)


def _int(text: str | None) -> int:
    try:
        return int(text) if text else 0
    except ValueError:
        return 0


def _json(text: Any) -> Any:
    if text is None:
        return None
    raw = text.encode() if isinstance(text, str) else text
    if raw[:1] == b"\0":  # a barrier's (its parents' results)
        raw = raw[1:]
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
