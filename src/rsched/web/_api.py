"""The HTTP API, ``/api/v1``: schedules, queues, dead letters, jobs, flows, workers, runs,
flow-control limits, exclusion calendars, stats, health and events.

Every route is one SDK call (or a few reads) through ``_sdk``; errors are rsched's own, turned
into JSON by ``_app``. Bodies that are a schedule, a job or a calendar are validated by rsched
itself (InvalidSchedule / InvalidJob / InvalidCalendar, 422), so the API and the SDK never
disagree on what is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsched import (
    DeadLetter,
    DeadLetterNotFound,
    InvalidArgument,
    InvalidCalendar,
    InvalidJob,
    Schedule,
    Stats,
)
from rsched import Limit as LimitSpec
from rsched._core.calendars import WEEKDAYS
from rsched._core.limits import coerce_limits, parse_rate
from rsched.web import _views as views
from rsched.web._errors import http_words
from rsched.web._listing import State, find
from rsched.web._sdk import Sdk

router = APIRouter(prefix="/api/v1", dependencies=[Depends(http_words)])


def sdk(request: Request) -> Sdk:
    """The app's SDK; for a write, one whose changes the audit trail records as the signed-in
    user's, from ``web`` (docs/audit.md)."""
    found: Sdk = request.app.state.sdk
    return found.for_request(request.scope)


SdkDep = Annotated[Sdk, Depends(sdk)]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
Cursor = Annotated[str | None, Query(description="the cursor of the previous page")]
Since = Annotated[
    str | None, Query(description='a duration back from now ("1h") or an aware ISO time')
]
AuditKind = Annotated[
    Literal["schedule", "calendar", "limit"] | None,
    Query(description="only the changes of schedules, of calendars or of limit overrides"),
]
LabelFilter = Annotated[
    list[str] | None, Query(description="k=v; repeat for several (all must match)")
]
_LIMIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "examples": ["customer:{customer_id}"]},
        "concurrency": {"type": ["integer", "null"], "minimum": 1},
        "rate": {"type": ["string", "null"], "examples": ["100/m"]},
    },
    "required": ["key"],
}
_SCHEDULE_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Schedule"}}},
    }
}


class SchedulePage(BaseModel):
    items: list[Schedule]
    cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class DeadLetterPage(BaseModel):
    items: list[DeadLetter]
    cursor: str | None


class JobRequest(BaseModel):
    """A one-off job to enqueue (``Client.enqueue``)."""

    model_config = ConfigDict(extra="forbid")

    task: str
    payload: dict[str, Any] = Field(default_factory=dict)
    queue: str = "default"
    delay_s: float = 0
    max_retries: int = 3
    timeout_s: float = 3600
    execution_id: str | None = None
    priority: Literal["high", "normal", "low"] = "normal"
    dedup_window_s: float | None = None
    limits: list[Any] = Field(
        default_factory=list,
        description="flow-control limits the job holds while it runs (docs/limits.md)",
        json_schema_extra={"items": _LIMIT_SCHEMA},
    )
    debounce_key: str | None = Field(
        default=None,
        description="collapse the requests with this key (on this queue) into one job, with the "
        "last one's payload and options; give debounce too",
    )
    debounce: float | str | None = Field(
        default=None,
        description="run that job this long after the last request of the burst: seconds, or "
        "text such as 500ms, 2s, 5m (at most 1d)",
    )
    start_deadline: float | str | None = Field(
        default=None,
        description="not started this long after it falls due (workers busy or down), the job "
        "ends expired without running: seconds, or text such as 30s, 10m (at most 366d)",
    )
    labels: dict[str, Any] | None = Field(
        default=None, description="short key=value tags to find the job by (docs/labels.md)"
    )


class BulkRequest(BaseModel):
    """What a bulk action acts on: ``ids``, or a filter (``labels``: an object or "k=v"
    texts, ``task``, ``queue``; all must match), never both; ``dry_run`` changes nothing."""

    model_config = ConfigDict(extra="forbid")
    ids: list[str] | None = None
    labels: dict[str, Any] | list[str] | None = None
    task: str | None = None
    queue: str | None = None
    dry_run: bool = False
    note: str | None = Field(default=None, description="pause: why, for operators")

    def targets(self) -> list[str] | None:
        """The ids given (None: select by the filter); raises InvalidArgument for ids and a
        filter together, or neither."""
        filtered = bool(self.labels) or self.task is not None or self.queue is not None
        if self.ids and filtered:
            raise InvalidArgument("ids", "give ids or a filter (labels, task, queue), not both")
        if not self.ids and not filtered:
            raise InvalidArgument("ids", "give ids, or a filter (labels, task, queue)")
        return list(dict.fromkeys(self.ids)) if self.ids else None

    def label_pairs(self) -> list[str] | None:
        if isinstance(self.labels, dict):
            return [f"{k}={v}" for k, v in self.labels.items()]
        return self.labels


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(default=None, description="why, for operators (≤ 500 characters)")


