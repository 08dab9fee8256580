"""The worker's per-job log lines (rsched.worker.jobs): job.end at the outcome's level, job.start
only at debug, its fields gathered only then (through the test kit's worker: the same Runner)."""

from __future__ import annotations

import logging

import pytest

import rsched
from rsched.testing import TestEnv


@pytest.mark.parametrize(("level", "starts"), [(logging.INFO, 0), (logging.DEBUG, 1)])
async def test_job_start_is_written_only_at_debug(
    caplog: pytest.LogCaptureFixture, level: int, starts: int
) -> None:
    worker = rsched.Worker(["default"])

    @worker.task("t")
    async def t(job: rsched.Job) -> None:
        pass

    caplog.set_level(level, logger="rsched")
    async with TestEnv(worker) as env:
        done = await env.client.enqueue("t")
        await env.run_pending()
    lines = [
        (r.getMessage(), getattr(r, "rsched_fields", {}))
        for r in caplog.records
        if r.name == "rsched.worker.jobs"
    ]
    assert [event for event, _ in lines] == ["job.start"] * starts + ["job.end"]
    assert all(fields["execution_id"] == done.execution_id for _, fields in lines)
