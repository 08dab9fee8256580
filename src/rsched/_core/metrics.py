"""The Prometheus series of a scheduler or worker process (docs/monitoring.md lists them).

The names and labels are part of rsched's contract. No label carries a schedule id: labels are
queues, task names (only registered tasks run), policies and outcomes, all bounded.

A process exports only what it knows: a scheduler the scheduler's series, a worker the worker's
(:meth:`Metrics.serve`, called when the process starts serving its metrics), and both the
series every process exports (the deployment gauges each reads for itself, ``rsched_redis_up``,
``rsched_build_info``). A labelled counter that an alert reads with ``increase()`` is exported at
0 from the start for every label set known then: a series born at 3 would hide its first 3.

Counting is off until the process serves its metrics (``METRICS.on``, set by rsched._ops.probe), so
a process without ``--metrics-port`` pays one attribute test per batch or job. The fire path
counts a whole batch at once from the codes the fire script returns (:meth:`Metrics.fired`):
one dictionary pass, then one counter increment per distinct label set.

The series updated per fire or per job (fire lag, jobs, durations, start lag) are plain lists
and dictionaries (:class:`BulkHistogram`, :class:`LoopCounter`) that only the event loop's
thread updates: the scheduler's ticker and the worker's runners run there, and a sync handler's
thread never touches them (its run is counted by the runner that awaited it). The probe that
reads them runs on the same loop. prometheus_client's own types, which take a lock per update,
serve the rarer series (misfires, retries, reclaims, leader changes).
"""

from __future__ import annotations

import bisect
import importlib.metadata
import itertools
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from rsched._core.codes import Code
from rsched._core.errors import Retry
from rsched._core.fire_plan import FireItem
from rsched._core.job import Job

# 1 ms to 1 h: an on-time fire lands in the first few, a scheduler that was down in the last.
LAG_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
)  # fmt: skip
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
)  # fmt: skip

Role = Literal["scheduler", "worker"]

FIRED, STALE, EXCLUDED = Code.FIRED, Code.STALE, Code.EXCLUDED
# The labels (policy, action) of rsched_misfires_total, by the action of a fire item
# (rsched._core.fire_plan), which only one misfire policy makes: a late run stands for missed
# occurrences or runs one of them; the others are recorded as skipped.
MISFIRE_ACTIONS: dict[str, tuple[str, str]] = {
    "misfire": ("run_once", "run"),
    "skip": ("skip", "skip"),
    "catch_up": ("catch_up", "run"),
    "limit": ("catch_up", "skip"),
}
# The (policy, action) label sets of rsched_overlap_total.
OVERLAP_ACTIONS = (("skip", "skipped"), ("buffer_one", "buffered"), ("buffer_all", "buffered"))
RETENTION_KINDS = ("runs", "dead_letters", "history", "audit")
OUTCOMES = ("completed", "failed", "timed_out", "cancelled", "retry", "expired")
# What fire.lua did with an occurrence the overlap policy held back, by its code.
_OVERLAP_ACTIONS: dict[int, str] = {Code.SKIPPED: "skipped", Code.BUFFERED: "buffered"}
# A fire item's (spec, action, scheduled time), by a C-level getter.
_GROUP_KEY = operator.itemgetter(
    FireItem._fields.index("spec"),
    FireItem._fields.index("action"),
    FireItem._fields.index("sched"),
    FireItem._fields.index("expect"),
)
# Runs whose bookkeeping waits for one bulk update at most (see Metrics.flush_jobs).
JOBS_FLUSH = 1_000


