"""One rule per input: a schedule and a one-off job refuse the same values with the same words."""

from __future__ import annotations

from typing import Any, cast

import pytest
from redis.asyncio import Redis

from rsched import InvalidJob, InvalidSchedule, Schedule
from rsched._core.keys import Keys
from rsched._store.queues import QueueStore

BAD = [
    ("max_retries", -1),
    ("max_retries", 1001),
    ("retry_base_s", 0),
    ("retry_multiplier", 0.5),
    ("retry_multiplier", 101),
    ("retry_max_s", float("inf")),
    ("retry_jitter", 1.5),
    ("timeout_s", -5),
    ("start_deadline", 0),
    ("start_deadline", -30),
    ("start_deadline", "0.0001s"),
    ("start_deadline", "367d"),
    ("start_deadline", "soon"),
    ("start_deadline", True),
    ("queue", "a b"),
    ("queue", "q" * 201),
    ("task", "x*"),
    ("payload", {"x": object()}),
]


def _schedule_error(field: str, value: Any) -> str:
    data = {"id": "a", "task": "t", "every": 60, field: value}
    with pytest.raises(InvalidSchedule) as caught:
        Schedule(**data)
    return dict(caught.value.errors)[field]


@pytest.mark.parametrize(("field", "value"), BAD)
async def test_schedule_and_enqueue_refuse_alike(field: str, value: Any) -> None:
    # Validation comes before any Redis call: the store needs no server here.
    store = QueueStore(cast(Redis, None), Keys("rules"))
    kwargs: dict[str, Any] = {"task": "t", field: value}
    with pytest.raises(InvalidJob) as caught:
        await store.enqueue(**kwargs)
    assert str(caught.value) == f"{field}: {_schedule_error(field, value)}"


def test_queue_names_have_the_bounds_of_every_name() -> None:
    assert Schedule(id="a", task="t", every=60, queue="q" * 200).queue == "q" * 200


async def test_retry_window_is_checked_for_jobs_too() -> None:
    store = QueueStore(cast(Redis, None), Keys("rules"))
    with pytest.raises(InvalidJob, match="retry_max_s must be at least retry_base_s"):
        await store.enqueue("t", retry_base_s=10, retry_max_s=5)
    with pytest.raises(InvalidSchedule, match="retry_max_s must be at least retry_base_s"):
        Schedule(id="a", task="t", every=60, retry_base_s=10, retry_max_s=5)


@pytest.mark.parametrize("value", ["2d", 0, -1, "soon", True])
async def test_schedule_and_enqueue_refuse_a_debounce_alike(value: Any) -> None:
    store = QueueStore(cast(Redis, None), Keys("rules"))
    with pytest.raises(InvalidJob) as caught:
        await store.enqueue("t", debounce_key="k", debounce=value)
    assert str(caught.value) == f"debounce: {_schedule_error('debounce', value)}"


@pytest.mark.parametrize("value", [0, -1, 1001, 2.5, "3x", True, "1e3"])
def test_pause_after_failures_is_a_whole_number_from_1_to_1000(value: Any) -> None:
    assert _schedule_error("pause_after_failures", value).startswith(
        "give a whole number from 1 to 1000 (failed runs in a row)"
    )


def test_pause_after_failures_and_a_start_deadline_read_as_given() -> None:
    s = Schedule(id="a", task="t", every=60, pause_after_failures="7", start_deadline="1h30m")
    assert (s.pause_after_failures, s.start_deadline) == (7, 5400)
    assert Schedule(id="a", task="t", every=60, start_deadline=None).start_deadline is None
    with pytest.raises(InvalidSchedule, match="start_deadline or debounce, not both"):
        Schedule(id="a", task="t", every=60, debounce=1, start_deadline=60)
