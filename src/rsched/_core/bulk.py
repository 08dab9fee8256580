"""Many schedules at once: validating them all (every problem, in one pass) into what a bulk
write sends, and what became of each (BulkResult).

Validating a schedule with pydantic costs ~15 µs and turning it into hash fields ~12 µs, which
at 100k schedules is most of a bulk create's budget. The schedules of one bulk call mostly share
everything but their id and payload, so each distinct *shape* (every other field) is validated
once and its hash fields reused; the id and payload of each entry are still checked by the same
rules (rsched._core.rules). Pure: no Redis here (docs/results.md has the costs).
"""

from __future__ import annotations

import contextlib
import gc
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rsched._core.errors import InvalidSchedule
from rsched._core.job import OPTION_NAMES
from rsched._core.rules import check_name, encode_payload
from rsched._core.schedule import STATE_FIELDS, Schedule

#: (entry index, schedule id if known, field, message): one problem of a bulk call.
Problem = tuple[int, str | None, str, str]

#: Hash fields that hold the spec (the rest is engine state): compared to tell "unchanged".
SPEC_KEYS: tuple[str, ...] = (
    *sorted(set(Schedule.model_fields) - STATE_FIELDS - {"id", "paused"} - OPTION_NAMES),
    "opts",
)
_SHAPE_FIELDS = tuple(
    n for n in Schedule.model_fields if n not in STATE_FIELDS and n not in ("id", "payload")
)
_shape_values = operator.itemgetter(*_SHAPE_FIELDS)
_LABELS_AT = _SHAPE_FIELDS.index("labels")
_OUTCOMES = ("created", "replaced", "unchanged", "exists")


