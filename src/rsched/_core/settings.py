"""Configuration: one pydantic-settings root read from ``RSCHED_*`` environment variables.

Nested sections use a double underscore: ``RSCHED_SCHEDULER__LEASE_TTL_MS=15000``. Every
setting has a default that is safe in production and a unit in its name where it has one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    Field,
    FilePath,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from rsched._core.audit import DEFAULT_SPEC_HISTORY
from rsched._core.partitions import MAX_PARTITIONS
from rsched._core.rules import (
    DEDUP_WINDOW_MAX_S,
    DEFAULT_DEDUP_WINDOW_S,
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_BYTES,
    PREFIX_RE,
    PRIORITIES,
    check_actor,
)

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# Runs kept per schedule, one compact record (~20 bytes) each: as many as keep a schedule that
# has run 100 times within 1 KB of Redis 7.0 (hash, index entry, history; docs/keys.md).
DEFAULT_HISTORY_LIMIT = 15
# Sidekiq's weighted queues: of 10 reads while every level has work, high comes first 6 times,
# normal 3, low 1; a level with nothing waiting passes its turn on, so none starves.
DEFAULT_PRIORITY_WEIGHTS = {"high": 6, "normal": 3, "low": 1}
# A worker's blocking read must come back this long before the socket timeout would fire.
BLOCK_MARGIN_MS = 500
# redis-py also takes the password as a query parameter of the URL (?password=...).
_QUERY_PASSWORD = re.compile(r"(?i)((?:^|&)password=)[^&]*")


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (in the user part and in a ``password=``
    query parameter), for messages, logs and reprs. Never raises, even on a malformed URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an invalid URL>"
    userinfo, at, host = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        parts = parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}")
    if "password=" in parts.query.lower():
        parts = parts._replace(query=_QUERY_PASSWORD.sub(r"\1***", parts.query))
    return urlunsplit(parts)


#: What a write rsched acknowledges waits for (docs/durability.md): nothing more than the
#: primary's reply, that many replicas (WAIT), or their fsync and the primary's (WAITAOF).
DurabilityLevel = Literal["async", "replicated", "replicated_fsync"]
JobLogLevel = Literal["debug", "info", "warning", "error", "critical"]
# A replica on the same network acknowledges a WAIT within a millisecond or two; a quarter of a
# second rides out a replica's fork, fsync or a busy moment, and bounds what a call (and each
# fire batch) waits when a replica is down.
DEFAULT_DURABILITY_TIMEOUT_MS = 250


class SchedulerSettings(BaseModel):
    """Settings of ``rsched-scheduler``."""

    lease_ttl_ms: int = Field(default=10_000, ge=500)
    lease_renew_ms: int = Field(default=2_000, ge=100)
    batch_size: int = Field(default=500, ge=1, le=5_000)
    # Each fire call (and due read) is sized to take at most this long inside Redis, which runs
    # one command at a time: every other client of the server waits for it. batch_size caps it.
    fire_budget_ms: float = Field(default=3.0, gt=0, le=1_000)
    window_size: int = Field(default=10_000, ge=1, le=100_000)
    max_in_flight: int = Field(default=4, ge=1, le=32)
    max_idle_ms: int = Field(default=10_000, ge=100)
    # After a round that fired everything due, the leader waits this long before it looks
    # again, so that a steady stream of small fires goes out a few per round; 0 looks again at
    # once. A wake for a run due later (a herd's instant) is always on time.
    steady_slack_ms: float = Field(default=1.0, ge=0, le=1_000)
    prefetch_ms: int = Field(default=5_000, ge=0)
    # How many schedules' specs the leader keeps (~100 bytes each where schedules share their
    # fields, as one add_many's do; ~450 where none does); the oldest read go first.
    # The schedules firing every few seconds should fit, or each fire reads its spec again.
    spec_cache_size: int = Field(default=250_000, ge=1_000)
    # Park schedules due far off in small buckets (rsched._store.parking, docs/keys.md). False
    # brings every parked schedule back into the index and parks none: before going back to an
    # rsched that does not know the buckets.
    park: bool = True

    @model_validator(mode="after")
    def _renew_inside_ttl(self) -> SchedulerSettings:
        if self.lease_renew_ms * 2 > self.lease_ttl_ms:
            raise ValueError(
                f"lease_renew_ms ({self.lease_renew_ms}) must be at most half of lease_ttl_ms "
                f"({self.lease_ttl_ms}) so the lease is renewed well before it expires"
            )
        return self


if TYPE_CHECKING:
    _Queues = list[str]
else:
    # pydantic-settings JSON-decodes an environment value of a list field and fails on
    # "default,reports"; of a union it keeps a value that is not JSON as the string, which
    # WorkerSettings._split_queues turns into the list (so the field always holds a list).
    _Queues = list[str] | str


class WorkerSettings(BaseModel):
    """Settings of ``rsched-worker`` (fields are owned by the worker module)."""

    # A JSON list or comma-separated names: RSCHED_WORKER__QUEUES=default,reports.
    queues: _Queues = Field(default_factory=lambda: ["default"])
    concurrency: int = Field(default=10, ge=1, le=10_000)
    shutdown_grace_period_s: float = Field(default=30.0, ge=0)
    # An entry idle (no heartbeat) this long is reclaimed by another worker.
    visibility_timeout_s: float = Field(default=60.0, ge=0.5)
    # How often a running job's entries are marked alive; well inside visibility_timeout_s.
    heartbeat_s: float = Field(default=10.0, ge=0.05)
    # An entry delivered more often than this (it keeps crashing workers) is dead-lettered.
    max_deliveries: int = Field(default=5, ge=1, le=1000)
    # Longest blocking read; at least BLOCK_MARGIN_MS under the root's socket_timeout_s.
    block_ms: int = Field(default=2_000, ge=10, le=5_000)
    read_batch: int = Field(default=200, ge=1, le=10_000)
    promote_interval_ms: int = Field(default=500, ge=10, le=60_000)
    reclaim_interval_s: float = Field(default=5.0, ge=0.05)
    # Dead-letter streams keep about this many newest entries (older ones are trimmed).
    dead_letter_max_entries: int = Field(default=100_000, ge=10)
    # Traceback excerpt kept in a dead letter (characters, from the end).
    traceback_max_chars: int = Field(default=4_000, ge=100)
    # What a handler returns (JSON) is kept this long for Client.result / rsched job.
    result_ttl_s: float = Field(default=86_400.0, ge=1)
    # A return value larger than this (bytes of JSON) is not kept (a warning is logged).
    result_max_bytes: int = Field(default=64 * 1024, ge=16, le=16 * 1024 * 1024)
    # A job whose task no live worker has registered waits this long (rolling deploys) before
    # it is dead-lettered with reason unknown_task; 0 dead-letters it at once.
    unknown_task_grace_s: float = Field(default=600.0, ge=0)
    # Records of the logging module made inside a handler at this level or above are kept in
    # the job's log (with job.log's lines; docs/jobs.md).
    job_log_level: JobLogLevel = "info"
    # Share of reads each priority level leads (see DEFAULT_PRIORITY_WEIGHTS).
    priority_weights: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_PRIORITY_WEIGHTS))
    # Deliver HTTP targets (task rsched.http, docs/http-targets.md): rsched-worker --http.
    http: bool = False

    @model_validator(mode="after")
    def _weights(self) -> WorkerSettings:
        unknown = sorted(set(self.priority_weights) - set(PRIORITIES))
        if unknown:
            raise ValueError(
                f"priority_weights: unknown level(s) {unknown}; use high, normal and low, "
                'e.g. {"high": 6, "normal": 3, "low": 1}'
            )
        for level, weight in self.priority_weights.items():
            if isinstance(weight, bool) or not 1 <= weight <= 1000:
                raise ValueError(
                    f"priority_weights: {level} must be a whole number from 1 to 1000 "
                    f"(got {weight!r}); every level keeps a share so that none starves"
                )
        self.priority_weights = {**DEFAULT_PRIORITY_WEIGHTS, **self.priority_weights}
        return self

    @field_validator("job_log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("queues", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @model_validator(mode="after")
    def _heartbeat_inside_visibility(self) -> WorkerSettings:
        if self.heartbeat_s * 2 > self.visibility_timeout_s:
            raise ValueError(
                f"heartbeat_s ({self.heartbeat_s}) must be at most half of visibility_timeout_s "
                f"({self.visibility_timeout_s}) so running jobs are never reclaimed"
            )
        return self


class HealthSettings(BaseModel):
    """Health checks, the events stream and alerts (``rsched health``, ``rsched monitor``, the
    leading scheduler's health watch). docs/health.md describes each."""

    # A schedule is failing when this many of its last finished runs failed or died.
    failing_runs: int = Field(default=3, ge=1, le=50)
    # The most schedules one check classifies (late ones read from the index, oldest first).
    max_schedules: int = Field(default=1_000, ge=1, le=100_000)
    # Newest dead letters read per queue to find failing schedules.
    dead_scan: int = Field(default=100, ge=1, le=10_000)
    # Oldest pending entries read per queue to find stuck runs.
    pending_scan: int = Field(default=100, ge=1, le=10_000)
    # A run is stuck once it has been running this long past its timeout.
    stuck_grace_s: float = Field(default=5.0, ge=0)
    # `rsched health` fails beyond these: schedules due now, how late the oldest one is.
    max_due: int = Field(default=1_000, ge=0)
    max_overdue_s: float = Field(default=60.0, ge=0)
    # `rsched health` fails while the newest dead letter is younger than this (0: never).
    dead_letter_window_s: float = Field(default=300.0, ge=0)
    # How often the leading scheduler checks schedules' health and records state changes.
    check_interval_s: float = Field(default=5.0, ge=0.05, le=3_600)
    # The events stream keeps about this many newest events.
    events_max_len: int = Field(default=10_000, ge=10)
    # Alert webhook: events waiting to be posted (dropped beyond), per-POST timeout, attempts.
    webhook_queue_size: int = Field(default=1_000, ge=1)
    webhook_timeout_s: float = Field(default=5.0, gt=0)
    webhook_attempts: int = Field(default=5, ge=1, le=100)


class HttpSettings(BaseModel):
    """How workers started with ``--http`` call HTTP targets (docs/http-targets.md)."""

    # Signs every call whose target has no secret of its own (X-Rsched-Signature).
    secret: SecretStr | None = None
    # Off: a target whose host resolves to a private, loopback, link-local, multicast, reserved
    # or unspecified address is refused (the SSRF guard); on: any address may be called.
    allow_private: bool = False
    # A run keeps this much of the answer's text in its result (the rest is cut, marked).
    max_response_bytes: int = Field(default=4_096, ge=0, le=1024 * 1024)
    # The longest wait a Retry-After header may ask for before the next attempt.
    max_retry_after_s: float = Field(default=3_600.0, ge=0, le=86_400 * 7)
    # The most connections each worker opens to targets at once (one pool for all its calls).
    max_connections: int = Field(default=100, ge=1, le=10_000)


class RetentionSettings(BaseModel):
    """How long what runs leave behind is kept; the leading scheduler enforces it every
    ``interval_s`` (docs/runs-log.md)."""

    # The runs log: records older than this are trimmed (XTRIM MINID), and every write keeps
    # about runs_max_entries newest (MAXLEN ~), whichever is less.
    runs_max_age_s: float = Field(default=7 * 86_400, ge=60)
    runs_max_entries: int = Field(default=500_000, ge=100, le=100_000_000)
    # Dead letters older than this are trimmed (the count cap is worker.dead_letter_max_entries).
    dead_letter_max_age_s: float = Field(default=30 * 86_400, ge=60)
    # A schedule's history records whose newest event is older than this are dropped (its count
    # cap is history_limit).
    history_max_age_s: float = Field(default=30 * 86_400, ge=60)
    # How often the leader sweeps, and how many schedules' histories one sweep looks at.
    interval_s: float = Field(default=60.0, ge=0.05, le=86_400)
    history_batch: int = Field(default=1_000, ge=1, le=100_000)
    # The audit trail ({p}:audit, docs/audit.md): records older than this are trimmed, and
    # every write keeps about audit_max_entries newest per partition, whichever is less.
    audit_max_age_s: float = Field(default=90 * 86_400, ge=60)
    audit_max_entries: int = Field(default=100_000, ge=100, le=100_000_000)
    # A running flow that did not change for this long is looked at by the sweep: a step whose
    # job is found nowhere ends dead ("lost"), a step whose parents all ended is released
    # (docs/flows.md). Flows themselves expire runs_max_age_s after they ended.
    flow_stall_s: float = Field(default=600.0, ge=1, le=86_400 * 30)


#: The help of every command's ``--cluster`` flag.
CLUSTER_HELP = "the Redis URL is a node of a Redis Cluster / Valkey cluster (env RSCHED_CLUSTER)"


class Settings(BaseSettings):
    """The root of rsched's configuration."""

    model_config = SettingsConfigDict(
        env_prefix="RSCHED_", env_nested_delimiter="__", extra="ignore"
    )

    redis_url: str | None = None
    # redis_url is one node of a Redis Cluster / Valkey cluster (docs/scaling.md).
    cluster: bool = False
    # TLS (rediss:// URLs): the CA that signed the server's certificate (default: the system's
    # CAs), and a client certificate and key for a server that asks for one (tls-auth-clients).
    tls_ca_file: FilePath | None = None
    tls_cert_file: FilePath | None = None
    tls_key_file: FilePath | None = None
    prefix: str = Field(default="rsched", pattern=PREFIX_RE.pattern)
    # The deployment's number of partitions (docs/scaling.md): None takes what the deployment
    # stored (1 for a new one); a number must match it, or becomes it for a new deployment.
    partitions: int | None = Field(default=None, ge=1, le=MAX_PARTITIONS)
    max_payload_bytes: int = Field(default=DEFAULT_MAX_PAYLOAD_BYTES, ge=2, le=MAX_PAYLOAD_BYTES)
    # Runs kept in a schedule's history (a record each; docs/keys.md, History records).
    history_limit: int = Field(default=DEFAULT_HISTORY_LIMIT, ge=1, le=10_000)
    # An enqueue with its own execution id: how long the id stays taken after the job ended.
    dedup_window_s: float = Field(default=DEFAULT_DEDUP_WINDOW_S, ge=0, le=DEDUP_WINDOW_MAX_S)
    # Specs kept in each changed schedule's spec history (docs/audit.md; 0 keeps none).
    spec_history_limit: int = Field(default=DEFAULT_SPEC_HISTORY, ge=0, le=1_000)
    # Who this process's changes are by in the audit trail (docs/audit.md): the SDK records
    # none unless given, the rsched command user@host.
    actor: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    # The longest wait for one reply or for a connection to open. A timed-out command is never
    # re-sent, so this bounds each call (a hung or paused server fails it, not the process).
    socket_timeout_s: float = Field(default=5.0, ge=1, le=300)
    # Connections per client (each process's pool); more concurrent calls wait for a free one.
    max_connections: int = Field(default=50, ge=1, le=10_000)
    # The longest wait for a free connection before PoolExhausted.
    pool_timeout_s: float = Field(default=10.0, ge=0.1, le=3_600)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    # Metrics and health endpoints (docs/monitoring.md): served on this port when it is set
    # (0 picks a free one), from this address; the leading scheduler refreshes the gauges of the
    # whole deployment every metrics_interval_s, counting a schedule due longer than
    # metrics_late_after_s (the default misfire grace) as late.
    metrics_port: int | None = Field(default=None, ge=0, le=65_535)
    metrics_host: str = "127.0.0.1"
    metrics_interval_s: float = Field(default=5.0, ge=0.1, le=3_600)
    metrics_late_after_s: float = Field(default=60.0, ge=0)
    health: HealthSettings = Field(default_factory=HealthSettings)
    # The leading scheduler POSTs every event of the events stream here (RSCHED_ALERT_WEBHOOK_URL),
    # signed with HMAC-SHA256 of the body when a secret is set.
    alert_webhook_url: str | None = None
    alert_webhook_secret: SecretStr | None = None
    # Writes rsched acknowledges (client writes, fires, a worker's acks) wait for this many
    # replicas, at most durability_timeout_ms (docs/durability.md).
    durability: DurabilityLevel = "async"
    durability_replicas: int = Field(default=1, ge=1, le=100)
    durability_timeout_ms: int = Field(default=DEFAULT_DURABILITY_TIMEOUT_MS, ge=1, le=60_000)
    # OpenTelemetry tracing (docs/tracing.md): auto traces when opentelemetry is loaded and a
    # tracer provider is configured when the Client, Worker or Scheduler is created or starts;
    # on always (the global provider, even one set later), off never.
    tracing: Literal["auto", "on", "off"] = "auto"

    @field_validator("actor")
    @classmethod
    def _actor(cls, value: str | None) -> str | None:
        return None if value is None else check_actor(value)

    @model_validator(mode="after")
    def _block_inside_socket_timeout(self) -> Settings:
        limit_ms = int(self.socket_timeout_s * 1000) - BLOCK_MARGIN_MS
        if "block_ms" not in self.worker.model_fields_set:
            # Only a short socket timeout makes the default too long: follow it then.
            self.worker.block_ms = min(self.worker.block_ms, limit_ms)
        if self.worker.block_ms > limit_ms:
            raise ValueError(
                f"worker.block_ms ({self.worker.block_ms}) must be at least {BLOCK_MARGIN_MS} ms "
                f"below socket_timeout_s ({self.socket_timeout_s:g} s), or an idle worker's "
                "blocking read times out: lower RSCHED_WORKER__BLOCK_MS or raise "
                "RSCHED_SOCKET_TIMEOUT_S"
            )
        return self

    @model_validator(mode="after")
    def _wait_inside_socket_timeout(self) -> Settings:
        limit_ms = int(self.socket_timeout_s * 1000) - BLOCK_MARGIN_MS
        if self.durability_timeout_ms > limit_ms:
            raise ValueError(
                f"durability_timeout_ms ({self.durability_timeout_ms}) must be at least "
                f"{BLOCK_MARGIN_MS} ms below socket_timeout_s ({self.socket_timeout_s:g} s), or "
                "a write waiting for its replicas times out: lower RSCHED_DURABILITY_TIMEOUT_MS "
                "or raise RSCHED_SOCKET_TIMEOUT_S"
            )
        return self

    @property
    def url(self) -> str:
        return self.redis_url or DEFAULT_REDIS_URL

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # repr() and str() of the settings end up in logs and tracebacks: never the password.
        for name, value in super().__repr_args__():
            yield name, safe_url(value) if name == "redis_url" and value else value


def problems(exc: ValidationError) -> str:
    """One line for a settings error: each problem after the variable it is about."""
    parts = []
    for err in exc.errors():
        loc = "__".join(str(p) for p in err["loc"]).upper()
        message = err["msg"].removeprefix("Value error, ")
        parts.append(f"RSCHED_{loc}: {message}" if loc else message)
    return "; ".join(parts)