class BulkHistogram(Collector):
    """A histogram that takes one or many observations without a lock.

    Updated only from the event loop's thread (the scheduler's ticker, the worker's runners)
    and read by the probe on the same loop; prometheus_client's Histogram takes a lock for its
    bucket and another for its sum at every observation.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        labels: Sequence[str] = (),
        before_collect: Callable[[], None] | None = None,
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        self.before_collect = before_collect
        self.bounds = list(buckets)
        # Per label values: a count per bucket (the last one is +Inf), then the sum.
        self.series: dict[tuple[str, ...], list[float]] = {}
        if not self.labels:
            self.row(())

    def row(self, key: tuple[str, ...]) -> list[float]:
        """A new series (no observation yet) for the label values ``key``."""
        row = self.series[key] = [0.0] * (len(self.bounds) + 2)
        return row

    def observe(self, value: float, key: tuple[str, ...] = ()) -> None:
        row = self.series.get(key) or self.row(key)
        row[bisect.bisect_left(self.bounds, value)] += 1
        row[-1] += value

    def observe_many(self, values: Iterable[tuple[float, int]], key: tuple[str, ...] = ()) -> None:
        """Add ``count`` observations of ``value`` for each (value, count)."""
        row, bounds = self.series.get(key) or self.row(key), self.bounds
        for value, count in values:
            row[bisect.bisect_left(bounds, value)] += count
            row[-1] += value * count

    def collect(self) -> Iterator[Metric]:
        if self.before_collect is not None:
            self.before_collect()
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        les = [*(repr(b) for b in self.bounds), "+Inf"]
        for key, row in list(self.series.items()):
            cumulative, buckets = 0.0, []
            for le, count in zip(les, row, strict=False):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(key), buckets, row[-1])
        yield family


class LoopCounter(Collector):
    """A labelled counter updated only from the event loop's thread: a dictionary, no lock
    (see BulkHistogram)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str],
        before_collect: Callable[[], None] | None = None,
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        self.before_collect = before_collect
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, key: tuple[str, ...], amount: float = 1) -> None:
        self.values[key] = self.values.get(key, 0) + amount

    def collect(self) -> Iterator[Metric]:
        if self.before_collect is not None:
            self.before_collect()
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, value in list(self.values.items()):
            family.add_metric(list(key), value)
        yield family


@dataclass(frozen=True, slots=True)
class Deployment:
    """The state of the whole deployment, as this process last read it."""

    due_backlog: int
    due_oldest_age_s: float
    unhealthy: dict[str, int]  # reason -> count (late, stuck, failing)
    queues: dict[str, dict[str, int]] = field(default_factory=dict)  # queue -> field -> count
    # state -> count (active, paused, completed): read by the leader of partition 0 only.
    schedules: dict[str, int] | None = None
    # limit template -> (jobs holding its keys, jobs waiting on them)
    limits: dict[str, tuple[int, int]] = field(default_factory=dict)


class DeploymentGauges(Collector):
    """The gauges of the whole deployment, as this process last read them (every process reads
    them, so they outlive any one process: aggregate them with max(), never sum())."""

    def __init__(self) -> None:
        self.current: Deployment | None = None

    def collect(self) -> Iterator[Metric]:
        now = self.current
        if now is None:
            return
        yield GaugeMetricFamily(
            "rsched_due_backlog", "Schedules due now and not fired yet.", value=now.due_backlog
        )
        yield GaugeMetricFamily(
            "rsched_due_oldest_age_seconds",
            "How long the most overdue schedule has been due (0 when none is).",
            value=now.due_oldest_age_s,
        )
        if now.schedules is not None:
            yield _labelled(
                "rsched_schedules", "Schedules by state.", "state", now.schedules.items()
            )
        yield _labelled(
            "rsched_schedules_unhealthy",
            "Schedules that need an operator, by reason (late: due and not fired past the "
            "misfire grace).",
            "reason",
            now.unhealthy.items(),
        )
        for name, key, doc in _QUEUE_GAUGES:
            yield _labelled(name, doc, "queue", ((q, f[key]) for q, f in now.queues.items()))
        yield _labelled(
            "rsched_limit_holders",
            "Jobs holding the keys of a limit (running, or granted and on their way to a "
            "worker), by the limit's declared key template.",
            "limit",
            ((t, h) for t, (h, _) in now.limits.items()),
        )
        yield _labelled(
            "rsched_limit_waiting",
            "Jobs waiting aside on the keys of a limit, by the limit's declared key template.",
            "limit",
            ((t, w) for t, (_, w) in now.limits.items()),
        )


_QUEUE_GAUGES = (
    ("rsched_queue_length", "length", "Entries in the queue stream (pending included)."),
    ("rsched_queue_pending", "pending", "Entries read by a worker and not acknowledged yet."),
    ("rsched_queue_delayed", "delayed", "Retries and delayed jobs waiting in the delayed set."),
    ("rsched_queue_dead", "dead", "Entries in the queue's dead-letter stream."),
    (
        "rsched_workers",
        "workers",
        "Live workers reading the queue (from the worker registry: seen within a few heartbeats).",
    ),
)