class BackfillRequest(BaseModel):
    """A past range; naive times are read in the schedule's zone."""

    model_config = ConfigDict(extra="forbid")
    start: datetime
    end: datetime


class RollbackRequest(BaseModel):
    """The generation whose kept spec to write back."""

    model_config = ConfigDict(extra="forbid")
    generation: int


class Selection(BaseModel):
    """Which dead letters: ``entry_ids``, every one of ``task``, or ``all``."""

    model_config = ConfigDict(extra="forbid")
    entry_ids: list[str] | None = None
    task: str | None = None
    all: bool = False

    def ids(self) -> list[str] | None:
        if self.entry_ids and self.all:
            raise InvalidArgument("all", "give entry_ids or all, not both")
        if not self.entry_ids and not self.all and not self.task:
            raise InvalidArgument("entry_ids", "give entry_ids, task or all: true")
        return self.entry_ids or None


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; raises InvalidArgument naming ``body``."""
    raw = await request.body()
    try:
        data = orjson.loads(raw or b"null")
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument("body", f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidArgument("body", "give a JSON object")
    return data


# --- schedules --------------------------------------------------------------------------------


@router.get("/schedules", response_model=SchedulePage, tags=["schedules"])
async def list_schedules(
    sdk: SdkDep,
    limit: Limit = 50,
    cursor: Cursor = None,
    queue: str | None = None,
    task: str | None = None,
    state: State | None = None,
    q: Annotated[str, Query(description="id substring; an exact id is the whole first page")] = "",
    label: LabelFilter = None,
) -> SchedulePage:
    """Schedules in next-run order (paused and completed last), filtered and paged; with
    ``label`` (``?label=team=billing``, repeatable: all must match) in id order."""
    found = await find(
        sdk, q=q, queue=queue, task=task, state=state, labels=label, limit=limit, cursor=cursor
    )
    return SchedulePage(items=found.page.items, cursor=found.page.cursor)


# --- many at once (docs/labels.md) ----------------------------------------------------------


@router.get("/select/schedules", tags=["bulk"])
async def select_schedules(
    sdk: SdkDep,
    label: LabelFilter = None,
    task: str | None = None,
    queue: str | None = None,
) -> dict[str, Any]:
    """The ids of the schedules carrying every ``label`` and of ``task`` and ``queue`` when
    given: ``{"ids": [...], "count": n}``; 422 for a bad filter or none."""
    ids = await sdk.select(label, task, queue)
    return {"ids": ids, "count": len(ids)}


@router.get("/select/jobs", tags=["bulk"])
async def select_jobs(
    sdk: SdkDep, label: LabelFilter = None, task: str | None = None, queue: str | None = None
) -> dict[str, Any]:
    """The execution ids of the waiting, delayed and running jobs with every ``label`` and of
    ``task`` and ``queue`` when given."""
    ids = await sdk.select_jobs(label, task, queue)
    return {"ids": ids, "count": len(ids)}


@router.post("/bulk/schedules/{action}", tags=["bulk"])
async def bulk_schedules(
    sdk: SdkDep, action: Literal["pause", "resume", "remove", "trigger"], body: BulkRequest
) -> dict[str, Any]:
    """Pause, resume, remove or trigger the schedules of ``ids`` or of a filter (``labels``,
    ``task``, ``queue``; not both): ``{"selected": [...], "dry_run", "outcomes": {id:
    outcome}, "summary"}``; with ``dry_run`` only what would be touched."""
    ids = body.targets()
    if ids is None:
        ids = await sdk.select(body.label_pairs(), body.task, body.queue)
    return await _act(sdk, action, ids, body)


@router.post("/bulk/jobs/cancel", tags=["bulk"])
async def bulk_cancel(sdk: SdkDep, body: BulkRequest) -> dict[str, Any]:
    """Cancel the jobs of ``ids`` (execution ids) or of a filter (``labels``, ``task``,
    ``queue``), as the schedules' bulk actions answer."""
    ids = body.targets()
    if ids is None:
        ids = await sdk.select_jobs(body.label_pairs(), body.task, body.queue)
    return await _act(sdk, "cancel", ids, body)


async def _act(sdk: Sdk, action: str, ids: list[str], body: BulkRequest) -> dict[str, Any]:
    answer: dict[str, Any] = {"selected": ids, "dry_run": body.dry_run}
    if body.dry_run or not ids:
        return answer
    result = await sdk.act_many(action, ids, body.note)
    return {**answer, "outcomes": result.outcomes, "summary": result.summary()}


@router.post(
    "/schedules",
    response_model=Schedule,
    status_code=201,
    openapi_extra=_SCHEDULE_BODY,
    tags=["schedules"],
)
async def add_schedule(sdk: SdkDep, request: Request) -> Schedule:
    """Create a schedule (409 when the id exists)."""
    return await sdk.add(await json_object(request))


