"""A running job's progress and log: job.set_progress, job.log and logging records made inside
handlers (async and sync), the level kept, the worker's own lines left out, reads through
Client and SyncClient, and a Redis hiccup the handler never sees."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running, start_worker


def _worker(settings: Settings, **fields: Any) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings, **fields))

    @worker.task("async")
    async def run_async(job: rsched.Job) -> None:
        job.set_progress(0.5, "half way")
        job.log("hello from async")
        logging.getLogger("app.a").info("info %s", 1)
        logging.getLogger("app.a").debug("a detail")
        logging.getLogger().warning("root warning")
        job.log("it went wrong", level="error")

    @worker.task("sync")
    def run_sync(job: rsched.Job) -> int:
        job.set_progress(1.0)
        job.log("hello from sync")
        logging.getLogger("app.s").info("from the thread")
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            logging.getLogger("app.s").exception("boom")
        return 7

    @worker.task("quiet")
    async def quiet(job: rsched.Job) -> None:
        logging.getLogger("app.q").debug("below the level")

    return worker


async def _ended(client: rsched.Client, *ids: str) -> bool:
    return all([(await client.job(i)).state == "completed" for i in ids])


async def _logged(client: rsched.Client, execution_id: str, n: int) -> bool:
    return len(await client.job_logs(execution_id)) >= n


async def test_what_a_handler_said_is_kept_before_its_run_ends(
    redis: Redis, settings: Settings
) -> None:
    """Whoever sees the run ended sees all its handler said: its last words are written before
    its outcome is recorded, not at the journal's next round."""
    worker = _worker(settings)
    async with rsched.Client.from_settings(settings) as client:
        ids = [(await client.enqueue("async")).execution_id for _ in range(5)]
        async with running(worker, redis):
            for execution_id in ids:
                await eventually(lambda eid=execution_id: _ended(client, eid))
                assert [r.message for r in await client.job_logs(execution_id)][-1] == (
                    "it went wrong"
                )
                progress = (await client.job(execution_id)).progress
                assert progress is not None
                assert progress.fraction == 0.5


async def test_handlers_progress_and_logs_are_kept(redis: Redis, settings: Settings) -> None:
    worker = _worker(settings)
    async with rsched.Client.from_settings(settings) as client:
        a = (await client.enqueue("async")).execution_id
        s = (await client.enqueue("sync")).execution_id
        q = (await client.enqueue("quiet")).execution_id
        async with running(worker, redis):
            await eventually(lambda: _ended(client, a, s, q))
            await eventually(lambda: _logged(client, a, 4))
            await eventually(lambda: _logged(client, s, 3))
        logs_a = await client.job_logs(a)
        assert [(r.level, r.message) for r in logs_a] == [
            ("info", "hello from async"),
            ("info", "app.a: info 1"),
            ("warning", "root warning"),
            ("error", "it went wrong"),
        ]
        assert {r.attempt for r in logs_a} == {1}
        logs_s = await client.job_logs(s)
        assert [r.message.split("\n")[0] for r in logs_s] == [
            "hello from sync",
            "app.s: from the thread",
            "app.s: boom",
        ]
        assert "ZeroDivisionError" in logs_s[2].message  # the traceback of logging.exception
        assert logs_s[2].level == "error"
        info = await client.job(a)
        assert info.progress is not None
        assert (info.progress.fraction, info.progress.note) == (0.5, "half way")
        done = (await client.job(s)).progress
        assert done is not None
        assert done == rsched.JobProgress(1.0, None, done.at, 1)
        # A handler that said nothing kept (the worker's own job.start / job.end lines are
        # not the job's) left no key behind.
        assert await client.job_logs(q) == []
        assert (await client.job(q)).progress is None
        keys = Keys(settings.prefix)
        assert not await redis.exists(keys.job_progress(q), keys.job_log(q, 1))
        assert await client.job_logs(a, attempt=2) == []
        with pytest.raises(rsched.InvalidArgument, match="attempt"):
            await client.job_logs(a, attempt=0)

    def read_sync() -> list[rsched.JobLogRecord]:
        with rsched.SyncClient.from_settings(settings) as sync:
            assert sync.job(a).progress is not None
            assert [r.execution_id for r in sync.job_attempts(a)] == [a]
            return sync.job_logs(a, attempt=1)

    assert len(await anyio.to_thread.run_sync(read_sync)) == 4


@pytest.mark.parametrize(("level", "kept"), [("debug", 2), ("warning", 0)])
async def test_the_worker_keeps_records_at_its_level(
    redis: Redis, settings: Settings, level: str, kept: int
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, job_log_level=level))

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        logging.getLogger("app").debug("debug line")
        logging.getLogger("app").info("info line")
        job.log("marker", level="critical")  # job.log keeps every level

    async with rsched.Client.from_settings(settings) as client:
        e = (await client.enqueue("t")).execution_id
        async with running(worker, redis):
            await eventually(lambda: _logged(client, e, 1 + kept))
        messages = [r.message for r in await client.job_logs(e)]
        assert messages == ["app: debug line", "app: info line", "marker"][2 - kept :]


