"""The worker protocol (docs/protocol.md) followed with raw Redis commands only.

The worker side of these tests is what a worker written in another language would send: key
names spelled out, XGROUP / XREADGROUP / SET, and EVALSHA of the scripts `rsched script NAME`
prints, with the arguments the document gives. rsched's Client only enqueues and reads the
outcome, as an application would.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

import rsched
from rsched._cli.main import main
from rsched._core.settings import Settings
from tests.support.waiting import eventually

GROUP = "rsched"
QUEUE = "proto"
HISTORY_CAP = 15  # settings.history_limit's default
RUNS_CAP = 500_000  # retention.runs_max_entries' default
DEAD_CAP = 100_000  # worker.dead_letter_max_entries' default


class RawWorker:
    """A worker that speaks the protocol with redis-py's raw commands, as one consumer."""

    def __init__(self, redis: Redis, prefix: str, consumer: str, shas: dict[str, str]) -> None:
        self.r = redis
        self.tag = "{" + prefix + "}"  # one partition: every key carries {prefix}
        self.consumer = consumer
        self.shas = shas
        self.stream = f"{self.tag}:queue:{QUEUE}"

    async def command(self, *words: Any) -> Any:
        """One Redis command as sent on the wire."""
        return await self.r.execute_command(*words)  # type: ignore[no-untyped-call]

    async def eval(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self.command("EVALSHA", self.shas[name], len(keys), *keys, *args)

    async def create_group(self) -> None:
        for suffix in ("", "#high", "#low"):
            try:
                await self.command("XGROUP", "CREATE", self.stream + suffix, GROUP, "0", "MKSTREAM")
            except ResponseError as exc:  # a second worker finds it made
                if "BUSYGROUP" not in str(exc):
                    raise

    async def read(self) -> tuple[str, dict[str, str]]:
        """One new entry of the normal stream (blocking briefly until one is there)."""
        reply = await self.command(
            "XREADGROUP", "GROUP", GROUP, self.consumer, "COUNT", 1, "BLOCK", 2000,
            "STREAMS", self.stream, ">",
        )  # fmt: skip
        assert reply, "no entry was delivered"
        entries = reply[self.stream][0] if isinstance(reply, dict) else reply[0][1]
        entry_id, flat = entries[0]
        fields = flat if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
        return entry_id, fields

    def run(
        self, fields: dict[str, str], status: str, error_type: str = "", error: str = ""
    ) -> str:
        """The runs log record (docs/protocol.md, "The run record")."""
        sched, fired = fields.get("scheduled_at"), fields.get("fired_at")
        record = [
            fields["execution_id"], fields.get("schedule_id") or None, fields["task"], QUEUE,
            status, int(sched) if sched else None, int(fired) if fired else None,
            int(fields.get("attempt", "1")), self.consumer, 12, error_type or None,
            error[:200] or None,
        ]  # fmt: skip
        return json.dumps(record, separators=(",", ":"))

    async def complete(self, entry_id: str, fields: dict[str, str], result: Any) -> int:
        """The result first (SET with a TTL), then `complete` for one enqueued job."""
        exec_id = fields["execution_id"]
        if result is not None:  # a handler that returned nothing keeps no result
            await self.r.set(f"{self.tag}:result:{exec_id}", json.dumps(result), px=86_400_000)
        item = [entry_id, exec_id, "", int(fields["attempt"]), "completed", "", 0,
                self.run(fields, "completed")]  # fmt: skip
        keys = [self.stream, f"{self.tag}:runs", f"{self.tag}:activity"]
        args = [GROUP, HISTORY_CAP, json.dumps([item]), RUNS_CAP, "", "1"]
        return int(await self.eval("complete", keys, args))

    async def retry(self, entry_id: str, fields: dict[str, str], error: str) -> list[Any]:
        attempt = int(fields["attempt"])
        next_fields: list[str] = []
        for name, value in fields.items():
            if name not in ("priority", "limit_order"):
                next_fields += [name, str(attempt + 1) if name == "attempt" else value]
        keys = [self.stream, f"{self.tag}:delayed:{QUEUE}", self.stream, self.stream,
                f"{self.tag}:runs", f"{self.tag}:activity"]  # fmt: skip
        args = [
            GROUP, entry_id, 0, json.dumps(next_fields), HISTORY_CAP, fields["execution_id"],
            attempt, "failed", "0", "", RUNS_CAP, self.run(fields, "failed", "ValueError", error),
        ]  # fmt: skip
        return list(await self.eval("retry", keys, args))

    async def dead(self, entry_id: str, fields: dict[str, str], error: str) -> list[Any]:
        flat = [v for pair in fields.items() for v in pair]
        letter = [
            "reason", "max_retries", "execution_id", fields["execution_id"],
            "task", fields["task"], "schedule_id", "", "error_type", "ValueError",
            "error_message", error, "traceback", "", "deliveries", "1",
            "worker", self.consumer, "job", json.dumps(flat),
        ]  # fmt: skip
        keys = [self.stream, f"{self.tag}:dead:{QUEUE}", self.stream, self.stream, self.stream,
                self.stream, f"{self.tag}:runs", f"{self.tag}:activity"]  # fmt: skip
        args = [
            GROUP, entry_id, DEAD_CAP, HISTORY_CAP, "0", fields["execution_id"],
            fields["attempt"], "", "", RUNS_CAP,
            self.run(fields, "dead", "ValueError", error), *letter,
        ]  # fmt: skip
        return list(await self.eval("dead", keys, args))

    async def heartbeat(self, *entry_ids: str) -> list[str]:
        return list(await self.eval("heartbeat", [self.stream], [GROUP, self.consumer, *entry_ids]))

    async def reclaim(self, min_idle_ms: int) -> list[tuple[str, dict[str, str], int]]:
        streams = [self.stream, self.stream + "#high", self.stream + "#low"]
        args = [GROUP, self.consumer, min_idle_ms, 10, "0-0", "0-0", "0-0"]
        out = []
        for _next, found in await self.eval("reclaim", streams, args):
            for entry_id, flat, deliveries in found:
                out.append((entry_id, dict(zip(flat[::2], flat[1::2], strict=True)), deliveries))
        return out


async def _scripts(redis: Redis, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The worker's scripts as `rsched script NAME` prints them, loaded (SCRIPT LOAD)."""
    shas = {}
    for name in ("complete", "retry", "dead", "heartbeat", "reclaim"):
        capsys.readouterr()
        assert main(["script", name]) == 0
        text = capsys.readouterr().out
        assert main(["script", name, "--sha"]) == 0
        printed = capsys.readouterr().out.strip()
        shas[name] = str(await redis.script_load(text))
        assert shas[name] == printed  # the text is byte for byte what rsched loads
    return shas


@pytest.fixture
async def workers(
    redis: Redis, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> tuple[RawWorker, RawWorker]:
    shas = await _scripts(redis, capsys)
    a = RawWorker(redis, settings.prefix, "raw-a", shas)
    b = RawWorker(redis, settings.prefix, "raw-b", shas)
    await a.create_group()
    await b.create_group()
    return a, b


async def test_a_job_completes_with_its_result(
    redis: Redis, settings: Settings, workers: tuple[RawWorker, RawWorker]
) -> None:
    client = rsched.Client(redis, settings)
    worker, _ = workers
    job = await client.enqueue("t.sum", {"a": 2, "b": 3}, queue=QUEUE)
    entry_id, fields = await worker.read()
    assert fields["execution_id"] == job.execution_id
    assert json.loads(fields["payload"]) == {"a": 2, "b": 3}
    assert (fields["attempt"], fields["origin"]) == ("1", "enqueue")
    payload = json.loads(fields["payload"])
    assert await worker.heartbeat(entry_id) == []  # still ours
    assert await worker.complete(entry_id, fields, {"sum": payload["a"] + payload["b"]}) == 1
    # Sent again (a lost reply): the entry is no longer pending, nothing is recorded twice.
    assert await worker.complete(entry_id, fields, {"sum": 5}) == 0
    info = await client.job(job.execution_id)
    assert info.state == "completed"
    assert info.result == {"sum": 5}
    assert info.worker == "raw-a"
    assert await redis.xlen(worker.stream) == 0  # acknowledged and deleted
    (record,) = await client.job_attempts(job.execution_id)
    assert (record.status, record.attempt) == ("completed", 1)


async def test_a_failing_job_is_retried_then_dead_lettered(
    redis: Redis, settings: Settings, workers: tuple[RawWorker, RawWorker]
) -> None:
    client = rsched.Client(redis, settings)
    worker, _ = workers
    job = await client.enqueue("t.fail", {"n": 1}, queue=QUEUE, max_retries=1)
    entry_id, fields = await worker.read()
    assert json.loads(fields["opts"]) == {"max_retries": 1}
    code, due_ms = await worker.retry(entry_id, fields, "boom 1")
    assert int(code) == 5  # OK, due now: back on the stream at once
    assert int(due_ms) > 0
    assert await worker.retry(entry_id, fields, "boom 1") == [-10]  # re-sent: NOT_PENDING
    entry_id, fields = await worker.read()
    assert (fields["execution_id"], fields["attempt"]) == (job.execution_id, "2")
    # Attempt 2 > max_retries 1: the last one, so its failure is a dead letter.
    code, dead_id = await worker.dead(entry_id, fields, "boom 2")
    assert int(code) == 5
    assert dead_id
    assert await worker.dead(entry_id, fields, "boom 2") == [-10]
    (letter,) = (await client.dead_letters(QUEUE)).items
    assert letter.entry_id == dead_id
    assert (letter.execution_id, letter.task, letter.reason) == (
        job.execution_id,
        "t.fail",
        "max_retries",
    )
    assert (letter.error_type, letter.error_message, letter.attempt) == ("ValueError", "boom 2", 2)
    assert letter.payload == {"n": 1}
    assert (await client.job(job.execution_id)).state == "dead"
    statuses = [r.status for r in await client.job_attempts(job.execution_id)]
    assert statuses == ["dead", "failed"]
    # The dead letter carries the job whole: requeue puts it back as attempt 1.
    assert await client.requeue(QUEUE, [dead_id]) == 1
    _, again = await worker.read()
    assert (again["execution_id"], again["attempt"], again["requeued"]) == (
        job.execution_id,
        "1",
        "1",
    )


async def test_an_abandoned_job_is_reclaimed_by_another_consumer(
    redis: Redis, settings: Settings, workers: tuple[RawWorker, RawWorker]
) -> None:
    client = rsched.Client(redis, settings)
    a, b = workers
    job = await client.enqueue("t.slow", queue=QUEUE)
    entry_id, _ = await a.read()  # a dies here: no heartbeat, no outcome
    assert await b.reclaim(min_idle_ms=3_600_000) == []  # not idle long enough yet
    (claimed,) = await eventually(lambda: b.reclaim(min_idle_ms=50), what="a reclaim")
    claimed_id, fields, deliveries = claimed
    assert (claimed_id, fields["execution_id"], deliveries) == (entry_id, job.execution_id, 2)
    assert await a.heartbeat(entry_id) == [entry_id]  # a, back, learns it lost the entry
    assert await b.heartbeat(entry_id) == []
    assert await b.complete(claimed_id, fields, None) == 1
    info = await client.job(job.execution_id)
    assert (info.state, info.worker, info.result) == ("completed", "raw-b", None)


async def test_a_schedule_job_is_started_and_ends_its_run(
    redis: Redis,
    settings: Settings,
    workers: tuple[RawWorker, RawWorker],
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = rsched.Client(redis, settings)
    worker, _ = workers
    assert main(["script", "start"]) == 0
    worker.shas["start"] = str(await redis.script_load(capsys.readouterr().out))
    await client.add({"id": "nightly", "task": "t.report", "every": "1h", "queue": QUEUE})
    fired = await client.trigger("nightly")
    entry_id, fields = await worker.read()
    assert (fields["execution_id"], fields["schedule_id"]) == (fired.execution_id, "nightly")
    assert (fields["origin"], fields["generation"]) == ("manual", "1")
    history = [f"{worker.tag}:history:nightly", f"{worker.tag}:schedule:nightly"]
    extra = ',"worker":"raw-a","deliveries":1'
    codes = await worker.eval(
        "start",
        [worker.stream, *history, f"{worker.tag}:runs"],
        [GROUP, HISTORY_CAP, worker.consumer, entry_id, fired.execution_id, 1, extra],
    )
    assert codes == [5]  # OK: run it
    # Pending under a consumer no registry lists: it reads as queued (a forced stop's, or a
    # dead worker's), until the worker registers.
    assert (await client.job(fired.execution_id)).state == "queued"
    for name in ("register", "unregister"):
        assert main(["script", name]) == 0
        worker.shas[name] = str(await redis.script_load(capsys.readouterr().out))
    registry = ["{" + settings.prefix + "}:workers", "{" + settings.prefix + "}:worker:raw-a"]
    record = {
        "id": "raw-a", "host": "h", "pid": 1, "queues": [QUEUE], "tasks": ["t.report"],
        "concurrency": 1, "started_ms": int(fields["fired_at"]), "heartbeat_s": 10,
        "running": 1,
        "jobs": [[fired.execution_id, QUEUE, "normal", entry_id, "t.report", 1,
                  int(fields["fired_at"])]],
    }  # fmt: skip
    code, _now = await worker.eval("register", registry, ["raw-a", json.dumps(record), 30_000,
                                                          3_600_000])  # fmt: skip
    assert int(code) == 5
    (live,) = await client.workers()
    assert (live.id, live.tasks, live.running) == ("raw-a", ("t.report",), 1)
    info = await client.job(fired.execution_id)
    assert (info.state, info.worker) == ("running", "raw-a")
    # The item names the schedule: its history, hash and pending set follow the stream.
    item = [entry_id, fired.execution_id, "nightly", 1, "completed", ',"duration_ms":12', 0,
            worker.run(fields, "completed")]  # fmt: skip
    keys = [worker.stream, *history, f"{worker.tag}:pending:nightly", f"{worker.tag}:runs",
            f"{worker.tag}:activity"]  # fmt: skip
    args = [GROUP, HISTORY_CAP, json.dumps([item]), RUNS_CAP, "", "1"]
    assert await worker.eval("complete", keys, args) == 1
    info = await client.job(fired.execution_id)
    assert (info.state, info.schedule_id) == ("completed", "nightly")
    completed, running, fired_event = (await client.history("nightly")).items
    assert [e.event for e in (completed, running, fired_event)] == ["completed", "running", "fired"]
    assert (completed.execution_id, completed.duration_ms) == (fired.execution_id, 12)
    assert running.extra == {"deliveries": 1}
    assert await worker.eval("unregister", registry, ["raw-a"]) == 5
    assert await client.workers() == []