@router.get("/schedules/{schedule_id}", response_model=Schedule, tags=["schedules"])
async def get_schedule(sdk: SdkDep, schedule_id: str) -> Schedule:
    return await sdk.get(schedule_id)


@router.put(
    "/schedules/{schedule_id}",
    response_model=Schedule,
    openapi_extra=_SCHEDULE_BODY,
    tags=["schedules"],
)
async def put_schedule(sdk: SdkDep, schedule_id: str, request: Request) -> Schedule:
    """Create a schedule or replace its whole spec (its runs and history are kept)."""
    spec = await json_object(request)
    if spec.setdefault("id", schedule_id) != schedule_id:
        raise InvalidArgument("id", f"the body's id {spec['id']!r} is not the path's")
    return await sdk.upsert(spec)


@router.patch(
    "/schedules/{schedule_id}",
    response_model=Schedule,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "description": "Schedule fields to change"}
                }
            },
        }
    },
    tags=["schedules"],
)
async def patch_schedule(sdk: SdkDep, schedule_id: str, request: Request) -> Schedule:
    """Change some fields; the merged spec is validated again."""
    return await sdk.update(schedule_id, await json_object(request))


@router.delete("/schedules/{schedule_id}", status_code=204, tags=["schedules"])
async def delete_schedule(sdk: SdkDep, schedule_id: str) -> Response:
    await sdk.remove(schedule_id)
    return Response(status_code=204)


@router.post("/schedules/{schedule_id}/pause", response_model=Schedule, tags=["schedules"])
async def pause_schedule(
    sdk: SdkDep, schedule_id: str, body: Annotated[PauseRequest | None, Body()] = None
) -> Schedule:
    await sdk.pause(schedule_id, body.note if body else None)
    return await sdk.get(schedule_id)


@router.post("/schedules/{schedule_id}/resume", response_model=Schedule, tags=["schedules"])
async def resume_schedule(sdk: SdkDep, schedule_id: str) -> Schedule:
    await sdk.resume(schedule_id)
    return await sdk.get(schedule_id)


@router.post("/schedules/{schedule_id}/trigger", tags=["schedules"])
async def trigger_schedule(sdk: SdkDep, schedule_id: str) -> dict[str, str]:
    """One extra occurrence now, through the overlap policy: status fired, skipped or buffered."""
    fired = await sdk.trigger(schedule_id)
    return {"execution_id": fired.execution_id, "status": fired.status}


@router.post("/schedules/{schedule_id}/backfill", tags=["schedules"])
async def backfill_schedule(sdk: SdkDep, schedule_id: str, body: BackfillRequest) -> dict[str, Any]:
    """Fire each occurrence of a past range at most once (at most 1000 per call)."""
    result = await sdk.backfill(schedule_id, body.start, body.end)
    counts = {
        k: result.count(k) for k in ("fired", "skipped", "buffered", "debounced", "already_fired")
    }
    return {"counts": counts, "outcomes": result.outcomes}


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """What every audit route takes besides its target: who, since when, the page."""

    actor: str | None
    since: str | None
    limit: int
    cursor: str | None

    async def page(self, sdk: Sdk, kind: str | None, id: str | None) -> dict[str, Any]:
        """A page of the audit trail as JSON: of one kind of target and one id when given."""
        found = await sdk.audit(
            id, kind=kind, actor=self.actor, since=self.since, limit=self.limit, cursor=self.cursor
        )
        return {"items": [r.as_dict() for r in found.items], "cursor": found.cursor}


def audit_query(
    actor: str | None = None, since: Since = None, limit: Limit = 50, cursor: Cursor = None
) -> AuditQuery:
    return AuditQuery(actor, since, limit, cursor)


AuditDep = Annotated[AuditQuery, Depends(audit_query)]


@router.get("/schedules/{schedule_id}/audit", tags=["schedules"])
async def schedule_audit(sdk: SdkDep, schedule_id: str, query: AuditDep) -> dict[str, Any]:
    """The schedule's changes, newest first: who, when, from where, the fields changed."""
    return await query.page(sdk, "schedule", schedule_id)


@router.get("/schedules/{schedule_id}/specs", tags=["schedules"])
async def schedule_specs(sdk: SdkDep, schedule_id: str) -> dict[str, Any]:
    """The schedule's kept specs, newest first (empty when it was never changed)."""
    return {"items": [v.as_dict() for v in await sdk.spec_history(schedule_id)]}


@router.post("/schedules/{schedule_id}/rollback", response_model=Schedule, tags=["schedules"])
async def rollback_schedule(sdk: SdkDep, schedule_id: str, body: RollbackRequest) -> Schedule:
    """Write a kept spec back as a new generation (400 naming ``generation`` when that
    generation is not kept; nothing written)."""
    return await sdk.rollback(schedule_id, body.generation)


