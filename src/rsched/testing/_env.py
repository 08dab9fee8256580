"""TestEnv: a client, a worker's handlers and a virtual clock on an in-process Redis."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from redis.asyncio import Redis

import rsched
from rsched._core.errors import InvalidArgument
from rsched._core.keys import Keys
from rsched._core.rules import parse_duration_s
from rsched._core.schedule import from_ms, to_ms
from rsched._core.settings import Settings
from rsched._devtools.embedded import EmbeddedServer
from rsched._redis.connection import connect
from rsched._redis.scripts import VirtualClock, use_virtual_clock
from rsched._store.runs_log import RunRecord, record_of
from rsched.testing._drive import Drive
from rsched.testing._fake import fake_redis

#: Where the clock of a TestEnv starts when it is not told: a fixed time, so that a test
#: gives the same answer whenever it runs.
DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)
#: The servers a TestEnv can run on (besides the URL of one the caller runs).
FAKE, EMBEDDED = "fake", "embedded"
#: Runs log records read at a time.
_RUNS_CHUNK = 1_000


class TestEnv:
    """A :class:`rsched.Client`, the handlers of a :class:`rsched.Worker` and a virtual clock,
    on an in-process Redis (fakeredis): no server process, no waiting.

    ``async with TestEnv(worker, start="2027-01-01T00:00:00+01:00") as env:`` then use
    ``env.client`` as the application does and move time with :meth:`advance`: every schedule
    fires, every job runs through rsched's own scripts and code (policies, time zones and their
    DST rules, retries and their backoff, dead letters, overlap, misfire, calendars, limits),
    at the virtual time it is due. Handlers run in-process, in the test's event loop.

    ``worker`` None runs no jobs: they wait in their queues for :meth:`enqueued`. ``start``
    is an aware datetime, an ISO 8601 text with its offset, or epoch seconds (default
    :data:`DEFAULT_START`). ``settings`` are the deployment's (default: the worker's, as it
    resolves them); ``prefix`` the keys' prefix. ``server`` is ``"fake"`` (fakeredis with its
    Lua runtime, the default), ``"embedded"`` (a throwaway valkey-server from the
    ``embedded`` extra) or the URL of a Redis that you run (the environment's keys are not
    deleted). Raises ConfigError for bad settings, InvalidArgument naming ``start`` or
    ``server``. Since 0.1.0.
    """

    __test__ = False  # not a test class, whatever pytest makes of its name

    def __init__(
        self,
        worker: rsched.Worker | None = None,
        *,
        start: datetime | str | float | None = None,
        settings: Settings | None = None,
        prefix: str | None = None,
        server: str = FAKE,
    ) -> None:
        self.worker = worker
        self._start_ms = _start_ms(start)
        if server not in (FAKE, EMBEDDED) and "://" not in server:
            raise InvalidArgument(
                "server", f"{server!r}: give 'fake', 'embedded' or a redis:// URL"
            )
        self.server = server
        self.settings = _settings(worker, settings, prefix)
        self._now_ms = self._start_ms
        self._embedded: EmbeddedServer | None = None
        self._redis: Redis | None = None
        self._clock: VirtualClock | None = None
        self._drive: Drive | None = None
        self._client: rsched.Client | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> TestEnv:
        try:
            await self.open()
        except BaseException:
            await self.aclose()  # what was opened (a server started) before the failure
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect, set the clock to the start and take the scheduler's lease (``async with``
        does it)."""
        redis, fake = self._connect()
        self._redis = redis
        settings = self.settings
        self._clock = VirtualClock(Keys(settings.prefix).virtual_clock, shebang=not fake)
        use_virtual_clock(redis, self._clock)
        await self._clock.set_ms(redis, self._now_ms)
        self._client = rsched.Client(redis, settings)
        await self._client.partitions()
        self._drive = Drive(redis, settings, self.worker)
        await self._drive.open()

    def _connect(self) -> tuple[Redis, bool]:
        if self.server == FAKE:
            return fake_redis(), True
        url = self.server
        if self.server == EMBEDDED:
            self._embedded = EmbeddedServer().start()
            url = self._embedded.url
        settings = self.settings.model_copy(update={"redis_url": url})
        return connect(settings, encoding_errors="replace"), False

    async def aclose(self) -> None:
        """Give back the lease, close the connections, stop the embedded server."""
        try:
            if self._drive is not None:
                await self._drive.close()
            if self._redis is not None:
                await self._redis.aclose()
        finally:
            self._drive = self._redis = self._client = None
            if self._embedded is not None:
                self._embedded.stop()
                self._embedded = None

    # --- what tests use ----------------------------------------------------------------------

    @property
    def client(self) -> rsched.Client:
        """The client of the environment: schedules, enqueues, reads, as in production."""
        if self._client is None:
            raise RuntimeError("the TestEnv is not open: use `async with TestEnv(...) as env`")
        return self._client

    @property
    def redis(self) -> Redis:
        """The environment's Redis client (decoded), for looking at keys directly."""
        if self._redis is None:
            raise RuntimeError("the TestEnv is not open: use `async with TestEnv(...) as env`")
        return self._redis

    def now(self) -> datetime:
        """The virtual time (aware, UTC)."""
        return from_ms(self._now_ms)

    async def advance(self, by: float | str | timedelta) -> list[RunRecord]:
        """Move the clock ``by`` (seconds, ``"365d"``, ``"2h30m"``, a timedelta; 0 is allowed),
        stopping at each time something is due on the way: schedules fire, delayed jobs and
        retries come due, jobs run. Returns the runs log records written meanwhile (one per
        attempt that ended, and per occurrence skipped), in time order. Raises
        InvalidArgument naming ``by``."""
        drive = self._driving()
        end = self._now_ms + _span_ms(by, "by")
        mark = await self._runs_mark()
        await drive.renew()
        await drive.settle(self._now_ms)
        while (due := drive.next_due(self._now_ms)) is not None and due <= end:
            await self._set(due)
            await drive.settle(due)
        if self._now_ms < end:
            await self._set(end)
            await drive.settle(end)
        return await self._runs_since(mark)

    async def run_pending(self) -> list[RunRecord]:
        """Do what is due now without moving the clock: fire the due schedules, run the jobs
        waiting (those the test enqueued, retries due now). Returns the records written."""
        return await self.advance(0)

    async def jump(self, by: float | str | timedelta) -> None:
        """Move the clock ``by`` with nothing running meanwhile, as if the scheduler and the
        workers were down: what came due is found late by the next :meth:`advance` or
        :meth:`run_pending`, where the misfire policies apply. Raises InvalidArgument naming
        ``by``."""
        self._driving()
        await self._set(self._now_ms + _span_ms(by, "by"))

    async def enqueued(self, queue: str | None = None) -> list[rsched.JobInfo]:
        """The jobs waiting (queued or delayed), of ``queue`` or of every queue: what the
        application enqueued and no handler ran yet."""
        client = self.client
        found: list[rsched.JobInfo] = []
        for state in ("queued", "delayed"):
            cursor: str | None = None
            while True:
                page = await client.jobs(queue=queue, state=state, limit=500, cursor=cursor)
                found += page.items
                cursor = page.cursor
                if cursor is None:
                    break
        return found

    # --- the clock and the runs log ----------------------------------------------------------

    def _driving(self) -> Drive:
        if self._drive is None:
            raise RuntimeError("the TestEnv is not open: use `async with TestEnv(...) as env`")
        return self._drive

    async def _set(self, ms: int) -> None:
        assert self._clock is not None
        await self._clock.set_ms(self.redis, ms)
        self._now_ms = ms

    async def _runs_mark(self) -> str:
        """The id of the newest record in the runs log ("0-0": none)."""
        newest = await self.redis.xrevrange(self._driving().keys.runs, count=1)
        return str(newest[0][0]) if newest else "0-0"

    async def _runs_since(self, mark: str) -> list[RunRecord]:
        key = self._driving().keys.runs
        out: list[RunRecord] = []
        while True:
            entries = cast(
                list[tuple[str, dict[str, str]]],
                await self.redis.xrange(key, min=f"({mark}", max="+", count=_RUNS_CHUNK),
            )
            for entry_id, fields in entries:
                record = record_of(str(entry_id), fields)
                if record is not None:
                    out.append(record)
            if len(entries) < _RUNS_CHUNK:
                return out
            mark = str(entries[-1][0])