def _labelled(
    name: str, documentation: str, label: str, values: Iterable[tuple[str, int]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in values:
        family.add_metric([key], value)
    return family


class Metrics:
    """Every series of rsched; one instance per process (:data:`METRICS`). The series of every
    process are on :attr:`registry` from the start, a scheduler's and a worker's from
    :meth:`serve`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.on = False
        reg = self.registry = registry or CollectorRegistry(auto_describe=True)
        self.served: set[Role] = set()
        # Wall clock minus Redis TIME (ms), learnt from the scheduler's due reads: fire lag is
        # measured on the clock the scheduled times come from.
        self.clock_offset_ms = 0.0
        # --- scheduler -------------------------------------------------------------------
        self.fires = Counter(
            "rsched_fires",
            "Occurrences fired into a queue, by queue and origin (schedule: on time or within "
            "the misfire grace; misfire: a late run the misfire policy made).",
            ["queue", "origin"],
            registry=None,
        )
        self.fire_lag = BulkHistogram(
            "rsched_fire_lag_seconds",
            "Fire time minus due time of each occurrence fired (its scheduled time, plus the "
            "delay of a schedule's jitter).",
            LAG_BUCKETS,
        )
        self.misfires = Counter(
            "rsched_misfires",
            "Occurrences that came due while no scheduler could fire them in time, by misfire "
            "policy and action (run: a late run stands for them or runs them; skip: recorded "
            "as skipped).",
            ["policy", "action"],
            registry=None,
        )
        self.excluded = Counter(
            "rsched_occurrences_excluded",
            "Occurrences not run because an exclusion calendar of their schedule excludes them, "
            "by queue.",
            ["queue"],
            registry=None,
        )
        self.overlap = Counter(
            "rsched_overlap",
            "Occurrences the overlap policy held back because a run was unfinished, by policy "
            "and action (skipped, buffered).",
            ["policy", "action"],
            registry=None,
        )
        self.stale_refused = Counter(
            "rsched_stale_fires_refused",
            "Fires refused by the lease or version check: double fires that did not happen.",
            registry=None,
        )
        self.is_leader = Gauge(
            "rsched_is_leader",
            "1 while this scheduler holds a lease (of at least one partition).",
            registry=None,
        )
        self.led_partitions = Gauge(
            "rsched_led_partitions",
            "Partitions whose lease this scheduler holds (summed over schedulers: the led ones).",
            registry=None,
        )
        self.partitions = Gauge(
            "rsched_partitions", "The deployment's number of partitions.", registry=None
        )
        self.leader_changes = Counter(
            "rsched_leader_changes",
            "Times this scheduler acquired a partition's lease (summed over schedulers: leader "
            "changes).",
            registry=None,
        )
        self.retention_removed = Counter(
            "rsched_retention_removed",
            "Entries the leader's retention sweep removed, by kind (runs, dead_letters, history).",
            ["kind"],
            registry=None,
        )
        # --- worker ----------------------------------------------------------------------
        # Runs ended and start lags not counted yet: a job's bookkeeping is an append, and the
        # series are brought up to date in bulk (at a scrape, or every JOBS_FLUSH runs).
        self._ended: list[tuple[Job, str, float]] = []
        self._start_lags: list[tuple[float, int]] = []
        self._timeouts: dict[str, float] = {}  # task -> the timeout its gauge shows
        # Updated by the runners on the event loop (never from a handler's thread): no lock.
        self.jobs = LoopCounter(
            "rsched_jobs",
            "Job runs that ended, by task and outcome (completed, failed, timed_out, "
            "cancelled, retry, expired: not started within its start deadline, never run).",
            ["task", "outcome"],
            self.flush_jobs,
        )
        self.job_duration = BulkHistogram(
            "rsched_job_duration_seconds",
            "How long a handler ran, by task.",
            DURATION_BUCKETS,
            ["task"],
            self.flush_jobs,
        )
        self.job_start_lag = BulkHistogram(
            "rsched_job_start_lag_seconds",
            "Handler start minus scheduled time, for first attempts (worker clock).",
            LAG_BUCKETS,
            before_collect=self.flush_jobs,
        )
        self.job_timeout = Gauge(
            "rsched_job_timeout_seconds",
            "The timeout of the task's latest job (to compare durations with).",
            ["task"],
            registry=None,
        )
        self.retries = Counter(
            "rsched_retries", "Attempts scheduled for a retry, by task.", ["task"], registry=None
        )
        self.reclaims = Counter(
            "rsched_reclaims",
            "Entries this worker took over from another (idle past the visibility timeout).",
            ["queue"],
            registry=None,
        )
        self.limit_throttled = Counter(
            "rsched_limit_throttled",
            "Jobs this worker read that had to wait on a limit key, by the limit's declared key "
            "template (never the filled key).",
            ["limit"],
            registry=None,
        )
        self.auto_paused = Counter(
            "rsched_schedules_auto_paused",
            "Schedules this worker paused because their last pause_after_failures runs in a row "
            "ended dead-lettered.",
            registry=None,
        )
        self.running = 0
        in_progress = Gauge(
            "rsched_jobs_in_progress", "Handlers running in this worker now.", registry=None
        )
        in_progress.set_function(lambda: self.running)
        self._series: dict[Role, tuple[Collector, ...]] = {
            "scheduler": (
                self.fires, self.fire_lag, self.misfires, self.excluded, self.overlap,
                self.stale_refused,
                self.is_leader, self.led_partitions, self.partitions, self.leader_changes,
                self.retention_removed,
            ),
            "worker": (
                self.jobs, self.job_duration, self.job_start_lag, self.job_timeout,
                self.retries, self.reclaims, self.limit_throttled, self.auto_paused,
                in_progress,
            ),
        }  # fmt: skip
        # --- every process ---------------------------------------------------------------
        self.writes_unreplicated = Counter(
            "rsched_writes_unreplicated",
            "Writes (fire batches, a worker's acks) that fewer replicas than "
            "durability_replicas confirmed within durability_timeout_ms, by op (the script).",
            ["op"],
            registry=reg,
        )
        self.redis_up = Gauge(
            "rsched_redis_up",
            "1 when this process's last read of the deployment gauges reached Redis, else 0.",
            registry=reg,
        )
        self.deployment = DeploymentGauges()
        reg.register(self.deployment)
        Gauge(
            "rsched_build_info", "rsched's version (always 1).", ["version"], registry=reg
        ).labels(package_version()).set(1)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)

    def serve(
        self,
        role: Role,
        *,
        tasks: Iterable[str] = (),
        queues: Iterable[str] = (),
        limits: Iterable[str] = (),
    ) -> None:
        """Export the series of a scheduler or a worker (``role``) from now on, each labelled
        counter that alerts read at 0 for every label set known now: a worker's ``tasks``,
        ``queues`` and the key templates of its tasks' ``limits``. Serving a role twice (two
        in one process, as the tests do) adds only the new label sets."""
        if role not in self.served:
            self.served.add(role)
            for collector in self._series[role]:
                self.registry.register(collector)
        if role == "scheduler":
            for policy, action in MISFIRE_ACTIONS.values():
                self.misfires.labels(policy, action)
            for policy, action in OVERLAP_ACTIONS:
                self.overlap.labels(policy, action)
            for kind in RETENTION_KINDS:
                self.retention_removed.labels(kind)
            self.writes_unreplicated.labels("fire")
            return
        for task in tasks:
            self.retries.labels(task)
            for outcome in OUTCOMES:
                self.jobs.values.setdefault((task, outcome), 0)
        for queue in queues:
            self.reclaims.labels(queue)
        for template in limits:
            self.limit_throttled.labels(template)
        for op in ("complete", "retry", "dead"):
            self.writes_unreplicated.labels(op)

    # --- scheduler -------------------------------------------------------------------------

    def redis_now(self, now_ms: int) -> None:
        """Learn the offset of Redis TIME from the wall clock (at a due read's reply)."""
        self.clock_offset_ms = time.time() * 1000 - now_ms

    def fired(self, items: Sequence[FireItem], codes: Sequence[int]) -> None:
        """Count one fire batch from its codes, in bulk. Misfires are counted here, from what
        the script did, not where they are planned: an item planned again after a failed call
        counts once."""
        now_ms = time.time() * 1000 - self.clock_offset_ms
        fired: dict[tuple[str, str], int] = {}
        lags: dict[int, int] = {}  # scheduled time -> fires (a herd shares a few)
        if codes.count(FIRED) == len(codes):
            # Every item fired (a herd's batches): count runs of items that share spec, action
            # and scheduled time (consecutive in a batch), without a Python step per item.
            # Specs compare by identity first (a batch shares a few cached instances).
            late = False
            for (spec, action, sched, expect), run in itertools.groupby(map(_GROUP_KEY, items)):
                n = len(list(run))
                key = (spec.queue, "schedule" if action == "fire" else "misfire")
                fired[key] = fired.get(key, 0) + n
                # On time, an occurrence is due when its index score says (a jitter's delay
                # after its time); a late one counts from its time.
                due = expect if action == "fire" else sched
                lags[due] = lags.get(due, 0) + n
                late = late or action != "fire"
            if late:
                self._misfires(items, codes)
        else:
            self._fired_mixed(items, codes, fired, lags)
            self._misfires(items, codes)
        for (queue, origin), n in fired.items():
            self.fires.labels(queue, origin).inc(n)
        self.fire_lag.observe_many((max(0.0, (now_ms - s) / 1000), n) for s, n in lags.items())

    def _fired_mixed(
        self,
        items: Sequence[FireItem],
        codes: Sequence[int],
        fired: dict[tuple[str, str], int],
        lags: dict[int, int],
    ) -> None:
        held: dict[tuple[str, str], int] = {}
        stale = 0
        for item, code in zip(items, codes, strict=True):
            if code == FIRED:
                key = (item.spec.queue, "schedule" if item.action == "fire" else "misfire")
                fired[key] = fired.get(key, 0) + 1
                due = item.expect if item.action == "fire" else item.sched
                lags[due] = lags.get(due, 0) + 1
            elif code == STALE:
                stale += 1
            elif code == EXCLUDED:
                self.excluded.labels(item.spec.queue).inc()
            elif code in _OVERLAP_ACTIONS:
                key = (item.spec.overlap, _OVERLAP_ACTIONS[code])
                held[key] = held.get(key, 0) + 1
        for (policy, action), n in held.items():
            self.overlap.labels(policy, action).inc(n)
        if stale:
            self.stale_refused.inc(stale)

    def _misfires(self, items: Sequence[FireItem], codes: Sequence[int]) -> None:
        """The late occurrences the applied items of the misfire policies stand for (a code
        above 0: run, held back by the overlap policy, or recorded as skipped)."""
        counts: dict[str, int] = {}
        for item, code in zip(items, codes, strict=True):
            if item.action in MISFIRE_ACTIONS and code > 0:
                counts[item.action] = counts.get(item.action, 0) + item.missed
        for action, n in counts.items():
            self.misfires.labels(*MISFIRE_ACTIONS[action]).inc(n)

    # --- worker ----------------------------------------------------------------------------

    def job_started(self, job: Job) -> None:
        self.running += 1
        if job.attempt == 1 and job.scheduled_ms is not None:
            self._start_lags.append((max(0.0, time.time() - job.scheduled_ms / 1000), 1))

    def job_ended(
        self,
        job: Job,
        duration_s: float,
        *,
        cancelled: bool,
        timed_out: bool,
        error: BaseException | None,
    ) -> None:
        """A run ended: cancelled (cancel_previous), timed out, raised ``error``, or completed."""
        if error is None and not timed_out and not cancelled:
            how = "completed"
        else:
            how = _failure(cancelled=cancelled, timed_out=timed_out, error=error)
            if how != "cancelled" and not job.ends_with(error):
                self.retries.labels(job.task).inc()
        self._ended.append((job, how, duration_s))
        if len(self._ended) >= JOBS_FLUSH:
            self.flush_jobs()

    def flush_jobs(self) -> None:
        """Count the runs ended since the last flush into the job series."""
        ended, self._ended = self._ended, []
        lags, self._start_lags = self._start_lags, []
        self.job_start_lag.observe_many(lags)
        counts, durations = self.jobs.values, self.job_duration
        rows: dict[str, list[float]] = {}  # task -> its duration row, looked up once a flush
        last: dict[str, Job] = {}
        bounds, where = durations.bounds, bisect.bisect_left
        for job, how, duration_s in ended:
            task = job.task
            key = (task, how)
            counts[key] = counts.get(key, 0) + 1
            row = rows.get(task)
            if row is None:
                row = rows[task] = durations.series.get((task,)) or durations.row((task,))
                last[task] = job
            row[where(bounds, duration_s)] += 1
            row[-1] += duration_s
        for task, job in last.items():
            timeout = job.timeout_s
            if self._timeouts.get(task) != timeout:
                self._timeouts[task] = timeout
                self.job_timeout.labels(task).set(timeout)


def _failure(*, cancelled: bool, timed_out: bool, error: BaseException | None) -> str:
    if cancelled:
        return "cancelled"
    if timed_out:
        return "timed_out"
    return "retry" if isinstance(error, Retry) else "failed"


def package_version() -> str:
    """The installed rsched's version (the build_info series, the User-Agent of HTTP calls)."""
    try:
        return importlib.metadata.version("rsched")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


METRICS = Metrics()