@router.get("/schedules/{schedule_id}/executions", tags=["schedules"])
async def schedule_executions(
    sdk: SdkDep,
    schedule_id: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    status: Annotated[str | None, Query(description="queued, completed, failed, dead, …")] = None,
) -> dict[str, list[dict[str, Any]]]:
    """Recent runs from the schedule's history, newest first, each with its events."""
    runs = views.runs(await sdk.history(schedule_id))
    if status is not None:
        runs = [r for r in runs if r.status.split(" ")[0] == status]
    return {"items": [r.as_dict() for r in runs[:limit]]}


@router.get("/schedules/{schedule_id}/next", tags=["schedules"])
async def schedule_next(
    sdk: SdkDep,
    schedule_id: str,
    n: Annotated[int, Query(ge=1, le=1000)] = 10,
) -> dict[str, list[dict[str, str | None]]]:
    """The next ``n`` occurrences (``Client.upcoming``): ``at`` the occurrence's time in the
    schedule's zone (its jobs' scheduled_at) and ``utc`` the same in UTC, ``fires_at`` when it
    fires (``at`` plus its ``jitter``'s delay), ``excluded_by`` the exclusion calendar that keeps
    it from running (null: it runs), ``utc_offset`` and ``transition`` where the zone's UTC
    offset changes. The excluded occurrences count toward ``n``: a schedule whose calendars
    exclude every occurrence still answers at once."""
    s = await sdk.get(schedule_id)
    found = await sdk.upcoming(schedule_id, n)
    marked = views.next_runs(found, s.timezone, "UTC", sdk.now_ms())
    items: list[dict[str, str | None]] = [
        {
            "at": o.at.isoformat(),
            "fires_at": o.fires_at.isoformat(),
            "excluded_by": o.excluded_by,
            "utc": m.at.iso,
            "utc_offset": m.utc_offset,
            "transition": m.transition,
        }
        for o, m in zip(found, marked, strict=True)
    ]
    return {"items": items}


# --- queues, dead letters, jobs -----------------------------------------------------------------


@router.get("/queues", tags=["queues"])
async def list_queues(sdk: SdkDep) -> dict[str, list[dict[str, Any]]]:
    """Every queue: length, pending, delayed, dead, consumers, oldest pending age (ms)."""
    stats = await sdk.stats()
    return {"items": [{"name": name, **q} for name, q in sorted(stats.queues.items())]}


@router.get("/queues/{queue}/depth", tags=["queues"])
async def queue_depth(
    sdk: SdkDep,
    queue: str,
    minutes: Annotated[int, Query(ge=1, le=60, description="minutes back, 1..60")] = 60,
) -> dict[str, list[dict[str, Any]]]:
    """The queue's ``waiting`` and ``delayed`` jobs per minute, oldest first, as the leading
    schedulers sampled them (null: no sample that minute)."""
    return {"items": [p.as_dict() for p in await sdk.queue_depth(queue, minutes)]}


@router.get(
    "/queues/{queue}/dead-letters",
    response_model=DeadLetterPage,
    response_model_exclude={"items": {"__all__": {"job_fields"}}},
    tags=["queues"],
)
async def list_dead_letters(
    sdk: SdkDep, queue: str, limit: Limit = 50, cursor: Cursor = None, task: str | None = None
) -> DeadLetterPage:
    """The queue's dead letters, newest first, with error and traceback excerpt."""
    page = await sdk.dead_letters(queue, limit=limit, cursor=cursor, task=task)
    return DeadLetterPage(items=page.items, cursor=page.cursor)


async def _existing(sdk: Sdk, queue: str, body: Selection) -> tuple[list[str] | None, list[str]]:
    """The selection's ids of dead letters that exist in the queue (None: not by ids), and
    those that do not; raises DeadLetterNotFound naming every id when none does."""
    ids = body.ids()
    if ids is None:
        return None, []
    found, missing = [], []
    for entry_id in dict.fromkeys(ids):
        try:
            await sdk.dead_letter(queue, entry_id)
        except DeadLetterNotFound:
            missing.append(entry_id)
        else:
            found.append(entry_id)
    if not found:
        raise DeadLetterNotFound(queue, *missing)
    return found, missing


@router.post("/queues/{queue}/dead-letters/requeue", tags=["queues"])
async def requeue_dead_letters(sdk: SdkDep, queue: str, body: Selection) -> dict[str, Any]:
    """Put dead letters back on their queue as attempt 1: ``{"requeued": n, "not_found":
    [entry ids given that do not exist]}``; 404 DeadLetterNotFound when none of them does."""
    ids, missing = await _existing(sdk, queue, body)
    return {"requeued": await sdk.requeue(queue, ids, task=body.task), "not_found": missing}


