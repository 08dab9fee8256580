"""A scheduler process's copy of the exclusion calendars, shared by the partitions it leads and
read again only after a change: before it plans occurrences of schedules that name calendars, a
round reads the calendars' version (one GET), and all of them when it moved. So a change to a
calendar applies from each schedule's next occurrence on, and rounds of schedules naming none
never read them."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from rsched._core.calendars import Calendar, excluding
from rsched._core.errors import StateError
from rsched._core.fire_plan import Excluding
from rsched._core.log import get_logger
from rsched._store.calendars import CalendarStore

log = get_logger("rsched.scheduler")

# Due times remembered per lookup (a herd shares one; steady fires bring new ones).
_SEEN_MAX = 4096


class CalendarCache:
    def __init__(self, store: CalendarStore) -> None:
        self.store = store
        self.calendars: dict[str, Calendar] = {}
        self._version: int | None = None
        # (names, zone) -> the lookup of the schedules that name those calendars in that zone.
        self._lookups: dict[tuple[tuple[str, ...], ZoneInfo], Excluding] = {}

    async def refresh(self) -> None:
        """Read the calendars again if they changed since the last read."""
        version = await self.store.version()
        if version == self._version and version >= 0:
            return
        found: dict[str, Calendar] = {}
        for name, body in (await self.store.raw()).items():
            try:
                found[name] = Calendar.from_json(name, body)
            except (StateError, ValueError) as exc:
                log.error("calendar.unreadable", calendar=name, error=str(exc))
        self.calendars, self._version = found, version
        self._lookups.clear()

    def lookup(self, names: tuple[str, ...], tz: ZoneInfo) -> Excluding:
        """Which of calendars ``names`` excludes an occurrence (ms) in zone ``tz``, if any. A name
        no calendar has (removed while a schedule still named it) excludes nothing: the schedule
        runs rather than stops, and the error is logged once per change of the calendars."""
        key = (names, tz)
        found = self._lookups.get(key)
        if found is None:
            missing = [name for name in names if name not in self.calendars]
            if missing:
                log.error("calendar.missing", calendars=missing, fix="rsched calendar set NAME")
            chosen = tuple(self.calendars[name] for name in names if name in self.calendars)
            # A herd's schedules share their due time: each is looked up once.
            seen: dict[int, str | None] = {}

            def found(ms: int) -> str | None:
                try:
                    return seen[ms]
                except KeyError:
                    if len(seen) >= _SEEN_MAX:
                        seen.clear()
                    got = seen[ms] = excluding(chosen, ms, tz)
                    return got

            self._lookups[key] = found
        return found
