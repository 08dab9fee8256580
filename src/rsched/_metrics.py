"""The Prometheus series of a scheduler or worker process (docs/monitoring.md lists them).

The names and labels are part of rsched's contract. No label carries a schedule id: labels are
queues, task names (only registered tasks run), policies and outcomes, all bounded.

Counting is off until the process serves its metrics (``METRICS.on``, set by rsched._probe), so
a process without ``--metrics-port`` pays one attribute test per batch or job. The fire path
counts a whole batch at once from the codes the fire script returns (:meth:`Metrics.fired`):
one dictionary pass, then one counter increment per distinct label set; the fire-lag histogram
is a plain list the event loop alone updates (:class:`BulkHistogram`), read by the probe that
runs on the same loop. Job counters are prometheus_client's, which are thread-safe.
"""

from __future__ import annotations

import bisect
import importlib.metadata
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rsched._codes import Code
from rsched._errors import Retry
from rsched._job import Job
from rsched._plan import FireItem

# 1 ms to 1 h: an on-time fire lands in the first few, a scheduler that was down in the last.
LAG_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
)  # fmt: skip
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
)  # fmt: skip

FIRED, SKIPPED, BUFFERED, MISFIRE_SKIPPED, STALE = (
    Code.FIRED,
    Code.SKIPPED,
    Code.BUFFERED,
    Code.MISFIRE_SKIPPED,
    Code.STALE,
)
# What fire.lua did with an occurrence the overlap policy held back, by its code.
_OVERLAP_ACTIONS: dict[int, str] = {SKIPPED: "skipped", BUFFERED: "buffered"}