@router.post("/queues/{queue}/dead-letters/purge", tags=["queues"])
async def purge_dead_letters(sdk: SdkDep, queue: str, body: Selection) -> dict[str, Any]:
    """Delete dead letters for good: ``{"purged": n, "not_found": [...]}`` as requeue."""
    ids, missing = await _existing(sdk, queue, body)
    return {"purged": await sdk.purge(queue, ids, task=body.task), "not_found": missing}


@router.post(
    "/jobs",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": JobRequest.model_json_schema()}},
        }
    },
    tags=["jobs"],
)
async def enqueue_job(sdk: SdkDep, request: Request, response: Response) -> dict[str, Any]:
    """Enqueue a one-off job outside any schedule: 201 with its execution id, or 200 when a job
    with the given ``execution_id`` already exists (queued, delayed, running or finished inside
    the dedup window: nothing was added). With ``debounce_key`` and ``debounce``: 201 when the
    request opened a debounce window (``created`` true), 200 when it joined the open one, whose
    job now has this request's payload and runs ``debounce`` after it (docs/debounce.md)."""
    try:
        job = JobRequest.model_validate(await json_object(request))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        raise InvalidJob(field, err["msg"]) from None
    done = await sdk.enqueue(
        job.task,
        job.payload,
        queue=job.queue,
        delay=job.delay_s,
        max_retries=job.max_retries,
        timeout_s=job.timeout_s,
        execution_id=job.execution_id,
        priority=job.priority,
        dedup_window_s=job.dedup_window_s,
        limits=_job_limits(job.limits),
        debounce_key=job.debounce_key,
        debounce=job.debounce,
        start_deadline=job.start_deadline,
        labels=job.labels,
    )
    if not done.created:
        response.status_code = 200
    return {"execution_id": done.execution_id, "created": done.created}


def _job_limits(given: list[Any]) -> tuple[LimitSpec, ...]:
    """A job's ``limits`` as rsched.Limit; raises InvalidJob naming the limit and its field."""
    try:
        return coerce_limits(given)
    except InvalidArgument as exc:
        raise InvalidJob(exc.field, exc.message) from None


@router.get("/jobs", tags=["jobs"])
async def list_jobs(
    sdk: SdkDep,
    queue: str | None = None,
    state: Annotated[str | None, Query(description="queued, running or delayed")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="page size")] = 100,
    cursor: Cursor = None,
    label: LabelFilter = None,
) -> dict[str, Any]:
    """Jobs that run, wait or are delayed, queue by queue: running first, then queued (high,
    normal, low), then delayed by due time (``Client.jobs``); with ``label`` (repeatable: all
    must match) only those enqueued with them."""
    page = await sdk.list_jobs(queue=queue, state=state, limit=limit, cursor=cursor, labels=label)
    return {"items": [j.as_dict() for j in page.items], "cursor": page.cursor}


@router.get("/jobs/{execution_id}", tags=["jobs"])
async def get_job(sdk: SdkDep, execution_id: str) -> dict[str, Any]:
    """One job by execution id: where it waits or runs, or how it ended, with its schedule's
    history of this execution and its kept result (404 JobNotFound)."""
    return (await sdk.job(execution_id)).as_dict()


@router.get("/jobs/{execution_id}/logs", tags=["jobs"])
async def get_job_logs(
    sdk: SdkDep,
    execution_id: str,
    attempt: Annotated[
        int | None, Query(ge=1, description="only this attempt (default: every attempt)")
    ] = None,
) -> dict[str, Any]:
    """A job's log, oldest first (``Client.job_logs``): ``{"execution_id", "items": [{"attempt",
    "at", "level", "message"}, …]}``, what its handler wrote with ``job.log`` and the records
    of the logging module made inside it; each attempt keeps its newest 200 lines (64 KiB), as
    long as the job's result. An empty list when there are none."""
    records = await sdk.job_logs(execution_id, attempt)
    return {"execution_id": execution_id, "items": [r.as_dict() for r in records]}


@router.post("/jobs/{execution_id}/cancel", tags=["jobs"])
async def cancel_job(sdk: SdkDep, execution_id: str) -> dict[str, str]:
    """Cancel a queued, delayed or running job (a running one is stopped by its worker):
    ``{"execution_id", "cancelled": <the state it was in>}``; 404 when it neither waits nor
    runs."""
    return {"execution_id": execution_id, "cancelled": await sdk.cancel(execution_id)}


