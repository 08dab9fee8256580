"""The built-in task of every worker that starts a schedule's flow (``Schedule(flow=...)``).

A schedule of a flow fires a job of task ``rsched.flow`` whose payload holds the flow; running
it writes and starts the flow under the occurrence's execution id (rsched._store.flows). Its
completion does not end the occurrence's run: the flow's end does (lua/includes/flow_end.lua),
so the schedule's overlap and misfire policies apply to the flow as a whole. A starter that
runs twice (its worker died after writing the flow) finds the flow written and starts nothing
twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rsched._core import tracing
from rsched._core.flows import from_doc, plan
from rsched._core.job import Job
from rsched._core.keys import stream_name
from rsched._store.queues import QueueStore


def flow_starter(stores: Sequence[QueueStore]) -> Callable[[Job], Coroutine[Any, Any, Any]]:
    """The handler of ``rsched.flow`` jobs for a worker of these partitions' stores."""

    async def start(job: Job) -> dict[str, Any]:
        # Checked when the schedule was written; a hand-edited one fails here (InvalidFlow),
        # and ends dead-lettered as any failing job, ending the occurrence's run.
        planned = plan(
            from_doc(job.payload.get("flow")), queue=job.queue, max_payload_bytes=math.inf
        )
        run = await stores[job.partition].create_flow(
            job.execution_id,
            planned,
            labels=job.fields.get("labels", ""),
            traceparent=job.fields.get(tracing.PARENT, ""),
            schedule_id=job.schedule_id or "",
            lane=stream_name(job.queue, job.priority),
        )
        return {"flow_id": run.flow_id, "steps": run.steps, "started": run.created}

    return start
