"""HTTP targets without a network: the target's rules, its place in a schedule and a schedules
file, Retry-After, and the SSRF guard's rule over many addresses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rsched import InvalidJob, InvalidSchedule, Schedule, ScheduleFileError
from rsched._client.schedules_file import load_file
from rsched._core.errors import InvalidArgument
from rsched._core.http_target import (
    HTTP_TASK,
    check_target,
    masked,
    refusal,
    request_body,
    retry_after_s,
    target_job,
)

URL = "https://example.com/hook"


def test_a_target_is_normalised_and_keeps_only_what_was_given() -> None:
    target = check_target(
        {"url": URL, "method": "patch", "headers": {"X-Key": "k"}, "body": {"a": 1}, "timeout_s": 3}
    )
    assert target == {
        "url": URL,
        "method": "PATCH",
        "headers": {"X-Key": "k"},
        "body": {"a": 1},
        "timeout_s": 3.0,
    }
    assert check_target({"url": URL}) == {"url": URL}
    assert check_target(f'{{"url": "{URL}"}}') == {"url": URL}  # JSON text, as stored


@pytest.mark.parametrize(
    ("target", "field", "words"),
    [
        ({"url": "ftp://example.com/x"}, "http.url", "http or https"),
        ({"url": "file:///etc/passwd"}, "http.url", "http or https"),
        ({"url": "https://"}, "http.url", "no host"),
        ({"url": "https://user:pw@example.com/"}, "http.url", "Authorization"),
        ({"url": "https://example.com:99999/"}, "http.url", "port"),
        ({"url": "https://example.com/a b"}, "http.url", "%20"),
        ({"url": 42}, "http.url", "text"),
        ({}, "http.url", "required"),
        ({"url": URL, "method": "FETCH"}, "http.method", "GET, HEAD, POST"),
        ({"url": URL, "headers": ["a"]}, "http.headers", "dict of text to text"),
        ({"url": URL, "headers": {"X-A": 1}}, "http.headers.X-A", "text"),
        ({"url": URL, "headers": {"X-A": "a\r\nB: c"}}, "http.headers.X-A", "line break"),
        ({"url": URL, "headers": {"bad name": "x"}}, "http.headers", "header name"),
        ({"url": URL, "headers": {"Host": "x"}}, "http.headers.Host", "set by rsched"),
        (
            {"url": URL, "headers": {"X-Rsched-Signature": "x"}},
            "http.headers.X-Rsched-Signature",
            "set by rsched",
        ),
        (
            {"url": URL, "headers": {"idempotency-key": "x"}},
            "http.headers.idempotency-key",
            "set by rsched",
        ),
        ({"url": URL, "body": 42}, "http.body", "dict or list"),
        ({"url": URL, "body": {"when": object()}}, "http.body", "JSON"),
        ({"url": URL, "method": "GET", "body": "x"}, "http.body", "sends no body"),
        ({"url": URL, "timeout_s": 0}, "http.timeout_s", "0.1 to 900"),
        ({"url": URL, "timeout_s": 901}, "http.timeout_s", "0.1 to 900"),
        ({"url": URL, "timeout_s": "10s"}, "http.timeout_s", "number"),
        ({"url": URL, "timeout_s": True}, "http.timeout_s", "number"),
        ({"url": URL, "secret": ""}, "http.secret", "1 to 512"),
        ({"url": URL, "follow_redirects": "yes"}, "http.follow_redirects", "true or false"),
        ({"url": URL, "retries": 3}, "http.retries", "unknown key"),
    ],
)
def test_a_bad_target_names_its_key_and_the_fix(target: Any, field: str, words: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_target(target)
    assert caught.value.field == field
    assert words in caught.value.message


def test_a_target_that_is_no_dict_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="must be a dict"):
        check_target(["https://example.com"])


def test_the_body_is_json_for_a_dict_or_list_and_sent_as_is_for_text() -> None:
    assert request_body({"url": URL, "body": {"a": [1]}}) == (b'{"a":[1]}', "application/json")
    assert request_body({"url": URL, "body": [1, 2]}) == (b"[1,2]", "application/json")
    assert request_body({"url": URL, "body": "a=1&b=2"}) == (b"a=1&b=2", None)
    assert request_body({"url": URL}) == (b"", None)


def test_a_job_to_enqueue_gives_a_task_or_a_target() -> None:
    assert target_job(None, None, {"url": URL}) == (HTTP_TASK, {"http": {"url": URL}})
    assert target_job("t", {"a": 1}, None) == ("t", {"a": 1})
    with pytest.raises(InvalidJob, match="give a task name, or http"):
        target_job(None, None, None)
    with pytest.raises(InvalidJob, match="not both"):
        target_job("t", None, {"url": URL})
    with pytest.raises(InvalidJob, match=r"http\.body, not payload"):
        target_job(None, {"a": 1}, {"url": URL})
    with pytest.raises(InvalidJob, match=r"http\.method"):
        target_job(None, None, {"url": URL, "method": "BREW"})
    # The built-in task named with its payload (rsched enqueue, the HTTP API): checked the same.
    assert target_job(HTTP_TASK, {"http": {"url": URL}}, None) == (
        HTTP_TASK,
        {"http": {"url": URL}},
    )
    with pytest.raises(InvalidJob, match=r"rsched\.http takes"):
        target_job(HTTP_TASK, {"url": URL}, None)
    with pytest.raises(InvalidJob, match=r"http\.url"):
        target_job(HTTP_TASK, {"http": {"url": "ftp://x"}}, None)


def test_a_schedule_of_a_target_runs_the_built_in_task_and_round_trips() -> None:
    spec = {"url": URL, "method": "POST", "body": {"a": 1}, "secret": "s"}
    s = Schedule(id="ping", cron="*/5 * * * *", http=spec)
    assert s.task == HTTP_TASK
    fields = s.spec_fields()
    assert fields["task"] == HTTP_TASK
    assert "http" not in fields  # stored as its job's payload
    back = Schedule.from_hash("ping", {**fields, "created_at": "0"})
    assert back.http == spec
    assert back.payload == {}


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"http": {"url": "gopher://x"}}, "http.url", "http or https"),
        ({"http": {"url": URL, "headers": {"A": 1}}}, "http.headers.A", "text"),
        ({"http": {"url": URL}, "task": "mine"}, "", "give task or http, not both"),
        ({"http": {"url": URL}, "payload": {"a": 1}}, "", "http.body, not payload"),
        ({"task": HTTP_TASK}, "", "give http (the URL and its options) instead"),
        ({"task": HTTP_TASK, "payload": {"http": {"url": URL}}}, "", "give http"),
    ],
)
def test_a_schedule_names_its_targets_bad_key(
    extra: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        Schedule(id="ping", every="1h", **extra)
    assert any(f == field and words in message for f, message in caught.value.errors), (
        caught.value.errors
    )


FILE = """
[[schedule]]
id = "ping-partner"
cron = "*/5 * * * *"