@router.get("/flows", tags=["flows"])
async def list_flows(
    sdk: SdkDep,
    state: Annotated[
        Literal["running", "completed", "failed", "cancelled"] | None,
        Query(description="only flows in this state"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="page size")] = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Flows, newest first, without their steps (``Client.flows``): ``{"items": [{"flow_id",
    "state", "created_at", "ended_at", "schedule_id", "step_count", "done_count",
    "failed_step", "labels", …}], "cursor"}``; GET /flows/{flow_id} reads one whole."""
    page = await sdk.flows(state=state, limit=limit, cursor=cursor)
    return {"items": [f.as_dict() for f in page.items], "cursor": page.cursor}


@router.get("/flows/{flow_id}", tags=["flows"])
async def get_flow(sdk: SdkDep, flow_id: str) -> dict[str, Any]:
    """One flow with its steps (``Client.flow``): each step's ``number``, ``task``,
    ``execution_id`` (GET /jobs/{execution_id}), ``state``, ``queue``, ``parents``,
    ``children``, ``on_failure``, ``attempts``, ``result`` and ``barrier``; 404 FlowNotFound."""
    return (await sdk.flow(flow_id)).as_dict()


@router.post("/flows/{flow_id}/cancel", tags=["flows"])
async def cancel_flow(sdk: SdkDep, flow_id: str) -> dict[str, Any]:
    """Cancel a running flow: its steps not started never run, its running ones are stopped by
    their workers. ``{"flow_id", "cancelled": true}``, or false when it had ended (nothing
    done); 404 FlowNotFound."""
    return {"flow_id": flow_id, "cancelled": await sdk.cancel_flow(flow_id)}


@router.get("/workers", tags=["deployment"])
async def list_workers(sdk: SdkDep) -> dict[str, Any]:
    """The live workers from the worker registry: id, host, pid, queues, tasks, concurrency,
    running and the jobs they run, started_at, last_seen (``Client.workers``)."""
    return {"items": await sdk.workers() or []}


@router.get("/runs", tags=["jobs"])
async def list_runs(
    sdk: SdkDep,
    status: Annotated[
        str | None, Query(description="fired, started, completed, failed, dead, skipped, …")
    ] = None,
    schedule: Annotated[str | None, Query(description="a schedule id")] = None,
    task: str | None = None,
    since: Since = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="page size")] = 50,
    cursor: Cursor = None,
    label: LabelFilter = None,
) -> dict[str, Any]:
    """Runs across every schedule and enqueued job, newest first (``Client.runs``): the runs
    in progress first, then the runs log's records of runs that ended or were skipped; with
    ``label`` (repeatable) those of jobs enqueued with every one."""
    page = await sdk.runs(
        status=status,
        schedule_id=schedule,
        task=task,
        since=since,
        limit=limit,
        cursor=cursor,
        labels=label,
    )
    return {"items": [r.as_dict() for r in page.items], "cursor": page.cursor}


@router.get("/audit", tags=["deployment"])
async def list_audit(
    sdk: SdkDep,
    query: AuditDep,
    id: Annotated[
        str | None, Query(description="a schedule id, calendar name or limit key")
    ] = None,
    kind: AuditKind = None,
) -> dict[str, Any]:
    """The audit trail, newest first (``Client.audit``): every change of a schedule, calendar
    or limit override, who made it, when and from where; ``kind`` keeps those of one kind of
    target (a schedule and a calendar may share a name)."""
    return await query.page(sdk, kind, id)


# --- flow-control limits ----------------------------------------------------------------------


@router.get("/limits", tags=["limits"])
async def list_limits(
    sdk: SdkDep,
    match: Annotated[str | None, Query(description="a glob on the keys, e.g. customer:*")] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The limit keys in use (held by a job, waited on, or started in their rate window) and
    the operators' overrides (``Client.limits``): per key the numbers in force, ``holders``,
    ``waiting`` jobs and ``starts`` in its current rate window, ``override`` (the operator's
    numbers, ``{"c": concurrency, "r": [count, ms]}``, or null). A page may hold fewer items
    than ``limit`` and still have a cursor."""
    page = await sdk.limits(match=match or None, limit=limit, cursor=cursor)
    return {"items": [r.to_dict() for r in page.items], "cursor": page.cursor}


@router.get("/limits/{key:path}/audit", tags=["limits"])
async def limit_audit(sdk: SdkDep, key: str, query: AuditDep) -> dict[str, Any]:
    """The changes of a limit key's (or a ``*`` pattern's) override, newest first: who, when,
    from where, its numbers before and after (``limit_set``, ``limit_clear``)."""
    return await query.page(sdk, "limit", key)


@router.get("/limits/{key:path}/waiting", tags=["limits"])
async def limit_waiting(sdk: SdkDep, key: str, limit: Limit = 100) -> dict[str, Any]:
    """The jobs waiting on a limit key (``Client.waiting``), in the order they will start (by
    level, then arrival): the first ``limit``, each a job as ``GET /jobs/{execution_id}`` shows
    it (``state`` waiting, ``limit`` the key). No cursor: past the first 1,000, the key's
    ``waiting`` count in ``GET /limits`` says how many more. 400 naming ``key`` or ``limit``."""
    return {"items": [j.as_dict() for j in await sdk.waiting(key, limit)]}


_OVERRIDE_FIELDS = ("concurrency", "rate")


@router.put(
    "/limits/{key:path}",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "concurrency": {"type": ["integer", "null"], "minimum": 0},
                            "rate": {"type": ["string", "null"], "examples": ["100/m"]},
                        },
                    }
                }
            },
        }
    },
    tags=["limits"],
)
async def set_limit(sdk: SdkDep, key: str, request: Request) -> dict[str, Any]:
    """Override a limit key's numbers (or those of every key a pattern with ``*`` matches), over
    what its jobs declare: ``{"concurrency": N, "rate": "100/m"}``, one or both (a number left
    out stays as declared; concurrency 0 pauses the key). Answers ``{"key", "concurrency",
    "rate", "waiting_keys": how many keys with waiting jobs it concerns}``."""
    body = await json_object(request)
    for name in body:
        if name not in _OVERRIDE_FIELDS:
            raise InvalidArgument(name, "unknown field; give concurrency, rate or both")
    concurrency, rate = body.get("concurrency"), body.get("rate")
    if concurrency is None and rate is None:
        raise InvalidArgument(
            "concurrency", 'give "concurrency" (0 pauses the key), "rate" ("100/m") or both'
        )
    woke = await sdk.set_limit(key, concurrency, rate)
    shown = None if rate is None else str(parse_rate(rate))
    return {"key": key, "concurrency": concurrency, "rate": shown, "waiting_keys": woke}


