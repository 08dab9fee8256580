"""What to fire for one due schedule: the on-time occurrence, or the misfire policy's answer.

Pure (no Redis): the scheduler feeds it the schedule's due score and Redis' now, and sends the
resulting items to lua/fire.lua, which re-checks everything atomically.

An occurrence late by no more than ``misfire_grace_s`` is simply run. Beyond that:
- ``run_once``: one run, scheduled at the latest missed occurrence, stands for all of them;
- ``skip``: no run (if the latest occurrence is itself within the grace, it runs on time);
- ``catch_up``: the newest ``catch_up_limit`` missed occurrences run, oldest first (action
  ``catch_up``, origin ``misfire``); older ones are recorded as misfired (action ``limit``).
Afterwards the schedule continues with its first occurrence after now.

Every caught-up occurrence runs, whatever the overlap policy: the policy only decides whether
they overlap. With ``allow`` the fire script queues them all at once; under any other policy the
first runs (or waits behind a run in progress) and the others wait in the schedule's pending set
(lua/includes/pending_push.lua), each released when the run before it ends, so the engine never
queues two runs of a non-``allow`` schedule at once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, get_args

from rsched._core.job import JobOptions
from rsched._core.keys import stream_name
from rsched._core.rules import (
    NAME_RE,
    Priority,
    check_debounce,
    check_exclude,
    check_labels,
    check_priority,
    labels_text,
)
from rsched._core.schedule import Overlap
from rsched._core.timing import Timing

# Counting missed occurrences (for the history record and rsched_misfires_total, "missed" is at
# most this per late run) must never cost unbounded time.
MISSED_COUNT_CAP = 1_000

OVERLAPS = frozenset(get_args(Overlap))


@dataclass(frozen=True, slots=True)
class FireSpec:
    """The spec fields that decide what a fire writes (overlap policy, stream, completion, job
    options), as the hash holds them. The scheduler sends them with each batch for the version it
    planned with, so the fire script reads only the schedule's state (see lua/fire.lua)."""

    overlap: str = "skip"
    queue: str = "default"
    max_runs: int | None = None
    opts: str = ""  # the hash's ``opts`` JSON object, '' when every job option is the default
    buffer_limit: int | None = None  # None: the default (100)
    priority: Priority = (
        "normal"  # picks the queue's stream of that level (rsched._core.keys.queue)
    )
    debounce_ms: int | None = None  # None: fired jobs go straight to the stream
    labels: str = ""  # the hash's ``labels`` ("k=v,k=v"), which its jobs carry; '' for none

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> FireSpec:
        """Validated, so that a hash edited by hand is refused by the scheduler (ValueError
        naming the field) rather than by a whole batch of the fire script. Schedules mostly
        share a few specs: one instance each (cached), which also keeps the scheduler's spec
        cache small."""
        get = fields.get
        return _fire_spec(
            get("overlap"),
            get("queue"),
            get("max_runs"),
            get("opts"),
            get("buffer_limit"),
            get("priority"),
            get("debounce"),
            get("labels"),
        )

    def arg(self) -> str:
        """The spec as fire.lua reads it (its "policy"):
        "<overlap> <queue> <max_runs> <buffer_limit> <debounce ms> <labels> <opts>". The queue
        part names the stream of the schedule's priority level (``q`` or ``q#high``): fire.lua
        appends it to the streams' key prefix, so a priority costs a fire nothing. The labels
        ride with the plan, parsed once a batch: a fire reads no field more for them, and a
        schedule without labels sends an empty part."""
        max_runs = "" if self.max_runs is None else self.max_runs
        limit = "" if self.buffer_limit is None else self.buffer_limit
        debounce = "" if self.debounce_ms is None else self.debounce_ms
        queue = stream_name(self.queue, self.priority)
        return f"{self.overlap} {queue} {max_runs} {limit} {debounce} {self.labels} {self.opts}"


DEFAULT_FIRE_SPEC = FireSpec()


