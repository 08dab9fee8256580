"""The blocking SDK: the same methods as the async client, from plain threads."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis as redis_sync

import rsched
from rsched import Client, Schedule, ScheduleExists, ScheduleNotFound, Settings, SyncClient
from rsched._core.rules import Priority
from tests.support.waiting import eventually_blocking
from tests.support.workers import worker_thread


@pytest.fixture
def sync_client(redis_url: str, prefix: str) -> Iterator[SyncClient]:
    with SyncClient.from_url(redis_url, prefix=prefix) as client:
        yield client
    with redis_sync.Redis.from_url(redis_url) as raw:
        keys = list(raw.scan_iter(match=f"{{{prefix}}}:*", count=1000))
        if keys:
            raw.delete(*keys)


def test_sync_client_round_trip(sync_client: SyncClient) -> None:
    stored = sync_client.add(Schedule(id="s", task="t", cron="*/5 * * * *"))
    assert stored.generation == 1
    with pytest.raises(ScheduleExists):
        sync_client.add(Schedule(id="s", task="t", every=5))
    assert sync_client.update("s", every=30).every == 30
    sync_client.pause("s", note="why not")
    assert sync_client.get("s").paused
    sync_client.resume("s")
    assert len(sync_client.next_runs("s", 4)) == 4
    fired = sync_client.trigger("s")
    assert fired.status == "fired"
    assert sync_client.history("s").items[0].execution_id == fired.execution_id
    assert [e.event for e in sync_client.iter_history("s", page_size=1)] == ["fired"]
    assert [s.id for s in sync_client.list().items] == ["s"]
    assert [s.id for s in sync_client.iter_schedules(page_size=1)] == ["s"]
    assert sync_client.stats().schedules["total"] == 1
    sync_client.remove("s")
    with pytest.raises(ScheduleNotFound):
        sync_client.get("s")


def test_sync_client_from_threads(sync_client: SyncClient) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                sync_client.upsert(Schedule(id=f"t{n}-{i}", task="t", every=60))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(sync_client.list(limit=100).items) == 40


def test_close_is_idempotent(redis_url: str, prefix: str) -> None:
    client = SyncClient(redis_url, prefix)
    client.close()
    client.close()


def test_sync_client_jobs_and_backfill(sync_client: SyncClient) -> None:
    done = sync_client.enqueue("emails.send", {"to": "x"}, queue="mail", delay=0)
    assert done.created
    assert done.execution_id.startswith("job-")
    assert sync_client.stats().queues["mail"]["length"] == 1
    assert sync_client.dead_letters("mail") == rsched.Page([], None)
    assert list(sync_client.iter_dead_letters("mail")) == []
    assert sync_client.requeue("mail") == 0
    assert sync_client.purge("mail") == 0
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    sync_client.add(Schedule(id="b", task="t", every=60, start_at=start, overlap="allow"))
    assert sync_client.backfill("b", start, start + timedelta(minutes=1)).count("fired") == 2


def test_sync_client_offers_every_client_method_with_its_parameters() -> None:
    """Every public method of Client is on SyncClient, taking the same parameters (names, kinds,
    defaults, types); only the async ones' close (``aclose``) is ``close`` there."""
    for name, method in inspect.getmembers(Client):
        if name.startswith("_") or name == "aclose":
            continue
        assert hasattr(SyncClient, name), f"SyncClient has no {name}"
        if not callable(method):
            continue
        ours = inspect.signature(getattr(SyncClient, name)).parameters
        theirs = inspect.signature(method).parameters
        assert [(p.name, p.kind, p.default, p.annotation) for p in ours.values()] == [
            (p.name, p.kind, p.default, p.annotation) for p in theirs.values()
        ], name
    assert callable(SyncClient.close)


def test_sync_client_from_settings(redis_url: str, prefix: str) -> None:
    with SyncClient.from_settings(Settings(redis_url=redis_url, prefix=prefix)) as client:
        assert client.settings.prefix == prefix
        assert client.server_time().tzinfo is not None


