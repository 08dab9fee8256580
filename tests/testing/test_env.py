"""rsched.testing.TestEnv on fakeredis: schedules fire and jobs run at virtual times, through
rsched's own scripts and code (docs/testing.md). No server, no waiting."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

import rsched
from rsched.testing import DEFAULT_START, TestEnv

ROME_2027 = "2027-01-01T00:00:00+01:00"


def reports_worker(seen: list[rsched.Job]) -> rsched.Worker:
    worker = rsched.Worker(["default"])

    @worker.task("reports.nightly")
    async def nightly(job: rsched.Job) -> None:
        seen.append(job)

    return worker


async def test_a_year_of_a_nightly_report_in_rome() -> None:
    seen: list[rsched.Job] = []
    async with TestEnv(reports_worker(seen), start=ROME_2027) as env:
        await env.client.add(
            rsched.Schedule(
                id="nightly", task="reports.nightly", cron="0 2 * * *", timezone="Europe/Rome"
            )
        )
        ran = await env.advance("365d")
        nightly = [r for r in ran if r.schedule_id == "nightly"]
        assert len(nightly) == 365
        assert {r.status for r in nightly} == {"completed"}
        assert len(seen) == 365
        assert env.now() == datetime(2027, 12, 31, 23, tzinfo=UTC)
    at = {r.scheduled_at.date(): r for r in nightly if r.scheduled_at is not None}
    assert len(at) == 365
    # 02:00 in Rome is 01:00 UTC in winter, 00:00 UTC in summer.
    assert at[date(2027, 1, 1)].scheduled_at == datetime(2027, 1, 1, 1, tzinfo=UTC)
    assert at[date(2027, 7, 1)].scheduled_at == datetime(2027, 7, 1, 0, tzinfo=UTC)
    # Spring forward (28 March): 02:00 does not exist; cron's rule runs it at 03:00 CEST.
    assert at[date(2027, 3, 28)].scheduled_at == datetime(2027, 3, 28, 1, tzinfo=UTC)
    # Fall back (31 October): 02:00 happens twice; cron's rule runs the first, CEST.
    fold = [r for r in nightly if r.scheduled_at and r.scheduled_at.date() == date(2027, 10, 31)]
    assert [r.scheduled_at for r in fold] == [datetime(2027, 10, 31, 0, tzinfo=UTC)]
    # Every record's times are virtual: the run started and ended when it was due.
    for record in nightly:
        assert record.ended_at == record.scheduled_at == record.fired_at


async def test_retries_back_off_on_the_virtual_clock_and_end_as_a_dead_letter() -> None:
    worker = rsched.Worker(["default"])

    @worker.task("flaky")
    async def flaky(job: rsched.Job) -> None:
        raise ValueError("boom")

    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with TestEnv(worker, start=start) as env:
        await env.client.add(
            rsched.Schedule(
                id="flaky", task="flaky", at=start + timedelta(seconds=1), max_retries=2,
                retry_base_s=60, retry_multiplier=2, retry_jitter=0,
            )
        )  # fmt: skip
        first = await env.advance("1s")
        assert [(r.status, r.attempt) for r in first] == [("failed", 1)]
        assert await env.advance("59s") == []
        second = await env.advance("1s")  # 60 s after the first attempt
        assert [(r.status, r.attempt) for r in second] == [("failed", 2)]
        assert second[0].ended_at == start + timedelta(seconds=61)
        assert await env.advance("119s") == []
        third = await env.advance("1s")  # 120 s after the second
        assert [(r.status, r.attempt) for r in third] == [("dead", 3)]
        assert third[0].ended_at == start + timedelta(seconds=181)
        dead = await env.client.dead_letters("default")
        assert [(d.error_type, d.schedule_id) for d in dead.items] == [("ValueError", "flaky")]
        assert dead.items[0].dead_at == start + timedelta(seconds=181)


async def test_overlap_skip_while_the_run_is_open() -> None:
    """A run that has not ended (here: no worker takes it) makes overlap="skip" skip the next
    occurrences, as a long-running handler would."""
    async with TestEnv(None) as env:
        await env.client.add(
            rsched.Schedule(id="tick", task="t", every=60, overlap="skip", start_at=env.now())
        )
        ran = await env.advance("5m")
        # The occurrence of minute 1 fired and waits; those of minutes 2 to 5 were skipped.
        assert [r.status for r in ran] == ["skipped"] * 4
        assert [r.scheduled_at for r in ran] == [
            env.now() - timedelta(minutes=n) for n in (3, 2, 1, 0)
        ]
        assert {r.reason for r in ran} == {"overlap"}
        assert [j.schedule_id for j in await env.enqueued()] == ["tick"]


async def test_run_pending_runs_only_what_is_due_now() -> None:
    seen: list[str] = []
    worker = rsched.Worker(["default", "mail"])

    @worker.task("mail.send")
    async def send(job: rsched.Job) -> None:
        seen.append(job.payload["to"])

    async with TestEnv(worker) as env:
        await env.client.enqueue("mail.send", {"to": "a@example.com"}, queue="mail")
        await env.client.enqueue("mail.send", {"to": "b@example.com"}, queue="mail", delay=60)
        ran = await env.run_pending()
        assert [r.status for r in ran] == ["completed"]
        assert seen == ["a@example.com"]
        assert env.now() == DEFAULT_START
        assert [j.payload for j in await env.enqueued("mail")] == [{"to": "b@example.com"}]


async def test_a_delay_is_honoured_only_once_the_clock_reaches_it() -> None:
    envs: list[TestEnv] = []
    seen: list[datetime] = []
    worker = rsched.Worker(["default"])

    @worker.task("later")
    async def later(job: rsched.Job) -> None:
        seen.append(envs[0].now())

    async with TestEnv(worker) as env:
        envs.append(env)
        await env.client.enqueue("later", {}, delay=timedelta(hours=2))
        assert await env.run_pending() == []
        assert await env.advance("1h59m59s") == []
        assert seen == []
        ran = await env.advance("1s")
        assert [r.status for r in ran] == ["completed"]
        assert seen == [DEFAULT_START + timedelta(hours=2)]


async def test_enqueued_shows_what_application_code_enqueued() -> None:
    async def sign_up(client: rsched.Client, email: str) -> None:  # the application's code
        await client.enqueue("mail.welcome", {"to": email}, queue="mail")
        await client.enqueue("crm.sync", {"email": email}, queue="crm", delay=300)

    async with TestEnv(None) as env:
        await sign_up(env.client, "a@example.com")
        mail = await env.enqueued("mail")
        assert [(j.task, j.payload, j.state) for j in mail] == [
            ("mail.welcome", {"to": "a@example.com"}, "queued")
        ]
        assert [(j.task, j.state) for j in await env.enqueued()] == [
            ("crm.sync", "delayed"),
            ("mail.welcome", "queued"),
        ] or [(j.task, j.state) for j in await env.enqueued()] == [
            ("mail.welcome", "queued"),
            ("crm.sync", "delayed"),
        ]


async def test_a_handler_that_enqueues_runs_the_follow_up_at_once() -> None:
    clients: list[rsched.Client] = []
    order: list[str] = []
    worker = rsched.Worker(["default"])

    @worker.task("first")
    async def first(job: rsched.Job) -> None:
        order.append("first")
        await clients[0].enqueue("second", {})

    @worker.task("second")
    async def second(job: rsched.Job) -> None:
        order.append("second")

    async with TestEnv(worker) as env:
        clients.append(env.client)
        await env.client.enqueue("first", {})
        ran = await env.run_pending()
        assert order == ["first", "second"]
        assert [r.task for r in ran] == ["first", "second"]


async def test_jump_makes_the_misfire_policy_apply() -> None:
    seen: list[rsched.Job] = []
    async with TestEnv(reports_worker(seen), start="2030-01-01T00:00:00+00:00") as env:
        await env.client.add(
            rsched.Schedule(
                id="nightly", task="reports.nightly", cron="0 2 * * *", misfire="run_once"
            )
        )
        await env.jump("3d")  # the deployment was down for three days
        ran = await env.run_pending()
        assert [r.status for r in ran] == ["completed"]  # run_once: one run for the three
        assert len(seen) == 1


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(rsched.InvalidArgument, match="start"):
        TestEnv(start="yesterday")
    with pytest.raises(rsched.InvalidArgument, match="start"):
        TestEnv(start=datetime(2030, 1, 1))
    with pytest.raises(rsched.InvalidArgument, match="server"):
        TestEnv(server="nowhere")


async def test_advance_refuses_a_bad_duration() -> None:
    async with TestEnv(None) as env:
        with pytest.raises(rsched.InvalidArgument, match="by"):
            await env.advance("soon")
        with pytest.raises(rsched.InvalidArgument, match="by"):
            await env.advance(-1)


async def test_on_a_real_server_one_environment_per_prefix(redis_url: str, prefix: str) -> None:
    seen: list[rsched.Job] = []
    async with TestEnv(reports_worker(seen), server=redis_url, prefix=prefix) as env:
        await env.client.add({"id": "n", "task": "reports.nightly", "cron": "0 2 * * *"})
        assert [r.status for r in await env.advance("1d")] == ["completed"]
        with pytest.raises(rsched.StateError, match="prefix of its own"):
            async with TestEnv(None, server=redis_url, prefix=prefix):
                pass
