"""The ``rsched`` commands on flow-control limits: ``limits``, ``limit set|clear``, ``--limit`` on
enqueue and on a schedule's spec, and a job waiting on a key as ``rsched job`` shows it."""

from __future__ import annotations

import orjson
import pytest

from rsched import Settings
from rsched._cli.main import main
from tests.support.command import Cli, as_json
from tests.support.waiting import eventually_blocking
from tests.support.workers import worker_thread


def fields_of(text: str) -> dict[str, str]:
    """The ``name:  value`` lines of a command's output."""
    pairs = (line.partition(":") for line in text.splitlines() if ":" in line)
    return {name.strip(): value.strip() for name, _, value in pairs}


def test_set_list_and_clear_overrides(cli: Cli) -> None:
    assert cli("limits") == (0, "no limit key in use and no override\n", "")
    code, out, err = cli("limit", "set", "crm", "--rate", "100/m")
    assert code == 0, err
    assert out.strip() == (
        "set limit key 'crm': rate 100/m; the other number stays as declared; no key it "
        "concerns has waiting jobs"
    )
    code, out, err = cli("limit", "set", "customer:*", "--concurrency", "0", "--rate", "10/30s")
    assert code == 0, err
    assert out.startswith("set limit keys matching 'customer:*': concurrency 0 (paused), rate")

    code, out, _ = cli("limits")
    header, *rows, note = out.strip().splitlines()
    assert header.split() == [
        "KEY", "CONCURRENCY", "RATE", "HOLDERS", "WAITING", "STARTS", "OVERRIDE",
    ]  # fmt: skip
    assert [r.split()[0] for r in rows] == ["crm", "customer:*"]
    assert rows[0].split()[1:] == ["-", "100/m", "0", "0", "0", "rate", "100/m"]
    assert "0 (paused)" in rows[1]
    assert "concurrency 0 (paused), rate 10/30s" in rows[1]
    assert note.startswith("the numbers in force")

    listed = as_json(cli("limits", "--json"))
    assert [r["key"] for r in listed] == ["crm", "customer:*"]
    assert listed[0] == {
        "key": "crm",
        "template": "",
        "concurrency": None,
        "rate": "100/m",
        "holders": 0,
        "waiting": 0,
        "starts": 0,
        "override": {"r": [100, 60_000]},
    }
    assert [r["key"] for r in as_json(cli("--json", "limits", "--match", "cust*"))] == [
        "customer:*"
    ]
    assert cli("limits", "--match", "nothing*")[1].strip() == (
        "no limit key in use and no override matching 'nothing*'"
    )

    data = as_json(cli("--json", "limit", "set", "crm", "--concurrency", "2"))
    assert data == {"key": "crm", "concurrency": 2, "rate": None, "waiting_keys": 0}
    code, out, _ = cli("limit", "clear", "customer:*")
    assert code == 0
    assert out.startswith("cleared limit keys matching 'customer:*': the declared numbers hold")
    assert as_json(cli("limit", "clear", "crm", "--json")) == {
        "key": "crm",
        "cleared": True,
        "waiting_keys": 0,
    }
    assert as_json(cli("limits", "--json")) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["crm"], "give --concurrency N (0 pauses the key), --rate 100/m or both"),
        (["crm", "--concurrency", "-1"], "--concurrency: concurrency is a whole number from 0"),
        (["crm", "--rate", "fast"], "--rate: 'fast' is not a rate; give it as count/period"),
        (["crm", "--rate", "0/m"], "--rate: a rate allows 1 to 100,000 starts a period"),
        (["crm", "--concurrency", "x"], "--concurrency: 'x' is not a whole number"),
        (["a{b", "--concurrency", "1"], "KEY: limit key 'a{b' holds '{'"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_flag(
    cli: Cli, args: list[str], message: str
) -> None:
    code, out, err = cli("limit", "set", *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"rsched: error: {message}"), err
    assert err.count("\n") == 1, err
    assert "(see rsched limit set --help)" in err
    code, _, err = cli("--json", "limit", "set", *args)
    assert code == 2
    doc = orjson.loads(err)
    assert (doc["error"], doc["message"].startswith(message)) == ("UsageError", True)
    assert as_json(cli("limits", "--json")) == []  # nothing was written


def test_limit_alone_shows_its_actions(cli: Cli) -> None:
    code, _, err = cli("limit")
    assert code == 2
    assert "set" in err
    assert "clear" in err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("crm", "--limit: 'crm' caps nothing; give KEY,concurrency=N and/or KEY,rate="),
        ("crm,rate=fast", "--limit: 'fast' is not a rate"),
        ("crm,concurrency=x", "--limit: concurrency='x' is not a whole number"),
        ("crm,concurrency=0", "--limit: concurrency is a whole number from 1"),
        ("crm,rate=1/s,rate=2/s", "--limit: rate given twice in 'crm,rate=1/s,rate=2/s'"),
        ("a*,concurrency=1", "--limit: limit key 'a*' holds '*'"),
    ],
)
def test_a_bad_limit_is_refused_while_parsing(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    offline = ["--redis-url", "redis://127.0.0.1:1/0"]  # nothing listens: no Redis is reached
    for command in (["enqueue", "t"], ["add", "s", "--task", "t", "--every", "1h"]):
        assert main([*offline, *command, "--limit", value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rsched: error: {message}"), err
        assert err.count("\n") == 1, err


def test_enqueue_with_limits_and_a_job_waiting_on_its_key(cli: Cli, settings: Settings) -> None:
    code, _, err = cli("enqueue", "t", "--limit", "customer:{customer_id},concurrency=1")
    assert code == 1
    assert (
        "--limit: limit key 'customer:{customer_id}' needs the payload field 'customer_id'" in err
    )
    # The holding job keeps its hold however slowly the machine runs (a hold lapses after the
    # visibility timeout without a heartbeat, and the waiting job would start).
    with worker_thread(settings, concurrency=2, visibility_timeout_s=30):
        for job_id in ("first", "second"):
            code, out, err = cli(
                "enqueue", "web.wait", "--id", job_id, "--payload", '{"s": 30, "c": 7}',
                "--limit", "c:{c},concurrency=1", "--limit", "crm,rate=100/m",
            )  # fmt: skip
            assert (code, out.strip()) == (0, f"{job_id} enqueued on queue default"), err

        def waiting() -> bool:
            code, out, _ = cli("--json", "job", "second")
            return code == 0 and orjson.loads(out)["state"] == "waiting"

        eventually_blocking(waiting, what="the second job to wait on its key")
        info = as_json(cli("--json", "job", "second"))
        assert (info["limit"], info["task"], info["payload"]) == (
            "c:7",
            "web.wait",
            {"s": 30, "c": 7},
        )
        code, out, _ = cli("job", "second")
        assert code == 0
        lines = fields_of(out)
        assert (lines["state"], lines["limit"]) == ("waiting", "c:7")
        assert "waits on limit key 'c:7'" in lines["waiting"]

        rows = {r["key"]: r for r in as_json(cli("--json", "limits"))}
        assert (rows["c:7"]["holders"], rows["c:7"]["waiting"]) == (1, 1)
        assert (rows["c:7"]["concurrency"], rows["c:7"]["template"]) == (1, "c:{c}")
        assert (rows["crm"]["rate"], rows["crm"]["starts"]) == ("100/m", 1)
        table = cli("limits", "--match", "c:*")[1]
        assert "c:7" in table
        assert "crm" not in table

        code, out, _ = cli("limit", "set", "c:7", "--concurrency", "2")
        assert "the waiting jobs of 1 key(s) are looked at again" in out

        def both_run() -> bool:
            rows = {r["key"]: r for r in as_json(cli("--json", "limits"))}
            return (rows["c:7"]["holders"], rows["c:7"]["waiting"]) == (2, 0)

        eventually_blocking(both_run, what="the raised concurrency to start the second job")
        assert as_json(cli("--json", "job", "second"))["state"] == "running"
        for job_id in ("first", "second"):
            assert cli("cancel", job_id)[0] == 0


def test_a_schedules_limits_from_the_command_line(cli: Cli) -> None:
    code, _, err = cli(
        "add", "s", "--task", "t", "--every", "1h", "--payload", '{"c": 3}',
        "--limit", "c:{c},concurrency=1", "--limit", "crm,rate=100/m",
    )  # fmt: skip
    assert code == 0, err
    code, out, _ = cli("show", "s")
    shown = fields_of(out.split("\n\n")[0])
    assert shown["limits"] == "c:{c},concurrency=1 crm,rate=100/m"
    spec = as_json(cli("show", "s", "--json"))["schedule"]
    assert spec["limits"] == [
        {"key": "c:{c}", "concurrency": 1, "rate": None},
        {"key": "crm", "concurrency": None, "rate": "100/m"},
    ]
    code, out, _ = cli("update", "s", "--limit", "crm,rate=10/s")
    assert "limits c:{c},concurrency=1 crm,rate=100/m -> crm,rate=10/s" in out
    code, out, _ = cli("update", "s", "--clear", "limit")
    assert "limits crm,rate=10/s -> -" in out
    assert as_json(cli("show", "s", "--json"))["schedule"]["limits"] == []
    code, _, err = cli("add", "bad", "--task", "t", "--every", "1h", "--limit", "c:{c},rate=1/s")
    assert code == 1
    assert "--limit: limit key 'c:{c}' needs the payload field 'c'" in err
    assert cli("show", "bad")[0] == 1


def test_limit_waiting_lists_a_keys_jobs_in_the_order_they_will_start(
    cli: Cli, settings: Settings
) -> None:
    limit = ["--limit", "c:{c},concurrency=1"]
    code, out, _ = cli("limit", "waiting", "c:7")
    assert (code, out.splitlines()) == (
        0,
        [
            "limit key 'c:7': no cap in force; 0 holding it, 0 waiting",
            "no job waits on limit key 'c:7'",
        ],
    )
    assert as_json(cli("--json", "limit", "waiting", "c:7")) == []
    with worker_thread(settings, concurrency=4, visibility_timeout_s=30):  # as above
        assert cli("enqueue", "web.wait", "--id", "first", "--payload", '{"c": 7}', *limit)[0] == 0

        def is_(job_id: str, state: str) -> bool:
            code, out, _ = cli("--json", "job", job_id)
            return code == 0 and orjson.loads(out)["state"] == state

        eventually_blocking(lambda: is_("first", "running"), what="the first job to hold its key")
        # Enqueued low, normal, high, normal: they start high first, then by arrival.
        for job_id, priority in (
            ("low", "low"),
            ("n1", "normal"),
            ("high", "high"),
            ("n2", "normal"),
        ):
            code, _, err = cli(
                "enqueue", "web.wait", "--id", job_id, "--payload", '{"c": 7}', *limit,
                "--priority", priority,
            )  # fmt: skip
            assert code == 0, err
            eventually_blocking(lambda j=job_id: is_(j, "waiting"), what=f"{job_id} to wait")

        code, out, err = cli("limit", "waiting", "c:7")
        assert code == 0, err
        head, header, *rows, note = out.strip().splitlines()
        assert head == "limit key 'c:7': concurrency 1; 1 holding it, 4 waiting"
        assert header.split() == ["EXECUTION", "TASK", "QUEUE", "LEVEL", "ATTEMPT", "SINCE"]
        assert [r.split()[:5] for r in rows] == [
            [job_id, "web.wait", "default", level, "1"]
            for job_id, level in (
                ("high", "high"),
                ("n1", "normal"),
                ("n2", "normal"),
                ("low", "low"),
            )
        ]
        assert note.startswith("in the order they will start (by level: high, normal, low;")

        listed = as_json(cli("--json", "limit", "waiting", "c:7", "-n", "2"))
        assert [(j["execution_id"], j["state"], j["limit"]) for j in listed] == [
            ("high", "waiting", "c:7"),
            ("n1", "waiting", "c:7"),
        ]
        assert listed[0]["payload"] == {"c": 7}
        assert listed[0]["priority"] == "high"
        code, out, _ = cli("limit", "waiting", "c:7", "--limit", "1")
        assert out.strip().splitlines()[-1].startswith("the first 1 of 4, in the order they will")
        for job_id in ("first", "low", "n1", "high", "n2"):
            assert cli("cancel", job_id)[0] == 0
        assert as_json(cli("--json", "limit", "waiting", "c:7")) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a{b"], "KEY: limit key 'a{b' holds '{'"),
        (["customer:*"], "KEY: limit key 'customer:*' holds '*'"),
        (["crm", "-n", "0"], "-n/--limit: give 1-10000 (a whole number), got 0"),
        (["crm", "--limit", "x"], "-n/--limit: 'x' is not a whole number"),
    ],
)
def test_limit_waiting_a_bad_key_or_count_is_a_usage_error(
    cli: Cli, args: list[str], message: str
) -> None:
    code, out, err = cli("limit", "waiting", *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"rsched: error: {message}"), err
    assert err.count("\n") == 1, err
    assert "(see rsched limit waiting --help)" in err
    code, _, err = cli("--json", "limit", "waiting", *args)
    assert code == 2
    assert orjson.loads(err)["message"].startswith(message)