@functools.lru_cache(maxsize=4096)
def _fire_spec(
    overlap: str | None,
    queue: str | None,
    max_runs: str | None,
    opts: str | None,
    buffer_limit: str | None = None,
    priority: str | None = None,
    debounce: str | None = None,
    labels: str | None = None,
) -> FireSpec:
    overlap = "skip" if overlap is None else overlap
    queue = "default" if queue is None else queue
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {sorted(OVERLAPS)}, not {overlap!r}")
    if not NAME_RE.match(queue):
        raise ValueError(f"queue is not a queue name rsched writes: {queue!r}")
    if max_runs is not None and not max_runs.isdigit():
        raise ValueError(f"max_runs must be a whole number, not {max_runs!r}")
    opts = (opts or "").strip()  # the script checks for a leading brace
    if opts == "{}":
        opts = ""
    if buffer_limit is not None and not buffer_limit.isdigit():
        raise ValueError(f"buffer_limit must be a whole number, not {buffer_limit!r}")
    JobOptions.parse(opts)  # MalformedJob, a ValueError naming the option
    level = check_priority("normal" if priority is None else priority)
    debounce_ms = None
    if debounce is not None:
        # Rounded as lua/includes/hash_plan.lua rounds it (trigger and backfill read the hash).
        try:
            debounce_ms = math.floor(check_debounce(debounce) * 1000 + 0.5)
        except ValueError as exc:
            raise ValueError(f"debounce is not one rsched writes: {exc}") from None
    try:
        label_text = labels_text(check_labels(labels)) if labels else ""
    except ValueError as exc:
        raise ValueError(f"labels is not one rsched writes: {exc}") from None
    return FireSpec(
        overlap,
        queue,
        None if max_runs is None else int(max_runs),
        opts,
        None if buffer_limit is None else int(buffer_limit),
        level,
        debounce_ms,
        label_text,
    )


class FireItem(NamedTuple):
    """One occurrence handed to the fire script (see lua/fire.lua for the meaning of each).
    A tuple rather than a dataclass: a herd creates one per schedule (docs/results.md)."""

    schedule_id: str
    version: str  # "<generation>:<created_at>" of the hash the plan was computed from
    expect: int
    sched: int
    next: int | None
    action: str  # fire | misfire | catch_up | skip | limit
    missed: int = 0
    spec: FireSpec = DEFAULT_FIRE_SPEC  # the fire spec of that version
    calendar: str = ""  # action exclude: the exclusion calendar that keeps it from running

    def header(self, spec_index: int) -> str:
        """The item's group header as fire.lua reads it, less the count in front (short when on
        time); ``spec_index`` is the position of its spec among the batch's."""
        nxt = "" if self.next is None else self.next
        if self.action == "fire" and self.sched == self.expect:
            return f"{self.expect} {nxt} {spec_index}"
        last = self.calendar if self.action == "exclude" else self.missed
        return f"{self.expect} {nxt} {spec_index} {self.sched} {self.action} {last}"