@router.delete("/limits/{key:path}", tags=["limits"])
async def clear_limit(sdk: SdkDep, key: str) -> dict[str, Any]:
    """Remove an override set with PUT: the declared numbers hold again. Answers ``{"key",
    "cleared": true, "waiting_keys": n}``."""
    return {"key": key, "cleared": True, "waiting_keys": await sdk.clear_limit(key)}


# --- exclusion calendars ----------------------------------------------------------------------

_CALENDAR_FIELDS = ("dates", "ranges", "weekdays", "description")
_CALENDAR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "dates": {
            "type": "array",
            "items": {"type": "string", "format": "date"},
            "examples": [["2026-12-25", "2026-12-26"]],
        },
        "ranges": {
            "type": "array",
            "items": {
                "oneOf": [
                    {"type": "string", "examples": ["2026-12-24..2026-12-26"]},
                    {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
                ]
            },
        },
        "weekdays": {
            "type": "array",
            # No enum: the full names ("saturday") and any case are taken too.
            "items": {"type": "string", "examples": list(WEEKDAYS)},
        },
        "description": {"type": ["string", "null"]},
    },
}


@router.get("/calendars", tags=["calendars"])
async def list_calendars(sdk: SdkDep) -> dict[str, list[dict[str, Any]]]:
    """Every exclusion calendar, by name (``Client.calendars``): ``name``, ``dates``, ``ranges``
    (``[start, end]`` pairs), ``weekdays``, ``description``, ``updated_at``."""
    return {"items": [c.as_dict() for c in await sdk.calendars()]}


@router.get("/calendars/{name}", tags=["calendars"])
async def get_calendar(sdk: SdkDep, name: str) -> dict[str, Any]:
    """One exclusion calendar (404 CalendarNotFound)."""
    return (await sdk.calendar(name)).as_dict()


@router.get("/calendars/{name}/audit", tags=["calendars"])
async def calendar_audit(sdk: SdkDep, name: str, query: AuditDep) -> dict[str, Any]:
    """The calendar's changes, newest first: who, when, from where, each key of its document
    before and after (``calendar_set``, ``calendar_remove``; kept after a removal)."""
    return await query.page(sdk, "calendar", name)


@router.put(
    "/calendars/{name}",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _CALENDAR_SCHEMA}},
        }
    },
    tags=["calendars"],
)
async def put_calendar(sdk: SdkDep, name: str, request: Request) -> dict[str, Any]:
    """Create or replace an exclusion calendar: ``{"dates": ["2026-12-25"], "ranges":
    ["2026-12-24..2026-12-26"] or [["2026-12-24T14:00", "2026-12-27"]], "weekdays": ["sat",
    "sun"], "description": "..."}``, each optional (a date covers its whole day in each
    schedule's zone; a range's datetime bound is read in each schedule's zone unless it has an
    offset). What ``GET`` answers may be sent back as it is (``name`` must be the path's,
    ``updated_at`` is set by rsched). Answers the calendar as stored; 422 InvalidCalendar
    naming each bad field, nothing written."""
    body = await json_object(request)
    if body.get("name", name) != name:
        raise InvalidArgument("name", f"the body's name {body['name']!r} is not the path's")
    unknown = [key for key in body if key not in (*_CALENDAR_FIELDS, "name", "updated_at")]
    if unknown:
        raise InvalidCalendar(
            name,
            [
                (key, "unknown field; give dates, ranges, weekdays or description")
                for key in unknown
            ],
        )

    def given(key: str) -> Any:
        # A null list is an empty one, as the field left out; a wrong type is rsched's to name.
        value = body.get(key)
        return () if value is None else value

    calendar = await sdk.set_calendar(
        name,
        dates=given("dates"),
        ranges=given("ranges"),
        weekdays=given("weekdays"),
        description=body.get("description"),
    )
    return calendar.as_dict()