@contextlib.contextmanager
def collector_spared() -> Iterator[Callable[[], None]]:
    """Spare a bulk call's long-lived objects the garbage collector's passes until the block
    ends. The collector is off until ``settled`` (what this yields) is called: the caller makes
    its items in between, without awaiting anything, so no other task runs meanwhile; from then
    on the objects made so far are frozen and the collector runs again, for what the rest makes.

    A bulk call of a million schedules holds millions of objects until it returns (its input,
    then its items): each of the full collections they set off walked them all, ~1.4 s apiece,
    a third of a million's add_many. ``gc.freeze`` is what Python offers for objects known to
    live on; ``gc.unfreeze`` gives them back at the end. An application that froze objects
    itself (a pre-fork server) or turned the collector off keeps that: nothing is done then.
    """
    if gc.get_freeze_count() or not gc.isenabled():
        yield lambda: None
        return

    def settled() -> None:
        if not gc.isenabled():
            gc.freeze()
            gc.enable()

    gc.disable()
    try:
        yield settled
    finally:
        gc.enable()
        gc.unfreeze()


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What :meth:`Client.add_many` / :meth:`Client.upsert_many` did, per schedule id.

    ``outcomes`` maps each id, in the order given, to ``created``, ``replaced``, ``unchanged``
    (upsert_many: the stored spec was already this one, so nothing was written and its
    generation and next run stay) or ``exists`` (add_many: another writer created the id after
    the check and before the write; that schedule was left as the other writer made it). The
    bulk actions (:meth:`Client.pause_many` and its kin, docs/labels.md) say ``paused``,
    ``resumed``, ``removed``, ``fired`` (or what the trigger did: ``skipped``, ``buffered``,
    ``debounced``), ``cancelled``, ``not_found`` or ``completed`` (refused: it has completed).
    """

    outcomes: dict[str, str]

    def ids(self, outcome: str) -> list[str]:
        """The ids with that outcome, in the order given."""
        return [sid for sid, got in self.outcomes.items() if got == outcome]

    def count(self, outcome: str) -> int:
        return sum(1 for got in self.outcomes.values() if got == outcome)

    def summary(self) -> str:
        """``"3 created, 1 exists"``: each outcome's count (the bulk writes' in their order)."""
        others = [o for o in dict.fromkeys(self.outcomes.values()) if o not in _OUTCOMES]
        return ", ".join(f"{self.count(o)} {o}" for o in (*_OUTCOMES, *others) if self.count(o))


@dataclass(slots=True)  # not frozen: a frozen dataclass is ~3x slower to build
class BulkItem:
    """One schedule of a bulk write, ready to send.

    ``timing`` is the validated schedule, or one of the same shape (every field but id and
    payload): what its first run is computed from. ``mode`` and ``expect_gen`` are upsert.lua's.
    """

    index: int
    schedule_id: str
    queue: str
    paused: bool
    spec: dict[str, str]
    timing: Schedule
    mode: str = "upsert"
    expect_gen: int | None = None


def hash_fields(schedule: Schedule) -> dict[str, str]:
    """The spec fields upsert.lua stores for ``schedule`` (what ScheduleStore.write sends)."""
    spec = schedule.spec_fields()
    if schedule.paused and schedule.pause_note:
        spec["pause_note"] = schedule.pause_note
    return spec


def item_of(
    schedule: Schedule,
    *,
    index: int = 0,
    mode: str = "upsert",
    expect_gen: int | None = None,
    spec: dict[str, str] | None = None,
) -> BulkItem:
    """A validated schedule as a bulk item (``spec``: its hash_fields, when known already)."""
    return BulkItem(
        index=index,
        schedule_id=schedule.id,
        queue=schedule.queue,
        paused=schedule.paused,
        spec=hash_fields(schedule) if spec is None else spec,
        timing=schedule,
        mode=mode,
        expect_gen=expect_gen,
    )


class Validator:
    """Validates the entries of bulk calls, each distinct shape once (see the module doc)."""

    def __init__(self, max_payload_bytes: int) -> None:
        self.max_payload_bytes = max_payload_bytes
        # shape -> (validated schedule, its hash fields without the payload)
        self._shapes: dict[Any, tuple[Schedule, dict[str, str]]] = {}

    def validate(
        self, entries: Iterable[Schedule | Mapping[str, Any]], *, mode: str
    ) -> tuple[list[BulkItem], list[Problem]]:
        """Every entry as a BulkItem, and every problem found: invalid fields of each entry,
        and an id given more than once."""
        items: list[BulkItem] = []
        problems: list[Problem] = []
        first: dict[str, int] = {}
        for index, entry in enumerate(entries):
            try:
                item = self._one(index, entry, mode)
            except InvalidSchedule as exc:
                found = exc.schedule_id or _id_of(entry)
                sid = None if found is None else str(found)
                problems.extend((index, sid, f, m) for f, m in exc.errors)
                continue
            seen = first.setdefault(item.schedule_id, index)
            if seen != index:
                problems.append(
                    (index, item.schedule_id, "id", f"repeats entry [{seen}]; give each id once")
                )
                continue
            items.append(item)
        return items, problems

    def _one(self, index: int, entry: Schedule | Mapping[str, Any], mode: str) -> BulkItem:
        shape = _shape(entry)
        known = self._shapes.get(shape) if shape is not None else None
        if known is None:
            schedule = self._full(entry)
            spec = hash_fields(schedule)
            if shape is not None:
                # Unbounded: at most one entry per entry given, and smaller than the item
                # each holds already (a shape cap of 10k made a million spread crons validate
                # most entries in full, and compute each one's first run alone).
                shared = {k: v for k, v in spec.items() if k != "payload"}
                self._shapes[shape] = (schedule, shared)
            return item_of(schedule, index=index, mode=mode, spec=spec)
        template, template_spec = known
        sid, payload = _id_of(entry), _payload_of(entry)
        errors: list[tuple[str, str]] = []
        if sid is None:
            errors.append(("id", "required"))
        else:
            try:
                check_name(sid, "schedule id")
            except ValueError as exc:
                errors.append(("id", str(exc)))
        body = b""
        if payload:  # none: the shape's spec as it is (an item's spec is never changed)
            try:
                body = encode_payload(payload, self.max_payload_bytes)
            except ValueError as exc:
                errors.append(("payload", str(exc)))
        if errors:
            raise InvalidSchedule(sid if isinstance(sid, str) else None, errors)
        assert isinstance(sid, str)
        spec = template_spec
        if body:
            spec = {**template_spec, "payload": body.decode()}
        return BulkItem(index, sid, template.queue, template.paused, spec, template, mode)

    def _full(self, entry: Schedule | Mapping[str, Any]) -> Schedule:
        """Validate with pydantic, as Client.add does; state fields are dropped."""
        if isinstance(entry, Schedule):
            data = entry.model_dump(exclude=set(STATE_FIELDS), exclude_unset=True)
            data.update(id=entry.id, task=entry.task)
        elif isinstance(entry, Mapping):
            data = {k: v for k, v in entry.items() if k not in STATE_FIELDS}
        else:
            raise InvalidSchedule(
                None, [("", f"give an rsched.Schedule or a dict, got {type(entry).__name__}")]
            )
        try:
            schedule = Schedule.parse(data, max_payload_bytes=self.max_payload_bytes)
        except TypeError as exc:  # a mapping whose keys are not all strings
            raise InvalidSchedule(None, [("", f"field names must be strings ({exc})")]) from None
        try:
            encode_payload(schedule.payload, self.max_payload_bytes)
        except ValueError as exc:
            raise InvalidSchedule(schedule.id, [("payload", str(exc))]) from None
        return schedule


def _shape(entry: object) -> Any:
    """Everything but id and payload, hashable; None when it cannot be (then no reuse)."""
    try:
        if isinstance(entry, Schedule):
            values = _shape_values(entry.__dict__)
            # A dict is not hashable: its labels as pairs (a dict's order is its keys' here).
            labels = tuple(values[_LABELS_AT].items())
            return (Schedule, values[:_LABELS_AT], labels, values[_LABELS_AT + 1 :])
        if isinstance(entry, Mapping):
            if not isinstance(entry.get("payload", {}), dict):
                return None  # a JSON string or a wrong type: the model reads or words it
            # The type is part of the key: 1, 1.0 and True are equal but validate apart.
            key = tuple(
                sorted(
                    (k, type(v), tuple(v.items()) if k == "labels" and isinstance(v, dict) else v)
                    for k, v in entry.items()
                    if k not in ("id", "payload") and k not in STATE_FIELDS
                )
            )
            hash(key)
            return (Mapping, key)
    except (TypeError, KeyError):  # an unhashable value, keys of mixed types, a field unset
        return None
    return None


def _id_of(entry: object) -> Any:
    if isinstance(entry, Schedule):
        return entry.id
    if isinstance(entry, Mapping):
        return entry.get("id")
    return None


def _payload_of(entry: Schedule | Mapping[str, Any]) -> Any:
    if isinstance(entry, Schedule):
        return entry.payload
    return entry.get("payload", {})
