"""Every Redis key and channel name rsched uses; nothing else formats a key string.

A deployment's keys are of two kinds. Partition keys (schedules, queues, leases, ...) carry
their partition's hash tag (``partitions.partition_tags``); deployment keys (meta, the worker
and scheduler registries) carry ``{prefix}``. With one partition both tags are ``{prefix}``, the
layout of a deployment without partitions. Every key one script touches has one tag, so it hashes
to one slot and the scripts run unchanged on Redis Cluster. docs/keys.md documents each key.
"""

from __future__ import annotations

import time
import uuid
import zlib
from dataclasses import dataclass, field

from rsched._core.partitions import check_partitions, partition_tags
from rsched._core.rules import Priority, check_label, check_prefix

# Worker consumer group name on every queue stream.
GROUP = "rsched"

#: Buckets of parked schedules per partition. Up to ~100k schedules a partition, a bucket holds
#: fewer than Redis's ``zset-max-listpack-entries`` (128 by default), so Redis keeps it as a
#: listpack: ~28 bytes an entry where the index's skiplist costs ~110.
PARKED_BITS = 10
PARKED_BUCKETS = 1 << PARKED_BITS


def parked_bucket(schedule_id: str) -> int:
    """The parked bucket of a schedule id: the top 10 bits of the CRC-32 of its bytes. The
    partition is that CRC-32 modulo N (its low bits): with the same bits, a partition of N=16
    would use only 64 of its buckets."""
    return zlib.crc32(schedule_id.encode()) >> (32 - PARKED_BITS)


