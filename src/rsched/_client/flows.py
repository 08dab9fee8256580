"""Running, reading, listing and cancelling flows (:meth:`Client.run_flow` and its siblings).

A flow lives in one partition: that of its id (a step's execution id, ``<flow id>~<n>``, is
placed by it: rsched._core.partitions.job_partition). A flow whose steps hold limits lives in
partition 0, where every limit is (docs/limits.md).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import uuid
from collections.abc import Mapping

from rsched._client import job_lookup
from rsched._core.errors import InvalidFlow, JobNotFound
from rsched._core.flows import FLOW_ID_MAX, FlowInfo, FlowPlan, FlowRun, FlowState, step_id
from rsched._core.page import Page
from rsched._core.partitions import job_partition
from rsched._core.rules import check_labels, check_name, labels_text
from rsched._store.partitions import Partitions, gather
from rsched._store.queues import QueueStore

_STATES = ("running", "completed", "failed", "cancelled")


def flow_id_for(flow: FlowPlan, parts: Partitions, given: str | None) -> str:
    """The flow's id: ``given`` (checked) or a new random one; in partition 0 when a step holds
    limits. Raises InvalidFlow naming ``flow_id``."""
    limited = any('"limits"' in s.opts for s in flow.steps)
    if given is not None:
        try:
            check_name(given, "flow id")
        except ValueError as exc:
            raise InvalidFlow("flow_id", str(exc)) from None
        if len(given) > FLOW_ID_MAX:
            raise InvalidFlow("flow_id", f"at most {FLOW_ID_MAX} characters, got {len(given)}")
        if limited and job_partition(given, parts.count) != 0:
            raise InvalidFlow(
                "flow_id",
                f"a step holds limits, and limits live in partition 0 of the {parts.count}: "
                "let rsched choose the flow's id",
            )
        return given
    while True:
        flow_id = f"flow-{uuid.uuid4().hex}"
        if not limited or job_partition(flow_id, parts.count) == 0:
            return flow_id


def store_of(parts: Partitions, flow_id: str) -> QueueStore:
    return parts.queues[job_partition(flow_id, parts.count)]


async def run(
    parts: Partitions,
    flow: FlowPlan,
    *,
    flow_id: str | None,
    labels: Mapping[str, object] | list[str] | None,
    traceparent: str = "",
) -> FlowRun:
    """Write and start the flow; raises InvalidFlow naming ``flow_id`` or ``labels``."""
    fid = flow_id_for(flow, parts, flow_id)
    try:
        text = labels_text(check_labels(labels)) if labels else ""
    except ValueError as exc:
        raise InvalidFlow("labels", str(exc)) from None
    return await store_of(parts, fid).create_flow(fid, flow, labels=text, traceparent=traceparent)


async def listing(
    parts: Partitions, *, state: FlowState | None, limit: int, cursor: str | None
) -> Page[FlowInfo]:
    """The flows of every partition, newest first (merged by creation time)."""
    if state is not None and state not in _STATES:
        raise InvalidFlow("state", f"give one of {', '.join(_STATES)}, not {state!r}")
    if cursor is not None:
        try:
            float(cursor)
        except ValueError:
            raise InvalidFlow("cursor", "give the cursor of the page before, as returned") from None
    pages = await gather(
        [
            functools.partial(q.list_flows, state=state, limit=limit, cursor=cursor)
            for q in parts.queues
        ]
    )
    merged = list(heapq.merge(*(items for items, _ in pages), key=lambda f: -f[0]))[:limit]
    more = len(merged) == limit and any(more for _, more in pages)
    return Page([info for _, info in merged], cursor=repr(merged[-1][0]) if more else None)


async def cancel(parts: Partitions, registry: QueueStore, flow_id: str) -> bool:
    """End the flow ``cancelled``; its steps released and not ended are cancelled as
    :meth:`Client.cancel` does. False when it had ended already. Raises FlowNotFound."""
    store = store_of(parts, flow_id)
    live = await store.cancel_flow(flow_id)
    if live is None:
        return False
    for number in live:
        # One that ended meanwhile (JobNotFound) had its end recorded in the flow.
        with contextlib.suppress(JobNotFound):
            await job_lookup.cancel(store, registry, step_id(flow_id, number))
    return True