@router.delete("/calendars/{name}", status_code=204, tags=["calendars"])
async def delete_calendar(sdk: SdkDep, name: str) -> Response:
    """Remove an exclusion calendar: 204; 404 CalendarNotFound; 409 CalendarInUse while a
    schedule's ``exclude`` names it (the body's ``schedule_ids`` lists every such schedule:
    take the calendar out of them first)."""
    await sdk.remove_calendar(name)
    return Response(status_code=204)


# --- deployment -------------------------------------------------------------------------------


@router.get("/stats", response_model=Stats, tags=["deployment"])
async def stats(sdk: SdkDep) -> Stats:
    """Schedules by state, due backlog, oldest overdue, queues, dead letters, leader."""
    return await sdk.stats()


@router.get("/activity", tags=["deployment"])
async def activity(
    sdk: SdkDep,
    minutes: Annotated[int, Query(ge=1, le=60, description="minutes back, 1..60")] = 60,
    hours: Annotated[int, Query(ge=1, le=24, description="hours back, 1..24")] = 24,
) -> dict[str, Any]:
    """What happened per minute and per hour, oldest first, from the activity counters:
    ``fired``, ``completed``, ``failed``, ``dead``, ``skipped``, ``cancelled`` and the fire
    lag's ``lag_p50_ms`` / ``lag_p99_ms`` (upper bounds of ``lag_bounds_ms`` buckets; null
    without a fire, or beyond the last bound: ``lag_over_max``)."""
    return (await sdk.activity(minutes, hours)).as_dict()


_EVENT_ID = re.compile(r"^[0-9]{1,20}(-[0-9]{1,20})?$")
_HEALTH_EXAMPLE = {
    "ok": False,
    "checked_at": "2026-11-24T03:10:00+00:00",
    "problems": [{"check": "no_leader", "message": "no scheduler holds the lease"}],
    "schedules": [
        {
            "id": "nightly",
            "state": "late",
            "reason": "due 2m10s ago and not fired (misfire grace 1m)",
            "since": "2026-11-24T03:07:50+00:00",
        }
    ],
    "truncated": False,
    "leader": None,
    "due": 1,
    "oldest_overdue_ms": 130000,
}
_HEALTH_BODY = {"application/json": {"example": _HEALTH_EXAMPLE}}


@router.get(
    "/health",
    tags=["deployment"],
    responses={
        200: {"description": "every check passes", "content": _HEALTH_BODY},
        503: {"description": "a check failed (or Redis is unavailable: the error body)"},
    },
)
async def health(
    sdk: SdkDep,
    max_due: Annotated[int | None, Query(description="most schedules due at once")] = None,
    max_overdue_s: Annotated[
        str | None, Query(description='latest the oldest due one may be: seconds or "5m"')
    ] = None,
    dead_letter_window_s: Annotated[
        str | None, Query(description="fail while a dead letter is younger; 0: off")
    ] = None,
) -> Response:
    """``Client.health()``: the deployment checks (no_leader, due_backlog, overdue, no_worker,
    stalled, dead_letters, schedules) and the unhealthy schedules; 200 when every check
    passes, 503 with the same body when one fails, 503 RedisUnavailable when Redis cannot be
    reached. Limits default to the ``health.*`` settings."""
    limits: dict[str, Any] = {}
    if max_due is not None:
        limits["max_due"] = max_due
    if max_overdue_s is not None:
        limits["max_overdue_s"] = max_overdue_s
    if dead_letter_window_s is not None:
        limits["dead_letter_window_s"] = dead_letter_window_s
    found = await sdk.health(**limits)
    return JSONResponse(found.as_dict(), status_code=200 if found.ok else 503)


@router.get("/schedules/{schedule_id}/health", tags=["schedules"])
async def schedule_health(sdk: SdkDep, schedule_id: str) -> dict[str, Any]:
    """One schedule's health: state ok, late, stuck, failing, paused or completed, and why."""
    return (await sdk.schedule_health(schedule_id)).as_dict()


@router.get("/events", tags=["deployment"])
async def events(
    sdk: SdkDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="how many")] = 20,
    after: Annotated[str | None, Query(description="an event id: only newer events")] = None,
) -> dict[str, list[dict[str, Any]]]:
    """The events stream, newest first (schedule_late, schedule_failing, schedule_stuck,
    schedule_recovered, dead_letter, leader_changed): the newest ``limit``, or the first
    ``limit`` after the event id ``after``."""
    if after is not None and not _EVENT_ID.match(after):
        raise InvalidArgument("after", f"{after!r} is not an event id; pass an event's id")
    return {"items": [e.as_dict() for e in await sdk.events(limit, after=after)]}
