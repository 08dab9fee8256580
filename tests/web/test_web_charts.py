"""The dashboard's charts and what pages derive for the on-call (web/_charts.py, web/_views.py):
SVG built on the server, failure streaks, events and dead letters grouped. Pure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from xml.etree import ElementTree

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

from rsched import DeadLetter, HealthEvent, RunRecord
from rsched._core.activity import activity_of
from rsched.web import _charts as charts
from rsched.web import _views as views

T0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(
        str(svg).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    )


NS = "{http://www.w3.org/2000/svg}"


def test_lines_draw_one_polyline_per_series_and_a_tooltip_per_point() -> None:
    svg = charts.lines(
        "two <series>",
        [charts.Series("a", [1, 2, None, 4, 5], "c-a"), charts.Series("b", [0, 0, 0, 0, 9], "c-b")],
        ["t0", "t1", "t2", "t3", "t4"],
        [(0, "t0"), (4, "t4")],
    )
    root = parse(svg)
    assert root.get("aria-label") == "two <series>"  # escaped in the text, read back whole
    assert "two &lt;series&gt;" in svg
    lines = root.findall(f"{NS}polyline")
    assert [p.get("class") for p in lines] == ["line c-a", "line c-a", "line c-b"]  # a gap splits
    titles = [t.text for t in root.iter(f"{NS}title")]
    assert titles[2] == "t2: b 0"
    assert titles[4] == "t4: a 5, b 9"
    axis = [t.text for t in root.iter(f"{NS}text")]
    assert "10" in axis  # the round maximum above 9
    assert {"t0", "t4"} <= set(axis)


def test_bars_show_every_run_even_one_of_no_time() -> None:
    svg = charts.bars(
        "runs", [charts.Bar(0, "o-completed", "fast"), charts.Bar(250, "o-dead", "slow")], unit="ms"
    )
    rects = list(parse(svg).iter(f"{NS}rect"))
    assert [r.get("class") for r in rects] == ["bar o-completed", "bar o-dead"]
    assert float(rects[0].get("height") or 0) >= 1
    assert float(rects[1].get("height") or 0) > float(rects[0].get("height") or 0)
    assert charts.nice_max(0) == 1
    assert charts.nice_max(260) == 500
    assert charts.nice_max(1000) == 1000


def test_the_overview_charts_render_an_empty_hour() -> None:
    act = activity_of([], int(T0.timestamp() * 1000))
    drawn = views.activity_charts(act, "Europe/Rome")
    assert set(drawn) == {"minutes", "hours", "lag"}
    for svg in drawn.values():
        parse(svg)
    assert "09:" in drawn["minutes"] or "10:" in drawn["minutes"]  # the viewer's zone
    assert views.activity_totals(act)["fired"] == 0


def run(exec_id: str, status: str, at: datetime, duration_ms: float | None = None) -> views.Run:
    return views.Run(
        exec_id, status=status, fired_ms=int(at.timestamp() * 1000), duration_ms=duration_ms
    )


def test_failure_streak_starts_at_the_oldest_failure_in_a_row() -> None:
    found = [  # newest first
        run("e5", "queued", T0 + timedelta(minutes=5)),
        run("e4", "dead", T0 + timedelta(minutes=4)),
        run("e3", "failed", T0 + timedelta(minutes=3)),
        run("e2", "dead", T0 + timedelta(minutes=2)),
        run("e1", "completed", T0 + timedelta(minutes=1)),
        run("e0", "dead", T0),
    ]
    streak = views.failure_streak(found)
    assert streak == views.Streak(int((T0 + timedelta(minutes=2)).timestamp() * 1000), 3, False)
    assert views.failure_streak(found[4:]) is None
    every = views.failure_streak(found[1:4])
    assert every is not None
    assert every.at_least  # reaches the oldest run kept
    svg = views.run_chart([run("e1", "completed", T0, 120.0), run("e0", "dead", T0)], "UTC", 0)
    assert "completed, 120ms" in svg or "completed, 0.12s" in svg or "completed, 120 ms" in svg


def logged(exec_id: str, status: str, ended: datetime, took_ms: int, **fields: Any) -> RunRecord:
    return RunRecord(
        exec_id, status, "t", "default", schedule_id="s", fired_at=ended - timedelta(seconds=1),
        started_at=ended - timedelta(milliseconds=took_ms), ended_at=ended, **fields,
    )  # fmt: skip


def test_runs_from_the_log_one_per_execution_its_newest_record_first() -> None:
    records = [  # newest first, as the runs log reads
        logged("s@3", "completed", T0 + timedelta(minutes=3), 40),
        logged("s@2", "completed", T0 + timedelta(minutes=2, seconds=30), 250, attempt=2),
        logged("s@2", "failed", T0 + timedelta(minutes=2), 900, attempt=1,
               error_type="ValueError", error="down"),
        logged("s@1", "skipped", T0 + timedelta(minutes=1), 0, reason="excluded",
               error="calendar holidays"),
        logged("s@0", "dead", T0, 10, error_type="KeyError", error="k"),
    ]  # fmt: skip
    found = views.logged_runs(records, known=["s@3"])  # s@3: the history has it
    assert [(r.execution_id, r.status, r.duration_ms) for r in found] == [
        ("s@2", "completed", 250.0),  # how it ended, its last attempt's time
        ("s@1", "skipped (excluded)", 0.0),
        ("s@0", "dead", 10.0),
    ]
    assert (found[1].excluded_by, found[1].error) == ("holidays", "")
    assert found[2].error == "KeyError: k"
    svg = views.run_chart(found, "UTC", 0)
    assert [r.get("class") for r in parse(svg).iter(f"{NS}rect")] == [
        "bar o-dead", "bar o-skipped", "bar o-completed",
    ]  # fmt: skip
    assert "skipped, excluded by holidays" in svg


async def test_older_runs_are_read_once_per_oldest_kept_run() -> None:
    from rsched.web._pages import OlderRuns

    reads: list[str] = []

    def reader(name: str) -> Callable[[], Awaitable[list[views.Run]]]:
        async def read() -> list[views.Run]:
            reads.append(name)
            return [run(name, "completed", T0)]

        return read

    cache = OlderRuns(size=2)
    for _ in range(3):  # a page and its refreshes: one read
        assert [r.execution_id for r in await cache.get(("s", "s@1"), reader("a"))] == ["a"]
    await cache.get(("s", "s@2"), reader("b"))  # a new run pushed s@1 out of the history
    await cache.get(("t", "t@1"), reader("c"))  # a third schedule: the first read is dropped
    await cache.get(("s", "s@2"), reader("b"))
    await cache.get(("s", "s@1"), reader("a"))
    assert reads == ["a", "b", "c", "a"]


def event(kind: str, at: datetime, **fields: Any) -> HealthEvent:
    sid = fields.pop("schedule_id", None)
    return HealthEvent(id="1-0", kind=kind, at=at, schedule_id=sid, fields=fields)


def test_events_alike_in_a_row_fold_into_one_line() -> None:
    events = [  # newest first
        event("dead_letter", T0 + timedelta(seconds=3), task="a", entry_id="3"),
        event("dead_letter", T0 + timedelta(seconds=2), task="a", entry_id="2"),
        event("dead_letter", T0 + timedelta(seconds=1), task="b", entry_id="1"),
        event("schedule_late", T0, schedule_id="s"),
        event("dead_letter", T0, task="a", entry_id="0"),
    ]
    groups = views.event_groups(events)
    assert [(g.newest.fields.get("task"), g.count) for g in groups] == [
        ("a", 2), ("b", 1), (None, 1), ("a", 1),
    ]  # fmt: skip
    assert groups[0].oldest_at == T0 + timedelta(seconds=2)
    only = views.event_groups(events, "dead_letter")
    assert [g.count for g in only] == [2, 1, 1]


def letter(task: str, error_type: str, at: datetime, sid: str = "") -> DeadLetter:
    return DeadLetter(
        entry_id="1-0", queue="q", execution_id="x", task=task, schedule_id=sid or None,
        payload=None, attempt=1, reason="max_retries", error_type=error_type,
        error_message="m", traceback="", deliveries=1, dead_at=at,
    )  # fmt: skip


def test_dead_letters_group_by_task_and_error() -> None:
    letters = [
        letter("a", "ValueError", T0, "s1"),
        letter("a", "ValueError", T0 + timedelta(seconds=5), "s2"),
        letter("a", "KeyError", T0),
        letter("b", "ValueError", T0),
    ]
    groups = views.letter_groups(letters)
    assert (groups[0].task, groups[0].error_type, groups[0].count) == ("a", "ValueError", 2)
    assert groups[0].newest.dead_at == T0 + timedelta(seconds=5)
    assert groups[0].schedules == ("s1", "s2")
    assert len(groups) == 3