def stream_name(queue: str, priority: Priority = "normal") -> str:
    """What follows ``{p}:queue:`` in the key of a queue's stream of one level. '#' is no
    character of a queue name, so a level's stream never collides with another queue's."""
    return queue if priority == "normal" else f"{queue}#{priority}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names of one partition of a deployment. ``Keys("rsched").schedule("a")`` ==
    ``{rsched}:schedule:a``; ``Keys("rsched", 16, 3)`` names partition 3 of 16."""

    prefix: str = "rsched"
    partitions: int = 1
    partition: int = 0
    #: The hash tag of this partition's keys, in braces: worked out once, as every key of the
    #: hot paths (a fire's, a bulk write's) starts with it.
    tag: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_prefix(self.prefix)
        check_partitions(self.partitions)
        if not 0 <= self.partition < self.partitions:
            raise ValueError(f"partition {self.partition} is not in 0..{self.partitions - 1}")
        tag = "{" + partition_tags(self.prefix, self.partitions)[self.partition] + "}"
        object.__setattr__(self, "tag", tag)

    @property
    def deployment_tag(self) -> str:
        """The hash tag of the deployment's own keys (``meta``, registries)."""
        return "{" + self.prefix + "}"

    def for_partition(self, partition: int) -> Keys:
        """The keys of another partition of the same deployment."""
        return Keys(self.prefix, self.partitions, partition)

    def every_partition(self) -> tuple[Keys, ...]:
        """The keys of each partition, in partition order."""
        return tuple(self.for_partition(k) for k in range(self.partitions))

    @property
    def meta(self) -> str:
        """HASH of the deployment's fixed facts: ``partitions`` (N, set by the first writer or
        ``rsched init --partitions N``; every process reads it and refuses another N)."""
        return f"{self.deployment_tag}:meta"

    @property
    def virtual_clock(self) -> str:
        """HASH ``s``, ``us``: the time that rsched.testing's scripts and stores read instead of
        Redis TIME (rsched._redis.scripts.VirtualClock); never written in production."""
        return f"{self.deployment_tag}:virtual_clock"

    @property
    def schedulers(self) -> str:
        """ZSET of live scheduler ids scored by their last heartbeat (ms, Redis time): the
        schedulers that share the partitions' leases."""
        return f"{self.deployment_tag}:schedulers"

    @property
    def schedules(self) -> str:
        """ZSET of the schedule ids not parked, scored by next run (ms); +inf when it has none.
        Those whose next run is far off are parked in buckets (:meth:`parked_at`)."""
        return f"{self.tag}:schedules"

    @property
    def parked(self) -> str:
        """ZSET of parked bucket numbers, each scored at or below the earliest next run in it
        (a lower bound: removals from a bucket leave it as it is)."""
        return f"{self.tag}:parked"

    def parked_at(self, bucket: int | str) -> str:
        """ZSET, one bucket of parked schedules: ids whose next run was far off when the
        scheduler moved them out of :attr:`schedules`, scored by next run (ms; +inf when none).
        A schedule is in the index or in its bucket, never both."""
        return f"{self.tag}:parked:{bucket}"

    def parked_of(self, schedule_id: str) -> str:
        """The bucket a schedule is parked in when it is parked."""
        return self.parked_at(parked_bucket(schedule_id))

    def schedule(self, schedule_id: str) -> str:
        """HASH: a schedule's spec (non-default fields) and engine state."""
        return f"{self.tag}:schedule:{schedule_id}"

    def history(self, schedule_id: str) -> str:
        """LIST (newest first, capped) of JSON events: fired, skipped, misfired, outcomes."""
        return f"{self.tag}:history:{schedule_id}"

    def pending(self, schedule_id: str) -> str:
        """ZSET: the occurrences waiting for the schedule's unfinished run to end (buffer_one,
        buffer_all, catch_up and backfill runs under a non-``allow`` overlap policy), scored by
        scheduled time (ms); each member is the job's fields as a JSON list ``[field, value,
        …]``. Released one at a time, oldest first."""
        return f"{self.tag}:pending:{schedule_id}"

    @property
    def backlogs(self) -> str:
        """ZSET of the schedules that hold pending occurrences, scored by when their run marker
        expires (ms): where the scheduler looks for a backlog whose run was lost."""
        return f"{self.tag}:backlogs"

    def queue(self, name: str, priority: Priority = "normal") -> str:
        """STREAM of jobs of one queue and priority level, read by workers through the
        ``rsched`` group: ``{p}:queue:<name>`` for ``normal`` (the stream of every queue before
        priorities existed), ``{p}:queue:<name>#high`` / ``#low`` for the others."""
        return f"{self.tag}:queue:{stream_name(name, priority)}"

    def streams(self, name: str) -> list[str]:
        """The streams of one queue, one per priority level, in the order (normal, high, low) the
        scripts that route a job by its level (promote, requeue) take them."""
        return [self.queue(name), self.queue(name, "high"), self.queue(name, "low")]

    @property
    def limits(self) -> tuple[str, ...]:
        """The keys of the deployment's flow-control limits (docs/limits.md), in the order every
        limit script takes them (lua/includes/limit_keys.lua). They live in partition 0, where
        every job that holds a limit runs: one slot, so that one script sees a key's holders,
        starts and waiting jobs. A key of a limit is a field or a member in each, never a Redis
        key of its own, so an idle limit key costs nothing.

        - ``held``     HASH limit key -> the number of jobs holding it (running, or granted and
                       on their way to a worker)
        - ``holds``    ZSET ``<key>\\0<execution id>`` -> when the hold lapses (ms): renewed by the
                       holder's heartbeat; a lapsed hold (its worker died) is released
        - ``starts``   ZSET (all scores 0) ``<key>\\0<ms, 13 digits>\\0<execution id>``: the starts
                       of the rate windows, counted by lexical range
        - ``expiry``   ZSET the same members -> when they leave their window (ms)
        - ``waiting``  ZSET (all scores 0) ``<key>\\0<order>\\0<execution id>``: jobs waiting on a
                       key, by level then arrival
        - ``jobs``     HASH execution id -> a waiting job (JSON: its fields, stream, limits, key)
        - ``ready``    ZSET limit key -> when its waiting jobs may start (ms): set when a hold is
                       released or a rate window opens; read by the workers' resume calls
        - ``keys``     HASH limit key -> its declared numbers, while it is held or has starts
        - ``set``      HASH limit key -> an operator's numbers (JSON), overriding the declared ones
        - ``patterns`` HASH key pattern with '*' -> an operator's numbers (JSON)
        - ``counts``   HASH ``h:<template>`` / ``w:<template>`` -> holders / waiting jobs of the
                       keys of one declared template (the metrics' label)
        """
        tag = self.for_partition(0).tag
        names = ("held", "holds", "starts", "expiry", "waiting", "jobs", "ready", "keys", "set",
                 "patterns", "counts")  # fmt: skip
        return tuple(f"{tag}:limits:{name}" for name in names)

    def forwarded(self, execution_id: str, attempt: int) -> str:
        """STRING with a TTL (partition 0): this attempt of a job holding limits was written to
        partition 0's stream from another partition's (lua/forward.lua): it is written once."""
        return f"{self.for_partition(0).tag}:forwarded:{execution_id}:{attempt}"

    def dedup(self, execution_id: str) -> str:
        """STRING (the queue name) with a TTL: an ``enqueue`` with this execution id was taken;
        alive while the job waits or runs and ``dedup_window_s`` after it finished."""
        return f"{self.tag}:dedup:{execution_id}"

    def debounce(self, queue: str, key: str) -> str:
        """STRING with a TTL: the open debounce window of ``enqueue(..., debounce_key=key)`` on
        ``queue``, as the member its job is in :meth:`delayed_queue` (the job's fields as a JSON
        list). The window is open while that member is there; the key lives until the job is
        due and 5 minutes more. '#' is no character of a queue name, so ``a:b`` + ``c`` and
        ``a`` + ``b:c`` never share a key."""
        return f"{self.tag}:debounce:{queue}#{key}"

    def dead(self, name: str) -> str:
        """STREAM of dead letters of one queue."""
        return f"{self.tag}:dead:{name}"

    def delayed_queue(self, name: str) -> str:
        """ZSET of one queue's delayed jobs (retries, enqueue with a delay), scored by due time
        (ms); each member is the job's fields as a JSON list ``[field, value, …]``."""
        return f"{self.tag}:delayed:{name}"

    @property
    def delayed(self) -> str:
        """Reserved: one delayed ZSET over all queues. Nothing writes it; each queue's delayed
        jobs are in :meth:`delayed_queue` (docs/keys.md)."""
        return f"{self.tag}:delayed"

    @property
    def queues(self) -> str:
        """SET of queue names that ever received a job in this partition (for stats and
        workers; readers take the union of every partition's)."""
        return f"{self.tag}:queues"

    @property
    def workers(self) -> str:
        """ZSET of worker ids scored by their last registry heartbeat (ms, Redis time); an id
        whose ``worker`` key expired is gone (readers skip it, the next heartbeat prunes it)."""
        return f"{self.deployment_tag}:workers"

    def worker(self, worker_id: str) -> str:
        """STRING (JSON) with a TTL of a few heartbeats: one live worker's host, pid, queues,
        tasks, concurrency, start time and the jobs it runs."""
        return f"{self.deployment_tag}:worker:{worker_id}"

    def result(self, execution_id: str) -> str:
        """STRING (JSON) with a TTL of ``result_ttl_s``: what a job's handler returned."""
        return f"{self.tag}:result:{execution_id}"

    def job_log(self, execution_id: str, attempt: int) -> str:
        """LIST of one attempt's log lines, oldest first, each the JSON ``[ms, level, message]``
        (``job.log``, logging records inside the handler): its newest 200 lines and at most
        64 KiB, with a TTL of ``result_ttl_s`` from its last write (lua/job_log.lua). Exists
        only for an attempt whose handler logged."""
        return f"{self.tag}:joblog:{execution_id}:{attempt}"

    def job_progress(self, execution_id: str) -> str:
        """HASH of a job's latest progress (``fraction``, ``note``, ``at`` ms, ``attempt``) and
        the accounting of its attempts' logs (``bytes:<attempt>``, ``last:<attempt>``: the last
        batch applied), with a TTL of ``result_ttl_s`` from its last write. Exists only for a
        job whose handler set progress or logged."""
        return f"{self.tag}:progress:{execution_id}"

    @property
    def leader_ttl(self) -> str:
        """STRING (ms) with the lease's TTL: the lease TTL the leading scheduler uses, so that
        a reader with other settings reports the lease's age truly."""
        return f"{self.tag}:leader_ttl"

    @property
    def leader(self) -> str:
        """STRING ``<token>:<owner>`` with a TTL: the scheduler lease."""
        return f"{self.tag}:leader"

    @property
    def fence(self) -> str:
        """STRING counter: the last fencing token handed out (INCR at every acquisition)."""
        return f"{self.tag}:fence"

    @property
    def wake(self) -> str:
        """Pub/sub channel: a schedule became due earlier than the scheduler planned."""
        return f"{self.tag}:wake"

    @property
    def cancel(self) -> str:
        """Pub/sub channel: execution ids whose running handler must be cancelled."""
        return f"{self.deployment_tag}:cancel"

    def ops(self, minute: int | str) -> str:
        """HASH request id -> JSON result of the client writes sent in one minute (by the
        client's clock), kept 5 minutes after its last write so that a re-sent call is a no-op."""
        return f"{self.tag}:ops:{minute}"

    def new_op(self) -> tuple[str, str]:
        """(ops key, fresh request id) for one client write."""
        return self.ops(int(time.time() // 60)), uuid.uuid4().hex

    def source(self, name: str) -> str:
        """SET of the schedule ids of this partition created from one schedules file
        (``rsched sync``)."""
        return f"{self.tag}:source:{name}"

    @property
    def source_paths(self) -> str:
        """HASH source name -> resolved path of the schedules file last synced under it (one
        per deployment: no script touches it)."""
        return f"{self.deployment_tag}:source_paths"

    @property
    def calendars(self) -> str:
        """HASH calendar name -> the exclusion calendar (JSON: dates, ranges, weekdays; see
        rsched._core.calendars). One per deployment: schedules of every partition name them."""
        return f"{self.deployment_tag}:calendars"

    @property
    def calendars_version(self) -> str:
        """STRING, a counter moved by every change to :attr:`calendars` (lua/calendar_write.lua):
        a scheduler reads it before it plans occurrences that name a calendar, and reads the
        calendars again only when it moved."""
        return f"{self.deployment_tag}:calendars:version"

    def label(self, pair: str) -> str:
        """SET of the ids of this partition's schedules that carry the label ``pair``
        (``k=v``): the label index (lua/includes/label_index.lua keeps it with the schedule's
        hash; docs/labels.md). The pair is checked (rsched._core.rules.check_label): its
        characters never end the key early, glob or open another hash tag."""
        key, _, value = pair.partition("=")
        check_label(key, value)
        return f"{self.tag}:label:{pair}"

    def labels(self, pairs: list[str]) -> list[str]:
        """The label index key of each ``k=v`` pair."""
        return [self.label(pair) for pair in pairs]

    def backfilled(self, schedule_id: str) -> str:
        """SET of the execution ids a backfill of this schedule has fired (never fired twice)."""
        return f"{self.tag}:backfilled:{schedule_id}"

    @property
    def events(self) -> str:
        """STREAM (capped, MAXLEN ~) of state changes: schedules turned late, failing or stuck
        and recovered, dead letters, leader changes (``rsched events``). One per deployment: no
        script touches it, and readers wait on one stream."""
        return f"{self.deployment_tag}:events"

    @property
    def health(self) -> str:
        """HASH schedule id -> its last announced unhealthy state (late, failing, stuck), so a
        new leader does not announce again what the previous one did."""
        return f"{self.tag}:health"

    @property
    def runs(self) -> str:
        """STREAM, capped: one compact record per run that ended (completed, failed attempt,
        retry, dead, cancelled, timed out) or occurrence that was dropped (skipped), across
        every schedule and enqueued job; the entry id is when it happened."""
        return f"{self.tag}:runs"

    def run_label(self, pair: str) -> str:
        """STREAM, the runs log's label index: of each record of this partition's runs log that
        carries the label ``pair`` (``k=v``), an entry of the same id (one constant field).
        Written by the script that appends the record (lua/includes/run_index.lua), trimmed
        with the log by the leader's retention, which deletes an index left empty. The pair is
        checked as for :meth:`label`."""
        key, _, value = pair.partition("=")
        check_label(key, value)
        return f"{self.tag}:runs:label:{pair}"

    @property
    def run_labels(self) -> str:
        """SET of the label pairs that have a runs-log index (run_label) in this partition:
        what the retention trims (added with each labelled record, dropped with the index)."""
        return f"{self.tag}:runs:labels"

    def flow(self, flow_id: str) -> str:
        """HASH: a flow (rsched._core.flows): its state, times and counts, and per step n its
        definition (field ``<n>``), state (``<n>.s``), attempt (``<n>.a``), parents not yet
        ended (``<n>.w``) and, for a step others follow, its result or error (``<n>.r``).
        Expires ``retention.flow_ttl_s`` after the flow ended. The scripts that end a step
        (lua/includes/flow_end.lua) build this name from their stream's tag."""
        return f"{self.tag}:flow:{flow_id}"

    @property
    def flows(self) -> str:
        """ZSET of this partition's flows, scored by creation time (ms): their listing and the
        leader's sweep (an entry whose flow expired is dropped by the retention)."""
        return f"{self.tag}:flows"

    @property
    def audit(self) -> str:
        """STREAM, capped: the audit trail of this partition's schedules, one record per change
        (add, update, remove, pause, ..., written by the script that makes it; docs/audit.md);
        partition 0's also holds the limit overrides' changes. The entry id is when it
        happened."""
        return f"{self.tag}:audit"

    @property
    def deployment_audit(self) -> str:
        """STREAM, capped: the audit trail of the exclusion calendars (deployment keys). With
        one partition it is :attr:`audit` itself."""
        return f"{self.deployment_tag}:audit"

    def specs(self, schedule_id: str) -> str:
        """LIST (newest first, capped at ``spec_history_limit``) of a schedule's kept specs, each
        a JSON array [generation, ms, actor, source, {field: value}]: written from its first
        change on (a schedule never changed has none), deleted with the schedule."""
        return f"{self.tag}:specs:{schedule_id}"

    @property
    def depth(self) -> str:
        """HASH, bounded: each queue's depth sampled once a minute by the partition's leader,
        ``<queue>:<minute mod 64>`` -> ``<epoch minute> <waiting> <delayed>`` (the last hour
        of each queue; docs/keys.md)."""
        return f"{self.tag}:depth"

    @property
    def activity(self) -> str:
        """HASH, bounded: the partition's activity counters, written where things happen (fires,
        skips and fire lags by ``fire``; completed, failed, dead, expired and cancelled runs by
        the worker scripts), per minute for the last hour and per hour for the last day, in two
        rings of slots (``m<minute mod 64>``, ``h<hour mod 26>``; docs/keys.md)."""
        return f"{self.tag}:activity"
