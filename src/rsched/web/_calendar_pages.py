"""The dashboard's exclusion calendars: the Calendars page, a calendar's page, and the forms that
set and remove one.

Unlike the other pages these are not polled: a calendar changes only by an operator's write,
and a calendar's page lists the schedules naming it, a read of every schedule
(``Client.calendar_users``) that a page should not repeat every few seconds.
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from rsched import Calendar, CalendarNotFound, InvalidArgument, InvalidCalendar, RschedError
from rsched._core.calendars import WEEKDAYS
from rsched.web._errors import error_body, http_words, message_of
from rsched.web._pages import back, changes_of, first, form, render, sdk_of
from rsched.web._sdk import Sdk

router = APIRouter(include_in_schema=False, dependencies=[Depends(http_words)])


def _form_of(calendar: Calendar | None) -> dict[str, Any]:
    """What the set form shows: a calendar's fields as its textareas and checkboxes take them."""
    if calendar is None:
        return {"name": "", "dates": "", "ranges": "", "weekdays": [], "description": ""}
    return {
        "name": calendar.name,
        "dates": "\n".join(d.isoformat() for d in calendar.dates),
        "ranges": "\n".join(f"{a.isoformat()}..{b.isoformat()}" for a, b in calendar.ranges),
        "weekdays": list(calendar.weekdays),
        "description": calendar.description or "",
    }


def _posted(fields: dict[str, list[str]]) -> dict[str, Any]:
    """The set form as posted, to show again with its error."""
    return {
        "name": first(fields, "name"),
        "dates": first(fields, "dates"),
        "ranges": first(fields, "ranges"),
        "weekdays": _ticked(fields),
        "description": first(fields, "description"),
    }


def _lines(text: str) -> list[str]:
    """A textarea's entries, one a line; blank lines are left out."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _ticked(fields: dict[str, list[str]]) -> list[str]:
    return [w for w in fields.get("weekdays", []) if w]


def _page(name: str) -> str:
    return f"/calendars/{quote(name, safe='')}"


def _counted(n: int, one: str) -> str:
    return f"{n} {one}" if n == 1 else f"{n} {one}s"


@router.get("/calendars", response_class=HTMLResponse)
async def calendars(request: Request) -> Response:
    """The exclusion calendars (``Client.calendars``) and a form to add one."""
    found = await sdk_of(request).calendars()
    return render(
        request,
        "calendars.html",
        calendars=found,
        weekdays=WEEKDAYS,
        form=_form_of(None),
        error=None,
    )


# The forms' /calendars/set and /calendars/remove are POSTs: a calendar named "set" keeps its
# page (a route that matches the path and the method wins over this GET's).
@router.get("/calendars/{name}", response_class=HTMLResponse)
async def calendar(request: Request, name: str) -> Response:
    """One calendar: its days, ranges and weekdays, the schedules naming it, forms to set and
    remove it (404 when there is none)."""
    sdk = sdk_of(request)
    found = await sdk.calendar(name)
    return render(
        request,
        "calendar.html",
        **await _about(sdk, found),
        weekdays=WEEKDAYS,
        form=_form_of(found),
        error=None,
    )


async def _about(sdk: Sdk, found: Calendar) -> dict[str, Any]:
    """What a calendar's page shows besides its form: the calendar, the schedules naming it,
    its changes."""
    return {
        "c": found,
        "users": await sdk.calendar_users(found.name),
        "changes": await changes_of(sdk, "calendar", found.name),
    }


@router.post("/calendars/set")
async def calendar_set(request: Request) -> Response:
    """Create or replace a calendar from the set form: days and ranges one a line, weekdays
    ticked. A refusal shows the form again as posted, with the message (400)."""
    fields = await form(request)
    try:
        stored = await sdk_of(request).set_calendar(
            first(fields, "name"),
            dates=_lines(first(fields, "dates")),
            ranges=_lines(first(fields, "ranges")),
            weekdays=_ticked(fields),
            description=first(fields, "description") or None,
        )
    except InvalidCalendar as exc:
        return await _refused(request, fields, exc)
    except RschedError as exc:
        return back(request, "/calendars", message_of(exc), ok=False)
    parts = (
        _counted(len(stored.dates), "date"),
        _counted(len(stored.ranges), "range"),
        ", ".join(stored.weekdays) or "no weekday",
    )
    return back(request, _page(stored.name), f"set calendar {stored.name!r}: {', '.join(parts)}")


async def _refused(
    request: Request, fields: dict[str, list[str]], exc: InvalidCalendar
) -> Response:
    """The set form again as posted, with the message (400), on the page it was posted from:
    the calendar's own or the list's (a redirect would lose what was typed in the textareas)."""
    sdk = sdk_of(request)
    context = {"weekdays": WEEKDAYS, "form": _posted(fields), "error": error_body(exc)}
    name = first(fields, "name")
    if first(fields, "from") == "calendar":
        with contextlib.suppress(CalendarNotFound, InvalidArgument):  # removed meanwhile
            about = await _about(sdk, await sdk.calendar(name))
            return render(request, "calendar.html", 400, **about, **context)
    return render(request, "calendars.html", 400, calendars=await sdk.calendars(), **context)


@router.post("/calendars/remove")
async def calendar_remove(request: Request) -> Response:
    """Remove a calendar; refused, with a message naming them, while schedules name it."""
    fields = await form(request)
    name = first(fields, "name")
    try:
        await sdk_of(request).remove_calendar(name)
    except CalendarNotFound as exc:
        return back(request, "/calendars", message_of(exc), ok=False)
    except RschedError as exc:
        return back(request, _page(name), message_of(exc), ok=False)
    return back(request, "/calendars", f"removed calendar {name!r}")
