"""Task handlers for worker tests that run ``rsched-worker`` in a child process."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import anyio
import orjson
from redis import Redis, RedisCluster

import rsched
from tests.support.paths import ROOT

worker = rsched.Worker(queues=["default"], concurrency=5)
empty = rsched.Worker(queues=["default"])  # no tasks: refuses to start


def marks_key(prefix: str) -> str:
    return "{" + prefix + "}:test-marks"


def _mark(job: rsched.Job, what: str) -> None:
    # Tests read these marks to see which process ran what, and when.
    url = os.environ["RSCHED_REDIS_URL"]
    cluster = os.environ.get("RSCHED_CLUSTER") == "true"
    with (RedisCluster if cluster else Redis).from_url(url, decode_responses=True) as client:
        client.rpush(
            marks_key(os.environ["RSCHED_PREFIX"]),
            f"{what}:{job.execution_id}:{job.attempt}:{os.getpid()}:{time.time()}",
        )


@worker.task("app.sleep")
async def sleep(job: rsched.Job) -> None:
    _mark(job, "start")
    await anyio.sleep(float(job.payload.get("s", 1)))
    _mark(job, "end")


@worker.task("app.sync_sleep")
def sync_sleep(job: rsched.Job) -> None:
    _mark(job, "start")
    time.sleep(float(job.payload.get("s", 1)))
    _mark(job, "end")


@worker.task("app.crash")
def crash(job: rsched.Job) -> None:
    _mark(job, "start")
    os._exit(3)  # a job that kills its worker


@worker.task("app.noop")
async def noop(job: rsched.Job) -> None:
    _mark(job, "end")


# --- helpers shared by the worker tests (in-process workers) ---------------------------------

FAST_WORKER = {
    "block_ms": 100,
    "visibility_timeout_s": 1.0,
    "heartbeat_s": 0.2,
    "reclaim_interval_s": 0.2,
    "promote_interval_ms": 50,
    "shutdown_grace_period_s": 2.0,
}


def any_(client: object) -> Any:
    """A Redis client untyped: redis-py's stubs type replies as unions of bytes and str."""
    return client


def fast_settings(settings: rsched.Settings, **worker_fields: object) -> rsched.Settings:
    """``settings`` with short worker timings (tests run in seconds, not minutes)."""
    from rsched._core.settings import WorkerSettings

    fields = {**FAST_WORKER, **worker_fields}
    return settings.model_copy(update={"worker": WorkerSettings.model_validate(fields)})


def fast_env(settings: rsched.Settings, **extra: str) -> dict[str, str]:
    """Environment of a child ``rsched-worker`` using ``settings`` with short timings."""
    env = {
        "PYTHONPATH": str(ROOT),
        "RSCHED_REDIS_URL": settings.url,
        "RSCHED_PREFIX": settings.prefix,
        "RSCHED_CLUSTER": "true" if settings.cluster else "false",
        "RSCHED_WORKER__BLOCK_MS": "100",
        "RSCHED_WORKER__VISIBILITY_TIMEOUT_S": "1",
        "RSCHED_WORKER__HEARTBEAT_S": "0.2",
        "RSCHED_WORKER__RECLAIM_INTERVAL_S": "0.2",
        "RSCHED_WORKER__PROMOTE_INTERVAL_MS": "50",
    }
    env.update(extra)
    return env


@worker.task("app.pass")
async def pass_(job: rsched.Job) -> None:
    """Does nothing: a herd's jobs, counted through the runs log."""


@worker.task("app.fail_first")
def fail_first(job: rsched.Job) -> None:
    # Fails the first run of each execution id (a dead letter with max_retries=0), then passes:
    # a requeued dead letter completes.
    url = os.environ["RSCHED_REDIS_URL"]
    cluster = os.environ.get("RSCHED_CLUSTER") == "true"
    with (RedisCluster if cluster else Redis).from_url(url, decode_responses=True) as client:
        first = client.sadd("{" + os.environ["RSCHED_PREFIX"] + "}:test-failed", job.execution_id)
    if first:
        raise RuntimeError("first run fails")
    _mark(job, "end")


@worker.task("app.limited", limits=[rsched.Limit("lim:{k}", concurrency=2)])
async def limited(job: rsched.Job) -> None:
    """At most 2 of one key ``k`` at once, across every worker process."""
    _mark(job, f"start-{job.payload['k']}")
    await anyio.sleep(float(job.payload.get("s", 0.2)))
    _mark(job, f"end-{job.payload['k']}")


@worker.task("app.rated", limits=[rsched.Limit("rated", rate="5/s")])
async def rated(job: rsched.Job) -> None:
    """At most 5 starts in any second, across every worker process."""
    _mark(job, "start")


@worker.task("app.chatty")
def chatty(job: rsched.Job) -> None:
    """Says something through the logging module (a sync handler: from its thread)."""
    logging.getLogger("app").info("chatty info")
    logging.getLogger("app").warning("chatty warning")
    job.set_progress(1.0, "said it")


def merges_key(prefix: str) -> str:
    return "{" + prefix + "}:test-merges"


@worker.task("app.part")
async def part(job: rsched.Job) -> int:
    """A part of a fan-out: returns its ``i`` after a short while (the kills land mid-run)."""
    await anyio.sleep(0.05 + (int(job.payload["i"]) % 7) * 0.02)
    return int(job.payload["i"])


@worker.task("app.merge")
async def merge(job: rsched.Job) -> int:
    """A fan-in: records each of its runs (entry id, delivery, the results it got), then takes
    a while, so that a killed worker may leave it to another."""
    url = os.environ["RSCHED_REDIS_URL"]
    cluster = os.environ.get("RSCHED_CLUSTER") == "true"
    with (RedisCluster if cluster else Redis).from_url(url, decode_responses=True) as client:
        client.rpush(
            merges_key(os.environ["RSCHED_PREFIX"]),
            orjson.dumps([job.execution_id, job.entry_id, job.parent_results]).decode(),
        )
    await anyio.sleep(0.3)
    return sum(job.parent_results)
