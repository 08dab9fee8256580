"""The leader's sizes (rsched._scheduler.batching): fire batches, calls in flight, due reads and
spec reads, from the measured cost of a fired item. Pure arithmetic: no server."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rsched._core.settings import SchedulerSettings
from rsched._scheduler import batching
from rsched._scheduler.batching import (
    DUE_ENTRY_SHARE,
    HEADROOM,
    IN_FLIGHT_MAX,
    ITEM_US_START,
    LOAD_CHUNK,
    MIN_BATCH,
    SAMPLE_MAX_RATIO,
    WINDOW_GROWTH_MAX,
    Batching,
)

CFG = SchedulerSettings()  # a budget of 3 ms, batches of 500 at most, 4 calls in flight


class Calls:
    """Fire calls that replied, as the store's running totals of server µs and items count
    them."""

    def __init__(self, sizing: Batching) -> None:
        self.sizing = sizing
        self.server_us = 0
        self.items = 0

    def replied(self, items: int, us_each: float) -> None:
        self.server_us += round(items * us_each)
        self.items += items
        self.sizing.measured(items, 0.0, 0.0, self.server_us, self.items)


def test_the_module_is_pure() -> None:
    tree = ast.parse(Path(batching.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= {"__future__", "rsched._core.settings"}


def test_before_any_measurement_batches_err_on_the_small_side() -> None:
    sizing = Batching(CFG)
    assert sizing.item_cost_us() == ITEM_US_START * HEADROOM
    assert sizing.batch_size() == int(3_000 / (ITEM_US_START * HEADROOM))


@pytest.mark.parametrize(
    ("budget_ms", "batch_size", "expected"),
    [
        (0.01, 500, MIN_BATCH),  # nothing fits: the smallest batch all the same
        (1_000, 500, 500),  # everything fits: batch_size caps it
        (3.0, 20, 20),
        (3.0, 500, 50),  # 3,000 µs / (40 µs * 1.5)
    ],
)
def test_batch_size_is_what_fits_in_the_budget(
    budget_ms: float, batch_size: int, expected: int
) -> None:
    cfg = SchedulerSettings(fire_budget_ms=budget_ms, batch_size=batch_size)
    assert Batching(cfg).batch_size() == expected


def test_batch_size_follows_the_measured_cost() -> None:
    sizing = Batching(CFG)
    calls = Calls(sizing)
    start = sizing.batch_size()
    # Items that cost 5 µs inside Redis: more fit in the budget (up to batch_size), with the
    # headroom, once the spread of the first measurements against the initial guess died down.
    for _ in range(60):
        calls.replied(100, 5)
    fit = min(CFG.batch_size, int(3_000 / (5 * HEADROOM)))
    assert fit - 1 <= sizing.batch_size() <= fit  # the estimate converges within rounding
    assert sizing.batch_size() > start
    # Dearer again (a slow minute): the batch shrinks at once, not over many calls.
    calls.replied(100, 60)
    assert sizing.batch_size() < 3_000 // 5 // 2


def test_a_spread_of_costs_makes_batches_smaller() -> None:
    # The same mean cost, steady or spread: a spread is sized for its dearer calls.
    def settled(costs: list[int]) -> int:
        sizing = Batching(CFG)
        calls = Calls(sizing)
        for _ in range(40):
            for us in costs:
                calls.replied(100, us)
        return sizing.batch_size()

    assert settled([6, 14]) < settled([10, 10])


def test_one_measurement_moves_the_estimate_a_bounded_step() -> None:
    sizing = Batching(CFG)
    Calls(sizing).replied(100, 10_000)  # the server's process was descheduled for a moment
    assert sizing.item_us <= ITEM_US_START + 0.5 * (ITEM_US_START * SAMPLE_MAX_RATIO - 40)


def test_calls_of_a_few_items_are_added_up_before_they_count() -> None:
    sizing = Batching(CFG)
    calls = Calls(sizing)
    calls.replied(MIN_BATCH - 1, 5)
    assert sizing.item_us == ITEM_US_START
    calls.replied(1, 5)  # now MIN_BATCH items since the last measurement
    assert sizing.item_us < ITEM_US_START


def test_without_the_servers_time_the_wait_for_the_reply_is_measured() -> None:
    sizing = Batching(CFG)
    # Sent at 1 s, replied at 1.5 s: 500,000 µs for 50,000 items.
    sizing.measured(50_000, 1.0, 1.5, 0, 0)
    assert sizing.item_us == pytest.approx(ITEM_US_START + 0.2 * (10 - ITEM_US_START))
    # The next call was sent before that reply: Redis could start on it only at the reply.
    before = sizing.item_us
    sizing.measured(50_000, 0.5, 1.75, 0, 0)  # 250,000 µs from the previous reply: 5 µs each
    assert sizing.item_us == pytest.approx(before + 0.2 * (5 - before))


def test_calls_in_flight_carry_max_in_flight_full_batches() -> None:
    sizing = Batching(CFG)
    # Batches of 50 instead of 500: ten times as many calls, up to IN_FLIGHT_MAX.
    assert sizing.in_flight() == IN_FLIGHT_MAX
    cheap = Batching(SchedulerSettings(fire_budget_ms=1_000))
    assert cheap.in_flight() == CFG.max_in_flight  # full batches: max_in_flight calls
    fewer = Batching(SchedulerSettings(batch_size=100, max_in_flight=2))
    assert fewer.in_flight() == 2 * 100 // 50


def test_a_due_read_is_the_window_as_far_as_the_budget_allows() -> None:
    sizing = Batching(CFG)
    assert sizing.due_limit() == int(3_000 / (ITEM_US_START * DUE_ENTRY_SHARE))
    small = Batching(SchedulerSettings(window_size=100))
    assert small.due_limit() == 100
    tiny = Batching(SchedulerSettings(window_size=1))
    assert tiny.due_limit() == tiny.batch_size()  # never less than one batch


def test_the_window_grows_while_reads_come_back_full() -> None:
    sizing = Batching(SchedulerSettings(window_size=100))
    grown = []
    for _ in range(5):
        sizing.next_window(full=True)
        grown.append(sizing.window)
    assert grown == [200, 400, 800, 100 * WINDOW_GROWTH_MAX, 100 * WINDOW_GROWTH_MAX]
    sizing.next_window(full=False)
    assert sizing.window == 100


def test_spec_reads_are_bounded() -> None:
    assert Batching(CFG).load_chunk() == int(3_000 / (ITEM_US_START * HEADROOM * 0.5))
    assert Batching(SchedulerSettings(fire_budget_ms=1_000)).load_chunk() == LOAD_CHUNK
    assert Batching(SchedulerSettings(fire_budget_ms=0.01)).load_chunk() == MIN_BATCH
