"""The dashboard: HTML pages, the fragments they poll, and the forms of their actions.

Each page has one live region that htmx reloads from ``/_live/...`` every few seconds (one
request per open page; ``static/rsched.js`` skips a reload while the tab is hidden or the
viewer is using a form inside the region). Actions are plain form posts answered with a
redirect back (post/redirect/get) and a one-time message; each carries the CSRF token.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import anyio
import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context

from rsched import (
    AuditRecord,
    Health,
    HistoryEvent,
    InvalidArgument,
    InvalidFlow,
    RschedError,
    Schedule,
    ScheduleNotFound,
)
from rsched._core import humanize as fmt
from rsched._core.errors import CsrfError
from rsched._core.rules import DST_FOLDS, DST_GAPS, RUN_STATUSES
from rsched._core.schedule import STATE_FIELDS
from rsched.web import _flow_graph as flow_graph
from rsched.web import _views as views
from rsched.web._errors import error_body, http_words
from rsched.web._listing import SCAN_BUDGET, State, find
from rsched.web._sdk import Sdk
from rsched.web._security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    SESSION_COOKIE,
    Auth,
    cookie_header,
    csrf_ok,
    new_token,
)

router = APIRouter(include_in_schema=False, dependencies=[Depends(http_words)])
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
TZ_COOKIE = "rsched_tz"
FLASH_COOKIE = "rsched_flash"
#: Events of the events stream the overview reads, newest first (repeats in a row are folded).
RECENT_EVENTS = 200
#: Groups of events the overview shows.
EVENT_GROUPS = 20
#: Event kinds the overview's filter offers.
EVENT_KINDS = (
    "dead_letter", "schedule_failing", "schedule_late", "schedule_stuck", "schedule_recovered",
    "schedule_paused", "leader_changed",
)  # fmt: skip
#: Limit keys the Limits page reads per page (about: a page of a hash scan).
LIMITS_PAGE = 200
#: Jobs a limit key's page lists of those waiting on it, the first to start first.
WAITING_SHOWN = 100
#: Coming occurrences a schedule's page previews, those its calendars exclude included.
NEXT_SHOWN = 10
#: Runs a schedule's page draws, at most: its run chart's places (views.run_chart). The page
#: lists those its history keeps (``history_limit``, 15 by default).
RUNS_CHARTED = 50
#: Records of the runs log a schedule's page reads for the runs its history no longer keeps,
#: at most: a run retried has a record per attempt, so twice the runs the chart draws.
RUNS_LOGGED = 2 * RUNS_CHARTED
_STATES: tuple[State, ...] = ("active", "paused", "completed")
#: The states a flow can be in (the Flows page's filter).
FLOW_STATES = ("running", "completed", "failed", "cancelled")
#: Flows the Flows page lists per page.
FLOWS_PAGE = 50
#: A schedule's page lists the flows it started among this many of the newest flows.
SCHEDULE_FLOWS_LOOK = 100
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{32}$")


# --- rendering ----------------------------------------------------------------------------------


def prefix(request: Request) -> str:
    """Where this app is mounted (``--base-path``, or a parent app's mount point)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def sdk_of(request: Request) -> Sdk:
    """The app's SDK; for a write, one whose changes the audit trail records as the signed-in
    user's, from ``web`` (docs/audit.md)."""
    found: Sdk = request.app.state.sdk
    return found.for_request(request.scope)


def _zone(request: Request) -> tuple[str, bool]:
    """(viewer's zone, whether to remember it): ?tz= first, then the cookie, then UTC."""
    asked = views.valid_zone(request.query_params.get("tz"))
    if asked:
        return asked, asked != request.cookies.get(TZ_COOKIE)
    return views.valid_zone(request.cookies.get(TZ_COOKIE)) or "UTC", False


@pass_context
def _when(ctx: Context, value: datetime | int | str | None, own: str = "UTC") -> views.Moment:
    return views.moment(value, ctx["tz"], own, ctx["now"])


templates.env.globals.update(
    when=_when,
    duration=views.duration,
    retries=fmt.retries,
    concurrency_text=views.concurrency_text,
    override_text=views.override_text,
    limit_text=views.limit_text,
    limit_glob=views.limit_glob,
    excluded_by=views.excluded_by,
)
templates.env.filters["json"] = lambda v: orjson.dumps(v, option=orjson.OPT_INDENT_2).decode()


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page or fragment with what every template needs; sets the CSRF and zone cookies."""
    tz, remember = _zone(request)
    token = request.cookies.get(CSRF_COOKIE, "")
    if not _TOKEN.match(token):  # only a token this app made goes into a page
        token = new_token()
    flash = request.cookies.get(FLASH_COOKIE)
    base = prefix(request)
    context.update(
        prefix=base,
        tz=tz,
        now=Sdk.now_ms(),
        csrf=token,
        read_only=request.app.state.read_only,
        refresh_s=request.app.state.refresh_s,
        auth=request.app.state.auth.enabled,
        flash=orjson.loads(bytes.fromhex(flash)) if flash and _is_hex(flash) else None,
        path=request.url.path,
    )
    response = templates.TemplateResponse(request, name, context, status_code=status)
    path = base or "/"
    if token != request.cookies.get(CSRF_COOKIE):
        response.raw_headers.append((b"set-cookie", cookie_header(CSRF_COOKIE, token, path)))
    if remember:
        response.raw_headers.append((b"set-cookie", cookie_header(TZ_COOKIE, tz, path, 31536000)))
    if flash and not name.startswith("_"):
        response.raw_headers.append((b"set-cookie", cookie_header(FLASH_COOKIE, "", path, 0)))
    return response


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def back(request: Request, to: str, message: str, ok: bool = True) -> Response:
    """Redirect after a form post, with a message for the next page."""
    response = RedirectResponse(prefix(request) + to, status_code=303)
    flash = orjson.dumps({"ok": ok, "text": message}).hex()
    response.raw_headers.append(
        (b"set-cookie", cookie_header(FLASH_COOKIE, flash, prefix(request) or "/", 60))
    )
    return response


async def form(request: Request) -> dict[str, list[str]]:
    """The posted form, once its CSRF token is checked (raises CsrfError)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise InvalidArgument("content-type", "post the page's form (urlencoded)")
    fields = parse_qs((await request.body()).decode(), keep_blank_values=True)
    given = request.headers.get(CSRF_HEADER) or (fields.get(CSRF_FIELD) or [""])[0]
    if not csrf_ok(request.scope, given):
        raise CsrfError("the form's CSRF token is missing or stale: reload the page and retry")
    return fields


def first(fields: dict[str, list[str]], name: str) -> str:
    return (fields.get(name) or [""])[0].strip()


def _quoted(text: str) -> str:
    return quote(text, safe="")


# --- overview -----------------------------------------------------------------------------------


class _Cache:
    """Answers shared by every viewer for a few seconds, so ten open dashboards read Redis
    about as often as one."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._items: dict[str, tuple[float, Any]] = {}

    async def get(self, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        hit = self._items.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        value = await make()
        self._items[key] = (time.monotonic(), value)
        return value


async def histories(
    sdk: Sdk, ids: Sequence[str], limit: int | None = None
) -> dict[str, list[HistoryEvent]]:
    """The recent events of each schedule (a few reads at a time)."""
    out: dict[str, list[HistoryEvent]] = {}
    limiter = anyio.CapacityLimiter(8)

    async def one(sid: str) -> None:
        async with limiter:
            try:
                out[sid] = await sdk.history(sid, limit=limit)
            except ScheduleNotFound:
                out[sid] = []

    async with anyio.create_task_group() as tg:
        for sid in ids:
            tg.start_soon(one, sid)
    return out


async def _overview(sdk: Sdk) -> dict[str, Any]:
    return {
        "stats": await sdk.stats(),
        "activity": await sdk.activity(),
        "events": await sdk.events(RECENT_EVENTS),
        "workers": await sdk.workers(),
    }


async def cached_health(request: Request) -> Health:
    """``Client.health()``, once per refresh for every page and viewer that shows it."""
    cache: _Cache = request.app.state.cache
    found: Health = await cache.get("health", sdk_of(request).health)
    return found


async def overview_context(request: Request) -> dict[str, Any]:
    cache: _Cache = request.app.state.cache
    found: dict[str, Any] = await cache.get("overview", lambda: _overview(sdk_of(request)))
    tz, _ = _zone(request)
    kind = request.query_params.get("kind", "")
    kind = kind if kind in EVENT_KINDS else ""
    return {
        **found,
        "health": await cached_health(request),
        "charts": views.activity_charts(found["activity"], tz),
        "totals": views.activity_totals(found["activity"]),
        "event_groups": views.event_groups(found["events"], kind)[:EVENT_GROUPS],
        "kind": kind,
        "kinds": EVENT_KINDS,
    }


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> Response:
    return render(request, "overview.html", **await overview_context(request))


@router.get("/_live/overview", response_class=HTMLResponse)
async def overview_live(request: Request) -> Response:
    return render(request, "_overview.html", **await overview_context(request))


# --- schedules ----------------------------------------------------------------------------------


async def schedules_context(request: Request) -> dict[str, Any]:
    p = request.query_params
    q, queue, task = p.get("q", ""), p.get("queue") or None, p.get("task") or None
    state: State | None = next((st for st in _STATES if st == p.get("state")), None)
    limit = int(p["limit"]) if p.get("limit", "").isdigit() else 50
    # "team=billing, env=prod" (every one must match): one field the filter form and links keep.
    label = p.get("label", "").strip() or None
    labels = [pair.strip() for pair in label.split(",") if pair.strip()] if label else None
    sdk = sdk_of(request)
    found = await find(
        sdk,
        q=q,
        queue=queue,
        task=task,
        state=state,
        labels=labels,
        limit=limit,
        cursor=p.get("cursor") or None,
    )
    rows = found.page.items
    events = await histories(sdk, [s.id for s in rows], 12)
    unhealthy = {h.id: h for h in (await cached_health(request)).schedules}
    table = [
        (s, views.last_outcome(events.get(s.id, [])), views.health_of(s, unhealthy)) for s in rows
    ]
    query = {"q": q, "queue": queue, "task": task, "state": state, "label": label}
    return {
        "rows": table,
        "query": query,
        "states": _STATES,
        "cursor": found.page.cursor,
        "scanned": found.scanned,
        "budget": SCAN_BUDGET,
        "params": {k: v for k, v in {**query, "limit": p.get("limit")}.items() if v},
        "at_cursor": p.get("cursor") or "",
        # A search reads up to SCAN_BUDGET schedules: shown once, not polled.
        "poll": found.scanned == 0,
    }


@router.get("/schedules", response_class=HTMLResponse)
async def schedules(request: Request) -> Response:
    return render(request, "schedules.html", **await schedules_context(request))


@router.get("/_live/schedules", response_class=HTMLResponse)
async def schedules_live(request: Request) -> Response:
    return render(request, "_schedules.html", **await schedules_context(request))


async def schedule_context(request: Request, schedule_id: str) -> dict[str, Any]:
    sdk = sdk_of(request)
    s = await sdk.get(schedule_id)
    coming = await sdk.upcoming(schedule_id, NEXT_SHOWN)
    events = await sdk.history(schedule_id)
    tz, _ = _zone(request)
    found = views.runs(events)[:RUNS_CHARTED]
    charted = found + await older_runs(request, sdk, schedule_id, found)
    return {
        "s": s,
        "health": await sdk.schedule_health(schedule_id),
        "trigger": views.trigger_text(s),
        "dst": views.dst_text(s),
        "state": views.status_text(s),
        "next_runs": views.next_runs(coming, s.timezone, tz, sdk.now_ms()),
        "runs": found,
        "run_chart": views.run_chart(charted, tz, sdk.now_ms()),
        "charted": len(charted),
        "streak": views.failure_streak(found),
        "spec": _spec(s),
    }


class OlderRuns:
    """The runs older than its history keeps read for each schedule's page (older_runs), by
    schedule and oldest kept run: they change only when a new run pushes a kept one out, so
    the page's refreshes in between (every few seconds, for each viewer) do not read the log
    again. At most ``size`` schedules, the first read the first dropped."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: dict[tuple[str, str], list[views.Run]] = {}

    async def get(
        self, key: tuple[str, str], read: Callable[[], Awaitable[list[views.Run]]]
    ) -> list[views.Run]:
        found = self._items.get(key)
        if found is None:
            found = self._items[key] = await read()
            while len(self._items) > self.size:
                del self._items[next(iter(self._items))]
        return found


async def older_runs(
    request: Request, sdk: Sdk, schedule_id: str, kept: Sequence[views.Run]
) -> list[views.Run]:
    """The schedule's runs older than those its history keeps (``kept``, newest first), newest
    first, from the runs log, so that its run chart fills its RUNS_CHARTED places: none when
    the history has them all (it holds fewer runs than ``history_limit``) or the chart is full.

    The read is bounded: one page of at most RUNS_LOGGED records of the schedule, looking at
    most 10,000 records of the log, as any read of the log by schedule (``Client.runs``), so a
    schedule that runs rarely in a busy deployment draws those found among them. It starts at
    the oldest kept run's fire time (an entry id is a cursor of the log: its records are
    ordered by when they were written), skipping the newer records of every schedule: the
    runs drawn are those that ended before it fired. Once per new run (OlderRuns)."""
    oldest = kept[-1] if kept else None
    if (
        oldest is None
        or oldest.fired_ms is None
        or len(kept) >= RUNS_CHARTED
        or len(kept) < sdk.settings.history_limit
    ):
        return []
    fired_ms = oldest.fired_ms

    async def read() -> list[views.Run]:
        page = await sdk.runs(schedule_id=schedule_id, limit=RUNS_LOGGED, cursor=f"{fired_ms}-0")
        older = views.logged_runs(page.items, (r.execution_id for r in kept))
        return older[: RUNS_CHARTED - len(kept)]

    cache: OlderRuns = request.app.state.older_runs
    return await cache.get((schedule_id, oldest.execution_id), read)


def _spec(s: Schedule) -> dict[str, Any]:
    """The schedule's spec as JSON (what PUT and the edit form take)."""
    data = s.model_dump(mode="json", exclude=set(STATE_FIELDS) | {"paused", "pause_note"})
    defaults = Schedule.model_fields

    def default(name: str) -> Any:
        value = defaults[name].get_default(call_default_factory=True)
        return list(value) if isinstance(value, tuple) else value  # as JSON has it (limits)

    return {k: v for k, v in data.items() if k in ("id", "task") or v != default(k)}


#: Changes a schedule's, calendar's or limit key's page shows (the API pages the rest).
CHANGES_SHOWN = 10


async def changes_of(sdk: Sdk, kind: str, id: str) -> list[AuditRecord]:
    """The newest changes of one schedule, calendar or limit key (``kind``: _sdk.AUDIT_KINDS),
    for its page's Changes card (templates/_audit.html). Read once per page view, not in the
    live part's refreshes."""
    return (await sdk.audit(id, kind=kind, limit=CHANGES_SHOWN)).items


@router.get("/schedules/{schedule_id}", response_class=HTMLResponse)
async def schedule(request: Request, schedule_id: str) -> Response:
    sdk = sdk_of(request)
    context = await schedule_context(request, schedule_id)
    changes = await changes_of(sdk, "schedule", schedule_id)
    specs = await sdk.spec_history(schedule_id)
    # The flows its occurrences started, among the newest flows (no index by schedule).
    newest = await sdk.flows(limit=SCHEDULE_FLOWS_LOOK)
    started = [f for f in newest.items if f.schedule_id == schedule_id]
    return render(request, "schedule.html", changes=changes, specs=specs, flows=started, **context)


@router.get("/_live/schedules/{schedule_id}", response_class=HTMLResponse)
async def schedule_live(request: Request, schedule_id: str) -> Response:
    try:
        return render(request, "_schedule.html", **await schedule_context(request, schedule_id))
    except ScheduleNotFound:
        # Removed while its page refreshes (or just removed from it): htmx stops polling on
        # 286 instead of reporting an error the page would show for a page being left.
        return HTMLResponse('<p class="muted">this schedule was removed</p>', status_code=286)


#: An action on one schedule: (sdk, schedule id, form fields) -> the message to show.
_Do = Callable[[Sdk, str, dict[str, list[str]]], Awaitable[str]]


def _action(verb: str) -> Callable[[_Do], _Do]:
    """Registers ``POST /schedules/{id}/<verb>``: check the form, run the action, go back to
    the schedule's page (the list after a removal) with its message or its error."""

    def wrap(do: _Do) -> _Do:
        async def endpoint(request: Request, schedule_id: str) -> Response:
            fields = await form(request)
            page = f"/schedules/{_quoted(schedule_id)}"
            try:
                message = await do(sdk_of(request), schedule_id, fields)
            except ScheduleNotFound as exc:
                return back(request, "/schedules", str(exc), ok=False)
            except RschedError as exc:
                return back(request, page, str(exc), ok=False)
            return back(request, "/schedules" if verb == "remove" else page, message)

        endpoint.__name__ = f"schedule_{verb}"
        router.add_api_route(
            f"/schedules/{{schedule_id}}/{verb}", endpoint, methods=["POST"], name=endpoint.__name__
        )
        return do

    return wrap


@_action("pause")
async def _pause(sdk: Sdk, sid: str, fields: dict[str, list[str]]) -> str:
    note = first(fields, "note") or None
    await sdk.pause(sid, note)
    return f"paused {sid}" + (f" ({note})" if note else "")


@_action("resume")
async def _resume(sdk: Sdk, sid: str, fields: dict[str, list[str]]) -> str:
    await sdk.resume(sid)
    return f"resumed {sid}"


@_action("trigger")
async def _trigger(sdk: Sdk, sid: str, fields: dict[str, list[str]]) -> str:
    fired = await sdk.trigger(sid)
    return f"{fired.status} {fired.execution_id}"


@_action("backfill")
async def _backfill(sdk: Sdk, sid: str, fields: dict[str, list[str]]) -> str:
    ends = []
    for name in ("start", "end"):
        text = first(fields, name)
        try:
            ends.append(datetime.fromisoformat(text))
        except ValueError:
            raise InvalidArgument(name, f"{text!r} is not a time; e.g. 2026-05-01T09:30") from None
    result = await sdk.backfill(sid, ends[0], ends[1])
    counts = ", ".join(
        f"{result.count(k)} {k}"
        for k in ("fired", "skipped", "buffered", "debounced", "already_fired")
    )
    return f"backfilled {len(result.outcomes)} occurrence(s): {counts}"


@_action("rollback")
async def _rollback(sdk: Sdk, sid: str, fields: dict[str, list[str]]) -> str:
    text = first(fields, "generation")
    if not text.isdigit():
        raise InvalidArgument("generation", f"{text!r} is not a generation; give a whole number")
    s = await sdk.rollback(sid, int(text))
    return f"rolled back {sid} to the spec of generation {text}: now generation {s.generation}"


@_action("remove")
async def _remove(sdk: Sdk, sid: str, fields: dict[str, list[str]]) -> str:
    if first(fields, "confirm") != sid:
        raise InvalidArgument("confirm", f"type the schedule id {sid!r} to remove it")
    await sdk.remove(sid)
    return f"removed {sid}"


@router.post("/schedules/bulk")
async def schedules_bulk(request: Request) -> Response:
    """The schedules list's action bar: pause, resume, trigger or remove the ticked rows."""
    fields = await form(request)
    ids = [i for i in fields.get("id", []) if i]
    action = first(fields, "action")
    if action not in ("pause", "resume", "trigger", "remove"):
        return back(request, "/schedules", f"unknown action {action!r}", ok=False)
    if not ids:
        return back(request, "/schedules", "tick the schedules to act on first", ok=False)
    try:
        result = await sdk_of(request).act_many(action, ids)
    except RschedError as exc:
        return back(request, "/schedules", str(exc), ok=False)
    return back(request, "/schedules", f"{action}: {len(ids)} schedule(s): {result.summary()}")


#: The fields the edit form gives a select each (out of its JSON), with their choices.
_SELECTS = {"dst_gap": DST_GAPS, "dst_fold": DST_FOLDS}


@router.get("/schedules/{schedule_id}/edit", response_class=HTMLResponse)
async def edit_form(request: Request, schedule_id: str) -> Response:
    s = await sdk_of(request).get(schedule_id)
    spec = _spec(s)
    chosen = {name: spec.pop(name, None) or "" for name in _SELECTS}
    return render(request, "edit.html", s=s, text=views_json(spec), error=None, **_selects(chosen))


def _selects(chosen: dict[str, str]) -> dict[str, Any]:
    """The edit form's selects: each one's choices and the one chosen ('' for the default)."""
    return {
        "selects": {name: (choices, chosen.get(name, "")) for name, choices in _SELECTS.items()}
    }


def _with_selects(spec: dict[str, Any], fields: dict[str, list[str]]) -> dict[str, Any]:
    """The spec with the selects' choices in it: a select left at the default leaves the JSON's
    value (if any) as it is; one that chose a value sets it, and the JSON may not say otherwise."""
    for name in _SELECTS:
        chosen = first(fields, name)
        if not chosen:
            continue
        given = spec.get(name)
        if given is not None and given != chosen:
            raise InvalidArgument(
                name,
                f"the JSON says {given!r} and the select {chosen!r}; choose in one place",
            )
        spec[name] = chosen
    return spec


def views_json(data: dict[str, Any]) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def json_form(request: Request, text: str) -> Response:
    """The new schedule's JSON view (for experts): the spec as JSON, the DST selects."""
    return render(request, "edit.html", s=None, text=text, error=None, **_selects({}))


async def save_spec(
    request: Request, schedule_id: str | None, fields: dict[str, list[str]] | None = None
) -> Response:
    """Save the JSON form's spec: add it (``schedule_id`` None) or replace the schedule's."""
    fields = fields if fields is not None else await form(request)
    text = first(fields, "spec")
    sdk = sdk_of(request)
    try:
        try:
            spec = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument("spec", f"not valid JSON ({exc})") from None
        if not isinstance(spec, dict):
            raise InvalidArgument("spec", "give a JSON object")
        if schedule_id is None:
            s = await sdk.add(_with_selects(spec, fields))
        else:
            if spec.setdefault("id", schedule_id) != schedule_id:
                raise InvalidArgument("id", "the id cannot change; add a new schedule instead")
            spec["paused"] = (await sdk.get(schedule_id)).paused
            s = await sdk.upsert(_with_selects(spec, fields))
    except RschedError as exc:
        old = await sdk.get(schedule_id) if schedule_id else None
        chosen = {name: first(fields, name) for name in _SELECTS}
        return render(
            request, "edit.html", 400, s=old, text=text, error=error_body(exc), **_selects(chosen)
        )
    verb = "added" if schedule_id is None else "saved"
    return back(request, f"/schedules/{_quoted(s.id)}", f"{verb} {s.id}")


@router.post("/schedules/{schedule_id}/edit")
async def edit(request: Request, schedule_id: str) -> Response:
    return await save_spec(request, schedule_id)


# --- queues and dead letters --------------------------------------------------------------------


async def queues_context(request: Request) -> dict[str, Any]:
    sdk = sdk_of(request)
    cache: _Cache = request.app.state.cache
    stats = await cache.get("stats", sdk.stats)
    workers = await cache.get("workers", sdk.workers)
    return {"queues": sorted(stats.queues.items()), "workers": workers}


@router.get("/queues", response_class=HTMLResponse)
async def queues(request: Request) -> Response:
    return render(request, "queues.html", **await queues_context(request))


@router.get("/_live/queues", response_class=HTMLResponse)
async def queues_live(request: Request) -> Response:
    return render(request, "_queues.html", **await queues_context(request))


async def queue_context(request: Request, queue: str) -> dict[str, Any]:
    sdk = sdk_of(request)
    p = request.query_params
    page = await sdk.dead_letters(
        queue, limit=50, cursor=p.get("cursor") or None, task=p.get("task") or None
    )
    stats = await request.app.state.cache.get("stats", sdk.stats)
    tz, _ = _zone(request)
    return {
        "queue": queue,
        "depth_chart": views.depth_chart(await sdk.queue_depth(queue), tz),
        "q": stats.queues.get(queue, {}),
        "letters": page.items,
        "letter_groups": views.letter_groups(page.items),
        "cursor": page.cursor,
        "task": p.get("task", ""),
        "jobs": await sdk.jobs(queue),
    }


@router.get("/queues/{queue}", response_class=HTMLResponse)
async def queue(request: Request, queue: str) -> Response:
    return render(request, "queue.html", **await queue_context(request, queue))


@router.get("/_live/queues/{queue}", response_class=HTMLResponse)
async def queue_live(request: Request, queue: str) -> Response:
    return render(request, "_queue.html", **await queue_context(request, queue))


@router.get("/queues/{queue}/dead/{entry_id}", response_class=HTMLResponse)
async def dead_letter(request: Request, queue: str, entry_id: str) -> Response:
    d = await sdk_of(request).dead_letter(queue, entry_id)
    return render(request, "dead_letter.html", queue=queue, d=d)


async def _dead_action(request: Request, queue: str, verb: str) -> Response:
    fields = await form(request)
    ids = [i for i in fields.get("entry_id", []) if i]
    everything = first(fields, "all") == "1"
    page = f"/queues/{_quoted(queue)}"
    if not ids and not everything:
        return back(request, page, "select dead letters first", ok=False)
    sdk = sdk_of(request)
    call = sdk.requeue if verb == "requeue" else sdk.purge
    try:
        n = await call(queue, None if everything else ids)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    done = "requeued" if verb == "requeue" else "purged"
    return back(request, page, f"{done} {n} dead letter(s) of queue {queue}")


@router.post("/queues/{queue}/requeue")
async def requeue(request: Request, queue: str) -> Response:
    return await _dead_action(request, queue, "requeue")


@router.post("/queues/{queue}/purge")
async def purge(request: Request, queue: str) -> Response:
    return await _dead_action(request, queue, "purge")


@router.post("/queues/{queue}/cancel")
async def cancel(request: Request, queue: str) -> Response:
    """Cancel one job of the queue's jobs table (queued, delayed or running)."""
    fields = await form(request)
    execution_id = first(fields, "execution_id")
    page = f"/queues/{_quoted(queue)}"
    if not execution_id:
        return back(request, page, "no job given: use a cancel button of the jobs table", ok=False)
    try:
        was = await sdk_of(request).cancel(execution_id)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    if was == "running":
        return back(request, page, f"cancelling {execution_id}: its worker stops it")
    return back(request, page, f"cancelled {execution_id} ({was})")


@router.post("/queues/{queue}/cancel-many")
async def cancel_many(request: Request, queue: str) -> Response:
    """The jobs table's action bar: cancel the ticked jobs."""
    fields = await form(request)
    ids = [i for i in fields.get("execution_id", []) if i]
    page = f"/queues/{_quoted(queue)}"
    if not ids:
        return back(request, page, "tick the jobs to cancel first", ok=False)
    try:
        result = await sdk_of(request).act_many("cancel", ids)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    return back(request, page, f"cancel: {len(ids)} job(s): {result.summary()}")


# --- jobs ---------------------------------------------------------------------------------------


#: A job in one of these states changes no more: its page stops polling.
JOB_ENDED = ("completed", "dead", "cancelled", "expired")


async def job_context(
    request: Request, execution_id: str, *, attempts: bool = True
) -> dict[str, Any]:
    """One job (``Client.job``): where it waits or runs (the limit key it waits on), or how it
    ended, with its progress and log, its schedule's history of it and its kept result; with
    ``attempts``, its attempts that ended (the runs log's records) and, of a dead job, the
    error and traceback of its dead letter."""
    sdk = sdk_of(request)
    job = await sdk.job(execution_id)
    logs = await sdk.job_logs(execution_id)
    ended = await sdk.job_attempts(execution_id) if attempts else []
    return {
        "job": job,
        "attempts": ended,
        "logs": logs,
        "last_error": next((r for r in ended if r.error_type or r.error), None),
        "dead": await sdk.dead_letter_of(job, ended) if attempts else None,
        "ended": job.state in JOB_ENDED,
    }


@router.get("/jobs/{execution_id}", response_class=HTMLResponse)
async def job(request: Request, execution_id: str) -> Response:
    return render(request, "job.html", **await job_context(request, execution_id))


@router.get("/_live/jobs/{execution_id}", response_class=HTMLResponse)
async def job_live(request: Request, execution_id: str) -> Response:
    """The live part of a job's page: its state, progress and log. Its attempts (a runs log
    scan) are read with the page only: once the job ended, a poll reloads the whole page."""
    context = await job_context(request, execution_id, attempts=False)
    response = render(request, "_job.html", **context)
    if context["ended"] and request.headers.get("HX-Request"):
        response.headers["HX-Refresh"] = "true"
    return response


@router.post("/jobs/{execution_id}/requeue")
async def requeue_job(request: Request, execution_id: str) -> Response:
    """Put a dead job back on its queue as attempt 1 (its dead letter, found as its page
    finds it)."""
    await form(request)
    page = f"/jobs/{_quoted(execution_id)}"
    sdk = sdk_of(request)
    try:
        job = await sdk.job(execution_id)
        dead = await sdk.dead_letter_of(job, await sdk.job_attempts(execution_id))
        if dead is None:
            return back(request, page, f"{execution_id} has no dead letter to requeue", ok=False)
        n = await sdk.requeue(dead.queue, [dead.entry_id])
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    if not n:
        return back(request, page, f"{execution_id}: its dead letter is gone", ok=False)
    return back(request, page, f"requeued {execution_id} on queue {dead.queue} (attempt 1)")


@router.post("/jobs/{execution_id}/cancel")
async def cancel_job(request: Request, execution_id: str) -> Response:
    await form(request)
    page = f"/jobs/{_quoted(execution_id)}"
    try:
        was = await sdk_of(request).cancel(execution_id)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    if was == "running":
        return back(request, page, f"cancelling {execution_id}: its worker stops it")
    return back(request, page, f"cancelled {execution_id} ({was})")


# --- flows --------------------------------------------------------------------------------------


async def flows_context(request: Request) -> dict[str, Any]:
    p = request.query_params
    state = p.get("state", "").strip()
    cursor = p.get("cursor") or None
    try:
        page = await sdk_of(request).flows(state=state or None, limit=FLOWS_PAGE, cursor=cursor)
        found, more, problem = page.items, page.cursor, None
    except (InvalidFlow, InvalidArgument) as exc:
        found, more, problem = [], None, error_body(exc)
    return {
        "flows": found,
        "cursor": more,
        "state": state,
        "states": FLOW_STATES,
        "params": {"state": state} if state else {},
        "at_cursor": cursor or "",
        "problem": problem,
    }


@router.get("/flows", response_class=HTMLResponse)
async def flows(request: Request) -> Response:
    return render(request, "flows.html", **await flows_context(request))


@router.get("/_live/flows", response_class=HTMLResponse)
async def flows_live(request: Request) -> Response:
    return render(request, "_flows.html", **await flows_context(request))


async def flow_context(request: Request, flow_id: str) -> dict[str, Any]:
    """One flow (``Client.flow``) and its steps drawn as a graph."""
    info = await sdk_of(request).flow(flow_id)
    graph = flow_graph.draw(info.steps, prefix(request), f"the steps of flow {flow_id}")
    return {
        "flow": info,
        "graph": graph,
        "large": len(info.steps) > flow_graph.COLLAPSE_FLOW,
        "collapse_column": flow_graph.COLLAPSE_COLUMN,
        "ended": info.state != "running",
    }


@router.get("/flows/{flow_id}", response_class=HTMLResponse)
async def flow_page(request: Request, flow_id: str) -> Response:
    return render(request, "flow.html", **await flow_context(request, flow_id))


@router.get("/_live/flows/{flow_id}", response_class=HTMLResponse)
async def flow_live(request: Request, flow_id: str) -> Response:
    return render(request, "_flow.html", **await flow_context(request, flow_id))


@router.post("/flows/{flow_id}/cancel")
async def cancel_flow(request: Request, flow_id: str) -> Response:
    await form(request)
    page = f"/flows/{_quoted(flow_id)}"
    try:
        done = await sdk_of(request).cancel_flow(flow_id)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    if not done:
        return back(request, page, f"flow {flow_id} had ended: nothing to cancel", ok=False)
    return back(
        request,
        page,
        f"cancelled flow {flow_id}: its steps not started never run, its running ones are "
        "stopped by their workers",
    )


# --- flow-control limits ------------------------------------------------------------------------


async def limits_context(request: Request) -> dict[str, Any]:
    p = request.query_params
    match = p.get("match", "").strip()
    cursor = p.get("cursor") or None
    page = await sdk_of(request).limits(match=match or None, limit=LIMITS_PAGE, cursor=cursor)
    return {
        "rows": sorted(page.items, key=lambda r: r.key),
        "match": match,
        "cursor": page.cursor,
        "at_cursor": cursor or "",
        "params": {"match": match} if match else {},
    }


@router.get("/limits", response_class=HTMLResponse)
async def limits(request: Request) -> Response:
    return render(request, "limits.html", **await limits_context(request))


@router.get("/_live/limits", response_class=HTMLResponse)
async def limits_live(request: Request) -> Response:
    return render(request, "_limits.html", **await limits_context(request))


async def limit_context(request: Request, key: str) -> dict[str, Any]:
    sdk = sdk_of(request)
    return {
        "key": key,
        "info": await sdk.limit(key),
        "jobs": await sdk.waiting(key, WAITING_SHOWN),
        "shown": WAITING_SHOWN,
    }


# A key may hold '/' ({key:path}). The forms' /limits/set and /limits/clear are POSTs: a route
# that matches the path and the method wins over this GET's, so a key named "set" keeps its page.
@router.get("/limits/{key:path}", response_class=HTMLResponse)
async def limit_page(request: Request, key: str) -> Response:
    """One limit key: its numbers, holders, and the jobs waiting on it in the order they will
    start (``Client.limit``, ``Client.waiting``); the changes of its override."""
    context = await limit_context(request, key)
    changes = await changes_of(sdk_of(request), "limit", key)
    return render(request, "limit.html", changes=changes, **context)


@router.get("/_live/limits/{key:path}", response_class=HTMLResponse)
async def limit_live(request: Request, key: str) -> Response:
    return render(request, "_limit.html", **await limit_context(request, key))


def _what(key: str) -> str:
    return f"limit keys matching {key!r}" if "*" in key else f"limit key {key!r}"


def _limits_page(fields: dict[str, list[str]], key: str) -> str:
    """Where a limit form goes back to: the key's own page when it was posted there."""
    return f"/limits/{_quoted(key)}" if first(fields, "from") == "key" and key else "/limits"


def _concerned(n: int) -> str:
    return f"; the waiting jobs of {n} key(s) are looked at again" if n else ""


@router.post("/limits/set")
async def limit_set(request: Request) -> Response:
    """Override a key's numbers from the Limits page's form (empty fields: not given)."""
    fields = await form(request)
    key, text, rate = first(fields, "key"), first(fields, "concurrency"), first(fields, "rate")
    page = _limits_page(fields, key)
    try:
        if text and not text.isdigit():
            raise InvalidArgument("concurrency", f"{text!r} is not a whole number, e.g. 1")
        concurrency = int(text) if text else None
        if concurrency is None and not rate:
            raise InvalidArgument(
                "concurrency", "give a concurrency (0 pauses the key), a rate or both"
            )
        woke = await sdk_of(request).set_limit(key, concurrency, rate or None)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    numbers = [f"concurrency {views.concurrency_text(concurrency)}"] if text else []
    numbers += [f"rate {rate}"] if rate else []
    return back(request, page, f"set {_what(key)}: {', '.join(numbers)}{_concerned(woke)}")


@router.post("/limits/clear")
async def limit_clear(request: Request) -> Response:
    fields = await form(request)
    key = first(fields, "key")
    page = _limits_page(fields, key)
    try:
        woke = await sdk_of(request).clear_limit(key)
    except RschedError as exc:
        return back(request, page, str(exc), ok=False)
    return back(
        request,
        page,
        f"cleared {_what(key)}: the declared numbers hold again{_concerned(woke)}",
    )


# --- workers ------------------------------------------------------------------------------------


async def workers_context(request: Request) -> dict[str, Any]:
    cache: _Cache = request.app.state.cache
    return {"workers": await cache.get("workers", sdk_of(request).workers)}


@router.get("/workers", response_class=HTMLResponse)
async def workers(request: Request) -> Response:
    return render(request, "workers.html", **await workers_context(request))


@router.get("/_live/workers", response_class=HTMLResponse)
async def workers_live(request: Request) -> Response:
    return render(request, "_workers.html", **await workers_context(request))


# --- runs ---------------------------------------------------------------------------------------


async def runs_context(request: Request) -> dict[str, Any]:
    p = request.query_params
    query = {k: p.get(k, "").strip() for k in ("status", "schedule", "task", "since", "label")}
    cursor = p.get("cursor") or None
    # "order=42, team=a" (every one must match), as the schedules list's label filter.
    labels = [pair.strip() for pair in query["label"].split(",") if pair.strip()]
    try:
        page = await sdk_of(request).runs(
            status=query["status"] or None,
            schedule_id=query["schedule"] or None,
            task=query["task"] or None,
            since=query["since"] or None,
            cursor=cursor,
            labels=labels or None,
        )
        found, more, problem = page.items, page.cursor, None
    except InvalidArgument as exc:
        found, more, problem = [], None, error_body(exc)
    return {
        "runs": found,
        "cursor": more,
        "query": query,
        "statuses": RUN_STATUSES,
        "params": {k: v for k, v in query.items() if v},
        "at_cursor": cursor or "",
        "problem": problem,
    }


@router.get("/runs", response_class=HTMLResponse)
async def runs(request: Request) -> Response:
    return render(request, "runs.html", **await runs_context(request))


@router.get("/_live/runs", response_class=HTMLResponse)
async def runs_live(request: Request) -> Response:
    return render(request, "_runs.html", **await runs_context(request))


# --- login --------------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> Response:
    return render(request, "login.html", next=request.query_params.get("next", ""), error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    fields = await form(request)
    auth: Auth = request.app.state.auth
    target = first(fields, "next")
    base = prefix(request)
    if not target.startswith(base + "/") or target.startswith("//"):
        target = base + "/"
    if not auth.enabled:
        return RedirectResponse(target, status_code=303)
    if not auth.login_ok(first(fields, "user"), first(fields, "password"), first(fields, "token")):
        return render(request, "login.html", 401, next=target, error="wrong credentials")
    response = RedirectResponse(target, status_code=303)
    response.raw_headers.append(
        (b"set-cookie", cookie_header(SESSION_COOKIE, auth.session, base or "/"))
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    await form(request)
    response = RedirectResponse(prefix(request) + "/login", status_code=303)
    response.raw_headers.append(
        (b"set-cookie", cookie_header(SESSION_COOKIE, "", prefix(request) or "/", 0))
    )
    return response
