"""The dashboard's "New schedule" form: a field per part of a schedule (trigger, zone, policies,
calendars, limits, queue, task, payload, retries and timeout), the next runs previewed as the
viewer types (``/new-schedule/preview``, an htmx request answered with a fragment), and the JSON
view kept for experts (``/new-schedule?view=json``).

What the form gives becomes the same spec the JSON view and the API take: rsched checks it
(``InvalidSchedule`` naming each field) and the form comes back with the message and what was
typed.
"""

from __future__ import annotations

import functools
from typing import Any, get_args
from urllib.parse import quote
from zoneinfo import available_timezones

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from rsched import InvalidArgument, RschedError, Schedule, next_fire_times
from rsched._core.rules import DST_FOLDS, DST_GAPS
from rsched._core.schedule import Misfire, Overlap
from rsched.web import _views as views
from rsched.web._errors import error_body, http_words
from rsched.web._pages import back, first, form, json_form, render, save_spec, sdk_of, views_json

router = APIRouter(include_in_schema=False, dependencies=[Depends(http_words)])

#: Coming runs the preview shows.
PREVIEW_RUNS = 5
TRIGGERS = ("cron", "every", "at")
OVERLAPS = get_args(Overlap)
MISFIRES = get_args(Misfire)
#: What a new form starts with.
EXAMPLE = {"id": "nightly-report", "task": "reports.nightly", "cron": "0 2 * * *"}
#: The form's selects and their choices (an empty choice: the default).
_SELECTS = (
    ("overlap", OVERLAPS), ("misfire", MISFIRES), ("dst_gap", DST_GAPS), ("dst_fold", DST_FOLDS),
)  # fmt: skip
_TEXT_FIELDS = ("id", "task", "queue", "timezone", "description", "timeout_s", "jitter")


@functools.cache
def zone_names() -> tuple[str, ...]:
    """Every IANA zone a schedule may name, sorted (the zone field's suggestions)."""
    return tuple(sorted(z for z in available_timezones() if views.valid_zone(z) == z))


def _json_field(fields: dict[str, list[str]], name: str, kind: type) -> Any:
    text = first(fields, name)
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(name, f"not valid JSON ({exc})") from None
    if not isinstance(value, kind):
        want = 'an object, e.g. {"report": "daily"}' if kind is dict else "a list"
        raise InvalidArgument(name, f"give {want}")
    return value


def spec_of(fields: dict[str, list[str]]) -> dict[str, Any]:
    """The schedule spec the form's fields say (an empty field: the default). Raises
    InvalidArgument naming a field whose JSON does not parse; the rest rsched checks."""
    spec: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        if value := first(fields, name):
            spec[name] = value
    trigger = first(fields, "trigger") or "cron"
    if trigger not in TRIGGERS:
        raise InvalidArgument("trigger", f"choose one of {', '.join(TRIGGERS)}")
    if value := first(fields, trigger):
        spec[trigger] = value
    for name, choices in _SELECTS:
        chosen = first(fields, name)
        if chosen and chosen in choices:
            spec[name] = chosen
    if text := first(fields, "max_retries"):
        if not text.isdigit():
            raise InvalidArgument("max_retries", f"{text!r} is not a whole number, e.g. 3")
        spec["max_retries"] = int(text)
    exclude = [name for name in fields.get("exclude", []) if name]
    if exclude:
        spec["exclude"] = exclude
    if (payload := _json_field(fields, "payload", dict)) is not None:
        spec["payload"] = payload
    if (limits := _json_field(fields, "limits", list)) is not None:
        spec["limits"] = limits
    return spec


async def _context(request: Request, fields: dict[str, list[str]]) -> dict[str, Any]:
    try:
        calendars = [c.name for c in await sdk_of(request).calendars()]
    except RschedError:
        calendars = []
    values = {name: first(fields, name) for name in (*_TEXT_FIELDS, *TRIGGERS)}
    values.update(
        trigger=first(fields, "trigger") or "cron",
        **{name: first(fields, name) for name, _ in _SELECTS},
        max_retries=first(fields, "max_retries"),
        payload=first(fields, "payload"),
        limits=first(fields, "limits"),
    )
    return {
        "v": values,
        "chosen": set(fields.get("exclude", [])),
        "calendars": calendars,
        "zones": zone_names(),
        "triggers": TRIGGERS,
        "overlaps": OVERLAPS,
        "misfires": MISFIRES,
        "dst": {"dst_gap": DST_GAPS, "dst_fold": DST_FOLDS},
    }


@router.get("/new-schedule", response_class=HTMLResponse)
async def new_form(request: Request) -> Response:
    if request.query_params.get("view") == "json":
        return json_form(request, views_json(EXAMPLE))
    start = {k: [v] for k, v in EXAMPLE.items()}
    start["timezone"] = ["UTC"]
    return render(request, "new.html", error=None, **await _context(request, start))


@router.post("/new-schedule")
async def add(request: Request) -> Response:
    fields = await form(request)
    if "spec" in fields:  # the JSON view
        return await save_spec(request, None, fields)
    try:
        s = await sdk_of(request).add(spec_of(fields))
    except RschedError as exc:
        context = await _context(request, fields)
        return render(request, "new.html", 400, error=error_body(exc), **context)
    return back(request, f"/schedules/{quote(s.id, safe='')}", f"added {s.id}")


@router.get("/new-schedule/preview", response_class=HTMLResponse)
async def preview(request: Request) -> Response:
    """The next runs of what the form says so far, in its zone and the viewer's, those an
    exclusion calendar excludes left out (a fragment for the form's htmx request)."""
    fields = {k: request.query_params.getlist(k) for k in request.query_params}
    tz = render_zone(request)
    try:
        spec = spec_of(fields)
        spec.setdefault("id", "preview")
        spec.setdefault("task", "preview")
        schedule = Schedule(**spec)
        sdk = sdk_of(request)
        calendars = [await sdk.calendar(name) for name in schedule.exclude]
        times = next_fire_times(schedule, n=PREVIEW_RUNS, calendars=calendars)
    except RschedError as exc:
        return render(request, "_preview.html", error=error_body(exc), times=[])
    now = sdk_of(request).now_ms()
    shown = [views.moment(t, tz, schedule.timezone, now) for t in times]
    return render(request, "_preview.html", error=None, times=shown, zone=schedule.timezone)


def render_zone(request: Request) -> str:
    """The viewer's zone (?tz= is the form's own field here: only the cookie counts)."""
    return views.valid_zone(request.cookies.get("rsched_tz")) or "UTC"