class BulkHistogram(Collector):
    """A histogram without labels that takes many observations at once.

    Updated only from the event loop's thread (the scheduler's ticker) and read by the probe on
    the same loop, so it needs no lock; prometheus_client's Histogram takes one per value.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe_many(self, values: Iterable[tuple[float, int]]) -> None:
        """Add ``count`` observations of ``value`` for each (value, count)."""
        bounds, counts = self.bounds, self.counts
        for value, count in values:
            counts[bisect.bisect_left(bounds, value)] += count
            self.sum += value * count

    def collect(self) -> Iterator[Metric]:
        cumulative, buckets = 0, []
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(cumulative)))
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], buckets, self.sum)
        yield family


@dataclass(frozen=True, slots=True)
class Deployment:
    """The state of the whole deployment, as the leading scheduler last read it."""

    due_backlog: int
    due_oldest_age_s: float
    schedules: dict[str, int]  # state -> count (active, paused, completed)
    unhealthy: dict[str, int]  # reason -> count (late)
    queues: dict[str, dict[str, int]] = field(default_factory=dict)  # queue -> field -> count


class DeploymentGauges(Collector):
    """The gauges of the whole deployment: exported only by the scheduler that computed them
    (the leader), so a sum or max over schedulers counts every schedule once."""

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
        yield _labelled("rsched_schedules", "Schedules by state.", "state", now.schedules.items())
        yield _labelled(
            "rsched_schedules_unhealthy",
            "Schedules that need an operator, by reason (late: due and not fired past the "
            "misfire grace).",
            "reason",
            now.unhealthy.items(),
        )
        for name, key, doc in _QUEUE_GAUGES:
            yield _labelled(name, doc, "queue", ((q, f[key]) for q, f in now.queues.items()))


_QUEUE_GAUGES = (
    ("rsched_queue_length", "length", "Entries in the queue stream (pending included)."),
    ("rsched_queue_pending", "pending", "Entries read by a worker and not acknowledged yet."),
    ("rsched_queue_delayed", "delayed", "Retries and delayed jobs waiting in the delayed set."),
    ("rsched_queue_dead", "dead", "Entries in the queue's dead-letter stream."),
    (
        "rsched_workers",
        "consumers",
        "Consumers of the queue's group (workers, including ones gone within the last hour "
        "that held nothing).",
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
    """Every series of rsched on one registry; one instance per process (:data:`METRICS`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.on = False
        reg = self.registry = registry or CollectorRegistry(auto_describe=True)
        # Wall clock minus Redis TIME (ms), learnt from the scheduler's due reads: fire lag is
        # measured on the clock the scheduled times come from.
        self.clock_offset_ms = 0.0
        # --- scheduler -------------------------------------------------------------------
        self.fires = Counter(
            "rsched_fires",
            "Occurrences fired into a queue, by queue and origin (schedule: on time or within "
            "the misfire grace; misfire: a late run the misfire policy made).",
            ["queue", "origin"],
            registry=reg,
        )
        self.fire_lag = BulkHistogram(
            "rsched_fire_lag_seconds",
            "Fire time minus scheduled time of each occurrence fired.",
            LAG_BUCKETS,
        )
        reg.register(self.fire_lag)
        self.misfires = Counter(
            "rsched_misfires",
            "Late occurrences the misfire policy handled, by policy and action (run: a late "
            "run stands for them; skip: recorded as skipped).",
            ["policy", "action"],
            registry=reg,
        )
        self.overlap = Counter(
            "rsched_overlap",
            "Occurrences the overlap policy held back because a run was unfinished, by policy "
            "and action (skipped, buffered).",
            ["policy", "action"],
            registry=reg,
        )
        self.stale_refused = Counter(
            "rsched_stale_fires_refused",
            "Fires refused by the lease or version check: double fires that did not happen.",
            registry=reg,
        )
        self.is_leader = Gauge(
            "rsched_is_leader", "1 while this scheduler holds the lease.", registry=reg
        )
        self.leader_changes = Counter(
            "rsched_leader_changes",
            "Times this scheduler acquired the lease (summed over schedulers: leader changes).",
            registry=reg,
        )
        self.deployment = DeploymentGauges()
        reg.register(self.deployment)
        # --- worker ----------------------------------------------------------------------
        self.jobs = Counter(
            "rsched_jobs",
            "Job runs that ended, by task and outcome (completed, failed, timed_out, "
            "cancelled, retry).",
            ["task", "outcome"],
            registry=reg,
        )
        self.job_duration = Histogram(
            "rsched_job_duration_seconds",
            "How long a handler ran, by task.",
            ["task"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.job_start_lag = Histogram(
            "rsched_job_start_lag_seconds",
            "Handler start minus scheduled time, for first attempts (worker clock).",
            buckets=LAG_BUCKETS,
            registry=reg,
        )
        self.job_timeout = Gauge(
            "rsched_job_timeout_seconds",
            "The timeout of the task's latest job (to compare durations with).",
            ["task"],
            registry=reg,
        )
        self.retries = Counter(
            "rsched_retries", "Attempts scheduled for a retry, by task.", ["task"], registry=reg
        )
        self.reclaims = Counter(
            "rsched_reclaims",
            "Entries this worker took over from another (idle past the visibility timeout).",
            ["queue"],
            registry=reg,
        )
        self.jobs_in_progress = Gauge(
            "rsched_jobs_in_progress", "Handlers running in this worker now.", registry=reg
        )
        # --- both ------------------------------------------------------------------------
        Gauge(
            "rsched_build_info", "rsched's version (always 1).", ["version"], registry=reg
        ).labels(_version()).set(1)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)

    # --- scheduler -------------------------------------------------------------------------

    def redis_now(self, now_ms: int) -> None:
        """Learn the offset of Redis TIME from the wall clock (at a due read's reply)."""
        self.clock_offset_ms = time.time() * 1000 - now_ms

    def fired(self, items: Sequence[FireItem], codes: Sequence[int]) -> None:
        """Count one fire batch from its codes, in bulk."""
        now_ms = time.time() * 1000 - self.clock_offset_ms
        fired: dict[tuple[str, str], int] = {}
        lags: dict[int, int] = {}  # scheduled time -> fires (a herd shares a few)
        held: dict[tuple[str, str], int] = {}
        stale = 0
        for item, code in zip(items, codes, strict=True):
            if code == FIRED:
                key = (item.spec.queue, "schedule" if item.action == "fire" else "misfire")
                fired[key] = fired.get(key, 0) + 1
                lags[item.sched] = lags.get(item.sched, 0) + 1
            elif code == STALE:
                stale += 1
            elif code in _OVERLAP_ACTIONS:
                key = (item.spec.overlap, _OVERLAP_ACTIONS[code])
                held[key] = held.get(key, 0) + 1
        for (queue, origin), n in fired.items():
            self.fires.labels(queue, origin).inc(n)
        for (policy, action), n in held.items():
            self.overlap.labels(policy, action).inc(n)
        if stale:
            self.stale_refused.inc(stale)
        self.fire_lag.observe_many((max(0.0, (now_ms - s) / 1000), n) for s, n in lags.items())

    def misfire(self, policy: str, action: str) -> None:
        """One late occurrence planned by the misfire policy (``action``: misfire or skip)."""
        self.misfires.labels(policy, "run" if action == "misfire" else "skip").inc()

    # --- worker ----------------------------------------------------------------------------

    def job_started(self, job: Job) -> None:
        self.jobs_in_progress.inc()
        self.job_timeout.labels(job.task).set(job.timeout_s)
        if job.attempt == 1 and job.scheduled_ms is not None:
            self.job_start_lag.observe(max(0.0, time.time() - job.scheduled_ms / 1000))

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
        self.job_duration.labels(job.task).observe(duration_s)
        if cancelled:
            how = "cancelled"
        elif timed_out:
            how = "timed_out"
        elif error is None:
            how = "completed"
        else:
            how = "retry" if isinstance(error, Retry) else "failed"
        self.jobs.labels(job.task, how).inc()
        if how in ("timed_out", "failed", "retry") and not job.is_last_attempt:
            self.retries.labels(job.task).inc()


def _version() -> str:
    try:
        return importlib.metadata.version("rsched")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


METRICS = Metrics()
