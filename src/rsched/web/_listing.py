"""Finding schedules: filters, state and id search over the SDK's paged listing.

``Client.list`` pages through the schedules index in next-run order and filters by queue,
task and paused, server-side reads only (with labels: through the label index, in id order).
What it cannot filter (an id substring, the completed state) is filtered here while paging:
each request reads at most ``SCAN_BUDGET`` schedules and then stops with a cursor that
continues the scan, so a search costs the same bounded work at 100 schedules or at 100,000,
and "more" walks on. An exact id is looked up directly first and is the whole first page (one
read, at any size); its cursor goes on to the ids that contain it. The cursor is
``<skip>~<SDK cursor>``: the SDK page to read again and how many of its schedules were already
looked at.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rsched import InvalidArgument, Page, Schedule, ScheduleNotFound
from rsched._core.rules import NAME_RE
from rsched.web._sdk import Sdk

State = Literal["active", "paused", "completed"]
#: Schedules looked at per request when the SDK cannot filter (search, completed state).
SCAN_BUDGET = 2_000
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Found:
    page: Page[Schedule]
    #: Schedules looked at to fill this page (0 when the SDK filtered alone).
    scanned: int


def _predicate(q: str, state: State | None) -> Callable[[Schedule], bool] | None:
    needle = q.lower()
    checks: list[Callable[[Schedule], bool]] = []
    if needle:
        checks.append(lambda s: needle in s.id.lower())
    if state == "completed":
        checks.append(lambda s: s.completed)
    elif state == "active":
        checks.append(lambda s: not s.completed)
    if not checks:
        return None
    return lambda s: all(check(s) for check in checks)


def _split(cursor: str | None) -> tuple[int, str | None]:
    if not cursor:
        return 0, None
    skip, sep, inner = cursor.partition("~")
    if not sep or not skip.isdigit():
        raise InvalidArgument(
            "cursor", f"{cursor!r} is not a cursor; pass the cursor a previous page returned"
        )
    return int(skip), inner or None


async def find(
    sdk: Sdk,
    *,
    q: str = "",
    queue: str | None = None,
    task: str | None = None,
    state: State | None = None,
    labels: list[str] | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Found:
    """One page of schedules matching every filter given (see the module docstring)."""
    if not 1 <= limit <= 1000:
        raise InvalidArgument("limit", f"give 1-1000, got {limit!r}")
    q = q.strip()
    paused = {"paused": True, "active": False}.get(state or "")
    keep = _predicate(q, state)
    if keep is None:
        return Found(
            await sdk.list_schedules(
                queue=queue, task=task, paused=paused, labels=labels, limit=limit, cursor=cursor
            ),
            0,
        )
    if q and not cursor and NAME_RE.match(q):
        with contextlib.suppress(ScheduleNotFound):
            exact = await sdk.get(q)
            labelled = not labels or set(labels) <= {f"{k}={v}" for k, v in exact.labels.items()}
            if (
                queue in (None, exact.queue)
                and task in (None, exact.task)
                and keep(exact)
                and labelled
            ):
                # One read at any size; the cursor goes on to ids that contain the query.
                return Found(Page([exact], "0~"), 0)
    skip, inner = _split(cursor)
    items: list[Schedule] = []
    scanned = 0
    # Pages grow from a little more than needed (a rare filter) to _CHUNK (a needle).
    size = min(_CHUNK, skip + 2 * limit)
    while True:
        page = await sdk.list_schedules(
            queue=queue, task=task, paused=paused, labels=labels, limit=size, cursor=inner
        )
        for i, s in enumerate(page.items[skip:], start=skip):
            scanned += 1
            if keep(s):
                items.append(s)
            if len(items) == limit or scanned >= SCAN_BUDGET:
                more = i + 1 < len(page.items) or page.cursor is not None
                nxt = f"{i + 1}~{inner or ''}" if i + 1 < len(page.items) else _next(page)
                return Found(Page(items, nxt if more else None), scanned)
        if page.cursor is None:
            return Found(Page(items, None), scanned)
        inner, skip, size = page.cursor, 0, min(_CHUNK, size * 2)


def _next(page: Page[Schedule]) -> str | None:
    return None if page.cursor is None else f"0~{page.cursor}"
