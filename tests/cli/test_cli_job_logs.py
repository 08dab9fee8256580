"""``rsched job ID --logs [--follow]``: a job's log, and following it until the job ends."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.settings import Settings
from tests.support.command import Cli
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running


async def test_logs_print_every_attempt(redis: Redis, settings: Settings, cli: Cli) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        job.log(f"attempt {job.attempt} says hi")
        job.set_progress(0.5, "half")
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0)

    async with rsched.Client.from_settings(settings) as client:
        await client.enqueue("t", execution_id="j1")
        async with running(worker, redis):

            async def logged() -> bool:
                return len(await client.job_logs("j1")) == 2

            await eventually(logged)
    code, out, err = await anyio.to_thread.run_sync(cli, "job", "j1", "--logs")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("#1 info     attempt 1 says hi")
    assert lines[1].endswith("#2 info     attempt 2 says hi")
    code, out, _ = await anyio.to_thread.run_sync(cli, "--json", "job", "j1", "--attempt", "2")
    assert code == 0
    assert [r["message"] for r in orjson.loads(out)] == ["attempt 2 says hi"]
    code, out, _ = await anyio.to_thread.run_sync(cli, "job", "j1")
    assert "50%  half" in out
    code, _, err = await anyio.to_thread.run_sync(cli, "job", "j1", "--attempt", "0")
    assert code != 0
    assert "--attempt" in err
    code, out, _ = await anyio.to_thread.run_sync(cli, "job", "nope", "--logs")
    assert code != 0


@pytest.mark.slow
async def test_follow_prints_lines_as_they_come_until_the_end(
    redis: Redis, settings: Settings, spawn: Callable[..., Proc]
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    go = anyio.Event()

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        job.log("started")
        await go.wait()
        for i in range(3):
            job.set_progress((i + 1) / 3, f"step {i}")
            job.log(f"step {i}")
            await anyio.sleep(0.4)

    async with rsched.Client.from_settings(settings) as client:
        await client.enqueue("t", execution_id="f1")
        async with running(worker, redis):

            async def started() -> bool:
                return bool(await client.job_logs("f1"))

            await eventually(started)
            proc = spawn("rsched._cli.main", "job", "f1", "--logs", "--follow", env=_env(settings))
            await proc.appears("-- following f1 (running)")
            await proc.appears("info     started")
            go.set()
            code = await anyio.to_thread.run_sync(proc.wait)
    out = proc.output()
    assert code == 0, out
    logged = [line.split(" info     ")[1] for line in out.splitlines() if " info " in line]
    assert logged == ["started", "step 0", "step 1", "step 2"]
    assert "-- progress 100% step 2" in out
    assert out.splitlines()[-1] == "-- completed"


def _env(settings: Settings) -> dict[str, str]:
    return {**os.environ, "RSCHED_REDIS_URL": settings.url, "RSCHED_PREFIX": settings.prefix}


def test_follow_stops_on_ctrl_c(spawn: Callable[..., Proc], settings: Settings) -> None:
    with rsched.SyncClient.from_settings(settings) as client:
        client.enqueue("never.run", execution_id="w1")
    proc = spawn("rsched._cli.main", "job", "w1", "--logs", "--follow", env=_env(settings))
    proc.wait_for("-- following w1 (queued)")
    proc.signal(signal.SIGINT)
    assert proc.wait() == 130
    assert "Traceback" not in proc.output()
