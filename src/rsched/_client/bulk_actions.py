"""Many schedules or jobs at once: finding them by filter (labels, task, queue) and acting on
each by id (pause, resume, remove, trigger, cancel), with what became of each (docs/labels.md).

Each action is the single one (Client.pause, ...) per id, IN_FLIGHT of them in flight at once
(rsched._store.partitions.gather), so a thousand ids take a few dozen round trips' time; an id
that is gone or completed is an outcome, not an error, so one stale id never stops the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial

from rsched._core.bulk import BulkResult
from rsched._core.errors import (
    InvalidArgument,
    JobNotFound,
    ScheduleCompleted,
    ScheduleNotFound,
)
from rsched._core.rules import check_execution_id, check_labels, check_name, label_pairs
from rsched._store.partitions import gather

#: Exceptions of one id's action that are its outcome.
_OUTCOME_OF: tuple[tuple[type[Exception], str], ...] = (
    (ScheduleNotFound, "not_found"),
    (JobNotFound, "not_found"),
    (ScheduleCompleted, "completed"),
)


def check_ids(ids: Iterable[str], what: str = "schedule id") -> list[str]:
    """``ids`` as a list without repeats (in their order), each a valid schedule id (or
    execution id); raises InvalidArgument naming ``ids``."""
    if isinstance(ids, str):
        raise InvalidArgument("ids", f"give a list of ids, e.g. [{ids!r}], not a single one")
    out = list(dict.fromkeys(ids))
    for sid in out:
        try:
            if what == "execution id":
                check_execution_id(sid)
            else:
                check_name(sid, what)
        except ValueError as exc:
            raise InvalidArgument("ids", str(exc)) from None
    return out


def check_filter(
    labels: Mapping[str, object] | Iterable[str] | None, task: str | None, queue: str | None
) -> list[str]:
    """The ``k=v`` pairs of a filter's ``labels`` (all must match); raises InvalidArgument
    naming the bad part, or when no filter is given at all (a bulk action never means "every
    schedule" by omission)."""
    try:
        pairs = label_pairs(check_labels(labels if labels is None else as_labels(labels)))
    except ValueError as exc:
        raise InvalidArgument("labels", str(exc)) from None
    for name, value in (("task", task), ("queue", queue)):
        if value is not None:
            try:
                check_name(value, f"{name} name")
            except ValueError as exc:
                raise InvalidArgument(name, str(exc)) from None
    if not pairs and task is None and queue is None:
        raise InvalidArgument(
            "labels", "give a filter (labels, task or queue): an empty one would select everything"
        )
    return pairs


def as_labels(labels: Mapping[str, object] | Iterable[str]) -> dict[str, object] | list[str]:
    """Labels given as a mapping or as ``"k=v"`` texts, in the forms check_labels reads (a
    single text stays one: ``"team=a,env=b"``)."""
    if isinstance(labels, str):
        return [labels]
    return dict(labels) if isinstance(labels, Mapping) else list(labels)


async def each_id(ids: list[str], act: Callable[[str], Awaitable[str]]) -> BulkResult:
    """``act(id)`` for every id, concurrently; each id's outcome is what it returns, or
    ``not_found`` / ``completed`` for those errors."""

    async def one(sid: str) -> str:
        try:
            return await act(sid)
        except Exception as exc:
            for kind, outcome in _OUTCOME_OF:
                if isinstance(exc, kind):
                    return outcome
            raise

    outcomes = await gather([partial(one, sid) for sid in ids])
    return BulkResult(dict(zip(ids, outcomes, strict=True)))