# Every hash field PlannedSpec.from_hash reads: the scheduler fetches only these (no payload).
PLAN_FIELDS = (
    "version", "timezone", "cron", "every", "at", "start_at", "end_at",
    "misfire", "misfire_grace_s", "catch_up_limit", "overlap", "queue", "max_runs", "opts",
    "buffer_limit", "priority", "debounce", "dst_gap", "dst_fold", "exclude", "jitter",
    "labels",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PlannedSpec:
    """The fields of a schedule that decide how it fires, cached per version.

    The version is ``<generation>:<created_at>``: the generation alone restarts at 1 when a
    schedule is removed and created again, and a cached plan of the old one must not match.
    """

    version: str
    timing: Timing
    fire_spec: FireSpec = DEFAULT_FIRE_SPEC  # sent with each item: what its fire writes
    misfire: str = "run_once"
    grace_ms: int = 60_000
    catch_up_limit: int = 100
    exclude: tuple[str, ...] = ()  # the exclusion calendars it names

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> PlannedSpec:
        """The spec of a stored hash's fields: one instance for the schedules whose fields are
        all the same (those created by one ``add_many`` share even their version), so that the
        scheduler's spec cache costs little more than its dict's entries for such a fleet
        (~100 bytes a schedule, ~450 when none is shared; docs/results.md)."""
        return _planned_spec(*fields.items())


#: The last distinct specs kept for sharing: a herd's schedules come in due order, those created
#: together side by side; a few MB when none repeats.
SHARED_SPECS = 4_096


@functools.lru_cache(maxsize=SHARED_SPECS)
def _planned_spec(*items: tuple[str, str]) -> PlannedSpec:
    fields = dict(items)
    exclude, grace = fields.get("exclude"), fields.get("misfire_grace_s")
    return PlannedSpec(
        version=fields["version"],
        timing=Timing.from_hash(fields),
        fire_spec=FireSpec.from_hash(fields),
        misfire=fields.get("misfire", "run_once"),
        grace_ms=60_000 if grace is None else round(float(grace) * 1000),
        catch_up_limit=int(fields.get("catch_up_limit", "100")),
        exclude=() if not exclude else _calendar_names(exclude),
    )


@functools.lru_cache(maxsize=1024)
def _calendar_names(stored: str) -> tuple[str, ...]:
    """A hash's ``exclude`` field, read once per distinct value (a herd's schedules share it:
    the cache is warmed for all of them before they come due)."""
    return check_exclude(stored)


#: Which exclusion calendar, if any, keeps an occurrence (ms) of the schedule planned from
#: running (the scheduler's, over the calendars its ``exclude`` names).
Excluding = Callable[[int], str | None]


def plan(
    schedule_id: str,
    spec: PlannedSpec,
    due_ms: int,
    now_ms: int,
    excluding: Excluding | None = None,
) -> list[FireItem]:
    """The fire items for a schedule whose next run ``due_ms`` (its index score: when its
    occurrence fires, the jitter's delay included) is at or before ``now_ms``. An occurrence
    ``excluding`` names a calendar for does not run: its item records it (action ``exclude``)."""
    timing, version, fire_spec = spec.timing, spec.version, spec.fire_spec
    if now_ms - due_ms <= spec.grace_ms and timing.jitter_ms is None:
        # On time, as a herd's schedules nearly all are: the path of every fire, kept short.
        nxt = timing.next_after(due_ms)
        if excluding is not None and (calendar := excluding(due_ms)):
            return [FireItem(schedule_id, version, due_ms, due_ms, nxt, "exclude", 0, fire_spec,
                             calendar)]  # fmt: skip
        return [FireItem(schedule_id, version, due_ms, due_ms, nxt, "fire", 0, fire_spec)]

    def item(expect: int, sched: int, nxt: int | None, action: str, missed: int = 0) -> FireItem:
        if excluding and action in ("fire", "catch_up") and (calendar := excluding(sched)):
            return FireItem(schedule_id, version, expect, sched, nxt, "exclude", 0, fire_spec,
                            calendar)  # fmt: skip
        return FireItem(schedule_id, version, expect, sched, nxt, action, missed, fire_spec)

    due = timing.nominal(schedule_id, due_ms)  # the occurrence (due_ms without a jitter)
    if now_ms - due_ms <= spec.grace_ms:
        return [item(due_ms, due, timing.planned(schedule_id, timing.next_after(due)), "fire")]

    latest = timing.prev_at_or_before(now_ms)
    if latest is None or latest < due:
        latest = due
    # Occurrences late by more than the grace run now, with no jitter; the one after now keeps
    # its delay.
    after_now = timing.planned(schedule_id, timing.next_after(latest))

    if spec.misfire == "run_once":
        missed = timing.count(due, latest, MISSED_COUNT_CAP)
        run = latest if excluding is None else _latest_run(timing, due, latest, excluding)
        if run is None:  # every one of them excluded: the oldest records it
            return [item(due_ms, due, after_now, "fire")]
        return [item(due_ms, run, after_now, "misfire", max(missed, 1))]

    if spec.misfire == "skip":
        if now_ms - latest <= spec.grace_ms and latest > due:
            missed = timing.count(due, latest - 1, MISSED_COUNT_CAP)
            return [
                item(due_ms, due, latest, "skip", missed),
                item(latest, latest, after_now, "fire"),
            ]
        missed = timing.count(due, latest, MISSED_COUNT_CAP)
        return [item(due_ms, due, after_now, "skip", max(missed, 1))]

    # catch_up: walk back from now to find the newest `limit` occurrences, then fire them in order.
    newest: list[int] = []
    t: int | None = latest
    while t is not None and t >= due and len(newest) < spec.catch_up_limit:
        newest.append(t)
        t = timing.prev_at_or_before(t - 1)
    newest.reverse()
    items: list[FireItem] = []
    expect = due_ms
    dropped = timing.count(due, newest[0] - 1, MISSED_COUNT_CAP) if newest[0] > due else 0
    if dropped:
        items.append(item(due_ms, due, newest[0], "limit", dropped))
        expect = newest[0]
    for i, sched in enumerate(newest):
        nxt = newest[i + 1] if i + 1 < len(newest) else after_now
        # Each one is a caught-up run (origin misfire), the newest too when it is within the
        # grace: it came due during the same outage, and it must wait its turn behind the
        # older ones rather than be dropped by the overlap policy.
        items.append(item(expect, sched, nxt, "catch_up", 1))
        expect = nxt if nxt is not None else sched
    return items


def _latest_run(timing: Timing, first: int, last: int, excluded: Excluding) -> int | None:
    """The latest occurrence in [first, last] no calendar excludes (looking at no more than
    MISSED_COUNT_CAP of them), or None."""
    t: int | None = last
    for _ in range(MISSED_COUNT_CAP):
        if t is None or t < first:
            return None
        if excluded(t) is None:
            return t
        t = timing.prev_at_or_before(t - 1)
    return None