def test_sync_client_limits(sync_client: SyncClient) -> None:
    assert sync_client.set_limit("crm", rate="100/m") == 0
    assert sync_client.set_limit("customer:*", concurrency=0) == 0
    rows = {r.key: r for r in sync_client.limits()}
    assert rows["crm"].override == {"r": [100, 60_000]}
    assert str(rows["crm"].rate) == "100/m"
    assert (rows["customer:*"].concurrency, rows["customer:*"].override) == (0, {"c": 0})
    assert [r.key for r in sync_client.limits(match="crm")] == ["crm"]
    with pytest.raises(rsched.InvalidArgument, match="concurrency"):
        sync_client.set_limit("crm", concurrency=-1)
    assert sync_client.clear_limit("customer:*") == 0
    assert [r.key for r in sync_client.limits()] == ["crm"]
    done = sync_client.enqueue(
        "t", {"customer_id": 7}, limits=[rsched.Limit("customer:{customer_id}", concurrency=1)]
    )
    assert sync_client.job(done.execution_id).state == "queued"
    with pytest.raises(rsched.InvalidJob, match="customer_id"):
        sync_client.enqueue("t", {}, limits=[rsched.Limit("customer:{customer_id}", concurrency=1)])


def test_sync_client_waiting(sync_client: SyncClient, settings: Settings) -> None:
    key = [rsched.Limit("k/1", concurrency=1)]
    assert sync_client.waiting("k/1") == []
    assert sync_client.limit("k/1") == rsched.LimitInfo("k/1", "", None, None, 0, 0, 0, None)
    with worker_thread(settings):
        sync_client.enqueue("web.wait", {"s": 30}, execution_id="a", limits=key)
        eventually_blocking(lambda: sync_client.job("a").state == "running", what="a to run")
        order: list[tuple[str, Priority]] = [("b", "low"), ("c", "normal"), ("d", "high")]
        for job_id, priority in order:
            sync_client.enqueue(
                "web.wait", {"s": 30}, execution_id=job_id, limits=key, priority=priority
            )
        eventually_blocking(lambda: len(sync_client.waiting("k/1")) == 3, what="three to wait")
        waiting = sync_client.waiting("k/1")
        assert [(j.execution_id, j.state, j.limit, j.priority) for j in waiting] == [
            ("d", "waiting", "k/1", "high"),
            ("c", "waiting", "k/1", "normal"),
            ("b", "waiting", "k/1", "low"),
        ]
        assert [j.execution_id for j in sync_client.waiting("k/1", limit=1)] == ["d"]
        info = sync_client.limit("k/1")
        assert (info.concurrency, info.holders, info.waiting, info.template) == (1, 1, 3, "k/1")
        for job_id in "abcd":
            sync_client.cancel(job_id)
    with pytest.raises(rsched.InvalidArgument, match="key") as bad:
        sync_client.waiting("k*")
    assert bad.value.field == "key"
    with pytest.raises(rsched.InvalidArgument) as bad:
        sync_client.waiting("k", limit=0)
    assert bad.value.field == "limit"
    with pytest.raises(rsched.InvalidArgument) as bad:
        sync_client.limit("a{b")
    assert bad.value.field == "key"


def test_sync_client_flows(sync_client: SyncClient) -> None:
    flow = rsched.chain(rsched.step("etl.extract"), rsched.step("etl.load"))
    run = sync_client.run_flow(flow, flow_id="etl-1", labels={"team": "data"})
    assert (run.flow_id, run.steps, run.roots, run.created) == ("etl-1", 2, 1, True)
    assert not sync_client.run_flow(flow, flow_id="etl-1").created
    info = sync_client.flow("etl-1")
    assert info.state == "running"
    assert [(s.task, s.state) for s in info.steps] == [
        ("etl.extract", "queued"),
        ("etl.load", "waiting"),
    ]
    assert info.labels == {"team": "data"}
    assert [f.flow_id for f in sync_client.flows(state="running")] == ["etl-1"]
    assert sync_client.cancel_flow("etl-1")
    assert not sync_client.cancel_flow("etl-1")
    assert sync_client.flow("etl-1").state == "cancelled"
    assert [f.flow_id for f in sync_client.flows(state="cancelled", limit=5)] == ["etl-1"]
    with pytest.raises(rsched.FlowNotFound):
        sync_client.flow("nope")