def _settings(worker: rsched.Worker | None, given: Settings | None, prefix: str | None) -> Settings:
    """The deployment's settings in a TestEnv: the worker's (or ``given``), on one partition,
    without the waits a test has no use for."""
    base = given or Settings()
    if worker is not None:
        base = base.model_copy(update={"worker": worker.resolve_settings().worker})
    update: dict[str, Any] = {
        "partitions": 1,
        "cluster": False,
        "durability": "async",  # no replica to wait for
        # Specs are read when due (a prefetch is paced by the wall clock), and every schedule
        # stays in the index: parking only moves far-off ones aside, and bringing them back
        # would be one more stop per run.
        "scheduler": base.scheduler.model_copy(update={"prefetch_ms": 0, "park": False}),
        # One worker in the process: a task it has no handler for is nobody's.
        "worker": base.worker.model_copy(update={"unknown_task_grace_s": 0.0}),
    }
    if prefix is not None:
        update["prefix"] = Settings(prefix=prefix).prefix
    return base.model_copy(update=update)


def _start_ms(start: datetime | str | float | None) -> int:
    if start is None:
        return to_ms(DEFAULT_START)
    if isinstance(start, str):
        try:
            start = datetime.fromisoformat(start)
        except ValueError:
            raise InvalidArgument(
                "start", f"{start!r} is not ISO 8601: give e.g. 2027-01-01T00:00:00+01:00"
            ) from None
    if isinstance(start, datetime):
        if start.tzinfo is None:
            raise InvalidArgument("start", f"{start} has no time zone: give an aware datetime")
        return to_ms(start)
    if isinstance(start, bool) or not isinstance(start, int | float) or not math.isfinite(start):
        raise InvalidArgument("start", f"{start!r}: give a datetime, ISO 8601 text or seconds")
    return round(start * 1000)


def _span_ms(value: float | str | timedelta, name: str) -> int:
    try:
        return round(parse_duration_s(value, allow_zero=True) * 1000)
    except ValueError as exc:
        raise InvalidArgument(name, str(exc)) from None
