"""HTTP targets delivered by a worker started with --http, against a local server with faults:
retries on 5xx, 429 and timeouts, Retry-After, no retry on 404, signatures, results, the SSRF
guard, schedules and the --http-only worker process."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.http_target import target_job
from rsched._core.settings import HttpSettings, Settings
from tests.support.http_targets import Answer, TargetServer, closed_port, serving
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_env, fast_settings
from tests.support.workers import running, store_for

SECRET = "s3cret"
FAST_RETRIES: dict[str, Any] = {"max_retries": 2}


@pytest.fixture
def target() -> Iterator[TargetServer]:
    yield from serving()


def http_worker(settings: Settings, **http: Any) -> rsched.Worker:
    """A worker of HTTP targets alone; loopback allowed (the test server is on 127.0.0.1)."""
    cfg = HttpSettings(**{"allow_private": True, **http})
    return rsched.Worker(
        settings=fast_settings(settings).model_copy(update={"http": cfg}), http=True
    )


async def ended(client: rsched.Client, execution_id: str) -> rsched.JobInfo | None:
    try:
        info = await client.job(execution_id)
    except rsched.JobNotFound:
        return None
    return info if info.state in ("completed", "dead") else None


async def dead_letter(client: rsched.Client, execution_id: str) -> rsched.DeadLetter | None:
    page = await client.dead_letters()
    return next((d for d in page.items if d.execution_id == execution_id), None)


async def enqueue(redis: Redis, settings: Settings, http: dict[str, Any], **options: Any) -> str:
    """Enqueue a call with a tiny backoff (Client.enqueue takes the default, 30 s): a retry
    follows at once unless a Retry-After asks for more."""
    task, payload = target_job(None, None, http)
    store = store_for(redis, settings)
    done = await store.enqueue(task, payload, retry_base_s=0.05, retry_max_s=0.1, **options)
    return done.execution_id


async def test_a_call_is_signed_keyed_by_its_execution_id_and_its_answer_kept(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    target.script["/hook"] = [
        Answer(
            200, b'{"received": true}', {"Content-Type": "application/json", "X-Request-Id": "r1"}
        )
    ]
    http = {
        "url": target.url("/hook"),
        "method": "PUT",
        "headers": {"Authorization": "Bearer t"},
        "body": {"invoice": 42},
        "secret": SECRET,
    }
    eid = (await client.enqueue(http=http)).execution_id
    async with running(http_worker(settings), redis):
        info = await eventually(lambda: ended(client, eid))
    assert info.state == "completed"
    (call,) = target.calls_to("/hook")
    assert call.method == "PUT"
    assert call.body == b'{"invoice":42}'
    headers = {k.lower(): v for k, v in call.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["authorization"] == "Bearer t"
    assert headers["idempotency-key"] == eid
    assert headers["x-rsched-attempt"] == "1"
    assert headers["user-agent"].startswith("rsched/")
    # The receiver's check, as docs/http-targets.md shows it.
    signed = headers["x-rsched-timestamp"].encode() + b"." + call.body
    expected = "sha256=" + hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["x-rsched-signature"], expected)
    result = await client.result(eid)
    assert result["status"] == 200
    assert result["body"] == '{"received": true}'
    assert result["headers"] == {"content-type": "application/json", "x-request-id": "r1"}
    assert result["elapsed_ms"] >= 0
    assert "truncated" not in result


async def test_the_deployment_secret_signs_a_target_without_one(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    eid = await enqueue(redis, settings, {"url": target.url("/plain"), "body": "text as is"})
    async with running(http_worker(settings, secret="deploy"), redis):
        await eventually(lambda: ended(client, eid))
    (call,) = target.calls_to("/plain")
    assert call.body == b"text as is"
    assert "Content-Type" not in call.headers  # text goes with the target's own type, if any
    signed = call.headers["X-Rsched-Timestamp"].encode() + b"." + call.body
    expected = "sha256=" + hmac.new(b"deploy", signed, hashlib.sha256).hexdigest()
    assert call.headers["X-Rsched-Signature"] == expected


async def test_a_5xx_is_retried_and_the_next_attempt_carries_its_number(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    target.script["/flaky"] = [Answer(500, b"database down")]
    eid = await enqueue(redis, settings, {"url": target.url("/flaky")}, **FAST_RETRIES)
    async with running(http_worker(settings), redis):
        info = await eventually(lambda: ended(client, eid))
    assert info.state == "completed"
    calls = target.calls_to("/flaky")
    assert [c.headers["X-Rsched-Attempt"] for c in calls] == ["1", "2"]
    assert {c.headers["Idempotency-Key"] for c in calls} == {eid}
    runs = (await client.runs(task="rsched.http")).items
    failed = next(r for r in runs if r.status == "failed")
    assert "HTTP 500" in (failed.error or "")
    assert "database down" in (failed.error or "")


async def test_a_429s_retry_after_delays_the_next_attempt(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    target.script["/busy"] = [Answer(429, b"slow down", {"Retry-After": "2"})]
    eid = await enqueue(redis, settings, {"url": target.url("/busy")}, **FAST_RETRIES)
    async with running(http_worker(settings), redis):
        info = await eventually(lambda: ended(client, eid))
    assert info.state == "completed"
    first, second = target.calls_to("/busy")
    # The job's own backoff is 0.1 s at most here; Retry-After asked for 2.
    assert second.at - first.at >= 1.9


async def test_a_503s_retry_after_still_ends_dead_after_max_retries(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    target.script["/down"] = [Answer(503, b"", {"Retry-After": "0"})] * 3
    eid = await enqueue(redis, settings, {"url": target.url("/down")}, max_retries=1)
    async with running(http_worker(settings), redis):
        letter = await eventually(lambda: dead_letter(client, eid))
    assert letter.reason == "max_retries"
    assert letter.error_type == "HttpTargetError"
    assert "HTTP 503" in letter.error_message
    assert len(target.calls_to("/down")) == 2


async def test_a_404_is_not_retried(redis: Redis, settings: Settings, target: TargetServer) -> None:
    client = rsched.Client(redis, settings)
    target.script["/gone"] = [Answer(404, b"<html>no such hook</html>")]
    eid = await enqueue(redis, settings, {"url": target.url("/gone")}, max_retries=5)
    async with running(http_worker(settings), redis):
        letter = await eventually(lambda: dead_letter(client, eid))
    assert letter.reason == "not_retryable"
    assert letter.attempt == 1
    assert "HTTP 404 Not Found" in letter.error_message
    assert "no such hook" in letter.error_message
    assert len(target.calls_to("/gone")) == 1


async def test_a_redirect_is_not_followed_unless_asked(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    moved = Answer(301, b"", {"Location": target.url("/new")})
    target.script["/old"] = [moved, moved]
    eid = await enqueue(redis, settings, {"url": target.url("/old")})
    followed = await enqueue(redis, settings, {"url": target.url("/old"), "follow_redirects": True})
    async with running(http_worker(settings), redis):
        letter = await eventually(lambda: dead_letter(client, eid))
        info = await eventually(lambda: ended(client, followed))
    assert letter.reason == "not_retryable"
    assert "not followed" in letter.error_message
    assert info.state == "completed"
    assert len(target.calls_to("/new")) == 1


async def test_a_call_past_its_timeout_is_retried_then_dead(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    target.script["/slow"] = [Answer(delay_s=3.0)] * 2
    eid = await enqueue(
        redis, settings, {"url": target.url("/slow"), "timeout_s": 0.3}, max_retries=1
    )
    async with running(http_worker(settings), redis):
        letter = await eventually(lambda: dead_letter(client, eid))
    assert letter.reason == "max_retries"
    assert "no answer within 0.3s" in letter.error_message
    assert len(target.calls_to("/slow")) == 2


async def test_a_refused_connection_is_retried_then_dead(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    url = f"http://127.0.0.1:{closed_port()}/x"
    eid = await enqueue(redis, settings, {"url": url}, max_retries=1)
    async with running(http_worker(settings), redis):
        letter = await eventually(lambda: dead_letter(client, eid))
    assert letter.reason == "max_retries"
    assert "ConnectError" in letter.error_message
    assert letter.attempt == 2


async def test_a_big_answer_is_cut_to_4_kib(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    target.script["/big"] = [Answer(body=b"x" * 100_000)]
    eid = await enqueue(redis, settings, {"url": target.url("/big"), "method": "GET"})
    async with running(http_worker(settings), redis):
        await eventually(lambda: ended(client, eid))
    result = await client.result(eid)
    assert result["body"] == "x" * 4096
    assert result["truncated"] is True


async def test_the_ssrf_guard_refuses_loopback_without_retry(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    eid = await enqueue(redis, settings, {"url": target.url("/inside")}, max_retries=3)
    localhost = await enqueue(
        redis, settings, {"url": target.url("/inside").replace("127.0.0.1", "localhost")}
    )
    async with running(http_worker(settings, allow_private=False), redis):
        letter = await eventually(lambda: dead_letter(client, eid))
        by_name = await eventually(lambda: dead_letter(client, localhost))
    assert letter.reason == "not_retryable"
    assert "127.0.0.1 is a loopback address" in letter.error_message
    assert "RSCHED_HTTP__ALLOW_PRIVATE=true" in letter.error_message
    assert "loopback" in by_name.error_message
    assert target.calls_to("/inside") == []


async def test_a_schedule_calls_its_target_and_keeps_its_history(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    spec = {"url": target.url("/tick"), "method": "POST", "body": [1, 2], "timeout_s": 5}
    await client.add(rsched.Schedule(id="ping", every="1d", http=spec))
    stored = await client.get("ping")
    assert stored.task == "rsched.http"
    assert stored.http == spec
    fired = await client.trigger("ping")
    async with running(http_worker(settings), redis):
        info = await eventually(lambda: ended(client, fired.execution_id))
    assert info.state == "completed"
    (call,) = target.calls_to("/tick")
    assert call.headers["X-Rsched-Schedule-Id"] == "ping"
    assert call.headers["Idempotency-Key"] == fired.execution_id
    assert call.body == b"[1,2]"


async def test_a_worker_without_http_leaves_the_calls_to_one_with_it(
    redis: Redis, settings: Settings, target: TargetServer
) -> None:
    client = rsched.Client(redis, settings)
    plain = rsched.Worker(settings=fast_settings(settings, unknown_task_grace_s=60))

    @plain.task("noop")
    async def noop(job: rsched.Job) -> None:
        return None

    eid = await enqueue(redis, settings, {"url": target.url("/either")})
    async with running(plain, redis), running(http_worker(settings), redis):
        info = await eventually(lambda: ended(client, eid))
    assert info.state == "completed"


def test_the_sync_client_enqueues_a_call(redis_url: str, prefix: str) -> None:
    with rsched.SyncClient(redis_url, prefix=prefix) as client:
        done = client.enqueue(http={"url": "https://example.com/hook"})
        info = client.job(done.execution_id)
    assert info.task == "rsched.http"
    assert info.state == "queued"


@pytest.mark.slow
def test_an_http_only_worker_process_delivers_a_scheduled_call(
    spawn: Any, settings: Settings, target: TargetServer
) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as client:
        client.add(rsched.Schedule(id="hook", every="1d", http={"url": target.url("/proc")}))
        proc: Proc = spawn(
            "rsched._cli.worker_process",
            "--http-only",
            env=fast_env(settings, RSCHED_HTTP__ALLOW_PRIVATE="true"),
        )
        proc.wait_for("event=worker.start")
        fired = client.trigger("hook")
        from tests.support.waiting import eventually_blocking

        call = eventually_blocking(lambda: target.calls_to("/proc"), what="the call")
        assert call[0].headers["Idempotency-Key"] == fired.execution_id