[schedule.http]
url = "https://partner.example.com/hook"
method = "post"
timeout_s = 5
body = { source = "rsched", kind = "tick" }
headers = { Authorization = "Bearer abc" }
"""


def test_a_schedules_file_declares_a_target_in_a_table(tmp_path: Path) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(FILE)
    _, (s,) = load_file(path)
    assert s.task == HTTP_TASK
    assert s.http == {
        "url": "https://partner.example.com/hook",
        "method": "POST",
        "timeout_s": 5.0,
        "body": {"source": "rsched", "kind": "tick"},
        "headers": {"Authorization": "Bearer abc"},
    }
    path.write_text(FILE.replace("https://partner", "ftp://partner"))
    with pytest.raises(
        ScheduleFileError, match=r"schedule\[0\].*http\.url: scheme must be http or https"
    ):
        load_file(path)


def test_a_target_counts_towards_the_payload_limit() -> None:
    spec = {"id": "ping", "every": "1h", "http": {"url": URL, "body": "x" * 2_000}}
    with pytest.raises(InvalidSchedule, match="over the 1000-byte limit"):
        Schedule.parse(spec, max_payload_bytes=1_000)


def test_the_secret_is_masked_for_display() -> None:
    assert masked({"url": URL, "secret": "s"}) == {"url": URL, "secret": "***"}
    assert masked({"url": URL}) == {"url": URL}


def test_retry_after_takes_seconds_or_an_http_date() -> None:
    now = 1_700_000_000.0
    assert retry_after_s("120", now) == 120.0
    assert retry_after_s(" 0 ", now) == 0.0
    assert retry_after_s("Tue, 14 Nov 2023 22:15:20 GMT", now) == pytest.approx(120.0)
    assert retry_after_s("Tue, 14 Nov 2023 22:00:00 GMT", now) == 0.0  # in the past
    for unreadable in (None, "", "soon", "-5", "1.5", "Tue, 14 Nov 2023 25:99:00"):
        assert retry_after_s(unreadable, now) is None


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),  # broadcast
        ("100.64.0.1", "not a public"),  # shared address space (carrier-grade NAT)
        ("192.0.2.1", "private"),  # documentation
        ("198.18.0.1", "private"),  # benchmarking
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.1.2.3", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a00:1::", "private"),  # 6to4 of 10.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("64:ff9b::7f00:1", "loopback"),
        ("2001:db8::1", "private"),  # documentation
        ("not-an-ip", "not an IP address"),
    ],
)
def test_the_guard_refuses_what_is_not_public(address: str, kind: str) -> None:
    why = refusal(address)
    assert why is not None
    assert kind in why, why


@pytest.mark.parametrize(
    "address",
    [
        "93.184.215.14",
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "2002:808:808::",
    ],
)
def test_the_guard_allows_public_addresses(address: str) -> None:
    assert refusal(address) is None


def test_a_worker_without_http_never_imports_httpx() -> None:
    code = (
        "import sys, rsched, rsched._cli.worker_process\n"
        "assert 'httpx' not in sys.modules and 'httpcore' not in sys.modules, 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
