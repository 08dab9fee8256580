"""How much a leader asks of Redis at once: the size of fire calls, due reads and spec reads,
sized by time (``fire_budget_ms``) from what fired items cost in the calls before. Pure: no
Redis, no event loop.

Batches are sized by time from the server µs each fired item cost in the calls before. Before
the first measurement an item is assumed to cost ITEM_US_START (a herd's items took 15-35 µs
inside Redis 7.0 on the VMs of docs/results.md): the first batches err on the small side.
"""

from __future__ import annotations

from rsched._core.settings import SchedulerSettings

ITEM_US_START = 40.0
# A batch never has fewer items than MIN_BATCH (the call's own costs, the lease check, the index
# read and write and a round trip, would dominate).
MIN_BATCH = 8
# How fast the per-item estimate follows a measurement: fast when items got dearer (a budget is
# a bound), slowly when cheaper; one measurement counts for at most SAMPLE_MAX_RATIO times the
# estimate (the server's process was descheduled for a moment, say).
ITEM_US_UP, ITEM_US_DOWN, SAMPLE_MAX_RATIO = 0.5, 0.2, 4.0
# Batches are sized for an item costing its mean plus DEV_WEIGHT times the mean deviation of the
# measurements (a moving average, following at DEV_RATE), and at least HEADROOM times the mean:
# the budget bounds the dearer calls too, not only the typical one. Costs rise faster than
# replies come back to show it: while Redis rehashes its keyspace (a herd's first fires create
# as many history keys as it has schedules, and the table doubles at each power of two) an item
# costs 2-2.5 times as much for dozens of calls, already sized and in flight.
DEV_WEIGHT, DEV_RATE, HEADROOM = 2.0, 0.25, 1.5
# A round's first batch: this many items, so that it goes out at the due instant, planned at once
# (the rest of the round is planned while it fires).
FIRST_BATCH = MIN_BATCH
# Calls in flight at most, however small the time budget makes batches (see in_flight).
IN_FLIGHT_MAX = 32
# A due entry costs due.lua about this share of what a fired item costs fire.lua on average
# (0.5-0.7 µs against 7-9 µs, both measured in a 100k herd on one VM), and reading one
# schedule's planning fields (plan_fields.lua) this share of what an item is taken to cost: the due
# reads' and spec reads' sizes follow the budget too. A due read re-reads the entries still
# queued to fire (left out by id), so it is sized from the average cost, without headroom:
# a smaller one would be mostly those.
DUE_ENTRY_SHARE = 1 / 12
LOAD_SHARE = 1 / 2
# Specs read per plan_fields.lua call (and per step of the prefetch), at most.
LOAD_CHUNK = 1_000
# While rounds keep finding a full window (a herd), each reads twice as many due entries as the
# last, up to this multiple of window_size: fewer rounds, so fewer pauses between them.
WINDOW_GROWTH_MAX = 8


class Batching:
    """One partition leader's sizes, following what fired items cost."""

    def __init__(self, cfg: SchedulerSettings) -> None:
        self.cfg = cfg
        self.window = cfg.window_size  # due entries a round reads at most (grows in a herd)
        # Server µs per fired item (moving estimate), and when the last fire reply arrived.
        self.item_us = ITEM_US_START
        self.item_dev = 0.0  # mean deviation of the measurements from the estimate
        self._last_reply = 0.0
        self._seen_us = self._seen_items = 0  # the store's fire totals when last measured

    def item_cost_us(self) -> float:
        """What an item is taken to cost when sizing a call: the estimate plus its spread, and
        some headroom above the estimate."""
        return max(self.item_us + DEV_WEIGHT * self.item_dev, self.item_us * HEADROOM)

    def batch_size(self) -> int:
        """Items per fire call: as many as fit in the time budget, at most batch_size."""
        fit = int(self.cfg.fire_budget_ms * 1000 / self.item_cost_us())
        return max(MIN_BATCH, min(self.cfg.batch_size, fit))

    def in_flight(self) -> int:
        """Fire calls at once: max_in_flight full batches' worth of work, in as many calls as
        the time budget cuts it into. What waits in Redis is what bridges a pause of this
        process (a busy machine deschedules it for ms at a time): smaller batches alone would
        have left Redis idle in such pauses."""
        calls = self.cfg.max_in_flight * self.cfg.batch_size // self.batch_size()
        return max(self.cfg.max_in_flight, min(IN_FLIGHT_MAX, calls))

    def due_limit(self) -> int:
        """Due entries per read: the round's window, as far as the time budget allows."""
        fit = int(self.cfg.fire_budget_ms * 1000 / (self.item_us * DUE_ENTRY_SHARE))
        return max(self.batch_size(), min(self.window, fit))

    def load_chunk(self) -> int:
        """Specs per plan_fields.lua call: as many as fit in the time budget, at most LOAD_CHUNK."""
        fit = int(self.cfg.fire_budget_ms * 1000 / (self.item_cost_us() * LOAD_SHARE))
        return max(MIN_BATCH, min(LOAD_CHUNK, fit))

    def next_window(self, full: bool) -> None:
        """After a due read: double the window while reads come back full, else start over."""
        base = self.cfg.window_size
        self.window = min(self.window * 2, base * WINDOW_GROWTH_MAX) if full else base

    def measured(
        self, items: int, sent: float, replied: float, server_us_total: int, timed_items: int
    ) -> None:
        """Learn what a fired item costs from a fire call of ``items`` that has just replied:
        from the server's time of the calls that replied since the last one measured (the
        store's running totals ``server_us_total`` over ``timed_items``), or when the server
        cannot tell, from the time between when Redis could start on this call (its sending
        or the previous reply, whichever came later) and its reply."""
        server_us = server_us_total - self._seen_us
        if server_us > 0:
            items = timed_items - self._seen_items
            if items < MIN_BATCH:  # the calls of a few items each are added up first
                return
            self._seen_us, self._seen_items = server_us_total, timed_items
        else:
            server_us = int((replied - max(sent, self._last_reply)) * 1e6)
            self._last_reply = replied
        if items < MIN_BATCH or server_us <= 0:
            return
        sample = min(server_us / items, self.item_us * SAMPLE_MAX_RATIO)
        rate = ITEM_US_UP if sample > self.item_us else ITEM_US_DOWN
        self.item_dev += DEV_RATE * (abs(sample - self.item_us) - self.item_dev)
        self.item_us += rate * (sample - self.item_us)