async def test_attempts_are_kept_apart(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, result_ttl_s=500))

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        job.log(f"attempt {job.attempt}")
        job.set_progress(job.attempt / 2)
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0)

    async with rsched.Client.from_settings(settings) as client:
        e = (await client.enqueue("t")).execution_id
        async with running(worker, redis):
            await eventually(lambda: _ended(client, e))
            await eventually(lambda: _logged(client, e, 2))
        assert [(r.attempt, r.message) for r in await client.job_logs(e)] == [
            (1, "attempt 1"),
            (2, "attempt 2"),
        ]
        assert [r.message for r in await client.job_logs(e, attempt=1)] == ["attempt 1"]
        progress = (await client.job(e)).progress
        assert progress is not None
        assert (progress.fraction, progress.attempt) == (1.0, 2)
        keys = Keys(settings.prefix)
        for key in (keys.job_log(e, 1), keys.job_log(e, 2), keys.job_progress(e)):
            assert 450_000 < await redis.pttl(key) <= 500_000  # as long as the result
        attempts = await client.job_attempts(e)
        assert [(r.attempt, r.status) for r in attempts] == [(2, "completed"), (1, "retried")]


async def test_bad_progress_is_refused_naming_the_argument() -> None:
    job = rsched.Job(execution_id="e", task="t", queue="q")
    for bad in (1.5, -0.1, float("nan"), "half", True):
        with pytest.raises(rsched.InvalidArgument, match="fraction"):
            job.set_progress(bad)  # type: ignore[arg-type]
    with pytest.raises(rsched.InvalidArgument, match="level"):
        job.log("x", level="loud")
    job.set_progress(0.5, "outside a worker: kept nowhere")  # no journal: a no-op
    job.log("nowhere")


async def _lines_of(client: rsched.Client, execution_id: str) -> list[str]:
    return [r.message for r in await client.job_logs(execution_id)]


@pytest.mark.slow
async def test_a_redis_hiccup_never_fails_the_job(
    make_server: Callable[..., Any], prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server()
    settings = Settings(redis_url=server.url, prefix=prefix, socket_timeout_s=1)
    worker = rsched.Worker(settings=fast_settings(settings, visibility_timeout_s=30))
    paused = threading.Event()
    took: list[float] = []

    @worker.task("t")
    def run(job: rsched.Job) -> None:
        job.log("before")
        paused.wait(30)
        began = time.monotonic()
        for i in range(50):
            job.log(f"during {i}")
            job.set_progress((i + 1) / 50)
        logging.getLogger("app").warning("still here")
        took.append(time.monotonic() - began)

    async with rsched.Client.from_settings(settings) as client:
        e = (await client.enqueue("t")).execution_id
        async with running(worker, None):
            await eventually(lambda: _lines_of(client, e))
            await anyio.to_thread.run_sync(server.pause)
            try:
                paused.set()
                await eventually(lambda: bool(took))
                await eventually(lambda: "job.log_unwritten" in caplog.text)
            finally:
                await anyio.to_thread.run_sync(server.resume)
            await eventually(lambda: _ended(client, e))
            await eventually(lambda: _logged(client, e, 52))
        lines = await _lines_of(client, e)
        assert lines[0] == "before"
        assert lines[-1] == "app: still here"
        assert lines[1:-1] == [f"during {i}" for i in range(50)]
        progress = (await client.job(e)).progress
        assert progress is not None
        assert progress.fraction == 1.0
    assert took[0] < 1.0  # the handler never waited for Redis


class _FlakyStore:
    """A partition's store whose first ``fails`` writes Redis refuses; a batch's token is
    applied once, as lua/job_log.lua does."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.written: list[tuple[str, str]] = []  # (token, message) of every line applied
        self.tokens: set[str] = set()

    async def write_news(self, runs: list[Any], ttl_ms: int) -> int:
        if self.fails:
            self.fails -= 1
            raise ConnectionError("Redis is away")
        for run in runs:
            if run.token not in self.tokens:
                self.written += [(run.token, orjson.loads(line)[2]) for line in run.lines]
        self.tokens |= {run.token for run in runs}
        return 0


async def test_the_journal_keeps_news_in_order_through_refused_writes(settings: Settings) -> None:
    from types import SimpleNamespace

    from rsched._worker.journal import Journal

    store = _FlakyStore(fails=3)
    state = SimpleNamespace(
        cfg=fast_settings(settings).worker, stores=[store], consumer="w", running={}
    )
    journal = Journal(state)  # type: ignore[arg-type]
    job = rsched.Job(execution_id="e", task="t", queue="q")
    for round_ in range(5):
        journal.line(job, "info", f"line {round_}")
        journal.progress(job, round_ / 4, "")
        await journal.flush()
    await journal.flush()
    assert [m for _, m in store.written] == [f"line {i}" for i in range(5)]
    assert not journal._refused


@pytest.mark.slow
async def test_a_worker_process_keeps_records_and_still_prints_warnings(
    spawn: Callable[..., Proc], settings: Settings
) -> None:
    proc = start_worker(spawn, settings)
    async with rsched.Client.from_settings(settings) as client:
        e = (await client.enqueue("app.chatty")).execution_id
        await eventually(lambda: _logged(client, e, 2))
        assert [r.message for r in await client.job_logs(e)] == [
            "app: chatty info",
            "app: chatty warning",
        ]
    # As before the worker kept them: a warning of a logger without a handler goes to stderr
    # (the logging module's last resort), an info record does not.
    await proc.appears("chatty warning")
    assert "chatty info" not in proc.output()
